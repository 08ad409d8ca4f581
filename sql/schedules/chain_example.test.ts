// Task chaining (the seed's store_discovery → entry_point_discovery → product_discovery):
// each db_function step enqueues its follow-ups from SQL, and the drive helper plays the
// worker to the end. The steps are an example fixture (chain_example.sql), loaded here
// into this file's own database only.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/db-tools/testing';
import { drive } from '../test-support/drive.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  const sql = readFileSync(new URL('./chain_example.sql', import.meta.url), 'utf8').replaceAll(
    ':DATABASE_WORKER',
    db.roles.worker,
  );
  await db.query(sql);
});
afterAll(async () => {
  await db?.drop();
});

/** Every task with its step, store and outcome, in enqueue order; and the claim order. */
async function chainFacts() {
  const { rows } = await db.query<{
    task_id: string;
    step: string;
    store_id: number | null;
    resource_key: string | null;
    outcome: string | null;
    lease_id: string | null;
  }>(
    `select t.task_id::text, replace(t.payload ->> 'db_function', 'schedules_example.', '') as step,
            (t.payload ->> 'store_id')::int as store_id, t.resource_key, c.outcome,
            (select min(l.task_lease_id)::text from queues.task_lease l where l.task_id = t.task_id) as lease_id
       from queues.task t left join queues.task_completed c using (task_id)
      order by t.task_id`,
  );
  return rows;
}

it('discovery → entry point → product discovery, driven to the end, in causal order', async () => {
  // One store is known already.
  await db.query(`insert into schedules_example.store (menu_url) values ('https://menus.example/known-1')`);
  await db.query(
    `select queues.enqueue('db_function', $1)`,
    [
      JSON.stringify({
        task_type: 'db_function',
        db_function: 'schedules_example.store_discovery',
        menu_urls: ['https://menus.example/known-1', 'https://menus.example/green-leaf', 'https://menus.example/blue-sky'],
      }),
    ],
  );

  const run = await drive(db, { start: new Date(Date.now() + 1000), stepMs: 60_000 });
  // One round per link of the chain.
  expect(run.rounds).toBe(3);
  expect(run.processed.map((p) => [String(p.task.payload.db_function).replace('schedules_example.', ''), p.result.success])).toEqual([
    ['store_discovery', true],
    ['entry_point_discovery', true],
    ['entry_point_discovery', true],
    ['product_discovery', true],
    ['product_discovery', true],
  ]);
  const { rows: ids } = await db.query<{ green: number; blue: number }>(
    `select (select store_id::int from schedules_example.store where menu_url like '%green-leaf') as green,
            (select store_id::int from schedules_example.store where menu_url like '%blue-sky') as blue`,
  );
  const { green, blue } = ids[0];
  expect(run.processed[0].result.payload).toEqual({ new_store_ids: [green, blue] });

  const facts = await chainFacts();
  expect(facts.map((f) => [f.step, f.store_id, f.resource_key, f.outcome])).toEqual([
    ['store_discovery', null, null, 'succeeded'],
    ['entry_point_discovery', green, `store:${green}`, 'succeeded'],
    ['entry_point_discovery', blue, `store:${blue}`, 'succeeded'],
    ['product_discovery', green, `store:${green}`, 'succeeded'],
    ['product_discovery', blue, `store:${blue}`, 'succeeded'],
  ]);
  // Each store's steps were enqueued and claimed after the step that caused them.
  for (const store of [green, blue]) {
    const entry = facts.find((f) => f.step === 'entry_point_discovery' && f.store_id === store)!;
    const product = facts.find((f) => f.step === 'product_discovery' && f.store_id === store)!;
    expect(BigInt(entry.task_id)).toBeGreaterThan(BigInt(facts[0].task_id));
    expect(BigInt(product.task_id)).toBeGreaterThan(BigInt(entry.task_id));
    expect(BigInt(entry.lease_id!)).toBeGreaterThan(BigInt(facts[0].lease_id!));
    expect(BigInt(product.lease_id!)).toBeGreaterThan(BigInt(entry.lease_id!));
  }
  const { rows: stores } = await db.query(
    `select s.menu_url, e.platform_dispensary_id, p.product_count
       from schedules_example.store s
       left join schedules_example.store_entry_point e using (store_id)
       left join schedules_example.store_products_discovered p using (store_id)
      order by s.store_id`,
  );
  expect(stores).toEqual([
    { menu_url: 'https://menus.example/known-1', platform_dispensary_id: null, product_count: null },
    { menu_url: 'https://menus.example/green-leaf', platform_dispensary_id: 'green-leaf', product_count: 10 },
    { menu_url: 'https://menus.example/blue-sky', platform_dispensary_id: 'blue-sky', product_count: 8 },
  ]);
});

it('discovering the same stores again chains nothing; a redelivered entry point enqueues no second crawl', async () => {
  const { rows } = await db.query<{ green: number }>(
    `select store_id::int as green from schedules_example.store where menu_url like '%green-leaf'`,
  );
  const { green } = rows[0];
  const before = (await chainFacts()).length;
  await db.query(`select queues.enqueue('db_function', $1)`, [
    JSON.stringify({ db_function: 'schedules_example.store_discovery', menu_urls: ['https://menus.example/green-leaf'] }),
  ]);
  await db.query(`select queues.enqueue('db_function', $1)`, [
    JSON.stringify({ db_function: 'schedules_example.entry_point_discovery', store_id: green }),
  ]);
  const run = await drive(db, { start: new Date(Date.now() + 1000) });
  expect(run.rounds).toBe(1);
  expect(run.processed[0].result).toEqual({ success: true, payload: { new_store_ids: [] } });
  expect((await chainFacts()).length).toBe(before + 2);
});
