/**
 * The worker's command line, shared by `queue-worker` and any entry point that adds its
 * own processors. One of three modes:
 *   single       (default) one Worker in this process
 *   pool         PROCESSES=N: forks N worker processes and SPARES waiting ones, and
 *                replaces any that dies (process-pool.ts)
 *   pool member  a child of the pool (QUEUE_WORKER_POOL_MEMBER=1): loads its
 *                processors, reports ready, and starts working when activated
 * SIGTERM / SIGINT stop gracefully. Exit codes: 0 stopped cleanly, 1 crashed, 2 bad
 * configuration.
 */
import pg from 'pg';
import { revokeWorkerLeases } from '@org/queue-client';
import { commandConfig, ConfigError, type WorkerConfig } from './config.js';
import { createLogger, endLogger, maskUrl, type Logger } from './logger.js';
import { WorkerHealth } from './health.js';
import { serveWorkerMetrics, WorkerMetrics } from './metrics.js';
import type { ProcessorRegistry } from './processor.js';
import {
  ALIVE_INTERVAL_MS,
  ProcessPool,
  POOL_MEMBER_ENV,
  type ChildMessage,
  type PoolMessage,
} from './process-pool.js';
import { Worker } from './worker.js';
import type { RunningTask } from './producer.js';

export interface WorkerMainOptions {
  /** The processors; called once per worker process, after the configuration is read. */
  registry(logger: Logger, config: WorkerConfig): ProcessorRegistry | Promise<ProcessorRegistry>;
  argv?: string[];
  env?: NodeJS.ProcessEnv;
}

/** Runs the worker command line; resolves with the process exit code. */
export async function runWorkerMain(options: WorkerMainOptions): Promise<number> {
  const argv = options.argv ?? process.argv.slice(2);
  const env = options.env ?? process.env;
  const config = commandConfig(argv, env);
  if (typeof config === 'number') return config; // --help, or bad settings
  const logger = createLogger(config.logLevel, undefined, config.logFormat);
  try {
    if (env[POOL_MEMBER_ENV] === '1' && process.send) return await runPoolMember(config, logger, options);
    if (config.processes !== undefined) return await runPool(config, logger, argv, env);
    return await runSingle(config, logger, options);
  } finally {
    // The last lines (worker_stopped) written before the process exits.
    await endLogger(logger);
  }
}

