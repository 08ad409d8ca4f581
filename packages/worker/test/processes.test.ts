// The seed's checklist end to end: the real worker runs the SQL business processes and
// calls the real Resend, Twilio and Google Cloud Storage SDKs, pointed at local fake
// servers (and the files service) that the test starts and tells to fail.
import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createFilesService } from '@org/files-service';
import { createFilesServiceDeleteProvider, createResendEmailProvider, createTwilioSmsProvider } from '@org/providers';
import {
  startFakeGcs,
  startFakeResend,
  startFakeTwilio,
  type FakeGcs,
  type FakeResend,
  type FakeTwilio,
} from '@org/providers/testing';
import { defaultRegistry } from '../src/command.js';
import { createLogger, Worker } from '../src/index.js';
import { eventually } from './support/fixtures.js';

let db: TestDatabase;
let resend: FakeResend;
let twilio: FakeTwilio;
let gcs: FakeGcs;
let filesService: ReturnType<typeof createFilesService>;
let worker: Worker;
const TOKEN = 'files-service-token-for-process-tests';

beforeAll(async () => {
  db = await createTestDatabase();
  // Supervisor backoffs of 5 s, 10 s, ... become 10 ms, 20 ms, ...
  await db.query(`insert into internal.setting (name, value) values ('backoff_scale', '0.002')`);
  resend = await startFakeResend();
  twilio = await startFakeTwilio();
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  gcs = await startFakeGcs({ publicKey });
  filesService = createFilesService(
    {
      token: TOKEN,
      buckets: ['recordings'],
      credentials: {
        client_email: 'files@test-project.iam.gserviceaccount.com',
        private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
        project_id: 'test-project',
      },
      apiEndpoint: gcs.url,
      databaseUrl: db.url('worker'),
    },
    { logger: false },
  );
  const serviceUrl = await filesService.listen({ port: 0, host: '127.0.0.1' });
  const registry = defaultRegistry({
    email: createResendEmailProvider({ apiKey: 're_test_key', baseUrl: resend.url }),
    sms: createTwilioSmsProvider({
      accountSid: `AC${'1'.repeat(32)}`,
      authToken: 'twilio-token',
      fromNumber: '+15550001111',
      baseUrl: twilio.url,
    }),
    file_delete: createFilesServiceDeleteProvider({ serviceUrl, token: TOKEN }),
  });
  worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: null,
    workerId: 'process-test',
    concurrency: 8,
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
  await filesService?.close();
  await Promise.all([resend?.close(), twilio?.close(), gcs?.close()]);
  await db?.drop();
});
beforeEach(() => {
  resend.reset();
  twilio.reset();
  gcs.reset();
});

const one = async (sql: string, params: unknown[] = []) => (await db.query(sql, params)).rows[0];
const exists = async (sql: string, params: unknown[]) => (await db.query(sql, params)).rowCount === 1;

async function sendEmail(to: string) {
  const row = (
    await db
      .pool('app')
      .query(`select * from comms.send_email('Team <team@example.com>', $1, 'Welcome', '<p>Hello</p>')`, [to])
  ).rows[0];
  expect(row.validation_failure_message).toBeNull();
  return row.send_email_task_id as string;
}

async function emailOutcome(taskId: string) {
  await eventually(
    async () =>
      (await exists('select 1 from comms.send_email_task_succeeded where send_email_task_id = $1', [taskId])) ||
      (await exists('select 1 from comms.send_email_task_failed where send_email_task_id = $1', [taskId])),
    `email task ${taskId} terminal`,
  );
  return one(
    `select (select count(*)::int from comms.send_email_attempt where send_email_task_id = $1) as attempts,
            (select count(*)::int from comms.send_email_attempt_failed f join comms.send_email_attempt a using (send_email_attempt_id)
              where a.send_email_task_id = $1) as failures,
            exists (select 1 from comms.send_email_task_succeeded where send_email_task_id = $1) as succeeded,
            (select reason from comms.send_email_task_failed where send_email_task_id = $1) as failed_reason`,
    [taskId],
  );
}

