/**
 * Recording a task's end: the completion, fenced by the lease, then the error rows. Both
 * go through the caller's transaction when one is given, so a processor can commit its
 * effects and the completion together.
 *
 * Lease loss is read from the queue's answer (complete_tasks' result), never from an
 * error code: see error-class.ts.
 */
import type pg from 'pg';
import {
  QueueError,
  completeTasks,
  failTask,
  recordTaskResult,
  withTransaction,
  type ClaimedTask,
  type Queryable,
} from '@org/queue-client';
import { batcherFor } from './completion-batcher.js';
import { LeaseLostError, sanitizeMessage } from './error-class.js';
import type { TaskReport } from './processor.js';
import { traceStep } from './tracing.js';

export { LeaseLostError, errorMessage, isLeaseLost, isTransient, sanitizeMessage } from './error-class.js';

/**
 * Records `report.result` (queues.task_result), completes the task under its lease, then
 * records `report.error` (and `extraErrors`) against it, on `db`. Throws LeaseLostError
 * unless the queue answers that this call completed the task or scheduled its retry:
 * whoever else completed it (another worker, an unfenced caller, the queue abandoning it),
 * the caller's transaction must not commit as if this run had. `report.final`: a failure
 * no retry can mend (no retry even with attempts left).
 */
export async function recordCompletion(
  db: Queryable,
  task: ClaimedTask,
  report: TaskReport,
  extraErrors: string[] = [],
): Promise<TaskReport> {
  if (report.result) {
    // Fenced like the completion: only the current lease records a result.
    try {
      await recordTaskResult(db, { taskId: task.taskId, taskLeaseId: task.taskLeaseId, result: report.result });
    } catch (error) {
      if (error instanceof QueueError && error.kind === 'lease_lost') throw new LeaseLostError(task);
      throw error;
    }
  }
  const [answer] = await traceStep('queue.complete', { 'queue.task.outcome': report.outcome }, () =>
    completeTasks(db, [
      {
        taskId: task.taskId,
        taskLeaseId: task.taskLeaseId,
        outcome: report.outcome,
        retry: report.final ? false : undefined,
      },
    ]),
  );
  const result = answer?.result ?? 'unknown_task';
  if (result === 'unknown_task') throw new Error(`task ${task.taskId} does not exist`);
  if (result !== 'completed' && result !== 'retry_scheduled') throw new LeaseLostError(task);
  for (const message of [report.error, ...extraErrors]) {
    if (message) {
      await failTask(db, {
        taskId: task.taskId,
        errorMessage: sanitizeMessage(message),
        taskLeaseId: task.taskLeaseId,
      });
    }
  }
  return report.error ? { ...report, error: sanitizeMessage(report.error) } : report;
}

/**
 * recordCompletion in a transaction of its own. Without an error or a result to record, the
 * completion joins the pool's batch (see CompletionBatcher): one statement for every
 * task finishing in the same turn of the event loop.
 */
export async function finish(
  pool: pg.Pool,
  task: ClaimedTask,
  report: TaskReport,
  extraErrors: string[] = [],
): Promise<TaskReport> {
  if (report.error || extraErrors.length > 0 || report.final || report.result) {
    return withTransaction(pool, (tx) => recordCompletion(tx, task, report, extraErrors));
  }
  const result = await traceStep('queue.complete', { 'queue.task.outcome': report.outcome }, () =>
    batcherFor(pool).complete(task, report.outcome),
  );
  if (result === 'unknown_task') throw new Error(`task ${task.taskId} does not exist`);
  // 'already_completed' answers only a caller that completed under this same lease before.
  if (result !== 'completed' && result !== 'retry_scheduled' && result !== 'already_completed') {
    throw new LeaseLostError(task);
  }
  return report;
}
