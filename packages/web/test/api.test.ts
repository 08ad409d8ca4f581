// The operations API against a real test database, connected as the API role: every
// endpoint, bad input, and missing or wrong tokens.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { ConfigError, createApi, loadApiConfig } from '../src/index.js';

const TOKEN = 'test-token-0123456789abcdef';
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

async function resetQueue(): Promise<void> {
  await db.query('delete from queues.worker');
  await db.query('alter table queues.task disable trigger forbid_update');
  await db.query('truncate queues.task cascade');
  await db.query('alter table queues.task enable trigger forbid_update');
}

async function taskCount(): Promise<number> {
  const { rows } = await db.query<{ n: string }>('select count(*) as n from queues.task');
  return Number(rows[0].n);
}

const post = (url: string, payload?: unknown, headers: Record<string, string> = auth) =>
  app.inject({ method: 'POST', url, payload: payload as never, headers });
const get = (url: string, headers: Record<string, string> = auth) => app.inject({ method: 'GET', url, headers });

/** Enqueues through the API; returns the id. */
async function create(body: Record<string, unknown>): Promise<number> {
  const res = await post('/api/tasks', body);
  expect(res.statusCode, res.body).toBe(201);
  return res.json().task_id;
}

/** Claims `taskId` as the worker role (claims the highest-priority ready task). */
async function claim(worker = 'w1', types: string[] | null = null) {
  const { rows } = await db
    .pool('worker')
    .query<{ task_id: string; task_lease_id: string }>(
      'select task_id, task_lease_id from queues.claim_tasks($1, 1, $2, 60)',
      [worker, types],
    );
  return rows[0];
}

describe('auth', () => {
  beforeEach(resetQueue);

  it.each([
    ['no header', {}],
    ['wrong token', { authorization: 'Bearer wrong-token-0123456789' }],
    ['token of another length', { authorization: 'Bearer x' }],
    ['not a bearer', { authorization: `Basic ${TOKEN}` }],
    ['empty bearer', { authorization: 'Bearer ' }],
  ])('every mutating endpoint answers 401 with %s, and writes nothing', async (_name, headers) => {
    const id = await create({ task_type: 'store_discovery', payload: { a: 1 } });
    await db.query(`select queues.complete_task($1, null, 'failed')`, [id]);
    const before = await taskCount();
    for (const [url, body] of [
      ['/api/tasks', { task_type: 'store_discovery', payload: {} }],
      ['/api/tasks/recover-stale', {}],
      ['/api/tasks/generate/staggered', {}],
      [`/api/dead-letters/${id}/redrive`, undefined],
    ] as const) {
      const res = await post(url, body, headers);
      expect(res.statusCode, url).toBe(401);
      expect(res.headers['www-authenticate']).toMatch(/^Bearer/);
      expect(res.json()).toMatchObject({ error: 'unauthorized', message: expect.stringMatching(/Bearer/) });
    }
    expect(await taskCount()).toBe(before);
  });

  it('reads need a token too', async () => {
    expect((await get('/api/tasks', {})).statusCode).toBe(401);
    expect((await get('/api/tasks')).statusCode).toBe(200);
  });
});

