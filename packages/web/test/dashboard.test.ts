// The dashboard in headless Chromium (Debian's /usr/bin/chromium through playwright-core)
// against the API on a real test database: every page reached by clicking the navigation
// (links are links), the page says when it is read-only, a task enqueued by the test
// appears without a reload, a pending task is cancelled, a paused task type is not
// claimed by a running Worker until resumed, a dead-lettered task is redriven and run, and
// a process tree shows its stuck child, the History page shows the partition sets, the
// next drop and what blocks it, and a timeline says which of its queue tasks retention
// dropped; the Workers page revokes a stale worker's leases and the Schedules page
// disables and enables a schedule. The browser may reach nothing but the API's origin.
// A missing browser FAILS this file (CI installs it: apt-get install -y chromium).
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type { Page } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createLogger, dbFunctionProcessor, ProcessorRegistry, Worker, WorkerMetrics } from '@org/worker';
import { createApi } from '../src/index.js';
import { openBrowser, type Browser } from './support/browser.js';
import { enqueueAsOwner, WORKER_ONLY } from './support/worker-only.js';

const TOKEN = 'dashboard-token-0123456789';

let db: TestDatabase;
let app: FastifyInstance;
let base: string;
let page: Page;
let browser: Browser | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  // Reads open (API_OPEN_READS=true): these pages are read without logging in and unlocked
  // for changes with the operator's token; dashboard-login.test.ts covers the login screen.
  app = createApi({ databaseUrl: db.url('api'), apiToken: TOKEN, openReads: true, logLevel: 'silent' });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
  browser = await openBrowser({ name: 'dashboard', origin: base });
  ({ page } = browser);
});

afterAll(async () => {
  await browser?.close();
  await app?.close();
  await db?.drop();
});

/** A read of the API as the operator. */
async function apiGet(path: string): Promise<unknown> {
  const res = await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } });
  expect(res.status).toBe(200);
  return res.json();
}

async function enqueue(body: Record<string, unknown>): Promise<number> {
  if (WORKER_ONLY.has(body.task_type as string)) return enqueueAsOwner(db, body);
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
  expect(await page.locator('[data-testid=counts] tr[data-task-type=product_resync] td').nth(2).textContent()).toBe(
    '1',
  ); // ready
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
    (
      await db.query(`select queues.enqueue('db_function', $1::jsonb, _max_attempts => 1) as id`, [
        JSON.stringify({ db_function: 'internal.noop', marker: 'dead-letter' }),
      ])
    ).rows[0].id,
  );
  const { rows } = await db
    .pool('worker')
    .query<{ task_id: string; task_lease_id: string }>(
      `select task_id, task_lease_id from queues.claim_tasks('w-browser', 1, '{db_function}', 60)`,
    );
  expect(rows[0].task_id).toBe(String(id));
  await db
    .pool('worker')
    .query('select queues.fail_task($1, $2, $3)', [id, 'simulated failure', rows[0].task_lease_id]);
  await db
    .pool('worker')
    .query(`select * from queues.complete_tasks($1, $2, '{failed}')`, [[id], [rows[0].task_lease_id]]);

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
    databaseUrl: db.url('worker'),
    roles: ['db_function'],
    workerId: 'browser-worker',
    concurrency: 1,
    pollIntervalMs: 100,
    heartbeatIntervalMs: 1000,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 1000,
    registry: new ProcessorRegistry().register('db_function', dbFunctionProcessor()),
    logger: createLogger('silent'),
  });
  const metrics = new WorkerMetrics(worker);
  await worker.start();
  try {
    await page.locator('[data-testid=completion]', { hasText: 'succeeded' }).waitFor({ timeout: 30_000 });
    expect(await metrics.value('queue_worker_tasks_claimed_total', { task_type: 'db_function' })).toBe(1);
    expect(
      await metrics.value('queue_worker_tasks_completed_total', { task_type: 'db_function', outcome: 'succeeded' }),
    ).toBe(1);
  } finally {
    await worker.stop();
  }
  // The original is no longer a dead letter.
  await page.goto(`${base}/#/dead-letters`);
  await page.locator('[data-testid=dead-letters]').waitFor();
  expect(await page.locator(`[data-testid=dead-letters] tr[data-task-id="${id}"]`).count()).toBe(0);
});

