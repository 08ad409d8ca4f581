// @org/cli: `queue`, the operator's command line (status, tasks, enqueue, redrive, cancel,
// pause and resume, workers, schedules, migrate).
export { runCli, EXIT, HELP } from './commands.js';
export type { Io } from './output.js';
