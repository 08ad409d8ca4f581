// The role-based specification's REST API, called as written (role-based-worker-system.md,
// "API Endpoints"): its task statuses as filters, its task body, and stale recovery by
// threshold_minutes. Against a real test database, connected as the API role.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';

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

const post = (url: string, payload?: unknown) =>
  app.inject({ method: 'POST', url, payload: payload as never, headers: auth });
const get = (url: string) => app.inject({ method: 'GET', url, headers: auth });
const ids = async (url: string) => {
  const res = await get(url);
  expect(res.statusCode, res.body).toBe(200);
  return (res.json().tasks as { task_id: number }[]).map((t) => t.task_id).sort((a, b) => a - b);
};

/** Enqueues as the owner, one attempt each; returns the ids. */
async function enqueue(n: number, inSeconds = 0): Promise<number[]> {
  const { rows } = await db.query<{ id: string }>(
    `select queues.enqueue('store_discovery', '{}', now() + make_interval(secs => $1), null, null, 1) as id from generate_series(1, $2)`,
    [inSeconds, n],
  );
  return rows.map((r) => Number(r.id));
}

/** Claims the ready store_discovery tasks for `worker` (owner only: a lease of an hour). */
async function claim(worker: string): Promise<number[]> {
  const { rows } = await db.query<{ task_id: string }>(
    `select task_id from queues.claim_tasks_at(now(), $1, 100, array['store_discovery'], 3600, 5)`,
    [worker],
  );
  return rows.map((r) => Number(r.task_id)).sort((a, b) => a - b);
}

describe('GET /api/tasks?state=<the specification’s status>', () => {
  const task: Record<string, number[]> = {};

  beforeAll(async () => {
    await enqueue(2);
    await db.query(`select queues.record_worker_heartbeat('live', '{store_discovery}', 30000)`);
    const held = await claim('live');
    // One of the two started: claimed is the other (a live lease, no start mark).
    await db.query(
      `insert into queues.task_lease_started (task_id, task_lease_id)
       select task_id, current_lease_id from queues.task_pending_or_held_of($1)`,
      [held[0]],
    );
    task.running = [held[0]];
    task.claimed = [held[1]];
    const done = await enqueue(1);
    await claim('live');
    await db.pool('worker').query('select queues.complete_task($1)', [done[0]]);
    task.completed = done;
    await enqueue(1);
    task.stale = await claim('dead');
    await db.query(
      `insert into queues.worker (worker_id, task_types, last_seen_at) values ('dead', '{store_discovery}', now() - interval '20 minutes')`,
    );
    task.pending = [...(await enqueue(1)), ...(await enqueue(1, 3600))];
  });

  it.each(['pending', 'claimed', 'running', 'completed', 'stale'])('state=%s answers its tasks', async (state) => {
    // running is ours: every live lease, the dead worker's too (until recovered).
    const expected =
      state === 'running' ? [...task.running, ...task.claimed, ...task.stale].sort((a, b) => a - b) : task[state];
    expect(await ids(`/api/tasks?state=${state}`)).toEqual(expected);
  });

  it('POST /api/tasks/recover-stale with threshold_minutes recovers the dead worker’s task', async () => {
    const res = await post('/api/tasks/recover-stale', { threshold_minutes: 10 });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().recovered.map((r: { task_id: number; worker_id: string }) => [r.task_id, r.worker_id])).toEqual([
      [task.stale[0], 'dead'],
    ]);
    expect(await ids('/api/tasks?state=stale')).toEqual([]);
    expect(await ids('/api/tasks?state=pending')).toEqual([...task.pending, ...task.stale].sort((a, b) => a - b));
  });

  it('bad input: a 400 naming the field, nothing done', async () => {
    const both = await post('/api/tasks/recover-stale', { threshold_minutes: 10, dead_after_seconds: 600 });
    expect(both.statusCode).toBe(400);
    expect(both.json().message).toMatch(/dead_after_seconds or threshold_minutes, not both/);
    const zero = await post('/api/tasks/recover-stale', { threshold_minutes: 0 });
    expect(zero.statusCode).toBe(400);
    expect(zero.json().message).toMatch(/threshold_minutes must be at least 1/);
    const state = await get('/api/tasks?state=queued');
    expect(state.statusCode).toBe(400);
    expect(state.json().message).toMatch(/pending, claimed, completed, stale/);
  });
});

