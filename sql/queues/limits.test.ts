// Flow limits (sql/queues/limits.sql, queues.claim_tasks_at): concurrency and rate limits
// per task type and group key, tried with concurrent claimers, expired leases, limits
// changed while tasks run, and bad input.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  backendPid,
  createTestDatabase,
  explainNested,
  planNodes,
  type PlanNode,
  type TestDatabase,
  endPendingTasks,
  untilBlockedOrDone,
} from '@org/testing';

const relationOf = (n: PlanNode): string => n['Relation Name'] ?? '';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(`insert into queues.task_type (task_type) values ('limited'), ('free') on conflict do nothing`);
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await endPendingTasks(db);
  await db.query(`delete from queues.resource_lease;
                  delete from queues.task_limit_set; delete from queues.task_limit_window`);
});

async function enqueue(tasks: { task_type?: string; group_key?: string; priority?: number }[]) {
  const { rows } = await db
    .pool('owner')
    .query('select task_id from queues.enqueue_many($1::jsonb)', [
      JSON.stringify(tasks.map((t) => ({ task_type: 'limited', payload: {}, ...t }))),
    ]);
  return rows.map((r) => r.task_id as string);
}

const setLimit = (
  type: string,
  scope: string,
  groupKey: string | null,
  maxRunning: number | null,
  maxStarts: number | null = null,
  per: string | null = null,
) =>
  db.query('select queues.set_task_limit($1, $2, $3, $4, $5, $6::interval)', [
    type,
    scope,
    groupKey,
    maxRunning,
    maxStarts,
    per,
  ]);

type Claimed = { task_id: string; task_lease_id: string; task_type: string; group_key: string | null };
const claimAt = async (at: string, worker: string, limit = 100, types: string[] | null = null) =>
  (
    await db.query(
      `select c.task_id, c.task_lease_id, c.task_type, t.group_key
         from queues.claim_tasks_at($1::timestamptz, $2, $3, $4, 300, 5) c
         join queues.task t using (task_id)`,
      [at, worker, limit, types],
    )
  ).rows as Claimed[];
const groupOf = new Map<string, string | null>();
const claim = async (worker: string, limit = 100) => {
  const { rows } = await db
    .pool('worker')
    .query(`select c.task_id, c.task_lease_id, c.task_type from queues.claim_tasks($1, $2) c`, [worker, limit]);
  // The worker role reads no table: the group keys come from the owner.
  const { rows: keys } = await db.query(
    'select task_id, group_key from queues.task where task_id = any($1::bigint[])',
    [rows.map((r) => r.task_id)],
  );
  for (const k of keys) groupOf.set(k.task_id, k.group_key);
  return rows.map((r) => ({ ...r, group_key: groupOf.get(r.task_id) ?? null })) as Claimed[];
};
const complete = (rows: Claimed[]) =>
  db
    .pool('worker')
    .query('select * from queues.complete_tasks($1::bigint[], $2::bigint[])', [
      rows.map((r) => r.task_id),
      rows.map((r) => r.task_lease_id),
    ]);
const count = (rows: Claimed[], group?: string) =>
  rows.filter((r) => group === undefined || r.group_key === group).length;

describe('group key', () => {
  it('is kept on the task and its claim-index row, from the single and the batch enqueue', async () => {
    const one = await db.query(`select queues.enqueue('limited', '{}', _group_key => 'tenant:1') as id`);
    const [two] = await enqueue([{ group_key: 'tenant:2' }]);
    const { rows } = await db.query(
      `select t.task_id, t.group_key, p.group_key as pending_group_key
         from queues.task t join queues.task_pending p using (task_id)
        where t.task_id = any($1::bigint[]) order by t.task_id`,
      [[one.rows[0].id, two]],
    );
    expect(rows.map((r) => [r.group_key, r.pending_group_key])).toEqual([
      ['tenant:1', 'tenant:1'],
      ['tenant:2', 'tenant:2'],
    ]);
  });

  it('refuses a group key of 0 or over 200 characters, writing nothing', async () => {
    await expect(db.query(`select queues.enqueue('limited', '{}', _group_key => '')`)).rejects.toMatchObject({
      code: '22023',
      message: 'group_key must be 1 to 200 characters',
    });
    await expect(enqueue([{}, { group_key: 'x'.repeat(201) }])).rejects.toMatchObject({
      code: '22023',
      message: 'tasks[1]: group_key must be 1 to 200 characters',
    });
    expect((await db.query('select count(*)::int as n from queues.task_pending')).rows[0].n).toBe(0);
  });
});

