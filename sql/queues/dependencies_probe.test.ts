// What a task's end costs the dependency triggers (sql/queues/dependencies.sql) while no
// task waits: one probe of the partial index of the waiting claim-index rows
// (task_pending_waiting_idx), and no read of the partitioned queues.task_dependency, even
// once dependencies have been recorded. Read from the plans of the nested statements.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, explainNested, planNodes, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const TYPE = 'product_resync';
const enqueue = async (dependsOn: string[] | null = null) =>
  (
    await db.query<{ id: string }>(
      `select queues.enqueue_internal($1, '{}', _depends_on => $2::bigint[])::text as id`,
      [TYPE, dependsOn],
    )
  ).rows[0].id;

it('an end with no task waiting probes only the empty waiting index; with one waiting, it reads the edges', async () => {
  // Dependencies recorded and all released: edges exist, nothing waits.
  const a = await enqueue();
  const b = await enqueue([a]);
  await db.query(`select * from queues.complete_tasks(array[$1::bigint])`, [a]);
  await db.query(`select * from queues.complete_tasks(array[$1::bigint])`, [b]);
  expect(Number((await db.query('select count(*) as n from queues.task_dependency')).rows[0].n)).toBe(1);

  const root = await db.client('root');
  try {
    /** The nested plans of ending one task, each way an end is written. */
    const endPlans = async (outcome: 'succeeded' | 'failed') => {
      const id = await enqueue();
      const plans = await explainNested(
        root,
        `select * from queues.complete_tasks(array[$1::bigint], null, array[$2::text], array[false])`,
        [id, outcome],
      );
      return plans.flatMap((p) => planNodes(p.plan).map((n) => ({ query: p.query, node: n })));
    };
    for (const outcome of ['succeeded', 'failed'] as const) {
      const nodes = await endPlans(outcome);
      const probes = nodes.filter((n) => n.node['Index Name'] === 'task_pending_waiting_idx');
      expect(probes, outcome).toHaveLength(1);
      expect(probes[0].node['Node Type']).toMatch(/^Index (Only )?Scan$/);
      expect(Number(probes[0].node['Actual Rows'])).toBe(0);
      const dependencyReads = nodes.filter((n) => String(n.node['Relation Name'] ?? '').startsWith('task_dependency'));
      expect(
        dependencyReads.map((n) => n.query.slice(0, 80)),
        outcome,
      ).toEqual([]);
    }

    // A task waiting (for another task): an end reads the edges, and releases its dependents.
    const c = await enqueue();
    const d = await enqueue([c]);
    const nodes = await explainNested(root, `select * from queues.complete_tasks(array[$1::bigint])`, [c]);
    expect(
      nodes
        .flatMap((p) => planNodes(p.plan))
        .some((n) => String(n['Relation Name'] ?? '').startsWith('task_dependency')),
    ).toBe(true);
    const { rows } = await db.query(
      `select available_at <> 'infinity' as ready from queues.task_pending where task_id = $1`,
      [d],
    );
    expect(rows).toEqual([{ ready: true }]);
  } finally {
    await root.end();
  }
});
