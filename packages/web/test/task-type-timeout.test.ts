// POST /api/queues/:task_type/timeout: a task type's run timeout set and cleared through the
// REST API (admin.set_task_type_timeout), with its audit fact; bad input 400 and an unknown
// type 404, nothing written.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';

const TOKEN = 'test-token-timeouts-0123456789';
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

const post = (url: string, payload?: unknown) =>
  app.inject({ method: 'POST', url, payload: payload as never, headers: auth });
const settings = async () =>
  (await db.query('select task_type, timeout_ms from queues.task_type_timeout_set order by task_type_timeout_set_id'))
    .rows;
const timeouts = async () => (await db.pool('worker').query('select * from queues.task_type_timeouts()')).rows;

describe('POST /api/queues/:task_type/timeout', () => {
  it('sets and clears a run timeout, each change an audit fact', async () => {
    const set = await post('/api/queues/product_resync/timeout', { timeout_seconds: 90 });
    expect(set.statusCode, set.body).toBe(200);
    expect(set.json()).toEqual({ task_type: 'product_resync', timeout_seconds: 90 });
    expect(await timeouts()).toEqual([{ task_type: 'product_resync', timeout_ms: 90000 }]);
    const cleared = await post('/api/queues/product_resync/timeout', { timeout_seconds: null });
    expect(cleared.json()).toEqual({ task_type: 'product_resync', timeout_seconds: null });
    expect(await timeouts()).toEqual([]);
    const { rows } = await db.query(
      `select action from admin.api_change where action = 'set_task_type_timeout' order by 1`,
    );
    expect(rows).toHaveLength(2);
  });

  it.each([
    ['a missing body', undefined, 'body'],
    ['no timeout_seconds', {}, 'timeout_seconds'],
    ['zero', { timeout_seconds: 0 }, 'timeout_seconds must be between 0.001 and 86400'],
    ['more than a day', { timeout_seconds: 86401 }, 'timeout_seconds must be between 0.001 and 86400'],
    ['a string', { timeout_seconds: '30' }, 'timeout_seconds'],
    ['an extra field', { timeout_seconds: 30, per_task: true }, 'per_task'],
  ])('refuses %s with a 400 and writes nothing', async (_name, body, message) => {
    const before = await settings();
    const res = await post('/api/queues/product_resync/timeout', body);
    expect(res.statusCode, res.body).toBe(400);
    expect(res.body).toContain(message);
    expect(await settings()).toEqual(before);
  });

  it('answers 404 for an unknown task type and writes nothing', async () => {
    const before = await settings();
    const res = await post('/api/queues/no_such_type/timeout', { timeout_seconds: 5 });
    expect(res.statusCode, res.body).toBe(404);
    expect(res.body).toContain('unknown task type');
    expect(await settings()).toEqual(before);
  });
});
