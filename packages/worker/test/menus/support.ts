// Shared pieces of the menu-sync tests: a test database with fast retries, the fake menu
// platform, in-process workers running the real processors, and fact readers.
import type pg from 'pg';
import type { TestDatabase } from '@org/testing';
import type { ClaimedTask } from '@org/queue-client';
import { Completer, createLogger, Worker, type Settled } from '@org/worker';
import { defaultRegistry } from '@org/worker/command';
import { createHttpMenuPlatform, menuProcessors, type FakeMenuPlatform, type MenuProcessor } from '@org/menu-sync';

/**
 * Runs `processor` on `task` as the worker does: the processor returns its outcome, and a
 * completer (the only writer of a task's end) records it, effects and result included.
 */
export async function runAndComplete(
  db: TestDatabase,
  processor: MenuProcessor,
  task: ClaimedTask,
  pool: pg.Pool = db.pool('worker'),
): Promise<Settled> {
  const completer = new Completer(db.url('worker'), createLogger('silent'));
  try {
    const outcome = await processor.process({ task, pool, signal: new AbortController().signal });
    return await completer.complete(task, outcome, Date.now());
  } finally {
    await completer.close();
  }
}

/** Retries 1000x sooner (5 ms, 10 ms, ...) so a test sees every attempt of a task. */
export async function fastRetries(db: TestDatabase): Promise<void> {
  await db.query(`insert into internal.setting (name, value) values ('backoff_scale', '0.001')
                  on conflict (name) do update set value = excluded.value`);
}

const noProvider = {
  name: 'unused',
  payloadSchema: undefined as never,
  send: () => Promise.reject(new Error('unused')),
};

/** A real Worker with the stock registry (menu roles against `fake`), started. */
export async function startWorker(
  db: TestDatabase,
  fake: FakeMenuPlatform,
  options: {
    roles?: string[];
    workerId?: string;
    concurrency?: number;
    leaseSeconds?: number;
    timeoutMs?: number;
  } = {},
): Promise<Worker> {
  const registry = defaultRegistry(
    { email: noProvider, sms: noProvider, file_delete: noProvider },
    menuProcessors(createHttpMenuPlatform({ baseUrl: fake.url, timeoutMs: options.timeoutMs ?? 5000 })),
  );
  const worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: options.roles ?? [
      'store_discovery',
      'entry_point_discovery',
      'product_discovery',
      'product_resync',
      'analytics_refresh',
      'db_function',
    ],
    workerId: options.workerId ?? 'menu-test',
    concurrency: options.concurrency ?? 4,
    prefetch: 0,
    pollIntervalMs: 50,
    heartbeatIntervalMs: 200,
    leaseSeconds: options.leaseSeconds ?? 30,
    maxLeases: 5,
    shutdownGraceMs: 2000,
    registry,
    logger: createLogger('silent'),
  });
  await worker.start();
  return worker;
}

/** Resolves when `check` holds, polling every 50 ms, for at most `ms`. */
export async function eventually(check: () => Promise<boolean>, what: string, ms = 60_000): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > until) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Tasks of `taskType` not completed yet. */
export async function pendingCount(db: TestDatabase, taskType?: string): Promise<number> {
  const { rows } = await db.query(
    `select count(*)::int as n from queues.task_pending_or_held where $1::text is null or task_type = $1`,
    [taskType ?? null],
  );
  return rows[0].n;
}

/** Outcome, errors, leases and results of one task. */
export async function factsOf(db: TestDatabase, taskId: string | number) {
  const { rows } = await db.query(
    `select (select outcome from queues.task_end c where c.task_id = $1) as outcome,
            (select count(*)::int from queues.error e where e.task_id = $1) as errors,
            (select count(*)::int from queues.task_leases l where l.task_id = $1) as leases,
            (select coalesce(jsonb_agg(r.result order by r.task_lease_id), '[]') from queues.task_result r where r.task_id = $1) as results`,
    [taskId],
  );
  return rows[0] as { outcome: string | null; errors: number; leases: number; results: Record<string, unknown>[] };
}

/** Tasks of a type, oldest first, with payload, priority and resource key. */
export async function tasksOf(db: TestDatabase, taskType: string) {
  const { rows } = await db.query(
    `select task_id::text, payload, priority, resource_key, max_attempts from queues.task where task_type = $1 order by task_id`,
    [taskType],
  );
  return rows as {
    task_id: string;
    payload: Record<string, unknown>;
    priority: number;
    resource_key: string | null;
    max_attempts: number;
  }[];
}

/** Enqueues a store_discovery task as the api role would (menus.generate_store_discovery). */
export async function discover(db: TestDatabase): Promise<string> {
  const { rows } = await db.pool('app').query(`select menus.generate_store_discovery(null)::text as id`);
  return rows[0].id;
}
