// The API reference page (public/api.html) in headless Chromium, offline: reached from the
// dashboard's header, it lists every operation of /api/openapi.json with its method and
// path, opens one to show its parameters and answers, and loads nothing from outside the
// server's origin (no CDN).
// A missing browser FAILS this file (CI installs it: apt-get install -y chromium).
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type { Page } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';
import { openBrowser, type Browser } from './support/browser.js';

const TOKEN = 'reference-token-0123456789';

let db: TestDatabase;
let app: FastifyInstance;
let base: string;
let page: Page;
let browser: Browser | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), apiToken: TOKEN, logLevel: 'silent' });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
  browser = await openBrowser({ name: 'api-reference', origin: base });
  ({ page } = browser);
});

afterAll(async () => {
  await browser?.close();
  await app?.close();
  await db?.drop();
});

it('is linked from the dashboard and lists every operation of the document, offline', async () => {
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(error.message));
  // Logged in as the dashboard keeps it: the tab's credential (the document may need one),
  // there before the dashboard's first request. (Set after a first load, it raced that
  // load's unauthenticated reads, whose 401 makes the dashboard forget the credential.)
  await page.addInitScript((token) => sessionStorage.setItem('queue-api-token', token), TOKEN);
  await page.goto(`${base}/#/`);
  await page.getByRole('link', { name: 'API reference', exact: true }).click();
  await page.waitForURL(`${base}/api.html`);
  await page.locator('main h1', { hasText: 'pg-task-queue operations API' }).waitFor();

  const doc = (await (
    await fetch(`${base}/api/openapi.json`, { headers: { authorization: `Bearer ${TOKEN}` } })
  ).json()) as {
    paths: Record<string, Record<string, { operationId: string }>>;
  };
  const expected = Object.entries(doc.paths).flatMap(([path, ops]) =>
    Object.keys(ops).map((method) => `${method.toUpperCase()} ${path}`),
  );
  const shown = await page
    .locator('details.op > summary')
    .evaluateAll((els) =>
      els.map((el) => `${el.querySelector('.method')!.textContent} ${el.querySelector('.path')!.textContent}`),
    );
  expect(shown.sort()).toEqual(expected.sort());

  // One operation opened: its parameters and its answers with their schemas.
  const task = page.locator(`details.op#${doc.paths['/api/tasks/{id}'].get.operationId}`);
  await task.locator('summary').first().click();
  await task.getByRole('cell', { name: 'id', exact: true }).waitFor();
  expect(await task.locator('details > summary').allTextContents()).toEqual(
    expect.arrayContaining([expect.stringMatching(/^200 /), expect.stringMatching(/^404 /)]),
  );
  expect(errors).toEqual([]);
  expect(browser!.outside).toEqual([]);
});
