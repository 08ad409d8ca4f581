// Runs the email processes of workload 6 (2,000 comms.send_email, one worker of 10, the
// Resend SDK against the fake server, backoff_scale 0.002) in this process on a server
// with pg_stat_statements, and prints the rate, the CPU per process of the worker and of
// PostgreSQL, and the statements that took the most time (nested ones included).
//   node tools/bench/probes/processes-statements.mjs [processes=2000] [concurrency=10]
// SORT=plan lists the statements that took the most time to plan instead, SORT=calls those
// called most often; REPLANNED=1 only those planned at more than half of their calls (a
// plan not kept by the session: a custom plan chosen at each call, or dynamic SQL); TOP=n
// lists n statements (25). VARIANT=<file.sql> runs that SQL as the superuser first (a
// function's other version). FUNCTIONS=n also lists the n functions with the most time of
// their own (pg_stat_user_functions' self_time, wall time: a lock wait counts too).
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { createResendEmailProvider } from '@org/providers';
import { startFakeResend } from '@org/providers/testing';
import { dbFunctionProcessor, channelTaskProcessor, ProcessorRegistry } from '@org/worker';
import { openStatementsServer } from './statements-server.mjs';
import { postgresCpuMicros, probeDatabase, probeWorker } from './drain-fixture.mjs';

const PROCESSES = Number(process.argv[2] ?? 2000);
const CONCURRENCY = Number(process.argv[3] ?? 10);

const server = await openStatementsServer(`bench-processes-${process.pid}`);
const resend = await startFakeResend();
try {
  const { urls, root } = await probeDatabase(server);
  await root.query('create extension if not exists pg_stat_statements');
  if (process.env.VARIANT) await root.query(readFileSync(process.env.VARIANT, 'utf8'));
  // Planning time too: the channel processes' statements are dynamic SQL, planned per call.
  await root.query(`alter system set pg_stat_statements.track_planning = on`);
  if (process.env.FUNCTIONS) await root.query(`alter system set track_functions = 'all'`);
  await root.query('select pg_reload_conf()');
  await root.query(`insert into internal.setting (name, value) values ('backoff_scale', '0.002')`);
  const app = new pg.Client({ connectionString: urls.app });
  await app.connect();
  await app.query(
    `select comms.send_email('Bench <bench@example.com>', 'user' || g || '@example.com', 'Hello', '<p>Hello</p>')
       from generate_series(1, $1::int) g`,
    [PROCESSES],
  );
  await app.end();
  await root.query('vacuum analyze');
  await root.query('select pg_stat_statements_reset()');
  await root.query('select pg_stat_reset()');
  const registry = new ProcessorRegistry()
    .register('db_function', dbFunctionProcessor())
    .register('email', channelTaskProcessor(createResendEmailProvider({ apiKey: 're_probe', baseUrl: resend.url })));
  const worker = probeWorker(urls, registry, ['db_function', 'email'], { concurrency: CONCURRENCY });
  // This server's processes only: the postmaster is the parent of every backend.
  const { rows: backend } = await root.query('select pg_backend_pid() as pid');
  const postmaster = Number(readFileSync(`/proc/${backend[0].pid}/stat`, 'utf8').split(') ')[1].split(' ')[1]);
  const cpu0 = process.cpuUsage();
  const server0 = postgresCpuMicros(postmaster);
  const t = performance.now();
  await worker.start();
  for (;;) {
    const { rows } = await root.query(
      `select (select count(*) from comms.send_email_task_succeeded)::int
            + (select count(*) from comms.send_email_task_failed)::int as n`,
    );
    if (rows[0].n >= PROCESSES) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const seconds = (performance.now() - t) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const serverCpu = postgresCpuMicros(postmaster) - server0;
  await worker.stop();
  const { rows: counts } = await root.query(`select count(*)::int as tasks from queues.task`);
  console.log(
    `${PROCESSES} email processes, concurrency ${CONCURRENCY}: ${(PROCESSES / seconds).toFixed(1)} processes/s, ` +
      `${(counts[0].tasks / PROCESSES).toFixed(1)} tasks per process; ` +
      `this process's CPU ${((cpu.user + cpu.system) / PROCESSES).toFixed(0)} µs per process (worker and fake Resend); ` +
      `PostgreSQL CPU ${(serverCpu / PROCESSES).toFixed(0)} µs per process`,
  );
  // Statements per process: every statement executed (nested ones, inside the queue's
  // functions, included) and the top-level ones alone (one a round trip), this probe's own
  // polling left out.
  const { rows: totals } = await root.query(
    `select coalesce(sum(calls), 0)::float8 / $1 as all_per_process,
            coalesce(sum(calls) filter (where toplevel), 0)::float8 / $1 as toplevel_per_process,
            coalesce(sum(plans) filter (where not toplevel), 0)::float8 / $1 as nested_plans_per_process,
            coalesce(sum(total_plan_time) filter (where not toplevel), 0)::float8 * 1000 / $1 as nested_plan_us
       from pg_stat_statements
      where query not ilike '%pg_stat_statements%' and query not ilike '%send_email_task_succeeded)::int%'
        and dbid = (select oid from pg_database where datname = current_database())`,
    [PROCESSES],
  );
  console.log(
    `statements per process: ${totals[0].all_per_process.toFixed(1)} (nested included), ` +
      `${totals[0].toplevel_per_process.toFixed(1)} top-level (round trips); nested statements planned ` +
      `${totals[0].nested_plans_per_process.toFixed(2)} times per process, ${totals[0].nested_plan_us.toFixed(0)} µs`,
  );
  const { rows } = await root.query(
    `
    select toplevel as top, calls, plans, round((total_exec_time * 1000 / $1)::numeric, 1) as us_per_process,
           round((total_exec_time / nullif(calls, 0))::numeric, 3) as ms_per_call,
           round((total_plan_time * 1000 / $1)::numeric, 1) as plan_us_per_process,
           regexp_replace(left(query, 90), '\\s+', ' ', 'g') as query
      from pg_stat_statements
     where query not ilike '%pg_stat_statements%' and query not ilike '%send_email_task_succeeded)::int%'
       and (not $2 or plans * 2 > calls)
     order by ${{ plan: 'total_plan_time', calls: 'calls' }[process.env.SORT] ?? 'total_exec_time + total_plan_time'} desc limit ${Number(process.env.TOP ?? 25)}`,
    [PROCESSES, Boolean(process.env.REPLANNED)],
  );
  console.table(rows);
  if (process.env.FUNCTIONS) {
    // The counters of a backend reach the view when it reports them: at its exit at the latest.
    await root.query('select pg_stat_force_next_flush()');
    const { rows: functions } = await root.query(
      `select schemaname || '.' || funcname as function, calls,
              round((self_time * 1000 / $1)::numeric, 1) as self_us_per_process,
              round((total_time * 1000 / $1)::numeric, 1) as total_us_per_process
         from pg_stat_user_functions order by self_time desc limit ${Number(process.env.FUNCTIONS)}`,
      [PROCESSES],
    );
    console.table(functions);
  }
  await root.end();
} finally {
  await resend.close?.();
  await server.stop({ destroy: true });
}