describe('concurrency limits', () => {
  it('per type: at most N leased; a completion, a release or an expiry frees a slot', async () => {
    await setLimit('limited', 'type', null, 2);
    await enqueue(Array.from({ length: 6 }, () => ({})));
    const first = await claim('w1');
    expect(first).toHaveLength(2);
    expect(await claim('w2')).toEqual([]);
    await complete(first.slice(0, 1));
    const second = await claim('w2');
    expect(second).toHaveLength(1);
    await db
      .pool('worker')
      .query('select * from queues.release_leases($1::bigint[], $2::bigint[])', [
        [second[0].task_id],
        [second[0].task_lease_id],
      ]);
    expect(await claim('w3')).toHaveLength(1);
    expect(await claim('w3')).toEqual([]);
    // The two holders die: their leases (300 s) are left to expire. Past the expiry no
    // slot is held, and the claim takes two tasks again (the expired ones among them).
    const later = await claimAt(new Date(Date.now() + 600_000).toISOString(), 'w4');
    expect(later).toHaveLength(2);
  });

  it('per group key: each group key at most N, a named group key its own N, the type at most M', async () => {
    await setLimit('limited', 'each_group', null, 2);
    await setLimit('limited', 'group', 'big', 3);
    await setLimit('limited', 'type', null, 6);
    await enqueue([
      ...Array.from({ length: 10 }, () => ({ group_key: 'a' })),
      ...Array.from({ length: 10 }, () => ({ group_key: 'big' })),
      ...Array.from({ length: 10 }, () => ({ group_key: 'c' })),
      ...Array.from({ length: 10 }, () => ({})),
    ]);
    const rows = await claim('w1');
    expect(count(rows, 'a')).toBe(2);
    expect(count(rows, 'big')).toBe(3);
    expect(rows).toHaveLength(6);
    expect(await claim('w2')).toEqual([]);
  });

  it('a full group key does not hide the tasks of other group keys queued behind it', async () => {
    await setLimit('limited', 'each_group', null, 1);
    await enqueue([...Array.from({ length: 30 }, () => ({ group_key: 'busy', priority: 5 })), { group_key: 'quiet' }]);
    expect((await claim('w1', 5)).map((r) => r.group_key)).toEqual(['busy']);
    expect((await claim('w2', 5)).map((r) => r.group_key)).toEqual(['quiet']);
    expect(await claim('w3', 5)).toEqual([]);
  });

  it('a lowered limit starts nothing until the running tasks are under it', async () => {
    await setLimit('limited', 'type', null, 4);
    await enqueue(Array.from({ length: 10 }, () => ({})));
    const running = await claim('w1');
    expect(running).toHaveLength(4);
    await setLimit('limited', 'type', null, 2);
    await complete(running.slice(0, 1));
    expect(await claim('w2')).toEqual([]);
    await complete(running.slice(1, 3));
    expect(await claim('w2')).toHaveLength(1);
    await db.query(`select queues.clear_task_limit('limited', 'type')`);
    expect(await claim('w3')).toHaveLength(5);
  });

  it('tasks running before their type had a limit count against it, per type and per group key', async () => {
    // Claimed with no limit in force: the drain's claim, which leaves no claim-index row
    // (lease-held), from a ready batch (the first call) and from rows (single enqueues).
    await enqueue(Array.from({ length: 6 }, (_, i) => ({ group_key: i < 3 ? 'a' : undefined })));
    await enqueue(Array.from({ length: 4 }, () => ({})));
    for (const groupKey of ['a', 'b', 'b']) await enqueue([{ group_key: groupKey }]);
    const running = await claim('w1', 5);
    expect(running).toHaveLength(5);
    const held = await db.query(
      `select count(*)::int as n from queues.lease_held_tasks h where h.task_id = any($1::bigint[])`,
      [running.map((r) => r.task_id)],
    );
    expect(held.rows[0].n).toBe(5);
    // Limits set while they run: the type 6, group key a 1 (3 of a are running).
    await setLimit('limited', 'type', null, 6);
    await setLimit('limited', 'group', 'a', 1);
    const next = await claim('w2');
    expect(next).toHaveLength(1);
    expect(next[0].group_key).not.toBe('a');
    expect(await claim('w3')).toEqual([]);
    // The counts the dashboard shows agree: 6 running under the type's limit.
    const { rows: status } = await db.query(
      `select scope, running::int from queues.task_limit_status_at(now()) where task_type = 'limited' order by scope`,
    );
    expect(status).toEqual([
      { scope: 'group', running: 3 },
      { scope: 'type', running: 6 },
    ]);
    // Ending two of group a frees two of the type's slots, and none of a's (still 1 of 1).
    const a = running.filter((r) => r.group_key === 'a');
    expect(a).toHaveLength(3);
    await complete(a.slice(0, 2));
    const after = await claim('w4');
    expect(after.map((r) => r.group_key === 'a')).toEqual([false, false]);
  });

  it('a limit set while a claim is in flight counts that claim’s tasks: it waits for the claim to commit', async () => {
    // Single enqueues: tasks on claim-index rows, which the claim deletes (a ready batch's
    // row, locked by the claim, would make the limit wait on it anyway).
    for (let i = 0; i < 6; i++) await enqueue([{}]);
    const worker = await db.client('worker');
    const owner = await db.client('owner');
    const ownerPid = await backendPid(owner);
    try {
      // The claim read no limit and took 3 tasks (lease-held, no claim-index rows); its
      // transaction is still open when the limit is set.
      await worker.query('begin');
      const { rows: inFlight } = await worker.query(`select c.task_id from queues.claim_tasks('in-flight', 3) c`);
      expect(inFlight).toHaveLength(3);
      const set = owner.query(`select queues.set_task_limit('limited', 'type', null, 3)`);
      await untilBlockedOrDone(db, ownerPid, set);
      await worker.query('commit');
      await set;
    } finally {
      await Promise.all([worker.end(), owner.end()]);
    }
    // The 3 in-flight tasks fill the limit of 3: nothing more starts, and the dashboard's
    // count agrees.
    expect(await claim('after')).toEqual([]);
    const { rows: status } = await db.query(
      `select running::int from queues.task_limit_status_at(now()) where task_type = 'limited' and scope = 'type'`,
    );
    expect(status).toEqual([{ running: 3 }]);
  });

  it('a claim that starts while a limit is being set waits for it, and claims within it', async () => {
    await enqueue(Array.from({ length: 6 }, () => ({})));
    const owner = await db.client('owner');
    const worker = await db.client('worker');
    const workerPid = await backendPid(worker);
    try {
      await owner.query('begin');
      await owner.query(`select queues.set_task_limit('limited', 'type', null, 2)`);
      const claimed = worker.query(`select c.task_id from queues.claim_tasks('starting', 5) c`);
      await untilBlockedOrDone(db, workerPid, claimed);
      await owner.query('commit');
      expect((await claimed).rows).toHaveLength(2);
    } finally {
      await Promise.all([worker.end(), owner.end()]);
    }
    expect(await claim('after')).toEqual([]);
  });

  it('16 concurrent claimers on separate connections never hold more than N, per type and per group', async () => {
    await setLimit('limited', 'type', null, 5);
    await setLimit('limited', 'each_group', null, 2);
    const groups = ['g0', 'g1', 'g2', 'g3'];
    const ids = await enqueue(Array.from({ length: 120 }, (_, i) => ({ group_key: groups[i % 4] })));
    const clients = await Promise.all(Array.from({ length: 16 }, () => db.client('worker')));
    const running = new Map<string, number>();
    let runningAll = 0;
    let maxAll = 0;
    let maxGroup = 0;
    const done = new Set<string>();
    let idle = 0;
    await Promise.all(
      clients.map(async (client, n) => {
        while (done.size < ids.length && idle < 5000) {
          const { rows: claimed } = await client.query(
            `select c.task_id, c.task_lease_id from queues.claim_tasks($1, 3) c`,
            [`c${n}`],
          );
          const rows = claimed.map((r) => ({ ...r, group_key: groups[ids.indexOf(r.task_id) % 4] }));
          if (rows.length === 0) {
            idle++;
            await new Promise((r) => setTimeout(r, 1));
            continue;
          }
          // Held from the claim's answer to the completion's request: a subset of what the
          // database counts as live, so it can never be over the limit unless the claim was.
          for (const r of rows) running.set(r.group_key, (running.get(r.group_key) ?? 0) + 1);
          runningAll += rows.length;
          maxAll = Math.max(maxAll, runningAll);
          maxGroup = Math.max(maxGroup, ...running.values());
          await new Promise((r) => setTimeout(r, Math.random() * 5));
          for (const r of rows) running.set(r.group_key, running.get(r.group_key)! - 1);
          runningAll -= rows.length;
          await client.query('select * from queues.complete_tasks($1::bigint[], $2::bigint[])', [
            rows.map((r) => r.task_id),
            rows.map((r) => r.task_lease_id),
          ]);
          for (const r of rows) done.add(r.task_id);
        }
      }),
    );
    await Promise.all(clients.map((c) => c.end()));
    expect(done.size).toBe(ids.length);
    expect(maxAll).toBeLessThanOrEqual(5);
    expect(maxGroup).toBeLessThanOrEqual(2);
    // Every task was leased once: a task held back by a limit did not cost a lease.
    const { rows } = await db.query(
      'select count(*)::int as n from queues.task_leases where task_id = any($1::bigint[])',
      [ids],
    );
    expect(rows[0].n).toBe(ids.length);
  });

  it('a revocation (a dead process) and a cancel of a running task free their slots at once', async () => {
    await setLimit('limited', 'type', null, 2);
    await enqueue(Array.from({ length: 6 }, () => ({})));
    const held = await claim('doomed');
    expect(held).toHaveLength(2);
    expect(await claim('other')).toEqual([]);
    await db.query(`select * from queues.revoke_worker_leases('doomed')`);
    const next = await claim('other');
    expect(next).toHaveLength(2);
    expect(await claim('other')).toEqual([]);
    await db.query(`select * from admin.cancel_tasks($1::bigint[], 'no longer wanted')`, [[next[0].task_id]]);
    expect(await claim('third')).toHaveLength(1);
  });

  it('a worker killed while holding limited tasks: its slots are free once its leases expire', async () => {
    await setLimit('limited', 'type', null, 3);
    await enqueue(Array.from({ length: 6 }, () => ({})));
    const victim = await db.client('worker');
    const { rows: held } = await victim.query(`select task_id from queues.claim_tasks('victim', 10, null, 1)`);
    expect(held).toHaveLength(3);
    const pid = (await victim.query('select pg_backend_pid() as pid')).rows[0].pid;
    await db.pool('root').query('select pg_terminate_backend($1)', [pid]);
    await victim.end().catch(() => {});
    expect(await claim('survivor')).toEqual([]);
    // Its leases lasted 1 s: a claim 2 s on takes three tasks again.
    const after = await claimAt(new Date(Date.now() + 2000).toISOString(), 'survivor');
    expect(after).toHaveLength(3);
  });
});