it('shows a process timeline', async () => {
  const { rows } = await db
    .pool('app')
    .query<{ send_email_task_id: string }>(
      `select * from comms.send_email('from@example.com', 'to@example.com', 'Hi', '<p>hi</p>')`,
    );
  const rootId = rows[0].send_email_task_id;
  await page.goto(`${base}/#/processes?process=send_email`);
  await page.getByRole('link', { name: `send_email #${rootId}` }).click();
  await page.locator('[data-testid=timeline]').waitFor();
  expect(await page.locator('[data-testid=timeline]').textContent()).toContain('started');
});

function newWorker(id: string, roles: string[]): Worker {
  return new Worker({
    databaseUrl: db.url('worker'),
    roles,
    workerId: id,
    concurrency: 1,
    pollIntervalMs: 100,
    heartbeatIntervalMs: 1000,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 1000,
    registry: new ProcessorRegistry().register('db_function', dbFunctionProcessor()),
    logger: createLogger('silent'),
  });
}
const setToken = (value: string | null) =>
  page.evaluate(
    (t) => (t ? sessionStorage.setItem('queue-api-token', t) : sessionStorage.removeItem('queue-api-token')),
    value,
  );
const taskState = async (id: number) =>
  (await db.query<{ state: string }>(`select admin.get_task($1) -> 'task' ->> 'state' as state`, [id])).rows[0].state;

