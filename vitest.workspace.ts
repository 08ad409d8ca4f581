// The test projects: one per folder that has tests. vitest 4 does not read this file by
// itself; vitest.config.ts imports it as `test.projects`, and a reporter fails the run
// when a project listed here ran no test.
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('.', import.meta.url));

/** Project roots must be absolute: inline roots resolve against the working folder. */
const project = (name: string, dir: string, include: string[]) => ({
  // Root options are not inherited by inline projects (and `extends: true` re-runs the
  // global setup per project), so shared options are repeated here.
  test: { name, root: resolve(root, dir), include, testTimeout: 120_000, hookTimeout: 120_000 },
});

export default [
  project('sql', 'sql', ['**/*.test.ts']),
  project('queue-client', 'packages/queue-client', ['test/**/*.test.ts']),
  project('contracts', 'packages/contracts', ['test/**/*.test.ts']),
  project('config', 'packages/config', ['test/**/*.test.ts']),
  project('worker', 'packages/worker', ['test/**/*.test.ts']),
  project('tasks', 'packages/tasks', ['test/**/*.test.ts']),
  project('providers', 'packages/providers', ['test/**/*.test.ts']),
  project('files-service', 'packages/files-service', ['test/**/*.test.ts']),
  project('web', 'packages/web', ['test/**/*.test.ts']),
  project('cli', 'packages/cli', ['test/**/*.test.ts']),
  project('bench', 'tools/bench', ['test/**/*.test.ts']),
  project('chaos', 'tools/chaos', ['test/**/*.test.ts']),
  project('db-tools', 'tools/db', ['test/**/*.test.ts']),
];
