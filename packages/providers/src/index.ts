// @org/providers: one provider per channel behind the `Provider` interface of
// @org/contracts, plus `providersFromEnv` to pick them. Fake servers for tests are
// in '@org/providers/testing'.
export { createResendEmailProvider, type ResendEmailOptions, type ResendEmailResult } from './resend-email.js';
export { createTwilioSmsProvider, type TwilioSmsOptions, type TwilioSmsResult } from './twilio-sms.js';
export {
  createFilesServiceDeleteProvider,
  SIGNED_DELETE_URLS_PATH,
  UNKNOWN_OBJECT_CODE,
  type FilesServiceDeleteOptions,
  type FileDeleteResult,
} from './files-service-delete.js';
export {
  createLocalEmailOutboxProvider,
  createLocalSmsOutboxProvider,
  readOutbox,
  defaultOutboxDir,
  type LocalOutboxOptions,
  type LocalOutboxResult,
  type OutboxMessage,
} from './local-outbox.js';
export {
  createLocalStorageDeleteProvider,
  unsafeObjectKeyReason,
  defaultStorageRoot,
  type LocalStorageDeleteOptions,
} from './local-storage-delete.js';
export {
  providersFromEnv,
  ProviderConfigError,
  PROVIDER_ENV_VARS,
  type Providers,
  type ProvidersLogger,
} from './from-env.js';
