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
 * the task type's delivery mode (below): an at-most-once call already started
 * by an earlier lease is not repeated; the task fails with an "unknown outcome" error.
 * For an at-least-once task (which records nothing) that check runs in the before
 * handler's statement (internal.run_before_provider_call). The before handlers of the
 * channel tasks that start in one turn of the event loop go to the database together, one
 * statement per batch (internal.run_before_provider_calls, BeforeBatches below), each call
 * in a subtransaction of its own: one task's raise, lost lease or validation failure is
 * that task's alone. So an email task's own round trips are its share of its batch's
 * before statement and its share of a completion round (its success or error handler
 * settles with its completion). An at-most-once task records its start in a statement of
 * its own (synchronously committed, before the call), after the provider payload is
 * checked.
 *
 * Delivery modes (internal.channel_delivery_mode, sql/internal/delivery.sql). Just before
 * a provider call the worker asks internal.start_provider_call, in its own committed
 * statement (for an at-least-once task with a before_handler, the before handler's
 * statement):
 *   at_least_once  nothing is recorded; the call is made (again on a later lease: the
 *                  provider deduplicates on the idempotency key).
 *   at_most_once   the start of the call is recorded under this lease before it is made;
 *                  a later lease that finds a started call without an outcome does not
 *                  call again and fails the task with an "unknown outcome" error instead.
 */
import type { Envelope, Provider } from '@org/contracts';
import { isThrottledError } from '@org/contracts/throttled';
import {
  runBeforeProviderCalls,
  runFunction,
  type BeforeProviderCallAnswer,
  type BeforeProviderCallRequest,
  type ClaimedTask,
  type Id,
  type JsonObject,
  type Queryable,
} from '@org/queue-client';
import { errorMessage, isTransient, sanitizeMessage } from '../error-class.js';
import { contracts } from '../contracts.js';
import type { Processor, TaskContext, TaskOutcome } from '../processor.js';
import { activeTraceparent, traceChild } from '../tracing.js';

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

export type HandlerResult = { ok: true; envelope: Envelope } | { ok: false; error: string };

/**
 * Calls a task's handlers (before_handler, success_handler, error_handler) through
 * internal.run_function and normalises what they return with the envelope schema.
 */
export class HandlerInvoker {
  constructor(private readonly db: Queryable) {}

  /**
   * Runs `name` with `body`. A malformed result is returned as `{ ok: false }`; an
   * exception raised by the function (or the runner) is thrown. With tracing on, the
   * handler's span is the trace context of the tasks it enqueues.
   */
  async call(name: string, body: JsonObject): Promise<HandlerResult> {
    const result = await traceChild('queue.handler', { 'queue.handler.name': name }, () =>
      runFunction(this.db, name, body, activeTraceparent()),
    );
    return parseResult(name, result);
  }

  /**
   * Runs the before_handler `name` with `body` and, when it succeeded, the provider-call
   * check of the task's lease (internal.run_before_provider_call), in the statement of
   * its batch (BeforeBatches): `start` is the check's answer, null when it was not made (the
   * caller then makes it with internal.start_provider_call); `startError` the message of a
   * raise of the check. A raise of the handler is thrown (this call's alone), as by call().
   */
  async callBefore(
    name: string,
    body: JsonObject,
    lease: { taskId: Id; taskLeaseId: Id },
  ): Promise<{ result: HandlerResult; start: HandlerResult | null; startError: string | null }> {
    const answer = await traceChild('queue.handler', { 'queue.handler.name': name }, () => {
      const traceparent = activeTraceparent();
      return BeforeBatches.of(this.db).submit({
        beforeHandler: name,
        payload: body,
        taskId: lease.taskId,
        taskLeaseId: lease.taskLeaseId,
        ...(traceparent ? { traceparent } : {}),
      });
    });
    if (!answer.ok) throw answer.error;
    const ran = answer.ran;
    return {
      result: await parseResult(name, ran.beforeResult),
      start: ran.startResult === null ? null : await parseResult(START_PROVIDER_CALL, ran.startResult),
      startError: ran.startError,
    };
  }

  /** The same invoker on another connection (a transaction's client). */
  on(db: Queryable): HandlerInvoker {
    return new HandlerInvoker(db);
  }
}

/** The most calls one before statement takes (internal.run_before_provider_calls: 50). */
const MAX_BATCH_CALLS = 50;

/**
 * The before statements one pool runs at a time. The calls submitted while they run wait
 * and go together in the next statement, once one returns (group commit: no wait when
 * the pool is idle, larger batches under load, one commit per batch).
 */
const MAX_IN_FLIGHT = 1;

/**
 * A before statement running longer than this (a handler waiting for a lock, say) stops
 * counting towards MAX_IN_FLIGHT: the calls behind it go in a statement of their own
 * rather than wait for it.
 */
