// Enqueueing: defaults, batches, wake-up notifications, and bad input (each a clear
// error that leaves the queue unchanged).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

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
      max_attempts: 25,
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
      ['0', 'product_resync', 0, null, 25],
      ['1', 'store_discovery', 5, 'account:1', 3],
      ['2', 'analytics_refresh', 0, null, 25],
    ]);
    expect(stored[2].scheduled_at.toISOString()).toBe('2030-01-01T00:00:00.000Z');
  });
});

// A listener on a connection of its own. A round trip on the listening connection delivers
// anything already sent to it; received() returns the count since the last call.
async function listen() {
  const listener = await db.client('owner');
  let count = 0;
  listener.on('notification', (n) => {
    if (n.channel === 'queues_task_ready') count++;
  });
  await listener.query('listen queues_task_ready');
  return {
    async received() {
      await listener.query('select 1');
      const n = count;
      count = 0;
      return n;
    },
    end: () => listener.end(),
  };
}

const later = () => new Date(Date.now() + 3_600_000).toISOString();
// Due within the minute that still wakes the workers (they then ask when it is due).
const soon = () => new Date(Date.now() + 30_000).toISOString();

describe('wake-ups (NOTIFY queues_task_ready)', () => {
  it('one per transaction: a batch, several one-by-one enqueues, a mix; none for tasks due more than a minute ahead', async () => {
    const listener = await listen();
    const app = await db.client('app');
    const batch = (n: number, extra: Record<string, unknown> = {}) =>
      JSON.stringify(Array.from({ length: n }, (_, i) => ({ task_type: 'product_resync', payload: { i }, ...extra })));
    try {
      await app.query('select count(*) from queues.enqueue_many($1::jsonb)', [batch(100)]);
      expect(await listener.received()).toBe(1);

      await app.query('begin');
      for (let i = 0; i < 5; i++) await app.query(`select queues.enqueue('product_resync', $1::jsonb)`, [`{"i":${i}}`]);
      await app.query('select count(*) from queues.enqueue_many($1::jsonb)', [batch(3)]);
      expect(await listener.received()).toBe(0); // nothing before the commit
      await app.query('commit');
      expect(await listener.received()).toBe(1);

      await app.query(`select queues.enqueue('product_resync', '{}', $1)`, [later()]);
      await app.query('select count(*) from queues.enqueue_many($1::jsonb)', [batch(3, { scheduled_at: later() })]);
      await app.query(`select queues.enqueue('product_resync', '{}', _notify => false)`);
      expect(await listener.received()).toBe(0);
      await app.query('select count(*) from queues.enqueue_many($1::jsonb)', [
        JSON.stringify([
          { task_type: 'product_resync', payload: {}, scheduled_at: later() },
          { task_type: 'product_resync', payload: {} },
        ]),
      ]);
      expect(await listener.received()).toBe(1);

      // A task due within the minute wakes the workers, by any path.
      await app.query(`select queues.enqueue('product_resync', '{}', $1)`, [soon()]);
      expect(await listener.received()).toBe(1);
      await app.query('select count(*) from queues.enqueue_many($1::jsonb)', [batch(2, { scheduled_at: soon() })]);
      expect(await listener.received()).toBe(1);
      await app.query(`call queues.enqueue_and_commit('product_resync', '{}', $1)`, [soon()]);
      expect(await listener.received()).toBe(1);
    } finally {
      await app.end();
      await listener.end();
    }
  });

  it('enqueue_and_commit commits the task, then wakes once; inside a transaction block it refuses (2D000)', async () => {
    const listener = await listen();
    const app = await db.client('app');
    try {
      const { rows } = await app.query(`call queues.enqueue_and_commit('product_resync', '{"via": "call"}')`);
      expect(Number(rows[0]._task_id)).toBeGreaterThan(0);
      expect(await listener.received()).toBe(1);
      // Committed: another session sees it, and the caller is not left in a transaction.
      const { rows: seen } = await db.query(
        'select payload from queues.task_pending p join queues.task t using (task_id) where task_id = $1',
        [rows[0]._task_id],
      );
      expect(seen).toEqual([{ payload: { via: 'call' } }]);
      expect(app.getTransactionStatus()).toBe('I');

      await app.query(`call queues.enqueue_and_commit('product_resync', '{}', $1)`, [later()]);
      expect(await listener.received()).toBe(0);

      const before = await counts();
      await app.query('begin');
      await expect(app.query(`call queues.enqueue_and_commit('product_resync', '{}')`)).rejects.toMatchObject({
        code: '2D000',
      });
      await app.query('rollback');
      await expect(app.query(`call queues.enqueue_and_commit('email', '{}')`)).rejects.toMatchObject({
        code: '42501',
      });
      expect(await counts()).toEqual(before);
      expect(await listener.received()).toBe(0);
    } finally {
      await app.end();
      await listener.end();
    }
  });
});

