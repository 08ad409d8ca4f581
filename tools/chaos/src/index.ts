// @org/chaos: the reliability scenarios, for the CLI and for tools/chaos/test.
export * from './harness.js';
export { installFixtures } from './fixtures.js';
export { SCENARIOS } from './scenarios/index.js';
export { startWorker, stopWorker, killAll, type WorkerProcess } from './workers.js';
