// The files service: issues V4 signed GCS DELETE URLs to callers holding the bearer token.
import { createHash, timingSafeEqual } from 'node:crypto';
import { Storage } from '@google-cloud/storage';
import { connect, runFunction } from '@org/queue-client';
import { createLogger } from '@org/config';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import { z } from 'zod';
import { resolveConfig, type FilesServiceConfig } from './config.js';

/** The `code` of the 404 answer for an object that is not in the bucket. */
export const UNKNOWN_OBJECT_CODE = 'unknown_object';
/** The `code` of the 403 answer for an object the database has not scheduled for deletion. */
export const NOT_SCHEDULED_CODE = 'not_scheduled';
export const SIGNED_DELETE_URLS_PATH = '/v1/signed-delete-urls';

/**
 * Why an object key is refused, or undefined when it is plausible: empty, over 1024 bytes
 * of UTF-8, control characters, a leading `/`, or a `.`/`..` segment.
 */
export function implausibleObjectKeyReason(key: string): string | undefined {
  if (key.length === 0) return 'must not be empty';
  if (Buffer.byteLength(key, 'utf8') > 1024) return 'must be at most 1024 bytes of UTF-8';
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f]/.test(key)) return 'must not contain control characters';
  if (key.startsWith('/')) return 'must not start with "/"';
  if (key.split('/').some((s) => s === '.' || s === '..')) return 'must not have "." or ".." segments';
  if (/[\ud800-\udfff]/.test(key.replace(/[\ud800-\udbff][\udc00-\udfff]/g, ''))) return 'must be valid UTF-8';
  return undefined;
}

const requestBody = z.strictObject({
  bucket: z.string().regex(/^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$/, 'must be a bucket name'),
  object_key: z.string().superRefine((key, ctx) => {
    const reason = implausibleObjectKeyReason(key);
    if (reason) ctx.addIssue({ code: 'custom', message: reason });
  }),
});

export interface FilesServiceOptions {
  /** A pino logger (default: @org/config's, at info level to stdout); `false` for none. */
  logger?: FastifyBaseLogger | false;
  /** Retries of a failed storage lookup (default 2, with the SDK's backoff). */
  storageMaxRetries?: number;
}

/**
 * Asks the database how long (bucket, object_key) may be deleted for: the seconds left on
 * the live lease of the file_delete attempt deleting it (an attempt without an outcome, in
 * a process that has not ended, whose task a worker holds now), or undefined when none
 * may (files.check_file_delete_signing through internal.run_function).
 */
async function deletionLeaseSecondsLeft(
  db: ReturnType<typeof connect>,
  bucket: string,
  objectKey: string,
): Promise<number | undefined> {
  const result = (await runFunction(db, 'files.check_file_delete_signing', { bucket, object_key: objectKey })) as {
    success?: boolean;
    payload?: { scheduled?: boolean; lease_seconds_left?: number | string | null };
  } | null;
  if (result?.success !== true || result.payload?.scheduled !== true) return undefined;
  const left = Number(result.payload.lease_seconds_left);
  return Number.isFinite(left) ? left : undefined;
}

const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest();

function reply4xx(reply: FastifyReply, statusCode: number, message: string, code?: string) {
  const error = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found' }[statusCode] ?? 'Error';
  return reply.code(statusCode).send({ statusCode, error, ...(code ? { code } : {}), message });
}

/**
 * The files service as a Fastify app (not listening: call `app.listen({ port, host })`,
 * or use `app.inject` in tests). Throws FilesServiceConfigError for a bad config, and for
 * no credentials.
 *
 * - `GET /healthz` → `{ ok: true }`.
 * - `POST /v1/signed-delete-urls` `{ bucket, object_key }` with `Authorization: Bearer <token>`
 *   → 200 `{ url, expires_at }`; 401 without or with a wrong token; 400 for a bad body or an
 *   implausible key; 403 for a bucket not configured; 403 `{ code: "not_scheduled" }` when
 *   no worker holds a live lease on a deletion attempt of the object
 *   (files.check_file_delete_signing); the URL expires with that lease, or after
 *   `urlTtlSeconds` when sooner; 404 `{ code: "unknown_object" }` when
 *   the object is not in the bucket (the file_delete provider counts that as already
 *   deleted); 502 when storage cannot be asked.
 */