it('clicks through every page from the navigation; every navigation entry is a link', async () => {
  await setToken(null);
  await page.goto(`${base}/#/`);
  await page.locator('[data-testid=counts]').waitFor();
  const nav = page.locator('header nav a');
  const pages: [string, string][] = [
    ['Tasks', 'Tasks'],
    ['Dead letters', 'Dead letters'],
    ['Queues', 'Queues'],
    ['Workers', 'Workers'],
    ['Schedules', 'Schedules'],
    ['Processes', 'Processes'],
    ['History', 'History and retention'],
    ['Audit', 'Audit'],
    ['Overview', 'Queue overview'],
  ];
  expect(await nav.count()).toBe(pages.length);
  for (const [link, heading] of pages) {
    const a = page.getByRole('navigation', { name: 'pages' }).getByRole('link', { name: link, exact: true });
    expect(await a.evaluate((el) => el.tagName)).toBe('A');
    expect(await a.getAttribute('href')).toMatch(/^#\//);
    await a.click();
    await page.locator('main h1', { hasText: heading }).waitFor();
    expect(await a.getAttribute('class')).toContain('current');
  }
});

it('says it is read-only and how to unlock; actions are disabled until the token is given', async () => {
  await setToken(null);
  await page.goto(`${base}/#/queues`);
  await page.reload(); // a new document reads the (absent) token
  await page.locator('[data-testid=queues]').waitFor();
  const access = page.getByTestId('access-state');
  expect(await access.textContent()).toMatch(/Read-only\..*API token.*npm start.*API_TOKEN/);
  expect(await page.getByTestId('pause-store_discovery').isDisabled()).toBe(true);
  expect(await page.getByTestId('pause-store_discovery').getAttribute('title')).toMatch(/Read-only/);
  await page.getByTestId('token-input').fill(TOKEN);
  await page.getByTestId('token-form').getByRole('button').click();
  await page.getByTestId('forget-token').waitFor();
  await page.locator('[data-testid=pause-store_discovery]:not([disabled])').waitFor();
  expect(await access.textContent()).toMatch(/Actions enabled/);
});

it('the Processes page shows its process names as links, not as text', async () => {
  await page.goto(`${base}/#/processes`);
  const nav = page.getByTestId('process-nav');
  await nav.getByRole('link', { name: 'account_deletion', exact: true }).waitFor();
  expect(await nav.textContent()).not.toContain('http');
  const names = await nav.locator('a').evaluateAll((els) => els.map((el) => [el.tagName, el.getAttribute('href')]));
  expect(names).toEqual([
    ['A', '#/processes?process=account_anonymization'],
    ['A', '#/processes?process=account_deletion'],
    ['A', '#/processes?process=file_deletion'],
    ['A', '#/processes?process=send_email'],
    ['A', '#/processes?process=send_sms'],
  ]);
  await nav.getByRole('link', { name: 'send_sms', exact: true }).click();
  await page.waitForURL(/process=send_sms/);
  await page.locator('[data-testid=process-nav] a.current', { hasText: 'send_sms' }).waitFor();
});

it('a task enqueued by the test appears in the open list and the overview counts, without a reload', async () => {
  await page.goto(`${base}/#/tasks?task_type=product_resync`);
  await page.locator('[data-testid=task-list]').waitFor();
  await page.evaluate(() => {
    (window as unknown as { marker: number }).marker = 42;
  });
  const id = await enqueue({ task_type: 'product_resync', payload: { live: true } });
  await page.locator(`[data-testid=task-list] tr[data-task-id="${id}"]`).waitFor();
  expect(await page.evaluate(() => (window as unknown as { marker?: number }).marker)).toBe(42); // same document

  await page.getByRole('navigation', { name: 'pages' }).getByRole('link', { name: 'Overview' }).click();
  const ready = page.locator('[data-testid=counts] tr[data-task-type=product_resync] td').nth(2);
  await ready.waitFor();
  const before = Number(await ready.textContent());
  await page.evaluate(() => {
    (window as unknown as { marker: number }).marker = 43;
  });
  await enqueue({ task_type: 'product_resync', payload: { live: 2 } });
  await page.waitForFunction(
    (n) =>
      Number(
        document.querySelector('[data-testid=counts] tr[data-task-type=product_resync] td:nth-child(3)')?.textContent,
      ) === n,
    before + 1,
  );
  expect(await page.evaluate(() => (window as unknown as { marker?: number }).marker)).toBe(43);
});

it('cancels a pending task from the list (selection and bulk action); it is completed cancelled', async () => {
  await setToken(TOKEN);
  const id = await enqueue({
    task_type: 'store_discovery',
    payload: { cancel: 'me' },
    scheduled_at: new Date(Date.now() + 3_600_000).toISOString(),
  });
  await page.goto(`${base}/#/tasks?task_type=store_discovery&state=scheduled`);
  const row = page.locator(`[data-testid=task-list] tr[data-task-id="${id}"]`);
  await row.waitFor();
  await row.getByRole('checkbox').check();
  expect(await page.getByTestId('selection-count').textContent()).toBe('1 selected');
  await page.getByTestId('cancel-selected').click();
  await page.getByTestId('action-result').filter({ hasText: 'cancelled: 1 of 1' }).waitFor();
  await row.waitFor({ state: 'detached' }); // no longer scheduled
  expect(await taskState(id)).toBe('cancelled');
  await page.goto(`${base}/#/task/${id}`);
  await page.getByTestId('completion').filter({ hasText: 'cancelled' }).waitFor();
  expect(await page.getByTestId('completion').textContent()).toContain('cancelled from the dashboard');
});

it("a running task's page shows its progress, and cancels it: the worker's lease is revoked, the task ends cancelled", async () => {
  // The operator's token, read when the dashboard starts.
  await page.goto(`${base}/#/`);
  await setToken(TOKEN);
  await page.reload();
  const id = await enqueue({ task_type: 'store_discovery', payload: { progress: 'shown' } });
  const worker = db.pool('worker');
  const { rows } = await worker.query(
    `select task_lease_id::text from queues.claim_tasks('dashboard-progress', 1000, array['store_discovery']) where task_id = $1`,
    [id],
  );
  expect(rows).toHaveLength(1);
  const leaseId = rows[0].task_lease_id as string;
  await worker.query(`select queues.record_progress($1, $2, 12, 40, 'fetching menus')`, [id, leaseId]);
  await page.goto(`${base}/#/task/${id}`);
  const progress = page.getByTestId('task-progress');
  await progress.waitFor();
  expect(await progress.textContent()).toContain('12 / 40 · fetching menus');
  expect(await progress.locator('progress').getAttribute('value')).toBe('12');
  await page.getByTestId('cancel-task').click();
  await page.getByTestId('action-result').filter({ hasText: 'cancel: cancelled' }).waitFor();
  expect(await taskState(id)).toBe('cancelled');
  // The worker's heartbeat finds the lease gone: its extension answers nothing.
  const { rows: extended } = await worker.query('select * from queues.extend_leases($1::bigint[], $2::bigint[])', [
    [id],
    [leaseId],
  ]);
  expect(extended).toEqual([]);
});

it('pausing a task type stops a running worker from claiming it; resuming lets it run', async () => {
  await setToken(TOKEN);
  const worker = newWorker('pause-worker', ['db_function']);
  let claims = 0;
  const query = worker.pool.query.bind(worker.pool) as (...args: unknown[]) => unknown;
  (worker.pool as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string })?.text;
    if (text?.includes('claim_tasks')) claims++;
    return query(...args);
  };
  await worker.start();
  try {
    await page.goto(`${base}/#/queues`);
    await page.getByTestId('pause-db_function').click();
    await page.getByTestId('resume-db_function').waitFor();
    expect(await page.getByTestId('queue-db_function').textContent()).toContain('paused');
    await page.getByTestId('paused-banner').filter({ hasText: 'db_function' }).waitFor(); // shown on every page

    const id = await enqueue({ task_type: 'db_function', payload: { db_function: 'internal.noop', paused: true } });
    const seen = claims;
    await expect.poll(() => claims, { timeout: 20_000 }).toBeGreaterThanOrEqual(seen + 5); // five claims since the enqueue
    expect(await taskState(id)).toBe('ready');

    await page.getByTestId('resume-db_function').click();
    await page.getByTestId('pause-db_function').waitFor();
    await page.goto(`${base}/#/task/${id}`);
    await page.getByTestId('completion').filter({ hasText: 'succeeded' }).waitFor({ timeout: 30_000 });
    expect(await page.locator('[data-testid=leases]').textContent()).toContain('pause-worker');
  } finally {
    await worker.stop();
  }
});

