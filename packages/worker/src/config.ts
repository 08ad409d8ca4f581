/**
 * Worker configuration: environment variables, overridden by the same settings as CLI
 * flags, validated with zod. Every bad value gets its own message; the CLI exits 2.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { z } from 'zod';

export interface WorkerConfig {
  databaseUrl: string;
  /** Task types this worker claims; null means every type it has a processor for. */
  roles: string[] | null;
  workerId: string;
  concurrency: number;
  /** Claimed tasks kept waiting beside the running ones (the local queue); default 0. */
  prefetch?: number;
  pollIntervalMs: number;
  heartbeatIntervalMs: number;
  leaseSeconds: number;
  maxLeases: number;
  shutdownGraceMs: number;
  /**
   * statement_timeout of the worker's connections: a db_function step or handler blocked
   * on a lock fails after this long instead of being heartbeated forever (default 300000).
   */
  statementTimeoutMs?: number;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** Serve Prometheus metrics on this port (GET /metrics); none when unset. */
  metricsPort?: number;
  /**
   * Run this many worker processes under a supervisor (the CLI process), which replaces
   * any that dies; unset: one worker, in the CLI process itself.
   */
  processes?: number;
  /** With `processes`: started processes kept waiting to replace a dead one at once (default 1). */
  spares?: number;
}

interface Setting {
  env: string;
  flag: string;
  key: keyof WorkerConfig;
  help: string;
  schema: z.ZodType;
}

const int = (min: number, max: number) =>
  z
    .string()
    .trim()
    .regex(/^\d+$/, `must be a whole number between ${min} and ${max}`)
    .transform(Number)
    .pipe(z.number().int().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));

const TASK_TYPE = /^[a-z][a-z0-9_]{0,62}$/;

