// Lease loss is a kind the client reports only for the queue's own marker: task code
// raising SQLSTATE 55000 (an append-only trigger, currval before nextval) is a database
// error like any other.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type pg from 'pg';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { QueueError, claimTasks, completeTask, connect, enqueue, failTask, runFunction } from '../src/index.js';

let db: TestDatabase;
let app: pg.Pool;
let worker: pg.Pool;
beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(`
    create schema fixture_c;
    create function fixture_c.touch_fact(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    begin
      update queues.task set priority = priority where task_id = -1;
      return '{"success": true}';
    end $$;
    revoke execute on all functions in schema fixture_c from public;
    grant usage on schema fixture_c to ${db.dbUsers.worker};
    grant execute on function fixture_c.touch_fact(jsonb) to ${db.dbUsers.worker};
    select internal.register_runnable_function('fixture_c.touch_fact(jsonb)');
  `);
  app = connect({ connectionString: db.url('app') });
  worker = connect({ connectionString: db.url('worker') });
});
afterAll(async () => {
  await app?.end();
  await worker?.end();
  await db?.drop();
});

it('55000 raised by task code is a database error, not lease_lost', async () => {
  const error = await runFunction(worker, 'fixture_c.touch_fact', {}).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(QueueError);
  expect(error).toMatchObject({ code: '55000', kind: 'database', message: expect.stringContaining('append-only') });
});

it('a stale lease is lease_lost, from complete_task and fail_task', async () => {
  const taskId = await enqueue(app, { taskType: 'product_resync', payload: { store_id: 1 } });
  const [stale] = await claimTasks(worker, { workerId: 'stale', leaseSeconds: 60 });
  await db.query(`select * from queues.claim_tasks_at(now() + interval '61 seconds', 'fresh', 1, null, 60, 5)`);
  await expect(completeTask(worker, { taskId, taskLeaseId: stale.taskLeaseId })).rejects.toMatchObject({
    kind: 'lease_lost',
    code: '55000',
  });
  await expect(
    failTask(worker, { taskId, errorMessage: 'late', taskLeaseId: stale.taskLeaseId }),
  ).rejects.toMatchObject({
    kind: 'lease_lost',
  });
});