it('the Queues page sets, shows and clears a flow limit; a refused one says why', async () => {
  await page.goto(`${base}/#/queues`);
  await setToken(TOKEN);
  await page.reload(); // a new document reads the token
  await page.getByTestId('limits').waitFor();
  await page.getByTestId('limit-task_type').fill('store_discovery');
  await page.getByTestId('limit-scope').selectOption('each_group');
  await page.getByTestId('limit-max_running').fill('0');
  await page.getByTestId('set-limit').click();
  await page.getByTestId('action-result').filter({ hasText: 'max_running must be between 1 and 1000000' }).waitFor();
  await page.getByTestId('limit-max_running').fill('3');
  await page.getByTestId('limit-max_starts').fill('20');
  await page.getByTestId('limit-interval_ms').fill('60000');
  await page.getByTestId('set-limit').click();
  const row = page.getByTestId('limit-store_discovery-each_group');
  await row.waitFor();
  expect(await row.textContent()).toMatch(/each group key.*0 \/ 3.*0 \/ 20 per 1 min/);
  await page.getByTestId('clear-limit-store_discovery-each_group').click();
  await row.waitFor({ state: 'detached' });
});

it('the Queues page shows a provider throttle, until when and why, and an operator clears it', async () => {
  await setToken(TOKEN);
  await db
    .pool('worker')
    .query(
      `select * from queues.record_throttle('task_type', 'email', null, 600, 'resend: HTTP 429 rate_limit_exceeded: slow down', 'w-dash')`,
    );
  await page.goto(`${base}/#/queues`);
  const note = page.getByTestId('throttle-email');
  await note.waitFor();
  expect(await note.textContent()).toMatch(/^until .+ · resend: HTTP 429 rate_limit_exceeded: slow down$/);
  expect(await page.getByTestId('queue-email').textContent()).toContain('throttled');
  await page.getByTestId('clear-throttle-email').click();
  await page.getByTestId('action-result').filter({ hasText: 'email: throttle cleared' }).waitFor();
  await note.waitFor({ state: 'detached' });
  expect((await db.query('select count(*)::int as n from queues.throttle_cleared')).rows[0].n).toBe(1);
});

