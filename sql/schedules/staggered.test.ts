// schedules.generate_staggered_tasks: the seed's generate_resync_tasks, called by the
// REST API and apps.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { rowCounts } from '../test-support/drive.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const stores = (n: number, from = 1) => Array.from({ length: n }, (_, i) => ({ store_id: from + i }));

async function tasksOf(taskType: string) {
  const { rows } = await db.query<{ store_id: number; scheduled_at: Date; priority: number }>(
    `select (t.payload ->> 'store_id')::int as store_id, t.scheduled_at, t.priority
       from queues.task t join queues.task_pending p using (task_id)
      where t.task_type = $1 order by t.task_id`,
    [taskType],
  );
  return rows;
}

describe('generate_staggered_tasks', () => {
  it('300 stores in 6 batches over 24 hours: 50 every 4 hours, in input order (as the API)', async () => {
    const { rows } = await db
      .pool('api')
      .query(
        `select * from schedules.generate_staggered_tasks('product_resync', $1, '2024-01-01T00:00:00Z', '24 hours', 6)`,
        [JSON.stringify(stores(300))],
      );
    expect(rows.map((r) => [r.batch, r.scheduled_at.toISOString(), r.task_count])).toEqual([
      [1, '2024-01-01T00:00:00.000Z', 50],
      [2, '2024-01-01T04:00:00.000Z', 50],
      [3, '2024-01-01T08:00:00.000Z', 50],
      [4, '2024-01-01T12:00:00.000Z', 50],
      [5, '2024-01-01T16:00:00.000Z', 50],
      [6, '2024-01-01T20:00:00.000Z', 50],
    ]);
    const tasks = await tasksOf('product_resync');
    expect(tasks).toHaveLength(300);
    for (const t of tasks) {
      const batch = Math.floor((t.store_id - 1) / 50);
      expect(t.scheduled_at.toISOString()).toBe(new Date(Date.UTC(2024, 0, 1, batch * 4)).toISOString());
      expect(t.priority).toBe(0);
    }
  });

  it('uneven splits: the first N mod K batches get one more; empty batches are listed (as the app)', async () => {
    const { rows } = await db
      .pool('app')
      .query(
        `select * from schedules.generate_staggered_tasks('analytics_refresh', $1, '2024-02-01T00:00:00Z', '3 hours', 3, 7)`,
        [JSON.stringify(stores(7, 101))],
      );
    expect(rows.map((r) => [r.batch, r.scheduled_at.toISOString(), r.task_count])).toEqual([
      [1, '2024-02-01T00:00:00.000Z', 3],
      [2, '2024-02-01T01:00:00.000Z', 2],
      [3, '2024-02-01T02:00:00.000Z', 2],
    ]);
    expect(
      (await tasksOf('analytics_refresh')).map((t) => [t.store_id, t.scheduled_at.toISOString(), t.priority]),
    ).toEqual([
      [101, '2024-02-01T00:00:00.000Z', 7],
      [102, '2024-02-01T00:00:00.000Z', 7],
      [103, '2024-02-01T00:00:00.000Z', 7],
      [104, '2024-02-01T01:00:00.000Z', 7],
      [105, '2024-02-01T01:00:00.000Z', 7],
      [106, '2024-02-01T02:00:00.000Z', 7],
      [107, '2024-02-01T02:00:00.000Z', 7],
    ]);

    const few = await db.query(
      `select batch, task_count from schedules.generate_staggered_tasks('store_discovery', $1, '2024-03-01T00:00:00Z', '1 day', 4)`,
      [JSON.stringify(stores(2))],
    );
    expect(few.rows.map((r) => [r.batch, r.task_count])).toEqual([
      [1, 1],
      [2, 1],
      [3, 0],
      [4, 0],
    ]);
    const none = await db.query(
      `select batch, scheduled_at, task_count from schedules.generate_staggered_tasks('store_discovery', '[]', '2024-03-01T00:00:00Z', '90 minutes', 2)`,
    );
    expect(none.rows.map((r) => [r.batch, r.scheduled_at.toISOString(), r.task_count])).toEqual([
      [1, '2024-03-01T00:00:00.000Z', 0],
      [2, '2024-03-01T00:45:00.000Z', 0],
    ]);
  });

  it('1000 payloads in 7 batches over a week: sizes differ by at most one and add up', async () => {
    const { rows } = await db.query(
      `select batch, scheduled_at, task_count from schedules.generate_staggered_tasks('product_discovery', $1, '2024-01-01T00:00:00Z', '7 days', 7)`,
      [JSON.stringify(stores(1000))],
    );
    expect(rows.map((r) => r.task_count)).toEqual([143, 143, 143, 143, 143, 143, 142]);
    const { rows: counted } = await db.query(
      `select t.scheduled_at, count(*)::int as n from queues.task t where t.task_type = 'product_discovery'
        group by 1 order by 1`,
    );
    expect(counted.map((r) => [r.scheduled_at.toISOString(), r.n])).toEqual(
      rows.map((r) => [r.scheduled_at.toISOString(), r.task_count]),
    );
  });

  const bad: [string, unknown[], string, RegExp][] = [
    ['null task_type', [null, '[]', '2024-01-01', '1 day', 2, null], '22004', /^task_type must not be null$/],
    ['unknown task_type', ['nope', '[]', '2024-01-01', '1 day', 2, null], '22023', /^unknown task_type 'nope'$/],
    ['null payloads', ['product_resync', null, '2024-01-01', '1 day', 2, null], '22004', /^payloads must not be null$/],
    [
      'object payloads',
      ['product_resync', '{}', '2024-01-01', '1 day', 2, null],
      '22023',
      /^payloads must be a JSON array, got object$/,
    ],
    [
      'non-object element',
      ['product_resync', '[{}, 3]', '2024-01-01', '1 day', 2, null],
      '22023',
      /^payloads\[1\] must be a JSON object, got number$/,
    ],
    [
      'too many',
      ['product_resync', JSON.stringify(stores(10001)), '2024-01-01', '1 day', 2, null],
      '54000',
      /^at most 10000 payloads per call, got 10001$/,
    ],
    ['null start', ['product_resync', '[]', null, '1 day', 2, null], '22004', /^start must not be null$/],
    ['null period', ['product_resync', '[]', '2024-01-01', null, 2, null], '22004', /^period must not be null$/],
    [
      'zero period',
      ['product_resync', '[]', '2024-01-01', '0', 2, null],
      '22023',
      /^period must be more than 0 and at most 366 days, got 00:00:00$/,
    ],
    [
      'negative period',
      ['product_resync', '[]', '2024-01-01', '-1 hour', 2, null],
      '22023',
      /^period must be more than 0/,
    ],
    [
      'month period',
      ['product_resync', '[]', '2024-01-01', '1 month', 2, null],
      '22023',
      /^period must be given in days, hours, minutes or seconds, not months or years/,
    ],
    [
      'null batches',
      ['product_resync', '[]', '2024-01-01', '1 day', null, null],
      '22004',
      /^batches must not be null$/,
    ],
    [
      'zero batches',
      ['product_resync', '[]', '2024-01-01', '1 day', 0, null],
      '22023',
      /^batches must be between 1 and 1000, got 0$/,
    ],
    [
      'priority',
      ['product_resync', '[]', '2024-01-01', '1 day', 2, 5000],
      '22023',
      /^priority must be between -1000 and 1000, got 5000$/,
    ],
  ];
  it.each(bad)('%s: raises, writes nothing', async (_label, args, code, message) => {
    const before = await rowCounts(db, ['queues']);
    await expect(
      db.pool('api').query('select * from schedules.generate_staggered_tasks($1, $2, $3, $4, $5, $6)', args),
    ).rejects.toMatchObject({ code, message: expect.stringMatching(message) });
    expect(await rowCounts(db, ['queues'])).toEqual(before);
  });

  it('the worker may not generate batches', async () => {
    await expect(
      db
        .pool('worker')
        .query(`select * from schedules.generate_staggered_tasks('product_resync', '[]', now(), '1 day', 1)`),
    ).rejects.toMatchObject({ code: '42501' });
  });
});
