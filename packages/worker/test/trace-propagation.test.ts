// One trace from an app's request to the end of everything it started: an app, inside its
// span and transaction, enqueues a task through @org/queue-client (a PRODUCER span
// `send test_channel`) and starts a business process through its kickoff
// (comms.send_email, after setTraceContext); a real Worker on a real database processes
// it all: the supervisor's run (a db_function step) enqueues the email task and the next
// supervisor run, which the success handler wakes (or which runs on its own first, and
// enqueues the one after it). Every task's `process <type>` span is
// in the app's trace, a child of (and linked to) the context its enqueue recorded:
// the send span, the app's span, or the step's span of the supervisor run that enqueued
// it. OpenTelemetry SDK: sdk-trace-base with an in-memory exporter and the
// AsyncLocalStorage context manager.
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
import { createResendEmailProvider } from '@org/providers';
import { startFakeResend, type FakeResend } from '@org/providers/testing';
import { enqueue, setTraceContext, withTransaction } from '@org/queue-client';
import { createLogger, dbFunctionProcessor, channelTaskProcessor, ProcessorRegistry, Worker } from '../src/index.js';
import { eventually, installFixtures } from './support/fixtures.js';

let db: TestDatabase;
let resend: FakeResend;
const exporter = new InMemorySpanExporter();
const testProvider: Provider<{ to: string; idempotency_key?: string }> = {
  name: 'test-provider',
  payloadSchema: z.strictObject({ to: z.string().min(1), idempotency_key: z.string().optional() }),
  send: (payload) => Promise.resolve({ delivered_to: payload.to }),
};

beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
  // A success handler that enqueues a task (as a process's handler may).
  await db.query(`
    create function fixture.on_success_spawn(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    begin
      perform queues.enqueue_internal('db_function', '{"db_function": "fixture.step", "key": "spawned"}', _max_attempts => 1);
      return '{"success": true}'::jsonb;
    end $$;
    revoke execute on function fixture.on_success_spawn(jsonb) from public;
    grant execute on function fixture.on_success_spawn(jsonb) to ${db.dbUsers.worker};
    select internal.register_runnable_function('fixture.on_success_spawn(jsonb)');
  `);
  // Supervisor backoffs of 5 s, 10 s, ... become 10 ms, 20 ms, ...
  await db.query(`insert into internal.setting (name, value) values ('backoff_scale', '0.002')`);
  resend = await startFakeResend();
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
});
afterAll(async () => {
  trace.disable();
  context.disable();
  await resend?.close();
  await db?.drop();
});

const spanId = (s: ReadableSpan) => s.spanContext().spanId;
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

