// Progress reports (sql/queues/progress.sql): recorded as facts by the worker, fenced by
// the run's lease, shown by admin.get_task; bad values refused with nothing written.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const reports = async () => (await db.query('select count(*)::int as n from queues.task_progress')).rows[0].n as number;
async function running(): Promise<{ id: string; lease: string }> {
  const { rows } = await db.pool('app').query<{ id: string }>(`select queues.enqueue('product_resync', '{}') as id`);
  const claimed = await db
    .pool('worker')
    .query<{ task_lease_id: string }>(
      `select task_lease_id from queues.claim_tasks('w', 1, '{product_resync}', 60) where task_id = $1`,
      [rows[0].id],
    );
  return { id: rows[0].id, lease: claimed.rows[0].task_lease_id };
}
const record = (id: string, lease: string, done: unknown, total: unknown, note: unknown) =>
  db.pool('worker').query('select queues.record_progress($1, $2, $3, $4, $5)', [id, lease, done, total, note]);

describe('queues.record_progress', () => {
  it('records reports of the current lease; admin.get_task shows the latest and how many', async () => {
    const { id, lease } = await running();
    await record(id, lease, 0, 40, 'listing files');
    await record(id, lease, 12, 40, 'deleting files');
    const { rows } = await db.pool('api').query(`select admin.get_task($1) -> 'progress' as progress`, [id]);
    expect(rows[0].progress).toMatchObject({
      done: 12,
      total: 40,
      note: 'deleting files',
      task_lease_id: Number(lease),
      reports: 2,
    });
    // A task that never reported has progress null.
    const other = await running();
    const none = await db.pool('api').query(`select admin.get_task($1) -> 'progress' as progress`, [other.id]);
    expect(none.rows[0].progress).toBeNull();
  });

  it('refuses a report of a lease that is no longer current (lease_lost), writing nothing', async () => {
    const { id, lease } = await running();
    await db
      .pool('worker')
      .query('select * from queues.complete_tasks(array[$1::bigint], array[$2::bigint])', [id, lease]);
    const before = await reports();
    await expect(record(id, lease, 1, 2, null)).rejects.toMatchObject({
      code: '55000',
      constraint: 'task_lease_current',
    });
    expect(await reports()).toBe(before);
  });

  it.each([
    ['a null done', [null, 1, null], '22004', 'must not be null'],
    ['a negative done', [-1, null, null], '22023', 'done must not be negative'],
    ['a total below done', [5, 4, null], '22023', 'total must be at least done'],
    ['a long note', [1, 2, 'x'.repeat(501)], '22023', 'note must be at most 500'],
  ])('refuses %s and writes nothing', async (_name, [done, total, note], code, message) => {
    const { id, lease } = await running();
    const before = await reports();
    await expect(record(id, lease, done, total, note)).rejects.toMatchObject({
      code,
      message: expect.stringContaining(message),
    });
    expect(await reports()).toBe(before);
  });

  it('only the worker database user may record progress', async () => {
    const { id, lease } = await running();
    await expect(
      db.pool('app').query('select queues.record_progress($1, $2, 1, 2, null)', [id, lease]),
    ).rejects.toMatchObject({ code: '42501' });
  });
});
