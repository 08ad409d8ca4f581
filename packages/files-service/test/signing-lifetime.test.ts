// A signed DELETE URL is bound to the attempt it was signed for. Storage checks nothing
// but the signature and its expiry, so the service signs only while a worker holds a live
// lease on the deletion attempt, and for no longer than that lease has left: however the
// attempt or its process ends (the attempt fails, the queue gives up on it, the process
// fails, the account deletion fails and the files must stay), a URL signed during it is
// refused by storage once the lease is over. The real GCS SDK signs; the fake storage
// server checks the signature and the expiry against a clock the test moves.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createFilesService } from '@org/files-service';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { startFakeGcs, type FakeGcs } from '@org/providers/testing';
import { scheduleDeletions, testConfig, testServiceAccount, TOKEN, type HeldAttempt } from './helpers.ts';

const BUCKET = 'user-uploads';
const LEASE_SECONDS = 30;
const account = testServiceAccount();
let db: TestDatabase;
let gcs: FakeGcs;
let app: FastifyInstance;
/** How far storage's clock is ahead of the real one. */
let storageAhead = 0;
beforeAll(async () => {
  db = await createTestDatabase();
  gcs = await startFakeGcs({ publicKey: account.publicKey, now: () => Date.now() + storageAhead });
  app = createFilesService(testConfig(account.credentials, gcs.url, db.url('worker')), { logger: false });
  await app.ready();
});
afterAll(async () => {
  await app?.close();
  await gcs?.close();
  await db?.drop();
});
beforeEach(() => {
  storageAhead = 0;
  gcs.reset();
});

const sign = (objectKey: string) =>
  app.inject({
    method: 'POST',
    url: '/v1/signed-delete-urls',
    headers: { authorization: `Bearer ${TOKEN}` },
    payload: { bucket: BUCKET, object_key: objectKey },
  });

/** Sends the DELETE to storage with storage's clock `ahead` ms ahead of now. */
async function deleteWith(url: string, ahead: number) {
  storageAhead = ahead;
  const res = await fetch(url, { method: 'DELETE' });
  return { status: res.status, body: await res.text() };
}

/** The effective expiry of the attempt's lease (heartbeats, releases, revocations applied). */
async function leaseExpiry(held: HeldAttempt): Promise<number> {
  const { rows } = await db.query(
    'select expires_at from queues.task_lease_effective where task_id = $1 and task_lease_id = $2',
    [held.taskId, held.taskLeaseId],
  );
  return (rows[0].expires_at as Date).getTime();
}

/** Signs for the held attempt: 200, and the URL expires no later than the attempt's lease. */
async function signDuring(held: HeldAttempt): Promise<{ url: string; expires: number }> {
  gcs.put(BUCKET, held.objectKey, 'data');
  const before = Date.now();
  const res = await sign(held.objectKey);
  expect(res.statusCode, res.body).toBe(200);
  const { url, expires_at } = res.json<{ url: string; expires_at: string }>();
  const expires = Date.parse(expires_at);
  expect(expires).toBeGreaterThan(before);
  expect(expires).toBeLessThanOrEqual(await leaseExpiry(held));
  const params = new URL(url).searchParams;
  const signedAt = params
    .get('X-Goog-Date')!
    .replace(/^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/, '$1-$2-$3T$4:$5:$6Z');
  expect(Date.parse(signedAt) + Number(params.get('X-Goog-Expires')) * 1000).toBe(expires);
  return { url, expires };
}

const runAsWorker = async (name: string, payload: unknown) =>
  (
    await db
      .pool('worker')
      .query<{ r: Record<string, unknown> }>('select internal.run_function($1, $2::jsonb) as r', [
        name,
        JSON.stringify(payload),
      ])
  ).rows[0].r;

/** The file_delete task's payload, as the worker received it. */
async function taskPayload(held: HeldAttempt) {
  const { rows } = await db.query('select payload from queues.task where task_id = $1', [held.taskId]);
  return rows[0].payload as Record<string, unknown>;
}

