// Priority and per-resource locking, alone and under 16 concurrent claimers.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, explainNested, planNodes, type TestDatabase, endPendingTasks } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await endPendingTasks(db);
  await db.query('delete from queues.resource_lease');
});

async function enqueueMany(
  tasks: { priority?: number; resource_key?: string; scheduled_at?: string; payload?: object }[],
) {
  const { rows } = await db
    .pool('owner')
    .query('select task_id from queues.enqueue_many($1::jsonb)', [
      JSON.stringify(tasks.map((t) => ({ task_type: 'db_function', payload: t.payload ?? {}, ...t }))),
    ]);
  return rows.map((r) => r.task_id as string);
}

const claim = async (worker: string, limit = 10) =>
  (
    await db
      .pool('worker')
      .query(`select task_id, task_lease_id, resource_key from queues.claim_tasks($1, $2)`, [worker, limit])
  ).rows;

describe('priority', () => {
  it('claims higher priority first, then scheduled_at, then task_id', async () => {
    const ids = await enqueueMany([
      { priority: 0, scheduled_at: '2020-01-01T00:00:00Z' },
      { priority: 5, scheduled_at: '2020-01-03T00:00:00Z' },
      { priority: 5, scheduled_at: '2020-01-02T00:00:00Z' },
      { priority: -3, scheduled_at: '2019-01-01T00:00:00Z' },
      { priority: 5, scheduled_at: '2020-01-02T00:00:00Z' },
    ]);
    const order: string[] = [];
    for (let i = 0; i < 5; i++) order.push(...(await claim('w', 1)).map((r) => r.task_id));
    expect(order).toEqual([ids[2], ids[4], ids[1], ids[0], ids[3]]);
  });
});

describe('resource keys', () => {
  it('at most one task per key is leased; the others wait, then run when the holder completes', async () => {
    const [a1, a2, b1] = await enqueueMany([
      { resource_key: 'store:1' },
      { resource_key: 'store:1' },
      { resource_key: 'store:2' },
    ]);
    const first = await claim('w1');
    expect(first.map((r) => r.task_id).sort()).toEqual([a1, b1].sort());
    expect(await claim('w2')).toEqual([]);
    const holder = first.find((r) => r.task_id === a1)!;
    await db.pool('worker').query('select queues.complete_task($1, $2)', [a1, holder.task_lease_id]);
    expect((await claim('w2')).map((r) => r.task_id)).toEqual([a2]);
    // Waiting is not failing: nothing was abandoned or recorded as an error.
    expect((await db.query('select count(*)::int as n from queues.error')).rows[0].n).toBe(0);
  });

  it('an expired holder lets the next task take the key; a released one frees it at once', async () => {
    const [x1, x2] = await enqueueMany([{ resource_key: 'k' }, { resource_key: 'k' }]);
    const [held] = await claim('w1', 1);
    expect(held.task_id).toBe(x1);
    await db
      .pool('worker')
      .query('select * from queues.release_leases($1::bigint[], $2::bigint[])', [[x1], [held.task_lease_id]]);
    // Released: the key is free, and x1 (first in order) takes it again.
    expect((await claim('w2', 1)).map((r) => r.task_id)).toEqual([x1]);
    const after = await db.query(
      `select task_id from queues.claim_tasks_at(now() + interval '10 minutes', 'w3', 10, null, 60, 5)`,
    );
    // x1's lease expired at +5 min: one of the two holds the key again, never both.
    expect(after.rows).toHaveLength(1);
    expect([x1, x2]).toContain(after.rows[0].task_id);
  });

  it('16 concurrent claimers: never two live leases on one key, and every task runs', async () => {
    const keys = 20;
    const perKey = 15;
    const tasks = [];
    for (let k = 0; k < keys; k++)
      for (let i = 0; i < perKey; i++) tasks.push({ resource_key: `r${k}`, priority: i % 3 });
    const ids = await enqueueMany(tasks);
    const clients = await Promise.all(Array.from({ length: 16 }, () => db.client('worker')));
    const observer = await db.client('owner');
    const done = new Set<string>();
    let idle = 0;
    let running = true;
    // Snapshots of the claim index during the run: keys with two or more live leases.
    let observations = 0;
    let violations = 0;
    const watching = (async () => {
      while (running) {
        const { rows } = await observer.query(
          `select count(*)::int as n from (
             select resource_key from queues.task_pending
              where resource_key is not null and current_lease_id is not null and available_at > now()
              group by resource_key having count(*) > 1) k`,
        );
        observations++;
        violations += rows[0].n;
      }
    })();
    await Promise.all(
      clients.map(async (client, n) => {
        while (done.size < ids.length && idle < 2000) {
          const { rows } = await client.query(
            `select task_id, task_lease_id from queues.claim_tasks($1, 4, null, 300)`,
            [`c${n}`],
          );
          if (rows.length === 0) {
            idle++;
            await new Promise((r) => setTimeout(r, 2));
            continue;
          }
          await client.query('select * from queues.complete_tasks($1::bigint[], $2::bigint[])', [
            rows.map((r) => r.task_id),
            rows.map((r) => r.task_lease_id),
          ]);
          for (const r of rows) done.add(r.task_id);
        }
      }),
    );
    running = false;
    await watching;
    await Promise.all([...clients, observer].map((c) => c.end()));
    expect(done.size).toBe(keys * perKey);
    expect(observations).toBeGreaterThan(20);
    expect(violations).toBe(0);
    // Every task was leased exactly once: waiting on a key never cost a lease.
    const { rows } = await db.query(
      'select count(*)::int as leases, count(distinct task_id)::int as tasks from queues.task_leases where task_id = any($1::bigint[])',
      [ids],
    );
    expect(rows[0]).toEqual({ leases: keys * perKey, tasks: keys * perKey });
  });
});

