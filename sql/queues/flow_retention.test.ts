// Nothing grows forever (sql/queues/flow_retention.sql, docs/operations.md "Retention and
// partitions"): progress reports and dependency edges are history tables and leave with
// their task's set (an edge with its dependent's), never while a task of the set is
// pending; history maintenance deletes throttle reports that ended and were superseded
// longer ago than the retention window, never one in force nor one a clear still needs,
// and rate-limit window counters of windows long past.
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
  await db.query(`update queues.history_setting set partition_size = $1, partitions_ahead = 3`, [SIZE]);
  await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base - 1]);
  await maintain();
});
afterAll(async () => {
  await db?.drop();
});

type Result = { created: [number, number][]; dropped: [number, number][]; skipped: unknown[] };
/** Maintenance as if run `days` from now (the retention window is 7 days). */
const maintain = async (days = 0): Promise<Result> =>
  (await db.query(`select queues.maintain_history_at(now() + make_interval(days => $1)) as r`, [days])).rows[0].r;

const TYPE = 'product_resync';
const enqueue = async (dependsOn: string[] | null = null) =>
  (
    await db
      .pool('app')
      .query<{ id: string }>(`select queues.enqueue($1, '{}'::jsonb, _depends_on => $2::bigint[]) as id`, [
        TYPE,
        dependsOn,
      ])
  ).rows[0].id;
/** Enqueues tasks until the last id handed out is `last`. */
async function fillTo(last: number): Promise<void> {
  for (;;) {
    const id = Number(await enqueue());
    if (id >= last) return;
  }
}
const completeAll = async (ids: string[]) =>
  db.query(
    `select * from queues.complete_tasks($1::bigint[], null, array_fill('succeeded'::text, array[cardinality($1::bigint[])]),
                                         array_fill(false, array[cardinality($1::bigint[])]))`,
    [ids],
  );
/** Every task of [lo, hi) still pending, completed as a success. */
async function completeRange(lo: number, hi: number, except: string[] = []): Promise<void> {
  const { rows } = await db.query<{ task_id: string }>(
    `select task_id from queues.task_pending where task_id >= $1 and task_id < $2 and task_id <> all ($3::bigint[])
      order by task_id`,
    [lo, hi, except],
  );
  if (rows.length > 0) await completeAll(rows.map((r) => r.task_id));
}
const progressOf = async (id: string) =>
  (await db.pool('api').query(`select admin.get_task($1) -> 'progress' as p`, [id])).rows[0]?.p ?? null;
const count = async (sql: string, params: unknown[] = []) =>
  Number((await db.query<{ n: string }>(`select count(*) as n from (${sql}) x`, params)).rows[0].n);
const setOf = (id: string | number) => base + Math.floor((Number(id) - base) / SIZE) * SIZE;
const isKept = async (lower: number) =>
  (await count(`select 1 from queues.history_sets() where lower_bound = $1`, [lower])) === 1;