describe('email through Resend', () => {
  it('happy path: one attempt, one request with the namespaced attempt id as Idempotency-Key', async () => {
    const taskId = await sendEmail('ada@example.com');
    expect(await emailOutcome(taskId)).toEqual({ attempts: 1, failures: 0, succeeded: true, failed_reason: null });
    expect(resend.emails).toHaveLength(1);
    const attempt = await one(
      'select send_email_attempt_id::text as id from comms.send_email_attempt where send_email_task_id = $1',
      [taskId],
    );
    // Namespaced by the database (system identifier and name), so databases sharing a
    // Resend account never share a key.
    expect(resend.emails[0].idempotencyKey).toMatch(new RegExp(`^[0-9]+:${db.name}:send_email_attempt:${attempt.id}$`));
    expect(resend.emails[0].body).toMatchObject({ to: 'ada@example.com', subject: 'Welcome', html: '<p>Hello</p>' });
  });

  it('one failure then success', async () => {
    resend.failNext(1, 500);
    const taskId = await sendEmail('bob@example.com');
    expect(await emailOutcome(taskId)).toEqual({ attempts: 2, failures: 1, succeeded: true, failed_reason: null });
    expect(resend.requests.length).toBe(2);
  });

  it('max attempts exhausted', async () => {
    resend.failNext(10, 503);
    const taskId = await sendEmail('cy@example.com');
    const outcome = await emailOutcome(taskId);
    expect(outcome).toMatchObject({ attempts: 3, failures: 3, succeeded: false });
    expect(outcome.failed_reason).toMatch(/max_attempts/);
    expect(resend.requests.length).toBe(3);
  });
});

describe('SMS through Twilio', () => {
  async function sendSms(to: string) {
    const row = (await db.pool('app').query(`select * from comms.send_sms($1, 'Your code is 1234')`, [to])).rows[0];
    expect(row.validation_failure_message).toBeNull();
    const taskId = row.send_sms_task_id as string;
    await eventually(
      async () =>
        (await exists('select 1 from comms.send_sms_task_succeeded where send_sms_task_id = $1', [taskId])) ||
        (await exists('select 1 from comms.send_sms_task_failed where send_sms_task_id = $1', [taskId])),
      `sms task ${taskId} terminal`,
    );
    return one(
      `select (select count(*)::int from comms.send_sms_attempt where send_sms_task_id = $1) as attempts,
              exists (select 1 from comms.send_sms_task_succeeded where send_sms_task_id = $1) as succeeded`,
      [taskId],
    );
  }

  it('happy path', async () => {
    expect(await sendSms('+14155550100')).toEqual({ attempts: 1, succeeded: true });
    expect(twilio.messages).toHaveLength(1);
    expect(twilio.requests[0].form).toMatchObject({
      To: '+14155550100',
      From: '+15550001111',
      Body: 'Your code is 1234',
    });
  });

  it('one failure then success', async () => {
    twilio.failNext(1, 500);
    expect(await sendSms('+14155550101')).toEqual({ attempts: 2, succeeded: true });
  });

  it('max attempts exhausted', async () => {
    twilio.failNext(10, 500);
    expect(await sendSms('+14155550102')).toEqual({ attempts: 3, succeeded: false });
  });
});

async function addFile(accountId: number, key: string): Promise<number> {
  gcs.put('recordings', key, 'audio');
  return (
    await db.query(
      `insert into files.file (account_id, bucket, object_key) values ($1, 'recordings', $2) returning file_id::int`,
      [accountId, key],
    )
  ).rows[0].file_id;
}

async function seedAccount(files: number) {
  const accountId = (
    await db.query(
      `insert into accounts.account (email, display_name) values ('u' || random() || '@example.com', 'Ada') returning account_id::int`,
    )
  ).rows[0].account_id as number;
  const fileIds = [];
  for (let i = 0; i < files; i++) fileIds.push(await addFile(accountId, `accounts/${accountId}/rec-${i}.webm`));
  return { accountId, fileIds };
}

