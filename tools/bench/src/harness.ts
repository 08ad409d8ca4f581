/**
 * The benchmark harness: every measurement on a fresh database of one server, each
 * system's producers and workers as runner processes of their own (ours on this Node,
 * the peers on the Node 22 binary of the `node` dev dependency), systems in rotated
 * order per trial. Completion is observed in each queue's own tables.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFile } from 'node:child_process';
import pg from 'pg';
import { hardenDatabase, withDatabase, type DbUserNames, type DbUserPasswords } from '@org/db-tools';
import { startFakeResend } from '@org/providers/testing';
import { Runner, withTimeout, type RunnerResult } from './child.js';
import type { RunnerConfig } from './runners/protocol.js';
import { percentile } from './stats.js';
import { resyncWorkload } from './resync.js';
import { DashboardPollers, DASHBOARDS, POLL_INTERVAL_MS } from './dashboard.js';
import { fillHistory, fillRecent, HISTORY_DRAINS, timeEndpoints } from './history-scale.js';

export const SYSTEMS = ['ours', 'graphile-worker', 'pg-boss'] as const;
export type SystemName = (typeof SYSTEMS)[number];
export type Subject = SystemName | 'postgres';

export const WORKLOADS = [
  'pgbench',
  'enqueue_single',
  'enqueue_batch',
  'drain',
  'latency',
  'history',
  'processes',
  'steps',
  'resync',
  'dashboard',
  'history_scale',
] as const;
export type WorkloadId = (typeof WORKLOADS)[number];

/** A server to benchmark on, with a migrated template database of our schema. */
export interface BenchServer {
  rootUrl: string;
  dbUsers: DbUserNames;
  dbUserPasswords: DbUserPasswords;
  template: string;
  /** Prefix of the databases this run creates (dropped as it goes). */
  prefix: string;
}

export interface BenchOptions {
  trials: number;
  /** Tasks per enqueue / drain / db_function workload. */
  tasks: number;
  batchSize: number;
  enqueueConcurrency: number;
  workerConcurrency: number;
  latencyRate: number;
  latencyDurationMs: number;
  historyRows: number;
  /** Workload 12's history (completed tasks); 0 leaves it out (opt-in: BENCH_HISTORY). */
  historyScaleRows?: number;
  processes: number;
  pgbenchSeconds: number;
  pgbenchClients: number;
  systems: SystemName[];
  workloads: WorkloadId[];
  log: (line: string) => void;
}

export interface Measurement {
  metric: string;
  subject: Subject;
  trial: number;
  value: number;
}

/** Something that did not add up (a count off, a runner error): reported, never hidden. */
export interface Anomaly {
  trial: number;
  subject: Subject;
  workload: string;
  message: string;
}

export interface BenchResults {
  measurements: Measurement[];
  anomalies: Anomaly[];
  /** Raw checks for the smoke test: counts per workload and system. */
  checks: {
    trial: number;
    subject: Subject;
    workload: string;
    expected: number;
    completed: number;
    handled: number;
    extra?: Record<string, number>;
  }[];
  startedAt: Date;
  finishedAt: Date;
  serverVersion: string;
  serverSettings: Record<string, string>;
  pgbenchVersion: string | null;
  node22Version: string | null;
}

// ---------------------------------------------------------------------------------------
// Where things are

const here = dirname(fileURLToPath(import.meta.url));
/** Runner scripts are always the compiled ones (the harness may run from src under vitest). */
const runnersDir = join(here, '..', 'dist', 'runners');
const require = createRequire(import.meta.url);

export function node22Binary(): string {
  if (process.env.BENCH_NODE22) return process.env.BENCH_NODE22;
  return join(dirname(require.resolve('node/package.json')), 'bin', 'node');
}

function runnerFor(system: SystemName): { node: string; script: string } {
  const script = join(
    runnersDir,
    { ours: 'ours.js', 'graphile-worker': 'graphile.js', 'pg-boss': 'pgboss.js' }[system],
  );
  if (!existsSync(script))
    throw new Error(`runner ${script} is missing: build tools/bench first (npx tsc -p tools/bench/tsconfig.json)`);
  return { node: system === 'ours' ? process.execPath : node22Binary(), script };
}

export function pgbenchBinary(): string | null {
  for (const candidate of [process.env.BENCH_PGBENCH, '/usr/lib/postgresql/15/bin/pgbench', '/usr/bin/pgbench']) {
    if (candidate && existsSync(candidate)) return candidate;
  }
  return null;
}