describe('tasks', () => {
  beforeEach(resetQueue);

  it('creates a task (201) and lists it, newest first, with filters and keyset pages', async () => {
    const a = await create({ task_type: 'store_discovery', payload: { n: 1 } });
    const b = await create({
      task_type: 'product_resync',
      payload: { n: 2 },
      priority: 5,
      resource_key: 'store-1',
      max_attempts: 3,
    });
    const c = await create({
      task_type: 'store_discovery',
      payload: { n: 3 },
      scheduled_at: new Date(Date.now() + 3_600_000).toISOString(),
    });

    const all = (await get('/api/tasks')).json();
    expect(all.tasks.map((t: { task_id: number }) => t.task_id)).toEqual([c, b, a]);
    expect(all.next_before).toBeNull();
    expect(all.tasks[1]).toMatchObject({
      task_type: 'product_resync',
      state: 'ready',
      priority: 5,
      resource_key: 'store-1',
      max_attempts: 3,
    });
    expect(all.tasks[0].state).toBe('scheduled');

    expect(
      (await get('/api/tasks?task_type=store_discovery')).json().tasks.map((t: { task_id: number }) => t.task_id),
    ).toEqual([c, a]);
    expect((await get('/api/tasks?state=scheduled')).json().tasks.map((t: { task_id: number }) => t.task_id)).toEqual([
      c,
    ]);
    expect(
      (await get('/api/tasks?state=ready&task_type=store_discovery'))
        .json()
        .tasks.map((t: { task_id: number }) => t.task_id),
    ).toEqual([a]);

    const page1 = (await get('/api/tasks?limit=2')).json();
    expect(page1.tasks.map((t: { task_id: number }) => t.task_id)).toEqual([c, b]);
    expect(page1.next_before).toBe(b);
    const page2 = (await get(`/api/tasks?limit=2&before=${page1.next_before}`)).json();
    expect(page2.tasks.map((t: { task_id: number }) => t.task_id)).toEqual([a]);
    expect(page2.next_before).toBeNull();
  });

  it('derives running, retrying and the outcomes', async () => {
    const running = await create({ task_type: 'store_discovery', payload: { n: 1 }, priority: 10 });
    expect((await claim()).task_id).toBe(String(running));
    const retrying = await create({ task_type: 'store_discovery', payload: { n: 2 }, max_attempts: 3, priority: 9 });
    const lease = await claim();
    await db
      .pool('worker')
      .query(`select * from queues.complete_tasks($1, $2, '{failed}')`, [[retrying], [lease.task_lease_id]]);
    const done = await create({ task_type: 'product_resync', payload: { n: 3 } });
    await db.query(`select queues.complete_task($1, null, 'succeeded')`, [done]);
    const cancelled = await create({ task_type: 'product_resync', payload: { n: 4 } });
    await db.query(`select queues.complete_task($1, null, 'cancelled')`, [cancelled]);

    const states = Object.fromEntries(
      (await get('/api/tasks')).json().tasks.map((t: { task_id: number; state: string }) => [t.task_id, t.state]),
    );
    expect(states).toEqual({
      [running]: 'running',
      [retrying]: 'retrying',
      [done]: 'succeeded',
      [cancelled]: 'cancelled',
    });
    for (const [state, id] of [
      ['running', running],
      ['retrying', retrying],
      ['succeeded', done],
      ['cancelled', cancelled],
    ] as const) {
      expect((await get(`/api/tasks?state=${state}`)).json().tasks.map((t: { task_id: number }) => t.task_id)).toEqual([
        id,
      ]);
    }
  });

  it.each([
    ['missing task_type', { payload: {} }, /task_type/],
    ['unknown field', { task_type: 'store_discovery', payload: {}, colour: 'red' }, /unknown field\(s\) colour/],
    ['payload not an object', { task_type: 'store_discovery', payload: [1, 2] }, /payload/],
    ['priority out of range', { task_type: 'store_discovery', payload: {}, priority: 5000 }, /priority/],
    ['max_attempts out of range', { task_type: 'store_discovery', payload: {}, max_attempts: 0 }, /max_attempts/],
    ['bad scheduled_at', { task_type: 'store_discovery', payload: {}, scheduled_at: 'tomorrow' }, /scheduled_at/],
    ['malformed task_type', { task_type: 'Email!', payload: {} }, /task_type/],
    [
      'unknown task_type (refused by SQL)',
      { task_type: 'no_such_type', payload: {} },
      /unknown task_type 'no_such_type'/,
    ],
    ['a body that is not an object', [1, 2], /body: /],
  ])('POST /api/tasks with %s: 400 with a message, nothing written', async (_name, body, message) => {
    const res = await post('/api/tasks', body);
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ error: 'invalid_input', message: expect.stringMatching(message) });
    expect(await taskCount()).toBe(0);
  });

  it.each(['email', 'sms', 'file_delete', 'db_function'])(
    'POST /api/tasks of worker-only %s: 403 with a message, nothing written',
    async (taskType) => {
      const res = await post('/api/tasks', {
        task_type: taskType,
        payload: { db_function: 'files.record_file_delete_success', bucket: 'b-b', object_key: 'x' },
      });
      expect(res.statusCode).toBe(403);
      expect(res.json()).toMatchObject({
        error: 'forbidden',
        message: expect.stringContaining(
          `task_type '${taskType}' may be enqueued only by the database's own processes`,
        ),
      });
      expect(await taskCount()).toBe(0);
    },
  );

  it('POST /api/tasks with broken JSON or a huge payload: 4xx with a JSON message', async () => {
    const broken = await app.inject({
      method: 'POST',
      url: '/api/tasks',
      payload: '{"task_type":',
      headers: { ...auth, 'content-type': 'application/json' },
    });
    expect(broken.statusCode).toBe(400);
    expect(broken.json().message).toBeTruthy();
    const text = await post('/api/tasks', 'just text');
    expect(text.statusCode).toBe(415);
    expect(text.json().message).toMatch(/content-type/i);
    const huge = await post('/api/tasks', { task_type: 'store_discovery', payload: { blob: 'x'.repeat(1_100_000) } });
    expect(huge.statusCode).toBe(413);
    expect(huge.json()).toMatchObject({ error: 'too_large', message: expect.stringMatching(/over the limit/) });
    expect(await taskCount()).toBe(0);
  });

  it('POST /api/tasks with a unique key: inserted (201), skipped (200, the pending id), replaced (201)', async () => {
    const body = { task_type: 'store_discovery', payload: { v: 1 }, unique_key: 'store:7' };
    const first = await post('/api/tasks', body);
    expect(first.statusCode, first.body).toBe(201);
    expect(first.json()).toEqual({ task_id: expect.any(Number), outcome: 'inserted', replaced_task_id: null });
    const skipped = await post('/api/tasks', { ...body, payload: { v: 2 }, unique_policy: 'skip' });
    expect(skipped.statusCode).toBe(200);
    expect(skipped.json()).toEqual({ task_id: first.json().task_id, outcome: 'skipped', replaced_task_id: null });
    const replaced = await post('/api/tasks', {
      ...body,
      payload: { v: 3 },
      unique_policy: 'debounce',
      unique_period_seconds: 30,
    });
    expect(replaced.statusCode).toBe(201);
    expect(replaced.json()).toMatchObject({ outcome: 'replaced', replaced_task_id: first.json().task_id });
    expect(await taskCount()).toBe(2);
  });

  it.each([
    [{ unique_key: '' }, /body.unique_key: unique_key must be 1 to 200 characters/],
    [{ unique_key: 'k', unique_policy: 'sometimes' }, /body.unique_policy: unique_policy must be/],
    [
      { unique_key: 'k', unique_policy: 'debounce', unique_period_seconds: -1 },
      /unique_period_seconds must not be negative/,
    ],
    [{ unique_key: 'k', unique_policy: 'debounce' }, /unique_period must not be null/],
    [{ unique_key: 'k', unique_period_seconds: 5 }, /unique_period applies only to the debounce policy/],
    [{ unique_policy: 'skip' }, /unique_policy and unique_period_seconds need a unique_key/],
  ])('POST /api/tasks with bad unique fields %j: 400 naming the field, nothing written', async (extra, message) => {
    const res = await post('/api/tasks', { task_type: 'store_discovery', payload: {}, ...extra });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().message).toMatch(message);
    expect(await taskCount()).toBe(0);
  });

  it.each([
    ['/api/tasks?state=bogus', /state must be one of/],
    ['/api/tasks?limit=0', /limit must be at least 1/],
    ['/api/tasks?limit=501', /limit must be at most 500/],
    ['/api/tasks?before=abc', /before must be a whole number/],
    ['/api/tasks?task_type=BAD', /task_type/],
    ['/api/tasks?task_type=no_such_type', /unknown task_type/],
    ['/api/tasks?colour=red', /unknown field/],
    ['/api/tasks/abc', /task id must be a whole number/],
    ['/api/tasks/0', /task id must be at least 1/],
    ['/api/tasks/counts?window_seconds=1', /window_seconds/],
    ['/api/tasks/throughput?bucket_seconds=1', /bucket_seconds/],
    ['/api/tasks/capacity/Bad-Role', /role must be a task type/],
    ['/api/dead-letters?limit=x', /limit/],
    ['/api/processes/send_email?before=-1', /before/],
  ])('GET %s: 400 with a message', async (url, message) => {
    const res = await get(url);
    expect(res.statusCode).toBe(400);
    expect(res.json().message).toMatch(message);
  });

  it('GET /api/tasks/:id: the task with leases, errors and completion; 404 for an unknown id', async () => {
    const id = await create({ task_type: 'store_discovery', payload: { to: 'a@example.com' }, max_attempts: 1 });
    const lease = await claim('w-detail');
    await db.pool('worker').query('select queues.fail_task($1, $2, $3)', [id, 'provider said no', lease.task_lease_id]);
    await db
      .pool('worker')
      .query(`select * from queues.complete_tasks($1, $2, '{failed}')`, [[id], [lease.task_lease_id]]);

    const res = await get(`/api/tasks/${id}`);
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.task).toMatchObject({
      task_id: id,
      task_type: 'store_discovery',
      payload: { to: 'a@example.com' },
      state: 'failed',
    });
    expect(body.leases).toEqual([
      expect.objectContaining({ task_lease_id: Number(lease.task_lease_id), worker_id: 'w-detail', live: false }),
    ]);
    expect(body.errors).toEqual([expect.objectContaining({ error_message: 'provider said no' })]);
    expect(body.completion).toMatchObject({ outcome: 'failed', task_lease_id: Number(lease.task_lease_id) });
    expect(body).toMatchObject({ failed_attempts: [], redriven_to: null, redriven_from: null });

    const missing = await get('/api/tasks/999999');
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toEqual({ error: 'not_found', message: 'task 999999 does not exist' });
  });

  it('GET /api/tasks/counts and /api/tasks/types', async () => {
    await create({ task_type: 'store_discovery', payload: {} });
    await create({ task_type: 'store_discovery', payload: {} });
    const done = await create({ task_type: 'product_resync', payload: {} });
    await db.query(`select queues.complete_task($1, null, 'succeeded')`, [done]);
    const counts = (await get('/api/tasks/counts')).json();
    expect(counts.window_seconds).toBe(86_400);
    expect(counts.by_type).toEqual({ store_discovery: { ready: 2 }, product_resync: { succeeded: 1 } });
    const types = (await get('/api/tasks/types')).json().task_types.map((t: { task_type: string }) => t.task_type);
    expect(types).toEqual(expect.arrayContaining(['db_function', 'store_discovery', 'file_delete', 'product_resync']));
  });

  it('GET /api/tasks/capacity (all roles) and /capacity/:role; 404 for an unknown role', async () => {
    await create({ task_type: 'store_discovery', payload: {} });
    await db.pool('worker').query(`select queues.record_worker_heartbeat('cap-w', '{store_discovery}')`);
    const all = (await get('/api/tasks/capacity')).json().capacity;
    expect(all.find((c: { task_type: string }) => c.task_type === 'store_discovery')).toMatchObject({
      pending_tasks: 1,
      ready_tasks: 1,
      running_tasks: 0,
      active_workers: 1,
      tasks_per_worker_hour: null,
      workers_needed: { for_1_hour: null, for_4_hours: null, for_8_hours: null },
    });
    const one = await get('/api/tasks/capacity/store_discovery');
    expect(one.statusCode).toBe(200);
    expect(one.json()).toMatchObject({ task_type: 'store_discovery', pending_tasks: 1, active_workers: 1 });
    const unknown = await get('/api/tasks/capacity/no_such_role');
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().message).toMatch(/unknown task_type 'no_such_role'/);
  });

  it('GET /api/tasks/throughput: completions of the last hour in buckets', async () => {
    const id = await create({ task_type: 'product_resync', payload: {} });
    await db.query(`select queues.complete_task($1, null, 'succeeded')`, [id]);
    const res = (await get('/api/tasks/throughput?window_seconds=3600&bucket_seconds=300')).json();
    expect(res).toMatchObject({ window_seconds: 3600, bucket_seconds: 300 });
    expect(res.buckets).toEqual([
      expect.objectContaining({ task_type: 'product_resync', outcome: 'succeeded', completed: 1 }),
    ]);
  });
});

