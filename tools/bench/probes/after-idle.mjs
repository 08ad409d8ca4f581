// A task that arrives after the worker sat idle: tasks enqueued one at a time, GAP_MS apart
// (default 12,000, longer than a driver pool's default idle timeout of 10 s), to an idle
// real Worker; for each, milliseconds from the enqueue call to the processor's start and to
// the worker's `completed` event (its completion recorded), and the connections each of the
// worker's pools opened meanwhile (pg_stat_activity's backend_start after the enqueue).
//   node tools/bench/probes/after-idle.mjs [tasks=5] [gapMs=12000]
import pg from 'pg';
import { enqueue } from '@org/queue-client';
import { openServer } from '@org/db-tools';
import { probeDatabase, probeWorker } from './drain-fixture.mjs';
import { ProcessorRegistry } from '@org/worker';

const TASKS = Number(process.argv[2] ?? 5);
const GAP_MS = Number(process.argv[3] ?? 12_000);
const server = await openServer({ name: `bench-after-idle-${process.pid}` });
try {
  const { urls, root } = await probeDatabase(server);
  let started;
  const registry = new ProcessorRegistry().register('bench', {
    name: 'noop',
    async process() {
      started?.(performance.now());
      return { outcome: 'succeeded' };
    },
  });
  const worker = probeWorker(urls, registry, ['bench'], { concurrency: 10 });
  let completed;
  worker.on('completed', () => completed?.(performance.now()));
  await worker.start();
  // One connection kept open: the enqueue's own connection is not what is measured.
  const app = new pg.Client({ connectionString: urls.app });
  await app.connect();
  const rows = [];
  for (let i = 0; i < TASKS; i++) {
    await new Promise((resolve) => setTimeout(resolve, i === 0 ? 1000 : GAP_MS));
    const atStart = new Promise((resolve) => (started = resolve));
    const atEnd = new Promise((resolve) => (completed = resolve));
    const {
      rows: [{ since }],
    } = await root.query('select clock_timestamp() as since');
    const t0 = performance.now();
    await enqueue(app, { taskType: 'bench', payload: { i } });
    const [s, e] = await Promise.all([atStart, atEnd]);
    const { rows: opened } = await root.query(
      `select application_name as name, count(*)::int as n from pg_stat_activity
        where datname = current_database() and backend_start >= $1 and application_name like 'queue-worker%'
        group by 1 order by 1`,
      [since],
    );
    rows.push({
      task: i,
      'started ms': (s - t0).toFixed(2),
      'completed ms': (e - t0).toFixed(2),
      'connections opened': opened.map((o) => `${o.name} ${o.n}`).join(', ') || 'none',
    });
  }
  console.table(rows);
  await worker.stop();
  await app.end();
  await root.end();
} catch (error) {
  console.error(error);
  process.exitCode = 1;
} finally {
  await server.stop({ destroy: true });
}
