// Tasks defined with @org/tasks' defineTask, run by the real Worker: the payload is
// validated with the definition's schema before run (a failure names the field and is
// never retried), run's result is kept, a throw is retried while attempts remain, and
// timeoutMs fails a run that takes too long and aborts its signal.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { dataRoot } from '@org/db-tools';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { defineTask, registerTasks, typedEnqueue } from '@org/tasks';
import { createLogger, ProcessorRegistry, registerTaskDefinitions, Worker } from '../src/index.js';
import { startChild } from './support/child.js';
import { eventually, factsOf } from './support/fixtures.js';

let db: TestDatabase;
const workers: Worker[] = [];
const runs: { name: string; payload: unknown }[] = [];
let timedOutSignal: AbortSignal | undefined;

const fax = defineTask({
  name: 'fax_def',
  description: 'worker tests: a defined task',
  payload: z.object({ to: z.string(), pages: z.number().int().positive().default(1) }),
  run: ({ to, pages }) => {
    runs.push({ name: 'fax_def', payload: { to, pages } });
    return { sent_to: to, pages };
  },
});
const flaky = defineTask({
  name: 'flaky_def',
  payload: z.object({ key: z.string() }),
  run: ({ key }) => {
    runs.push({ name: 'flaky_def', payload: { key } });
    throw new Error(`flaky ${key} broke`);
  },
});
const slow = defineTask({
  name: 'slow_def',
  payload: z.object({}),
  timeoutMs: 200,
  run: (_payload, ctx) =>
    new Promise<void>((resolve) => {
      timedOutSignal = ctx.signal;
      // Never finishes on its own: only the timeout ends the run.
      ctx.signal.addEventListener('abort', () => setTimeout(resolve, 50));
    }),
});
const definitions = [fax, flaky, slow] as const;
const enqueueTask = typedEnqueue(definitions);

beforeAll(async () => {
  db = await createTestDatabase();
  await registerTasks(db.pool('owner'), definitions);
  // Retry backoffs in milliseconds rather than seconds.
  await db.query(`insert into internal.setting (name, value) values ('backoff_scale', '0.001')
                  on conflict (name) do update set value = excluded.value`);
});
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop(0)));
});
afterAll(async () => {
  await db?.drop();
});

async function startWorker(): Promise<Worker> {
  const worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: null,
    workerId: `def-${Math.random().toString(36).slice(2, 8)}`,
    concurrency: 4,
    pollIntervalMs: 100,
    heartbeatIntervalMs: 500,
    leaseSeconds: 5,
    maxLeases: 3,
    shutdownGraceMs: 500,
    logger: createLogger('silent'),
    registry: registerTaskDefinitions(new ProcessorRegistry(), definitions),
  });
  workers.push(worker);
  await worker.start();
  return worker;
}

/** Enqueued as the app, past typed enqueue's own validation: a payload as SQL or the REST API could send it. */
async function enqueueRaw(taskType: string, payload: unknown, maxAttempts: number): Promise<string> {
  const { rows } = await db
    .pool('app')
    .query('select queues.enqueue($1, $2::jsonb, null, null, null, $3) as id', [
      taskType,
      JSON.stringify(payload),
      maxAttempts,
    ]);
  return rows[0].id;
}

async function completed(taskId: string) {
  await eventually(async () => (await factsOf(db, taskId)).outcome !== null, `task ${taskId} completed`);
  return factsOf(db, taskId);
}

it('runs a defined task with its parsed payload and keeps what run returns as the result', async () => {
  await startWorker();
  const taskId = await enqueueTask(db.pool('app'), { taskType: 'fax_def', payload: { to: '+15550100' } });
  const facts = await completed(taskId);
  expect(facts).toMatchObject({ outcome: 'succeeded', errors: [] });
  // The schema's default applied before run.
  expect(runs).toContainEqual({ name: 'fax_def', payload: { to: '+15550100', pages: 1 } });
  const { rows } = await db.query('select result from queues.task_result where task_id = $1', [taskId]);
  expect(rows[0].result).toEqual({ sent_to: '+15550100', pages: 1 });
});

it('fails a payload the schema rejects once, naming the field, even with attempts left', async () => {
  await startWorker();
  const taskId = await enqueueRaw('fax_def', { to: '+15550100', pages: 'two' }, 5);
  const facts = await completed(taskId);
  expect(facts.outcome).toBe('failed');
  expect(facts.errors).toEqual(['invalid fax_def payload: pages: Invalid input: expected number, received string']);
  // Never retried: one lease, no failed attempt recorded, run never called.
  expect(facts.leases).toBe(1);
  const { rows } = await db.query('select count(*)::int as n from queues.task_attempt_failed where task_id = $1', [
    taskId,
  ]);
  expect(rows[0].n).toBe(0);
  expect(runs.filter((r) => (r.payload as { pages?: unknown }).pages === 'two')).toEqual([]);
});

it('retries a run that throws while attempts remain, then fails with its message', async () => {
  await startWorker();
  const taskId = await enqueueRaw('flaky_def', { key: 'k1' }, 3);
  const facts = await completed(taskId);
  expect(facts.outcome).toBe('failed');
  expect(facts.errors).toEqual(['flaky k1 broke', 'flaky k1 broke', 'flaky k1 broke']);
  expect(runs.filter((r) => r.name === 'flaky_def')).toHaveLength(3);
});

it('fails a run that outlives timeoutMs and aborts its signal', async () => {
  await startWorker();
  const taskId = await enqueueRaw('slow_def', {}, 1);
  const facts = await completed(taskId);
  expect(facts).toMatchObject({ outcome: 'failed', errors: ['slow_def timed out after 200 ms'] });
  expect(timedOutSignal?.aborted).toBe(true);
});

it('refuses a definition named like a built-in task type', () => {
  const registry = new ProcessorRegistry().register('email', { name: 'x', process: () => Promise.reject(new Error()) });
  const email = defineTask({ name: 'email', payload: z.object({}), run: () => {} });
  expect(() => registerTaskDefinitions(registry, [email])).toThrow(
    'task email: a built-in processor already handles this task type; choose another name',
  );
});

it('queue-worker stops with exit code 2 and names the file when the task folder cannot be loaded', async () => {
  const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
  // Inside the checkout, so that the task files resolve zod and @org/tasks as an app's would.
  mkdirSync(dataRoot(), { recursive: true });
  const app = mkdtempSync(join(dataRoot(), 'worker-tasks-'));
  try {
    mkdirSync(join(app, 'tasks'));
    writeFileSync(join(app, 'tasks', 'fax.ts'), 'export const notATask: number = 1;\n');
    const cases: [Record<string, string>, RegExp][] = [
      [{ TASKS_DIR: join(app, 'tasks') }, /tasks\/fax\.ts exports no task definition/],
      [{ TASKS_DIR: join(app, 'missing') }, /TASKS_DIR: .*\/missing is not a folder/],
    ];
    for (const [env, message] of cases) {
      const child = startChild({ DATABASE_URL: db.url('worker'), ...env }, cli);
      const exit = await child.exited;
      expect(child.output()).toMatch(message);
      expect(exit.code).toBe(2);
    }
  } finally {
    rmSync(app, { recursive: true, force: true });
  }
});