it('the Queues page lists a throttled group key, until when and why, and an operator clears it', async () => {
  await setToken(TOKEN);
  await db
    .pool('worker')
    .query(`select * from queues.record_throttle('group', 'acme', null, 600, 'acme account: HTTP 429', 'w-dash')`);
  await page.goto(`${base}/#/queues`);
  const row = page.getByTestId('group-throttle-acme');
  await row.waitFor();
  expect(await row.textContent()).toMatch(/^acme.+acme account: HTTP 429Clear throttle$/);
  const before = (await db.query('select count(*)::int as n from queues.throttle_cleared')).rows[0].n;
  await page.getByTestId('clear-group-throttle-acme').click();
  await page.getByTestId('action-result').filter({ hasText: 'group acme: throttle cleared' }).waitFor();
  await row.waitFor({ state: 'detached' });
  expect(await page.getByTestId('group-throttles').textContent()).toBe('No group key is throttled.');
  expect((await db.query('select count(*)::int as n from queues.throttle_cleared')).rows[0].n).toBe(before + 1);
});

it('opens a process tree with a stuck child, listed first among the account deletions', async () => {
  const { rows: acc } = await db.query(
    `insert into accounts.account (email) values ('browser@example.com') returning account_id`,
  );
  const accountId = acc[0].account_id;
  for (const n of [1, 2])
    await db.query(`insert into files.file (account_id, bucket, object_key) values ($1, 'bucket-one', $2)`, [
      accountId,
      `k${n}`,
    ]);
  await db.pool('app').query('select * from api.request_account_deletion($1)', [accountId]);
  const rootId = Number(
    (
      await db.query(
        'select account_deletion_task_id as id from accounts.account_deletion_task where account_id = $1',
        [accountId],
      )
    ).rows[0].id,
  );
  await db.query(
    `select internal.run_function('accounts.account_deletion_supervisor', jsonb_build_object('account_deletion_task_id', $1::bigint))`,
    [rootId],
  );
  const { rows: fds } = await db.query(
    'select fd.file_deletion_task_id as id from files.file_deletion_task fd join files.file f using (file_id) where f.account_id = $1 order by 1',
    [accountId],
  );
  for (let i = 0; i < 3; i++) {
    const { rows: a } = await db.query(
      'insert into files.file_deletion_attempt (file_deletion_task_id) values ($1) returning file_deletion_attempt_id as id',
      [fds[0].id],
    );
    await db.query(
      `insert into files.file_deletion_attempt_failed (file_deletion_attempt_id, error_message) values ($1, 'storage said 403')`,
      [a[0].id],
    );
  }
  // A newer, healthy account deletion: the stuck one is still listed first.
  const { rows: other } = await db.query(
    `insert into accounts.account (email) values ('fine@example.com') returning account_id`,
  );
  await db.pool('app').query('select * from api.request_account_deletion($1)', [other[0].account_id]);

  await page.goto(`${base}/#/processes?process=account_deletion`);
  const first = page.locator('[data-testid=process-roots] tbody tr').first();
  await first.waitFor();
  expect(await first.getAttribute('data-root-id')).toBe(String(rootId));
  expect(await first.textContent()).toContain('stuck');
  await first.getByRole('link', { name: `account_deletion #${rootId}` }).click();
  const tree = page.getByTestId('process-tree');
  await tree.waitFor();
  const stuck = tree.locator(`li[data-process=file_deletion][data-root-id="${fds[0].id}"]`);
  expect(await stuck.getAttribute('data-status')).toBe('stuck');
  expect(await stuck.textContent()).toContain('attempts 3 (3 failed)');
  expect(
    await tree.locator(`li[data-process=file_deletion][data-root-id="${fds[1].id}"]`).getAttribute('data-status'),
  ).toBe('running');
  const link = stuck.getByRole('link', { name: `file_deletion #${fds[0].id}` });
  expect(await link.evaluate((el) => el.tagName)).toBe('A');
  // The timeline shows millisecond times.
  expect(await page.locator('[data-testid=timeline] td.time').first().textContent()).toMatch(
    /\d{2}:\d{2}:\d{2}\.\d{3}$/,
  );
  await link.click();
  await page.locator('h1', { hasText: `file_deletion #${fds[0].id}` }).waitFor();
});

