// Provider back-pressure as a fact (sql/queues/throttle.sql): a report is validated and
// writes nothing when bad; every claimer leaves a throttled type's tasks until T (both the
// ready and the expired-lease branch), and claims them again after T or once cleared; a
// report with a lease gives the run back uncounted, and an at-most-once call refused under
// that lease does not count as started; the facts are append-only; who may call what.
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

const enqueue = async (type: string, n = 1): Promise<string[]> => {
  const ids: string[] = [];
  for (let i = 0; i < n; i++)
    ids.push(
      (await db.query<{ id: string }>(`select queues.enqueue_internal($1, '{}'::jsonb) as id`, [type])).rows[0].id,
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

const record = (args: {
  key?: string;
  kind?: string;
  until?: string | null;
  retryAfter?: number | null;
  reason?: string;
  by?: string;
  taskId?: string | null;
  leaseId?: string | null;
}) =>
  db
    .pool('worker')
    .query<{ result: string; throttled_until: Date }>(
      'select * from queues.record_throttle($1, $2, $3::timestamptz, $4, $5, $6, $7, $8)',
      [
        args.kind ?? 'task_type',
        args.key ?? 'email',
        args.until ?? null,
        args.retryAfter === undefined ? 60 : args.retryAfter,
        args.reason ?? 'resend: HTTP 429 rate_limit_exceeded',
        args.by ?? 'worker-1',
        args.taskId ?? null,
        args.leaseId ?? null,
      ],
    )
    .then((r) => r.rows[0]);

const throttleRows = async () => Number((await db.query('select count(*) as n from queues.throttle')).rows[0].n);

describe('recording a throttle', () => {
  beforeEach(reset);

  it('refuses bad input with a clear error and writes nothing', async () => {
    const cases: [Parameters<typeof record>[0], string, RegExp][] = [
      [{ kind: 'tenant' }, '22023', /key_kind must be 'task_type' or 'group'/],
      [{ key: 'no_such_type' }, '23503', /unknown task type 'no_such_type'/],
      [{ retryAfter: null }, '22023', /exactly one of until and retry_after_seconds/],
      [{ until: '2999-01-01T00:00:00Z' }, '22023', /exactly one of until and retry_after_seconds/],
      [{ retryAfter: 0 }, '22023', /retry_after_seconds must be more than 0 and at most 86400, got 0/],
      [{ retryAfter: -5 }, '22023', /retry_after_seconds must be more than 0/],
      [{ retryAfter: 86401 }, '22023', /retry_after_seconds must be more than 0 and at most 86400, got 86401/],
      [{ retryAfter: null, until: '2000-01-01T00:00:00Z' }, '22023', /until must be after now/],
      [{ retryAfter: null, until: '2999-01-01T00:00:00Z' }, '22023', /at most 86400 seconds ahead/],
      [{ reason: '' }, '22023', /reason must be 1 to 500 characters/],
      [{ reason: 'x'.repeat(501) }, '22023', /reason must be 1 to 500 characters/],
      [{ by: '' }, '22023', /recorded_by must be 1 to 200 characters/],
      [{ taskId: '1' }, '22023', /both task_id and task_lease_id/],
    ];
    for (const [args, code, message] of cases) {
      await expect(record(args), JSON.stringify(args)).rejects.toMatchObject({
        code,
        message: expect.stringMatching(message),
      });
    }
    await expect(
      db.pool('worker').query(`select * from queues.record_throttle(null, 'email', null, 60, 'r', 'w')`),
    ).rejects.toMatchObject({ code: '22004' });
    expect(await throttleRows()).toBe(0);
  });

  it('keeps the latest end per key, and its reports are append-only', async () => {
    const first = await record({ retryAfter: 30 });
    expect(first.result).toBe('recorded');
    await record({ retryAfter: 120, reason: 'resend: daily_quota_exceeded', by: 'worker-2' });
    await record({ retryAfter: 10 });
    const { rows } = await db.query('select * from queues.active_throttles()');
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      key_kind: 'task_type',
      key: 'email',
      reason: 'resend: daily_quota_exceeded',
      recorded_by: 'worker-2',
      reports: 3,
    });
    const ahead = (rows[0].throttled_until as Date).getTime() - Date.now();
    expect(ahead).toBeGreaterThan(100_000);
    expect(ahead).toBeLessThanOrEqual(120_000);
    await expect(db.query(`update queues.throttle set throttled_until = now()`)).rejects.toMatchObject({
      code: '55000',
      message: expect.stringContaining('append-only'),
    });
  });
});

