// The SQL of three queue data models, side by side on one throw-away server, with no worker:
// K connections each loop claim-B, "start" the claimed tasks in groups of G, and complete them
// in rounds of R, until the backlog is empty. Prints tasks/s, heap rows written per task
// (pg_stat_user_tables: inserts + updates + deletes) and WAL bytes per task, per table.
// Evidence for docs/design/hot-path.md; not part of the benchmark.
//
//   T  today's rows in miniature: a claim index row updated at the claim and deleted at the
//      completion, a lease row, a start row (per group statement, asynchronous commit) and a
//      completion row per task.
//   A  graphile-like: one mutable job row, UPDATE ... SKIP LOCKED to claim, DELETE to finish.
//   C  facts per decision (the design): the claim deletes its rows from the ready set and
//      records one lease fact naming its tasks (with at most one suspect); nothing is written
//      when a task starts; a completion round records one fact naming its tasks and their
//      start times, fenced by its lease fact (FOR SHARE, not expired, not rescued). Both
//      facts carry the range of their task ids under a GiST index, so a task's leases and
//      ends are found per task. Every claim also asks whether a lease expired (the
//      rescuer's probe); the rescue itself is run once at the end on a lease left unfinished.
//
//   node tools/bench/probes/fact-model.mjs [tasks=100000] [connections=2] [batch=500] [group=10] [round=100]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { destroyEmbedded, startEmbedded, withDatabase } from '@org/db-tools';

const TASKS = Number(process.argv[2] ?? 100000);
const CONNECTIONS = Number(process.argv[3] ?? 2);
const BATCH = Number(process.argv[4] ?? 500);
const GROUP = Number(process.argv[5] ?? 10);
const ROUND = Number(process.argv[6] ?? 100);