describe('the completion of unkeyed tasks', () => {
  it('reads no task_pending row to find the resource keys it must lock (task_pending_keyed_idx)', async () => {
    const ids = await enqueueMany(Array.from({ length: 500 }, (_, n) => ({ payload: { n } })));
    const claimed = await claim('unkeyed', 500);
    expect(claimed).toHaveLength(500);
    const root = await db.client('root');
    try {
      const plans = await explainNested(root, 'select * from queues.complete_tasks($1::bigint[], $2::bigint[])', [
        claimed.map((r) => r.task_id),
        claimed.map((r) => r.task_lease_id),
      ]);
      const keys = plans.filter((p) => p.query.includes('select distinct p.resource_key'));
      expect(keys).toHaveLength(1);
      // Rows of task_pending the statement read (returned or filtered out), over all loops.
      const read = planNodes(keys[0].plan)
        .filter((n) => (n['Relation Name'] ?? '') === 'task_pending')
        .reduce(
          (sum, n) =>
            sum +
            (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) * Number(n['Actual Loops'] ?? 1),
          0,
        );
      expect(read).toBe(0);
    } finally {
      await root.end();
    }
    const { rows } = await db.query(
      'select count(*)::int as n from queues.task_pending where task_id = any($1::bigint[])',
      [ids],
    );
    expect(rows[0].n).toBe(0);
  });

  it('still locks the key of a keyed task among unkeyed ones: its completion frees the key for the next task', async () => {
    await enqueueMany([
      { payload: { n: 1 } },
      { resource_key: 'k', payload: { n: 2 } },
      { resource_key: 'k', payload: { n: 3 } },
    ]);
    const first = await claim('mixed', 10);
    expect(first.filter((r) => r.resource_key === 'k')).toHaveLength(1);
    await db
      .pool('worker')
      .query('select * from queues.complete_tasks($1::bigint[], $2::bigint[])', [
        first.map((r) => r.task_id),
        first.map((r) => r.task_lease_id),
      ]);
    const second = await claim('mixed', 10);
    expect(second.map((r) => r.resource_key)).toEqual(['k']);
  });
});