describe('the claim holds back a throttled type until T, on every claimer', () => {
  beforeEach(reset);

  it('two claimers racing take none of the throttled tasks, the others once each; after T they come back', async () => {
    const emails = await enqueue('email', 20);
    const sms = await enqueue('sms', 20);
    await record({ retryAfter: 300 });

    // Two workers, each claiming in many concurrent calls (types named and not).
    const claims = await Promise.all(
      Array.from({ length: 16 }, (_, i) => claim(i % 2 === 0 ? 'w-a' : 'w-b', 3, i % 4 < 2 ? null : ['email', 'sms'])),
    );
    const taken = claims.flat();
    expect(taken.filter((c) => c.task_type === 'email')).toEqual([]);
    expect(new Set(taken.map((c) => c.task_id)).size).toBe(taken.length);
    // Whatever sms the race left is claimed now; still no email.
    const rest = [...(await claim('w-a')), ...(await claim('w-b'))];
    expect(rest.every((c) => c.task_type === 'sms')).toBe(true);
    expect(new Set([...taken, ...rest].map((c) => c.task_id))).toEqual(new Set(sms));
    expect(await claim('w-a', 100, ['email'])).toEqual([]);
    expect(await claimAt(299, 'w-a', 100, ['email'])).toEqual([]);

    // After T, both claimers share the email tasks, each exactly once.
    // (Named: the sms leases of 60 s have expired by then too.)
    const after = (
      await Promise.all([
        claimAt(301, 'w-a', 7, ['email']),
        claimAt(301, 'w-b', 7, ['email']),
        claimAt(301, 'w-a', 7, ['email']),
      ])
    ).flat();
    const later = await claimAt(301, 'w-b', 100, ['email']);
    const all = [...after, ...later].map((c) => c.task_id);
    expect(new Set(all).size).toBe(all.length);
    expect(new Set(all)).toEqual(new Set(emails));
  });

  it('leaves out the tasks of the throttled type whose lease expired, too', async () => {
    const [id] = await enqueue('email', 1);
    expect(await claim('w-dead')).toHaveLength(1);
    await record({ retryAfter: 600 });
    // The lease (60 s) expired at +120 s, but the throttle lasts until +600 s.
    expect(await claimAt(120)).toEqual([]);
    expect((await claimAt(601)).map((c) => c.task_id)).toEqual([id]);
  });

  it('a cleared throttle lets the tasks be claimed at once; a later report throttles again', async () => {
    await enqueue('email', 2);
    await record({ retryAfter: 600 });
    expect(await claim('w1')).toEqual([]);
    const cleared = await db
      .pool('api')
      .query<{ cleared: boolean }>(`select admin.clear_throttle('task_type', 'email') as cleared`);
    expect(cleared.rows[0].cleared).toBe(true);
    expect((await db.pool('api').query('select * from admin.list_throttles()')).rows).toEqual([]);
    expect(await claim('w1', 1)).toHaveLength(1);
    await record({ retryAfter: 600 });
    expect(await claim('w1')).toEqual([]);
    expect((await db.pool('api').query('select * from admin.list_throttles()')).rows).toMatchObject([
      { key: 'email', reports: 1 },
    ]);
    // Nothing in force: false, and nothing written.
    expect(
      (await db.pool('api').query(`select admin.clear_throttle('task_type', 'sms') as cleared`)).rows[0].cleared,
    ).toBe(false);
    await expect(db.pool('api').query(`select admin.clear_throttle('task_type', 'nope')`)).rejects.toMatchObject({
      code: '23503',
      message: expect.stringContaining("unknown task type 'nope'"),
    });
    await expect(db.pool('api').query(`select admin.clear_throttle('tenant', 'acme')`)).rejects.toMatchObject({
      code: '22023',
    });
    // The checks belong to queues.clear_throttle, which the owner's SQL calls too.
    await expect(db.query(`select queues.clear_throttle('task_type', 'nope', 'me')`)).rejects.toMatchObject({
      code: '23503',
      message: "unknown task type 'nope'",
    });
    await expect(db.pool('api').query(`select admin.clear_throttle(null, 'email')`)).rejects.toMatchObject({
      code: '22004',
    });
    expect(Number((await db.query('select count(*) as n from queues.throttle_cleared')).rows[0].n)).toBe(1);
  });

  it('supervisors read until when a channel is throttled', async () => {
    expect((await db.query(`select queues.throttled_until('task_type', 'sms') as t`)).rows[0].t).toBeNull();
    const { throttled_until } = await record({ key: 'sms', retryAfter: 90 });
    expect((await db.query(`select queues.throttled_until('task_type', 'sms') as t`)).rows[0].t).toEqual(
      throttled_until,
    );
  });
});

