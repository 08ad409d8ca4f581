// Drains a backlog of db_function steps ({"db_function":"internal.noop"}) with the real
// Worker and the built-in dbFunctionProcessor in this process, and prints the rate, how
// many steps each queues.run_steps call got, and the SQL per step (pg_stat_statements,
// track = all, so the statements inside run_steps are listed). Run it under
// `node --cpu-prof --cpu-prof-dir=/tmp/prof` to see the worker's CPU per step.
//   node tools/bench/probes/steps-drain.mjs [steps=20000] [concurrency=10] [prefetch=500]
import { readFileSync, readdirSync } from 'node:fs';
import pg from 'pg';
import { provisionDatabase } from '@org/db-tools';
import { openStatementsServer } from './statements-server.mjs';
import { dbFunctionProcessor, ProcessorRegistry } from '@org/worker';
import { enqueueNoopSteps, probeWorker } from './drain-fixture.mjs';

const STEPS = Number(process.argv[2] ?? 20000);
const CONCURRENCY = Number(process.argv[3] ?? 10);
const PREFETCH = Number(process.argv[4] ?? 500);
const name = `bench-steps-${process.pid}`;

/** CPU time (µs) of the PostgreSQL server: the postmaster and every process it started. */
function serverCpuMicros(postmaster) {
  const tick = 1e6 / 100; // USER_HZ
  let total = 0;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // fields[1] is ppid; utime, stime are fields 11 and 12 (0-based, after the name);
      // cutime, cstime 13 and 14 count children that exited.
      if (Number(pid) !== postmaster && Number(fields[1]) !== postmaster) continue;
      total += (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) * tick;
    } catch {
      // the process ended
    }
  }
  return total;
}
const server = await openStatementsServer(name);
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const rootUrl = new URL(server.rootUrl);
  rootUrl.pathname = '/probe';
  const root = new pg.Pool({ connectionString: rootUrl.toString(), max: 1 });
  await root.query('create extension if not exists pg_stat_statements');
  // db_function steps are enqueued by the owner only (queues.internal_task_type).
  const owner = new pg.Pool({ connectionString: urls.owner, max: 1 });
  await enqueueNoopSteps(owner, STEPS);
  await root.query('vacuum analyze');
  await root.query('select pg_stat_statements_reset()');
  const registry = new ProcessorRegistry().register('db_function', dbFunctionProcessor());
  const worker = probeWorker(urls, registry, ['db_function'], { concurrency: CONCURRENCY, prefetch: PREFETCH });
  const { rows: dir } = await root.query('show data_directory');
  const postmaster = Number(readFileSync(`${dir[0].data_directory}/postmaster.pid`, 'utf8').split('\n')[0]);
  const server0 = serverCpuMicros(postmaster);
  const cpu0 = process.cpuUsage();
  const t = performance.now();
  const window0 = process.hrtime.bigint() / 1000n;
  await worker.start();
  // Until no step is pending (a cheap probe: the first row of an index, every 10 ms).
  for (;;) {
    const { rows } = await root.query('select exists (select 1 from queues.task_pending) as busy');
    if (!rows[0].busy) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  const seconds = (performance.now() - t) / 1000;
  // The drain's window in the clock of --cpu-prof's timestamps (µs), for tools that read the profile.
  console.error(`cpu-prof window ${window0} ${process.hrtime.bigint() / 1000n}`);
  const cpu = process.cpuUsage(cpu0);
  const serverCpu = serverCpuMicros(postmaster) - server0;
  await worker.stop();
  const { rows: bad } = await root.query(
    `select (select count(*) from queues.error)::int as errors,
            (select count(*) from queues.task_end where outcome <> 'succeeded')::int as not_succeeded,
            (select count(*) from queues.task_leases)::int as leases`,
  );
  console.log(
    `drain ${STEPS} steps, concurrency ${CONCURRENCY}, prefetch ${PREFETCH}: ${Math.round(STEPS / seconds)} steps/s; ` +
      `worker process CPU ${((cpu.user + cpu.system) / STEPS).toFixed(1)} µs per step; ` +
      `server CPU ${(serverCpu / STEPS).toFixed(1)} µs per step; ` +
      `errors ${bad[0].errors}, not succeeded ${bad[0].not_succeeded}, leases ${bad[0].leases}`,
  );
  const { rows } = await root.query(
    `
    select calls, rows, round((rows::numeric / nullif(calls, 0)), 1) as rows_per_call,
           round((total_exec_time * 1000 / $1)::numeric, 1) as us_per_step,
           round((total_exec_time / calls)::numeric, 3) as ms_per_call,
           regexp_replace(left(query, 110), '\\s+', ' ', 'g') as query
      from pg_stat_statements
     where query not ilike '%pg_stat_statements%' and query not ilike '%exists (select 1 from queues.task_pending) as busy%'
     order by total_exec_time desc limit 25`,
    [STEPS],
  );
  console.table(rows);
  await owner.end();
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
