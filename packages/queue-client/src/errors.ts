/**
 * Errors raised by the queue functions, mapped from PostgreSQL SQLSTATEs to a small
 * set of kinds callers can branch on. The message is the database's, which names the
 * offending field.
 */
export type QueueErrorKind =
  | 'invalid_input' // 22023 invalid_parameter_value, 22004 null_value_not_allowed, 22P02 bad syntax
  | 'too_large' // 54000 program_limit_exceeded
  | 'lease_lost' // 55000 with the queue's marker (schema queues, constraint task_lease_current)
  | 'not_found' // 23503 foreign_key_violation: no such task
  | 'forbidden' // 42501 insufficient_privilege
  | 'unknown_function' // 42883 undefined_function
  | 'database'; // anything else

const KINDS: Record<string, QueueErrorKind> = {
  '22023': 'invalid_input',
  '22004': 'invalid_input',
  '22P02': 'invalid_input',
  '22007': 'invalid_input',
  '22008': 'invalid_input',
  '22P05': 'invalid_input',
  '22003': 'invalid_input',
  '54000': 'too_large',
  '23503': 'not_found',
  '42501': 'forbidden',
  '42883': 'unknown_function',
};

export class QueueError extends Error {
  readonly kind: QueueErrorKind;
  /** The PostgreSQL SQLSTATE, when the error came from the database. */
  readonly code: string | undefined;

  constructor(message: string, kind: QueueErrorKind, code?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'QueueError';
    this.kind = kind;
    this.code = code;
  }
}

/**
 * The queue's lease-loss marker: complete_task and fail_task raise SQLSTATE 55000 with
 * schema `queues` and constraint `task_lease_current` when the lease passed is no longer
 * the task's. Any other 55000 (an append-only trigger, `currval` before `nextval`, task
 * code) is a plain database error, never lease loss. Workers do not even rely on this
 * marker (task code could forge it): they read lease loss from complete_tasks' answer.
 */
export const LEASE_LOST_CONSTRAINT = 'task_lease_current';

function kindOf(error: { code: string; schema?: unknown; constraint?: unknown }): QueueErrorKind {
  if (error.code === '55000') {
    return error.schema === 'queues' && error.constraint === LEASE_LOST_CONSTRAINT ? 'lease_lost' : 'database';
  }
  return KINDS[error.code] ?? 'database';
}

/** Wraps a database error into a QueueError; other errors pass through unchanged. */
export function toQueueError(error: unknown): unknown {
  if (error instanceof QueueError) return error;
  if (error instanceof Error && typeof (error as { code?: unknown }).code === 'string') {
    const code = (error as unknown as { code: string }).code;
    if (/^[0-9A-Z]{5}$/.test(code)) {
      return new QueueError(error.message, kindOf(error as unknown as { code: string }), code, { cause: error });
    }
  }
  return error;
}

/** Awaits `promise`, turning database errors into QueueErrors. */
export async function mapErrors<T>(promise: Promise<T>): Promise<T> {
  try {
    return await promise;
  } catch (error) {
    throw toQueueError(error);
  }
}
