// Partition maintenance (sql/queues/partitions.sql): sets are created ahead of need,
// dropped whole when every task in them is completed and older than the retention
// window, kept while one task is pending, and maintenance never stops the queue: run as
// the schedule runs it (one step per transaction), claims and completions proceed, and a
// step never queues for its locks: it takes them between the queue's transactions, or
// gives up after lock_timeout_ms, and no claim waits behind its request.
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
const SIZE = 10;
let base: number;

beforeAll(async () => {
  db = await createTestDatabase();
  // Small sets, starting above every set the migration made.
  const { rows } = await db.query(
    `select max(upper_bound) as top from queues.history_partitions() where not is_default`,
  );
  base = Number(rows[0].top);
  await db.query(`update queues.history_setting set partition_size = $1, partitions_ahead = 2`, [SIZE]);
  await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base - 1]);
});
afterAll(async () => {
  await db?.drop();
});

type Result = {
  created: [number, number][];
  dropped: [number, number][];
  adopted: [number, number][];
  skipped: unknown[];
  kept: number;
};
const maintain = async (at = 'now()'): Promise<Result> =>
  (await db.query(`select queues.maintain_history_at(${at}) as r`)).rows[0].r;

type Step = { action: string; table?: string; step?: string; reason?: string; more: boolean };
/**
 * Maintenance as the schedule's task runs it (the worker's db_function processor with
 * "repeat"): queues.maintain_history_step through internal.run_function as the worker,
 * each call a transaction of its own, again while it reports more. Returns every step.
 */
async function maintainAsScheduled(worker: pg.Pool | pg.ClientBase, steps: Step[] = []): Promise<Step[]> {
  for (;;) {
    const { rows } = await worker.query(`select internal.run_function('queues.maintain_history_step', '{}') as r`);
    expect(rows[0].r).toMatchObject({ success: true });
    steps.push(rows[0].r.payload);
    if (!rows[0].r.payload.more) return steps;
  }
}

async function enqueue(n: number): Promise<string[]> {
  // As the owner: db_function tasks are enqueued only by the database's own processes.
  const { rows } = await db.pool('owner').query('select task_id from queues.enqueue_many($1::jsonb)', [
    JSON.stringify(
      Array.from({ length: n }, (_, i) => ({
        task_type: 'db_function',
        payload: { db_function: 'internal.noop', i },
      })),
    ),
  ]);
  return rows.map((r) => r.task_id);
}
async function claimAll(): Promise<Map<string, string>> {
  const { rows } = await db.query(
    `select task_id, task_lease_id from queues.claim_tasks_at(now(), 'w', 1000, null, 300, 5)`,
  );
  return new Map(rows.map((r) => [r.task_id, r.task_lease_id]));
}
async function complete(leases: Map<string, string>, ids: string[]) {
  const { rows } = await db
    .pool('worker')
    .query('select result from queues.complete_tasks($1::bigint[], $2::bigint[])', [
      ids,
      ids.map((id) => leases.get(id)),
    ]);
  expect(rows.every((r) => r.result === 'completed')).toBe(true);
}
/** Settings that leave one set to make: the ids ahead of the last task id, in sets, plus one. */
const oneSetMoreAhead = `partitions_ahead = ((select max(upper_bound) from queues.history_partition_bounds())
                                             - queues.last_task_id() - 1) / partition_size + 1`;
const tasksIn = async (lo: number, hi: number) =>
  Number(
    (await db.query('select count(*) from queues.task where task_id >= $1 and task_id < $2', [lo, hi])).rows[0].count,
  );

/**
 * Maintenance at `at`, run again (at most 50 times, 100 ms apart) until it has dropped
 * every set of `sets`: a run ends early once its steps have met a lock 5 times (on a
 * loaded machine, autovacuum of a table whose rows just moved holds one, and a step does
 * not queue for it). Returns what the runs dropped and skipped.
 */
