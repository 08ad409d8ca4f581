/**
 * Workload 10 (ours only): the role-based system's product_resync for 1,000 stores through
 * the stock worker process (node packages/worker/dist/cli.js, WORKER_ROLE=product_resync)
 * against the fake menu platform (@org/menu-sync), twice:
 *
 *   resync        the platform answers at once: the queue's own cost per resync (claim,
 *                 HTTP call, record_observation with ~7 snapshots, result, completion)
 *   resync_slow   the platform answers in 500 ms and the worker runs 8 at once, so the run
 *                 is longer than the capacity view's smallest window (60 s) and saturates
 *                 it; then admin.capacity_at over the last 60 s is checked against the
 *                 measured rate: tasks_per_worker_hour within 15% (resync_capacity_ratio),
 *                 and workers_needed for 1/4/8 hours of a 1,000-task backlog equal to what
 *                 the measured rate gives (an anomaly otherwise)
 *
 * Each run: a fresh database with 1,000 active stores, the worker started and idle, then
 * menus.generate_resync_tasks(6, yesterday) (all batches due), timed from the generation
 * to the last completion. With fewer than 1,000 tasks per workload (--quick keeps 1,000;
 * the harness smoke test has 200) only the first run is made, with that many stores: the
 * slow run needs 1,000 stores to fill the view's 60 s window.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import pg from 'pg';
import { repoRoot } from '@org/db-tools';
import { startFakeMenuPlatform } from '@org/menu-sync';

/** The full run's store count; smaller runs (the harness smoke test) use `tasks` stores. */
const STORES = 1_000;

interface Db {
  name: string;
  root: string;
  owner: string;
  worker: string;
  app: string;
}

/** The parts of the harness this workload uses. */
export interface ResyncHarness {
  readonly checks: {
    trial: number;
    subject: string;
    workload: string;
    expected: number;
    completed: number;
    handled: number;
    extra?: Record<string, number>;
  }[];
  log(line: string): void;
  record(metric: string, subject: 'ours', trial: number, value: number): void;
  anomaly(trial: number, subject: 'ours', workload: string, message: string): void;
  freshDb(system: 'ours', label: string): Promise<Db>;
  dropDb(db: Db): Promise<void>;
  checkpoint(): Promise<void>;
  waitFor(
    db: Db,
    sql: string,
    params: unknown[],
    target: number,
    timeoutMs: number,
    what: string,
  ): Promise<{ at: number; n: number }>;
}

async function query<T extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

/** Starts the stock worker; resolves once it logged worker_started. */
function startWorker(db: Db, platformUrl: string, concurrency: number) {
  const child = spawn(process.execPath, [join(repoRoot(), 'packages', 'worker', 'dist', 'cli.js')], {
    env: {
      PATH: process.env.PATH ?? '',
      DATABASE_URL: db.worker,
      WORKER_ROLE: 'product_resync',
      WORKER_ID: 'bench-resync',
      CONCURRENCY: String(concurrency),
      POLL_INTERVAL_MS: '200',
      MENU_PLATFORM_URL: platformUrl,
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`worker not started after 30 s:\n${output.slice(-2000)}`)), 30_000);
    const check = () => {
      // LOG_LEVEL warn hides worker_started; the registry row says it is up.
      void query<{ n: number }>(
        db.owner,
        `select count(*)::int as n from queues.worker where worker_id = 'bench-resync'`,
      ).then((rows) => {
        if (rows[0]!.n > 0) {
          clearTimeout(timer);
          resolve();
        } else setTimeout(check, 100);
      }, reject);
    };
    check();
  });
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  return {
    ready,
    async stop(): Promise<number | null> {
      if (child.exitCode === null) child.kill('SIGTERM');
      return exited;
    },
    output: () => output,
  };
}