export const SETTINGS: Setting[] = [
  {
    env: 'DATABASE_URL',
    flag: 'database-url',
    key: 'databaseUrl',
    help: 'postgres:// URL of the worker role (required)',
    schema: z
      .string()
      .trim()
      .refine((v) => /^postgres(ql)?:\/\//.test(v) && URL.canParse(v), 'must be a postgres:// or postgresql:// URL'),
  },
  {
    env: 'WORKER_ROLE',
    flag: 'worker-role',
    key: 'roles',
    help: 'task types to claim, comma separated (default: every registered type)',
    schema: z
      .string()
      .transform((v) => v.split(',').map((s) => s.trim()).filter(Boolean))
      .pipe(
        z
          .array(z.string().regex(TASK_TYPE, 'each role must be a task type such as email or db_function'))
          .min(1, 'must name at least one task type'),
      ),
  },
  {
    env: 'WORKER_ID',
    flag: 'worker-id',
    key: 'workerId',
    help: 'identifier written on every lease (default: host-pid-random)',
    schema: z.string().trim().min(1, 'must not be empty').max(200, 'must be at most 200 characters'),
  },
  { env: 'CONCURRENCY', flag: 'concurrency', key: 'concurrency', help: 'tasks processed at once (default 10)', schema: int(1, 1000) },
  {
    env: 'PREFETCH',
    flag: 'prefetch',
    key: 'prefetch',
    help: 'claimed tasks kept waiting to start beside the running ones, a local queue (default 500)',
    schema: int(0, 10_000),
  },
  {
    env: 'POLL_INTERVAL_MS',
    flag: 'poll-interval-ms',
    key: 'pollIntervalMs',
    help: 'look for work this often when no notification arrives (default 2000)',
    schema: int(10, 3_600_000),
  },
  {
    env: 'HEARTBEAT_INTERVAL_MS',
    flag: 'heartbeat-interval-ms',
    key: 'heartbeatIntervalMs',
    help: 'extend running leases this often (default 30000; under half the lease)',
    schema: int(100, 3_600_000),
  },
  { env: 'LEASE_SECONDS', flag: 'lease-seconds', key: 'leaseSeconds', help: 'lease length (default 300)', schema: int(1, 86_400) },
  {
    env: 'MAX_LEASES',
    flag: 'max-leases',
    key: 'maxLeases',
    help: 'abandon a task after this many expired leases (default 5)',
    schema: int(1, 100),
  },
  {
    env: 'SHUTDOWN_GRACE_MS',
    flag: 'shutdown-grace-ms',
    key: 'shutdownGraceMs',
    help: 'on SIGTERM/SIGINT, wait this long for running tasks before releasing them (default 25000)',
    schema: int(0, 3_600_000),
  },
  {
    env: 'STATEMENT_TIMEOUT_MS',
    flag: 'statement-timeout-ms',
    key: 'statementTimeoutMs',
    help: 'a statement of a step or handler running longer fails the task (default 300000)',
    schema: int(100, 86_400_000),
  },
  {
    env: 'METRICS_PORT',
    flag: 'metrics-port',
    key: 'metricsPort',
    help: 'serve Prometheus metrics on this port at /metrics (default: off)',
    schema: int(1, 65535),
  },
  {
    env: 'PROCESSES',
    flag: 'processes',
    key: 'processes',
    help: 'run this many worker processes under a supervisor that replaces any that dies (default: one, in this process)',
    schema: int(1, 64),
  },
  {
    env: 'SPARES',
    flag: 'spares',
    key: 'spares',
    help: 'with PROCESSES: processes started ahead, waiting to take over from a dead one at once (default 1)',
    schema: int(0, 8),
  },
  {
    env: 'LOG_LEVEL',
    flag: 'log-level',
    key: 'logLevel',
    help: 'fatal | error | warn | info | debug | trace | silent (default info)',
    schema: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
  },
];

const DEFAULTS: Omit<WorkerConfig, 'databaseUrl' | 'workerId'> = {
  roles: null,
  concurrency: 10,
  prefetch: 500,
  pollIntervalMs: 2000,
  heartbeatIntervalMs: 30_000,
  leaseSeconds: 300,
  maxLeases: 5,
  shutdownGraceMs: 25_000,
  logLevel: 'info',
};

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

export function helpText(): string {
  const rows = SETTINGS.map((s) => `  --${s.flag.padEnd(22)} ${s.env.padEnd(22)} ${s.help}`);
  return [
    'Usage: queue-worker [flags]',
    '',
    'Claims tasks from the PostgreSQL queue and runs them. Each setting is a flag or an',
    'environment variable; a flag wins over the variable.',
    '',
    `  ${'flag'.padEnd(24)} ${'variable'.padEnd(22)} meaning`,
    ...rows,
    `  --${'help'.padEnd(22)} ${''.padEnd(22)} print this and exit`,
    '',
  ].join('\n');
}

/** Reads the configuration; throws ConfigError listing every bad value. */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv): WorkerConfig | 'help' {
  const problems: string[] = [];
  let flags: Record<string, string | boolean | undefined> = {};
  try {
    const parsed = parseArgs({
      args: argv,
      options: Object.fromEntries([
        ...SETTINGS.map((s) => [s.flag, { type: 'string' as const }]),
        ['help', { type: 'boolean' as const, short: 'h' }],
      ]),
      strict: true,
      allowPositionals: false,
    });
    flags = parsed.values as Record<string, string | boolean | undefined>;
  } catch (error) {
    throw new ConfigError([error instanceof Error ? error.message : String(error)]);
  }
  if (flags.help) return 'help';

  const values: Partial<Record<keyof WorkerConfig, unknown>> = {};
  for (const setting of SETTINGS) {
    const raw = (flags[setting.flag] as string | undefined) ?? env[setting.env];
    if (raw === undefined || raw === '') continue;
    const result = setting.schema.safeParse(raw);
    if (result.success) values[setting.key] = result.data;
    else {
      const message = result.error.issues.map((i) => i.message).join('; ');
      const shown = setting.key === 'databaseUrl' ? '(hidden)' : JSON.stringify(raw.length > 60 ? `${raw.slice(0, 60)}...` : raw);
      problems.push(`${setting.env} (--${setting.flag}): ${message}, got ${shown}`);
    }
  }
  if (values.databaseUrl === undefined && !problems.some((p) => p.startsWith('DATABASE_URL'))) {
    problems.push('DATABASE_URL (--database-url): required: the worker role\'s postgres:// URL');
  }
  const config = {
    ...DEFAULTS,
    workerId: `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`,
    ...values,
  } as WorkerConfig;
  if (
    !problems.some((p) => p.startsWith('HEARTBEAT_INTERVAL_MS') || p.startsWith('LEASE_SECONDS')) &&
    config.heartbeatIntervalMs * 2 > config.leaseSeconds * 1000
  ) {
    problems.push(
      `HEARTBEAT_INTERVAL_MS (--heartbeat-interval-ms): must be at most half of LEASE_SECONDS (${config.leaseSeconds} s), got ${config.heartbeatIntervalMs}`,
    );
  }
  if (config.spares !== undefined && config.processes === undefined) {
    problems.push('SPARES (--spares): only means something with PROCESSES; set PROCESSES too, or drop SPARES');
  }
  if (config.metricsPort !== undefined && config.processes !== undefined && config.metricsPort + config.processes - 1 > 65535) {
    problems.push(
      `METRICS_PORT (--metrics-port): process i serves METRICS_PORT + i, and ${config.metricsPort} + ${config.processes - 1} is above 65535`,
    );
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}
