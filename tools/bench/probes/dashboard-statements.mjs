// What one open dashboard costs the database during a drain: the real Worker drains a
// backlog (no-op processor) while DASHBOARDS pollers run the overview's statements as the
// page does (tools/bench/src/dashboard.ts), and pg_stat_statements (track = all) lists
// the statements by time, with the buffers each call read (shared hit + read: a count the
// machine's load does not move).
//   node tools/bench/probes/dashboard-statements.mjs [tasks=20000] [dashboards=20]
// VARIANT=<file.sql> runs the file first, as the superuser (another version of the
// overview's functions, to alternate two on one machine).
import { readFileSync } from 'node:fs';
import { openStatementsServer } from './statements-server.mjs';
import { enqueueBacklog, noopWorker, probeDatabase } from './drain-fixture.mjs';
import { DashboardPollers } from '../dist/dashboard.js';

const TASKS = Number(process.argv[2] ?? 20000);
const DASHBOARDS = Number(process.argv[3] ?? 20);
const TOP = Number(process.env.TOP ?? 15);
const name = `bench-dashboard-${process.pid}`;

const server = await openStatementsServer(name);
try {
  const { urls, root } = await probeDatabase(server);
  await root.query('create extension if not exists pg_stat_statements');
  if (process.env.VARIANT) await root.query(readFileSync(process.env.VARIANT, 'utf8'));
  await enqueueBacklog(urls, root, TASKS);
  await root.query('select pg_stat_statements_reset()');
  const { worker, allDone } = noopWorker(urls, { tasks: TASKS, concurrency: 10, prefetch: 500 });
  const pollers = DASHBOARDS > 0 ? new DashboardPollers(urls.api, DASHBOARDS) : undefined;
  pollers?.start();
  const t = performance.now();
  await worker.start();
  await allDone;
  const seconds = (performance.now() - t) / 1000;
  const stats = await pollers?.stop();
  await worker.stop();
  console.log(
    `drain ${TASKS} tasks with ${DASHBOARDS} dashboards: ${Math.round(TASKS / seconds)} tasks/s; ` +
      (stats ? `${stats.polls} polls, mean ${stats.meanMs.toFixed(1)} ms, max ${stats.maxMs.toFixed(1)} ms` : ''),
  );
  const { rows } = await root.query(
    `
    select calls, round(total_exec_time::numeric, 1) as total_ms,
           round((total_exec_time / calls)::numeric, 3) as ms_per_call,
           round((shared_blks_hit + shared_blks_read)::numeric / calls) as buffers_per_call,
           regexp_replace(left(query, 110), '\\s+', ' ', 'g') as query
      from pg_stat_statements
     where query not ilike '%pg_stat_statements%'
     order by total_exec_time desc limit $1`,
    [TOP],
  );
  console.table(rows);
  // The overview's own statements (top level), whatever their rank.
  const { rows: overview } = await root.query(
    `select calls, round((total_exec_time / calls)::numeric, 3) as ms_per_call,
            round((shared_blks_hit + shared_blks_read)::numeric / calls) as buffers_per_call, query
       from pg_stat_statements
      where toplevel and query like 'select * from admin.%'
      order by query`,
  );
  console.table(overview);
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
