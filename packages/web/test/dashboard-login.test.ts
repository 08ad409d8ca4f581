// The dashboard's login in headless Chromium (Debian's /usr/bin/chromium through
// playwright-core), against the API on a real test database with reads closed (the
// default): the login screen comes first and no data is shown before it; a read user sees
// the pages, who is logged in and the level, with every change button disabled and payload
// search off; a wrong token is refused and the login stays; an operator (name and token)
// cancels a task from its page, and the change appears in the task's audit section and on
// the Audit page naming the operator. The credential is kept in sessionStorage (this tab).
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type { Page, Route } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';
import { openBrowser, type Browser } from './support/browser.js';

const OPERATOR = { name: 'olga', level: 'operator' as const, token: 'olga-dashboard-token-0123456789' };
const READER = { name: 'rita', level: 'read' as const, token: 'rita-dashboard-token-0123456789' };

let db: TestDatabase;
let app: FastifyInstance;
let base: string;
let page: Page;
let browser: Browser | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), users: [OPERATOR, READER], logLevel: 'silent' });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
  browser = await openBrowser({ name: 'dashboard-login', origin: base });
  ({ page } = browser);
});

afterAll(async () => {
  await browser?.close();
  await app?.close();
  await db?.drop();
});

async function logOut(): Promise<void> {
  await page.goto(`${base}/#/`);
  await page.evaluate(() => sessionStorage.clear());
  await page.reload();
  await page.getByTestId('login-form').waitFor();
}

async function logIn(name: string, token: string): Promise<void> {
  if (name) await page.getByTestId('login-name').fill(name);
  await page.getByTestId('login-token').fill(token);
  await page.getByTestId('login-form').getByRole('button').click();
}

it('asks for a credential first and shows no data before it; a wrong token is refused', async () => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const { rows } = await db.query<{ id: string }>(
    `select queues.enqueue('store_discovery', '{"secret": "s3cr3t"}') as id`,
  );
  await logOut();
  await page.goto(`${base}/#/task/${rows[0].id}`);
  await page.reload();
  await page.getByTestId('login-form').waitFor();
  expect(await page.locator('main').textContent()).not.toContain('s3cr3t');
  expect(await page.getByTestId('access-state').textContent()).toMatch(/Not logged in/);

  await logIn('', READER.token.replace(/.$/, 'X')); // same length, wrong
  await expect.poll(() => page.getByTestId('login-error').textContent()).toMatch(/refused/);
  await page.getByTestId('login-form').waitFor();
  expect(await page.evaluate(() => sessionStorage.getItem('queue-api-token'))).toBeNull();
  expect(errors).toEqual([]);
  expect(browser!.outside).toEqual([]);
});

it('a read user sees the pages, who is logged in and the level, and no change can be made', async () => {
  const { rows } = await db.query<{ id: string }>(
    `select queues.enqueue('store_discovery', '{"n": 1}', now() + interval '1 hour') as id`,
  );
  const id = rows[0].id;
  await logOut();
  await page.goto(`${base}/#/task/${id}`);
  await logIn('', READER.token);
  await page.getByTestId('task-fields').waitFor();
  expect(await page.getByTestId('access-user').textContent()).toBe('rita');
  expect(await page.getByTestId('access-level').textContent()).toBe('read');
  expect(await page.getByTestId('access-state').textContent()).toMatch(/Read-only: actions are disabled/);
  expect(await page.getByTestId('payload').textContent()).toContain('"n": 1');
  for (const testid of ['cancel-task', 'run-now-task']) expect(await page.getByTestId(testid).isDisabled()).toBe(true);
  // The tab keeps the credential: a reload stays logged in.
  expect(await page.evaluate(() => sessionStorage.getItem('queue-api-token'))).toBe(READER.token);
  await page.reload();
  await page.getByTestId('task-fields').waitFor();

  await page.goto(`${base}/#/queues`);
  await page.locator('[data-task-type=store_discovery]').waitFor();
  const buttons = page.locator('main button');
  for (let i = 0; i < (await buttons.count()); i++) expect(await buttons.nth(i).isDisabled()).toBe(true);

  await page.goto(`${base}/#/tasks`);
  await page.getByTestId('task-filters').waitFor();
  expect(await page.locator('input[name=payload_path]').isDisabled()).toBe(true);
  expect(await page.locator('input[name=payload_value]').isDisabled()).toBe(true);
  expect(browser!.outside).toEqual([]);
});

