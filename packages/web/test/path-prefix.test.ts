// The dashboard behind a reverse proxy under a path prefix (https://host/queue/ serving the
// web server's /), in headless Chromium: a proxy in the test forwards /queue/* with the
// prefix stripped and refuses everything else, and the dashboard, its data and the API
// reference all load through it, nothing asked for outside the prefix.
import { createServer, request as httpRequest, type Server } from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type { Page } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';
import { openBrowser, type Browser } from './support/browser.js';

const TOKEN = 'prefix-token-0123456789abcdef';
const PREFIX = '/queue';

let db: TestDatabase;
let app: FastifyInstance;
let proxy: Server;
let front: string;
let page: Page;
let browser: Browser | undefined;
const outside: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), apiToken: TOKEN, logLevel: 'silent' });
  const backend = new URL(await app.listen({ host: '127.0.0.1', port: 0 }));
  // The reverse proxy: /queue/x -> the server's /x; anything else is refused and recorded.
  proxy = createServer((req, res) => {
    const url = req.url ?? '/';
    if (!url.startsWith(`${PREFIX}/`)) {
      outside.push(url);
      res.writeHead(404).end('outside the prefix');
      return;
    }
    const upstream = httpRequest(
      {
        host: backend.hostname,
        port: backend.port,
        path: url.slice(PREFIX.length),
        method: req.method,
        headers: req.headers,
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.writeHead(502).end());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const { port } = proxy.address() as { port: number };
  front = `http://127.0.0.1:${port}${PREFIX}/`;
  browser = await openBrowser({ name: 'path-prefix' });
  ({ page } = browser);
  // Logged in (the tab's credential) before the dashboard's first request.
  await page.addInitScript((token) => sessionStorage.setItem('queue-api-token', token), TOKEN);
});

afterAll(async () => {
  await browser?.close();
  await new Promise((resolve) => proxy?.close(resolve));
  await app?.close();
  await db?.drop();
});

it('serves the dashboard, its data and the API reference under the prefix', async () => {
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(error.message));
  await db.query(`select queues.enqueue('store_discovery', '{}')`);

  await page.goto(`${front}#/`);
  await page.locator('main h1', { hasText: 'Queue overview' }).waitFor();
  // The overview's data came through the proxy: the task enqueued above is counted.
  const row = page.locator('tr', { hasText: 'store_discovery' }).first();
  await row.waitFor();

  await page.goto(`${front}#/tasks`);
  await page.locator('main table tr', { hasText: 'store_discovery' }).first().waitFor();

  await page.getByRole('link', { name: 'API reference', exact: true }).click();
  await page.waitForURL(`${front}api.html`);
  await page.locator('main h1', { hasText: 'pg-task-queue operations API' }).waitFor();
  expect(await page.locator('details.op').count()).toBeGreaterThan(20);

  expect(errors).toEqual([]);
  expect(outside).toEqual([]);
});
