// The dashboard's role-based additions in headless Chromium (as dashboard.test.ts): each
// seed role's queue on the overview, and a task's recorded result on its page.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type { Page } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';
import { openBrowser, type Browser } from './support/browser.js';

let db: TestDatabase;
let app: FastifyInstance;
let base: string;
let page: Page;
let browser: Browser | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  app = createApi({
    databaseUrl: db.url('api'),
    apiToken: 'dashboard-roles-token-0123',
    openReads: true, // read without logging in (dashboard-login.test.ts covers the login)
    logLevel: 'silent',
  });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
  browser = await openBrowser({ name: 'dashboard-roles', origin: base });
  ({ page } = browser);
});

afterAll(async () => {
  await browser?.close();
  await app?.close();
  await db?.drop();
});

it("shows each role's queue, and a task's result on its page", async () => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const { rows } = await db.query(`
    select queues.enqueue('product_resync', '{"store_id": 1}') as a, queues.enqueue('product_resync', '{"store_id": 2}') as b,
           queues.enqueue('store_discovery', '{}') as c`);
  const [claimed] = (
    await db
      .pool('worker')
      .query(`select task_id, task_lease_id from queues.claim_tasks('w', 1, array['store_discovery'])`)
  ).rows;
  await db
    .pool('worker')
    .query(`select queues.record_task_result($1, $2, '{"new_store_ids": [7, 8]}')`, [
      claimed.task_id,
      claimed.task_lease_id,
    ]);
  await db
    .pool('worker')
    .query(`select queues.complete_task($1, $2, 'succeeded')`, [claimed.task_id, claimed.task_lease_id]);

  // Each role's queue: the Queues page lists every task type (the seed's roles) with its work.
  await page.goto(`${base}/#/queues`);
  const row = page.locator('[data-testid=queues] tr[data-task-type=product_resync]');
  await row.waitFor();
  const cells = await row.locator('td').allTextContents();
  expect(cells[0]).toContain('product_resync');
  expect(cells.slice(2, 6)).toEqual(['0', '2', '0', '0']); // scheduled, ready, running, retrying
  for (const role of [
    'store_discovery',
    'entry_point_discovery',
    'product_discovery',
    'product_resync',
    'analytics_refresh',
  ]) {
    expect(await page.locator(`[data-testid=queues] tr[data-task-type=${role}]`).count()).toBe(1);
  }

  // The overview's "Worker roles" table (README, docs/menus.md): each role's capacity.
  await page.goto(`${base}/#/`);
  const capacity = page.locator('section', { hasText: 'Worker roles' }).locator('[data-testid=capacity]');
  const resync = capacity.locator('tr', { hasText: 'product_resync' });
  await resync.waitFor();
  expect((await resync.locator('td').allTextContents()).slice(0, 3)).toEqual(['product_resync', '2', '2']);

  await page.goto(`${base}/#/task/${rows[0].c}`);
  await page.locator('pre[data-testid=result]').waitFor();
  expect(await page.locator('pre[data-testid=result]').textContent()).toContain('"new_store_ids"');
  expect(errors).toEqual([]);
});
