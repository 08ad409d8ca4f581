// The send-email process end to end, with the worker played by hand (sql/test-support):
// the seeds' checklist (happy path, one failure then success, attempts exhausted), future
// sends, validation, redelivery, isolation level and the provider payload contract.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { emailPayload } from '@org/contracts';
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
  'comms.send_email_attempt',
  'comms.send_email_attempt_succeeded',
  'comms.send_email_attempt_failed',
  'comms.send_email_task_succeeded',
  'comms.send_email_task_failed',
];

async function sendEmail(overrides: Partial<Record<string, unknown>> = {}) {
  const args = {
    from: 'Team <team@example.com>',
    to: 'ada@example.com',
    subject: 'Hello',
    html: '<p>Hi</p>',
    text: null,
    replyTo: null,
    scheduledAt: null,
    key: null,
    ...overrides,
  };
  const { rows } = await db
    .pool('app')
    .query(
      `select message_id::int, send_email_task_id::int, validation_failure_message from comms.send_email($1, $2, $3, $4, $5, $6, $7, $8)`,
      [args.from, args.to, args.subject, args.html, args.text, args.replyTo, args.scheduledAt, args.key],
    );
  return rows[0] as {
    message_id: number | null;
    send_email_task_id: number | null;
    validation_failure_message: string | null;
  };
}

const facts = async (taskId: number) =>
  (await db.query('select * from comms.send_email_supervisor_facts($1)', [taskId])).rows[0];
const failureReason = async (taskId: number) =>
  (await db.query('select reason from comms.send_email_task_failed where send_email_task_id = $1', [taskId])).rows[0]
    ?.reason as string | undefined;
const succeededTask = async (taskId: number) =>
  (await db.query('select 1 from comms.send_email_task_succeeded where send_email_task_id = $1', [taskId])).rowCount ===
  1;
/** Drives only this root's tasks (other tests' roots are left alone). */
const driveRoot = (taskId: number, provider?: DriveOptions['provider']) =>
  drive(db, { provider, rootKey: 'send_email_task_id', rootId: taskId });
/** Claims what is due at `at` (default: one second ahead, before any backoff), keeps this root's tasks. */
const claimRoot = async (root: number, at = new Date(Date.now() + 1000)) =>
  (await claimDue(db, at)).filter((t) => Number(t.payload.send_email_task_id) === root);

