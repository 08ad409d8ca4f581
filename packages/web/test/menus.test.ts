// The role-based worker system through the operations API, as the API role: the seed's
// generate endpoints (success, bad input with nothing written, auth), the capacity view
// per role with workers_needed, and a task's results on the task endpoint.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';

const TOKEN = 'test-token-menus-0123456789';
const auth = { authorization: `Bearer ${TOKEN}` };

let db: TestDatabase;
let app: FastifyInstance;
beforeAll(async () => {
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), apiToken: TOKEN, logLevel: 'silent' });
  await app.ready();
});
afterAll(async () => {
  await app?.close();
  await db?.drop();
});

const post = (url: string, payload?: unknown, headers: Record<string, string> = auth) =>
  app.inject({ method: 'POST', url, payload: payload as never, headers });
const written = async () =>
  (
    await db.query(
      `select (select count(*) from queues.task)::int as tasks, (select count(*) from menus.resync_generated)::int as generated`,
    )
  ).rows[0];

beforeEach(async () => {
  await db.query(`truncate queues.task, menus.store, menus.resync_generated, queues.worker restart identity cascade`);
  await db.query(
    `insert into menus.store (slug, name, menu_url) select 's-' || i, 'S' || i, 'u' || i from generate_series(1, 12) i`,
  );
  await db.query(
    `insert into menus.store_platform_id (store_id, platform_dispensary_id) select store_id, 'd-' || store_id from menus.store`,
  );
  await db.query(
    `insert into menus.store_products_discovered (store_id, product_count) select store_id, 1 from menus.store`,
  );
});

describe('POST /api/tasks/generate/resync', () => {
  it('spreads every active store over the day in 6 batches; a second call for the date is a 409', async () => {
    const res = await post('/api/tasks/generate/resync', { date: '2026-01-05' });
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json()).toEqual({
      task_type: 'product_resync',
      date: '2026-01-05',
      tasks: 12,
      batches: [0, 4, 8, 12, 16, 20].map((h, i) => ({
        batch: i + 1,
        scheduled_at: new Date(Date.UTC(2026, 0, 5, h)).toISOString(),
        task_count: 2,
      })),
    });
    const again = await post('/api/tasks/generate/resync', { date: '2026-01-05', batches: 3 });
    expect(again.statusCode).toBe(409);
    expect(again.json()).toEqual({ error: 'conflict', message: 'resync tasks for 2026-01-05 were generated already' });
    expect(await written()).toEqual({ tasks: 12, generated: 1 });
  });

  it('defaults to today (UTC) and 6 batches with no body', async () => {
    const res = await post('/api/tasks/generate/resync');
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json()).toMatchObject({ date: new Date().toISOString().slice(0, 10), tasks: 12 });
    expect(res.json().batches).toHaveLength(6);
  });

  it.each([
    ['batches 0', { batches: 0 }, 'body.batches: batches must be at least 1'],
    ['batches 25', { batches: 25 }, 'body.batches: batches must be at most 24'],
    ['batches 2.5', { batches: 2.5 }, 'body.batches: batches must be an integer'],
    ['batches as text', { batches: '6' }, 'body.batches: Invalid input: expected number, received string'],
    ['a bad date', { date: '2026-13-01' }, 'body.date: date must be a date such as 2026-01-05'],
    ['a date-time', { date: '2026-01-05T00:00:00Z' }, 'body.date: date must be a date such as 2026-01-05'],
    ['an unknown field', { stores: [1] }, 'body: unknown field(s) stores'],
    ['a JSON array', [1], 'body: Invalid input: expected object, received array'],
  ])('refuses %s with a 400 naming the field, writing nothing', async (_name, body, message) => {
    const res = await post('/api/tasks/generate/resync', body);
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({ error: 'invalid_input', message });
    expect(await written()).toEqual({ tasks: 0, generated: 0 });
  });

  it('refuses a date the database cannot take (year 3000) with a 400, writing nothing', async () => {
    const res = await post('/api/tasks/generate/resync', { date: '3000-01-01' });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({
      error: 'invalid_input',
      message: 'date must be between 2000-01-01 and 2999-12-31, got 3000-01-01',
    });
    expect(await written()).toEqual({ tasks: 0, generated: 0 });
  });

  it('needs the token', async () => {
    const res = await post('/api/tasks/generate/resync', {}, {});
    expect(res.statusCode).toBe(401);
    expect(await written()).toEqual({ tasks: 0, generated: 0 });
  });
});

