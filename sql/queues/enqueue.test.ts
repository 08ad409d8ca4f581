// Enqueueing: defaults, batches, wake-up notifications, and bad input (each a clear
// error that leaves the queue unchanged).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/db-tools/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const counts = async () =>
  (
    await db.query(
      `select (select count(*) from queues.task)::int as tasks, (select count(*) from queues.task_pending)::int as pending`,
    )
  ).rows[0];

describe('enqueue', () => {
  it('returns the new task id and applies defaults for NULL arguments', async () => {
    const { rows } = await db
      .pool('app')
      .query(`select queues.enqueue('store_discovery', '{"send_email_attempt_id": 1}', null, null, null, null) as id`);
    const {
      rows: [task],
    } = await db.query(
      `select task_type, payload, priority, resource_key, max_attempts,
              abs(extract(epoch from scheduled_at - now())) < 60 as scheduled_now
         from queues.task where task_id = $1`,
      [rows[0].id],
    );
    expect(task).toEqual({
      task_type: 'store_discovery',
      payload: { send_email_attempt_id: 1 },
      priority: 0,
      resource_key: null,
      max_attempts: 1,
      scheduled_now: true,
    });
  });

  it('enqueue_many inserts all tasks in one statement and returns ids in input order', async () => {
    const tasks = [
      { task_type: 'product_resync', payload: { i: 0 } },
      { task_type: 'store_discovery', payload: { i: 1 }, priority: 5, resource_key: 'account:1', max_attempts: 3 },
      { task_type: 'analytics_refresh', payload: { i: 2 }, scheduled_at: '2030-01-01T00:00:00Z' },
    ];
    const { rows } = await db
      .pool('app')
      .query('select task_id from queues.enqueue_many($1::jsonb)', [JSON.stringify(tasks)]);
    expect(rows).toHaveLength(3);
    const { rows: stored } = await db.query(
      `select payload->>'i' as i, task_type, priority, resource_key, max_attempts, scheduled_at
         from queues.task where task_id = any($1::bigint[]) order by task_id`,
      [rows.map((r) => r.task_id)],
    );
    expect(stored.map((r) => [r.i, r.task_type, r.priority, r.resource_key, r.max_attempts])).toEqual([
      ['0', 'product_resync', 0, null, 1],
      ['1', 'store_discovery', 5, 'account:1', 3],
      ['2', 'analytics_refresh', 0, null, 1],
    ]);
    expect(stored[2].scheduled_at.toISOString()).toBe('2030-01-01T00:00:00.000Z');
  });

  it('wakes listeners with one notification per statement, not one per task', async () => {
    const listener = await db.client('owner');
    const received: string[] = [];
    listener.on('notification', (n) => received.push(n.channel));
    await listener.query('listen queues_task_ready');
    const tasks = Array.from({ length: 100 }, (_, i) => ({ task_type: 'product_resync', payload: { i } }));
    await db.pool('app').query('select count(*) from queues.enqueue_many($1::jsonb)', [JSON.stringify(tasks)]);
    await db.pool('app').query(`select queues.enqueue('product_resync', '{}')`);
    // A round trip on the listening connection delivers anything already sent to it.
    await listener.query('select 1');
    expect(received).toEqual(['queues_task_ready', 'queues_task_ready']);
    await listener.end();
  });
});

