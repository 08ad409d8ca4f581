// Completion rounds (sql/queues/complete.sql, sql/queues/task_end.sql): a completion
// call's plain successes are one queues.completion_round per task type, every other end a
// queues.task_completed row; each reading of a task's end (outcome, lease, start time) is
// the same in both shapes, a task's own end is an index probe, and the round is fenced as
// the per-task completion was.
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, explainNested, planNodes, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  for (const type of ['round_a', 'round_b'])
    await db.query(`insert into queues.task_type (task_type) values ($1) on conflict do nothing`, [type]);
});
afterAll(async () => {
  await db?.drop();
});

async function enqueue(type: string, n: number): Promise<string[]> {
  const { rows } = await db.query(
    `select queues.enqueue($1, jsonb_build_object('n', g))::text as id from generate_series(1, $2::int) g`,
    [type, n],
  );
  return rows.map((r) => r.id);
}
/** Claims every ready task of `type` at now() + `seconds`, as worker `worker`. */
async function claim(type: string, seconds = 0, worker = 'w'): Promise<Map<string, string>> {
  const { rows } = await db.query(
    `select task_id::text, task_lease_id::text
       from queues.claim_tasks_at(now() + make_interval(secs => $1), $2, 1000, array[$3], 60, 5)`,
    [seconds, worker, type],
  );
  return new Map(rows.map((r) => [r.task_id, r.task_lease_id]));
}
/** queues.settle_tasks as the worker calls it; returns task id -> result. */
async function settle(
  ids: string[],
  leases: (string | null)[] | null,
  outcomes: string[] | null = null,
  startedUs: (string | null)[] | null = null,
  client: pg.Pool | pg.ClientBase = db.pool('worker'),
): Promise<Map<string, string>> {
  const { rows } = await client.query(
    `select task_id::text, result from queues.settle_tasks($1::bigint[], $2::bigint[], $3::text[], null, null, null, $4::bigint[])`,
    [ids, leases, outcomes, startedUs],
  );
  return new Map(rows.map((r) => [r.task_id, r.result]));
}
const ends = async (ids: string[]) =>
  (
    await db.query(
      `select e.task_id::text, e.task_lease_id::text, e.outcome, e.task_type,
              (extract(epoch from e.started_at) * 1000000)::bigint::text as started_us
         from unnest($1::bigint[]) i(id) cross join lateral queues.task_end_of(i.id) e order by e.task_id`,
      [ids],
    )
  ).rows;

