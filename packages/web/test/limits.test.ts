// Flow limits through the REST API: PUT/DELETE /api/queues/:task_type/limits and GET
// /api/limits (admin.set_task_limit, clear_task_limit, task_limits), each change an audit
// fact; bad input 400 and an unknown type 404, nothing written; /metrics exports what the
// limits hold back; POST /api/tasks takes a group key.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';

const TOKEN = 'test-token-limits-0123456789';
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

const put = (url: string, payload?: unknown) =>
  app.inject({ method: 'PUT', url, payload: payload as never, headers: auth });
const settings = async () => (await db.query('select * from queues.task_limit_set order by task_limit_set_id')).rows;

describe('flow limits through the REST API', () => {
  it('sets, lists and clears limits, each change an audit fact', async () => {
    const set = await put('/api/queues/product_resync/limits', { scope: 'each_group', max_running: 2 });
    expect(set.statusCode, set.body).toBe(200);
    expect(set.json()).toEqual({
      task_type: 'product_resync',
      scope: 'each_group',
      group_key: null,
      max_running: 2,
      max_starts: null,
      interval_ms: null,
    });
    const rate = await put('/api/queues/product_resync/limits', {
      scope: 'group',
      group_key: 'store:7',
      max_starts: 10,
      interval_ms: 60000,
    });
    expect(rate.statusCode, rate.body).toBe(200);
    const created = await app.inject({
      method: 'POST',
      url: '/api/tasks',
      headers: auth,
      payload: { task_type: 'product_resync', payload: { store_id: 7 }, group_key: 'store:7' },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { rows } = await db.query('select group_key from queues.task where task_id = $1', [created.json().task_id]);
    expect(rows[0].group_key).toBe('store:7');

    const list = await app.inject({ method: 'GET', url: '/api/limits', headers: auth });
    expect(list.statusCode, list.body).toBe(200);
    expect(
      list.json().limits.map((l: Record<string, unknown>) => [l.scope, l.group_key, l.max_running, l.max_starts]),
    ).toEqual([
      ['each_group', null, 2, null],
      ['group', 'store:7', null, 10],
    ]);

    const metrics = await app.inject({ method: 'GET', url: '/metrics' });
    expect(metrics.body).toContain(
      'queue_limit_held_back_tasks{task_type="product_resync",scope="group",group_key="store:7"} 0',
    );

    const cleared = await app.inject({
      method: 'DELETE',
      url: '/api/queues/product_resync/limits?scope=group&group_key=store:7',
      headers: auth,
    });
    expect(cleared.statusCode, cleared.body).toBe(200);
    expect(cleared.json()).toEqual({
      task_type: 'product_resync',
      scope: 'group',
      group_key: 'store:7',
      cleared: true,
    });
    const again = await app.inject({
      method: 'DELETE',
      url: '/api/queues/product_resync/limits?scope=group&group_key=store:7',
      headers: auth,
    });
    expect(again.json().cleared).toBe(false);
    const audit = await db.query(
      `select action from admin.api_change where action in ('set_task_limit', 'clear_task_limit') order by api_change_id`,
    );
    expect(audit.rows.map((r) => r.action)).toEqual([
      'set_task_limit',
      'set_task_limit',
      'clear_task_limit',
      'clear_task_limit',
    ]);
  });

  it.each([
    ['a missing body', undefined, 'body'],
    ['no scope', { max_running: 1 }, 'scope'],
    ['an unknown scope', { scope: 'tenant', max_running: 1 }, "scope must be 'type', 'each_group' or 'group'"],
    ['a negative limit', { scope: 'type', max_running: -1 }, 'max_running must be between 1 and 1000000'],
    ['a zero limit', { scope: 'type', max_running: 0 }, 'max_running must be between 1 and 1000000'],
    ['a fraction', { scope: 'type', max_running: 1.5 }, 'max_running must be a whole number'],
    ['no limit', { scope: 'type' }, 'set max_running, or max_starts with interval_ms'],
    ['a rate without interval', { scope: 'type', max_starts: 5 }, 'max_starts and interval_ms go together'],
    ['a zero interval', { scope: 'type', max_starts: 5, interval_ms: 0 }, 'interval_ms must be between 1 and 86400000'],
    ['an interval over a day', { scope: 'type', max_starts: 5, interval_ms: 86400001 }, 'interval_ms must be between'],
    ['a group scope without key', { scope: 'group', max_running: 1 }, 'group_key is needed for scope group'],
    [
      'a key on the type scope',
      { scope: 'type', group_key: 'a', max_running: 1 },
      'group_key is needed for scope group',
    ],
    ['an extra field', { scope: 'type', max_running: 1, burst: 3 }, 'burst'],
  ])('refuses %s with a 400 and writes nothing', async (_name, body, message) => {
    const before = await settings();
    const res = await put('/api/queues/product_resync/limits', body);
    expect(res.statusCode, res.body).toBe(400);
    expect(res.body).toContain(message);
    expect(await settings()).toEqual(before);
  });

  it('answers 404 for an unknown task type, 400 for a bad clear, and writes nothing', async () => {
    const before = await settings();
    const res = await put('/api/queues/no_such_type/limits', { scope: 'type', max_running: 1 });
    expect(res.statusCode, res.body).toBe(404);
    expect(res.body).toContain('unknown task type');
    const bad = await app.inject({ method: 'DELETE', url: '/api/queues/product_resync/limits?scope=x', headers: auth });
    expect(bad.statusCode, bad.body).toBe(400);
    const task = await app.inject({
      method: 'POST',
      url: '/api/tasks',
      headers: auth,
      payload: { task_type: 'product_resync', payload: {}, group_key: '' },
    });
    expect(task.statusCode, task.body).toBe(400);
    expect(task.body).toContain('group_key must be 1 to 200 characters');
    expect(await settings()).toEqual(before);
  });

  it("keeps a task's timeout_ms, and refuses a bad one with 400, writing nothing", async () => {
    const created = await app.inject({
      method: 'POST',
      url: '/api/tasks',
      headers: auth,
      payload: { task_type: 'product_resync', payload: {}, timeout_ms: 45000 },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { rows } = await db.query('select timeout_ms from queues.task where task_id = $1', [created.json().task_id]);
    expect(rows[0].timeout_ms).toBe(45000);
    const count = async () => (await db.query('select count(*)::int as n from queues.task')).rows[0].n;
    const before = await count();
    for (const [timeout_ms, message] of [
      [0, 'timeout_ms must be between 1 and 86400000'],
      [86_400_001, 'timeout_ms must be between 1 and 86400000'],
      [1.5, 'timeout_ms must be an integer'],
      ['10', 'timeout_ms must be a number'],
    ] as const) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/tasks',
        headers: auth,
        payload: { task_type: 'product_resync', payload: {}, timeout_ms },
      });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.body).toContain(message);
    }
    expect(await count()).toBe(before);
  });
});
