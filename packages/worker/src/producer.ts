/**
 * The producer: the claim loop and the local queue. It claims (only the task types of the
 * worker's roles, up to MAX_CLAIM per call) into a local queue of about LOCAL_QUEUE_MS of
 * work, up to `prefetch` tasks (default DEFAULT_PREFETCH), refilled when it is half empty;
 * starts waiting tasks as slots free (slots.ts), handing each run to the executor; then
 * waits for a notification (listener.ts), a freed slot or the poll interval. Nothing is
 * written when a task starts: its start time goes with its completion (heartbeats.ts).
 *
 * Queued tasks hold leases (heartbeated like running ones); if this worker dies they come
 * back when those expire, as suspects, one per claim, and their expiry is not counted
 * towards abandonment (see queues.claim_tasks_at).
 */
import type pg from 'pg';
import { claimTasks, nextClaimInMs, releaseLeases, type ClaimedTask, type ClaimSuspects } from '@org/queue-client';
import { errorMessage } from './error-class.js';
import type { Logger } from './logger.js';
import type { Running, WorkerEmitter } from './run.js';
import { Slots } from './slots.js';
import type { ProcessorRegistry } from './processor.js';
import { traceClaim } from './tracing.js';

/** The local queue's size when none is configured (graphile-worker's default too). */
export const DEFAULT_PREFETCH = 500;
/** How long after a scheduled task is due a worker that waited for it claims again. */
const DUE_MARGIN_MS = 5;
/** Added to the stretch before a next-due question in which a task may have fallen due unseen. */
const MISSED_MARGIN_MS = 10;
/** Most tasks per claim (queues.claim_tasks accepts up to 1000). */
const MAX_CLAIM = 500;
/**
 * The local queue holds about this much work (judged from how long tasks kept their slots
 * lately), up to `prefetch`: hundreds of quick tasks, only a few slow ones, so a worker
 * that dies strands little work and a backlog is shared between workers.
 */
export const LOCAL_QUEUE_MS = 250;

/** A task running or about to start, and when it was given its slot (ms since the epoch). */
export interface RunningTask {
  taskId: string;
  startedAtMs: number;
}

export interface ProducerOptions {
  pool: pg.Pool;
  log: Logger;
  registry: ProcessorRegistry;
  events: WorkerEmitter;
  workerId: string;
  /** The task types of the worker's roles. */
  taskTypes: string[];
  concurrency: number;
  prefetch: number;
  pollIntervalMs: number;
  leaseSeconds: number;
  maxLeases: number;
  /**
   * Which suspects the claims take (queues.claim_tasks): 'any'; 'no_repeat' beside a
   * pool's quarantine; 'repeat' in the quarantine, which looks again at its poll or a
   * notification only (the next scheduled task is not one it may take).
   */
  suspects: ClaimSuspects;
  /**
   * Told, before tasks start, every task running or about to start (a process pool's
   * member tells its supervisor, which blames only those if the process dies); the tasks
   * start once it resolves (or fails).
   */
  beforeStarts?: (tasks: RunningTask[]) => Promise<void>;
  /** How many of `waiting` step tasks one of `slots` slots takes (Completer.stepBatchSize). */
  stepBatchSize(waiting: number, slots: number): number;
  /** Runs an admitted task (Executor.launch). */
  launch(running: Running): void;
}

