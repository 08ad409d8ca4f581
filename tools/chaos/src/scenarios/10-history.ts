// 10. Partition maintenance under chaos: history sets of 100 task ids with a 3-second
// retention, so that maintenance creates and drops sets all through the run, while
// workers are killed with SIGKILL and PostgreSQL is restarted twice. Halfway, maintenance
// pauses and task ids jump past every set, so that the tasks of the next seconds fall
// into the default partitions (as when ids outrun maintenance) and are claimed, run and
// completed there; once it resumes, maintenance must move them, with their facts, into
// sets of their own. Every enqueued task must complete exactly once or still be there; a
// dropped set may hold only tasks that completed before the window; none is left in the
// default partitions.
import { Report, round, sleep, waitFor, type Scenario } from '../harness.js';
import { fastEnv, killAll, startWorker, stopWorker, type WorkerProcess } from '../workers.js';

const PARTITION_SIZE = 100;
const RETENTION_SECONDS = 3;

/** One step of maintenance (queues.maintain_history_step_at). */
interface MaintenanceStep {
  action: string;
  more: boolean;
  tasks?: number;
  lower_bound?: number;
  upper_bound?: number;
}

export const scenario: Scenario = {
  id: 10,
  name: 'history',
  title: 'kill -9 workers and restart PostgreSQL while history partitions are created and dropped',
  fast: false,
  async run({ db, quick, log, restartServer }) {
    const r = new Report();
    if (!restartServer) return { figures: {}, checks: [], skipped: 'needs a server the harness owns (CLI only)' };
    const seconds = quick ? 25 : 60;
    const tag = `s10-${Date.now().toString(36)}`;
    const owner = db.pool('owner');
    const before = (
      await owner.query(
        'select partition_size, partitions_ahead, retention::text as retention, lock_timeout_ms from queues.history_setting',
      )
    ).rows[0];

    // Small sets and a short window. Task ids restart above every set made so far, so the
    // scenario's tasks fall into the small sets only.
    await owner.query(
      `update queues.history_setting
          set partition_size = $1, partitions_ahead = 2, retention = make_interval(secs => $2), lock_timeout_ms = 100`,
      [PARTITION_SIZE, RETENTION_SECONDS],
    );
    const top = Number(
      (
        await owner.query(
          `select greatest(coalesce(max(upper_bound), 0), (select coalesce(max(task_id), 0) + 1 from queues.task)) as top
             from queues.history_partitions() where not is_default`,
        )
      ).rows[0].top,
    );
    await owner.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [top]);
    const firstDrop = Number(
      (
        await owner.query(
          'select coalesce(max(history_partition_dropped_id), 0) as id from queues.history_partition_dropped',
        )
      ).rows[0].id,
    );
    await owner.query('select queues.maintain_history_at(now())');

    const env = fastEnv(db.url('worker'), { WORKER_ROLE: 'db_function' });
    const workers: WorkerProcess[] = [];
    const all: WorkerProcess[] = [];
    const spawn = () => {
      const w = startWorker({ env, prefix: 's10' });
      workers.push(w);
      all.push(w);
    };
    for (let i = 0; i < 3; i++) spawn();

    // The load: 5 steps every 200 ms, each recorded with its id. A call that failed (the
    // server restarting) may still have committed: its keys are "uncertain".
    const ids: number[] = [];
    const keys: string[] = [];
    const uncertain: string[] = [];
    let enqueueErrors = 0;
    let running = true;
    let n = 0;
    const load = (async () => {
      while (running) {
        const t0 = Date.now();
        const batch = Array.from({ length: 5 }, () => `${tag}-${n++}`);
        try {
          const { rows: enqueued } = await owner.query('select task_id from queues.enqueue_many($1::jsonb)', [
            JSON.stringify(
              batch.map((key) => ({
                task_type: 'db_function',
                payload: { db_function: 'chaos.step', key, sleep: Math.round(Math.random() * 50) / 1000 },
              })),
            ),
          ]);
          // Each id with its key, read back (retried while the server restarts).
          let rows: { task_id: string; key: string }[] = [];
          await waitFor(
            async () => {
              rows = (
                await owner.query(
                  `select task_id, payload->>'key' as key from queues.task where task_id = any($1::bigint[])`,
                  [enqueued.map((e) => e.task_id)],
                )
              ).rows;
              return true;
            },
            60_000,
            100,
          );
          if (rows.length < enqueued.length) uncertain.push(...batch);
          for (const row of rows) {
            ids.push(Number(row.task_id));
            keys.push(row.key);
          }
        } catch {
          enqueueErrors++;
          uncertain.push(...batch);
        }
        await sleep(Math.max(0, 200 - (Date.now() - t0)));
      }
    })();

    // Maintenance as the schedule runs it (queues.maintain_history_step, called again while
    // it says more, each step a transaction of its own), a run every 300 ms: a restart or a
    // failure between two steps leaves a set half made or half dropped for the next run.
    const maintenance = {
      runs: 0,
      errors: 0,
      created: 0,
      dropped: 0,
      /** The ranges of the sets made of tasks moved out of the default partitions. */
      adopted: [] as [number, number][],
      adoptedTasks: 0,
      skipped: 0,
      okAfterLastRestart: 0,
    };
    let lastRestartAt = 0;
    let maintaining = true;
    // While paused, no run starts; `inRun` says whether one is under way.
    let paused = false;
    let inRun = false;
    const maintainer = (async () => {
      while (maintaining) {
        if (paused) {
          await sleep(50);
          continue;
        }
        inRun = true;
        try {
          for (;;) {
            const { rows } = await owner.query<{ r: MaintenanceStep }>(
              'select queues.maintain_history_step_at(now()) as r',
            );
            const step = rows[0]!.r;
            if (step.action === 'set_created') maintenance.created++;
            if (step.action === 'set_dropped') maintenance.dropped++;
            if (step.action === 'set_adopted') {
              maintenance.adopted.push([Number(step.lower_bound), Number(step.upper_bound)]);
              maintenance.adoptedTasks += Number(step.tasks ?? 0);
            }
            if (step.action === 'skipped') maintenance.skipped++;
            if (!step.more) break;
          }
          maintenance.runs++;
          if (lastRestartAt > 0) maintenance.okAfterLastRestart++;
        } catch {
          maintenance.errors++;
        } finally {
          inRun = false;
        }
        await sleep(300);
      }
    })();

    // Chaos: SIGKILL a worker every 2-3 s (a new one replaces it); restart PostgreSQL at a
    // third and at two thirds of the run.
    let kills = 0;
    const restarts: number[] = [];
    const started = Date.now();
    // The pause: the first id past the sets, and how many tasks of the default partitions
    // were leased and waiting when maintenance resumed.
    let gap: { from: number; leasedAtMove: number; waitingAtMove: number } | undefined;
    try {
      const restartAt = [started + (seconds * 1000) / 3, started + (seconds * 2000) / 3];
      while (Date.now() - started < seconds * 1000) {
        await sleep(2000 + Math.random() * 1000);
        if (gap === undefined && Date.now() - started >= (seconds * 1000) / 2) {
          paused = true;
          await waitFor(() => Promise.resolve(!inRun), 60_000, 20);
          const { rows } = await owner.query(
            `select coalesce(max(upper_bound), 0) as top, (select coalesce(max(task_id), 0) from queues.task) as last
               from queues.history_partitions() where not is_default`,
          );
          // Past every set, not on a set boundary, and past every task id in use: the
          // scenarios before this one in a run may have left tasks in the default partition
          // beyond the sets, and a sequence moved back onto them would enqueue duplicates.
          let from = Math.max(Number(rows[0].top) + 10 * PARTITION_SIZE + 37, Number(rows[0].last) + 1);
          if (from % PARTITION_SIZE === 0) from++;
          await owner.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1, false)`, [from]);
          // Beside the load: five tasks that run for 4 s (running, or waiting for a new
          // lease after a kill, when their tasks are moved) and five due in 4 s (waiting).
          const extra = [
            ...Array.from({ length: 5 }, (_, i) => ({ key: `${tag}-gap-slow-${i}`, sleep: 4, after: 0 })),
            ...Array.from({ length: 5 }, (_, i) => ({ key: `${tag}-gap-later-${i}`, sleep: 0, after: 4 })),
          ];
          const { rows: enqueued } = await owner.query<{ task_id: string }>(
            'select task_id from queues.enqueue_many($1::jsonb)',
            [
              JSON.stringify(
                extra.map((x) => ({
                  task_type: 'db_function',
                  payload: { db_function: 'chaos.step', key: x.key, sleep: x.sleep },
                  scheduled_at: new Date(Date.now() + x.after * 1000).toISOString(),
                })),
              ),
            ],
          );
          // In input order (enqueue_many returns the ids in the order of its elements).
          enqueued.forEach((row, i) => {
            ids.push(Number(row.task_id));
            keys.push(extra[i]!.key);
          });
          // The load goes on (about 25 tasks a second) and workers run them, one of them
          // killed meanwhile.
          await sleep(1200);
          const victim = workers[Math.floor(Math.random() * workers.length)]!;
          victim.process.kill('SIGKILL');
          await victim.exited;
          workers.splice(workers.indexOf(victim), 1);
          kills++;
          spawn();
          await sleep(1200);
          const { rows: last } = await owner.query(
            `select count(*) filter (where p.current_lease_id is not null)::int as leased,
                    count(*) filter (where p.task_id is not null and p.current_lease_id is null)::int as waiting
               from queues.task_default t left join queues.task_pending_or_held p using (task_id)`,
          );
          gap = {
            from,
            leasedAtMove: last[0].leased,
            waitingAtMove: last[0].waiting,
          };
          paused = false;
          continue;
        }
        if (restartAt.length > 0 && Date.now() >= restartAt[0]!) {
          restartAt.shift();
          const t0 = Date.now();
          lastRestartAt = 0;
          await restartServer();
          restarts.push(Date.now() - t0);
          lastRestartAt = Date.now();
          maintenance.okAfterLastRestart = 0;
          continue;
        }
        const victim = workers[Math.floor(Math.random() * workers.length)]!;
        victim.process.kill('SIGKILL');
        await victim.exited;
        workers.splice(workers.indexOf(victim), 1);
        kills++;
        spawn();
      }
    } finally {
      running = false;
      await load;
    }
    log(`  ${kills} kills, ${restarts.length} restarts in ${Math.round((Date.now() - started) / 1000)} s; draining`);

    // Drained: every recorded task still in queues.task is completed (a dropped one was).
    const open = async () =>
      Number(
        (
          await owner.query(
            `select count(*) as n from unnest($1::bigint[]) i(id)
               join queues.task t on t.task_id = i.id
              where not exists (select 1 from queues.task_end c where c.task_id = i.id)`,
            [ids],
          )
        ).rows[0].n,
      );
    const drained = await waitFor(async () => (await open()) === 0, 90_000, 250);
    // One more window, so that the last sets can go too while workers are still up.
    await sleep((RETENTION_SECONDS + 1) * 1000);
    maintaining = false;
    await maintainer;
    const exits = await Promise.all(workers.map((w) => stopWorker(w)));
    killAll(all);

    const outcome = (
      await owner.query(
        `with x as (select * from unnest($1::bigint[], $2::text[]) x(id, key)),
              dropped as (select * from queues.history_partition_dropped d where d.history_partition_dropped_id > $3),
              placed as (
                select x.id, x.key,
                       exists (select 1 from queues.task t where t.task_id = x.id) as present,
                       (select d.dropped_at from dropped d where x.id >= d.lower_bound and x.id < d.upper_bound) as dropped_at,
                       exists (select 1 from unnest($5::bigint[], $6::bigint[]) a(lo, hi)
                                where x.id >= a.lo and x.id < a.hi) as moved
                  from x)
         select count(*) filter (where not present and dropped_at is null)::int as lost,
                count(*) filter (where dropped_at is not null)::int as in_dropped_sets,
                count(*) filter (where present)::int as present,
                count(*) filter (where p.moved)::int as moved,
                count(*) filter (where p.moved and dropped_at is not null)::int as moved_dropped,
                -- A dropped task whose step had not committed before the drop minus the
                -- window: it was pending (or too recent) when its set went.
                count(*) filter (where dropped_at is not null and not exists (
                  select 1 from chaos.effect e
                   where e.task_key = p.key and e.created_at <= p.dropped_at - make_interval(secs => $4)))::int
                  as dropped_not_completed_in_time,
                count(*) filter (where present and exists (
                  select 1 from queues.task_end c where c.task_id = p.id and c.outcome <> 'succeeded'))::int
                  as not_succeeded
           from placed p`,
        [
          ids,
          keys,
          firstDrop,
          RETENTION_SECONDS,
          maintenance.adopted.map(([lo]) => lo),
          maintenance.adopted.map(([, hi]) => hi),
        ],
      )
    ).rows[0];
    const effects = (
      await owner.query(
        `with k as (select unnest($1::text[]) as key),
              u as (select unnest($2::text[]) as key),
              e as (select task_key, count(*) as n from chaos.effect where task_key like $3 || '-%' group by task_key)
         select (select count(*) from k where not exists (select 1 from e where e.task_key = k.key))::int as missing,
                (select count(*) from e where e.n > 1)::int as duplicated,
                (select count(*) from u join e on e.task_key = u.key)::int as uncertain_ran`,
        [keys, uncertain, tag],
      )
    ).rows[0];
    const drops = (
      await owner.query(
        `select count(*)::int as sets, coalesce(sum(tasks), 0)::int as tasks,
                count(*) filter (where last_completed_at > dropped_at - make_interval(secs => $2))::int as too_recent,
                count(*) filter (where lower_bound >= $3)::int as scenario_sets
           from queues.history_partition_dropped where history_partition_dropped_id > $1`,
        [firstDrop, RETENTION_SECONDS, top],
      )
    ).rows[0];
    const status = (await owner.query('select queues.history_status_at(now()) as s')).rows[0].s;
    // The sets made of moved tasks that are still there, each with what a drop checks: a
    // set is dropped only once the last task id handed out lies above it, so the set that
    // holds the last id stays by design; any other must have gone, and its tasks say why
    // it did not (unended, on a claim-index row, in a ready batch, under a live lease).
    const lastId = Number((await owner.query('select queues.last_task_id() as id')).rows[0].id);
    const keptMoved = (
      await owner.query<{
        lo: string;
        hi: string;
        tasks: number;
        unended: number;
        rows: number;
        batched: number;
        leased: number;
      }>(
        `select a.lo::text, a.hi::text,
                (select count(*) from queues.task t where t.task_id >= a.lo and t.task_id < a.hi)::int as tasks,
                (select count(*) from queues.task t where t.task_id >= a.lo and t.task_id < a.hi
                    and not exists (select 1 from queues.task_end c where c.task_id = t.task_id))::int as unended,
                (select count(*) from queues.task_pending p where p.task_id >= a.lo and p.task_id < a.hi)::int as rows,
                (select count(*) from queues.task_ready_batch b cross join lateral unnest(b.task_ids[b.taken + 1:]) u(id)
                  where u.id >= a.lo and u.id < a.hi)::int as batched,
                (select count(*) from queues.task_lease_effective l
                  where l.task_id >= a.lo and l.task_id < a.hi and l.expires_at > now())::int as leased
           from unnest($1::bigint[], $2::bigint[]) a(lo, hi)
          where exists (select 1 from queues.task t where t.task_id >= a.lo and t.task_id < a.hi)`,
        [maintenance.adopted.map(([lo]) => lo), maintenance.adopted.map(([, hi]) => hi)],
      )
    ).rows;
    const keptBelowLast = keptMoved.filter((k) => Number(k.hi) <= lastId);

    r.figure('duration (s)', seconds);
    r.figure('partition size (task ids) / retention (s)', `${PARTITION_SIZE} / ${RETENTION_SECONDS}`);
    r.figure('tasks enqueued (recorded)', ids.length);
    r.figure('enqueue calls refused while down', enqueueErrors);
    r.figure('tasks of refused calls that ran anyway', effects.uncertain_ran);
    r.figure('worker kills (SIGKILL)', kills);
    r.figure('PostgreSQL restarts (s each)', restarts.map((ms) => round(ms / 1000, 2)).join(', ') || 'none');
    r.figure('maintenance runs / failed (server down)', `${maintenance.runs} / ${maintenance.errors}`);
    r.figure('sets created / dropped by maintenance', `${maintenance.created} / ${maintenance.dropped}`);
    r.figure('steps skipped (lock timeout, retried next run)', maintenance.skipped);
    r.figure('tasks in dropped sets', outcome.in_dropped_sets);
    r.figure('tasks still in history', outcome.present);
    r.figure(
      'tasks moved out of the default partitions (enqueued while ids ran past the sets) / sets made of them',
      `${outcome.moved} / ${maintenance.adopted.length}`,
    );
    r.figure(
      'of them pending when maintenance resumed: leased / waiting',
      gap ? `${gap.leasedAtMove} / ${gap.waitingAtMove}` : 'n/a',
    );
    r.figure('of them, dropped with their set after the window', outcome.moved_dropped);
    r.figure('tasks in the default partition at the end', status.default_partition_tasks);
    r.figure('lost tasks', outcome.lost);
    r.figure('pending tasks dropped', outcome.dropped_not_completed_in_time);

    r.check(
      "maintenance created and dropped sets holding this run's tasks",
      maintenance.created > 0 && drops.scenario_sets > 0 && outcome.in_dropped_sets > 0,
      JSON.stringify({ created: maintenance.created, drops }),
    );
    r.check(
      'maintenance ran again after the last restart',
      restarts.length === 2 && maintenance.okAfterLastRestart > 0,
      JSON.stringify({ restarts: restarts.length, okAfterLastRestart: maintenance.okAfterLastRestart }),
    );
    r.check('every task completed or is still there (0 lost)', drained && outcome.lost === 0, JSON.stringify(outcome));
    r.equal(
      '0 pending tasks dropped: a dropped set held only tasks completed before the window',
      outcome.dropped_not_completed_in_time,
      0,
    );
    r.equal('every dropped set completed before the window (its own record)', drops.too_recent, 0);
    r.equal(
      'every step took effect exactly once',
      { missing: effects.missing, duplicated: effects.duplicated },
      {
        missing: 0,
        duplicated: 0,
      },
    );
    r.equal('no task failed or was abandoned', outcome.not_succeeded, 0);
    r.check(
      'tasks fell into the default partitions while ids ran past the sets, some still pending, and maintenance moved them out',
      gap !== undefined &&
        gap.leasedAtMove + gap.waitingAtMove > 0 &&
        maintenance.adoptedTasks > 0 &&
        // (tasks enqueued into the newest moved set after it was made count as moved
        // by their id, not in what the adoption reported)
        outcome.moved >= maintenance.adoptedTasks,
      JSON.stringify({
        gap,
        moved: outcome.moved,
        adopted: maintenance.adopted,
        adoptedTasks: maintenance.adoptedTasks,
      }),
    );
    r.check(
      'the moved tasks were dropped with their set after the window (but for the set holding the last task id)',
      keptBelowLast.length === 0,
      JSON.stringify({ moved: outcome.moved, dropped: outcome.moved_dropped, lastId, kept: keptMoved }),
    );
    r.equal('no task left in the default partitions', Number(status.default_partition_tasks), 0);
    r.check(
      'surviving workers stopped with exit 0',
      exits.every((e) => e.code === 0),
      JSON.stringify(exits),
    );

    await owner.query(
      `update queues.history_setting
          set partition_size = $1, partitions_ahead = $2, retention = $3, lock_timeout_ms = $4`,
      [before.partition_size, before.partitions_ahead, before.retention, before.lock_timeout_ms],
    );
    await owner.query('delete from queues.task_pending where task_id = any($1::bigint[])', [ids]);
    await owner.query('delete from queues.task_ready_batch where task_ids && $1::bigint[]', [ids]);
    return r.result();
  },
};
