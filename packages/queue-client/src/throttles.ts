/** Provider back-pressure (queues.record_throttle, queues.active_throttles; sql/queues/throttle.sql). */
import { throttleListActive, throttleRecord } from './queries/throttle.queries.js';
import type { Queryable } from './connection.js';
import { mapErrors } from './errors.js';
import type { Id } from './tasks.js';

/**
 * What a throttle is kept for: a task type (a channel such as `email`), or a group key
 * (`group`: a tenant or a provider account, the group key tasks are enqueued with).
 */
export type ThrottleKeyKind = 'task_type' | 'group';

export interface ThrottleReport {
  keyKind: ThrottleKeyKind;
  /** The task type or group key. Omitted with `group` and a task: that task's group key. */
  key?: string;
  /** Throttled until this moment (after now, at most 24 hours ahead)... */
  until?: Date;
  /** ...or for this many seconds from the database's now (more than 0, at most 86400). */
  retryAfterSeconds?: number;
  /** Why, 1 to 500 characters (the provider's message). */
  reason: string;
  /** Who reports it: the worker id, 1 to 200 characters. */
  recordedBy: string;
  /** The run whose provider call was refused: its lease is released (not counted). */
  taskId?: Id;
  taskLeaseId?: Id;
  /**
   * Leases the reporter holds of tasks it has not started (a worker's local queue): those
   * the throttle covers (of the throttled type, or carrying the throttled group key) are
   * released with the run's, uncounted, in the same statement.
   */
  waiting?: readonly { taskId: Id; taskLeaseId: Id }[];
}

export interface ThrottleRecorded {
  /** `recorded` (no task given), `released` (the run's lease given back), `lease_lost`. */
  result: 'recorded' | 'released' | 'lease_lost';
  throttledUntil: Date;
  /** The ids of `waiting` released (covered by the throttle); the others are still held. */
  releasedWaiting: Id[];
}

/** A throttle in force: the latest end among a key's reports not cleared. */
export interface ActiveThrottle {
  keyKind: string;
  key: string;
  throttledUntil: Date;
  reason: string;
  recordedAt: Date;
  recordedBy: string;
  /** How many reports of the key are in force. */
  reports: number;
}

/**
 * Records "throttled until T" for a key and, with a task's lease, gives that run back
 * uncounted. Bad input is a QueueError of kind `invalid_input` (an unknown task type, or
 * the group key of a task that is not known: `not_found`; a task without a group key asked
 * to throttle its group: `invalid_input`), and nothing is written.
 */
export async function recordThrottle(db: Queryable, report: ThrottleReport): Promise<ThrottleRecorded> {
  const [row] = await mapErrors(
    throttleRecord.run(
      {
        keyKind: report.keyKind,
        key: report.key ?? null,
        until: report.until ?? null,
        retryAfterSeconds: report.retryAfterSeconds ?? null,
        reason: report.reason,
        recordedBy: report.recordedBy,
        taskId: report.taskId ?? null,
        taskLeaseId: report.taskLeaseId ?? null,
        waitingTaskIds: report.waiting?.length ? report.waiting.map((w) => w.taskId) : null,
        waitingLeaseIds: report.waiting?.length ? report.waiting.map((w) => w.taskLeaseId) : null,
      },
      db,
    ),
  );
  return {
    result: row!.result as ThrottleRecorded['result'],
    throttledUntil: row!.throttledUntil,
    releasedWaiting: row!.releasedWaiting.map(String),
  };
}

/** The throttles in force now, one per key. */
export async function activeThrottles(db: Queryable): Promise<ActiveThrottle[]> {
  return mapErrors(throttleListActive.run(undefined, db));
}
