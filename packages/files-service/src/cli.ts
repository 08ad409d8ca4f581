#!/usr/bin/env node
// Starts the files service from environment variables (see config.ts); exits 2 with one
// line per bad value.
import { pino } from 'pino';
import { createFilesService } from './app.js';
import { configFromEnv, FilesServiceConfigError } from './config.js';

const log = pino({ name: 'files-service' });

let config;
try {
  config = configFromEnv(process.env);
} catch (err) {
  if (err instanceof FilesServiceConfigError) {
    for (const p of err.problems) process.stderr.write(`files-service: ${p}\n`);
    process.exit(2);
  }
  throw err;
}

const app = createFilesService(config, { logger: log });
try {
  await app.listen({ port: config.port, host: config.host });
  log.info({ buckets: config.buckets, apiEndpoint: config.apiEndpoint ?? 'https://storage.googleapis.com' }, 'files service ready');
} catch (err) {
  process.stderr.write(`files-service: cannot listen on ${config.host}:${config.port}: ${(err as Error).message}\n`);
  process.exit(2);
}

// Started with an IPC channel (npm start): stop when the parent goes away.
if (process.channel) process.once('disconnect', () => process.emit('SIGTERM'));
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log.info({ signal }, 'shutting down');
    app.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  });
}
