// The readers of leased tasks (sql/queues/lease_held.sql): a claim takes an unkeyed task of
// an unlimited type out of the claim index on its first lease, and its claim lease holds
// it with no queues.task_pending row. Every reader that asks which tasks are leased sees
// such a task as leased by that lease: running (claimed before its start), stale once
// the lease expired, and pending again only when it has a row of its own.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
const TYPE = 'held_a';
const OTHER = 'held_b';
beforeAll(async () => {
  db = await createTestDatabase();
  for (const type of [TYPE, OTHER])
    await db.query(`insert into queues.task_type (task_type) values ($1) on conflict do nothing`, [type]);
});
afterAll(async () => {
  await db?.drop();
});
async function reset(): Promise<void> {
  await db.query('delete from queues.worker');
  await db.query('alter table queues.task disable trigger forbid_update');
  await db.query('truncate queues.task cascade');
  await db.query('alter table queues.task enable trigger forbid_update');
  // The due leases of the tasks truncated above.
  await db.query('delete from queues.claim_lease_due');
}

async function enqueue(type: string, n: number): Promise<string[]> {
  const { rows } = await db.query(
    `select queues.enqueue($1, jsonb_build_object('n', g))::text as id from generate_series(1, $2::int) g`,
    [type, n],
  );
  return rows.map((r) => r.id);
}
/** Claims up to `limit` tasks of `type` for `worker` with a 60 s lease, registered as a live worker. */
async function claim(type: string, worker: string, limit = 100) {
  await db.pool('worker').query('select queues.record_worker_heartbeat($1, array[$2])', [worker, type]);
  const { rows } = await db.query<{ task_id: string; task_lease_id: string }>(
    `select task_id::text, task_lease_id::text from queues.claim_tasks_at(now(), $1, $2, array[$3], 60, 5)`,
    [worker, limit, type],
  );
  return rows;
}
const rowsOf = async (ids: string[]) =>
  Number(
    (await db.query(`select count(*)::int as n from queues.task_pending where task_id = any ($1::bigint[])`, [ids]))
      .rows[0].n,
  );
const settle = (ids: string[], leases: string[]) =>
  db
    .pool('worker')
    .query(`select * from queues.settle_tasks($1::bigint[], $2::bigint[], $3::text[], null, null, null, null)`, [
      ids,
      leases,
      ids.map(() => 'succeeded'),
    ]);

