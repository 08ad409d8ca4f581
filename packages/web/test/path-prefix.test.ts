// The dashboard behind a reverse proxy under a path prefix (https://host/queue/ serving the
// web server's /), in headless Chromium: a proxy in the test forwards /queue/* with the
// prefix stripped and refuses everything else, and the dashboard, its data and the API
// reference all load through it, nothing asked for outside the prefix.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '@org/db-tools/testing';
import { createApi } from '../src/index.js';

const CHROMIUM = '/usr/bin/chromium';
const TOKEN = 'prefix-token-0123456789abcdef';
const PREFIX = '/queue';

let db: TestDatabase;
let app: FastifyInstance;
let proxy: Server;
let front: string;
let context: BrowserContext;
let page: Page;
let userDataDir: string;
const outside: string[] = [];

beforeAll(async () => {
  expect(existsSync(CHROMIUM), `${CHROMIUM} is missing: install it with apt-get install -y chromium`).toBe(true);
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
  userDataDir = mkdtempSync(join(tmpdir(), 'queue-path-prefix-'));
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'],
  });
  page = context.pages()[0] ?? (await context.newPage());
  // Logged in (the tab's credential) before the dashboard's first request.
  await page.addInitScript((token) => sessionStorage.setItem('queue-api-token', token), TOKEN);
});

afterAll(async () => {
  await context?.close();
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
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
