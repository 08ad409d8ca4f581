// Task dependencies through @org/queue-client: enqueue's dependsOn (on a pool, on a client
// inside a transaction, in a batch), the errors of bad input, and listTaskDependencies.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import {
  completeTasks,
  connect,
  enqueue,
  enqueueMany,
  listTaskDependencies,
  QueueError,
  withTransaction,
} from '../src/index.js';
import type pg from 'pg';

let db: TestDatabase;
let app: pg.Pool;
beforeAll(async () => {
  db = await createTestDatabase();
  app = connect({ connectionString: db.url('app') });
});
afterAll(async () => {
  await app?.end();
  await db?.drop();
});

const TYPE = 'product_resync';
const stateOf = async (id: string) =>
  (await db.query<{ s: string }>('select admin.get_task($1) #>> $2 as s', [id, '{task,state}'])).rows[0].s;

it('enqueues a task that waits for others, on a pool, in a transaction and in a batch', async () => {
  const a = await enqueue(app, { taskType: TYPE, payload: {} });
  const b = await enqueue(app, { taskType: TYPE, payload: {} });
  const x = await enqueue(app, { taskType: TYPE, payload: {}, dependsOn: [a, b] });
  // In one transaction: the dependency enqueued first, then its dependent.
  const [c, y] = await withTransaction(app, async (tx) => {
    const c = await enqueue(tx, { taskType: TYPE, payload: {} });
    return [c, await enqueue(tx, { taskType: TYPE, payload: {}, dependsOn: [c] })];
  });
  const [z1, z2] = await enqueueMany(app, [
    { taskType: TYPE, payload: {}, dependsOn: [c] },
    { taskType: TYPE, payload: {}, dependsOn: [] },
  ]);
  expect(await Promise.all([x, y, z1, z2].map(stateOf))).toEqual(['waiting', 'waiting', 'waiting', 'ready']);
  expect(await listTaskDependencies(app, x)).toEqual([
    { taskId: a, taskType: TYPE, outcome: null, completedAt: null, result: null },
    { taskId: b, taskType: TYPE, outcome: null, completedAt: null, result: null },
  ]);
  await completeTasks(db.pool('owner'), [
    { taskId: a, outcome: 'succeeded' },
    { taskId: b, outcome: 'succeeded' },
    { taskId: c, outcome: 'cancelled' },
  ]);
  expect(await Promise.all([x, y, z1].map(stateOf))).toEqual(['ready', 'failed', 'failed']);
  expect((await listTaskDependencies(app, x)).map((d) => d.outcome)).toEqual(['succeeded', 'succeeded']);
});

it('refuses a missing dependency (not_found), with unique too; a unique task keeps its dependencies', async () => {
  await expect(enqueue(app, { taskType: TYPE, payload: {}, dependsOn: ['999999999'] })).rejects.toMatchObject({
    name: 'QueueError',
    kind: 'not_found',
    message: 'depends_on names task 999999999, which does not exist',
  });
  await expect(enqueueMany(app, [{ taskType: TYPE, payload: {}, dependsOn: ['999999999'] }])).rejects.toMatchObject({
    kind: 'not_found',
    message: 'tasks[0]: depends_on names task 999999999, which does not exist',
  });
  await expect(
    enqueue(app, { taskType: TYPE, payload: {}, dependsOn: ['999999999'], unique: { key: 'k' } }),
  ).rejects.toMatchObject({ name: 'QueueError', kind: 'not_found' });
  const a = await enqueue(app, { taskType: TYPE, payload: {} });
  const u = await enqueue(app, { taskType: TYPE, payload: {}, dependsOn: [a], unique: { key: 'k' } });
  expect(await stateOf(u)).toBe('waiting');
  expect((await listTaskDependencies(app, u)).map((d) => d.taskId)).toEqual([a]);
  // Another task waits for u: replacing it is refused (it would fail its dependent).
  await enqueue(app, { taskType: TYPE, payload: {}, dependsOn: [u] });
  const refused = await enqueue(app, { taskType: TYPE, payload: {}, unique: { key: 'k', policy: 'replace' } }).catch(
    (e: unknown) => e,
  );
  expect(refused).toBeInstanceOf(QueueError);
  expect(refused).toMatchObject({ code: '55000', message: expect.stringMatching(/^task \d+ cannot be replaced/) });
});