describe('per-task flow facts leave with their history set', () => {
  it('a task pending in a newer set that depends on a task of an older set keeps both sets; progress goes with its set, an edge with its dependent', async () => {
    // Set S1 = [base, base + 10): a task `p` that reports progress, the dependency `a`, fillers.
    const p = await enqueue();
    expect(Number(p)).toBe(base);
    const { rows: claimed } = await db
      .pool('worker')
      .query<{ task_lease_id: string }>(
        `select task_lease_id from queues.claim_tasks('w', 1, $1, 60) where task_id = $2`,
        [[TYPE], p],
      );
    expect(claimed).toHaveLength(1);
    await db
      .pool('worker')
      .query('select queues.record_progress($1, $2, 3, 4, $3)', [p, claimed[0].task_lease_id, 'almost']);
    const a = await enqueue();
    await fillTo(base + SIZE - 1);
    // Set S2 = [base + 10, base + 20): `d` waits for `a` (S1) and for `b` (S2).
    const b = await enqueue();
    const d = await enqueue([a, b]);
    expect([setOf(b), setOf(d)]).toEqual([base + SIZE, base + SIZE]);
    await fillTo(base + 3 * SIZE + 1); // S1 and S2 below the last id handed out
    await db
      .pool('worker')
      .query(`select queues.complete_tasks(array[$1::bigint], array[$2::bigint])`, [p, claimed[0].task_lease_id]);
    // Every other task of S1 and S2 ends, but one (`q`, below) of S2.
    const { rows: lastOfS2 } = await db.query<{ id: string }>(
      `select max(task_id) as id from queues.task where task_id < $1`,
      [base + 2 * SIZE],
    );
    await completeRange(base, base + 2 * SIZE, [a, b, d, lastOfS2[0].id]);

    // Long after the window: S1 holds the pending dependency `a`, S2 the waiting `d`.
    let r = await maintain(30);
    expect(r.skipped).toEqual([]);
    expect(await isKept(base)).toBe(true);
    expect(await isKept(base + SIZE)).toBe(true);
    expect(await progressOf(p)).toMatchObject({ done: 3, total: 4, note: 'almost', reports: 1 });
    expect(await count(`select 1 from queues.task_dependency where task_id = $1`, [d])).toBe(2);

    // `a` succeeds: S1 is done, but `d` (S2) still waits and will read a's result when it
    // runs: S1 is kept, with p's progress.
    await completeAll([a]);
    r = await maintain(30);
    expect(r.dropped).toEqual([]);
    expect(await isKept(base)).toBe(true);
    expect(await progressOf(p)).toMatchObject({ done: 3, reports: 1 });
    expect(await count(`select 1 from queues.task_pending where task_id = $1 and available_at = 'infinity'`, [d])).toBe(
      1,
    );

    // `b` succeeds: `d` is ready, still pending: S1 is still kept.
    await completeAll([b]);
    const { rows: ready } = await db.query(
      `select available_at <> 'infinity' as ready from queues.task_pending where task_id = $1`,
      [d],
    );
    expect(ready).toEqual([{ ready: true }]);
    expect((await maintain(30)).dropped).toEqual([]);
    expect(
      (await db.pool('worker').query(`select task_id from queues.list_task_dependencies($1) order by 1`, [d])).rows,
    ).toEqual([{ task_id: a }, { task_id: b }]);

    // `d` ends: S1 goes, with p's progress; S2 holds a pending task `q`, so d's edges stay.
    const q = lastOfS2[0].id;
    expect(setOf(q)).toBe(base + SIZE);
    expect(q).not.toBe(d);
    await completeAll([d]);
    r = await maintain(30);
    expect(r.dropped).toEqual([[base, base + SIZE]]);
    expect(await count(`select 1 from queues.task_progress where task_id = $1`, [p])).toBe(0);
    expect(
      (await db.query(`select depends_on_task_id from queues.task_dependency where task_id = $1 order by 1`, [d])).rows,
    ).toEqual([{ depends_on_task_id: a }, { depends_on_task_id: b }]);

    // `q` ends: S2 goes, with d's edges.
    await completeAll([q]);
    r = await maintain(30);
    expect(r.dropped).toContainEqual([base + SIZE, base + 2 * SIZE]);
    expect(await count(`select 1 from queues.task_dependency where task_id = $1`, [d])).toBe(0);
    // No partition of a dropped set is left behind, in either table.
    expect(
      await count(
        `select 1 from pg_class where relnamespace = 'queues'::regnamespace
            and relname in ('task_progress_p' || $1, 'task_dependency_p' || $1, 'task_progress_p' || $2, 'task_dependency_p' || $2)`,
        [base, base + SIZE],
      ),
    ).toBe(0);
  });

  it('a dependent its claim lease holds (no claim-index row, no end) keeps the set of its dependency until it ends', async () => {
    const { rows } = await db.query(
      `select max(upper_bound) as top from queues.history_partitions() where not is_default`,
    );
    const lo = Number(rows[0].top);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo - 1]);
    await maintain();
    // S1 = [lo, lo + 10) holds the dependency `a`; S2 the dependent `d`.
    const a = await enqueue();
    expect(Number(a)).toBe(lo);
    await fillTo(lo + SIZE - 1);
    const d = await enqueue([a]);
    expect(Number(d)).toBeGreaterThanOrEqual(lo + SIZE);
    await fillTo(lo + 3 * SIZE + 1); // S1 and S2 below the last id handed out
    // Every task of S1 and S2 ends but `d`, which a claim then takes out of the claim index.
    await completeRange(lo, lo + 2 * SIZE, [d]);
    const { rows: claimed } = await db
      .pool('worker')
      .query<{ task_id: string; task_lease_id: string }>(
        `select task_id, task_lease_id from queues.claim_tasks('w', 1000, $1, 60)`,
        [[TYPE]],
      );
    const lease = claimed.find((c) => c.task_id === d)?.task_lease_id;
    expect(lease).toBeDefined();
    expect(await count(`select 1 from queues.task_pending where task_id = $1`, [d])).toBe(0);

    // Long after the window: `d` runs and will read a's result: S1 is kept.
    let r = await maintain(30);
    expect(r.skipped).toEqual([]);
    expect(r.dropped).not.toContainEqual([lo, lo + SIZE]);
    expect(await isKept(lo)).toBe(true);
    expect(
      (await db.pool('worker').query(`select task_id from queues.list_task_dependencies($1) order by 1`, [d])).rows,
    ).toEqual([{ task_id: a }]);

    // `d` ends on its claim's lease: S1 goes.
    await db.pool('worker').query(`select queues.complete_tasks(array[$1::bigint], array[$2::bigint])`, [d, lease]);
    r = await maintain(30);
    expect(r.dropped).toContainEqual([lo, lo + SIZE]);
  });

  it('every set has a partition of task_progress and task_dependency, and rows land in their task set', async () => {
    const { rows } = await db.query(
      `select t.name, count(b.partition_name) as n
         from unnest(array['task', 'task_progress', 'task_dependency']) t(name)
         left join queues.history_partition_bounds() b on b.table_name = t.name
        group by t.name order by t.name`,
    );
    expect(new Set(rows.map((r) => r.n)).size).toBe(1);
    const dep = await enqueue();
    const x = await enqueue([dep]);
    const { rows: where } = await db.query(
      `select tableoid::regclass::text as t from queues.task_dependency where task_id = $1`,
      [x],
    );
    const { rows: task } = await db.query(`select tableoid::regclass::text as t from queues.task where task_id = $1`, [
      x,
    ]);
    expect(task[0].t).toMatch(/^queues\.task_p\d+$/);
    expect(where).toEqual([{ t: task[0].t.replace('task_p', 'task_dependency_p') }]);
  });
});

