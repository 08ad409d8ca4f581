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
