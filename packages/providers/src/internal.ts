// Small helpers shared by the providers. Not exported from the package.
import { fileURLToPath } from 'node:url';
import { resolve } from 'node:path';

/** The repository root (this file is packages/providers/{src,dist}/internal.*). */
export const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** `<repo>/.data/<...parts>`: where local mode keeps its files. */
export function defaultDataDir(...parts: string[]): string {
  return resolve(repoRoot, '.data', ...parts);
}

/** The reason a signal was aborted, as an Error. */
export function abortError(signal: AbortSignal, what: string): Error {
  const reason: unknown = signal.reason;
  const detail =
    reason instanceof Error
      ? reason.message
      : reason === undefined
        ? 'aborted'
        : typeof reason === 'string'
          ? reason
          : JSON.stringify(reason);
  const err = new Error(`${what}: aborted (${detail})`);
  err.name = 'AbortError';
  return err;
}

/** Throws at once when the signal is already aborted. */
export function throwIfAborted(signal: AbortSignal | undefined, what: string): void {
  if (signal?.aborted) throw abortError(signal, what);
}

/**
 * Rejects as soon as `signal` aborts, for SDKs that take no signal (the request itself is
 * left to its own timeout).
 */
export function raceAbort<T>(promise: Promise<T>, signal: AbortSignal | undefined, what: string): Promise<T> {
  if (!signal) return promise;
  throwIfAborted(signal, what);
  return new Promise<T>((resolvePromise, reject) => {
    const onAbort = () => reject(abortError(signal, what));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolvePromise(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- forwards the wrapped promise's own rejection unchanged
        reject(err);
      },
    );
  });
}

/** A URL without its query string and credentials, safe for messages (signed URLs carry a signature). */
export function safeUrl(url: string): string {
  try {
    const u = new URL(url);
    u.username = '';
    u.password = '';
    u.search = '';
    u.hash = '';
    return u.href;
  } catch {
    return '<invalid url>';
  }
}

/** At most `max` characters of `text`, for error messages that quote a response body. */
export function snippet(text: string, max = 300): string {
  const oneLine = text.replace(/\s+/g, ' ').trim();
  return oneLine.length > max ? `${oneLine.slice(0, max)}…` : oneLine;
}

/** A signal that aborts when `signal` does or after `timeoutMs`. */
export function withTimeout(signal: AbortSignal | undefined, timeoutMs: number): AbortSignal {
  const timeout = AbortSignal.timeout(timeoutMs);
  return signal ? AbortSignal.any([signal, timeout]) : timeout;
}
