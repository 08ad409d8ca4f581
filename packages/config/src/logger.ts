/**
 * The one log format of every program (the worker, the API, the files service):
 *
 *   {"level":"info","time":"2026-01-01T12:00:00.000Z","service":"queue-worker","pid":41,"event":"worker_started","msg":"..."}
 *
 * - `level` is the level's name (fatal, error, warn, info, debug, trace), never pino's number;
 * - `time` is ISO 8601 in UTC; `service` names the program, `pid` its process;
 * - credentials never reach a line: the usual secret-bearing keys are redacted wherever they
 *   appear (two levels deep, and request headers), in a line's fields and in a child
 *   logger's bindings; connection strings are masked by `maskUrl`.
 *
 * Format: `json` writes one JSON object per line; `pretty` writes the same records for
 * people, one line per entry (pino-pretty: the local time, a coloured level, `[service]` and
 * the message, then the fields as one JSON object; an error's stack and a message's line
 * breaks are escaped, never printed across lines, so a line is an entry for grep and tail);
 * `auto` (the default) is pretty when standard output is a terminal, JSON otherwise, so
 * `npm start` in a terminal is readable and a log collector gets JSON.
 *
 * Cost: redaction looks at the keys of a line's fields (and of the objects among them),
 * and copies only what it censors. (pino's own `redact` option with `*.key` paths ran a
 * path redactor over every value of every line and of every child's bindings: about 3 KB
 * of garbage per value, 12 KB per child logger, which a worker makes for each task.)
 * pino-pretty is loaded only by a logger that prints for people.
 */
import { createRequire } from 'node:module';
import {
  pino,
  type Bindings,
  type ChildLoggerOptions,
  type DestinationStream,
  type Logger,
  type LoggerOptions,
} from 'pino';
import type { PrettyOptions } from 'pino-pretty';
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

const SECRET_KEYS: readonly string[] = [
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

const SECRET = new Set(SECRET_KEYS);
const CENSOR = '[redacted]';

/** `copy` (made from `value` on first use: same prototype, so an Error stays an Error) with `key` set. */
function withKey(copy: object | undefined, value: object, key: string, next: unknown): object {
  copy ??= Object.create(
    Object.getPrototypeOf(value) as object | null,
    Object.getOwnPropertyDescriptors(value),
  ) as object;
  Object.defineProperty(copy, key, { value: next, enumerable: true, writable: true, configurable: true });
  return copy;
}

/** Objects whose keys are worth a look (not arrays, buffers or typed arrays). */
function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && !ArrayBuffer.isView(v);
}

/**
 * `value` with its secret keys censored, and (depth 2) those of the objects among its
 * values, and `req.headers.authorization`: a copy when anything was censored, `value`
 * itself otherwise (nothing is allocated then).
 */
function censor<T extends object>(value: T, depth: number): T {
  let copy: object | undefined;
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    const v: unknown = value[key];
    if (v === undefined) continue;
    let next = v;
    if (SECRET.has(key)) next = CENSOR;
    else if (depth > 1 && isRecord(v)) next = key === 'req' ? censorRequest(v) : censor(v, depth - 1);
    if (next !== v) copy = withKey(copy, value, key, next);
  }
  return (copy ?? value) as T;
}

/**
 * A request (a plain object, or a raw http.IncomingMessage whose `headers` is a getter of
 * its prototype, as a serializer will read it) with its secret keys and its
 * `headers.authorization` censored.
 */
function censorRequest<T extends Record<string, unknown>>(req: T): T {
  const censored = censor(req, 1);
  const headers = req.headers;
  if (!isRecord(headers) || headers.authorization === undefined) return censored;
  return withKey(censored === req ? undefined : censored, req, 'headers', censor(headers, 1)) as T;
}

/**
 * A line's fields (or a child's bindings) with the secret keys censored at the top level
 * and one level down (`token`, `*.token`), and `req.headers.authorization`. Never changes
 * what it is given.
 */
export function redactSecrets<T extends object>(fields: T): T {
  return censor(fields, 2);
}

