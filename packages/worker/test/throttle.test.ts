// Provider back-pressure end to end: the real worker runs the email and SMS processes with
// the real Resend and Twilio SDKs against fake servers told to answer 429 with a
// Retry-After. The worker records "throttled until T" (queues.throttle), gives the task
// back uncounted, no lease of that channel is taken before T, and the send succeeds after
// it in the same attempt (no failed attempt, and for SMS, at most once, no "unknown
// outcome"). A defineTask run that throws a ThrottledError is handled the same way.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { fileDeletePayload } from '@org/contracts';
import { defineTask } from '@org/tasks';
import { createResendEmailProvider, createTwilioSmsProvider } from '@org/providers';
import { startFakeResend, startFakeTwilio, type FakeResend, type FakeTwilio } from '@org/providers/testing';
import { defaultRegistry } from '../src/command.js';
import {
  createLogger,
  ProcessorRegistry,
  registerTaskDefinitions,
  ThrottledError,
  throttleSeconds,
  Worker,
} from '../src/index.js';
import { eventually } from './support/fixtures.js';

let db: TestDatabase;
let resend: FakeResend;
let twilio: FakeTwilio;
let worker: Worker;
let faxCalls = 0;

const fax = defineTask({
  name: 'fax_throttled',
  payload: z.object({ to: z.string() }),
  run: () => {
    faxCalls += 1;
    if (faxCalls === 1) throw new ThrottledError('fax gateway: busy', { retryAfterSeconds: 1 });
  },
});

beforeAll(async () => {
  db = await createTestDatabase();
  // Supervisor backoffs of 5 s, 10 s, ... become 10 ms, 20 ms, ...
  await db.query(`insert into internal.setting (name, value) values ('backoff_scale', '0.002')`);
  await db.query(`insert into queues.task_type (task_type) values ('fax_throttled')`);
  resend = await startFakeResend();
  twilio = await startFakeTwilio();
  const registry = defaultRegistry({
    email: createResendEmailProvider({ apiKey: 're_test_key', baseUrl: resend.url }),
    sms: createTwilioSmsProvider({
      accountSid: `AC${'1'.repeat(32)}`,
      authToken: 'twilio-token',
      fromNumber: '+15550001111',
      baseUrl: twilio.url,
    }),
    file_delete: {
      name: 'unused',
      payloadSchema: fileDeletePayload,
      send: () => Promise.reject(new Error('not used by these tests')),
    },
  });
  registerTaskDefinitions(registry, [fax]);
  worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: null,
    workerId: 'throttle-test',
    concurrency: 4,
    pollIntervalMs: 50,
    heartbeatIntervalMs: 1000,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 2000,
    registry,
    logger: createLogger('silent'),
  });
  await worker.start();
});
afterAll(async () => {
  await worker?.stop();
  await Promise.all([resend?.close(), twilio?.close()]);
  await db?.drop();
});
beforeEach(() => {
  resend.reset();
  twilio.reset();
});

const one = async (sql: string, params: unknown[] = []) => (await db.query(sql, params)).rows[0];
/** A task's completion as the API reads it (admin.get_task): outcome and time, or undefined. */
const completion = async (id: string) =>
  (
    await db.query<{ c: { outcome: string; completed_at: string } | null }>(
      `select admin.get_task($1) -> 'completion' as c`,
      [id],
    )
  ).rows[0]?.c ?? undefined;

/** The throttle facts of a channel, oldest first. */
const throttles = async (key: string) =>
  (
    await db.query<{ task_id: string; throttled_until: Date; recorded_at: Date; reason: string; recorded_by: string }>(
      `select task_id::text, throttled_until, recorded_at, reason, recorded_by
         from queues.throttle where key = $1 order by throttle_id`,
      [key],
    )
  ).rows;