it('an operator logs in with name and token, cancels a task, and the change is in the audit trail', async () => {
  const { rows } = await db.query<{ id: string }>(`select queues.enqueue('store_discovery', '{"n": 2}') as id`);
  const id = rows[0].id;
  await logOut();
  await page.goto(`${base}/#/task/${id}`);
  await logIn(OPERATOR.name, OPERATOR.token);
  await page.getByTestId('cancel-task').waitFor();
  expect(await page.getByTestId('access-user').textContent()).toBe('olga');
  expect(await page.getByTestId('access-level').textContent()).toBe('operator');
  expect(await page.evaluate(() => sessionStorage.getItem('queue-api-user'))).toBe('olga');
  expect(await page.getByTestId('cancel-task').isDisabled()).toBe(false);
  await page.getByTestId('cancel-task').click();
  await expect.poll(() => page.getByTestId('action-result').textContent()).toMatch(/cancel: cancelled/);
  const taskAudit = page.getByTestId('task-audit');
  // The task page refreshes every 2 s.
  await expect
    .poll(() => taskAudit.locator('[data-testid=audit-user]').allTextContents(), { timeout: 10_000 })
    .toEqual(['olga']);
  expect(await taskAudit.locator('[data-testid=audit-action]').allTextContents()).toEqual(['cancel_tasks']);

  await page.locator('header nav a[href="#/audit"]').click();
  const list = page.getByTestId('audit-list');
  await list.waitFor();
  await expect.poll(() => list.locator('[data-testid=audit-action]').allTextContents()).toContain('cancel_tasks');
  expect(await list.textContent()).toContain(`#${id}`);

  await page.getByTestId('forget-token').click();
  await page.getByTestId('login-form').waitFor();
  expect(await page.evaluate(() => sessionStorage.getItem('queue-api-token'))).toBeNull();
  expect(browser!.outside).toEqual([]);
});

it('a refusal (401) of requests sent before a login does not log out the user who has just logged in', async () => {
  const { rows } = await db.query<{ id: string }>(`select queues.enqueue('store_discovery', '{"n": 3}') as id`);
  const id = rows[0].id;
  await logOut();
  await page.goto(`${base}/#/task/${id}`);
  await logIn('', READER.token);
  await page.getByTestId('task-fields').waitFor();
  // The reader's page keeps polling: hold its requests (as a slow server would), to answer
  // them 401 once another user has logged in, as the server does when the reader's token
  // has been withdrawn meanwhile.
  const held: Route[] = [];
  await page.route('**/api/**', async (route) => {
    const auth = await route.request().headerValue('authorization');
    if (auth === `Bearer ${READER.token}` && !route.request().url().endsWith('/api/session')) held.push(route);
    else await route.continue();
  });
  try {
    await expect.poll(() => held.length, { timeout: 15_000 }).toBeGreaterThanOrEqual(2);
    await page.getByTestId('forget-token').click();
    await page.getByTestId('login-form').waitFor();
    await logIn(OPERATOR.name, OPERATOR.token);
    await page.getByTestId('cancel-task').waitFor();
    expect(await page.getByTestId('access-user').textContent()).toBe('olga');
    // Every held request refused at once; the old page's refresh says it failed.
    const refusal = { error: 'unauthorized', message: 'a Bearer token or Basic credential is required' };
    await Promise.all(held.map((r) => r.fulfill({ status: 401, json: refusal })));
    await expect.poll(() => page.locator('#updated').textContent(), { timeout: 10_000 }).toMatch(/refresh failed/);
    // The operator's credential was not the one refused: it is kept, and so is the page.
    expect(await page.evaluate(() => sessionStorage.getItem('queue-api-token'))).toBe(OPERATOR.token);
    expect(await page.evaluate(() => sessionStorage.getItem('queue-api-user'))).toBe('olga');
    await page.reload();
    await page.getByTestId('cancel-task').waitFor();
    expect(await page.getByTestId('access-user').textContent()).toBe('olga');
    expect(browser!.outside).toEqual([]);
  } finally {
    await page.unroute('**/api/**');
  }
});
