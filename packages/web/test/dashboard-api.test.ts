// The dashboard's endpoints against a real test database as the API role: each new
// endpoint's answers, bad input (400 with a message naming the field), unknown targets
// (404), and missing or wrong tokens (401) with nothing changed.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';
import { enqueueAsOwner, WORKER_ONLY } from './support/worker-only.js';

const TOKEN = 'test-token-dashboard-0123456789';
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

async function reset(): Promise<void> {
  await db.query('delete from queues.worker');
  for (const t of ['task_type_resumed', 'task_type_paused']) {
    await db.query(`alter table queues.${t} disable trigger forbid_update`);
    await db.query(`truncate queues.${t} cascade`);
    await db.query(`alter table queues.${t} enable trigger forbid_update`);
  }
  await db.query('alter table queues.task disable trigger forbid_update');
  await db.query('truncate queues.task cascade');
  await db.query('alter table queues.task enable trigger forbid_update');
}

const post = (url: string, payload?: unknown, headers: Record<string, string> = auth) =>
  app.inject({ method: 'POST', url, payload: payload as never, headers });
const get = (url: string) => app.inject({ method: 'GET', url, headers: auth });
async function create(body: Record<string, unknown>): Promise<number> {
  if (WORKER_ONLY.has(body.task_type as string)) return enqueueAsOwner(db, body);
  const res = await post('/api/tasks', body);
  expect(res.statusCode, res.body).toBe(201);
  return res.json().task_id;
}
/** Everything a mutation could change, to show nothing did. */
async function snapshot() {
  const { rows } = await db.query(`select
    (select count(*)::int from queues.task) as tasks, (select count(*)::int from queues.task_end) as completed,
    (select count(*)::int from queues.task_type_paused) as paused, (select count(*)::int from queues.task_type_resumed) as resumed,
    (select count(*)::int from queues.task_run_now) as run_now, (select count(*)::int from queues.task_lease_revocation) as revoked,
    (select count(*)::int from queues.task_redriven) as redriven,
    (select count(*)::int from schedules.schedule_version) as schedule_versions`);
  return rows[0];
}
async function deadLetter(): Promise<number> {
  const id = await create({ task_type: 'db_function', payload: { db_function: 'internal.noop' }, max_attempts: 1 });
  const { rows } = await db
    .pool('worker')
    .query(`select task_lease_id from queues.claim_tasks('w1', 1, '{db_function}', 60)`);
  await db
    .pool('worker')
    .query(`select * from queues.complete_tasks($1, $2, '{failed}')`, [[id], [rows[0].task_lease_id]]);
  return id;
}

const MUTATIONS: [string, unknown][] = [
  ['/api/tasks/cancel', { task_ids: [1] }],
  ['/api/tasks/run-now', { task_ids: [1] }],
  ['/api/dead-letters/redrive', { task_ids: [1] }],
  ['/api/queues/store_discovery/pause', {}],
  ['/api/queues/store_discovery/resume', {}],
  ['/api/workers/w-stale/recover-stale', {}],
  ['/api/schedules/nightly.report/enable', {}],
  ['/api/schedules/nightly.report/disable', {}],
];

describe('auth', () => {
  beforeEach(reset);

  it.each([
    ['no header', {}],
    ['a wrong token', { authorization: 'Bearer wrong-token-0123456789abc' }],
    ['a token of another length', { authorization: 'Bearer x' }],
    ['basic auth', { authorization: `Basic ${TOKEN}` }],
  ])('every new mutation answers 401 with %s, and changes nothing', async (_name, headers) => {
    const id = await create({
      task_type: 'store_discovery',
      payload: {},
      scheduled_at: new Date(Date.now() + 3_600_000).toISOString(),
    });
    await deadLetter();
    await db.query(
      `select * from schedules.upsert_schedule('nightly.report', '0 2 * * *', 'analytics_refresh', '{}'::jsonb)`,
    );
    await db.pool('worker').query(`select queues.record_worker_heartbeat('w-stale', '{store_discovery}')`);
    await db.query(`update queues.worker set last_seen_at = now() - interval '1 hour'`);
    const before = await snapshot();
    for (const [url, body] of MUTATIONS) {
      const res = await post(
        url.replace('[1]', String(id)),
        JSON.parse(JSON.stringify(body).replace('[1]', `[${id}]`)),
        headers,
      );
      expect(res.statusCode, url).toBe(401);
      expect(res.json()).toMatchObject({ error: 'unauthorized', message: expect.stringMatching(/Bearer/) });
    }
    expect(await snapshot()).toEqual(before);
  });
});

