// The dashboard in headless Chromium (Debian's /usr/bin/chromium through playwright-core)
// against the API on a real test database: a task enqueued by the test appears, its page
// shows the payload, and a dead-lettered task is redriven from the page and then run by
// an in-process Worker. The browser may reach nothing but the API's own origin.
// A missing browser FAILS this file (CI installs it: apt-get install -y chromium).
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '@org/db-tools/testing';
import { createLogger, dbFunctionProcessor, ProcessorRegistry, Worker, WorkerMetrics } from '@org/worker';
import { createApi } from '../src/index.js';

const CHROMIUM = '/usr/bin/chromium';
const TOKEN = 'dashboard-token-0123456789';

let db: TestDatabase;
let app: FastifyInstance;
let base: string;
let context: BrowserContext;
let page: Page;
let userDataDir: string;
const external: string[] = [];

beforeAll(async () => {
  expect(existsSync(CHROMIUM), `${CHROMIUM} is missing: install it with apt-get install -y chromium`).toBe(true);
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), apiToken: TOKEN, logLevel: 'silent' });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
  userDataDir = mkdtempSync(join(tmpdir(), 'queue-dashboard-'));
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-quic',
    ],
  });
  // Only the API's origin: anything else is recorded and refused.
  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith(base) || url.startsWith('data:')) return route.continue();
    external.push(url);
    return route.abort();
  });
  page = context.pages()[0] ?? (await context.newPage());
});

afterAll(async () => {
  await context?.close();
  await app?.close();
  await db?.drop();
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
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

it('shows the overview with counts, the throughput chart and capacity', async () => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await enqueue({ task_type: 'product_resync', payload: { overview: true } });
  await page.goto(`${base}/#/`);
  await page.locator('[data-testid=counts] tr[data-task-type=product_resync]').waitFor();
  expect(await page.locator('[data-testid=counts] tr[data-task-type=product_resync] td').nth(2).textContent()).toBe('1'); // ready
  await expect(page.locator('svg[data-testid=throughput-chart]').count()).resolves.toBe(1);
  expect(await page.locator('[data-testid=capacity]').textContent()).toContain('product_resync');
  expect(errors).toEqual([]);
});

it('a task enqueued by the test appears in the list, and its page shows the payload', async () => {
  const id = await enqueue({ task_type: 'store_discovery', payload: { marker: 'hello-from-the-test' } });
  await page.goto(`${base}/#/tasks?task_type=store_discovery`);
  const row = page.locator(`[data-testid=task-list] tr[data-task-id="${id}"]`);
  await row.waitFor();
  expect(await row.textContent()).toContain('ready');
  await row.getByRole('link', { name: `#${id}` }).click();
  await page.locator('[data-testid=payload]').waitFor();
  expect(await page.locator('[data-testid=payload]').textContent()).toContain('hello-from-the-test');
  expect(await page.locator('h1').textContent()).toContain(`Task #${id}`);
  expect(await page.locator('[data-testid=completion]').textContent()).toContain('not completed');
});

it('redrives a dead-lettered task from the page (token asked, kept in sessionStorage), and a worker runs it', async () => {
  // A db_function task that failed: claimed and completed 'failed' by the worker role.
  // db_function steps are enqueued by the owner's SQL only (the REST API gets 403).
  const id = Number(
    (await db.query(`select queues.enqueue('db_function', $1::jsonb) as id`, [JSON.stringify({ db_function: 'internal.noop', marker: 'dead-letter' })])).rows[0].id,
  );
  const { rows } = await db.pool('worker').query<{ task_id: string; task_lease_id: string }>(
    `select task_id, task_lease_id from queues.claim_tasks('w-browser', 1, '{db_function}', 60)`,
  );
  expect(rows[0].task_id).toBe(String(id));
  await db.pool('worker').query('select queues.fail_task($1, $2, $3)', [id, 'simulated failure', rows[0].task_lease_id]);
  await db.pool('worker').query(`select * from queues.complete_tasks($1, $2, '{failed}')`, [[id], [rows[0].task_lease_id]]);

  await page.goto(`${base}/#/dead-letters`);
  const row = page.locator(`[data-testid=dead-letters] tr[data-task-id="${id}"]`);
  await row.waitFor();
  expect(await row.textContent()).toContain('simulated failure');
  expect(await page.getByTestId(`redrive-${id}`).isDisabled()).toBe(true);
  await page.getByTestId('token-input').fill(TOKEN);
  await page.getByTestId('token-form').getByRole('button').click();
  await page.getByTestId(`redrive-${id}`).waitFor();
  expect(await page.evaluate(() => sessionStorage.getItem('queue-api-token'))).toBe(TOKEN);
  await page.getByTestId(`redrive-${id}`).click();
  const result = page.getByTestId('redrive-result');
  await result.getByRole('link').waitFor();
  const newId = Number((await result.getByRole('link').textContent())!.replace('#', ''));
  expect(newId).toBeGreaterThan(id);

  await result.getByRole('link').click();
  await page.locator('h1', { hasText: `Task #${newId}` }).waitFor();
  expect(await page.locator('[data-testid=payload]').textContent()).toContain('dead-letter');
  expect(await page.locator('[data-testid=completion]').textContent()).toContain('not completed');

  // A real worker picks it up; the task page refreshes itself until the completion shows.
  const worker = new Worker({
    databaseUrl: db.url('worker'), roles: ['db_function'], workerId: 'browser-worker', concurrency: 1, pollIntervalMs: 100,
    heartbeatIntervalMs: 1000, leaseSeconds: 30, maxLeases: 5, shutdownGraceMs: 1000,
    registry: new ProcessorRegistry().register('db_function', dbFunctionProcessor()), logger: createLogger('silent'),
  });
  const metrics = new WorkerMetrics(worker);
  await worker.start();
  try {
    await page.locator('[data-testid=completion]', { hasText: 'succeeded' }).waitFor({ timeout: 30_000 });
    expect(await metrics.value('queue_worker_tasks_claimed_total', { task_type: 'db_function' })).toBe(1);
    expect(await metrics.value('queue_worker_tasks_completed_total', { task_type: 'db_function', outcome: 'succeeded' })).toBe(1);
  } finally {
    await worker.stop();
  }
  // The original is no longer a dead letter.
  await page.goto(`${base}/#/dead-letters`);
  await page.locator('[data-testid=dead-letters]').waitFor();
  expect(await page.locator(`[data-testid=dead-letters] tr[data-task-id="${id}"]`).count()).toBe(0);
});

it('shows a process timeline', async () => {
  const { rows } = await db.pool('app').query<{ send_email_task_id: string }>(
    `select * from comms.send_email('from@example.com', 'to@example.com', 'Hi', '<p>hi</p>')`,
  );
  const rootId = rows[0].send_email_task_id;
  await page.goto(`${base}/#/processes?process=send_email`);
  await page.getByRole('link', { name: `send_email #${rootId}` }).click();
  await page.locator('[data-testid=timeline]').waitFor();
  expect(await page.locator('[data-testid=timeline]').textContent()).toContain('started');
});

it('loaded nothing from outside the API origin', () => {
  expect(external).toEqual([]);
});
