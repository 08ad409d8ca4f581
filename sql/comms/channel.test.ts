// What the message channels share (sql/comms/channel.sql), on both channels: the entry
// points registration makes, the checks that run before a provider call, a key reused
// across channels, a kickoff run twice, and the refusals of a channel that has no tables. The processes themselves are
// tested through their own entry points in email.test.ts and sms.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const send = {
  email: (key: string | null) =>
    db
      .pool('app')
      .query<{ message_id: number | null; task_id: number | null; validation_failure_message: string | null }>(
        `select message_id::int, send_email_task_id::int as task_id, validation_failure_message
           from comms.send_email('a@example.com', 'b@example.com', 'Hi', '<p>x</p>', _idempotency_key => $1)`,
        [key],
      ),
  sms: (key: string | null) =>
    db
      .pool('app')
      .query<{ message_id: number | null; task_id: number | null; validation_failure_message: string | null }>(
        `select message_id::int, send_sms_task_id::int as task_id, validation_failure_message
           from comms.send_sms('+14155550100', 'hi', _idempotency_key => $1)`,
        [key],
      ),
};

describe.each(['email', 'sms'] as const)('the %s channel', (channel) => {
  it('registration made the entry points, owned and granted as the hand-written ones were', async () => {
    const { rows } = await db.query<{ fn: string; definer: boolean; worker: boolean; app: boolean }>(
      `select p.oid::regprocedure::text as fn, p.prosecdef as definer,
              has_function_privilege($2, p.oid, 'execute') as worker,
              has_function_privilege($3, p.oid, 'execute') as app
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = 'comms' and p.proname = any($1::text[])
        order by 1`,
      [
        [
          `send_${channel}_supervisor_facts`,
          `send_${channel}_supervisor`,
          `record_${channel}_success`,
          `record_${channel}_failure`,
          `kickoff_send_${channel}`,
        ],
        db.dbUsers.worker,
        db.dbUsers.app,
      ],
    );
    expect(rows).toEqual([
      {
        fn: `comms.kickoff_send_${channel}(bigint,timestamp with time zone)`,
        definer: true,
        worker: false,
        app: false,
      },
      { fn: `comms.record_${channel}_failure(jsonb)`, definer: true, worker: true, app: false },
      { fn: `comms.record_${channel}_success(jsonb)`, definer: true, worker: true, app: false },
      { fn: `comms.send_${channel}_supervisor(jsonb)`, definer: true, worker: true, app: false },
      { fn: `comms.send_${channel}_supervisor_facts(bigint)`, definer: false, worker: false, app: false },
    ]);
  });

  it('a before_handler refuses a payload without a positive attempt id, and an unknown attempt', async () => {
    const payload = async (body: object) =>
      (
        await db
          .pool('worker')
          .query<{ r: unknown }>(`select internal.run_function($1, $2::jsonb) as r`, [
            `comms.get_${channel}_payload`,
            JSON.stringify(body),
          ])
      ).rows[0].r;
    for (const id of [undefined, 0, -3, 'x']) {
      expect(await payload({ [`send_${channel}_attempt_id`]: id })).toEqual({
        success: false,
        validation_failure_message: `send_${channel}_attempt_id must be a positive integer`,
      });
    }
    expect(await payload({ [`send_${channel}_attempt_id`]: 987654 })).toEqual({
      success: false,
      validation_failure_message: `send_${channel}_attempt 987654 not found`,
    });
  });

  it('a repeated key returns the first message and task; a key used on the other channel is refused', async () => {
    const key = `channel-test-${channel}`;
    const first = (await send[channel](key)).rows[0];
    expect(first).toMatchObject({ validation_failure_message: null });
    expect((await send[channel](key)).rows[0]).toEqual(first);
    const other = channel === 'email' ? 'sms' : 'email';
    expect((await send[other](key)).rows[0]).toEqual({
      message_id: null,
      task_id: null,
      validation_failure_message: 'idempotency_key was already used for a message on another channel',
    });
    const { rows } = await db.query<{ n: number }>(
      'select count(*)::int as n from comms.message where idempotency_key = $1',
      [key],
    );
    expect(rows[0].n).toBe(1);
  });

  it('a second kickoff of a message returns its task and enqueues no second supervisor run', async () => {
    const sent = (await send[channel](null)).rows[0];
    const tasks = async () => (await db.query<{ n: number }>('select count(*)::int as n from queues.task')).rows[0].n;
    const before = await tasks();
    const again = await db.query<{ task_id: number; validation_failure_message: string | null }>(
      `select send_${channel}_task_id::int as task_id, validation_failure_message from comms.kickoff_send_${channel}($1)`,
      [sent.message_id],
    );
    expect(again.rows[0]).toEqual({ task_id: sent.task_id, validation_failure_message: null });
    expect(await tasks()).toBe(before);
  });
});

describe('the shared functions', () => {
  it('refuse a channel without a message table or process (22023), and are the owner’s only', async () => {
    await expect(db.query(`select * from comms.kickoff_channel_send('fax', 1, null)`)).rejects.toMatchObject({
      code: '22023',
      message: 'channel fax: table comms.fax_message does not exist',
    });
    await expect(db.query(`select * from comms.create_channel_message('fax', null)`)).rejects.toMatchObject({
      code: '22023',
    });
    await expect(db.query(`select comms.register_message_channel('fax', 3, 30, 3600)`)).rejects.toMatchObject({
      code: '22023',
      message: 'channel fax: table comms.fax_message does not exist',
    });
    for (const user of ['app', 'worker', 'api'] as const) {
      await expect(
        db.pool(user).query(`select * from comms.kickoff_channel_send('email', 1, null)`),
      ).rejects.toMatchObject({ code: '42501' });
      await expect(
        db.pool(user).query(`select comms.register_message_channel('email', 3, 30, 3600)`),
      ).rejects.toMatchObject({ code: '42501' });
    }
  });
});
