// Provider back-pressure per group key (sql/queues/throttle.sql, key_kind 'group'): a
// tenant's or provider account's tasks, of every type, wait on every claimer until T (the
// ready and the expired-lease branch) while the other groups' tasks of the same types run;
// a report with a run and no key throttles that task's group key; bad input writes
// nothing; an operator lists and clears group throttles.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, explainNested, planNodes, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

async function reset(): Promise<void> {
  for (const t of ['queues.throttle_cleared', 'queues.throttle', 'queues.task']) {
    await db.query(`alter table ${t} disable trigger forbid_update`);
    await db.query(`truncate ${t} cascade`);
    await db.query(`alter table ${t} enable trigger forbid_update`);
  }
}

/** Enqueues `n` tasks of `type` in group `group` (null: none). */
const enqueue = async (type: string, group: string | null, n = 1): Promise<string[]> => {
  const ids: string[] = [];
  for (let i = 0; i < n; i++)
    ids.push(
      (
        await db.query<{ id: string }>(
          `select queues.enqueue($1, '{}'::jsonb, null, null, null, null, true, null, $2) as id`,
          [type, group],
        )
      ).rows[0].id,
    );
  return ids;
};

interface Claimed {
  task_id: string;
  task_lease_id: string;
  task_type: string;
}

/** Claims as the owner at `seconds` from now (tests move the clock). */
async function claimAt(seconds: number, worker = 'w-clock', limit = 100, types: string[] | null = null) {
  const { rows } = await db.query<Claimed>(
    `select task_id, task_lease_id, task_type
       from queues.claim_tasks_at(now() + make_interval(secs => $1), $2, $3, $4, 60, 5)`,
    [seconds, worker, limit, types],
  );
  return rows;
}

/** The public claim, as the worker database user. */
async function claim(worker: string, limit = 100, types: string[] | null = null) {
  const { rows } = await db
    .pool('worker')
    .query<Claimed>('select task_id, task_lease_id, task_type from queues.claim_tasks($1, $2, $3, 60)', [
      worker,
      limit,
      types,
    ]);
  return rows;
}

const record = (args: { key?: string | null; retryAfter?: number; taskId?: string | null; leaseId?: string | null }) =>
  db
    .pool('worker')
    .query<{ result: string; throttled_until: Date }>(
      `select * from queues.record_throttle('group', $1, null, $2, 'HTTP 429 for this account', 'worker-1', $3, $4)`,
      [args.key === undefined ? 'acme' : args.key, args.retryAfter ?? 300, args.taskId ?? null, args.leaseId ?? null],
    )
    .then((r) => r.rows[0]);

const count = async (table: string) => Number((await db.query(`select count(*) as n from ${table}`)).rows[0].n);

const groupOf = async (ids: string[]) =>
  (
    await db.query<{ group_key: string | null }>(
      'select group_key from queues.task where task_id = any ($1::bigint[]) order by task_id',
      [ids],
    )
  ).rows.map((r) => r.group_key);

