// Drains a backlog of db_function steps ({"db_function":"internal.noop"}) with the real
// Worker and the built-in dbFunctionProcessor in this process, and prints the rate, how
// many steps each queues.run_steps call got, and the SQL per step (pg_stat_statements,
// track = all, so the statements inside run_steps are listed). Run it under
// `node --cpu-prof --cpu-prof-dir=/tmp/prof` to see the worker's CPU per step.
//   node tools/bench/probes/steps-drain.mjs [steps=20000] [concurrency=10] [prefetch=500]
import pg from 'pg';
import { openServer, provisionDatabase, withRootClient } from '@org/db-tools';
import { enqueueMany } from '@org/queue-client';
import { createLogger, dbFunctionProcessor, ProcessorRegistry, Worker } from '@org/worker';

const STEPS = Number(process.argv[2] ?? 20000);
const CONCURRENCY = Number(process.argv[3] ?? 10);
const PREFETCH = Number(process.argv[4] ?? 500);
const name = `bench-steps-${process.pid}`;
let server = await openServer({ name });
await withRootClient(server, async (root) => {
  await root.query(`alter system set shared_preload_libraries = 'pg_stat_statements'`);
  await root.query(`alter system set pg_stat_statements.track = 'all'`);
});
await server.stop();
server = await openServer({ name });
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const rootUrl = new URL(server.rootUrl);
  rootUrl.pathname = '/probe';
  const root = new pg.Pool({ connectionString: rootUrl.toString(), max: 1 });
  await root.query('create extension if not exists pg_stat_statements');
  // db_function steps are enqueued by the owner only (queues.internal_task_type).
  const owner = new pg.Pool({ connectionString: urls.owner, max: 1 });
  for (let s = 0; s < STEPS; s += 1000)
    await enqueueMany(
      owner,
      Array.from({ length: Math.min(1000, STEPS - s) }, (_, i) => ({
        taskType: 'db_function',
        payload: { db_function: 'internal.noop', n: s + i },
      })),
    );
  await root.query('vacuum analyze');
  await root.query('select pg_stat_statements_reset()');
  const registry = new ProcessorRegistry().register('db_function', dbFunctionProcessor());
  const worker = new Worker({
    databaseUrl: urls.worker,
    roles: ['db_function'],
    workerId: 'probe',
    concurrency: CONCURRENCY,
    prefetch: PREFETCH,
    pollIntervalMs: 2000,
    heartbeatIntervalMs: 30_000,
    leaseSeconds: 300,
    maxLeases: 5,
    shutdownGraceMs: 25_000,
    registry,
    logger: createLogger('warn', process.stderr),
  });
  const cpu0 = process.cpuUsage();
  const t = performance.now();
  await worker.start();
  for (;;) {
    const { rows } = await root.query('select count(*)::int as n from queues.task_completed');
    if (rows[0].n >= STEPS) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  const seconds = (performance.now() - t) / 1000;
  const cpu = process.cpuUsage(cpu0);
  await worker.stop();
  const { rows: bad } = await root.query(
    `select (select count(*) from queues.error)::int as errors,
            (select count(*) from queues.task_completed where outcome <> 'succeeded')::int as not_succeeded,
            (select count(*) from queues.task_lease)::int as leases`,
  );
  console.log(
    `drain ${STEPS} steps, concurrency ${CONCURRENCY}, prefetch ${PREFETCH}: ${Math.round(STEPS / seconds)} steps/s; ` +
      `worker process CPU ${((cpu.user + cpu.system) / STEPS).toFixed(1)} µs per step; ` +
      `errors ${bad[0].errors}, not succeeded ${bad[0].not_succeeded}, leases ${bad[0].leases}`,
  );
  const { rows } = await root.query(
    `
    select calls, rows, round((rows::numeric / nullif(calls, 0)), 1) as rows_per_call,
           round((total_exec_time * 1000 / $1)::numeric, 1) as us_per_step,
           round((total_exec_time / calls)::numeric, 3) as ms_per_call,
           regexp_replace(left(query, 110), '\\s+', ' ', 'g') as query
      from pg_stat_statements
     where query not ilike '%pg_stat_statements%' and query not ilike '%count(*)::int as n from queues.task_completed%'
     order by total_exec_time desc limit 25`,
    [STEPS],
  );
  console.table(rows);
  await owner.end();
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
