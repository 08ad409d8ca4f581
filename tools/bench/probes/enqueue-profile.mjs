// Where an enqueued task's time goes, no worker: enqueue one by one from 10 callers and in
// batches of 1,000 as the app database user, with pg_stat_statements (track = all, so the
// statements inside the queue's functions are listed), the rows and WAL written per task,
// the notifications a listener receives, and what the callers wait on (pg_stat_activity
// sampled every 5 ms); then the CPU per task of the server process and of the caller, one
// caller at a time; then one enqueue and one batch of 1,000 under auto_explain (nested
// statements, triggers, buffers, WAL). Not part of the benchmark; evidence for
// BENCHMARKS.md ("where a task's time goes").
//
//   node tools/bench/probes/enqueue-profile.mjs [single=4000] [batches=20] [explain=1]
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { provisionDatabase } from '@org/db-tools';
import { openStatementsServer } from './statements-server.mjs';
import { enqueue, enqueueMany } from '@org/queue-client';

const SINGLE = Number(process.argv[2] ?? 4000);
const BATCHES = Number(process.argv[3] ?? 20);
const EXPLAIN = (process.argv[4] ?? '1') === '1';
const CALLERS = 10;
const CLOCK_TICKS = 100; // USER_HZ: /proc/<pid>/stat counts CPU time in these
const name = `bench-enqueue-${process.pid}`;