const endings: [string, (held: HeldAttempt) => Promise<void>][] = [
  [
    'the attempt failed (storage errored; the error handler ran and the task completed failed)',
    async (held) => {
      await runAsWorker('files.record_file_delete_failure', {
        original_payload: await taskPayload(held),
        error: 'storage answered 503',
      });
      await db.pool('worker').query(`select queues.complete_task($1, $2, 'failed')`, [held.taskId, held.taskLeaseId]);
    },
  ],
  [
    'the queue gave up on the attempt (its task abandoned without an outcome)',
    async (held) => {
      await db
        .pool('worker')
        .query(`select queues.complete_task($1, $2, 'abandoned')`, [held.taskId, held.taskLeaseId]);
    },
  ],
  [
    'the process failed (run limit reached) while the attempt ran',
    async (held) => {
      await db.query(
        `insert into files.file_deletion_task_failed (file_deletion_task_id, reason)
         select file_deletion_task_id, 'run_limit_reached' from files.file_deletion_task where file_id = $1`,
        [held.fileId],
      );
    },
  ],
  [
    'the account deletion failed: leave the files',
    async (held) => {
      const { rows } = await db.query(
        `insert into accounts.account_deletion_task (account_id)
         select account_id from files.file where file_id = $1 returning account_deletion_task_id`,
        [held.fileId],
      );
      await db.query(
        `insert into accounts.account_deletion_task_failed (account_deletion_task_id, reason) values ($1, $2)`,
        [rows[0].account_deletion_task_id, `file deletion stuck for file_id ${held.fileId}`],
      );
    },
  ],
];

describe('a signed delete URL is bound to its attempt', () => {
  it.each(endings)(
    '%s: no new URL, and storage refuses the one signed during it once its lease is over',
    async (_, end) => {
      const [held] = await scheduleDeletions(db, BUCKET, [`life/${Math.random()}.wav`], LEASE_SECONDS);
      const { url } = await signDuring(held);
      await end(held);

      const again = await sign(held.objectKey);
      expect(again.statusCode).toBe(403);
      expect(again.json()).toMatchObject({ code: 'not_scheduled' });

      // Past the lease (and well within the service's 300-second URL lifetime).
      const late = await deleteWith(url, LEASE_SECONDS * 1000 + 1000);
      expect(late.status, late.body).toBe(400);
      expect(late.body).toMatch(/ExpiredToken/);
      expect(gcs.has(BUCKET, held.objectKey)).toBe(true);
    },
  );

  it('the URL works for the worker holding the lease, within it', async () => {
    const [held] = await scheduleDeletions(db, BUCKET, ['life/in-time.wav'], LEASE_SECONDS);
    const { url } = await signDuring(held);
    expect((await deleteWith(url, (LEASE_SECONDS - 5) * 1000)).status).toBe(204);
    expect(gcs.has(BUCKET, held.objectKey)).toBe(false);
  });

  it('signs only while a worker holds the attempt: not before the claim, nor after a release', async () => {
    const { rows: account } = await db.query(
      `insert into accounts.account (email) values ('queued@example.com') returning account_id`,
    );
    const { rows: file } = await db.query(
      `insert into files.file (account_id, bucket, object_key) values ($1, $2, 'life/queued.wav') returning file_id`,
      [account[0].account_id, BUCKET],
    );
    const { rows: kick } = await db
      .pool('app')
      .query('select file_deletion_task_id from files.kickoff_file_deletion($1)', [file[0].file_id]);
    await runAsWorker('files.file_deletion_supervisor', { file_deletion_task_id: kick[0].file_deletion_task_id });
    gcs.put(BUCKET, 'life/queued.wav', 'data');
    // The attempt is queued: no worker performs it yet.
    expect((await sign('life/queued.wav')).json()).toMatchObject({ code: 'not_scheduled' });
    const { rows: claimed } = await db
      .pool('worker')
      .query(`select task_id, task_lease_id from queues.claim_tasks('w', 10, array['file_delete'], $1)`, [
        LEASE_SECONDS,
      ]);
    expect(claimed).toHaveLength(1);
    expect((await sign('life/queued.wav')).statusCode).toBe(200);
    // The worker gives the lease back (shutdown): nobody performs the attempt now.
    await db
      .pool('worker')
      .query('select * from queues.release_leases(array[$1::bigint], array[$2::bigint])', [
        claimed[0].task_id,
        claimed[0].task_lease_id,
      ]);
    expect((await sign('life/queued.wav')).json()).toMatchObject({ code: 'not_scheduled' });
  });

  it('never longer than the configured lifetime, and longer after a heartbeat', async () => {
    const [held] = await scheduleDeletions(db, BUCKET, ['life/long.wav'], 3600);
    gcs.put(BUCKET, held.objectKey, 'data');
    const before = Date.now();
    const long = await sign(held.objectKey);
    expect(Date.parse(long.json().expires_at)).toBeLessThanOrEqual(before + 300_000);

    const [short] = await scheduleDeletions(db, BUCKET, ['life/short.wav'], LEASE_SECONDS);
    const { expires: first } = await signDuring(short);
    await db
      .pool('worker')
      .query('select * from queues.extend_leases(array[$1::bigint], array[$2::bigint], 120)', [
        short.taskId,
        short.taskLeaseId,
      ]);
    const extended = Date.parse((await sign(short.objectKey)).json().expires_at);
    expect(extended).toBeGreaterThan(first + 60_000);
    expect(extended).toBeLessThanOrEqual(await leaseExpiry(short));
  });
});
