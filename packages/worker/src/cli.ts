#!/usr/bin/env node
// queue-worker: configuration from flags and environment (see --help), providers from the
// environment (local outbox and storage when no credentials are set), SIGTERM/SIGINT for
// a graceful stop. Exit codes: 0 stopped cleanly, 1 crashed, 2 bad configuration.
import { providersFromEnv } from '@org/providers';
import { ConfigError, helpText, loadConfig } from './config.js';
import { createLogger, maskUrl } from './logger.js';
import { defaultRegistry } from './registry.js';
import { Worker } from './worker.js';

async function main(): Promise<number> {
  let config;
  try {
    config = loadConfig(process.argv.slice(2), process.env);
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\nRun with --help for the list of settings.\n`);
      return 2;
    }
    throw error;
  }
  if (config === 'help') {
    process.stdout.write(helpText());
    return 0;
  }

  const logger = createLogger(config.logLevel);
  let worker: Worker;
  try {
    const registry = defaultRegistry(providersFromEnv(process.env, logger));
    worker = new Worker({ ...config, registry, logger });
  } catch (error) {
    process.stderr.write(`invalid configuration:\n  ${error instanceof Error ? error.message : String(error)}\n`);
    return 2;
  }
  logger.info({ event: 'config', database: maskUrl(config.databaseUrl), worker_id: config.workerId }, 'configuration loaded');

  // Signal handlers first: a SIGTERM during start-up still means a graceful stop.
  const stopRequested = new Promise<void>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      // A terminal's Ctrl-C reaches every process of the group, and a supervisor may
      // forward it again: later signals do not cut the grace period short.
      if (stopping) {
        logger.warn({ event: 'signal', signal }, `${signal} received again; already stopping (SIGKILL forces)`);
        return;
      }
      stopping = true;
      logger.info({ event: 'signal', signal }, `${signal} received`);
      resolve();
    };
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
    // Started by a supervisor with an IPC channel (npm start): stop when it goes away,
    // rather than live on as an orphan.
    if (process.channel) process.once('disconnect', () => stop('parent exited'));
  });
  let metricsServer: { close(): Promise<void> } | undefined;
  if (config.metricsPort) {
    // Loaded only when asked for: the exposition lives with the API package.
    const { WorkerMetrics, serveWorkerMetrics } = await import('@org/api');
    const metrics = new WorkerMetrics(worker, { worker_id: config.workerId });
    metricsServer = await serveWorkerMetrics(metrics, { host: '0.0.0.0', port: config.metricsPort });
    logger.info({ event: 'metrics', port: config.metricsPort }, `metrics on :${config.metricsPort}/metrics`);
  }
  await worker.start();
  await stopRequested;
  await worker.stop();
  await metricsServer?.close();
  return 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`queue-worker crashed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
