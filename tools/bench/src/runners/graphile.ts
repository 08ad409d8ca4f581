/**
 * graphile-worker's runner (Node 22). Configuration follows its performance page
 * (https://worker.graphile.org/docs/performance): the batching options on —
 * localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0 — with
 * maxPoolSize = concurrency + 2 (its own recommendation for the pool).
 */
import pg from 'pg';
import { Logger, makeWorkerUtils, run, runMigrations, type Task } from 'graphile-worker';
import { GRAPHILE_PRESET } from './graphile-config.js';
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

const logger = new Logger(() => (level, message) => {
  if (level === 'error') process.stderr.write(`[graphile-worker] ${message}\n`);
});

async function runEnqueue(config: EnqueueConfig, ctl: Control): Promise<Record<string, unknown>> {
  const pool = new pg.Pool({ connectionString: config.url, max: config.concurrency });
  const utils = await makeWorkerUtils({ pgPool: pool, logger });
  try {
    const clients = await Promise.all(Array.from({ length: config.concurrency }, () => pool.connect()));
    clients.forEach((c) => c.release());
    await ctl.ready();
    const started = performance.now();
    if (config.kind === 'single') {
      await inParallel(config.count, config.concurrency, (i) => utils.addJob('bench', { n: i }));
    } else {
      for (let start = 0; start < config.count; start += config.batchSize) {
        const n = Math.min(config.batchSize, config.count - start);
        await utils.addJobs(Array.from({ length: n }, (_, k) => ({ identifier: 'bench', payload: { n: start + k } })));
      }
    }
    return { elapsedMs: performance.now() - started, count: config.count };
  } finally {
    await utils.release();
    await pool.end();
  }
}

async function runProduce(config: ProduceConfig, ctl: Control): Promise<Record<string, unknown>> {
  const pool = new pg.Pool({ connectionString: config.url, max: 4 });
  const utils = await makeWorkerUtils({ pgPool: pool, logger });
  try {
    (await pool.connect()).release();
    await ctl.ready();
    return await openLoop(config.rate, config.durationMs, (i) => utils.addJob('bench', { n: i, t: wallClockMs() }));
  } finally {
    await utils.release();
    await pool.end();
  }
}

async function runWork(config: WorkConfig, ctl: Control): Promise<Record<string, unknown>> {
  const latencies: number[] = [];
  let handled = 0;
  const bench: Task = (payload) => {
    handled++;
    const t = (payload as { t?: unknown }).t;
    if (config.latency && typeof t === 'number') latencies.push(wallClockMs() - t);
    return Promise.resolve();
  };
  await ctl.ready();
  const runner = await run({
    connectionString: config.url,
    concurrency: config.concurrency,
    maxPoolSize: config.concurrency + 2,
    noHandleSignals: true,
    logger,
    taskList: { bench },
    crontab: '',
    preset: GRAPHILE_PRESET,
  });
  await ctl.stop;
  await runner.stop();
  return { handled, latencies };
}

main<RunnerConfig>(async (config, ctl) => {
  switch (config.mode) {
    case 'setup':
      await runMigrations({ connectionString: config.url, logger });
      return {};
    case 'enqueue':
      return runEnqueue(config, ctl);
    case 'produce':
      return runProduce(config, ctl);
    case 'work':
      return runWork(config, ctl);
  }
});
