import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { providersFromEnv, ProviderConfigError } from '@org/providers';
import { startFakeResend, startFakeTwilio, type FakeResend, type FakeTwilio } from '@org/providers/testing';
import { ctx, memoryLogger } from './helpers.ts';

const SID = `AC${'a'.repeat(32)}`;
const full = {
  RESEND_API_KEY: 're_secret_value_1',
  TWILIO_ACCOUNT_SID: SID,
  TWILIO_AUTH_TOKEN: 'twilio_secret_value_2',
  TWILIO_FROM_NUMBER: '+14155550199',
  FILES_SERVICE_URL: 'http://127.0.0.1:8787',
  FILES_SERVICE_TOKEN: 'files_secret_value_3',
};
const secrets = [full.RESEND_API_KEY, full.TWILIO_AUTH_TOKEN, full.FILES_SERVICE_TOKEN];

let resend: FakeResend;
let twilio: FakeTwilio;
beforeAll(async () => {
  resend = await startFakeResend();
  twilio = await startFakeTwilio();
});
afterAll(async () => {
  await resend?.close();
  await twilio?.close();
});

describe('providersFromEnv', () => {
  it('picks local mode for every channel with an empty env, and warns loudly', () => {
    const log = memoryLogger();
    const p = providersFromEnv({}, log);
    expect([p.email.name, p.sms.name, p.file_delete.name]).toEqual(['local-outbox', 'local-outbox', 'local-storage']);
    const warnings = log.lines.filter((l) => l.level === 'warn').map((l) => l.msg);
    expect(warnings).toHaveLength(3);
    expect(warnings[0]).toMatch(
      /^email provider: LOCAL OUTBOX mode, no email leaves this machine.*set RESEND_API_KEY/i,
    );
    expect(warnings[1]).toMatch(/^sms provider: LOCAL OUTBOX mode.*TWILIO_ACCOUNT_SID/);
    expect(warnings[2]).toMatch(/^file_delete provider: LOCAL STORAGE mode.*FILES_SERVICE_URL/);
  });

  it('warns only for the channels the worker serves (WORKER_ROLE), still building every provider', () => {
    const log = memoryLogger();
    const p = providersFromEnv({}, log, ['product_resync', 'sms']);
    expect([p.email.name, p.sms.name, p.file_delete.name]).toEqual(['local-outbox', 'local-outbox', 'local-storage']);
    expect(log.lines.map((l) => l.msg)).toEqual([expect.stringMatching(/^sms provider: LOCAL OUTBOX mode/)]);
    const none = memoryLogger();
    providersFromEnv({}, none, ['product_resync']);
    expect(none.lines).toEqual([]);
  });

  it('treats empty strings as unset', () => {
    const p = providersFromEnv({ RESEND_API_KEY: '', TWILIO_ACCOUNT_SID: ' ' }, memoryLogger());
    expect(p.email.name).toBe('local-outbox');
    expect(p.sms.name).toBe('local-outbox');
  });

  it('honours LOCAL_OUTBOX_DIR and LOCAL_STORAGE_DIR', () => {
    const p = providersFromEnv({ LOCAL_OUTBOX_DIR: '/tmp/ob/', LOCAL_STORAGE_DIR: '/tmp/st' }, memoryLogger());
    expect((p.email as unknown as { dir: string }).dir).toBe('/tmp/ob/email');
    expect((p.sms as unknown as { dir: string }).dir).toBe('/tmp/ob/sms');
    expect((p.file_delete as unknown as { storageRoot: string }).storageRoot).toBe('/tmp/st');
  });

  it('picks the real providers when their variables are set, logging no secret', () => {
    const log = memoryLogger();
    const p = providersFromEnv(full, log);
    expect([p.email.name, p.sms.name, p.file_delete.name]).toEqual(['resend', 'twilio', 'files-service']);
    expect(log.lines.filter((l) => l.level === 'warn')).toEqual([]);
    const logged = JSON.stringify(log.lines);
    for (const s of secrets) expect(logged).not.toContain(s);
  });

  it('the real providers from env work against the fakes', async () => {
    const p = providersFromEnv(
      { ...full, RESEND_BASE_URL: resend.url, TWILIO_BASE_URL: twilio.url, EMAIL_FROM: 'App <app@example.com>' },
      memoryLogger(),
    );
    await p.email.send({ from_address: 'x@example.com', to_address: 'a@example.com', subject: 's', html: 'h' }, ctx());
    await p.sms.send({ to_number: '+14155550100', body: 'b' }, ctx());
    expect(resend.emails).toHaveLength(1);
    expect(twilio.messages[0]).toMatchObject({ accountSid: SID, from: '+14155550199' });
  });

  it.each([
    [{ TWILIO_ACCOUNT_SID: `XX${'a'.repeat(32)}` }, /TWILIO_ACCOUNT_SID: must start with AC/],
    [{ RESEND_BASE_URL: 'not a url' }, /RESEND_BASE_URL: must be an http\(s\) URL/],
    [{ TWILIO_BASE_URL: 'ftp://example.com' }, /TWILIO_BASE_URL: must be an http\(s\) URL/],
    [{ FILES_SERVICE_URL: 'localhost' }, /FILES_SERVICE_URL: must be an http\(s\) URL/],
    [{ TWILIO_FROM_NUMBER: '0123' }, /TWILIO_FROM_NUMBER: must be an E\.164 number/],
  ])('throws naming the variable for %j', (override, message) => {
    const err = (() => {
      try {
        providersFromEnv({ ...full, ...override }, memoryLogger());
      } catch (e) {
        return e as Error;
      }
      throw new Error('did not throw');
    })();
    expect(err).toBeInstanceOf(ProviderConfigError);
    expect(err.message).toMatch(message);
    for (const s of secrets) expect(err.message).not.toContain(s);
  });

  it('throws for a half-configured channel instead of falling back silently', () => {
    expect(() => providersFromEnv({ TWILIO_ACCOUNT_SID: SID, TWILIO_AUTH_TOKEN: 'x' }, memoryLogger())).toThrow(
      /TWILIO_FROM_NUMBER: required for Twilio SMS because TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN are set/,
    );
    expect(() => providersFromEnv({ FILES_SERVICE_URL: 'http://127.0.0.1:1' }, memoryLogger())).toThrow(
      /FILES_SERVICE_TOKEN: required for the files service because FILES_SERVICE_URL is set/,
    );
    expect(() => providersFromEnv({ RESEND_BASE_URL: 'http://127.0.0.1:1' }, memoryLogger())).toThrow(
      /RESEND_API_KEY: required for Resend email because RESEND_BASE_URL is set/,
    );
  });
});