describe('dead letters and redrive', () => {
  beforeEach(resetQueue);

  it('lists a failed task, redrives it once (201), refuses a second redrive, a live task and an unknown one', async () => {
    const id = await create({ task_type: 'store_discovery', payload: { n: 1 }, max_attempts: 1 });
    const lease = await claim('w-dl');
    await db.pool('worker').query('select queues.fail_task($1, $2, $3)', [id, 'boom', lease.task_lease_id]);
    await db
      .pool('worker')
      .query(`select * from queues.complete_tasks($1, $2, '{failed}')`, [[id], [lease.task_lease_id]]);
    const live = await create({ task_type: 'store_discovery', payload: { n: 2 } });

    const list = (await get('/api/dead-letters')).json();
    expect(list.dead_letters).toEqual([
      expect.objectContaining({
        task_id: id,
        task_type: 'store_discovery',
        outcome: 'failed',
        last_error: 'boom',
        attempts: 1,
        payload: { n: 1 },
      }),
    ]);
    expect((await get('/api/dead-letters?task_type=product_resync')).json().dead_letters).toEqual([]);

    const redrive = await post(`/api/dead-letters/${id}/redrive`);
    expect(redrive.statusCode).toBe(201);
    const newId = redrive.json().new_task_id;
    expect(redrive.json()).toEqual({ task_id: id, new_task_id: expect.any(Number) });
    expect((await get(`/api/tasks/${newId}`)).json()).toMatchObject({
      task: { payload: { n: 1 }, state: 'ready' },
      redriven_from: id,
    });
    expect((await get(`/api/tasks/${id}`)).json().redriven_to).toBe(newId);
    expect((await get('/api/dead-letters')).json().dead_letters).toEqual([]);

    const count = await taskCount();
    const again = await post(`/api/dead-letters/${id}/redrive`);
    expect(again.statusCode).toBe(400);
    expect(again.json().message).toMatch(/already redriven/);
    const notDead = await post(`/api/dead-letters/${live}/redrive`);
    expect(notDead.statusCode).toBe(400);
    expect(notDead.json().message).toMatch(/is not a dead letter/);
    const unknown = await post('/api/dead-letters/999999/redrive');
    expect(unknown.statusCode).toBe(404);
    const bad = await post('/api/dead-letters/abc/redrive');
    expect(bad.statusCode).toBe(400);
    expect(await taskCount()).toBe(count);
  });
});

