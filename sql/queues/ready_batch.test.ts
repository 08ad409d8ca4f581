// Ready batches (sql/queues/ready_batch.sql, docs/design/hot-path.md): an enqueue call's
// plain tasks are held in one row per type, priority and max_attempts; claims take their
// ids off the front; every per-task path gives a batched task its row first; every reader
// of pending tasks sees them.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, explainNested, planNodes, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  for (const type of ['batch_a', 'batch_b', 'batch_c', 'batch_d', 'batch_e', 'batch_f', 'batch_g', 'batch_h'])
    await db.query(`insert into queues.task_type (task_type) values ($1) on conflict do nothing`, [type]);
});
afterAll(async () => {
  await db?.drop();
});

/** One enqueue_many call of `n` tasks of `type` (each element's extra fields from `extra(i)`). */
async function enqueueMany(
  type: string,
  n: number,
  extra: (i: number) => Record<string, unknown> = () => ({}),
): Promise<string[]> {
  const tasks = Array.from({ length: n }, (_, i) => ({ task_type: type, payload: { i }, ...extra(i) }));
  const { rows } = await db.query<{ task_id: string }>('select task_id::text from queues.enqueue_many($1::jsonb)', [
    JSON.stringify(tasks),
  ]);
  return rows.map((r) => r.task_id);
}
interface Batch {
  task_type: string;
  priority: number;
  max_attempts: number;
  task_ids: string[];
  taken: number;
}
const batchesOf = async (type: string) =>
  (
    await db.query<Batch>(
      `select task_type, priority, max_attempts, task_ids::text[] as task_ids, taken
         from queues.task_ready_batch where task_type = $1 order by task_id`,
      [type],
    )
  ).rows;
const rowsOf = async (ids: string[]) =>
  (
    await db.query<{ task_id: string }>(
      'select task_id::text from queues.task_pending where task_id = any ($1::bigint[]) order by task_id',
      [ids],
    )
  ).rows.map((r) => r.task_id);
const claim = async (type: string, limit: number, worker = 'w-batch', suspects = 'any') =>
  (
    await db
      .pool('worker')
      .query<{ task_id: string; task_lease_id: string }>(
        `select task_id::text, task_lease_id::text from queues.claim_tasks($1, $2, array[$3], 60, 5, $4)`,
        [worker, limit, type, suspects],
      )
  ).rows;
const settle = async (ids: string[], leases: string[]) =>
  (
    await db
      .pool('worker')
      .query(
        `select task_id::text, result from queues.settle_tasks($1::bigint[], $2::bigint[], $3::text[], null, null, null, null)`,
        [ids, leases, ids.map(() => 'succeeded')],
      )
  ).rows;
const sorted = (ids: string[]) => [...ids].sort((a, b) => Number(a) - Number(b));

