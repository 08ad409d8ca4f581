// A channel process ends when its attempt succeeds, with the supervisor run its backoff
// scheduled: the real worker sends emails through the Resend SDK (a local fake server)
// with the real 5 s backoff, and every process takes exactly three tasks (the first run,
// the email, and the scheduled run, made due at the success), none left pending.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createResendEmailProvider } from '@org/providers';
import { startFakeResend, type FakeResend } from '@org/providers/testing';
import { createLogger, dbFunctionProcessor, channelTaskProcessor, ProcessorRegistry, Worker } from '../src/index.js';
import { eventually } from './support/fixtures.js';

let db: TestDatabase;
let resend: FakeResend;
let worker: Worker;

beforeAll(async () => {
  db = await createTestDatabase();
  resend = await startFakeResend();
  worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: ['db_function', 'email'],
    workerId: 'wakeup-test',
    concurrency: 4,
    pollIntervalMs: 50,
    heartbeatIntervalMs: 1000,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 2000,
    registry: new ProcessorRegistry()
      .register('db_function', dbFunctionProcessor())
      .register(
        'email',
        channelTaskProcessor(createResendEmailProvider({ apiKey: 're_test_key', baseUrl: resend.url })),
      ),
    logger: createLogger('silent'),
  });
  await worker.start();
});
afterAll(async () => {
  await worker?.stop();
  await resend?.close();
  await db?.drop();
});

describe('a successful attempt wakes the scheduled supervisor run', () => {
  it('ten email processes end with three tasks each, the scheduled run made due at the success', async () => {
    const { rows } = await db.pool('app').query<{ id: string }>(
      `select (comms.send_email('Team <team@example.com>', 'user' || g || '@example.com', 'Hi', '<p>Hi</p>'))
                .send_email_task_id::text as id
         from generate_series(1, 10) g`,
    );
    const roots = rows.map((r) => r.id);
    await eventually(
      async () =>
        (
          await db.query<{ n: number }>(
            'select count(*)::int as n from comms.send_email_task_succeeded where send_email_task_id = any($1::bigint[])',
            [roots],
          )
        ).rows[0].n === roots.length,
      'every process succeeded',
    );
    expect(resend.emails).toHaveLength(roots.length);
    // Per root: its queue tasks, and how the last run came to be due.
    const { rows: perRoot } = await db.query<{
      root: string;
      tasks: number;
      pending: number;
      made_due: number;
      due_before_backoff: boolean;
    }>(
      `select r.id as root,
              (select count(*)::int from queues.task t where t.payload ->> 'send_email_task_id' = r.id) as tasks,
              (select count(*)::int from queues.task_pending p join queues.task t using (task_id)
                where t.payload ->> 'send_email_task_id' = r.id) as pending,
              (select count(*)::int from queues.task_run_now n join queues.task t using (task_id)
                where t.payload ->> 'send_email_task_id' = r.id) as made_due,
              -- The run was scheduled 5 s after the first run and ran at the success.
              (select bool_and(n.requested_at < t.scheduled_at) from queues.task_run_now n join queues.task t using (task_id)
                where t.payload ->> 'send_email_task_id' = r.id) as due_before_backoff
         from unnest($1::text[]) r(id)
        order by 1`,
      [roots],
    );
    expect(perRoot).toEqual(
      [...roots].sort().map((root) => ({ root, tasks: 3, pending: 0, made_due: 1, due_before_backoff: true })),
    );
  });
});