export function createFilesService(config: FilesServiceConfig, options: FilesServiceOptions = {}): FastifyInstance {
  const cfg = resolveConfig(config);
  const storage = new Storage({
    projectId: cfg.credentials.project_id,
    credentials: { client_email: cfg.credentials.client_email, private_key: cfg.credentials.private_key },
    ...(cfg.apiEndpoint ? { apiEndpoint: cfg.apiEndpoint.replace(/\/+$/, '') } : {}),
    // maxRetries 0 reads as "unset" in the SDK: no retries is autoRetry false.
    retryOptions:
      options.storageMaxRetries === 0
        ? { autoRetry: false }
        : { maxRetries: options.storageMaxRetries ?? 2, totalTimeout: 20 },
  });
  const buckets = new Set(cfg.buckets);
  const tokenHash = sha256(cfg.token);
  const db = connect({ connectionString: cfg.databaseUrl, max: 4, applicationName: 'files-service' });

  const app = Fastify({
    bodyLimit: 16 * 1024,
    ...(options.logger === false
      ? { logger: false }
      : options.logger
        ? { loggerInstance: options.logger }
        : { loggerInstance: createLogger({ service: 'files-service' }) }),
  });

  app.setErrorHandler((err: { statusCode?: number; message: string }, request, reply) => {
    const status = err.statusCode && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
    if (status === 500) request.log.error({ err }, 'unexpected error');
    return reply.code(status).send({
      statusCode: status,
      error: status === 500 ? 'Internal Server Error' : 'Bad Request',
      message: status === 500 ? 'internal error' : err.message,
    });
  });
  app.setNotFoundHandler((request, reply) =>
    reply4xx(reply, 404, `no route ${request.method} ${request.url.split('?')[0]}`),
  );

  app.addHook('onClose', async () => {
    await db.end();
  });

  app.get('/healthz', () => Promise.resolve({ ok: true }));

  app.post(SIGNED_DELETE_URLS_PATH, async (request, reply) => {
    const auth = request.headers.authorization;
    const presented = typeof auth === 'string' && /^Bearer /i.test(auth) ? auth.slice(7).trim() : undefined;
    if (presented === undefined)
      return reply4xx(reply, 401, 'missing bearer token (Authorization: Bearer <FILES_SERVICE_TOKEN>)');
    // Hashing first makes both sides the same length, so the comparison is constant-time.
    if (!timingSafeEqual(sha256(presented), tokenHash)) return reply4xx(reply, 401, 'wrong bearer token');

    const parsed = requestBody.safeParse(request.body);
    if (!parsed.success) {
      const message = parsed.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; ');
      return reply4xx(reply, 400, message);
    }
    const { bucket, object_key } = parsed.data;
    if (!buckets.has(bucket)) {
      return reply4xx(reply, 403, `bucket ${JSON.stringify(bucket)} is not one this service signs for (FILES_BUCKETS)`);
    }

    // Only what a worker is deleting now: a token holder cannot delete any object it names,
    // and the URL is valid no longer than the attempt's lease (storage checks only the
    // signature and its expiry).
    const askedAt = Date.now();
    let leaseSecondsLeft: number | undefined;
    try {
      leaseSecondsLeft = await deletionLeaseSecondsLeft(db, bucket, object_key);
    } catch (err) {
      request.log.error(
        { bucket, err: { message: (err as Error).message, code: (err as { code?: unknown }).code } },
        'database check failed',
      );
      return reply
        .code(502)
        .send({ statusCode: 502, error: 'Bad Gateway', message: 'the database could not be asked' });
    }
    // Whole seconds (V4 URLs count in seconds), from when the database was asked.
    const lifetimeSeconds =
      leaseSecondsLeft === undefined ? 0 : Math.min(cfg.urlTtlSeconds, Math.floor(leaseSecondsLeft));
    if (lifetimeSeconds < 1) {
      request.log.warn({ bucket }, 'refused: no deletion scheduled for this object');
      return reply4xx(
        reply,
        403,
        `no deletion is scheduled for ${JSON.stringify(object_key)} in bucket ${JSON.stringify(bucket)}`,
        NOT_SCHEDULED_CODE,
      );
    }

    const file = storage.bucket(bucket).file(object_key);
    let exists: boolean;
    try {
      [exists] = await file.exists();
    } catch (err) {
      request.log.error(
        { bucket, err: { message: (err as Error).message, code: (err as { code?: unknown }).code } },
        'storage lookup failed',
      );
      return reply.code(502).send({ statusCode: 502, error: 'Bad Gateway', message: 'storage lookup failed' });
    }
    if (!exists) {
      return reply4xx(
        reply,
        404,
        `unknown object: ${JSON.stringify(object_key)} is not in bucket ${JSON.stringify(bucket)}`,
        UNKNOWN_OBJECT_CODE,
      );
    }

    // The URL's validity starts at the second the database was asked (its X-Goog-Date) and
    // lasts lifetimeSeconds (its X-Goog-Expires), whenever the signing itself happens.
    const accessibleAt = new Date(Math.floor(askedAt / 1000) * 1000);
    const expires = new Date(accessibleAt.getTime() + lifetimeSeconds * 1000);
    if (expires.getTime() <= Date.now()) {
      request.log.warn({ bucket }, "refused: the attempt's lease ended while storage was asked");
      return reply4xx(
        reply,
        403,
        `no deletion is scheduled for ${JSON.stringify(object_key)} in bucket ${JSON.stringify(bucket)}`,
        NOT_SCHEDULED_CODE,
      );
    }
    const [url] = await file.getSignedUrl({ version: 'v4', action: 'delete', expires, accessibleAt });
    request.log.info({ bucket, expires_at: expires.toISOString() }, 'signed delete url issued');
    return reply.code(200).send({ url, expires_at: expires.toISOString() });
  });

  return app;
}
