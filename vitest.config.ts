import { defineConfig } from 'vitest/config';
import EveryProjectReporter from './testing/dist/every-project-reporter.js';
import projects from './vitest.workspace.ts';

export default defineConfig({
  test: {
    projects,
    // One PostgreSQL server and one migrated template per run; each test file clones it.
    globalSetup: ['./testing/dist/global-setup.js'],
    reporters: ['default', new EveryProjectReporter(projects.map((p) => p.test.name))],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Test files in parallel: VITEST_MAX_WORKERS, or 3 (vitest's default is one fewer than
    // the cores, a single file at a time on 2 cores). A file spends most of its time
    // waiting on PostgreSQL, its own child processes and timers: the run used under half
    // a core with one file at a time. Each file has its own database; nothing a file does
    // reaches another's (a test that looks at or signals other backends names its own
    // database: `datname = current_database()`), and what changes the server (crashes,
    // settings, standbys) runs on a server of its own.
    maxWorkers: 3,
  },
});
