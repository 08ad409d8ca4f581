// The files service's configuration: validated with zod, from an object (createFilesService)
// or from environment variables (FILES_CONFIG, one table read by @org/config).
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import {
  commaList,
  ConfigError,
  defineConfig,
  httpUrl,
  issueText,
  logSettings,
  postgresUrl,
  wholeNumber,
  type LogFormat,
  type LogLevel,
} from '@org/config';

const BUCKET = /^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$/;
const BUCKET_MESSAGE = 'must be bucket names (lower-case letters, digits, ".", "_", "-")';

export const serviceAccountSchema = z.object({
  client_email: z.email('client_email must be an email address'),
  private_key: z.string().includes('PRIVATE KEY', { message: 'private_key must be a PEM private key' }),
  project_id: z.string().min(1, 'project_id must not be empty'),
});
/** The fields of a service-account JSON key the service uses. */
export type ServiceAccountCredentials = z.infer<typeof serviceAccountSchema>;

export const filesServiceConfigSchema = z.object({
  /** The bearer token callers must send. At least 16 characters. */
  token: z.string().min(16, 'must be at least 16 characters'),
  /**
   * postgres:// URL the service asks before signing (the worker role's): it signs only
   * for objects the database has scheduled for deletion (files.check_file_delete_signing).
   */
  databaseUrl: z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL'),
  /** The buckets URLs may be signed for. */
  buckets: z.array(z.string().regex(BUCKET, BUCKET_MESSAGE)).min(1, 'must name at least one bucket'),
  credentials: serviceAccountSchema,
  /** GCS endpoint for the SDK and the signed URLs (an emulator or fake); default Google's. */
  apiEndpoint: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }).optional(),
  /** Longest lifetime of a signed URL in seconds (default 300, at most 7 days); never past the attempt's lease. */
  urlTtlSeconds: z.number().int().min(1).max(604800).default(300),
  port: z.number().int().min(0).max(65535).default(8787),
  host: z.string().min(1).default('127.0.0.1'),
});
export type FilesServiceConfig = z.input<typeof filesServiceConfigSchema>;
export type ResolvedFilesServiceConfig = z.output<typeof filesServiceConfigSchema>;

/** Thrown for a bad configuration (ConfigError of @org/config): one line per bad value in `problems`. */
export { ConfigError as FilesServiceConfigError };

export const NO_CREDENTIALS_MESSAGE =
  'no GCS service-account credentials configured; set GCS_CREDENTIALS_JSON (the key JSON) or GOOGLE_APPLICATION_CREDENTIALS (its path). Without the files service the worker deletes files in local mode.';