describe('rate limits', () => {
  it('at most N claims per window, per type and per group key; the next window starts afresh', async () => {
    await setLimit('limited', 'type', null, null, 5, '1 minute');
    await setLimit('limited', 'each_group', null, null, 2, '1 minute');
    await enqueue([
      ...Array.from({ length: 10 }, () => ({ group_key: 'a' })),
      ...Array.from({ length: 10 }, () => ({})),
    ]);
    const t0 = '2030-01-01T00:00:05Z';
    const first = await claimAt(t0, 'w1');
    expect(first).toHaveLength(5);
    expect(count(first, 'a')).toBe(2);
    await complete(first);
    expect(await claimAt('2030-01-01T00:00:50Z', 'w1')).toEqual([]);
    const next = await claimAt('2030-01-01T00:01:00Z', 'w1');
    expect(next).toHaveLength(5);
    expect(count(next, 'a')).toBe(2);
  });

  it('a worker whose claim came back short is told to look again when the next window starts', async () => {
    await setLimit('limited', 'type', null, null, 1, '1 hour');
    await enqueue([{}, {}]);
    expect(await claim('w1')).toHaveLength(1);
    expect(await claim('w1')).toEqual([]);
    const { rows } = await db
      .pool('worker')
      .query(`select queues.next_claim_in_ms(array['limited']) as ms, extract(epoch from now())::float8 as now`);
    const untilNextHour = 3_600_000 - ((rows[0].now * 1000) % 3_600_000);
    expect(rows[0].ms).toBeGreaterThan(0);
    expect(rows[0].ms).toBeLessThanOrEqual(Math.ceil(untilNextHour) + 1);
    // Without a rate limit on the types asked for, nothing scheduled: no time.
    expect((await db.pool('worker').query(`select queues.next_claim_in_ms(array['free']) as ms`)).rows[0].ms).toBe(
      null,
    );
  });

  it('8 concurrent claimers at one moment start at most N in the window', async () => {
    await setLimit('limited', 'type', null, null, 7, '1 hour');
    await enqueue(Array.from({ length: 50 }, () => ({})));
    const clients = await Promise.all(Array.from({ length: 8 }, () => db.client('owner')));
    const got = await Promise.all(
      clients.map(async (c, n) => {
        let total = 0;
        for (let i = 0; i < 5; i++) {
          const { rows } = await c.query(
            `select task_id from queues.claim_tasks_at('2030-01-01T00:10:00Z', $1, 3, null, 300, 5)`,
            [`r${n}`],
          );
          total += rows.length;
        }
        return total;
      }),
    );
    await Promise.all(clients.map((c) => c.end()));
    expect(got.reduce((a, b) => a + b, 0)).toBe(7);
  });
});

