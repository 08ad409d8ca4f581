// @org/worker: the thin typed executor. Embed it (new Worker({...})) or run its CLI; the
// command line's settings, main and built-in registry are '@org/worker/command'.
export type { WorkerConfig } from './config.js';
export { createLogger, type Logger } from './logger.js';
export {
  WorkerMetrics,
  serveWorkerMetrics,
  DURATION_BUCKETS,
  type WorkerEventSource,
  type WorkerMetricsServer,
} from './metrics.js';
export { ProcessorRegistry, type Processor, type TaskContext, type TaskOutcome, type TaskReport } from './processor.js';
export { dbFunctionProcessor, dbFunctionStep } from './processors/db-function.js';
export { channelTaskProcessor, HandlerInvoker } from './processors/channel-task.js';
export { registerTaskDefinitions, taskDefinitionProcessor } from './processors/task-definition.js';
export { TaskCancelledError } from './cancellation.js';
export { TaskTimeoutError } from './timeouts.js';
export { ThrottledError, isThrottledError, throttleSeconds } from './throttle.js';
export {
  LeaseLostError,
  classifyError,
  errorMessage,
  isLeaseLost,
  isTransient,
  sanitizeMessage,
  type ErrorClass,
} from './error-class.js';
export { Completer, type CompletionSink, type Settled } from './completer.js';
export {
  DEFAULT_PREFETCH,
  DEFAULT_STATEMENT_TIMEOUT_MS,
  Worker,
  type WorkerOptions,
  type WorkerState,
  type WorkerStatus,
} from './worker.js';
export {
  HEALTH_CHECK_TIMEOUT_MS,
  WorkerHealth,
  type HealthCheck,
  type HealthReport,
  type HealthSource,
  type WorkerHealthOptions,
} from './health.js';
export { ProcessPool, type ProcessPoolOptions } from './process-pool.js';