describe('stale recovery', () => {
  beforeEach(resetQueue);

  it('lists and recovers the leases of a worker not seen for 10 minutes', async () => {
    const id = await create({ task_type: 'store_discovery', payload: {} });
    await db.pool('worker').query(`select queues.record_worker_heartbeat('dead-worker', '{store_discovery}')`);
    const lease = await claim('dead-worker');
    // The registry is mutable: age the worker's last heartbeat as the owner.
    await db.query(`update queues.worker set last_seen_at = now() - interval '1 hour' where worker_id = 'dead-worker'`);

    expect((await get('/api/tasks/stale')).json().stale_leases).toEqual([
      expect.objectContaining({ task_id: id, task_lease_id: Number(lease.task_lease_id), worker_id: 'dead-worker' }),
    ]);
    const res = await post('/api/tasks/recover-stale', {});
    expect(res.statusCode).toBe(200);
    expect(res.json().recovered).toEqual([
      { task_id: id, task_lease_id: Number(lease.task_lease_id), worker_id: 'dead-worker' },
    ]);
    expect((await get(`/api/tasks/${id}`)).json().task.state).toBe('ready');
    // Nothing left to recover; an empty body is fine too.
    expect((await post('/api/tasks/recover-stale')).json().recovered).toEqual([]);

    const bad = await post('/api/tasks/recover-stale', { dead_after_seconds: 1 });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().message).toMatch(/dead_after_seconds/);
  });
});

