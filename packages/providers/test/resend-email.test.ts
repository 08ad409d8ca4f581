import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ThrottledError } from '@org/contracts';
import { createResendEmailProvider } from '@org/providers';
import { startFakeResend, type FakeResend } from '@org/providers/testing';
import { ctx } from './helpers.ts';

const API_KEY = 're_test_secret_key_123456';
let fake: FakeResend;
beforeAll(async () => {
  fake = await startFakeResend({ apiKey: API_KEY });
});
afterAll(async () => {
  await fake?.close();
});
beforeEach(() => fake.reset());

const payload = {
  message_id: 7,
  idempotency_key: 'attempt-42',
  from_address: 'App <noreply@example.com>',
  to_address: 'alice@example.com',
  subject: 'Hello',
  html: '<p>Hi</p>',
  text: 'Hi',
  reply_to: 'support@example.com',
};

describe('resend email provider', () => {
  it('sends through the real SDK with the payload fields and the Idempotency-Key', async () => {
    const provider = createResendEmailProvider({ apiKey: API_KEY, baseUrl: fake.url });
    expect(provider.name).toBe('resend');
    expect(provider.payloadSchema.parse(payload)).toEqual(payload);
    const result = await provider.send(payload, ctx());
    expect(result).toEqual({ provider: 'resend', id: fake.emails[0].id });
    expect(fake.requests).toHaveLength(1);
    const req = fake.requests[0];
    expect(req.method).toBe('POST');
    expect(req.path).toBe('/emails');
    expect(req.headers['idempotency-key']).toBe('attempt-42');
    expect(req.headers.authorization).toBe(`Bearer ${API_KEY}`);
    expect(req.json).toMatchObject({
      from: 'App <noreply@example.com>',
      to: 'alice@example.com',
      subject: 'Hello',
      html: '<p>Hi</p>',
      text: 'Hi',
      reply_to: 'support@example.com',
    });
  });

  it('sends one message after another on connections kept alive', async () => {
    const provider = createResendEmailProvider({ apiKey: API_KEY, baseUrl: fake.url });
    for (let i = 1; i <= 5; i++) await provider.send({ ...payload, idempotency_key: `a-${i}` }, ctx());
    const connections = fake.requests.map((r) => r.connection);
    expect(connections).toHaveLength(5);
    // A connection closed after each answer would give five.
    expect(new Set(connections).size).toBeLessThan(3);
  });

  it('sends no Idempotency-Key when the payload has none', async () => {
    const provider = createResendEmailProvider({ apiKey: API_KEY, baseUrl: fake.url });
    const { idempotency_key: _, ...rest } = payload;
    await provider.send(rest, ctx());
    expect(fake.requests[0].headers['idempotency-key']).toBeUndefined();
  });

  it('a retry with the same idempotency key gets the same id and sends once', async () => {
    const provider = createResendEmailProvider({ apiKey: API_KEY, baseUrl: fake.url });
    const a = await provider.send(payload, ctx());
    const b = await provider.send(payload, ctx());
    expect(b).toEqual(a);
    expect(fake.emails).toHaveLength(1);
  });

  it('throws with status and message when Resend answers 500', async () => {
    const provider = createResendEmailProvider({ apiKey: API_KEY, baseUrl: fake.url });
    fake.failNext(1, 500, 'database on fire');
    await expect(provider.send(payload, ctx())).rejects.toThrow('resend: HTTP 500 application_error: database on fire');
    expect(fake.emails).toHaveLength(0);
  });

  it('a 429 with Retry-After is a ThrottledError for that many seconds; nothing is sent', async () => {
    const provider = createResendEmailProvider({ apiKey: API_KEY, baseUrl: fake.url });
    fake.throttleNext(1, 42, 'Too many requests. You can only make 2 requests per second.');
    const err = await provider.send(payload, ctx()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ThrottledError);
    expect(err).toMatchObject({
      retryAfterSeconds: 42,
      message: 'resend: HTTP 429 rate_limit_exceeded: Too many requests. You can only make 2 requests per second.',
    });
    expect(fake.emails).toHaveLength(0);
    // Without Retry-After: a second.
    fake.throttleNext(1);
    expect(await provider.send(payload, ctx()).catch((e: unknown) => e)).toMatchObject({ retryAfterSeconds: 1 });
    // The next call goes through.
    expect(await provider.send(payload, ctx())).toMatchObject({ provider: 'resend' });
  });

  it('throws with status and message when Resend answers 422', async () => {
    const provider = createResendEmailProvider({ apiKey: API_KEY, baseUrl: fake.url });
    fake.failNext(1, 422, 'Invalid `to` field.');
    await expect(provider.send(payload, ctx())).rejects.toThrow(
      'resend: HTTP 422 validation_error: Invalid `to` field.',
    );
  });

  it('throws on a wrong API key without showing the key', async () => {
    const provider = createResendEmailProvider({ apiKey: 're_wrong_key_abcdef', baseUrl: fake.url });
    const err = await provider.send(payload, ctx()).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/HTTP 403 invalid_api_key/);
    expect((err as Error).message).not.toContain('re_wrong_key_abcdef');
  });

  it('throws when the server cannot be reached', async () => {
    const provider = createResendEmailProvider({ apiKey: API_KEY, baseUrl: 'http://127.0.0.1:1' });
    await expect(provider.send(payload, ctx())).rejects.toThrow(/resend: .*Unable to fetch/);
  });

  it('throws at once when the signal is already aborted', async () => {
    const provider = createResendEmailProvider({ apiKey: API_KEY, baseUrl: fake.url });
    const ac = new AbortController();
    ac.abort(new Error('lease lost'));
    await expect(provider.send(payload, ctx(ac.signal))).rejects.toThrow('resend: aborted (lease lost)');
    expect(fake.requests).toHaveLength(0);
  });

  it('refuses to be created without an API key', () => {
    expect(() => createResendEmailProvider({ apiKey: '' })).toThrow('apiKey is required');
  });
});
