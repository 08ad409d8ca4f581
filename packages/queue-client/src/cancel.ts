/**
 * Cancelling tasks, pending or running (queues.cancel_tasks, sql/queues/cancel.sql): each
 * ends `cancelled` at once; the worker running one is told at its next heartbeat
 * (queues.cancelled_tasks), aborts its processor and records nothing.
 */
import { taskCancel, taskCancelledReasons } from './queries/cancel.queries.js';
import type { Queryable } from './connection.js';
import { mapErrors } from './errors.js';
import type { Id } from './tasks.js';

export type CancelResult = 'cancelled' | 'already_completed' | 'unknown_task';

export interface CancelAnswer {
  taskId: Id;
  result: CancelResult;
  /** A live lease held it: its worker aborts the run at its next heartbeat. */
  wasRunning: boolean;
}

/**
 * Cancels up to 1000 tasks (no repeats), with an optional reason (at most 500 characters),
 * in one transaction; answers per task, in input order. The app database user may not
 * cancel worker-only task types (channel tasks, steps): `forbidden`.
 */
export async function cancelTasks(db: Queryable, taskIds: Id[], reason?: string): Promise<CancelAnswer[]> {
  const rows = await mapErrors(taskCancel.run({ taskIds, reason }, db));
  return rows.map((r) => ({ taskId: r.taskId, result: r.result as CancelResult, wasRunning: r.wasRunning }));
}

/** Which of these tasks were cancelled, and why (for a worker whose leases were lost). */
export async function cancelledTasks(
  db: Queryable,
  taskIds: Id[],
): Promise<{ taskId: Id; reason: string; cancelledAt: Date }[]> {
  if (taskIds.length === 0) return [];
  return mapErrors(taskCancelledReasons.run({ taskIds }, db));
}
