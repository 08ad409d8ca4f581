// The dashboard's role-based additions in headless Chromium (as dashboard.test.ts): each
// seed role's queue on the overview, and a task's recorded result on its page.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '@org/db-tools/testing';
import { createApi } from '../src/index.js';

const CHROMIUM = '/usr/bin/chromium';

let db: TestDatabase;
let app: FastifyInstance;
let base: string;
let context: BrowserContext;
let page: Page;
let userDataDir: string;

beforeAll(async () => {
  expect(existsSync(CHROMIUM), `${CHROMIUM} is missing: install it with apt-get install -y chromium`).toBe(true);
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), apiToken: 'dashboard-roles-token-0123', logLevel: 'silent' });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
  userDataDir = mkdtempSync(join(tmpdir(), 'queue-dashboard-roles-'));
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
  });
  await context.route('**/*', (route) => (route.request().url().startsWith(base) ? route.continue() : route.abort()));
  page = context.pages()[0] ?? (await context.newPage());
});

afterAll(async () => {
  await context?.close();
  await app?.close();
  await db?.drop();
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
});

it("shows each role's queue, and a task's result on its page", async () => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const { rows } = await db.query(`
    select queues.enqueue('product_resync', '{"store_id": 1}') as a, queues.enqueue('product_resync', '{"store_id": 2}') as b,
           queues.enqueue('store_discovery', '{}') as c`);
  const [claimed] = (await db.pool('worker').query(`select task_id, task_lease_id from queues.claim_tasks('w', 1, array['store_discovery'])`)).rows;
  await db.pool('worker').query(`select queues.record_task_result($1, $2, '{"new_store_ids": [7, 8]}')`, [claimed.task_id, claimed.task_lease_id]);
  await db.pool('worker').query(`select queues.complete_task($1, $2, 'succeeded')`, [claimed.task_id, claimed.task_lease_id]);

  await page.goto(`${base}/#/`);
  await page.locator('[data-testid=role-queues] tr[data-role=product_resync]').waitFor();
  const cells = await page.locator('[data-testid=role-queues] tr[data-role=product_resync] td').allTextContents();
  expect(cells.slice(0, 4)).toEqual(['product_resync', '2', '2', '0']);
  expect(await page.locator('[data-testid=role-queues] tr').count()).toBe(6); // header + five roles

  await page.goto(`${base}/#/task/${rows[0].c}`);
  await page.locator('table[data-testid=results]').waitFor();
  expect(await page.locator('[data-testid=results] pre').textContent()).toContain('"new_store_ids"');
  expect(errors).toEqual([]);
});
