/**
 * The worker: claim -> local queue -> start -> processor -> completer, N at a time. This
 * file composes its parts and is its public face (start, status, stop, events); each part
 * is a file of its own:
 *
 *   producer.ts    the claim loop and the local queue: claims the task types of its roles
 *                  in batches, starts waiting tasks as slots free, sleeps until a
 *                  notification (listener.ts), a freed slot or the poll interval
 *   slots.ts       the slots (CONCURRENCY) and the runs holding them, one run per task and
 *                  one call per step key at a time; run.ts is one run and its TaskContext
 *   executor.ts    runs one task: its processor within its run timeout (timeouts.ts), its
 *                  outcome to the completer; a run released, whose lease was lost or that a
 *                  transient error cut short, each handled in one place
 *   completer.ts   the one writer of a task's end: records outcomes in batches on its own
 *                  connection, and runs steps with their completion in the database
 *                  (step-runner.ts)
 *   heartbeats.ts  reports the worker alive (queues.worker), extends the leases of running
 *                  and waiting tasks, marks the runs still going as started, and aborts a
 *                  run whose lease was lost or whose task was cancelled (cancellation.ts)
 *
 * stop() stops claiming, gives the local queue's leases back, waits up to the grace period
 * for running tasks, and releases the leases of the rest so other workers take them at
 * once.
 *
 * Crash exposure: a worker killed with SIGKILL takes its running tasks and its local
 * queue with it. Their leases expire (or are revoked as stale) and the tasks run again
 * elsewhere, as suspects, one per claim; an expiry counts towards abandonment only for
 * the task its lease named as its suspect (see queues.claim_tasks_at), so the tasks that
 * only waited in its local queue, or ran beside the one that killed it, are not counted.
 * A run cut short by another process's crash of PostgreSQL gives its lease back once the
 * server answers; a step call whose backend died without a word leaves its lease to
 * expire (crash-notice.ts, executor.ts).
 */
import { EventEmitter } from 'node:events';
import pg from 'pg';
import { releaseLeases } from '@org/queue-client';
import { Completer } from './completer.js';
import type { WorkerConfig } from './config.js';
import { watchCrashNotice } from './crash-notice.js';
import { errorMessage } from './error-class.js';
import { Executor } from './executor.js';
import { Heartbeats } from './heartbeats.js';
import { TaskListener } from './listener.js';
import type { Logger } from './logger.js';
import type { ProcessorRegistry } from './processor.js';
import { DEFAULT_PREFETCH, Producer, type RunningTask } from './producer.js';
import { abortRun, type WorkerEvents } from './run.js';
import { RunTimeouts } from './timeouts.js';
import { traceWorkerEvents } from './tracing.js';

export { DEFAULT_PREFETCH, LOCAL_QUEUE_MS } from './producer.js';
export type { WorkerEvents } from './run.js';

export interface WorkerOptions extends Omit<WorkerConfig, 'logLevel'> {
  registry: ProcessorRegistry;
  logger: Logger;
  /** See ProducerOptions.beforeStarts (a process pool's member tells its supervisor). */
  beforeStarts?: (tasks: RunningTask[]) => Promise<void>;
}

/** statement_timeout of the worker's connections unless `statementTimeoutMs` says otherwise. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 300_000;

/** Where a Worker is in its life: what the health endpoints report (health.ts). */
export type WorkerState = 'created' | 'starting' | 'running' | 'stopping' | 'stopped';

export interface WorkerStatus {
  state: WorkerState;
  /** The claim loop was started and has not ended. */
  loopRunning: boolean;
  /** Milliseconds since the claim loop last began a turn; null before it started. */
  msSinceLoopTurn: number | null;
  /** Claims failed in a row (0 once one succeeds). */
  claimFailures: number;
  /** Tasks running, and claimed tasks waiting to start. */
  running: number;
  /** Runs past their timeout whose processors have not returned: their slots are lost until they do. */
  timedOut: number;
  waiting: number;
  pollIntervalMs: number;
}