/** The pino options behind every logger: level names, ISO time, service and pid, redaction of fields. */
export function loggerOptions(service: string, level: string): LoggerOptions {
  return {
    level,
    base: { service, pid: process.pid },
    formatters: { level: (label) => ({ level: label }), log: redactSecrets },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
}

type ChildOf = (this: Logger, bindings: Bindings, options?: ChildLoggerOptions) => Logger;

/**
 * Children of `logger` (and theirs) get their bindings redacted too: pino's formatters
 * never see a child's bindings.
 */
function redactingChildren(logger: Logger): Logger {
  const child = Reflect.get(logger, 'child') as unknown as ChildOf;
  const redacting: ChildOf = function (bindings, options) {
    return child.call(this, redactSecrets(bindings), options);
  };
  return Object.assign(logger, { child: redacting as unknown as Logger['child'] });
}

const require = createRequire(import.meta.url);

/** A message as one line: line breaks and other control characters escaped (`\n`). */
function oneLine(message: unknown): string {
  const text = typeof message === 'string' ? message : message === undefined ? '' : JSON.stringify(message);
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f]/g, (c) => JSON.stringify(c).slice(1, -1));
}

/** Whether `format` means pretty output here. */
export function isPretty(format: LogFormat | undefined, destination?: DestinationStream): boolean {
  if (format === 'pretty') return true;
  if (format === 'json') return false;
  return destination === undefined && process.stdout.isTTY === true;
}

export function createLogger(options: CreateLoggerOptions): Logger {
  const opts = loggerOptions(options.service, options.level ?? 'info');
  if (!isPretty(options.format, options.destination)) return redactingChildren(pino(opts, options.destination));
  // pino-pretty's prettyFactory rather than its stream: the stream adds pino's error key to
  // the error-like keys, which it prints across lines, stack and all.
  const { prettyFactory } = require('pino-pretty') as {
    prettyFactory: (options: PrettyOptions) => (line: string) => string;
  };
  const pretty = prettyFactory({
    colorize: options.colorize ?? (options.destination === undefined && process.stdout.isTTY === true),
    translateTime: 'SYS:HH:MM:ss.l',
    // `[12:00:00.000] INFO: [queue-worker] worker started {"event":"worker_started",...}`
    ignore: 'pid,hostname,service',
    singleLine: true,
    errorLikeObjectKeys: [],
    messageFormat: (log, messageKey) => `[${String(log.service)}] ${oneLine(log[messageKey])}`,
  });
  const destination = options.destination ?? pino.destination({ fd: 1, sync: true });
  const stream: DestinationStream = { write: (line: string) => destination.write(pretty(line)) };
  return redactingChildren(pino(opts, stream));
}

/** What endLogger needs of a logger's stream (pino's own, a SonicBoom, has it). */
interface EndableStream {
  end(): void;
  once(event: 'close' | 'error', listener: () => void): unknown;
  destroyed?: boolean;
}

/**
 * Writes every line `logger` has taken, then ends its stream: resolves when that is done,
 * or after `ms` (a stdout nobody reads does not hold the caller). pino writes to stdout
 * asynchronously, on libuv's thread pool, and a process that exits loses a write under
 * way (its exit handler writes only what is still buffered): on a busy machine, a
 * program's last lines. A program calls it just before its exit; the logger takes no line
 * after it. A logger whose stream cannot end (pretty output, written synchronously; a
 * destination given) resolves at once. (`object`: a framework's view of a pino logger, such
 * as Fastify's `app.log`, will do.)
 */
export function endLogger(logger: Logger | object, ms = 5000): Promise<void> {
  const stream = (logger as unknown as Record<symbol, unknown>)[pino.symbols.streamSym] as
    Partial<EndableStream> | undefined;
  if (typeof stream?.end !== 'function' || typeof stream.once !== 'function' || stream.destroyed) {
    return Promise.resolve();
  }
  const endable = stream as EndableStream;
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    const done = () => {
      clearTimeout(timer);
      resolve();
    };
    endable.once('close', done);
    endable.once('error', done);
    endable.end();
  });
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
