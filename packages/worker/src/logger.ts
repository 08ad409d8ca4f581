import { createLogger as createSharedLogger, maskUrl, type LogFormat, type Logger } from '@org/config';

export type { Logger };
export { maskUrl };

/**
 * The worker's logger: the shape every program shares (@org/config), as `queue-worker`.
 * With a destination (tests, embedding) the lines are JSON unless `format` says pretty.
 */
export function createLogger(
  level: string,
  destination?: Parameters<typeof createSharedLogger>[0]['destination'],
  format?: LogFormat,
): Logger {
  return createSharedLogger({
    service: 'queue-worker',
    level,
    ...(destination ? { destination } : {}),
    ...(format ? { format } : {}),
  });
}

const LEVEL_METHODS = new Set(['fatal', 'error', 'warn', 'info', 'debug', 'trace']);
const skip = () => {};

/**
 * `parent.child(bindings)`, made on first use: a line at a level that is off costs
 * nothing. (Making a child serializes and redacts its bindings, about 10 µs: per task,
 * a tenth of the worker's time per task when tasks are cheap and the level is warn.)
 */
export function lazyChild(parent: Logger, bindings: Record<string, unknown>): Logger {
  let child: Logger | undefined;
  const real = (): Logger => (child ??= parent.child(bindings));
  // An empty target: the proxy answers everything from the child (no invariants of the
  // parent's own properties to keep).
  return new Proxy({} as Logger, {
    get(_target, property) {
      if (child === undefined && typeof property === 'string' && LEVEL_METHODS.has(property)) {
        if (!parent.isLevelEnabled(property)) return skip;
      }
      const logger = real();
      const value: unknown = Reflect.get(logger, property, logger);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(logger) : value;
    },
    set: (_target, property, value) => Reflect.set(real(), property, value),
    has: (_target, property) => Reflect.has(real(), property),
  });
}
