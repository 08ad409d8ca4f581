// Delivery modes per channel, proved with a real worker process (the queue-worker CLI,
// providers from its environment) killed with SIGKILL while its provider call is in
// flight: the fake provider has received the request (the SMS or email is out) and
// withholds its answer, so the success handler never runs. A second worker takes the
// task over when the lease expires:
//   at-least-once (email): it calls again; Resend deduplicates on the Idempotency-Key.
//   at-most-once (sms, the default): it does not call again; the attempt fails with an
//     unknown outcome and the process ends 'delivery_outcome_unknown'. One SMS.
//   sms switched to at-least-once: the SMS is sent twice (what at-most-once prevents).
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { startFakeResend, startFakeTwilio, type FakeResend, type FakeTwilio } from '@org/providers/testing';
import { eventually } from './support/fixtures.js';
import { startChild, type Child } from './support/child.js';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

let db: TestDatabase;
let resend: FakeResend;
let twilio: FakeTwilio;
const children: Child[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  // Supervisor backoffs of 5 s, 10 s, ... become 10 ms, 20 ms, ...
  await db.query(`insert into internal.setting (name, value) values ('backoff_scale', '0.002')`);
  resend = await startFakeResend();
  twilio = await startFakeTwilio();
});
afterAll(async () => {
  for (const c of children) if (c.process.exitCode === null && c.process.signalCode === null) c.process.kill('SIGKILL');
  await Promise.all([resend?.close(), twilio?.close()]);
  await db?.drop();
});
beforeEach(() => {
  resend.reset();
  twilio.reset();
});

function worker(id: string): Child {
  const child = startChild(
    {
      DATABASE_URL: db.url('worker'),
      WORKER_ID: id,
      WORKER_ROLE: 'db_function,email,sms',
      POLL_INTERVAL_MS: '100',
      HEARTBEAT_INTERVAL_MS: '500',
      LEASE_SECONDS: '2',
      LOG_LEVEL: 'warn',
      RESEND_API_KEY: 're_test_key',
      RESEND_BASE_URL: resend.url,
      EMAIL_FROM: 'Team <team@example.com>',
      TWILIO_ACCOUNT_SID: `AC${'1'.repeat(32)}`,
      TWILIO_AUTH_TOKEN: 'twilio-token',
      TWILIO_FROM_NUMBER: '+15550001111',
      TWILIO_BASE_URL: twilio.url,
    },
    CLI,
  );
  children.push(child);
  return child;
}

/** Kills the first worker while the provider holds its first answer; a second worker finishes. */
async function killMidCall(fake: FakeResend | FakeTwilio, label: string): Promise<void> {
  fake.hold();
  const first = worker(`${label}-first`);
  await eventually(() => fake.requests.length === 1, `${label}: the provider received the call`);
  first.process.kill('SIGKILL');
  expect((await first.exited).signal).toBe('SIGKILL');
  fake.release();
  const second = worker(`${label}-second`);
  return void second;
}

async function stopWorkers() {
  for (const c of children) if (c.process.exitCode === null && c.process.signalCode === null) c.process.kill('SIGTERM');
  await Promise.all(children.map((c) => c.exited));
  children.length = 0;
}

const smsOutcome = async (id: string) =>
  (
    await db.query(
      `select (select count(*)::int from comms.send_sms_attempt where send_sms_task_id = $1) as attempts,
              (select array_agg(f.error_message order by a.send_sms_attempt_id) from comms.send_sms_attempt a
                 join comms.send_sms_attempt_failed f using (send_sms_attempt_id) where a.send_sms_task_id = $1) as errors,
              exists (select 1 from comms.send_sms_task_succeeded where send_sms_task_id = $1) as succeeded,
              (select reason from comms.send_sms_task_failed where send_sms_task_id = $1) as failed_reason`,
      [id],
    )
  ).rows[0];

describe('a worker killed between the provider call and the success handler', () => {
  it('sms, at most once (the default): one SMS; the next lease records an unknown outcome and the process ends', async () => {
    const { rows } = await db
      .pool('app')
      .query(`select send_sms_task_id::text as id from comms.send_sms('+14155550100', 'Your code is 1234')`);
    const id = rows[0].id as string;
    await killMidCall(twilio, 'sms-once');
    await eventually(
      async () => (await smsOutcome(id)).failed_reason !== null || (await smsOutcome(id)).succeeded,
      'sms process ended',
      30_000,
    );
    await stopWorkers();
    const outcome = await smsOutcome(id);
    expect(outcome).toMatchObject({ attempts: 1, succeeded: false, failed_reason: 'delivery_outcome_unknown' });
    expect(outcome.errors).toEqual([
      expect.stringMatching(
        /^unknown outcome: lease \d+ started the sms provider call at .* and no outcome was recorded; at-most-once delivery: not calling again$/,
      ),
    ]);
    expect(twilio.requests.filter((r) => r.method === 'POST')).toHaveLength(1);
  });

  it('sms switched to at least once: the SMS is sent again (the duplicate at-most-once prevents)', async () => {
    await db.query(`update internal.channel_delivery_mode set delivery_mode = 'at_least_once' where task_type = 'sms'`);
    try {
      const { rows } = await db
        .pool('app')
        .query(`select send_sms_task_id::text as id from comms.send_sms('+14155550101', 'Your code is 5678')`);
      const id = rows[0].id as string;
      await killMidCall(twilio, 'sms-twice');
      await eventually(async () => (await smsOutcome(id)).succeeded, 'sms process succeeded', 30_000);
      await stopWorkers();
      expect(await smsOutcome(id)).toMatchObject({ attempts: 1, succeeded: true, errors: null });
      // Sent again by the second worker; once more if a loaded machine let that worker's
      // 2 s lease expire during its call (at least once allows it).
      expect(twilio.requests.filter((r) => r.method === 'POST').length).toBeGreaterThanOrEqual(2);
    } finally {
      await db.query(
        `update internal.channel_delivery_mode set delivery_mode = 'at_most_once' where task_type = 'sms'`,
      );
    }
  });

  it('email, at least once (the default): called again with the same Idempotency-Key; Resend sends one email', async () => {
    const { rows } = await db
      .pool('app')
      .query(
        `select send_email_task_id::text as id from comms.send_email('Team <team@example.com>', 'ada@example.com', 'Hi', '<p>Hi</p>')`,
      );
    const id = rows[0].id as string;
    await killMidCall(resend, 'email');
    await eventually(
      async () =>
        (await db.query('select 1 from comms.send_email_task_succeeded where send_email_task_id = $1', [id]))
          .rowCount === 1,
      'email succeeded',
      30_000,
    );
    await stopWorkers();
    const posts = resend.requests.filter((r) => r.method === 'POST');
    expect(posts).toHaveLength(2);
    expect(posts[0].headers['idempotency-key']).toBe(posts[1].headers['idempotency-key']);
    expect(posts[0].headers['idempotency-key']).toMatch(new RegExp(`^[0-9]+:${db.name}:send_email_attempt:\\d+$`));
    expect(resend.emails).toHaveLength(1);
    expect(
      (await db.query('select count(*)::int as n from comms.send_email_attempt where send_email_task_id = $1', [id]))
        .rows[0].n,
    ).toBe(1);
  });
});
