// Picks each channel's provider from environment variables: the real provider when its
// credentials are set, otherwise local mode, loudly logged.
import { z } from 'zod';
import type { EmailPayload, FileDeletePayload, Provider, SmsPayload } from '@org/handler-types';
import { createFilesServiceDeleteProvider } from './files-service-delete.js';
import { createLocalEmailOutboxProvider, createLocalSmsOutboxProvider } from './local-outbox.js';
import { createLocalStorageDeleteProvider } from './local-storage-delete.js';
import { createResendEmailProvider } from './resend-email.js';
import { createTwilioSmsProvider } from './twilio-sms.js';

/** A pino-compatible logger (pino's `warn(obj, msg)` / `warn(msg)`). */
export interface ProvidersLogger {
  warn(obj: unknown, msg?: string): void;
  info(obj: unknown, msg?: string): void;
}

/** One provider per channel task type. */
export interface Providers {
  email: Provider<EmailPayload>;
  sms: Provider<SmsPayload>;
  file_delete: Provider<FileDeletePayload>;
}

/** The environment variables `providersFromEnv` reads. */
export const PROVIDER_ENV_VARS = [
  'RESEND_API_KEY',
  'RESEND_BASE_URL',
  'EMAIL_FROM',
  'TWILIO_ACCOUNT_SID',
  'TWILIO_AUTH_TOKEN',
  'TWILIO_FROM_NUMBER',
  'TWILIO_BASE_URL',
  'FILES_SERVICE_URL',
  'FILES_SERVICE_TOKEN',
  'LOCAL_OUTBOX_DIR',
  'LOCAL_STORAGE_DIR',
] as const;

// An empty variable counts as unset (as in most .env files).
const opt = <T extends z.ZodType>(schema: T) =>
  z.preprocess((v) => (typeof v === 'string' && v.trim() === '' ? undefined : v), schema.optional());
const httpUrl = z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' });
const e164 = z.string().regex(/^\+[1-9][0-9]{6,14}$/, 'must be an E.164 number such as +14155550100');

const envSchema = z.object({
  RESEND_API_KEY: opt(z.string().min(1)),
  RESEND_BASE_URL: opt(httpUrl),
  EMAIL_FROM: opt(z.string().min(3, 'must be a sender such as "App <noreply@example.com>"').max(320)),
  TWILIO_ACCOUNT_SID: opt(z.string().regex(/^AC[0-9a-zA-Z]{32}$/, 'must start with AC followed by 32 letters or digits')),
  TWILIO_AUTH_TOKEN: opt(z.string().min(1)),
  TWILIO_FROM_NUMBER: opt(e164),
  TWILIO_BASE_URL: opt(httpUrl),
  FILES_SERVICE_URL: opt(httpUrl),
  FILES_SERVICE_TOKEN: opt(z.string().min(1)),
  LOCAL_OUTBOX_DIR: opt(z.string().min(1)),
  LOCAL_STORAGE_DIR: opt(z.string().min(1)),
});