describe('overview and depth', () => {
  beforeEach(reset);

  it('GET /api/overview: counts, throughput, depth, capacity and queues in one answer', async () => {
    await create({ task_type: 'store_discovery', payload: {} });
    const res = await get('/api/overview');
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.counts).toContainEqual({ task_type: 'store_discovery', state: 'ready', count: 1 });
    expect(body.depth.filter((b: { task_type: string }) => b.task_type === 'store_discovery').at(-1).depth).toBe(1);
    expect(body.queues.find((q: { task_type: string }) => q.task_type === 'store_discovery')).toMatchObject({
      paused: false,
      ready: 1,
    });
    expect(Array.isArray(body.throughput) && Array.isArray(body.capacity)).toBe(true);
    expect((await get('/api/overview?x=1')).statusCode).toBe(400);
    const live = (await get('/api/overview/live')).json();
    expect(live.queues.find((q: { task_type: string }) => q.task_type === 'store_discovery')).toMatchObject({
      ready: 1,
      paused: false,
    });
    expect((await get('/api/overview/live?all=1')).json()).toMatchObject({
      error: 'invalid_input',
      message: expect.stringMatching(/unknown field\(s\) all/),
    });
  });

  it('GET /api/tasks/depth validates its window', async () => {
    expect((await get('/api/tasks/depth?window_seconds=600&bucket_seconds=60')).json().buckets.length).toBeGreaterThan(
      0,
    );
    const bad = await get('/api/tasks/depth?window_seconds=5');
    expect(bad.statusCode).toBe(400);
    expect(bad.json().message).toMatch(/window_seconds must be at least 60/);
    expect((await get('/api/tasks/depth?window_seconds=86400&bucket_seconds=10')).json()).toMatchObject({
      error: 'invalid_input',
      message: expect.stringMatching(/500 buckets/),
    });
  });
});

describe('task filters', () => {
  beforeEach(reset);

  it('GET /api/tasks filters by resource key, time range, worker and payload field', async () => {
    const a = await create({
      task_type: 'store_discovery',
      payload: { to: 'x@example.com', n: 3 },
      resource_key: 'account:9',
    });
    const b = await create({ task_type: 'store_discovery', payload: { to: 'y@example.com', n: 4 } });
    const ids = async (q: string) =>
      (await get(`/api/tasks?${q}`)).json().tasks.map((t: { task_id: number }) => t.task_id);
    expect(await ids('resource_key=account:9')).toEqual([a]);
    expect(await ids('payload_path=to&payload_value=y@example.com')).toEqual([b]);
    expect(await ids('payload_path=n&payload_value=3')).toEqual([a]);
    expect(await ids(`enqueued_from=${encodeURIComponent(new Date(Date.now() - 60_000).toISOString())}`)).toEqual([
      b,
      a,
    ]);
    expect(await ids(`enqueued_to=${encodeURIComponent(new Date(Date.now() - 60_000).toISOString())}`)).toEqual([]);
    await db.pool('worker').query(`select * from queues.claim_tasks('w-filter', 1, '{store_discovery}', 60)`);
    expect(await ids('worker_id=w-filter')).toHaveLength(1);
  });

  it.each([
    ['payload_path=a', /payload_path and payload_value go together/],
    ['payload_path=a..b&payload_value=1', /payload_path must be/],
    ['enqueued_from=yesterday', /enqueued_from must be an ISO 8601/],
    ['worker_id=', /worker_id must not be empty/],
    ['resource_key=' + 'k'.repeat(201), /resource_key/],
    ['color=red', /unknown field\(s\) color/],
  ])('GET /api/tasks?%s is a 400 naming the field', async (query, message) => {
    const res = await get(`/api/tasks?${query}`);
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ error: 'invalid_input', message: expect.stringMatching(message) });
  });

  it('from after to is refused by the database with a 400', async () => {
    const res = await get('/api/tasks?enqueued_from=2030-01-02T00:00:00Z&enqueued_to=2030-01-01T00:00:00Z');
    expect(res.statusCode).toBe(400);
    expect(res.json().message).toMatch(/must be before/);
  });
});

