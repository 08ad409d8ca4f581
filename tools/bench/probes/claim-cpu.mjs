// The backend's CPU time per one-task claim, for several claim statements compared on one
// backend: each statement claims in blocks of 200, the statements taking turns, so the
// machine's load weighs on all alike; the tasks are settled on a second connection, so
// the first backend's CPU (utime + stime from /proc, in 10 ms ticks) is the claims' only.
// A claim's CPU includes starting its statements' plans, which pg_stat_statements does not
// time. Prints each statement's median and least CPU and wall time per claim over the blocks.
//   STMTS='["select * from queues.claim_tasks(...)", ...]' node tools/bench/probes/claim-cpu.mjs [claims=3000]
// In a statement, $WK stands for the worker key of the worker id 'cc' (claims as 'cc').
// SQL=<file.sql>[,<file.sql>...] runs those files as the superuser first (another version
// of a function under another name, and its grant to the worker). BACKLOG=rows: the tasks
// on claim-index rows of their own, not in ready batches (drain-fixture.mjs).
import pg from 'pg';
import { readFileSync } from 'node:fs';
import { openServer } from '@org/db-tools';
import { enqueueBacklog, probeDatabase } from './drain-fixture.mjs';

const N = Number(process.argv[2] ?? 3000);
const BLOCK = 200;
const statements = JSON.parse(
  process.env.STMTS ?? `["select * from queues.claim_tasks('cc', 1, array['bench'], 300, 5)"]`,
);
const server = await openServer({ name: `bench-claim-cpu-${process.pid}` });
try {
  const { urls, root } = await probeDatabase(server);
  for (const file of (process.env.SQL ?? '').split(',').filter(Boolean)) await root.query(readFileSync(file, 'utf8'));
  await enqueueBacklog(urls, root, (N + 200) * statements.length + 500);
  const options = { connectionString: urls.worker, options: '-c synchronous_commit=off' };
  const worker = new pg.Client(options);
  const settler = new pg.Client(options);
  for (const c of [worker, settler]) {
    await c.connect();
    c.on('error', () => {}); // the server's stop at the end
  }
  await worker.query(`select * from queues.claim_tasks('cc', 1, array['bench'], 300, 5)`);
  const {
    rows: [{ pid }],
  } = await worker.query('select pg_backend_pid() as pid');
  const {
    rows: [{ wk }],
  } = await root.query(`select worker_key as wk from queues.worker_name where worker_id = 'cc'`);
  const ticks = () => {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return Number(fields[11]) + Number(fields[12]);
  };
  const block = async (k, n) => {
    const held = [];
    const c0 = ticks();
    const t0 = performance.now();
    for (let i = 0; i < n; i++) {
      const { rows } = await worker.query(statements[k].replaceAll('$WK', String(wk)));
      if (rows.length !== 1) throw new Error(`statement ${k} claimed ${rows.length} tasks`);
      held.push(rows[0]);
    }
    const spent = { cpu: ((ticks() - c0) * 10_000) / n, wall: ((performance.now() - t0) * 1000) / n };
    await settler.query(
      `select * from queues.settle_tasks($1::bigint[], $2::bigint[], array_fill('succeeded'::text, array[${n}]))`,
      [held.map((t) => t.task_id), held.map((t) => t.task_lease_id)],
    );
    return spent;
  };
  for (let k = 0; k < statements.length; k++) await block(k, 100); // planned and cached
  const cpu = statements.map(() => []);
  const wall = statements.map(() => []);
  for (let done = 0; done < N; done += BLOCK)
    for (let k = 0; k < statements.length; k++) {
      const spent = await block(k, BLOCK);
      cpu[k].push(spent.cpu);
      wall[k].push(spent.wall);
    }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  statements.forEach((s, k) =>
    console.log(
      `${s.slice(0, 70).padEnd(70)} CPU µs per claim: median ${median(cpu[k]).toFixed(0)}, least ` +
        `${Math.min(...cpu[k]).toFixed(0)}; wall µs: median ${median(wall[k]).toFixed(0)}, least ` +
        `${Math.min(...wall[k]).toFixed(0)}`,
    ),
  );
  await worker.end();
  await settler.end();
  await root.end();
} catch (error) {
  console.error(error);
  process.exitCode = 1;
} finally {
  await server.stop({ destroy: true });
}