describe('zero cost when not configured', () => {
  it('a limit on another type changes nothing for this one and writes no window row for it', async () => {
    await setLimit('limited', 'type', null, 1, 1, '1 hour');
    await enqueue(Array.from({ length: 20 }, () => ({ task_type: 'free' })));
    await enqueue(Array.from({ length: 3 }, () => ({})));
    const rows = await claim('w1');
    expect(rows.filter((r) => r.task_type === 'free')).toHaveLength(20);
    expect(rows.filter((r) => r.task_type === 'limited')).toHaveLength(1);
    const { rows: windows } = await db.query('select task_type, group_key, starts from queues.task_limit_window');
    expect(windows).toEqual([{ task_type: 'limited', group_key: '', starts: 1 }]);
  });

  it("a held-back backlog of a limited type does not crowd another type's tasks out of a claim", async () => {
    await setLimit('limited', 'type', null, 2);
    await enqueue(Array.from({ length: 30 }, () => ({})));
    await enqueue(Array.from({ length: 5 }, () => ({ task_type: 'free' })));
    const first = await claim('w1', 10);
    expect(first.filter((r) => r.task_type === 'limited')).toHaveLength(2);
    expect(first.filter((r) => r.task_type === 'free')).toHaveLength(5);
  });
});

describe('plans', () => {
  it('a claim reads the claim index by key for a limited type, also under a plan made while it was empty', async () => {
    await setLimit('limited', 'each_group', null, 2);
    await setLimit('limited', 'type', null, 5, 100, '1 minute');
    const root = await db.client('root');
    try {
      // Planned while the claim index is empty (once per connection), then used after it grew.
      await root.query(`select * from queues.claim_tasks('plans', 50, array['free', 'limited'], 60)`);
      await enqueue(Array.from({ length: 4000 }, () => ({ task_type: 'free' })));
      await root.query(`select * from queues.claim_tasks('plans', 500, array['free'], 60)`);
      await db.query('vacuum analyze queues.task_pending');
      // And planned on a new connection after it grew (and was analyzed).
      const fresh = await db.client('root');
      for (const [limitedTasks, client] of [
        [0, root],
        [0, fresh],
        [200, root],
        [0, fresh],
      ] as const) {
        await enqueue(Array.from({ length: limitedTasks }, (_, i) => ({ group_key: `g${i % 10}` })));
        const plans = await explainNested(
          client,
          `select * from queues.claim_tasks('plans', 50, array['free', 'limited'], 60)`,
        );
        expect(plans.length).toBeGreaterThan(0);
        for (const { query, plan } of plans) {
          const read = planNodes(plan)
            .filter((n) => relationOf(n) === 'task_pending' && n['Node Type'] !== 'ModifyTable')
            .reduce(
              (sum, n) =>
                sum +
                (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) *
                  Number(n['Actual Loops'] ?? 1),
              0,
            );
          // The claim's candidates (50 per type) and the live leases (500 + 55), never the 4,000 waiting.
          expect(read, `task_pending rows read by ${query.slice(0, 100)}`).toBeLessThanOrEqual(1500);
        }
      }
      await fresh.end();
    } finally {
      await root.end();
    }
  });
});

