// @org/worker/command: the worker's command line (its settings, main and process pool
// modes) and the built-in processors (db_function, email, sms, file_delete, the menu
// roles). A separate entry from '@org/worker', so that a process embedding the Worker with
// its own processors does not load the settings parser (zod) or the menu platform.
export { loadConfig, helpText, ConfigError, SETTINGS, WORKER_CONFIG, type WorkerConfig } from './config.js';
export { defaultRegistry } from './registry.js';
export { runWorkerCli, runWorkerMain, type WorkerMainOptions } from './main.js';
