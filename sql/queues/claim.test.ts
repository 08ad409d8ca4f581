// Claiming, completing and failing tasks, against a real PostgreSQL: exclusivity under
// concurrency, the semantics of leases and completion, and the claim's independence
// from history.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestDatabase,
  explainNested,
  planNodes,
  sharedBuffers,
  type PlanNode,
  type TestDatabase,
} from '@org/testing';

/** The table a plan node reads; a history partition counts as its parent (task_p0 is task). */
const relationOf = (n: PlanNode): string => (n['Relation Name'] ?? '').replace(/_(p\d+|default)$/, '');

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** Enqueues `n` db_function tasks as the app role, in batches; returns their ids. */
async function enqueueNoops(n: number, extra: Record<string, unknown> = {}): Promise<string[]> {
  const ids: string[] = [];
  for (let start = 0; start < n; start += 5000) {
    const batch = Array.from({ length: Math.min(5000, n - start) }, (_, i) => ({
      task_type: 'db_function',
      payload: { db_function: 'internal.noop', n: start + i },
      max_attempts: 1,
      ...extra,
    }));
    const { rows } = await db
      .pool('owner')
      .query<{ task_id: string }>('select task_id from queues.enqueue_many($1::jsonb)', [JSON.stringify(batch)]);
    ids.push(...rows.map((r) => r.task_id));
  }
  return ids;
}

async function resetQueue(): Promise<void> {
  // Tests share one database: start each from an empty queue (owner-only maintenance).
  await db.query('alter table queues.task disable trigger forbid_update');
  await db.query('truncate queues.task cascade');
  await db.query('alter table queues.task enable trigger forbid_update');
}

interface Claimed {
  task_id: string;
  task_lease_id: string;
  lease_count: number;
  task_type: string;
}

/** Claims as the owner at a chosen clock (`seconds` from now), to move time forward. */
async function claimAt(
  seconds: number,
  worker = 'w-clock',
  limit = 10,
  types: string[] | null = null,
  suspects = 'any',
  maxLeases = 5,
): Promise<Claimed[]> {
  const { rows } = await db.query<Claimed>(
    `select task_id, task_lease_id, lease_count, task_type
       from queues.claim_tasks_at(now() + make_interval(secs => $1), $2, $3, $4, 60, $6, $5)`,
    [seconds, worker, limit, types, suspects, maxLeases],
  );
  return rows;
}

/** The task ids of a claim's rows, in its order. */
const ids = (rows: Claimed[]) => rows.map((r) => r.task_id);

async function claim(worker = 'w1', limit = 10, leaseSeconds = 60, types: string[] | null = null): Promise<Claimed[]> {
  const { rows } = await db
    .pool('worker')
    .query<Claimed>('select task_id, task_lease_id, lease_count, task_type from queues.claim_tasks($1, $2, $3, $4)', [
      worker,
      limit,
      types,
      leaseSeconds,
    ]);
  return rows;
}

describe('exclusivity', () => {
  it('32 concurrent claimers over 6,000 tasks: each task claimed exactly once, no overlapping live leases', async () => {
    await resetQueue();
    const ids = await enqueueNoops(6_000);
    expect(ids).toHaveLength(6_000);

    const claimers = 32;
    const seen = new Map<string, number>();
    const clients = await Promise.all(Array.from({ length: claimers }, () => db.client('worker')));
    let calls = 0;
    await Promise.all(
      clients.map(async (client, i) => {
        for (;;) {
          const { rows } = await client.query<Claimed>(
            'select task_id, task_lease_id from queues.claim_tasks($1, 10, null, 300)',
            [`claimer-${i}`],
          );
          calls++;
          if (rows.length === 0) break;
          for (const r of rows) seen.set(r.task_id, (seen.get(r.task_id) ?? 0) + 1);
          // Complete with fencing, as a worker does, so claims race with completions.
          await client.query('select * from queues.complete_tasks($1::bigint[], $2::bigint[], null)', [
            rows.map((r) => r.task_id),
            rows.map((r) => r.task_lease_id),
          ]);
        }
      }),
    );
    await Promise.all(clients.map((c) => c.end()));

    expect(seen.size).toBe(6_000);
    expect([...seen.values()].every((n) => n === 1)).toBe(true);
    expect(calls).toBeGreaterThanOrEqual(600 + claimers);

    const {
      rows: [counts],
    } = await db.query<{ leases: string; tasks: string; completed: string; overlaps: string }>(`
      select (select count(*) from queues.task_leases) as leases,
             (select count(distinct task_id) from queues.task_leases) as tasks,
             (select count(*) from queues.task_end where outcome = 'succeeded') as completed,
             (select count(*)
                from queues.task_leases a
                join queues.task_leases b
                  on b.task_id = a.task_id and b.task_lease_id > a.task_lease_id
                 and tstzrange(a.leased_at, a.expires_at) && tstzrange(b.leased_at, b.expires_at)) as overlaps`);
    expect(counts).toEqual({ leases: '6000', tasks: '6000', completed: '6000', overlaps: '0' });
    const { rows: pending } = await db.query('select count(*)::int as n from queues.task_pending');
    expect(pending[0].n).toBe(0);
  });
});

