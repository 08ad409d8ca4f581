// Run timeouts per task type (sql/queues/timeouts.sql, src/timeouts.ts) with a real
// worker: at the deadline the signal is aborted with a TaskTimeoutError and the failure is
// recorded at once; a processor that ignores the abort keeps its slot until it returns and
// its late success is not recorded; a failure with attempts left is retried; a type with
// no timeout is never cut off. And the settings' bad input.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import {
  createLogger,
  ProcessorRegistry,
  TaskTimeoutError,
  Worker,
  WorkerMetrics,
  type Processor,
  type WorkerOptions,
} from '../src/index.js';
import { claimTasks, enqueue as enqueueTask, enqueueMany } from '@org/queue-client';
import { enqueue, eventually, factsOf, installFixtures } from './support/fixtures.js';

let db: TestDatabase;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
});
beforeEach(async () => {
  await db.query(`select queues.set_task_type_timeout('slow', null)`);
});
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop(0)));
});
afterAll(async () => {
  await db?.drop();
});

async function startWorker(processor: Processor, overrides: Partial<WorkerOptions> = {}): Promise<Worker> {
  const worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: ['slow'],
    workerId: `timeouts-${workers.length}`,
    concurrency: 1,
    prefetch: 0,
    pollIntervalMs: 100,
    heartbeatIntervalMs: 100,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 0,
    logger: createLogger('silent'),
    registry: new ProcessorRegistry().register('slow', processor),
    ...overrides,
  });
  workers.push(worker);
  await worker.start();
  return worker;
}

