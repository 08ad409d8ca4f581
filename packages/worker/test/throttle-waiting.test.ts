// A group throttle and the tasks waiting in the worker's local queue (claimed, not
// started), with a real worker: when a run's provider refuses its account (a
// ThrottledError with `group: true`), the worker gives back, in the statement that records
// the throttle, the waiting tasks of that group key (of any type), uncounted, and none of
// them runs before the throttle ends; the waiting tasks of other accounts run on.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { defineTask } from '@org/tasks';
import { createLogger, ProcessorRegistry, registerTaskDefinitions, ThrottledError, Worker } from '../src/index.js';
import { eventually } from './support/fixtures.js';

let db: TestDatabase;
let worker: Worker | undefined;
const calls: { type: string; account: string; cleared: boolean }[] = [];
let cleared = false;
let waitingAtRefusal: number | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(`insert into queues.task_type (task_type) values ('push_waiting'), ('mail_waiting')`);
});
afterAll(async () => {
  await worker?.stop();
  await db?.drop();
});

const run = (type: string) => async (payload: { account: string }) => {
  calls.push({ type, account: payload.account, cleared });
  if (payload.account !== 'acme' || cleared) return;
  // The first acme run is refused once the others wait in this worker behind it; any
  // later acme run (one the worker started anyway) is refused too. How many wait depends
  // on the pace of the warm-up run (the local queue holds about LOCAL_QUEUE_MS of work): all
  // five, unless a loaded machine made that run slow. A claim puts all its tasks in the
  // local queue at once, in task order, so two waiting are the two acme tasks, and maybe more.
  if (calls.filter((c) => c.account === 'acme').length === 1) {
    await eventually(() => (worker?.status().waiting ?? 0) >= 2, 'tasks waiting in the worker');
    waitingAtRefusal = worker?.status().waiting;
  }
  throw new ThrottledError('acme account: HTTP 429', { retryAfterSeconds: 3600, group: true });
};
const push = defineTask({ name: 'push_waiting', payload: z.object({ account: z.string() }), run: run('push') });
const mail = defineTask({ name: 'mail_waiting', payload: z.object({ account: z.string() }), run: run('mail') });

const enqueue = async (type: string, account: string) =>
  (
    await db.query<{ id: string }>(
      `select queues.enqueue_internal($1, jsonb_build_object('account', $2::text), _group_key => $2)::text as id`,
      [type, account],
    )
  ).rows[0].id;

const outcome = async (id: string) =>
  (await db.query<{ o: string | null }>(`select admin.get_task($1) -> 'completion' ->> 'outcome' as o`, [id])).rows[0]
    .o;

it('gives back the waiting tasks of the throttled group with the run, in one statement; the others run on', async () => {
  worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: null,
    workerId: 'throttle-waiting-test',
    concurrency: 1,
    prefetch: 10,
    pollIntervalMs: 50,
    heartbeatIntervalMs: 1000,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 2000,
    registry: registerTaskDefinitions(new ProcessorRegistry(), [push, mail]),
    logger: createLogger('silent'),
  });
  await worker.start();
  // A first quick task: once a run's time is known, the worker's local queue holds more
  // than its one slot.
  const warm = await enqueue('push_waiting', 'warm');
  await eventually(async () => (await outcome(warm)) === 'succeeded', 'the warm-up task ran');

  // Six tasks in one commit: the first (acme) runs, the five others wait in the worker.
  const { rows } = await db.query<{ id: string }>(
    `select queues.enqueue_internal(v.t, jsonb_build_object('account', v.a), _group_key => v.a)::text as id
       from (values (1, 'push_waiting', 'acme'), (2, 'push_waiting', 'acme'), (3, 'mail_waiting', 'acme'),
                    (4, 'push_waiting', 'globex'), (5, 'mail_waiting', 'globex'), (6, 'push_waiting', 'initech')) v(n, t, a)
      order by v.n`,
  );
  const [first, ...rest] = rows.map((r) => r.id);
  const acmeWaiting = rest.slice(0, 2);
  const others = rest.slice(2);

  await eventually(
    async () => (await Promise.all(others.map(outcome))).every((o) => o === 'succeeded'),
    "the other accounts' tasks ran",
    30_000,
  );
  expect(waitingAtRefusal).toBeGreaterThanOrEqual(2);
  // Only the first acme task ran: the waiting ones were given back, not started.
  expect(calls.filter((c) => c.account === 'acme')).toEqual([{ type: 'push', account: 'acme', cleared: false }]);
  const [throttle] = (
    await db.query<{ key: string; recorded_at: Date; xmin: string }>(
      `select key, recorded_at, xmin::text from queues.throttle where key_kind = 'group'`,
    )
  ).rows;
  expect(throttle?.key).toBe('acme');
  // The run's lease and the waiting acme tasks' leases were released in the throttle's own
  // transaction (one statement), uncounted; no acme task was leased since.
  const released = await db.query<{ task_id: string; same_transaction: boolean }>(
    `select r.task_id::text, r.xmin = t.xmin as same_transaction
       from queues.task_lease_release r, queues.throttle t
      where t.key_kind = 'group' and r.task_id = any($1::bigint[])
      order by r.task_id`,
    [[first, ...acmeWaiting]],
  );
  expect(released.rows).toEqual([first, ...acmeWaiting].map((id) => ({ task_id: id, same_transaction: true })));
  const counts = await db.query(
    `select failed_attempts, uncounted_count, released_count from queues.task_pending where task_id = any($1::bigint[])`,
    [[first, ...acmeWaiting]],
  );
  expect(counts.rows).toEqual(Array(3).fill({ failed_attempts: 0, uncounted_count: 0, released_count: 1 }));
  expect(
    (
      await db.query(
        `select count(*)::int as n from queues.task_lease l where l.task_id = any($1::bigint[]) and l.leased_at > $2`,
        [[first, ...acmeWaiting], throttle.recorded_at],
      )
    ).rows[0].n,
  ).toBe(0);

  // Cleared: the acme tasks run, each once.
  cleared = true;
  expect((await db.pool('api').query(`select admin.clear_throttle('group', 'acme') as c`)).rows[0].c).toBe(true);
  await eventually(
    async () => (await Promise.all([first, ...acmeWaiting].map(outcome))).every((o) => o === 'succeeded'),
    'the acme tasks ran after the clear',
    30_000,
  );
  expect(calls.filter((c) => c.account === 'acme' && c.cleared)).toHaveLength(3);
});