describe('a trace from enqueue to completion', () => {
  it("follows an app's enqueue and a business process's supervisor and child tasks to their completions", async () => {
    // The app: a request span, and a transaction that enqueues a task and starts a process.
    const app = trace.getTracer('test-app');
    let appSpan: ReadableSpan | undefined;
    let appTaskId = '';
    let sendEmailTaskId = '';
    await app.startActiveSpan('POST /signup', async (span) => {
      await withTransaction(db.pool('app'), async (client) => {
        appTaskId = await enqueue(client, {
          taskType: 'test_channel',
          payload: {
            before_handler: 'fixture.before',
            success_handler: 'fixture.on_success_spawn',
            error_handler: 'fixture.on_error',
            before: { success: true, payload: { to: 'ada@example.com' } },
          },
          maxAttempts: 1,
        });
        expect(await setTraceContext(client)).toBe(true);
        const { rows } = await client.query(
          `select * from comms.send_email('Team <team@example.com>', 'ada@example.com', 'Welcome', '<p>Hello</p>')`,
        );
        expect(rows[0].validation_failure_message).toBeNull();
        sendEmailTaskId = rows[0].send_email_task_id;
      });
      span.end();
      appSpan = span as unknown as ReadableSpan;
    });
    const traceId = appSpan!.spanContext().traceId;

    // The worker runs everything to its end.
    const worker = new Worker({
      databaseUrl: db.url('worker'),
      roles: ['db_function', 'email', 'test_channel'],
      workerId: 'trace-worker',
      concurrency: 4,
      pollIntervalMs: 50,
      heartbeatIntervalMs: 1000,
      leaseSeconds: 30,
      maxLeases: 5,
      shutdownGraceMs: 2000,
      registry: new ProcessorRegistry()
        .register('db_function', dbFunctionProcessor())
        .register('email', channelTaskProcessor(createResendEmailProvider({ apiKey: 're_test', baseUrl: resend.url })))
        .register('test_channel', channelTaskProcessor(testProvider)),
      logger: createLogger('silent'),
    });
    await worker.start();
    try {
      await eventually(
        async () =>
          (
            await db.query(
              `select exists (select 1 from comms.send_email_task_succeeded where send_email_task_id = $1)
                      and not exists (select 1 from queues.task_pending_or_held) as done`,
              [sendEmailTaskId],
            )
          ).rows[0].done,
        'the email process and every task done',
      );
    } finally {
      await worker.stop();
    }
    expect(resend.emails).toHaveLength(1);

    const tasks = (
      await db.query<{ task_id: string; task_type: string; db_function: string | null; outcome: string }>(
        `select t.task_id::text, t.task_type, t.payload->>'db_function' as db_function, c.outcome
           from queues.task t join queues.task_end c using (task_id) order by t.task_id`,
      )
    ).rows;
    // The app's task, the task its success handler enqueued, then the process: supervisor
    // runs (db_function steps; how many depends on when the email's success wakes the next
    // one) and the email.
    expect(tasks.every((t) => t.outcome === 'succeeded')).toBe(true);
    expect(tasks[0].task_id).toBe(appTaskId);
    expect(tasks[0].task_type).toBe('test_channel');
    const spawned = tasks.filter((t) => t.db_function === 'fixture.step');
    expect(spawned).toHaveLength(1);
    const runs = tasks.filter((t) => t.task_type === 'db_function' && t.db_function !== 'fixture.step');
    const emails = tasks.filter((t) => t.task_type === 'email');
    expect(runs.length).toBeGreaterThanOrEqual(2);
    expect(emails).toHaveLength(1);
    expect(runs.length + emails.length + 2).toBe(tasks.length);
    // Every task recorded a trace context.
    expect((await db.query('select count(*)::int as n from queues.task_trace')).rows[0].n).toBe(tasks.length);

    const spans = exporter.getFinishedSpans();
    const process = (taskId: string) => {
      const found = spans.filter(
        (s) => s.name.startsWith('process ') && s.attributes['messaging.message.id'] === taskId,
      );
      expect(found, `one process span of task ${taskId}`).toHaveLength(1);
      return found[0];
    };
    const childOf = (parent: ReadableSpan, name: string) =>
      spans.filter((s) => parentOf(s) === spanId(parent) && s.name === name);

    // One trace: every span the app and the worker made.
    expect(new Set(spans.map((s) => s.spanContext().traceId))).toEqual(new Set([traceId]));

    // The app's enqueue: a PRODUCER span under the app's span, the task's id on it.
    const [send] = childOf(appSpan!, 'send test_channel');
    expect(send).toBeDefined();
    expect(send.kind).toBe(SpanKind.PRODUCER);
    expect(send.attributes).toEqual({
      'messaging.system': 'pg_task_queue',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'send',
      'messaging.destination.name': 'test_channel',
      'messaging.message.id': appTaskId,
    });

    // Each task's CONSUMER span: a child of the context its enqueue recorded, linked to it.
    const continues = (span: ReadableSpan, producer: ReadableSpan) => {
      expect(span.kind).toBe(SpanKind.CONSUMER);
      expect(parentOf(span)).toBe(spanId(producer));
      expect(span.links.map((l) => l.context.spanId)).toEqual([spanId(producer)]);
    };
    const appProcess = process(appTaskId);
    continues(appProcess, send);
    expect(appProcess.name).toBe('process test_channel');
    expect(appProcess.attributes).toMatchObject({
      'messaging.system': 'pg_task_queue',
      'messaging.operation.type': 'process',
      'messaging.destination.name': 'test_channel',
      'messaging.message.id': appTaskId,
      'messaging.client.id': 'trace-worker',
      'messaging.pg_task_queue.task.outcome': 'succeeded',
    });

    // The task the app's task's success handler enqueued (with the completion, in
    // queues.settle_with_handler): under that handler's span.
    const [successHandler] = childOf(appProcess, 'queue.handler').filter(
      (h) => h.attributes['queue.handler.name'] === 'fixture.on_success_spawn',
    );
    continues(process(spawned[0].task_id), successHandler);

    // The kickoff's supervisor run: under the app's span (setTraceContext).
    continues(process(runs[0].task_id), appSpan!);
    // A run's step span is the context of the tasks the step enqueued: the email task and
    // the next supervisor run.
    const steps = new Map(
      runs.map((r) => {
        const found = childOf(process(r.task_id), 'queue.handler');
        expect(found).toHaveLength(1);
        expect(found[0].attributes['queue.handler.name']).toBe(r.db_function);
        return [r.task_id, found[0]];
      }),
    );
    const enqueuedBy = (taskId: string) => {
      const span = process(taskId);
      const run = runs.find((r) => parentOf(span) === spanId(steps.get(r.task_id)!));
      expect(run, `task ${taskId} enqueued by a supervisor step`).toBeDefined();
      continues(span, steps.get(run!.task_id)!);
      return run!.task_id;
    };
    // The first run enqueued the email. Each later run was enqueued by an earlier run's
    // step, or by the email's success handler waking the supervisor (whichever came
    // first: a run already pending is not enqueued twice).
    expect(enqueuedBy(emails[0].task_id)).toBe(runs[0].task_id);
    const emailHandlers = childOf(process(emails[0].task_id), 'queue.handler');
    for (const later of runs.slice(1)) {
      const span = process(later.task_id);
      const handler = emailHandlers.find((h) => parentOf(span) === spanId(h));
      if (handler) continues(span, handler);
      else expect(Number(enqueuedBy(later.task_id))).toBeLessThan(Number(later.task_id));
    }

    // Every task's span covers its claim and its completion, and ended with its outcome.
    for (const t of tasks) {
      const span = process(t.task_id);
      expect(span.name).toBe(`process ${t.task_type}`);
      expect(span.attributes['messaging.pg_task_queue.task.outcome']).toBe(t.outcome);
      expect(childOf(span, `claim ${t.task_type}`)).toHaveLength(1);
      const [complete] = childOf(span, `complete ${t.task_type}`);
      expect(complete.attributes).toMatchObject({
        'messaging.operation.type': 'settle',
        'messaging.pg_task_queue.task.outcome': t.outcome,
      });
    }
    // The email went out through the provider inside the email task's span.
    expect(childOf(process(emails[0].task_id), 'queue.provider')).toHaveLength(1);
  });
});
