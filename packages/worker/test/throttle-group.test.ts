// Provider back-pressure per group key, end to end: a real worker runs a defineTask whose
// provider refuses one account's work (a ThrottledError with `group: true`). The worker
// records a 'group' throttle of the run's task's group key and gives the run back
// uncounted; no worker claims that account's tasks (of any type) until T or a clear, while
// the other accounts' tasks of the same type run on. A ThrottledError naming a group key
// throttles that key; one asking for the group of a task without a group key records
// nothing and the task runs again.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { defineTask } from '@org/tasks';
import { createLogger, ProcessorRegistry, registerTaskDefinitions, ThrottledError, Worker } from '../src/index.js';
import { MAX_WAITING_OFFERED, throttleCandidates } from '../src/throttle.js';
import { eventually } from './support/fixtures.js';

let db: TestDatabase;
let worker: Worker;
const calls: { type: string; account: string }[] = [];
let acmeRefused = false;
let namedRefused = false;
let plainRefused = false;

const run = (type: string) => (payload: { account: string }) => {
  calls.push({ type, account: payload.account });
  if (payload.account === 'acme' && !acmeRefused) {
    acmeRefused = true;
    // An hour: only the operator's clear below lets acme's tasks run again.
    throw new ThrottledError('acme account: HTTP 429 quota exceeded', { retryAfterSeconds: 3600, group: true });
  }
  if (payload.account === 'named' && !namedRefused) {
    namedRefused = true;
    throw new ThrottledError('shared account busy', { retryAfterSeconds: 3600, groupKey: 'shared-account' });
  }
  if (payload.account === 'plain' && !plainRefused) {
    plainRefused = true;
    throw new ThrottledError('no group to throttle', { retryAfterSeconds: 3600, group: true });
  }
};
const push = defineTask({ name: 'push_grouped', payload: z.object({ account: z.string() }), run: run('push') });
const mail = defineTask({ name: 'mail_grouped', payload: z.object({ account: z.string() }), run: run('mail') });

beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(`insert into queues.task_type (task_type) values ('push_grouped'), ('mail_grouped')`);
  worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: null,
    workerId: 'group-throttle-test',
    concurrency: 2,
    pollIntervalMs: 50,
    heartbeatIntervalMs: 1000,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 2000,
    registry: registerTaskDefinitions(new ProcessorRegistry(), [push, mail]),
    logger: createLogger('silent'),
  });
  await worker.start();
});
afterAll(async () => {
  await worker?.stop();
  await db?.drop();
});

const enqueue = async (type: string, account: string, group: string | null) =>
  (
    await db.query<{ id: string }>(
      `select queues.enqueue($1, jsonb_build_object('account', $2::text), _group_key => $3) as id`,
      [type, account, group],
    )
  ).rows[0].id;

/** A task's outcome as the API reads it (admin.get_task), or null while it has none. */
const outcome = async (id: string) =>
  (
    await db.query<{ outcome: string | null }>(`select admin.get_task($1) -> 'completion' ->> 'outcome' as outcome`, [
      id,
    ])
  ).rows[0].outcome;

