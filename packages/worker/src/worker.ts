/**
 * The worker: claim -> local queue -> start -> processor -> completer, N at a time.
 *
 *   loop        claims (only the task types of its roles, up to 500 per call) into a local
 *               queue of about 250 ms of work, up to `prefetch` tasks (default 500),
 *               refilled when it is half empty; starts tasks as slots free; then waits
 *               for a notification, a freed slot or the poll interval
 *   starts      nothing is written: a run's start time goes with its completion, and a
 *               run that outlasts a heartbeat is marked started by that heartbeat
 *   crashes     a run cut short by another process's crash of PostgreSQL gives its
 *               lease back once the server answers; a step call whose backend died
 *               without a word leaves its lease to expire (crash-notice.ts)
 *   completer   the one writer of a task's end: records outcomes in batches on its own
 *               connection, and runs steps with their completion in the database
 *               (completer.ts, step-runner.ts)
 *   heartbeat   reports the worker alive (queues.worker), extends the leases of running
 *               and waiting tasks, and marks the runs still going as started; a lease
 *               missing from the answer was lost, and that task's signal is aborted (its
 *               completion would be refused), with a TaskCancelledError when the task
 *               was cancelled (cancellation.ts)
 *   timeouts    a task type's run timeout (timeouts.ts): at the deadline the signal is
 *               aborted, the failure recorded, the lease no longer extended; the slot
 *               is taken until the processor returns
 *   listener    LISTEN queues_task_ready, reconnecting after drops
 *   stop()      stops claiming, waits up to the grace period for running tasks, releases
 *               the leases of the rest so other workers take them at once
 *
 * Invariant: every started task is completed (success or failure), or its run is
 * interrupted (a transient error: counted, the task runs again after a backoff),
 * released, or its lease left to expire when the database cannot be reached. A task is
 * never recorded as failed because of a connection error. What an error means is decided
 * in error-class.ts only.
 *
 * One run of a task at a time: running tasks are keyed by lease, and a lease of a task
 * this worker is still running (its earlier lease was revoked or expired, and the worker
 * claimed the task again) waits in the local queue until the earlier run has ended.
 * Likewise one call at a time for steps of the same task type and payload (the runs of
 * one process supervisor): a second waits until the first one's call is answered.
 *
 * Crash exposure: a worker killed with SIGKILL takes its running tasks and its local
 * queue with it. Their leases expire (or are revoked as stale) and the tasks run again
 * elsewhere, as suspects, one per claim; an expiry counts towards abandonment only for
 * the task its lease named as its suspect (see queues.claim_tasks_at), so the tasks that
 * only waited in its local queue, or ran beside the one that killed it, are not counted.
 */
import { EventEmitter } from 'node:events';
import pg from 'pg';
import {
  claimTasks,
  extendLeases,
  interruptTask,
  markStarted,
  nextClaimInMs,
  recordWorkerHeartbeat,
  recordWorkerStopped,
  releaseLeases,
  type ClaimedTask,
} from '@org/queue-client';
import { lostLeaseReasons, TaskCancelledError } from './cancellation.js';
import { Completer } from './completer.js';
import { RunTimeouts, TaskTimeoutError } from './timeouts.js';
import { ProgressReporter } from './progress.js';
import { readDependencies, type TaskDependency } from './dependencies.js';
import { classifyError, errorMessage, isTransient } from './error-class.js';
import { isCrashOfAnotherProcess, isSilentConnectionLoss, wasNotRun, watchCrashNotice } from './crash-notice.js';
import type { WorkerConfig } from './config.js';
import { TaskListener } from './listener.js';
import type { Logger } from './logger.js';
import type { ProcessorRegistry, TaskContext, TaskOutcome, TaskReport } from './processor.js';
import { taskLogger } from './task-logger.js';
import { bindToTask, traceClaim, traceStep, traceTask, traceWorkerEvents, tracingEnabled } from './tracing.js';

/**
 * How long after a crash of PostgreSQL the worker tries to give back the leases of runs
 * the crash cut short (the server replays its WAL meanwhile), and how often.
 */
const CRASH_RECOVERY_MS = 30_000;
const RELEASE_RETRY_MS = 200;
/** The local queue's size when none is configured (graphile-worker's default too). */
export const DEFAULT_PREFETCH = 500;
/** How long after a scheduled task is due a worker that waited for it claims again. */
const DUE_MARGIN_MS = 5;
/** Most tasks per claim (queues.claim_tasks accepts up to 1000). */
const MAX_CLAIM = 500;
/**
 * The local queue holds about this much work (judged from how long tasks kept their slots
 * lately), up to `prefetch`: hundreds of quick tasks, only a few slow ones, so a worker
 * that dies strands little work and a backlog is shared between workers.
 */
export const LOCAL_QUEUE_MS = 250;

export interface WorkerOptions extends Omit<WorkerConfig, 'logLevel'> {
  registry: ProcessorRegistry;
  logger: Logger;
}

/** statement_timeout of the worker's connections unless `statementTimeoutMs` says otherwise. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 300_000;

/**
 * One slot shared by the steps of one queues.run_steps call: tasks whose processor
 * `runsSteps` start many at a time in a slot, and the slot is free once all are answered.
 */
interface StepSlot {
  /** Tasks of the call not answered yet. */
  holders: number;
  readonly size: number;
  readonly startedAt: number;
}

