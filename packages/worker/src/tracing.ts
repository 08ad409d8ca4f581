/**
 * OpenTelemetry traces of the worker, through @opentelemetry/api only: when the
 * application registers an SDK (a global TracerProvider, and a context manager for
 * parent/child spans across awaits), every task becomes one CONSUMER span,
 * `process <task type>`, from its claim to its completion, with children:
 *
 *   claim <task type>     the claim call that leased it (one per task of the claim)
 *   queue.handler         each handler or db_function step run through internal.run_function
 *   queue.provider        the provider call (email, SMS, file deletion)
 *   complete <task type>  the completion (and error rows) written to the database
 *
 * From enqueue to completion: a task enqueued with a trace context (the PRODUCER span
 * `send <task type>` of @org/queue-client's enqueue, a step's span for the tasks a
 * supervisor enqueues, or what an app set with setTraceContext; queues.task_trace) gets a
 * process span that is a child of that context and links to it, so one trace runs from
 * the request that enqueued through every task it led to. The OpenTelemetry messaging
 * conventions let a process span of a single message be a child of its creation
 * context and recommend the link; the link stays meaningful to a backend that splits
 * traces. The contexts of a claim's tasks are read in one query after the claim
 * (queues.task_traces). A task enqueued without one starts a trace of its own, as before.
 * The tasks a db_function step enqueues carry the step's span as their context
 * (queues.run_steps sets it while the step runs): a supervisor's child tasks are children
 * of the supervisor run that enqueued them. Handlers too (activeTraceparent: the handler
 * invoker's runFunction, the completer's settle_with_handler).
 *
 * Attributes follow the messaging conventions (names in @org/queue-client's tracing.ts):
 * messaging.system = pg_task_queue, messaging.operation.type (process, receive, settle),
 * messaging.operation.name, messaging.destination.name (the task type),
 * messaging.message.id (the task id), messaging.client.id (the worker id),
 * messaging.batch.message_count (the tasks of the claim); this queue's own under
 * messaging.pg_task_queue.task.*: lease_id, lease_count, and outcome (succeeded, failed,
 * abandoned, cancelled, validation_failed, lease_lost, released; none when the database
 * connection failed and the task will run again). A task that did not succeed has
 * error.type = its outcome and status ERROR with the error message. With no SDK
 * registered, every function here checks one flag and calls straight through (not even a
 * promise of its own; a `run` that throws instead of rejecting throws to the caller): no
 * span, no context, no allocation beyond the closure the caller already made.
 * @opentelemetry/api itself is loaded only once an SDK has registered a tracer provider
 * (which it does through the API's global, read here without loading the API).
 */
import type { Attributes, Context, Link, Span, SpanContext, Tracer } from '@opentelemetry/api';
import {
  MESSAGING_ATTRIBUTES as ATTR,
  MESSAGING_SYSTEM,
  otelApi as api,
  parseTraceContext,
  readTaskTraces,
  toTraceContext,
  tracingEnabled,
  type ClaimedTask,
  type Queryable,
} from '@org/queue-client';

export { tracingEnabled };

const TRACER_NAME = '@org/worker';

const tracer = (): Tracer => api().trace.getTracer(TRACER_NAME);

/** Task spans by task id, from the claim to the end of the task. */
const taskSpans = new Map<string, Span>();
/** Tasks whose processing runs inside traceTask. */
const started = new Set<string>();
/** The context key under which a task's span context carries its task type. */
let taskTypeKey: symbol | undefined;
const taskTypeKeyOf = () => (taskTypeKey ??= api().createContextKey('@org/worker task type'));

/**
 * Runs a claim (`claim` returns the claimed tasks) and opens one task span per claimed
 * task, started when the claim started, each with a `claim <task type>` child covering
 * the call. With `db`, the tasks' trace contexts are read in one query after the claim
 * (queues.task_traces): a task's span continues its context (see the top of this file).
 * A failed read leaves the spans without it; the claim is not failed for a trace.
 */
export function traceClaim(
  workerId: string,
  claim: () => Promise<ClaimedTask[]>,
  db?: Queryable,
): Promise<ClaimedTask[]> {
  return tracingEnabled() ? tracedClaim(workerId, claim, db) : claim();
}

