// History partitions and retention as operators see them: GET /api/history and the
// queue_history_* gauges of GET /metrics, against a real test database as the API role.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/db-tools/testing';
import { createApi } from '../src/index.js';

let db: TestDatabase;
let app: FastifyInstance;
beforeAll(async () => {
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), apiToken: 'test-token-0123456789abcdef', logLevel: 'silent' });
  await app.ready();
});
afterAll(async () => {
  await app?.close();
  await db?.drop();
});

describe('history', () => {
  it('GET /api/history: partition sets with sizes, the oldest retained task and the next drop', async () => {
    // Sets of 10 ids above the migration's; 15 tasks, the first set completed a day ago.
    const { rows } = await db.query(
      `select max(upper_bound) as top from queues.history_partitions() where not is_default`,
    );
    const base = Number(rows[0].top);
    await db.query(`update queues.history_setting set partition_size = 10`);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base - 1]);
    await db.query('select queues.maintain_history_at(now())');
    // As the owner: the app role may enqueue only the task types of its processes.
    const { rows: ids } = await db
      .pool('owner')
      .query('select task_id from queues.enqueue_many($1::jsonb)', [
        JSON.stringify(Array.from({ length: 15 }, () => ({ task_type: 'email', payload: { n: 1 } }))),
      ]);
    const firstSet = ids.slice(0, 10).map((r) => r.task_id);
    await db.pool('worker').query(`select queues.complete_tasks($1::bigint[], null, null)`, [firstSet]);
    // The migration's empty sets below the last id go; the completed set stays (recent).
    await db.query('select queues.maintain_history_at(now())');

    const res = await app.inject({ method: 'GET', url: '/api/history' });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      retention_seconds: 7 * 86400,
      partition_size: 10,
      oldest_task_id: base,
      last_task_id: base + 14,
      default_partition_tasks: 0,
      next_drop: { lower_bound: base, upper_bound: base + 10, pending_tasks: 0 },
    });
    const dropAfter = Date.parse(body.next_drop.drop_after);
    const lastCompleted = Date.parse(body.next_drop.last_completed_at);
    expect(dropAfter - lastCompleted).toBe(7 * 86400 * 1000);
    const set = body.partitions.find((p: { lower_bound: number }) => p.lower_bound === base);
    expect(set).toMatchObject({ upper_bound: base + 10, name: `task_p${base}`, is_default: false });
    expect(set.total_bytes).toBeGreaterThan(0);

    const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toContain(
      `queue_history_partition_bytes{lower_bound="${base}",upper_bound="${base + 10}"} ${set.total_bytes}`,
    );
    expect(metrics).toMatch(/^queue_history_partitions \d+$/m);
    expect(metrics).toContain('queue_history_default_partition_tasks 0');
    expect(metrics).toContain(`queue_history_oldest_task_id ${base}`);
    expect(metrics).toContain(`queue_history_next_drop_timestamp_seconds ${dropAfter / 1000}`);
    expect(metrics).toContain('queue_history_retention_seconds 604800');
  });
});
