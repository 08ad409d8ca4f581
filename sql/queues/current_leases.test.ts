// queues.current_leases (sql/queues/steps.sql), the lease check of a batch of steps, keeps
// one plan per session: a plan made while the claim leases were few must not scan them
// once they have grown.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, explainNested, planNodes, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(`insert into queues.task_type (task_type) values ('leases_check') on conflict do nothing`);
});
afterAll(async () => {
  await db?.drop();
});

it('planned while the claim leases were few, reads them by index after they have grown', async () => {
  const { rows: enqueued } = await db.query<{ id: string }>(`select queues.enqueue('leases_check', '{}')::text as id`);
  const { rows: claimed } = await db.query<{ task_id: string; task_lease_id: string }>(
    `select task_id::text, task_lease_id::text
       from queues.claim_tasks_at(now(), 'w-check', 1, array['leases_check'], 60, 5)`,
  );
  expect(claimed.map((c) => c.task_id)).toEqual([enqueued[0].id]);
  const [{ task_id: taskId, task_lease_id: leaseId }] = claimed;
  const root = await db.client('root');
  try {
    await root.query('analyze queues.claim_lease, queues.task_pending');
    const check = `select queues.current_leases(array[$1::bigint, $1::bigint], array[$2::bigint, $2::bigint + 1]) as held`;
    // This session plans the check now, with one claim lease.
    expect((await root.query(check, [taskId, leaseId])).rows).toEqual([{ held: [true, false] }]);
    // 3,000 claim leases more, of other tasks, in the task's partition.
    await root.query(`
      insert into queues.claim_lease (task_id, worker_key, leased_at, expires_at, task_ids, task_range)
      select r * 100 + 100099, 1, now(), now() + interval '1 minute',
             array(select r * 100 + 100000 + g from generate_series(0, 99) g),
             int8range(r * 100 + 100000, r * 100 + 100099, '[]')
        from generate_series(0, 2999) r`);
    const plans = await explainNested(root, check, [taskId, leaseId]);
    const statement = plans.find((p) => p.query.includes('current_lease_id from queues.task_pending'));
    expect(statement, 'the check statement').toBeDefined();
    expect((await root.query(check, [taskId, leaseId])).rows).toEqual([{ held: [true, false] }]);
    // No partition of the claim leases read by a sequential scan.
    const scans = planNodes(statement!.plan).filter(
      (n) =>
        n['Node Type'] === 'Seq Scan' &&
        String(n['Relation Name'] ?? '').startsWith('claim_lease') &&
        Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0) > 0,
    );
    expect(
      scans.map((n) => `${String(n['Relation Name'])}: ${Number(n['Rows Removed by Filter'] ?? 0)} rows read`),
    ).toEqual([]);
  } finally {
    await root.end();
  }
});
