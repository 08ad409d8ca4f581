// The logger alone (pino), not the settings parser of @org/config's root (zod): a process
// that embeds the worker loads only what it runs.
import type { LogFormat } from '@org/config';
import { createLogger as createSharedLogger, endLogger, maskUrl, type Logger } from '@org/config/logger';

export type { Logger };
export { endLogger, maskUrl };

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
