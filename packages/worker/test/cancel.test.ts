// Cancelling running tasks with a real worker: the heartbeat finds the lease gone, the
// worker asks why (queues.cancelled_tasks) and aborts the processor's signal with a
// TaskCancelledError; nothing of the run is recorded, also when the processor ignores the
// abort and returns later, and its slot stays taken until it does. Cancels racing
// completions: every task ends once, and the worker reports each as it ended.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { cancelTasks } from '@org/queue-client';
import {
  createLogger,
  ProcessorRegistry,
  TaskCancelledError,
  Worker,
  WorkerMetrics,
  type Processor,
  type WorkerOptions,
} from '../src/index.js';
import { enqueue, eventually, factsOf, installFixtures } from './support/fixtures.js';

let db: TestDatabase;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
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
    workerId: `cancel-${workers.length}`,
    concurrency: 4,
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

const cancel = (ids: string[], reason?: string) => cancelTasks(db.pool('app'), ids, reason);

describe('cancelling a running task', () => {
  it('aborts the processor with the reason within a heartbeat; the task ends cancelled, nothing else recorded', async () => {
    const started = new Set<string>();
    const reasons = new Map<string, unknown>();
    const worker = await startWorker({
      name: 'waits-for-abort',
      async process({ task, signal }) {
        started.add(task.taskId);
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        reasons.set(task.taskId, signal.reason);
        // A processor that finishes anyway: its completion must be refused.
        return { outcome: 'succeeded', result: { late: true } };
      },
    });
    const metrics = new WorkerMetrics(worker);
    const cancelled: [string, string][] = [];
    const completed: string[] = [];
    worker.on('cancelled', (task, reason) => cancelled.push([task.taskId, reason]));
    worker.on('completed', (task) => completed.push(task.taskId));
    const id = await enqueue(db, 'slow', { cancel: 1 });
    await eventually(() => started.has(id), 'the task started');
    expect(await cancel([id], 'no longer needed')).toEqual([{ taskId: id, result: 'cancelled', wasRunning: true }]);
    await eventually(() => cancelled.length === 1, 'the worker reports the cancel');
    const reason = reasons.get(id);
    expect(reason).toBeInstanceOf(TaskCancelledError);
    expect(reason).toMatchObject({ taskId: id, reason: 'no longer needed' });
    expect(cancelled).toEqual([[id, 'no longer needed']]);
    expect(await metrics.value('queue_worker_tasks_cancelled_total', { task_type: 'slow' })).toBe(1);
    expect(await metrics.value('queue_worker_tasks_in_flight')).toBe(0);
    expect(completed).toEqual([]);
    expect(await factsOf(db, id)).toEqual({ outcome: 'cancelled', errors: [], leases: 1 });
    const results = await db.query('select count(*)::int as n from queues.task_result where task_id = $1', [id]);
    expect(results.rows[0].n).toBe(0);
  });

  it('a processor that ignores the abort keeps its slot until it returns, and its late success is refused', async () => {
    let finish!: () => void;
    const held = new Promise<void>((resolve) => (finish = resolve));
    const started: string[] = [];
    let stubbornSignal: AbortSignal | undefined;
    const worker = await startWorker(
      {
        name: 'ignores-abort',
        async process({ task, signal }) {
          started.push(task.taskId);
          if (task.payload.stubborn) {
            stubbornSignal = signal;
            await held;
          }
          return { outcome: 'succeeded' };
        },
      },
      { concurrency: 1, prefetch: 0 },
    );
    const cancelled: string[] = [];
    worker.on('cancelled', (task) => cancelled.push(task.taskId));
    const stubborn = await enqueue(db, 'slow', { stubborn: true });
    await eventually(() => started.includes(stubborn), 'the stubborn task started');
    const next = await enqueue(db, 'slow', { stubborn: false });
    await cancel([stubborn], 'stop');
    // The heartbeat found the lease gone and aborted the signal; the processor runs on, and
    // the slot is still its own: the next task does not start.
    await eventually(() => stubbornSignal?.aborted === true, 'the signal aborted');
    expect(stubbornSignal?.reason).toBeInstanceOf(TaskCancelledError);
    expect(worker.status().running).toBe(1);
    expect(started).toEqual([stubborn]);
    finish();
    await eventually(() => cancelled.includes(stubborn), 'the late run is reported cancelled');
    await eventually(() => started.includes(next), 'the next task starts once the slot is back');
    expect(await factsOf(db, stubborn)).toEqual({ outcome: 'cancelled', errors: [], leases: 1 });
    await eventually(async () => (await factsOf(db, next)).outcome === 'succeeded', 'the next task succeeds');
  });

  it('cancels racing completions: 200 tasks, each ends once, and the worker reports each as it ended', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 200; i++) ids.push(await enqueue(db, 'slow', { race: i }));
    const started = new Set<string>();
    const worker = await startWorker(
      {
        name: 'quick',
        async process({ task, signal }) {
          started.add(task.taskId);
          // Some finish at once, some after a few ms, some only when aborted.
          const i = Number(task.payload.race);
          if (i % 3 === 1) await new Promise((r) => setTimeout(r, i % 7));
          if (i % 3 === 2) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
          return { outcome: 'succeeded' };
        },
      },
      { concurrency: 16, heartbeatIntervalMs: 50 },
    );
    const completed = new Set<string>();
    const cancelled = new Set<string>();
    worker.on('completed', (task) => completed.add(task.taskId));
    worker.on('cancelled', (task) => cancelled.add(task.taskId));
    const lost = new Set<string>();
    worker.on('lease_lost', (task) => lost.add(task.taskId));
    // Cancel every task, in windows of ten, while the worker runs them.
    const answers = new Map<string, string>();
    for (let i = 0; i < ids.length; i += 10) {
      await eventually(() => ids.slice(i, i + 10).some((id) => started.has(id)), 'the window started');
      for (const a of await cancel(ids.slice(i, i + 10), 'race')) answers.set(a.taskId, a.result);
    }
    const { rows } = await db.query<{ task_id: string; outcome: string; n: number }>(
      `select task_id::text, min(outcome) as outcome, count(*)::int as n from queues.task_end
        where task_id = any($1::bigint[]) group by task_id`,
      [ids],
    );
    expect(rows).toHaveLength(200);
    expect(rows.every((r) => r.n === 1)).toBe(true);
    const outcome = new Map(rows.map((r) => [r.task_id, r.outcome]));
    for (const id of ids) {
      expect([id, answers.get(id)]).toEqual([id, outcome.get(id) === 'cancelled' ? 'cancelled' : 'already_completed']);
    }
    // The worker is told of every task cancelled while it ran, and reports no completion for one.
    await eventually(
      () => ids.every((id) => completed.has(id) || cancelled.has(id) || !started.has(id)),
      'every started run reported',
    ).catch((e: Error) => {
      const missing = ids.filter((id) => !(completed.has(id) || cancelled.has(id) || !started.has(id)));
      throw new Error(`${e.message}: ${JSON.stringify(missing.map((id) => [id, outcome.get(id), lost.has(id)]))}`);
    });
    for (const id of ids) {
      if (outcome.get(id) === 'succeeded') expect([id, completed.has(id)]).toEqual([id, true]);
      else expect([id, completed.has(id)]).toEqual([id, false]);
    }
    // Both won some (the race was real); those waiting on their signal can only have ended by the cancel.
    expect(new Set(outcome.values())).toEqual(new Set(['cancelled', 'succeeded']));
    for (const id of ids.filter((_, i) => i % 3 === 2)) expect([id, outcome.get(id)]).toEqual([id, 'cancelled']);
  });
});