export class Worker extends EventEmitter<WorkerEvents> {
  readonly pool: pg.Pool;
  readonly #options: WorkerOptions;
  readonly #log: Logger;
  readonly #taskTypes: string[];
  readonly #completer: Completer;
  /** Run timeouts per task type (timeouts.ts), read at start and at each heartbeat. */
  readonly #timeouts = new RunTimeouts();
  readonly #listener: TaskListener;
  readonly #producer: Producer;
  readonly #executor: Executor;
  readonly #heartbeats: Heartbeats;
  #started = false;
  #stopped = false;
  /** The completer's warm-up (Completer.warm), waited for before its connections close. */
  #warm: Promise<void> = Promise.resolve();

  constructor(options: WorkerOptions) {
    super();
    this.#options = options;
    const log = (this.#log = options.logger.child({ worker_id: options.workerId }));
    this.#taskTypes = options.registry.claimable(options.roles);
    const statementTimeoutMs = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
    const pool = (this.pool = new pg.Pool({
      connectionString: options.databaseUrl,
      // Every running task may hold a connection; the loop and the heartbeat need one each.
      max: options.concurrency + 2,
      application_name: 'queue-worker',
      keepAlive: true,
      // A step or handler blocked on a lock fails instead of being heartbeated forever.
      statement_timeout: statementTimeoutMs,
    }));
    // An idle connection that dies (server restart, pg_terminate_backend) must not crash us.
    pool.on('error', (error) => log.warn({ event: 'pool_error', err: error.message }, 'idle connection lost'));
    // A connection that dies while checked out emits 'error' on its client too; the query
    // in flight rejects and is handled there, so this only keeps the process alive.
    // It also watches for the notice of a crash of another server process (crash-notice.ts).
    pool.on('connect', (client) => {
      client.on('error', () => {});
      watchCrashNotice(client);
    });
    // Steps run on the worker's own connections: each holds one while it runs.
    const completer = (this.#completer = new Completer(options.databaseUrl, log, statementTimeoutMs, {
      stepPool: pool,
    }));
    const common = { pool, log, events: this, workerId: options.workerId, taskTypes: this.#taskTypes };
    const producer = (this.#producer = new Producer({
      ...common,
      registry: options.registry,
      concurrency: options.concurrency,
      prefetch: options.prefetch ?? DEFAULT_PREFETCH,
      pollIntervalMs: options.pollIntervalMs,
      leaseSeconds: options.leaseSeconds,
      maxLeases: options.maxLeases,
      suspects: options.suspects ?? 'any',
      beforeStarts: options.beforeStarts,
      stepBatchSize: (waiting, slots) => completer.stepBatchSize(waiting, slots),
      launch: (running) => this.#executor.launch(running),
    }));
    this.#executor = new Executor({
      ...common,
      registry: options.registry,
      completer,
      timeouts: this.#timeouts,
      slots: producer.slots,
      maxLeases: options.maxLeases,
      queue: producer,
      notified: () => producer.notified(),
      stopping: () => producer.stopping,
    });
    this.#heartbeats = new Heartbeats({
      ...common,
      heartbeatIntervalMs: options.heartbeatIntervalMs,
      leaseSeconds: options.leaseSeconds,
      timeouts: this.#timeouts,
      slots: producer.slots,
      queue: producer,
    });
    this.#listener = new TaskListener(options.databaseUrl, log, () => producer.notified(), options.pollIntervalMs);
    traceWorkerEvents(this);
  }

  listener(): TaskListener {
    return this.#listener;
  }

  async start(): Promise<void> {
    this.#started = true;
    this.#log.info(
      {
        event: 'worker_started',
        roles: this.#taskTypes,
        concurrency: this.#options.concurrency,
        prefetch: this.#options.prefetch ?? DEFAULT_PREFETCH,
      },
      `worker started for ${this.#taskTypes.join(', ')}`,
    );
    // Independent, so at once: the listening connection, the worker's first connection
    // (the run timeouts, then the registry: one connection, not two, as every connection
    // a worker opens at its start costs the server a process), and the completions'
    // connection (not waited for: the first claim need not wait for it). Claims start
    // once the listener listens (so no notification after the first claim is missed),
    // the worker is in the registry (so a worker id restarted after a silence is not
    // taken for the silent one) and the run timeouts are known.
    this.#warm = this.#completer.warm();
    await Promise.all([
      this.#listener.start(),
      this.#timeouts.refresh(this.pool, this.#log).then(() => this.#heartbeats.reportIn()),
    ]);
    this.#heartbeats.start();
    this.#producer.start();
  }

  /** The state the health endpoints read: alive, claiming, stopping (health.ts). */
  status(): WorkerStatus {
    const producer = this.#producer;
    const state: WorkerState = this.#stopped
      ? 'stopped'
      : producer.stopping
        ? 'stopping'
        : producer.loopStarted
          ? 'running'
          : this.#started
            ? 'starting'
            : 'created';
    return {
      state,
      loopRunning: producer.loopRunning,
      msSinceLoopTurn: producer.msSinceLoopTurn(),
      claimFailures: producer.claimFailures,
      running: producer.slots.runs.size,
      timedOut: producer.slots.timedOut(),
      waiting: producer.waiting.length,
      pollIntervalMs: this.#options.pollIntervalMs,
    };
  }

  /** Graceful stop: no new claims, running tasks get the grace period, the rest are released. */
  async stop(graceMs = this.#options.shutdownGraceMs): Promise<void> {
    if (this.#producer.stopping) return;
    this.#log.info(
      { event: 'worker_stopping', running: this.#producer.slots.runs.size, grace_ms: graceMs },
      'stopping: no new claims',
    );
    await this.#producer.stop();
    const runs = this.#producer.slots.runs;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.#producer.slots.whenIdle(),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs))),
    ]);
    clearTimeout(timer);
    const left = [...runs.values()];
    if (left.length > 0) {
      // Release first: from then on the leases are no longer held, so whatever the
      // aborted processors try to record is refused (executor.ts) and the next worker
      // starts clean.
      for (const r of left) r.released = true;
      try {
        const released = await releaseLeases(
          this.pool,
          left.map((r) => ({ taskId: r.task.taskId, taskLeaseId: r.task.taskLeaseId })),
        );
        this.#log.info(
          { event: 'leases_released', task_ids: released },
          `released ${released.length} unfinished task(s)`,
        );
        this.emit('released', released);
      } catch (error) {
        this.#log.error(
          { event: 'release_failed', err: errorMessage(error) },
          'could not release leases; they will expire',
        );
      }
      for (const r of left) abortRun(r, new Error('worker shutting down'));
    }
    this.#heartbeats.stop();
    await this.#listener.stop();
    await this.#heartbeats.reportStopped();
    // The completions asked for are recorded before the worker says it stopped, within
    // the grace period (at least two seconds: a loaded database may take that long). A
    // step stuck in SQL keeps its connection checked out, and pool.end() would wait for
    // it: give it two seconds. (Its lease is released; the process exiting closes it.)
    const timers: NodeJS.Timeout[] = [];
    const within = (ms: number, work: Promise<unknown>) =>
      Promise.race([work, new Promise<void>((resolve) => timers.push(setTimeout(resolve, ms)))]);
    await Promise.all([
      within(
        Math.max(2000, graceMs),
        this.#warm.then(() => this.#completer.drain()).then(() => this.#completer.close()),
      ),
      within(2000, this.pool.end()),
    ]);
    for (const t of timers) clearTimeout(t);
    this.#stopped = true;
    this.#log.info({ event: 'worker_stopped', unfinished: left.length }, 'worker stopped');
  }
}