describe('a report with the run that met it', () => {
  beforeEach(reset);

  it('gives the lease back uncounted: no failed attempt, no interruption, no expiry; claimed again after T', async () => {
    const [id] = await enqueue('email', 1);
    const [c] = await claim('w1');
    const r = await record({ retryAfter: 60, taskId: c.task_id, leaseId: c.task_lease_id });
    expect(r.result).toBe('released');
    const pending = (
      await db.query(
        `select current_lease_id, lease_count, released_count, failed_attempts, interrupted_count, uncounted_count
           from queues.task_pending where task_id = $1`,
        [id],
      )
    ).rows[0];
    expect(pending).toMatchObject({
      current_lease_id: null,
      lease_count: 1,
      released_count: 1,
      failed_attempts: 0,
      interrupted_count: 0,
    });
    // It waits for the throttle's end: a claim that read the throttles before the report
    // committed and scans after it sees the task, not the throttle.
    expect(
      (await db.query('select available_at from queues.task_pending where task_id = $1', [id])).rows[0].available_at,
    ).toEqual(r.throttled_until);
    // The run's lease is over: its completion is refused.
    await expect(
      db.pool('worker').query('select queues.complete_task($1, $2)', [id, c.task_lease_id]),
    ).rejects.toMatchObject({ code: '55000' });
    expect(await claim('w2')).toEqual([]);
    const [again] = await claimAt(61, 'w2');
    expect(again).toMatchObject({ task_id: id });
    // A second report with the old lease still records the throttle, and says the lease was lost.
    expect((await record({ retryAfter: 5, taskId: c.task_id, leaseId: c.task_lease_id })).result).toBe('lease_lost');
  });

  it("a clear gives the key's released tasks back at once, and leaves other waits alone", async () => {
    const [id, later] = await enqueue('email', 2);
    // A task scheduled beyond the throttle's end is not the throttle's to give back.
    await db.query(`update queues.task_pending set available_at = now() + interval '2 hours' where task_id = $1`, [
      later,
    ]);
    const [c] = await claim('w1');
    expect(c).toMatchObject({ task_id: id });
    await record({ retryAfter: 3600, taskId: c.task_id, leaseId: c.task_lease_id });
    expect(await claim('w2')).toEqual([]);
    expect(
      (await db.pool('api').query(`select admin.clear_throttle('task_type', 'email') as cleared`)).rows[0].cleared,
    ).toBe(true);
    expect((await claim('w2')).map((t) => t.task_id)).toEqual([id]);
    expect(
      (
        await db.query(
          `select available_at > now() + interval '1 hour' as waits from queues.task_pending where task_id = $1`,
          [later],
        )
      ).rows[0].waits,
    ).toBe(true);
  });

  it('an at-most-once call its provider refused does not count as started', async () => {
    const [id] = await enqueue('sms', 1);
    const [c] = await claim('w1');
    const start = (leaseId: string) =>
      db
        .pool('worker')
        .query(
          `select internal.start_provider_call(jsonb_build_object('task_id', $1::bigint, 'task_lease_id', $2::bigint)) as r`,
          [id, leaseId],
        )
        .then((r) => r.rows[0].r);
    expect((await start(c.task_lease_id)).payload.proceed).toBe(true);
    await record({ key: 'sms', retryAfter: 30, taskId: c.task_id, leaseId: c.task_lease_id });
    const [again] = await claimAt(31, 'w2');
    expect(again).toMatchObject({ task_id: id });
    const answer = await start(again.task_lease_id);
    expect(answer.payload).toMatchObject({ delivery_mode: 'at_most_once', proceed: true });

    // Whereas a started call its lease did not report refused (the lease expired: its
    // worker died mid-call) stops a later lease.
    const [third] = await claimAt(200, 'w3');
    expect(third).toMatchObject({ task_id: id });
    const refused = await db.query(
      `select internal.start_provider_call_at(now() + interval '200 s', jsonb_build_object('task_id', $1::bigint, 'task_lease_id', $2::bigint)) as r`,
      [id, third.task_lease_id],
    );
    expect(refused.rows[0].r.payload).toMatchObject({ proceed: false });
  });
});

