// The app's task types, registered as the owner: `npm start` (local mode) and
// `npm run migrate` run @org/tasks' `queue-tasks register` on the task folder (TASKS_DIR,
// default ./tasks when it exists), so a task type defined with defineTask exists in the
// database without a migration written by hand, and the worker database user never needs
// the right to create task types. Run as a program (by path, like the worker): the
// task files are TypeScript loaded through tsx, and @org/db-tools does not depend on the
// queue's packages.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { repoRoot } from './paths.js';

/**
 * Registers the task types of the task folder in the database at `ownerUrl` (the owner
 * database user's URL); without TASKS_DIR and a ./tasks folder, does nothing. Resolves with the lines `queue-tasks` printed; rejects with its
 * message when it fails (a task file that cannot be loaded, the database refusing).
 */
export function registerAppTasks(
  ownerUrl: string,
  options: { env?: NodeJS.ProcessEnv; cwd?: string } = {},
): Promise<string[]> {
  const env = options.env ?? process.env;
  const cwd = options.cwd ?? process.cwd();
  // No task folder: nothing to register, and no process to start.
  if (!env.TASKS_DIR && !existsSync(resolve(cwd, 'tasks'))) return Promise.resolve([]);
  const script = join(repoRoot(), 'packages', 'tasks', 'dist', 'cli.js');
  if (!existsSync(script)) return Promise.reject(new Error(`${script} is missing: build first (npm run build)`));
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, 'register'], {
      cwd,
      env: { ...env, DATABASE_URL: ownerUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      if (code === 0) resolve(stdout.split('\n').filter((line) => line !== ''));
      else reject(new Error(stderr.trim() || `queue-tasks register exited with ${code ?? signal}`));
    });
  });
}
