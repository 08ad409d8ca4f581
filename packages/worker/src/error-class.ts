/**
 * What an error means to the worker, decided here and nowhere else:
 *
 *   lease_lost  the task's lease was taken over: nothing of this run may be recorded.
 *               ONLY a LeaseLostError, which the worker throws itself when the queue
 *               answers so (complete_tasks' result 'lease_lost', interrupt_task's
 *               'lease_lost', a heartbeat leaving the lease out). No SQLSTATE means lease
 *               loss: task code (a db_function step, a before/success/error handler) can
 *               raise any SQLSTATE, 55000 included, and even the queue's own lease-loss
 *               marker; whatever it raises is the task's failure.
 *   transient   the run was cut short by something outside the task: the connection or
 *               the server failed (SQLSTATE classes 08 and 57P, 53300, driver errors
 *               without a SQLSTATE), or the transaction lost a deadlock (40P01) or a
 *               serialization conflict (40001), or PostgreSQL refused one of the queue
 *               client's prepared statements because a migration changed its result
 *               columns (0A000 from the plan cache; the client prepares it again under a
 *               new name, see queue-client's prepared.ts). The run is interrupted
 *               (queues.interrupt_task): it counts, and runs again after a backoff, and the
 *               task is abandoned with its error once this keeps happening.
 *   task        anything else: the task failed, recorded once with its message.
 *
 * Messages that reach the database go through `sanitizeMessage`: PostgreSQL text
 * cannot hold NUL bytes or unpaired UTF-16 surrogates, and a message that cannot be
 * stored would roll back the error handler's facts and lose the message.
 */
import type { ClaimedTask } from '@org/queue-client';
import { QueueError, isResultTypeChange } from '@org/queue-client';

export type ErrorClass = 'lease_lost' | 'transient' | 'task';

/** Thrown by the worker when the queue answers that the task's lease was lost. */
export class LeaseLostError extends Error {
  constructor(task: Pick<ClaimedTask, 'taskId' | 'taskLeaseId'>) {
    super(`lease ${task.taskLeaseId} of task ${task.taskId} was lost to another worker`);
    this.name = 'LeaseLostError';
  }
}

const TRANSIENT_NODE_CODES = ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'EAI_AGAIN'];
const TRANSIENT_MESSAGE =
  /connection terminated|connection error|not queryable|timeout exceeded when trying to connect|connection ended/i;

export function classifyError(error: unknown): ErrorClass {
  if (error instanceof LeaseLostError) return 'lease_lost';
  const cause = error instanceof QueueError ? error.cause : error;
  if (isResultTypeChange(cause)) return 'transient';
  const code = (cause as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
    return code.startsWith('08') || code.startsWith('57P') || code === '53300' || code === '40001' || code === '40P01'
      ? 'transient'
      : 'task';
  }
  if (typeof code === 'string' && TRANSIENT_NODE_CODES.includes(code)) return 'transient';
  const message = cause instanceof Error ? cause.message : '';
  return TRANSIENT_MESSAGE.test(message) ? 'transient' : 'task';
}

export const isLeaseLost = (error: unknown): boolean => classifyError(error) === 'lease_lost';
export const isTransient = (error: unknown): boolean => classifyError(error) === 'transient';

/** Longest message the worker records (queues.fail_task would cut at 10,000 characters). */
export const MAX_MESSAGE_LENGTH = 8000;

const UNPAIRED_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * A message PostgreSQL can store: NUL bytes and unpaired surrogates become U+FFFD, and
 * anything past MAX_MESSAGE_LENGTH characters is cut (marked "[truncated]"). Never empty.
 */
export function sanitizeMessage(text: string): string {
  let clean = text.replaceAll('\u0000', '\ufffd');
  if (clean.length > MAX_MESSAGE_LENGTH) clean = `${clean.slice(0, MAX_MESSAGE_LENGTH)} [truncated]`;
  clean = clean.replace(UNPAIRED_SURROGATE, '\ufffd');
  return clean.trim() === '' ? '(empty error message)' : clean;
}

/** The message of anything thrown, sanitized. */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) return sanitizeMessage(error.message || error.name);
  try {
    return sanitizeMessage(`non-error thrown: ${JSON.stringify(error)}`);
  } catch {
    return sanitizeMessage(`non-error thrown: ${String(error)}`);
  }
}