describe('run timeouts', () => {
  it('a processor that ignores the abort: failed at the deadline, its slot held until it returns, its late success not recorded', async () => {
    await db.query(`select queues.set_task_type_timeout('slow', 300)`);
    let finish!: () => void;
    const held = new Promise<void>((resolve) => (finish = resolve));
    const started: string[] = [];
    let stubbornSignal: AbortSignal | undefined;
    const worker = await startWorker({
      name: 'ignores-abort',
      async process({ task, signal }) {
        started.push(task.taskId);
        if (task.payload.stubborn) {
          stubbornSignal = signal;
          await held;
          return { outcome: 'succeeded', result: { late: true } };
        }
        return { outcome: 'succeeded' };
      },
    });
    const metrics = new WorkerMetrics(worker);
    const stubborn = await enqueue(db, 'slow', { stubborn: true });
    await eventually(() => started.includes(stubborn), 'the stubborn task started');
    const next = await enqueue(db, 'slow', { stubborn: false });
    // The failure is recorded while the processor still runs.
    await eventually(async () => (await factsOf(db, stubborn)).outcome === 'failed', 'the timeout recorded');
    expect(await factsOf(db, stubborn)).toEqual({
      outcome: 'failed',
      errors: ['slow timed out after 300 ms'],
      leases: 1,
    });
    expect(stubbornSignal?.aborted).toBe(true);
    expect(stubbornSignal?.reason).toBeInstanceOf(TaskTimeoutError);
    expect(await metrics.value('queue_worker_tasks_timed_out_total', { task_type: 'slow' })).toBe(1);
    // Its slot is still taken: the next task waits.
    expect(worker.status()).toMatchObject({ running: 1, timedOut: 1 });
    expect(started).toEqual([stubborn]);
    finish();
    await eventually(() => started.includes(next), 'the next task starts once the slot is back');
    await eventually(async () => (await factsOf(db, next)).outcome === 'succeeded', 'the next task succeeds');
    expect(worker.status().timedOut).toBe(0);
    expect(await factsOf(db, stubborn)).toEqual({
      outcome: 'failed',
      errors: ['slow timed out after 300 ms'],
      leases: 1,
    });
    const results = await db.query('select count(*)::int as n from queues.task_result where task_id = $1', [stubborn]);
    expect(results.rows[0].n).toBe(0);
  });

  it('a timed-out run with attempts left is retried (the failure ended its lease)', async () => {
    await db.query(`select queues.set_task_type_timeout('slow', 200)`);
    const aborted: unknown[] = [];
    await startWorker({
      name: 'respects-abort',
      async process({ signal }) {
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        aborted.push(signal.reason);
        return { outcome: 'succeeded' };
      },
    });
    const id = await enqueue(db, 'slow', { retried: true }, 3);
    await eventually(async () => {
      const { rows } = await db.query('select count(*)::int as n from queues.task_attempt_failed where task_id = $1', [
        id,
      ]);
      return rows[0].n === 1;
    }, 'a failed attempt');
    expect(aborted[0]).toBeInstanceOf(TaskTimeoutError);
    const { rows } = await db.query<{ pending: boolean; errors: string[] }>(
      `select exists (select 1 from queues.task_pending where task_id = $1 and current_lease_id is null) as pending,
              array(select error_message from queues.error where task_id = $1) as errors`,
      [id],
    );
    expect(rows[0]).toEqual({ pending: true, errors: ['slow timed out after 200 ms'] });
  });

  it('a type without a timeout is not cut off', async () => {
    await db.query(`select queues.set_task_type_timeout('slow', 50)`);
    await db.query(`select queues.set_task_type_timeout('slow', null)`);
    let signal: AbortSignal | undefined;
    await startWorker({
      name: 'slow-enough',
      async process(ctx) {
        signal = ctx.signal;
        await new Promise((r) => setTimeout(r, 400));
        return { outcome: 'succeeded' };
      },
    });
    const id = await enqueue(db, 'slow', { untimed: true });
    await eventually(async () => (await factsOf(db, id)).outcome !== null, 'completed');
    expect(await factsOf(db, id)).toEqual({ outcome: 'succeeded', errors: [], leases: 1 });
    expect(signal?.aborted).toBe(false);
  });

  it.each([
    ['an unknown type', ['nope', 100], '23503', 'unknown task type'],
    ['a null type', [null, 100], '22004', 'task_type must not be null'],
    ['zero', ['slow', 0], '22023', 'timeout_ms must be between 1 and 86400000'],
    ['a negative timeout', ['slow', -5], '22023', 'timeout_ms must be between'],
    ['more than a day', ['slow', 86400001], '22023', 'timeout_ms must be between'],
  ])('refuses %s and writes nothing', async (_name, args, code, message) => {
    const before = (await db.query('select count(*)::int as n from queues.task_type_timeout_set')).rows[0].n;
    await expect(db.query('select queues.set_task_type_timeout($1, $2)', args)).rejects.toMatchObject({
      code,
      message: expect.stringContaining(message),
    });
    expect((await db.query('select count(*)::int as n from queues.task_type_timeout_set')).rows[0].n).toBe(before);
  });

  it('the REST API database user sets and clears a timeout in seconds; the worker reads them', async () => {
    await db.pool('api').query(`select admin.set_task_type_timeout('slow', 2.5)`);
    const read = async () => (await db.pool('worker').query('select * from queues.task_type_timeouts()')).rows;
    expect(await read()).toEqual([{ task_type: 'slow', timeout_ms: 2500 }]);
    await expect(db.pool('api').query(`select admin.set_task_type_timeout('slow', 0)`)).rejects.toMatchObject({
      code: '22023',
    });
    await db.pool('api').query(`select admin.set_task_type_timeout('slow', null)`);
    expect(await read()).toEqual([]);
    // Neither the app nor the worker may set one.
    await expect(db.pool('app').query(`select queues.set_task_type_timeout('slow', 1)`)).rejects.toMatchObject({
      code: '42501',
    });
  });

  it("a task's own timeout, shorter than its type's: aborted at its own", async () => {
    await db.query(`select queues.set_task_type_timeout('slow', 60000)`);
    const aborted: unknown[] = [];
    await startWorker({
      name: 'respects-abort',
      async process({ signal }) {
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        aborted.push(signal.reason);
        return { outcome: 'succeeded' };
      },
    });
    const id = await enqueueTask(db.pool('app'), { taskType: 'slow', payload: {}, maxAttempts: 1, timeoutMs: 200 });
    await eventually(async () => (await factsOf(db, id)).outcome === 'failed', 'the timeout recorded');
    expect(await factsOf(db, id)).toEqual({ outcome: 'failed', errors: ['slow timed out after 200 ms'], leases: 1 });
    expect(aborted[0]).toBeInstanceOf(TaskTimeoutError);
  });

  it("a task's own timeout, longer than its type's: not cut off at the type's", async () => {
    await db.query(`select queues.set_task_type_timeout('slow', 100)`);
    let signal: AbortSignal | undefined;
    await startWorker({
      name: 'slow-enough',
      async process(ctx) {
        signal = ctx.signal;
        await new Promise((r) => setTimeout(r, 400));
        return { outcome: 'succeeded' };
      },
    });
    const id = await enqueueTask(db.pool('app'), { taskType: 'slow', payload: {}, maxAttempts: 1, timeoutMs: 60000 });
    await eventually(async () => (await factsOf(db, id)).outcome !== null, 'completed');
    expect(await factsOf(db, id)).toEqual({ outcome: 'succeeded', errors: [], leases: 1 });
    expect(signal?.aborted).toBe(false);
  });

  it('the claim returns the timeout set at enqueue (single, batch), null when none', async () => {
    const one = await enqueueTask(db.pool('app'), { taskType: 'slow', payload: {}, timeoutMs: 1234 });
    const [two, three] = await enqueueMany(db.pool('app'), [
      { taskType: 'slow', payload: {}, timeoutMs: 86400000 },
      { taskType: 'slow', payload: {} },
    ]);
    const claimed = await claimTasks(db.pool('worker'), { workerId: 'timeouts-claim', limit: 10, taskTypes: ['slow'] });
    const byId = Object.fromEntries(claimed.map((t) => [t.taskId, t.timeoutMs]));
    expect(byId).toEqual({ [one]: 1234, [two]: 86400000, [three]: null });
    // The task page (admin.get_task): the task's own timeout, and its type's.
    await db.query(`select queues.set_task_type_timeout('slow', 5000)`);
    const page = async (id: string) =>
      (await db.pool('api').query('select admin.get_task($1) as t', [id])).rows[0].t.task;
    expect(await page(one)).toMatchObject({ timeout_ms: 1234, type_timeout_ms: 5000 });
    expect(await page(three)).toMatchObject({ timeout_ms: null, type_timeout_ms: 5000 });
  });

  it.each([
    ['zero', 0],
    ['a negative timeout', -1],
    ['more than a day', 86400001],
  ])('an enqueue with %s as its timeout is refused and writes nothing', async (_name, timeoutMs) => {
    const count = async () =>
      (await db.query(`select count(*)::int as n from queues.task where task_type = 'slow'`)).rows[0].n;
    const before = await count();
    const app = db.pool('app');
    const refused = { code: '22023', message: expect.stringContaining('timeout_ms must be between 1 and 86400000') };
    await expect(
      app.query(`select queues.enqueue('slow', '{}', _timeout_ms => $1)`, [timeoutMs]),
    ).rejects.toMatchObject(refused);
    await expect(
      db.query(`select queues.enqueue_internal('slow', '{}', _timeout_ms => $1)`, [timeoutMs]),
    ).rejects.toMatchObject(refused);
    await expect(
      app.query(`call queues.enqueue_and_commit('slow', '{}', _timeout_ms => $1)`, [timeoutMs]),
    ).rejects.toMatchObject(refused);
    await expect(
      app.query(`select queues.enqueue_many($1::jsonb)`, [
        JSON.stringify([
          { task_type: 'slow', payload: {} },
          { task_type: 'slow', payload: {}, timeout_ms: timeoutMs },
        ]),
      ]),
    ).rejects.toMatchObject({
      code: '22023',
      message: expect.stringContaining('tasks[1]: timeout_ms must be between'),
    });
    expect(await count()).toBe(before);
  });
});