describe('enqueue bad input', () => {
  const big = JSON.stringify({ blob: 'x'.repeat(1_100_000) });
  const single: [string, string, unknown[], string, RegExp][] = [
    ['unknown task_type', `select queues.enqueue($1, '{}')`, ['fax'], '22023', /unknown task_type 'fax'/],
    ['NULL task_type', `select queues.enqueue($1, '{}')`, [null], '22004', /task_type must not be null/],
    ['NULL payload', `select queues.enqueue('product_resync', $1)`, [null], '22004', /payload must not be null/],
    [
      'array payload',
      `select queues.enqueue('product_resync', $1::jsonb)`,
      ['[1,2]'],
      '22023',
      /payload must be a JSON object, got array/,
    ],
    [
      'string payload',
      `select queues.enqueue('product_resync', $1::jsonb)`,
      ['"hi"'],
      '22023',
      /payload must be a JSON object, got string/,
    ],
    ['number payload', `select queues.enqueue('product_resync', $1::jsonb)`, ['42'], '22023', /got number/],
    ['JSON null payload', `select queues.enqueue('product_resync', $1::jsonb)`, ['null'], '22023', /got null/],
    [
      'payload over 1 MiB',
      `select queues.enqueue('product_resync', $1::jsonb)`,
      [big],
      '54000',
      /over the limit of 1048576 bytes/,
    ],
    [
      'priority out of range',
      `select queues.enqueue('product_resync', '{}', null, $1)`,
      [5000],
      '22023',
      /priority must be between -1000 and 1000/,
    ],
    [
      'empty resource key',
      `select queues.enqueue('product_resync', '{}', null, null, $1)`,
      [''],
      '22023',
      /resource_key must be 1 to 200/,
    ],
    [
      'max_attempts 0',
      `select queues.enqueue('product_resync', '{}', null, null, null, $1)`,
      [0],
      '22023',
      /max_attempts must be between 1 and 100/,
    ],
    [
      'malformed JSON',
      `select queues.enqueue('product_resync', $1::jsonb)`,
      ['{"a":'],
      '22P02',
      /invalid input syntax for type json/,
    ],
    [
      'NUL in JSON',
      `select queues.enqueue('product_resync', $1::jsonb)`,
      ['{"a":"\\u0000"}'],
      '22P05',
      /unsupported Unicode escape/,
    ],
    [
      'injection in task_type',
      `select queues.enqueue($1, '{}')`,
      ["sms'); drop table queues.task; --"],
      '22023',
      /unknown task_type/,
    ],
  ];
  it.each(single)('%s: a clear error, nothing written', async (_name, sql, params, code, message) => {
    const before = await counts();
    await expect(db.pool('app').query(sql, params)).rejects.toMatchObject({
      code,
      message: expect.stringMatching(message),
    });
    expect(await counts()).toEqual(before);
  });

  const batches: [string, unknown, string, RegExp][] = [
    ['not an array', { task_type: 'product_resync' }, '22023', /tasks must be a JSON array, got object/],
    [
      'element not an object',
      [{ task_type: 'product_resync', payload: {} }, 7],
      '22023',
      /tasks\[1\]: must be a JSON object, got number/,
    ],
    [
      'unknown field',
      [{ task_type: 'product_resync', payload: {}, prio: 1 }],
      '22023',
      /tasks\[0\]: unknown field\(s\) prio/,
    ],
    [
      'unknown type in the middle',
      [
        { task_type: 'product_resync', payload: {} },
        { task_type: 'nope', payload: {} },
      ],
      '22023',
      /tasks\[1\]: unknown task_type 'nope'/,
    ],
    ['missing payload', [{ task_type: 'product_resync' }], '22004', /tasks\[0\]: payload must not be null/],
    [
      'bad timestamp',
      [{ task_type: 'product_resync', payload: {}, scheduled_at: 'tomorrow-ish' }],
      '22007',
      /invalid input syntax for type timestamp/,
    ],
    [
      'priority out of range',
      [
        { task_type: 'product_resync', payload: {} },
        { task_type: 'product_resync', payload: {}, priority: 5000 },
      ],
      '22023',
      /tasks\[1\]: priority must be between -1000 and 1000, got 5000/,
    ],
    [
      'payload not an object',
      [{ task_type: 'product_resync', payload: [1] }],
      '22023',
      /tasks\[0\]: payload must be a JSON object, got array/,
    ],
    [
      'max_attempts 0',
      [{ task_type: 'product_resync', payload: {}, max_attempts: 0 }],
      '22023',
      /tasks\[0\]: max_attempts must be between 1 and 100, got 0/,
    ],
    [
      'the first problem in input order wins',
      [{ task_type: 'product_resync', payload: {} }, { task_type: 'nope', payload: {} }, 5],
      '22023',
      /^tasks\[1\]: unknown task_type 'nope'$/,
    ],
    [
      'over 10,000 tasks',
      Array.from({ length: 10_001 }, () => ({ task_type: 'product_resync', payload: {} })),
      '54000',
      /at most 10000 tasks per call/,
    ],
  ];
  it.each(batches)(
    'enqueue_many %s: a clear error, no task of the batch written',
    async (_name, tasks, code, message) => {
      const before = await counts();
      await expect(
        db.pool('app').query('select * from queues.enqueue_many($1::jsonb)', [JSON.stringify(tasks)]),
      ).rejects.toMatchObject({ code, message: expect.stringMatching(message) });
      expect(await counts()).toEqual(before);
    },
  );

  it('enqueue_many of NULL is refused', async () => {
    await expect(db.pool('app').query('select * from queues.enqueue_many(null)')).rejects.toMatchObject({
      code: '22004',
      message: 'tasks must not be null',
    });
  });
});
