// @org/queue-client: typed access to the queue functions. Generated queries stay inside
// the package; this is everything it exports.
export { connect, withTransaction, type ConnectOptions, type Queryable } from './connection.js';
export { QueueError, type QueueErrorKind } from './errors.js';
export {
  claimTasks,
  completeTask,
  completeTasks,
  dequeueNextAvailableTask,
  enqueue,
  enqueueMany,
  extendLeases,
  failTask,
  releaseLeases,
  runFunction,
  settleTasks,
  type ClaimOptions,
  type ClaimedTask,
  type Completion,
  type CompletionOutcome,
  type CompletionResult,
  type Id,
  type JsonObject,
  type LeaseRef,
  type NewTask,
  type Settlement,
  type Task,
} from './tasks.js';
export { recordWorkerHeartbeat, recordWorkerStopped } from './workers.js';
