// The send-SMS process, played with the worker by hand: the seeds' checklist (happy
// path, one failure then success, attempts exhausted), kickoff validation, redelivery,
// isolation level and the provider payload contract (smsPayload).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { smsPayload } from '@org/contracts';
import {
  type ClaimedTask,
  type DriveOptions,
  claimDue,
  drive,
  pendingFor,
  processTask,
  rowCounts,
  runAsWorker,
  snapshot,
} from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const FACTS = [
  'comms.send_sms_attempt',
  'comms.send_sms_attempt_succeeded',
  'comms.send_sms_attempt_failed',
  'comms.send_sms_task_succeeded',
  'comms.send_sms_task_failed',
];

async function sendSms(overrides: Partial<Record<'to' | 'body' | 'from' | 'scheduledAt' | 'key', unknown>> = {}) {
  const a = { to: '+14155550100', body: 'Your code is 1234', from: null, scheduledAt: null, key: null, ...overrides };
  const { rows } = await db
    .pool('app')
    .query(
      `select message_id::int, send_sms_task_id::int, validation_failure_message from comms.send_sms($1, $2, $3, $4, $5)`,
      [a.to, a.body, a.from, a.scheduledAt, a.key],
    );
  return rows[0] as {
    message_id: number | null;
    send_sms_task_id: number | null;
    validation_failure_message: string | null;
  };
}
const facts = async (taskId: number) =>
  (await db.query('select * from comms.send_sms_supervisor_facts($1)', [taskId])).rows[0];
const driveRoot = (taskId: number, provider?: DriveOptions['provider']) =>
  drive(db, { provider, rootKey: 'send_sms_task_id', rootId: taskId });

describe('send SMS: the seed checklist', () => {
  it('happy path: one attempt, a provider payload that validates, the task succeeds', async () => {
    const sent = await sendSms({ from: '+442071838750' });
    const { processed } = await driveRoot(sent.send_sms_task_id!);
    const sms = processed.filter((p) => p.task.task_type === 'sms');
    expect(sms).toHaveLength(1);
    expect(sms[0].task.payload).toMatchObject({
      task_type: 'sms',
      send_sms_task_id: sent.send_sms_task_id,
      before_handler: 'comms.get_sms_payload',
      success_handler: 'comms.record_sms_success',
      error_handler: 'comms.record_sms_failure',
    });
    const providerPayload = sms[0].result.payload;
    expect(smsPayload.safeParse(providerPayload).success).toBe(true);
    expect(providerPayload).toEqual({
      message_id: sent.message_id,
      idempotency_key: expect.stringMatching(
        new RegExp(`^[0-9]+:[a-z0-9_]+:send_sms_attempt:${String(sms[0].task.payload.send_sms_attempt_id)}$`),
      ),
      to_number: '+14155550100',
      from_number: '+442071838750',
      body: 'Your code is 1234',
    });
    expect(await facts(sent.send_sms_task_id!)).toMatchObject({
      has_task_succeeded: true,
      num_attempts: 1,
      num_failures: 0,
    });
    expect(await pendingFor(db, 'send_sms_task_id', sent.send_sms_task_id!)).toEqual([]);
  });

  it('one failure, then success on the retry', async () => {
    const sent = await sendSms();
    let calls = 0;
    const { processed } = await driveRoot(sent.send_sms_task_id!, () =>
      ++calls === 1 ? { ok: false, error: 'twilio 500' } : { ok: true, worker_payload: { sid: 'SM1' } },
    );
    expect(processed.filter((p) => p.task.task_type === 'sms')).toHaveLength(2);
    expect(await facts(sent.send_sms_task_id!)).toMatchObject({
      has_task_succeeded: true,
      num_attempts: 2,
      num_failures: 1,
    });
  });

  it('max attempts: three failures end in send_sms_task_failed', async () => {
    const sent = await sendSms();
    const { processed } = await driveRoot(sent.send_sms_task_id!, () => ({ ok: false, error: 'unreachable' }));
    expect(processed.filter((p) => p.task.task_type === 'sms')).toHaveLength(3);
    expect(processed.at(-1)!.result).toMatchObject({ status: 'max_attempts_reached' });
    const { rows } = await db.query('select reason from comms.send_sms_task_failed where send_sms_task_id = $1', [
      sent.send_sms_task_id,
    ]);
    expect(rows).toEqual([{ reason: 'max_attempts_reached' }]);
    expect(await pendingFor(db, 'send_sms_task_id', sent.send_sms_task_id!)).toEqual([]);
  });
});

