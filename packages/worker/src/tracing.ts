/**
 * OpenTelemetry traces of the worker, through @opentelemetry/api only: when the
 * application registers an SDK (a global TracerProvider, and a context manager for
 * parent/child spans across awaits), every task becomes one span, `queue.task <type>`,
 * from its claim to its completion, with children:
 *
 *   queue.claim      the claim call that leased it (shared by the tasks of one claim)
 *   queue.handler    each handler or db_function step run through internal.run_function
 *   queue.provider   the provider call (email, SMS, file deletion)
 *   queue.complete   the completion (and error rows) written to the database
 *
 * Attributes: queue.task.id, queue.task.type, queue.task.lease_id, queue.worker.id,
 * queue.task.outcome (succeeded, failed, abandoned, cancelled, validation_failed, lease_lost, released;
 * none when the database connection failed and the task will run again) and queue.task.error when one was recorded. With no SDK registered, every
 * function here checks one flag and calls straight through (not even a promise of its
 * own; a `run` that throws instead of rejecting throws to the caller): no span, no
 * context, no allocation beyond the closure the caller already made. @opentelemetry/api itself is
 * loaded only once an SDK has registered a tracer provider (which it does through the
 * API's global, read here without loading the API).
 */
import { createRequire } from 'node:module';
import type * as OTel from '@opentelemetry/api';
import type { Attributes, Span, Tracer, TracerProvider } from '@opentelemetry/api';
import type { ClaimedTask } from '@org/queue-client';
import type { Worker } from './worker.js';

const TRACER_NAME = '@org/worker';

/** Where @opentelemetry/api 1.x keeps the globals an SDK registers (its tracer provider as `trace`). */
const OTEL_GLOBAL = Symbol.for('opentelemetry.js.api.1');

const require = createRequire(import.meta.url);
let otel: typeof OTel | undefined;
/** The API's no-op provider (what an unset global delegates to). */
let noopProvider: TracerProvider | undefined;

/** @opentelemetry/api, loaded on first use (only once a provider is registered). */
function api(): typeof OTel {
  if (otel) return otel;
  otel = require('@opentelemetry/api') as typeof OTel;
  noopProvider = new otel.ProxyTracerProvider().getDelegate();
  return otel;
}

/** True when an SDK's TracerProvider is registered globally. */
export function tracingEnabled(): boolean {
  const registered = (globalThis as { [OTEL_GLOBAL]?: { trace?: unknown } })[OTEL_GLOBAL];
  if (registered?.trace === undefined) return false;
  const { trace, ProxyTracerProvider } = api();
  const provider = trace.getTracerProvider();
  const delegate = provider instanceof ProxyTracerProvider ? provider.getDelegate() : provider;
  return delegate !== noopProvider;
}

const tracer = (): Tracer => api().trace.getTracer(TRACER_NAME);

/** Task spans by task id, from the claim to the end of the task. */
const taskSpans = new Map<string, Span>();
/** Tasks whose processing runs inside traceTask. */
const started = new Set<string>();

/**
 * Runs a claim (`claim` returns the claimed tasks) and opens one task span per claimed
 * task, started when the claim started, each with a `queue.claim` child covering the call.
 */
export function traceClaim(workerId: string, claim: () => Promise<ClaimedTask[]>): Promise<ClaimedTask[]> {
  return tracingEnabled() ? tracedClaim(workerId, claim) : claim();
}

async function tracedClaim(workerId: string, claim: () => Promise<ClaimedTask[]>): Promise<ClaimedTask[]> {
  const { context, trace, SpanKind } = api();
  const claimedAt = new Date();
  const tasks = await claim();
  const ended = new Date();
  for (const task of tasks) {
    const span = tracer().startSpan(`queue.task ${task.taskType}`, {
      kind: SpanKind.CONSUMER,
      startTime: claimedAt,
      root: true,
      attributes: {
        'queue.task.id': task.taskId,
        'queue.task.type': task.taskType,
        'queue.task.lease_id': task.taskLeaseId,
        'queue.task.lease_count': task.leaseCount,
        'queue.worker.id': workerId,
      },
    });
    const claimSpan = tracer().startSpan(
      'queue.claim',
      { startTime: claimedAt, attributes: { 'queue.claim.tasks': tasks.length, 'queue.worker.id': workerId } },
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
    return await context.with(trace.setSpan(context.active(), span), run);
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
  span.setAttribute('queue.task.outcome', outcome);
  if (error) {
    span.setAttribute('queue.task.error', error);
    span.setStatus({ code: SpanStatusCode.ERROR, message: error });
  } else if (outcome === 'succeeded') {
    span.setStatus({ code: SpanStatusCode.OK });
  }
}

/**
 * Runs one step of a task (`queue.handler`, `queue.provider`, `queue.complete`) as a
 * child of the current span. Without an SDK, or outside a task, it only calls `run`.
 */
export function traceStep<T>(name: string, attributes: Attributes, run: () => Promise<T>): Promise<T> {
  return tracingEnabled() && api().trace.getActiveSpan() ? tracedStep(name, attributes, run) : run();
}

async function tracedStep<T>(name: string, attributes: Attributes, run: () => Promise<T>): Promise<T> {
  const { SpanStatusCode } = api();
  return tracer().startActiveSpan(name, { attributes }, async (span) => {
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

/**
 * Subscribes task outcomes to a worker's events. A task released before it started (the
 * local queue, at shutdown) ends its span here.
 */
export function traceWorkerEvents(worker: Worker): void {
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
