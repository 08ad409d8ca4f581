// graphile-worker's drain beside ours (worker-drain.mjs): the same embedded server with
// pg_stat_statements, a backlog of jobs, then graphile-worker's run() with the settings the
// benchmark gives it (runners/graphile.ts: localQueue 500, completion batches without
// delay, maxPoolSize concurrency + 2) until every job is gone; prints the rate, the CPU
// per job (this process's and PostgreSQL's) and each statement's time per call.
//   node tools/bench/probes/graphile-drain.mjs [jobs=40000] [concurrency=10]
import { run, makeWorkerUtils } from 'graphile-worker';
import pg from 'pg';
import { graphileDatabase, quietLogger } from './graphile-fixture.mjs';
import { openStatementsServer } from './statements-server.mjs';
import { postgresCpuMicros, machineCpuMicros } from './drain-fixture.mjs';
const TASKS = Number(process.argv[2] ?? 40000),
  CONC = Number(process.argv[3] ?? 10);
const server = await openStatementsServer(`graphile-drain-${process.pid}`);
const logger = quietLogger;
try {
  const { url, root } = await graphileDatabase(server, 'gwprobe');
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  const utils = await makeWorkerUtils({ pgPool: pool, logger });
  for (let s = 0; s < TASKS; s += 1000)
    await utils.addJobs(
      Array.from({ length: Math.min(1000, TASKS - s) }, (_, k) => ({ identifier: 'bench', payload: { n: s + k } })),
    );
  await utils.release();
  await pool.end();
  await root.query('vacuum analyze');
  await root.query('select pg_stat_statements_reset()');
  await new Promise((r) => setTimeout(r, 1200));
  let handled = 0;
  let done;
  const allDone = new Promise((r) => (done = r));
  const cpu0 = process.cpuUsage(),
    s0 = postgresCpuMicros(),
    m0 = machineCpuMicros(),
    t = performance.now();
  const runner = await run({
    connectionString: url,
    concurrency: CONC,
    maxPoolSize: CONC + 2,
    noHandleSignals: true,
    logger,
    taskList: {
      bench: async () => {
        if (++handled === TASKS) done();
      },
    },
    crontab: '',
    preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
  });
  await allDone;
  for (;;) {
    const { rows } = await root.query('select count(*)::int n from graphile_worker._private_jobs');
    if (rows[0].n === 0) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  const sec = (performance.now() - t) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const sc = postgresCpuMicros() - s0;
  const m1 = machineCpuMicros();
  await runner.stop();
  await new Promise((r) => setTimeout(r, 1200));
  const idle = m1.idle - m0.idle,
    busy = m1.busy - m0.busy;
  console.log(
    `graphile drain ${TASKS}: ${Math.round(TASKS / sec)} tasks/s; worker CPU ${((cpu.user + cpu.system) / TASKS).toFixed(1)} us/task; PG CPU ${(sc / TASKS).toFixed(1)} us/task; idle ${((100 * idle) / (idle + busy)).toFixed(0)}%`,
  );
  const { rows } = await root.query(
    `select calls, round((total_exec_time*1000/$1)::numeric,1) us_per_task, round((total_exec_time/calls)::numeric,3) ms_per_call, round(rows::numeric/calls,1) rows_per_call, regexp_replace(left(query, 140), '\\s+', ' ', 'g') q from pg_stat_statements where query not ilike '%pg_stat_statements%' and query not ilike '%_private_jobs n%' order by total_exec_time desc limit 12`,
    [TASKS],
  );
  console.table(rows);
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