describe('staggered batches', () => {
  beforeEach(resetQueue);

  it("generates the seed's daily batches: 6 batches 4 hours apart (201)", async () => {
    const payloads = Array.from({ length: 13 }, (_, i) => ({ store_id: i + 1 }));
    const res = await post('/api/tasks/generate/staggered', {
      task_type: 'product_resync',
      payloads,
      batches: 6,
      start_at: '2030-01-01T00:00:00Z',
      period_seconds: 86_400,
    });
    expect(res.statusCode, res.body).toBe(201);
    const body = res.json();
    expect(body.tasks).toBe(13);
    expect(body.batches.map((b: { task_count: number }) => b.task_count)).toEqual([3, 2, 2, 2, 2, 2]);
    expect(body.batches.map((b: { scheduled_at: string }) => new Date(b.scheduled_at).toISOString())).toEqual(
      [0, 4, 8, 12, 16, 20].map((h) => new Date(Date.UTC(2030, 0, 1, h)).toISOString()),
    );
    expect(await taskCount()).toBe(13);
    expect((await get('/api/tasks?state=scheduled&limit=500')).json().tasks).toHaveLength(13);
  });

  it.each([
    ['missing payloads', { task_type: 'product_resync', batches: 2 }, /payloads/],
    ['zero batches', { task_type: 'product_resync', payloads: [{}], batches: 0 }, /batches/],
    ['payloads not objects', { task_type: 'product_resync', payloads: [1], batches: 1 }, /payloads\.0/],
    [
      'unknown task type (refused by SQL)',
      { task_type: 'no_such_type', payloads: [{}], batches: 1 },
      /unknown task_type/,
    ],
  ])('refuses %s with 400, nothing written', async (_name, body, message) => {
    const res = await post('/api/tasks/generate/staggered', body);
    expect(res.statusCode).toBe(400);
    expect(res.json().message).toMatch(message);
    expect(await taskCount()).toBe(0);
  });
});

