// What a group key's throttle costs the claim (docs/flow-control.md, "Provider
// back-pressure", "Per group key"): the drain of one task type whose tasks carry group keys
// (claims of 10, each task completed) with no throttle at all, against the same with a
// throttle in force on a group key none of them carries (acme), in alternating blocks on
// one connection so that the machine's load falls on both alike. Not part of the
// benchmark; evidence for the report.
// Usage: node tools/bench/probes/group-throttle-claim.mjs [blocks] [claims per block]
import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';
import { claimTasks, completeTasks, enqueueMany } from '@org/queue-client';

const BLOCKS = Number(process.argv[2] ?? 10);
const CLAIMS = Number(process.argv[3] ?? 200);
const LIMIT = 10;
const server = await openServer({ name: `bench-probe-${process.pid}` });
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true });
  const owner = new pg.Pool({ connectionString: urls.owner, max: 2 });
  await owner.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
  const app = new pg.Pool({ connectionString: urls.app, max: 4 });
  const N = BLOCKS * 2 * CLAIMS * LIMIT;
  for (let s = 0; s < N; s += 1000)
    await enqueueMany(
      app,
      Array.from({ length: Math.min(1000, N - s) }, (_, i) => ({
        taskType: 'bench',
        payload: { n: s + i },
        groupKey: `tenant-${(s + i) % 50}`,
      })),
    );
  await owner.query('vacuum analyze');
  const w = new pg.Pool({ connectionString: urls.worker, max: 1 });
  const opts = { workerId: 'probe', limit: LIMIT, taskTypes: null, leaseSeconds: 300, maxLeases: 5 };
  const block = async () => {
    const t = performance.now();
    for (let i = 0; i < CLAIMS; i++) {
      const tasks = await claimTasks(w, opts);
      await completeTasks(
        w,
        tasks.map((task) => ({ taskId: task.taskId, taskLeaseId: task.taskLeaseId, outcome: 'succeeded' })),
      );
    }
    return ((performance.now() - t) * 1000) / (CLAIMS * LIMIT); // µs per task
  };
  const none = [];
  const throttled = [];
  await block(); // warm-up: plans made
  for (let b = 0; b < BLOCKS - 1; b++) {
    none.push(await block());
    await w.query(`select * from queues.record_throttle('group', 'acme', null, 3600, 'probe: HTTP 429', 'probe')`);
    throttled.push(await block());
    await owner.query(`select queues.clear_throttle('group', 'acme', 'probe')`);
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`blocks of ${CLAIMS} claims of ${LIMIT}, claim + completion per task (µs per task):`);
  console.log(
    `  no throttle:                  median ${median(none).toFixed(1)}  [${none.map((x) => x.toFixed(0)).join(', ')}]`,
  );
  console.log(
    `  a throttle in force on acme:  median ${median(throttled).toFixed(1)}  [${throttled.map((x) => x.toFixed(0)).join(', ')}]`,
  );
  await Promise.all([owner.end(), app.end(), w.end()]);
} finally {
  await server.stop({ destroy: true });
}
