// The ready set (docs/design/hot-path.md): a claim takes an unkeyed task of an unlimited
// type out of the claim index (a delete, no new row version); its claim lease holds it
// and fences its completion; the rescuer (queues.rescue_leases_at) returns an expired
// lease's unfinished tasks to the claim index, where the next claim takes them as an
// expired lease, counting the expiry only for the lease's named suspect.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  for (const type of [
    'ready_a',
    'ready_b',
    'ready_c',
    'ready_d',
    'ready_e',
    'ready_f',
    'ready_g',
    'ready_h',
    'ready_i',
    'ready_j',
  ])
    await db.query(`insert into queues.task_type (task_type) values ($1) on conflict do nothing`, [type]);
});
afterAll(async () => {
  await db?.drop();
});

interface Claimed {
  task_id: string;
  task_lease_id: string;
}

async function enqueue(type: string, n: number, resourceKey: string | null = null): Promise<string[]> {
  const { rows } = await db.query(
    `select queues.enqueue($1, jsonb_build_object('n', g), _resource_key => $3 || g)::text as id
       from generate_series(1, $2::int) g`,
    [type, n, resourceKey],
  );
  return rows.map((r) => r.id);
}
/** Claims up to `limit` ready tasks of `type` at now() + `seconds` (60 s leases). */
async function claimAt(type: string, seconds: number, worker: string, limit = 1000, maxLeases = 5) {
  const { rows } = await db.query<Claimed>(
    `select task_id::text, task_lease_id::text
       from queues.claim_tasks_at(now() + make_interval(secs => $1), $2, $3, array[$4], 60, $5)`,
    [seconds, worker, limit, type, maxLeases],
  );
  return rows;
}
const settle = async (ids: string[], leases: string[], outcome = 'succeeded') =>
  new Map(
    (
      await db
        .pool('worker')
        .query(
          `select task_id::text, result from queues.settle_tasks($1::bigint[], $2::bigint[], $3::text[], null, null, null, null)`,
          [ids, leases, ids.map(() => outcome)],
        )
    ).rows.map((r) => [r.task_id, r.result]),
  );
const rescueAt = async (seconds: number) =>
  Number(
    (await db.query(`select queues.rescue_leases_at(now() + make_interval(secs => $1)) as n`, [seconds])).rows[0].n,
  );
const pendingOf = async (ids: string[]) =>
  (
    await db.query<{ task_id: string; current_lease_id: string | null }>(
      `select task_id::text, current_lease_id::text from queues.task_pending where task_id = any ($1::bigint[]) order by task_id`,
      [ids],
    )
  ).rows;