interface Running {
  task: ClaimedTask;
  /** The shared slot of a step started with others (see StepSlot); its key is in #stepCalls. */
  slot?: StepSlot;
  /** Made when the processor asks for its signal or the run is aborted (abortRun): ~1.5 KB each. */
  controller?: AbortController;
  startedAt: number;
  /** A heartbeat marked the run started (queues.mark_started): it outlasted one. */
  marked?: boolean;
  lost: boolean;
  /** Its progress reports (progress.ts), made on the first. */
  progress?: ProgressReporter;
  /** Its run timeout passed (timeouts.ts): failed, its lease no longer extended. */
  timedOut?: boolean;
  /** Cancelled while it ran (cancellation.ts): its lease is lost and nothing is recorded. */
  cancelled?: TaskCancelledError;
  /** Released at shutdown: the processor's late results are expected to be refused. */
  released: boolean;
  /** Its slot (or its share of a shared one) was given back (Worker.#free). */
  freed: boolean;
  /** The task's logger (task-logger.ts), made when first used: see runLog. */
  log?: Logger;
  /** Settles once the run is over: its outcome recorded, or the run given up. */
  done: Promise<void>;
}

/** What a run's `done` is until it is launched (it ends with the run from then on). */
const NOT_STARTED = Promise.resolve();

/** The task's logger (`task_id`, `task_type`, `task_lease_id` bound), made on first use. */
function runLog(running: Running, parent: Logger): Logger {
  return (running.log ??= taskLogger(parent, running.task));
}

/**
 * What a processor gets (TaskContext): one small object per task, whose logger and signal
 * are made when first asked for, by getters of the class (no closure per task).
 */
class Context implements TaskContext {
  readonly task: ClaimedTask;
  readonly pool: pg.Pool;
  readonly #running: Running;
  readonly #parentLog: Logger;

  constructor(running: Running, pool: pg.Pool, parentLog: Logger) {
    this.task = running.task;
    this.pool = pool;
    this.#running = running;
    this.#parentLog = parentLog;
  }

