// The claim and the completion round on one connection, without a worker: claims 500,
// settles them as the worker's completer does (all succeeded, fenced, with start times),
// `rounds` times, and prints each statement's milliseconds per call (pg_stat_statements).
// Quieter than a drain for comparing two versions of the SQL: alternate them.
//   node tools/bench/probes/round-cycle.mjs [rounds=40]
// ALL=1 prints every statement's (the 25 dearest), not only the completion's.
// NOSTART=1 settles without start times. VARIANT=<file.sql> runs that SQL as the database
// owner's superuser first (a function's new version, an index).
import pg from 'pg';
import { readFileSync } from 'node:fs';
import { openStatementsServer } from './statements-server.mjs';
import { probeDatabase, enqueueBacklog } from './drain-fixture.mjs';
const server = await openStatementsServer(`round-cycle-${process.pid}`);
try {
  const { urls, root } = await probeDatabase(server);
  await root.query('create extension if not exists pg_stat_statements');
  if (process.env.VARIANT) await root.query(readFileSync(process.env.VARIANT, 'utf8'));
  const N = Number(process.argv[2] ?? 40);
  await enqueueBacklog(urls, root, N * 500 + 1000);
  const w = new pg.Pool({ connectionString: urls.worker, max: 2 });
  const claim = async () => (await w.query(`select * from queues.claim_tasks('probe', 500, '{bench}', 300, 5)`)).rows;
  const noStart = process.env.NOSTART;
  const settle = (rows) =>
    w.query(`select * from queues.settle_tasks($1, $2, $3, null, null, null, $4)`, [
      rows.map((r) => r.task_id),
      rows.map((r) => r.task_lease_id),
      rows.map(() => 'succeeded'),
      noStart ? null : rows.map(() => Date.now() * 1000 + 123),
    ]);
  for (let i = 0; i < 2; i++) await settle(await claim());
  await root.query('select pg_stat_statements_reset()');
  for (let i = 0; i < N; i++) {
    const rows = await claim();
    await settle(rows);
  }
  const { rows } = await root.query(
    `select calls, round((total_exec_time / calls)::numeric, 3) as ms_per_call, regexp_replace(left(query, 70), '\\s+', ' ', 'g') as query from pg_stat_statements where query not ilike '%pg_stat_statements%' and (${process.env.ALL ? 'true' : "query ilike '%settle%' or query ilike '%with done%' or query ilike '%with input%'"}) order by total_exec_time desc limit ${process.env.ALL ? 25 : 5}`,
  );
  for (const r of rows) console.log(r.ms_per_call, r.calls, r.query);
  await w.end();
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