describe('claim semantics', () => {
  it('an expired lease makes the task claimable again, with a new lease', async () => {
    await resetQueue();
    const [id] = await enqueueNoops(1);
    const [first] = await claim('w1', 1, 60);
    expect(first?.task_id).toBe(id);
    expect(await claim('w2')).toEqual([]);
    expect(await claimAt(30)).toEqual([]); // lease still live
    const again = await claimAt(61);
    expect(again.map((r) => r.task_id)).toEqual([id]);
    expect(again[0]?.lease_count).toBe(2);
    expect(again[0]?.task_lease_id).not.toBe(first?.task_lease_id);
  });

  it('completed tasks are never claimed again, even long after their lease', async () => {
    await resetQueue();
    const [id] = await enqueueNoops(1);
    const [lease] = await claim();
    await db.pool('worker').query('select queues.complete_task($1, $2)', [id, lease?.task_lease_id]);
    expect(await claimAt(86_400 * 30)).toEqual([]);
  });

  it('complete_task is idempotent: true once, then false, one completion row', async () => {
    await resetQueue();
    const [id] = await enqueueNoops(1);
    const [lease] = await claim();
    const complete = () =>
      db.pool('worker').query<{ c: boolean }>('select queues.complete_task($1, $2) as c', [id, lease?.task_lease_id]);
    expect((await complete()).rows[0]?.c).toBe(true);
    expect((await complete()).rows[0]?.c).toBe(false);
    expect((await db.pool('worker').query('select queues.complete_task($1) as c', [id])).rows[0]?.c).toBe(false);
    const { rows } = await db.query('select outcome, task_lease_id from queues.task_end where task_id = $1', [id]);
    expect(rows).toEqual([{ outcome: 'succeeded', task_lease_id: lease?.task_lease_id }]);
  });

  it('complete_tasks reports each task: completed, already_completed, unknown_task', async () => {
    await resetQueue();
    const [a, b] = await enqueueNoops(2);
    await db.pool('worker').query('select queues.complete_task($1)', [a]);
    const { rows } = await db
      .pool('worker')
      .query(
        `select task_id, result from queues.complete_tasks(array[$1, $2, 999999999]::bigint[], null, array['succeeded', 'failed', null])`,
        [a, b],
      );
    expect(rows).toEqual([
      { task_id: a, result: 'already_completed' },
      { task_id: b, result: 'completed' },
      { task_id: '999999999', result: 'unknown_task' },
    ]);
    const { rows: outcome } = await db.query('select outcome from queues.task_end where task_id = $1', [b]);
    expect(outcome[0]?.outcome).toBe('failed');
  });

  it('fail_task appends an error row per call and leaves the task pending', async () => {
    await resetQueue();
    const [id] = await enqueueNoops(1);
    const [lease] = await claim();
    for (const message of ['first', 'second']) {
      await db.pool('worker').query('select queues.fail_task($1, $2, $3)', [id, message, lease?.task_lease_id]);
    }
    const { rows } = await db.query(
      'select error_message, task_lease_id from queues.error where task_id = $1 order by error_id',
      [id],
    );
    expect(rows).toEqual([
      { error_message: 'first', task_lease_id: lease?.task_lease_id },
      { error_message: 'second', task_lease_id: lease?.task_lease_id },
    ]);
    expect((await claimAt(61)).map((r) => r.task_id)).toEqual([id]);
  });

  it('a worker whose lease was taken over can neither complete nor record errors (fencing)', async () => {
    await resetQueue();
    const [id] = await enqueueNoops(1);
    const [stale] = await claim('stale', 1, 60);
    const [current] = await claimAt(61, 'fresh');
    const worker = db.pool('worker');
    await expect(worker.query('select queues.complete_task($1, $2)', [id, stale?.task_lease_id])).rejects.toMatchObject(
      {
        code: '55000',
        message: expect.stringContaining('no longer the current lease'),
      },
    );
    await expect(
      worker.query('select queues.fail_task($1, $2, $3)', [id, 'late', stale?.task_lease_id]),
    ).rejects.toMatchObject({
      code: '55000',
    });
    const { rows } = await worker.query(
      'select * from queues.complete_tasks(array[$1]::bigint[], array[$2]::bigint[])',
      [id, stale?.task_lease_id],
    );
    expect(rows).toEqual([{ task_id: id, result: 'lease_lost' }]);
    expect((await db.query('select count(*)::int as n from queues.task_end')).rows[0].n).toBe(0);
    expect((await db.query('select count(*)::int as n from queues.error')).rows[0].n).toBe(0);
    expect(
      (await worker.query('select queues.complete_task($1, $2) as c', [id, current?.task_lease_id])).rows[0].c,
    ).toBe(true);
    // Once the new holder has completed it, the stale worker is still refused, so its
    // transaction (a step's effects) cannot commit as if it had completed the task.
    await expect(worker.query('select queues.complete_task($1, $2)', [id, stale?.task_lease_id])).rejects.toMatchObject(
      { code: '55000' },
    );
    const { rows: after } = await worker.query(
      'select * from queues.complete_tasks(array[$1]::bigint[], array[$2]::bigint[])',
      [id, current?.task_lease_id],
    );
    expect(after).toEqual([{ task_id: id, result: 'already_completed' }]);
  });

  it('a task scheduled in the future is not claimed until its time', async () => {
    await resetQueue();
    const { rows } = await db
      .pool('owner')
      .query(
        `select queues.enqueue('db_function', '{"db_function": "internal.noop"}', now() + interval '1 hour') as id`,
      );
    expect(await claim()).toEqual([]);
    expect(await claimAt(3000)).toEqual([]);
    expect((await claimAt(3601)).map((r) => r.task_id)).toEqual([rows[0].id]);
  });

  it('next_claim_in_ms: the time until the earliest unleased task of the types asked for is due, over every priority', async () => {
    await resetQueue();
    const next = async (types: string[] | null, role: 'worker' | 'app' = 'worker') =>
      (await db.pool(role).query('select queues.next_claim_in_ms($1::text[]) as ms', [types])).rows[0].ms as
        number | null;
    const minutes = (n: number) => n * 60_000;
    expect(await next(null)).toBeNull();
    // A ready task is not waited for: it can be claimed now.
    await db.pool('owner').query(`select queues.enqueue('email', '{}')`);
    expect(await next(null)).toBeNull();
    // sms: in an hour at priority 10, in 10 minutes at 0, in 20 minutes at -5; email in 2 hours.
    await db.pool('owner').query(
      `select queues.enqueue('sms', '{}', now() + interval '1 hour', 10),
              queues.enqueue('sms', '{}', now() + interval '10 minutes', 0),
              queues.enqueue('sms', '{}', now() + interval '20 minutes', -5),
              queues.enqueue('email', '{}', now() + interval '2 hours')`,
    );
    const sms = await next(['sms']);
    expect(sms).toBeGreaterThan(minutes(9));
    expect(sms).toBeLessThanOrEqual(minutes(10));
    expect(await next(['email'])).toBeGreaterThan(minutes(119));
    expect(await next(null)).toBeLessThanOrEqual(minutes(10));
    expect(await next(['email', 'sms'])).toBeLessThanOrEqual(minutes(10));
    expect(await next(['file_delete'])).toBeNull();
    // A year ahead: the integer's largest value, not an overflow.
    await db.pool('owner').query(`select queues.enqueue('file_delete', '{}', now() + interval '1 year')`);
    expect(await next(['file_delete'])).toBe(2147483647);
    // A leased task is not waited for: with the 10-minute task leased, the next is in 20.
    expect((await claimAt(601, 'w-clock', 1, ['sms'])).length).toBe(1);
    const leased = await next(['sms']);
    expect(leased).toBeGreaterThan(minutes(19));
    expect(leased).toBeLessThanOrEqual(minutes(20));
    // A paused type is not waited for either, as the claim does not take it.
    await db.query(`select admin.pause_task_type('sms', 'test')`);
    try {
      expect(await next(['sms'])).toBeNull();
      expect(await next(null)).toBeGreaterThan(minutes(119));
    } finally {
      await db.query(`select admin.resume_task_type('sms')`);
    }
    // The worker's question only: an application cannot ask it.
    await expect(next(null, 'app')).rejects.toMatchObject({ code: '42501' });
  });

  it('next_claim_in_ms: a task that fell due within _missed_ms (after the claim before the question) answers 0', async () => {
    await resetQueue();
    const next = async (missedMs?: number | null) =>
      (
        await db
          .pool('worker')
          .query(
            missedMs === undefined
              ? `select queues.next_claim_in_ms(array['sms']) as ms`
              : `select queues.next_claim_in_ms(array['sms'], $1) as ms`,
            missedMs === undefined ? [] : [missedMs],
          )
      ).rows[0].ms as number | null;
    // Fell due 30 seconds ago, unleased, and one due in an hour.
    await db.pool('owner').query(
      `select queues.enqueue('sms', '{}', clock_timestamp() - interval '30 seconds'),
                queues.enqueue('sms', '{}', clock_timestamp() + interval '1 hour')`,
    );
    // Without _missed_ms (or 0, null, negative) it is the claim's to take: the next is in an hour.
    for (const missed of [undefined, 0, null, -5000]) expect(await next(missed)).toBeGreaterThan(59 * 60_000);
    // Missed by the claim before this question (it took its clock 40 s ago): look again now.
    expect(await next(40_000)).toBe(0);
    // A claim that took its clock 20 s ago saw it due: not answered again.
    expect(await next(20_000)).toBeGreaterThan(59 * 60_000);
  });

  it('next_claim_in_ms reads no ready task: 2,000 of them cost the question no more index entries than none', async () => {
    // A worker asks after every claim that came back short, which a backlog held back by a
    // flow limit or a resource key makes every claim: the question must not read the tasks
    // that are ready (they are the claim's), only the first scheduled later.
    await resetQueue();
    const root = await db.client('root');
    /** The claim-index entries the question's scans read (rows found and rows filtered out). */
    const entriesRead = async () => {
      const plans = await explainNested(root, `select queues.next_claim_in_ms(array['db_function'], 0)`);
      return plans
        .flatMap((p) => planNodes(p.plan))
        .filter((n) => n['Relation Name'] === 'task_pending')
        .reduce(
          (sum, n) =>
            sum +
            (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) * Number(n['Actual Loops'] ?? 1),
          0,
        );
    };
    try {
      // One task scheduled an hour ahead: the answer the question looks for.
      await db.pool('owner').query(`select queues.enqueue('db_function', '{}', clock_timestamp() + interval '1 hour')`);
      const alone = await entriesRead();
      await enqueueNoops(2000);
      await db.query('analyze queues.task_pending');
      const withReady = await entriesRead();
      expect(withReady).toBeLessThanOrEqual(alone + 2);
      // And the answer is still the task an hour ahead.
      const { rows } = await db.pool('worker').query(`select queues.next_claim_in_ms(array['db_function']) as ms`);
      expect(rows[0].ms).toBeGreaterThan(59 * 60_000);
    } finally {
      await root.end();
    }
  });

  it('claims in scheduled_at order, then task_id', async () => {
    await resetQueue();
    const offsets = [-3, -1, -2, -2, -5];
    const ids: string[] = [];
    for (const minutes of offsets) {
      const { rows } = await db
        .pool('owner')
        .query(`select queues.enqueue('db_function', '{}', now() + make_interval(mins => $1)) as id`, [minutes]);
      ids.push(rows[0].id);
    }
    const expected = offsets
      .map((minutes, i) => ({ minutes, id: ids[i] }))
      .sort((a, b) => a.minutes - b.minutes || Number(a.id) - Number(b.id))
      .map((t) => t.id);
    const oneByOne: string[] = [];
    for (let i = 0; i < offsets.length; i++) oneByOne.push(...(await claim('w', 1)).map((r) => r.task_id));
    expect(oneByOne).toEqual(expected);
    // Once their leases expire they come back one per claim (suspects), in the same order
    // (each to a worker of its own: a worker holds one named suspect at a time).
    const again: string[] = [];
    for (let i = 0; i < offsets.length; i++) again.push(...(await claimAt(61, `w-${i}`, 10)).map((r) => r.task_id));
    expect(again).toEqual(expected);
  });

  it('a claim takes one suspect and fills the rest of its limit with other ready tasks', async () => {
    await resetQueue();
    // A dead worker's claim of 12: once its lease expires, all 12 are suspects, ahead of
    // 20 tasks enqueued after them in claim order.
    const first = await enqueueNoops(12);
    expect((await claim('w-dead', 12)).map((r) => r.task_id)).toEqual(first);
    const later = await enqueueNoops(20);
    const takenBy = async (worker: string) => (await claimAt(61, worker, 10)).map((r) => r.task_id);
    // Each claim of 10 takes the first suspect and 9 other tasks, not the suspect alone.
    const a = await takenBy('w-a');
    expect(a).toEqual([first[0], ...later.slice(0, 9)]);
    const b = await takenBy('w-b');
    expect(b).toEqual([first[1], ...later.slice(9, 18)]);
    // Without other ready tasks, one suspect per claim, as before.
    expect(await takenBy('w-c')).toEqual([first[2], ...later.slice(18, 20)]);
    expect(await takenBy('w-d')).toEqual([first[3]]);
    // Each lease named its one suspect.
    const { rows } = await db.query(
      `select l.suspect_task_id::text as suspect, cardinality(l.task_ids) as n
         from queues.claim_lease l join queues.worker_name w using (worker_key)
        where w.worker_id in ('w-a', 'w-b', 'w-c', 'w-d') order by l.task_lease_id`,
    );
    expect(rows).toEqual([
      { suspect: first[0], n: 10 },
      { suspect: first[1], n: 10 },
      { suspect: first[2], n: 3 },
      { suspect: first[3], n: 1 },
    ]);
  });

  it('a worker holds one named repeat suspect at a time; first-time suspects are not held back', async () => {
    await resetQueue();
    const first = await enqueueNoops(3);
    await claim('w-dead', 3);
    const later = await enqueueNoops(6);
    // At 61 s the three are suspects for the first time: one worker takes them back to back.
    for (const id of first) expect(ids(await claimAt(61, 'w-0', 1))).toEqual([id]);
    // w-0 died holding all three, each named: at 122 s each has one counted expiry. w-a's
    // claim names the first; while w-a holds it, w-a takes no other repeat suspect, w-b does.
    const a1 = await claimAt(122, 'w-a', 3);
    expect(ids(a1)).toEqual([first[0], later[0], later[1]]);
    expect(ids(await claimAt(123, 'w-a', 3))).toEqual([later[2], later[3], later[4]]);
    expect(ids(await claimAt(123, 'w-b', 3))).toEqual([first[1], later[5]]);
    expect(ids(await claimAt(123, 'w-b', 3))).toEqual([]);
    // Once w-a's suspect has completed, w-a takes the next one.
    const { rows } = await db.query('select queues.complete_task($1, $2) as c', [first[0], a1[0].task_lease_id]);
    expect(rows[0].c).toBe(true);
    expect(ids(await claimAt(124, 'w-a', 3))).toEqual([first[2]]);
  });

  it("a pool's quarantine: working processes ('no_repeat') never take a repeat suspect; the quarantine ('repeat') takes only those, one at a time, and abandons a poisoned one", async () => {
    await resetQueue();
    const first = await enqueueNoops(2);
    await claim('w-dead', 2);
    const later = await enqueueNoops(3);
    // At 61 s both are first-time suspects: working processes take them, one per claim.
    expect(ids(await claimAt(61, 'w-0', 1, null, 'no_repeat'))).toEqual([first[0]]);
    expect(ids(await claimAt(61, 'w-1', 1, null, 'no_repeat'))).toEqual([first[1]]);
    // No repeat suspect yet: the quarantine takes nothing, not even the ready tasks.
    expect(ids(await claimAt(62, 'q-0', 1, null, 'repeat'))).toEqual([]);
    // w-0 and w-1 died: at 122 s both are repeat suspects. A working process passes over
    // them and takes the ready tasks.
    const work = await claimAt(122, 'w-2', 10, null, 'no_repeat');
    expect(ids(work)).toEqual(later);
    for (const r of work)
      expect((await db.query('select queues.complete_task($1, $2) as c', [r.task_id, r.task_lease_id])).rows[0].c).toBe(
        true,
      );
    expect(ids(await claimAt(122, 'w-2', 10, null, 'no_repeat'))).toEqual([]);
    // The quarantine takes one (an expired lease), and no second while it holds it.
    const q0 = await claimAt(122, 'q-0', 1, null, 'repeat');
    expect(ids(q0)).toEqual([first[0]]);
    expect(ids(await claimAt(122, 'q-0', 1, null, 'repeat'))).toEqual([]);
    expect(ids(await claimAt(122, 'q-1', 1, null, 'repeat'))).toEqual([first[1]]);
    // q-0 died, its supervisor revoked its lease: the task is a lease-free repeat suspect
    // from when the lease would have expired (182 s), for the quarantine only.
    await db.query(`select * from queues.revoke_worker_leases('q-0')`);
    expect(ids(await claimAt(181, 'q-2', 1, null, 'repeat'))).toEqual([]);
    expect(ids(await claimAt(183, 'w-3', 10, null, 'no_repeat'))).toEqual([]);
    const q2 = await claimAt(183, 'q-2', 1, null, 'repeat');
    expect(q2.map((r) => [r.task_id, r.lease_count])).toEqual([[first[0], 4]]);
    // At 244 s the other (two counted expiries: w-1's and q-1's) comes first in the
    // expired leases' order; then the first one's counted expiries (w-0's, q-0's, q-2's)
    // reach max_leases 3: the quarantine's next claim abandons it instead of leasing it,
    // though the quarantine holds a repeat suspect.
    expect(ids(await claimAt(244, 'q-3', 1, null, 'repeat', 3))).toEqual([first[1]]);
    expect(ids(await claimAt(244, 'q-3', 1, null, 'repeat', 3))).toEqual([]);
    const { rows: ends } = await db.query(
      `select c.outcome, e.error_message from queues.task_end c
         left join queues.error e using (task_id) where c.task_id = $1`,
      [first[0]],
    );
    expect(ends).toEqual([
      { outcome: 'abandoned', error_message: expect.stringMatching(/^abandoned: 3 leases expired/) },
    ]);
    // A claim's suspects argument is checked.
    await expect(claimAt(245, 'q-3', 1, null, 'repeats')).rejects.toMatchObject({
      code: '22023',
      message: 'suspects must be any, no_repeat or repeat, got repeats',
    });
  });

  it("the quarantine's idle claim reads no ready task, however many are ready", async () => {
    await resetQueue();
    await enqueueNoops(2000);
    await db.query('analyze queues.task_pending');
    const root = await db.client('root');
    try {
      const plans = await explainNested(
        root,
        `select * from queues.claim_tasks_at(now(), 'q-idle', 1, null, 60, 5, 'repeat')`,
      );
      const read = plans
        .flatMap((p) => planNodes(p.plan))
        .filter((n) => n['Relation Name'] === 'task_pending')
        .reduce(
          (sum, n) =>
            sum +
            (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) * Number(n['Actual Loops'] ?? 1),
          0,
        );
      expect(read).toBe(0);
      // And a claim that takes any suspect still takes them.
      expect((await claimAt(0, 'w-any', 5)).length).toBe(5);
    } finally {
      await root.end();
    }
  });

  it('claims only the task types asked for', async () => {
    await resetQueue();
    await db
      .pool('owner')
      .query(`select queues.enqueue('email', '{}'), queues.enqueue('sms', '{}'), queues.enqueue('sms', '{}')`);
    const sms = await claim('w', 10, 60, ['sms']);
    expect(sms.map((r) => r.task_type)).toEqual(['sms', 'sms']);
    expect((await claim('w', 10, 60, ['sms', 'file_delete'])).length).toBe(0);
    expect((await claim('w', 10, 60, null)).map((r) => r.task_type)).toEqual(['email']);
  });

  it('dequeue_next_available_task returns one task row with a lease, then nothing', async () => {
    await resetQueue();
    const [id] = await enqueueNoops(1);
    const { rows } = await db
      .pool('worker')
      .query('select task_id, task_type, payload from queues.dequeue_next_available_task()');
    expect(rows).toEqual([{ task_id: id, task_type: 'db_function', payload: { db_function: 'internal.noop', n: 0 } }]);
    const { rows: leases } = await db.query(
      'select worker_id, expires_at - leased_at as length from queues.task_lease_effective',
    );
    expect(leases).toEqual([{ worker_id: db.dbUsers.worker, length: { minutes: 5 } }]);
    expect((await db.pool('worker').query('select * from queues.dequeue_next_available_task()')).rows).toEqual([]);
  });

  it('a lease names its worker by key: each worker id is kept once, in queues.worker_name', async () => {
    await resetQueue();
    await enqueueNoops(3);
    const id = 'host-4242-a1b2c3-1';
    await claim(id, 1, 60);
    await claim(id, 2, 60);
    const { rows: names } = await db.query(
      'select worker_key, worker_id from queues.worker_name where worker_id = $1',
      [id],
    );
    expect(names).toHaveLength(1);
    // The integer on every lease, not the id's text; the views give the id back.
    const { rows: leases } = await db.query(
      `select l.worker_key, l.worker_id, e.worker_id as named
         from queues.task_leases l join queues.task_lease_effective e using (task_id, task_lease_id)
        where l.worker_key = $1`,
      [names[0].worker_key],
    );
    expect(leases).toEqual(Array(3).fill({ worker_key: names[0].worker_key, worker_id: null, named: id }));
    // A lease names its worker one way or the other (leases written before the key have the id).
    await expect(
      db.query(
        `insert into queues.task_lease (task_id, leased_at, expires_at) values (1, now(), now() + interval '1 minute')`,
      ),
    ).rejects.toMatchObject({ code: '23514', constraint: 'task_lease_worker_named' });
  });

  it('lease length defaults to 5 minutes and is configurable per call', async () => {
    await resetQueue();
    await enqueueNoops(2);
    await db.pool('worker').query(`select * from queues.claim_tasks('w', 1)`);
    await db.pool('worker').query(`select * from queues.claim_tasks('w', 1, null, 7)`);
    const { rows } = await db.query(
      'select extract(epoch from expires_at - leased_at)::int as seconds from queues.task_leases order by task_lease_id',
    );
    expect(rows.map((r) => r.seconds)).toEqual([300, 7]);
  });

  it('rejects bad claim arguments with clear errors', async () => {
    const worker = db.pool('worker');
    const cases: [string, unknown[], RegExp][] = [
      ['select * from queues.claim_tasks($1, $2)', ['w', 0], /limit must be between 1 and 1000, got 0/],
      ['select * from queues.claim_tasks($1, $2)', ['w', 1001], /limit must be between 1 and 1000/],
      ['select * from queues.claim_tasks($1, 1, null, $2)', ['w', 0], /lease_seconds must be between 1 and 86400/],
      ['select * from queues.claim_tasks($1, 1, null, $2)', ['w', 86_401], /lease_seconds must be between/],
      ['select * from queues.claim_tasks($1)', [''], /worker_id must be 1 to 200 characters/],
      ['select * from queues.claim_tasks($1)', [null], /worker_id must be 1 to 200 characters/],
      [
        'select * from queues.claim_tasks($1, 1, $2)',
        ['w', []],
        /task_types must be null \(any type\) or name at least one/,
      ],
    ];
    for (const [sql, params, message] of cases) {
      await expect(worker.query(sql, params), sql).rejects.toMatchObject({
        code: '22023',
        message: expect.stringMatching(message),
      });
    }
  });

  it('facts are append-only: updating a task, lease, completion or error is refused', async () => {
    const columns = {
      task: 'payload',
      task_lease: 'worker_id',
      task_completed: 'outcome',
      error: 'error_message',
      worker_name: 'worker_id',
    };
    for (const [table, column] of Object.entries(columns)) {
      await expect(db.query(`update queues.${table} set ${column} = ${column}`)).rejects.toMatchObject({
        code: '55000',
        message: `queues.${table} is append-only: rows are never updated`,
      });
    }
  });

  it('the claim index is rebuildable from the facts', async () => {
    await resetQueue();
    const ids = await enqueueNoops(6);
    await claim('w', 2, 60); // two leased
    await db.pool('worker').query('select queues.complete_task($1)', [ids[5]]); // one completed
    await claimAt(61, 'w2', 1); // a lease expired and re-claimed
    // Every unfinished task, whether it has a claim-index row or waits in a ready batch
    // (the rebuild gives the batched ones rows: the same tasks, the same readings).
    // (`batched` says which; only that changes.)
    const snapshot = async () =>
      (await db.query('select * from queues.task_pending_or_held order by task_id')).rows.map(
        ({ batched: _, ...row }: Record<string, unknown>) => row,
      );
    const before = await snapshot();
    expect(before).toHaveLength(5);
    const { rows } = await db.query('select queues.rebuild_task_pending() as n');
    expect(rows[0].n).toBe('5');
    expect(await snapshot()).toEqual(before);
    const { rows: batched } = await db.query(
      'select count(*)::int as n from queues.task_pending_or_held where batched',
    );
    expect(batched[0].n).toBe(0);
  });
});

