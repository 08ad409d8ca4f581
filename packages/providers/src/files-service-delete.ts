// File deletion through the files service (packages/files-service): it signs a V4 DELETE
// URL for the object, and this provider sends the DELETE straight to storage.
import { fileDeletePayload, type FileDeletePayload, type Provider, type ProviderContext } from '@org/contracts';
import { safeUrl, snippet, throwIfAborted, withTimeout } from './internal.js';

export interface FilesServiceDeleteOptions {
  /** The files service's base URL, e.g. http://127.0.0.1:8787. */
  serviceUrl: string;
  /** The files service's bearer token (FILES_SERVICE_TOKEN). Never appears in errors or logs. */
  token: string;
  /** Timeout of each HTTP request in milliseconds (default 30000). */
  timeoutMs?: number;
}

/** What `send` resolves to: the `worker_payload` of the success handler. */
export interface FileDeleteResult {
  provider: string;
  bucket: string;
  object_key: string;
  /** True when the object was not there any more (deleted by an earlier attempt or never uploaded). */
  alreadyDeleted: boolean;
}

/** The path of the files service's endpoint, relative to `serviceUrl`. */
export const SIGNED_DELETE_URLS_PATH = '/v1/signed-delete-urls';

/** The `code` of the files service's 404 body when the object is not in the bucket. */
export const UNKNOWN_OBJECT_CODE = 'unknown_object';

/**
 * The `file_delete` provider backed by the files service:
 * 1. POST {serviceUrl}/v1/signed-delete-urls {bucket, object_key} with the bearer token;
 *    its 404 with `code: "unknown_object"` (the object is not in the bucket) is success
 *    with `alreadyDeleted: true`; any other non-200 (a 404 without that code too) throws.
 * 2. DELETE the signed URL; 200/204 is success, 404 is `alreadyDeleted: true`, anything
 *    else throws.
 * `context.signal` aborts both requests.
 */
export function createFilesServiceDeleteProvider(options: FilesServiceDeleteOptions): Provider<FileDeletePayload> {
  let endpoint: string;
  try {
    endpoint = new URL(options.serviceUrl.replace(/\/+$/, '') + SIGNED_DELETE_URLS_PATH).href;
  } catch {
    throw new Error('createFilesServiceDeleteProvider: serviceUrl is not a valid URL');
  }
  if (!options.token) throw new Error('createFilesServiceDeleteProvider: token is required');
  const timeoutMs = options.timeoutMs ?? 30_000;

  return {
    name: 'files-service',
    payloadSchema: fileDeletePayload,
    // Deletes only what files.get_file_delete_payload resolved from the database.
    requiresBeforeHandler: true,
    async send(payload: FileDeletePayload, context: ProviderContext): Promise<FileDeleteResult> {
      throwIfAborted(context.signal, 'files-service');
      const result = (alreadyDeleted: boolean): FileDeleteResult => ({
        provider: 'files-service',
        bucket: payload.bucket,
        object_key: payload.object_key,
        alreadyDeleted,
      });

      // 1. Ask the files service for a signed DELETE URL.
      let res: Response;
      let signal: AbortSignal | undefined;
      try {
        signal = withTimeout(context.signal, timeoutMs);
        res = await fetch(endpoint, {
          method: 'POST',
          headers: { authorization: `Bearer ${options.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ bucket: payload.bucket, object_key: payload.object_key }),
          signal,
        });
      } catch (err) {
        throw transportError('files service', endpoint, err, signal);
      }
      const text = await res.text().catch((err: unknown) => {
        throw transportError('files service', endpoint, err, signal);
      });
      // Only the service's own "unknown object" answer means gone: a 404 from a wrong
      // serviceUrl (no such route) must not count as a deletion.
      if (res.status === 404 && errorCode(text) === UNKNOWN_OBJECT_CODE) return result(true);
      if (res.status !== 200) {
        throw new Error(`files-service: ${endpoint} answered HTTP ${res.status}: ${errorMessage(text)}`);
      }
      let url: string;
      try {
        const body = JSON.parse(text) as { url?: unknown };
        if (typeof body.url !== 'string') throw new Error('no url');
        url = new URL(body.url).href;
      } catch {
        throw new Error(`files-service: ${endpoint} answered 200 without a valid "url"`);
      }

      // 2. DELETE the object through the signed URL.
      let del: Response;
      try {
        signal = withTimeout(context.signal, timeoutMs);
        del = await fetch(url, { method: 'DELETE', signal });
      } catch (err) {
        throw transportError('storage', url, err, signal);
      }
      const delText = await del.text().catch((err: unknown) => {
        throw transportError('storage', url, err, signal);
      });
      if (del.status === 404) return result(true);
      if (del.status === 200 || del.status === 204) return result(false);
      throw new Error(
        `files-service: storage DELETE ${safeUrl(url)} answered HTTP ${del.status}: ${snippet(delText) || 'no body'}`,
      );
    },
  };
}

function errorCode(text: string): unknown {
  try {
    return (JSON.parse(text) as { code?: unknown }).code;
  } catch {
    return undefined;
  }
}

function errorMessage(text: string): string {
  try {
    const body = JSON.parse(text) as { message?: unknown; error?: unknown };
    if (typeof body.message === 'string') return body.message;
    if (typeof body.error === 'string') return body.error;
  } catch {
    // not JSON
  }
  return snippet(text) || 'no body';
}

function transportError(what: string, url: string, err: unknown, signal: AbortSignal | undefined): Error {
  const e = err as { name?: unknown; message?: unknown; cause?: { code?: unknown; message?: unknown } };
  // fetch rejects with the signal's reason, whatever it is.
  if (signal?.aborted || e?.name === 'AbortError' || e?.name === 'TimeoutError') {
    const reason: unknown = signal?.aborted ? signal.reason : err;
    const detail = reason instanceof Error ? reason.message : String(reason);
    const out = new Error(`files-service: request to ${what} ${safeUrl(url)} aborted: ${detail}`);
    out.name = 'AbortError';
    return out;
  }
  const cause = e?.cause?.code ?? e?.cause?.message ?? e?.message ?? String(err);
  return new Error(
    `files-service: request to ${what} ${safeUrl(url)} failed: ${typeof cause === 'string' ? cause : JSON.stringify(cause)}`,
  );
}