/** Validates a config object; throws ConfigError. */
export function resolveConfig(config: FilesServiceConfig): ResolvedFilesServiceConfig {
  if (!config || !(config as { credentials?: unknown }).credentials) throw new ConfigError([NO_CREDENTIALS_MESSAGE]);
  const parsed = filesServiceConfigSchema.safeParse(config);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${i.path.join('.') || 'config'}: ${i.message}`));
  }
  return parsed.data;
}

/** A JSON key from a string; the key's own problems are named by field. */
const keyJson = z
  .string()
  .transform((text, ctx) => {
    try {
      return JSON.parse(text) as unknown;
    } catch {
      ctx.addIssue({ code: 'custom', message: 'is not valid JSON' });
      return z.NEVER;
    }
  })
  .pipe(serviceAccountSchema);

/** A JSON key from a file. */
const keyFile = z
  .string()
  .trim()
  .transform((path, ctx) => {
    try {
      return JSON.parse(readFileSync(path, 'utf8')) as unknown;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      ctx.addIssue({ code: 'custom', message: `cannot read a JSON key${code ? ` (${code})` : ' (not valid JSON)'}` });
      return z.NEVER;
    }
  })
  .pipe(serviceAccountSchema);

/** The environment variables of the files service (`files-service --help` prints this table). */
export const FILES_CONFIG = defineConfig({
  program: 'files-service',
  summary: 'Issues V4 signed GCS DELETE URLs to the worker.',
  settings: {
    token: {
      env: 'FILES_SERVICE_TOKEN',
      required: true,
      secret: true,
      help: 'the bearer token callers send, at least 16 characters',
      schema: z.string().trim().min(16, 'must be at least 16 characters'),
    },
    databaseUrl: {
      env: 'FILES_SERVICE_DATABASE_URL',
      required: true,
      secret: true,
      help: "the database it asks before signing: the worker role's postgres:// URL",
      schema: postgresUrl,
    },
    buckets: {
      env: 'FILES_BUCKETS',
      required: true,
      help: 'the buckets URLs may be signed for, comma separated',
      schema: commaList(z.string().regex(BUCKET, BUCKET_MESSAGE), 'must name at least one bucket'),
    },
    credentialsJson: {
      env: 'GCS_CREDENTIALS_JSON',
      secret: true,
      help: 'the service-account key JSON (client_email, private_key, project_id); or:',
      schema: keyJson,
    },
    credentialsPath: {
      env: 'GOOGLE_APPLICATION_CREDENTIALS',
      help: 'the path of that JSON key',
      schema: keyFile,
    },
    apiEndpoint: {
      env: 'GCS_API_ENDPOINT',
      help: "GCS endpoint (an emulator or fake); default Google's",
      schema: httpUrl,
    },
    urlTtlSeconds: {
      env: 'FILES_SIGNED_URL_TTL_SECONDS',
      default: '300',
      help: "longest lifetime of a signed URL in seconds, at most 7 days; never past the deleting attempt's lease",
      schema: wholeNumber(1, 604800),
    },
    port: { env: 'FILES_SERVICE_PORT', default: '8787', help: 'port to listen on', schema: wholeNumber(0, 65535) },
    host: {
      env: 'FILES_SERVICE_HOST',
      default: '127.0.0.1',
      help: 'interface to bind',
      schema: z.string().trim().min(1, 'must not be empty'),
    },
    ...logSettings(false),
  },
  refine(_config, report, given) {
    if (!given('credentialsJson') && !given('credentialsPath')) report(null, NO_CREDENTIALS_MESSAGE);
  },
});

/** The configuration read from the environment, with the logging settings. */
export type FilesServiceEnvConfig = ResolvedFilesServiceConfig & { logLevel: LogLevel; logFormat: LogFormat };

/**
 * The configuration from environment variables (see FILES_CONFIG; GCS_CREDENTIALS_JSON wins
 * over GOOGLE_APPLICATION_CREDENTIALS). Throws ConfigError naming each bad variable (never
 * a secret's value).
 */
export function configFromEnv(env: Record<string, string | undefined>): FilesServiceEnvConfig {
  const c = FILES_CONFIG.read(env);
  if (c === 'help') throw new Error('unreachable: no argv');
  return toEnvConfig(c);
}

function toEnvConfig(c: Exclude<ReturnType<typeof FILES_CONFIG.read>, 'help'>): FilesServiceEnvConfig {
  const { credentialsJson, credentialsPath, logLevel, logFormat, ...rest } = c;
  const parsed = filesServiceConfigSchema.safeParse({ ...rest, credentials: credentialsJson ?? credentialsPath });
  // Every field was validated by its own setting; this only applies the object's shape.
  if (!parsed.success) throw new ConfigError([issueText(parsed.error)]);
  return { ...parsed.data, logLevel, logFormat };
}

/** For the command line: the configuration, or the exit code after printing help (0) or the problems (2). */
export function commandConfig(argv: string[], env: Record<string, string | undefined>): FilesServiceEnvConfig | number {
  const c = FILES_CONFIG.command(argv, env);
  return typeof c === 'number' ? c : toEnvConfig(c);
}
