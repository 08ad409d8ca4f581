/**
 * Worker configuration: one table of settings (environment variables, each also a flag
 * that wins over it), read by @org/config. Every bad value gets its own line; the CLI
 * exits 2. `--help` is generated from the same table.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { ClaimSuspects } from '@org/queue-client';
import {
  commaList,
  ConfigError,
  defineConfig,
  logSettings,
  postgresUrl,
  wholeNumber,
  type LogFormat,
  type LogLevel,
} from '@org/config';

export { ConfigError };

export interface WorkerConfig {
  databaseUrl: string;
  /** Task types this worker claims; null means every type it has a processor for. */
  roles: string[] | null;
  workerId: string;
  concurrency: number;
  /** Claimed tasks kept waiting beside the running ones (the local queue); default 500. */
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
  logLevel: LogLevel;
  /** json, pretty, or auto (pretty on a terminal); default auto. */
  logFormat?: LogFormat;
  /** Serve GET /metrics (Prometheus), /healthz and /readyz on this port; none when unset. */
  metricsPort?: number;
  /**
   * Run this many worker processes in a process pool (the CLI process), which replaces
   * any that dies; unset: one worker, in the CLI process itself.
   */
  processes?: number;
  /** With `processes`: started processes kept waiting to replace a dead one at once (default 1). */
  spares?: number;
  /**
   * With `processes`: 1 (default) runs a quarantine process beside them, which alone runs
   * repeat suspects (tasks one of whose deaths already counted), one at a time; 0 runs none.
   */
  quarantine?: number;
  /**
   * Which suspects this worker's claims take (queues.claim_tasks): set by the process pool
   * for its members ('no_repeat' working beside a quarantine, 'repeat' the quarantine); 'any' otherwise.
   */
  suspects?: ClaimSuspects;
  /** The app's task folder (defineTask files; @org/tasks/load); unset: ./tasks when it exists. */
  tasksDir?: string;
}

const TASK_TYPE = /^[a-z][a-z0-9_]{0,62}$/;