describe('history', () => {
  it('the claim table is vacuumed on a fixed number of dead rows, unthrottled', async () => {
    const { rows } = await db.query(`select reloptions from pg_class where oid = 'queues.task_pending'::regclass`);
    expect(rows[0].reloptions).toEqual(
      expect.arrayContaining([
        'autovacuum_vacuum_scale_factor=0',
        'autovacuum_vacuum_threshold=1000',
        'autovacuum_vacuum_cost_delay=0',
      ]),
    );
    // The server the tests run on visits each database every 10 s (docs/operations.md).
    expect((await db.query(`select current_setting('autovacuum_naptime') as v`)).rows[0].v).toBe('10s');
  });

  it.each([
    ['', false],
    // An older snapshot (a long transaction, a concurrent ANALYZE of another table) keeps
    // the deleted rows: the vacuum cannot remove them, and its statistics say so. The
    // claim's pick was planned as a sequential scan per task type then (180,012 rows read).
    [', while an older snapshot kept the deleted rows', true],
  ])(
    'the hot path reads about the rows it handles whatever the statistics say: vacuumed while the queue was nearly empty%s, then 20,000 ready',
    async (_, holdSnapshot) => {
      await resetQueue();
      // Statistics taken when a busy queue has just drained (as autovacuum takes them):
      // the table keeps its pages (one live row at its end), nearly none of them hold a
      // live row. Then the queue fills again; each statement's generic plan is made with
      // those statistics.
      await db.query('alter table queues.task_pending set (autovacuum_enabled = false)');
      const root = await db.client('root');
      try {
        // (scheduled in the past: claim-index rows, not ready batches)
        const rows = { scheduled_at: '2000-01-01T00:00:00Z' };
        const drained = await enqueueNoops(20_000, rows);
        const snapshot = holdSnapshot ? await db.client('root') : undefined;
        await snapshot?.query('begin isolation level repeatable read');
        await snapshot?.query('select 1');
        await db.query('delete from queues.task_pending where task_id <> $1', [drained.at(-1)]);
        await db.query('vacuum analyze queues.task_pending');
        await snapshot?.query('commit');
        await snapshot?.end();
        await enqueueNoops(20_000, rows);

        const N = 500;
        /** task_pending is read by key for the rows at hand: never scanned whole, never joined row by row against them. */
        const expectKeyed = (plans: { query: string; plan: PlanNode }[], what: string) => {
          expect(plans.length, `${what} was explained`).toBeGreaterThan(0);
          for (const { query, plan } of plans) {
            const nodes = planNodes(plan);
            // Rows a scan returned or read and threw away, over all its loops.
            const pendingRows = nodes
              .filter((n) => relationOf(n) === 'task_pending' && n['Node Type'] !== 'ModifyTable')
              .reduce(
                (sum, n) =>
                  sum +
                  (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) *
                    Number(n['Actual Loops'] ?? 1),
                0,
              );
            // The message names each read of task_pending (node, index, rows, loops), so that a
            // failure says which plan the session made.
            const reads = nodes
              .filter((n) => relationOf(n) === 'task_pending' && n['Node Type'] !== 'ModifyTable')
              .map(
                (n) =>
                  `${n['Node Type']}${n['Index Name'] ? ` using ${String(n['Index Name'])}` : ''}: ` +
                  `${Number(n['Actual Rows'] ?? 0)} rows, ${Number(n['Rows Removed by Filter'] ?? 0)} removed, ` +
                  `${Number(n['Actual Loops'] ?? 1)} loops`,
              )
              .join('; ');
            expect(
              pendingRows,
              `${what}: task_pending rows read by ${query.slice(0, 80)} (${reads})`,
            ).toBeLessThanOrEqual(3 * N);
            const joinFiltered = Math.max(0, ...nodes.map((n) => Number(n['Rows Removed by Join Filter'] ?? 0)));
            expect(joinFiltered, `${what}: rows removed by a join filter in ${query.slice(0, 80)}`).toBeLessThan(N);
          }
        };

        const claimPlans = await explainNested(root, `select * from queues.claim_tasks('stats', ${N}, null, 60)`);
        expectKeyed(claimPlans, 'claim');
        const { rows: leases } = await db.query<{ task_id: string; lease_id: string }>(
          // The claim's lease names its tasks (the claim took them out of the claim index).
          `select u.task_id::text, c.task_lease_id::text as lease_id
           from queues.claim_lease c cross join lateral unnest(c.task_ids) u(task_id)
          where c.task_lease_id = (select max(x.task_lease_id) from queues.claim_lease x)`,
        );
        expect(leases).toHaveLength(N);
        const ids = leases.map((l) => l.task_id);
        const leaseIds = leases.map((l) => l.lease_id);
        expectKeyed(
          await explainNested(root, 'select * from queues.mark_started($1::bigint[], $2::bigint[])', [ids, leaseIds]),
          'mark_started',
        );
        expectKeyed(
          await explainNested(root, 'select * from queues.extend_leases($1::bigint[], $2::bigint[], 60)', [
            ids,
            leaseIds,
          ]),
          'extend_leases',
        );
        // Ten released (as a worker gives back its local queue at shutdown), then claimed again.
        expectKeyed(
          await explainNested(root, 'select * from queues.release_leases($1::bigint[], $2::bigint[])', [
            ids.slice(0, 10),
            leaseIds.slice(0, 10),
          ]),
          'release_leases',
        );
        const { rows: again } = await db.query<{ task_id: string; task_lease_id: string }>(
          `select task_id::text, task_lease_id::text from queues.claim_tasks('stats', 10, null, 60) where task_id = any($1::bigint[])`,
          [ids.slice(0, 10)],
        );
        expect(again.map((r) => r.task_id).sort()).toEqual(ids.slice(0, 10).sort());
        for (const r of again) leaseIds[ids.indexOf(r.task_id)] = r.task_lease_id;

        // Half settled as the completer settles, half as steps complete (with results).
        const half = N / 2;
        expectKeyed(
          await explainNested(
            root,
            `select * from queues.settle_tasks($1::bigint[], $2::bigint[], array_fill('succeeded'::text, array[${half}]))`,
            [ids.slice(0, half), leaseIds.slice(0, half)],
          ),
          'settle_tasks',
        );
        expectKeyed(
          await explainNested(
            root,
            `select * from queues.complete_steps($1::bigint[], $2::bigint[], array_fill('succeeded'::text, array[${half}]),
             array_fill(null::boolean, array[${half}]), '{}', '{}', array_fill('{"kept": true}'::jsonb, array[${half}]))`,
            [ids.slice(half), leaseIds.slice(half)],
          ),
          'complete_steps',
        );
        const { rows: results } = await db.query(
          `select count(*)::int as n from queues.task_result where task_id = any($1::bigint[])`,
          [ids.slice(half)],
        );
        expect(results[0].n).toBe(half);
        const { rows: left } = await db.query(
          `select count(*)::int as n from queues.task_pending where task_id = any($1::bigint[])`,
          [ids],
        );
        expect(left[0].n).toBe(0);
      } finally {
        await root.end();
        await db.query('alter table queues.task_pending reset (autovacuum_enabled)');
      }
    },
  );

  it('a claim reads the claim leases due by their index (the probe, the rescuer), also under plans made while that table was empty and vacuumed', async () => {
    await resetQueue();
    await db.query('delete from queues.claim_lease_due');
    // Statistics as a vacuum of the empty table leaves them, and no other until the end.
    await db.query('alter table queues.claim_lease_due set (autovacuum_enabled = false)');
    await db.query('vacuum analyze queues.claim_lease_due');
    const root = await db.client('root');
    try {
      // The session's first claim makes its generic plans while no claim lease is due to
      // be read: an empty table, known empty (vacuumed).
      await enqueueNoops(2, { scheduled_at: '2000-01-01T00:00:00Z' });
      expect((await root.query(`select * from queues.claim_tasks('due-probe', 1, null, 3600)`)).rows).toHaveLength(1);
      // Then 5,000 claims' rows, none due for an hour (a busy worker's claims within its
      // lease time), and 2 due now (leases of no claim: the rescuer only deletes them);
      // the same session claims again, and its claim runs the rescuer.
      const fill = (from: number, to: number, due: number) =>
        db.query(
          `insert into queues.claim_lease_due (task_lease_id, task_id, expires_at)
           select -g, g, now() + case when g <= $3 then interval '-1 second' else interval '1 hour' end
             from generate_series($1::int, $2::int) g`,
          [from, to, due],
        );
      await fill(1, 5000, 2);
      const plans = await explainNested(root, `select * from queues.claim_tasks('due-probe', 1, null, 3600)`);
      // Analyzed now (as autovacuum would), the plans are made again, inside a claim, with
      // the table's size known; 2 more are due.
      await db.query('analyze queues.claim_lease_due');
      await fill(5001, 5002, 5002);
      plans.push(...(await explainNested(root, `select * from queues.claim_tasks('due-probe', 1, null, 3600)`)));
      const scans = plans
        .flatMap(({ plan }) => planNodes(plan))
        .filter((n) => relationOf(n) === 'claim_lease_due' && n['Node Type'] !== 'ModifyTable');
      expect(scans.length, 'the reads of the claim leases due were explained').toBeGreaterThan(2);
      for (const n of scans) {
        const read =
          (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) * Number(n['Actual Loops'] ?? 1);
        expect(read, `claim_lease_due rows read by a ${n['Node Type']}`).toBeLessThanOrEqual(2);
      }
      // The rescuer ran twice, and took the 4 due rows.
      const { rows: due } = await db.query(
        `select count(*)::int as n from queues.claim_lease_due where task_lease_id < 0`,
      );
      expect(due[0].n).toBe(4998);
    } finally {
      await root.end();
      await db.query('delete from queues.claim_lease_due where task_lease_id < 0');
      await db.query('alter table queues.claim_lease_due reset (autovacuum_enabled)');
    }
  });

  it('a heartbeat marks the runs still going with their start, and nothing for a lease already settled', async () => {
    // A run's start goes with its completion; a run that outlasts a heartbeat is marked by
    // it (queues.mark_started). A completion may commit between the heartbeat's look and
    // its mark: that lease is no longer held, and nothing is written for it.
    await resetQueue();
    await enqueueNoops(4);
    const leases = await claim('slow', 4, 60);
    const startedUs = leases.map((_, i) => String((Date.UTC(2026, 0, 1) + i) * 1000));
    const settled = leases.slice(0, 2);
    await db
      .pool('worker')
      .query(`select * from queues.settle_tasks($1::bigint[], $2::bigint[], _started_us => $3::bigint[])`, [
        settled.map((l) => l.task_id),
        settled.map((l) => l.task_lease_id),
        startedUs.slice(0, 2),
      ]);
    const { rows: notHeld } = await db
      .pool('worker')
      .query('select * from queues.mark_started($1::bigint[], $2::bigint[], $3::bigint[]) s', [
        leases.map((l) => l.task_id),
        leases.map((l) => l.task_lease_id),
        startedUs,
      ]);
    expect(notHeld.map((r) => String(r.s)).sort()).toEqual(settled.map((l) => l.task_id).sort());
    const { rows: marks } = await db.query(
      `select task_id::text, (extract(epoch from started_at) * 1000000)::bigint::text as us
         from queues.task_lease_started where task_id = any($1::bigint[]) order by task_id`,
      [leases.map((l) => l.task_id)],
    );
    expect(marks).toEqual(leases.slice(2).map((l, i) => ({ task_id: l.task_id, us: startedUs[i + 2] })));
    // The settled runs' starts are with their completions.
    const { rows: ends } = await db.query(
      `select task_id::text, (extract(epoch from started_at) * 1000000)::bigint::text as us
         from queues.task_end where task_id = any($1::bigint[]) order by task_id`,
      [settled.map((l) => l.task_id)],
    );
    expect(ends).toEqual(settled.map((l, i) => ({ task_id: l.task_id, us: startedUs[i] })));
    // Marking twice changes nothing; mismatched arrays are refused.
    await db
      .pool('worker')
      .query('select * from queues.mark_started($1::bigint[], $2::bigint[], $3::bigint[])', [
        leases.map((l) => l.task_id),
        leases.map((l) => l.task_lease_id),
        startedUs.map(() => '0'),
      ]);
    const { rows: again } = await db.query(
      `select count(*)::int as n from queues.task_lease_started where task_id = any($1::bigint[]) and started_at > 'epoch'`,
      [leases.map((l) => l.task_id)],
    );
    expect(again[0].n).toBe(2);
    await expect(
      db
        .pool('worker')
        .query('select * from queues.mark_started($1::bigint[], $2::bigint[], $3::bigint[])', [
          leases.map((l) => l.task_id),
          leases.map((l) => l.task_lease_id),
          startedUs.slice(1),
        ]),
    ).rejects.toMatchObject({ code: '22023' });
    // So are start times that do not match the completions, in both settling functions.
    const open = leases.slice(2);
    await expect(
      db
        .pool('worker')
        .query(`select * from queues.settle_tasks($1::bigint[], $2::bigint[], _started_us => $3::bigint[])`, [
          open.map((l) => l.task_id),
          open.map((l) => l.task_lease_id),
          startedUs.slice(0, 1),
        ]),
    ).rejects.toMatchObject({ code: '22023', message: /started_us must have one element per task/ });
    await expect(
      db
        .pool('worker')
        .query(`select * from queues.complete_tasks($1::bigint[], $2::bigint[], _started_at => array[now()])`, [
          open.map((l) => l.task_id),
          open.map((l) => l.task_lease_id),
        ]),
    ).rejects.toMatchObject({ code: '22023', message: /started_at must have one element per task/ });
    // Nothing was completed by the refused calls.
    const { rows: still } = await db.query(
      `select count(*)::int as n from queues.task t
        where t.task_id = any($1) and not exists (select 1 from queues.task_end_of(t.task_id) e)`,
      [open.map((l) => l.task_id)],
    );
    expect(still[0].n).toBe(2);
  });

  it('with 50,000 completed tasks, a claim touches no completed rows and about the same buffers', async () => {
    await resetQueue();
    const root = await db.client('root');
    const claimSql = `select * from queues.claim_tasks('history', 10, null, 60)`;

    const measure = async () => {
      await db.query('analyze queues.task_pending');
      const plans = await explainNested(root, claimSql);
      const inner = plans.find((p) => p.query.includes('task_pending p'));
      expect(inner, 'the claim statement inside claim_tasks_at was explained').toBeDefined();
      return inner!;
    };

    await enqueueNoops(1000);
    const before = await measure();

    // 50,000 tasks, each leased and completed: written as facts in bulk by the owner.
    await db.query(`
      with t as (
        insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
        select 'db_function', jsonb_build_object('n', g), now() - interval '1 day', now() - interval '1 day'
          from generate_series(1, 50000) g
        returning task_id
      ), l as (
        insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
        select task_id, 'old', now() - interval '1 day', now() - interval '1 day' + interval '5 minutes' from t
        returning task_id, task_lease_id
      )
      insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
      select task_id, task_lease_id, now() - interval '1 day', 'succeeded', 'db_function' from l`);
    await db.query('analyze queues.task, queues.task_lease, queues.task_completed');
    const after = await measure();

    // Completions are only written (for abandoned tasks, none here), never read.
    const completedReads = planNodes(after.plan).filter(
      (n) => relationOf(n) === 'task_completed' && n['Node Type'] !== 'ModifyTable',
    );
    expect(completedReads).toEqual([]);
    // Fact tables are only reached by key, for the ten claimed tasks.
    for (const node of planNodes(after.plan)) {
      const relation = relationOf(node);
      if (['task', 'task_lease', 'task_completed', 'error'].includes(relation)) {
        expect(node['Actual Rows'], `${node['Node Type']} on ${relation}`).toBeLessThanOrEqual(10);
      }
    }
    // Ten claims either way; history may deepen an index by a level, no more.
    expect(sharedBuffers(after.plan)).toBeLessThanOrEqual(sharedBuffers(before.plan) + 40);
    await root.end();
  });
});