describe('a run whose provider refuses one account (ThrottledError with group)', () => {
  it("throttles that group key on every claim, of every type, while the other accounts' tasks run on", async () => {
    // The first acme task runs and is refused; then more acme tasks of both types, and other accounts'.
    const first = await enqueue('push_grouped', 'acme', 'acme');
    await eventually(() => acmeRefused, 'the acme run refused');
    await eventually(
      async () => (await db.query(`select 1 from queues.throttle where key_kind = 'group'`)).rowCount === 1,
      'the group throttle recorded',
    );
    const acme = [first, await enqueue('push_grouped', 'acme', 'acme'), await enqueue('mail_grouped', 'acme', 'acme')];
    const others = [
      await enqueue('push_grouped', 'globex', 'globex'),
      await enqueue('mail_grouped', 'globex', 'globex'),
      await enqueue('push_grouped', 'nobody', null),
    ];
    await eventually(
      async () => (await Promise.all(others.map(outcome))).every((o) => o === 'succeeded'),
      "the other accounts' tasks ran",
      30_000,
    );

    const [fact] = (
      await db.query(
        `select key_kind, key, task_id::text, recorded_by, reason, throttled_until - recorded_at as span
           from queues.throttle`,
      )
    ).rows;
    expect(fact).toMatchObject({
      key_kind: 'group',
      key: 'acme',
      task_id: first,
      recorded_by: 'group-throttle-test',
      reason: 'acme account: HTTP 429 quota exceeded',
    });
    // The refused run was given back uncounted, and no acme task was leased since.
    expect(
      (await db.query('select failed_attempts, released_count from queues.task_pending where task_id = $1', [first]))
        .rows[0],
    ).toEqual({ failed_attempts: 0, released_count: 1 });
    const leasedSince = await db.query(
      `select l.task_id from queues.task_lease l join queues.throttle th on l.leased_at > th.recorded_at
        where l.task_id = any ($1::bigint[])`,
      [acme],
    );
    expect(leasedSince.rows).toEqual([]);
    expect((await Promise.all(acme.map(outcome))).every((o) => o === null)).toBe(true);
    expect(calls.filter((c) => c.account === 'acme')).toHaveLength(1);

    // The operator clears it (as the REST API does): acme's tasks of both types run.
    expect(
      (await db.pool('api').query(`select admin.clear_throttle('group', 'acme') as cleared`)).rows[0].cleared,
    ).toBe(true);
    await eventually(
      async () => (await Promise.all(acme.map(outcome))).every((o) => o === 'succeeded'),
      'the acme tasks ran after the clear',
      30_000,
    );
    expect(calls.filter((c) => c.account === 'acme')).toHaveLength(4);
  });

  it('a named group key is throttled; a task without a group key asking for its group records nothing and runs again', async () => {
    const named = await enqueue('mail_grouped', 'named', null);
    await eventually(
      async () => (await db.query(`select 1 from queues.throttle where key = 'shared-account'`)).rowCount === 1,
      'the named group throttle recorded',
    );
    const shared = await enqueue('push_grouped', 'shared', 'shared-account');
    const plain = await enqueue('push_grouped', 'plain', null);
    await eventually(
      async () => (await outcome(named)) === 'succeeded' && (await outcome(plain)) === 'succeeded',
      'the named and plain tasks ran again',
      30_000,
    );
    expect(namedRefused && plainRefused).toBe(true);
    const facts = (
      await db.query(
        `select key_kind, key, task_id::text from queues.throttle where key <> 'acme' order by throttle_id`,
      )
    ).rows;
    // Only the named key was recorded (the plain task has no group key: nothing written).
    expect(facts).toEqual([{ key_kind: 'group', key: 'shared-account', task_id: named }]);
    // The shared account's task waits for the throttle.
    expect(await outcome(shared)).toBeNull();
    expect(
      (await db.query(`select count(*)::int as n from queues.task_lease where task_id = $1`, [shared])).rows[0].n,
    ).toBe(0);
  });
});

describe('ThrottledError options', () => {
  it('group and groupKey make a group throttle; a type key and a group together, or a blank key, are refused', () => {
    expect(new ThrottledError('x', { retryAfterSeconds: 1, group: true })).toMatchObject({ group: true });
    expect(new ThrottledError('x', { retryAfterSeconds: 1, groupKey: 'acme' })).toMatchObject({
      group: true,
      groupKey: 'acme',
    });
    expect(new ThrottledError('x', { retryAfterSeconds: 1 })).toMatchObject({ group: false, groupKey: undefined });
    expect(() => new ThrottledError('x', { retryAfterSeconds: 1, key: 'email', group: true })).toThrow(/not both/);
    expect(() => new ThrottledError('x', { retryAfterSeconds: 1, groupKey: ' ' })).toThrow(/groupKey must be 1 to 200/);
    expect(() => new ThrottledError('x', { retryAfterSeconds: 1, groupKey: 'x'.repeat(201) })).toThrow(
      /groupKey must be 1 to 200/,
    );
  });
});

describe('the waiting tasks a throttle offers', () => {
  const waiting = Array.from({ length: 1500 }, (_, i) => ({
    taskId: String(i + 1),
    taskType: i % 3 ? 'mail' : 'push',
  }));

  it('a group throttle offers every waiting task, at most the 1,000 queues.record_throttle takes', () => {
    const offered = throttleCandidates(waiting, new ThrottledError('x', { retryAfterSeconds: 1, group: true }), 'mail');
    expect(MAX_WAITING_OFFERED).toBe(1000);
    expect(offered).toEqual(waiting.slice(0, 1000));
  });

  it("a type's throttle offers that type's waiting tasks only", () => {
    const offered = throttleCandidates(waiting, new ThrottledError('x', { retryAfterSeconds: 1 }), 'push');
    expect(offered).toEqual(waiting.filter((t) => t.taskType === 'push'));
    expect(throttleCandidates(waiting, new ThrottledError('x', { retryAfterSeconds: 1, key: 'mail' }), 'push')).toEqual(
      waiting.filter((t) => t.taskType === 'mail').slice(0, 1000),
    );
  });
});