it('History: each partition set with its state and oldest task, the next drop and why it waits, recent drops; a process timeline says which queue tasks were pruned', async () => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  // Sets of 10 ids above the migration's: the earlier tests' tasks stay in the first set.
  const { rows: top } = await db.query(
    `select max(upper_bound) as top from queues.history_partitions() where not is_default`,
  );
  const lo = Number(top[0].top); // the first id of the new sets
  await db.query(`update queues.history_setting set partition_size = 10`);
  await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo - 1]);
  await db.query('select queues.maintain_history_at(now())');
  // A send_email process in [lo, lo + 10): its supervisor ran once (an attempt and its
  // email task); then every task of the set is cancelled, so the set is all completed.
  const { rows: sent } = await db
    .pool('app')
    .query<{ id: string }>(
      `select send_email_task_id as id from comms.send_email('from@example.com', 'old@example.com', 'Old', '<p>old</p>')`,
    );
  const rootId = sent[0].id;
  await db.query(
    `select internal.run_function('comms.send_email_supervisor', jsonb_build_object('send_email_task_id', $1::bigint))`,
    [rootId],
  );
  const emailTask = Number(
    (await db.query('select task_id from comms.send_email_attempt where send_email_task_id = $1', [rootId])).rows[0]
      .task_id,
  );
  await db.query(
    `select admin.cancel_tasks(array(select task_id from queues.task_pending_or_held where task_id >= $1 and task_id < $2), 'old')`,
    [lo, lo + 10],
  );
  // The next task lands in the following set; past the window, retention drops the first.
  await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [lo + 10]);
  const known = await enqueue({ task_type: 'product_resync', payload: { history: true } });
  expect(known).toBe(lo + 11);
  const { rows: ran } = await db.query(`select queues.maintain_history_at(now() + interval '8 days') as r`);
  expect(ran[0].r.dropped).toContainEqual([lo, lo + 10]);
  const { rows: first } = await db.query(
    `select p.lower_bound, (select count(*)::int from queues.task_pending_or_held tp
                             where tp.task_id >= p.lower_bound and tp.task_id < p.upper_bound) as pending,
            (select min(task_id)::int from queues.task) as oldest
       from queues.history_partitions() p where not p.is_default order by p.lower_bound limit 1`,
  );
  expect(first[0].pending).toBeGreaterThan(0); // earlier tests left tasks pending there

  await db.query(`delete from queues.history_step_skipped`);
  await db.query(
    `insert into queues.history_step_skipped (step, reason) values ('detach queues.task_p7', 'could not lock task')`,
  );
  await page.goto(`${base}/#/history`);
  const sets = page.getByTestId('history-sets');
  const oldestSet = sets.locator(`tr[data-lower-bound="${first[0].lower_bound}"]`);
  await oldestSet.waitFor();
  expect(await oldestSet.getAttribute('data-state')).toBe('next_drop');
  expect(await oldestSet.textContent()).toContain('next to drop');
  expect(await oldestSet.locator('td').nth(4).textContent()).toBe(String(first[0].pending));
  expect(await page.getByTestId('next-drop').textContent()).toContain(
    `waits for ${first[0].pending} pending task${first[0].pending === 1 ? '' : 's'}`,
  );
  const current = sets.locator(`tr[data-lower-bound="${lo + 10}"]`);
  expect(await current.getAttribute('data-state')).toBe('current');
  expect(await current.getByRole('link').textContent()).toBe(`#${known}`);
  expect(await page.getByTestId('recent-drops').locator(`tr[data-lower-bound="${lo}"]`).textContent()).toContain(
    `${lo}–${lo + 9}`,
  );
  expect(await page.getByTestId('history-settings').textContent()).toContain('10 task ids');
  expect(await page.getByTestId('skipped-steps').textContent()).toMatch(
    /^1; last .+: detach queues\.task_p7 \(could not lock task\)$/,
  );
  await page
    .getByTestId('oldest-task')
    .getByRole('link', { name: `#${first[0].oldest}` })
    .click();
  await page.locator('h1', { hasText: `Task #${first[0].oldest}` }).waitFor();

  // The process's timeline still renders, and says which of its queue tasks went.
  await page.goto(`${base}/#/process/send_email/${rootId}`);
  const notice = page.getByTestId('pruned-notice');
  await notice.waitFor();
  // The task page's refresh, still running when we left it, wrote nothing here.
  expect(await page.locator('main h1').textContent()).toBe(`send_email #${rootId}`);
  expect(await notice.textContent()).toMatch(
    new RegExp(
      `Queue history pruned.*send_email #${rootId}: task #${emailTask} \\(set of task ids ${lo}–${lo + 9}\\) dropped`,
    ),
  );
  expect(await page.locator('[data-testid=timeline] tr[data-fact=started]').count()).toBe(1);
  expect(await page.locator('[data-testid=timeline] tr[data-fact=queue_history_pruned]').count()).toBe(1);
  expect(await page.getByTestId('pruned-task').textContent()).toContain(`task #${emailTask} (pruned)`);

  expect(errors).toEqual([]);
});