  get log(): Logger {
    return runLog(this.#running, this.#parentLog);
  }

  get signal(): AbortSignal {
    return (this.#running.controller ??= new AbortController()).signal;
  }

  progress(done: number, total?: number, note?: string): void {
    const running = this.#running;
    const report = { done, ...(total === undefined ? {} : { total }), ...(note === undefined ? {} : { note }) };
    (running.progress ??= new ProgressReporter(this.pool, running.task, () => runLog(running, this.#parentLog))).report(
      report,
    );
  }

  dependencies(): Promise<TaskDependency[]> {
    return readDependencies(this.pool, this.task);
  }
}

/** Aborts a run's signal (made now if nobody asked for it yet, so a later look sees it aborted). */
function abortRun(running: Running, reason: Error): void {
  (running.controller ??= new AbortController()).abort(reason);
}

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

export interface WorkerEvents {
  claimed: [tasks: ClaimedTask[]];
  completed: [task: ClaimedTask, report: TaskReport, durationMs: number];
  lease_lost: [task: ClaimedTask];
  /** Cancelled while it ran (its signal aborted with a TaskCancelledError). */
  cancelled: [task: ClaimedTask, reason: string];
  /** Its run timeout passed (the failure is recorded; `completed` follows). */
  timed_out: [task: ClaimedTask, timeoutMs: number];
  released: [taskIds: string[]];
  extended: [count: number];
}

export class Worker extends EventEmitter<WorkerEvents> {
  readonly pool: pg.Pool;
  readonly #options: WorkerOptions;
  readonly #log: Logger;
  readonly #taskTypes: string[];
  readonly #completer: Completer;
  /** Run timeouts per task type (timeouts.ts), read at start and at each heartbeat. */
  readonly #timeouts = new RunTimeouts();
  /** Started (or starting) tasks until their outcome is recorded, by lease id. */
  readonly #running = new Map<string, Running>();
  /** How many runs of each task are in #running (a second waits in the local queue). */
  readonly #runningTasks = new Map<string, number>();
  /**
   * Steps in calls under way, by step key: the task type and payload. Runs of one process
   * supervisor have the same payload and lock the same root row, so a second one waits in
   * the local queue until the first one's call is answered, rather than in the database,
   * where it would hold up every other step of its call (and the calls waiting on those).
   */
  readonly #stepCalls = new Map<string, number>();
  readonly #stepKeys = new WeakMap<ClaimedTask, string>();
  /** Slots in use: tasks starting or in their processor. */
  #busy = 0;
  /** A #startWaiting is due at the end of the code running now (#startSoon). */
  #startScheduled = false;
  /** Claimed, not started yet (the local queue). */
  #waiting: ClaimedTask[] = [];
  readonly #listener: TaskListener;
  #stopping = false;
  #started = false;
  #stopped = false;
  #loopEnded = false;
  /** When the claim loop last began a turn (performance.now() ms). */
  #loopTurnAt = 0;
  #woken = false;
  #wake: (() => void) | undefined;
  #loop: Promise<void> | undefined;
  #heartbeat: NodeJS.Timeout | undefined;
  #claimFailures = 0;
  /**
   * The last claim came back short: no more work until a notification, the poll, or the
   * next scheduled task's time (#lookAgainAt).
   */
  #drained = false;
  /** When a drained worker claims again (performance.now() ms): its poll, or sooner. */
  #lookAgainAt = 0;
  /**
   * The last claim brought a task back whose earlier lease ended without completion (a
   * suspect of a dead worker, perhaps): the queue hands out one suspect per claim, so the
   * loop claims again as soon as there is room rather than when the local queue is half
   * empty.
   */
  #recovering = false;
  /** Moving average of how long a task keeps its slot, ms (undefined until one ran). */
  #slotMs: number | undefined;

  constructor(options: WorkerOptions) {
    super();
    this.#options = options;
    this.#log = options.logger.child({ worker_id: options.workerId });
    this.#taskTypes = options.registry.claimable(options.roles);
    this.pool = new pg.Pool({
      connectionString: options.databaseUrl,
      // Every running task may hold a connection; the loop and the heartbeat need one each.
      max: options.concurrency + 2,
      application_name: 'queue-worker',
      keepAlive: true,
      // A step or handler blocked on a lock fails instead of being heartbeated forever.
      statement_timeout: options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS,
    });
    // An idle connection that dies (server restart, pg_terminate_backend) must not crash us.
    this.pool.on('error', (error) =>
      this.#log.warn({ event: 'pool_error', err: error.message }, 'idle connection lost'),
    );
    // A connection that dies while checked out emits 'error' on its client too; the query
    // in flight rejects and is handled there, so this only keeps the process alive.
    // It also watches for the notice of a crash of another server process (crash-notice.ts).
    this.pool.on('connect', (client) => {
      client.on('error', () => {});
      watchCrashNotice(client);
    });
    // Steps run on the worker's own connections: each holds one while it runs.
    this.#completer = new Completer(
      options.databaseUrl,
      this.#log,
      options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS,
      { stepPool: this.pool },
    );
    this.#listener = new TaskListener(options.databaseUrl, this.#log, () => this.#notified(), options.pollIntervalMs);
    traceWorkerEvents(this);
  }

  listener(): TaskListener {
    return this.#listener;
  }

  get #prefetch(): number {
    return this.#options.prefetch ?? DEFAULT_PREFETCH;
  }

  async start(): Promise<void> {
    this.#started = true;
    this.#log.info(
      {
        event: 'worker_started',
        roles: this.#taskTypes,
        concurrency: this.#options.concurrency,
        prefetch: this.#prefetch,
      },
      `worker started for ${this.#taskTypes.join(', ')}`,
    );
    await this.#listener.start();
    await this.#timeouts.refresh(this.pool, this.#log);
    await this.#reportIn();
    this.#heartbeat = setInterval(() => void this.#beat(), this.#options.heartbeatIntervalMs);
    this.#loopTurnAt = performance.now();
    this.#loop = this.#run().finally(() => {
      this.#loopEnded = true;
    });
  }

  /** The state the health endpoints read: alive, claiming, stopping (health.ts). */
  status(): WorkerStatus {
    const state: WorkerState = this.#stopped
      ? 'stopped'
      : this.#stopping
        ? 'stopping'
        : this.#loop
          ? 'running'
          : this.#started
            ? 'starting'
            : 'created';
    return {
      state,
      loopRunning: this.#loop !== undefined && !this.#loopEnded,
      msSinceLoopTurn: this.#loop === undefined ? null : performance.now() - this.#loopTurnAt,
      claimFailures: this.#claimFailures,
      running: this.#running.size,
      timedOut: [...this.#running.values()].filter((r) => r.timedOut).length,
      waiting: this.#waiting.length,
      pollIntervalMs: this.#options.pollIntervalMs,
    };
  }

  /** Graceful stop: no new claims, running tasks get the grace period, the rest are released. */
  async stop(graceMs = this.#options.shutdownGraceMs): Promise<void> {
    if (this.#stopping) return;
    this.#stopping = true;
    this.#log.info(
      { event: 'worker_stopping', running: this.#running.size, grace_ms: graceMs },
      'stopping: no new claims',
    );
    this.#signal();
    await this.#loop;
    // Tasks claimed but not started go back at once.
    const queued = this.#waiting.splice(0);
    if (queued.length > 0) await this.#release(queued);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.#running.values()].map((r) => r.done)),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs))),
    ]);
    clearTimeout(timer);
    const left = [...this.#running.values()];
    if (left.length > 0) {
      // Release first: from then on the leases are no longer held, so whatever the
      // aborted processors try to record is refused and the next worker starts clean.
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
    clearInterval(this.#heartbeat);
    await this.#listener.stop();
    try {
      await recordWorkerStopped(this.pool, this.#options.workerId);
    } catch (error) {
      this.#log.warn({ event: 'registry_failed', err: errorMessage(error) }, 'could not record the stop');
    }
    // A step stuck in SQL keeps its connection checked out, and pool.end() would wait for
    // it: give it two seconds. (Its lease is released; the process exiting closes it.)
    let endTimer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all([this.#completer.drain().then(() => this.#completer.close()), this.pool.end()]),
      new Promise<void>((resolve) => (endTimer = setTimeout(resolve, 2000))),
    ]);
    clearTimeout(endTimer);
    this.#stopped = true;
    this.#log.info({ event: 'worker_stopped', unfinished: left.length }, 'worker stopped');
  }

  /** New work was announced (NOTIFY, or the listener's poll): worth a claim. */
  #notified(): void {
    this.#drained = false;
    this.#signal();
  }

  #signal(): void {
    this.#woken = true;
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /** Waits `ms` or until woken; true when woken. */
  #sleep(ms: number): Promise<boolean> {
    if (this.#woken || this.#stopping) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#wake = undefined;
        resolve(false);
      }, ms);
      this.#wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
  }

  async #run(): Promise<void> {
    const { concurrency, pollIntervalMs } = this.#options;
    // The local queue holds up to `prefetch` claimed tasks beside the running ones, so a
    // freed slot starts the next task at once and one claim serves hundreds of tasks. It
    // is refilled when it is half empty, before it runs dry. Queued tasks hold leases
    // (heartbeated like running ones); if this worker dies they come back when those
    // expire, as suspects, but their expiry is not counted towards abandonment.
    while (!this.#stopping) {
      this.#loopTurnAt = performance.now();
      const prefetch = this.#localQueueSize();
      const capacity = concurrency + prefetch;
      const lowWater = Math.floor(prefetch / 2);
      this.#woken = false;
      const room = capacity - this.#busy - this.#waiting.length;
      // A freed slot is no reason to claim again right after a claim found the queue
      // empty: that waits for a notification or the poll interval.
      if (room > 0 && (this.#waiting.length <= lowWater || this.#recovering) && !this.#drained) {
        // Tasks that finish together free their slots in the same turn of the event
        // loop: let them, and claim for all of them in one call.
        if (this.#busy > 0) await new Promise((resolve) => setImmediate(resolve));
        const limit = Math.min(MAX_CLAIM, capacity - this.#busy - this.#waiting.length);
        const claimed = limit > 0 ? await this.#claim(limit) : [];
        if (this.#stopping) {
          if (claimed.length > 0) await this.#release(claimed);
          break;
        }
        this.#recovering = claimed.some((t) => t.leaseCount > 1);
        this.#waiting.push(...claimed);
        this.#startWaiting();
        // A full batch means more work is likely waiting: claim again at once.
        if (claimed.length === limit && claimed.length > 0) continue;
        // So does a suspect: the queue hands out one per claim, and a dead worker's
        // suspects would otherwise come back one per poll interval.
        this.#drained = this.#claimFailures === 0 && !this.#recovering;
        if (this.#claimFailures > 0) {
          await this.#sleep(Math.min(pollIntervalMs, 100 * 2 ** Math.min(this.#claimFailures, 6)));
          continue;
        }
        // Look again at the poll interval, or when the next scheduled task is due.
        if (this.#drained) this.#lookAgainAt = performance.now() + (await this.#nextClaimIn(pollIntervalMs));
      }
      // The time to look again passed without a wake-up: look again.
      const wait = this.#drained ? Math.max(0, this.#lookAgainAt - performance.now()) : pollIntervalMs;
      if (!(await this.#sleep(wait))) this.#drained = false;
    }
  }

  /**
   * How many claimed tasks may wait beside the running ones: about LOCAL_QUEUE_MS of work
   * at the recent pace, at least `concurrency` (one more task per slot), at most
   * `prefetch`. Until a task has run, `concurrency`.
   */
  #localQueueSize(): number {
    const { concurrency } = this.#options;
    const prefetch = this.#prefetch;
    if (prefetch === 0) return 0;
    if (this.#slotMs === undefined) return Math.min(prefetch, concurrency);
    const paced = Math.round((concurrency * LOCAL_QUEUE_MS) / Math.max(this.#slotMs, 0.01));
    return Math.min(prefetch, Math.max(concurrency, paced));
  }

  /**
   * #startWaiting once the code running now is done (a microtask): tasks that finish
   * together (the processors of one start, the completions of one round trip) free their
   * slots one after another, and their successors then start in one call, not one call
   * each with its own start record and answer.
   */
  #startSoon(): void {
    if (this.#startScheduled || this.#stopping) return;
    this.#startScheduled = true;
    queueMicrotask(() => {
      this.#startScheduled = false;
      if (!this.#stopping) this.#startWaiting();
    });
  }

  /**
   * Starts waiting tasks while there are free slots. A task this worker is still running
   * under an earlier lease stays waiting (heartbeated) until that run ends.
   */
  #startWaiting(): void {
    const starting: Running[] = [];
    // How many steps one slot takes (see StepRunner.batchSize).
    const stepBatch = this.#completer.stepBatchSize(this.#waiting.length, this.#options.concurrency);
    while (this.#busy < this.#options.concurrency && this.#waiting.length > 0) {
      // A task this worker still runs under an earlier lease waits (heartbeated) until
      // that run ends; so does a step whose key is in a call under way.
      const next =
        this.#runningTasks.size === 0 && this.#stepCalls.size === 0
          ? 0
          : this.#waiting.findIndex((t) => this.#startable(t));
      if (next < 0) break;
      if (this.#runsSteps(this.#waiting[next]!)) starting.push(...this.#admitSteps(next, stepBatch));
      else starting.push(this.#admit(next === 0 ? this.#waiting.shift()! : this.#waiting.splice(next, 1)[0]!));
    }
    for (const r of starting) this.#launch(r);
  }

  async #claim(limit: number): Promise<ClaimedTask[]> {
    try {
      const tasks = await traceClaim(
        this.#options.workerId,
        () =>
          claimTasks(this.pool, {
            workerId: this.#options.workerId,
            limit,
            taskTypes: this.#taskTypes,
            leaseSeconds: this.#options.leaseSeconds,
            maxLeases: this.#options.maxLeases,
          }),
        this.pool,
      );
      if (this.#claimFailures > 0) this.#log.info({ event: 'claim_recovered' }, 'claiming works again');
      this.#claimFailures = 0;
      if (tasks.length > 0) this.emit('claimed', tasks);
      return tasks;
    } catch (error) {
      this.#claimFailures++;
      this.#log.warn({ event: 'claim_failed', attempt: this.#claimFailures, err: errorMessage(error) }, 'claim failed');
      return [];
    }
  }

  /**
   * Milliseconds until the next task of this worker's types is scheduled (the database's
   * answer, queues.next_claim_in_ms) plus DUE_MARGIN_MS, at most `pollIntervalMs`; `pollIntervalMs` when
   * none is, or when the question fails (the poll covers it).
   */
  async #nextClaimIn(pollIntervalMs: number): Promise<number> {
    try {
      const ms = await nextClaimInMs(this.pool, this.#taskTypes);
      // A few ms late, not early: a timer may fire up to 1 ms before its time, and a
      // claim that comes before the task is due misses it until the poll.
      return ms === null ? pollIntervalMs : Math.min(ms + DUE_MARGIN_MS, pollIntervalMs);
    } catch (error) {
      this.#log.debug({ event: 'next_claim_failed', err: errorMessage(error) }, 'could not ask for the next due task');
      return pollIntervalMs;
    }
  }

  async #release(tasks: ClaimedTask[]): Promise<void> {
    try {
      await releaseLeases(
        this.pool,
        tasks.map((t) => ({ taskId: t.taskId, taskLeaseId: t.taskLeaseId })),
      );
    } catch (error) {
      this.#log.warn({ event: 'release_failed', err: errorMessage(error) }, 'could not release; leases will expire');
    }
  }

  /** Takes a slot for `task` (or a place in a shared `slot`): it counts as running from now on. */
  #admit(task: ClaimedTask, slot?: StepSlot): Running {
    const running: Running = {
      task,
      startedAt: Date.now(),
      lost: false,
      released: false,
      freed: false,
      done: NOT_STARTED,
    };
    if (slot) running.slot = slot;
    this.#running.set(task.taskLeaseId, running);
    this.#runningTasks.set(task.taskId, (this.#runningTasks.get(task.taskId) ?? 0) + 1);
    if (!slot) this.#busy++;
    return running;
  }

  #runsSteps(task: ClaimedTask): boolean {
    return this.#options.registry.get(task.taskType)?.runsSteps === true;
  }

  /** A step's key: its task type and payload (jsonb's text of a value is always the same). */
  #stepKey(task: ClaimedTask): string {
    let key = this.#stepKeys.get(task);
    if (key === undefined) {
      key = `${task.taskType}\u0000${JSON.stringify(task.payload)}`;
      this.#stepKeys.set(task, key);
    }
    return key;
  }

  /** Whether `task` may start now (see #runningTasks and #stepCalls). */
  #startable(task: ClaimedTask): boolean {
    if (this.#runningTasks.has(task.taskId)) return false;
    return this.#stepCalls.size === 0 || !this.#runsSteps(task) || !this.#stepCalls.has(this.#stepKey(task));
  }

  /**
   * Takes one slot for steps: the waiting step tasks from `from` on (up to `size`, skipping
   * tasks this worker still runs under an earlier lease and steps whose key is in a call
   * under way) run in one queues.run_steps call.
   *
   * A step leased before (its earlier lease ended without completion: a suspect, perhaps
   * the step that crashed PostgreSQL and every call with it) runs in a call of its own, so
   * a step that crashes the server again takes no other step with it, and the steps that
   * shared its first call are not counted as suspects again and again until abandoned.
   */
  #admitSteps(from: number, size: number): Running[] {
    const picked: ClaimedTask[] = [];
    const taken = new Set<string>();
    const rest = this.#waiting.slice(0, from);
    for (const task of this.#waiting.slice(from)) {
      const alone = picked.length > 0 && (task.leaseCount > 1 || picked[0]!.leaseCount > 1);
      if (picked.length < size && !alone && this.#runsSteps(task) && this.#startable(task) && !taken.has(task.taskId)) {
        picked.push(task);
        taken.add(task.taskId);
      } else {
        rest.push(task);
      }
    }
    this.#waiting = rest;
    const slot: StepSlot = { holders: picked.length, size: picked.length, startedAt: Date.now() };
    this.#busy++;
    // Steps of one key in this call run one after the other in its transaction: no wait.
    for (const task of picked) {
      const key = this.#stepKey(task);
      this.#stepCalls.set(key, (this.#stepCalls.get(key) ?? 0) + 1);
    }
    return picked.map((task) => this.#admit(task, slot));
  }

  /**
   * Runs an admitted task. The run is over when #process settles: #process, or #record
   * once the outcome is on its way, calls #ended last.
   */
  #launch(running: Running): void {
    running.done = traceTask(running.task, () => this.#process(running));
  }

  /** Gives back the run's slot (or its share of a shared one), once. */
  #free(running: Running): void {
    if (running.freed) return;
    running.freed = true;
    const { slot } = running;
    if (slot) {
      // The shared slot is free once every step of its call is answered; each step
      // counts for its share of the call's time.
      if (--slot.holders > 0) return;
      const slotMs = (Date.now() - slot.startedAt) / slot.size;
      const keep = 0.9 ** slot.size;
      this.#slotMs = this.#slotMs === undefined ? slotMs : keep * this.#slotMs + (1 - keep) * slotMs;
    } else {
      const slotMs = Date.now() - running.startedAt;
      this.#slotMs = this.#slotMs === undefined ? slotMs : 0.9 * this.#slotMs + 0.1 * slotMs;
    }
    this.#busy--;
    this.#startSoon();
    this.#signal(); // a slot is free
  }

  /** The run is over: it leaves #running, and a later lease of the same task may start. */
  #ended(running: Running): void {
    const { task } = running;
    running.progress?.end();
    this.#running.delete(task.taskLeaseId);
    const runs = (this.#runningTasks.get(task.taskId) ?? 1) - 1;
    if (runs > 0) this.#runningTasks.set(task.taskId, runs);
    else this.#runningTasks.delete(task.taskId);
    if (running.slot) {
      const key = this.#stepKey(task);
      const calls = (this.#stepCalls.get(key) ?? 1) - 1;
      if (calls > 0) this.#stepCalls.set(key, calls);
      else this.#stepCalls.delete(key);
    }
    this.#free(running);
    this.#startSoon();
  }

  /** The run's task logger (made on first use: a line the level drops never makes it). */
  #taskLog(running: Running): Logger {
    return runLog(running, this.#log);
  }

  /**
   * Runs the processor and hands its outcome to #record, which ends the run once the
   * outcome is recorded; a run given up before (released at shutdown, its lease lost, a
   * transient error) ends here.
   */
  async #process(running: Running): Promise<void> {
    const { task } = running;
    let recording = false;
    try {
      const processor = this.#options.registry.get(task.taskType);
      running.startedAt = Date.now();
      // Checked first, so that a line the level drops is not even built (two per task).
      if (this.#log.isLevelEnabled('info'))
        this.#taskLog(running).info({ event: 'task_started', lease_count: task.leaseCount }, 'task started');
      let outcome: TaskOutcome;
      try {
        outcome = processor
          ? await this.#timeouts.bound(
              task.taskType,
              processor.process(new Context(running, this.pool, this.#log)),
              (e) => {
                running.timedOut = true;
                abortRun(running, e);
              },
            )
          : { outcome: 'failed', error: `no processor for task type ${task.taskType}` };
      } catch (error) {
        const durationMs = Date.now() - running.startedAt;
        const log = this.#taskLog(running);
        if (running.released) {
          log.info({ event: 'task_released', duration_ms: durationMs }, 'released at shutdown; runs again elsewhere');
          return;
        }
        if (error instanceof TaskTimeoutError && running.timedOut) {
          recording = true;
          return this.#recordTimeout(running, error);
        }
        const kind = classifyError(error);
        if (kind === 'lease_lost' || running.cancelled) {
          await this.#lostRun(running, durationMs);
          return;
        }
        if (kind === 'transient') {
          if (this.#cutShortByCrash(error)) {
            log.warn(
              { event: 'crash_elsewhere', duration_ms: durationMs, err: errorMessage(error) },
              'PostgreSQL crashed (another process); the lease is given back once it answers',
            );
            await this.#releaseWhenBack(running);
            return;
          }
          log.warn(
            { event: 'task_interrupted', duration_ms: durationMs, err: errorMessage(error) },
            'transient error; task will run again',
          );
          await this.#interrupt(running, errorMessage(error));
          return;
        }
        log.error({ event: 'task_crashed', duration_ms: durationMs, err: errorMessage(error) }, 'processor threw');
        outcome = { outcome: 'failed', error: `worker error: ${errorMessage(error)}` };
      }
      // A step keeps its slot while it runs in the database. Otherwise the slot is free
      // once the processor is done, and the completer records the outcome beside the
      // next tasks.
      if (!outcome.step) this.#free(running);
      recording = true;
      // Returned, not awaited: this frame is let go while the completion is under way.
      return this.#record(running, outcome);
    } finally {
      if (!recording) this.#ended(running);
    }
  }

  /**
   * The completion as a `queue.complete` child of the task's span; effects (success and
   * error handlers) run by the completer in its own batch stay children of the task span.
   * Without tracing, the completion alone.
   */
  #completeTraced(running: Running, outcome: TaskOutcome) {
    const { task, startedAt } = running;
    if (!tracingEnabled()) return this.#completer.complete(task, outcome, startedAt);
    const handler = outcome.handler;
    if (handler)
      // The handler and the completion are one statement (queues.settle_with_handler): a
      // `queue.handler` span for it, then the completion's, as for a step.
      return traceStep('queue.handler', { 'queue.handler.name': handler.functionName }, () =>
        this.#completer.complete(task, outcome, startedAt),
      ).then((answer) =>
        traceStep('queue.complete', { 'queue.task.outcome': answer.report.outcome }, () => Promise.resolve(answer)),
      );
    const bound = outcome.effects ? { ...outcome, effects: bindToTask(outcome.effects) } : outcome;
    return traceStep('queue.complete', { 'queue.task.outcome': outcome.outcome }, () =>
      this.#completer.complete(task, bound, startedAt),
    );
  }

  /** Records the outcome (the completer, or the step's call), then ends the run. */
  async #record(running: Running, outcome: TaskOutcome): Promise<void> {
    const { task, startedAt } = running;
    try {
      const step = outcome.step;
      const { result, report } = step
        ? await traceStep('queue.handler', { 'queue.handler.name': step.functionName }, () =>
            this.#completer.complete(task, outcome, startedAt, running.slot),
          ).then((answer) =>
            // The step's completion commits in the same call (queues.run_steps).
            traceStep('queue.complete', { 'queue.task.outcome': answer.report.outcome }, () => Promise.resolve(answer)),
          )
        : await this.#completeTraced(running, outcome);
      const durationMs = Date.now() - startedAt;
      if (result === 'lease_lost') {
        if (running.released) {
          this.#taskLog(running).info(
            { event: 'task_released', duration_ms: durationMs },
            'released at shutdown; runs again elsewhere',
          );
        } else {
          await this.#lostRun(running, durationMs);
        }
        return;
      }
      if (result === 'unknown_task') {
        this.#taskLog(running).error(
          { event: 'completion_failed', duration_ms: durationMs },
          `task ${task.taskId} does not exist`,
        );
        return;
      }
      // A validation failure is a business outcome, not an operator's alarm.
      const level = report.outcome === 'succeeded' || report.outcome === 'validation_failed' ? 'info' : 'warn';
      if (this.#log.isLevelEnabled(level))
        this.#taskLog(running)[level](
          {
            event: 'task_completed',
            outcome: report.outcome,
            duration_ms: durationMs,
            error: report.error,
            note: report.note,
          },
          `task ${report.outcome}`,
        );
      this.emit('completed', task, report, durationMs);
    } catch (error) {
      const durationMs = Date.now() - startedAt;
      const log = this.#taskLog(running);
      if (running.released) {
        log.info({ event: 'task_released', duration_ms: durationMs }, 'released at shutdown; runs again elsewhere');
      } else if (classifyError(error) === 'transient' && this.#cutShortByCrash(error)) {
        log.warn(
          { event: 'crash_elsewhere', duration_ms: durationMs, err: errorMessage(error) },
          'PostgreSQL crashed (another process); the lease is given back once it answers',
        );
        await this.#releaseWhenBack(running);
      } else if (classifyError(error) === 'transient' && outcome.step && isSilentConnectionLoss(error)) {
        // Its backend died without a word: perhaps of this very call. Like a worker that
        // died, the lease is left to expire and counts towards MAX_LEASES; the steps of
        // the call run again, each a suspect in a call of its own.
        log.warn(
          { event: 'step_connection_died', duration_ms: durationMs, err: errorMessage(error) },
          "the step call's connection died without a word (it may have crashed PostgreSQL); the lease will expire",
        );
      } else if (classifyError(error) === 'transient') {
        log.warn(
          { event: 'task_interrupted', duration_ms: durationMs, err: errorMessage(error) },
          'transient error; task will run again',
        );
        await this.#interrupt(running, errorMessage(error));
      } else if (outcome.step) {
        // The step's call failed as a whole (a statement timeout): record the failure.
        try {
          const { report } = await this.#completer.complete(
            task,
            { outcome: 'failed', error: `${outcome.step.functionName} raised: ${errorMessage(error)}` },
            startedAt,
          );
          this.emit('completed', task, report, durationMs);
        } catch (second) {
          log.error(
            { event: 'completion_failed', err: errorMessage(second) },
            'could not complete; the lease will expire',
          );
        }
      } else {
        log.error(
          { event: 'completion_failed', err: errorMessage(error) },
          'could not complete; the lease will expire',
        );
      }
    } finally {
      this.#ended(running);
    }
  }

  /**
   * A run whose lease was lost (taken over, or the task cancelled): nothing recorded. A
   * completion refused before a heartbeat told of a cancel asks why (cancellation.ts).
   */
  async #lostRun(running: Running, durationMs: number): Promise<void> {
    if (!running.cancelled) {
      const reason = (await lostLeaseReasons(this.pool, [running.task], this.#log)).get(running.task);
      if (reason instanceof TaskCancelledError) running.cancelled = reason;
    }
    if (running.cancelled) {
      this.#taskLog(running).info(
        { event: 'task_cancelled', duration_ms: durationMs, reason: running.cancelled.reason },
        'task cancelled while running; nothing recorded',
      );
      this.emit('cancelled', running.task, running.cancelled.reason);
      return;
    }
    this.#taskLog(running).warn(
      { event: 'lease_lost', duration_ms: durationMs },
      'lease lost to another worker; nothing recorded',
    );
    this.emit('lease_lost', running.task);
  }

  /**
   * A run whose timeout passed (timeouts.ts): its failure is recorded now, fenced by its
   * lease; the run ends (and its slot is given back) only once the processor returns.
   */
  async #recordTimeout(running: Running, error: TaskTimeoutError): Promise<void> {
    const { task, startedAt } = running;
    try {
      this.#taskLog(running).warn({ event: 'task_timed_out', timeout_ms: error.timeoutMs }, error.message);
      this.emit('timed_out', task, error.timeoutMs);
      const { result, report } = await this.#completeTraced(running, { outcome: 'failed', error: error.message });
      if (result === 'lease_lost') await this.#lostRun(running, Date.now() - startedAt);
      else if (result !== 'unknown_task') this.emit('completed', task, report, Date.now() - startedAt);
    } catch (second) {
      this.#taskLog(running).error(
        { event: 'completion_failed', err: errorMessage(second) },
        'could not record the timeout; the lease will expire',
      );
    } finally {
      await error.late.catch(() => {});
      if (this.#log.isLevelEnabled('info'))
        this.#taskLog(running).info(
          { event: 'timed_out_run_returned', duration_ms: Date.now() - startedAt },
          'the timed-out run returned; its slot is free',
        );
      this.#ended(running);
    }
  }

  /**
   * Whether a transient `error` of a run comes from a crash of PostgreSQL that the run did
   * not cause (crash-notice.ts): its connection got the notice of another process's crash,
   * or its call never reached the server.
   */
  #cutShortByCrash(error: unknown): boolean {
    return isCrashOfAnotherProcess(error) || wasNotRun(error);
  }

  /**
   * Gives the lease back once the database answers again (a crash of PostgreSQL: the
   * server is recovering). A release does not count: the task runs again at once, and
   * neither this lease nor an interruption counts towards abandonment. Tried every
   * RELEASE_RETRY_MS for up to CRASH_RECOVERY_MS (once when stopping); after that, the
   * lease expires.
   */
  async #releaseWhenBack(running: Running): Promise<void> {
    const { task } = running;
    const deadline = Date.now() + CRASH_RECOVERY_MS;
    for (;;) {
      try {
        await releaseLeases(this.pool, [{ taskId: task.taskId, taskLeaseId: task.taskLeaseId }]);
        this.emit('released', [task.taskId]);
        // Claimable again at once: look for it now, not at the next poll.
        this.#notified();
        return;
      } catch (error) {
        if (this.#stopping || Date.now() > deadline || !isTransient(error)) {
          this.#taskLog(running).warn(
            { event: 'release_failed', err: errorMessage(error) },
            'could not release; the lease will expire',
          );
          return;
        }
      }
      await new Promise((resolve) => setTimeout(resolve, RELEASE_RETRY_MS));
    }
  }

  /**
   * A run cut short by a transient error: recorded and counted by the queue, which runs the
   * task again after a backoff or abandons it once this keeps happening (MAX_LEASES
   * times). If even that cannot be recorded, the lease expires, which counts too.
   */
  async #interrupt(running: Running, message: string): Promise<void> {
    const { task } = running;
    try {
      const result = await interruptTask(this.pool, {
        taskId: task.taskId,
        taskLeaseId: task.taskLeaseId,
        errorMessage: message,
        maxInterruptions: this.#options.maxLeases,
      });
      this.#taskLog(running)[result === 'abandoned' ? 'error' : 'info'](
        { event: 'task_interruption_recorded', result },
        `interruption recorded: ${result}`,
      );
      // Taken over, or cancelled meanwhile (#lostRun tells which).
      if (result === 'lease_lost') await this.#lostRun(running, Date.now() - running.startedAt);
    } catch (error) {
      this.#taskLog(running).warn(
        { event: 'interrupt_failed', err: errorMessage(error) },
        'could not record the interruption; the lease will expire',
      );
    }
  }

  /** Tells the registry this worker is alive (queues.worker); failures are only logged. */
  async #reportIn(): Promise<void> {
    try {
      await recordWorkerHeartbeat(
        this.pool,
        this.#options.workerId,
        this.#taskTypes,
        this.#options.heartbeatIntervalMs,
      );
    } catch (error) {
      this.#log.warn({ event: 'registry_failed', err: errorMessage(error) }, 'could not report to the worker registry');
    }
  }

  async #beat(): Promise<void> {
    await this.#reportIn();
    void this.#timeouts.refresh(this.pool, this.#log);
    // A timed-out run's lease is not extended: its failure ended it (or it expires).
    const leases = [...this.#running.values()].filter((r) => !r.lost && !r.released && !r.timedOut);
    const waiting = [...this.#waiting];
    if (leases.length === 0 && waiting.length === 0) return;
    try {
      const all = [...leases.map((r) => r.task), ...waiting].map((t) => ({
        taskId: t.taskId,
        taskLeaseId: t.taskLeaseId,
      }));
      const extended = [];
      // queues.extend_leases takes up to 1000 leases per call.
      for (let i = 0; i < all.length; i += 1000) {
        extended.push(...(await extendLeases(this.pool, all.slice(i, i + 1000), this.#options.leaseSeconds)));
      }
      const kept = new Set(extended.map((e) => e.taskLeaseId));
      // A waiting task whose lease was lost is dropped before it starts.
      const dropped = new Set(waiting.filter((t) => !kept.has(t.taskLeaseId)));
      if (dropped.size > 0) this.#waiting = this.#waiting.filter((t) => !dropped.has(t));
      const lost = leases.filter((r) => !kept.has(r.task.taskLeaseId) && this.#running.get(r.task.taskLeaseId) === r);
      for (const r of lost) r.lost = true;
      // Cancelled (cancellation.ts) or taken over: the run is aborted with the reason.
      const reasons =
        lost.length > 0
          ? await lostLeaseReasons(
              this.pool,
              lost.map((r) => r.task),
              this.#log,
            )
          : null;
      for (const r of lost) {
        const reason = reasons?.get(r.task) ?? new Error('lease lost');
        if (reason instanceof TaskCancelledError) r.cancelled = reason;
        abortRun(r, reason);
        this.#log.warn(
          { event: r.cancelled ? 'task_cancelled' : 'lease_lost', task_id: r.task.taskId, task_type: r.task.taskType },
          r.cancelled
            ? `${r.cancelled.message}; aborting the task`
            : 'heartbeat found the lease taken over; aborting the task',
        );
      }
      this.emit('extended', extended.length);
      await this.#markLongRuns(leases.filter((r) => !r.lost && !r.marked && kept.has(r.task.taskLeaseId)));
    } catch (error) {
      this.#log.warn({ event: 'heartbeat_failed', err: errorMessage(error) }, 'heartbeat failed; will retry');
    }
  }

  /**
   * Marks runs still going at a heartbeat as started (queues.mark_started), once each, with
   * the time they started, so that readers of running work (public.worker_tasks, the
   * task page) see them running. A shorter run's start goes with its completion.
   */
  async #markLongRuns(runs: Running[]): Promise<void> {
    for (let i = 0; i < runs.length; i += 1000) {
      const some = runs.slice(i, i + 1000);
      await markStarted(
        this.pool,
        some.map((r) => ({ taskId: r.task.taskId, taskLeaseId: r.task.taskLeaseId, startedAt: new Date(r.startedAt) })),
      );
      for (const r of some) r.marked = true;
    }
  }
}