async function tracedClaim(
  workerId: string,
  claim: () => Promise<ClaimedTask[]>,
  db: Queryable | undefined,
): Promise<ClaimedTask[]> {
  const { context, trace, SpanKind } = api();
  const claimedAt = new Date();
  const tasks = await claim();
  const ended = new Date();
  const producers = new Map<string, SpanContext>();
  if (db && tasks.length > 0) {
    try {
      const traces = await readTaskTraces(
        db,
        tasks.map((t) => t.taskId),
      );
      for (const [id, stored] of traces) {
        const spanContext = parseTraceContext(stored);
        if (spanContext) producers.set(id, spanContext);
      }
    } catch {
      // No trace contexts: the spans start traces of their own.
    }
  }
  for (const task of tasks) {
    const producer = producers.get(task.taskId);
    const links: Link[] = producer ? [{ context: producer }] : [];
    const parent: Context = producer ? trace.setSpanContext(context.active(), producer) : context.active();
    const span = tracer().startSpan(
      `process ${task.taskType}`,
      {
        kind: SpanKind.CONSUMER,
        startTime: claimedAt,
        root: !producer,
        links,
        attributes: {
          [ATTR.system]: MESSAGING_SYSTEM,
          [ATTR.operationType]: 'process',
          [ATTR.operationName]: 'process',
          [ATTR.destination]: task.taskType,
          [ATTR.messageId]: task.taskId,
          [ATTR.clientId]: workerId,
          [ATTR.leaseId]: task.taskLeaseId,
          [ATTR.leaseCount]: task.leaseCount,
        },
      },
      parent,
    );
    const claimSpan = tracer().startSpan(
      `claim ${task.taskType}`,
      {
        kind: SpanKind.CLIENT,
        startTime: claimedAt,
        attributes: {
          [ATTR.system]: MESSAGING_SYSTEM,
          [ATTR.operationType]: 'receive',
          [ATTR.operationName]: 'claim',
          [ATTR.destination]: task.taskType,
          [ATTR.batchCount]: tasks.length,
          [ATTR.clientId]: workerId,
        },
      },
      trace.setSpan(context.active(), span),
    );
    claimSpan.end(ended);
    taskSpans.set(task.taskId, span);
  }
  return tasks;
}

/**
 * Runs a task's processing (`run`) inside its task span, and ends the span when `run`
 * settles. The outcome comes from taskOutcome (called by the worker's events).
 */
export function traceTask<T>(task: ClaimedTask, run: () => Promise<T>): Promise<T> {
  const span = taskSpans.get(task.taskId);
  return span ? tracedTask(task, span, run) : run();
}

async function tracedTask<T>(task: ClaimedTask, span: Span, run: () => Promise<T>): Promise<T> {
  const { context, trace } = api();
  started.add(task.taskId);
  try {
    return await context.with(trace.setSpan(context.active(), span).setValue(taskTypeKeyOf(), task.taskType), run);
  } finally {
    started.delete(task.taskId);
    taskSpans.delete(task.taskId);
    span.end();
  }
}

/** Records how a task ended on its span (before traceTask ends it). */
export function taskOutcome(taskId: string, outcome: string, error?: string): void {
  const span = taskSpans.get(taskId);
  if (!span) return;
  const { SpanStatusCode } = api();
  span.setAttribute(ATTR.outcome, outcome);
  if (outcome !== 'succeeded' && outcome !== 'released') span.setAttribute(ATTR.errorType, outcome);
  if (error) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: error });
  } else if (outcome === 'succeeded') {
    span.setStatus({ code: SpanStatusCode.OK });
  }
}

/**
 * Runs `run` in a child span of the current one (the task's): a handler's or a step's
 * call (`queue.handler`) and a provider call (`queue.provider`) as named, and the
 * completion, asked for as `queue.complete` with the attribute `queue.task.outcome`, as
 * the span `complete <task type>` (a settle operation of the messaging conventions).
 * Without an SDK, or outside a task, it only calls `run`.
 */
export function traceChild<T>(name: string, attributes: Attributes, run: () => Promise<T>): Promise<T> {
  return tracingEnabled() && api().trace.getActiveSpan() ? tracedChild(name, attributes, run) : run();
}

