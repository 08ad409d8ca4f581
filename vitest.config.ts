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
  },
});
