/**
 * Channel tasks (email, sms, file_delete, or any registered provider type):
 *
 *   before_handler(payload)                 -> envelope whose payload is the provider's input
 *   provider.send(provider payload)         -> worker_payload, or an error
 *   success_handler({original_payload, worker_payload})   on success
 *   error_handler({original_payload, error})              on any failure
 *
 * A before_handler that fails, returns a validation failure or a malformed envelope, or
 * whose payload the provider's schema rejects, leads to an error row and the
 * error_handler, with no provider call. The success or error handler runs with the
 * completion in one statement (queues.settle_with_handler): it, the error row and the
 * completion commit in one transaction, fenced by the lease (see Completer). Handler
 * names are optional; without a before_handler the provider gets the task payload minus the
 * handler names, unless the provider requires a before_handler (file deletion). A
 * transient error (connection, deadlock, serialization) records nothing of the run: the
 * worker interrupts it (counted; the task runs again after a backoff and is abandoned once
 * this keeps happening), and the provider gets the same idempotency key (the before
 * handler's, from the attempt). A validation failure from the before handler is final
 * (never retried) and completes the task 'validation_failed' (not a dead letter). Messages are sanitized (error-class.ts) before they reach the error
 * handler or an error row. Before the provider call, internal.start_provider_call applies
 * the task type's delivery mode (provider-call.ts): an at-most-once call already started
 * by an earlier lease is not repeated; the task fails with an "unknown outcome" error.
 * For an at-least-once task (which records nothing) that check runs in the before
 * handler's statement (internal.run_before_provider_call), so such a task takes two
 * round trips of its own: the before handler with the check, and the completion with its
 * success or error handler. An at-most-once task records its start in a statement of its
 * own, after the provider payload is checked.
 */
import type { Provider } from '@org/contracts';
import { isThrottledError } from '@org/contracts/throttled';
import { errorMessage, isTransient, sanitizeMessage } from '../error-class.js';
import { failureOf, HandlerInvoker, type HandlerResult } from '../handler-invoker.js';
import { contracts } from '../contracts.js';
import type { Processor, TaskContext, TaskOutcome } from '../processor.js';
import { providerCallAnswer, startProviderCall } from './provider-call.js';
import { traceChild } from '../tracing.js';

const HANDLER_FIELDS = ['task_type', 'before_handler', 'success_handler', 'error_handler'];

export function channelTaskProcessor<P>(provider: Provider<P>): Processor {
  return {
    name: `channel:${provider.name}`,
    async process(context: TaskContext): Promise<TaskOutcome> {
      const { task, pool } = context;
      const { channelTaskPayload } = await contracts();
      const handlers = channelTaskPayload.safeParse(task.payload);
      if (!handlers.success) {
        const problem = handlers.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
        return { outcome: 'failed', error: `invalid handler names in payload: ${problem}` };
      }
      const { before_handler: before, success_handler: onSuccess, error_handler: onError } = handlers.data;
      const original = task.payload;
      const invoker = new HandlerInvoker(pool);

      // 1. Before: the provider's input, with the provider-call check of an at-least-once
      //    task in the same statement (one round trip; applied after the payload's check).
      let input: unknown;
      let checked: { start: HandlerResult | null; startError: string | null } | undefined;
      if (before) {
        let result;
        try {
          const ran = await invoker.callBefore(before, original, task);
          result = ran.result;
          checked = ran;
        } catch (error) {
          if (isTransient(error)) throw error;
          return fail(context, invoker, onError, `${before} raised: ${errorMessage(error)}`);
        }
        if (!result.ok) return fail(context, invoker, onError, result.error);
        const failure = failureOf(before, result.envelope);
        // A validation failure is final: no retry would find the input valid.
        if (failure) return fail(context, invoker, onError, failure, result.envelope.outcome === 'invalid');
        input = result.envelope.payload;
      } else if (provider.requiresBeforeHandler) {
        // The provider acts only on what the database resolved, never on a payload's say-so.
        return fail(
          context,
          invoker,
          onError,
          `${provider.name}: refusing a ${task.taskType} task without a before_handler: it acts only on what a before_handler returns`,
        );
      } else {
        input = Object.fromEntries(Object.entries(original).filter(([key]) => !HANDLER_FIELDS.includes(key)));
      }
      const parsed = provider.payloadSchema.safeParse(input);
      if (!parsed.success) {
        const problem = parsed.error.issues.map((i) => `${i.path.join('.') || 'payload'}: ${i.message}`).join('; ');
        return fail(
          context,
          invoker,
          onError,
          `invalid ${task.taskType} payload${before ? ` from ${before}` : ''}: ${problem}`,
        );
      }

      // 2. The provider: the side effect, once its start is recorded (at-most-once channels).
      if (checked?.startError != null)
        return fail(context, invoker, onError, `internal.start_provider_call raised: ${checked.startError}`);
      try {
        const start = checked?.start ? providerCallAnswer(checked.start) : await startProviderCall(invoker, task);
        if (!start.proceed) return fail(context, invoker, onError, start.error);
      } catch (error) {
        if (isTransient(error)) throw error;
        return fail(context, invoker, onError, `internal.start_provider_call raised: ${errorMessage(error)}`);
      }
      let workerPayload: unknown;
      try {
        workerPayload = await traceChild('queue.provider', { 'queue.provider.name': provider.name }, () =>
          provider.send(parsed.data, {
            taskId: task.taskId,
            taskLeaseId: task.taskLeaseId,
            taskType: task.taskType,
            signal: context.signal,
          }),
        );
      } catch (error) {
        // The provider refused the call for now: the worker records the throttle and gives
        // the task back uncounted (throttle.ts); no error handler, no failed attempt.
        if (isThrottledError(error)) throw error;
        return fail(context, invoker, onError, `${provider.name}: ${errorMessage(error)}`);
      }

      // 3. Success facts and the completion, together, in one statement: a handler failure
      //    fails the task; a raise rolls its writes back and fails the task (the provider
      //    call happened).
      if (!onSuccess) return { outcome: 'succeeded' };
      return {
        outcome: 'succeeded',
        handler: {
          functionName: onSuccess,
          body: { original_payload: original, worker_payload: workerPayload ?? null },
          mode: 'success',
          raisedPrefix: `${provider.name} succeeded but ${onSuccess} raised: `,
        },
      };
    },
  };
}

/** The failure path: error row, error_handler, completion, in one transaction. */
function fail(
  { task }: TaskContext,
  _invoker: HandlerInvoker,
  onError: string | undefined,
  unsafeMessage: string,
  final = false,
): TaskOutcome {
  // The error handler and the error row get the same message, one PostgreSQL can store.
  const message = sanitizeMessage(unsafeMessage);
  const base: TaskOutcome = final
    ? { outcome: 'validation_failed', error: message, final }
    : { outcome: 'failed', error: message };
  if (!onError) return base;
  // The error handler with the completion, in one statement: its failure, or its raise
  // (its writes rolled back), is one more error row.
  return {
    ...base,
    handler: {
      functionName: onError,
      body: { original_payload: task.payload, error: message },
      mode: 'error',
      raisedPrefix: `${onError} raised: `,
    },
  };
}