describe('send email: the seed checklist', () => {
  it('happy path: one attempt, the provider accepts it, the task succeeds', async () => {
    const sent = await sendEmail({ text: 'Hi', replyTo: 'help@example.com' });
    expect(sent.validation_failure_message).toBeNull();
    const { processed } = await driveRoot(sent.send_email_task_id!);

    const emails = processed.filter((p) => p.task.task_type === 'email');
    expect(emails).toHaveLength(1);
    const providerPayload = emails[0].result.payload as Record<string, unknown>;
    expect(emailPayload.safeParse(providerPayload).success).toBe(true);
    expect(providerPayload).toEqual({
      message_id: sent.message_id,
      idempotency_key: expect.stringMatching(
        new RegExp(`^[0-9]+:[a-z0-9_]+:send_email_attempt:${String(emails[0].task.payload.send_email_attempt_id)}$`),
      ),
      from_address: 'Team <team@example.com>',
      to_address: 'ada@example.com',
      subject: 'Hello',
      html: '<p>Hi</p>',
      text: 'Hi',
      reply_to: 'help@example.com',
    });
    expect(emails[0].task.payload).toMatchObject({
      task_type: 'email',
      send_email_task_id: sent.send_email_task_id,
      before_handler: 'comms.get_email_payload',
      success_handler: 'comms.record_email_success',
      error_handler: 'comms.record_email_failure',
    });
    expect(await facts(sent.send_email_task_id!)).toMatchObject({
      has_task_succeeded: true,
      task_failure: null,
      has_success: true,
      num_attempts: 1,
      num_failures: 0,
      num_outstanding: 0,
    });
    // The last supervisor run saw the terminal fact and enqueued nothing more.
    expect(processed.at(-1)!.result).toEqual({ success: true, payload: { status: 'succeeded' } });
    expect(await pendingFor(db, 'send_email_task_id', sent.send_email_task_id!)).toEqual([]);
  });

  it('one failure, then success on the retry', async () => {
    const sent = await sendEmail();
    let calls = 0;
    const { processed } = await driveRoot(sent.send_email_task_id!, () =>
      ++calls === 1 ? { ok: false, error: 'provider 503' } : { ok: true, worker_payload: { id: 're_1' } },
    );
    expect(processed.filter((p) => p.task.task_type === 'email')).toHaveLength(2);
    expect(await facts(sent.send_email_task_id!)).toMatchObject({
      has_task_succeeded: true,
      num_attempts: 2,
      num_failures: 1,
      num_outstanding: 0,
    });
    const { rows } = await db.query(
      `select f.error_message from comms.send_email_attempt_failed f
         join comms.send_email_attempt a using (send_email_attempt_id) where a.send_email_task_id = $1`,
      [sent.send_email_task_id],
    );
    expect(rows).toEqual([{ error_message: 'provider 503' }]);
  });

  it('a successful attempt ends the process at once: its success handler makes the scheduled run due now', async () => {
    const sent = await sendEmail();
    const root = sent.send_email_task_id!;
    // The clock stays one second ahead: no backoff (5 s and more) is ever reached.
    const ours = () => claimRoot(root);
    const [first] = await ours();
    expect((await processTask(db, first)).result).toMatchObject({ payload: { status: 'attempt_scheduled' } });
    // The run it scheduled after its backoff, recorded with the run.
    const [scheduled] = (await pendingFor(db, 'send_email_task_id', root)).filter((t) => t.task_type === 'db_function');
    const { rows: runs } = await db.query<{ next_task_id: string }>(
      'select next_task_id::text from comms.send_email_supervisor_run where send_email_task_id = $1',
      [root],
    );
    expect(runs).toEqual([{ next_task_id: scheduled.task_id }]);
    // The process's timeline shows it with the run.
    const { rows: timeline } = await db.query<{ detail: { next_task_id: number } }>(
      `select detail from admin.process_timeline('send_email', $1) where fact = 'supervisor_run'`,
      [root],
    );
    expect(timeline.map((f) => String(f.detail.next_task_id))).toEqual([scheduled.task_id]);
    const [email] = await ours();
    expect(email.task_type).toBe('email');
    await processTask(db, email);
    // That same run is now due, and it is the only one: no second run beside it.
    expect((await pendingFor(db, 'send_email_task_id', root)).map((t) => t.task_id)).toEqual([scheduled.task_id]);
    const { rows: asked } = await db.query('select 1 from queues.task_run_now where task_id = $1', [scheduled.task_id]);
    expect(asked).toHaveLength(1);
    const [run] = await ours();
    expect(run.task_id).toBe(scheduled.task_id);
    expect((await processTask(db, run)).result).toEqual({ success: true, payload: { status: 'succeeded' } });
    expect(await succeededTask(root)).toBe(true);
    expect(await pendingFor(db, 'send_email_task_id', root)).toEqual([]);
    // A second delivery of the success enqueues no run.
    expect(
      await runAsWorker(db, 'comms.record_email_success', { original_payload: email.payload, worker_payload: {} }),
    ).toEqual({ success: true });
    expect(await pendingFor(db, 'send_email_task_id', root)).toEqual([]);
    expect(await facts(root)).toMatchObject({ has_task_succeeded: true, num_attempts: 1 });
  });

  it('a success whose scheduled run a worker already took leaves that run to end the process', async () => {
    const sent = await sendEmail();
    const root = sent.send_email_task_id!;
    const ours = (at: Date) => claimRoot(root, at);
    const [first] = await ours(new Date(Date.now() + 1000));
    await processTask(db, first);
    // A clock past the backoff: the email and the scheduled run are taken together.
    const taken = await ours(new Date(Date.now() + 60_000));
    const email = taken.find((t) => t.task_type === 'email')!;
    const scheduled = taken.find((t) => t.task_type === 'db_function')!;
    await processTask(db, email);
    // No run holds the root, so the taken run will see the success: nothing else is due.
    const { rows: asked } = await db.query('select 1 from queues.task_run_now where task_id = $1', [scheduled.task_id]);
    expect(asked).toEqual([]);
    expect((await pendingFor(db, 'send_email_task_id', root)).map((t) => t.task_id)).toEqual([scheduled.task_id]);
    expect((await processTask(db, scheduled)).result).toEqual({ success: true, payload: { status: 'succeeded' } });
    expect(await pendingFor(db, 'send_email_task_id', root)).toEqual([]);
  });

  it('a success while a run holds the root enqueues a run due now beside it', async () => {
    const sent = await sendEmail();
    const root = sent.send_email_task_id!;
    const ours = () => claimRoot(root);
    const [first] = await ours();
    await processTask(db, first);
    const [email] = await ours();
    // A run under way: it holds the root and may have read the facts before the success.
    const run = await db.client('owner');
    try {
      await run.query('begin');
      await run.query('select 1 from comms.send_email_task where send_email_task_id = $1 for no key update', [root]);
      await processTask(db, email);
      await run.query('commit');
    } finally {
      await run.end();
    }
    const pending = await pendingFor(db, 'send_email_task_id', root);
    expect(pending).toHaveLength(2);
    const woken = pending.find((t) => t.scheduled_at.getTime() <= Date.now())!;
    expect(woken.task_type).toBe('db_function');
    const [now] = await ours();
    expect(now.task_id).toBe(woken.task_id);
    expect((await processTask(db, now)).result).toEqual({ success: true, payload: { status: 'succeeded' } });
  });

  it('a success after the scheduled run ended without a successor enqueues a run due now', async () => {
    const sent = await sendEmail();
    const root = sent.send_email_task_id!;
    const ours = () => claimRoot(root);
    const [first] = await ours();
    await processTask(db, first);
    const [scheduled] = (await pendingFor(db, 'send_email_task_id', root)).filter((t) => t.task_type === 'db_function');
    // The queue gave the scheduled run up (here: cancelled from the dashboard).
    await db.pool('api').query('select * from admin.cancel_tasks($1::bigint[])', [[scheduled.task_id]]);
    const [email] = await ours();
    await processTask(db, email);
    const [woken] = await pendingFor(db, 'send_email_task_id', root);
    expect(woken.task_id).not.toBe(scheduled.task_id);
    const [now] = await ours();
    expect(now.task_id).toBe(woken.task_id);
    expect((await processTask(db, now)).result).toEqual({ success: true, payload: { status: 'succeeded' } });
  });

  it('max attempts: three failures end in send_email_task_failed and nothing more is enqueued', async () => {
    const sent = await sendEmail();
    const { processed } = await driveRoot(sent.send_email_task_id!, () => ({ ok: false, error: 'mailbox full' }));
    expect(processed.filter((p) => p.task.task_type === 'email')).toHaveLength(3);
    expect(await failureReason(sent.send_email_task_id!)).toBe('max_attempts_reached');
    expect(await succeededTask(sent.send_email_task_id!)).toBe(false);
    expect(processed.at(-1)!.result).toMatchObject({ status: 'max_attempts_reached' });
    expect(await facts(sent.send_email_task_id!)).toMatchObject({
      num_attempts: 3,
      num_failures: 3,
      num_outstanding: 0,
    });
    // A later stray run is a no-op that reports the outcome.
    const before = await rowCounts(db, ['comms', 'queues']);
    expect(
      await runAsWorker(db, 'comms.send_email_supervisor', { send_email_task_id: sent.send_email_task_id }),
    ).toEqual({
      status: 'max_attempts_reached',
    });
    expect(await rowCounts(db, ['comms', 'queues'])).toEqual(before);
  });
});