describe('bulk actions', () => {
  beforeEach(reset);

  it('POST /api/tasks/cancel: a selection and a filter; the task page shows the cancellation', async () => {
    const a = await create({ task_type: 'store_discovery', payload: {} });
    const b = await create({ task_type: 'product_resync', payload: {} });
    const res = await post('/api/tasks/cancel', { task_ids: [a, 99999], reason: 'duplicate' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      cancelled: 1,
      results: [
        { task_id: a, result: 'cancelled' },
        { task_id: 99999, result: 'unknown_task' },
      ],
    });
    const task = (await get(`/api/tasks/${a}`)).json();
    expect(task.task.state).toBe('cancelled');
    expect(task.cancellation).toMatchObject({ reason: 'duplicate' });
    const byFilter = await post('/api/tasks/cancel', {
      filter: { task_type: 'product_resync', state: 'ready' },
      limit: 10,
    });
    expect(byFilter.json()).toEqual({ cancelled: 1, results: [{ task_id: b, result: 'cancelled' }] });
  });

  it.each([
    [{}, /give either task_ids or filter/],
    [{ task_ids: [1], filter: {} }, /give either task_ids or filter/],
    [{ filter: { task_type: 'store_discovery' } }, /a filter needs a limit/],
    [{ task_ids: [] }, /at least one task/],
    [{ task_ids: [0] }, /positive/],
    [{ task_ids: ['1'] }, /task_ids/],
    [{ task_ids: [1, 1] }, /must not repeat/],
    [{ filter: { state: 'running' }, limit: 5 }, /state must be waiting, scheduled, ready or retrying/],
    [{ filter: { task_type: 'fax' }, limit: 5 }, /unknown task_type/],
    [{ filter: {}, limit: 5000 }, /limit/],
    [{ task_ids: [1], reason: 'x'.repeat(501) }, /reason must be at most 500/],
    [{ task_ids: [1], extra: true }, /unknown field\(s\) extra/],
  ])('POST /api/tasks/cancel refuses %j with a 400 and cancels nothing', async (body, message) => {
    await create({ task_type: 'store_discovery', payload: {} });
    const before = await snapshot();
    const res = await post('/api/tasks/cancel', body);
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json()).toMatchObject({ error: 'invalid_input', message: expect.stringMatching(message) });
    expect(await snapshot()).toEqual(before);
  });

  it('POST /api/tasks/run-now: a scheduled task becomes ready; bad input is a 400', async () => {
    const later = await create({
      task_type: 'store_discovery',
      payload: {},
      scheduled_at: new Date(Date.now() + 86_400_000).toISOString(),
    });
    expect((await post('/api/tasks/run-now', { task_ids: [later] })).json()).toEqual({
      run_now: 1,
      results: [{ task_id: later, result: 'run_now' }],
    });
    expect((await get(`/api/tasks/${later}`)).json()).toMatchObject({
      task: { state: 'ready' },
      run_now_at: expect.any(String),
    });
    const before = await snapshot();
    for (const body of [{}, { task_ids: 'all' }, { filter: {}, limit: 1 }]) {
      const res = await post('/api/tasks/run-now', body);
      expect(res.statusCode).toBe(400);
      expect(res.json().error).toBe('invalid_input');
    }
    expect(await snapshot()).toEqual(before);
  });

  it('POST /api/dead-letters/redrive: a selection and a filter; bad input is a 400', async () => {
    const a = await deadLetter();
    const b = await deadLetter();
    const res = await post('/api/dead-letters/redrive', { task_ids: [a] });
    expect(res.json()).toMatchObject({
      redriven: 1,
      results: [{ task_id: a, result: 'redriven', new_task_id: expect.any(Number) }],
    });
    const rest = await post('/api/dead-letters/redrive', { filter: { task_type: 'db_function' }, limit: 10 });
    expect(rest.json()).toMatchObject({ redriven: 1, results: [{ task_id: b, result: 'redriven' }] });
    const before = await snapshot();
    for (const [body, message] of [
      [{ filter: {}, limit: 501 }, /limit/],
      [{ filter: { state: 'failed' }, limit: 1 }, /unknown field\(s\) state/],
      [{}, /task_ids or filter/],
    ] as const) {
      const bad = await post('/api/dead-letters/redrive', body);
      expect(bad.statusCode).toBe(400);
      expect(bad.json().message).toMatch(message);
    }
    expect(await snapshot()).toEqual(before);
  });
});