/** Leases of `taskId` taken while a throttle of its type was in force (none, if the claim honours them). */
const leasesDuringThrottle = async (taskId: string) =>
  Number(
    (
      await one(
        `select count(*) as n
           from queues.task_leases l
           join queues.task t using (task_id)
           join queues.throttle th on th.key = t.task_type
          where l.task_id = $1 and l.leased_at > th.recorded_at and l.leased_at < th.throttled_until`,
        [taskId],
      )
    ).n,
  );

const processOutcome = async (channel: 'email' | 'sms', rootId: string) => {
  await eventually(
    async () =>
      (
        await one(
          `select exists (select 1 from comms.send_${channel}_task_succeeded where send_${channel}_task_id = $1)
             or exists (select 1 from comms.send_${channel}_task_failed where send_${channel}_task_id = $1) as done`,
          [rootId],
        )
      ).done,
    `${channel} process ${rootId} ended`,
    30_000,
  );
  return one(
    `select (select count(*)::int from comms.send_${channel}_attempt where send_${channel}_task_id = $1) as attempts,
            (select count(*)::int from comms.send_${channel}_attempt_failed f
               join comms.send_${channel}_attempt a using (send_${channel}_attempt_id)
              where a.send_${channel}_task_id = $1) as failures,
            exists (select 1 from comms.send_${channel}_task_succeeded where send_${channel}_task_id = $1) as succeeded,
            (select a.task_id::text from comms.send_${channel}_attempt a where a.send_${channel}_task_id = $1
              order by a.send_${channel}_attempt_id limit 1) as task_id`,
    [rootId],
  );
};

describe('a provider answering 429 with Retry-After', () => {
  it('email: the throttle is recorded, no email task is claimed before T, and the same attempt succeeds after', async () => {
    resend.throttleNext(1, 2, 'Too many requests. You can only make 2 requests per second.');
    const root = (
      await db
        .pool('app')
        .query(`select * from comms.send_email('Team <team@example.com>', 'ada@example.com', 'Hi', '<p>Hi</p>')`)
    ).rows[0].send_email_task_id as string;
    const outcome = await processOutcome('email', root);
    expect(outcome).toMatchObject({ attempts: 1, failures: 0, succeeded: true });

    const facts = await throttles('email');
    expect(facts).toHaveLength(1);
    expect(facts[0]).toMatchObject({
      task_id: outcome.task_id,
      recorded_by: 'throttle-test',
      reason: 'resend: HTTP 429 rate_limit_exceeded: Too many requests. You can only make 2 requests per second.',
    });
    expect(facts[0].throttled_until.getTime() - facts[0].recorded_at.getTime()).toBe(2000);
    expect(await leasesDuringThrottle(outcome.task_id)).toBe(0);
    // Two leases: the refused run (released, uncounted), and the one after T.
    expect(
      Number((await one('select count(*) as n from queues.task_leases where task_id = $1', [outcome.task_id])).n),
    ).toBe(2);
    expect(
      Number(
        (await one('select count(*) as n from queues.task_lease_release where task_id = $1', [outcome.task_id])).n,
      ),
    ).toBe(1);
    expect(resend.requests.map((r) => r.status)).toEqual([429, 200]);
    expect(resend.emails).toHaveLength(1);
  });

  it('sms (at most once): the refused call does not count as started; the SMS is sent once after T', async () => {
    twilio.throttleNext(1, 1);
    const root = (
      await db.pool('app').query(`select send_sms_task_id::text as id from comms.send_sms('+14155550100', 'Code 1234')`)
    ).rows[0].id as string;
    const outcome = await processOutcome('sms', root);
    expect(outcome).toMatchObject({ attempts: 1, failures: 0, succeeded: true });
    const facts = await throttles('sms');
    expect(facts).toHaveLength(1);
    expect(facts[0]).toMatchObject({
      task_id: outcome.task_id,
      reason: 'twilio: HTTP 429 code 20429: Too Many Requests',
    });
    expect(await leasesDuringThrottle(outcome.task_id)).toBe(0);
    expect(twilio.requests.map((r) => r.status)).toEqual([429, 201]);
    expect(twilio.messages).toHaveLength(1);
  });
});

