// Lock waits between heartbeats and completions during a drain: the real Worker (a no-op
// processor) drains a backlog with a heartbeat every HEARTBEAT_MS (default 100 ms, so that
// many heartbeats meet completion batches in flight), while a superuser connection samples
// pg_locks every 10 ms for the worker's backends waiting on a lock. Prints the rate and, per
// statement kind, the samples that found one waiting and the longest wait seen.
//   node tools/bench/probes/heartbeat-waits.mjs [tasks=40000] [concurrency=10] [prefetch=500]
import { openServer } from '@org/db-tools';
import { enqueueBacklog, noopWorker, probeDatabase } from './drain-fixture.mjs';

const TASKS = Number(process.argv[2] ?? 40000);
const CONCURRENCY = Number(process.argv[3] ?? 10);
const PREFETCH = Number(process.argv[4] ?? 500);
const HEARTBEAT_MS = Number(process.env.HEARTBEAT_MS ?? 100);
const server = await openServer({ name: `bench-heartbeat-${process.pid}` });
try {
  const { urls, root } = await probeDatabase(server);
  await enqueueBacklog(urls, root, TASKS);
  const { worker, allDone } = noopWorker(urls, {
    tasks: TASKS,
    concurrency: CONCURRENCY,
    prefetch: PREFETCH,
    heartbeatIntervalMs: HEARTBEAT_MS,
  });
  const waits = new Map(); // kind -> { samples, longestMs }
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const { rows } = await root.query(`
        select a.query, extract(epoch from clock_timestamp() - l.waitstart) * 1000 as ms
          from pg_locks l join pg_stat_activity a using (pid)
         where not l.granted and l.waitstart is not null and a.application_name like 'queue-worker%'`);
      for (const r of rows) {
        const kind = /extend_leases/.test(r.query)
          ? 'heartbeat'
          : /settle_tasks|complete_tasks/.test(r.query)
            ? 'completion'
            : /claim_tasks/.test(r.query)
              ? 'claim'
              : 'other';
        const w = waits.get(kind) ?? { samples: 0, longestMs: 0 };
        w.samples++;
        w.longestMs = Math.max(w.longestMs, Number(r.ms));
        waits.set(kind, w);
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  const t = performance.now();
  await worker.start();
  await allDone;
  const seconds = (performance.now() - t) / 1000;
  await worker.stop();
  sampling = false;
  await sampler;
  console.log(`drain ${TASKS} tasks, heartbeat every ${HEARTBEAT_MS} ms: ${Math.round(TASKS / seconds)} tasks/s`);
  const { rows } = await root.query(`select count(*)::int as n from queues.task_lease_extension`);
  console.log(`lease extensions recorded: ${rows[0].n}`);
  for (const kind of ['completion', 'heartbeat', 'claim', 'other']) {
    const w = waits.get(kind) ?? { samples: 0, longestMs: 0 };
    console.log(`${kind}: ${w.samples} samples waiting on a lock, longest ${w.longestMs.toFixed(1)} ms`);
  }
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
