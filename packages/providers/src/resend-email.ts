// Email through Resend (https://resend.com) with the real `resend` SDK.
import type { Resend } from 'resend';
import {
  emailPayload,
  retryAfterSeconds,
  ThrottledError,
  type EmailPayload,
  type Provider,
  type ProviderContext,
} from '@org/contracts';
import { abortError, throwIfAborted } from './internal.js';

export interface ResendEmailOptions {
  /** Resend API key (`re_...`). Never appears in errors or logs. */
  apiKey: string;
  /** API base URL, e.g. a local fake server's `url` in tests. Default: Resend's (https://api.resend.com). */
  baseUrl?: string;
  /** Sender used when a payload has no `from_address` (payloads normally carry one). */
  defaultFrom?: string;
}

/** What `send` resolves to: the `worker_payload` of the success handler. */
export interface ResendEmailResult {
  provider: 'resend';
  /** Resend's email id. */
  id: string;
}

/**
 * The `email` provider backed by Resend. The payload's `idempotency_key` (the attempt id)
 * is sent as Resend's `Idempotency-Key` header, so a retried attempt does not send twice.
 * Resend's SDK returns errors instead of throwing; `send` turns them into thrown Errors
 * ("resend: HTTP 422 validation_error: ..."). Back-pressure (HTTP 429, or a quota error:
 * `rate_limit_exceeded`, `daily_quota_exceeded`, `monthly_quota_exceeded`) is a
 * ThrottledError for the `Retry-After` Resend sends (else 1 s for a rate limit, an hour
 * for a quota): the worker holds every email task back until then, uncounted.
 */
export function createResendEmailProvider(options: ResendEmailOptions): Provider<EmailPayload> {
  if (!options.apiKey) throw new Error('createResendEmailProvider: apiKey is required');
  const baseUrl = options.baseUrl?.replace(/\/+$/, '');
  // The SDK is loaded on the first send, so that workers that send no email do not pay
  // for importing it at start-up.
  let client: Promise<Resend> | undefined;
  const getClient = () =>
    (client ??= import('resend').then(({ Resend }) => new Resend(options.apiKey, baseUrl ? { baseUrl } : undefined)));

  return {
    name: 'resend',
    payloadSchema: emailPayload,
    async send(payload: EmailPayload, context: ProviderContext): Promise<ResendEmailResult> {
      throwIfAborted(context.signal, 'resend');
      const from = payload.from_address || options.defaultFrom;
      if (!from) throw new Error('resend: the payload has no from_address and no default sender is configured');
      const { data, error, headers } = await (
        await getClient()
      ).emails.send(
        {
          from,
          to: payload.to_address,
          subject: payload.subject,
          html: payload.html,
          ...(payload.text !== undefined ? { text: payload.text } : {}),
          ...(payload.reply_to !== undefined ? { replyTo: payload.reply_to } : {}),
        },
        {
          ...(payload.idempotency_key !== undefined ? { idempotencyKey: payload.idempotency_key } : {}),
          signal: context.signal,
        },
      );
      // The SDK reports an aborted fetch as a generic "unable to fetch" error.
      if (context.signal.aborted) throw abortError(context.signal, 'resend');
      if (error) {
        const throttled = resendThrottle(error, headers);
        if (throttled) throw throttled;
        const status = error.statusCode ? `HTTP ${error.statusCode} ` : '';
        throw new Error(`resend: ${status}${error.name ?? 'error'}: ${error.message ?? 'no message'}`);
      }
      if (!data || typeof data.id !== 'string' || data.id === '') {
        throw new Error('resend: the response has no email id');
      }
      return { provider: 'resend', id: data.id };
    },
  };
}

/** Resend's answers that mean "not now": a rate limit or a quota. */
const QUOTA_ERRORS = new Set(['daily_quota_exceeded', 'monthly_quota_exceeded']);

/** The ThrottledError a Resend error means, or undefined when it is not back-pressure. */
export function resendThrottle(
  error: { statusCode?: number | null; name?: string; message?: string },
  headers: Record<string, string> | null | undefined,
): ThrottledError | undefined {
  const quota = error.name !== undefined && QUOTA_ERRORS.has(error.name);
  if (error.statusCode !== 429 && error.name !== 'rate_limit_exceeded' && !quota) return undefined;
  const header = headers ? Object.entries(headers).find(([k]) => k.toLowerCase() === 'retry-after')?.[1] : undefined;
  const seconds = retryAfterSeconds(header) ?? (quota ? 3600 : 1);
  return new ThrottledError(
    `resend: HTTP ${error.statusCode ?? 429} ${error.name ?? 'rate_limit_exceeded'}: ${error.message ?? 'no message'}`,
    { retryAfterSeconds: seconds },
  );
}