const MODELS = {
  T: {
    setup: `
      create table t_task (task_id bigserial primary key, task_type text not null, payload jsonb not null,
                           priority int not null default 0, scheduled_at timestamptz not null default now());
      create table t_pending (task_id bigint primary key, task_type text not null, priority int not null,
                              scheduled_at timestamptz not null, available_at timestamptz not null,
                              current_lease_id bigint, lease_count int not null default 0)
        with (fillfactor = 80);
      create index t_pending_ready on t_pending (task_type, priority desc, scheduled_at, task_id) where current_lease_id is null;
      create index t_pending_expiry on t_pending (available_at) where current_lease_id > 0;
      create table t_lease (task_lease_id bigserial, task_id bigint not null, worker text not null,
                            leased_at timestamptz not null, expires_at timestamptz not null, primary key (task_id, task_lease_id));
      create table t_started (task_id bigint not null, task_lease_id bigint not null, started_at timestamptz not null default now(),
                              primary key (task_id, task_lease_id));
      create table t_completed (task_id bigint primary key, task_lease_id bigint, completed_at timestamptz not null default now(),
                                outcome text not null);`,
    fill: `with t as (insert into t_task (task_type, payload) select 'bench', jsonb_build_object('n', g) from generate_series(1, $1) g
                      returning task_id, task_type, priority, scheduled_at)
           insert into t_pending (task_id, task_type, priority, scheduled_at, available_at)
           select task_id, task_type, priority, scheduled_at, scheduled_at from t`,
    claim: `
      with c as (select task_id from t_pending where task_type = 'bench' and current_lease_id is null and scheduled_at <= now()
                  order by priority desc, scheduled_at, task_id limit $2 for update skip locked),
           l as (insert into t_lease (task_id, worker, leased_at, expires_at)
                 select task_id, $1, now(), now() + interval '5 minutes' from c returning task_id, task_lease_id, expires_at),
           m as (update t_pending p set current_lease_id = l.task_lease_id, available_at = l.expires_at, lease_count = p.lease_count + 1
                   from l where p.task_id = l.task_id returning p.task_id, p.current_lease_id)
      select m.task_id as id, m.current_lease_id as lease, t.payload from m join t_task t using (task_id)`,
    start: (c, tasks) =>
      c.query(`insert into t_started (task_id, task_lease_id) select * from unnest($1::bigint[], $2::bigint[])`, [
        tasks.map((t) => t.id),
        tasks.map((t) => t.lease),
      ]),
    asyncStarts: true,
    complete: (c, tasks) =>
      c.query(
        `with d as (delete from t_pending p using unnest($1::bigint[], $2::bigint[]) i(task_id, lease)
                     where p.task_id = i.task_id and p.current_lease_id = i.lease returning p.task_id, p.current_lease_id)
         insert into t_completed (task_id, task_lease_id, outcome) select task_id, current_lease_id, 'succeeded' from d`,
        [tasks.map((t) => t.id), tasks.map((t) => t.lease)],
      ),
    left: `select count(*)::int as n from t_pending`,
  },
  A: {
    setup: `
      create table a_jobs (id bigserial primary key, task_identifier text not null, payload jsonb not null,
                           priority int not null default 0, run_at timestamptz not null default now(),
                           locked_at timestamptz, locked_by text, attempts int not null default 0);
      create index a_jobs_ready on a_jobs (priority, run_at, id) where locked_at is null;`,
    fill: `insert into a_jobs (task_identifier, payload) select 'bench', jsonb_build_object('n', g) from generate_series(1, $1) g`,
    claim: `
      with j as (select id from a_jobs where locked_at is null and run_at <= now() order by priority, run_at, id
                 limit $2 for update skip locked)
      update a_jobs set locked_at = now(), locked_by = $1, attempts = attempts + 1 from j where a_jobs.id = j.id
      returning a_jobs.id, 0 as lease, a_jobs.payload`,
    complete: (c, tasks, worker) =>
      c.query(`delete from a_jobs where id = any($1::bigint[]) and locked_by = $2`, [tasks.map((t) => t.id), worker]),
    left: `select count(*)::int as n from a_jobs`,
  },
  C: {
    setup: `
      create extension if not exists btree_gist;
      create table c_task (task_id bigserial primary key, task_type text not null, payload jsonb not null,
                           priority int not null default 0, scheduled_at timestamptz not null default now());
      -- The ready set: a task is here while it may be claimed (not leased, not completed).
      create table c_ready (task_id bigint primary key, task_type text not null, priority int not null,
                            scheduled_at timestamptz not null, available_at timestamptz not null,
                            suspect boolean not null default false, counted_expiries int not null default 0);
      create index c_ready_order on c_ready (task_type, priority desc, scheduled_at, task_id);
      -- One fact per claim.
      create table c_lease (lease_id bigserial primary key, worker text not null, leased_at timestamptz not null,
                            expires_at timestamptz not null, task_ids bigint[] not null, suspect_task_id bigint,
                            suspect_expiries int, task_range int8range not null);
      create index c_lease_tasks on c_lease using gist (task_range);
      create index c_lease_expiry on c_lease (expires_at);
      create table c_lease_extension (lease_id bigint not null, extended_at timestamptz not null default now(),
                                      expires_at timestamptz not null, primary key (lease_id, expires_at));
      create index c_lease_extension_expiry on c_lease_extension (expires_at);
      -- One fact per completion round: the tasks that succeeded and when each started.
      create table c_completion (completion_id bigserial primary key, lease_id bigint not null,
                                 completed_at timestamptz not null default now(), task_ids bigint[] not null,
                                 started_us bigint[] not null, task_range int8range not null);
      create index c_completion_lease on c_completion (lease_id);
      create index c_completion_tasks on c_completion using gist (task_range);
      -- One fact per expired lease whose unfinished tasks went back to the ready set.
      create table c_lease_rescued (lease_id bigint primary key, rescued_at timestamptz not null default now(),
                                    task_ids bigint[] not null);
      create table c_rescue_cursor (singleton boolean primary key default true, expired_through timestamptz not null);
      insert into c_rescue_cursor values (true, '-infinity');
      -- A completion round, fenced by its lease fact: live (its expiry or its last
      -- extension's in the future) and not rescued. The rescuer holds the lease's advisory
      -- lock exclusively while it decides; a round holds it shared, then reads (a new
      -- snapshot, after the lock) whether the lease was rescued. No row is locked, so the
      -- fence writes nothing.
      -- _task_ids sorted; _started_us parallel to it, microseconds since the epoch (sent
      -- as text, a timestamptz[] of 100 cost more to parse than the insert).
      create function c_complete(_lease_id bigint, _task_ids bigint[], _started_us bigint[]) returns integer
        language plpgsql volatile as $fn$
      declare n integer;
      begin
        perform pg_advisory_xact_lock_shared(_lease_id);
        insert into c_completion (lease_id, task_ids, started_us, task_range)
        select l.lease_id, _task_ids, _started_us, int8range(_task_ids[1], _task_ids[cardinality(_task_ids)], '[]')
          from c_lease l
         where l.lease_id = _lease_id
           and greatest(l.expires_at, (select max(e.expires_at) from c_lease_extension e where e.lease_id = l.lease_id)) > now()
           and not exists (select 1 from c_lease_rescued r where r.lease_id = l.lease_id);
        get diagnostics n = row_count;
        return n;
      end $fn$;
      -- The rescuer: every lease whose expiry (its own, or its last extension's) passed,
      -- not rescued yet: its tasks without a completion go back to the ready set, and the
      -- designated suspect's expiry is counted. Each lease's advisory lock is taken
      -- exclusively first (waiting for rounds in flight), then the facts are read anew.
      create function c_rescue(out leases integer, out tasks integer) language plpgsql volatile as $fn$
      declare _expired bigint[];
      begin
        select array_agg(l.lease_id order by l.lease_id) into _expired
          from c_lease l
         where l.expires_at > (select expired_through from c_rescue_cursor) and l.expires_at <= now()
           and coalesce((select max(e.expires_at) from c_lease_extension e where e.lease_id = l.lease_id), '-infinity') <= now()
           and not exists (select 1 from c_lease_rescued r where r.lease_id = l.lease_id);
        perform pg_advisory_xact_lock(x) from unnest(coalesce(_expired, '{}')) x order by x;
        with unfinished as (
          select l.lease_id, u.task_id,
                 case when u.task_id = l.suspect_task_id then l.suspect_expiries + 1 else 0 end as counted
            from c_lease l cross join lateral unnest(l.task_ids) u(task_id)
           where l.lease_id = any (_expired)
             and not exists (select 1 from c_completion c where c.lease_id = l.lease_id and u.task_id = any (c.task_ids))),
        rescued as (
          insert into c_lease_rescued (lease_id, task_ids)
          select x, coalesce((select array_agg(u.task_id) from unfinished u where u.lease_id = x), '{}')
            from unnest(coalesce(_expired, '{}')) x
          on conflict do nothing
          returning lease_id),
        back as (
          insert into c_ready (task_id, task_type, priority, scheduled_at, available_at, suspect, counted_expiries)
          select t.task_id, t.task_type, t.priority, t.scheduled_at, now(), true, u.counted
            from unfinished u join c_task t using (task_id)
          returning task_id)
        select (select count(*) from rescued)::int, (select count(*) from back)::int into leases, tasks;
      end $fn$;`,
    fill: `with t as (insert into c_task (task_type, payload) select 'bench', jsonb_build_object('n', g) from generate_series(1, $1) g
                      returning task_id, task_type, priority, scheduled_at)
           insert into c_ready (task_id, task_type, priority, scheduled_at, available_at)
           select task_id, task_type, priority, scheduled_at, scheduled_at from t`,
    claim: `
      with r as (
        -- the rescuer's probe: is any lease (or its last extension) past its expiry since the last rescue?
        select exists (select 1 from c_lease l where l.expires_at > (select expired_through from c_rescue_cursor) and l.expires_at <= now()
                       limit 1) as due),
      c as (delete from c_ready where task_id = any (array(
              select task_id from c_ready where task_type = 'bench' and scheduled_at <= now() and available_at <= now()
               order by priority desc, scheduled_at, task_id limit $2 for update skip locked))
            returning task_id, suspect, counted_expiries),
      l as (insert into c_lease (worker, leased_at, expires_at, task_ids, suspect_task_id, suspect_expiries, task_range)
            select $1, now(), now() + interval '5 minutes', array_agg(task_id order by task_id),
                   min(task_id) filter (where suspect), min(counted_expiries) filter (where suspect), int8range(min(task_id), max(task_id), '[]')
              from c having count(*) > 0
            returning lease_id, task_ids)
      select l.lease_id as lease, t.task_id as id, t.payload, (select due from r) as rescue_due
        from l cross join lateral unnest(l.task_ids) u(id) join c_task t on t.task_id = u.id`,
    complete: (c, tasks, _worker, startedAt) => {
      const ids = tasks.map((t) => Number(t.id)).sort((x, y) => x - y);
      const us = Math.round(startedAt.getTime() * 1000);
      return c.query(`select c_complete($1, $2::bigint[], $3::bigint[]) as n`, [
        tasks[0].lease,
        ids,
        ids.map(() => us),
      ]);
    },
    left: `select count(*)::int as n from c_ready`,
    // The rescuer: every lease whose expiry (its own, or its last extension's) passed since
    // the cursor, not rescued yet: its tasks without a completion go back to the ready set,
    // and the designated suspect's expiry is counted.
    rescue: `select * from c_rescue()`,
  },
};