export class Producer {
  readonly slots: Slots;
  readonly #o: ProducerOptions;
  /** Claimed, not started yet (the local queue). */
  #waiting: ClaimedTask[] = [];
  /** A #startWaiting is due at the end of the code running now (#startSoon). */
  #startScheduled = false;
  #stopping = false;
  #loop: Promise<void> | undefined;
  #loopEnded = false;
  /** When the claim loop last began a turn (performance.now() ms). */
  #loopTurnAt = 0;
  #woken = false;
  #wake: (() => void) | undefined;
  #claimFailures = 0;
  /**
   * The last claim came back short: no more work until a notification, the poll, or the
   * next scheduled task's time (#lookAgainAt).
   */
  #drained = false;
  /** Claims are held (holdClaims) while this is above 0. */
  #holds = 0;
  /** The claim under way, if any. */
  #claiming: Promise<unknown> | undefined;
  /** Notifications heard so far: one heard while a claim runs means claim again. */
  #notices = 0;
  /** When a drained worker claims again (performance.now() ms): its poll, or sooner. */
  #lookAgainAt = 0;
  /**
   * The last claim brought a task back whose earlier lease ended without completion (a
   * suspect of a dead worker, perhaps): the queue hands out one suspect per claim, so the
   * loop claims again as soon as there is room rather than when the local queue is half
   * empty.
   */
  #recovering = false;

  constructor(options: ProducerOptions) {
    this.#o = options;
    this.slots = new Slots(options.concurrency, options.registry, {
      freed: () => {
        this.#startSoon();
        this.#signal(); // a slot is free
      },
      ended: (task) => {
        this.#startSoon();
        // A worker holds one named repeat suspect at a time (queues.claim_tasks_at): once
        // a task leased before has ended, the next claim may take another.
        if (task.leaseCount > 1 && this.#drained) {
          this.#drained = false;
          this.#signal();
        }
      },
    });
  }

  /** The local queue: claimed tasks waiting to start. */
  get waiting(): readonly ClaimedTask[] {
    return this.#waiting;
  }

  get stopping(): boolean {
    return this.#stopping;
  }

  get loopStarted(): boolean {
    return this.#loop !== undefined;
  }

  get loopRunning(): boolean {
    return this.#loop !== undefined && !this.#loopEnded;
  }

  /** Milliseconds since the claim loop last began a turn; null before it started. */
  msSinceLoopTurn(): number | null {
    return this.#loop === undefined ? null : performance.now() - this.#loopTurnAt;
  }

  /** Claims failed in a row (0 once one succeeds). */
  get claimFailures(): number {
    return this.#claimFailures;
  }

