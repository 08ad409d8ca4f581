import { pino, type DestinationStream, type Logger } from 'pino';

export type { Logger };

/**
 * JSON logs. Credentials never reach a log line: connection strings are masked and the
 * usual secret-bearing keys are redacted wherever they appear (two levels deep).
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  const secretKeys = ['password', 'token', 'authToken', 'apiKey', 'api_key', 'secret', 'authorization', 'databaseUrl', 'private_key'];
  return pino(
    {
      level,
      base: { service: 'queue-worker' },
      redact: { paths: [...secretKeys, ...secretKeys.map((k) => `*.${k}`)], censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination,
  );
}

/** A connection string with its password masked. */
export function maskUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable url)';
  }
}
