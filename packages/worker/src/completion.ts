/**
 * How the worker reads errors: a lost lease (nothing of ours may be recorded), a
 * transient failure of the connection or server (nothing is recorded, the task runs
 * again), or anything else (recorded against the task). The completer and the worker
 * classify every error with these, in one place.
 */
import { QueueError, type ClaimedTask } from '@org/queue-client';

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

/** An error message as the database accepts it: text cannot hold NUL bytes. */
export function storableMessage(message: string): string {
  return message.replaceAll('\u0000', '\\u0000');
}