describe('POST /api/tasks/generate/discovery', () => {
  it('creates one store_discovery task, now or at scheduled_at', async () => {
    const now = await post('/api/tasks/generate/discovery');
    expect(now.statusCode, now.body).toBe(201);
    expect(now.json()).toEqual({ task_type: 'store_discovery', task_id: expect.any(Number) });
    const at = new Date(Math.floor(Date.now() / 1000) * 1000 + 30 * 86_400_000);
    const later = await post('/api/tasks/generate/discovery', { scheduled_at: at.toISOString() });
    expect(later.statusCode, later.body).toBe(201);
    const { rows } = await db.query(
      `select task_type, priority, max_attempts, scheduled_at from queues.task where task_id = $1`,
      [later.json().task_id],
    );
    expect(rows).toEqual([{ task_type: 'store_discovery', priority: 20, max_attempts: 3, scheduled_at: at }]);
  });

  it.each([
    [
      'a bad date-time',
      { scheduled_at: 'monday' },
      400,
      'body.scheduled_at: scheduled_at must be an ISO 8601 date-time',
    ],
    ['an unknown field', { region: 'west' }, 400, 'body: unknown field(s) region'],
    [
      'a date two years ahead',
      { scheduled_at: new Date(Date.now() + 2 * 366 * 86_400_000).toISOString() },
      400,
      /^scheduled_at must be at most a year ahead/,
    ],
  ])('refuses %s with a 4xx and a message, writing nothing', async (_name, body, status, message) => {
    const res = await post('/api/tasks/generate/discovery', body);
    expect(res.statusCode).toBe(status);
    expect(res.json()).toEqual({
      error: 'invalid_input',
      message: typeof message === 'string' ? message : expect.stringMatching(message),
    });
    expect(await written()).toEqual({ tasks: 0, generated: 0 });
  });

  it('needs the token', async () => {
    expect(
      (await post('/api/tasks/generate/discovery', {}, { authorization: 'Bearer nope-nope-nope' })).statusCode,
    ).toBe(401);
    expect(await written()).toEqual({ tasks: 0, generated: 0 });
  });
});

describe("GET /api/tasks/capacity/product_resync and a task's results", () => {
  it('workers_needed follows the measured rate; the task endpoint shows the results', async () => {
    await post('/api/tasks/generate/resync', { date: '2026-01-05' });
    // Two workers completed 6 resyncs in the last hour, each run lasting as long as the
    // calls below take (the rate is per busy worker-hour); 6 are left.
    await db.query(
      `select queues.record_worker_heartbeat(w, array['product_resync']) from unnest(array['r-1', 'r-2']) w`,
    );
    const { rows: done } = await db.query(
      `select c.task_id::text, c.task_lease_id::text from (select * from queues.claim_tasks('r-1', 3, array['product_resync'])) c
       union all select c.task_id::text, c.task_lease_id::text from (select * from queues.claim_tasks('r-2', 3, array['product_resync'])) c`,
    );
    for (const t of done) {
      await db.query(`select queues.record_task_result($1, $2, $3)`, [
        t.task_id,
        t.task_lease_id,
        { products: 5, price_changes: 1 },
      ]);
      await db.query(`select queues.complete_task($1, $2, 'succeeded')`, [t.task_id, t.task_lease_id]);
    }
    const res = await app.inject({ method: 'GET', headers: auth, url: '/api/tasks/capacity/product_resync' });
    expect(res.statusCode, res.body).toBe(200);
    const capacity = res.json();
    expect(capacity).toMatchObject({ task_type: 'product_resync', pending_tasks: 6, active_workers: 2 });
    const rate = capacity.tasks_per_worker_hour as number;
    expect(rate).toBeGreaterThan(0);
    expect(capacity.workers_needed).toEqual({
      for_1_hour: Math.ceil(6 / rate),
      for_4_hours: Math.ceil(6 / (rate * 4)),
      for_8_hours: Math.ceil(6 / (rate * 8)),
    });

    const task = await app.inject({ method: 'GET', headers: auth, url: `/api/tasks/${done[0].task_id}` });
    expect(task.json().results).toEqual([
      {
        task_lease_id: Number(done[0].task_lease_id),
        result: { products: 5, price_changes: 1 },
        recorded_at: expect.any(String),
      },
    ]);
    const pending = await app.inject({
      method: 'GET',
      headers: auth,
      url: `/api/tasks/${Number(done[0].task_id) + 11}`,
    });
    expect(pending.json().results).toEqual([]);
  });
});