describe('a completion call', () => {
  it('writes its plain successes as one round per task type, with leases and start times; other ends per task', async () => {
    const a = await enqueue('round_a', 3);
    const b = await enqueue('round_b', 2);
    const leases = new Map([...(await claim('round_a')), ...(await claim('round_b'))]);
    // Input out of order; one of round_a fails (a validation failure: final); start
    // times to the microsecond.
    const ids = [a[2], b[1], a[0], b[0], a[1]];
    const started = ids.map((_, i) => String(1_790_000_000_123_456n + BigInt(i)));
    const outcomes = ['succeeded', 'succeeded', 'succeeded', 'succeeded', 'validation_failed'];
    const results = await settle(
      ids,
      ids.map((id) => leases.get(id)!),
      outcomes,
      started,
    );
    expect([...results.values()]).toEqual(Array(5).fill('completed'));

    const { rows: rounds } = await db.query(
      `select task_id::text, task_type, task_ids::text[], task_lease_ids::text[], started_us::text[], task_range::text
         from queues.completion_round where task_ids && $1::bigint[] order by task_type`,
      [ids],
    );
    const startOf = (id: string) => started[ids.indexOf(id)];
    expect(rounds).toEqual([
      {
        task_id: a[2],
        task_type: 'round_a',
        task_ids: [a[0], a[2]],
        task_lease_ids: [leases.get(a[0]), leases.get(a[2])],
        started_us: [startOf(a[0]), startOf(a[2])],
        task_range: `[${a[0]},${Number(a[2]) + 1})`,
      },
      {
        task_id: b[1],
        task_type: 'round_b',
        task_ids: [b[0], b[1]],
        task_lease_ids: [leases.get(b[0]), leases.get(b[1])],
        started_us: [startOf(b[0]), startOf(b[1])],
        task_range: `[${b[0]},${Number(b[1]) + 1})`,
      },
    ]);
    const { rows: perTask } = await db.query(
      `select task_id::text, outcome from queues.task_completed where task_id = any($1::bigint[])`,
      [ids],
    );
    expect(perTask).toEqual([{ task_id: a[1], outcome: 'validation_failed' }]);

    // Each task's end, read per task: outcome, lease and start time, in either shape.
    expect(await ends(ids)).toEqual(
      [...ids]
        .sort((x, y) => Number(x) - Number(y))
        .map((id) => ({
          task_id: id,
          task_lease_id: leases.get(id),
          outcome: id === a[1] ? 'validation_failed' : 'succeeded',
          task_type: a.includes(id) ? 'round_a' : 'round_b',
          started_us: startOf(id),
        })),
    );
    // The view gives the same rows.
    const { rows: viewed } = await db.query(
      `select task_id::text, task_lease_id::text, outcome, task_type,
              (extract(epoch from started_at) * 1000000)::bigint::text as started_us
         from queues.task_end where task_id = any($1::bigint[]) order by task_id`,
      [ids],
    );
    expect(viewed).toEqual(await ends(ids));
  });

  it('a success without a lease or start time is a round too, read back with nulls', async () => {
    const [id] = await enqueue('round_a', 1);
    await claim('round_a');
    expect(await settle([id], null)).toEqual(new Map([[id, 'completed']]));
    expect(await ends([id])).toEqual([
      { task_id: id, task_lease_id: null, outcome: 'succeeded', task_type: 'round_a', started_us: null },
    ]);
  });

  it('rounds and per-task completions read alike on the task page, the API view and the counts', async () => {
    // One success as a round (this code), one written as a task_completed row (as
    // completions were before rounds): every reader shows them the same way.
    const [viaRound, viaRow] = await enqueue('round_b', 2);
    const leases = await claim('round_b');
    const start = '2030-01-02T03:04:05.678901Z';
    const us = String(BigInt(Date.parse('2030-01-02T03:04:05.678Z')) * 1000n + 901n);
    expect(await settle([viaRound], [leases.get(viaRound)!], ['succeeded'], [us])).toEqual(
      new Map([[viaRound, 'completed']]),
    );
    await db.query(`delete from queues.task_pending where task_id = $1`, [viaRow]);
    await db.query(
      `insert into queues.task_completed (task_id, task_lease_id, outcome, task_type, started_at)
       values ($1, $2, 'succeeded', 'round_b', $3)`,
      [viaRow, leases.get(viaRow), start],
    );
    const api = db.pool('api');
    for (const id of [viaRound, viaRow]) {
      const { rows } = await api.query('select admin.get_task($1) as t', [id]);
      const task = rows[0].t;
      expect(task.task.state, id).toBe('succeeded');
      expect(task.completion, id).toMatchObject({
        outcome: 'succeeded',
        task_lease_id: Number(leases.get(id)),
        started_at: '2030-01-02T03:04:05.678901+00:00',
      });
      expect(Object.keys(task.completion).sort(), id).toEqual(
        ['completed_at', 'outcome', 'started_at', 'task_lease_id'].sort(),
      );
      const { rows: worker } = await api.query(
        `select status, outcome, started_at = $2::timestamptz as started, completed_at is not null as completed
           from public.worker_tasks where id = $1`,
        [id, start],
      );
      expect(worker, id).toEqual([{ status: 'completed', outcome: 'succeeded', started: true, completed: true }]);
    }
    // The list by state and the dashboard's counts see both.
    const { rows: listed } = await api.query(
      `select task_id::text from admin.list_tasks('round_b', 'succeeded', 50) where task_id = any($1::bigint[])`,
      [[viaRound, viaRow]],
    );
    expect(listed.map((r) => r.task_id).sort()).toEqual([viaRound, viaRow].sort());
    const { rows: counts } = await api.query(
      `select count from admin.task_counts(3600) where task_type = 'round_b' and state = 'succeeded'`,
    );
    const { rows: expected } = await db.query(
      `select count(*)::text as n from queues.task_end where task_type = 'round_b' and outcome = 'succeeded'`,
    );
    expect(counts).toEqual([{ count: expected[0].n }]);
    expect(Number(expected[0].n)).toBeGreaterThanOrEqual(4);
  });

  it("a task's end is an index probe of each shape, not a scan of the rounds", async () => {
    // Many rounds: 2,000 of 100 tasks each (ids far above the real ones).
    await db.query(`
      insert into queues.completion_round (task_id, task_type, task_ids, task_lease_ids, started_us, task_range)
      select r * 100 + 1000099, 'round_a', array(select r * 100 + 1000000 + g from generate_series(0, 99) g),
             array_fill(null::bigint, array[100]), array_fill(null::bigint, array[100]),
             int8range(r * 100 + 1000000, r * 100 + 1000099, '[]')
        from generate_series(0, 1999) r`);
    // ...and per-task completions in the same set (other ids).
    await db.query(`
      insert into queues.task_completed (task_id, outcome, task_type)
      select 1500000 + g, 'failed', 'round_a' from generate_series(0, 19999) g`);
    await db.query('analyze queues.completion_round, queues.task_completed');
    const root = await db.client('root');
    try {
      const { rows } = await root.query(
        `explain (analyze, buffers, format json) select * from queues.task_end_of(1100050)`,
      );
      const plan = rows[0]['QUERY PLAN'][0].Plan as Node & { 'Actual Rows': number };
      type Node = {
        'Node Type'?: string;
        'Relation Name'?: string;
        'Index Name'?: string;
        'Actual Rows'?: number;
        'Actual Loops'?: number;
        'Rows Removed by Filter'?: number;
        Plans?: Node[];
      };
      const nodes: Node[] = [];
      const walk = (n: Node) => {
        nodes.push(n);
        (n.Plans ?? []).forEach(walk);
      };
      walk(plan);
      const onRounds = nodes.filter((n) => (n['Relation Name'] ?? '').startsWith('completion_round'));
      expect(onRounds.length).toBeGreaterThan(0);
      // No scan of a partition that holds rounds (an empty one costs nothing).
      expect(
        onRounds.filter(
          (n) =>
            n['Node Type'] === 'Seq Scan' &&
            Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0) > 0,
        ),
      ).toEqual([]);
      expect(nodes.some((n) => (n['Index Name'] ?? '').includes('task_range'))).toBe(true);
      expect(
        nodes.some(
          (n) => (n['Index Name'] ?? '').includes('task_completed') && (n['Index Name'] ?? '').includes('pkey'),
        ),
      ).toBe(true);
      // The probe reads the round that names the task (its range holds the id), not 2,000.
      const roundRows = onRounds.reduce(
        (s, n) =>
          s +
          (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) * Number(n['Actual Loops'] ?? 1),
        0,
      );
      expect(roundRows).toBeLessThanOrEqual(2);
      expect(Number(plan['Actual Rows'])).toBe(1);
    } finally {
      await root.end();
    }
  });
});