async function tracedChild<T>(name: string, attributes: Attributes, run: () => Promise<T>): Promise<T> {
  const { context, SpanKind, SpanStatusCode } = api();
  let spanName = name;
  let spanAttributes = attributes;
  let kind = SpanKind.INTERNAL;
  if (name === 'queue.complete') {
    const taskType = context.active().getValue(taskTypeKeyOf()) as string | undefined;
    spanName = taskType === undefined ? 'complete' : `complete ${taskType}`;
    kind = SpanKind.CLIENT;
    const { 'queue.task.outcome': outcome, ...rest } = attributes;
    spanAttributes = {
      ...rest,
      [ATTR.system]: MESSAGING_SYSTEM,
      [ATTR.operationType]: 'settle',
      [ATTR.operationName]: 'complete',
      ...(taskType === undefined ? {} : { [ATTR.destination]: taskType }),
      ...(outcome === undefined ? {} : { [ATTR.outcome]: outcome }),
    };
  }
  return tracer().startActiveSpan(spanName, { kind, attributes: spanAttributes }, async (span) => {
    try {
      return await run();
    } catch (error) {
      span.recordException(error as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error)?.message });
      throw error;
    } finally {
      span.end();
    }
  });
}

/** What traceCompletion needs of an outcome (processor.ts's TaskOutcome). */
interface CompletionOf {
  outcome: string;
  step?: { functionName: string };
  handler?: { functionName: string };
  effects?: (...args: never[]) => unknown;
}

/**
 * Runs a task's completion (`complete`, given the outcome to record) as children of the
 * task's span. A step's call, and a completion with its handler, are one statement each
 * (queues.run_steps, queues.settle_with_handler[s]): a `queue.handler` span for it, then the
 * completion's. Any other completion is the completion's span, its effects bound to the
 * task's span (the completer runs them in its own batch). Without tracing, the completion
 * alone.
 */
export function traceCompletion<O extends CompletionOf, R extends { report: { outcome: string } }>(
  outcome: O,
  complete: (outcome: O) => Promise<R>,
): Promise<R> {
  if (!tracingEnabled()) return complete(outcome);
  const work = outcome.step ?? outcome.handler;
  if (work)
    return traceChild('queue.handler', { 'queue.handler.name': work.functionName }, () => complete(outcome)).then(
      (answer) =>
        traceChild('queue.complete', { 'queue.task.outcome': answer.report.outcome }, () => Promise.resolve(answer)),
    );
  const bound = outcome.effects ? { ...outcome, effects: bindToTask(outcome.effects) } : outcome;
  return traceChild('queue.complete', { 'queue.task.outcome': outcome.outcome }, () => complete(bound));
}

/**
 * The W3C traceparent of the active span (a step's span, when a step is handed to the step
 * runner), or undefined without an SDK or outside a span: what queues.run_steps sets for
 * the tasks the step enqueues.
 */
export function activeTraceparent(): string | undefined {
  if (!tracingEnabled()) return undefined;
  return toTraceContext(api().trace.getActiveSpan()?.spanContext())?.traceparent;
}

/** The events of a Worker that the traces use (as metrics.ts's WorkerEventSource: no import of worker.ts). */
export interface TracedEventSource {
  on(event: 'completed', listener: (task: ClaimedTask, report: { outcome: string; error?: string }) => void): unknown;
  on(event: 'lease_lost', listener: (task: ClaimedTask) => void): unknown;
  on(event: 'released', listener: (taskIds: string[]) => void): unknown;
}

/**
 * Subscribes task outcomes to a worker's events. A task released before it started (the
 * local queue, at shutdown) ends its span here.
 */
export function traceWorkerEvents(worker: TracedEventSource): void {
  worker.on('completed', (task, report) => taskOutcome(task.taskId, report.outcome, report.error));
  worker.on('lease_lost', (task) => taskOutcome(task.taskId, 'lease_lost'));
  worker.on('released', (ids) => {
    for (const id of ids) {
      taskOutcome(id, 'released');
      const span = taskSpans.get(id);
      if (span && !started.has(id)) {
        taskSpans.delete(id);
        span.end();
      }
    }
  });
}

/**
 * Binds `fn` to the current context (the task's span), so that what it traces runs as a
 * child of the task even when another task's turn of the event loop calls it (the
 * completer runs effects in batches).
 */
export function bindToTask<F extends (...args: never[]) => unknown>(fn: F): F {
  if (!tracingEnabled() || !api().trace.getActiveSpan()) return fn;
  const { context } = api();
  return context.bind(context.active(), fn);
}