describe('processes', () => {
  it('lists processes and roots, and shows a root email process timeline', async () => {
    expect((await get('/api/processes')).json().processes).toEqual(
      expect.arrayContaining(['account_deletion', 'file_deletion', 'send_email', 'send_sms']),
    );
    const { rows } = await db
      .pool('app')
      .query<{ send_email_task_id: string }>(
        `select * from comms.send_email('from@example.com', 'to@example.com', 'Hi', '<p>hi</p>')`,
      );
    const rootId = Number(rows[0].send_email_task_id);
    const roots = (await get('/api/processes/send_email')).json();
    expect(roots.roots[0]).toMatchObject({ root_id: rootId, status: 'running' });

    // One supervisor run, as the worker would do it.
    const { rows: sup } = await db
      .pool('worker')
      .query<{ task_id: string; payload: Record<string, unknown>; task_lease_id: string }>(
        `select task_id, payload, task_lease_id from queues.claim_tasks('w-p', 10, '{db_function}', 60)`,
      );
    for (const t of sup) {
      await db.pool('worker').query('select internal.run_function($1, $2)', [t.payload.db_function, t.payload]);
      await db.pool('worker').query('select queues.complete_task($1, $2, null)', [t.task_id, t.task_lease_id]);
    }
    const timeline = (await get(`/api/processes/send_email/${rootId}`)).json();
    const facts = timeline.timeline.map((f: { fact: string }) => f.fact);
    expect(facts[0]).toBe('started');
    expect(facts).toContain('attempt');
    expect(timeline.timeline[0]).toMatchObject({
      process: 'send_email',
      root_id: rootId,
      detail: expect.objectContaining({ message_id: expect.any(Number) }),
    });

    const unknown = await get('/api/processes/no_such_process/1');
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().message).toMatch(/unknown process/);
    const missing = await get('/api/processes/send_email/999999');
    expect(missing.statusCode).toBe(404);
    expect(missing.json().message).toMatch(/send_email 999999 does not exist/);
  });
});

