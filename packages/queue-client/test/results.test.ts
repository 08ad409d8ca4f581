// Task results through @org/queue-client: recorded by the worker role in the completion's
// transaction and fenced by the lease, read by the app role.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import {
  claimTasks,
  completeTask,
  connect,
  enqueue,
  listTaskResults,
  recordTaskResult,
  withTransaction,
} from '../src/index.js';
import type pg from 'pg';

let db: TestDatabase;
let app: pg.Pool;
let worker: pg.Pool;
beforeAll(async () => {
  db = await createTestDatabase();
  app = connect({ connectionString: db.url('app') });
  worker = connect({ connectionString: db.url('worker') });
});
afterAll(async () => {
  await app?.end();
  await worker?.end();
  await db?.drop();
});

it('records a result with the completion; a lost lease records nothing (lease_lost); the app reads it', async () => {
  const taskId = await enqueue(app, { taskType: 'product_resync', payload: { n: 1 }, maxAttempts: 2 });
  const [first] = await claimTasks(worker, { workerId: 'a', limit: 1, taskTypes: ['product_resync'], leaseSeconds: 1 });
  // The lease expires and another worker takes the task.
  const { rows } = await db.query(
    `select task_lease_id::text from queues.claim_tasks_at(now() + interval '1 minute', 'b', 1, array['product_resync'], 300, 5)`,
  );
  await expect(
    withTransaction(worker, async (tx) => {
      await recordTaskResult(tx, { taskId, taskLeaseId: first.taskLeaseId, result: { sent: false } });
    }),
  ).rejects.toMatchObject({ name: 'QueueError', kind: 'lease_lost' });
  await withTransaction(worker, async (tx) => {
    await recordTaskResult(tx, { taskId, taskLeaseId: rows[0].task_lease_id, result: { sent: true, id: 'msg-1' } });
    await completeTask(tx, { taskId, taskLeaseId: rows[0].task_lease_id, outcome: 'succeeded' });
  });
  const results = await listTaskResults(app, taskId);
  expect(results).toEqual([
    { taskLeaseId: rows[0].task_lease_id, result: { sent: true, id: 'msg-1' }, recordedAt: expect.any(Date) },
  ]);
  await expect(
    recordTaskResult(worker, { taskId, taskLeaseId: rows[0].task_lease_id, result: { again: true } }),
  ).rejects.toMatchObject({
    kind: 'lease_lost',
  });
  await expect(listTaskResults(worker, taskId)).rejects.toMatchObject({ kind: 'forbidden' });
});
