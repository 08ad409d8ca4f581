import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createFilesService, FilesServiceConfigError } from '@org/files-service';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { startFakeGcs, type FakeGcs } from '@org/providers/testing';
import { scheduleDeletions, testConfig, testServiceAccount, TOKEN } from './helpers.ts';

const account = testServiceAccount();
let db: TestDatabase;
let gcs: FakeGcs;
let app: FastifyInstance;
beforeAll(async () => {
  db = await createTestDatabase();
  // The objects these tests sign for have a deletion in flight in the database, held by a
  // worker for longer than the service's URL lifetime (300 s).
  await scheduleDeletions(
    db,
    'user-uploads',
    ['users/7/recording 1.wav', 'users/7/missing.wav', 'users/7/other.wav', 'a.txt'],
    3600,
  );
  gcs = await startFakeGcs({ publicKey: account.publicKey });
  app = createFilesService(testConfig(account.credentials, gcs.url, db.url('worker')), { logger: false });
  await app.ready();
});
afterAll(async () => {
  await app?.close();
  await gcs?.close();
  await db?.drop();
});
beforeEach(() => {
  gcs.reset();
  gcs.put('user-uploads', 'users/7/recording 1.wav', 'audio');
});

const sign = (body: unknown, headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` }) =>
  app.inject({ method: 'POST', url: '/v1/signed-delete-urls', headers, payload: body as object });

describe('files service', () => {
  it('answers /healthz', async () => {
    const res = await app.inject({ method: 'GET', url: '/healthz' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ ok: true });
  });

  it('401 without a token', async () => {
    const res = await sign({ bucket: 'user-uploads', object_key: 'users/7/recording 1.wav' }, {});
    expect(res.statusCode).toBe(401);
    expect(res.json().message).toMatch(/missing bearer token/);
  });

  it('401 with a wrong token (or another scheme)', async () => {
    for (const authorization of [`Bearer ${TOKEN}x`, 'Bearer short', `Basic ${TOKEN}`]) {
      const res = await sign({ bucket: 'user-uploads', object_key: 'users/7/recording 1.wav' }, { authorization });
      expect(res.statusCode).toBe(401);
      expect(JSON.stringify(res.json())).not.toContain(TOKEN);
    }
    expect(gcs.requests).toHaveLength(0);
  });

  it('403 for a bucket it does not sign for', async () => {
    const res = await sign({ bucket: 'someone-elses-bucket', object_key: 'a.txt' });
    expect(res.statusCode).toBe(403);
    expect(res.json().message).toBe('bucket "someone-elses-bucket" is not one this service signs for (FILES_BUCKETS)');
  });

  it.each([
    ['', /object_key: must not be empty/],
    ['../x', /must not have "\." or "\.\." segments/],
    ['a/../../b', /must not have "\." or "\.\." segments/],
    ['a/./b', /segments/],
    ['/etc/passwd', /must not start with "\/"/],
    ['a\u0000b', /control characters/],
    ['line\nbreak', /control characters/],
    ['x'.repeat(1025), /at most 1024 bytes/],
    ['é'.repeat(513), /at most 1024 bytes/],
  ])('400 for the object key %j', async (object_key, message) => {
    const res = await sign({ bucket: 'user-uploads', object_key });
    expect(res.statusCode).toBe(400);
    expect(res.json().message).toMatch(message);
  });

  it.each([
    [{ bucket: 'user-uploads' }, /object_key: /],
    [{ object_key: 'a' }, /bucket: /],
    [{ bucket: 'Bad_Bucket!', object_key: 'a' }, /bucket: must be a bucket name/],
    [{ bucket: 'user-uploads', object_key: 'a', extra: 1 }, /Unrecognized key/],
    [{ bucket: 'user-uploads', object_key: 5 }, /object_key: /],
  ])('400 for the body %j', async (body, message) => {
    const res = await sign(body);
    expect(res.statusCode).toBe(400);
    expect(res.json().message).toMatch(message);
  });

  it('400 for a body nested thousands of levels deep (as deep as the body limit allows)', async () => {
    for (const payload of [
      '['.repeat(8000) + ']'.repeat(8000),
      '{"bucket":' + '['.repeat(8000) + ']'.repeat(8000) + ',"object_key":"a"}',
      '{"bucket":"user-uploads","object_key":"a","__proto__":' + '{"a":'.repeat(1500) + '1' + '}'.repeat(1500) + '}',
    ]) {
      const res = await app.inject({
        method: 'POST',
        url: '/v1/signed-delete-urls',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        payload,
      });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json().message).toEqual(expect.any(String));
    }
    expect(gcs.requests).toHaveLength(0);
  });

  it('400 for a body that is not JSON', async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/v1/signed-delete-urls',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      payload: '{nope',
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().message).toBeTruthy();
  });

  it('404 "unknown object" for an object not in the bucket', async () => {
    const res = await sign({ bucket: 'user-uploads', object_key: 'users/7/missing.wav' });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toMatchObject({ code: 'unknown_object', message: expect.stringMatching(/^unknown object/) });
    expect(gcs.requests[0]).toMatchObject({
      method: 'GET',
      path: '/storage/v1/b/user-uploads/o/users%2F7%2Fmissing.wav',
    });
  });

  it('200 with a V4 signed DELETE URL pointing at the configured endpoint', async () => {
    const before = Date.now();
    const res = await sign({ bucket: 'user-uploads', object_key: 'users/7/recording 1.wav' });
    expect(res.statusCode).toBe(200);
    const { url, expires_at } = res.json<{ url: string; expires_at: string }>();
    const u = new URL(url);
    expect(u.origin).toBe(gcs.url);
    expect(u.pathname).toBe('/user-uploads/users/7/recording%201.wav');
    expect(u.searchParams.get('X-Goog-Algorithm')).toBe('GOOG4-RSA-SHA256');
    expect(u.searchParams.get('X-Goog-Credential')).toMatch(
      /^files-service@test-project\.iam\.gserviceaccount\.com\/\d{8}\/auto\/storage\/goog4_request$/,
    );
    // Valid for 300 s from the second the service was asked, however long storage took
    // to answer before the signing: X-Goog-Date + X-Goog-Expires is expires_at.
    expect(u.searchParams.get('X-Goog-Expires')).toBe('300');
    const date = u.searchParams.get('X-Goog-Date') ?? '';
    const signedAt = Date.parse(date.replace(/^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/, '$1-$2-$3T$4:$5:$6Z'));
    expect(new Date(signedAt + 300_000).toISOString()).toBe(expires_at);
    expect(u.searchParams.get('X-Goog-SignedHeaders')).toBe('host');
    expect(u.searchParams.get('X-Goog-Signature')).toMatch(/^[0-9a-f]{512}$/);
    const expires = Date.parse(expires_at);
    expect(expires).toBeGreaterThan(before + 290_000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 300_000);

    // The fake GCS checks the signature with the account's public key, and deletes.
    const del = await fetch(url, { method: 'DELETE' });
    expect(del.status).toBe(204);
    expect(gcs.has('user-uploads', 'users/7/recording 1.wav')).toBe(false);
  });

  it('a tampered signed URL is refused by storage (the fake checks signatures)', async () => {
    const res = await sign({ bucket: 'user-uploads', object_key: 'users/7/recording 1.wav' });
    const url = new URL(res.json<{ url: string }>().url);
    url.pathname = '/user-uploads/users/7/other.wav';
    gcs.put('user-uploads', 'users/7/other.wav');
    const del = await fetch(url, { method: 'DELETE' });
    expect(del.status).toBe(403);
    expect(await del.text()).toContain('SignatureDoesNotMatch');
    expect(gcs.has('user-uploads', 'users/7/other.wav')).toBe(true);
  });

  it('502 when storage cannot be asked', async () => {
    const broken = createFilesService(testConfig(account.credentials, 'http://127.0.0.1:1', db.url('worker')), {
      logger: false,
      storageMaxRetries: 0,
    });
    try {
      const res = await broken.inject({
        method: 'POST',
        url: '/v1/signed-delete-urls',
        headers: { authorization: `Bearer ${TOKEN}` },
        payload: { bucket: 'user-uploads', object_key: 'a.txt' },
      });
      expect(res.statusCode).toBe(502);
      expect(res.json().message).toBe('storage lookup failed');
    } finally {
      await broken.close();
    }
  });

  it('refuses to start without credentials, and names bad config values', () => {
    const config = testConfig(account.credentials, gcs.url, db.url('worker'));
    const { credentials: _, ...noCredentials } = config;
    expect(() => createFilesService(noCredentials as typeof config)).toThrow(
      /no GCS service-account credentials configured/,
    );
    expect(() => createFilesService({ ...config, token: 'short' })).toThrow(FilesServiceConfigError);
    expect(() => createFilesService({ ...config, token: 'short' })).toThrow(/token: must be at least 16 characters/);
    expect(() => createFilesService({ ...config, buckets: [] })).toThrow(/buckets: must name at least one bucket/);
    expect(() => createFilesService({ ...config, apiEndpoint: 'nope' })).toThrow(
      /apiEndpoint: must be an http\(s\) URL/,
    );
    expect(() => createFilesService({ ...config, databaseUrl: 'mysql://x' })).toThrow(
      /databaseUrl: must be a postgres:\/\/ URL/,
    );
  });

  it('403 "not_scheduled" for an object the database has not scheduled for deletion; storage is never asked', async () => {
    gcs.put('user-uploads', 'users/8/passport.pdf', 'secret');
    const res = await sign({ bucket: 'user-uploads', object_key: 'users/8/passport.pdf' });
    expect(res.statusCode).toBe(403);
    expect(res.json()).toMatchObject({
      code: 'not_scheduled',
      message: 'no deletion is scheduled for "users/8/passport.pdf" in bucket "user-uploads"',
    });
    expect(gcs.requests).toHaveLength(0);
    // Same key, another bucket: not scheduled either.
    expect((await sign({ bucket: 'other-bucket', object_key: 'users/7/recording 1.wav' })).statusCode).toBe(403);
  });

  it('403 once the attempt has an outcome, and 502 when the database cannot be asked', async () => {
    await scheduleDeletions(db, 'user-uploads', ['users/9/done.wav']);
    gcs.put('user-uploads', 'users/9/done.wav', 'x');
    expect((await sign({ bucket: 'user-uploads', object_key: 'users/9/done.wav' })).statusCode).toBe(200);
    await db.query(
      `insert into files.file_deletion_attempt_succeeded (file_deletion_attempt_id)
       select a.file_deletion_attempt_id from files.file_deletion_attempt a join files.file_deletion_task t using (file_deletion_task_id)
         join files.file f using (file_id) where f.object_key = 'users/9/done.wav'`,
    );
    expect((await sign({ bucket: 'user-uploads', object_key: 'users/9/done.wav' })).json()).toMatchObject({
      code: 'not_scheduled',
    });
    const noDb = createFilesService(
      testConfig(account.credentials, gcs.url, 'postgres://nobody:wrong@127.0.0.1:1/none'),
      { logger: false },
    );
    try {
      const res = await noDb.inject({
        method: 'POST',
        url: '/v1/signed-delete-urls',
        headers: { authorization: `Bearer ${TOKEN}` },
        payload: { bucket: 'user-uploads', object_key: 'a.txt' },
      });
      expect(res.statusCode).toBe(502);
      expect(res.json().message).toBe('the database could not be asked');
    } finally {
      await noDb.close();
    }
  });
});