describe('settings', () => {
  const bad: [string, unknown[], string, string][] = [
    [
      'negative',
      ['limited', 'type', null, -1, null, null],
      '22023',
      'max_running must be between 1 and 1000000, got -1',
    ],
    ['zero', ['limited', 'type', null, 0, null, null], '22023', 'max_running must be between 1 and 1000000, got 0'],
    [
      'zero starts',
      ['limited', 'type', null, null, 0, '1 second'],
      '22023',
      'max_starts must be between 1 and 1000000, got 0',
    ],
    [
      'no interval',
      ['limited', 'type', null, null, 5, null],
      '22023',
      'max_starts and per go together: got max_starts 5, per null',
    ],
    [
      'month',
      ['limited', 'type', null, null, 5, '1 month'],
      '22023',
      'per must be a whole number of milliseconds from 1 millisecond to 1 day, got 1 mon',
    ],
    [
      'negative interval',
      ['limited', 'type', null, null, 5, '-1 second'],
      '22023',
      'per must be a whole number of milliseconds from 1 millisecond to 1 day, got -00:00:01',
    ],
    [
      'sub-millisecond',
      ['limited', 'type', null, null, 5, '0.5 milliseconds'],
      '22023',
      'per must be a whole number of milliseconds from 1 millisecond to 1 day, got 00:00:00.0005',
    ],
    ['unknown type', ['nope', 'type', null, 1, null, null], '23503', "unknown task type 'nope'"],
    [
      'unknown scope',
      ['limited', 'tenant', null, 1, null, null],
      '22023',
      "scope must be type, each_group or group, got 'tenant'",
    ],
    [
      'group without key',
      ['limited', 'group', null, 1, null, null],
      '22023',
      'group_key must be 1 to 200 characters for scope group',
    ],
    ['type with key', ['limited', 'type', 'a', 1, null, null], '22023', 'group_key must be null for scope type'],
    [
      'nothing',
      ['limited', 'type', null, null, null, null],
      '22004',
      'set max_running, or max_starts with per (queues.clear_task_limit clears)',
    ],
  ];
  it.each(bad)('refuses %s with a clear error and writes nothing', async (_name, args, code, message) => {
    await expect(
      db.query('select queues.set_task_limit($1, $2, $3, $4, $5, $6::interval)', args),
    ).rejects.toMatchObject({ code, message });
    expect((await db.query('select count(*)::int as n from queues.task_limit_set')).rows[0].n).toBe(0);
  });

  it('lists limits in force with how full they are; clearing answers whether one was set', async () => {
    await setLimit('limited', 'each_group', null, 1);
    await setLimit('limited', 'type', null, 10, 100, '1 minute');
    await enqueue([{ group_key: 'a' }, { group_key: 'a' }, { group_key: 'a' }, { group_key: 'b' }]);
    await claim('w1');
    const { rows } = await db.pool('api').query('select * from admin.task_limits()');
    expect(
      rows.map((r) => [r.scope, r.max_running, r.max_starts, r.interval_ms, r.running, r.starts, r.held_back]),
    ).toEqual([
      ['each_group', 1, null, null, '2', '0', '2'],
      ['type', 10, 100, 60000, '2', '2', '0'],
    ]);
    expect(
      (await db.pool('api').query(`select admin.clear_task_limit('limited', 'each_group', null) as c`)).rows[0].c,
    ).toBe(true);
    expect(
      (await db.pool('api').query(`select admin.clear_task_limit('limited', 'each_group', null) as c`)).rows[0].c,
    ).toBe(false);
    await db.pool('api').query(`select admin.set_task_limit('limited', 'group', 'a', 3, null, null)`);
    await expect(
      db.pool('api').query(`select admin.set_task_limit('limited', 'type', null, null, 3, 0)`),
    ).rejects.toMatchObject({
      // The check of queues.set_task_limit, its one owner: the wrapper only converts.
      code: '22023',
      message: 'per must be a whole number of milliseconds from 1 millisecond to 1 day, got 00:00:00',
    });
    expect((await db.query(`select count(*)::int as n from queues.task_limits()`)).rows[0].n).toBe(2);
  });

  it('the app and worker roles may not change limits', async () => {
    for (const role of ['app', 'worker'] as const)
      await expect(
        db.pool(role).query(`select queues.set_task_limit('limited', 'type', null, 1)`),
      ).rejects.toMatchObject({ code: '42501' });
  });
});
