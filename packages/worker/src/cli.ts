#!/usr/bin/env node
// queue-worker: configuration from flags and environment (see --help), the built-in
// processors, the app's task definitions (TASKS_DIR, default ./tasks when it exists;
// @org/tasks), SIGTERM/SIGINT for a graceful stop, PROCESSES=N for a process pool of N
// worker processes. Exit codes: 0 stopped cleanly, 1 crashed, 2 bad configuration.
//
// The channel processors (email, sms, file_delete) and the menu roles come from optional
// peers: with @org/providers installed, providers from the environment (local outbox and
// storage when no credentials are set); with @org/menu-sync installed, the menu platform
// (the fake one when MENU_PLATFORM_URL is not set). An app that installs neither runs
// db_function and its own task definitions only.
import { runWorkerCli } from './main.js';
import { defaultRegistry } from './registry.js';
import { loadAppTasks } from './app-tasks.js';
import { optionalPeer } from './optional-peer.js';

runWorkerCli({
  registry: async (logger, config) => {
    const providers = await optionalPeer<typeof import('@org/providers')>('@org/providers');
    const menus = await optionalPeer<typeof import('@org/menu-sync')>('@org/menu-sync');
    if (!providers)
      logger.info(
        { event: 'optional_peer_absent', package: '@org/providers' },
        '@org/providers is not installed: no email, sms or file_delete processors',
      );
    if (!menus)
      logger.info(
        { event: 'optional_peer_absent', package: '@org/menu-sync' },
        '@org/menu-sync is not installed: no menu roles',
      );
    return loadAppTasks(
      defaultRegistry(
        // Local-mode warnings only for the channels this worker serves (WORKER_ROLE).
        providers?.providersFromEnv(process.env, logger, config.roles),
        menus?.menuProcessors(menus.menuPlatformFromEnv(process.env, logger)),
      ),
      config.tasksDir,
      logger,
    );
  },
});
