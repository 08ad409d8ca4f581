// A fake of Resend's email API: POST /emails.
import { randomUUID } from 'node:crypto';
import { startHttpFake, type FakeServer } from './http-fake.js';

export interface FakeResendOptions {
  /** When set, requests must carry `Authorization: Bearer <apiKey>` (else 401/403, as Resend). */
  apiKey?: string;
}

/** An email the fake accepted. */
export interface FakeResendEmail {
  id: string;
  /** The JSON body as sent (from, to, subject, html, text, reply_to, ...). */
  body: Record<string, unknown>;
  idempotencyKey: string | undefined;
}

export interface FakeResend extends FakeServer {
  /** Accepted emails, oldest first (a request replayed with a known Idempotency-Key adds none). */
  emails: FakeResendEmail[];
}

const errorNames: Record<number, string> = {
  400: 'validation_error',
  401: 'missing_api_key',
  403: 'invalid_api_key',
  404: 'not_found',
  409: 'invalid_idempotent_request',
  422: 'validation_error',
  429: 'rate_limit_exceeded',
};

function resendError(status: number, message: string) {
  return { status, body: { statusCode: status, name: errorNames[status] ?? 'application_error', message } };
}

/**
 * Starts a fake Resend on 127.0.0.1 (random port); point the SDK at it with
 * `new Resend(key, { baseUrl: fake.url })` or `createResendEmailProvider({ baseUrl: fake.url })`.
 * - `POST /emails` with from, to, subject → 200 `{ id }`; a missing field → 422.
 * - The same `Idempotency-Key` with the same body answers the first id again (nothing
 *   new in `emails`); with another body → 409, as Resend.
 * - `failNext(n, status = 500, message?)`: the next n POST /emails answer
 *   `{ statusCode, name, message }` with that status; `throttleNext(n, retryAfterSeconds?)`:
 *   429 `rate_limit_exceeded` with `Retry-After`, as Resend's rate limit.
 */
export async function startFakeResend(options: FakeResendOptions = {}): Promise<FakeResend> {
  const emails: FakeResendEmail[] = [];
  const byKey = new Map<string, { id: string; body: string }>();
  const server = await startHttpFake(
    (req, takeFailure) => {
      if (req.method !== 'POST' || req.path !== '/emails')
        return resendError(404, `no route ${req.method} ${req.path}`);
      const auth = req.headers.authorization;
      if (!auth?.startsWith('Bearer ') || auth.length <= 7)
        return resendError(401, 'Missing API key in the authorization header.');
      if (options.apiKey !== undefined && auth.slice(7) !== options.apiKey)
        return resendError(403, 'API key is invalid');
      const failure = takeFailure();
      if (failure)
        return {
          ...resendError(failure.status, failure.message ?? `fake failure (HTTP ${failure.status})`),
          ...(failure.headers ? { headers: failure.headers } : {}),
        };
      const body = req.json as Record<string, unknown> | undefined;
      if (!body || typeof body !== 'object') return resendError(422, 'The request body is not valid JSON.');
      for (const field of ['from', 'to', 'subject']) {
        if (body[field] === undefined || body[field] === '') return resendError(422, `Missing \`${field}\` field.`);
      }
      const key = req.headers['idempotency-key'];
      const idempotencyKey = typeof key === 'string' ? key : undefined;
      if (idempotencyKey !== undefined) {
        const seen = byKey.get(idempotencyKey);
        if (seen && seen.body !== req.body) {
          return resendError(409, 'Same idempotency key used with a different request payload.');
        }
        if (seen) return { status: 200, body: { id: seen.id } };
      }
      const id = randomUUID();
      if (idempotencyKey !== undefined) byKey.set(idempotencyKey, { id, body: req.body });
      emails.push({ id, body, idempotencyKey });
      return { status: 200, body: { id } };
    },
    () => {
      emails.length = 0;
      byKey.clear();
    },
  );
  return Object.assign(server, { emails });
}