describe('ready batches', () => {
  it('an enqueue call holds its plain tasks in one row per type, priority and max_attempts; every other task gets its row', async () => {
    const ids = await enqueueMany(
      'batch_a',
      9,
      (i) =>
        i < 4
          ? {} // plain, priority 0
          : i < 6
            ? { priority: 5 } // plain, another priority
            : i === 6
              ? { resource_key: 'k' } // keyed
              : i === 7
                ? { group_key: 'g' } // grouped
                : { scheduled_at: new Date(Date.now() + 60_000).toISOString() }, // scheduled
    );
    const batches = await batchesOf('batch_a');
    expect(batches.map((b) => [b.priority, b.task_ids, b.taken])).toEqual([
      [0, ids.slice(0, 4), 0],
      [5, ids.slice(4, 6), 0],
    ]);
    // The keyed, grouped and scheduled tasks have rows; the batched ones do not.
    expect(await rowsOf(ids)).toEqual(ids.slice(6));
    // A lone plain task, a call with dependencies and a type with a flow limit: rows.
    const [lone] = await enqueueMany('batch_a', 1);
    const deps = await enqueueMany('batch_a', 2, () => ({ depends_on: [ids[0]] }));
    await db.query(`select queues.set_task_limit('batch_h', 'type', null, 3)`);
    const limited = await enqueueMany('batch_h', 3);
    expect(await rowsOf([lone, ...deps, ...limited])).toEqual(sorted([lone, ...deps, ...limited]));
    expect(await batchesOf('batch_h')).toEqual([]);
    // The dependency (a batched task) was given its row, so its completion waits for the
    // dependents' lock (queues.hold_rows_of); the batch keeps the other three.
    expect(await rowsOf([ids[0]])).toEqual([ids[0]]);
    expect((await batchesOf('batch_a'))[0].task_ids).toEqual(ids.slice(1, 4));
  });

  it('claims take a batch’s ids off its front, in claim order with the rows, and delete it with its last one', async () => {
    const ids = await enqueueMany('batch_b', 10);
    const [row] = await enqueueMany('batch_b', 1, () => ({ priority: 1 })); // ahead in claim order
    const first = await claim('batch_b', 4);
    expect(first.map((c) => c.task_id)).toEqual([row, ...ids.slice(0, 3)]);
    // One lease for the claim, naming its four tasks.
    expect(new Set(first.map((c) => c.task_lease_id)).size).toBe(1);
    expect((await batchesOf('batch_b'))[0]).toMatchObject({ taken: 3, task_ids: ids });
    expect(await rowsOf([row])).toEqual([]);
    const second = await claim('batch_b', 100);
    expect(second.map((c) => c.task_id)).toEqual(ids.slice(3));
    expect(await batchesOf('batch_b')).toEqual([]);
    // Their completions are fenced by the claim leases, as any task a claim took out.
    const all = [...first, ...second];
    expect(
      (
        await settle(
          all.map((c) => c.task_id),
          all.map((c) => c.task_lease_id),
        )
      ).every((r) => r.result === 'completed'),
    ).toBe(true);
    expect(
      (await db.query(`select count(*)::int as n from queues.task_end where task_id = any ($1::bigint[])`, [ids]))
        .rows[0].n,
    ).toBe(10);
  });

  it('16 concurrent claimers over 4,000 batched tasks: each claimed exactly once', async () => {
    const ids: string[] = [];
    for (let k = 0; k < 8; k++) ids.push(...(await enqueueMany('batch_c', 500)));
    const got: string[] = [];
    await Promise.all(
      Array.from({ length: 16 }, async (_, w) => {
        for (;;) {
          const rows = await claim('batch_c', 37, `w-c-${w}`);
          if (rows.length === 0) {
            // An empty claim may only have skipped batches other claims held: look again
            // until none is left.
            const left = await db.query(
              `select count(*)::int as n from queues.task_ready_batch where task_type = 'batch_c'`,
            );
            if (left.rows[0].n === 0) return;
            continue;
          }
          got.push(...rows.map((r) => r.task_id));
        }
      }),
    );
    expect(got).toHaveLength(4000);
    expect(new Set(got).size).toBe(4000);
    expect(sorted(got)).toEqual(sorted(ids));
  });

  it('readers see a batched task as ready: the task page, the lists, the counts, worker_tasks', async () => {
    const ids = await enqueueMany('batch_d', 3);
    const { rows: one } = await db.query(`select * from queues.task_pending_or_held_of($1)`, [ids[1]]);
    expect(one).toHaveLength(1);
    expect(one[0]).toMatchObject({ current_lease_id: null, lease_count: 0, lease_held: false });
    const { rows: all } = await db.query(
      `select task_id::text from queues.task_pending_or_held where task_type = 'batch_d' order by task_id`,
    );
    expect(all.map((r) => r.task_id)).toEqual(ids);
    const task = (await db.pool('api').query(`select admin.get_task($1) as t`, [ids[1]])).rows[0].t;
    expect(task.task.state).toBe('ready');
    const listed = (await db.pool('api').query(`select task_id::text, state from admin.list_tasks('batch_d')`)).rows;
    expect(listed.map((r) => [r.task_id, r.state])).toEqual(ids.map((id) => [id, 'ready']).reverse());
    const readyOnly = (await db.pool('api').query(`select task_id::text from admin.list_tasks('batch_d', 'ready')`))
      .rows;
    expect(readyOnly.map((r) => r.task_id)).toEqual([...ids].reverse());
    const counts = (
      await db.pool('api').query(`select state, count::int from admin.task_counts() where task_type = 'batch_d'`)
    ).rows;
    expect(counts).toEqual([{ state: 'ready', count: 3 }]);
    const status = (
      await db.query(`select id::text, status from public.worker_tasks where id = any ($1::bigint[]) order by id`, [
        ids,
      ])
    ).rows;
    expect(status.map((r) => r.status)).toEqual(['pending', 'pending', 'pending']);
    // Claimed, the same readers see the claim lease holding it.
    await claim('batch_d', 1);
    expect((await db.pool('api').query(`select admin.get_task($1) as t`, [ids[0]])).rows[0].t.task.state).toBe(
      'running',
    );
    expect((await db.pool('api').query(`select admin.get_task($1) as t`, [ids[1]])).rows[0].t.task.state).toBe('ready');
  });

  it('a cancel and a run now give the batched task its row; the batch keeps the others', async () => {
    const ids = await enqueueMany('batch_e', 4);
    const cancelled = (
      await db.query(`select task_id::text, result from queues.cancel_tasks(array[$1::bigint], 'not wanted')`, [ids[1]])
    ).rows;
    expect(cancelled).toEqual([{ task_id: ids[1], result: 'cancelled' }]);
    expect((await batchesOf('batch_e'))[0].task_ids).toEqual([ids[0], ids[2], ids[3]]);
    expect((await db.query(`select queues.run_task_now($1) as r`, [ids[2]])).rows[0].r).toBe('due_now');
    expect(await rowsOf([ids[2]])).toEqual([ids[2]]);
    expect((await batchesOf('batch_e'))[0].task_ids).toEqual([ids[0], ids[3]]);
    // The claim takes the batched ones and the row, never the cancelled one.
    const got = (await claim('batch_e', 10)).map((c) => c.task_id);
    expect(sorted(got)).toEqual([ids[0], ids[2], ids[3]]);
    expect(await batchesOf('batch_e')).toEqual([]);
  });

  it('a cancel across batches takes each task out of its own batch; each keeps the rest, its range narrowed', async () => {
    await db.query(`insert into queues.task_type (task_type) values ('batch_across') on conflict do nothing`);
    const a = await enqueueMany('batch_across', 5);
    const b = await enqueueMany('batch_across', 5);
    // a partly claimed first: the cancel meets a batch whose front is taken
    const [taken] = await claim('batch_across', 1);
    expect(taken.task_id).toBe(a[0]);
    const res = await db.query(`select task_id::text, result from queues.cancel_tasks($1::bigint[], 'across')`, [
      [a[1], a[4], b[0]],
    ]);
    expect(res.rows.every((r) => r.result === 'cancelled')).toBe(true);
    const { rows } = await db.query(
      `select task_ids::text[] as ids, taken, lower(task_range)::text as lo, (upper(task_range) - 1)::text as hi
         from queues.task_ready_batch where task_type = 'batch_across' order by task_id`,
    );
    expect(rows).toEqual([
      { ids: [a[2], a[3]], taken: 0, lo: a[2], hi: a[3] },
      { ids: b.slice(1), taken: 0, lo: b[1], hi: b[4] },
    ]);
    expect(sorted((await claim('batch_across', 10)).map((c) => c.task_id))).toEqual([a[2], a[3], ...b.slice(1)]);
  });

  it('a cancel racing claims over a batch: each task is either claimed or cancelled, never both', async () => {
    for (let round = 0; round < 10; round++) {
      const ids = await enqueueMany('batch_f', 20);
      const victims = ids.filter((_, i) => i % 3 === 0);
      const [claimed, cancelled] = await Promise.all([
        claim('batch_f', 20, `w-f-${round}`),
        db.query(`select task_id::text, result from queues.cancel_tasks($1::bigint[], 'race')`, [victims]),
      ]);
      const rest = await claim('batch_f', 20, `w-f2-${round}`);
      const cancelledIds = cancelled.rows.filter((r) => r.result === 'cancelled').map((r) => r.task_id);
      const claimedIds = [...claimed, ...rest].map((c) => c.task_id);
      // A task the claim took first is cancelled while running (a revocation), else it is
      // cancelled before any claim: never claimed after its cancel.
      for (const id of rest.map((c) => c.task_id)) expect(cancelledIds).not.toContain(id);
      expect(new Set([...claimedIds, ...cancelledIds])).toEqual(new Set(ids));
      expect(await batchesOf('batch_f')).toEqual([]);
    }
  });

  it('the per-row path claims batched tasks too (an expired lease among the types); the quarantine takes none', async () => {
    const ids = await enqueueMany('batch_g', 5);
    // A lease that expired: the next claim of the type goes the per-row way.
    const [early] = await enqueueMany('batch_g', 1, () => ({ priority: 1 }));
    const dead = await db.query(
      `select task_id::text from queues.claim_tasks_at(now(), 'w-dead', 1, array['batch_g'], 60, 5)`,
    );
    expect(dead.rows.map((r) => r.task_id)).toEqual([early]);
    // (the leases other tests left expire then too: rescued first, so that the claim's own
    // pass, at most 100 leases, is left with this one)
    while (
      Number((await db.query(`select queues.rescue_leases_at(now() + interval '61 seconds') as n`)).rows[0].n) > 0
    );
    // The expired lease is on its row again, so the quarantine's claim reads on (it returns
    // at once only when no lease expired and no repeat suspect is ready): it leaves the
    // batch whole, its tasks being no one's suspects.
    const expired = await db.query(
      `select count(*)::int as n from queues.task_pending where task_id = $1 and current_lease_id > 0`,
      [early],
    );
    expect(expired.rows[0].n).toBe(1);
    const quarantine = await db.query(
      `select task_id::text from queues.claim_tasks_at(now() + interval '61 seconds', 'w-quarantine', 10,
                                                       array['batch_g'], 60, 5, 'repeat')`,
    );
    const quarantined = quarantine.rows.map((r) => r.task_id);
    expect(quarantined.filter((id) => ids.includes(id))).toEqual([]);
    expect((await batchesOf('batch_g')).map((b) => [b.task_ids, b.taken])).toEqual([[ids, 0]]);
    const later = await db.query(
      `select task_id::text from queues.claim_tasks_at(now() + interval '61 seconds', 'w-next', 10, array['batch_g'], 60, 5)`,
    );
    expect(sorted(later.rows.map((r) => r.task_id))).toEqual(
      sorted([...(quarantined.includes(early) ? [] : [early]), ...ids]),
    );
    expect(await batchesOf('batch_g')).toEqual([]);
  });

  it('a flow limit set on a type gives its batched tasks rows, where the limit counts them', async () => {
    await db.query(`insert into queues.task_type (task_type) values ('batch_limit') on conflict do nothing`);
    const ids = await enqueueMany('batch_limit', 6);
    expect(await batchesOf('batch_limit')).toHaveLength(1);
    // the batch's front already taken by a claim (and completed): the rest get rows
    const first = await claim('batch_limit', 1);
    expect(first.map((c) => c.task_id)).toEqual([ids[0]]);
    await settle([first[0].task_id], [first[0].task_lease_id]);
    await db.query(`select queues.set_task_limit('batch_limit', 'type', null, 3)`);
    expect(await batchesOf('batch_limit')).toEqual([]);
    expect(await rowsOf(ids)).toEqual(ids.slice(1));
    // three running at most
    expect(await claim('batch_limit', 10)).toHaveLength(3);
    expect(await claim('batch_limit', 10)).toHaveLength(0);
  });

  it('a claim transaction left open holds the rest of the batch it took from; other claims take other batches meanwhile', async () => {
    await db.query(`insert into queues.task_type (task_type) values ('batch_open') on conflict do nothing`);
    const first = await enqueueMany('batch_open', 3);
    const second = await enqueueMany('batch_open', 3);
    const open = await db.client('worker');
    try {
      await open.query('begin');
      const held = await open.query(`select task_id::text from queues.claim_tasks('w-open', 1, array['batch_open'])`);
      expect(held.rows.map((r) => r.task_id)).toEqual([first[0]]);
      // Never waits behind it (SKIP LOCKED): the next batch.
      expect((await claim('batch_open', 10, 'w-other')).map((c) => c.task_id)).toEqual(second);
      await open.query('commit');
    } finally {
      await open.end();
    }
    expect((await claim('batch_open', 10, 'w-other')).map((c) => c.task_id)).toEqual(first.slice(1));
  });

  it('batched_count_between counts the ids left in a range, whether a batch lies inside it or straddles it', async () => {
    await db.query(`insert into queues.task_type (task_type) values ('batch_count') on conflict do nothing`);
    const a = await enqueueMany('batch_count', 10);
    const b = await enqueueMany('batch_count', 4);
    await claim('batch_count', 3); // a[0..2] taken
    const count = async (lo: string, hi: string) =>
      Number((await db.query(`select queues.batched_count_between($1, $2) as n`, [lo, hi])).rows[0].n);
    const after = (id: string) => String(Number(id) + 1);
    // both batches inside: 7 + 4
    expect(await count(a[0], after(b[3]))).toBe(11);
    // straddling a's bounds: a[1..5], of which a[3..5] are left
    expect(await count(a[1], a[6])).toBe(3);
    // b alone, and nothing above b
    expect(await count(b[0], after(b[3]))).toBe(4);
    expect(await count(after(b[3]), after(after(b[3])))).toBe(0);
  });

  it('the rebuild gives batched tasks claim-index rows and empties the batches', async () => {
    await db.query(`insert into queues.task_type (task_type) values ('batch_rebuild') on conflict do nothing`);
    const ids = await enqueueMany('batch_rebuild', 4);
    const before = (
      await db.query(`select * from queues.task_pending_or_held where task_type = 'batch_rebuild' order by task_id`)
    ).rows;
    await db.query('select queues.rebuild_task_pending()');
    expect(await batchesOf('batch_rebuild')).toEqual([]);
    expect(await rowsOf(ids)).toEqual(ids);
    const after = (
      await db.query(`select * from queues.task_pending_or_held where task_type = 'batch_rebuild' order by task_id`)
    ).rows;
    // The same rows, read from the claim index now instead of the batch.
    expect(before.map((r) => r.batched)).toEqual(ids.map(() => true));
    expect(after.map((r) => r.batched)).toEqual(ids.map(() => false));
    const unmarked = (rows: Record<string, unknown>[]) => rows.map(({ batched: _, ...r }) => r);
    expect(unmarked(after)).toEqual(unmarked(before));
  });

  it('the task list pages through rows, lease-held tasks and overlapping batches as the view orders them, reading only the batches a page reaches', async () => {
    await db.query(
      `insert into queues.task_type (task_type) values ('batch_list'), ('batch_list_b') on conflict do nothing`,
    );
    // Priorities alternate within a call: two batches per call whose ids interleave. Group
    // keys get rows; a claim leaves some lease-held and a batch partly taken; a future
    // time makes a scheduled row; a payload marks every fifth task.
    for (let call = 0; call < 12; call++)
      await enqueueMany(call % 3 === 2 ? 'batch_list_b' : 'batch_list', 30, (i) => ({
        priority: i % 2,
        payload: { i, mark: i % 5 === 0 },
        ...(i % 7 === 3 ? { group_key: 'g' } : {}),
        ...(i === 29 ? { scheduled_at: '2999-01-01T00:00:00Z' } : {}),
      }));
    expect((await claim('batch_list', 25)).length).toBe(25);
    type Page = { task_id: string; state: string };
    const list = async (state: string, type: string | null, before: string | null, mark: boolean | null) =>
      (
        await db.pool('api').query<Page>(
          `select task_id::text, state from admin.list_tasks($1, $2, 13, $3, null, null, null, null,
                                                             $4::text[], $5::jsonb)`,
          [type, state, before, mark === null ? null : ['mark'], mark === null ? null : JSON.stringify(mark)],
        )
      ).rows;
    const states: Record<string, string[]> = {
      ready: ['ready'],
      pending: ['scheduled', 'ready', 'retrying'],
      running: ['running'],
    };
    for (const [state, type, mark] of [
      ['ready', null, null],
      ['pending', 'batch_list', null],
      ['ready', 'batch_list_b', true],
      ['running', 'batch_list', null],
    ] as const) {
      const { rows: expected } = await db.query<Page>(
        `select p.task_id::text, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, now()) as state
           from queues.task_pending_or_held p join queues.task t on t.task_id = p.task_id
          where admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, now()) = any ($1)
            and ($2::text is null or p.task_type = $2) and ($3::jsonb is null or t.payload -> 'mark' = $3)
          order by p.task_id desc`,
        [states[state], type, mark === null ? null : JSON.stringify(mark)],
      );
      expect(expected.length).toBeGreaterThan(13);
      const walked: Page[] = [];
      for (let before: string | null = null; ;) {
        const page = await list(state, type, before, mark);
        walked.push(...page);
        if (page.length < 13) break;
        before = page[page.length - 1].task_id;
      }
      expect({ state, type, mark, walked }).toEqual({ state, type, mark, walked: expected });
    }
    // A page reads the batches its tasks come from, not the rest: the newest call's two
    // (their ids interleave) of batch_list's 16.
    const root = await db.client('root');
    try {
      const plans = await explainNested(
        root,
        `select * from admin.list_tasks('batch_list', 'ready', 13, null, null, null, null, null, null, null)`,
      );
      const batchReads = plans.filter((p) => p.query.includes('unnest(b.task_ids[b.taken + 1:])'));
      expect(batchReads.length).toBeGreaterThan(0);
      expect(batchReads.length).toBeLessThanOrEqual(3);
      // The walk of the rows reads no batch.
      const rowWalk = plans.filter((p) => p.query.includes('not p.batched'));
      expect(rowWalk).toHaveLength(1);
      expect(planNodes(rowWalk[0].plan).filter((n) => n['Relation Name'] === 'task_ready_batch')).toEqual([]);
    } finally {
      await root.end();
    }
  });

  it('next_claim_in_ms answers 0 for a batch enqueued within _missed_ms', async () => {
    await db.query(`insert into queues.task_type (task_type) values ('batch_next') on conflict do nothing`);
    const ask = async (missed: number) =>
      (await db.pool('worker').query(`select queues.next_claim_in_ms(array['batch_next'], $1) as ms`, [missed])).rows[0]
        .ms;
    expect(await ask(0)).toBeNull();
    await enqueueMany('batch_next', 2);
    expect(await ask(60_000)).toBe(0);
  });
});
