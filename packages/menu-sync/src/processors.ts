/**
 * The five roles' processors. Each one:
 *
 *   1. asks the menu platform (store_discovery: the store list; entry_point_discovery: the
 *      platform id of the payload's menu URL; product_discovery and product_resync: the
 *      menu of the payload's platform_dispensary_id; analytics_refresh: nothing),
 *   2. in one transaction: menus.record_observation (facts, and the follow-up tasks: the
 *      chain is SQL's, never the worker's), queues.record_task_result (the result SQL
 *      returned) and queues.complete_task, all fenced by the lease.
 *
 * A platform failure (5xx, timeout, malformed answer) or an observation SQL refuses
 * (22023) is recorded as an error and the task completes 'failed': the queue retries it
 * (max_attempts 3, backoff) and dead-letters it after the last attempt. A lost lease or a
 * database failure is thrown to the worker, which records nothing (the task runs again).
 *
 * The processors match @org/worker's Processor interface structurally, so the worker can
 * register them without this package depending on it.
 */
import type pg from 'pg';
import { z } from 'zod';
import {
  completeTask,
  failTask,
  QueueError,
  recordTaskResult,
  withTransaction,
  type ClaimedTask,
  type JsonObject,
} from '@org/queue-client';
import type { MenuPlatform } from './platform.js';
import { observationRecord } from './queries/observation.queries.js';

export const MENU_ROLES = [
  'store_discovery',
  'entry_point_discovery',
  'product_discovery',
  'product_resync',
  'analytics_refresh',
] as const;
export type MenuRole = (typeof MENU_ROLES)[number];

export interface MenuTaskContext {
  task: ClaimedTask;
  pool: pg.Pool;
  signal: AbortSignal;
}

export interface MenuTaskReport {
  outcome: 'succeeded' | 'failed';
  error?: string;
  note?: string;
}

export interface MenuProcessor {
  readonly name: string;
  process(context: MenuTaskContext): Promise<MenuTaskReport>;
}

const storePayload = z.object({ store_id: z.number().int().positive() });
const entryPayload = storePayload.extend({ menu_url: z.string().min(1).max(500) });
const menuPayload = storePayload.extend({ platform_dispensary_id: z.string().min(1).max(100) });

/** Asks the platform what the task needs; throws on a bad payload or a platform failure. */
async function observe(
  role: MenuRole,
  platform: MenuPlatform,
  task: ClaimedTask,
  signal: AbortSignal,
): Promise<JsonObject> {
  const parse = <T extends z.ZodType>(schema: T): z.output<T> => {
    const parsed = schema.safeParse(task.payload);
    if (parsed.success) return parsed.data;
    throw new Error(
      `invalid ${role} payload: ${parsed.error.issues.map((i) => `${i.path.join('.') || 'payload'}: ${i.message}`).join('; ')}`,
    );
  };
  switch (role) {
    case 'store_discovery':
      return platform.listStores(signal);
    case 'entry_point_discovery':
      return platform.resolveEntryPoint(parse(entryPayload).menu_url, signal);
    case 'product_discovery':
    case 'product_resync':
      return platform.fetchMenu(parse(menuPayload).platform_dispensary_id, signal);
    case 'analytics_refresh':
      return {};
  }
}

function summary(result: JsonObject): string {
  return Object.entries(result)
    .filter(([, v]) => typeof v !== 'object' || v === null)
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(' ');
}

/** Error row and a 'failed' completion (a retry while attempts are left), fenced. */
async function fail(pool: pg.Pool, task: ClaimedTask, message: string): Promise<MenuTaskReport> {
  await withTransaction(pool, async (tx) => {
    await failTask(tx, { taskId: task.taskId, errorMessage: message, taskLeaseId: task.taskLeaseId });
    await completeTask(tx, { taskId: task.taskId, taskLeaseId: task.taskLeaseId, outcome: 'failed' });
  });
  return { outcome: 'failed', error: message };
}

export function menuProcessor(role: MenuRole, platform: MenuPlatform): MenuProcessor {
  return {
    name: `menu:${role}:${platform.name}`,
    async process({ task, pool, signal }) {
      let observation: JsonObject;
      try {
        observation = await observe(role, platform, task, signal);
      } catch (error) {
        return fail(pool, task, `${role}: ${error instanceof Error ? error.message : String(error)}`);
      }
      try {
        return await withTransaction(pool, async (tx) => {
          const [row] = await observationRecord.run(
            { taskId: task.taskId, taskLeaseId: task.taskLeaseId, observation: JSON.stringify(observation) },
            tx,
          );
          const result = row!.result as JsonObject;
          await recordTaskResult(tx, { taskId: task.taskId, taskLeaseId: task.taskLeaseId, result });
          await completeTask(tx, { taskId: task.taskId, taskLeaseId: task.taskLeaseId, outcome: 'succeeded' });
          return { outcome: 'succeeded' as const, note: summary(result) };
        });
      } catch (error) {
        // Refused by SQL as malformed (the platform's answer or the task's payload): a
        // failure of this attempt. Anything else (lease lost, database down) is the worker's.
        const code = (error as { code?: unknown }).code;
        if (code === '22023' || code === '22004' || (error instanceof QueueError && error.kind === 'invalid_input')) {
          return fail(pool, task, `${role}: the platform's answer was refused: ${(error as Error).message}`);
        }
        if (code === '55000') throw new QueueError((error as Error).message, 'lease_lost', code, { cause: error });
        throw error;
      }
    },
  };
}

/** One processor per role, for `registry.register(role, processor)`. */
export function menuProcessors(platform: MenuPlatform): Record<MenuRole, MenuProcessor> {
  return Object.fromEntries(MENU_ROLES.map((role) => [role, menuProcessor(role, platform)])) as Record<
    MenuRole,
    MenuProcessor
  >;
}
