#!/usr/bin/env node
// Starts the files service from environment variables (see --help, config.ts); exits 2
// with one line per bad value.
import { createLogger, endLogger } from '@org/config';
import { createFilesService } from './app.js';
import { commandConfig } from './config.js';

const config = commandConfig(process.argv.slice(2), process.env);
if (typeof config === 'number') process.exit(config); // --help, or bad settings

const log = createLogger({ service: 'files-service', level: config.logLevel, format: config.logFormat });
const app = createFilesService(config, { logger: log });

// Signal handlers first: a SIGTERM during start-up still means a graceful stop.
// Started with an IPC channel (npm start): stop when the parent goes away.
if (process.channel) process.once('disconnect', () => process.emit('SIGTERM'));
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log.info({ event: 'stopping', signal }, 'shutting down');
    // Exit 0 once closed, 1 if closing failed; its last lines written first (endLogger).
    void app
      .close()
      .then(
        () => 0,
        () => 1,
      )
      .then(async (code) => {
        await endLogger(log);
        process.exit(code);
      });
  });
}

try {
  await app.listen({ port: config.port, host: config.host });
  log.info(
    {
      event: 'listening',
      buckets: config.buckets,
      apiEndpoint: config.apiEndpoint ?? 'https://storage.googleapis.com',
    },
    'files service ready',
  );
} catch (err) {
  process.stderr.write(`files-service: cannot listen on ${config.host}:${config.port}: ${(err as Error).message}\n`);
  process.exit(2);
}
