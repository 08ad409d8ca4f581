// A channel's provider throttle, as its supervisor sees it: the channel's facts carry
// throttled_until, and while it lasts the supervisor's next check is not before its end (a
// long throttle does not use up the process's runs); without one, the backoff as before.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const supervise = async (channel: 'email' | 'sms', root: string) =>
  (
    await db.query<{ r: { success: boolean; payload: { status: string; next_check_at: string } } }>(
      `select comms.send_${channel}_supervisor(jsonb_build_object('send_${channel}_task_id', $1::bigint)) as r`,
      [root],
    )
  ).rows[0].r;
const facts = async (channel: 'email' | 'sms', root: string) =>
  (await db.query(`select * from comms.send_${channel}_supervisor_facts($1)`, [root])).rows[0];

describe('a throttled channel, as its supervisor sees it', () => {
  it('email: the facts say until when; the next check waits for it; other channels are unaffected', async () => {
    const email = (
      await db
        .pool('app')
        .query<{ id: string }>(
          `select send_email_task_id::text as id from comms.send_email('a@example.com', 'b@example.com', 'Hi', '<p>Hi</p>')`,
        )
    ).rows[0].id;
    const sms = (
      await db
        .pool('app')
        .query<{ id: string }>(`select send_sms_task_id::text as id from comms.send_sms('+14155550100', 'Hi')`)
    ).rows[0].id;
    expect(await facts('email', email)).toMatchObject({ throttled_until: null });
    const first = await supervise('email', email);
    expect(first.payload.status).toBe('attempt_scheduled');
    expect(Date.parse(first.payload.next_check_at) - Date.now()).toBeLessThan(60_000);

    const { throttled_until } = (
      await db
        .pool('worker')
        .query<{ throttled_until: Date }>(
          `select * from queues.record_throttle('task_type', 'email', null, 7200, 'resend: daily_quota_exceeded', 'w1')`,
        )
    ).rows[0];
    expect(await facts('email', email)).toMatchObject({ throttled_until, num_outstanding: 1 });
    const second = await supervise('email', email);
    expect(second.payload.status).toBe('waiting_for_attempt');
    expect(new Date(second.payload.next_check_at)).toEqual(throttled_until);

    expect(await facts('sms', sms)).toMatchObject({ throttled_until: null });
    const smsRun = await supervise('sms', sms);
    expect(Date.parse(smsRun.payload.next_check_at) - Date.now()).toBeLessThan(60_000);
  });
});