describe('file deletion through the files service and GCS', () => {
  async function deleteFile(fileId: number) {
    const row = (await db.pool('app').query('select * from files.kickoff_file_deletion($1)', [fileId])).rows[0];
    expect(row.validation_failure_message).toBeNull();
    const taskId = row.file_deletion_task_id;
    await eventually(
      async () =>
        (await exists('select 1 from files.file_deletion_task_succeeded where file_deletion_task_id = $1', [taskId])) ||
        (await exists('select 1 from files.file_deletion_task_failed where file_deletion_task_id = $1', [taskId])),
      'file deletion terminal',
    );
    return one(
      `select exists (select 1 from files.file_deletion_task_succeeded where file_deletion_task_id = $1) as succeeded,
              files.is_file_deleted($2) as marked, files.is_file_deletion_stuck($2) as stuck`,
      [taskId, fileId],
    );
  }

  it('happy path: the object is gone and the file marked deleted', async () => {
    const { accountId } = await seedAccount(0);
    const fileId = await addFile(accountId, 'loose/a.webm');
    expect(await deleteFile(fileId)).toEqual({ succeeded: true, marked: true, stuck: false });
    expect(gcs.has('recordings', 'loose/a.webm')).toBe(false);
  });

  it('stuck path: storage keeps failing, the file is stuck and the task failed', async () => {
    const { accountId } = await seedAccount(0);
    const fileId = await addFile(accountId, 'loose/b.webm');
    gcs.failNext(100, 503);
    expect(await deleteFile(fileId)).toEqual({ succeeded: false, marked: false, stuck: true });
    expect(gcs.has('recordings', 'loose/b.webm')).toBe(true);
  });
});

describe('account deletion supervision tree', () => {
  async function deleteAccount(accountId: number) {
    const row = (await db.pool('app').query('select * from api.request_account_deletion($1)', [accountId])).rows[0];
    expect(row.validation_failure_message ?? null).toBeNull();
    await eventually(
      async () =>
        await exists(
          `select 1 from accounts.account_deletion_task t
            where t.account_id = $1
              and (exists (select 1 from accounts.account_deletion_task_succeeded s where s.account_deletion_task_id = t.account_deletion_task_id)
                or exists (select 1 from accounts.account_deletion_task_failed f where f.account_deletion_task_id = t.account_deletion_task_id))`,
          [accountId],
        ),
      'account deletion terminal',
      60_000,
    );
    return one(
      `select exists (select 1 from accounts.account_deletion_task_succeeded s join accounts.account_deletion_task t using (account_deletion_task_id) where t.account_id = $1) as succeeded,
              (select reason from accounts.account_deletion_task_failed f join accounts.account_deletion_task t using (account_deletion_task_id) where t.account_id = $1) as failed_reason,
              array(select flag from accounts.account_flag where account_id = $1 order by flag) as flags`,
      [accountId],
    );
  }

  it('happy path: every file deleted and marked, anonymized, root succeeded', async () => {
    const { accountId, fileIds } = await seedAccount(3);
    expect(await deleteAccount(accountId)).toEqual({
      succeeded: true,
      failed_reason: null,
      flags: ['anonymized', 'deleted'],
    });
    for (const fileId of fileIds) expect((await one('select files.is_file_deleted($1) as d', [fileId])).d).toBe(true);
    expect(gcs.list().filter((o) => o.startsWith(`recordings/accounts/${accountId}/`))).toEqual([]);
  });

  it('file deletion stuck: the root fails and anonymization never starts', async () => {
    const { accountId } = await seedAccount(1);
    gcs.failNext(100, 503);
    const outcome = await deleteAccount(accountId);
    expect(outcome.succeeded).toBe(false);
    expect(outcome.failed_reason).toMatch(/file deletion stuck/);
    expect(outcome.flags).toEqual(['deleted']);
  });

  it('anonymization stuck: the root fails with the reason', async () => {
    const { accountId } = await seedAccount(1);
    await db.query(
      `insert into accounts.anonymization_failure_injection (account_id, error_message) values ($1, 'injected')`,
      [accountId],
    );
    const outcome = await deleteAccount(accountId);
    expect(outcome.succeeded).toBe(false);
    expect(outcome.failed_reason).toMatch(/anonymization stuck/);
    expect(outcome.flags).toEqual(['deleted']);
  });
});
