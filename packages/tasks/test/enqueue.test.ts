// typedEnqueue at run time: the payload is checked with the definition's schema before
// anything reaches the database, the error names the field, and nothing is written; the
// definition's maxAttempts applies when the task names none.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { QueueError, withTransaction } from '@org/queue-client';
import { defineTask, registerTasks, TaskPayloadError, typedEnqueue } from '@org/tasks';

let db: TestDatabase;

const fax = defineTask({
  name: 'fax',
  payload: z.object({ to: z.string(), pages: z.number().int().positive() }),
  maxAttempts: 4,
  run: () => {},
});
const order = defineTask({
  name: 'order',
  payload: z.object({ items: z.array(z.object({ sku: z.string(), quantity: z.number().int() })).min(1) }),
  run: () => {},
});
const enqueueTask = typedEnqueue([fax, order]);

beforeAll(async () => {
  db = await createTestDatabase();
  await registerTasks(db.pool('owner'), [fax, order]);
});
afterAll(async () => {
  await db?.drop();
});

const taskCount = async () => (await db.query('select count(*)::int as n from queues.task')).rows[0].n as number;

it('enqueues a valid payload as the app, with the definition maxAttempts unless the task names one', async () => {
  const app = db.pool('app');
  const first = await enqueueTask(app, { taskType: 'fax', payload: { to: '+15550100', pages: 2 } });
  const second = await enqueueTask(app, { taskType: 'fax', payload: { to: '+15550100', pages: 1 }, maxAttempts: 2 });
  const third = await enqueueTask(app, { taskType: 'order', payload: { items: [{ sku: 'a', quantity: 1 }] } });
  const { rows } = await db.query(
    'select task_id::text, task_type, payload, max_attempts from queues.task where task_id = any($1::bigint[]) order by task_id',
    [[first, second, third]],
  );
  expect(rows).toEqual([
    { task_id: first, task_type: 'fax', payload: { to: '+15550100', pages: 2 }, max_attempts: 4 },
    { task_id: second, task_type: 'fax', payload: { to: '+15550100', pages: 1 }, max_attempts: 2 },
    {
      task_id: third,
      task_type: 'order',
      payload: { items: [{ sku: 'a', quantity: 1 }] },
      max_attempts: expect.any(Number),
    },
  ]);
});

it('joins the caller transaction like the queue client enqueue', async () => {
  const before = await taskCount();
  await expect(
    withTransaction(db.pool('app'), async (tx) => {
      await enqueueTask(tx, { taskType: 'fax', payload: { to: '+15550100', pages: 3 } });
      throw new Error('the app changes its mind');
    }),
  ).rejects.toThrow('the app changes its mind');
  expect(await taskCount()).toBe(before);
});

it('refuses a payload the schema rejects before the database, naming each field, writing nothing', async () => {
  const before = await taskCount();
  const cases: [unknown, string, unknown, string][] = [
    [
      'fax',
      'pages',
      { to: '+15550100', pages: 'two' },
      'invalid fax payload: pages: Invalid input: expected number, received string',
    ],
    ['fax', 'to', { pages: 1 }, 'invalid fax payload: to: Invalid input: expected string, received undefined'],
    [
      'fax',
      'both',
      { to: 5, pages: 0 },
      'invalid fax payload: to: Invalid input: expected string, received number; pages: Too small: expected number to be >0',
    ],
    [
      'order',
      'nested',
      {
        items: [
          { sku: 'a', quantity: 1 },
          { sku: 7, quantity: 1 },
        ],
      },
      'invalid order payload: items[1].sku: Invalid input: expected string, received number',
    ],
    [
      'order',
      'root',
      'not an object',
      'invalid order payload: (payload): Invalid input: expected object, received string',
    ],
  ];
  for (const [taskType, , payload, message] of cases) {
    const error = await enqueueTask(db.pool('app'), { taskType, payload } as never).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TaskPayloadError);
    expect(error).toBeInstanceOf(QueueError);
    expect(error).toMatchObject({ kind: 'invalid_input', taskType, message });
  }
  expect(await taskCount()).toBe(before);
});

it('refuses a task type it has no definition of, writing nothing', async () => {
  const before = await taskCount();
  await expect(enqueueTask(db.pool('app'), { taskType: 'telex', payload: {} } as never)).rejects.toMatchObject({
    kind: 'invalid_input',
    message: 'no definition of task type "telex" among fax, order',
  });
  expect(await taskCount()).toBe(before);
});

it('refuses two definitions of one task type', () => {
  expect(() => typedEnqueue([fax, fax])).toThrow('two definitions of task "fax"');
});
