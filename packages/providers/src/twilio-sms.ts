// SMS through Twilio with the real `twilio` SDK.
import type TwilioSdk from 'twilio';
import {
  retryAfterSeconds,
  smsPayload,
  ThrottledError,
  type Provider,
  type ProviderContext,
  type SmsPayload,
} from '@org/contracts';
import { raceAbort, throwIfAborted } from './internal.js';

export interface TwilioSmsOptions {
  /** Account SID (`AC` + 32 hex). */
  accountSid: string;
  /** Auth token. Never appears in errors or logs. */
  authToken: string;
  /** Sender (E.164) used when a payload has no `from_number`. */
  fromNumber: string;
  /**
   * Send every request to this origin instead of api.twilio.com (a local fake server in
   * tests). The path of each request is kept; a path in `baseUrl` is prefixed to it.
   */
  baseUrl?: string;
  /** Per-request timeout in milliseconds (default 30000). */
  timeoutMs?: number;
}

/** What `send` resolves to: the `worker_payload` of the success handler. */
export interface TwilioSmsResult {
  provider: 'twilio';
  /** Twilio's message SID (`SM...`). */
  sid: string;
  /** Twilio's message status at creation, usually `queued` or `accepted`. */
  status: string;
}

type Twilio = typeof TwilioSdk;
type TwilioClient = ReturnType<Twilio>;

/**
 * The SDK, loaded on the first send: importing it costs a worker ~100 ms of start-up, and
 * most workers never send an SMS.
 */
let sdk: Promise<Twilio> | undefined;
const loadTwilio = (): Promise<Twilio> => (sdk ??= import('twilio').then((m) => m.default));

/**
 * Twilio's HTTP client, sending every request to `base` when given (Twilio has no base-URL
 * option), that turns back-pressure into a ThrottledError before the SDK sees the answer
 * (its RestException keeps no headers, so the Retry-After would be lost): HTTP 429 (code
 * 20429, or any other), for its `Retry-After` (else 1 s), and code 21611, the sender's
 * queue of messages full (60 s). Neither sent anything.
 */
function throttleAwareRequestClient(twilio: Twilio, base: URL | undefined, timeoutMs: number) {
  const client = new twilio.RequestClient({ timeout: timeoutMs });
  const request = client.request.bind(client);
  client.request = async (opts) => {
    let uri = opts.uri;
    if (base) {
      const original = new URL(opts.uri);
      const target = new URL(base.href);
      target.pathname = base.pathname.replace(/\/+$/, '') + original.pathname;
      target.search = original.search;
      uri = target.href;
    }
    const response = await request({ ...opts, uri });
    const throttled = twilioThrottle(response);
    if (throttled) throw throttled;
    return response;
  };
  return client;
}

/** The ThrottledError a Twilio answer means, or undefined when it is not back-pressure. */
export function twilioThrottle(response: {
  statusCode: number;
  body: unknown;
  headers?: unknown;
}): ThrottledError | undefined {
  let body = response.body as { code?: unknown; message?: unknown } | string | null | undefined;
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body) as { code?: unknown; message?: unknown };
    } catch {
      body = undefined;
    }
  }
  const code = typeof body === 'object' && body !== null && typeof body.code === 'number' ? body.code : undefined;
  const message = typeof body === 'object' && body !== null && typeof body.message === 'string' ? body.message : '';
  if (response.statusCode !== 429 && code !== 21611) return undefined;
  const headers = (response.headers ?? {}) as Record<string, unknown>;
  const header = Object.entries(headers).find(([k]) => k.toLowerCase() === 'retry-after')?.[1];
  const seconds = retryAfterSeconds(typeof header === 'string' ? header : undefined) ?? (code === 21611 ? 60 : 1);
  const codeText = code !== undefined ? ` code ${code}` : '';
  return new ThrottledError(`twilio: HTTP ${response.statusCode}${codeText}: ${message || 'too many requests'}`, {
    retryAfterSeconds: seconds,
  });
}

/**
 * The `sms` provider backed by Twilio's Messages API. Twilio has no idempotency key; a
 * retried attempt can send twice (the supervisor decides whether to retry). Back-pressure
 * (HTTP 429, a full sender queue) is a ThrottledError (throttleAwareRequestClient).
 */
export function createTwilioSmsProvider(options: TwilioSmsOptions): Provider<SmsPayload> {
  if (!/^AC[0-9a-zA-Z]{32}$/.test(options.accountSid ?? '')) {
    throw new Error('createTwilioSmsProvider: accountSid must be "AC" followed by 32 letters or digits');
  }
  if (!options.authToken) throw new Error('createTwilioSmsProvider: authToken is required');
  if (!options.fromNumber) throw new Error('createTwilioSmsProvider: fromNumber is required');
  const timeoutMs = options.timeoutMs ?? 30_000;
  let base: URL | undefined;
  if (options.baseUrl !== undefined) {
    try {
      base = new URL(options.baseUrl);
    } catch {
      throw new Error('createTwilioSmsProvider: baseUrl is not a valid URL');
    }
  }
  let client: Promise<TwilioClient> | undefined;
  const getClient = () =>
    (client ??= loadTwilio().then((twilio) =>
      twilio(options.accountSid, options.authToken, {
        httpClient: throttleAwareRequestClient(twilio, base, timeoutMs),
      }),
    ));

  return {
    name: 'twilio',
    payloadSchema: smsPayload,
    async send(payload: SmsPayload, context: ProviderContext): Promise<TwilioSmsResult> {
      throwIfAborted(context.signal, 'twilio');
      const twilio = await loadTwilio();
      let message;
      try {
        const sms = await getClient();
        message = await raceAbort(
          sms.messages.create({
            to: payload.to_number,
            from: payload.from_number ?? options.fromNumber,
            body: payload.body,
          }),
          context.signal,
          'twilio',
        );
      } catch (err) {
        throw twilioError(twilio, err);
      }
      return { provider: 'twilio', sid: message.sid, status: String(message.status) };
    },
  };
}

/**
 * A clean Error from what the SDK threw: Twilio's RestException (status, code, message)
 * or a transport error. The original is not attached as `cause`: axios errors carry the
 * request config, Authorization header included.
 */
function twilioError(twilio: Twilio, err: unknown): Error {
  if (err instanceof Error && (err.name === 'AbortError' || err instanceof ThrottledError)) return err;
  if (err instanceof twilio.RestException) {
    const code = err.code !== undefined ? ` code ${err.code}` : '';
    const more = err.moreInfo ? ` (${err.moreInfo})` : '';
    return new Error(`twilio: HTTP ${err.status}${code}: ${err.message}${more}`);
  }
  const e = err as { code?: unknown; message?: unknown };
  const code = typeof e?.code === 'string' ? ` ${e.code}` : '';
  const message = typeof e?.message === 'string' ? e.message : String(err);
  return new Error(`twilio: request failed${code}: ${message}`);
}