describe('lease-held tasks', () => {
  beforeEach(reset);

  it('the readings: the set and one task, lease-held until its end, with a row once rescued', async () => {
    const ids = await enqueue(TYPE, 3);
    const claimed = await claim(TYPE, 'w-held');
    const lease = claimed[0].task_lease_id;
    expect(await rowsOf(ids)).toBe(0);
    const held = await db.query(
      `select task_id::text, task_lease_id::text from queues.lease_held_tasks order by task_id`,
    );
    expect(held.rows).toEqual(ids.map((id) => ({ task_id: id, task_lease_id: lease })));
    const one = await db.query(
      `select current_lease_id::text, lease_count, lease_held, available_at = (select expires_at from queues.claim_lease) as at_expiry
         from queues.task_pending_or_held_of($1)`,
      [ids[1]],
    );
    expect(one.rows).toEqual([{ current_lease_id: lease, lease_count: 1, lease_held: true, at_expiry: true }]);

    // One ends: the others stay held.
    await settle([ids[0]], [lease]);
    const after = await db.query(`select task_id::text from queues.task_pending_or_held order by task_id`);
    expect(after.rows.map((r) => r.task_id)).toEqual(ids.slice(1));
    expect((await db.query(`select * from queues.task_pending_or_held_of($1)`, [ids[0]])).rows).toEqual([]);

    // Rescued after its expiry (a claim's rescue pass): rows again, none held.
    await db.query(`select queues.rescue_due_leases_at(now() + interval '2 minutes')`);
    expect(await rowsOf(ids.slice(1))).toBe(2);
    expect((await db.query(`select * from queues.lease_held_tasks`)).rows).toEqual([]);
    const rows = await db.query(
      `select task_id::text, current_lease_id::text, lease_held from queues.task_pending_or_held order by task_id`,
    );
    expect(rows.rows).toEqual(ids.slice(1).map((id) => ({ task_id: id, current_lease_id: lease, lease_held: false })));
  });

  it('rebuilding the claim index writes the row of a lease-held task as its claim lease holds it', async () => {
    const ids = await enqueue(TYPE, 2);
    const [{ task_lease_id: lease }] = await claim(TYPE, 'w-rebuild');
    expect(await rowsOf(ids)).toBe(0);
    const snapshot = async () =>
      (
        await db.query(
          `select task_id::text, task_type, available_at, current_lease_id::text, lease_count, released_count,
                  failed_attempts, uncounted_count, interrupted_count, suspect_lease
             from queues.task_pending_or_held order by task_id`,
        )
      ).rows;
    const before = await snapshot();
    expect(before.map((r) => r.current_lease_id)).toEqual([lease, lease]);
    await db.query('select queues.rebuild_task_pending()');
    // Rows now (the rebuild reads the facts, not the ready set), each as the reader gave it.
    expect(await rowsOf(ids)).toBe(2);
    expect(await snapshot()).toEqual(before);
  });

  it('admin.list_tasks: claimed, running and stale list a lease-held task, pending does not', async () => {
    const [a, b] = await enqueue(TYPE, 2);
    await claim(TYPE, 'w-list', 1);
    expect(await rowsOf([a])).toBe(0);
    const list = async (state: string | null, at = 'now()') =>
      (
        await db.query(
          `select task_id::text, state from admin.list_tasks_at(${at}, $1, $2, null, null, null, null, null, null, null, null)`,
          [TYPE, state],
        )
      ).rows;
    expect(await list('claimed')).toEqual([{ task_id: a, state: 'running' }]);
    expect(await list('running')).toEqual([{ task_id: a, state: 'running' }]);
    expect(await list('pending')).toEqual([{ task_id: b, state: 'ready' }]);
    expect(await list(null)).toEqual([
      { task_id: b, state: 'ready' },
      { task_id: a, state: 'running' },
    ]);
    expect(await list('stale')).toEqual([]);
    // Its lease expired, not yet rescued: stale.
    expect(await list('stale', `now() + interval '2 minutes'`)).toEqual([{ task_id: a, state: 'ready' }]);
    const byWorker = await db.query(
      `select task_id::text from admin.list_tasks_at(now(), null, 'running', null, null, 'w-list', null, null, null, null, null)`,
    );
    expect(byWorker.rows).toEqual([{ task_id: a }]);
  });

  it('admin.get_task and admin.task_counts: running, by its claim lease', async () => {
    const [a] = await enqueue(TYPE, 1);
    const [{ task_lease_id: lease }] = await claim(TYPE, 'w-page');
    const { rows } = await db.query(`select admin.get_task_at(now(), $1) as t`, [a]);
    expect(rows[0].t.task.state).toBe('running');
    expect(String(rows[0].t.task.current_lease_id)).toBe(lease);
    expect(rows[0].t.leases.map((l: { live: boolean }) => l.live)).toEqual([true]);
    const counts = await db.query(
      `select state, count::int from admin.task_counts_at(now(), 3600) where task_type = $1 order by state`,
      [TYPE],
    );
    expect(counts.rows).toEqual([{ state: 'running', count: 1 }]);
  });

  it('admin.list_workers, admin.capacity, admin.list_queues and admin.queue_depth count it in flight', async () => {
    await enqueue(TYPE, 3);
    await claim(TYPE, 'w-flight', 2);
    const workers = await db.query(
      `select worker_id, tasks_in_flight::int from admin.list_workers_at(now(), 600) where worker_id = 'w-flight'`,
    );
    expect(workers.rows).toEqual([{ worker_id: 'w-flight', tasks_in_flight: 2 }]);
    const capacity = await db.query(
      `select pending::int, ready::int, running::int from admin.capacity_at(now(), $1, 3600, 600)`,
      [TYPE],
    );
    expect(capacity.rows).toEqual([{ pending: 3, ready: 1, running: 2 }]);
    const queues = await db.query(
      `select ready::int, running::int from admin.list_queues_at(now()) where task_type = $1`,
      [TYPE],
    );
    expect(queues.rows).toEqual([{ ready: 1, running: 2 }]);
    const depth = await db.query(
      `select depth::int from admin.queue_depth_at(now(), 3600, 600) where task_type = $1 order by bucket_end desc limit 1`,
      [TYPE],
    );
    expect(depth.rows).toEqual([{ depth: 3 }]);
  });

  it("admin.capacity: completions under claim leases name their leases' workers and runs", async () => {
    // Two workers' claims, side by side; each run reported from 10 s before its end.
    const ends: string[] = [];
    for (const worker of ['w-cap-a', 'w-cap-b']) {
      await enqueue(TYPE, 3);
      const claimed = await claim(TYPE, worker, 3);
      expect(claimed).toHaveLength(3);
      await db.pool('worker').query(
        `select * from queues.settle_tasks($1::bigint[], $2::bigint[], $3::text[], null, null, null,
                  array_fill((date_part('epoch', now() - interval '10 seconds') * 1000000)::bigint, array[3]))`,
        [claimed.map((c) => c.task_id), claimed.map((c) => c.task_lease_id), claimed.map(() => 'succeeded')],
      );
      ends.push(...claimed.map((c) => c.task_id));
    }
    const { rows } = await db.query(
      `select completed_in_window::int, window_workers::int, round(tasks_per_worker_hour)::int as rate
         from admin.capacity_at(now(), $1, 3600, 600)`,
      [TYPE],
    );
    // 6 runs over two workers' 10 s of busy time each: 6 / (20 s / 3600).
    expect(rows).toEqual([{ completed_in_window: 6, window_workers: 2, rate: 1080 }]);
  });

  it('public.worker_tasks: claimed, its worker and claim time; stale once its lease expired', async () => {
    const [a] = await enqueue(TYPE, 1);
    await claim(TYPE, 'w-spec');
    const { rows } = await db
      .pool('api')
      .query(`select id::text, status, worker_id, claimed_at is not null as claimed from worker_tasks where id = $1`, [
        a,
      ]);
    expect(rows).toEqual([{ id: a, status: 'claimed', worker_id: 'w-spec', claimed: true }]);
    // Its worker silent for longer than three heartbeat intervals: stale.
    await db.query(`update queues.worker set last_seen_at = now() - interval '10 minutes' where worker_id = 'w-spec'`);
    const stale = await db.pool('api').query(`select status from worker_tasks where id = $1`, [a]);
    expect(stale.rows).toEqual([{ status: 'stale' }]);
  });

  it('dependencies: a lease-held dependency is pending, not succeeded, and its dependent waits', async () => {
    const [dep] = await enqueue(TYPE, 1);
    const { rows: enq } = await db.query(
      `select queues.enqueue($1, '{}'::jsonb, _depends_on => array[$2::bigint])::text as id`,
      [OTHER, dep],
    );
    const dependent = enq[0].id;
    const [{ task_lease_id: lease }] = await claim(TYPE, 'w-dep');
    expect(await rowsOf([dep])).toBe(0);
    const listed = await db.query(`select task_id::text, outcome from queues.list_task_dependencies($1)`, [dependent]);
    expect(listed.rows).toEqual([{ task_id: dep, outcome: null }]);
    const verdict = await db.query(
      `select pending, failed_dep from queues.dependency_verdicts(array[$1::bigint], '{}', '{}')`,
      [dependent],
    );
    expect(verdict.rows).toEqual([{ pending: true, failed_dep: null }]);
    const page = await db.query(`select admin.get_task_at(now(), $1) -> 'dependents' as d`, [dep]);
    expect(page.rows[0].d).toEqual([{ task_id: Number(dependent), task_type: OTHER, state: 'waiting' }]);
    // Its dependency ends: it is released, and the task page says so.
    await settle([dep], [lease]);
    const after = await db.query(`select task_id::text, outcome from queues.list_task_dependencies($1)`, [dependent]);
    expect(after.rows).toEqual([{ task_id: dep, outcome: 'succeeded' }]);
  });

  it('run now answers not_scheduled for a lease-held task; the supervisor counts an expired lease-held run', async () => {
    const [a] = await enqueue(TYPE, 1);
    await claim(TYPE, 'w-now');
    const { rows } = await db.query(
      `select task_id::text, result from admin.run_tasks_now_at(now(), array[$1::bigint])`,
      [a],
    );
    expect(rows).toEqual([{ task_id: a, result: 'not_scheduled' }]);

    await db.query(
      `insert into schedules.supervisor_task (task_id, scheduled_at, enqueued_at) values ($1, now(), now())`,
      [a],
    );
    const live = await db.query(`select task_id::text from schedules.pending_supervisor_task(now())`);
    expect(live.rows).toEqual([{ task_id: null }]);
    const expired = await db.query(
      `select task_id::text from schedules.pending_supervisor_task(now() + interval '2 minutes')`,
    );
    expect(expired.rows).toEqual([{ task_id: a }]);
  });

  it('the limits in force count a lease-held task of a type limited after its claim as running', async () => {
    await enqueue(TYPE, 3);
    await claim(TYPE, 'w-limit', 2);
    await db.query(`select queues.set_task_limit($1, 'type', null, 5)`, [TYPE]);
    try {
      const { rows } = await db.query(
        `select running::int from queues.task_limit_status_at(now()) where task_type = $1`,
        [TYPE],
      );
      expect(rows).toEqual([{ running: 2 }]);
    } finally {
      await db.query(`select queues.clear_task_limit($1, 'type', null)`, [TYPE]);
    }
  });

  it('admin.history_status counts the lease-held tasks of a set as pending', async () => {
    const ids = await enqueue(TYPE, 2);
    await claim(TYPE, 'w-hist');
    const { rows } = await db.query(
      `select (s ->> 'pending_tasks')::int as pending
         from jsonb_array_elements(admin.history_status_at(now()) -> 'partitions') s
        where (s ->> 'lower_bound')::bigint <= $1 and (s ->> 'upper_bound')::bigint > $1`,
      [ids[0]],
    );
    expect(rows).toEqual([{ pending: 2 }]);
  });

  it('a lease-held set is read from the claim leases not yet rescued, not the whole history', async () => {
    // 50 claims of one task each, every one settled: none is held, and none is read.
    for (let i = 0; i < 50; i++) {
      const [id] = await enqueue(TYPE, 1);
      const [c] = await claim(TYPE, 'w-old', 1);
      expect(c.task_id).toBe(id);
      await settle([id], [c.task_lease_id]);
    }
    // Their leases expired and the rescuer passed them: the set reads none.
    await db.query(`select queues.rescue_due_leases_at(now() + interval '2 minutes')`);
    const [held] = await enqueue(TYPE, 1);
    await db.query(`select * from queues.claim_tasks_at(now() + interval '2 minutes', 'w-new', 1, array[$1], 60, 5)`, [
      TYPE,
    ]);
    // Read as the definer readers that walk by key read it (no sequential scans): the
    // claim leases read, kept or filtered out, are the one not yet rescued.
    const root = await db.client('root');
    try {
      await root.query('set enable_seqscan = off');
      const plan = await root.query(`explain (analyze, format json) select task_id from queues.lease_held_tasks`);
      const nodes: Record<string, unknown>[] = [];
      const walk = (n: Record<string, unknown>) => {
        nodes.push(n);
        for (const c of (n.Plans as Record<string, unknown>[] | undefined) ?? []) walk(c);
      };
      walk(plan.rows[0]['QUERY PLAN'][0].Plan);
      const claimLeaseRows = nodes
        .filter((n) => /^claim_lease(_p\d+|_default)?$/.test((n['Relation Name'] as string | undefined) ?? ''))
        .reduce(
          (sum, n) =>
            sum +
            (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) * Number(n['Actual Loops'] ?? 1),
          0,
        );
      expect(claimLeaseRows).toBe(1);
    } finally {
      await root.end();
    }
    const { rows } = await db.query(`select task_id::text from queues.lease_held_tasks`);
    expect(rows).toEqual([{ task_id: held }]);
  });

  /**
   * Claim leases in every shape a due lease can take: `whole` (every task succeeded under
   * it), `failed` (one failed for good under it, one succeeded), `open` (one retried, then
   * claimed again on its row and ended under that newer lease, one succeeded, one still
   * held), `moved` (one retried and ended under a newer lease, one succeeded: none held),
   * `mixed` (tasks of both types, one succeeded), and, last, `expired` (a lease already
   * expired, its tasks held until the rescuer passes), with one task never claimed.
   */
  async function everyShape() {
    const settleAs = (ids: string[], lease: string, outcome: string, retry: boolean) =>
      db
        .pool('worker')
        .query(`select * from queues.settle_tasks($1::bigint[], $2::bigint[], $3::text[], $4::boolean[])`, [
          ids,
          ids.map(() => lease),
          ids.map(() => outcome),
          ids.map(() => retry),
        ]);
    // A retried task's row made ready and claimed again on it (a newer lease), then ended.
    const endUnderNewerLease = async (id: string) => {
      await db.query(`update queues.task_pending set available_at = now() - interval '1 second' where task_id = $1`, [
        id,
      ]);
      const again = await claim(TYPE, 'w-again', 1);
      expect(again.map((r) => r.task_id)).toEqual([id]);
      await settle([id], [again[0].task_lease_id]);
    };
    const lease = async (ids: string[], types = [TYPE], at = 'now()') => {
      await db.pool('worker').query(`select queues.record_worker_heartbeat('w-shape', $1::text[])`, [types]);
      const { rows } = await db.query<{ task_id: string; task_lease_id: string }>(
        `select task_id::text, task_lease_id::text from queues.claim_tasks_at(${at}, 'w-shape', 100, $1::text[], 60, 5)`,
        [types],
      );
      expect(rows.map((r) => r.task_id).sort()).toEqual([...ids].sort());
      return rows[0].task_lease_id;
    };
    const whole = await enqueue(TYPE, 3);
    const wholeLease = await lease(whole);
    await settle(
      whole,
      whole.map(() => wholeLease),
    );
    const failed = await enqueue(TYPE, 2);
    const failedLease = await lease(failed);
    await settleAs([failed[0]], failedLease, 'failed', false);
    await settle([failed[1]], [failedLease]);
    const open = await enqueue(TYPE, 3);
    const openLease = await lease(open);
    await settleAs([open[0]], openLease, 'failed', true);
    await endUnderNewerLease(open[0]);
    await settle([open[1]], [openLease]);
    const moved = await enqueue(TYPE, 2);
    const movedLease = await lease(moved);
    await settleAs([moved[0]], movedLease, 'failed', true);
    await endUnderNewerLease(moved[0]);
    await settle([moved[1]], [movedLease]);
    const mixed = [...(await enqueue(TYPE, 2)), ...(await enqueue(OTHER, 2))];
    const mixedLease = await lease(mixed, [TYPE, OTHER]);
    await settle([mixed[0]], [mixedLease]);
    // (scheduled before that claim's time)
    const { rows: past } = await db.query(
      `select queues.enqueue($1, '{}'::jsonb, _scheduled_at => now() - interval '3 minutes')::text as id
         from generate_series(1, 2)`,
      [OTHER],
    );
    const expired = past.map((r) => r.id as string);
    const expiredLease = await lease(expired, [OTHER], `now() - interval '2 minutes'`);
    const [unclaimed] = await enqueue(TYPE, 1);
    return { open, openLease, mixed, mixedLease, expired, expiredLease, unclaimed, dueLeases: 6 };
  }

  it('a claim lease whose tasks all ended under it is not unnested; one with a task ended otherwise is, and holds what it holds', async () => {
    const { open, openLease, mixed, mixedLease, expired, expiredLease } = await everyShape();
    const held = await db.query(
      `select h.task_id::text, h.task_lease_id::text from queues.lease_held_tasks h order by h.task_id`,
    );
    expect(held.rows).toEqual(
      [
        { task_id: open[2], task_lease_id: openLease },
        ...mixed.slice(1).map((id) => ({ task_id: id, task_lease_id: mixedLease })),
        ...expired.map((id) => ({ task_id: id, task_lease_id: expiredLease })),
      ].sort((a, b) => Number(a.task_id) - Number(b.task_id)),
    );
    // The leases whose arrays are unnested: of the 6 due, not `whole` nor `failed` (every
    // task ended under them); `moved` is (one of its tasks ended under a newer lease).
    const plan = await db.query(`explain (analyze, format json) select task_id from queues.lease_held_tasks`);
    const unnested: number[] = [];
    const walk = (n: Record<string, unknown>) => {
      if (n['Function Name'] === 'unnest' && /^x(_\d+)?$/.test(String(n.Alias)))
        unnested.push(Number(n['Actual Loops']));
      for (const c of (n.Plans as Record<string, unknown>[] | undefined) ?? []) walk(c);
    };
    walk(plan.rows[0]['QUERY PLAN'][0].Plan);
    expect(unnested).toEqual([4]);
  });

  it('the counts: queues.task_pending_or_held_counts sums to what task_pending_or_held lists, per lease and type', async () => {
    const { mixedLease } = await everyShape();
    const listed = await db.query(
      `select task_type, available_at, current_lease_id::text, lease_count, lease_held, count(*)::int as n
         from queues.task_pending_or_held
        group by 1, 2, 3, 4, 5 order by 1, 2, 3, 4, 5`,
    );
    const counted = await db.query(
      `select task_type, available_at, current_lease_id::text, lease_count, lease_held, sum(tasks)::int as n
         from queues.task_pending_or_held_counts
        group by 1, 2, 3, 4, 5 order by 1, 2, 3, 4, 5`,
    );
    expect(counted.rows).toEqual(listed.rows);
    // Held by 3 leases (one of two types), and the unclaimed task and the retried ones' rows.
    expect(listed.rows.filter((r) => r.lease_held)).toHaveLength(4);
    expect(listed.rows.filter((r) => !r.lease_held).length).toBeGreaterThan(0);
    const perLease = await db.query(
      `select task_type, sum(tasks)::int as n from queues.lease_held_counts
        where task_lease_id = $1 group by 1 order by 1`,
      [mixedLease],
    );
    expect(perLease.rows).toEqual([
      { task_type: TYPE, n: 1 },
      { task_type: OTHER, n: 2 },
    ]);
    // The readers that count read it: the same states as the rows give them.
    const states = await db.query(
      `select task_type, admin.pending_state(available_at, current_lease_id, lease_count, now()) as state,
              count(*)::text as count
         from queues.task_pending_or_held group by 1, 2 order by 1, 2`,
    );
    const counts = await db.query(
      `select task_type, state, count::text from admin.task_counts_at(now(), 3600)
        where state in ('waiting', 'scheduled', 'ready', 'running', 'retrying') order by 1, 2`,
    );
    expect(counts.rows).toEqual(states.rows);
    expect(states.rows.map((r) => r.state)).toEqual(expect.arrayContaining(['ready', 'running']));
  });
});