describe('queues and workers', () => {
  beforeEach(reset);

  it('pause and resume a task type; the queue list shows it; a worker claim skips it', async () => {
    await create({ task_type: 'product_resync', payload: {} });
    const paused = await post('/api/queues/product_resync/pause', { reason: 'carrier outage' });
    expect(paused.json()).toMatchObject({ task_type: 'product_resync', paused: true, pause_id: expect.any(Number) });
    const sms = (await get('/api/queues'))
      .json()
      .queues.find((q: { task_type: string }) => q.task_type === 'product_resync');
    expect(sms).toMatchObject({ paused: true, pause_reason: 'carrier outage', ready: 1 });
    expect((await db.pool('worker').query(`select * from queues.claim_tasks('w', 5, null, 60)`)).rows).toEqual([]);
    const metrics = (await get('/metrics')).body;
    expect(metrics).toContain('queue_paused{task_type="product_resync"} 1');
    expect(metrics).toContain('queue_paused{task_type="store_discovery"} 0');
    expect((await post('/api/queues/product_resync/resume')).json()).toEqual({
      task_type: 'product_resync',
      paused: false,
      was_paused: true,
    });
    expect((await db.pool('worker').query(`select * from queues.claim_tasks('w', 5, null, 60)`)).rows).toHaveLength(1);
  });

  it('pause and resume refuse bad types and bodies, changing nothing', async () => {
    const before = await snapshot();
    for (const [url, body, status, message] of [
      ['/api/queues/fax/pause', {}, 400, /unknown task_type/],
      ['/api/queues/Bad-Type/pause', {}, 400, /task_type must be a task type/],
      ['/api/queues/store_discovery/pause', { reason: 'x'.repeat(501) }, 400, /reason/],
      ['/api/queues/store_discovery/pause', { paused: true }, 400, /unknown field/],
      ['/api/queues/fax/resume', {}, 400, /unknown task_type/],
      ['/api/queues/store_discovery/resume', { now: 1 }, 400, /unknown field/],
    ] as const) {
      const res = await post(url, body);
      expect(res.statusCode, url).toBe(status);
      expect(res.json().message).toMatch(message);
    }
    expect(await snapshot()).toEqual(before);
  });

  it('GET /api/workers and POST /api/workers/:id/recover-stale', async () => {
    await create({ task_type: 'store_discovery', payload: {} });
    await db.pool('worker').query(`select queues.record_worker_heartbeat('w-old', '{store_discovery}')`);
    await db.pool('worker').query(`select * from queues.claim_tasks('w-old', 1, '{store_discovery}', 3600)`);
    await db.pool('worker').query(`select queues.record_worker_heartbeat('w-new', '{store_discovery}')`);
    await db.query(`update queues.worker set last_seen_at = now() - interval '30 minutes' where worker_id = 'w-old'`);
    const workers = (await get('/api/workers')).json().workers;
    expect(
      workers.map((w: { worker_id: string; status: string; tasks_in_flight: number }) => [
        w.worker_id,
        w.status,
        w.tasks_in_flight,
      ]),
    ).toEqual([
      ['w-new', 'live', 0],
      ['w-old', 'stale', 1],
    ]);
    const before = await snapshot();
    expect((await post('/api/workers/w-new/recover-stale', {})).statusCode).toBe(409);
    expect((await post('/api/workers/nobody/recover-stale', {})).json()).toMatchObject({
      error: 'not_found',
      message: expect.stringMatching(/not registered/),
    });
    expect((await post('/api/workers/w-old/recover-stale', { dead_after_seconds: 1 })).statusCode).toBe(400);
    expect(await snapshot()).toEqual(before);
    const ok = await post('/api/workers/w-old/recover-stale', {});
    expect(ok.json()).toMatchObject({ worker_id: 'w-old', recovered: [{ worker_id: 'w-old' }] });
  });
});