async function startServer() {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'fact-model-'));
  const embedded = await startEmbedded({ dataDir: path.join(folder, 'data') });
  const url = (db) => withDatabase(embedded.rootUrl, db);
  return {
    async createDatabase(name) {
      const c = new pg.Client({ connectionString: embedded.rootUrl });
      await c.connect();
      await c.query(`create database ${name}`); // a fixed name of this file, not input
      await c.end();
      return url(name);
    },
    async stop() {
      await destroyEmbedded(embedded);
      fs.rmSync(folder, { recursive: true, force: true });
    },
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const server = await startServer();
try {
  const results = [];
  const tables = [];
  for (const [name, m] of Object.entries(MODELS)) {
    const url = await server.createDatabase(`model_${name.toLowerCase()}`);
    const admin = new pg.Client({ connectionString: url });
    admin.on('error', () => {}); // the server's stop at the end
    await admin.connect();
    await admin.query(m.setup);
    await admin.query(m.fill, [TASKS]);
    await admin.query('vacuum analyze');
    await admin.query('checkpoint');
    const stat = async () => {
      const { rows: w } = await admin.query(`select (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint as wal`);
      const { rows } = await admin.query(
        `select relname, (n_tup_ins + n_tup_upd + n_tup_del)::bigint as n from pg_stat_user_tables`,
      );
      return { wal: Number(w[0].wal), tables: new Map(rows.map((r) => [r.relname, Number(r.n)])) };
    };
    await sleep(1200);
    const s0 = await stat();
    const clients = await Promise.all(
      Array.from({ length: CONNECTIONS }, async () => {
        const c = new pg.Client({ connectionString: url });
        await c.connect();
        return c;
      }),
    );
    const starters = m.start
      ? await Promise.all(
          clients.map(async () => {
            const c = new pg.Client({
              connectionString: url,
              options: m.asyncStarts ? '-c synchronous_commit=off' : undefined,
            });
            await c.connect();
            return c;
          }),
        )
      : [];
    let done = 0;
    let rescueDue = 0;
    const spent = { claim: 0, start: 0, complete: 0 }; // ms of round trips, all connections
    const t0 = performance.now();
    await Promise.all(
      clients.map(async (c, i) => {
        const worker = `w${i}`;
        for (;;) {
          let t = performance.now();
          const { rows } = await c.query(m.claim, [worker, BATCH]);
          spent.claim += performance.now() - t;
          if (rows.length === 0) return;
          if (rows[0].rescue_due) rescueDue++;
          const startedAt = new Date();
          t = performance.now();
          if (m.start)
            for (let s = 0; s < rows.length; s += GROUP) await m.start(starters[i], rows.slice(s, s + GROUP));
          spent.start += performance.now() - t;
          t = performance.now();
          for (let s = 0; s < rows.length; s += ROUND) {
            const { rowCount, rows: answer } = await m.complete(c, rows.slice(s, s + ROUND), worker, startedAt);
            if (rowCount === 0 || answer[0]?.n === 0) throw new Error(`model ${name}: a completion round was refused`);
          }
          spent.complete += performance.now() - t;
          done += rows.length;
        }
      }),
    );
    const secs = (performance.now() - t0) / 1000;
    for (const c of [...clients, ...starters]) await c.end();
    await sleep(1500);
    const s1 = await stat();
    const left = (await admin.query(m.left)).rows[0].n;
    let rows = 0;
    for (const [rel, n] of s1.tables) {
      const d = n - (s0.tables.get(rel) ?? 0);
      if (d === 0) continue;
      rows += d;
      tables.push({ model: name, table: rel, rowsPerTask: (d / done).toFixed(4) });
    }
    results.push({
      model: name,
      tasks: done,
      left,
      tasksPerSec: Math.round(done / secs),
      rowsPerTask: (rows / done).toFixed(3),
      walBytesPerTask: Math.round((s1.wal - s0.wal) / done),
      rescueProbesDue: rescueDue,
      claimUs: ((spent.claim * 1000) / done).toFixed(1),
      startUs: ((spent.start * 1000) / done).toFixed(1),
      completeUs: ((spent.complete * 1000) / done).toFixed(1),
    });
    if (m.rescue) {
      // A lease left unfinished: claim 5, complete 2, let it expire, rescue.
      await admin.query(`insert into c_task (task_type, payload) select 'bench', '{}' from generate_series(1, 5)`);
      await admin.query(
        `insert into c_ready (task_id, task_type, priority, scheduled_at, available_at)
         select task_id, task_type, priority, scheduled_at, scheduled_at from c_task where task_id > $1`,
        [TASKS],
      );
      const { rows: claimed } = await admin.query(m.claim, ['dying', 5]);
      await m.complete(admin, claimed.slice(0, 2), 'dying', new Date());
      await admin.query(`update c_lease set expires_at = now() - interval '1 second' where lease_id = $1`, [
        claimed[0].lease,
      ]); // (only the prototype moves the clock this way; the facts are append-only in the design)
      const { rows: rescued } = await admin.query(m.rescue);
      const { rows: back } = await admin.query(`select count(*)::int as n from c_ready`);
      console.log(
        `model C rescue: ${rescued[0].leases} expired lease, ${rescued[0].tasks} unfinished tasks back in the ready set (expected 3; ready set holds ${back[0].n})`,
      );
      const { rows: read } = await admin.query(
        `explain (analyze, costs off, timing off, summary off)
         select l.lease_id, l.leased_at, c.completed_at,
                to_timestamp(c.started_us[array_position(c.task_ids, $1::bigint)] / 1e6) as started_at
           from c_lease l left join c_completion c on c.lease_id = l.lease_id and $1::bigint = any (c.task_ids)
          where l.task_range @> $1::bigint and $1::bigint = any (l.task_ids)`,
        [Math.floor(TASKS / 2)],
      );
      console.log(
        `model C, one task's leases and ends, read per task:\n${read.map((r) => r['QUERY PLAN']).join('\n')}`,
      );
    }
    await admin.end();
  }
  console.table(results);
  console.table(tables);
} catch (error) {
  console.error(error);
  process.exitCode = 1;
} finally {
  await server.stop();
}
