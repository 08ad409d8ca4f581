/**
 * Provider back-pressure (sql/queues/throttle.sql): a processor, a provider or a defineTask
 * run throws a ThrottledError (from @org/contracts, exported by @org/worker too) when
 * the service it calls refused the work for now. The worker (executor.ts) records
 * "throttled until T" for the error's key (the task's type unless it names another) and
 * gives the run's lease back in the same statement (queues.record_throttle), then the
 * leases of that type's tasks waiting in its local queue: the run counts as neither a
 * failed attempt, an interruption nor an expiry, and every worker's claim leaves that
 * type's tasks until T, so they run again after T (or once an operator clears it).
 * A ThrottledError with `group: true` or a `groupKey` throttles a group key instead (the
 * run's task's own, or the one named): every worker's claim leaves the tasks of every
 * type carrying it until T, and the other groups' tasks run on. (The worker does not know
 * the group keys of the tasks in its local queue: those run, and a refused one is given
 * back uncounted in turn.)
 * The wait asked for is held to 1 second to 24 hours. When the report cannot be recorded
 * (an unknown key, the database unreachable), the lease is released without it; failing
 * that, the lease expires.
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

export type ThrottledRun = 'released' | 'lease_lost' | 'not_recorded';

/**
 * Records the throttle `error` reports for `task`'s run and gives its lease back, and then
 * the leases of `waiting` (tasks of the throttled type taken out of the local queue). Returns
 * `released`, `lease_lost` (the lease was no longer the task's: the throttle is recorded
 * anyway) or `not_recorded` (the lease was released, or left to expire, without a record).
 */
export async function recordThrottledRun(
  pool: pg.Pool,
  task: Pick<ClaimedTask, 'taskId' | 'taskLeaseId' | 'taskType'>,
  error: ThrottledError,
  workerId: string,
  log: Logger,
  waiting: readonly Pick<ClaimedTask, 'taskId' | 'taskLeaseId'>[] = [],
): Promise<ThrottledRun> {
  try {
    return await record(pool, task, error, workerId, log);
  } finally {
    if (waiting.length > 0) await release(pool, waiting, log);
  }
}

async function record(
  pool: pg.Pool,
  task: Pick<ClaimedTask, 'taskId' | 'taskLeaseId' | 'taskType'>,
  error: ThrottledError,
  workerId: string,
  log: Logger,
): Promise<ThrottledRun> {
  // A group throttle without a key is of the task's own group key, which the database reads.
  const group = error.group === true;
  const key = group ? error.groupKey : (error.key ?? task.taskType);
  const label = group ? `group ${key ?? `of task ${task.taskId}`}` : key!;
  const seconds = throttleSeconds(error);
  const reason = sanitizeMessage(error.message || 'throttled').slice(0, 500);
  try {
    const { result, throttledUntil } = await recordThrottle(pool, {
      keyKind: group ? 'group' : 'task_type',
      key,
      retryAfterSeconds: seconds,
      reason,
      recordedBy: workerId,
      taskId: task.taskId,
      taskLeaseId: task.taskLeaseId,
    });
    log.warn(
      {
        event: 'task_throttled',
        key_kind: group ? 'group' : 'task_type',
        key,
        throttled_until: throttledUntil.toISOString(),
        result,
        reason,
      },
      `${label} throttled until ${throttledUntil.toISOString()}; the task runs again after it`,
    );
    return result === 'lease_lost' ? 'lease_lost' : 'released';
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
    return 'not_recorded';
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
