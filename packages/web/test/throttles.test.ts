// Provider throttles through the REST API: GET /api/throttles lists those in force
// (admin.list_throttles), POST /api/throttles/clear clears one (admin.clear_throttle) with
// its audit fact; bad input is a 400 and an unknown type a 404, nothing written; /metrics
// exports them per channel.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';

const TOKEN = 'test-token-throttles-0123456789';
const auth = { authorization: `Bearer ${TOKEN}` };

let db: TestDatabase;
let app: FastifyInstance;
beforeAll(async () => {
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), apiToken: TOKEN, logLevel: 'silent' });
  await app.ready();
});
afterAll(async () => {
  await app?.close();
  await db?.drop();
});
beforeEach(async () => {
  for (const t of ['queues.throttle_cleared', 'queues.throttle']) {
    await db.query(`alter table ${t} disable trigger forbid_update`);
    await db.query(`truncate ${t} cascade`);
    await db.query(`alter table ${t} enable trigger forbid_update`);
  }
});

const throttle = (key: string, seconds: number, reason = 'resend: HTTP 429 rate_limit_exceeded: slow down') =>
  db
    .pool('worker')
    .query(`select * from queues.record_throttle('task_type', $1, null, $2, $3, 'worker-7')`, [key, seconds, reason]);
const throttleGroup = (key: string, seconds: number) =>
  db
    .pool('worker')
    .query(`select * from queues.record_throttle('group', $1, null, $2, 'acme account: HTTP 429', 'worker-7')`, [
      key,
      seconds,
    ]);
const get = (url: string) => app.inject({ method: 'GET', url, headers: auth });
const post = (url: string, payload?: unknown) =>
  app.inject({ method: 'POST', url, payload: payload as never, headers: auth });
const clears = async () => Number((await db.query('select count(*) as n from queues.throttle_cleared')).rows[0].n);

describe('GET /api/throttles and POST /api/throttles/clear', () => {
  it('lists the throttles in force and clears one, as an audited change', async () => {
    await throttle('email', 600);
    await throttle('email', 60);
    await throttle('sms', 30, 'twilio: HTTP 429 code 20429: Too Many Requests');
    const listed = await get('/api/throttles');
    expect(listed.statusCode, listed.body).toBe(200);
    const { throttles } = listed.json<{ throttles: Record<string, unknown>[] }>();
    expect(throttles).toEqual([
      expect.objectContaining({
        key_kind: 'task_type',
        key: 'email',
        reason: 'resend: HTTP 429 rate_limit_exceeded: slow down',
        recorded_by: 'worker-7',
        reports: 2,
      }),
      expect.objectContaining({ key: 'sms', reports: 1 }),
    ]);
    expect(Date.parse(throttles[0].throttled_until as string) - Date.now()).toBeGreaterThan(500_000);

    const cleared = await post('/api/throttles/clear', { key_kind: 'task_type', key: 'email' });
    expect(cleared.statusCode, cleared.body).toBe(200);
    expect(cleared.json()).toEqual({ key_kind: 'task_type', key: 'email', cleared: true });
    expect((await get('/api/throttles')).json().throttles).toEqual([expect.objectContaining({ key: 'sms' })]);
    const again = await post('/api/throttles/clear', { key_kind: 'task_type', key: 'email' });
    expect(again.json()).toEqual({ key_kind: 'task_type', key: 'email', cleared: false });
    const { rows } = await db.query(`select task_type from admin.api_change where action = 'clear_throttle'`);
    expect(rows).toEqual([{ task_type: 'email' }, { task_type: 'email' }]);
  });

  it.each([
    ['a missing body', undefined, 'body'],
    ['no key', { key_kind: 'task_type' }, 'key'],
    ['an unknown kind', { key_kind: 'tenant', key: 'acme' }, "key_kind must be 'task_type' or 'group'"],
    ['a blank group key', { key_kind: 'group', key: '  ' }, 'key must be 1 to 200 characters, not blank'],
    ['an empty group key', { key_kind: 'group', key: '' }, 'key must be 1 to 200 characters, not blank'],
    ['a group key too long', { key_kind: 'group', key: 'x'.repeat(201) }, 'key must be 1 to 200 characters'],
    ['a malformed task type', { key_kind: 'task_type', key: 'Not A Type!' }, 'task_type must be a task type'],
    ['an extra field', { key_kind: 'task_type', key: 'email', until: 'now' }, 'until'],
  ])('refuses %s with a 400 and writes nothing', async (_name, body, message) => {
    await throttle('email', 600);
    const res = await post('/api/throttles/clear', body);
    expect(res.statusCode, res.body).toBe(400);
    expect(res.body).toContain(message);
    expect(await clears()).toBe(0);
  });

  it('lists and clears a group key throttle; /metrics exports it', async () => {
    await throttleGroup('acme', 600);
    await throttle('email', 60);
    const { throttles } = (await get('/api/throttles')).json<{ throttles: Record<string, unknown>[] }>();
    expect(throttles).toEqual([
      expect.objectContaining({ key_kind: 'group', key: 'acme', reason: 'acme account: HTTP 429', reports: 1 }),
      expect.objectContaining({ key_kind: 'task_type', key: 'email' }),
    ]);
    const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toMatch(/^queue_throttle_reports\{key_kind="group",key="acme"\} 1$/m);
    expect(metrics).toMatch(/^queue_throttled_until_timestamp_seconds\{key_kind="group",key="acme"\} \S+$/m);

    // A group key no throttle names answers false, and writes nothing.
    const none = await post('/api/throttles/clear', { key_kind: 'group', key: 'globex' });
    expect(none.statusCode, none.body).toBe(200);
    expect(none.json()).toEqual({ key_kind: 'group', key: 'globex', cleared: false });
    expect(await clears()).toBe(0);
    const cleared = await post('/api/throttles/clear', { key_kind: 'group', key: 'acme' });
    expect(cleared.statusCode, cleared.body).toBe(200);
    expect(cleared.json()).toEqual({ key_kind: 'group', key: 'acme', cleared: true });
    expect((await get('/api/throttles')).json().throttles).toEqual([expect.objectContaining({ key: 'email' })]);
    expect(await clears()).toBe(1);
  });

  it('answers 404 for an unknown task type and writes nothing', async () => {
    const res = await post('/api/throttles/clear', { key_kind: 'task_type', key: 'no_such_type' });
    expect(res.statusCode, res.body).toBe(404);
    expect(res.body).toContain('unknown task type');
    expect(await clears()).toBe(0);
  });

  it('/metrics exports whether each channel is throttled, until when, and the reports', async () => {
    await throttle('sms', 120);
    await throttle('sms', 60);
    const res = await app.inject({ method: 'GET', url: '/metrics' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toMatch(/^queue_throttled\{task_type="sms"\} 1$/m);
    expect(res.body).toMatch(/^queue_throttled\{task_type="email"\} 0$/m);
    expect(res.body).toMatch(/^queue_throttle_reports\{key_kind="task_type",key="sms"\} 2$/m);
    const until = Number(
      /^queue_throttled_until_timestamp_seconds\{key_kind="task_type",key="sms"\} (\S+)$/m.exec(res.body)?.[1],
    );
    expect(until * 1000 - Date.now()).toBeGreaterThan(100_000);
    expect(res.body).not.toMatch(/queue_throttled_until_timestamp_seconds\{key_kind="task_type",key="email"\}/);
  });
});
