// OpenTelemetry: with an SDK registered (sdk-trace-base with an in-memory exporter, the
// AsyncLocalStorage context manager), a real Worker on a real database emits one
// `process <type>` span per task with claim, handler, provider and completion
// children and the task's id, type and outcome (messaging conventions' attribute names);
// with none registered it emits nothing and the tracing helpers call straight through.
// From enqueue to completion across tasks: trace-propagation.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { context, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import type { Provider } from '@org/contracts';
import { createLogger, dbFunctionProcessor, channelTaskProcessor, ProcessorRegistry, Worker } from '../src/index.js';
import { traceChild, tracingEnabled } from '../src/tracing.js';
import { enqueue, eventually, factsOf, installFixtures } from './support/fixtures.js';

let db: TestDatabase;
const exporter = new InMemorySpanExporter();
const provider: Provider<{ to: string; idempotency_key?: string }> = {
  name: 'test-provider',
  payloadSchema: z.strictObject({ to: z.string().min(1), idempotency_key: z.string().optional() }),
  send(payload) {
    if (payload.to === 'fail@example.com') return Promise.reject(new Error('mailbox unavailable'));
    return Promise.resolve({ delivered_to: payload.to });
  },
};

function newWorker(id: string): Worker {
  return new Worker({
    databaseUrl: db.url('worker'),
    roles: ['db_function', 'test_channel'],
    workerId: id,
    concurrency: 2,
    pollIntervalMs: 100,
    heartbeatIntervalMs: 1000,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 1000,
    registry: new ProcessorRegistry()
      .register('db_function', dbFunctionProcessor())
      .register('test_channel', channelTaskProcessor(provider)),
    logger: createLogger('silent'),
  });
}

async function runUntilDone(worker: Worker, ids: string[]): Promise<void> {
  await worker.start();
  try {
    for (const id of ids)
      await eventually(async () => (await factsOf(db, id)).outcome !== null, `task ${id} completed`);
  } finally {
    await worker.stop();
  }
}

beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
});
afterAll(async () => {
  trace.disable();
  context.disable();
  await db?.drop();
});

describe('without an SDK', () => {
  it('is disabled, runs steps straight through, and the worker emits no span', async () => {
    expect(tracingEnabled()).toBe(false);
    expect(await traceChild('queue.handler', {}, () => Promise.resolve(42))).toBe(42);
    const id = await enqueue(db, 'db_function', { db_function: 'fixture.step', key: 'no-sdk' });
    await runUntilDone(newWorker('trace-off'), [id]);
    expect((await factsOf(db, id)).outcome).toBe('succeeded');
    expect(exporter.getFinishedSpans()).toEqual([]);
  });
});

describe('with an SDK registered', () => {
  beforeAll(() => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  });

  const byTask = (spans: ReadableSpan[], id: string) =>
    spans.find((s) => s.name.startsWith('process ') && s.attributes['messaging.message.id'] === id)!;
  const children = (spans: ReadableSpan[], parent: ReadableSpan) =>
    spans
      .filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId)
      .map((s) => s.name)
      .sort();

  it('one span per task, with claim, handler, provider and completion children, id, type and outcome', async () => {
    exporter.reset();
    expect(tracingEnabled()).toBe(true);
    const handlers = {
      before_handler: 'fixture.before',
      success_handler: 'fixture.on_success',
      error_handler: 'fixture.on_error',
    };
    const ok = await enqueue(db, 'test_channel', {
      ...handlers,
      before: { success: true, payload: { to: 'a@example.com' } },
    });
    const bad = await enqueue(db, 'test_channel', {
      ...handlers,
      before: { success: true, payload: { to: 'fail@example.com' } },
    });
    const step = await enqueue(db, 'db_function', { db_function: 'fixture.step', key: 'traced' });
    await runUntilDone(newWorker('trace-on'), [ok, bad, step]);

    const spans = exporter.getFinishedSpans();
    const okSpan = byTask(spans, ok);
    expect(okSpan.name).toBe('process test_channel');
    expect(okSpan.kind).toBe(SpanKind.CONSUMER);
    expect(okSpan.attributes).toMatchObject({
      'messaging.system': 'pg_task_queue',
      'messaging.operation.type': 'process',
      'messaging.message.id': ok,
      'messaging.destination.name': 'test_channel',
      'messaging.pg_task_queue.task.outcome': 'succeeded',
      'messaging.client.id': 'trace-on',
    });
    // Enqueued without a trace context (the fixtures enqueue in SQL): a trace of its own.
    expect(okSpan.parentSpanContext).toBeUndefined();
    expect(okSpan.links).toEqual([]);
    // Handlers: before (with the provider call's start, in one statement), success.
    expect(children(spans, okSpan)).toEqual([
      'claim test_channel',
      'complete test_channel',
      'queue.handler',
      'queue.handler',
      'queue.provider',
    ]);
    const handlerNames = spans
      .filter((s) => s.name === 'queue.handler' && s.parentSpanContext?.spanId === okSpan.spanContext().spanId)
      .map((s) => s.attributes['queue.handler.name'])
      .sort();
    expect(handlerNames).toEqual(['fixture.before', 'fixture.on_success']);

    const badSpan = byTask(spans, bad);
    expect(badSpan.attributes).toMatchObject({
      'messaging.message.id': bad,
      'messaging.pg_task_queue.task.outcome': 'failed',
      'error.type': 'failed',
    });
    expect(badSpan.status.code).toBe(2); // ERROR
    expect(badSpan.status.message).toContain('mailbox unavailable');
    const providerSpan = spans.find(
      (s) => s.name === 'queue.provider' && s.parentSpanContext?.spanId === badSpan.spanContext().spanId,
    )!;
    expect(providerSpan.status.code).toBe(2);
    expect(providerSpan.events.map((e) => e.name)).toContain('exception');

    const stepSpan = byTask(spans, step);
    expect(stepSpan.attributes).toMatchObject({
      'messaging.destination.name': 'db_function',
      'messaging.pg_task_queue.task.outcome': 'succeeded',
    });
    expect(children(spans, stepSpan)).toEqual(['claim db_function', 'complete db_function', 'queue.handler']);
    // The claim child starts where the task span starts: the span covers claim to completion.
    const claim = spans.find(
      (s) => s.name === 'claim db_function' && s.parentSpanContext?.spanId === stepSpan.spanContext().spanId,
    )!;
    expect(claim.startTime).toEqual(stepSpan.startTime);
    expect(claim.attributes).toMatchObject({
      'messaging.operation.type': 'receive',
      'messaging.operation.name': 'claim',
      'messaging.destination.name': 'db_function',
    });
    const complete = spans.find(
      (s) => s.name === 'complete db_function' && s.parentSpanContext?.spanId === stepSpan.spanContext().spanId,
    )!;
    expect(complete.attributes).toMatchObject({
      'messaging.operation.type': 'settle',
      'messaging.pg_task_queue.task.outcome': 'succeeded',
    });
  });
});
