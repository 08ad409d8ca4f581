/**
 * Calls a task's handlers (before_handler, success_handler, error_handler) through
 * internal.run_function and normalises what they return with the envelope schema.
 */
import type { Envelope } from '@org/handler-types';
import { runFunction, type JsonObject, type Queryable } from '@org/queue-client';
import { handlerTypes } from './handler-types.js';
import { activeTraceparent, traceStep } from './tracing.js';

export type HandlerResult = { ok: true; envelope: Envelope } | { ok: false; error: string };

export class HandlerInvoker {
  constructor(private readonly db: Queryable) {}

  /**
   * Runs `name` with `body`. A malformed result is returned as `{ ok: false }`; an
   * exception raised by the function (or the runner) is thrown. With tracing on, the
   * handler's span is the trace context of the tasks it enqueues.
   */
  async call(name: string, body: JsonObject): Promise<HandlerResult> {
    const result = await traceStep('queue.handler', { 'queue.handler.name': name }, () =>
      runFunction(this.db, name, body, activeTraceparent()),
    );
    const { parseEnvelope } = await handlerTypes();
    const parsed = parseEnvelope(result);
    return parsed.ok ? { ok: true, envelope: parsed.envelope } : { ok: false, error: `${name}: ${parsed.error}` };
  }

  /** The same invoker on another connection (a transaction's client). */
  on(db: Queryable): HandlerInvoker {
    return new HandlerInvoker(db);
  }
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