describe('send email: scheduling', () => {
  it('a send scheduled for later runs at that time, not before', async () => {
    const at = new Date(Date.now() + 3 * 86_400_000);
    const sent = await sendEmail({ scheduledAt: at });
    const pending = await pendingFor(db, 'send_email_task_id', sent.send_email_task_id!);
    expect(pending.map((t) => [t.task_type, t.scheduled_at.toISOString()])).toEqual([
      ['db_function', at.toISOString()],
    ]);
    expect(await facts(sent.send_email_task_id!)).toMatchObject({ num_attempts: 0, num_runs: 0, scheduled_at: at });

    const { processed } = await drive(db, {
      start: new Date(at.getTime() + 1000),
      rootKey: 'send_email_task_id',
      rootId: sent.send_email_task_id!,
    });
    expect(processed.filter((p) => p.task.task_type === 'email')).toHaveLength(1);
    expect(await succeededTask(sent.send_email_task_id!)).toBe(true);
  });
});

describe('send email: kickoff', () => {
  it.each([
    [{ from: null }, 'from_address is required (3 to 320 characters)'],
    [{ to: null }, 'to_address must be an email address'],
    [{ to: 'not-an-address' }, 'to_address must be an email address'],
    [{ subject: '' }, 'subject is required (1 to 998 characters)'],
    [{ html: null }, 'html is required (at most 1000000 characters)'],
    [{ replyTo: 'nope' }, 'reply_to must be an email address'],
    [{ key: '' }, 'idempotency_key must be 1 to 200 characters'],
  ])('refuses %j with a validation_failure_message and writes nothing', async (overrides, message) => {
    const before = await rowCounts(db, ['comms', 'queues']);
    expect(await sendEmail(overrides)).toEqual({
      message_id: null,
      send_email_task_id: null,
      validation_failure_message: message,
    });
    expect(await rowCounts(db, ['comms', 'queues'])).toEqual(before);
  });

  it('kickoff_send_email with a missing or unknown message id returns a message and writes nothing', async () => {
    const before = await rowCounts(db, ['comms', 'queues']);
    const kickoff = (id: unknown) =>
      db.query('select send_email_task_id, validation_failure_message from comms.kickoff_send_email($1)', [id]);
    expect((await kickoff(null)).rows[0]).toEqual({
      send_email_task_id: null,
      validation_failure_message: 'message_id is required',
    });
    expect((await kickoff(999999)).rows[0]).toEqual({
      send_email_task_id: null,
      validation_failure_message: 'email message 999999 not found',
    });
    expect(await rowCounts(db, ['comms', 'queues'])).toEqual(before);
  });

  it('a second kickoff for the same root is a no-op', async () => {
    const sent = await sendEmail({ key: 'welcome-ada' });
    const before = await rowCounts(db, ['comms', 'queues']);
    expect(await sendEmail({ key: 'welcome-ada' })).toEqual(sent);
    const again = await db.query('select send_email_task_id::int from comms.kickoff_send_email($1)', [sent.message_id]);
    expect(again.rows[0].send_email_task_id).toBe(sent.send_email_task_id);
    expect(await rowCounts(db, ['comms', 'queues'])).toEqual(before);
  });

  it('apps may call send_email but no supervisor, handler or internal kickoff', async () => {
    await expect(db.pool('app').query(`select comms.send_email_supervisor('{}')`)).rejects.toMatchObject({
      code: '42501',
    });
    await expect(db.pool('app').query(`select comms.kickoff_send_email(1)`)).rejects.toMatchObject({ code: '42501' });
    await expect(db.pool('worker').query(`select comms.send_email('a@b.co','a@b.co','s','h')`)).rejects.toMatchObject({
      code: '42501',
    });
  });
});

