// The files service's configuration: validated with zod, from an object or from env.
import { readFileSync } from 'node:fs';
import { z } from 'zod';

const BUCKET = /^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$/;

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
  buckets: z
    .array(z.string().regex(BUCKET, 'must be bucket names (lower-case letters, digits, ".", "_", "-")'))
    .min(1, 'must name at least one bucket'),
  credentials: serviceAccountSchema,
  /** GCS endpoint for the SDK and the signed URLs (an emulator or fake); default Google's. */
  apiEndpoint: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }).optional(),
  /** Lifetime of a signed URL in seconds (default 300, at most 7 days). */
  urlTtlSeconds: z.number().int().min(1).max(604800).default(300),
  port: z.number().int().min(0).max(65535).default(8787),
  host: z.string().min(1).default('127.0.0.1'),
});
export type FilesServiceConfig = z.input<typeof filesServiceConfigSchema>;
export type ResolvedFilesServiceConfig = z.output<typeof filesServiceConfigSchema>;

/** Thrown for a bad configuration: one line per bad value in `problems`. */
export class FilesServiceConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`files service: invalid configuration:\n  ${problems.join('\n  ')}`);
    this.name = 'FilesServiceConfigError';
  }
}

export const NO_CREDENTIALS_MESSAGE =
  'no GCS service-account credentials configured; set GCS_CREDENTIALS_JSON (the key JSON) or GOOGLE_APPLICATION_CREDENTIALS (its path). Without the files service the worker deletes files in local mode.';

/** Validates a config object; throws FilesServiceConfigError. */
export function resolveConfig(config: FilesServiceConfig): ResolvedFilesServiceConfig {
  if (!config || !(config as { credentials?: unknown }).credentials) throw new FilesServiceConfigError([NO_CREDENTIALS_MESSAGE]);
  const parsed = filesServiceConfigSchema.safeParse(config);
  if (!parsed.success) {
    throw new FilesServiceConfigError(parsed.error.issues.map((i) => `${i.path.join('.') || 'config'}: ${i.message}`));
  }
  return parsed.data;
}

const envNames: Record<string, string> = {
  token: 'FILES_SERVICE_TOKEN',
  databaseUrl: 'FILES_SERVICE_DATABASE_URL',
  buckets: 'FILES_BUCKETS',
  apiEndpoint: 'GCS_API_ENDPOINT',
  urlTtlSeconds: 'FILES_SIGNED_URL_TTL_SECONDS',
  port: 'FILES_SERVICE_PORT',
  host: 'FILES_SERVICE_HOST',
};

const blank = (v: string | undefined) => (v === undefined || v.trim() === '' ? undefined : v.trim());

/**
 * The configuration from environment variables:
 * FILES_SERVICE_TOKEN, FILES_SERVICE_DATABASE_URL (the worker role's postgres:// URL),
 * FILES_BUCKETS (comma separated), GCS_CREDENTIALS_JSON or
 * GOOGLE_APPLICATION_CREDENTIALS (path of the JSON key), GCS_API_ENDPOINT (optional),
 * FILES_SIGNED_URL_TTL_SECONDS (default 300), FILES_SERVICE_PORT (default 8787),
 * FILES_SERVICE_HOST (default 127.0.0.1).
 * Throws FilesServiceConfigError naming each bad variable (never its value).
 */
export function configFromEnv(env: Record<string, string | undefined>): ResolvedFilesServiceConfig {
  const problems: string[] = [];
  let credentials: unknown;
  const json = blank(env.GCS_CREDENTIALS_JSON);
  const path = blank(env.GOOGLE_APPLICATION_CREDENTIALS);
  const credVar = json !== undefined ? 'GCS_CREDENTIALS_JSON' : 'GOOGLE_APPLICATION_CREDENTIALS';
  if (json !== undefined) {
    try {
      credentials = JSON.parse(json);
    } catch {
      problems.push('GCS_CREDENTIALS_JSON: is not valid JSON');
    }
  } else if (path !== undefined) {
    try {
      credentials = JSON.parse(readFileSync(path, 'utf8'));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      problems.push(`GOOGLE_APPLICATION_CREDENTIALS: cannot read a JSON key at ${path}${code ? ` (${code})` : ' (not valid JSON)'}`);
    }
  } else {
    problems.push(NO_CREDENTIALS_MESSAGE);
  }

  const intVar = (name: string): number | undefined => {
    const v = blank(env[name]);
    if (v === undefined) return undefined;
    if (!/^\d+$/.test(v)) {
      problems.push(`${name}: must be a whole number`);
      return undefined;
    }
    return Number(v);
  };
  const token = blank(env.FILES_SERVICE_TOKEN);
  const buckets = blank(env.FILES_BUCKETS);
  const databaseUrl = blank(env.FILES_SERVICE_DATABASE_URL);
  if (token === undefined) problems.push('FILES_SERVICE_TOKEN: is required (the bearer token callers send)');
  if (databaseUrl === undefined) problems.push('FILES_SERVICE_DATABASE_URL: is required (the database it asks before signing)');
  if (buckets === undefined) problems.push('FILES_BUCKETS: is required (comma-separated bucket names)');
  const raw = {
    token,
    databaseUrl,
    buckets: buckets?.split(',').map((b) => b.trim()).filter((b) => b !== ''),
    credentials,
    apiEndpoint: blank(env.GCS_API_ENDPOINT),
    urlTtlSeconds: intVar('FILES_SIGNED_URL_TTL_SECONDS'),
    port: intVar('FILES_SERVICE_PORT'),
    host: blank(env.FILES_SERVICE_HOST),
  };
  const parsed = filesServiceConfigSchema.safeParse(raw);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const [first, ...rest] = issue.path;
      if (first === 'credentials') {
        if (credentials === undefined) continue; // already reported
        problems.push(`${credVar}: ${rest.length ? `${rest.join('.')}: ` : ''}${issue.message}`);
      } else if (
        (first === 'token' && token === undefined) ||
        (first === 'buckets' && buckets === undefined) ||
        (first === 'databaseUrl' && databaseUrl === undefined)
      ) {
        continue; // already reported
      } else {
        problems.push(`${envNames[String(first)] ?? String(first)}: ${issue.message}`);
      }
    }
  }
  if (problems.length > 0) throw new FilesServiceConfigError([...new Set(problems)]);
  return parsed.data!;
}
