// Progress reports from a real worker (src/progress.ts): a processor reporting in a tight
// loop is recorded at most once per second per task, the latest report reaches the
// database, a defineTask run reports through ctx.progress, and a bad value throws in the
// processor without touching the database.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { defineTask } from '@org/tasks';
import {
  createLogger,
  ProcessorRegistry,
  registerTaskDefinitions,
  Worker,
  type Processor,
  type WorkerOptions,
} from '../src/index.js';
import { enqueue, eventually, factsOf, installFixtures } from './support/fixtures.js';

let db: TestDatabase;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
  await db.query(`insert into queues.task_type (task_type, description) values ('purge', 'progress tests')`);
});
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop(0)));
});
afterAll(async () => {
  await db?.drop();
});

async function startWorker(registry: ProcessorRegistry, overrides: Partial<WorkerOptions> = {}): Promise<Worker> {
  const worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: null,
    workerId: `progress-${workers.length}`,
    concurrency: 2,
    pollIntervalMs: 100,
    heartbeatIntervalMs: 1000,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 0,
    logger: createLogger('silent'),
    registry,
    ...overrides,
  });
  workers.push(worker);
  await worker.start();
  return worker;
}

const progressOf = async (id: string) =>
  (
    await db.query<{ done: string; total: string | null; note: string; n: number }>(
      `select p.done, p.total, p.note, (select count(*)::int from queues.task_progress x where x.task_id = $1) as n
         from queues.task_progress p where p.task_id = $1 order by p.task_progress_id desc limit 1`,
      [id],
    )
  ).rows[0];

describe('progress', () => {
  it('500 reports in a tight loop: a few reach the database, the latest among them', async () => {
    let finish!: () => void;
    const held = new Promise<void>((resolve) => (finish = resolve));
    const processor: Processor = {
      name: 'reports',
      async process(ctx) {
        for (let i = 1; i <= 500; i++) ctx.progress(i, 500, `file ${i}`);
        await held;
        return { outcome: 'succeeded' };
      },
    };
    await startWorker(new ProcessorRegistry().register('slow', processor), { roles: ['slow'] });
    const id = await enqueue(db, 'slow', { progress: true });
    // The first report at once, the latest of the second after it.
    await eventually(async () => (await progressOf(id))?.done === '500', 'the latest report recorded');
    const last = await progressOf(id);
    expect(last).toEqual({ done: '500', total: '500', note: 'file 500', n: 2 });
    finish();
    await eventually(async () => (await factsOf(db, id)).outcome === 'succeeded', 'completed');
    const { rows } = await db.pool('api').query(`select admin.get_task($1) -> 'progress' as p`, [id]);
    expect(rows[0].p).toMatchObject({ done: 500, total: 500, note: 'file 500', reports: 2 });
  });

  it('a defineTask run reports through ctx.progress; a bad value throws in the run, nothing recorded', async () => {
    const purge = defineTask({
      name: 'purge',
      payload: z.object({ files: z.number().int(), bad: z.boolean() }),
      run: ({ files, bad }, ctx) => {
        if (bad) ctx.progress(5, 4);
        for (let i = 0; i <= files; i++) ctx.progress(i, files, 'deleting');
        return { deleted: files };
      },
    });
    await startWorker(registerTaskDefinitions(new ProcessorRegistry(), [purge]), { roles: ['purge'] });
    const good = await enqueue(db, 'purge', { files: 3, bad: false });
    const bad = await enqueue(db, 'purge', { files: 3, bad: true });
    await eventually(async () => (await factsOf(db, bad)).outcome !== null, 'the bad run ended');
    expect(await factsOf(db, bad)).toMatchObject({
      outcome: 'failed',
      errors: ['progress total must be a whole number >= done (5), got 4'],
    });
    expect(await progressOf(bad)).toBeUndefined();
    await eventually(async () => (await factsOf(db, good)).outcome === 'succeeded', 'the good run succeeded');
    // The first report went out at once (recorded unless the completion came first); the
    // rest of the same second waited and were dropped once the run was over.
    const recorded = await progressOf(good);
    if (recorded) expect(recorded).toEqual({ done: '0', total: '3', note: 'deleting', n: 1 });
  });
});