describe('a defineTask run that throws a ThrottledError', () => {
  it('is recorded as a throttle of its type, not as a failure, and runs again after T', async () => {
    const id = (
      await db.query(`select queues.enqueue_internal('fax_throttled', '{"to": "+1"}'::jsonb, _max_attempts => 1) as id`)
    ).rows[0].id as string;
    await eventually(async () => (await completion(id)) !== undefined, 'fax completed', 30_000);
    expect((await completion(id))?.outcome).toBe('succeeded');
    expect(faxCalls).toBe(2);
    expect(await throttles('fax_throttled')).toMatchObject([{ task_id: id, reason: 'fax gateway: busy' }]);
    expect(await leasesDuringThrottle(id)).toBe(0);
  });
});

describe('tasks of a throttled type waiting in the worker', () => {
  it('are given back with the throttled run, and none runs before T', async () => {
    let calls = 0;
    // eslint-disable-next-line prefer-const -- the run refers to the worker made below
    let single: Worker;
    const gate = defineTask({
      name: 'gate_throttled',
      payload: z.object({ n: z.number() }),
      run: async () => {
        calls += 1;
        if (calls > 1) return;
        // Refused once other tasks of the type wait in this worker behind this run.
        await eventually(() => single.status().waiting > 0, 'gate tasks waiting in the worker');
        throw new ThrottledError('gate: busy', { retryAfterSeconds: 1 });
      },
    });
    await db.query(`insert into queues.task_type (task_type) values ('gate_throttled')`);
    const ids: string[] = [];
    for (let n = 0; n < 5; n++)
      ids.push(
        (
          await db.query(`select queues.enqueue_internal('gate_throttled', jsonb_build_object('n', $1::int)) as id`, [
            n,
          ])
        ).rows[0].id as string,
      );
    // One slot: the first claim takes all five, one runs and four wait in the worker.
    single = new Worker({
      databaseUrl: db.url('worker'),
      roles: null,
      workerId: 'throttle-single',
      concurrency: 1,
      pollIntervalMs: 50,
      heartbeatIntervalMs: 1000,
      leaseSeconds: 30,
      maxLeases: 5,
      shutdownGraceMs: 2000,
      registry: registerTaskDefinitions(new ProcessorRegistry(), [gate]),
      logger: createLogger('silent'),
    });
    await single.start();
    try {
      await eventually(
        async () => (await Promise.all(ids.map(completion))).every((c) => c !== undefined),
        'the five gate tasks completed',
        30_000,
      );
    } finally {
      await single.stop();
    }
    const [fact] = await throttles('gate_throttled');
    expect(fact).toBeDefined();
    const done = await Promise.all(ids.map(completion));
    const early = done.filter((c) => Date.parse(c!.completed_at) < fact.throttled_until.getTime());
    expect(early).toEqual([]);
    expect(done.map((c) => c!.outcome)).toEqual(Array(5).fill('succeeded'));
    expect(calls).toBe(6);
    // Every lease taken before the throttle (the refused run's, and those of the tasks that
    // waited behind it) was given back, not run.
    const before = await db.query<{ released: boolean }>(
      `select exists (select 1 from queues.task_lease_release r where r.task_id = l.task_id and r.task_lease_id = l.task_lease_id) as released
         from queues.task_leases l
        where l.task_id = any($1::bigint[]) and l.leased_at <= $2`,
      [ids, fact.recorded_at],
    );
    expect(before.rows.length).toBeGreaterThanOrEqual(2);
    expect(before.rows.every((r) => r.released)).toBe(true);
  });
});