describe('throttle reports and rate-limit windows are pruned by maintenance', () => {
  /** Inserts a report recorded `agoDays` days ago, lasting `minutes`; returns its id. */
  const report = async (key: string, agoDays: number, minutes: number, taskId: string | null = null) =>
    (
      await db.query<{ id: string }>(
        `insert into queues.throttle (key_kind, key, throttled_until, reason, recorded_at, recorded_by, task_id, task_lease_id)
         values ('task_type', $1, now() - make_interval(days => $2) + make_interval(mins => $3), 'HTTP 429',
                 now() - make_interval(days => $2), 'w', $4, $5)
         returning throttle_id as id`,
        [key, agoDays, minutes, taskId, taskId === null ? null : 1],
      )
    ).rows[0].id;
  const kept = async (ids: string[]) =>
    (
      await db.query<{ id: string }>(
        `select throttle_id as id from queues.throttle where throttle_id = any ($1::bigint[]) order by 1`,
        [ids],
      )
    ).rows.map((r) => r.id);
  const throttled = async () =>
    (await db.query<{ t: string[] }>(`select (queues.throttled_keys_at(now())).task_types as t`)).rows[0].t.sort();

  it('deletes ended, superseded reports; keeps one in force, the latest of each key, and what a clear still needs', async () => {
    // sms: two reports that ended weeks ago, then one in force.
    const smsOld1 = await report('sms', 30, 5);
    const smsOld2 = await report('sms', 20, 5);
    const smsLive = await report('sms', 0, 60);
    // email: one in force (cleared by the operator), then an old one (recorded with an
    // old clock) that the clear names, then a later old one. Deleting the one the clear
    // names would delete the clear (on delete cascade) and bring the live one back.
    const emailLive = await report('email', 0, 600);
    const emailOld = await report('email', 30, 5);
    await db.query(
      `insert into queues.throttle_cleared (key_kind, key, last_throttle_id, cleared_by) values ('task_type', 'email', $1, 'olga')`,
      [emailOld],
    );
    const emailLater = await report('email', 20, 5);
    // product_resync: an old report naming a task still in the history.
    const task = await enqueue();
    const taskOld = await report(TYPE, 30, 5, task);
    const taskLater = await report(TYPE, 20, 5);
    expect(await throttled()).toEqual(['sms']);

    await maintain();

    expect(await kept([smsOld1, smsOld2, smsLive])).toEqual([smsLive]);
    expect(await kept([emailLive, emailOld, emailLater])).toEqual([emailLive, emailOld, emailLater]);
    expect(await count(`select 1 from queues.throttle_cleared where key = 'email'`)).toBe(1);
    expect(await kept([taskOld, taskLater])).toEqual([taskOld, taskLater]);
    expect(await throttled()).toEqual(['sms']);

    // Once the live email report has ended longer ago than the window, the old ones go
    // (the latest stays), and nothing is throttled that was not.
    await db.query(`update queues.history_setting set retention = interval '1 minute'`);
    try {
      const { rows } = await db.query(`select queues.prune_flow_facts_at(now() + interval '1 day') as r`);
      expect(rows[0].r).toMatchObject({ throttles: 2, throttle_clears: 1 });
    } finally {
      await db.query(`update queues.history_setting set retention = default`);
    }
    expect(await kept([smsOld1, smsOld2, smsLive, emailLive, emailOld, emailLater])).toEqual([smsLive, emailLater]);
    expect(await kept([taskOld, taskLater])).toEqual([taskOld, taskLater]);
  });

  it('with no retention window at all, a report in force is kept and the ended one before it goes', async () => {
    // email holds one report, ended 20 days ago; then one in force and a later one.
    const ended = (
      await db.query<{ id: string }>(`select max(throttle_id) as id from queues.throttle where key = 'email'`)
    ).rows[0].id;
    const live = await report('email', 0, 60);
    const later = await report('email', 0, 30);
    await db.query(`update queues.history_setting set retention = interval '0'`);
    try {
      await db.query(`select queues.prune_flow_facts_at(now())`);
    } finally {
      await db.query(`update queues.history_setting set retention = default`);
    }
    expect(await kept([ended, live, later])).toEqual([live, later]);
    expect(await throttled()).toContain('email');
  });

  it('deletes counters of windows that started more than a day ago, keeps the current ones', async () => {
    await db.query(
      `insert into queues.task_limit_window (task_type, group_key, window_start, starts)
       values ($1, 'tenant-gone', now() - interval '3 days', 7), ($1, 'tenant-live', now() - interval '1 minute', 2),
              ($1, '', now() - interval '25 hours', 1)`,
      [TYPE],
    );
    await maintain();
    expect(
      (await db.query(`select group_key from queues.task_limit_window where task_type = $1 order by 1`, [TYPE])).rows,
    ).toEqual([{ group_key: 'tenant-live' }]);
  });
});