describe('recording a group throttle', () => {
  beforeEach(reset);

  it('refuses bad input with a clear error and writes nothing', async () => {
    const [plain] = await enqueue('email', null);
    const [lease] = (await claim('w-bad')).map((c) => c.task_lease_id);
    const cases: [Parameters<typeof record>[0], string, RegExp][] = [
      [{ key: '' }, '22023', /group key must be 1 to 200 characters/],
      [{ key: '   ' }, '22023', /group key must be 1 to 200 characters/],
      [{ key: 'x'.repeat(201) }, '22023', /group key must be 1 to 200 characters/],
      // No key and no task: nothing to name the group by.
      [{ key: null }, '22004', /key_kind and key must not be null/],
      // The task's own group key, of a task that has none or that does not exist.
      [{ key: null, taskId: plain, leaseId: lease }, '22023', /task \d+ has no group key/],
      [{ key: null, taskId: '999999999', leaseId: '1' }, '23503', /unknown task 999999999/],
      [{ retryAfter: 0 }, '22023', /retry_after_seconds must be more than 0/],
    ];
    for (const [args, code, message] of cases) {
      await expect(record(args), JSON.stringify(args)).rejects.toMatchObject({
        code,
        message: expect.stringMatching(message),
      });
    }
    expect(await count('queues.throttle')).toBe(0);
    // The refused report released nothing: the lease is still the task's.
    expect((await db.query('select queues.is_current_lease($1, $2) as held', [plain, lease])).rows[0].held).toBe(true);
    // A group key may be 200 characters.
    await expect(record({ key: 'x'.repeat(200) })).resolves.toMatchObject({ result: 'recorded' });
  });

  it('a report with a run and no key throttles that task group key and gives the lease back uncounted', async () => {
    const [acme] = await enqueue('email', 'acme');
    const [taken] = await claim('w-1');
    expect(taken.task_id).toBe(acme);
    const report = await record({ key: null, taskId: taken.task_id, leaseId: taken.task_lease_id, retryAfter: 120 });
    expect(report.result).toBe('released');
    expect((await db.query('select key_kind, key from queues.active_throttles()')).rows).toEqual([
      { key_kind: 'group', key: 'acme' },
    ]);
    const pending = (
      await db.query(
        'select current_lease_id, failed_attempts, released_count from queues.task_pending where task_id = $1',
        [acme],
      )
    ).rows[0];
    expect(pending).toMatchObject({ current_lease_id: null, failed_attempts: 0, released_count: 1 });
    expect(await claim('w-2')).toEqual([]);
    expect((await claimAt(121, 'w-2')).map((c) => c.task_id)).toEqual([acme]);
  });
});

describe('the claim holds back a throttled group key until T, on every claimer', () => {
  beforeEach(reset);

  it('two claimers racing take none of the group tasks, of any type; the other groups run; after T it comes back', async () => {
    // Two types, three groups and tasks without a group; acme is throttled.
    const acme = [...(await enqueue('email', 'acme', 10)), ...(await enqueue('sms', 'acme', 10))];
    const others = [
      ...(await enqueue('email', 'globex', 10)),
      ...(await enqueue('sms', 'initech', 10)),
      ...(await enqueue('email', null, 5)),
    ];
    await record({ retryAfter: 300 });

    const claims = await Promise.all(
      Array.from({ length: 16 }, (_, i) => claim(i % 2 === 0 ? 'w-a' : 'w-b', 3, i % 4 < 2 ? null : ['email', 'sms'])),
    );
    const taken = claims.flat();
    const rest = [...(await claim('w-a')), ...(await claim('w-b'))];
    const all = [...taken, ...rest].map((c) => c.task_id);
    expect(new Set(all).size).toBe(all.length);
    expect(new Set(all)).toEqual(new Set(others));
    expect(await groupOf(all)).not.toContain('acme');
    expect(await claim('w-a', 100, ['email'])).toEqual([]);
    // At +299 s the other groups' leases (60 s) have expired and come back; acme's do not.
    expect(await groupOf((await claimAt(299, 'w-b', 100, ['sms'])).map((c) => c.task_id))).not.toContain('acme');

    // After T (the other leases, 60 s, have expired: named types, then only acme's are new).
    const after = (await Promise.all([claimAt(301, 'w-a', 7), claimAt(301, 'w-b', 7), claimAt(301, 'w-a', 7)])).flat();
    const later = await claimAt(301, 'w-b', 1000);
    const again = [...after, ...later].map((c) => c.task_id);
    expect(new Set(again).size).toBe(again.length);
    for (const id of acme) expect(again).toContain(id);
  });

  it('holds a group back while other tasks of the same type and other groups run', async () => {
    const [acme1] = await enqueue('email', 'acme');
    const [globex1] = await enqueue('email', 'globex');
    // Both running; then acme's provider account is throttled.
    expect((await claim('w-1')).map((c) => c.task_id).sort()).toEqual([acme1, globex1].sort());
    await record({ retryAfter: 300 });
    const [acme2] = await enqueue('email', 'acme');
    const [globex2] = await enqueue('email', 'globex');
    expect((await claim('w-2')).map((c) => c.task_id)).toEqual([globex2]);
    expect((await claimAt(301, 'w-2', 100, ['email'])).map((c) => c.task_id)).toContain(acme2);
  });

  it('leaves out the tasks of the group whose lease expired, too', async () => {
    const [id] = await enqueue('email', 'acme');
    expect(await claim('w-dead')).toHaveLength(1);
    await record({ retryAfter: 600 });
    // The lease (60 s) expired at +120 s, but the throttle lasts until +600 s.
    expect(await claimAt(120)).toEqual([]);
    expect((await claimAt(601)).map((c) => c.task_id)).toEqual([id]);
  });

  it('the api lists and clears a group throttle: claimed again at once', async () => {
    await enqueue('email', 'acme', 2);
    await record({ retryAfter: 600 });
    expect(await claim('w1')).toEqual([]);
    expect((await db.pool('api').query('select key_kind, key, reports from admin.list_throttles()')).rows).toEqual([
      { key_kind: 'group', key: 'acme', reports: 1 },
    ]);
    expect((await db.query(`select queues.throttled_until('group', 'acme') is not null as t`)).rows[0].t).toBe(true);
    const clear = (key: string) =>
      db.pool('api').query<{ cleared: boolean }>(`select admin.clear_throttle('group', $1) as cleared`, [key]);
    // Bad keys are refused and write nothing; a key with no throttle answers false.
    for (const bad of ['', ' ', 'x'.repeat(201)])
      await expect(clear(bad)).rejects.toMatchObject({ code: '22023', message: expect.stringMatching(/group key/) });
    expect((await clear('globex')).rows[0].cleared).toBe(false);
    expect(await count('queues.throttle_cleared')).toBe(0);
    expect((await clear('acme')).rows[0].cleared).toBe(true);
    expect(await claim('w1')).toHaveLength(2);
    expect(await count('queues.throttle_cleared')).toBe(1);
  });

  it('a group throttle and a type throttle of the same name are distinct', async () => {
    const [email] = await enqueue('email', null);
    await record({ key: 'email', retryAfter: 600 });
    expect((await claim('w1')).map((c) => c.task_id)).toEqual([email]);
  });
});

