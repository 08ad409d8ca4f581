// A 5xx storm from the platform: every attempt fails, each failure is recorded, the
// tasks are retried up to max_attempts and then dead-lettered; nothing is lost, and a
// redrive after the storm completes them. Then a flaky platform (30% 5xx): every task
// ends, and each failed attempt left one error.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { startFakeMenuPlatform, type FakeMenuPlatform } from '@org/menu-sync';
import { eventually, fastRetries, pendingCount, startWorker } from './support.js';

let db: TestDatabase;
let fake: FakeMenuPlatform;

beforeAll(async () => {
  db = await createTestDatabase();
  await fastRetries(db);
  fake = await startFakeMenuPlatform({ stores: 8, seed: 7 });
  await db.query(
    `insert into menus.store (slug, name, menu_url) select 'store-' || n, 'Store ' || n, 'u' || n from generate_series(1, 8) n`,
  );
  await db.query(
    `insert into menus.store_platform_id (store_id, platform_dispensary_id) select store_id, $1::jsonb ->> slug from menus.store`,
    [
      JSON.stringify(
        Object.fromEntries([1, 2, 3, 4, 5, 6, 7, 8].map((n) => [`store-${n}`, fake.store(n).platform_dispensary_id])),
      ),
    ],
  );
});
afterAll(async () => {
  await fake?.close();
  await db?.drop();
});

// As the owner: the app role may enqueue but not read the stores.
const enqueueResyncs = async (perStore: number) =>
  (
    await db.query(
      `select queues.enqueue('product_resync', jsonb_build_object('store_id', e.store_id, 'platform_dispensary_id', e.platform_dispensary_id),
                             null, 0, 'store:' || e.store_id, 3)::text as id
         from menus.store_platform_id e cross join generate_series(1, $1::int)`,
      [perStore],
    )
  ).rows.map((r) => r.id as string);

it('every attempt fails: 3 attempts each, then dead letters; nothing lost; a redrive completes them', async () => {
  const ids = await enqueueResyncs(5);
  fake.outage(503);
  const worker = await startWorker(db, fake, { roles: ['product_resync'], concurrency: 4 });
  try {
    await eventually(async () => (await pendingCount(db, 'product_resync')) === 0, 'every task ended');
  } finally {
    await worker.stop();
    fake.outage(null);
  }
  const { rows } = await db.query(
    `select t.task_id::text, c.outcome,
            (select count(*)::int from queues.error e where e.task_id = t.task_id) as errors,
            (select count(*)::int from queues.task_leases l where l.task_id = t.task_id) as leases,
            (select count(*)::int from queues.task_attempt_failed f where f.task_id = t.task_id) as retries,
            (select count(*)::int from queues.task_result r where r.task_id = t.task_id) as results
       from queues.task t left join queues.task_end c using (task_id)
      where t.task_id = any($1::bigint[]) order by t.task_id`,
    [ids],
  );
  expect(rows).toEqual(
    ids.map((id) => ({ task_id: id, outcome: 'failed', errors: 3, leases: 3, retries: 2, results: 0 })),
  );
  expect((await db.query(`select count(*)::int as n from menus.product_snapshot`)).rows[0].n).toBe(0);
  const { rows: errors } = await db.query(
    `select distinct regexp_replace(error_message, '/v1/dispensaries/[^/]+/', '/v1/dispensaries/<id>/') as m from queues.error`,
  );
  expect(errors).toEqual([{ m: 'product_resync: GET /v1/dispensaries/<id>/menu: HTTP 503: the platform is down' }]);

  const { rows: dead } = await db
    .pool('api')
    .query(`select task_id::text from admin.list_dead_letters('product_resync', 500, null)`);
  expect(dead.map((d) => d.task_id).sort()).toEqual([...ids].sort());

  // After the storm: each dead letter sent round again completes.
  for (const id of ids) await db.pool('api').query(`select admin.redrive_task($1)`, [id]);
  const again = await startWorker(db, fake, { roles: ['product_resync'], concurrency: 4 });
  try {
    await eventually(async () => (await pendingCount(db, 'product_resync')) === 0, 'redriven tasks done');
  } finally {
    await again.stop();
  }
  const { rows: redriven } = await db.query(
    `select c.outcome, count(*)::int as n from queues.task_redriven d join queues.task_end c on c.task_id = d.new_task_id group by 1`,
  );
  expect(redriven).toEqual([{ outcome: 'succeeded', n: 40 }]);
});

it('a flaky platform (30% 5xx, some slow): every task ends, each failed attempt left an error', async () => {
  fake.setRates({ errorRate: 0.3, slowRate: 0.1, slowMs: 50 });
  const ids = await enqueueResyncs(10);
  const worker = await startWorker(db, fake, { roles: ['product_resync'], concurrency: 8 });
  try {
    await eventually(async () => (await pendingCount(db, 'product_resync')) === 0, 'every task ended');
  } finally {
    await worker.stop();
    fake.setRates({ errorRate: 0, slowRate: 0 });
  }
  const { rows } = await db.query(
    `select c.outcome,
            count(*)::int as tasks,
            sum((select count(*) from queues.task_leases l where l.task_id = t.task_id))::int as leases,
            sum((select count(*) from queues.error e where e.task_id = t.task_id))::int as errors,
            sum((select count(*) from queues.task_result r where r.task_id = t.task_id))::int as results
       from queues.task t join queues.task_end c using (task_id)
      where t.task_id = any($1::bigint[]) group by 1 order by 1`,
    [ids],
  );
  // No lease was released: a deadlock between a completion and a heartbeat would show
  // here (the worker releases a task whose transaction failed that way).
  expect((await db.query(`select count(*)::int as n from queues.task_lease_release`)).rows[0].n).toBe(0);
  const total = rows.reduce((sum, r) => sum + r.tasks, 0);
  expect(total).toBe(80);
  const succeeded = rows.find((r) => r.outcome === 'succeeded')!;
  // A success: one result, and one error per earlier failed attempt.
  expect(succeeded.results).toBe(succeeded.tasks);
  expect(succeeded.errors).toBe(succeeded.leases - succeeded.tasks);
  expect(succeeded.errors).toBeGreaterThan(0);
  const failed = rows.find((r) => r.outcome === 'failed');
  if (failed) expect([failed.errors, failed.leases, failed.results]).toEqual([failed.tasks * 3, failed.tasks * 3, 0]);
});