describe("a completion's reading of the rounds", () => {
  it("reads the rounds overlapping its lease once, by the range index, whatever the partition's other rounds", async () => {
    // A database of its own, whose partitions are empty when the worker's session plans
    // its completion (as a worker's completer plans at its first round on a new queue).
    const own = await createTestDatabase();
    const worker = await own.pool('worker').connect();
    try {
      await own.query(`insert into queues.task_type (task_type) values ('round_c')`);
      const { rows: enqueued } = await own.query(
        `select queues.enqueue('round_c', jsonb_build_object('n', g))::text as id from generate_series(1, 201) g`,
      );
      const ids = enqueued.map((r) => r.id as string);
      const { rows: leased } = await own.query(
        `select task_id::text, task_lease_id::text from queues.claim_tasks_at(now(), 'w', 1000, array['round_c'], 60, 5)`,
      );
      const lease = leased[0].task_lease_id as string;
      expect(leased.map((r) => r.task_lease_id)).toEqual(ids.map(() => lease));
      expect([...(await settle([ids[0]], [lease], ['succeeded'], null, worker)).values()]).toEqual(['completed']);
      const next = ids.slice(1, 101);
      expect([
        ...(
          await settle(
            next,
            next.map(() => lease),
            null,
            null,
            worker,
          )
        ).values(),
      ]).toEqual(next.map(() => 'completed'));
      // Then the lease's partition gains 2,000 rounds of other tasks (ids beyond the lease's).
      await own.query(`
        insert into queues.completion_round (task_id, task_type, task_ids, task_lease_ids, started_us, task_range)
        select r * 100 + 500099, 'round_c', array(select r * 100 + 500000 + g from generate_series(0, 99) g),
               array_fill(null::bigint, array[100]), array_fill(null::bigint, array[100]),
               int8range(r * 100 + 500000, r * 100 + 500099, '[]')
          from generate_series(0, 1999) r`);
      const rest = ids.slice(101);
      await worker.query('begin');
      const results = await settle(
        rest,
        rest.map(() => lease),
        rest.map(() => 'succeeded'),
        null,
        worker,
      );
      const { rows } = await worker.query(
        `select coalesce(sum(seq_tup_read), 0)::int as seq, coalesce(sum(idx_tup_fetch), 0)::int as idx
           from pg_stat_xact_user_tables where schemaname = 'queues' and relname like 'completion_round%'`,
      );
      await worker.query('commit');
      expect([...results.values()]).toEqual(rest.map(() => 'completed'));
      // No partition read through: the lease's rounds (its first task's and the next
      // 100's) and at most a neighbour by the range index, not the 2,000 others, and once
      // for the call, not once per task.
      expect(rows[0].seq).toBe(0);
      expect(rows[0].idx).toBeGreaterThanOrEqual(2);
      expect(rows[0].idx).toBeLessThanOrEqual(4);
      // A repeat under the same lease finds them ended.
      const again = rest.slice(0, 3);
      expect([
        ...(
          await settle(
            again,
            again.map(() => lease),
            null,
            null,
            worker,
          )
        ).values(),
      ]).toEqual(['already_completed', 'already_completed', 'already_completed']);
    } finally {
      worker.release();
      await own.drop();
    }
  });
});

