/**
 * API configuration from the environment, validated with zod. Every bad value gets its
 * own message; the CLI prints them all and exits 2.
 */
import { z } from 'zod';

export interface ApiConfig {
  /** postgres:// URL of the API role (queue_api_user). */
  databaseUrl: string;
  /** Bearer token every mutating request must present. */
  apiToken: string;
  /** Interface to bind; 127.0.0.1 unless configured. */
  host: string;
  port: number;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** Database pool size. */
  poolSize: number;
}

interface Setting {
  env: string;
  key: keyof ApiConfig;
  help: string;
  schema: z.ZodType;
  default?: string;
}

const int = (min: number, max: number) =>
  z
    .string()
    .trim()
    .regex(/^\d+$/, `must be a whole number between ${min} and ${max}`)
    .transform(Number)
    .pipe(z.number().int().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));

/** Every environment variable the API reads (the deployment test checks manifests against it). */
export const API_SETTINGS: Setting[] = [
  {
    env: 'DATABASE_URL',
    key: 'databaseUrl',
    help: 'postgres:// URL of the API role, queue_api_user (required)',
    schema: z
      .string()
      .trim()
      .refine((v) => /^postgres(ql)?:\/\//.test(v) && URL.canParse(v), 'must be a postgres:// or postgresql:// URL'),
  },
  {
    env: 'API_TOKEN',
    key: 'apiToken',
    help: 'bearer token for mutating requests, at least 16 characters (required)',
    schema: z.string().trim().min(16, 'must be at least 16 characters').max(1000, 'must be at most 1000 characters'),
  },
  {
    env: 'API_HOST',
    key: 'host',
    help: 'interface to bind (default 127.0.0.1)',
    default: '127.0.0.1',
    schema: z
      .string()
      .trim()
      .min(1, 'must not be empty')
      .regex(/^[A-Za-z0-9.:\-[\]]+$/, 'must be a host name or an IP address'),
  },
  { env: 'API_PORT', key: 'port', help: 'port to listen on (default 3000; 0 picks a free one)', default: '3000', schema: int(0, 65535) },
  {
    env: 'LOG_LEVEL',
    key: 'logLevel',
    help: 'fatal, error, warn, info, debug, trace or silent (default info)',
    default: 'info',
    schema: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      error: 'must be one of fatal, error, warn, info, debug, trace, silent',
    }),
  },
  { env: 'API_DB_POOL_SIZE', key: 'poolSize', help: 'database connections (default 10)', default: '10', schema: int(1, 100) },
];

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** Reads and validates the settings; throws ConfigError listing every bad or missing value. */
export function loadApiConfig(env: NodeJS.ProcessEnv): ApiConfig {
  const problems: string[] = [];
  const config: Record<string, unknown> = {};
  for (const setting of API_SETTINGS) {
    const raw = env[setting.env] === undefined || env[setting.env] === '' ? setting.default : env[setting.env];
    if (raw === undefined) {
      problems.push(`${setting.env}: is required (${setting.help})`);
      continue;
    }
    const parsed = setting.schema.safeParse(raw);
    if (parsed.success) config[setting.key] = parsed.data;
    else problems.push(`${setting.env}: ${parsed.error.issues.map((i) => i.message).join('; ')}`);
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return config as unknown as ApiConfig;
}

export function helpText(): string {
  return [
    'queue-api: the operations REST API, dashboard and /metrics. Settings (environment):',
    ...API_SETTINGS.map((s) => `  ${s.env.padEnd(18)} ${s.help}`),
    '',
  ].join('\n');
}