  start(): void {
    this.#loopTurnAt = performance.now();
    this.#loop = this.#run().finally(() => {
      this.#loopEnded = true;
    });
  }

  /** Stops claiming, waits for the loop to end, and gives the local queue's leases back. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#signal();
    await this.#loop;
    // Tasks claimed but not started go back at once.
    const queued = this.#waiting.splice(0);
    if (queued.length > 0) await this.#release(queued);
  }

  /** Drops waiting tasks whose leases a heartbeat found lost: they never start. */
  drop(tasks: Set<ClaimedTask>): void {
    if (tasks.size > 0) this.#waiting = this.#waiting.filter((t) => !tasks.has(t));
  }

  /**
   * Stops claiming, and resolves once the claim under way (if any) has put its tasks in the
   * local queue, with the function that resumes claiming. A throttle being recorded holds
   * claims (executor.ts): a claim that read the queue before the throttle committed could
   * take tasks of the throttled type and start them before the throttle ends.
   */
  async holdClaims(): Promise<() => void> {
    this.#holds++;
    let resumed = false;
    const resume = () => {
      if (resumed) return;
      resumed = true;
      this.#holds--;
      if (this.#holds === 0) this.notified();
    };
    try {
      await this.#claiming;
    } catch {
      // a failed claim put nothing in the queue
    }
    return resume;
  }

  /**
   * Puts back at the front of the local queue tasks taken out of it and still held (a
   * throttle did not cover them), and starts them as slots free; once the worker is
   * stopping (its queue given back already), gives their leases back instead.
   */
  restore(tasks: readonly ClaimedTask[]): void {
    if (tasks.length === 0) return;
    if (this.#stopping) {
      void this.#release([...tasks]);
      return;
    }
    this.#waiting.unshift(...tasks);
    this.notified();
  }

  /** New work was announced (NOTIFY, the listener's poll, a lease given back): worth a claim. */
  notified(): void {
    this.#notices++;
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
    const { concurrency, pollIntervalMs } = this.#o;
    const slots = this.slots;
    // Up to `prefetch` claimed tasks wait beside the running ones, so a freed slot starts
    // the next at once and one claim serves hundreds; refilled when half empty.
    while (!this.#stopping) {
      this.#loopTurnAt = performance.now();
      const prefetch = this.#localQueueSize();
      const capacity = concurrency + prefetch;
      const lowWater = Math.floor(prefetch / 2);
      this.#woken = false;
      const room = capacity - slots.busy - this.#waiting.length;
      // A freed slot is no reason to claim again right after a claim found the queue
      // empty: that waits for a notification or the poll interval.
      if (room > 0 && (this.#waiting.length <= lowWater || this.#recovering) && !this.#drained && this.#holds === 0) {
        // Tasks that finish together free their slots in the same turn of the event
        // loop: let them, and claim for all of them in one call.
        if (slots.busy > 0) await new Promise((resolve) => setImmediate(resolve));
        // Claims held meanwhile (a throttle being recorded): wait to be woken.
        if (this.#holds > 0) continue;
        const limit = Math.min(MAX_CLAIM, capacity - slots.busy - this.#waiting.length);
        const claimSentAt = performance.now();
        const notices = this.#notices;
        // holdClaims waits for this claim until its tasks are in the local queue.
        let queued!: () => void;
        this.#claiming = new Promise<void>((resolve) => (queued = resolve));
        let claimed: ClaimedTask[];
        try {
          claimed = limit > 0 ? await this.#claim(limit) : [];
          if (this.#stopping) {
            if (claimed.length > 0) await this.#release(claimed);
            break;
          }
          this.#recovering = claimed.some((t) => t.leaseCount > 1);
          this.#waiting.push(...claimed);
          this.#startWaiting();
        } finally {
          this.#claiming = undefined;
          queued();
        }
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
        if (this.#drained)
          this.#lookAgainAt = performance.now() + (await this.#nextClaimIn(pollIntervalMs, claimSentAt));
        // A notification heard while the claim or that question ran may announce a task
        // neither could see (committed after the claim read the table, due before its
        // clock): claim again.
        if (this.#notices !== notices) this.#drained = false;
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
    const { concurrency, prefetch } = this.#o;
    const slotMs = this.slots.slotMs;
    if (prefetch === 0) return 0;
    if (slotMs === undefined) return Math.min(prefetch, concurrency);
    const paced = Math.round((concurrency * LOCAL_QUEUE_MS) / Math.max(slotMs, 0.01));
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
    const slots = this.slots;
    const starting: Running[] = [];
    // How many steps one slot takes (see StepRunner.batchSize).
    const stepBatch = this.#o.stepBatchSize(this.#waiting.length, slots.concurrency);
    while (slots.busy < slots.concurrency && this.#waiting.length > 0) {
      // A task this worker still runs under an earlier lease waits (heartbeated) until
      // that run ends; so does a step whose key is in a call under way.
      const next = slots.unconstrained ? 0 : this.#waiting.findIndex((t) => slots.startable(t));
      if (next < 0) break;
      if (slots.runsSteps(this.#waiting[next]!)) starting.push(...slots.admitSteps(this.#pickSteps(next, stepBatch)));
      else starting.push(slots.admit(next === 0 ? this.#waiting.shift()! : this.#waiting.splice(next, 1)[0]!));
    }
    if (starting.length === 0) return;
    const before = this.#o.beforeStarts;
    if (!before) {
      for (const r of starting) this.#o.launch(r);
      return;
    }
    const tasks = [...slots.runs].map((r) => ({ taskId: r.task.taskId, startedAtMs: r.startedAt }));
    const launch = () => {
      for (const r of starting) this.#o.launch(r);
    };
    before(tasks).then(launch, (error: unknown) => {
      this.#o.log.warn({ event: 'before_starts_failed', err: errorMessage(error) }, 'could not tell the starts');
      launch();
    });
  }

  /**
   * Takes out of the local queue the step tasks for one slot: the waiting step tasks from
   * `from` on (up to `size`, skipping tasks this worker still runs under an earlier lease
   * and steps whose key is in a call under way), which run in one queues.run_steps call.
   *
   * A step leased before (its earlier lease ended without completion: a suspect, perhaps
   * the step that crashed PostgreSQL and every call with it) runs in a call of its own, so
   * a step that crashes the server again takes no other step with it, and the steps that
   * shared its first call are not counted as suspects again and again until abandoned.
   */
  #pickSteps(from: number, size: number): ClaimedTask[] {
    const slots = this.slots;
    const picked: ClaimedTask[] = [];
    const taken = new Set<string>();
    const rest = this.#waiting.slice(0, from);
    for (const task of this.#waiting.slice(from)) {
      const alone = picked.length > 0 && (task.leaseCount > 1 || picked[0]!.leaseCount > 1);
      if (picked.length < size && !alone && slots.runsSteps(task) && slots.startable(task) && !taken.has(task.taskId)) {
        picked.push(task);
        taken.add(task.taskId);
      } else {
        rest.push(task);
      }
    }
    this.#waiting = rest;
    return picked;
  }

  async #claim(limit: number): Promise<ClaimedTask[]> {
    const { pool, log, workerId } = this.#o;
    try {
      const tasks = await traceClaim(
        workerId,
        () =>
          claimTasks(pool, {
            workerId,
            limit,
            taskTypes: this.#o.taskTypes,
            leaseSeconds: this.#o.leaseSeconds,
            maxLeases: this.#o.maxLeases,
            suspects: this.#o.suspects,
          }),
        pool,
      );
      if (this.#claimFailures > 0) log.info({ event: 'claim_recovered' }, 'claiming works again');
      this.#claimFailures = 0;
      if (tasks.length > 0) this.#o.events.emit('claimed', tasks);
      return tasks;
    } catch (error) {
      this.#claimFailures++;
      log.warn({ event: 'claim_failed', attempt: this.#claimFailures, err: errorMessage(error) }, 'claim failed');
      return [];
    }
  }

  /**
   * Milliseconds until the next task of this worker's types is scheduled (the database's
   * answer, queues.next_claim_in_ms) plus DUE_MARGIN_MS, at most `pollIntervalMs`; `pollIntervalMs` when
   * none is, or when the question fails (the poll covers it). A task that fell due after
   * the claim (sent at `claimSentAt`) took its clock and before the question takes its
   * own answers 0: the claim could not take it, and it is not ahead of the question. That
   * stretch is at most the time since the claim was sent plus the question's way to the
   * database: twice the first, and a few ms, cover both (a wider one only lets a task
   * the claim passed over, its resource key held, answer 0 once more).
   */
  async #nextClaimIn(pollIntervalMs: number, claimSentAt: number): Promise<number> {
    if (this.#o.suspects === 'repeat') return pollIntervalMs;
    try {
      const missedMs = Math.ceil(2 * (performance.now() - claimSentAt)) + MISSED_MARGIN_MS;
      const ms = await nextClaimInMs(this.#o.pool, this.#o.taskTypes, missedMs);
      // A few ms late, not early: a timer may fire up to 1 ms before its time, and a
      // claim that comes before the task is due misses it until the poll.
      return ms === null ? pollIntervalMs : Math.min(ms + DUE_MARGIN_MS, pollIntervalMs);
    } catch (error) {
      this.#o.log.debug(
        { event: 'next_claim_failed', err: errorMessage(error) },
        'could not ask for the next due task',
      );
      return pollIntervalMs;
    }
  }

  async #release(tasks: ClaimedTask[]): Promise<void> {
    const leases = tasks.map((t) => ({ taskId: t.taskId, taskLeaseId: t.taskLeaseId }));
    try {
      await releaseLeases(this.#o.pool, leases);
    } catch (error) {
      this.#o.log.warn({ event: 'release_failed', err: errorMessage(error) }, 'could not release; leases will expire');
    }
  }
}
