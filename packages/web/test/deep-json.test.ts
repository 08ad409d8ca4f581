// Bodies nested thousands of levels deep, posted with the token to every JSON route: each
// gets a 4xx with a message (never a 500 from JSON.stringify's stack), and nothing is
// written.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';

const TOKEN = 'test-token-0123456789abcdef';
const auth = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };

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

/** JSON text of a value `levels` levels below the top: {"a":{"a": ... 1}} or [[[ ... 1]]]. */
const deepObject = (levels: number) => '{"a":'.repeat(levels) + '1' + '}'.repeat(levels);
const deepArray = (levels: number) => '['.repeat(levels) + '1' + ']'.repeat(levels);

async function taskCount(): Promise<number> {
  const { rows } = await db.query<{ n: string }>('select count(*) as n from queues.task');
  return Number(rows[0].n);
}

const post = (url: string, payload: string) => app.inject({ method: 'POST', url, payload, headers: auth });

describe('deeply nested JSON bodies', () => {
  it.each([5_000, 20_000])('POST /api/tasks with a payload %i levels deep: 413 too_large with a message', async (n) => {
    const before = await taskCount();
    for (const payload of [deepObject(n), `{"a":${deepArray(n)}}`]) {
      const res = await post('/api/tasks', `{"task_type":"store_discovery","payload":${payload}}`);
      expect(res.statusCode, res.body).toBe(413);
      expect(res.json()).toMatchObject({ error: 'too_large', message: expect.stringMatching(/nested deeper than/) });
    }
    expect(await taskCount()).toBe(before);
  });

  it('a payload nested just past the database limit gets the database words; one just within it is taken', async () => {
    const over = await post('/api/tasks', `{"task_type":"store_discovery","payload":${deepObject(65)}}`);
    expect(over.statusCode, over.body).toBe(413);
    expect(over.json()).toEqual({ error: 'too_large', message: 'payload is nested deeper than 64 levels' });
    const within = await post('/api/tasks', `{"task_type":"store_discovery","payload":${deepObject(64)}}`);
    expect(within.statusCode, within.body).toBe(201);
  });

  it.each([
    '/api/tasks',
    '/api/tasks/generate/staggered',
    '/api/tasks/generate/resync',
    '/api/tasks/generate/discovery',
    '/api/tasks/recover-stale',
    '/api/tasks/cancel',
    '/api/tasks/run-now',
    '/api/dead-letters/redrive',
    '/api/dead-letters/1/redrive',
    '/api/queues/store_discovery/pause',
    '/api/queues/store_discovery/resume',
    '/api/workers/w1/recover-stale',
    '/api/schedules/queue_history_maintenance/enable',
    '/api/schedules/queue_history_maintenance/disable',
  ])('POST %s with a body nested 20,000 levels deep: 4xx with a message', async (url) => {
    const before = await taskCount();
    const bodies = [
      deepObject(20_000),
      deepArray(20_000),
      // Deep inside the fields each route reads.
      `{"task_type":"store_discovery","payloads":[${deepObject(20_000)}],"batches":1}`,
      `{"task_ids":[1],"filter":${deepObject(20_000)}}`,
      `{"reason":${deepArray(20_000)}}`,
      // Keys the prototype-poisoning check walks for.
      `{"__proto__":${deepObject(20_000)},"constructor":{"prototype":1}}`,
    ];
    for (const body of bodies) {
      const res = await post(url, body);
      expect(res.statusCode, `${url} ${body.slice(0, 60)}: ${res.body}`).toBeGreaterThanOrEqual(400);
      expect(res.statusCode).toBeLessThan(500);
      expect(res.json().message).toEqual(expect.any(String));
    }
    expect(await taskCount()).toBe(before);
  });
});