/** Runs the command line, then exits the process with its code (1, with the stack, if it throws). */
export function runWorkerCli(options: WorkerMainOptions, name = 'queue-worker'): void {
  runWorkerMain(options).then(
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(
        `${name} crashed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
      );
      process.exit(1);
    },
  );
}

/**
 * Resolves on the first SIGTERM / SIGINT, or when the parent holding our IPC channel goes
 * away (`npm start`, the process pool), rather than living on as an orphan.
 */
function stopRequested(logger: Logger, onAgain?: (reason: string) => void): Promise<string> {
  return new Promise((resolve) => {
    let stopping = false;
    const stop = (reason: string) => {
      // A terminal's Ctrl-C reaches every process of the group, and a process pool forwards
      // it again: later signals do not cut the grace period short.
      if (stopping) {
        if (onAgain) onAgain(reason);
        else
          logger.warn(
            { event: 'signal', signal: reason },
            `${reason} received again; already stopping (SIGKILL forces)`,
          );
        return;
      }
      stopping = true;
      logger.info({ event: 'signal', signal: reason }, `${reason} received`);
      resolve(reason);
    };
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
    if (process.channel) process.once('disconnect', () => stop('parent exited'));
  });
}

/** The processors, or null after writing why they cannot serve this configuration. */
async function buildRegistry(
  config: WorkerConfig,
  logger: Logger,
  options: WorkerMainOptions,
): Promise<ProcessorRegistry | null> {
  try {
    const registry = await options.registry(logger, config);
    registry.claimable(config.roles);
    return registry;
  } catch (error) {
    // Provider settings come as a ConfigError of their own (one line per variable).
    if (error instanceof ConfigError) process.stderr.write(`queue-worker: ${error.message}\n`);
    else
      process.stderr.write(
        `queue-worker: invalid configuration:\n  ${error instanceof Error ? error.message : String(error)}\n`,
      );
    return null;
  }
}

/** The health port: /metrics, /healthz and /readyz on METRICS_PORT (health.ts). */
async function serveMetrics(worker: Worker, config: WorkerConfig, port: number | undefined, logger: Logger) {
  if (port === undefined) return undefined;
  const metrics = new WorkerMetrics(worker, { worker_id: config.workerId });
  const health = new WorkerHealth(worker, { databaseUrl: config.databaseUrl });
  const server = await serveWorkerMetrics(metrics, { host: '0.0.0.0', port, health });
  logger.info({ event: 'metrics', port }, `metrics, /healthz and /readyz on :${port}`);
  return server;
}

async function work(
  config: WorkerConfig,
  logger: Logger,
  registry: ProcessorRegistry,
  metricsPort: number | undefined,
  stop: Promise<string>,
  beforeStarts?: (tasks: RunningTask[]) => Promise<void>,
) {
  const worker = new Worker({ ...config, registry, logger, beforeStarts });
  logger.info(
    { event: 'config', database: maskUrl(config.databaseUrl), worker_id: config.workerId },
    'configuration loaded',
  );
  const metricsServer = await serveMetrics(worker, config, metricsPort, logger);
  await worker.start();
  return async () => {
    await stop;
    await worker.stop();
    await metricsServer?.close();
  };
}

async function runSingle(config: WorkerConfig, logger: Logger, options: WorkerMainOptions): Promise<number> {
  const registry = await buildRegistry(config, logger, options);
  if (!registry) return 2;
  // Signal handlers first: a SIGTERM during start-up still means a graceful stop.
  const stop = stopRequested(logger);
  const finish = await work(config, logger, registry, config.metricsPort, stop);
  await finish();
  return 0;
}

async function runPoolMember(config: WorkerConfig, logger: Logger, options: WorkerMainOptions): Promise<number> {
  const stop = stopRequested(logger);
  const registry = await buildRegistry(config, logger, options);
  if (!registry) return 2;
  const activated = new Promise<PoolMessage>((resolve) =>
    process.on('message', (message: PoolMessage) => message?.type === 'activate' && resolve(message)),
  );
  process.send!({ type: 'ready' } satisfies ChildMessage);
  const first = await Promise.race([activated, stop]);
  if (typeof first === 'string') return 0; // stopped while waiting: nothing claimed
  // The quarantine runs one task at a time, none waiting (a poison task kills nothing else).
  const mine: WorkerConfig =
    first.role === 'quarantine'
      ? { ...config, workerId: first.workerId, concurrency: 1, prefetch: 0, suspects: first.suspects }
      : { ...config, workerId: first.workerId, suspects: first.suspects };
  const metricsPort = config.metricsPort === undefined ? undefined : config.metricsPort + first.slot;
  // The supervisor hears of every start before it happens (written to the channel), so
  // that if this process dies it blames only the tasks that ran (process-pool.ts).
  const beforeStarts = (tasks: RunningTask[]) =>
    new Promise<void>((resolve) => {
      const message: ChildMessage = { type: 'running', tasks: tasks.map((t) => [t.taskId, t.startedAtMs]) };
      // The callback runs once the message is written (or the channel failed: the parent is
      // gone, and this process stops).
      if (!process.connected) resolve();
      else process.send!(message, undefined, undefined, () => resolve());
    });
  // Sent from the event loop: a task that blocks it (an endless synchronous loop) silences
  // it, and the pool kills this process (process-pool.ts).
  const alive = setInterval(() => {
    if (process.connected) process.send!({ type: 'alive' } satisfies ChildMessage);
  }, ALIVE_INTERVAL_MS);
  alive.unref();
  const finish = await work(mine, logger, registry, metricsPort, stop, beforeStarts);
  process.send!({ type: 'started' } satisfies ChildMessage);
  await finish();
  return 0;
}

async function runPool(config: WorkerConfig, logger: Logger, argv: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const pool = new ProcessPool({
    script: process.argv[1]!,
    args: argv,
    env: { ...env, [POOL_MEMBER_ENV]: '1' },
    processes: config.processes!,
    spares: config.spares ?? 1,
    quarantine: (config.quarantine ?? 1) === 1,
    // Silent for a lease: its leases have expired, it holds nothing it could still finish.
    hungAfterMs: Math.max(config.leaseSeconds * 1000, 10_000),
    workerIdPrefix: config.workerId,
    logger,
    // A dead process's leases (its running tasks and its local queue) are revoked at once.
    onDeath: async (workerId, running) => {
      const client = new pg.Client({
        connectionString: config.databaseUrl,
        application_name: 'queue-worker-supervisor',
      });
      client.on('error', () => {});
      await client.connect();
      try {
        const revoked = await revokeWorkerLeases(client, workerId, running);
        logger.info(
          { event: 'leases_revoked', worker_id: workerId, count: revoked, running: [...running.keys()] },
          `revoked ${revoked} lease(s) of ${workerId}; ${running.size} task(s) were running`,
        );
      } finally {
        await client.end().catch(() => {});
      }
    },
  });
  void stopRequested(logger, (reason) => pool.stop(reason)).then((reason) => pool.stop(reason));
  return pool.run();
}