const server = await openStatementsServer(name, {
  log: process.env.PROBE_LOG ? (l) => console.error(l) : undefined,
});
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const rootUrl = new URL(server.rootUrl);
  rootUrl.pathname = '/probe';
  const root = new pg.Pool({ connectionString: rootUrl.toString(), max: 2 });
  await root.query('create extension if not exists pg_stat_statements');
  await root.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
  const app = new pg.Pool({ connectionString: urls.app, max: CALLERS });
  app.on('error', () => {});
  root.on('error', () => {});
  await Promise.all(Array.from({ length: CALLERS }, () => app.connect())).then((cs) => cs.forEach((c) => c.release()));

  const listener = new pg.Client({ connectionString: rootUrl.toString() });
  await listener.connect();
  let notifications = 0;
  listener.on('notification', () => notifications++);
  await listener.query('listen queues_task_ready');
  // CPU time (user + system, ms) of server processes, from /proc.
  const cpuMs = (pids) =>
    pids.reduce((sum, p) => {
      const f = readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1].split(' ');
      return sum + ((Number(f[11]) + Number(f[12])) * 1000) / CLOCK_TICKS;
    }, 0);
  const settle = () => new Promise((resolve) => setTimeout(resolve, 1100));

  // WAL from the insert position (exact, whoever wrote it); rows by counting and
  // transactions by transaction ids handed out (the cumulative statistics of other
  // backends arrive up to 10 s late).
  const counters = async () => {
    const { rows } = await root.query(`
      select pg_current_wal_insert_lsn() - '0/0'::pg_lsn as wal_bytes,
             (select count(*) from queues.task)::bigint as task_rows,
             (select count(*) from queues.task_pending)::bigint as pending_rows,
             pg_snapshot_xmax(pg_current_snapshot())::text::bigint as xids`);
    return rows[0];
  };
  const delta = (before, after, per) =>
    Object.fromEntries(
      Object.keys(after).map((k) => [k, Math.round(((Number(after[k]) - Number(before[k])) / per) * 100) / 100]),
    );

  // What the app connections wait on, sampled.
  const sampler = () => {
    const counts = new Map();
    let stop = false;
    const done = (async () => {
      while (!stop) {
        const { rows } = await root.query(
          `select coalesce(wait_event_type || ':' || wait_event, state) as w, count(*)::int as n
             from pg_stat_activity where usename = $1 group by 1`,
          [server.dbUsers.app],
        );
        for (const r of rows) counts.set(r.w, (counts.get(r.w) ?? 0) + r.n);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    return async () => {
      stop = true;
      await done;
      const total = [...counts.values()].reduce((a, b) => a + b, 0);
      return Object.fromEntries(
        [...counts.entries()].sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, `${Math.round((v * 100) / total)}%`]),
      );
    };
  };

  const top = async (label, per) => {
    const { rows } = await root.query(
      `
      select calls, rows, round((total_exec_time * 1000 / $1)::numeric, 1) as us_per_task,
             regexp_replace(left(query, 120), '\\s+', ' ', 'g') as query
        from pg_stat_statements
       where query not ilike '%pg_stat%' and query !~* '^(begin|commit|rollback|set |vacuum|checkpoint|listen)'
       order by total_exec_time desc limit 16`,
      [per],
    );
    console.log(
      `\n== ${label}: top statements (µs per task over ${per} tasks; callers include their nested statements)`,
    );
    console.table(rows);
  };

  // 1. One by one, 10 callers, each enqueue its own transaction.
  await settle();
  notifications = 0;
  await root.query('select pg_stat_statements_reset()');
  let before = await counters();
  const appPids = (
    await root.query(`select array_agg(pid) as pids from pg_stat_activity where usename = $1`, [server.dbUsers.app])
  ).rows[0].pids;
  const cpu0 = cpuMs(appPids);
  const c0 = process.cpuUsage();
  let stopSampler = sampler();
  let t = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: CALLERS }, async () => {
      while (next < SINGLE) {
        const i = next++;
        await enqueue(app, { taskType: 'bench', payload: { n: i } });
      }
    }),
  );
  let elapsed = (performance.now() - t) / 1000;
  const c1 = process.cpuUsage(c0);
  const serverUs = ((cpuMs(appPids) - cpu0) * 1000) / SINGLE;
  let waits = await stopSampler();
  await settle();
  console.log(`enqueue one by one, ${CALLERS} callers: ${Math.round(SINGLE / elapsed)} tasks/s`);
  console.log('per task:', delta(before, await counters(), SINGLE), 'notifications received:', notifications);
  console.log(
    `CPU per task: the callers' ${appPids.length} server processes ${Math.round(serverUs)} µs, the probe ${Math.round((c1.user + c1.system) / SINGLE)} µs`,
  );
  console.log('app connections, share of samples:', waits);
  await top('enqueue one by one', SINGLE);

  // 2. Batches of 1,000, one caller.
  notifications = 0;
  await root.query('select pg_stat_statements_reset()');
  before = await counters();
  t = performance.now();
  for (let b = 0; b < BATCHES; b++) {
    await enqueueMany(
      app,
      Array.from({ length: 1000 }, (_, i) => ({ taskType: 'bench', payload: { n: b * 1000 + i } })),
    );
  }
  elapsed = (performance.now() - t) / 1000;
  await settle();
  console.log(`\nenqueue in batches of 1000: ${Math.round((BATCHES * 1000) / elapsed)} tasks/s`);
  console.log('per task:', delta(before, await counters(), BATCHES * 1000), 'notifications received:', notifications);
  await top('enqueue batches', BATCHES * 1000);

  // 3. A transaction of 10 one-by-one enqueues.
  notifications = 0;
  const c = await app.connect();
  await c.query('begin');
  for (let i = 0; i < 10; i++) await enqueue(c, { taskType: 'bench', payload: { n: i } });
  await c.query('commit');
  c.release();
  await settle();
  console.log(`\none transaction of 10 enqueues: ${notifications} notification(s)`);

  // 4. CPU per task, one caller on a pool of one connection (so its server process is
  // known): the server process's CPU from /proc (user + system), the probe's own from
  // process.cpuUsage(). Waits (commits, locks) cost no CPU, so these hold up better than
  // rates on a loaded machine.
  const one = new pg.Pool({ connectionString: urls.app, max: 1 });
  one.on('error', () => {});
  const pid = (await one.query('select pg_backend_pid() as pid')).rows[0].pid;
  const serverMs = () => cpuMs([pid]);
  const cpu = async (label, tasks, run) => {
    const s0 = serverMs();
    const c0 = process.cpuUsage();
    await run();
    const c = process.cpuUsage(c0);
    console.log(
      `${label}: server ${Math.round(((serverMs() - s0) * 1000) / tasks)} µs, client ${Math.round((c.user + c.system) / tasks)} µs per task`,
    );
  };
  console.log('');
  await cpu('CPU, enqueue one by one (1 caller)', SINGLE, async () => {
    for (let i = 0; i < SINGLE; i++) await enqueue(one, { taskType: 'bench', payload: { n: i } });
  });
  await cpu('CPU, enqueue in batches of 1000 (1 caller)', BATCHES * 1000, async () => {
    for (let b = 0; b < BATCHES; b++)
      await enqueueMany(
        one,
        Array.from({ length: 1000 }, (_, i) => ({ taskType: 'bench', payload: { n: b * 1000 + i } })),
      );
  });
  await one.end();

  // 5. auto_explain of one enqueue and of one batch of 1,000.
  if (EXPLAIN) {
    const e = await root.connect();
    e.on('notice', (n) => console.log(n.message));
    await e.query(`set auto_explain.log_min_duration = 0; set auto_explain.log_analyze = on;
      set auto_explain.log_nested_statements = on; set auto_explain.log_triggers = on;
      set auto_explain.log_buffers = on; set auto_explain.log_wal = on; set auto_explain.log_timing = on;
      set auto_explain.log_level = notice; set client_min_messages = notice`);
    await e.query(`set role ${server.dbUsers.app}`);
    console.log('\n== auto_explain: one enqueue');
    await enqueue(e, { taskType: 'bench', payload: { n: 1 } });
    console.log('\n== auto_explain: one batch of 1,000');
    await enqueueMany(
      e,
      Array.from({ length: 1000 }, (_, i) => ({ taskType: 'bench', payload: { n: i } })),
    );
    await e.query('reset role');
    e.release();
  }
  await listener.end();
  await app.end();
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
