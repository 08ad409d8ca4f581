/**
 * Trace context from enqueue to the worker (docs/operations.md, "Traces"), through
 * @opentelemetry/api only. When the application registers an OpenTelemetry SDK (a global
 * TracerProvider), `enqueue`, `enqueueUnique` and `enqueueMany` each make a PRODUCER span
 * `send <task type>` and hand its context to the database with the tasks
 * (queues.task_trace, sql/queues/trace.sql); the worker continues it.
 *
 * Attribute names follow the OpenTelemetry semantic conventions for messaging
 * (messaging.system, messaging.operation.type, messaging.operation.name,
 * messaging.destination.name = the task type, messaging.message.id = the task id,
 * messaging.batch.message_count). They are still "development" in the conventions, so
 * they are written out here rather than imported from the conventions' incubating entry
 * point (its advice). Attributes of this queue alone are named under
 * messaging.pg_task_queue.*, as the conventions name a system's own.
 *
 * The context travels in the W3C Trace Context format (traceparent, tracestate), written
 * and read here, whatever propagator the application configures.
 *
 * With no SDK registered, nothing here allocates or loads @opentelemetry/api: one flag is
 * read (the API's global registration) and the plain query runs.
 */
import { createRequire } from 'node:module';
import type * as OTel from '@opentelemetry/api';
import type { Attributes, SpanContext, TracerProvider } from '@opentelemetry/api';

/** messaging.system of this queue's spans. */
export const MESSAGING_SYSTEM = 'pg_task_queue';

/** Attribute names (OpenTelemetry semantic conventions, messaging; and this system's own). */
export const ATTR = {
  system: 'messaging.system',
  operationType: 'messaging.operation.type',
  operationName: 'messaging.operation.name',
  destination: 'messaging.destination.name',
  messageId: 'messaging.message.id',
  batchCount: 'messaging.batch.message_count',
  clientId: 'messaging.client.id',
  errorType: 'error.type',
  leaseId: 'messaging.pg_task_queue.task.lease_id',
  leaseCount: 'messaging.pg_task_queue.task.lease_count',
  outcome: 'messaging.pg_task_queue.task.outcome',
} as const;

const TRACER_NAME = '@org/queue-client';

/** Where @opentelemetry/api 1.x keeps the globals an SDK registers (its tracer provider as `trace`). */
const OTEL_GLOBAL = Symbol.for('opentelemetry.js.api.1');

const require = createRequire(import.meta.url);
let otel: typeof OTel | undefined;
let noopProvider: TracerProvider | undefined;

/** @opentelemetry/api, loaded on first use (only once a provider is registered). */
export function otelApi(): typeof OTel {
  if (otel) return otel;
  otel = require('@opentelemetry/api') as typeof OTel;
  noopProvider = new otel.ProxyTracerProvider().getDelegate();
  return otel;
}

/** True when an SDK's TracerProvider is registered globally. */
export function tracingEnabled(): boolean {
  const registered = (globalThis as { [OTEL_GLOBAL]?: { trace?: unknown } })[OTEL_GLOBAL];
  if (registered?.trace === undefined) return false;
  const { trace, ProxyTracerProvider } = otelApi();
  const provider = trace.getTracerProvider();
  const delegate = provider instanceof ProxyTracerProvider ? provider.getDelegate() : provider;
  return delegate !== noopProvider;
}

/** A W3C trace context, as stored with a task. */
export interface TraceContext {
  traceparent: string;
  tracestate: string | null;
}

const hex = (n: number) => `[0-9a-f]{${n}}`;
const TRACEPARENT = new RegExp(`^(${hex(2)})-(${hex(32)})-(${hex(16)})-(${hex(2)})(-.*)?$`);

/** The W3C traceparent of a span context (version 00). */
export function formatTraceparent(spanContext: SpanContext): string {
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
  return `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
}

/** The trace context of a span context, undefined for an invalid one. */
export function toTraceContext(spanContext: SpanContext | undefined): TraceContext | undefined {
  if (!spanContext || !otelApi().trace.isSpanContextValid(spanContext)) return undefined;
  const tracestate = spanContext.traceState?.serialize() || null;
  return { traceparent: formatTraceparent(spanContext), tracestate };
}

/**
 * The remote span context a stored trace context names; undefined when it is not a valid
 * W3C traceparent (version ff, all-zero ids, a version 00 with more fields).
 */
export function parseTraceContext(context: TraceContext): SpanContext | undefined {
  const m = TRACEPARENT.exec(context.traceparent);
  if (!m) return undefined;
  const [, version, traceId, spanId, flags, rest] = m;
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  const api = otelApi();
  const spanContext: SpanContext = {
    traceId: traceId!,
    spanId: spanId!,
    traceFlags: parseInt(flags!, 16) & 1,
    isRemote: true,
  };
  if (context.tracestate) spanContext.traceState = api.createTraceState(context.tracestate);
  return api.trace.isSpanContextValid(spanContext) ? spanContext : undefined;
}

/** The trace context of the active span (undefined without an SDK or outside a span). */
export function activeTraceContext(): TraceContext | undefined {
  if (!tracingEnabled()) return undefined;
  return toTraceContext(otelApi().trace.getActiveSpan()?.spanContext());
}

/**
 * Runs `send` (an enqueue, given the trace context to store) inside a PRODUCER span
 * `send <task type>` (`send` when the tasks are of several types), a child of the active
 * span. `ids` reads the task ids from the result: one id is the span's
 * messaging.message.id, several its messaging.batch.message_count. The span records a
 * failure (status ERROR, the exception, error.type) and ends when `send` settles.
 */
export function withSendSpan<T>(
  taskTypes: string[],
  send: (context: TraceContext) => Promise<T>,
  ids: (result: T) => string[],
): Promise<T> {
  const api = otelApi();
  const types = [...new Set(taskTypes)];
  const attributes: Attributes = {
    [ATTR.system]: MESSAGING_SYSTEM,
    [ATTR.operationType]: 'send',
    [ATTR.operationName]: 'send',
  };
  if (types.length === 1) attributes[ATTR.destination] = types[0]!;
  if (taskTypes.length > 1) attributes[ATTR.batchCount] = taskTypes.length;
  const name = types.length === 1 ? `send ${types[0]}` : 'send';
  const tracer = api.trace.getTracer(TRACER_NAME);
  return tracer.startActiveSpan(name, { kind: api.SpanKind.PRODUCER, attributes }, async (span) => {
    try {
      const result = await send(toTraceContext(span.spanContext()) ?? { traceparent: '', tracestate: null });
      const taskIds = ids(result);
      if (taskIds.length === 1 && taskTypes.length === 1) span.setAttribute(ATTR.messageId, taskIds[0]!);
      return result;
    } catch (error) {
      span.recordException(error as Error);
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: (error as Error)?.message });
      span.setAttribute(ATTR.errorType, (error as { kind?: string })?.kind ?? (error as Error)?.name ?? 'error');
      throw error;
    } finally {
      span.end();
    }
  });
}