describe('POST /api/tasks with the specification’s body (the columns of worker_tasks)', () => {
  it('role, dispensary_id, platform, priority, scheduled_for and max_retries become a task', async () => {
    const res = await post('/api/tasks', {
      role: 'entry_point_discovery',
      dispensary_id: 456,
      platform: 'dutchie',
      priority: 10,
      scheduled_for: '2030-01-01T04:00:00Z',
      max_retries: 3,
    });
    expect(res.statusCode, res.body).toBe(201);
    const { rows } = await db.query(
      `select task_type, payload, priority, scheduled_at, resource_key, max_attempts from queues.task where task_id = $1`,
      [res.json().task_id],
    );
    expect(rows).toEqual([
      {
        task_type: 'entry_point_discovery',
        payload: { store_id: 456, platform: 'dutchie' },
        priority: 10,
        scheduled_at: new Date('2030-01-01T04:00:00Z'),
        // One task per store at a time (the specification's per-store locking).
        resource_key: 'store:456',
        max_attempts: 4,
      },
    ]);
    // The specification's worker_tasks shows it as written.
    const { rows: spec } = await db
      .pool('api')
      .query('select role, dispensary_id, platform, status, priority, max_retries from worker_tasks where id = $1', [
        res.json().task_id,
      ]);
    expect(spec).toEqual([
      {
        role: 'entry_point_discovery',
        dispensary_id: '456',
        platform: 'dutchie',
        status: 'pending',
        priority: 10,
        max_retries: 3,
      },
    ]);
  });

  it('just a role is enough; a bad field is a 400 that names it, and nothing is written', async () => {
    expect((await post('/api/tasks', { role: 'store_discovery' })).statusCode).toBe(201);
    const before = (await db.query('select count(*)::int as n from queues.task')).rows[0].n;
    const bad = await post('/api/tasks', { role: 'store_discovery', dispensary_id: 'x' });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().message).toMatch(/^body\.dispensary_id: /);
    const unknown = await post('/api/tasks', { role: 'store_discovery', status: 'pending' });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().message).toMatch(/unknown field\(s\) status/);
    expect((await db.query('select count(*)::int as n from queues.task')).rows[0].n).toBe(before);
  });
});

describe('a validation failure: visible as its own outcome, not a dead letter', () => {
  it('GET /api/tasks?state=validation_failed, the task and the counts show it; /api/dead-letters does not', async () => {
    const [invalid] = await enqueue(1);
    const [failed] = await enqueue(1);
    await claim('w-invalid');
    await db.pool('worker').query(`select queues.fail_task($1, 'account 7 not found')`, [invalid]);
    await db.pool('worker').query(`select queues.complete_task($1, null, 'validation_failed')`, [invalid]);
    await db.pool('worker').query(`select queues.complete_task($1, null, 'failed')`, [failed]);
    expect(await ids('/api/tasks?state=validation_failed')).toEqual([invalid]);
    const task = (await get(`/api/tasks/${invalid}`)).json();
    expect(task.task.state).toBe('validation_failed');
    expect(task.errors.map((e: { error_message: string }) => e.error_message)).toEqual(['account 7 not found']);
    expect((await get('/api/tasks/counts')).json().by_type.store_discovery).toMatchObject({ validation_failed: 1 });
    const dead = (await get('/api/dead-letters')).json();
    const deadIds = JSON.stringify(dead);
    expect(deadIds).toContain(`"task_id":${failed}`);
    expect(deadIds).not.toContain(`"task_id":${invalid}`);
  });
});
