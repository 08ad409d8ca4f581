// @org/files-service: issues V4 signed GCS DELETE URLs (see app.ts for the HTTP API).
export {
  createFilesService,
  implausibleObjectKeyReason,
  NOT_SCHEDULED_CODE,
  SIGNED_DELETE_URLS_PATH,
  UNKNOWN_OBJECT_CODE,
  type FilesServiceOptions,
} from './app.js';
export {
  configFromEnv,
  commandConfig,
  FILES_CONFIG,
  resolveConfig,
  filesServiceConfigSchema,
  FilesServiceConfigError,
  NO_CREDENTIALS_MESSAGE,
  type FilesServiceConfig,
  type ResolvedFilesServiceConfig,
  type ServiceAccountCredentials,
  type FilesServiceEnvConfig,
} from './config.js';
