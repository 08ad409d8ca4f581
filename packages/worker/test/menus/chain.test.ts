// The seed's chain, end to end through a real worker against the fake platform: one
// store discovery -> entry-point discovery per new store -> product discovery -> the
// daily staggered resync. Every follow-up is enqueued by SQL from the completed step.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { claimTasks } from '@org/queue-client';
import { startFakeMenuPlatform, type FakeMenuPlatform } from '@org/menu-sync';
import { discover, eventually, factsOf, fastRetries, pendingCount, startWorker } from './support.js';

let db: TestDatabase;
let fake: FakeMenuPlatform;

beforeAll(async () => {
  db = await createTestDatabase();
  await fastRetries(db);
  fake = await startFakeMenuPlatform({ stores: 5 });
});
afterAll(async () => {
  await fake?.close();
  await db?.drop();
});

it('one discovery leads every new store through entry point, products and into the staggered resync', async () => {
  const discoveryId = await discover(db);
  const worker = await startWorker(db, fake, { concurrency: 3 });
  try {
    await eventually(async () => (await pendingCount(db)) === 0, 'the chain drained');

    // Each store went through the chain in order, each step enqueued by the one before.
    const { rows: chains } = await db.query(`
      select s.slug,
             array_agg(t.task_type order by c.completed_at, t.task_id) as steps,
             bool_and(c.outcome = 'succeeded') as all_succeeded
        from menus.store s
        join queues.task t on (t.payload ->> 'store_id')::bigint = s.store_id
        join queues.task_end c on c.task_id = t.task_id
       group by s.slug order by s.slug`);
    expect(chains).toEqual(
      [1, 2, 3, 4, 5].map((n) => ({
        slug: `store-${n}`,
        steps: ['entry_point_discovery', 'product_discovery'],
        all_succeeded: true,
      })),
    );
    const discovery = await factsOf(db, discoveryId);
    expect(discovery.results[0].new_store_ids).toHaveLength(5);

    // The daily generation (yesterday, so every batch is due now) takes every active store.
    const { rows: batches } = await db
      .pool('api')
      .query(
        `select batch, scheduled_at, task_count from menus.generate_resync_tasks(6, (now() at time zone 'UTC')::date - 1)`,
      );
    expect(batches.map((b) => b.task_count)).toEqual([1, 1, 1, 1, 1, 0]);
    expect(batches.map((b) => new Date(b.scheduled_at).getUTCHours())).toEqual([0, 4, 8, 12, 16, 20]);
    await eventually(async () => (await pendingCount(db)) === 0, 'resyncs done');

    const { rows: resyncs } = await db.query(`
      select s.slug, c.outcome, r.result
        from queues.task t
        join menus.store s on s.store_id = (t.payload ->> 'store_id')::bigint
        join queues.task_end c on c.task_id = t.task_id
        join queues.task_result r on r.task_id = t.task_id
       where t.task_type = 'product_resync' order by s.slug`);
    expect(resyncs.map((r) => [r.slug, r.outcome, r.result.products])).toEqual(
      [1, 2, 3, 4, 5].map((n) => [`store-${n}`, 'succeeded', 4 + n]),
    );
    // Two snapshots per product now: the initial crawl and the resync.
    const { rows: snapshots } = await db.query(
      `select min(n)::int as min, max(n)::int as max from (select count(*) as n from menus.product_snapshot group by product_id) x`,
    );
    expect(snapshots).toEqual([{ min: 2, max: 2 }]);
  } finally {
    await worker.stop();
  }
});

it('new-store discovery is claimed before routine resync, whatever was enqueued first', async () => {
  const { rows: stores } = await db.query(
    `select store_id, platform_dispensary_id from menus.store_platform_id order by store_id`,
  );
  // Routine resyncs for every known store, enqueued first ...
  for (const s of stores) {
    await db
      .pool('app')
      .query(`select queues.enqueue('product_resync', $1, now() - interval '1 minute', 0, $2, 3)`, [
        { store_id: Number(s.store_id), platform_dispensary_id: s.platform_dispensary_id },
        `store:${s.store_id}`,
      ]);
  }
  // ... then a discovery that finds two new stores, recorded by its completion.
  fake.setStoreCount(7);
  const discoveryId = await discover(db);
  const worker = await startWorker(db, fake, { roles: ['store_discovery'] });
  await eventually(async () => (await factsOf(db, discoveryId)).outcome !== null, 'discovery done');
  await worker.stop();

  const claimed = await claimTasks(db.pool('worker'), {
    workerId: 'both-roles',
    limit: 3,
    taskTypes: ['entry_point_discovery', 'product_resync'],
  });
  expect(claimed.map((t) => t.taskType)).toEqual(['entry_point_discovery', 'entry_point_discovery', 'product_resync']);
});