describe("one claim lease's plain successes (the drain's call, one statement)", () => {
  const endsOf = async (ids: string[]) =>
    (
      await db.query(
        `select e.task_id::text, count(*)::int as n from queues.task_end e where e.task_id = any($1::bigint[])
          group by e.task_id order by e.task_id`,
        [ids],
      )
    ).rows.map((r) => [r.task_id, r.n]);

  it('a task of the call that ended already: the call is decided task by task, each task ending once', async () => {
    const ids = await enqueue('round_a', 4);
    const leased = await claim('round_a');
    const lease = leased.get(ids[0])!;
    expect(await settle(ids.slice(0, 2), [lease, lease], ['succeeded', 'succeeded'])).toEqual(
      new Map(ids.slice(0, 2).map((id) => [id, 'completed'])),
    );
    const results = await settle(ids.slice(1), [lease, lease, lease], ['succeeded', 'succeeded', 'succeeded']);
    expect(results).toEqual(
      new Map([
        [ids[1], 'already_completed'],
        [ids[2], 'completed'],
        [ids[3], 'completed'],
      ]),
    );
    expect(await endsOf(ids)).toEqual(ids.map((id) => [id, 1]));
  });

  it("a task the lease does not name (another claim's) is refused, the lease's own complete", async () => {
    const mine = await enqueue('round_a', 2);
    const first = await claim('round_a', 0, 'w1');
    const theirs = await enqueue('round_a', 1);
    const second = await claim('round_a', 0, 'w2');
    const lease = first.get(mine[0])!;
    expect(second.get(theirs[0])).not.toBe(lease);
    const results = await settle([...mine, theirs[0]], [lease, lease, lease], ['succeeded', 'succeeded', 'succeeded']);
    expect(results).toEqual(
      new Map([
        [mine[0], 'completed'],
        [mine[1], 'completed'],
        [theirs[0], 'lease_lost'],
      ]),
    );
    expect(await endsOf(theirs)).toEqual([]);
    // Its own lease still completes it.
    expect(await settle(theirs, [second.get(theirs[0])!], ['succeeded'])).toEqual(new Map([[theirs[0], 'completed']]));
  });

  it('a call whose tasks lie far apart probes each task, not the claim index between them; a near one reads its range once', async () => {
    await db.query(`insert into queues.task_type (task_type) values ('round_far') on conflict do nothing`);
    // Two urgent tasks with 1,000 ready ones between them: one claim takes the two.
    const [first] = await enqueue('round_far', 1);
    await db.query(`update queues.task_pending set priority = 9 where task_id = $1`, [first]);
    await enqueue('round_far', 1000);
    const [last] = await enqueue('round_far', 1);
    await db.query(`update queues.task_pending set priority = 9 where task_id = $1`, [last]);
    const { rows: claimed } = await db.query(
      `select task_id::text, task_lease_id::text from queues.claim_tasks_at(now(), 'w-far', 2, array['round_far'], 60, 5)`,
    );
    expect(claimed.map((r) => r.task_id)).toEqual([first, last]);
    const lease = claimed[0].task_lease_id as string;
    // Rows of the claim index the completion's statements read, over all loops.
    const pendingRowsRead = async (ids: string[], leaseId: string) => {
      const root = await db.client('root');
      try {
        const plans = await explainNested(
          root,
          `select * from queues.settle_tasks($1::bigint[], $2::bigint[], $3::text[], null, null, null, null)`,
          [ids, ids.map(() => leaseId), ids.map(() => 'succeeded')],
        );
        const fence = plans.filter((p) => p.query.includes('with lease as'));
        expect(fence).toHaveLength(1);
        return planNodes(fence[0].plan)
          .filter((n) => (n['Relation Name'] ?? '') === 'task_pending')
          .reduce(
            (sum, n) =>
              sum +
              (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) *
                Number(n['Actual Loops'] ?? 1),
            0,
          );
      } finally {
        await root.end();
      }
    };
    expect(await pendingRowsRead([first, last], lease)).toBeLessThanOrEqual(2);
    expect((await ends([first, last])).map((e) => e.outcome)).toEqual(['succeeded', 'succeeded']);
    // Ten neighbours claimed together: their range is read once (an index range scan).
    const near = (
      await db.query(
        `select task_id::text, task_lease_id::text from queues.claim_tasks_at(now(), 'w-near', 10, array['round_far'], 60, 5)`,
      )
    ).rows;
    expect(near).toHaveLength(10);
    expect(Number(near[9].task_id) - Number(near[0].task_id)).toBe(9);
    expect(
      await pendingRowsRead(
        near.map((r) => r.task_id as string),
        near[0].task_lease_id as string,
      ),
    ).toBe(0);
  });

  it('a task of the call on a claim-index row (a heartbeat gave it one) ends on it, beside the lease-held ones', async () => {
    const ids = await enqueue('round_a', 3);
    const leased = await claim('round_a');
    const lease = leased.get(ids[0])!;
    // A heartbeat of the first task: it is back on a row, held there by the same lease.
    await db
      .pool('worker')
      .query(`select * from queues.extend_leases($1::bigint[], $2::bigint[], 60)`, [[ids[0]], [lease]]);
    expect((await db.query(`select 1 from queues.task_pending where task_id = $1`, [ids[0]])).rowCount).toBe(1);
    const results = await settle(ids, [lease, lease, lease], ['succeeded', 'succeeded', 'succeeded']);
    expect(results).toEqual(new Map(ids.map((id) => [id, 'completed'])));
    expect(
      (await db.query(`select 1 from queues.task_pending where task_id = any($1::bigint[])`, [ids])).rowCount,
    ).toBe(0);
    expect(await endsOf(ids)).toEqual(ids.map((id) => [id, 1]));
  });

  it("names the claim's one task type on its lease, and each round has its tasks' type when the claim took several", async () => {
    const a = await enqueue('round_a', 2);
    const b = await enqueue('round_b', 2);
    const { rows } = await db.query(
      `select task_id::text, task_lease_id::text from queues.claim_tasks_at(now(), 'w', 1000, array['round_a', 'round_b'], 60, 5)`,
    );
    const lease = rows.find((r) => r.task_id === a[0])!.task_lease_id as string;
    expect(rows.filter((r) => [...a, ...b].includes(r.task_id)).every((r) => r.task_lease_id === lease)).toBe(true);
    const { rows: leases } = await db.query(`select task_type from queues.claim_lease where task_lease_id = $1`, [
      lease,
    ]);
    expect(leases).toEqual([{ task_type: null }]);
    const ids = [...a, ...b];
    expect(
      await settle(
        ids,
        ids.map(() => lease),
        ids.map(() => 'succeeded'),
      ),
    ).toEqual(new Map(ids.map((id) => [id, 'completed'])));
    expect((await ends(ids)).map((e) => [e.task_id, e.task_type])).toEqual([
      [a[0], 'round_a'],
      [a[1], 'round_a'],
      [b[0], 'round_b'],
      [b[1], 'round_b'],
    ]);
    const one = await enqueue('round_b', 2);
    const single = await claim('round_b');
    const { rows: typed } = await db.query(`select task_type from queues.claim_lease where task_lease_id = $1`, [
      single.get(one[0]),
    ]);
    expect(typed).toEqual([{ task_type: 'round_b' }]);
  });
});

