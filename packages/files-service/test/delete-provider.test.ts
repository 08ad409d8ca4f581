// The file_delete provider end to end: provider → files service → signed URL → fake GCS.
import { createServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type { ProviderContext } from '@org/contracts';
import { createFilesService } from '@org/files-service';
import { createFilesServiceDeleteProvider } from '@org/providers';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { startFakeGcs, type FakeGcs } from '@org/providers/testing';
import { scheduleDeletions, testConfig, testServiceAccount, TOKEN } from './helpers.ts';

const account = testServiceAccount();
let db: TestDatabase;
let gcs: FakeGcs;
let app: FastifyInstance;
let serviceUrl: string;
beforeAll(async () => {
  db = await createTestDatabase();
  await scheduleDeletions(db, 'user-uploads', ['users/7/rec ü.wav', 'race.wav', 'a.wav', 'b.wav']);
  gcs = await startFakeGcs({ publicKey: account.publicKey });
  app = createFilesService(testConfig(account.credentials, gcs.url, db.url('worker')), { logger: false });
  await app.listen({ port: 0, host: '127.0.0.1' });
  serviceUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await app?.close();
  await gcs?.close();
  await db?.drop();
});
beforeEach(() => gcs.reset());

const ctx = (signal = new AbortController().signal): ProviderContext => ({
  taskId: '1',
  taskLeaseId: '2',
  taskType: 'file_delete',
  signal,
});
const payload = { file_id: 987, idempotency_key: 'attempt-9', bucket: 'user-uploads', object_key: 'users/7/rec ü.wav' };

describe('files-service delete provider', () => {
  it('deletes the object, then reports alreadyDeleted', async () => {
    gcs.put('user-uploads', 'users/7/rec ü.wav', 'audio');
    gcs.put('user-uploads', 'users/7/keep.wav', 'audio');
    const provider = createFilesServiceDeleteProvider({ serviceUrl, token: TOKEN });
    expect(provider.name).toBe('files-service');
    expect(await provider.send(payload, ctx())).toEqual({
      provider: 'files-service',
      bucket: 'user-uploads',
      object_key: 'users/7/rec ü.wav',
      alreadyDeleted: false,
    });
    expect(gcs.list()).toEqual(['user-uploads/users/7/keep.wav']);
    const del = gcs.requests.find((r) => r.method === 'DELETE')!;
    expect(del.status).toBe(204);
    expect(del.query['X-Goog-Algorithm']).toBe('GOOG4-RSA-SHA256');

    // Second attempt: the service answers 404 unknown_object.
    expect(await provider.send(payload, ctx())).toMatchObject({ alreadyDeleted: true });
  });

  it('a 404 from storage (deleted between signing and DELETE) is alreadyDeleted', async () => {
    gcs.put('user-uploads', 'race.wav');
    const provider = createFilesServiceDeleteProvider({ serviceUrl, token: TOKEN });
    // Sign, then delete the object behind the provider's back before its DELETE.
    const realFetch = globalThis.fetch;
    globalThis.fetch = async (input: string | URL | Request, init?: RequestInit) => {
      if (init?.method === 'DELETE') gcs.reset();
      return realFetch(input, init);
    };
    try {
      expect(await provider.send({ ...payload, object_key: 'race.wav' }, ctx())).toMatchObject({
        alreadyDeleted: true,
      });
    } finally {
      globalThis.fetch = realFetch;
    }
  });

  it('throws when storage fails, keeping the signature out of the message', async () => {
    gcs.put('user-uploads', 'a.wav');
    gcs.failNext(1, 503, 'backend unavailable');
    const provider = createFilesServiceDeleteProvider({ serviceUrl, token: TOKEN });
    const err = await provider.send({ ...payload, object_key: 'a.wav' }, ctx()).catch((e: Error) => e);
    expect((err as Error).message).toMatch(
      /^files-service: storage DELETE http:\/\/127\.0\.0\.1:\d+\/user-uploads\/a\.wav answered HTTP 503: .*backend unavailable/,
    );
    expect((err as Error).message).not.toContain('X-Goog-Signature');
    expect(gcs.has('user-uploads', 'a.wav')).toBe(true);
  });

  it('throws on a wrong token without showing it', async () => {
    const provider = createFilesServiceDeleteProvider({ serviceUrl, token: 'not-the-token-1234567' });
    const err = await provider.send(payload, ctx()).catch((e: Error) => e);
    expect((err as Error).message).toMatch(/answered HTTP 401: wrong bearer token/);
    expect((err as Error).message).not.toContain('not-the-token-1234567');
  });

  it('throws on a 403 bucket and on a 404 that is not "unknown object"', async () => {
    const provider = createFilesServiceDeleteProvider({ serviceUrl, token: TOKEN });
    await expect(provider.send({ ...payload, bucket: 'not-allowed' }, ctx())).rejects.toThrow(
      /HTTP 403: bucket "not-allowed"/,
    );
    const wrongPath = createFilesServiceDeleteProvider({ serviceUrl: `${serviceUrl}/wrong`, token: TOKEN });
    await expect(wrongPath.send(payload, ctx())).rejects.toThrow(/HTTP 404: no route POST/);
  });

  it('throws when the service cannot be reached', async () => {
    // A port that was free a moment ago.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const { port } = probe.address() as AddressInfo;
    await new Promise((resolve) => probe.close(resolve));
    const provider = createFilesServiceDeleteProvider({ serviceUrl: `http://127.0.0.1:${port}`, token: TOKEN });
    await expect(provider.send(payload, ctx())).rejects.toThrow(
      `files-service: request to files service http://127.0.0.1:${port}/v1/signed-delete-urls failed: ECONNREFUSED`,
    );
  });

  it('honours an aborted signal', async () => {
    gcs.put('user-uploads', 'b.wav');
    const provider = createFilesServiceDeleteProvider({ serviceUrl, token: TOKEN });
    const ac = new AbortController();
    ac.abort(new Error('lease lost'));
    await expect(provider.send({ ...payload, object_key: 'b.wav' }, ctx(ac.signal))).rejects.toThrow(
      'files-service: aborted (lease lost)',
    );
    const ac2 = new AbortController();
    const pending = provider.send({ ...payload, object_key: 'b.wav' }, ctx(ac2.signal));
    ac2.abort(new Error('shutdown'));
    await expect(pending).rejects.toThrow(/^files-service: request to files service http:.* aborted: shutdown$/);
    expect(gcs.has('user-uploads', 'b.wav')).toBe(true);
  });
});