async function oneRun(
  h: ResyncHarness,
  trial: number,
  metric: 'resync' | 'resync_slow',
  platform: { slowMs: number },
  concurrency: number,
  stores: number,
): Promise<{ db: Db; rate: number; endedAt: Date }> {
  const db = await h.freshDb('ours', metric);
  const fake = await startFakeMenuPlatform({
    stores: stores,
    slowRate: platform.slowMs > 0 ? 1 : 0,
    slowMs: platform.slowMs,
  });
  try {
    await query(
      db.owner,
      `insert into menus.store (slug, name, menu_url) select 'store-' || n, 'Store ' || n, 'u' || n from generate_series(1, $1::int) n`,
      [stores],
    );
    await query(
      db.owner,
      `insert into menus.store_platform_id (store_id, platform_dispensary_id) select store_id, 'd-' || slug from menus.store`,
    );
    await query(
      db.owner,
      `insert into menus.store_products_discovered (store_id, product_count) select store_id, 0 from menus.store`,
    );
    await query(db.root, 'vacuum analyze');
    await h.checkpoint();
    const worker = startWorker(db, fake.url, concurrency);
    let rate: number;
    let endedAt: Date;
    try {
      await worker.ready;
      const started = performance.now();
      await query(db.owner, `select * from menus.generate_resync_tasks(6, current_date - 1)`);
      const done = await h.waitFor(
        db,
        `select count(*)::int as n from queues.task_end c join queues.task t using (task_id) where t.task_type = 'product_resync'`,
        [],
        stores,
        900_000,
        `${metric}: ${stores} resyncs`,
      );
      endedAt = new Date();
      rate = (stores / (done.at - started)) * 1000;
    } finally {
      const code = await worker.stop();
      if (code !== 0) h.anomaly(trial, 'ours', metric, `worker exited with ${code}: ${worker.output().slice(-1000)}`);
    }
    const [c] = await query<{
      succeeded: number;
      failed: number;
      snapshots: number;
      products: number;
      results: number;
      errors: number;
    }>(
      db.owner,
      `select (select count(*) from queues.task_end where outcome = 'succeeded')::int as succeeded,
              (select count(*) from queues.task_end where outcome <> 'succeeded')::int as failed,
              (select count(*) from menus.product_snapshot)::int as snapshots,
              (select count(*) from menus.product)::int as products,
              (select count(*) from queues.task_result)::int as results,
              (select count(*) from queues.error)::int as errors`,
    );
    h.checks.push({
      trial,
      subject: 'ours',
      workload: metric,
      expected: stores,
      completed: c!.succeeded,
      handled: c!.results,
      extra: { ...c! },
    });
    if (c!.succeeded !== stores || c!.results !== stores || c!.snapshots !== c!.products) {
      h.anomaly(
        trial,
        'ours',
        metric,
        `${c!.succeeded} succeeded, ${c!.failed} failed, ${c!.results} results, ${c!.snapshots} snapshots of ${c!.products} products`,
      );
    }
    h.record(metric, 'ours', trial, rate);
    h.log(
      `  ours ${metric}: ${rate.toFixed(1)} resyncs/s (${stores} stores, platform ${platform.slowMs} ms, concurrency ${concurrency})`,
    );
    return { db, rate, endedAt };
  } finally {
    await fake.close();
  }
}

export async function resyncWorkload(
  h: ResyncHarness,
  trial: number,
  options: { workerConcurrency: number; tasks: number },
): Promise<void> {
  const stores = Math.min(STORES, options.tasks);
  const fast = await oneRun(h, trial, 'resync', { slowMs: 0 }, options.workerConcurrency, stores);
  await h.dropDb(fast.db);
  if (stores < STORES) {
    h.log(`  ours resync_slow and the capacity check: skipped (${stores} stores; they need ${STORES})`);
    return;
  }

  const slow = await oneRun(h, trial, 'resync_slow', { slowMs: 500 }, 8, STORES);
  try {
    // A backlog of 1,000: the next day's generation, not worked.
    await query(slow.db.owner, `select * from menus.generate_resync_tasks(6, current_date)`);
    const [view] = await query<{
      tasks_per_worker_hour: number;
      window_workers: number;
      n1: string;
      n4: string;
      n8: string;
      pending: string;
    }>(
      slow.db.owner,
      `select tasks_per_worker_hour, window_workers::int, workers_needed_1h as n1, workers_needed_4h as n4, workers_needed_8h as n8, pending
         from admin.capacity_at($1, 'product_resync', 60, 600)`,
      [slow.endedAt],
    );
    const measuredPerHour = slow.rate * 3600;
    const ratio = view!.tasks_per_worker_hour / measuredPerHour;
    h.record('resync_capacity_ratio', 'ours', trial, ratio);
    const expected = [1, 4, 8].map((hours) => Math.ceil(Number(view!.pending) / (measuredPerHour * hours)));
    const got = [view!.n1, view!.n4, view!.n8].map(Number);
    h.log(
      `  capacity view: ${Math.round(view!.tasks_per_worker_hour)} tasks/worker-hour over the last 60 s vs measured ${Math.round(measuredPerHour)} (×${ratio.toFixed(2)}); ` +
        `workers_needed 1/4/8 h for ${view!.pending} pending: ${got.join('/')} (from the measured rate: ${expected.join('/')})`,
    );
    if (view!.window_workers !== 1)
      h.anomaly(trial, 'ours', 'resync_capacity', `window_workers ${view!.window_workers}, expected 1`);
    if (Math.abs(ratio - 1) > 0.15)
      h.anomaly(trial, 'ours', 'resync_capacity', `view rate ÷ measured = ${ratio.toFixed(2)}, outside 0.85–1.15`);
    if (got.some((g, i) => Math.abs(g - expected[i]!) > 1)) {
      h.anomaly(
        trial,
        'ours',
        'resync_capacity',
        `workers_needed ${got.join('/')} vs ${expected.join('/')} from the measured rate`,
      );
    }
  } finally {
    await h.dropDb(slow.db);
  }
}
