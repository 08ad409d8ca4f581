/**
 * pg-boss's runner (Node 22). Throughput configuration, from its docs (types.d.ts of
 * 12.x): the queue is created with `notify: true` and the instance with
 * `useListenNotify: true`, so a send wakes the workers at once instead of the default
 * 2-second polling; `work()` fetches in batches (`batchSize`) and keeps fetching while
 * batches come back full (`burstWhenBatchFull`); `localConcurrency` fetch loops per process.
 */
import { PgBoss } from 'pg-boss';
import { BATCH_SIZE, QUEUE } from './pgboss-config.js';
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

function boss(url: string, max: number, worker: boolean): PgBoss {
  const b = new PgBoss({
    connectionString: url,
    max,
    useListenNotify: worker,
    // Producers are clients only: no maintenance or cron loops in them.
    ...(worker ? {} : { supervise: false, schedule: false }),
  });
  b.on('error', (error: unknown) => process.stderr.write(`[pg-boss] ${String(error)}\n`));
  return b;
}

async function runEnqueue(config: EnqueueConfig, ctl: Control): Promise<Record<string, unknown>> {
  const b = boss(config.url, config.concurrency, false);
  await b.start();
  try {
    // Warm the pool: one round trip per connection.
    await inParallel(config.concurrency, config.concurrency, () => b.getQueue(QUEUE));
    await ctl.ready();
    const started = performance.now();
    if (config.kind === 'single') {
      await inParallel(config.count, config.concurrency, (i) => b.send(QUEUE, { n: i }));
    } else {
      for (let start = 0; start < config.count; start += config.batchSize) {
        const n = Math.min(config.batchSize, config.count - start);
        await b.insert(
          QUEUE,
          Array.from({ length: n }, (_, k) => ({ data: { n: start + k } })),
        );
      }
    }
    return { elapsedMs: performance.now() - started, count: config.count };
  } finally {
    await b.stop({ graceful: false });
  }
}

async function runProduce(config: ProduceConfig, ctl: Control): Promise<Record<string, unknown>> {
  const b = boss(config.url, 4, false);
  await b.start();
  try {
    await b.getQueue(QUEUE);
    await ctl.ready();
    return await openLoop(config.rate, config.durationMs, (i) => b.send(QUEUE, { n: i, t: wallClockMs() }));
  } finally {
    await b.stop({ graceful: false });
  }
}

async function runWork(config: WorkConfig, ctl: Control): Promise<Record<string, unknown>> {
  const latencies: number[] = [];
  let handled = 0;
  const b = boss(config.url, config.concurrency + 2, true);
  await b.start();
  await ctl.ready();
  await b.work<{ n: number; t?: number }>(
    QUEUE,
    { batchSize: BATCH_SIZE, localConcurrency: config.concurrency, burstWhenBatchFull: true },
    (jobs) => {
      const now = wallClockMs();
      for (const job of jobs) {
        handled++;
        if (config.latency && typeof job.data.t === 'number') latencies.push(now - job.data.t);
      }
      return Promise.resolve();
    },
  );
  await ctl.stop;
  await b.stop({ graceful: true, timeout: 10_000 });
  return { handled, latencies };
}

main<RunnerConfig>(async (config, ctl) => {
  switch (config.mode) {
    case 'setup': {
      const b = boss(config.url, 2, false);
      await b.start(); // creates the schema
      await b.createQueue(QUEUE, { notify: true });
      await b.stop({ graceful: false });
      return {};
    }
    case 'enqueue':
      return runEnqueue(config, ctl);
    case 'produce':
      return runProduce(config, ctl);
    case 'work':
      return runWork(config, ctl);
  }
});
