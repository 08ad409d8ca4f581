/**
 * How the worker reads errors (error-class.ts): lease loss only from the queue's answer,
 * transient failures of the connection or server (nothing is recorded, the task runs
 * again), everything else a failure of the task. The completer records outcomes; see
 * completer.ts.
 */
export { LeaseLostError, errorMessage, isLeaseLost, isTransient, sanitizeMessage } from './error-class.js';