it("Workers: each worker with its status, roles and tasks in flight; a stale worker's leases are revoked from the page", async () => {
  await enqueue({ task_type: 'store_discovery', payload: { workers: 'page' } });
  // (The claim takes the oldest ready store_discovery task: this one or one left by a test above.)
  const worker = db.pool('worker');
  await worker.query(`select queues.record_worker_heartbeat('w-page-stale', '{store_discovery}')`);
  const claimed = await worker.query<{ task_id: string }>(
    `select task_id from queues.claim_tasks('w-page-stale', 1, '{store_discovery}', 3600)`,
  );
  expect(claimed.rows).toHaveLength(1);
  await worker.query(`select queues.record_worker_heartbeat('w-page-live', '{product_resync,analytics_refresh}')`);
  await db.query(
    `update queues.worker set last_seen_at = now() - interval '30 minutes' where worker_id = 'w-page-stale'`,
  );
  await page.goto(`${base}/#/workers`);
  await setToken(TOKEN);
  await page.reload(); // a new document reads the token
  const stale = page.locator('[data-testid=workers] tr[data-worker-id=w-page-stale]');
  const fresh = page.locator('[data-testid=workers] tr[data-worker-id=w-page-live]');
  await stale.waitFor();
  const cells = async (row: typeof stale) => (await row.locator('td').allTextContents()).map((s) => s.trim());
  expect((await cells(stale)).slice(0, 3)).toEqual(['w-page-stale', 'stale', 'store_discovery']);
  expect((await cells(stale))[4]).toBe('1');
  expect((await cells(fresh)).slice(0, 3)).toEqual(['w-page-live', 'live', 'product_resync, analytics_refresh']);
  expect(await fresh.getByRole('button').count()).toBe(0);
  // The worker's name links to its tasks.
  expect(await stale.getByRole('link', { name: 'w-page-stale' }).getAttribute('href')).toBe(
    '#/tasks?worker_id=w-page-stale',
  );
  await page.getByTestId('recover-w-page-stale').click();
  await page.getByTestId('action-result').filter({ hasText: 'w-page-stale: 1 lease(s) revoked' }).waitFor();
  await expect.poll(async () => (await cells(stale))[4]).toBe('0');
  const { workers } = (await apiGet('/api/workers')) as { workers: { worker_id: string; tasks_in_flight: number }[] };
  expect(workers.find((w) => w.worker_id === 'w-page-stale')?.tasks_in_flight).toBe(0);
});

