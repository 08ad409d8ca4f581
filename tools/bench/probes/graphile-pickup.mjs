// graphile-worker's pickup beside ours (pickup-stages.mjs): jobs added one at a time (20
// a second, as workload 4) through WorkerUtils, as the benchmark's producer adds them, to
// an idle runner with the benchmark's settings; the time of the add's answer and of the
// task's start after the add began, and the time each of its statements took.
//   node tools/bench/probes/graphile-pickup.mjs [jobs=300] [rate=20]
import { run, makeWorkerUtils } from 'graphile-worker';
import pg from 'pg';
import { graphileDatabase, quietLogger } from './graphile-fixture.mjs';
import { openStatementsServer, printStatements } from './statements-server.mjs';
import { percentile } from './drain-fixture.mjs';

const JOBS = Number(process.argv[2] ?? 300);
const RATE = Number(process.argv[3] ?? 20);
const server = await openStatementsServer(`graphile-pickup-${process.pid}`);
const logger = quietLogger;
try {
  const { url, root } = await graphileDatabase(server, 'gwpickup');
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
  await printStatements(root, { limit: 8 });
  await root.end();
  const done = [...stages.values()].filter((s) => s.run !== undefined);
  const table = {};
  for (const [name, f] of [
    ['add answered', (s) => s.added - s.start],
    ['task started', (s) => s.run - s.start],
  ]) {
    const xs = done.map(f);
    table[name] = {
      p50: percentile(xs, 50).toFixed(2),
      p95: percentile(xs, 95).toFixed(2),
      p99: percentile(xs, 99).toFixed(2),
    };
  }
  console.log(`${done.length} of ${JOBS} jobs picked up; ms after the add began:`);
  console.table(table);
} finally {
  await server.stop({ destroy: true });
}
