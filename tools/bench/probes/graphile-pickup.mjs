// graphile-worker's pickup beside ours (pickup-stages.mjs): jobs added one at a time (20
// a second, as workload 4) through WorkerUtils, as the benchmark's producer adds them, to
// an idle runner with the benchmark's settings; the time of the add's answer and of the
// task's start after the add began, and the time each of its statements took.
//   node tools/bench/probes/graphile-pickup.mjs [jobs=300] [rate=20]
import { run, makeWorkerUtils, runMigrations, Logger } from 'graphile-worker';
import pg from 'pg';
import { openStatementsServer } from './statements-server.mjs';

const JOBS = Number(process.argv[2] ?? 300);
const RATE = Number(process.argv[3] ?? 20);
const server = await openStatementsServer(`graphile-pickup-${process.pid}`);
const logger = new Logger(() => () => {});
try {
  const root0 = new pg.Pool({ connectionString: server.rootUrl, max: 1 });
  root0.on('error', () => {});
  await root0.query('drop database if exists gwpickup');
  await root0.query('create database gwpickup');
  await root0.end();
  const u = new URL(server.rootUrl);
  u.pathname = '/gwpickup';
  const url = u.toString();
  const root = new pg.Pool({ connectionString: url, max: 1 });
  root.on('error', () => {});
  await root.query('create extension if not exists pg_stat_statements');
  await runMigrations({ connectionString: url, logger });
  const stages = new Map();
  const runner = await run({
    connectionString: url,
    concurrency: 10,
    maxPoolSize: 12,
    noHandleSignals: true,
    logger,
    taskList: {
      bench: async (payload) => {
        const s = stages.get(payload.n);
        if (s) s.run = performance.now();
      },
    },
    crontab: '',
    preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
  });
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => {}); // the server's stop at the end
  const utils = await makeWorkerUtils({ pgPool: pool, logger });
  await new Promise((r) => setTimeout(r, 1000));
  await root.query('select pg_stat_statements_reset()');
  for (let n = 0; n < JOBS; n++) {
    const s = { start: performance.now() };
    stages.set(n, s);
    await utils.addJob('bench', { n });
    s.added = performance.now();
    await new Promise((r) => setTimeout(r, 1000 / RATE));
  }
  await new Promise((r) => setTimeout(r, 500));
  await runner.stop();
  await utils.release();
  await pool.end();
  const { rows } = await root.query(
    `select calls, round((total_exec_time / calls)::numeric, 3) as ms_per_call,
            regexp_replace(left(query, 90), '\\s+', ' ', 'g') as query
       from pg_stat_statements where query not ilike '%pg_stat_statements%'
      order by total_exec_time desc limit 8`,
  );
  console.table(rows);
  await root.end();
  const done = [...stages.values()].filter((s) => s.run !== undefined);
  const pct = (xs, p) => {
    const sorted = [...xs].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
  };
  const table = {};
  for (const [name, f] of [
    ['add answered', (s) => s.added - s.start],
    ['task started', (s) => s.run - s.start],
  ]) {
    const xs = done.map(f);
    table[name] = { p50: pct(xs, 50).toFixed(2), p95: pct(xs, 95).toFixed(2), p99: pct(xs, 99).toFixed(2) };
  }
  console.log(`${done.length} of ${JOBS} jobs picked up; ms after the add began:`);
  console.table(table);
} finally {
  await server.stop({ destroy: true });
}
