// Picks each channel's provider from environment variables: the real provider when its
// credentials are set, otherwise local mode, loudly logged.
import { z } from 'zod';
import { defineConfig, httpUrl, ConfigError } from '@org/config';
import type { EmailPayload, FileDeletePayload, Provider, SmsPayload } from '@org/contracts';
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

const e164 = z
  .string()
  .trim()
  .regex(/^\+[1-9][0-9]{6,14}$/, 'must be an E.164 number such as +14155550100');
const nonEmpty = z.string().trim().min(1);

/** The environment variables `providersFromEnv` reads (read by @org/config; none is required). */
export const PROVIDERS_CONFIG = defineConfig({
  program: 'providers',
  summary: 'Providers of the email, sms and file_delete task types; a channel without credentials runs in local mode.',
  settings: {
    RESEND_API_KEY: { env: 'RESEND_API_KEY', secret: true, help: 'send email through Resend', schema: nonEmpty },
    RESEND_BASE_URL: { env: 'RESEND_BASE_URL', help: 'Resend API URL (a fake in tests)', schema: httpUrl },
    EMAIL_FROM: {
      env: 'EMAIL_FROM',
      help: 'default sender',
      schema: z.string().trim().min(3, 'must be a sender such as "App <noreply@example.com>"').max(320),
    },
    TWILIO_ACCOUNT_SID: {
      env: 'TWILIO_ACCOUNT_SID',
      help: 'send SMS through Twilio (with the next two)',
      schema: z
        .string()
        .trim()
        .regex(/^AC[0-9a-zA-Z]{32}$/, 'must start with AC followed by 32 letters or digits'),
    },
    TWILIO_AUTH_TOKEN: { env: 'TWILIO_AUTH_TOKEN', secret: true, help: 'Twilio auth token', schema: nonEmpty },
    TWILIO_FROM_NUMBER: { env: 'TWILIO_FROM_NUMBER', help: 'sender number, E.164', schema: e164 },
    TWILIO_BASE_URL: { env: 'TWILIO_BASE_URL', help: 'Twilio API URL (a fake in tests)', schema: httpUrl },
    FILES_SERVICE_URL: { env: 'FILES_SERVICE_URL', help: 'delete files through the files service', schema: httpUrl },
    FILES_SERVICE_TOKEN: {
      env: 'FILES_SERVICE_TOKEN',
      secret: true,
      help: "the files service's bearer token",
      schema: nonEmpty,
    },
    LOCAL_OUTBOX_DIR: {
      env: 'LOCAL_OUTBOX_DIR',
      defaultText: '.data/outbox',
      help: 'local mode: emails and SMS are written here',
      schema: nonEmpty,
    },
    LOCAL_STORAGE_DIR: {
      env: 'LOCAL_STORAGE_DIR',
      defaultText: '.data/storage',
      help: 'local mode: files are deleted from here',
      schema: nonEmpty,
    },
  },
  refine(_config, report, given) {
    // A channel is configured whole or not at all: half a configuration is a mistake, not local mode.
    const requireTogether = (channel: string, names: ProviderVar[], extra: ProviderVar[] = []) => {
      const set = names.filter(given);
      const extraSet = extra.filter(given);
      if (set.length + extraSet.length === 0 || set.length === names.length) return;
      const others = [...set, ...extraSet].join(', ');
      for (const n of names) {
        if (!given(n))
          report(n, `required for ${channel} because ${others} ${others.includes(',') ? 'are' : 'is'} set`);
      }
    };
    requireTogether('Resend email', ['RESEND_API_KEY'], ['RESEND_BASE_URL']);
    requireTogether(
      'Twilio SMS',
      ['TWILIO_ACCOUNT_SID', 'TWILIO_AUTH_TOKEN', 'TWILIO_FROM_NUMBER'],
      ['TWILIO_BASE_URL'],
    );
    requireTogether('the files service', ['FILES_SERVICE_URL', 'FILES_SERVICE_TOKEN']);
  },
});
type ProviderVar =
  | 'RESEND_API_KEY'
  | 'RESEND_BASE_URL'
  | 'TWILIO_ACCOUNT_SID'
  | 'TWILIO_AUTH_TOKEN'
  | 'TWILIO_FROM_NUMBER'
  | 'TWILIO_BASE_URL'
  | 'FILES_SERVICE_URL'
  | 'FILES_SERVICE_TOKEN';

/** The environment variables `providersFromEnv` reads. */
export const PROVIDER_ENV_VARS = Object.values(PROVIDERS_CONFIG.settings).map((s) => s.env);

/** Thrown for bad or incomplete provider configuration (ConfigError of @org/config); `problems` has one line per variable. */
export { ConfigError as ProviderConfigError };

/**
 * The providers for `email`, `sms` and `file_delete`:
 * - email: Resend when RESEND_API_KEY is set (RESEND_BASE_URL, EMAIL_FROM optional);
 * - sms: Twilio when TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN and TWILIO_FROM_NUMBER are set
 *   (TWILIO_BASE_URL optional);
 * - file_delete: the files service when FILES_SERVICE_URL and FILES_SERVICE_TOKEN are set;
 * otherwise that channel's local provider (outbox files under LOCAL_OUTBOX_DIR, default
 * `<repo>/.data/outbox`; file deletion under LOCAL_STORAGE_DIR, default
 * `<repo>/.data/storage`), with a warning. Throws ProviderConfigError naming every bad
 * variable (never its value) and every half-configured channel. Each channel's choice is
 * logged only for the channels in `serves` (default: all three), so that a worker started
 * for other task types (WORKER_ROLE) does not announce a local mode it never uses.
 */
export function providersFromEnv(
  env: Record<string, string | undefined>,
  logger: ProvidersLogger,
  serves: readonly string[] | null = null,
): Providers {
  const quiet: ProvidersLogger = { info: () => {}, warn: () => {} };
  const logFor = (channel: string): ProvidersLogger => (serves === null || serves.includes(channel) ? logger : quiet);
  const read = PROVIDERS_CONFIG.read(env);
  if (read === 'help') throw new Error('unreachable: no argv');
  const e = read;

  const outboxRoot = e.LOCAL_OUTBOX_DIR;
  let log = logFor('email');
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
  log = logFor('sms');
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
  log = logFor('file_delete');
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
