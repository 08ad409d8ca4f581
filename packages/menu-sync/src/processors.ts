/**
 * The five roles' processors. Each one:
 *
 *   1. asks the menu platform (store_discovery: the store list; entry_point_discovery: the
 *      platform id of the payload's menu URL; product_discovery and product_resync: the
 *      menu of the payload's platform_dispensary_id; analytics_refresh: nothing),
 *   2. returns the outcome with its effects: menus.record_observation (facts, and the
 *      follow-up tasks: the chain is SQL's, never the worker's), whose answer is kept as
 *      the run's result. The worker's completer runs the effects, keeps the result and
 *      records the completion in one transaction, fenced by the lease: the completer is
 *      the only writer of a task's end.
 *
 * A platform failure (5xx, timeout, malformed answer) or an observation SQL refuses
 * (22023) is a 'failed' outcome with its error: the queue retries it (max_attempts 3,
 * backoff) and dead-letters it after the last attempt. A lost lease refuses the
 * completion and rolls the effects back; a database failure records nothing (the task
 * runs again).
 *
 * The processors match @org/worker's Processor interface structurally, so the worker can
 * register them without this package depending on it.
 */
import type pg from 'pg';
import { z } from 'zod';
import { QueueError, type ClaimedTask, type JsonObject, type Queryable } from '@org/queue-client';
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

/** What a menu processor returns (the worker's TaskOutcome, structurally). */
export interface MenuTaskOutcome {
  outcome: 'succeeded' | 'failed';
  error?: string;
  note?: string;
  /** Kept as the run's result (queues.task_result), with the completion. */
  result?: JsonObject;
  /** Writes committed with the completion, in its transaction; they may change the outcome. */
  effects?: (tx: Queryable) => Promise<MenuTaskOutcome | void>;
  /** The outcome recorded instead when the effects raise (their writes rolled back). */
  onEffectsError?: (error: unknown) => MenuTaskOutcome;
}

export interface MenuProcessor {
  readonly name: string;
  process(context: MenuTaskContext): Promise<MenuTaskOutcome>;
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

export function menuProcessor(role: MenuRole, platform: MenuPlatform): MenuProcessor {
  return {
    name: `menu:${role}:${platform.name}`,
    async process({ task, signal }) {
      let observation: JsonObject;
      try {
        observation = await observe(role, platform, task, signal);
      } catch (error) {
        return { outcome: 'failed', error: `${role}: ${error instanceof Error ? error.message : String(error)}` };
      }
      return {
        outcome: 'succeeded',
        effects: async (tx) => {
          const [row] = await observationRecord.run(
            { taskId: task.taskId, taskLeaseId: task.taskLeaseId, observation: JSON.stringify(observation) },
            tx,
          );
          const result = row!.result as JsonObject;
          return { outcome: 'succeeded', result, note: summary(result) };
        },
        // Refused by SQL as malformed (the platform's answer or the task's payload): a
        // failure of this attempt. A lost lease refuses the completion anyway.
        onEffectsError: (error) => {
          const code = (error as { code?: unknown }).code;
          const refused =
            code === '22023' || code === '22004' || (error instanceof QueueError && error.kind === 'invalid_input');
          return {
            outcome: 'failed',
            error: refused
              ? `${role}: the platform's answer was refused: ${(error as Error).message}`
              : `${role}: recording the observation raised: ${(error as Error).message}`,
          };
        },
      };
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
