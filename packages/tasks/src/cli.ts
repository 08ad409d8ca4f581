#!/usr/bin/env node
// queue-tasks: the app's task folder (TASKS_DIR, default ./tasks).
//   queue-tasks register   registers its task types in the database at DATABASE_URL, which
//                          must be the owner database user's URL (the deploy step, after
//                          `npm run migrate`; `npm start` and `npm run migrate` run it)
//   queue-tasks list       prints the task types it defines (no database)
// Exit codes: 0 done, 1 the database refused or failed, 2 bad usage or a task folder that
// cannot be loaded.
import pg from 'pg';
import { loadTasksFromEnv, TaskLoadError } from './load.js';
import { registerTasks } from './register.js';

const USAGE = `usage: queue-tasks register | list

  register  registers the task types of the task folder; DATABASE_URL: the owner database user's URL
  list      prints the task types of the task folder

TASKS_DIR  the task folder (default ./tasks)
`;

function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  if ((command !== 'register' && command !== 'list') || rest.length > 0) {
    process.stderr.write(USAGE);
    return 2;
  }
  let loaded;
  try {
    loaded = await loadTasksFromEnv(process.env);
  } catch (error) {
    if (!(error instanceof TaskLoadError)) throw error;
    process.stderr.write(`queue-tasks: ${error.message}\n`);
    return 2;
  }
  const { dir, tasks } = loaded;
  if (command === 'list') {
    for (const { definition, file } of tasks) process.stdout.write(`${definition.name}\t${file}\n`);
    return 0;
  }
  if (tasks.length === 0) {
    process.stdout.write(`queue-tasks: no task definitions (${dir ?? 'no ./tasks folder'}); nothing to register\n`);
    return 0;
  }
  const url = process.env.DATABASE_URL;
  if (!url) {
    process.stderr.write("queue-tasks: DATABASE_URL must be the owner database user's URL\n");
    return 2;
  }
  const client = new pg.Client({ connectionString: url, application_name: 'queue-tasks' });
  await client.connect();
  try {
    const registered = await registerTasks(
      client,
      tasks.map((t) => t.definition),
    );
    const files = new Map(tasks.map((t) => [t.definition.name, t.file]));
    for (const { taskType, created } of registered) {
      process.stdout.write(
        `task type ${taskType} (${files.get(taskType)}): ${created ? 'registered' : 'already registered'}\n`,
      );
    }
    return 0;
  } catch (error) {
    process.stderr.write(
      `queue-tasks: registering task types in ${redact(url)} failed: ${error instanceof Error ? error.message : String(error)}\n`,
    );
    return 1;
  } finally {
    await client.end().catch(() => {});
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(
      `queue-tasks crashed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(1);
  },
);
