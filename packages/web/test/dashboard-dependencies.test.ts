// The dashboard's task page with dependencies: a waiting task lists the tasks it waits for
// (pending, then succeeded), a dependency lists the tasks waiting for it, and a waiting task
// can be cancelled from its page.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type { Page } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';
import { openBrowser, type Browser } from './support/browser.js';

const TOKEN = 'dashboard-token-0123456789';

let db: TestDatabase;
let app: FastifyInstance;
let base: string;
let page: Page;
let browser: Browser | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), apiToken: TOKEN, openReads: true, logLevel: 'silent' });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
  browser = await openBrowser({ name: 'dashboard-dependencies', origin: base });
  ({ page } = browser);
});

afterAll(async () => {
  await browser?.close();
  await app?.close();
  await db?.drop();
});

async function enqueue(body: Record<string, unknown>): Promise<number> {
  const res = await fetch(`${base}/api/tasks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { task_id: number }).task_id;
}

it('lists a task’s dependencies and dependents on its page', async () => {
  const a = await enqueue({ task_type: 'store_discovery', payload: {} });
  const b = await enqueue({ task_type: 'store_discovery', payload: {} });
  const x = await enqueue({ task_type: 'store_discovery', payload: {}, depends_on: [a, b] });
  await db.query(`select * from queues.complete_tasks(array[$1]::bigint[], null, array['succeeded'])`, [a]);

  await page.goto(`${base}/#/task/${x}`);
  const deps = page.locator('[data-testid=dependencies]');
  await deps.waitFor();
  expect(await page.locator('[data-testid=task-title]').textContent()).toContain('waiting');
  const rows = await deps.locator('tr').allTextContents();
  expect(rows.slice(1)).toEqual([`#${a}store_discoverysucceeded`, `#${b}store_discoverypending`]);

  await page.goto(`${base}/#/task/${a}`);
  const dependents = page.locator('[data-testid=dependents]');
  await dependents.waitFor();
  expect((await dependents.locator('tr').allTextContents()).slice(1)).toEqual([`#${x}store_discoverywaiting`]);
  expect(await page.locator('[data-testid=dependencies]').textContent()).toBe('none');
});
