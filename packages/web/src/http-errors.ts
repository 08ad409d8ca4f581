import { QueueError } from '@org/queue-client';

/** Database errors (sql/CONVENTIONS.md errcodes) mapped to HTTP statuses. */
export interface HttpError {
  status: number;
  error: string;
  message: string;
}

const BY_SQLSTATE: Record<string, [number, string]> = {
  '22004': [400, 'invalid_input'],
  '22023': [400, 'invalid_input'],
  '22P02': [400, 'invalid_input'], // invalid text representation (e.g. a bad timestamp)
  '22007': [400, 'invalid_input'], // invalid datetime format
  '22008': [400, 'invalid_input'], // datetime field overflow
  '22003': [400, 'invalid_input'], // numeric value out of range
  '54000': [413, 'too_large'],
  '23503': [404, 'not_found'],
  '42501': [403, 'forbidden'],
  '55000': [409, 'conflict'],
  '23505': [409, 'conflict'], // done already (e.g. a date's resync generated twice)
};

/** QueueErrors the client raises itself (no SQLSTATE): what it refused to send. */
const BY_CLIENT_KIND: Record<string, [number, string]> = {
  invalid_input: [400, 'invalid_input'],
  too_large: [413, 'too_large'],
};

/**
 * The HTTP answer for a database error, or for a QueueError the client raised before
 * sending (a payload it cannot serialise), or undefined when it is not one we map (500).
 */
export function fromDatabaseError(error: unknown): HttpError | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  if (error instanceof QueueError && code === undefined) {
    const byKind = BY_CLIENT_KIND[error.kind];
    return byKind && { status: byKind[0], error: byKind[1], message: error.message };
  }
  if (typeof code !== 'string') return undefined;
  // Any other data exception (class 22: NUL in JSON, bad escapes, ...) is bad input too.
  const mapped =
    BY_SQLSTATE[code] ?? (code.startsWith('22') ? ([400, 'invalid_input'] as [number, string]) : undefined);
  if (!mapped) return undefined;
  return { status: mapped[0], error: mapped[1], message: (error as Error).message };
}
