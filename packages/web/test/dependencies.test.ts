// Task dependencies through the operations API: POST /api/tasks with depends_on (a waiting
// task; bad input answered 400 or 404 with nothing written), GET /api/tasks/:id with the
// task's dependencies and dependents, cancelling by the waiting state, and the dashboard's
// task page listing both.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';

const TOKEN = 'test-token-0123456789abcdef';
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
const get = (url: string) => app.inject({ method: 'GET', url, headers: auth });
const taskCount = async () => Number((await db.query('select count(*) as n from queues.task')).rows[0].n);

it('creates a waiting task with depends_on; the task shows its dependencies, the dependency its dependents', async () => {
  const a = (await post('/api/tasks', { task_type: 'store_discovery', payload: {} })).json().task_id;
  const created = await post('/api/tasks', { task_type: 'store_discovery', payload: {}, depends_on: [a] });
  expect(created.statusCode, created.body).toBe(201);
  const x = created.json().task_id;
  const detail = (await get(`/api/tasks/${x}`)).json();
  expect(detail.task.state).toBe('waiting');
  expect(detail.dependencies).toEqual([
    { task_id: a, task_type: 'store_discovery', outcome: null, completed_at: null },
  ]);
  expect((await get(`/api/tasks/${a}`)).json().dependents).toEqual([
    { task_id: x, task_type: 'store_discovery', state: 'waiting' },
  ]);
  const listed = (await get('/api/tasks?state=waiting')).json();
  expect(listed.tasks.map((t: { task_id: number }) => t.task_id)).toEqual([x]);

  const cancelled = await post('/api/tasks/cancel', { filter: { state: 'waiting' }, limit: 10 });
  expect(cancelled.statusCode, cancelled.body).toBe(200);
  expect((await get(`/api/tasks/${x}`)).json().task.state).toBe('cancelled');
});

it('refuses a missing dependency (404) and a malformed one (400); writes nothing', async () => {
  const before = await taskCount();
  const missing = await post('/api/tasks', { task_type: 'store_discovery', payload: {}, depends_on: [999999999] });
  expect(missing.statusCode).toBe(404);
  expect(missing.json().message).toBe('depends_on names task 999999999, which does not exist');
  for (const body of [{ depends_on: ['1'] }, { depends_on: [1.5] }, { depends_on: 1 }]) {
    const res = await post('/api/tasks', { task_type: 'store_discovery', payload: {}, ...body });
    expect(res.statusCode, JSON.stringify(body)).toBe(400);
  }
  const uniqueMissing = await post('/api/tasks', {
    task_type: 'store_discovery',
    payload: {},
    depends_on: [999999999],
    unique_key: 'k',
  });
  expect(uniqueMissing.statusCode).toBe(404);
  expect(await taskCount()).toBe(before);
});

it('a unique task takes depends_on, group_key and timeout_ms; replacing one that others wait for is 409', async () => {
  const dep = await post('/api/tasks', { task_type: 'store_discovery', payload: {} });
  const depId = dep.json().task_id as number;
  const u = await post('/api/tasks', {
    task_type: 'store_discovery',
    payload: {},
    unique_key: 'web:u',
    unique_policy: 'replace',
    depends_on: [depId],
    group_key: 'g',
    timeout_ms: 5000,
  });
  expect(u.statusCode, u.body).toBe(201);
  const uId = u.json().task_id as number;
  expect((await get(`/api/tasks/${uId}`)).json().task.state).toBe('waiting');
  const waiter = await post('/api/tasks', { task_type: 'store_discovery', payload: {}, depends_on: [uId] });
  expect(waiter.statusCode).toBe(201);
  const replaced = await post('/api/tasks', {
    task_type: 'store_discovery',
    payload: {},
    unique_key: 'web:u',
    unique_policy: 'replace',
  });
  expect(replaced.statusCode, replaced.body).toBe(409);
  expect(replaced.json().message).toBe(`task ${uId} cannot be replaced: task ${waiter.json().task_id} waits for it`);
});