async function maintainUntilDropped(at: string, sets: [number, number][]) {
  const dropped: [number, number][] = [];
  const skipped: unknown[] = [];
  for (let run = 0; run < 50; run++) {
    const result = await maintain(at);
    dropped.push(...result.dropped);
    skipped.push(...result.skipped);
    if (sets.every(([lo, hi]) => dropped.some(([l, h]) => l === lo && h === hi))) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { dropped, skipped };
}

const defaultTasks = async () => Number((await db.query('select count(*) from queues.task_default')).rows[0].count);

/** A task id `offset` above every set there is or was and above the last task id handed out. */
async function aboveEveryRange(offset: number): Promise<number> {
  const { rows } = await db.query(
    `select greatest((select max(upper_bound) from queues.history_partition_bounds()),
                     (select max(upper_bound) from queues.history_partition_dropped),
                     queues.last_task_id()) + $1::bigint as lo`,
    [offset],
  );
  return Number(rows[0].lo);
}

/** Facts whose task, or whose lease, does not exist (no foreign keys hold these). */
async function orphans(): Promise<unknown[]> {
  const { rows } = await db.query(`
    select 'task_lease' as fact, x.task_id from queues.task_lease x where not exists (select 1 from queues.task t where t.task_id = x.task_id)
    -- A claim lease lives in the set of the largest task it names, which is kept while the
    -- lease is; a task it names from an older set may have gone before it.
    union all select 'claim_lease', x.task_id from queues.claim_lease x
     where not exists (select 1 from queues.task t where t.task_id = x.task_id)
    union all select 'task_completed', x.task_id from queues.task_completed x
     where not exists (select 1 from queues.task t where t.task_id = x.task_id)
        or (x.task_lease_id is not null and not exists (select 1 from queues.task_leases l where l.task_id = x.task_id and l.task_lease_id = x.task_lease_id))
    -- A completion round lives in the set of the largest task it names, which is kept
    -- while the round is; a task it names from an older set may have gone before it.
    union all select 'completion_round', x.task_id from queues.completion_round x
     where not exists (select 1 from queues.task t where t.task_id = x.task_id)
    union all select 'completion_round lease', u.task_id from queues.completion_round x
     cross join lateral unnest(x.task_ids, x.task_lease_ids) as u(task_id, task_lease_id)
     where exists (select 1 from queues.task t where t.task_id = u.task_id)
       and u.task_lease_id is not null
       and not exists (select 1 from queues.task_leases l where l.task_id = u.task_id and l.task_lease_id = u.task_lease_id)
    union all select 'error', x.task_id from queues.error x
     where not exists (select 1 from queues.task t where t.task_id = x.task_id)
        or (x.task_lease_id is not null and not exists (select 1 from queues.task_leases l where l.task_id = x.task_id and l.task_lease_id = x.task_lease_id))
    union all select 'task_lease_extension', x.task_id from queues.task_lease_extension x
     where not exists (select 1 from queues.task_leases l where l.task_id = x.task_id and l.task_lease_id = x.task_lease_id)
    union all select 'task_lease_release', x.task_id from queues.task_lease_release x
     where not exists (select 1 from queues.task_leases l where l.task_id = x.task_id and l.task_lease_id = x.task_lease_id)
    union all select 'task_lease_revocation', x.task_id from queues.task_lease_revocation x
     where not exists (select 1 from queues.task_leases l where l.task_id = x.task_id and l.task_lease_id = x.task_lease_id)
    union all select 'task_attempt_failed', x.task_id from queues.task_attempt_failed x
     where not exists (select 1 from queues.task t where t.task_id = x.task_id)
    union all select 'task_redriven', x.task_id from queues.task_redriven x
     where not exists (select 1 from queues.task t where t.task_id = x.task_id)
        or not exists (select 1 from queues.task t where t.task_id = x.new_task_id)
    union all select 'task_pending', x.task_id from queues.task_pending x
     where not exists (select 1 from queues.task t where t.task_id = x.task_id)
        or exists (select 1 from queues.task_end c where c.task_id = x.task_id)`);
  return rows;
}

describe('partition maintenance', () => {
  it('creates sets ahead of the last task id, and drops empty sets below it', async () => {
    const first = await maintain();
    expect(first.created).toEqual([
      [base, base + SIZE],
      [base + SIZE, base + 2 * SIZE],
    ]);
    // The migration's big sets below the last task id hold nothing: dropped.
    expect(first.dropped.length).toBeGreaterThan(0);
    expect(first.dropped.every(([, hi]) => hi <= base)).toBe(true);
    // Nothing more to do.
    expect(await maintain()).toMatchObject({ created: [], dropped: [], skipped: [] });
    const { rows } = await db.query(
      `select c.relname from pg_class c where c.relname like 'task_lease_revocation_p%' and c.relnamespace = 'queues'::regnamespace order by 1`,
    );
    expect(rows.map((r) => r.relname)).toEqual(
      expect.arrayContaining([`task_lease_revocation_p${base}`, `task_lease_revocation_p${base + SIZE}`]),
    );
  });

  it('a set made by maintenance (standalone tables, then attached) matches its parents', async () => {
    // Columns, constraints (checks, not-null, primary key, foreign key), indexes, and the
    // trigger that refuses updates, for every history table's partition of the first set.
    const { rows } = await db.query(
      `with t as (select name, to_regclass(format('queues.%I', name)) as parent,
                         to_regclass(format('queues.%I', queues.history_partition_name(name, $1))) as part
                    from unnest(queues.history_tables()) name),
            shape as (
              select t.name, r.rel = t.part as is_part,
                     (select array_agg(format('%s %s %s %s', a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity) order by a.attname)
                        from pg_attribute a where a.attrelid = r.rel and a.attnum > 0 and not a.attisdropped) as columns,
                     (select array_agg(d order by d)
                        from (select replace(pg_get_constraintdef(k.oid), ' NOT VALID', '') as d
                                from pg_constraint k where k.conrelid = r.rel) k) as constraints,
                     (select array_agg(d order by d)
                        from (select i.indisunique || substring(pg_get_indexdef(i.indexrelid) from ' USING .*') as d
                                from pg_index i where i.indrelid = r.rel) i) as indexes
                from t cross join lateral (values (t.parent), (t.part)) r(rel))
       select p.name from shape p join shape c on c.name = p.name and c.is_part and not p.is_part
        where p.columns is distinct from c.columns or p.constraints is distinct from c.constraints
           or p.indexes is distinct from c.indexes
           or not exists (select 1 from pg_trigger g join t on g.tgrelid = t.part
                           where t.name = p.name and g.tgname = 'forbid_update')`,
      [base],
    );
    expect(rows).toEqual([]);
    await expect(db.query(`update queues.task_lease_p${base} set expires_at = expires_at`)).rejects.toMatchObject({
      code: '55000',
    });
  });

  it('drops a set whose tasks all completed before the window; one pending task keeps its set', async () => {
    const setA = await enqueue(SIZE);
    expect(Number(setA[0])).toBe(base);
    await maintain();
    const setB = await enqueue(SIZE);
    const [extra] = await enqueue(1); // the last task id moves past both sets
    const leases = await claimAll();
    await complete(leases, [...setA, extra]);
    const pending = setB[3];
    await complete(
      leases,
      setB.filter((id) => id !== pending),
    );
    await db.query(`select queues.fail_task($1, 'noted', $2)`, [setA[0], leases.get(setA[0])]).catch(() => undefined);
    expect(await orphans()).toEqual([]);

    // Inside the window: nothing goes.
    expect((await maintain(`now() + interval '6 days'`)).dropped).toEqual([]);
    // After it: set A goes whole; set B stays for its pending task.
    const later = await maintain(`now() + interval '8 days'`);
    expect(later.dropped).toEqual([[base, base + SIZE]]);
    expect(await tasksIn(base, base + SIZE)).toBe(0);
    expect(await tasksIn(base + SIZE, base + 2 * SIZE)).toBe(SIZE);
    await expect(db.query('select admin.get_task($1)', [setA[0]])).rejects.toMatchObject({ code: '23503' });
    const { rows: dropped } = await db.query(
      `select lower_bound, upper_bound, tasks from queues.history_partition_dropped where lower_bound = $1`,
      [base],
    );
    expect(dropped).toEqual([{ lower_bound: String(base), upper_bound: String(base + SIZE), tasks: String(SIZE) }]);

    // The pending task is still claimable and completes; then its set goes too.
    await complete(leases, [pending]);
    const last = await maintain(`now() + interval '8 days'`);
    expect(last.dropped).toEqual([[base + SIZE, base + 2 * SIZE]]);
    expect(await orphans()).toEqual([]);
  });

  it('a set maintenance is late for is made whole in one step, above the last task id: tasks enqueued next land in it', async () => {
    const top = await aboveEveryRange(0);
    // Ids past every set: maintenance fell behind, a task went to the default partition.
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [top + 4]);
    const [spilled] = await enqueue(1);
    const step = (await db.query('select queues.maintain_history_step_at(now()) as r')).rows[0].r;
    // Made table by table, the set would start at the next id and tasks enqueued between
    // its steps would land in the default partitions, in its range, and fail its next
    // attach. It is made in one step, every table at once.
    expect(step).toMatchObject({
      action: 'set_created',
      late: true,
      lower_bound: top + 6,
      upper_bound: top + 6 + SIZE,
    });
    const { rows: tables } = await db.query(
      'select count(*)::int as n from queues.history_partition_bounds() where lower_bound = $1',
      [top + 6],
    );
    expect(tables[0].n).toBe((await db.query('select cardinality(queues.history_tables()) as n')).rows[0].n);
    const ids = await enqueue(2);
    const leases = await claimAll();
    await complete(leases, ids);
    const { rows: where } = await db.query(
      `select tableoid::regclass::text as part from queues.task where task_id = any($1::bigint[])
       union all select tableoid::regclass::text from queues.claim_lease where task_ids && $1::bigint[]
       union all select tableoid::regclass::text from queues.completion_round where task_ids && $1::bigint[]`,
      [ids],
    );
    expect(new Set(where.map((r) => r.part))).toEqual(
      new Set([`queues.task_p${top + 6}`, `queues.claim_lease_p${top + 6}`, `queues.completion_round_p${top + 6}`]),
    );
    // The rest of the run makes the sets ahead table by table, and skips nothing.
    const rest = await maintain();
    expect(rest.skipped).toEqual([]);
    expect(await tasksIn(Number(spilled), Number(spilled) + 1)).toBe(1);
    await complete(
      leases,
      [spilled].filter((id) => leases.has(id)),
    );
  });

  it('a half made set is finished in one step when no task has reached it, and passed over when one has', async () => {
    const owner = db.pool('owner');
    const step = async () => (await db.query('select queues.maintain_history_step_at(now()) as r')).rows[0].r;
    const whole = async (lower: number) =>
      (
        await db.query(
          `select count(*) = cardinality(queues.history_tables()) as whole
             from queues.history_partition_bounds() where lower_bound = $1`,
          [lower],
        )
      ).rows[0].whole as boolean;
    // Reached: a task of its range fell into the default partition.
    let top = await aboveEveryRange(0);
    await owner.query('select queues.attach_history_partition($1, $2, $3)', ['task_lease', top, top + SIZE]);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [top + 4]);
    const [reached] = await enqueue(1);
    expect(await step()).toMatchObject({ action: 'set_created', late: true, lower_bound: top + SIZE });
    expect(await whole(top + SIZE)).toBe(true);
    expect(await whole(top)).toBe(false);
    expect(await tasksIn(Number(reached), Number(reached) + 1)).toBe(1);
    // The next run finishes it, moving the task out of the default partition into it.
    const { adopted } = await maintain();
    expect(adopted).toEqual([[top, top + SIZE]]);
    expect(await whole(top)).toBe(true);
    const { rows: moved } = await db.query(
      'select tableoid::regclass::text as part from queues.task where task_id = $1',
      [reached],
    );
    expect(moved).toEqual([{ part: `queues.task_p${top}` }]);
    // Not reached: ids handed out up to just below it.
    top = await aboveEveryRange(0);
    await owner.query('select queues.attach_history_partition($1, $2, $3)', ['task_lease', top, top + SIZE]);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [top - 1]);
    expect(await step()).toMatchObject({ action: 'set_created', late: true, lower_bound: top });
    expect(await whole(top)).toBe(true);
    const [next] = await enqueue(1);
    const { rows: where } = await db.query(
      'select tableoid::regclass::text as part from queues.task where task_id = $1',
      [next],
    );
    expect(where[0].part).toBe(`queues.task_p${top}`);
    await maintain();
  });

  it('tasks that fell into the default partition are moved with their facts into sets of their gap, 2,000 a step; pending ones stay claimable; retention drops those sets', async () => {
    const top = await aboveEveryRange(0);
    const step = async (at = 'now()') =>
      (await db.query(`select queues.maintain_history_step_at(${at}) as r`)).rows[0].r;
    const partOf = async (table: string, ids: string[]) =>
      (
        await db.query(
          `select distinct tableoid::regclass::text as part from queues.${table} where task_id = any($1::bigint[])`,
          [ids],
        )
      ).rows.map((r) => r.part);
    // Ids past every set: 2,003 tasks fall into the default partition; some are claimed,
    // one of them completed, so their leases, starts and completion fall there too.
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [top + 4]);
    const ids = await enqueue(2003);
    expect(Number(ids[0])).toBe(top + 5);
    expect(await partOf('task', ids)).toEqual(['queues.task_default']);
    const leases = await claimAll();
    const [done, running] = [ids[0], ids[1]];
    expect(leases.has(done) && leases.has(running)).toBe(true);
    // As a worker's heartbeat does: the leases extended, then the runs marked started (a
    // task its claim lease holds gets its claim-index row back at its first heartbeat).
    await db.pool('worker').query('select queues.extend_leases($1::bigint[], $2::bigint[])', [
      [done, running],
      [leases.get(done), leases.get(running)],
    ]);
    await db.pool('worker').query('select queues.mark_started($1::bigint[], $2::bigint[])', [
      [done, running],
      [leases.get(done), leases.get(running)],
    ]);
    await complete(leases, [done]);
    // A plain success is a completion round, routed by the largest task id it names.
    expect(await partOf('completion_round', [done])).toEqual(['queues.completion_round_default']);

    // First the set above the last id (late), so no id can land in the gap any more...
    const last = top + 4 + 2003;
    expect(await step()).toMatchObject({ action: 'set_created', late: true, lower_bound: last + 1 });
    // ...then the gap [top, last + 1), 2,000 tasks a step: the first 2,000, then the rest.
    const cut = Number(ids[2000]);
    // (after the sets ahead: making those comes first)
    const run: Step[] = [];
    for (let next = await step(); ; next = await step()) {
      run.push(next);
      if (!next.more) break;
    }
    expect(run.filter((r) => r.action === 'set_adopted')).toMatchObject([
      { lower_bound: top, upper_bound: cut, tasks: 2000 },
      { lower_bound: cut, upper_bound: last + 1, tasks: 3 },
    ]);
    expect(await defaultTasks()).toBe(0);
    expect(await partOf('task', ids.slice(0, 2000))).toEqual([`queues.task_p${top}`]);
    expect(await partOf('task', ids.slice(2000))).toEqual([`queues.task_p${cut}`]);
    expect(await partOf('task_lease_started', [done, running])).toEqual([`queues.task_lease_started_p${top}`]);
    // A claim lease is routed by the largest task id it names (the first claim's are all
    // below the cut).
    const { rows: claimLeases } = await db.query(
      `select distinct tableoid::regclass::text as part from queues.claim_lease where task_ids && $1::bigint[]`,
      [[done, running]],
    );
    expect(claimLeases.map((r) => r.part)).toEqual([`queues.claim_lease_p${top}`]);
    expect(await partOf('completion_round', [done])).toEqual([`queues.completion_round_p${top}`]);
    expect(await tasksIn(top, last + 1)).toBe(2003);
    expect(await orphans()).toEqual([]);
    const status = (await db.pool('api').query('select admin.history_status() as s')).rows[0].s;
    expect(status).toMatchObject({ default_partition_tasks: 0 });

    // The running task completes on its lease, the rest complete too; once an id above
    // them is handed out and the window has passed, retention drops both sets whole.
    await enqueue(1);
    await complete(
      leases,
      [...leases.keys()].filter((id) => id !== done),
    );
    for (let more = await claimAll(); more.size > 0; more = await claimAll()) await complete(more, [...more.keys()]);
    const later = await maintainUntilDropped(`now() + interval '8 days'`, [
      [top, cut],
      [cut, last + 1],
    ]);
    expect(later.dropped, `skipped: ${JSON.stringify(later.skipped.slice(-3))}`).toEqual(
      expect.arrayContaining([
        [top, cut],
        [cut, last + 1],
      ]),
    );
    expect(await tasksIn(top, last + 1)).toBe(0);
  });

  it('claims and completions on other connections proceed while maintenance creates and drops sets', async () => {
    // Sets of 100 ids: a set fills in about 33 rounds, while maintenance makes one in 14
    // steps; with sets of 10 ids, making sets would leave maintenance no moment to drop.
    await db.query(
      `update queues.history_setting set retention = interval '0', partitions_ahead = 2, partition_size = 100`,
    );
    await maintain();
    const spilled = await defaultTasks();
    const owner = db.pool('owner');
    const worker = db.pool('worker');
    let done = false;
    const results: string[] = [];
    const maintenanceSteps: Step[] = [];
    // At least 40 rounds, and on until maintenance has done each kind of step (a loaded
    // machine may run the rounds faster than the steps), within 2,000 rounds.
    const needed = ['attached', 'set_created', 'set_dropped', 'detached', 'dropped_table'];
    const seenAll = () => needed.every((a) => maintenanceSteps.some((m) => m.action === a));
    // Room for a round's tasks in the sets made: ids above it would fall into the default
    // partition. Sets of 10 ids fill faster than maintenance makes them on a loaded
    // machine, so the loop waits for room (at most 10 s) as a worker's rate stays within
    // what its maintenance keeps up with; ids that outrun the sets are another test's.
    const room = async () =>
      Number(
        (
          await owner.query(
            `select coalesce(max(upper_bound), 0) - 1 - queues.last_task_id() as room
               from queues.history_partition_bounds() where table_name = 'task'`,
          )
        ).rows[0].room,
      );
    const loop = (async () => {
      for (let round = 0; round < 40 || (!seenAll() && round < 2000); round++) {
        for (let waited = 0; (await room()) < 3 && waited < 10_000; waited += 5) {
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
        await owner.query('select queues.enqueue_many($1::jsonb)', [
          JSON.stringify(
            Array.from({ length: 3 }, () => ({ task_type: 'db_function', payload: { db_function: 'internal.noop' } })),
          ),
        ]);
        const { rows } = await worker.query(
          `select task_id, task_lease_id from queues.claim_tasks('w2', 100, null, 300, 5)`,
        );
        const { rows: completed } = await worker.query(
          'select result from queues.complete_tasks($1::bigint[], $2::bigint[])',
          [rows.map((r) => r.task_id), rows.map((r) => r.task_lease_id)],
        );
        results.push(...completed.map((r) => r.result));
        // A moment between rounds, as between a worker's statements: maintenance takes
        // its locks in such moments (queues.lock_history_tables).
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
    })().finally(() => {
      // Also when the loop fails: the maintenance loop stops with it.
      done = true;
    });
    // Maintenance as the schedule runs it, one step per transaction, on its own connection.
    const maintenance = (async () => {
      const client = await db.client('worker');
      try {
        // Each step is seen as it is done: while the loop runs, a run may not end.
        while (!done) await maintainAsScheduled(client, maintenanceSteps);
      } finally {
        await client.end();
      }
    })();
    await Promise.all([loop, maintenance]);

    // Every task the loop claimed completed, and none fell into the default partition.
    expect(results.length).toBeGreaterThanOrEqual(100);
    expect(await defaultTasks()).toBe(spilled);
    expect(new Set(results)).toEqual(new Set(['completed']));
    // Maintenance did its work meanwhile: sets made for the new ids one table at a time,
    // finished ones detached and dropped table by table. No history table has a foreign
    // key, so none needed truncating before its drop.
    const actions = new Set(maintenanceSteps.map((m) => m.action));
    const lastSkips = JSON.stringify(maintenanceSteps.filter((m) => m.action === 'skipped').slice(-3));
    for (const action of needed) expect(actions, `last skipped steps: ${lastSkips}`).toContain(action);
    expect(actions).not.toContain('truncated');
    expect(await orphans()).toEqual([]);
    // Once the loop has stopped, one run drops every finished set below the last id (a
    // set every task of which has an end; a task its claim lease holds has neither a
    // claim-index row nor an end).
    await maintain();
    const { rows: left } = await db.query(
      `select p.lower_bound from queues.history_partitions() p
        where not p.is_default and p.upper_bound <= queues.last_task_id()
          and not exists (select 1 from queues.task t where t.task_id >= p.lower_bound and t.task_id < p.upper_bound
                             and not exists (select 1 from queues.task_end_of(t.task_id)))`,
    );
    expect(left).toEqual([]);
    const { rows: created } = await db.query(
      `select count(*)::int as n from queues.history_partitions() where not is_default and lower_bound > queues.last_task_id()`,
    );
    expect(created[0].n).toBeGreaterThanOrEqual(1);
    // Nothing detached is left behind, and every set is whole (sets half made when a
    // task of their range fell into the default partition were finished by moving it).
    const { rows: loose } = await db.query(
      `select relname from pg_class where relnamespace = 'queues'::regnamespace and relkind = 'r'
          and not relispartition and relname ~ '_p[0-9]+$'`,
    );
    expect(loose).toEqual([]);
    const { rows: sets } = await db.query(
      `select b.lower_bound from queues.history_partition_bounds() b
        group by b.lower_bound, b.upper_bound
       having count(*) <> cardinality(queues.history_tables())`,
    );
    expect(sets).toEqual([]);
    await db.query(`update queues.history_setting set partition_size = $1`, [SIZE]);
  });

  it('a step never queues for its locks: a claim that comes while it waits for a long claim transaction goes on, and the step takes its locks once that transaction ends', async () => {
    await maintain();
    // A long window, longer than the test: the step must get its locks by the end of the
    // long transaction, not by giving up.
    // (Two calls, so each task has its own claim-index row: a claim transaction left open
    // holds the ready batch it took from, ready_batch.test.ts.)
    await enqueue(1);
    await enqueue(1);
    await db.query(`update queues.history_setting set lock_timeout_ms = 60000, ${oneSetMoreAhead}`);
    const long = await db.client('worker');
    const steps = await db.client('worker');
    const second = await db.client('worker');
    try {
      // The long transaction: a claim, left open (it wrote into claim_lease, whose parent
      // attaching that table's partition locks against writers).
      await long.query('begin');
      const { rows: held } = await long.query(`select task_id from queues.claim_tasks('w-long', 1)`);
      expect(held).toHaveLength(1);
      const pid = async (c: pg.ClientBase) => (await c.query('select pg_backend_pid() as p')).rows[0].p as number;
      const [stepsPid, secondPid] = [await pid(steps), await pid(second)];
      const blockedBy = async (p: number) =>
        (await db.query('select pg_blocking_pids($1) as b', [p])).rows[0].b as number[];
      // In a step: it holds maintenance's advisory lock (queues.maintain_history_step_at).
      const inStep = async (p: number) =>
        (
          await db.query(
            `select exists (select 1 from pg_locks where pid = $1 and locktype = 'advisory'
                               and classid = 20252 and objid = 1 and granted) as held`,
            [p],
          )
        ).rows[0].held as boolean;

      let ended = false;
      const run = maintainAsScheduled(steps).finally(() => (ended = true));
      // The step meets the long transaction and tries again and again: it is not in the
      // lock queue (nobody is blocked by it, it is blocked by nobody).
      while (!ended && !(await inStep(stepsPid)));
      expect(ended).toBe(false);
      expect(await blockedBy(stepsPid)).toEqual([]);
      // A claim that comes now is never held behind the step.
      let claimed = false;
      const claim = second
        .query(`select task_id from queues.claim_tasks('w-second', 1)`)
        .finally(() => (claimed = true));
      while (!claimed) expect(await blockedBy(secondPid)).not.toContain(stepsPid);
      expect((await claim).rows).toHaveLength(1);
      // The step is still trying while the long transaction is open...
      expect(ended).toBe(false);
      expect((await long.query('select 1 as open')).rows).toEqual([{ open: 1 }]);
      await long.query('commit');

      // ...and takes its locks once it has ended: the run makes the whole set.
      const done = await run;
      expect(done.map((d) => d.action)).toContain('set_created');
      expect(done.filter((d) => d.action === 'skipped')).toEqual([]);
      expect(done.at(-1)).toMatchObject({ action: 'none', more: false });
      // The set is recorded as created when its task partition is attached, its last.
      const made = done.find((d) => d.action === 'set_created') as unknown as { lower_bound: number };
      const { rows: created } = await db.query(
        'select count(*)::int as n from queues.history_partition_created where lower_bound = $1',
        [made.lower_bound],
      );
      expect(created[0].n).toBe(1);
    } finally {
      await long.query('rollback').catch(() => undefined);
      for (const c of [long, steps, second]) await c.end();
      await db.query(`update queues.history_setting set lock_timeout_ms = default, partitions_ahead = 2`);
    }
  });

  it('a step that cannot take its locks within lock_timeout_ms is skipped, and the next run does it', async () => {
    await maintain();
    await enqueue(2);
    await db.query(`update queues.history_setting set lock_timeout_ms = 200, ${oneSetMoreAhead}`);
    const long = await db.client('worker');
    const steps = await db.client('worker');
    try {
      await long.query('begin');
      expect((await long.query(`select task_id from queues.claim_tasks('w-long', 1)`)).rows).toHaveLength(1);
      // Skips counted from here (the table keeps a day of them).
      await db.query('delete from queues.history_step_skipped');
      const done = await maintainAsScheduled(steps);
      // Tables it could lock are attached; the one the long transaction writes is tried
      // again after each skip, until 5 skips within a minute end the run.
      const skips = done.filter((d) => d.action === 'skipped');
      expect(done.map((d) => d.action).filter((a) => a !== 'skipped')).toEqual(
        done.filter((d) => d.action !== 'skipped').map(() => 'attached'),
      );
      expect(skips).toHaveLength(5);
      for (const [i, skip] of skips.entries()) {
        expect(skip).toMatchObject({
          action: 'skipped',
          // (the claim's statement, generic, locks every partition of claim_lease, default
          // included: the first table in queues.history_tables() order it keeps locked)
          step: expect.stringMatching(/^attach queues\.claim_lease_p\d+$/),
          reason: expect.stringMatching(/^could not lock claim_lease, claim_lease_default in \d+ tries over 200 ms/),
          more: i < 4,
        });
      }
      // Each skip is recorded with its reason, and the status shows the last.
      const { rows: recorded } = await db.query(
        'select step, reason from queues.history_step_skipped order by skipped_at',
      );
      expect(recorded).toEqual(skips.map((d) => ({ step: d.step, reason: d.reason })));
      const status = (await db.pool('api').query('select admin.history_status() as s')).rows[0].s;
      expect(status).toMatchObject({
        skipped_steps_last_hour: 5,
        last_skipped_step: { step: skips[4].step, reason: skips[4].reason },
      });
      await long.query('commit');
      const next = await maintainAsScheduled(steps);
      expect(next.map((d) => d.action)).toContain('set_created');
      expect(next.at(-1)).toMatchObject({ action: 'none', more: false });
    } finally {
      await long.query('rollback').catch(() => undefined);
      for (const c of [long, steps]) await c.end();
      await db.query(`update queues.history_setting set lock_timeout_ms = default, partitions_ahead = 2`);
    }
  });

  it('a step blocked by an autovacuum of a table it must lock cancels it; an owner without pg_signal_autovacuum_worker skips instead', async () => {
    await maintain();
    const root = await db.client('root');
    const owner = (await db.query<{ name: string }>('select current_user as name')).rows[0].name;
    const ownerRole = root.escapeIdentifier(owner);
    // An autovacuum of task_default that lasts: dead rows on a few hundred pages, and a
    // pause of 100 ms after every page.
    await db.query(`alter table queues.task_default set (autovacuum_vacuum_threshold = 0,
      autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_cost_delay = 100, autovacuum_vacuum_cost_limit = 1)`);
    const far = '1000000000000000';
    await db.query(
      `insert into queues.task_default (task_id, task_type, payload) overriding system value
       select g, 'db_function', '{"db_function": "internal.noop"}' from generate_series(${far}::bigint, ${far}::bigint + 29999) g`,
    );
    await db.query(`delete from queues.task_default where task_id >= ${far}::bigint`);
    const vacuuming = async () =>
      (
        await root.query<{ pid: number }>(
          `select pid from pg_stat_activity
            where backend_type = 'autovacuum worker' and datname = current_database() and query ilike '%task_default%'`,
        )
      ).rows[0]?.pid;
    const step = async () =>
      (await db.query<{ r: Step }>('select queues.maintain_history_step_at(now()) as r')).rows[0].r;
    /** Steps of the set being made until the one that attaches task's partition, the last (set_created). */
    const stepToTask = async () => {
      for (let i = 0; i < 20; i++) {
        const r = await step();
        if (r.action !== 'attached' || /^task_p\d+$/.test(r.table ?? '')) return r;
      }
      throw new Error('no step tried to attach a partition of task');
    };
    try {
      let pid: number | undefined;
      for (let i = 0; i < 450 && pid === undefined; i++) {
        pid = await vacuuming();
        if (pid === undefined) await new Promise((resolve) => setTimeout(resolve, 200));
      }
      expect(pid, 'autovacuum started on task_default').toBeDefined();
      await db.query(`update queues.history_setting set lock_timeout_ms = 200, ${oneSetMoreAhead}`);

      // Without the role: the step cannot cancel it, and is skipped.
      await root.query(`revoke pg_signal_autovacuum_worker from ${ownerRole}`);
      try {
        expect(await stepToTask()).toMatchObject({
          action: 'skipped',
          step: expect.stringMatching(/^attach queues\.task_p\d+$/),
          reason: expect.stringMatching(/^could not lock task, task_default in \d+ tries over 200 ms/),
        });
        expect(await vacuuming()).toBe(pid);
      } finally {
        await root.query(`grant pg_signal_autovacuum_worker to ${ownerRole}`);
      }

      // With it: the step cancels the autovacuum, takes its locks and attaches.
      expect(await stepToTask()).toMatchObject({ action: 'set_created' });
      const { rows: still } = await root.query(
        `select 1 from pg_stat_activity where pid = $1 and query ilike '%task_default%'`,
        [pid],
      );
      expect(still, 'the autovacuum of task_default was cancelled').toEqual([]);
      // Only autovacuum is cancelled: a manual VACUUM of the same table holds the lock too,
      // and the step is skipped.
      await db.query('alter table queues.task_default set (autovacuum_enabled = false)');
      const manual = await db.client('owner');
      try {
        await manual.query('set vacuum_cost_delay = 100; set vacuum_cost_limit = 1');
        const running = manual.query('vacuum queues.task_default').catch(() => undefined);
        for (let i = 0; i < 50; i++) {
          const { rows } = await root.query(
            `select 1 from pg_locks l join pg_stat_activity a using (pid)
              where a.datname = current_database() and a.query = 'vacuum queues.task_default' and l.relation = 'queues.task_default'::regclass and l.granted`,
          );
          if (rows.length > 0) break;
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        await db.query(`update queues.history_setting set ${oneSetMoreAhead}`);
        expect(await stepToTask()).toMatchObject({
          action: 'skipped',
          step: expect.stringMatching(/^attach queues\.task_p\d+$/),
        });
        await root.query(
          `select pg_cancel_backend(pid) from pg_stat_activity where datname = current_database() and query = 'vacuum queues.task_default'`,
        );
        await running;
      } finally {
        await manual.end();
      }
    } finally {
      await db.query(`alter table queues.task_default reset (autovacuum_enabled, autovacuum_vacuum_threshold,
        autovacuum_vacuum_scale_factor, autovacuum_vacuum_cost_delay, autovacuum_vacuum_cost_limit)`);
      await db.query(`delete from queues.task_default where task_id >= ${far}::bigint`);
      await db.query('vacuum queues.task_default');
      await db.query(`update queues.history_setting set lock_timeout_ms = default, partitions_ahead = 2`);
      await root.end();
    }
    await maintain();
  });

  it("queues.adopt_history_range refuses bad bounds and is the owner's only, as are the other steps' functions", async () => {
    for (const sql of [
      'select queues.adopt_history_range(null, 10)',
      'select queues.adopt_history_range(-1, 10)',
      'select queues.adopt_history_range(10, 10)',
      'select queues.adopt_history_range(10, 5)',
    ]) {
      const e = (await db.query(sql).catch((x: { message: string; code: string }) => x)) as {
        message?: string;
        code?: string;
      };
      expect(e.code, sql).toBe('22023');
      expect(e.message).toMatch(/^range bounds must satisfy 0 <= lower < upper/);
    }
    for (const role of ['worker', 'app', 'api'] as const)
      for (const sql of [
        'select queues.adopt_history_range(0, 10)',
        `select queues.create_history_table('task', 'task_x')`,
        `select queues.maintain_history_step_at(now())`,
      ]) {
        const e = (await db
          .pool(role)
          .query(sql)
          .catch((x: { code: string }) => x)) as { code?: string };
        expect(e.code, `${role}: ${sql}`).toBe('42501');
      }
  });

  it("queues.lock_history_tables refuses what it cannot lock safely, and is the owner's only", async () => {
    const refused = async (sql: string) =>
      (await db.query(sql).catch((e: { message: string }) => e)) as { message?: string; code?: string };
    for (const [sql, message] of [
      [`select queues.lock_history_tables(array['task'], array['exclusive'], 10)`, /lock mode must be/],
      [`select queues.lock_history_tables(array['task'], array['access share'], 10)`, /lock mode must be/],
      [
        `select queues.lock_history_tables(array['task; drop table x'], array['share'], 10)`,
        /must name a table in schema queues/,
      ],
      [`select queues.lock_history_tables(array['nope'], array['share'], 10)`, /must name a table in schema queues/],
      [`select queues.lock_history_tables(array['task', 'task_default'], array['share'], 10)`, /same length/],
      [`select queues.lock_history_tables(array[]::text[], array[]::text[], 10)`, /same length/],
      [`select queues.lock_history_tables(array['task'], array['share'], -1)`, /within_ms must be 0 or more/],
    ] as const) {
      const e = await refused(sql);
      expect(e.code, sql).toBe('22023');
      expect(e.message).toMatch(message);
    }
    // Inside a transaction the locks are held until it ends; a try that meets a holder
    // gives back what it took (here: task_default, taken before task_lease_default).
    const other = await db.client('owner');
    try {
      await other.query('begin');
      await other.query('lock table only queues.task_lease_default in access share mode');
      const e = await refused(
        `select queues.lock_history_tables(array['task_default', 'task_lease_default'], array['access exclusive', 'access exclusive'], 30)`,
      );
      expect(e.code).toBe('55P03');
      expect(e.message).toMatch(/^could not lock task_default, task_lease_default in \d+ tries over 30 ms/);
      await other.query('lock table only queues.task_default in access share mode nowait');
      // A transaction that already holds such a lock (steps run together) tries for 50 ms
      // at most: the queue may be waiting for it, and the holder in its way may be too.
      const owner = await db.client('owner');
      try {
        await owner.query('begin');
        await owner.query(`select queues.lock_history_tables(array['task_type'], array['share update exclusive'], 0)`);
        const capped = (await owner
          .query(`select queues.lock_history_tables(array['task_lease_default'], array['access exclusive'], 60000)`)
          .catch((x: { message: string; code: string }) => x)) as { message?: string; code?: string };
        expect(capped.code).toBe('55P03');
        expect(capped.message).toMatch(/^could not lock task_lease_default in \d+ tries over 50 ms/);
      } finally {
        await owner.query('rollback');
        await owner.end();
      }
    } finally {
      await other.query('rollback');
      await other.end();
    }
    for (const role of ['worker', 'app', 'api'] as const) {
      const e = (await db
        .pool(role)
        .query(`select queues.lock_history_tables(array['task'], array['share'], 10)`)
        .catch((x: { code: string }) => x)) as { code?: string };
      expect(e.code, role).toBe('42501');
    }
  });

  it('a claim whose lease falls into a partition being attached waits for the attach and writes into the new partition', async () => {
    // A task in the default partition, above every set there is or was, and the lease
    // table's partition for its range attached in a transaction left open: the claim
    // routes its lease only once the attach has committed (a claim that routed before
    // would meet the default partition's new constraint and fail).
    const lo = await aboveEveryRange(1000);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo]);
    const [id] = await enqueue(1);
    const attach = await db.client('owner');
    const claimer = await db.client('worker');
    try {
      await attach.query('begin');
      await attach.query(`select queues.attach_history_partition('claim_lease', $1, $2)`, [lo, lo + SIZE]);
      const attachPid = (await attach.query('select pg_backend_pid() as p')).rows[0].p as number;
      const claimerPid = (await claimer.query('select pg_backend_pid() as p')).rows[0].p as number;
      const claim = claimer.query(
        `select task_id, task_lease_id from queues.claim_tasks('w-attach', 1000, null, 300, 5)`,
      );
      let settled: unknown;
      claim.then(
        (r) => (settled = r.rows),
        (e: unknown) => (settled = e),
      );
      // Until the claim waits for the attach (it must not finish before).
      while (
        !((await db.query('select pg_blocking_pids($1) as b', [claimerPid])).rows[0].b as number[]).includes(attachPid)
      ) {
        expect(settled).toBeUndefined();
      }
      await attach.query('commit');
      const { rows } = await claim;
      expect(rows.map((r) => r.task_id)).toContain(id);
      const { rows: where } = await db.query(
        'select tableoid::regclass::text as part from queues.claim_lease where $1::bigint = any (task_ids)',
        [id],
      );
      expect(where).toEqual([{ part: `queues.claim_lease_p${lo}` }]);
      await complete(
        new Map(rows.map((r) => [r.task_id, r.task_lease_id])),
        rows.map((r) => r.task_id),
      );
    } finally {
      await attach.query('rollback').catch(() => undefined);
      for (const c of [attach, claimer]) await c.end();
    }
  });

  it('a set made ahead of need is attached while a claim transaction that wrote leases is still open', async () => {
    // Out of reach of the ids handed out: no writer can route a row into it, so attaching
    // takes no lock that writers hold (a steady load of writers would starve it).
    const lo = await aboveEveryRange(1_000_000);
    await enqueue(1);
    const writer = await db.client('worker');
    const attach = await db.client('owner');
    try {
      await writer.query('begin');
      const { rows: claimed } = await writer.query(`select task_id from queues.claim_tasks('w-open', 1)`);
      expect(claimed).toHaveLength(1);
      await attach.query(`set lock_timeout = '2s'`);
      const { rows } = await attach.query(`select queues.attach_history_partition('claim_lease', $1, $2) as made`, [
        lo,
        lo + SIZE,
      ]);
      expect(rows[0].made).toBe(true);
      // The claim is still open (it held its locks throughout) and commits.
      await writer.query('commit');
    } finally {
      await writer.query('rollback').catch(() => undefined);
      for (const c of [writer, attach]) await c.end();
    }
  });

  it('a completion round naming tasks of two sets keeps the newer set (where it lives) while the older one is kept', async () => {
    // Two sets of our own, and a third for a task past both (so both lie below the last
    // task id): tasks [lo + 5, lo + SIZE + 5) straddle the first two.
    const lo = await aboveEveryRange(0);
    for (let k = 0; k < 3; k++)
      await db.query('select queues.create_history_partition($1, $2)', [lo + k * SIZE, lo + (k + 1) * SIZE]);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo + 4]);
    const ids = await enqueue(SIZE);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo + 2 * SIZE]);
    const [past] = await enqueue(1);
    const older: [number, number] = [lo, lo + SIZE];
    const newer: [number, number] = [lo + SIZE, lo + 2 * SIZE];
    const leases = await claimAll();
    // One task of the older set stays pending; the rest end in one call: one round, named
    // by its largest task, so it lives in the newer set.
    const pending = ids[2];
    await complete(
      leases,
      ids.filter((id) => id !== pending),
    );
    await complete(leases, [past]);
    const { rows: round } = await db.query(
      `select tableoid::regclass::text as part, task_ids::text[] from queues.completion_round where $1::bigint = any (task_ids)`,
      [ids[0]],
    );
    expect(round).toEqual([
      { part: `queues.completion_round_p${newer[0]}`, task_ids: ids.filter((id) => id !== pending) },
    ]);
    expect(await orphans()).toEqual([]);

    // Past the window: the newer set's own tasks are all done and old, but its round names
    // tasks of the older set, kept for its pending task; neither goes.
    const later = await maintain(`now() + interval '8 days'`);
    expect(later.dropped).not.toContainEqual(older);
    expect(later.dropped).not.toContainEqual(newer);
    expect(later.skipped).toEqual([]);
    // The older set's finished tasks still read their end from the round.
    const api = db.pool('api');
    for (const id of [ids[0], ids[4]]) {
      const { rows } = await api.query('select admin.get_task($1) as t', [id]);
      expect(rows[0].t.task.state, id).toBe('succeeded');
      expect(rows[0].t.completion, id).toMatchObject({ outcome: 'succeeded', task_lease_id: Number(leases.get(id)) });
    }

    // The pending task ends: the older set goes, then the newer one, and nothing is left
    // that names a task still kept.
    await complete(leases, [pending]);
    const { dropped, skipped } = await maintainUntilDropped(`now() + interval '8 days'`, [older, newer]);
    expect(skipped).toEqual([]);
    expect(dropped).toContainEqual(older);
    expect(dropped).toContainEqual(newer);
    expect(dropped.findIndex(([l]) => l === older[0])).toBeLessThan(dropped.findIndex(([l]) => l === newer[0]));
    expect(await tasksIn(lo, lo + 2 * SIZE)).toBe(0);
    expect(await orphans()).toEqual([]);
  });

  it('a claim lease naming tasks of two sets keeps the newer set (where it lives) while the older one is kept', async () => {
    // As the completion round's test above, but the tasks of each set end in calls of
    // their own: only the claim's one lease names tasks of both sets.
    const lo = await aboveEveryRange(0);
    for (let k = 0; k < 3; k++)
      await db.query('select queues.create_history_partition($1, $2)', [lo + k * SIZE, lo + (k + 1) * SIZE]);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo + 4]);
    const ids = await enqueue(SIZE);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo + 2 * SIZE]);
    const [past] = await enqueue(1);
    const older: [number, number] = [lo, lo + SIZE];
    const newer: [number, number] = [lo + SIZE, lo + 2 * SIZE];
    const leases = await claimAll();
    const inOlder = ids.filter((id) => Number(id) < newer[0]);
    const inNewer = ids.filter((id) => Number(id) >= newer[0]);
    expect(inOlder.length > 1 && inNewer.length > 0).toBe(true);
    // One claim, one lease, named by its largest task: it lives in the set of `past`...
    const { rows: lease } = await db.query(
      `select tableoid::regclass::text as part, task_ids::text[] from queues.claim_lease where $1::bigint = any (task_ids)`,
      [ids[0]],
    );
    expect(lease).toEqual([{ part: `queues.claim_lease_p${lo + 2 * SIZE}`, task_ids: [...ids, past] }]);
    // ...so claim the tasks again in a claim of their own, after the first lease expired,
    // for a lease that lives in the newer set: release them all, then claim them without
    // `past`, which completes first.
    await complete(leases, [past]);
    await db
      .pool('worker')
      .query('select * from queues.release_leases($1::bigint[], $2::bigint[])', [ids, ids.map((id) => leases.get(id))]);
    const again = await claimAll();
    expect([...again.keys()].sort()).toEqual([...ids].sort());
    const { rows: second } = await db.query(
      `select tableoid::regclass::text as part from queues.claim_lease where task_lease_id = $1`,
      [again.get(ids[0])],
    );
    expect(second).toEqual([{ part: `queues.claim_lease_p${newer[0]}` }]);
    // The tasks of each set end in calls of their own; one of the older set stays pending.
    const pending = inOlder[1];
    await complete(
      again,
      inOlder.filter((id) => id !== pending),
    );
    await complete(again, inNewer);
    const { rows: rounds } = await db.query(
      `select count(*)::int as n from queues.completion_round
        where task_ids && $1::bigint[] and task_ids && $2::bigint[]`,
      [inOlder, inNewer],
    );
    expect(rounds[0].n).toBe(0);
    expect(await orphans()).toEqual([]);

    // Past the window: the newer set's own tasks are all done and old, but its claim lease
    // names tasks of the older set, kept for its pending task; neither goes.
    const later = await maintain(`now() + interval '8 days'`);
    expect(later.dropped).not.toContainEqual(older);
    expect(later.dropped).not.toContainEqual(newer);
    expect(later.skipped).toEqual([]);
    // The older set's finished tasks still read both their leases.
    const api = db.pool('api');
    const { rows } = await api.query('select admin.get_task($1) as t', [inOlder[0]]);
    expect(rows[0].t.leases.map((l: { task_lease_id: number }) => String(l.task_lease_id))).toEqual([
      leases.get(inOlder[0]),
      again.get(inOlder[0]),
    ]);

    // The pending task ends: the older set goes, then the newer one.
    await complete(again, [pending]);
    const { dropped, skipped } = await maintainUntilDropped(`now() + interval '8 days'`, [older, newer]);
    expect(skipped).toEqual([]);
    expect(dropped).toContainEqual(older);
    expect(dropped).toContainEqual(newer);
    expect(dropped.findIndex(([l]) => l === older[0])).toBeLessThan(dropped.findIndex(([l]) => l === newer[0]));
    expect(await tasksIn(lo, lo + 2 * SIZE)).toBe(0);
    expect(await orphans()).toEqual([]);
  });

  it('a set holding a task its claim lease holds (no claim-index row, no end) is kept past the window, and goes once the task ends', async () => {
    await maintain(`now() + interval '8 days'`);
    const lo = await aboveEveryRange(0);
    for (let k = 0; k < 2; k++)
      await db.query('select queues.create_history_partition($1, $2)', [lo + k * SIZE, lo + (k + 1) * SIZE]);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo - 1]);
    const ids = await enqueue(3);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo + SIZE]);
    const set: [number, number] = [lo, lo + SIZE];
    const leases = await claimAll();
    const held = ids[1];
    // The claim took every task out of the claim index; all but one end.
    const rows = async () =>
      Number(
        (await db.query('select count(*) from queues.task_pending where task_id = any($1::bigint[])', [ids])).rows[0]
          .count,
      );
    expect(await rows()).toBe(0);
    await complete(
      leases,
      ids.filter((id) => id !== held),
    );
    const { rows: end } = await db.query('select count(*)::int as n from queues.task_end_of($1)', [held]);
    expect(end[0].n).toBe(0);
    const later = await maintain(`now() + interval '8 days'`);
    expect(later.dropped).not.toContainEqual(set);
    expect(await tasksIn(lo, lo + SIZE)).toBe(3);
    // It ends on its claim's lease: the set goes.
    await complete(leases, [held]);
    const { dropped } = await maintainUntilDropped(`now() + interval '8 days'`, [set]);
    expect(dropped).toContainEqual(set);
    expect(await tasksIn(lo, lo + SIZE)).toBe(0);
  });

  it('a task committed after the checks of its set and claimed before the detach keeps the set (it has no claim-index row)', async () => {
    // Everything that may go is gone, and sets are made well ahead, so that the step below
    // has only the set under test to drop.
    await db.query(`update queues.history_setting set partitions_ahead = 6, lock_timeout_ms = 30000`);
    await maintain();
    await maintain(`now() + interval '8 days'`);
    await db.query(`update queues.history_setting set partitions_ahead = 1`);
    const { rows: ahead } = await db.query(
      `select min(lower_bound) as lo from queues.history_sets() where not is_default and lower_bound > queues.last_task_id()`,
    );
    const lo = Number(ahead[0].lo);
    const set: [number, number] = [lo, lo + SIZE];
    // The id `lo` is handed out (unused): the sets below it are complete, and go first.
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo]);
    await maintainUntilDropped(`now() + interval '8 days'`, []);
    const enqueuer = await db.client('owner');
    const holder = await db.client('owner');
    const maintainer = await db.client('owner');
    try {
      // A task of the set, its transaction open while maintenance checks the set.
      await enqueuer.query('begin');
      const { rows: task } = await enqueuer.query('select task_id from queues.enqueue_many($1::jsonb)', [
        JSON.stringify([{ task_type: 'db_function', payload: { db_function: 'internal.noop' } }]),
      ]);
      const id = task[0].task_id as string;
      expect(Number(id)).toBe(lo + 1);
      // Ids past the set are handed out: it may go once its tasks have ended.
      await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo + SIZE]);
      // A reader of queues.task keeps the detach waiting until the task is claimed.
      await holder.query('begin');
      await holder.query('select count(*) from queues.task where task_id = $1', [id]);
      const { rows: pid } = await maintainer.query('select pg_backend_pid() as pid');
      const step = maintainer.query(`select queues.maintain_history_step_at(now() + interval '8 days') as r`);
      // The step has checked the set (it sees no task in it) and tries the detach's locks.
      for (let i = 0; ; i++) {
        expect(i).toBeLessThan(10_000);
        const { rows } = await db.query(
          `select exists (select 1 from pg_stat_activity where pid = $1 and wait_event = 'PgSleep') as trying`,
          [pid[0].pid],
        );
        if (rows[0].trying) break;
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
      await enqueuer.query('commit');
      const leases = await claimAll();
      expect(leases.has(id)).toBe(true);
      const { rows: row } = await db.query('select count(*)::int as n from queues.task_pending where task_id = $1', [
        id,
      ]);
      expect(row[0].n).toBe(0);
      await holder.query('commit');
      const { rows: result } = await step;
      expect(result[0].r.action).not.toBe('set_dropped');
      expect(await tasksIn(lo, lo + SIZE)).toBe(1);
      // The task ends on its lease; then the set goes.
      await complete(leases, [id]);
      const { dropped } = await maintainUntilDropped(`now() + interval '8 days'`, [set]);
      expect(dropped).toContainEqual(set);
    } finally {
      await Promise.allSettled([enqueuer.end(), holder.end(), maintainer.end()]);
      await db.query(`update queues.history_setting set partitions_ahead = 2, lock_timeout_ms = default`);
    }
  });

  it('is a runnable db_function for the worker, and the API sees partitions and the next drop', async () => {
    const { rows } = await db
      .pool('worker')
      .query(`select internal.run_function('queues.maintain_history', '{}'::jsonb) as r`);
    expect(rows[0].r).toMatchObject({
      success: true,
      payload: { created: expect.any(Array), dropped: expect.any(Array) },
    });
    for (const owned of ['maintain_history_at(now())', 'maintain_history_step_at(now())'])
      await expect(db.pool('worker').query(`select queues.${owned}`)).rejects.toMatchObject({ code: '42501' });
    await expect(db.pool('api').query('select queues.history_status_at(now())')).rejects.toMatchObject({
      code: '42501',
    });
    const status = (await db.pool('api').query('select admin.history_status() as s')).rows[0].s;
    expect(status.partitions.length).toBeGreaterThan(1);
    expect(status.partitions[0]).toMatchObject({ total_bytes: expect.any(Number), is_default: false });
    expect(status.dropped_sets).toBeGreaterThan(0);
  });

  it('runs from its own schedule: the schedules supervisor enqueues the maintenance step every 10 minutes', async () => {
    const { rows: installed } = await db.query(
      `select v.cron, v.task_type, v.payload, v.priority from schedules.schedule s, schedules.current_version(s.schedule_id) v
        where s.name = 'queue_history_maintenance'`,
    );
    expect(installed).toEqual([
      {
        cron: '*/10 * * * *',
        task_type: 'db_function',
        payload: { db_function: 'queues.maintain_history_step', repeat: true },
        priority: 100,
      },
    ]);
    // Test databases start with it disabled (testing/src/global-setup.ts).
    await db.pool('app').query(`select schedules.enable_schedule('queue_history_maintenance')`);
    const { rows: supervisor } = await db.query(
      `select t.task_id, t.scheduled_at from queues.task t join schedules.supervisor_task s using (task_id)
        where exists (select 1 from queues.task_pending p where p.task_id = t.task_id)`,
    );
    expect(supervisor).toHaveLength(1);
    // The supervisor runs at the next fire time and enqueues the maintenance step.
    const at = supervisor[0].scheduled_at as Date;
    const { rows: run } = await db.query(`select schedules.schedule_supervisor_at($1, '{}'::jsonb) as r`, [at]);
    expect(run[0].r).toBeDefined();
    const { rows: step } = await db.query(
      `select r.task_id, t.payload from schedules.schedule_run r join schedules.schedule s using (schedule_id)
         join queues.task t on t.task_id = r.task_id
        where s.name = 'queue_history_maintenance' and r.outcome = 'enqueued'`,
    );
    expect(step).toHaveLength(1);
    expect(step[0].payload).toEqual({ db_function: 'queues.maintain_history_step', repeat: true });
    // The worker runs it like any db_function task with "repeat": called again while more.
    const { rows: result } = await db
      .pool('worker')
      .query(`select internal.run_function($1::jsonb ->> 'db_function', $1::jsonb) as r`, [step[0].payload]);
    expect(result[0].r).toMatchObject({
      success: true,
      payload: { action: expect.any(String), more: expect.any(Boolean) },
    });
    // The envelope the worker's steps accept (queues.run_steps reads it so).
    const { rows: envelope } = await db
      .pool('worker')
      .query('select outcome, message from queues.parse_envelope($1::jsonb)', [result[0].r]);
    expect(envelope[0]).toEqual({ outcome: 'succeeded', message: null });
    await db.pool('app').query(`select schedules.disable_schedule('queue_history_maintenance')`);
  });
});
