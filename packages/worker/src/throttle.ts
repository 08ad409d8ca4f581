/**
 * Provider back-pressure (sql/queues/throttle.sql): a processor, a provider or a defineTask
 * run throws a ThrottledError (from @org/contracts, exported by @org/worker too) when
 * the service it calls refused the work for now. The worker (executor.ts) records
 * "throttled until T" for the error's key (the task's type unless it names another) and,
 * in the same statement (queues.record_throttle), gives back the run's lease and the
 * leases of the tasks waiting in its local queue that the throttle covers: the run counts
 * as neither a failed attempt, an interruption nor an expiry, and every worker's claim
 * leaves that type's tasks until T, so they run again after T (or once an operator clears it).
 * A ThrottledError with `group: true` or a `groupKey` throttles a group key instead (the
 * run's task's own, or the one named): every worker's claim leaves the tasks of every
 * type carrying it until T, and the other groups' tasks run on. The worker does not know
 * the group keys of the tasks in its local queue: it offers them all, the database gives
 * back those carrying the key, and the rest go back to the local queue.
 * The wait asked for is held to 1 second to 24 hours. When the report cannot be recorded
 * (an unknown key, the database unreachable), the lease is released without it, and the
 * waiting tasks stay in the local queue; failing that, the lease expires.
 */
import type pg from 'pg';
import { ThrottledError, isThrottledError } from '@org/contracts/throttled';
import { recordThrottle, releaseLeases, type ClaimedTask } from '@org/queue-client';
import { errorMessage, sanitizeMessage } from './error-class.js';
import type { Logger } from './logger.js';

export { ThrottledError, isThrottledError };

/** The shortest and longest throttle the worker records, in seconds. */
export const MIN_THROTTLE_SECONDS = 1;
export const MAX_THROTTLE_SECONDS = 86_400;

/** The seconds a ThrottledError asks for, counted from `now`, held to 1 s to 24 h. */
export function throttleSeconds(error: ThrottledError, now: number = Date.now()): number {
  const asked = error.until !== undefined ? (error.until.getTime() - now) / 1000 : (error.retryAfterSeconds ?? 0);
  return Math.min(MAX_THROTTLE_SECONDS, Math.max(MIN_THROTTLE_SECONDS, asked));
}

/** The most waiting tasks one report offers (queues.record_throttle refuses more). */
export const MAX_WAITING_OFFERED = 1000;

/**
 * The tasks of the local queue a throttle of `error` may cover, at most
 * MAX_WAITING_OFFERED (the first ones; the others stay queued, and each is given back by
 * the report of its own refusal): of the throttled type for a type's throttle; all of
 * them for a group's (the database knows their group keys).
 */
export function throttleCandidates<T extends Pick<ClaimedTask, 'taskType'>>(
  waiting: readonly T[],
  error: ThrottledError,
  taskType: string,
): T[] {
  const covered = error.group === true ? waiting : waiting.filter((t) => t.taskType === (error.key ?? taskType));
  return covered.slice(0, MAX_WAITING_OFFERED);
}

export interface ThrottledRun {
  /**
   * `released`, `lease_lost` (the lease was no longer the task's: the throttle is recorded
   * anyway) or `not_recorded` (the lease was released, or left to expire, without a record).
   */
  result: 'released' | 'lease_lost' | 'not_recorded';
  /** The ids of the waiting tasks given back with it (the throttle covers them). */
  released: Set<string>;
}

/**
 * Records the throttle `error` reports for `task`'s run and gives its lease back, with the
 * leases of those of `waiting` (tasks taken out of the local queue, not started) that the
 * throttle covers, in one statement.
 */
export async function recordThrottledRun(
  pool: pg.Pool,
  task: Pick<ClaimedTask, 'taskId' | 'taskLeaseId' | 'taskType'>,
  error: ThrottledError,
  workerId: string,
  log: Logger,
  waiting: readonly Pick<ClaimedTask, 'taskId' | 'taskLeaseId'>[] = [],
): Promise<ThrottledRun> {
  // A group throttle without a key is of the task's own group key, which the database reads.
  const group = error.group === true;
  const key = group ? error.groupKey : (error.key ?? task.taskType);
  const label = group ? `group ${key ?? `of task ${task.taskId}`}` : key!;
  const seconds = throttleSeconds(error);
  const reason = sanitizeMessage(error.message || 'throttled').slice(0, 500);
  try {
    const { result, throttledUntil, releasedWaiting } = await recordThrottle(pool, {
      keyKind: group ? 'group' : 'task_type',
      key,
      retryAfterSeconds: seconds,
      reason,
      recordedBy: workerId,
      taskId: task.taskId,
      taskLeaseId: task.taskLeaseId,
      waiting: waiting.map((t) => ({ taskId: t.taskId, taskLeaseId: t.taskLeaseId })),
    });
    log.warn(
      {
        event: 'task_throttled',
        key_kind: group ? 'group' : 'task_type',
        key,
        throttled_until: throttledUntil.toISOString(),
        result,
        reason,
        waiting_released: releasedWaiting.length,
      },
      `${label} throttled until ${throttledUntil.toISOString()}; the task runs again after it`,
    );
    return { result: result === 'lease_lost' ? 'lease_lost' : 'released', released: new Set(releasedWaiting) };
  } catch (recordError) {
    log.error(
      {
        event: 'throttle_not_recorded',
        key_kind: group ? 'group' : 'task_type',
        key,
        err: errorMessage(recordError),
        reason,
      },
      'could not record the throttle; giving the task back without it',
    );
    await release(pool, [task], log);
    return { result: 'not_recorded', released: new Set() };
  }
}

/** Gives leases back (uncounted); if that fails, they expire. */
async function release(
  pool: pg.Pool,
  tasks: readonly Pick<ClaimedTask, 'taskId' | 'taskLeaseId'>[],
  log: Logger,
): Promise<void> {
  try {
    await releaseLeases(
      pool,
      tasks.map((t) => ({ taskId: t.taskId, taskLeaseId: t.taskLeaseId })),
    );
  } catch (error) {
    log.warn({ event: 'release_failed', err: errorMessage(error) }, 'could not release; the leases will expire');
  }
}
