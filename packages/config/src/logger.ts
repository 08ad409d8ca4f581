/**
 * The one log format of every program (the worker, the API, the files service):
 *
 *   {"level":"info","time":"2026-01-01T12:00:00.000Z","service":"queue-worker","pid":41,"event":"worker_started","msg":"..."}
 *
 * - `level` is the level's name (fatal, error, warn, info, debug, trace), never pino's number;
 * - `time` is ISO 8601 in UTC; `service` names the program, `pid` its process;
 * - credentials never reach a line: the usual secret-bearing keys are redacted wherever they
 *   appear (two levels deep, and request headers), connection strings are masked by `maskUrl`.
 *
 * Format: `json` writes one JSON object per line; `pretty` writes the same records for
 * people (pino-pretty: the local time, a coloured level, `[service]` and the message, then
 * the fields, one per line);
 * `auto` (the default) is pretty when standard output is a terminal, JSON otherwise, so
 * `npm start` in a terminal is readable and a log collector gets JSON.
 */
import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';
import { build as prettyStream } from 'pino-pretty';
import type { LogFormat } from './settings.js';

export type { Logger };

export interface CreateLoggerOptions {
  /** The program, logged as `service` on every line. */
  service: string;
  /** A level name (LogLevel); default info. */
  level?: string;
  /** Default 'auto': pretty when stdout is a terminal (and no destination is given). */
  format?: LogFormat;
  /** Where lines go; default standard output. */
  destination?: DestinationStream;
  /** Pretty output with colours (default: when the destination is a terminal). */
  colorize?: boolean;
}

const SECRET_KEYS = [
  'password',
  'token',
  'authToken',
  'apiKey',
  'api_key',
  'secret',
  'authorization',
  'databaseUrl',
  'private_key',
];

/** The pino options behind every logger: level names, ISO time, service and pid, redaction. */
export function loggerOptions(service: string, level: string): LoggerOptions {
  return {
    level,
    base: { service, pid: process.pid },
    redact: {
      paths: [
        ...SECRET_KEYS,
        ...SECRET_KEYS.map((k) => `*.${k}`),
        'req.headers.authorization',
        'headers.authorization',
      ],
      censor: '[redacted]',
    },
    formatters: { level: (label) => ({ level: label }) },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
}

/** Whether `format` means pretty output here. */
export function isPretty(format: LogFormat | undefined, destination?: DestinationStream): boolean {
  if (format === 'pretty') return true;
  if (format === 'json') return false;
  return destination === undefined && process.stdout.isTTY === true;
}

export function createLogger(options: CreateLoggerOptions): Logger {
  const opts = loggerOptions(options.service, options.level ?? 'info');
  if (!isPretty(options.format, options.destination)) return pino(opts, options.destination);
  const stream = prettyStream({
    destination: options.destination ?? 1,
    colorize: options.colorize ?? (options.destination === undefined && process.stdout.isTTY === true),
    sync: true,
    translateTime: 'SYS:HH:MM:ss.l',
    // `[12:00:00.000] INFO: [queue-worker] worker started`, then the fields, one per line.
    ignore: 'pid,hostname,service',
    messageFormat: '[{service}] {msg}',
  });
  return pino(opts, stream);
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