it('Schedules: each schedule with its cron, zone, type, state and last runs; disabled and enabled again from the page', async () => {
  const { rows } = await db.query<{ schedule_id: string }>(
    `select schedule_id from schedules.upsert_schedule_at(now() - interval '2 hours', 'dashboard.page', '*/30 * * * *', 'analytics_refresh', '{}'::jsonb, _time_zone => 'Europe/Paris')`,
  );
  // Its runs of the last hour and a half (the clock moved by the owner-only *_at function).
  for (const minutes of [90, 60, 30])
    await db.query(`select schedules.run_schedule_at(now() - make_interval(mins => $1), $2)`, [
      minutes,
      rows[0].schedule_id,
    ]);
  type Schedule = { name: string; enabled: boolean; last_runs: { task_id: number | null }[] };
  const schedule = async () =>
    ((await apiGet('/api/schedules')) as { schedules: Schedule[] }).schedules.find((x) => x.name === 'dashboard.page')!;
  const runs = (await schedule()).last_runs;
  expect(runs.length).toBeGreaterThan(0);
  await page.goto(`${base}/#/schedules`);
  await setToken(TOKEN);
  await page.reload(); // a new document reads the token
  const row = page.locator('[data-testid=schedules] tr[data-schedule="dashboard.page"]');
  await row.waitFor();
  const cells = async () => (await row.locator('td').allTextContents()).map((s) => s.trim());
  expect((await cells()).slice(0, 4)).toEqual([
    'dashboard.page',
    '*/30 * * * * Europe/Paris',
    'analytics_refresh',
    'enabled',
  ]);
  expect(await row.locator('ul.runs li').count()).toBe(runs.length);
  const taskIds = runs.flatMap((r) => (r.task_id ? [`#${r.task_id}`] : []));
  expect(await row.locator('ul.runs a').allTextContents()).toEqual(taskIds);
  const enabled = async () => (await schedule()).enabled;
  await page.getByTestId('disable-dashboard.page').click();
  await page.getByTestId('action-result').filter({ hasText: 'dashboard.page disabled' }).waitFor();
  await page.getByTestId('enable-dashboard.page').waitFor();
  expect((await cells())[3]).toBe('disabled');
  expect(await enabled()).toBe(false);
  await page.getByTestId('enable-dashboard.page').click();
  await page.getByTestId('action-result').filter({ hasText: 'dashboard.page enabled' }).waitFor();
  await page.getByTestId('disable-dashboard.page').waitFor();
  expect(await enabled()).toBe(true);
});

it('loaded nothing from outside the API origin', () => {
  expect(browser!.outside).toEqual([]);
});
