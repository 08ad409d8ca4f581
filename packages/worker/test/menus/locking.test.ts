// Per-store locking under 16 concurrent claimers: many resync tasks per store, all ready
// at once; the fake platform counts menu requests in flight per store, and the leases
// show that no two runs of one store overlapped.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { claimTasks } from '@org/queue-client';
import { createHttpMenuPlatform, menuProcessor, startFakeMenuPlatform, type FakeMenuPlatform } from '@org/menu-sync';
import { runAndComplete } from './support.js';

let db: TestDatabase;
let fake: FakeMenuPlatform;

beforeAll(async () => {
  db = await createTestDatabase();
  fake = await startFakeMenuPlatform({ stores: 8, slowRate: 0.5, slowMs: 30 });
});
afterAll(async () => {
  await fake?.close();
  await db?.drop();
});

it('16 claimers, 8 stores, 6 resyncs each: at most one running task per store, every task done once', async () => {
  // Stores with platform ids, as entry-point discovery leaves them.
  await db.query(
    `insert into menus.store (slug, name, menu_url) select 'store-' || n, 'Store ' || n, 'u' || n from generate_series(1, 8) n`,
  );
  await db.query(
    `
    insert into menus.store_platform_id (store_id, platform_dispensary_id) select store_id, $1::jsonb ->> slug from menus.store`,
    [
      JSON.stringify(
        Object.fromEntries([1, 2, 3, 4, 5, 6, 7, 8].map((n) => [`store-${n}`, fake.store(n).platform_dispensary_id])),
      ),
    ],
  );
  await db.query(`
    select queues.enqueue('product_resync', jsonb_build_object('store_id', e.store_id, 'platform_dispensary_id', e.platform_dispensary_id),
                          null, 0, 'store:' || e.store_id, 3)
      from menus.store_platform_id e cross join generate_series(1, 6) order by random()`);

  const pool = new pg.Pool({ connectionString: db.url('worker'), max: 20 });
  const processor = menuProcessor('product_resync', createHttpMenuPlatform({ baseUrl: fake.url }));
  const claimer = async (i: number) => {
    let idle = 0;
    while (idle < 20) {
      const [task] = await claimTasks(pool, { workerId: `claimer-${i}`, limit: 1, taskTypes: ['product_resync'] });
      if (!task) {
        idle++;
        await new Promise((r) => setTimeout(r, 10));
        continue;
      }
      idle = 0;
      const { result, report } = await runAndComplete(db, processor, task, pool);
      expect([result, report.outcome]).toEqual(['completed', 'succeeded']);
    }
  };
  try {
    await Promise.all(Array.from({ length: 16 }, (_, i) => claimer(i)));
  } finally {
    await pool.end();
  }

  // The platform never saw two menu requests for one store at once ...
  expect(fake.maxConcurrentMenuFetches()).toBe(1);
  const { rows } = await db.query(`
    select count(*)::int as tasks,
           count(*) filter (where c.outcome = 'succeeded')::int as succeeded,
           (select count(*)::int from queues.task_leases) as leases,
           (select count(distinct worker_id)::int from queues.task_lease_effective) as claimers
      from queues.task t join queues.task_end c using (task_id)`);
  expect(rows).toEqual([{ tasks: 48, succeeded: 48, leases: 48, claimers: rows[0].claimers }]);
  expect(rows[0].claimers).toBeGreaterThan(1);
  // ... and no two runs of one store overlap in time (lease start to completion).
  const { rows: overlaps } = await db.query(`
    with runs as (
      select t.resource_key, l.leased_at as s, c.completed_at as e
        from queues.task t join queues.task_leases l using (task_id) join queues.task_end c using (task_id))
    select count(*)::int as n from runs a join runs b
      on a.resource_key = b.resource_key and (a.s, a.e) <> (b.s, b.e) and a.s < b.e and b.s < a.e`);
  expect(overlaps).toEqual([{ n: 0 }]);
});