describe('send SMS: kickoff', () => {
  it.each([
    [{ to: null }, 'to_number must be an E.164 number such as +14155550100'],
    [{ to: '4155550100' }, 'to_number must be an E.164 number such as +14155550100'],
    [{ body: '' }, 'body is required (1 to 1600 characters)'],
    [{ body: 'x'.repeat(1601) }, 'body is required (1 to 1600 characters)'],
    [{ from: '+0123' }, 'from_number must be an E.164 number such as +14155550100'],
  ])('refuses %j with a validation_failure_message and writes nothing', async (overrides, message) => {
    const before = await rowCounts(db, ['comms', 'queues']);
    expect(await sendSms(overrides)).toEqual({
      message_id: null,
      send_sms_task_id: null,
      validation_failure_message: message,
    });
    expect(await rowCounts(db, ['comms', 'queues'])).toEqual(before);
  });

  it('unknown or missing message ids: a message, nothing written; a second kickoff is a no-op', async () => {
    const before = await rowCounts(db, ['comms', 'queues']);
    const kickoff = async (id: unknown) =>
      (await db.query('select send_sms_task_id::int, validation_failure_message from comms.kickoff_send_sms($1)', [id]))
        .rows[0];
    expect(await kickoff(null)).toEqual({
      send_sms_task_id: null,
      validation_failure_message: 'message_id is required',
    });
    expect(await kickoff(424242)).toEqual({
      send_sms_task_id: null,
      validation_failure_message: 'sms message 424242 not found',
    });
    expect(await rowCounts(db, ['comms', 'queues'])).toEqual(before);

    const sent = await sendSms({ key: 'otp-1' });
    const after = await rowCounts(db, ['comms', 'queues']);
    expect(await sendSms({ key: 'otp-1' })).toEqual(sent);
    expect(await kickoff(sent.message_id)).toEqual({
      send_sms_task_id: sent.send_sms_task_id,
      validation_failure_message: null,
    });
    expect(await rowCounts(db, ['comms', 'queues'])).toEqual(after);
  });

  it('an idempotency key used for an email is refused for an SMS', async () => {
    await db
      .pool('app')
      .query(`select comms.send_email('a@example.com', 'b@example.com', 's', 'h', _idempotency_key => 'shared')`);
    expect(await sendSms({ key: 'shared' })).toEqual({
      message_id: null,
      send_sms_task_id: null,
      validation_failure_message: 'idempotency_key was already used for a message on another channel',
    });
  });
});

describe('send SMS: redelivery and isolation', () => {
  it('the same channel task delivered twice leaves the facts exactly as one delivery does', async () => {
    const sent = await sendSms();
    const mine = (t: ClaimedTask) => t.payload.send_sms_task_id === sent.send_sms_task_id;
    for (const task of await claimDue(db, new Date(Date.now() + 1000), ['db_function'])) await processTask(db, task);
    const channel = await claimDue(db, new Date(Date.now() + 1000), ['sms', 'email']);
    for (const task of channel)
      await processTask(db, task, mine(task) ? () => ({ ok: false, error: 'timeout' }) : undefined);
    const sms = channel.find(mine)!;
    const once = await snapshot(db, FACTS);
    expect(await runAsWorker(db, 'comms.get_sms_payload', sms.payload)).toMatchObject({ success: false });
    await runAsWorker(db, 'comms.record_sms_failure', { original_payload: sms.payload, error: 'timeout again' });
    expect(await snapshot(db, FACTS)).toEqual(once);
  });

  it('refuses to run under REPEATABLE READ and writes nothing', async () => {
    const sent = await sendSms();
    const before = await rowCounts(db, ['comms', 'queues']);
    const client = await db.client('worker');
    try {
      await client.query('begin isolation level repeatable read');
      await expect(
        client.query(`select internal.run_function('comms.send_sms_supervisor', $1)`, [
          JSON.stringify({ send_sms_task_id: sent.send_sms_task_id }),
        ]),
      ).rejects.toMatchObject({
        code: '25000',
        message: 'comms.send_sms_supervisor must run under READ COMMITTED, not REPEATABLE READ',
      });
      await client.query('rollback');
    } finally {
      await client.end();
    }
    expect(await rowCounts(db, ['comms', 'queues'])).toEqual(before);
  });
});
