#!/usr/bin/env node
// queue-web: the web server: the operations REST API, dashboard and /metrics. Settings from the environment
// (see --help). Exit codes: 0 stopped cleanly, 1 crashed, 2 bad configuration.
import { endLogger } from '@org/config';
import { createApi } from './app.js';
import { API_CONFIG } from './config.js';

async function main(): Promise<number> {
  const config = API_CONFIG.command(process.argv.slice(2), process.env);
  if (typeof config === 'number') return config; // --help, or bad settings
  const app = createApi(config);
  // Signal handlers first: a SIGTERM during start-up still means a graceful stop.
  const stop = new Promise<void>((resolve) => {
    // Repeated signals (a terminal's Ctrl-C plus a process pool forwarding it) stop once.
    process.on('SIGTERM', () => resolve());
    process.on('SIGINT', () => resolve());
    // Started with an IPC channel (npm start): stop when the parent goes away.
    if (process.channel) process.once('disconnect', () => resolve());
  });
  const address = await app.listen({ host: config.host, port: config.port });
  app.log.info({ event: 'listening', address }, `queue-web listening on ${address}`);
  await stop;
  app.log.info({ event: 'stopping' }, 'stopping');
  await app.close();
  // Its last lines written before the exit.
  await endLogger(app.log);
  return 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(
      `queue-web crashed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(1);
  },
);