describe('who may call what', () => {
  it('the worker records and reads; the app and api users may not record; only the api clears', async () => {
    await expect(
      db.pool('app').query(`select * from queues.record_throttle('task_type', 'email', null, 5, 'r', 'w')`),
    ).rejects.toMatchObject({ code: '42501' });
    await expect(
      db.pool('api').query(`select * from queues.record_throttle('task_type', 'email', null, 5, 'r', 'w')`),
    ).rejects.toMatchObject({ code: '42501' });
    await expect(db.pool('worker').query(`select admin.clear_throttle('task_type', 'email')`)).rejects.toMatchObject({
      code: '42501',
    });
    await expect(
      db.pool('worker').query(`select queues.clear_throttle('task_type', 'email', 'w')`),
    ).rejects.toMatchObject({ code: '42501' });
    await expect(db.pool('worker').query('select * from queues.active_throttles()')).resolves.toBeDefined();
  });
});

describe('the cost of throttles in the claim', () => {
  beforeEach(reset);

  it('reads only the reports not yet ended, by index, under a plan made while the table was empty', async () => {
    const root = await db.client('root');
    try {
      await enqueue('email', 5);
      await enqueue('sms', 5);
      // Plans made now, on this connection, with no throttle at all.
      await root.query(`select * from queues.claim_tasks('plan-w', 1, null, 60)`);
      // Then 20,000 reports that have ended (a busy day of 429s) and one in force.
      await db.query(
        `insert into queues.throttle (key_kind, key, throttled_until, reason, recorded_at, recorded_by)
         select 'task_type', 'email', now() - interval '1 day' + make_interval(secs => i), 'HTTP 429',
                now() - interval '2 days', 'w'
           from generate_series(1, 20000) i`,
      );
      await db.query('analyze queues.throttle');
      const throttleRows = async () => {
        const plans = await explainNested(root, `select * from queues.claim_tasks('plan-w', 100, null, 60)`);
        const nodes = plans.flatMap((p) => planNodes(p.plan)).filter((n) => n['Relation Name'] === 'throttle');
        expect(nodes.length, 'the claim probed queues.throttle').toBeGreaterThan(0);
        expect(
          nodes.every((n) => n['Index Name'] === 'throttle_until_idx'),
          JSON.stringify(nodes),
        ).toBe(true);
        return {
          rows: nodes.reduce(
            (sum, n) =>
              sum +
              (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) *
                Number(n['Actual Loops'] ?? 1),
            0,
          ),
        };
      };
      // None in force: the probe reads no row, and the claim takes the email tasks.
      expect((await throttleRows()).rows).toBe(0);
      await record({ key: 'sms', retryAfter: 600 });
      await enqueue('email', 5);
      await enqueue('sms', 5);
      // One in force: the probe reads that one report.
      expect((await throttleRows()).rows).toBe(1);
    } finally {
      await root.end();
    }
  });
});