describe('the ready set', () => {
  it('a claim deletes the claim-index rows of unkeyed tasks; keyed tasks keep theirs, leased', async () => {
    const plain = await enqueue('ready_a', 3);
    const keyed = await enqueue('ready_a', 2, 'ready-key-');
    const claimed = await claimAt('ready_a', 0, 'w-a');
    expect(claimed.map((c) => c.task_id).sort()).toEqual([...plain, ...keyed].sort());
    const lease = claimed[0].task_lease_id;
    expect(await pendingOf(plain)).toEqual([]);
    expect(await pendingOf(keyed)).toEqual(keyed.map((id) => ({ task_id: id, current_lease_id: lease })));
    // Both complete under the claim's lease, and each ends once.
    const results = await settle(
      [...plain, ...keyed],
      claimed.map(() => lease),
    );
    expect([...results.values()]).toEqual(claimed.map(() => 'completed'));
    expect([
      ...(
        await settle(
          plain,
          plain.map(() => lease),
        )
      ).values(),
    ]).toEqual(plain.map(() => 'already_completed'));
  });

  it('a lease-held task ends under its lease with every outcome: succeeded, failed, retried', async () => {
    const { rows: once } = await db.query(
      `select queues.enqueue('ready_e', '{}'::jsonb, _max_attempts => 1)::text as id from generate_series(1, 2)`,
    );
    const ids = once.map((r) => r.id as string);
    const { rows: retrying } = await db.query(
      `select queues.enqueue('ready_e', '{}'::jsonb, _max_attempts => 3)::text as id`,
    );
    const claimed = await claimAt('ready_e', 0, 'w-e');
    const lease = claimed[0].task_lease_id;
    const one = async (id: string, outcome: string) =>
      (await db.query(`select queues.complete_task($1, $2, $3) as done`, [id, lease, outcome])).rows[0].done as boolean;
    expect(await one(ids[0], 'succeeded')).toBe(true);
    expect(await one(ids[1], 'failed')).toBe(true);
    expect(await one(retrying[0].id, 'failed')).toBe(true);
    const { rows } = await db.query(
      `select u.id::text as task_id, (select outcome from queues.task_end_of(u.id)) as outcome,
              (select available_at > now() from queues.task_pending p where p.task_id = u.id) as waits
         from unnest($1::bigint[]) u(id) order by u.id`,
      [[ids[0], ids[1], retrying[0].id]],
    );
    expect(rows).toEqual([
      { task_id: ids[0], outcome: 'succeeded', waits: null },
      { task_id: ids[1], outcome: 'failed', waits: null },
      { task_id: retrying[0].id, outcome: null, waits: true },
    ]);
  });

  it('the rescuer returns an expired lease’s unfinished tasks, not its ended ones; the late holder is then refused', async () => {
    const ids = await enqueue('ready_b', 4);
    const [first, ...rest] = await claimAt('ready_b', 0, 'w-b');
    const lease = first.task_lease_id;
    expect((await settle([ids[0]], [lease])).get(ids[0])).toBe('completed');
    // Not expired yet: nothing comes back.
    expect(await rescueAt(30)).toBe(0);
    expect(await rescueAt(70)).toBe(3);
    expect(await pendingOf(ids)).toEqual(ids.slice(1).map((id) => ({ task_id: id, current_lease_id: lease })));
    // Rescued once: a second pass returns nothing.
    expect(await rescueAt(80)).toBe(0);
    expect(rest).toHaveLength(3);
    // Taken again by other workers, as an expired lease (one suspect per claim, and one
    // named suspect per worker at a time).
    const again = [
      ...(await claimAt('ready_b', 90, 'w-thief-1')),
      ...(await claimAt('ready_b', 90, 'w-thief-2')),
      ...(await claimAt('ready_b', 90, 'w-thief-3')),
    ];
    expect(again.map((c) => c.task_id).sort()).toEqual(ids.slice(1).sort());
    const late = await settle(
      ids.slice(1),
      ids.slice(1).map(() => lease),
    );
    expect([...late.values()]).toEqual(['lease_lost', 'lease_lost', 'lease_lost']);
    for (const c of again) expect((await settle([c.task_id], [c.task_lease_id])).get(c.task_id)).toBe('completed');
  });

  it('a task back in the claim index is claimed again on its row; its earlier lease stays refused', async () => {
    const { rows: enq } = await db.query(
      `select queues.enqueue('ready_f', '{}'::jsonb, _max_attempts => 3)::text as id from generate_series(1, 2)`,
    );
    const [retried, rescued] = enq.map((r) => r.id as string);
    const first = await claimAt('ready_f', 0, 'w-f');
    expect(first.map((c) => c.task_id).sort()).toEqual([retried, rescued].sort());
    const lease = first[0].task_lease_id;
    // Taken out of the claim index by their first lease.
    expect(await pendingOf([retried, rescued])).toEqual([]);
    // One fails with attempts left (back at its retry time), the other's lease expires.
    expect((await settle([retried], [lease], 'failed')).get(retried)).toBe('retry_scheduled');
    expect(await rescueAt(70)).toBe(1);
    // Claimed again (past the retry's backoff), each on its row, under the new lease.
    const again = [...(await claimAt('ready_f', 7200, 'w-f2')), ...(await claimAt('ready_f', 7200, 'w-f2'))];
    expect(again.map((c) => c.task_id).sort()).toEqual([retried, rescued].sort());
    expect((await pendingOf([retried, rescued])).map((p) => p.current_lease_id).sort()).toEqual(
      again.map((c) => c.task_lease_id).sort(),
    );
    // The first lease's holder is refused for both; the new holders complete them.
    const late = await settle([retried, rescued], [lease, lease]);
    expect([...late.values()]).toEqual(['lease_lost', 'lease_lost']);
    for (const c of again) expect((await settle([c.task_id], [c.task_lease_id])).get(c.task_id)).toBe('completed');
    expect(await pendingOf([retried, rescued])).toEqual([]);
  });

  it('a task released or retrying is claimed again on its row with nothing to rescue beside it; the earlier lease is refused', async () => {
    const { rows: enq } = await db.query(
      `select queues.enqueue('ready_j', '{}'::jsonb, _max_attempts => 3)::text as id from generate_series(1, 3)`,
    );
    const [released, retried, fresh] = enq.map((r) => r.id as string);
    const first = await claimAt('ready_j', 0, 'w-j', 2);
    expect(first.map((c) => c.task_id).sort()).toEqual([released, retried].sort());
    const lease = first[0].task_lease_id;
    const { rows: given } = await db.query(
      `select task_id::text from queues.release_leases($1::bigint[], $2::bigint[])`,
      [[released], [lease]],
    );
    expect(given).toEqual([{ task_id: released }]);
    expect((await settle([retried], [lease], 'failed')).get(retried)).toBe('retry_scheduled');
    // No lease is due to be rescued: the claim's candidates are these two, leased before,
    // and one on its first lease.
    const again = await claimAt('ready_j', 7200, 'w-j2');
    expect(again.map((c) => c.task_id).sort()).toEqual([released, retried, fresh].sort());
    const newLease = again[0].task_lease_id;
    // The two leased before are leased on their rows; the fresh one left the claim index.
    expect(await pendingOf([released, retried, fresh])).toEqual(
      [released, retried].sort().map((id) => ({ task_id: id, current_lease_id: newLease })),
    );
    expect([...(await settle([released, retried], [lease, lease])).values()]).toEqual(['lease_lost', 'lease_lost']);
    expect([...(await settle([released, retried, fresh], [newLease, newLease, newLease])).values()]).toEqual([
      'completed',
      'completed',
      'completed',
    ]);
  });

  it('a claim rescues the claim leases expired since the last pass: no rescuer call needed', async () => {
    const ids = await enqueue('ready_g', 2);
    const first = await claimAt('ready_g', 0, 'w-g');
    expect(first).toHaveLength(2);
    expect((await settle([ids[0]], [first[0].task_lease_id])).get(ids[0])).toBe('completed');
    // Not expired yet: the claim finds nothing.
    expect(await claimAt('ready_g', 30, 'w-g2')).toEqual([]);
    // Expired: the claim itself returns the unfinished task and takes it, on its row.
    const again = await claimAt('ready_g', 70, 'w-g2');
    expect(again.map((c) => c.task_id)).toEqual([ids[1]]);
    expect(await pendingOf([ids[1]])).toEqual([{ task_id: ids[1], current_lease_id: again[0].task_lease_id }]);
    expect((await settle([ids[1]], [first[0].task_lease_id])).get(ids[1])).toBe('lease_lost');
    expect((await settle([ids[1]], [again[0].task_lease_id])).get(ids[1])).toBe('completed');
  });

  it('a heartbeat puts a lease-held task back on a row, extended; the claims and the rescuer leave it', async () => {
    const ids = await enqueue('ready_h', 2);
    const first = await claimAt('ready_h', 0, 'w-h');
    const lease = first[0].task_lease_id;
    expect(await pendingOf(ids)).toEqual([]);
    const { rows: beat } = await db.query(
      `select task_id::text, task_lease_id::text, expires_at = now() + interval '90 s' as ok
         from queues.extend_leases_at(now() + interval '30 s', array[$1::bigint], array[$2::bigint], 60)`,
      [ids[0], lease],
    );
    expect(beat).toEqual([{ task_id: ids[0], task_lease_id: lease, ok: true }]);
    expect(await pendingOf(ids)).toEqual([{ task_id: ids[0], current_lease_id: lease }]);
    // Past the claim lease's expiry, before the extension's: only the other task comes back.
    const again = await claimAt('ready_h', 70, 'w-h2');
    expect(again.map((c) => c.task_id)).toEqual([ids[1]]);
    expect(await rescueAt(80)).toBe(0);
    // The heartbeated task completes under its lease; a second heartbeat finds it ended.
    expect((await settle([ids[0]], [lease])).get(ids[0])).toBe('completed');
    const { rows: late } = await db.query(
      `select task_id from queues.extend_leases_at(now() + interval '40 s', array[$1::bigint], array[$2::bigint], 60)`,
      [ids[0], lease],
    );
    expect(late).toEqual([]);
  });

  it('a poison task is abandoned after max_leases + 1 leases; tasks beside it are not counted', async () => {
    const [poison, beside] = await enqueue('ready_c', 2);
    const maxLeases = 2;
    let t = 0;
    // Lease 1: both in one claim, none named; it expires (the worker died).
    expect((await claimAt('ready_c', t, 'w-c', 1000, maxLeases)).map((c) => c.task_id).sort()).toEqual(
      [poison, beside].sort(),
    );
    t += 70;
    await rescueAt(t);
    // From now on each is leased as the named suspect of its own claim. The one beside
    // completes; the poison kills its worker every time.
    const b = await claimAt('ready_c', t, 'w-c', 1, maxLeases);
    expect(b.map((c) => c.task_id)).toEqual([poison]);
    const c = await claimAt('ready_c', t, 'w-c2', 1, maxLeases);
    expect(c.map((x) => x.task_id)).toEqual([beside]);
    expect((await settle([beside], [c[0].task_lease_id])).get(beside)).toBe('completed');
    let leases = 2;
    for (;;) {
      t += 70;
      await rescueAt(t);
      const got = await claimAt('ready_c', t, 'w-c', 1, maxLeases);
      if (got.length === 0) break;
      leases += 1;
      expect(leases).toBeLessThanOrEqual(maxLeases + 1);
    }
    expect(leases).toBe(maxLeases + 1);
    const { rows } = await db.query(`select outcome from queues.task_end_of($1)`, [poison]);
    expect(rows).toEqual([{ outcome: 'abandoned' }]);
  });

  it('a late completion racing the rescuer: exactly one of them wins, every time', async () => {
    const n = 40;
    const ids = await enqueue('ready_d', n);
    const leases: Claimed[] = [];
    for (let i = 0; i < n; i++) leases.push(...(await claimAt('ready_d', 0, `w-d-${i}`, 1)));
    const rescuer = await db.client('owner');
    const completer = await db.client('worker');
    try {
      // One race per lease: its late completion and a rescue pass start together.
      const completions: (string | undefined)[] = [];
      for (const l of leases) {
        const [done] = await Promise.all([
          completer.query(
            `select result from queues.settle_tasks(array[$1::bigint], array[$2::bigint], array['succeeded'], null, null, null, null)`,
            [l.task_id, l.task_lease_id],
          ),
          rescuer.query(`select queues.rescue_leases_at(now() + interval '70 s')`),
        ]);
        completions.push(done.rows[0]?.result);
      }
      await rescuer.query(`select queues.rescue_leases_at(now() + interval '70 s')`);
      const pending = new Set((await pendingOf(ids)).map((p) => p.task_id));
      const { rows } = await db.query<{ task_id: string }>(
        `select u.id::text as task_id from unnest($1::bigint[]) u(id) where exists (select 1 from queues.task_end_of(u.id))`,
        [ids],
      );
      const ended = new Set(rows.map((r) => r.task_id));
      leases.forEach((l, i) => {
        // Completed and back in the claim index: never both, and always one.
        expect(ended.has(l.task_id) !== pending.has(l.task_id)).toBe(true);
        expect(completions[i] === 'completed').toBe(ended.has(l.task_id));
      });
    } finally {
      await rescuer.end();
      await completer.end();
    }
  });
  it("a claim lease committed after its expiry, and after another claim's rescue pass, is rescued by the next pass", async () => {
    // A committed lease of 1 s, which the other claim's pass rescues.
    const [passed] = await enqueue('ready_i', 1);
    const { rows: first } = await db.query<Claimed>(
      `select task_id::text from queues.claim_tasks_at(now(), 'w-i0', 1, array['ready_i'], 1, 5)`,
    );
    expect(first.map((c) => c.task_id)).toEqual([passed]);
    // A claim transaction that outlasts its lease of 1 s.
    const [late] = await enqueue('ready_i', 1);
    const slow = await db.client('owner');
    try {
      await slow.query('begin');
      const { rows: held } = await slow.query<Claimed>(
        `select task_id::text, task_lease_id::text from queues.claim_tasks_at(now(), 'w-i1', 1, array['ready_i'], 1, 5)`,
      );
      expect(held.map((c) => c.task_id)).toEqual([late]);
      await new Promise((resolve) => setTimeout(resolve, 1500));
      // Another claim's pass, after both expiries: it rescues the first lease; the second is
      // not committed yet.
      const other = await claimAt('ready_i', 0, 'w-i2');
      expect(other.map((c) => c.task_id)).toEqual([passed]);
      await slow.query('commit');
      expect(await pendingOf([late])).toEqual([]);
      // The next pass reads it: the task comes back, leased by the lease that expired, and
      // the claim takes it.
      expect((await claimAt('ready_i', 0, 'w-i3')).map((c) => c.task_id)).toEqual([late]);
    } finally {
      await slow.end();
    }
  });
});
