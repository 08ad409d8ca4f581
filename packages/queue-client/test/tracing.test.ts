// The queue client's side of traces from enqueue to completion: with an OpenTelemetry SDK
// registered, each enqueue makes a PRODUCER span `send <task type>` (messaging
// conventions' attributes) and stores its context with the task (queues.task_trace), in
// the same statement, on a pool or inside a transaction, without leaking it to the
// transaction's later enqueues; without an SDK, no span and no row.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { context, createTraceState, SpanKind, trace, TraceFlags } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import {
  connect,
  enqueue,
  enqueueMany,
  enqueueUnique,
  parseTraceContext,
  QueueError,
  setTraceContext,
  tracingEnabled,
  withTransaction,
} from '../src/index.js';

let db: TestDatabase;
let app: pg.Pool;
const exporter = new InMemorySpanExporter();

beforeAll(async () => {
  db = await createTestDatabase();
  app = connect({ connectionString: db.url('app') });
});
afterAll(async () => {
  trace.disable();
  context.disable();
  await app?.end();
  await db?.drop();
});

const traceOf = async (taskId: string) =>
  (
    await db.query<{ traceparent: string; tracestate: string | null }>(
      'select traceparent, tracestate from queues.task_trace where task_id = $1',
      [taskId],
    )
  ).rows[0];
const traceparentOf = (span: ReadableSpan) =>
  `00-${span.spanContext().traceId}-${span.spanContext().spanId}-0${span.spanContext().traceFlags}`;
const sends = () => exporter.getFinishedSpans().filter((s) => s.name.startsWith('send'));

describe('without an SDK', () => {
  it('makes no span and stores no trace context', async () => {
    expect(tracingEnabled()).toBe(false);
    const onPool = await enqueue(app, { taskType: 'product_resync', payload: { n: 1 } });
    const [inBatch] = await enqueueMany(app, [{ taskType: 'product_resync', payload: { n: 2 } }]);
    const unique = await enqueueUnique(app, { taskType: 'product_resync', payload: {}, unique: { key: 'no-sdk' } });
    for (const id of [onPool, inBatch, unique.taskId]) expect(await traceOf(id)).toBeUndefined();
    expect(exporter.getFinishedSpans()).toEqual([]);
  });
});

describe('with an SDK registered', () => {
  beforeAll(() => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  });

  it('enqueue on a pool: a PRODUCER span send <type> whose context the task keeps', async () => {
    exporter.reset();
    expect(tracingEnabled()).toBe(true);
    const id = await enqueue(app, { taskType: 'product_resync', payload: { n: 3 } });
    const [send] = sends();
    expect(send.name).toBe('send product_resync');
    expect(send.kind).toBe(SpanKind.PRODUCER);
    expect(send.attributes).toEqual({
      'messaging.system': 'pg_task_queue',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'send',
      'messaging.destination.name': 'product_resync',
      'messaging.message.id': id,
    });
    expect(await traceOf(id)).toEqual({ traceparent: traceparentOf(send), tracestate: null });
  });

  it("inside an app's span and transaction: a child of that span, the tracestate kept, not inherited by later enqueues", async () => {
    exporter.reset();
    const parent = trace.setSpanContext(context.active(), {
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: '00f067aa0ba902b7',
      traceFlags: TraceFlags.SAMPLED,
      isRemote: true,
      traceState: createTraceState('vendor=opaque'),
    });
    const tracer = trace.getTracer('test-app');
    const [traced, plain, kickoff] = await context.with(parent, () =>
      tracer.startActiveSpan('POST /orders', async (span) => {
        try {
          return await withTransaction(app, async (client) => {
            const first = await enqueue(client, { taskType: 'product_resync', payload: { n: 4 } });
            // A later enqueue in SQL within the same transaction carries no context...
            const second = (await client.query(`select queues.enqueue('product_resync', '{"n": 5}') as id`)).rows[0].id;
            // ...unless the app sets it for the transaction (what a kickoff needs).
            expect(await setTraceContext(client)).toBe(true);
            const third = (await client.query(`select queues.enqueue('product_resync', '{"n": 6}') as id`)).rows[0].id;
            return [first, String(second), String(third)];
          });
        } finally {
          span.end();
        }
      }),
    );
    const appSpan = exporter.getFinishedSpans().find((s) => s.name === 'POST /orders')!;
    const [send] = sends();
    expect(send.parentSpanContext?.spanId).toBe(appSpan.spanContext().spanId);
    expect(send.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(await traceOf(traced)).toEqual({ traceparent: traceparentOf(send), tracestate: 'vendor=opaque' });
    expect(await traceOf(plain)).toBeUndefined();
    expect(await traceOf(kickoff)).toEqual({ traceparent: traceparentOf(appSpan), tracestate: 'vendor=opaque' });
    // Outside a span, nothing to set.
    const client = await app.connect();
    try {
      expect(await setTraceContext(client)).toBe(false);
    } finally {
      client.release();
    }
  });

  it('enqueueUnique: the inserted task keeps the context; a skip names no message and writes nothing', async () => {
    exporter.reset();
    const inserted = await enqueueUnique(app, { taskType: 'product_resync', payload: {}, unique: { key: 'traced' } });
    const skipped = await enqueueUnique(app, { taskType: 'product_resync', payload: {}, unique: { key: 'traced' } });
    expect(skipped).toMatchObject({ taskId: inserted.taskId, outcome: 'skipped' });
    const [first, second] = sends();
    expect(first.attributes['messaging.message.id']).toBe(inserted.taskId);
    expect(second.attributes['messaging.message.id']).toBeUndefined();
    expect(await traceOf(inserted.taskId)).toEqual({ traceparent: traceparentOf(first), tracestate: null });
  });

  it('enqueueMany: one send span for the batch, its context kept by every task', async () => {
    exporter.reset();
    const ids = await enqueueMany(app, [
      { taskType: 'product_resync', payload: { n: 7 } },
      { taskType: 'store_discovery', payload: { n: 8 } },
    ]);
    const [send] = sends();
    expect(send.name).toBe('send');
    expect(send.attributes).toEqual({
      'messaging.system': 'pg_task_queue',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'send',
      'messaging.batch.message_count': 2,
    });
    for (const id of ids) expect(await traceOf(id)).toEqual({ traceparent: traceparentOf(send), tracestate: null });
  });

  it('a refused enqueue: the span records the error; nothing is written', async () => {
    exporter.reset();
    const before = (await db.query('select count(*)::int as n from queues.task_trace')).rows[0].n;
    await expect(enqueue(app, { taskType: 'no_such_type', payload: {} })).rejects.toBeInstanceOf(QueueError);
    const [send] = sends();
    expect(send.status.code).toBe(2); // ERROR
    expect(send.attributes['error.type']).toBe('invalid_input');
    expect((await db.query('select count(*)::int as n from queues.task_trace')).rows[0].n).toBe(before);
  });
});

describe('parseTraceContext', () => {
  it('reads a W3C traceparent and refuses what the W3C format refuses', () => {
    expect(
      parseTraceContext({
        traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
        tracestate: 'vendor=opaque',
      }),
    ).toMatchObject({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: '00f067aa0ba902b7',
      traceFlags: 1,
      isRemote: true,
    });
    for (const bad of [
      'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`,
      '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra',
      'garbage',
    ])
      expect(parseTraceContext({ traceparent: bad, tracestate: null })).toBeUndefined();
  });
});
