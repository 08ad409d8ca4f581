#!/usr/bin/env node
// queue-worker: configuration from flags and environment (see --help), the built-in
// processors with providers from the environment (local outbox and storage when no
// credentials are set; the fake menu platform when MENU_PLATFORM_URL is not set), the app's
// task definitions (TASKS_DIR, default ./tasks when it exists; @org/tasks), SIGTERM/SIGINT
// for a graceful stop, PROCESSES=N for a process pool
// of N worker processes. Exit codes: 0 stopped cleanly, 1 crashed, 2 bad configuration.
import { menuPlatformFromEnv } from '@org/menu-sync';
import { providersFromEnv } from '@org/providers';
import { runWorkerCli } from './main.js';
import { defaultRegistry } from './registry.js';
import { loadAppTasks } from './app-tasks.js';

runWorkerCli({
  registry: async (logger, config) =>
    loadAppTasks(
      // Local-mode warnings only for the channels this worker serves (WORKER_ROLE).
      defaultRegistry(providersFromEnv(process.env, logger, config.roles), menuPlatformFromEnv(process.env, logger)),
      config.tasksDir,
      logger,
    ),
});