function run(file: string, args: string[], timeoutMs: number): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: timeoutMs, maxBuffer: 10 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${file} ${args.join(' ')} failed: ${error.message}\n${stderr}`));
      else resolve({ stdout, stderr });
    });
  });
}

// ---------------------------------------------------------------------------------------
// Databases

interface Db {
  name: string;
  root: string;
  owner: string;
  worker: string;
  app: string;
}

/**
 * What a database has written so far: the cluster's WAL insert position, and heap rows
 * inserted, updated and deleted per table of this database (pg_stat_user_tables; history
 * partitions added up under their parent's name). A backend reports its counters when it
 * ends or at most every second, so read it once the writers' backends have exited
 * (backendsExited).
 */
interface Written {
  wal: number;
  tables: Map<string, number>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function writtenSoFar(url: string): Promise<Written> {
  return withClient(url, async (c) => {
    const { rows: wal } = await c.query<{ bytes: string }>(
      `select (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint as bytes`,
    );
    const { rows } = await c.query<{ table_name: string; n: string }>(
      `select regexp_replace(schemaname || '.' || relname, '_(p[0-9]+|default)$', '') as table_name,
              sum(n_tup_ins + n_tup_upd + n_tup_del)::bigint as n
         from pg_stat_user_tables group by 1`,
    );
    return { wal: Number(wal[0]!.bytes), tables: new Map(rows.map((r) => [r.table_name, Number(r.n)])) };
  });
}

/**
 * The client backends connected to `url`'s database but the caller's own and the
 * dashboards' (readers that poll on while a drain runs), by pid.
 */
async function clientBackends(url: string): Promise<number[]> {
  return withClient(url, async (c) => {
    const { rows } = await c.query<{ pid: number }>(
      `select pid from pg_stat_activity
        where datname = current_database() and backend_type = 'client backend' and pid <> pg_backend_pid()
          and application_name <> 'bench-dashboard'`,
    );
    return rows.map((r) => r.pid);
  });
}

/**
 * Waits until the backends `pids` have exited (at most `timeoutMs`, then the counters are
 * read as they are). A backend reports its counters among its first exit hooks and leaves
 * pg_stat_activity among the last, so once it is gone writtenSoFar counts all it wrote.
 */
async function backendsExited(url: string, pids: number[], timeoutMs = 10_000): Promise<void> {
  if (pids.length === 0) return;
  await withClient(url, async (c) => {
    const deadline = performance.now() + timeoutMs;
    while (performance.now() < deadline) {
      const { rows } = await c.query(`select 1 from pg_stat_activity where pid = any($1::int[])`, [pids]);
      if (rows.length === 0) return;
      await sleep(20);
    }
  });
}

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

/** SQL that counts completed tasks of the benchmark queue ($1: tasks expected). */
const COMPLETED_SQL: Record<SystemName, string> = {
  // Plain successes are completion rounds: a round counts the tasks it names.
  ours: `select ((select count(*) from queues.task_completed)
                 + (select coalesce(sum(cardinality(r.task_ids)), 0) from queues.completion_round r))::int as n`,
  // graphile-worker deletes a job when it completes: completed = expected - remaining.
  'graphile-worker': `select ($1::int - count(*))::int as n from graphile_worker._private_jobs`,
  'pg-boss': `select count(*)::int as n from pgboss.job where name = 'bench' and state = 'completed'`,
};

/**
 * Ours with a history: completions of the tasks after `$1` (the history's last task id).
 * (task_completed rows, and the tasks of the completion rounds whose largest task is past
 * it: a history's tasks were all completed before). Counting every end every 20 ms would cost more than the drain it times
 * once it holds millions of rows; this count reads only the newest partition set.
 */
const COMPLETED_AFTER_SQL = `select ((select count(*) from queues.task_completed where task_id > $1)
                                      + (select coalesce(sum(cardinality(r.task_ids)), 0) from queues.completion_round r
                                          where r.task_id > $1))::int as n`;
const LAST_TASK_SQL = `select coalesce(max(task_id), 0)::bigint as id from queues.task`;

const ENQUEUED_SQL: Record<SystemName, string> = {
  ours: `select count(*)::int as n from queues.task`,
  'graphile-worker': `select count(*)::int as n from graphile_worker._private_jobs`,
  'pg-boss': `select count(*)::int as n from pgboss.job where name = 'bench'`,
};

class Harness {
  readonly measurements: Measurement[] = [];
  readonly anomalies: Anomaly[] = [];
  readonly checks: BenchResults['checks'] = [];
  #dbSeq = 0;

  constructor(
    readonly server: BenchServer,
    readonly options: BenchOptions,
  ) {}

  log(line: string): void {
    this.options.log(line);
  }

  record(metric: string, subject: Subject, trial: number, value: number): void {
    this.measurements.push({ metric, subject, trial, value });
  }

  anomaly(trial: number, subject: Subject, workload: string, message: string): void {
    this.anomalies.push({ trial, subject, workload, message });
    this.log(`  ! ${subject} ${workload} (trial ${trial}): ${message}`);
  }

  rootOf(name: string): string {
    return withDatabase(this.server.rootUrl, name);
  }

  async rootQuery(sql: string): Promise<void> {
    await withClient(this.server.rootUrl, (c) => c.query(sql));
  }

  async checkpoint(): Promise<void> {
    await this.rootQuery('checkpoint');
  }

  /** A fresh database for one measurement of `system` (ours: cloned from the template). */
  async freshDb(system: SystemName | 'plain', label: string): Promise<Db> {
    const name = `${this.server.prefix}${++this.#dbSeq}_${label}`.slice(0, 63);
    const { dbUsers, dbUserPasswords: pw } = this.server;
    await withClient(this.server.rootUrl, async (root) => {
      const id = root.escapeIdentifier(name);
      await root.query(`drop database if exists ${id} with (force)`);
      if (system === 'ours') {
        await root.query(
          `create database ${id} template ${root.escapeIdentifier(this.server.template)} owner ${root.escapeIdentifier(dbUsers.owner)}`,
        );
        await hardenDatabase(root, name, dbUsers);
      } else {
        await root.query(`create database ${id}`);
      }
    });
    const db: Db = {
      name,
      root: this.rootOf(name),
      owner: withDatabase(this.server.rootUrl, name, dbUsers.owner, pw.owner),
      worker: withDatabase(this.server.rootUrl, name, dbUsers.worker, pw.worker),
      app: withDatabase(this.server.rootUrl, name, dbUsers.app, pw.app),
    };
    if (system === 'ours') {
      await withClient(db.owner, (c) =>
        c.query(
          `insert into queues.task_type (task_type, description) values ('bench', 'benchmark no-op') on conflict do nothing`,
        ),
      );
    } else if (system !== 'plain') {
      const setup = this.spawn(system, 'setup', { mode: 'setup', url: db.root });
      await setup.finish(120_000);
    }
    return db;
  }

  async dropDb(db: Db): Promise<void> {
    await withClient(this.server.rootUrl, (root) =>
      root.query(`drop database if exists ${root.escapeIdentifier(db.name)} with (force)`),
    );
  }

  spawn(system: SystemName, label: string, config: RunnerConfig): Runner {
    const { node, script } = runnerFor(system);
    return new Runner(`${system} ${label}`, node, script, config);
  }

  /** Enqueue URL: ours as the app database user, peers as root on their own database. */
  enqueueUrl(system: SystemName, db: Db): string {
    return system === 'ours' ? db.app : db.root;
  }

  workUrl(system: SystemName, db: Db): string {
    return system === 'ours' ? db.worker : db.root;
  }

  async count(system: SystemName, db: Db, sql: Record<SystemName, string>, expected: number): Promise<number> {
    return withClient(db.root, async (c) => {
      const { rows } = await c.query<{ n: number }>(sql[system], sql[system].includes('$1') ? [expected] : []);
      return rows[0]!.n;
    });
  }

  /** Runs an enqueue runner to completion; returns its elapsed ms. */
  async enqueue(
    system: SystemName,
    db: Db,
    kind: 'single' | 'batch',
    count: number,
    taskType?: string,
  ): Promise<number> {
    const runner = this.spawn(system, `enqueue ${kind}`, {
      mode: 'enqueue',
      // db_function steps are enqueued by the owner's SQL only (queues.internal_task_type).
      url: taskType === 'db_function' ? db.owner : this.enqueueUrl(system, db),
      count,
      kind,
      concurrency: kind === 'single' ? this.options.enqueueConcurrency : 1,
      batchSize: this.options.batchSize,
      taskType,
    });
    await withTimeout(runner.ready, 60_000, `${system} enqueue ready`);
    runner.go();
    const result = await runner.finish(600_000);
    return result.elapsedMs as number;
  }

  /** Polls `sql` until it reaches `target`; resolves with performance.now() of that observation. */
  async waitFor(
    db: Db,
    sql: string,
    params: unknown[],
    target: number,
    timeoutMs: number,
    what: string,
  ): Promise<{ at: number; n: number }> {
    return withClient(db.root, async (c) => {
      const deadline = performance.now() + timeoutMs;
      for (;;) {
        const { rows } = await c.query<{ n: number }>(sql, params);
        const n = rows[0]!.n;
        const now = performance.now();
        if (n >= target) return { at: now, n };
        if (now > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (${n} of ${target})`);
        await new Promise((r) => setTimeout(r, 20));
      }
    });
  }

  // -------------------------------------------------------------------------------------
  // Workloads

  async pgbench(trial: number): Promise<void> {
    const binary = pgbenchBinary();
    if (!binary) {
      this.anomaly(trial, 'postgres', 'pgbench', 'no pgbench binary found');
      return;
    }
    const db = await this.freshDb('plain', 'pgbench');
    const dir = mkdtempSync(join(tmpdir(), 'bench-pgbench-'));
    try {
      await withClient(db.root, (c) =>
        c.query(`create table bench_insert (
                   id bigint generated always as identity primary key,
                   payload jsonb not null,
                   created_at timestamptz not null default now())`),
      );
      const script = join(dir, 'insert.sql');
      writeFileSync(script, `insert into bench_insert (payload) values ('{"n": 1}');\n`);
      await this.checkpoint();
      const clients = this.options.pgbenchClients;
      const { stdout } = await run(
        binary,
        [
          '-n',
          '-M',
          'prepared',
          '-c',
          String(clients),
          '-j',
          String(Math.min(2, clients)),
          '-T',
          String(this.options.pgbenchSeconds),
          '-f',
          script,
          db.root,
        ],
        (this.options.pgbenchSeconds + 60) * 1000,
      );
      const tps = /tps = ([0-9.]+) \(without initial connection time\)/.exec(stdout);
      if (!tps) throw new Error(`pgbench printed no tps:\n${stdout}`);
      this.record('pgbench_tps', 'postgres', trial, Number(tps[1]));
      this.log(`  postgres pgbench one-row insert: ${Number(tps[1]).toFixed(0)} commits/s`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
      await this.dropDb(db);
    }
  }

  async enqueueWorkload(system: SystemName, trial: number, kind: 'single' | 'batch'): Promise<void> {
    const n = this.options.tasks;
    const db = await this.freshDb(system, `${kind}`);
    try {
      await this.checkpoint();
      const elapsedMs = await this.enqueue(system, db, kind, n);
      const enqueued = await this.count(system, db, ENQUEUED_SQL, n);
      this.checks.push({
        trial,
        subject: system,
        workload: `enqueue_${kind}`,
        expected: n,
        completed: enqueued,
        handled: enqueued,
      });
      if (enqueued !== n)
        this.anomaly(trial, system, `enqueue_${kind}`, `${enqueued} tasks in the queue, expected ${n}`);
      const rate = (n / elapsedMs) * 1000;
      this.record(`enqueue_${kind}`, system, trial, rate);
      this.log(`  ${system} enqueue ${kind}: ${rate.toFixed(0)} tasks/s`);
    } finally {
      await this.dropDb(db);
    }
  }

  /**
   * Drains a backlog of `n` tasks with `processes` worker processes; returns tasks/s.
   * Clock: from the start signal to the first poll that sees every task completed.
   */
  async drain(
    system: SystemName,
    trial: number,
    opts: {
      processes: number;
      metric: string;
      kind?: 'noop' | 'db_function';
      prepare?: (db: Db) => Promise<void>;
      /** Called as soon as every task is completed, before the runners stop and the database is dropped. */
      drained?: () => Promise<void>;
      rssMetric?: string;
    },
  ): Promise<void> {
    const n = this.options.tasks;
    const kind = opts.kind ?? 'noop';
    const db = await this.freshDb(system, opts.metric);
    try {
      if (opts.prepare) await opts.prepare(db);
      await this.enqueue(system, db, 'batch', n, kind === 'db_function' ? 'db_function' : undefined);
      await withClient(db.root, (c) => c.query('vacuum analyze'));
      await this.checkpoint();
      // The enqueuer's backends, which may still be exiting: their counters are read
      // before the drain's.
      const enqueuers = await clientBackends(db.root);
      const runners = Array.from({ length: opts.processes }, (_, k) =>
        this.spawn(system, `worker ${k + 1}`, {
          mode: 'work',
          url: this.workUrl(system, db),
          workerId: `bench-${system}-${k + 1}`,
          concurrency: this.options.workerConcurrency,
          latency: false,
          kind,
        }),
      );
      let written0: Written;
      let results: RunnerResult[];
      let elapsedMs: number;
      try {
        await backendsExited(db.root, enqueuers); // the enqueuers' counters reported
        await withTimeout(Promise.all(runners.map((r) => r.ready)), 60_000, `${system} workers ready`);
        written0 = await writtenSoFar(db.root);
        const started = performance.now();
        for (const r of runners) r.go();
        const done = await this.waitFor(
          db,
          COMPLETED_SQL[system],
          system === 'graphile-worker' ? [n] : [],
          n,
          600_000,
          `${system} drain`,
        );
        elapsedMs = done.at - started;
        await opts.drained?.();
        for (const r of runners) r.stop();
        results = await Promise.all(runners.map((r) => r.finish(60_000)));
      } finally {
        for (const r of runners) r.kill();
      }
      const handled = results.reduce((sum, r) => sum + (r.handled as number), 0);
      const completed = await this.count(system, db, COMPLETED_SQL, n);
      const extra: Record<string, number> = {};
      if (system === 'ours') {
        await withClient(db.root, async (c) => {
          const { rows } = await c.query<{ leases: number; pending: number; errors: number }>(
            `select (select count(*) from queues.task_leases)::int as leases,
                    (select count(*) from queues.task_pending_or_held)::int as pending,
                    (select count(*) from queues.error)::int as errors`,
          );
          Object.assign(extra, rows[0]);
        });
      }
      this.checks.push({ trial, subject: system, workload: opts.metric, expected: n, completed, handled, extra });
      if (completed !== n || handled !== n) {
        this.anomaly(trial, system, opts.metric, `completed ${completed}, handler ran ${handled} times, expected ${n}`);
      }
      if (system === 'ours' && (extra.leases !== n || extra.pending !== 0 || extra.errors !== 0)) {
        this.anomaly(
          trial,
          system,
          opts.metric,
          `leases ${extra.leases}, pending ${extra.pending}, errors ${extra.errors}`,
        );
      }
      const rate = (n / elapsedMs) * 1000;
      this.record(opts.metric, system, trial, rate);
      // What the drain wrote, per task: the runners have exited, and once their backends
      // have too, their counters are reported.
      await backendsExited(db.root, await clientBackends(db.root));
      const written1 = await writtenSoFar(db.root);
      const perTable: string[] = [];
      let rowsWritten = 0;
      for (const [table, count] of written1.tables) {
        const d = count - (written0.tables.get(table) ?? 0);
        if (d <= 0) continue;
        rowsWritten += d;
        perTable.push(`${table} ${(d / n).toFixed(3)}`);
      }
      this.record(`${opts.metric}_rows_per_task`, system, trial, rowsWritten / n);
      this.record(`${opts.metric}_wal_per_task`, system, trial, (written1.wal - written0.wal) / n);
      this.log(
        `  ${system} ${opts.metric}: ${(rowsWritten / n).toFixed(2)} heap rows and ${((written1.wal - written0.wal) / n).toFixed(0)} WAL bytes per task; rows per task by table: ${perTable.sort().join(', ')}`,
      );
      const rss = results.map((r) => r.maxRssKb / 1024);
      if (opts.rssMetric) this.record(opts.rssMetric, system, trial, Math.max(...rss));
      this.log(
        `  ${system} ${opts.metric}: ${rate.toFixed(0)} tasks/s in ${(elapsedMs / 1000).toFixed(2)} s; peak RSS ${rss.map((m) => m.toFixed(0)).join(', ')} MB`,
      );
    } finally {
      await this.dropDb(db);
    }
  }

  async latency(system: SystemName, trial: number): Promise<void> {
    const db = await this.freshDb(system, 'latency');
    try {
      await this.checkpoint();
      const worker = this.spawn(system, 'latency worker', {
        mode: 'work',
        url: this.workUrl(system, db),
        workerId: `bench-${system}-latency`,
        concurrency: this.options.workerConcurrency,
        latency: true,
      });
      const producer = this.spawn(system, 'producer', {
        mode: 'produce',
        url: this.enqueueUrl(system, db),
        rate: this.options.latencyRate,
        durationMs: this.options.latencyDurationMs,
      });
      let workerResult: RunnerResult;
      let sent: number;
      try {
        await withTimeout(Promise.all([worker.ready, producer.ready]), 60_000, `${system} latency runners ready`);
        worker.go();
        await new Promise((r) => setTimeout(r, 1000)); // the worker settles (listening, idle)
        producer.go();
        const produced = await producer.finish(this.options.latencyDurationMs + 60_000);
        sent = produced.sent as number;
        if ((produced.failed as number) > 0)
          this.anomaly(trial, system, 'latency', `${produced.failed as number} enqueues failed`);
        if ((produced.maxLagMs as number) > 100)
          this.anomaly(
            trial,
            system,
            'latency',
            `producer fell behind its schedule by ${produced.maxLagMs as number} ms`,
          );
        await this.waitFor(
          db,
          COMPLETED_SQL[system],
          system === 'graphile-worker' ? [sent] : [],
          sent,
          30_000,
          `${system} latency completions`,
        );
        worker.stop();
        workerResult = await worker.finish(60_000);
      } finally {
        worker.kill();
        producer.kill();
      }
      const latencies = workerResult.latencies as number[];
      this.checks.push({
        trial,
        subject: system,
        workload: 'latency',
        expected: sent,
        completed: latencies.length,
        handled: workerResult.handled as number,
      });
      if (latencies.length !== sent)
        this.anomaly(trial, system, 'latency', `${latencies.length} pickups recorded for ${sent} tasks`);
      for (const p of [50, 95, 99]) this.record(`latency_p${p}`, system, trial, percentile(latencies, p));
      this.record('latency_max', system, trial, Math.max(...latencies));
      this.log(
        `  ${system} pickup latency: p50 ${percentile(latencies, 50).toFixed(2)} ms, p95 ${percentile(latencies, 95).toFixed(2)} ms, p99 ${percentile(latencies, 99).toFixed(2)} ms (${latencies.length} tasks)`,
      );
    } finally {
      await this.dropDb(db);
    }
  }

  /** Ours: the newest task id (0 when there is none). */
  async lastTaskId(db: Db): Promise<string> {
    return withClient(db.root, async (c) => (await c.query<{ id: string }>(LAST_TASK_SQL)).rows[0]!.id);
  }

  /** Ours: completions of the tasks after `fromId`. */
  async completedAfter(db: Db, fromId: string): Promise<number> {
    return withClient(db.root, async (c) => (await c.query<{ n: number }>(COMPLETED_AFTER_SQL, [fromId])).rows[0]!.n);
  }

  /** Bulk history for ours: `rows` tasks, each leased and completed, written as the owner. */
  historyPrepare(rows: number): (db: Db) => Promise<void> {
    return async (db) => {
      const started = performance.now();
      await withClient(db.owner, async (c) => {
        await c.query(
          `with t as (
             insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
             select 'bench', jsonb_build_object('n', g), now() - interval '1 day', now() - interval '1 day'
               from generate_series(1, $1::int) g
             returning task_id
           ), l as (
             insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
             select task_id, 'history', now() - interval '1 day', now() - interval '1 day' + interval '5 minutes' from t
             returning task_id, task_lease_id
           )
           insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
           select task_id, task_lease_id, now() - interval '1 day', 'succeeded', 'bench' from l`,
          [rows],
        );
      });
      await withClient(db.root, (c) => c.query('vacuum analyze'));
      this.log(
        `  (history: ${rows} completed tasks written in ${((performance.now() - started) / 1000).toFixed(1)} s)`,
      );
    };
  }

  /**
   * Drains the tasks enqueued after `fromId` (options.tasks of them) with one worker
   * process, as workload 3a, and checks that each was completed and handled exactly once
   * (an anomaly otherwise); returns tasks/s.
   */
  async drainAfter(db: Db, fromId: string, trial: number, workload: string, workerId: string): Promise<number> {
    const n = this.options.tasks;
    const runner = this.spawn('ours', `${workload} worker`, {
      mode: 'work',
      url: db.worker,
      workerId,
      concurrency: this.options.workerConcurrency,
      latency: false,
    });
    let result: RunnerResult;
    let elapsedMs: number;
    try {
      await withTimeout(runner.ready, 60_000, `${workload} worker ready`);
      const started = performance.now();
      runner.go();
      const done = await this.waitFor(db, COMPLETED_AFTER_SQL, [fromId], n, 600_000, `${workload} drain`);
      elapsedMs = done.at - started;
      runner.stop();
      result = await runner.finish(60_000);
    } finally {
      runner.kill();
    }
    const handled = result.handled as number;
    const completed = await this.completedAfter(db, fromId);
    this.checks.push({ trial, subject: 'ours', workload, expected: n, completed, handled });
    if (completed !== n || handled !== n)
      this.anomaly(trial, 'ours', workload, `completed ${completed}, handled ${handled}, expected ${n}`);
    return (n / elapsedMs) * 1000;
  }

  /** History drain: the completion count starts at the history size. */
  async historyDrain(trial: number): Promise<void> {
    const rows = this.options.historyRows;
    const n = this.options.tasks;
    const db = await this.freshDb('ours', 'history');
    try {
      await this.historyPrepare(rows)(db);
      const fromId = await this.lastTaskId(db);
      await this.enqueue('ours', db, 'batch', n);
      await withClient(db.root, (c) => c.query('vacuum analyze'));
      await this.checkpoint();
      const rate = await this.drainAfter(db, fromId, trial, 'history_drain', 'bench-ours-history');
      this.record('history_drain', 'ours', trial, rate);
      this.log(`  ours drain with ${rows} completed in history: ${rate.toFixed(0)} tasks/s`);
    } finally {
      await this.dropDb(db);
    }
  }

  /**
   * Workload 12 (history-scale.ts): with `rows` completed tasks in history (0: none), the
   * API's endpoint groups timed as the API role, then the drain of `tasks` tasks.
   */
  async historyScale(trial: number, rows: number, label: 'none' | 'full'): Promise<void> {
    const n = this.options.tasks;
    const db = await this.freshDb('ours', `history_scale_${label}`);
    try {
      if (rows > 0) {
        const fillS = await fillHistory(db.owner, rows, (line) => this.log(line));
        const t0 = performance.now();
        await withClient(db.root, (c) => c.query('vacuum analyze'));
        const vacuumS = (performance.now() - t0) / 1000;
        this.record('history_scale_fill_s', 'ours', trial, fillS);
        this.record('history_scale_vacuum_s', 'ours', trial, vacuumS);
        this.log(
          `  history: ${rows} completed tasks written in ${fillS.toFixed(1)} s, vacuum analyze ${vacuumS.toFixed(1)} s`,
        );
      }
      await fillRecent(db.owner);
      // One email process root, for the process timeline group (its supervisor task stays pending).
      const rootId = await withClient(db.app, async (c) => {
        const { rows: sent } = await c.query<{ id: string }>(
          `select send_email_task_id as id
             from comms.send_email('Bench <bench@example.com>', 'user@example.com', 'Hello', '<p>Hello</p>')`,
        );
        return Number(sent[0]!.id);
      });
      const fromId = await this.lastTaskId(db);
      await this.enqueue('ours', db, 'batch', n);
      await withClient(db.root, (c) => c.query('vacuum analyze'));
      // One maintenance run, as its schedule makes every 10 minutes (it measures the sets
      // that are done for the History page).
      await withClient(db.owner, (c) => c.query('select queues.maintain_history_at(now())'));
      await this.checkpoint();
      const { dbUsers, dbUserPasswords } = this.server;
      const times = await timeEndpoints(
        withDatabase(this.server.rootUrl, db.name, dbUsers.api, dbUserPasswords.api),
        rootId,
      );
      for (const [group, ms] of Object.entries(times)) this.record(`history_api_${group}_${label}`, 'ours', trial, ms);
      this.log(
        `  ours endpoints with ${rows} in history (median ms): ${Object.entries(times)
          .map(([g, ms]) => `${g} ${ms.toFixed(1)}`)
          .join(', ')}`,
      );
      // The drain, HISTORY_DRAINS times (each on a fresh backlog of n tasks, after vacuum
      // and a checkpoint): one drain of 20,000 tasks lasts about a second and a half, and
      // its rate alone varied from 0.8x to 1.3x between runs. Rounds are recorded as
      // trials 1 to HISTORY_DRAINS of the metric (the workload runs in trial 1 only).
      for (let round = 1; round <= HISTORY_DRAINS; round++) {
        let from = fromId;
        if (round > 1) {
          from = await this.lastTaskId(db);
          await this.enqueue('ours', db, 'batch', n);
          await withClient(db.root, (c) => c.query('vacuum analyze'));
        }
        await this.checkpoint();
        const rate = await this.drainAfter(
          db,
          from,
          trial,
          `history_scale_${label}`,
          `bench-ours-history-scale-${label}-${round}`,
        );
        this.record(`history_scale_drain_${label}`, 'ours', round, rate);
        this.log(`  ours drain ${round} with ${rows} completed in history: ${rate.toFixed(0)} tasks/s`);
      }
    } finally {
      await this.dropDb(db);
    }
  }

  /**
   * The dashboard's cost (see dashboard.ts): the same drain alone and with DASHBOARDS
   * dashboards polling the overview; records the throughput lost per dashboard (%), the
   * mean time of one poll, and one dashboard's share of a database core (poll ÷ interval).
   */
  async dashboard(trial: number): Promise<void> {
    await this.drain('ours', trial, { processes: 1, metric: 'dashboard_drain_alone' });
    let pollers: DashboardPollers | undefined;
    let stats: Awaited<ReturnType<DashboardPollers['stop']>> | undefined;
    try {
      await this.drain('ours', trial, {
        processes: 1,
        metric: 'dashboard_drain_polled',
        prepare: (db) => {
          const { dbUsers, dbUserPasswords } = this.server;
          pollers = new DashboardPollers(withDatabase(this.server.rootUrl, db.name, dbUsers.api, dbUserPasswords.api));
          pollers.start();
          return Promise.resolve();
        },
        drained: async () => {
          stats = await pollers?.stop();
        },
      });
    } finally {
      stats ??= await pollers?.stop();
      const rate = (metric: string) =>
        this.measurements.filter((m) => m.metric === metric && m.trial === trial).at(-1)?.value;
      const alone = rate('dashboard_drain_alone');
      const polled = rate('dashboard_drain_polled');
      if (stats && alone && polled) {
        const lostPerDashboard = ((alone - polled) / alone / DASHBOARDS) * 100;
        this.record('dashboard_cost_pct', 'ours', trial, lostPerDashboard);
        this.record('dashboard_poll_ms', 'ours', trial, stats.meanMs);
        this.record('dashboard_db_share_pct', 'ours', trial, (stats.meanMs / POLL_INTERVAL_MS) * 100);
        this.record('dashboard_budget_pct', 'postgres', trial, 1);
        if (stats.errors > 0)
          this.anomaly(trial, 'ours', 'dashboard', `${stats.errors} polls failed, the first: ${stats.firstError}`);
        this.log(
          `  ours dashboard: drain ${alone.toFixed(0)} tasks/s alone, ${polled.toFixed(0)} with ${DASHBOARDS} dashboards polling every ${POLL_INTERVAL_MS / 1000} s ` +
            `(${stats.polls} polls, mean ${stats.meanMs.toFixed(1)} ms, max ${stats.maxMs.toFixed(1)} ms): ${lostPerDashboard.toFixed(2)}% per dashboard`,
        );
      }
    }
  }

  async supervisorProcesses(trial: number): Promise<void> {
    const n = this.options.processes;
    const db = await this.freshDb('ours', 'processes');
    const resend = await startFakeResend();
    try {
      await withClient(db.owner, (c) =>
        c.query(`insert into internal.setting (name, value) values ('backoff_scale', '0.002')`),
      );
      await withClient(db.app, (c) =>
        c.query(
          `select comms.send_email('Bench <bench@example.com>', 'user' || g || '@example.com', 'Hello', '<p>Hello</p>')
             from generate_series(1, $1::int) g`,
          [n],
        ),
      );
      await withClient(db.root, (c) => c.query('vacuum analyze'));
      await this.checkpoint();
      const runner = this.spawn('ours', 'process worker', {
        mode: 'work',
        url: db.worker,
        workerId: 'bench-ours-processes',
        concurrency: this.options.workerConcurrency,
        latency: false,
        kind: 'email',
        resendUrl: resend.url,
      });
      const terminalSql = `select (select count(*) from comms.send_email_task_succeeded)::int
                                + (select count(*) from comms.send_email_task_failed)::int as n`;
      let result: RunnerResult;
      let elapsedMs: number;
      try {
        await withTimeout(runner.ready, 60_000, 'process worker ready');
        const started = performance.now();
        runner.go();
        const done = await this.waitFor(db, terminalSql, [], n, 600_000, 'email processes');
        elapsedMs = done.at - started;
        runner.stop();
        result = await runner.finish(60_000);
      } finally {
        runner.kill();
      }
      const counts = await withClient(db.root, async (c) => {
        const { rows } = await c.query<{ succeeded: number; failed: number; tasks: number; errors: number }>(
          `select (select count(*) from comms.send_email_task_succeeded)::int as succeeded,
                  (select count(*) from comms.send_email_task_failed)::int as failed,
                  (select count(*) from queues.task)::int as tasks,
                  (select count(*) from queues.error)::int as errors`,
        );
        return rows[0]!;
      });
      this.checks.push({
        trial,
        subject: 'ours',
        workload: 'processes',
        expected: n,
        completed: counts.succeeded,
        handled: result.handled as number,
        extra: { emails: resend.emails.length, tasks: counts.tasks, failed: counts.failed, errors: counts.errors },
      });
      if (counts.succeeded !== n || resend.emails.length !== n) {
        this.anomaly(
          trial,
          'ours',
          'processes',
          `${counts.succeeded} succeeded, ${counts.failed} failed, ${resend.emails.length} emails sent, expected ${n}`,
        );
      }
      const rate = (n / elapsedMs) * 1000;
      this.record('processes', 'ours', trial, rate);
      this.record('process_tasks', 'ours', trial, counts.tasks / n);
      this.log(`  ours email processes: ${rate.toFixed(1)} processes/s (${counts.tasks} tasks for ${n} processes)`);
    } finally {
      await resend.close();
      await this.dropDb(db);
    }
  }
}

function rotated<T>(items: readonly T[], by: number): T[] {
  const k = by % items.length;
  return [...items.slice(k), ...items.slice(0, k)];
}

export async function runBench(server: BenchServer, options: BenchOptions): Promise<BenchResults> {
  const startedAt = new Date();
  const h = new Harness(server, options);
  const has = (w: WorkloadId) => options.workloads.includes(w);
  const oursIncluded = options.systems.includes('ours');

  const info = await withClient(server.rootUrl, async (c) => {
    const version = (await c.query<{ v: string }>(`select current_setting('server_version') as v`)).rows[0]!.v;
    const names = [
      'shared_buffers',
      'synchronous_commit',
      'fsync',
      'full_page_writes',
      'wal_level',
      'max_wal_size',
      'checkpoint_timeout',
      'max_connections',
      'work_mem',
      'autovacuum',
      'autovacuum_naptime',
    ];
    const { rows } = await c.query<{ name: string; setting: string; unit: string | null }>(
      `select name, setting, unit from pg_settings where name = any($1)`,
      [names],
    );
    return {
      version,
      settings: Object.fromEntries(rows.map((r) => [r.name, r.unit ? `${r.setting} (${r.unit})` : r.setting])),
    };
  });
  const pgbench = pgbenchBinary();
  const pgbenchVersion = pgbench ? (await run(pgbench, ['--version'], 10_000)).stdout.trim() : null;
  const node22Version = options.systems.some((s) => s !== 'ours')
    ? (await run(node22Binary(), ['--version'], 10_000)).stdout.trim()
    : null;

  for (let trial = 1; trial <= options.trials; trial++) {
    const order = rotated(options.systems, trial - 1);
    h.log(`trial ${trial} of ${options.trials}: order ${order.join(', ')}`);
    const guarded = async (subject: Subject, workload: string, fn: () => Promise<void>) => {
      try {
        await fn();
      } catch (error) {
        h.anomaly(trial, subject, workload, error instanceof Error ? error.message : String(error));
      }
    };
    if (has('pgbench')) await guarded('postgres', 'pgbench', () => h.pgbench(trial));
    if (has('enqueue_single'))
      for (const s of order) await guarded(s, 'enqueue_single', () => h.enqueueWorkload(s, trial, 'single'));
    if (has('enqueue_batch'))
      for (const s of order) await guarded(s, 'enqueue_batch', () => h.enqueueWorkload(s, trial, 'batch'));
    if (has('drain')) {
      for (const s of order)
        await guarded(s, 'drain_1p', () =>
          h.drain(s, trial, { processes: 1, metric: 'drain_1p', rssMetric: 'rss_1p_mb' }),
        );
      for (const s of order)
        await guarded(s, 'drain_2p', () =>
          h.drain(s, trial, { processes: 2, metric: 'drain_2p', rssMetric: 'rss_2p_mb' }),
        );
    }
    if (has('latency')) for (const s of order) await guarded(s, 'latency', () => h.latency(s, trial));
    if (oursIncluded && has('history')) await guarded('ours', 'history_drain', () => h.historyDrain(trial));
    if (oursIncluded && has('steps')) {
      await guarded('ours', 'steps', () =>
        h.drain('ours', trial, { processes: 1, metric: 'steps', kind: 'db_function' }),
      );
    }
    if (oursIncluded && has('processes')) await guarded('ours', 'processes', () => h.supervisorProcesses(trial));
    if (oursIncluded && has('resync')) await guarded('ours', 'resync', () => resyncWorkload(h, trial, options));
    if (oursIncluded && has('dashboard')) await guarded('ours', 'dashboard', () => h.dashboard(trial));
    if (oursIncluded && has('history_scale')) {
      const rows = options.historyScaleRows ?? 0;
      // One trial: a fill of ten million tasks takes minutes.
      if (rows > 0 && trial === 1) {
        await guarded('ours', 'history_scale_none', () => h.historyScale(trial, 0, 'none'));
        await guarded('ours', 'history_scale_full', () => h.historyScale(trial, rows, 'full'));
      } else if (trial === 1) {
        h.log('history_scale: left out (opt-in: BENCH_HISTORY=<completed tasks in history>, e.g. 10000000)');
      }
    }
  }

  return {
    measurements: h.measurements,
    anomalies: h.anomalies,
    checks: h.checks,
    startedAt,
    finishedAt: new Date(),
    serverVersion: info.version,
    serverSettings: info.settings,
    pgbenchVersion,
    node22Version,
  };
}