describe('the cost of group throttles in the claim', () => {
  beforeEach(reset);

  it('none in force: the claim reads no throttle row; one in force: one row, by index', async () => {
    const root = await db.client('root');
    try {
      await enqueue('email', 'acme', 5);
      await enqueue('email', 'globex', 5);
      await root.query(`select * from queues.claim_tasks('plan-w', 1, null, 60)`);
      const throttleRows = async () => {
        const plans = await explainNested(root, `select * from queues.claim_tasks('plan-w', 100, null, 60)`);
        const nodes = plans.flatMap((p) => planNodes(p.plan)).filter((n) => n['Relation Name'] === 'throttle');
        expect(nodes.length, 'the claim probed queues.throttle').toBeGreaterThan(0);
        // By throttle_until_idx (an index scan, or a bitmap scan of it), never sequentially.
        expect(
          nodes.every(
            (n) =>
              n['Index Name'] === 'throttle_until_idx' ||
              (n['Node Type'] === 'Bitmap Heap Scan' &&
                (n['Plans'] as { 'Index Name'?: string }[] | undefined)?.[0]?.['Index Name'] === 'throttle_until_idx'),
          ),
          JSON.stringify(nodes),
        ).toBe(true);
        return nodes.reduce(
          (sum, n) =>
            sum +
            (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) * Number(n['Actual Loops'] ?? 1),
          0,
        );
      };
      expect(await throttleRows()).toBe(0);
      await record({ retryAfter: 600 });
      await enqueue('email', 'acme', 5);
      await enqueue('email', 'globex', 5);
      expect(await throttleRows()).toBe(1);
    } finally {
      await root.end();
    }
  });
});
