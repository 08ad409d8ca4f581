// JSON the client cannot or must not send: a payload nested thousands of levels deep
// would overflow JSON.stringify's stack (a RangeError) before the database's 64-level
// check could answer. The client refuses it first, with the database's words and kind,
// and writes nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import pg from 'pg';
import {
  QueueError,
  connect,
  enqueue,
  enqueueMany,
  recordTaskResult,
  runFunction,
  withTransaction,
  type JsonObject,
} from '../src/index.js';

let db: TestDatabase;
let app: pg.Pool;
let worker: pg.Pool;
beforeAll(async () => {
  db = await createTestDatabase();
  app = connect({ connectionString: db.url('app'), applicationName: 'deep-json-test-app' });
  worker = connect({ connectionString: db.url('worker') });
});
afterAll(async () => {
  await app?.end();
  await worker?.end();
  await db?.drop();
});

/** An object whose value at `levels` levels below the top is 1: {a: {a: ... 1}}. */
function nested(levels: number): JsonObject {
  let value: unknown = 1;
  for (let i = 0; i < levels; i++) value = { a: value };
  return value as JsonObject;
}
/** The same with arrays inside one object: {a: [[[ ... 1]]]}. */
function nestedArrays(levels: number): JsonObject {
  let value: unknown = 1;
  for (let i = 0; i < levels - 1; i++) value = [value];
  return { a: value };
}

async function taskCount(): Promise<number> {
  const { rows } = await db.query<{ n: string }>('select count(*) as n from queues.task');
  return Number(rows[0].n);
}

async function refusal(call: () => Promise<unknown>): Promise<QueueError> {
  const error = await call().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(QueueError);
  return error as QueueError;
}

describe('deeply nested JSON', () => {
  it.each([4_000, 5_000, 20_000, 200_000])(
    'enqueue of a payload %i levels deep: QueueError too_large, not a RangeError; nothing written',
    async (levels) => {
      const before = await taskCount();
      for (const payload of [nested(levels), nestedArrays(levels)]) {
        for (const db of [app, null]) {
          const call = db
            ? () => enqueue(db, { taskType: 'product_resync', payload })
            : () => withTransaction(app, (tx) => enqueue(tx, { taskType: 'product_resync', payload }));
          const error = await refusal(call);
          expect(error).toMatchObject({ kind: 'too_large', message: 'payload is nested deeper than 64 levels' });
        }
        const many = await refusal(() =>
          enqueueMany(app, [
            { taskType: 'product_resync', payload: {} },
            { taskType: 'product_resync', payload },
          ]),
        );
        expect(many).toMatchObject({ kind: 'too_large', message: 'tasks[1]: payload is nested deeper than 64 levels' });
      }
      expect(await taskCount()).toBe(before);
    },
  );

  it('the client draws the line where the database does: 64 levels pass, 65 are too deep', async () => {
    const taskId = await enqueue(app, { taskType: 'product_resync', payload: nested(64) });
    expect(taskId).toMatch(/^\d+$/);
    const [id] = await enqueueMany(app, [{ taskType: 'product_resync', payload: nestedArrays(64) }]);
    expect(id).toMatch(/^\d+$/);
    // 65 levels: the database would refuse it with the same words.
    for (const payload of [nested(65), nestedArrays(65)]) {
      expect(await refusal(() => enqueue(app, { taskType: 'product_resync', payload }))).toMatchObject({
        kind: 'too_large',
        message: 'payload is nested deeper than 64 levels',
      });
    }
  });

  it('a payload JSON cannot represent is invalid_input, not a TypeError', async () => {
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    const withBigInt = { n: 10n } as unknown as JsonObject;
    for (const payload of [cyclic as JsonObject, withBigInt]) {
      const error = await refusal(() => enqueue(app, { taskType: 'product_resync', payload }));
      expect(error).toMatchObject({
        kind: 'invalid_input',
        message: expect.stringMatching(/^payload cannot be sent as JSON \(TypeError: /),
      });
    }
  });

  it('runFunction and recordTaskResult refuse what they cannot serialise with a QueueError too', async () => {
    const deep = nested(20_000);
    expect(await refusal(() => runFunction(worker, 'internal.noop', deep))).toMatchObject({
      kind: 'too_large',
      message: expect.stringMatching(/^payload is too deeply nested or too large to send as JSON \(RangeError: /),
    });
    expect(
      await refusal(() => recordTaskResult(worker, { taskId: '1', taskLeaseId: '1', result: deep })),
    ).toMatchObject({
      kind: 'too_large',
      message: expect.stringMatching(/^result is too deeply nested or too large to send as JSON \(RangeError: /),
    });
  });
});
