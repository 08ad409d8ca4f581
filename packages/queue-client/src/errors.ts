/**
 * Errors raised by the queue functions, mapped from PostgreSQL SQLSTATEs to a small
 * set of kinds callers can branch on. The message is the database's, which names the
 * offending field.
 */
export type QueueErrorKind =
  | 'invalid_input' // 22023 invalid_parameter_value, 22004 null_value_not_allowed, 22P02 bad syntax
  | 'too_large' // 54000 program_limit_exceeded
  | 'lease_lost' // 55000 object_not_in_prerequisite_state: a newer lease exists
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
  '55000': 'lease_lost',
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

/** Wraps a database error into a QueueError; other errors pass through unchanged. */
export function toQueueError(error: unknown): unknown {
  if (error instanceof QueueError) return error;
  if (error instanceof Error && typeof (error as { code?: unknown }).code === 'string') {
    const code = (error as unknown as { code: string }).code;
    if (/^[0-9A-Z]{5}$/.test(code)) {
      return new QueueError(error.message, KINDS[code] ?? 'database', code, { cause: error });
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