describe('schedules and processes', () => {
  beforeEach(reset);

  it('GET /api/schedules; enable and disable; 404 for an unknown schedule, 400 for a bad name', async () => {
    await db.query(
      `select * from schedules.upsert_schedule('nightly.report', '0 2 * * *', 'analytics_refresh', '{}'::jsonb)`,
    );
    type Schedule = { name: string; enabled: boolean };
    const named = async (name: string) =>
      ((await get('/api/schedules')).json().schedules as Schedule[]).find((x) => x.name === name);
    // The role-based system's schedules are installed (disabled) by the migrations too.
    const list = (await get('/api/schedules')).json().schedules as Schedule[];
    expect(list.map((x) => x.name)).toContain('menus.resync');
    expect(await named('nightly.report')).toEqual(
      expect.objectContaining({
        name: 'nightly.report',
        cron: '0 2 * * *',
        enabled: true,
        last_runs: [],
        next_fire_at: expect.any(String),
      }),
    );
    expect((await post('/api/schedules/nightly.report/disable')).json()).toEqual({
      name: 'nightly.report',
      enabled: false,
    });
    expect(await named('nightly.report')).toMatchObject({ enabled: false, next_fire_at: null });
    expect((await post('/api/schedules/nightly.report/enable')).json()).toEqual({
      name: 'nightly.report',
      enabled: true,
    });
    const before = await snapshot();
    const missing = await post('/api/schedules/no.such/enable');
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toEqual({ error: 'not_found', message: "no schedule named 'no.such'" });
    expect((await post('/api/schedules/Bad Name/disable')).statusCode).toBe(400);
    expect((await get('/api/schedules?runs=50')).statusCode).toBe(400);
    expect(await snapshot()).toEqual(before);
  });

  it('PUT /api/schedules/:name creates a schedule in a time zone; an unknown zone is 400 and writes nothing', async () => {
    const put = (name: string, payload: unknown, headers: Record<string, string> = auth) =>
      app.inject({ method: 'PUT', url: `/api/schedules/${name}`, payload: payload as never, headers });
    const made = await put('berlin.report', {
      cron: '30 2 * * *',
      task_type: 'analytics_refresh',
      time_zone: 'Europe/Berlin',
    });
    expect(made.statusCode, made.body).toBe(200);
    expect(made.json().schedule).toMatchObject({
      name: 'berlin.report',
      cron: '30 2 * * *',
      time_zone: 'Europe/Berlin',
    });
    const listed = (await get('/api/schedules')).json().schedules as { name: string; time_zone: string }[];
    expect(listed.find((x) => x.name === 'berlin.report')?.time_zone).toBe('Europe/Berlin');
    expect(listed.find((x) => x.name === 'menus.resync')?.time_zone).toBe('UTC');

    const before = await snapshot();
    const unknown = await put('berlin.report', {
      cron: '30 2 * * *',
      task_type: 'analytics_refresh',
      time_zone: 'Mars/Base',
    });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json()).toMatchObject({
      message: expect.stringMatching(/time_zone must be an IANA time zone name/),
    });
    const unauthorised = await put('other', { cron: '0 3 * * *', task_type: 'analytics_refresh' }, {});
    expect(unauthorised.statusCode).toBe(401);
    expect((await put('other', { cron: '0 3 * * *', task_type: 'db_function' })).statusCode).toBe(403);
    expect(await snapshot()).toEqual(before);
  });

  it('GET /api/processes/:process/:root has the tree beside the timeline; roots carry their status and attempts', async () => {
    const { rows } = await db
      .pool('app')
      .query(`select * from comms.send_email('a@example.com', 'b@example.com', 'Hi', '<p>hi</p>')`);
    const root = Number(rows[0].send_email_task_id);
    const page = (await get(`/api/processes/send_email/${root}`)).json();
    expect(page.tree).toMatchObject({ process: 'send_email', root_id: root, status: 'running', children: [] });
    expect(page.timeline.length).toBeGreaterThan(0);
    expect((await get('/api/processes/send_email')).json().roots[0]).toMatchObject({
      root_id: root,
      status: 'running',
      attempts: expect.any(Number),
    });
    expect((await get('/api/processes/send_email/999999')).statusCode).toBe(404);
  });
});