describe('a claim under way when a throttle is recorded', () => {
  it('puts its tasks in the local queue first: those the throttle covers are given back with the run, and none runs before T', async () => {
    await db.query(`insert into queues.task_type (task_type) values ('gate_claiming')`);
    // A flow limit makes every claim of the type take the type's claim lock (advisory,
    // 20252): held here, it keeps a claim under way for as long as the test likes.
    await db.query(`select queues.set_task_limit('gate_claiming', 'type', null, 100)`);
    let throwNow!: () => void;
    const thrown = new Promise<void>((resolve) => (throwNow = resolve));
    let calls = 0;
    const gate = defineTask({
      name: 'gate_claiming',
      payload: z.object({ n: z.number() }),
      run: async () => {
        calls += 1;
        if (calls > 1) return;
        await thrown;
        throw new ThrottledError('gate: busy', { retryAfterSeconds: 1 });
      },
    });
    const enqueueGate = async (n: number) =>
      (await db.query(`select queues.enqueue_internal('gate_claiming', jsonb_build_object('n', $1::int)) as id`, [n]))
        .rows[0].id as string;
    const first = await enqueueGate(0);
    const worker = new Worker({
      databaseUrl: db.url('worker'),
      roles: null,
      workerId: 'throttle-claiming',
      concurrency: 1,
      pollIntervalMs: 50,
      heartbeatIntervalMs: 1000,
      leaseSeconds: 30,
      maxLeases: 5,
      shutdownGraceMs: 2000,
      registry: registerTaskDefinitions(new ProcessorRegistry(), [gate]),
      logger: createLogger('silent'),
    });
    const locker = await db.client('root');
    try {
      await worker.start();
      await eventually(() => calls === 1, 'the first task running');
      // The type's claim lock held: the next claim, for the task enqueued now, waits on it.
      await locker.query('begin');
      await locker.query(`select pg_advisory_xact_lock(20252, hashtext('gate_claiming'))`);
      const second = await enqueueGate(1);
      await eventually(
        async () =>
          (
            await db.query(
              `select count(*)::int as n from pg_locks where locktype = 'advisory' and not granted and classid = 20252`,
            )
          ).rows[0].n === 1,
        'a claim waiting for the claim lock',
      );
      // The run is refused while that claim is under way; the claim goes on a moment later.
      throwNow();
      await new Promise((resolve) => setTimeout(resolve, 300));
      await locker.query('commit');
      await eventually(
        async () => (await completion(first)) !== undefined && (await completion(second)) !== undefined,
        'both completed',
        30_000,
      );
      const [fact] = await throttles('gate_claiming');
      expect(fact).toBeDefined();
      const done = [await completion(first), await completion(second)];
      expect(done.map((c) => c!.outcome)).toEqual(['succeeded', 'succeeded']);
      expect(done.filter((c) => Date.parse(c!.completed_at) < fact.throttled_until.getTime())).toEqual([]);
      // The second task's lease from that claim was given back, not run.
      const { rows } = await db.query(
        `select count(*)::int as n from queues.task_leases l
          where l.task_id = $1 and exists (select 1 from queues.task_lease_release r
                                             where r.task_id = l.task_id and r.task_lease_id = l.task_lease_id)`,
        [second],
      );
      expect(rows[0].n).toBe(1);
    } finally {
      await locker.query('rollback').catch(() => {});
      await locker.end();
      await worker.stop();
    }
  });
});

describe('throttleSeconds', () => {
  it('holds the wait asked for to 1 second .. 24 hours, counting an until from now', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(throttleSeconds(new ThrottledError('x', { retryAfterSeconds: 0 }), now)).toBe(1);
    expect(throttleSeconds(new ThrottledError('x', { retryAfterSeconds: 30 }), now)).toBe(30);
    expect(throttleSeconds(new ThrottledError('x', { retryAfterSeconds: 10 ** 9 }), now)).toBe(86_400);
    expect(throttleSeconds(new ThrottledError('x', { until: new Date(now + 90_000) }), now)).toBe(90);
    expect(throttleSeconds(new ThrottledError('x', { until: new Date(now - 5_000) }), now)).toBe(1);
    expect(() => new ThrottledError('x')).toThrow(/exactly one of until and retryAfterSeconds/);
  });
});
