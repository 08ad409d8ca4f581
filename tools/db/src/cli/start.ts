// `npm start`: the worker, with the REST API and dashboard beside it.
//
// Without DATABASE_URL: starts the embedded PostgreSQL in .data/postgres, migrates it,
// and runs the worker (as worker_service_user) and the API (as queue_api_user) on it,
// plus the files service when GCS credentials are configured, and enables the role-based
// system's schedules (local mode; see local-schedules.ts). With DATABASE_URL (the
// worker role's URL on a migrated database) it runs only the worker. Signals go to the
// children; when the worker exits, the others are stopped, then the embedded server.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { registerAppTasks } from '../app-tasks.js';
import { enableLocalSchedules } from '../local-schedules.js';
import { portInUse } from '../port-check.js';
import { repoRoot } from '../paths.js';
import type { DatabaseUrls } from '../server.js';

function start(script: string, args: string[], env: NodeJS.ProcessEnv): ChildProcess {
  // The IPC channel lets a child notice when this process dies and stop itself.
  return spawn(process.execPath, [join(repoRoot(), script), ...args], {
    env,
    stdio: ['inherit', 'inherit', 'inherit', 'ipc'],
  });
}

function exited(child: ChildProcess): Promise<number> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  if (child.signalCode !== null) return Promise.resolve(1);
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0))));
}

/** Runs the children until the worker exits; forwards SIGINT/SIGTERM to each. */
async function supervise(worker: ChildProcess, others: ChildProcess[]): Promise<number> {
  const all = [worker, ...others];
  const forward = (signal: NodeJS.Signals) => {
    for (const child of all) if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  };
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  const code = await exited(worker);
  for (const child of others) if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  await Promise.all(others.map(exited));
  return code;
}

async function main(): Promise<number> {
  const workerArgs = process.argv.slice(2);
  if (process.env.DATABASE_URL) {
    return supervise(start('packages/worker/dist/cli.js', workerArgs, process.env), []);
  }

  const apiPort = process.env.API_PORT ?? '3000';
  const apiHost = process.env.API_HOST ?? '127.0.0.1';
  // A second `npm start` beside a first: the embedded database is shared (see
  // startEmbedded), the web server's port is taken. Run a second worker on the shared
  // database, and say so, rather than crash on EADDRINUSE.
  const webPortTaken = apiPort !== '0' && (await portInUse(apiHost, Number(apiPort)));
  if (webPortTaken)
    process.stdout.write(
      `http://${apiHost}:${apiPort}/ is already in use (another npm start?): this one runs a second worker ` +
        `on the same embedded database, without a dashboard. Set API_PORT to serve one here too.\n`,
    );

  // The database runs in a process group of its own, so a terminal's Ctrl-C reaches
  // the worker and the API but not PostgreSQL: the worker finishes its running tasks
  // against a live database, then the database is stopped.
  const runner = spawn(process.execPath, [join(repoRoot(), 'tools', 'db', 'dist', 'cli', 'db-runner.js')], {
    detached: true,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const urls = await new Promise<DatabaseUrls>((resolve, reject) => {
    runner.once('message', (message: { type: string; urls?: DatabaseUrls; message?: string }) =>
      message.type === 'ready' && message.urls
        ? resolve(message.urls)
        : reject(new Error(message.message ?? 'database failed to start')),
    );
    runner.once('exit', (code) => reject(new Error(`database runner exited with code ${code}`)));
  });
  const stopDatabase = async () => {
    if (runner.exitCode !== null) return;
    const done = exited(runner);
    runner.send('stop');
    await done;
  };
  // The app's task types (TASKS_DIR, default ./tasks), registered as the owner.
  let taskLines: string[];
  try {
    taskLines = await registerAppTasks(urls.owner);
  } catch (error) {
    await stopDatabase();
    throw error;
  }
  const schedules = await enableLocalSchedules(urls.api);
  // Local credentials: an operator (API_TOKEN, the user api-token) and, unless API_USERS or
  // API_USERS_FILE names the users, a read-only user `viewer`; each token new unless given.
  const apiToken = process.env.API_TOKEN || randomBytes(24).toString('hex');
  const ownUsers = Boolean(process.env.API_USERS || process.env.API_USERS_FILE);
  const viewerToken = randomBytes(24).toString('hex');
  const apiUsers = ownUsers ? process.env.API_USERS : `viewer:read:${viewerToken}`;
  const workerEnv: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: urls.worker };
  const others: ChildProcess[] = [];

  const gcsConfigured = Boolean(process.env.GCS_CREDENTIALS_JSON || process.env.GOOGLE_APPLICATION_CREDENTIALS);
  let filesLine = 'files service: not started (no GCS credentials; the worker deletes files in local mode)';
  if (gcsConfigured && !process.env.FILES_SERVICE_URL) {
    const filesToken = process.env.FILES_SERVICE_TOKEN ?? randomBytes(24).toString('hex');
    const filesPort = process.env.FILES_SERVICE_PORT ?? '8787';
    others.push(
      start('packages/files-service/dist/cli.js', [], {
        ...process.env,
        FILES_SERVICE_TOKEN: filesToken,
        FILES_SERVICE_PORT: filesPort,
        FILES_SERVICE_DATABASE_URL: urls.worker,
      }),
    );
    workerEnv.FILES_SERVICE_URL = `http://127.0.0.1:${filesPort}`;
    workerEnv.FILES_SERVICE_TOKEN = filesToken;
    filesLine = `files service: ${workerEnv.FILES_SERVICE_URL}`;
  }
  if (!webPortTaken)
    others.push(
      start('packages/web/dist/cli.js', [], {
        ...process.env,
        DATABASE_URL: urls.api,
        API_TOKEN: apiToken,
        ...(apiUsers ? { API_USERS: apiUsers } : {}),
        API_PORT: apiPort,
        API_HOST: apiHost,
      }),
    );

  process.stdout.write(
    [
      `PostgreSQL (embedded, data in .data/postgres) is up and migrated: database ${urls.database}`,
      `  owner  ${urls.owner}`,
      `  worker ${urls.worker}`,
      `  app    ${urls.app}`,
      `  api    ${urls.api}`,
      ...(webPortTaken
        ? [`Dashboard and REST API: not started here (http://${apiHost}:${apiPort}/ is in use)`]
        : [
            `Dashboard and REST API: http://${apiHost}:${apiPort}/  (log in with a token; reads need one too${
              process.env.API_OPEN_READS === 'true' ? ', except that API_OPEN_READS=true opens them' : ''
            })`,
            `  operator  api-token  token ${apiToken}  (may read and change)`,
            ownUsers
              ? '  and the users of API_USERS / API_USERS_FILE, with the tokens given there'
              : `  read      viewer     token ${viewerToken}  (may read only)`,
          ]),
      filesLine,
      `schedules enabled (local mode): ${schedules.join(', ')}`,
      process.env.MENU_PLATFORM_URL
        ? `menu platform: ${process.env.MENU_PLATFORM_URL}`
        : 'menu platform: local mode, a fake one inside the worker (set MENU_PLATFORM_URL for a real one)',
      ...taskLines,
      'Starting the worker; Ctrl-C stops everything.',
      '',
    ].join('\n'),
  );
  try {
    return await supervise(start('packages/worker/dist/cli.js', workerArgs, workerEnv), others);
  } finally {
    await stopDatabase();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`start failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
