// Drains a backlog with the real Worker (README defaults, a no-op processor) in this
// process, and prints the rate and the SQL per task (pg_stat_statements). Run it under
// `node --cpu-prof --cpu-prof-dir=/tmp/prof` to see the worker's CPU per task.
//   node tools/bench/probes/worker-drain.mjs [tasks=20000] [concurrency=10] [prefetch=500]
// HISTORY=<n> first writes n completed tasks into the history partitions (as workload 12
// does), to see what a history and its number of partition sets cost per statement.
// WORKERS=<n> drains with n worker processes (this one and n − 1 children, as workload 3b
// runs two), and adds the CPU of all of them and how idle the machine was. It also prints
// what the drain wrote: heap rows (inserts + updates + deletes, pg_stat_user_tables) and
// WAL bytes per task, per table, counted from after the backlog was enqueued.
// BACKLOG=rows enqueues the backlog as claim-index rows (each task scheduled a second ago)
// instead of ready batches. VARIANT=<file.sql> runs that SQL as the database owner's superuser first (a function's
// older or newer version, to alternate two); TOP=<n> lists the n dearest statements (12).
// LIMIT_OTHER=<mode> configures a flow limit on another task type, bench_other
// (docs/flow-control.md): `unclaimed` (the workers do not claim that type: every claim
// reads the limits and finds none for its types), `idle` (the workers claim it too, and it
// has no task: each claim probes it for ready work and leaves it), `busy` (the workers
// claim it too, and 100,000 of its tasks wait over 100 group keys under its limits: each
// claim takes its lock, counts its live leases and windows, and starts what they allow).
// The drain's rate and rows count the bench tasks only. PERF_WINDOW=1 prints the drain's
// start and end on CLOCK_MONOTONIC, for `perf record -k CLOCK_MONOTONIC` and then
// `perf report --time <start>,<end>` (seconds).
import { fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { openStatementsServer } from './statements-server.mjs';
import {
  enqueueBacklog,
  machineCpuMicros,
  noopWorker,
  postgresCpuMicros,
  probeDatabase,
  writtenPerTask,
  writtenSoFar,
} from './drain-fixture.mjs';
import { fillHistory } from '../dist/history-scale.js';

// A child: one more worker on the same database until told to stop; answers with its CPU.
if (process.env.DRAIN_CHILD) {
  const { urls, concurrency, prefetch, workerId, otherTypes } = JSON.parse(process.env.DRAIN_CHILD);
  const { worker } = noopWorker(urls, { tasks: Infinity, concurrency, prefetch, workerId, otherTypes });
  process.send('ready');
  process.on('message', async (message) => {
    if (message === 'go') {
      process.send({ cpu0: process.cpuUsage() });
      await worker.start();
    } else if (message === 'stop') {
      await worker.stop();
      process.send({ cpu: process.cpuUsage() });
      process.disconnect();
    }
  });
  await new Promise(() => {}); // until the parent disconnects
}

const TASKS = Number(process.argv[2] ?? 20000);
const CONCURRENCY = Number(process.argv[3] ?? 10);
const PREFETCH = Number(process.argv[4] ?? 500);
const name = `bench-drain-${process.pid}`;

const server = await openStatementsServer(name);
try {
  const { urls, root } = await probeDatabase(server);
  if (process.env.VARIANT) await root.query(readFileSync(process.env.VARIANT, 'utf8'));
  await root.query('create extension if not exists pg_stat_statements');
  const history = Number(process.env.HISTORY ?? 0);
  if (process.env.SET_SIZE)
    await root.query('update queues.history_setting set partition_size = $1', [process.env.SET_SIZE]);
  if (history > 0) await fillHistory(urls.owner, history, (line) => console.log(line));
  const LIMIT_OTHER = process.env.LIMIT_OTHER;
  if (LIMIT_OTHER && !['unclaimed', 'idle', 'busy'].includes(LIMIT_OTHER))
    throw new Error(`LIMIT_OTHER must be unclaimed, idle or busy, got ${LIMIT_OTHER}`);
  const otherTypes = LIMIT_OTHER === 'idle' || LIMIT_OTHER === 'busy' ? ['bench_other'] : [];
  if (LIMIT_OTHER) {
    await root.query(`insert into queues.task_type (task_type) values ('bench_other') on conflict do nothing`);
    await root.query(`select queues.set_task_limit('bench_other', 'type', null, 20, 200, '1 second')`);
    await root.query(`select queues.set_task_limit('bench_other', 'each_group', null, 2)`);
    if (LIMIT_OTHER === 'busy')
      for (let n = 0; n < 10; n++)
        await root.query(
          `select count(*) from queues.enqueue_many((
             select jsonb_agg(jsonb_build_object('task_type', 'bench_other', 'payload', '{}'::jsonb,
                                                 'group_key', 'g' || (i % 100)))
               from generate_series(1, 10000) i))`,
        );
  }
  const { rows: from } = await root.query('select coalesce(max(task_id), 0) as id from queues.task');
  await enqueueBacklog(urls, root, TASKS);
  await root.query('select pg_stat_statements_reset()');
  await new Promise((r) => setTimeout(r, 1200)); // the enqueuers' counters reported
  const written0 = await writtenSoFar(root);
  const WORKERS = Number(process.env.WORKERS ?? 1);
  const children = await Promise.all(
    Array.from({ length: WORKERS - 1 }, (_, i) => {
      const child = fork(new URL(import.meta.url).pathname, [], {
        env: {
          ...process.env,
          DRAIN_CHILD: JSON.stringify({
            urls,
            concurrency: CONCURRENCY,
            prefetch: PREFETCH,
            workerId: `probe-${i + 2}`,
            otherTypes,
          }),
        },
      });
      return new Promise((resolve) => child.once('message', () => resolve(child)));
    }),
  );
  const answer = (child) => new Promise((resolve) => child.once('message', resolve));
  const { worker, allDone } = noopWorker(urls, {
    tasks: TASKS,
    concurrency: CONCURRENCY,
    prefetch: PREFETCH,
    otherTypes,
  });
  const cpu0 = process.cpuUsage();
  const server0 = postgresCpuMicros();
  const machine0 = machineCpuMicros();
  const t = performance.now();
  const monotonic0 = process.hrtime.bigint();
  const started = children.map(answer);
  for (const child of children) child.send('go');
  const childCpu0 = await Promise.all(started);
  await worker.start();
  if (WORKERS === 1) await allDone;
  // Until every completion is recorded.
  for (;;) {
    // Ends of the backlog's tasks: task_completed rows and the tasks of completion rounds.
    const { rows } = await root.query(
      `select ((select count(*) from queues.task_completed where task_id > $1)
               + (select coalesce(sum(cardinality(r.task_ids)), 0) from queues.completion_round r
                   where r.task_id > $1))::int as drained`,
      [from[0].id],
    );
    if (rows[0].drained >= TASKS) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  const seconds = (performance.now() - t) / 1000;
  if (process.env.PERF_WINDOW) {
    const s = (ns) => (Number(ns / 1000n) / 1e6).toFixed(6);
    console.log(`drain window (CLOCK_MONOTONIC, s): ${s(monotonic0)},${s(process.hrtime.bigint())}`);
  }
  const cpu = process.cpuUsage(cpu0);
  const serverCpu = postgresCpuMicros() - server0;
  const machine1 = machineCpuMicros();
  let childCpu = 0;
  for (const [i, child] of children.entries()) {
    const stopped = answer(child);
    child.send('stop');
    const { cpu: used } = await stopped;
    const { cpu0: before } = childCpu0[i];
    childCpu += used.user + used.system - before.user - before.system;
  }
  await worker.stop();
  await new Promise((r) => setTimeout(r, 1200)); // every backend's counters reported
  const written = writtenPerTask(written0, await writtenSoFar(root), TASKS);
  const idle = machine1.idle - machine0.idle;
  const busy = machine1.busy - machine0.busy;
  console.log(
    `drain ${TASKS} tasks, ${WORKERS} worker process(es)${LIMIT_OTHER ? `, a limit on another type (${LIMIT_OTHER})` : ''}, concurrency ${CONCURRENCY}, prefetch ${PREFETCH}: ${Math.round(TASKS / seconds)} tasks/s; ` +
      `worker process${WORKERS > 1 ? 'es' : ''} CPU ${((cpu.user + cpu.system + childCpu) / TASKS).toFixed(1)} µs per task; ` +
      `PostgreSQL CPU ${(serverCpu / TASKS).toFixed(1)} µs per task; machine idle ${((100 * idle) / (idle + busy)).toFixed(0)}%; ` +
      `peak RSS ${Math.round(process.resourceUsage().maxRSS / 1024)} MB`,
  );
  const { rows } = await root.query(
    `
    select calls, round((total_exec_time * 1000 / $1)::numeric, 1) as us_per_task,
           round((total_exec_time / calls)::numeric, 3) as ms_per_call,
           regexp_replace(left(query, 100), '\\s+', ' ', 'g') as query
      from pg_stat_statements
     where query not ilike '%pg_stat_statements%' and query not ilike '%as drained%' and query not ilike '%history%'
     order by total_exec_time desc limit ${Number(process.env.TOP ?? 12)}`,
    [TASKS],
  );
  console.table(rows);
  console.log(
    `written during the drain: ${written.rowsPerTask.toFixed(2)} heap rows and ${Math.round(written.walBytesPerTask)} WAL bytes per task`,
  );
  console.table(written.perTable);
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