describe('task types in use', () => {
  it('cannot be deleted, renamed or truncated away (23503); an unused one can be deleted', async () => {
    await db.pool('app').query(`select queues.enqueue('product_resync', '{}')`);
    for (const sql of [
      `delete from queues.task_type where task_type = 'product_resync'`,
      `update queues.task_type set task_type = 'product_resync_2' where task_type = 'product_resync'`,
      'truncate queues.task_type cascade',
    ]) {
      await expect(db.query(sql), sql).rejects.toMatchObject({
        code: '23503',
        message: expect.stringMatching(/^task_type '\w+' is named by tasks in queues.task$/),
      });
    }
    await db.query(`update queues.task_type set description = 'still here' where task_type = 'product_resync'`);
    await db.query(`insert into queues.task_type (task_type) values ('unused_probe')`);
    await db.query(`delete from queues.task_type where task_type = 'unused_probe'`);
  });

  it('a delete waits for the transactions enqueueing tasks, and an enqueue waits for the delete', async () => {
    await db.query(`insert into queues.task_type (task_type) values ('guard_probe'), ('guard_probe_2')`);
    const app = await db.client('app');
    const owner = await db.client('owner');
    try {
      await owner.query(`set lock_timeout = '200ms'`);
      await app.query(`set lock_timeout = '200ms'`);
      // An uncommitted enqueue holds the delete off; once it commits the delete is refused.
      await app.query('begin');
      await app.query(`select queues.enqueue('guard_probe', '{}')`);
      await expect(owner.query(`delete from queues.task_type where task_type = 'guard_probe'`)).rejects.toMatchObject({
        code: '55P03',
      });
      await app.query('commit');
      await expect(owner.query(`delete from queues.task_type where task_type = 'guard_probe'`)).rejects.toMatchObject({
        code: '23503',
      });
      // An uncommitted delete holds enqueues off; once it commits the type is unknown.
      await owner.query('begin');
      await owner.query(`delete from queues.task_type where task_type = 'guard_probe_2'`);
      await expect(app.query(`select queues.enqueue('guard_probe_2', '{}')`)).rejects.toMatchObject({ code: '55P03' });
      await owner.query('commit');
      await expect(app.query(`select queues.enqueue('guard_probe_2', '{}')`)).rejects.toMatchObject({
        code: '22023',
        message: "unknown task_type 'guard_probe_2'",
      });
      // Under REPEATABLE READ an enqueue locks its types, as the foreign key did: a type
      // deleted after the transaction's snapshot is a serialization failure, not a task
      // of a type that is gone.
      for (const [type, enqueueSql] of [
        ['guard_probe_3', `select queues.enqueue('guard_probe_3', '{}')`],
        ['guard_probe_4', `select queues.enqueue_many('[{"task_type": "guard_probe_4", "payload": {}}]')`],
      ]) {
        await db.query('insert into queues.task_type (task_type) values ($1)', [type]);
        await app.query('begin isolation level repeatable read');
        await app.query('select 1'); // takes the snapshot
        await owner.query('delete from queues.task_type where task_type = $1', [type]);
        await expect(app.query(enqueueSql), enqueueSql).rejects.toMatchObject({ code: '40001' });
        await app.query('rollback');
      }
      const { rows } = await db.query(
        `select count(*)::int as n from queues.task t where not exists (select 1 from queues.task_type y where y.task_type = t.task_type)`,
      );
      expect(rows[0].n).toBe(0);
    } finally {
      await app.end();
      await owner.end();
    }
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
      'worker-only type with a bad payload (refused before the payload is read)',
      `select queues.enqueue('email', $1::jsonb, 'infinity', 5000)`,
      ['[1]'],
      '42501',
      /^task_type 'email' may be enqueued only by the database's own processes/,
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
      'a worker-only type anywhere is refused before any element is read',
      [
        { task_type: 'product_resync', payload: {}, priority: 5000 },
        { task_type: 'email', payload: 7 },
      ],
      '42501',
      /^tasks\[1\]: task_type 'email' may be enqueued only by the database's own processes/,
    ],
    [
      'one bad row after 500 good ones',
      [
        ...Array.from({ length: 500 }, (_, i) => ({ task_type: 'product_resync', payload: { i } })),
        { task_type: 'product_resync', payload: {}, resource_key: '' },
      ],
      '22023',
      /^tasks\[500\]: resource_key must be 1 to 200 characters$/,
    ],
    [
      'payload nested 65 deep',
      [{ task_type: 'product_resync', payload: JSON.parse('{"a":'.repeat(65) + '1' + '}'.repeat(65)) }],
      '54000',
      /^tasks\[0\]: payload is nested deeper than 64 levels$/,
    ],
    [
      'scheduled_at infinity',
      [{ task_type: 'product_resync', payload: {}, scheduled_at: 'infinity' }],
      '22023',
      /^tasks\[0\]: scheduled_at must be a finite time, got infinity$/,
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
