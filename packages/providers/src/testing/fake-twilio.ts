// A fake of Twilio's Messages API: POST /2010-04-01/Accounts/:sid/Messages.json.
import { randomBytes } from 'node:crypto';
import { basicAuth, startHttpFake, type FakeServer } from './http-fake.js';

export interface FakeTwilioOptions {
  /** When set, basic auth must be `<account sid>:<authToken>` (else 401, code 20003). */
  authToken?: string;
}

/** A message the fake accepted. */
export interface FakeTwilioMessage {
  sid: string;
  accountSid: string;
  to: string;
  from: string;
  body: string;
  /** Every form field as sent. */
  form: Record<string, string>;
}

export interface FakeTwilio extends FakeServer {
  messages: FakeTwilioMessage[];
}

function twilioError(status: number, code: number, message: string) {
  return {
    status,
    body: { code, message, more_info: `https://www.twilio.com/docs/errors/${code}`, status },
  };
}

const PATH = /^\/2010-04-01\/Accounts\/([^/]+)\/Messages\.json$/;

/**
 * Starts a fake Twilio on 127.0.0.1 (random port); point the SDK at it with
 * `createTwilioSmsProvider({ baseUrl: fake.url, ... })`.
 * - `POST /2010-04-01/Accounts/:sid/Messages.json`, form-encoded To, From, Body, basic
 *   auth whose username is the `:sid` → 201 with `{ sid: 'SM...', status: 'queued', ... }`.
 * - Missing To/From/Body → 400 code 21604/21603/21602; wrong user → 401 code 20003.
 * - `failNext(n, status = 500, message?)`: the next n answer Twilio's error body
 *   `{ code, message, more_info, status }` with that status (code 20500; 20429 for 429);
 *   `throttleNext(n, retryAfterSeconds?)`: 429 code 20429 with `Retry-After`.
 */
export async function startFakeTwilio(options: FakeTwilioOptions = {}): Promise<FakeTwilio> {
  const messages: FakeTwilioMessage[] = [];
  const server = await startHttpFake(
    (req, takeFailure) => {
      const m = PATH.exec(req.path);
      if (req.method !== 'POST' || !m)
        return twilioError(404, 20404, `The requested resource ${req.path} was not found`);
      const accountSid = decodeURIComponent(m[1] ?? '');
      const auth = basicAuth(req);
      if (
        !auth ||
        auth.username !== accountSid ||
        (options.authToken !== undefined && auth.password !== options.authToken)
      ) {
        return twilioError(401, 20003, 'Authenticate');
      }
      const failure = takeFailure();
      if (failure)
        return {
          ...twilioError(
            failure.status,
            failure.status === 429 ? 20429 : 20500,
            failure.message ?? (failure.status === 429 ? 'Too Many Requests' : `fake failure (HTTP ${failure.status})`),
          ),
          ...(failure.headers ? { headers: failure.headers } : {}),
        };
      const form = req.form ?? {};
      if (!form.To) return twilioError(400, 21604, "A 'To' phone number is required.");
      if (!form.From) return twilioError(400, 21603, "A 'From' phone number is required.");
      if (!form.Body) return twilioError(400, 21602, 'Message body is required.');
      const sid = `SM${randomBytes(16).toString('hex')}`;
      messages.push({ sid, accountSid, to: form.To, from: form.From, body: form.Body, form });
      const now = new Date().toUTCString();
      return {
        status: 201,
        body: {
          sid,
          account_sid: accountSid,
          to: form.To,
          from: form.From,
          body: form.Body,
          status: 'queued',
          direction: 'outbound-api',
          num_segments: '1',
          date_created: now,
          date_updated: now,
          uri: `/2010-04-01/Accounts/${accountSid}/Messages/${sid}.json`,
        },
      };
    },
    () => {
      messages.length = 0;
    },
  );
  return Object.assign(server, { messages });
}