/** Thrown for bad or incomplete provider configuration; `problems` has one line per variable. */
export class ProviderConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid provider configuration:\n  ${problems.join('\n  ')}`);
    this.name = 'ProviderConfigError';
  }
}

/**
 * The providers for `email`, `sms` and `file_delete`:
 * - email: Resend when RESEND_API_KEY is set (RESEND_BASE_URL, EMAIL_FROM optional);
 * - sms: Twilio when TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN and TWILIO_FROM_NUMBER are set
 *   (TWILIO_BASE_URL optional);
 * - file_delete: the files service when FILES_SERVICE_URL and FILES_SERVICE_TOKEN are set;
 * otherwise that channel's local provider (outbox files under LOCAL_OUTBOX_DIR, default
 * `<repo>/.data/outbox`; file deletion under LOCAL_STORAGE_DIR, default
 * `<repo>/.data/storage`), with a warning. Throws ProviderConfigError naming every bad
 * variable (never its value) and every half-configured channel.
 */
export function providersFromEnv(env: Record<string, string | undefined>, log: ProvidersLogger): Providers {
  const parsed = envSchema.safeParse(env);
  const problems: string[] = [];
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      problems.push(`${issue.path.join('.') || '(env)'}: ${issue.message}`);
    }
    throw new ProviderConfigError(problems);
  }
  const e = parsed.data;

  const requireTogether = (channel: string, names: (keyof typeof e)[], extra: (keyof typeof e)[] = []) => {
    const set = names.filter((n) => e[n] !== undefined);
    const anySet = set.length > 0 || extra.some((n) => e[n] !== undefined);
    if (!anySet || set.length === names.length) return;
    for (const n of names) {
      if (e[n] === undefined) {
        const others = [...set, ...extra.filter((x) => e[x] !== undefined)].join(', ');
        problems.push(`${n}: required for ${channel} because ${others} ${others.includes(',') ? 'are' : 'is'} set`);
      }
    }
  };
  requireTogether('Resend email', ['RESEND_API_KEY'], ['RESEND_BASE_URL']);
  requireTogether('Twilio SMS', ['TWILIO_ACCOUNT_SID', 'TWILIO_AUTH_TOKEN', 'TWILIO_FROM_NUMBER'], ['TWILIO_BASE_URL']);
  requireTogether('the files service', ['FILES_SERVICE_URL', 'FILES_SERVICE_TOKEN']);
  if (problems.length > 0) throw new ProviderConfigError(problems);

  const outboxRoot = e.LOCAL_OUTBOX_DIR;
  let email: Provider<EmailPayload>;
  if (e.RESEND_API_KEY) {
    email = createResendEmailProvider({
      apiKey: e.RESEND_API_KEY,
      ...(e.RESEND_BASE_URL ? { baseUrl: e.RESEND_BASE_URL } : {}),
      ...(e.EMAIL_FROM ? { defaultFrom: e.EMAIL_FROM } : {}),
    });
    log.info({ provider: 'resend', baseUrl: e.RESEND_BASE_URL ?? 'https://api.resend.com' }, 'email provider: Resend');
  } else {
    const p = createLocalEmailOutboxProvider({
      ...(outboxRoot ? { dir: `${outboxRoot.replace(/\/+$/, '')}/email` } : {}),
      ...(e.EMAIL_FROM ? { defaultFrom: e.EMAIL_FROM } : {}),
    });
    log.warn(
      { provider: 'local-outbox', channel: 'email', dir: p.dir },
      `email provider: LOCAL OUTBOX mode, no email leaves this machine; emails are written to ${p.dir}. Set RESEND_API_KEY (and optionally RESEND_BASE_URL, EMAIL_FROM) to send through Resend.`,
    );
    email = p;
  }

  let sms: Provider<SmsPayload>;
  if (e.TWILIO_ACCOUNT_SID && e.TWILIO_AUTH_TOKEN && e.TWILIO_FROM_NUMBER) {
    sms = createTwilioSmsProvider({
      accountSid: e.TWILIO_ACCOUNT_SID,
      authToken: e.TWILIO_AUTH_TOKEN,
      fromNumber: e.TWILIO_FROM_NUMBER,
      ...(e.TWILIO_BASE_URL ? { baseUrl: e.TWILIO_BASE_URL } : {}),
    });
    log.info({ provider: 'twilio', baseUrl: e.TWILIO_BASE_URL ?? 'https://api.twilio.com' }, 'sms provider: Twilio');
  } else {
    const p = createLocalSmsOutboxProvider({
      ...(outboxRoot ? { dir: `${outboxRoot.replace(/\/+$/, '')}/sms` } : {}),
    });
    log.warn(
      { provider: 'local-outbox', channel: 'sms', dir: p.dir },
      `sms provider: LOCAL OUTBOX mode, no SMS leaves this machine; messages are written to ${p.dir}. Set TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN and TWILIO_FROM_NUMBER to send through Twilio.`,
    );
    sms = p;
  }

  let file_delete: Provider<FileDeletePayload>;
  if (e.FILES_SERVICE_URL && e.FILES_SERVICE_TOKEN) {
    file_delete = createFilesServiceDeleteProvider({ serviceUrl: e.FILES_SERVICE_URL, token: e.FILES_SERVICE_TOKEN });
    log.info({ provider: 'files-service', serviceUrl: e.FILES_SERVICE_URL }, 'file_delete provider: files service');
  } else {
    const p = createLocalStorageDeleteProvider(e.LOCAL_STORAGE_DIR ? { storageRoot: e.LOCAL_STORAGE_DIR } : {});
    log.warn(
      { provider: 'local-storage', channel: 'file_delete', storageRoot: p.storageRoot },
      `file_delete provider: LOCAL STORAGE mode, no cloud storage is touched; objects are deleted from ${p.storageRoot}/<bucket>/<object_key>. Set FILES_SERVICE_URL and FILES_SERVICE_TOKEN to delete through the files service.`,
    );
    file_delete = p;
  }

  return { email, sms, file_delete };
}
