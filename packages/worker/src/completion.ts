/**
 * Recording a task's end: an optional error row, then the completion, fenced by the
 * lease. Both go through the caller's transaction when one is given, so a processor can
 * commit its effects and the completion together.
 */
import type pg from 'pg';
import { QueueError, completeTask, failTask, withTransaction, type ClaimedTask, type Queryable } from '@org/queue-client';
import { batcherFor } from './completion-batcher.js';
import type { TaskReport } from './processor.js';
import { traceStep } from './tracing.js';

/** Thrown when the task's lease was taken over: nothing of ours may be recorded. */
export class LeaseLostError extends Error {
  constructor(task: ClaimedTask) {
    super(`lease ${task.taskLeaseId} of task ${task.taskId} was lost to another worker`);
    this.name = 'LeaseLostError';
  }
}

export function isLeaseLost(error: unknown): boolean {
  return error instanceof LeaseLostError || (error instanceof QueueError && error.kind === 'lease_lost');
}

/** Records `report.error` (and `extraErrors`) against the task and completes it, on `db`. */
export async function recordCompletion(
  db: Queryable,
  task: ClaimedTask,
  report: TaskReport,
  extraErrors: string[] = [],
): Promise<TaskReport> {
  try {
    await traceStep('queue.complete', { 'queue.task.outcome': report.outcome }, async () => {
      for (const message of [report.error, ...extraErrors]) {
        if (message) await failTask(db, { taskId: task.taskId, errorMessage: message, taskLeaseId: task.taskLeaseId });
      }
      await completeTask(db, { taskId: task.taskId, taskLeaseId: task.taskLeaseId, outcome: report.outcome });
    });
  } catch (error) {
    if (isLeaseLost(error)) throw new LeaseLostError(task);
    throw error;
  }
  return report;
}

/**
 * recordCompletion in a transaction of its own. Without an error to record, the
 * completion joins the pool's batch (see CompletionBatcher): one statement for every
 * task finishing in the same turn of the event loop.
 */
export async function finish(pool: pg.Pool, task: ClaimedTask, report: TaskReport, extraErrors: string[] = []): Promise<TaskReport> {
  if (report.error || extraErrors.length > 0) {
    return withTransaction(pool, (tx) => recordCompletion(tx, task, report, extraErrors));
  }
  const result = await traceStep('queue.complete', { 'queue.task.outcome': report.outcome }, () => batcherFor(pool).complete(task, report.outcome));
  if (result === 'lease_lost') throw new LeaseLostError(task);
  if (result === 'unknown_task') throw new Error(`task ${task.taskId} does not exist`);
  return report;
}

export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message || error.name;
  try {
    return `non-error thrown: ${JSON.stringify(error)}`;
  } catch {
    return `non-error thrown: ${String(error)}`;
  }
}

/**
 * Errors that say nothing about the task: the connection or the server failed (SQLSTATE
 * classes 08 and 57P, too many connections, serialization failure, deadlock, or a
 * driver error without a SQLSTATE). The task is not recorded as failed for these; it is
 * released (or its lease expires) and runs again.
 */
export function isTransient(error: unknown): boolean {
  if (error instanceof LeaseLostError) return false;
  if (error instanceof QueueError && error.kind !== 'database') return false;
  const cause = error instanceof QueueError ? error.cause : error;
  const code = (cause as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
    return code.startsWith('08') || code.startsWith('57P') || code === '53300' || code === '40001' || code === '40P01';
  }
  if (typeof code === 'string' && ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'EAI_AGAIN'].includes(code)) {
    return true;
  }
  const message = cause instanceof Error ? cause.message : '';
  return /connection terminated|connection error|not queryable|timeout exceeded when trying to connect|connection ended/i.test(message);
}