const STALLED_MS = 50;

/**
 * The before handlers submitted on one connection pool, sent as one statement per batch
 * (internal.run_before_provider_calls): the calls of one turn of the event loop (the
 * executor starts the tasks of a claim together) and those that arrive while the pool's
 * before statement runs. Each call gets its own answer; when the statement itself fails (a
 * statement timeout, a cancel, the connection), each call is sent again alone.
 */
class BeforeBatches {
  static readonly #byDb = new WeakMap<Queryable, BeforeBatches>();

  static of(db: Queryable): BeforeBatches {
    let batches = BeforeBatches.#byDb.get(db);
    if (!batches) {
      batches = new BeforeBatches(db);
      BeforeBatches.#byDb.set(db, batches);
    }
    return batches;
  }

  #pending: {
    request: BeforeProviderCallRequest;
    resolve: (answer: BeforeProviderCallAnswer) => void;
    reject: (error: unknown) => void;
  }[] = [];
  #scheduled = false;
  /** Statements running and not yet stalled (STALLED_MS). */
  #inFlight = 0;

  private constructor(private readonly db: Queryable) {}

  submit(request: BeforeProviderCallRequest): Promise<BeforeProviderCallAnswer> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ request, resolve, reject });
      this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#scheduled || this.#inFlight >= MAX_IN_FLIGHT || this.#pending.length === 0) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#send();
    });
  }

  #send(): void {
    while (this.#inFlight < MAX_IN_FLIGHT && this.#pending.length > 0) {
      const batch = this.#pending.splice(0, MAX_BATCH_CALLS);
      this.#inFlight++;
      let counted = true;
      const uncount = () => {
        if (!counted) return;
        counted = false;
        this.#inFlight--;
        this.#schedule();
      };
      const stalled = setTimeout(uncount, STALLED_MS);
      stalled.unref();
      runBeforeProviderCalls(
        this.db,
        batch.map((call) => call.request),
      )
        .then(
          (answers) => batch.forEach((call, j) => call.resolve(answers[j]!)),
          (error: unknown) => {
            if (batch.length === 1) {
              batch[0]!.reject(error);
              return;
            }
            // The statement failed as a whole: a statement timeout or a cancel (57014) is
            // not caught by a call's subtransaction, and a lost connection is no call's.
            // Nothing of it committed: each call again in a statement of its own, so that
            // only the call at fault fails (each with its own statement timeout).
            for (const call of batch)
              runBeforeProviderCalls(this.db, [call.request]).then(
                (answers) => call.resolve(answers[0]!),
                (alone: unknown) => call.reject(alone),
              );
          },
        )
        .finally(() => {
          clearTimeout(stalled);
          uncount();
        });
    }
  }
}

async function parseResult(name: string, result: unknown): Promise<HandlerResult> {
  const { parseEnvelope } = await contracts();
  const parsed = parseEnvelope(result);
  return parsed.ok ? { ok: true, envelope: parsed.envelope } : { ok: false, error: `${name}: ${parsed.error}` };
}

/** The message an envelope carries when it is not a plain success, or undefined. */
export function failureOf(name: string, envelope: Envelope): string | undefined {
  switch (envelope.outcome) {
    case 'succeeded':
      return undefined;
    case 'error':
      return `${name}: ${envelope.message}`;
    case 'invalid':
      return `${name}: validation failure: ${envelope.message}`;
    case 'status':
      return `${name}: status ${envelope.status}`;
  }
}

/** The provider-call check (see the delivery modes above). */
export const START_PROVIDER_CALL = 'internal.start_provider_call';

export type ProviderCallStart = { proceed: true } | { proceed: false; error: string };

/** Records (or checks) the start of the provider call; raises what the database raises. */
export async function startProviderCall(
  invoker: HandlerInvoker,
  task: Pick<ClaimedTask, 'taskId' | 'taskLeaseId'>,
): Promise<ProviderCallStart> {
  return providerCallAnswer(
    await invoker.call(START_PROVIDER_CALL, { task_id: task.taskId, task_lease_id: task.taskLeaseId }),
  );
}

/**
 * The answer of internal.start_provider_call as a decision, whether the worker asked for it
 * alone (startProviderCall) or with the before_handler (HandlerInvoker.callBefore).
 */
export function providerCallAnswer(answer: HandlerResult): ProviderCallStart {
  if (!answer.ok) return { proceed: false, error: answer.error };
  const failure = failureOf(START_PROVIDER_CALL, answer.envelope);
  if (failure) return { proceed: false, error: failure };
  const payload = (answer.envelope as { payload?: { proceed?: unknown; error?: unknown } }).payload;
  if (payload?.proceed === true) return { proceed: true };
  return {
    proceed: false,
    error: typeof payload?.error === 'string' ? payload.error : `${START_PROVIDER_CALL}: no answer`,
  };
}