describe('monitoring and dashboard', () => {
  beforeEach(resetQueue);

  it('GET /metrics: Prometheus text with queue depth, completions and durations', async () => {
    await create({ task_type: 'store_discovery', payload: {} });
    const done = await create({ task_type: 'product_resync', payload: {} });
    const lease = await claim('w-m', ['product_resync']);
    // Completed by its lease holder, as a worker does (durations are measured from the lease).
    await db.query(`select queues.complete_task($1, $2, 'succeeded')`, [done, lease.task_lease_id]);
    const res = await get('/metrics');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(res.body).toContain('# TYPE queue_depth gauge');
    expect(res.body).toContain('queue_depth{task_type="store_discovery"} 1');
    expect(res.body).toContain('queue_tasks{task_type="store_discovery",state="ready"} 1');
    expect(res.body).toContain(
      'queue_tasks_completed_window{task_type="product_resync",outcome="succeeded",window_seconds="3600"} 1',
    );
    expect(res.body).toMatch(
      /queue_task_duration_window_seconds_count\{task_type="product_resync",outcome="succeeded"\} 1/,
    );
    expect(res.body).toMatch(
      /queue_task_duration_window_seconds_bucket\{task_type="product_resync",outcome="succeeded",le="\+Inf"\} 1/,
    );
  });

  it('serves the dashboard with a same-origin-only CSP; health checks; JSON 404s', async () => {
    const page = await get('/');
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/text\/html/);
    expect(page.headers['content-security-policy']).toMatch(/default-src 'self'/);
    expect(page.body).not.toMatch(/https?:\/\//);
    expect((await get('/app.js')).statusCode).toBe(200);
    expect((await get('/healthz')).json()).toEqual({ ok: true });
    expect((await get('/readyz')).json()).toEqual({ ok: true });
    const nope = await get('/nope');
    expect(nope.statusCode).toBe(404);
    expect(nope.json()).toMatchObject({ error: 'not_found' });
  });
});

describe('configuration', () => {
  it('loadApiConfig: defaults, and one message per bad value', () => {
    expect(loadApiConfig({ DATABASE_URL: 'postgres://u@h/db', API_TOKEN: TOKEN })).toEqual({
      databaseUrl: 'postgres://u@h/db',
      apiToken: TOKEN,
      host: '127.0.0.1',
      port: 3000,
      logLevel: 'info',
      logFormat: 'auto',
      poolSize: 10,
      openReads: false,
    });
    try {
      loadApiConfig({ DATABASE_URL: 'mysql://x', API_TOKEN: 'short', API_PORT: '70000', LOG_LEVEL: 'loud' });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).problems).toEqual([
        expect.stringMatching(/^DATABASE_URL: must be a postgres/),
        expect.stringMatching(/^API_TOKEN: must be at least 16/),
        expect.stringMatching(/^API_PORT: must be at most 65535/),
        expect.stringMatching(/^LOG_LEVEL: must be one of/),
      ]);
    }
  });

  it('the CLI exits 2 with one line per bad value', () => {
    const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
    const run = spawnSync(process.execPath, [cli], {
      env: { PATH: process.env.PATH, API_PORT: 'x' },
      encoding: 'utf8',
    });
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/DATABASE_URL: is required/);
    expect(run.stderr).toMatch(/API_TOKEN, API_USERS or API_USERS_FILE: is required/);
    expect(run.stderr).toMatch(/API_PORT: must be a whole number/);
  });

  it('the CLI serves the API on the configured port', async () => {
    const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
    const { spawn } = await import('node:child_process');
    const child = spawn(process.execPath, [cli], {
      env: { PATH: process.env.PATH, DATABASE_URL: db.url('api'), API_TOKEN: TOKEN, API_PORT: '0', LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const address = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
        if (m) resolve(m[1]);
      });
      child.on('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
    });
    const res = await fetch(`${address}/healthz`);
    expect(await res.json()).toEqual({ ok: true });
    child.kill('SIGTERM');
    const code = await new Promise((resolve) => child.on('exit', resolve));
    expect(code).toBe(0);
  });
});
