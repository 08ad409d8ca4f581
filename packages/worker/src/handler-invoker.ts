/**
 * Calls a task's handlers (before_handler, success_handler, error_handler) through
 * internal.run_function and normalises what they return with the envelope schema.
 */
import type { Envelope } from '@org/contracts';
import { runBeforeProviderCall, runFunction, type Id, type JsonObject, type Queryable } from '@org/queue-client';
import { contracts } from './contracts.js';
import { activeTraceparent, traceChild } from './tracing.js';

export type HandlerResult = { ok: true; envelope: Envelope } | { ok: false; error: string };

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
   * check of the task's lease, in one statement (internal.run_before_provider_call):
   * `start` is the check's answer, null when it was not made (the caller then makes
   * it with internal.start_provider_call); `startError` the message of a raise of the
   * check. A raise of the handler is thrown, as by call().
   */
  async callBefore(
    name: string,
    body: JsonObject,
    lease: { taskId: Id; taskLeaseId: Id },
  ): Promise<{ result: HandlerResult; start: HandlerResult | null; startError: string | null }> {
    const ran = await traceChild('queue.handler', { 'queue.handler.name': name }, () =>
      runBeforeProviderCall(
        this.db,
        { beforeHandler: name, payload: body, taskId: lease.taskId, taskLeaseId: lease.taskLeaseId },
        activeTraceparent(),
      ),
    );
    return {
      result: await parseResult(name, ran.beforeResult),
      start: ran.startResult === null ? null : await parseResult(START_PROVIDER_CALL_NAME, ran.startResult),
      startError: ran.startError,
    };
  }

  /** The same invoker on another connection (a transaction's client). */
  on(db: Queryable): HandlerInvoker {
    return new HandlerInvoker(db);
  }
}

/** The name the provider-call check's answers are reported under (provider-call.ts). */
const START_PROVIDER_CALL_NAME = 'internal.start_provider_call';

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
