// Task dependencies through a real worker (src/dependencies.ts): a fan-in task enqueued with
// the queue client's dependsOn runs only after its dependencies, and reads their outcomes
// and results with ctx.dependencies(), in a processor and in a defineTask run; a failed
// dependency fails it without a run.
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { defineTask } from '@org/tasks';
import { enqueue, type TaskDependency } from '@org/queue-client';
import { createLogger, ProcessorRegistry, registerTaskDefinitions, Worker, type Processor } from '../src/index.js';
import { eventually, factsOf } from './support/fixtures.js';

let db: TestDatabase;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(
    `insert into queues.task_type (task_type, description)
     values ('part', 'dependency tests'), ('combine', 'dependency tests'), ('combine_def', 'dependency tests')`,
  );
});
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop(0)));
});
afterAll(async () => {
  await db?.drop();
});

async function startWorker(registry: ProcessorRegistry, roles: string[]): Promise<Worker> {
  const worker = new Worker({
    databaseUrl: db.url('worker'),
    roles,
    workerId: `deps-${workers.length}`,
    concurrency: 4,
    pollIntervalMs: 50,
    heartbeatIntervalMs: 1000,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 0,
    logger: createLogger('silent'),
    registry,
  });
  workers.push(worker);
  await worker.start();
  return worker;
}

const part: Processor = {
  name: 'part',
  process({ task }) {
    if (task.payload.fail) return Promise.resolve({ outcome: 'failed', error: 'part failed', final: true });
    return Promise.resolve({ outcome: 'succeeded', result: { rows: task.payload.rows as number } });
  },
};

it('a fan-in task runs after its dependencies and reads their results (processor and defineTask)', async () => {
  const seen: Record<string, TaskDependency[]> = {};
  const combine: Processor = {
    name: 'combine',
    async process(ctx) {
      const deps = await ctx.dependencies();
      seen[ctx.task.taskId] = deps;
      const total = deps.reduce((n, d) => n + Number(d.result?.rows ?? 0), 0);
      return { outcome: 'succeeded', result: { total } };
    },
  };
  const combineDef = defineTask({
    name: 'combine_def',
    payload: z.object({}),
    run: async (_payload, ctx) => {
      const deps = await ctx.dependencies();
      return { total: deps.reduce((n, d) => n + Number(d.result?.rows ?? 0), 0), outcomes: deps.map((d) => d.outcome) };
    },
  });
  const app = db.pool('app');
  const parts: string[] = [];
  for (const rows of [1, 2, 3, 4]) parts.push(await enqueue(app, { taskType: 'part', payload: { rows } }));
  const x = await enqueue(app, { taskType: 'combine', payload: {}, dependsOn: parts });
  const y = await enqueue(app, { taskType: 'combine_def', payload: {}, dependsOn: parts.slice(0, 2) });
  // The combining tasks' worker starts first: nothing for it to run yet.
  await startWorker(registerTaskDefinitions(new ProcessorRegistry().register('combine', combine), [combineDef]), [
    'combine',
    'combine_def',
  ]);
  const state = async (id: string) =>
    (await db.query<{ s: string }>('select admin.get_task($1) #>> $2 as s', [id, '{task,state}'])).rows[0].s;
  expect(await state(x)).toBe('waiting');
  await startWorker(new ProcessorRegistry().register('part', part), ['part']);
  await eventually(async () => (await factsOf(db, x)).outcome === 'succeeded', 'the fan-in task ran');
  await eventually(async () => (await factsOf(db, y)).outcome === 'succeeded', 'the defined task ran');
  expect(seen[x].map((d) => [d.taskId, d.outcome, d.result])).toEqual(
    parts.map((id, i) => [id, 'succeeded', { rows: i + 1 }]),
  );
  const results = await db.query<{ task_id: string; result: unknown }>(
    'select task_id::text, result from queues.task_result where task_id = any ($1::bigint[]) order by task_id',
    [[x, y]],
  );
  expect(results.rows).toEqual([
    { task_id: x, result: { total: 10 } },
    { task_id: y, result: { total: 3, outcomes: ['succeeded', 'succeeded'] } },
  ]);
});

it('a failed dependency fails the dependent without running it', async () => {
  let ran = false;
  const combine: Processor = {
    name: 'combine',
    process() {
      ran = true;
      return Promise.resolve({ outcome: 'succeeded' });
    },
  };
  const app = db.pool('app');
  const bad = await enqueue(app, { taskType: 'part', payload: { fail: true } });
  const x = await enqueue(app, { taskType: 'combine', payload: {}, dependsOn: [bad] });
  await startWorker(new ProcessorRegistry().register('combine', combine), ['combine']);
  await startWorker(new ProcessorRegistry().register('part', part), ['part']);
  await eventually(async () => (await factsOf(db, x)).outcome !== null, 'the dependent ended');
  expect(await factsOf(db, x)).toEqual({
    outcome: 'failed',
    errors: [`dependency task ${bad} ended failed`],
    leases: 0,
  });
  expect(ran).toBe(false);
});