export const WORKER_CONFIG = defineConfig({
  program: 'queue-worker',
  summary: 'Claims tasks from the PostgreSQL queue and runs them.',
  settings: {
    databaseUrl: {
      env: 'DATABASE_URL',
      flag: 'database-url',
      required: true,
      secret: true,
      help: "the worker role's postgres:// URL",
      schema: postgresUrl,
    },
    roles: {
      env: 'WORKER_ROLE',
      flag: 'worker-role',
      defaultText: 'every registered type',
      help: 'task types to claim, comma separated',
      schema: commaList(
        z.string().regex(TASK_TYPE, 'each role must be a task type such as email or db_function'),
        'must name at least one task type',
      ),
    },
    workerId: {
      env: 'WORKER_ID',
      flag: 'worker-id',
      default: () => `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`,
      defaultText: 'host-pid-random',
      help: 'names its leases (kept once, in queues.worker_name) and its worker registry row',
      schema: z.string().trim().min(1, 'must not be empty').max(200, 'must be at most 200 characters'),
    },
    concurrency: {
      env: 'CONCURRENCY',
      flag: 'concurrency',
      default: '10',
      help: 'tasks run at once (one pool connection each)',
      schema: wholeNumber(1, 1000),
    },
    prefetch: {
      env: 'PREFETCH',
      flag: 'prefetch',
      default: '500',
      help: 'claimed tasks kept waiting to start beside the running ones (a local queue)',
      schema: wholeNumber(0, 10_000),
    },
    pollIntervalMs: {
      env: 'POLL_INTERVAL_MS',
      flag: 'poll-interval-ms',
      default: '2000',
      help: 'look for work this often when no notification arrives (sooner when a task is scheduled before then)',
      schema: wholeNumber(10, 3_600_000),
    },
    heartbeatIntervalMs: {
      env: 'HEARTBEAT_INTERVAL_MS',
      flag: 'heartbeat-interval-ms',
      default: '30000',
      help: 'extend running leases this often; at most half the lease',
      schema: wholeNumber(100, 3_600_000),
    },
    leaseSeconds: {
      env: 'LEASE_SECONDS',
      flag: 'lease-seconds',
      default: '300',
      help: 'lease length',
      schema: wholeNumber(1, 86_400),
    },
    maxLeases: {
      env: 'MAX_LEASES',
      flag: 'max-leases',
      default: '5',
      help: 'abandon a task after this many expired leases (a poison task)',
      schema: wholeNumber(1, 100),
    },
    shutdownGraceMs: {
      env: 'SHUTDOWN_GRACE_MS',
      flag: 'shutdown-grace-ms',
      default: '25000',
      help: 'on SIGTERM/SIGINT, time running tasks get before their leases are released',
      schema: wholeNumber(0, 3_600_000),
    },
    statementTimeoutMs: {
      env: 'STATEMENT_TIMEOUT_MS',
      flag: 'statement-timeout-ms',
      default: '300000',
      help: 'a statement of a step or handler running longer fails the task',
      schema: wholeNumber(100, 86_400_000),
    },
    ...logSettings(true),
    metricsPort: {
      env: 'METRICS_PORT',
      flag: 'metrics-port',
      defaultText: 'off',
      help: 'serve /metrics (Prometheus), /healthz (alive) and /readyz (ready to claim) on this port; in a process pool, process i serves METRICS_PORT + i',
      schema: wholeNumber(1, 65535),
    },
    processes: {
      env: 'PROCESSES',
      flag: 'processes',
      defaultText: 'off',
      help: 'run this many worker processes in a process pool that replaces any that dies',
      schema: wholeNumber(1, 64),
    },
    spares: {
      env: 'SPARES',
      flag: 'spares',
      defaultText: '1',
      help: 'with PROCESSES: processes started ahead, waiting to take over from a dead one at once',
      schema: wholeNumber(0, 8),
    },
    quarantine: {
      env: 'QUARANTINE',
      flag: 'quarantine',
      defaultText: '1',
      help: 'with PROCESSES: 1 runs one more process that alone runs the tasks already suspected of killing a worker process, one at a time; 0 runs none',
      schema: wholeNumber(0, 1),
    },
    tasksDir: {
      env: 'TASKS_DIR',
      flag: 'tasks-dir',
      defaultText: './tasks when it exists',
      help: 'the folder of task definitions (defineTask files, TypeScript or JavaScript) to load and run',
      schema: z.string().trim().min(1, 'must not be empty'),
    },
  },
  refine(config, report) {
    const { heartbeatIntervalMs, leaseSeconds, spares, quarantine, processes, metricsPort } = config;
    if (
      heartbeatIntervalMs !== undefined &&
      leaseSeconds !== undefined &&
      heartbeatIntervalMs * 2 > leaseSeconds * 1000
    ) {
      report(
        'heartbeatIntervalMs',
        `must be at most half of LEASE_SECONDS (${leaseSeconds} s), got ${heartbeatIntervalMs}`,
      );
    }
    if (spares !== undefined && processes === undefined) {
      report('spares', 'only means something with PROCESSES; set PROCESSES too, or drop SPARES');
    }
    if (quarantine !== undefined && processes === undefined) {
      report('quarantine', 'only means something with PROCESSES; set PROCESSES too, or drop QUARANTINE');
    }
    // The quarantine process serves METRICS_PORT + PROCESSES.
    const last = processes === undefined ? 0 : processes - 1 + (quarantine ?? 1);
    if (metricsPort !== undefined && metricsPort + last > 65535) {
      report('metricsPort', `process i serves METRICS_PORT + i, and ${metricsPort} + ${last} is above 65535`);
    }
  },
});

/** The settings as the documentation and the deployment test see them. */
export const SETTINGS = Object.values(WORKER_CONFIG.settings).map(({ env, flag, help }) => ({
  env,
  flag: flag!,
  help,
}));

/** The `--help` text. */
export const helpText = (): string => WORKER_CONFIG.help();

function toWorkerConfig(c: Exclude<ReturnType<typeof WORKER_CONFIG.read>, 'help'>): WorkerConfig {
  return { ...c, roles: c.roles ?? null };
}

/** Reads the configuration; throws ConfigError listing every bad value. */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv): WorkerConfig | 'help' {
  const c = WORKER_CONFIG.read(env, argv);
  return c === 'help' ? 'help' : toWorkerConfig(c);
}

/** For the command line: the configuration, or the exit code after printing help (0) or the problems (2). */
export function commandConfig(argv: string[], env: NodeJS.ProcessEnv): WorkerConfig | number {
  const c = WORKER_CONFIG.command(argv, env);
  return typeof c === 'number' ? c : toWorkerConfig(c);
}
