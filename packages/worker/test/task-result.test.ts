// db_function results are kept as task results (queues.task_result), in the completion's
// transaction: the function's envelope, readable through @org/queue-client as the app.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { claimTasks, listTaskResults } from '@org/queue-client';
import { Completer, createLogger, dbFunctionProcessor, ProcessorRegistry, Worker } from '../src/index.js';
import { enqueue, eventually, factsOf, installFixtures } from './support/fixtures.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
});
afterAll(async () => {
  await db?.drop();
});

it('keeps each db_function envelope (success, status, validation failure) as the result of its run', async () => {
  const ok = await enqueue(db, 'db_function', {
    db_function: 'fixture.step',
    key: 'r1',
    result: { success: true, payload: { stores: 3 } },
  });
  const status = await enqueue(db, 'db_function', {
    db_function: 'fixture.step',
    key: 'r2',
    result: { status: 'already_generated', payload: { date: '2026-01-05' } },
  });
  const invalid = await enqueue(db, 'db_function', {
    db_function: 'fixture.step',
    key: 'r3',
    result: { success: false, validation_failure_message: 'no' },
  });
  const raised = await enqueue(db, 'db_function', { db_function: 'fixture.step', key: 'r4', raise: 'boom' });
  const worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: ['db_function'],
    workerId: 'results',
    concurrency: 2,
    pollIntervalMs: 50,
    heartbeatIntervalMs: 1000,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 1000,
    registry: new ProcessorRegistry().register('db_function', dbFunctionProcessor()),
    logger: createLogger('silent'),
  });
  await worker.start();
  try {
    await eventually(
      async () =>
        (await Promise.all([ok, status, invalid, raised].map((id) => factsOf(db, id)))).every(
          (f) => f.outcome !== null,
        ),
      'all done',
    );
  } finally {
    await worker.stop();
  }
  const app = db.pool('app');
  expect((await listTaskResults(app, ok)).map((r) => r.result)).toEqual([{ success: true, payload: { stores: 3 } }]);
  expect((await listTaskResults(app, status)).map((r) => r.result)).toEqual([
    { status: 'already_generated', payload: { date: '2026-01-05' } },
  ]);
  expect((await listTaskResults(app, invalid)).map((r) => r.result)).toEqual([
    { success: false, validation_failure_message: 'no' },
  ]);
  // A function that raised rolled back: no result, only the error.
  expect(await listTaskResults(app, raised)).toEqual([]);
  const [lease] = (await db.query(`select task_lease_id::text from queues.task_leases where task_id = $1`, [ok])).rows;
  expect((await listTaskResults(app, ok))[0].taskLeaseId).toBe(lease.task_lease_id);
});

it('a worker whose lease was taken over records no result', async () => {
  const id = await enqueue(db, 'db_function', {
    db_function: 'fixture.step',
    key: 'late',
    result: { success: true, payload: { late: true } },
  });
  const [task] = await claimTasks(db.pool('worker'), {
    workerId: 'slow',
    limit: 1,
    taskTypes: ['db_function'],
    leaseSeconds: 1,
  });
  await db.query(
    `select * from queues.claim_tasks_at(now() + interval '1 minute', 'fast', 1, array['db_function'], 300, 5)`,
  );
  // The step runs in the database through the completer (queues.run_steps), fenced by the lease.
  const completer = new Completer(db.url('worker'), createLogger('silent'));
  try {
    const outcome = await dbFunctionProcessor().process({
      task: task,
      pool: db.pool('worker'),
      log: createLogger('silent'),
      signal: new AbortController().signal,
      progress: () => {},
      dependencies: () => Promise.resolve([]),
    });
    const { result } = await completer.complete(task, outcome);
    expect(result).toBe('lease_lost');
  } finally {
    await completer.close();
  }
  expect(await listTaskResults(db.pool('app'), id)).toEqual([]);
  expect((await db.query(`select count(*)::int as n from fixture.effect where task_key = 'late'`)).rows[0].n).toBe(0);
});
