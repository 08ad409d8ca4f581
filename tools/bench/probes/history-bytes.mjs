// Bytes per completed task in the queue's history: runs N tasks through the real queue
// functions (enqueue_many, claim_tasks as the worker, complete_tasks), vacuums, and reports
// table and index bytes of each history table, per million tasks (extrapolated from N).
//
//   node tools/bench/probes/history-bytes.mjs [N] [--before]
//
// --before measures the layout of the committed migrations only (no migrations/current),
// i.e. before the history tables were partitioned. Not part of the benchmark; evidence.
import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';

const N = Number(process.argv.slice(2).find((a) => /^\d+$/.test(a)) ?? 100_000);
const before = process.argv.includes('--before');
const TABLES = [
  'task',
  'task_lease',
  'task_completed',
  'error',
  'task_lease_extension',
  'task_lease_release',
  'task_lease_revocation',
  'task_attempt_failed',
  'task_redriven',
  'task_pending',
];
const WORKER_ID = 'worker-7f3a9c2d-48121-k2x9'; // host-pid-random, as the worker's default

const server = await openServer({ name: `history-bytes-${process.pid}` });
try {
  const urls = await provisionDatabase(server, 'bytes', { fresh: true, quiet: true, current: !before });
  const owner = new pg.Pool({ connectionString: urls.owner, max: 1 });
  const app = new pg.Pool({ connectionString: urls.app, max: 1 });
  const worker = new pg.Pool({ connectionString: urls.worker, max: 1 });
  // Idle connections die when the server stops at the end: nothing to report.
  for (const pool of [owner, app, worker]) pool.on('error', () => {});
  await owner.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
  const started = performance.now();
  for (let done = 0; done < N; done += 1000) {
    const n = Math.min(1000, N - done);
    await app.query('select queues.enqueue_many($1::jsonb)', [
      JSON.stringify(Array.from({ length: n }, (_, i) => ({ task_type: 'bench', payload: { n: done + i } }))),
    ]);
    const { rows } = await worker.query(
      `select task_id, task_lease_id from queues.claim_tasks($1, $2, '{bench}', 300, 5)`,
      [WORKER_ID, n],
    );
    await worker.query('select queues.complete_tasks($1::bigint[], $2::bigint[])', [
      rows.map((r) => r.task_id),
      rows.map((r) => r.task_lease_id),
    ]);
  }
  const seconds = (performance.now() - started) / 1000;
  await owner.query('vacuum (analyze) ' + TABLES.map((t) => `queues.${t}`).join(', '));
  const { rows } = await owner.query(
    `select t.name,
            sum(pg_table_size(p.relid))::bigint as table_bytes,
            sum(pg_indexes_size(p.relid))::bigint as index_bytes
       from unnest($1::text[]) t(name)
       -- Every leaf partition of a partitioned table; a plain table is its own leaf.
       cross join lateral (
         select p.relid from pg_partition_tree(format('queues.%I', t.name)::regclass) p where p.isleaf
         union all
         select c.oid from pg_class c where c.oid = format('queues.%I', t.name)::regclass and c.relkind = 'r'
       ) p
      group by t.name order by array_position($1::text[], t.name)`,
    [TABLES],
  );
  const perMillion = (b) => ((Number(b) * 1_000_000) / N / 1024 / 1024).toFixed(1);
  console.log(
    `${before ? 'before (committed migrations only)' : 'after (with migrations/current)'}: ${N} tasks in ${seconds.toFixed(1)} s`,
  );
  console.log('table                  | table MB/M tasks | index MB/M tasks');
  let tableSum = 0;
  let indexSum = 0;
  for (const r of rows) {
    tableSum += Number(r.table_bytes);
    indexSum += Number(r.index_bytes);
    console.log(
      `${r.name.padEnd(22)} | ${perMillion(r.table_bytes).padStart(16)} | ${perMillion(r.index_bytes).padStart(16)}`,
    );
  }
  console.log(`${'total'.padEnd(22)} | ${perMillion(tableSum).padStart(16)} | ${perMillion(indexSum).padStart(16)}`);
  const { rows: worker_id } = await owner.query(
    'select avg(pg_column_size(worker_id))::numeric(6,1) as b from queues.task_lease',
  );
  console.log(
    `worker_id on each lease: ${worker_id[0].b} bytes on average (a text id of ${WORKER_ID.length} characters)`,
  );
  await Promise.all([owner.end(), app.end(), worker.end()]);
} finally {
  await server.stop({ destroy: true });
}
