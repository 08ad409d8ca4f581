/**
 * Whose fault was a crash of PostgreSQL?
 *
 * When a backend dies by a signal (a segfault in an extension, the OOM killer), the
 * postmaster resets the server: every other backend tells its client "terminating
 * connection because of crash of another server process" (a notice, SQLSTATE 57P02) and
 * exits, and the server replays the WAL. The backend that died says nothing: its client
 * only sees the connection close.
 *
 * So a call whose connection got that notice was cut short by another process's crash:
 * the run was innocent, and the worker gives its lease back once the server answers
 * again (a release: it counts neither towards MAX_LEASES nor as an interruption); so does
 * a call that never reached the server (no connection). A step call whose connection
 * died without a word (no SQLSTATE, no notice) may have crashed the server itself: its
 * lease is left to expire, which counts towards MAX_LEASES, so a step that crashes
 * PostgreSQL each time it runs is abandoned like one that kills its worker.
 *
 * Only the step runner and the completer know the connection of a failed call (they
 * check one out for it); a processor's own queries go through the worker's pool, so
 * their errors are not told apart, and a run cut short there is interrupted as before.
 */
import type pg from 'pg';
import { QueueError } from '@org/queue-client';

/** SQLSTATE crash_shutdown: "terminating connection because of crash of another server process". */
export const CRASH_SHUTDOWN = '57P02';

const noticed = new WeakSet<object>();
const innocent = new WeakSet<object>();
const notRun = new WeakSet<object>();
/**
 * Refusals of a connection: nothing was sent. 57P03 cannot_connect_now (the server is
 * starting up, recovering from a crash, or shutting down); no server listening.
 */
const NOT_CONNECTED_SQLSTATES = ['57P03'];
const NOT_CONNECTED_NODE_CODES = ['ECONNREFUSED'];

/** Watches `client` for the crash notice (call once per connection, when it is made). */
export function watchCrashNotice(client: pg.ClientBase): void {
  client.on('notice', (notice: { code?: string }) => {
    if (notice.code === CRASH_SHUTDOWN) noticed.add(client);
  });
}

/** Marks `error` as raised before the call was sent (no connection): nothing of it ran. */
export function noteNotRun<E>(error: E): E {
  if (error !== null && typeof error === 'object') notRun.add(error);
  return error;
}

/** Whether `error` was raised before its call was sent (see noteNotRun), or is a refused connection. */
export function wasNotRun(error: unknown): boolean {
  if (error === null || typeof error !== 'object') return false;
  if (notRun.has(error)) return true;
  const code = sqlstate(error);
  return code !== undefined && (NOT_CONNECTED_SQLSTATES.includes(code) || NOT_CONNECTED_NODE_CODES.includes(code));
}

/**
 * Marks `error` as caused by another process's crash when `client`, on which it was
 * raised, got the crash notice (or the error itself is one). Returns `error`.
 */
export function noteCrash<E>(error: E, client: pg.ClientBase | undefined): E {
  if (
    error !== null &&
    typeof error === 'object' &&
    ((client && noticed.has(client)) || sqlstate(error) === CRASH_SHUTDOWN)
  )
    innocent.add(error);
  return error;
}

/** Whether `error` came from another server process's crash (see noteCrash). */
export function isCrashOfAnotherProcess(error: unknown): boolean {
  return error !== null && typeof error === 'object' && (innocent.has(error) || sqlstate(error) === CRASH_SHUTDOWN);
}

/**
 * Whether the server said nothing about `error`: the connection just closed, with no
 * SQLSTATE and no crash notice (the backend died, or the network did).
 */
export function isSilentConnectionLoss(error: unknown): boolean {
  if (isCrashOfAnotherProcess(error)) return false;
  const code = sqlstate(error);
  return code === undefined || !/^[0-9A-Z]{5}$/.test(code);
}

function sqlstate(error: unknown): string | undefined {
  const cause = error instanceof QueueError ? error.cause : error;
  const code = (cause as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}
