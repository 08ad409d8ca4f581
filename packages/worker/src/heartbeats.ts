/**
 * The heartbeats: every HEARTBEAT_INTERVAL_MS the worker reports itself alive
 * (queues.worker), reads the run timeouts again (timeouts.ts), extends the leases of its
 * running and waiting tasks (queues.extend_leases), and marks the runs still going as
 * started (queues.mark_started). A lease missing from the answer was lost: a waiting task
 * is dropped from the local queue before it starts, and a running task's signal is
 * aborted (its completion would be refused), with a TaskCancelledError when the task was
 * cancelled (cancellation.ts). A timed-out run's lease is not extended: its failure ended
 * it (or it expires).
 */
import type pg from 'pg';
import {
  extendLeases,
  markStarted,
  recordWorkerHeartbeat,
  recordWorkerStopped,
  type ClaimedTask,
} from '@org/queue-client';
import { lostLeaseReasons, TaskCancelledError } from './cancellation.js';
import { errorMessage } from './error-class.js';
import type { Logger } from './logger.js';
import { abortRun, type Running, type WorkerEmitter } from './run.js';
import { runKey, type Slots } from './slots.js';
import type { RunTimeouts } from './timeouts.js';

/** The local queue as the heartbeats see it (Producer). */
export interface LocalQueue {
  readonly waiting: readonly ClaimedTask[];
  /** Drops waiting tasks whose leases were lost. */
  drop(tasks: Set<ClaimedTask>): void;
  /** Puts back, at the front, waiting tasks taken out and still held (see Executor). */
  restore(tasks: readonly ClaimedTask[]): void;
  /**
   * Stops claiming until the returned function is called, once the claim under way (if
   * any) has put its tasks in the queue (see Executor's throttle).
   */
  holdClaims(): Promise<() => void>;
}

export interface HeartbeatOptions {
  pool: pg.Pool;
  log: Logger;
  events: WorkerEmitter;
  workerId: string;
  /** The task types of the worker's roles. */
  taskTypes: string[];
  heartbeatIntervalMs: number;
  leaseSeconds: number;
  timeouts: RunTimeouts;
  slots: Slots;
  queue: LocalQueue;
}

export class Heartbeats {
  readonly #o: HeartbeatOptions;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: HeartbeatOptions) {
    this.#o = options;
  }

  start(): void {
    this.#timer = setInterval(() => void this.#beat(), this.#o.heartbeatIntervalMs);
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  /** Tells the registry this worker is alive (queues.worker); failures are only logged. */
  async reportIn(): Promise<void> {
    const { pool, workerId, taskTypes, heartbeatIntervalMs, log } = this.#o;
    try {
      await recordWorkerHeartbeat(pool, workerId, taskTypes, heartbeatIntervalMs);
    } catch (error) {
      log.warn({ event: 'registry_failed', err: errorMessage(error) }, 'could not report to the worker registry');
    }
  }

  /** Tells the registry this worker stopped; failures are only logged. */
  async reportStopped(): Promise<void> {
    try {
      await recordWorkerStopped(this.#o.pool, this.#o.workerId);
    } catch (error) {
      this.#o.log.warn({ event: 'registry_failed', err: errorMessage(error) }, 'could not record the stop');
    }
  }

  async #beat(): Promise<void> {
    const { pool, log, slots, queue } = this.#o;
    await this.reportIn();
    void this.#o.timeouts.refresh(pool, log);
    // A timed-out run's lease is not extended: its failure ended it (or it expires).
    const leases = [...slots.runs.values()].filter((r) => !r.lost && !r.released && !r.timedOut);
    const waiting = [...queue.waiting];
    if (leases.length === 0 && waiting.length === 0) return;
    try {
      const all = [...leases.map((r) => r.task), ...waiting].map((t) => ({
        taskId: t.taskId,
        taskLeaseId: t.taskLeaseId,
      }));
      const extended = [];
      // queues.extend_leases takes up to 1000 leases per call.
      for (let i = 0; i < all.length; i += 1000) {
        extended.push(...(await extendLeases(pool, all.slice(i, i + 1000), this.#o.leaseSeconds)));
      }
      // By task and lease: the tasks of one claim share its lease id.
      const kept = new Set(extended.map((e) => runKey(e)));
      // A waiting task whose lease was lost is dropped before it starts.
      queue.drop(new Set(waiting.filter((t) => !kept.has(runKey(t)))));
      const lost = leases.filter((r) => !kept.has(runKey(r.task)) && slots.runs.has(r));
      for (const r of lost) r.lost = true;
      // Cancelled (cancellation.ts) or taken over: the run is aborted with the reason.
      const reasons =
        lost.length > 0
          ? await lostLeaseReasons(
              pool,
              lost.map((r) => r.task),
              log,
            )
          : null;
      for (const r of lost) {
        const reason = reasons?.get(r.task) ?? new Error('lease lost');
        if (reason instanceof TaskCancelledError) r.cancelled = reason;
        abortRun(r, reason);
        log.warn(
          { event: r.cancelled ? 'task_cancelled' : 'lease_lost', task_id: r.task.taskId, task_type: r.task.taskType },
          r.cancelled
            ? `${r.cancelled.message}; aborting the task`
            : 'heartbeat found the lease taken over; aborting the task',
        );
      }
      this.#o.events.emit('extended', extended.length);
      await this.#markLongRuns(leases.filter((r) => !r.lost && !r.marked && kept.has(runKey(r.task))));
    } catch (error) {
      log.warn({ event: 'heartbeat_failed', err: errorMessage(error) }, 'heartbeat failed; will retry');
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
        this.#o.pool,
        some.map((r) => ({ taskId: r.task.taskId, taskLeaseId: r.task.taskLeaseId, startedAt: new Date(r.startedAt) })),
      );
      for (const r of some) r.marked = true;
    }
  }
}
