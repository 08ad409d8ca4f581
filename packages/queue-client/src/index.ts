// @org/queue-client: typed access to the queue functions. Generated queries stay inside
// the package; this is everything it exports.
export { connect, withTransaction, type ConnectOptions, type Queryable } from './connection.js';
export { LEASE_LOST_CONSTRAINT, QueueError, type QueueErrorKind } from './errors.js';
export { isNestedDeeperThan, MAX_PAYLOAD_DEPTH } from './json.js';
export { isResultTypeChange } from './prepared.js';
export {
  claimTasks,
  nextClaimInMs,
  completeTask,
  completeTasks,
  dequeueNextAvailableTask,
  enqueue,
  enqueueMany,
  enqueueUnique,
  extendLeases,
  failTask,
  interruptTask,
  releaseLeases,
  runBeforeProviderCall,
  runBeforeProviderCalls,
  runFunction,
  runSteps,
  settleTasks,
  settleWithHandler,
  settleWithHandlers,
  markStarted,
  readTaskTraces,
  setTraceContext,
  type BeforeProviderCall,
  type BeforeProviderCallAnswer,
  type BeforeProviderCallRequest,
  type ClaimOptions,
  type ClaimSuspects,
  type ClaimedTask,
  type Completion,
  type CompletionOutcome,
  type CompletionResult,
  type Id,
  type InterruptResult,
  type JsonObject,
  type LeaseRef,
  type NewTask,
  type Settlement,
  type HandlerCall,
  type HandlerSettlement,
  type Step,
  type StepResult,
  type Task,
  type TaskState,
  type EnqueueOutcome,
  type UniqueEnqueueResult,
  type UniqueOptions,
  type UniquePolicy,
} from './tasks.js';
export { cancelTasks, cancelledTasks, type CancelAnswer, type CancelResult } from './cancel.js';
export { taskTypeTimeouts } from './timeouts.js';
export { recordProgress, type ProgressReport } from './progress.js';
export {
  activeThrottles,
  recordThrottle,
  type ActiveThrottle,
  type ThrottleKeyKind,
  type ThrottleRecorded,
  type ThrottleReport,
} from './throttles.js';
export { listTaskResults, recordTaskResult, type TaskResult } from './results.js';
export { listTaskDependencies, type TaskDependency } from './dependencies.js';
export { recordWorkerHeartbeat, recordWorkerStopped, revokeWorkerLeases } from './workers.js';
export { registerTaskTypes, type TaskTypeRegistration } from './task-types.js';
export {
  activeTraceContext,
  ATTR as MESSAGING_ATTRIBUTES,
  MESSAGING_SYSTEM,
  otelApi,
  parseTraceContext,
  toTraceContext,
  tracingEnabled,
  type TraceContext,
} from './tracing.js';