describe('send email: handlers and supervisor guards', () => {
  it('the same channel task delivered twice leaves the facts exactly as one delivery does', async () => {
    for (const outcome of [
      { ok: true as const, worker_payload: { id: 're_dup' } },
      { ok: false as const, error: 'timeout' },
    ]) {
      const sent = await sendEmail();
      const mine = (t: ClaimedTask) => t.payload.send_email_task_id === sent.send_email_task_id;
      for (const task of await claimDue(db, new Date(Date.now() + 1000), ['db_function'])) await processTask(db, task);
      const emails = await claimDue(db, new Date(Date.now() + 1000), ['email']);
      for (const task of emails) await processTask(db, task, mine(task) ? () => outcome : undefined);
      const email = emails.find(mine)!;
      const once = await snapshot(db, FACTS);
      // Redelivery (a worker crashed before completing): the before handler refuses to
      // send an attempt that has an outcome, and both handlers change nothing.
      const again = await runAsWorker(db, 'comms.get_email_payload', email.payload);
      expect(again).toEqual({
        success: false,
        validation_failure_message: `send_email_attempt ${String(email.payload.send_email_attempt_id)} already has an outcome; not sending it again`,
      });
      expect(
        await runAsWorker(db, 'comms.record_email_success', {
          original_payload: email.payload,
          worker_payload: { id: 'x' },
        }),
      ).toEqual({ success: true });
      expect(
        await runAsWorker(db, 'comms.record_email_failure', { original_payload: email.payload, error: 'again' }),
      ).toEqual({
        success: true,
      });
      if (outcome.ok) expect(await snapshot(db, FACTS)).toEqual(once);
      else {
        // A success arriving after a failure (the provider did send) is recorded: it wins.
        const after = await snapshot(db, FACTS);
        expect(after['comms.send_email_attempt_failed']).toEqual(once['comms.send_email_attempt_failed']);
        expect(await facts(sent.send_email_task_id!)).toMatchObject({ has_success: true, num_failures: 0 });
      }
    }
  });

  it('handlers and the supervisor refuse bad payloads with a validation failure, writing nothing', async () => {
    const before = await rowCounts(db, ['comms', 'queues']);
    expect(await runAsWorker(db, 'comms.send_email_supervisor', {})).toEqual({
      success: false,
      validation_failure_message: 'send_email_task_id must be a positive integer',
    });
    expect(await runAsWorker(db, 'comms.send_email_supervisor', { send_email_task_id: 'x; drop' })).toMatchObject({
      success: false,
    });
    expect(await runAsWorker(db, 'comms.send_email_supervisor', { send_email_task_id: 987654 })).toEqual({
      success: false,
      validation_failure_message: 'send_email_task 987654 not found',
    });
    expect(await runAsWorker(db, 'comms.get_email_payload', { send_email_attempt_id: 987654 })).toEqual({
      success: false,
      validation_failure_message: 'send_email_attempt 987654 not found',
    });
    expect(await runAsWorker(db, 'comms.record_email_success', { worker_payload: {} })).toMatchObject({
      success: false,
    });
    expect(
      await runAsWorker(db, 'comms.record_email_failure', {
        original_payload: { send_email_attempt_id: 987654 },
        error: 'e',
      }),
    ).toEqual({ success: false, validation_failure_message: 'send_email_attempt 987654 not found' });
    expect(await rowCounts(db, ['comms', 'queues'])).toEqual(before);
  });

  it('refuses to run under REPEATABLE READ, with a clear error, and writes nothing', async () => {
    const sent = await sendEmail();
    const before = await rowCounts(db, ['comms', 'queues']);
    for (const level of ['repeatable read', 'serializable']) {
      const client = await db.client('worker');
      try {
        await client.query(`begin isolation level ${level}`);
        await expect(
          client.query(`select internal.run_function('comms.send_email_supervisor', $1)`, [
            JSON.stringify({ send_email_task_id: sent.send_email_task_id }),
          ]),
        ).rejects.toMatchObject({
          code: '25000',
          message: `comms.send_email_supervisor must run under READ COMMITTED, not ${level.toUpperCase()}`,
        });
        await client.query('rollback');
      } finally {
        await client.end();
      }
    }
    expect(await rowCounts(db, ['comms', 'queues'])).toEqual(before);
  });
});
