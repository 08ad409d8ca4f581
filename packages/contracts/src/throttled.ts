/**
 * Provider back-pressure: what a processor, a provider or a defineTask run throws when the
 * service it calls refused the work for now (HTTP 429, a Retry-After, a quota error). The
 * worker records "throttled until T" for the task's type (queues.record_throttle), gives
 * the task back without counting the run as a failed attempt, and every worker's claim
 * leaves that type's tasks until T. Throw it only when the call did nothing (the provider
 * refused it): an at-most-once call refused this way is not counted as started.
 */
export class ThrottledError extends Error {
  /** Throttled until this moment, when the provider named one. */
  readonly until: Date | undefined;
  /** Or for this many seconds (a Retry-After). */
  readonly retryAfterSeconds: number | undefined;
  /** The throttled key: the task type by default (a channel such as `email`). */
  readonly key: string | undefined;

  constructor(message: string, options: { until?: Date; retryAfterSeconds?: number; key?: string } = {}) {
    super(message);
    this.name = 'ThrottledError';
    if ((options.until === undefined) === (options.retryAfterSeconds === undefined)) {
      throw new TypeError('ThrottledError: give exactly one of until and retryAfterSeconds');
    }
    if (options.until !== undefined && Number.isNaN(options.until.getTime())) {
      throw new TypeError('ThrottledError: until is not a valid date');
    }
    if (options.retryAfterSeconds !== undefined && !Number.isFinite(options.retryAfterSeconds)) {
      throw new TypeError('ThrottledError: retryAfterSeconds must be a finite number');
    }
    this.until = options.until;
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.key = options.key;
  }
}

/** Whether `error` is a ThrottledError (also one from another copy of this package). */
export function isThrottledError(error: unknown): error is ThrottledError {
  return (
    error instanceof ThrottledError ||
    (error instanceof Error && error.name === 'ThrottledError' && ('until' in error || 'retryAfterSeconds' in error))
  );
}

/**
 * The seconds an HTTP `Retry-After` value asks for: a number of seconds, or an HTTP date
 * (counted from `now`). Undefined when it is missing or not understood.
 */
export function retryAfterSeconds(value: string | null | undefined, now: Date = new Date()): number | undefined {
  if (value === null || value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, (at - now.getTime()) / 1000);
}
