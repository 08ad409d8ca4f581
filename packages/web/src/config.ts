/**
 * API configuration: one table of environment variables, read by @org/config. Every bad
 * value gets its own line; the CLI prints them all and exits 2. `--help` comes from the
 * same table.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { API_TOKEN_USER, MAX_TOKEN, MIN_TOKEN, parseUsers, userProblems, type ApiUser } from './auth.js';
import {
  ConfigError,
  defineConfig,
  logSettings,
  postgresUrl,
  wholeNumber,
  type LogFormat,
  type LogLevel,
} from '@org/config';

export { ConfigError };

export interface ApiConfig {
  /** postgres:// URL of the API role (queue_api_user). */
  databaseUrl: string;
  /** The token of one operator named api-token (API_TOKEN); optional beside users. */
  apiToken?: string;
  /** Named users with their levels and tokens (API_USERS). */
  users?: ApiUser[];
  /** More users, read from a file (API_USERS_FILE). */
  usersFile?: ApiUser[];
  /** GET routes answer without a credential (payload search by value still needs an operator). */
  openReads?: boolean;
  /** Interface to bind; 127.0.0.1 unless configured. */
  host: string;
  port: number;
  logLevel: LogLevel;
  /** json, pretty, or auto (pretty on a terminal); default auto. */
  logFormat?: LogFormat;
  /** Database pool size. */
  poolSize: number;
  /**
   * postgres:// URL of the API role on a read replica (a streaming standby of the
   * database): every read of the API, the dashboard and /metrics goes there, changes and
   * readiness to `databaseUrl`. Unset: everything on `databaseUrl`.
   */
  readDatabaseUrl?: string;
}

export const API_CONFIG = defineConfig({
  program: 'queue-web',
  summary: 'The operations REST API, dashboard and /metrics.',
  settings: {
    databaseUrl: {
      env: 'DATABASE_URL',
      required: true,
      secret: true,
      help: 'postgres:// URL of the API role, queue_api_user',
      schema: postgresUrl,
    },
    apiToken: {
      env: 'API_TOKEN',
      secret: true,
      help: `token of one operator, the user ${API_TOKEN_USER}; at least ${MIN_TOKEN} characters`,
      schema: z
        .string()
        .trim()
        .min(MIN_TOKEN, `must be at least ${MIN_TOKEN} characters`)
        .max(MAX_TOKEN, `must be at most ${MAX_TOKEN} characters`),
    },
    users: {
      env: 'API_USERS',
      secret: true,
      help: 'users as name:level:token entries separated by commas; level read or operator',
      schema: usersSchema((text) => text),
    },
    usersFile: {
      env: 'API_USERS_FILE',
      help: 'a file of name:level:token lines (# comments), read at start',
      schema: usersSchema((path) => readFileSync(path, 'utf8')),
    },
    openReads: {
      env: 'API_OPEN_READS',
      default: 'false',
      help: 'true: GET routes answer without a credential (payload search by value still needs an operator)',
      schema: z.enum(['true', 'false'], { error: 'must be true or false' }).transform((v) => v === 'true'),
    },
    host: {
      env: 'API_HOST',
      default: '127.0.0.1',
      help: 'interface to bind',
      schema: z
        .string()
        .trim()
        .min(1, 'must not be empty')
        .regex(/^[A-Za-z0-9.:\-[\]]+$/, 'must be a host name or an IP address'),
    },
    port: {
      env: 'API_PORT',
      default: '3000',
      help: 'port to listen on (0 picks a free one)',
      schema: wholeNumber(0, 65535),
    },
    ...logSettings(false),
    poolSize: { env: 'API_DB_POOL_SIZE', default: '10', help: 'database connections', schema: wholeNumber(1, 100) },
    readDatabaseUrl: {
      env: 'DATABASE_READ_URL',
      secret: true,
      help: 'postgres:// URL of the API role on a read replica: reads go there, changes to DATABASE_URL (default: everything on DATABASE_URL)',
      schema: postgresUrl,
    },
  },
  refine(config, report, given) {
    if (!given('apiToken') && !given('users') && !given('usersFile')) {
      report(null, 'API_TOKEN, API_USERS or API_USERS_FILE: is required (at least one user who may use the API)');
      return;
    }
    const all = configuredUsers(config);
    for (const problem of userProblems(all)) report(null, `API_USERS: ${problem}`);
  },
});

/** A list of users from `read(raw)` (the value itself, or a file's text). */
function usersSchema(read: (raw: string) => string) {
  return z.string().transform((raw, ctx): ApiUser[] => {
    try {
      const users = parseUsers(read(raw.trim()));
      if (users.length === 0) throw new Error('names no user');
      return users;
    } catch (error) {
      const message = (error as NodeJS.ErrnoException).code
        ? `cannot be read (${(error as NodeJS.ErrnoException).code})`
        : (error as Error).message;
      ctx.issues.push({ code: 'custom', message, input: raw });
      return z.NEVER;
    }
  });
}

/** Every user the configuration defines: API_TOKEN's operator, then API_USERS, then API_USERS_FILE. */
export function configuredUsers(config: Pick<ApiConfig, 'apiToken' | 'users' | 'usersFile'>): ApiUser[] {
  return [
    ...(config.apiToken ? [{ name: API_TOKEN_USER, level: 'operator' as const, token: config.apiToken }] : []),
    ...(config.users ?? []),
    ...(config.usersFile ?? []),
  ];
}

/** Every environment variable the API reads (the deployment test checks manifests against it). */
export const API_SETTINGS = Object.values(API_CONFIG.settings).map(({ env, help }) => ({ env, help }));

/** Reads and validates the settings; throws ConfigError listing every bad or missing value. */
export function loadApiConfig(env: NodeJS.ProcessEnv): ApiConfig {
  return API_CONFIG.read(env) as ApiConfig;
}

export const helpText = (): string => API_CONFIG.help();
