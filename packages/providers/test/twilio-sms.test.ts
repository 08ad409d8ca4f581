import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ThrottledError } from '@org/contracts';
import { createTwilioSmsProvider } from '@org/providers';
import { startFakeTwilio, type FakeTwilio } from '@org/providers/testing';
import { ctx } from './helpers.ts';

const SID = `AC${'0123456789abcdef'.repeat(2)}`;
const TOKEN = 'twilio-auth-token-secret';
let fake: FakeTwilio;
beforeAll(async () => {
  fake = await startFakeTwilio({ authToken: TOKEN });
});
afterAll(async () => {
  await fake?.close();
});
beforeEach(() => fake.reset());

const payload = { idempotency_key: 'attempt-1', to_number: '+14155550100', body: 'Your code is 123456' };
const make = (over: Partial<Parameters<typeof createTwilioSmsProvider>[0]> = {}) =>
  createTwilioSmsProvider({
    accountSid: SID,
    authToken: TOKEN,
    fromNumber: '+14155550199',
    baseUrl: fake.url,
    ...over,
  });

describe('twilio sms provider', () => {
  it('sends To/From/Body form-encoded with basic auth through the real SDK', async () => {
    const result = await make().send(payload, ctx());
    expect(fake.messages).toHaveLength(1);
    expect(result).toEqual({ provider: 'twilio', sid: fake.messages[0].sid, status: 'queued' });
    const req = fake.requests[0];
    expect(req.method).toBe('POST');
    expect(req.path).toBe(`/2010-04-01/Accounts/${SID}/Messages.json`);
    expect(req.headers['content-type']).toContain('application/x-www-form-urlencoded');
    expect(req.form).toMatchObject({ To: '+14155550100', From: '+14155550199', Body: 'Your code is 123456' });
    const auth = Buffer.from(String(req.headers.authorization).replace(/^Basic /, ''), 'base64').toString();
    expect(auth).toBe(`${SID}:${TOKEN}`);
  });

  it("uses the payload's from_number when it has one", async () => {
    await make().send({ ...payload, from_number: '+442071838750' }, ctx());
    expect(fake.messages[0].from).toBe('+442071838750');
  });

  it('keeps a path prefix of baseUrl', async () => {
    const provider = make({ baseUrl: `${fake.url}/prefix` });
    await expect(provider.send(payload, ctx())).rejects.toThrow('twilio: HTTP 404 code 20404');
    expect(fake.requests[0].path).toBe(`/prefix/2010-04-01/Accounts/${SID}/Messages.json`);
  });

  it('throws with status, code and message when Twilio answers 500', async () => {
    fake.failNext(1, 500, 'carrier unreachable');
    await expect(make().send(payload, ctx())).rejects.toThrow('twilio: HTTP 500 code 20500: carrier unreachable');
    expect(fake.messages).toHaveLength(0);
  });

  it('a 429 with Retry-After is a ThrottledError for that many seconds; nothing is sent', async () => {
    fake.throttleNext(1, 17);
    const err = await make()
      .send(payload, ctx())
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ThrottledError);
    expect(err).toMatchObject({ retryAfterSeconds: 17, message: 'twilio: HTTP 429 code 20429: Too Many Requests' });
    expect(fake.messages).toHaveLength(0);
    // Without Retry-After: a second.
    fake.throttleNext(1);
    expect(
      await make()
        .send(payload, ctx())
        .catch((e: unknown) => e),
    ).toMatchObject({ retryAfterSeconds: 1 });
    expect(await make().send(payload, ctx())).toMatchObject({ provider: 'twilio' });
  });

  it('throws on a 400 from Twilio', async () => {
    fake.failNext(1, 400, "The 'To' number +14155550100 is not a valid phone number.");
    await expect(make().send(payload, ctx())).rejects.toThrow(/twilio: HTTP 400 .*not a valid phone number/);
  });

  it('throws on wrong credentials without showing the token', async () => {
    const err = await make({ authToken: 'wrong-token-value' })
      .send(payload, ctx())
      .catch((e: Error) => e);
    expect((err as Error).message).toMatch(/twilio: HTTP 401 code 20003: Authenticate/);
    expect((err as Error).message).not.toContain('wrong-token-value');
  });

  it('throws when the server cannot be reached', async () => {
    await expect(make({ baseUrl: 'http://127.0.0.1:1' }).send(payload, ctx())).rejects.toThrow(
      /twilio: request failed/,
    );
  });

  it('rejects when the signal aborts', async () => {
    const ac = new AbortController();
    ac.abort(new Error('shutdown'));
    await expect(make().send(payload, ctx(ac.signal))).rejects.toThrow('twilio: aborted (shutdown)');
    expect(fake.requests).toHaveLength(0);
  });

  it('refuses an account SID that does not start with AC', () => {
    expect(() => make({ accountSid: `XX${'0'.repeat(32)}` })).toThrow('accountSid must be "AC"');
    expect(() => make({ baseUrl: 'not a url' })).toThrow('baseUrl is not a valid URL');
  });
});
