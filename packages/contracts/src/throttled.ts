/**
 * Provider back-pressure: what a processor, a provider or a defineTask run throws when the
 * service it calls refused the work for now (HTTP 429, a Retry-After, a quota error). The
 * worker records "throttled until T" for the task's type (queues.record_throttle), gives
 * the task back without counting the run as a failed attempt, and every worker's claim
 * leaves that type's tasks until T. With `group: true` (or a `groupKey`) the throttle is
 * the task's group key's instead (a tenant's or a provider account's; the key the task was
 * enqueued with): the claims leave the tasks of every type that carry it, and the other
 * groups' tasks run on. Throw it only when the call did nothing (the provider refused
 * it): an at-most-once call refused this way is not counted as started.
 */
export class ThrottledError extends Error {
  /** Throttled until this moment, when the provider named one. */
  readonly until: Date | undefined;
  /** Or for this many seconds (a Retry-After). */
  readonly retryAfterSeconds: number | undefined;
  /** The throttled key: the task type by default (a channel such as `email`). */
  readonly key: string | undefined;
  /** Whether the throttle is of a group key rather than a task type. */
  readonly group: boolean;
  /** The throttled group key, when it is not the task's own (`group` is then true). */
  readonly groupKey: string | undefined;

  constructor(
    message: string,
    options: {
      until?: Date;
      retryAfterSeconds?: number;
      /** Throttle this task type instead of the task's own. */
      key?: string;
      /** Throttle the task's group key (the one it was enqueued with) instead of its type. */
      group?: boolean;
      /** Throttle this group key (1 to 200 characters) instead of the task's type. */
      groupKey?: string;
    } = {},
  ) {
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
    if (options.key !== undefined && (options.group === true || options.groupKey !== undefined)) {
      throw new TypeError('ThrottledError: give a task type key or a group, not both');
    }
    if (
      options.groupKey !== undefined &&
      (typeof options.groupKey !== 'string' || options.groupKey.trim() === '' || options.groupKey.length > 200)
    ) {
      throw new TypeError('ThrottledError: groupKey must be 1 to 200 characters, not blank');
    }
    this.until = options.until;
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.key = options.key;
    this.group = options.group === true || options.groupKey !== undefined;
    this.groupKey = options.groupKey;
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
