/**
 * API configuration: one table of environment variables, read by @org/config. Every bad
 * value gets its own line; the CLI prints them all and exits 2. `--help` comes from the
 * same table.
 */
import { z } from 'zod';
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
  /** Bearer token every mutating request must present. */
  apiToken: string;
  /** Interface to bind; 127.0.0.1 unless configured. */
  host: string;
  port: number;
  logLevel: LogLevel;
  /** json, pretty, or auto (pretty on a terminal); default auto. */
  logFormat?: LogFormat;
  /** Database pool size. */
  poolSize: number;
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
      required: true,
      secret: true,
      help: 'bearer token for mutating requests, at least 16 characters',
      schema: z.string().trim().min(16, 'must be at least 16 characters').max(1000, 'must be at most 1000 characters'),
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
  },
});

/** Every environment variable the API reads (the deployment test checks manifests against it). */
export const API_SETTINGS = Object.values(API_CONFIG.settings).map(({ env, help }) => ({ env, help }));

/** Reads and validates the settings; throws ConfigError listing every bad or missing value. */
export function loadApiConfig(env: NodeJS.ProcessEnv): ApiConfig {
  return API_CONFIG.read(env) as ApiConfig;
}

export const helpText = (): string => API_CONFIG.help();
