/**
 * Our queue's runner (the machine's Node). Enqueues as the app role through
 * @org/queue-client; works as the worker role with the real Worker class.
 *
 *   kind 'noop'         task type 'bench', a processor that returns 'succeeded' (the
 *                       worker's completer records it in its batch)
 *   kind 'db_function'  task type 'db_function' with {"db_function":"internal.noop"},
 *                       the built-in dbFunctionProcessor
 *   kind 'email'        db_function + email (supervisor processes), Resend SDK pointed
 *                       at the harness's fake Resend server
 */
import { randomUUID } from 'node:crypto';
import { connect, enqueue, enqueueMany } from '@org/queue-client';
import {
  createLogger,
  dbFunctionProcessor,
  channelTaskProcessor,
  ProcessorRegistry,
  Worker,
  type Processor,
} from '@org/worker';
import {
  inParallel,
  main,
  openLoop,
  wallClockMs,
  type Control,
  type EnqueueConfig,
  type ProduceConfig,
  type RunnerConfig,
  type WorkConfig,
} from './protocol.js';

function payloadFor(taskType: string, i: number): Record<string, unknown> {
  return taskType === 'db_function' ? { db_function: 'internal.noop', n: i } : { n: i };
}

async function runEnqueue(config: EnqueueConfig, ctl: Control): Promise<Record<string, unknown>> {
  const taskType = config.taskType ?? 'bench';
  const pool = connect({ connectionString: config.url, max: config.concurrency, applicationName: 'bench-enqueue' });
  try {
    // Open every connection before the start signal.
    const clients = await Promise.all(Array.from({ length: config.concurrency }, () => pool.connect()));
    clients.forEach((c) => c.release());
    await ctl.ready();
    const started = performance.now();
    if (config.kind === 'single') {
      await inParallel(config.count, config.concurrency, (i) =>
        enqueue(pool, { taskType, payload: payloadFor(taskType, i) }),
      );
    } else {
      for (let start = 0; start < config.count; start += config.batchSize) {
        const n = Math.min(config.batchSize, config.count - start);
        await enqueueMany(
          pool,
          Array.from({ length: n }, (_, k) => ({ taskType, payload: payloadFor(taskType, start + k) })),
        );
      }
    }
    return { elapsedMs: performance.now() - started, count: config.count };
  } finally {
    await pool.end();
  }
}

async function runProduce(config: ProduceConfig, ctl: Control): Promise<Record<string, unknown>> {
  const pool = connect({ connectionString: config.url, max: 4, applicationName: 'bench-produce' });
  try {
    (await pool.connect()).release();
    await ctl.ready();
    return await openLoop(config.rate, config.durationMs, (i) =>
      enqueue(pool, { taskType: 'bench', payload: { n: i, t: wallClockMs() } }),
    );
  } finally {
    await pool.end();
  }
}

async function runWork(config: WorkConfig, ctl: Control): Promise<Record<string, unknown>> {
  const latencies: number[] = [];
  let handled = 0;
  const noop: Processor = {
    name: 'bench-noop',
    process({ task }) {
      handled++;
      const t = (task.payload as { t?: unknown }).t;
      if (config.latency && typeof t === 'number') latencies.push(wallClockMs() - t);
      return Promise.resolve({ outcome: 'succeeded' as const });
    },
  };
  const registry = new ProcessorRegistry();
  let roles: string[];
  const kind = config.kind ?? 'noop';
  if (kind === 'noop') {
    registry.register('bench', noop);
    roles = ['bench'];
  } else {
    const dbFunction = dbFunctionProcessor();
    registry.register('db_function', {
      name: dbFunction.name,
      runsSteps: dbFunction.runsSteps,
      process: (context) => {
        handled++;
        return dbFunction.process(context);
      },
    });
    roles = ['db_function'];
    if (kind === 'email') {
      // Loaded only here: the providers package pulls in the Resend, Twilio and GCS SDKs,
      // which a no-op worker does not need (and whose memory would count in its RSS).
      const { createResendEmailProvider } = await import('@org/providers');
      const email = channelTaskProcessor(
        createResendEmailProvider({ apiKey: 're_bench_key', baseUrl: config.resendUrl! }),
      );
      registry.register('email', {
        name: email.name,
        process: (context) => {
          handled++;
          return email.process(context);
        },
      });
      roles.push('email');
    }
  }
  const worker = new Worker({
    databaseUrl: config.url,
    roles,
    workerId: config.workerId || `bench-${randomUUID()}`,
    concurrency: config.concurrency,
    // The CLI's defaults (a local queue of 500), except the log level (see BENCHMARKS.md).
    pollIntervalMs: 2000,
    heartbeatIntervalMs: 30_000,
    leaseSeconds: 300,
    maxLeases: 5,
    shutdownGraceMs: 25_000,
    registry,
    logger: createLogger('warn', process.stderr),
  });
  await ctl.ready();
  await worker.start();
  await ctl.stop;
  await worker.stop();
  return { handled, latencies };
}

main<RunnerConfig>(async (config, ctl) => {
  switch (config.mode) {
    case 'setup':
      return {};
    case 'enqueue':
      return runEnqueue(config, ctl);
    case 'produce':
      return runProduce(config, ctl);
    case 'work':
      return runWork(config, ctl);
  }
});
