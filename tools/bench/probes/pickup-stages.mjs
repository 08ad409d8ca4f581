// Where a pickup's time goes: tasks enqueued one at a time (20 a second, as workload 4)
// to an idle real Worker, with the time of each stage after the enqueue call began:
// the enqueue's answer, the notification (a second listener), the claim's answer (the
// worker's `claimed` event) and the processor's start.
//   node tools/bench/probes/pickup-stages.mjs [tasks=300] [rate=20]
// VARIANT=<file.sql> runs that SQL as the superuser first (a function's other version).
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { enqueue } from '@org/queue-client';
import { openServer } from '@org/db-tools';
import { openStatementsServer, printStatements } from './statements-server.mjs';
import { percentile, probeDatabase, probeWorker } from './drain-fixture.mjs';
import { ProcessorRegistry } from '@org/worker';

const TASKS = Number(process.argv[2] ?? 300);
const RATE = Number(process.argv[3] ?? 20);
// STATEMENTS=1: with pg_stat_statements (track = all), listed at the end.
const STATEMENTS = Boolean(process.env.STATEMENTS);
const server = await (STATEMENTS ? openStatementsServer : (name) => openServer({ name }))(
  `bench-pickup-${process.pid}`,
);
try {
  const { urls, root } = await probeDatabase(server);
  if (STATEMENTS) await root.query('create extension if not exists pg_stat_statements');
  if (process.env.VARIANT) await root.query(readFileSync(process.env.VARIANT, 'utf8'));
  const stages = new Map(); // n -> { start, enqueued, notified, claimed, run }
  let current;
  const registry = new ProcessorRegistry().register('bench', {
    name: 'noop',
    async process({ task }) {
      const s = stages.get(task.payload.n);
      if (s) s.run = performance.now();
      return { outcome: 'succeeded' };
    },
  });
  const worker = probeWorker(
    process.env.ASYNC_CLAIM
      ? {
          ...urls,
          worker: urls.worker + (urls.worker.includes('?') ? '&' : '?') + 'options=-c%20synchronous_commit%3Doff',
        }
      : urls,
    registry,
    ['bench'],
    { concurrency: 10 },
  );
  worker.on('claimed', (tasks) => {
    const now = performance.now();
    for (const t of tasks) {
      const s = stages.get(t.payload.n);
      if (s) s.claimed = now;
    }
  });
  const listener = new pg.Client({ connectionString: urls.worker });
  await listener.connect();
  await listener.query('listen queues_task_ready');
  listener.on('notification', () => {
    if (current && current.notified === undefined) current.notified = performance.now();
  });
  await worker.start();
  const app = new pg.Pool({ connectionString: urls.app, max: 4 });
  (await app.connect()).release();
  await new Promise((r) => setTimeout(r, 1000));
  if (STATEMENTS) await root.query('select pg_stat_statements_reset()');
  for (let n = 0; n < TASKS; n++) {
    const s = { start: performance.now() };
    stages.set(n, s);
    current = s;
    await enqueue(app, { taskType: 'bench', payload: { n } });
    s.enqueued = performance.now();
    await new Promise((r) => setTimeout(r, 1000 / RATE));
  }
  await new Promise((r) => setTimeout(r, 500));
  await worker.stop();
  await app.end();
  await listener.end();
  if (STATEMENTS) await printStatements(root);
  await root.end();
  const rows = [...stages.values()].filter((s) => s.run !== undefined);
  const table = {};
  for (const [name, f] of [
    ['enqueue answered', (s) => s.enqueued - s.start],
    ['notification', (s) => s.notified - s.start],
    ['claim answered', (s) => s.claimed - s.start],
    ['processor started', (s) => s.run - s.start],
    ['notification to claim answered', (s) => s.claimed - s.notified],
    ['claim answered to processor', (s) => s.run - s.claimed],
  ]) {
    const xs = rows.map(f).filter((x) => Number.isFinite(x));
    table[name] = {
      p50: percentile(xs, 50).toFixed(2),
      p95: percentile(xs, 95).toFixed(2),
      p99: percentile(xs, 99).toFixed(2),
      max: Math.max(...xs).toFixed(2),
    };
  }
  console.log(`${rows.length} of ${TASKS} tasks picked up; ms after the enqueue call began:`);
  console.table(table);
  // The slowest pickups, in order of enqueue (n): whether they are the first ones.
  const slowest = [...stages.entries()]
    .filter(([, s]) => s.run !== undefined)
    .sort(([, a], [, b]) => b.run - b.start - (a.run - a.start))
    .slice(0, 6)
    .map(
      ([n, s]) =>
        `#${n} ${(s.run - s.start).toFixed(2)} ms (claim answered ${(s.claimed - s.notified).toFixed(2)} after the notification)`,
    );
  console.log(`slowest: ${slowest.join('; ')}`);
} finally {
  await server.stop({ destroy: true });
}