describe('a round is fenced by the lease of each task', () => {
  it("a late holder's completion is refused, and leaves nothing; the new holder's repeat is idempotent", async () => {
    const [id] = await enqueue('round_a', 1);
    const first = (await claim('round_a', 0, 'w1')).get(id)!;
    // The lease expires (60 s) and another worker takes the task.
    const second = (await claim('round_a', 120, 'w2')).get(id)!;
    expect(second).not.toBe(first);
    // The late holder, before and after the new holder's completion: lease_lost, no end.
    expect(await settle([id], [first])).toEqual(new Map([[id, 'lease_lost']]));
    expect(await ends([id])).toEqual([]);
    expect(await settle([id], [second], null, ['1790000000000000'])).toEqual(new Map([[id, 'completed']]));
    expect(await settle([id], [first])).toEqual(new Map([[id, 'lease_lost']]));
    await expect(db.pool('worker').query(`select queues.fail_task($1, 'late', $2)`, [id, first])).rejects.toMatchObject(
      { code: '55000', constraint: 'task_lease_current' },
    );
    await expect(db.pool('worker').query(`select queues.complete_task($1, $2)`, [id, first])).rejects.toMatchObject({
      code: '55000',
      constraint: 'task_lease_current',
    });
    // The holder repeating itself, and an unfenced caller: already_completed.
    expect(await settle([id], [second])).toEqual(new Map([[id, 'already_completed']]));
    expect(await settle([id], null)).toEqual(new Map([[id, 'already_completed']]));
    expect((await db.pool('worker').query(`select queues.complete_task($1) as r`, [id])).rows[0].r).toBe(false);
    // One end, the new holder's.
    expect(await ends([id])).toEqual([
      {
        task_id: id,
        task_lease_id: second,
        outcome: 'succeeded',
        task_type: 'round_a',
        started_us: '1790000000000000',
      },
    ]);
    // Cancelling or running now a task whose end is a round: already completed.
    const { rows: cancelled } = await db
      .pool('api')
      .query(`select result from admin.cancel_tasks(array[$1::bigint])`, [id]);
    expect(cancelled).toEqual([{ result: 'already_completed' }]);
  });

  it('a holder whose task an unfenced caller completed can neither complete nor record an error', async () => {
    const [id] = await enqueue('round_a', 1);
    const lease = (await claim('round_a')).get(id)!;
    expect(await settle([id], null)).toEqual(new Map([[id, 'completed']]));
    expect(await settle([id], [lease])).toEqual(new Map([[id, 'lease_lost']]));
    await expect(
      db.pool('worker').query(`select queues.fail_task($1, 'too late', $2)`, [id, lease]),
    ).rejects.toMatchObject({ code: '55000', constraint: 'task_lease_current' });
    expect((await db.query(`select count(*)::int as n from queues.error where task_id = $1`, [id])).rows[0].n).toBe(0);
    const { rows: cancelled } = await db
      .pool('api')
      .query(`select result from admin.cancel_tasks(array[$1::bigint])`, [id]);
    expect(cancelled).toEqual([{ result: 'already_completed' }]);
  });

  it('completers racing for the same tasks: each task ends exactly once, in one shape', async () => {
    const ids = await enqueue('round_b', 40);
    const leases = await claim('round_b');
    const racers = 8;
    const clients = await Promise.all(Array.from({ length: racers }, () => db.client('worker')));
    try {
      for (let round = 0; round < 3; round++) {
        // Each racer completes every task (same order, so row locks queue rather than
        // deadlock), half of them as successes, half as validation failures (final), with
        // a different started time each: whoever wins writes the one end. A loser is told
        // already_completed, or lease_lost when its statement began before the winner
        // committed (as before rounds: it then cannot tell who completed the task).
        const results = await Promise.all(
          clients.map((c, r) =>
            settle(
              ids,
              ids.map((id) => leases.get(id)!),
              ids.map(() => (r % 2 === 0 ? 'succeeded' : 'validation_failed')),
              ids.map(() => String(1_790_000_000_000_000 + r)),
              c,
            ),
          ),
        );
        for (const id of ids) {
          const got = results.map((m) => m.get(id));
          if (round === 0) {
            expect(
              got.filter((g) => g === 'completed'),
              id,
            ).toHaveLength(1);
            expect(
              got.filter((g) => g === 'already_completed' || g === 'lease_lost'),
              id,
            ).toHaveLength(racers - 1);
          } else {
            expect(got, id).toEqual(Array(racers).fill('already_completed'));
          }
        }
      }
      const { rows } = await db.query(
        `select e.task_id::text, count(*)::int as n from queues.task_end e where e.task_id = any($1::bigint[]) group by 1`,
        [ids],
      );
      expect(rows).toHaveLength(ids.length);
      expect(rows.every((r) => r.n === 1)).toBe(true);
      // No task is in a round and in task_completed, nor in two rounds.
      const { rows: both } = await db.query(
        `select count(*)::int as n from queues.completion_round r cross join lateral unnest(r.task_ids) u(id)
          where u.id = any($1::bigint[])
            and (exists (select 1 from queues.task_completed c where c.task_id = u.id)
                 or (select count(*) from queues.completion_round r2 where u.id = any (r2.task_ids)) > 1)`,
        [ids],
      );
      expect(both[0].n).toBe(0);
      // The one end of each task carries its winner's start time and outcome together.
      for (const e of await ends(ids)) {
        const racer = Number(e.started_us) - 1_790_000_000_000_000;
        expect(e.outcome).toBe(racer % 2 === 0 ? 'succeeded' : 'validation_failed');
      }
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  it('is append-only: a round is never updated, on the parent or a partition', async () => {
    await expect(db.query(`update queues.completion_round set task_type = task_type`)).rejects.toMatchObject({
      code: '55000',
    });
    const { rows } = await db.query(
      `select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid
        where i.inhparent = 'queues.completion_round'::regclass
          and not exists (select 1 from pg_trigger g where g.tgrelid = c.oid and g.tgname = 'forbid_update')`,
    );
    expect(rows).toEqual([]);
    const { rows: parts } = await db.query(`select tableoid::regclass::text as p from queues.completion_round limit 1`);
    await expect(db.query(`update ${parts[0].p} set task_type = task_type`)).rejects.toMatchObject({ code: '55000' });
  });

  it('refuses a malformed round', async () => {
    const bad = [
      // unsorted (the last is not the largest)
      `(5, 'round_a', '{5,4}', '{null,null}', '{null,null}', '[4,5]')`,
      // a range that is not first..last
      `(5, 'round_a', '{4,5}', '{null,null}', '{null,null}', '[3,5]')`,
      // parallel arrays of another length
      `(5, 'round_a', '{4,5}', '{null}', '{null,null}', '[4,5]')`,
      // empty
      `(5, 'round_a', '{}', '{}', '{}', '[4,5]')`,
    ];
    for (const values of bad)
      await expect(
        db.query(
          `insert into queues.completion_round (task_id, task_type, task_ids, task_lease_ids, started_us, task_range) values ${values}`,
        ),
      ).rejects.toMatchObject({ code: '23514' });
  });
});

describe('a round of plain successes takes no shortcut past the checks', () => {
  // queues.settle_tasks and queues.complete_tasks skip their error, outcome and retry
  // queries for a call whose outcomes all succeeded and that records no error: a call
  // with one other outcome, error or start time beside its successes is checked whole.
  it('refuses the whole call for one bad element beside the successes, writing nothing', async () => {
    const ids = await enqueue('round_a', 3);
    const leases = await claim('round_a');
    const held = ids.map((id) => leases.get(id)!);
    const call = (sql: string, params: unknown[]) => db.pool('worker').query(sql, params);
    const settleSql = `select * from queues.settle_tasks($1::bigint[], $2::bigint[], $3::text[], null, $4::bigint[], $5::text[], $6::bigint[])`;
    const succeeded = ids.map(() => 'succeeded');
    for (const [outcomes, errorIds, messages, startedUs, code] of [
      // an unknown outcome among successes
      [['succeeded', 'succeeded', 'finished'], null, null, null, '22023'],
      // an error naming a task outside the call
      [succeeded, ['1'], ['boom'], null, '22023'],
      // a blank error message
      [succeeded, [ids[0]], [' '], null, '22004'],
      // errors and messages of different lengths
      [succeeded, [ids[0]], [], null, '22023'],
      // a start time missing
      [succeeded, null, null, ['1790000000000000'], '22023'],
    ] as const)
      await expect(call(settleSql, [ids, held, outcomes, errorIds, messages, startedUs])).rejects.toMatchObject({
        code,
      });
    await expect(
      call(`select * from queues.complete_tasks($1::bigint[], $2::bigint[], $3::text[])`, [
        ids,
        held,
        ['succeeded', 'succeeded', 'finished'],
      ]),
    ).rejects.toMatchObject({ code: '22023' });
    expect(await ends(ids)).toEqual([]);
    // Then the same successes, checked and recorded as one round.
    expect(await settle(ids, held, succeeded)).toEqual(new Map(ids.map((id) => [id, 'completed'])));
    expect((await ends(ids)).map((e) => e.outcome)).toEqual(['succeeded', 'succeeded', 'succeeded']);
  });

  it('a failure with attempts left beside successes of the same lease comes back to the claim index; the successes end', async () => {
    const { rows } = await db.query(
      `select queues.enqueue('round_b', jsonb_build_object('n', g), _max_attempts => 3)::text as id from generate_series(1, 3) g`,
    );
    const ids = rows.map((r) => r.id as string);
    const leases = await claim('round_b');
    const held = ids.map((id) => leases.get(id)!);
    // Taken out of the claim index by the claim (the ready set): no row while held.
    const rowsOf = async () =>
      (
        await db.query(`select task_id::text from queues.task_pending where task_id = any ($1::bigint[]) order by 1`, [
          ids,
        ])
      ).rows.map((r) => r.task_id);
    expect(await rowsOf()).toEqual([]);
    expect(await settle(ids, held, ['succeeded', 'failed', 'succeeded'])).toEqual(
      new Map([
        [ids[0], 'completed'],
        [ids[1], 'retry_scheduled'],
        [ids[2], 'completed'],
      ]),
    );
    expect(await rowsOf()).toEqual([ids[1]]);
    expect((await ends(ids)).map((e) => e.task_id)).toEqual([ids[0], ids[2]]);
  });
});

describe('start times', () => {
  it('are kept to the microsecond across the century, whatever their digits', async () => {
    const ids = await enqueue('round_a', 1000);
    const leases = await claim('round_a');
    // Microseconds since the epoch from 2000 to 2099, with every last digit and the edges
    // of a second (…000000, …000001, …999999).
    const first = 946_684_800_000_000n;
    const span = 3_155_760_000_000_000n; // a hundred years
    const started = ids.map((_, i) => {
      const base = first + (span * BigInt(i)) / 1000n;
      const second = base - (base % 1_000_000n);
      const edge = [0n, 1n, 999_999n, 500_000n, 123_457n][i % 5];
      return String(i % 2 === 0 ? second + edge : base + BigInt(i % 10));
    });
    const results = await settle(
      ids,
      ids.map((id) => leases.get(id)!),
      ids.map(() => 'succeeded'),
      started,
    );
    expect([...results.values()].every((r) => r === 'completed')).toBe(true);
    const { rows } = await db.query(
      `select u.task_id::text, u.started_us::text
         from queues.completion_round r cross join lateral unnest(r.task_ids, r.started_us) u(task_id, started_us)
        where u.task_id = any($1::bigint[])`,
      [ids],
    );
    const kept = new Map(rows.map((r) => [r.task_id as string, r.started_us as string]));
    expect(ids.map((id) => kept.get(id))).toEqual(started);
    expect((await ends(ids.slice(0, 50))).map((e) => e.started_us)).toEqual(started.slice(0, 50));
  });
});
