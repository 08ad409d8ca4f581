/**
 * One run of a task in the worker: its record (Running), from the moment it takes a slot
 * (slots.ts) until its outcome is recorded or the run is given up (executor.ts); the
 * context its processor gets (TaskContext); and the events a worker emits about runs,
 * which metrics.ts and tracing.ts subscribe to through interfaces of their own.
 */
import type pg from 'pg';
import type { ClaimedTask } from '@org/queue-client';
import type { TaskCancelledError } from './cancellation.js';
import type { Logger } from './logger.js';
import type { TaskContext, TaskReport } from './processor.js';
import { ProgressReporter } from './progress.js';
import { readDependencies, type TaskDependency } from './dependencies.js';
import { taskLogger } from './task-logger.js';

/**
 * One slot shared by the steps of one queues.run_steps call: tasks whose processor
 * `runsSteps` start many at a time in a slot, and the slot is free once all are answered.
 */
export interface StepSlot {
  /** Tasks of the call not answered yet. */
  holders: number;
  readonly size: number;
  readonly startedAt: number;
}

export interface Running {
  task: ClaimedTask;
  /** The shared slot of a step started with others (see StepSlot). */
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
  /** Its slot (or its share of a shared one) was given back (Slots.free). */
  freed: boolean;
  /** The task's logger (task-logger.ts), made when first used: see runLog. */
  log?: Logger;
  /** Called when the run ends (Slots.end): a traced run's span ends then. */
  ended?: () => void;
}

/** The task's logger (`task_id`, `task_type`, `task_lease_id` bound), made on first use. */
export function runLog(running: Running, parent: Logger): Logger {
  return (running.log ??= taskLogger(parent, running.task));
}

/**
 * What a processor gets (TaskContext): one small object per task, whose logger and signal
 * are made when first asked for, by getters of the class (no closure per task).
 */
export class Context implements TaskContext {
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
export function abortRun(running: Running, reason: Error): void {
  (running.controller ??= new AbortController()).abort(reason);
}

/** The events of a Worker (metrics.ts and tracing.ts subscribe to them). */
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

/** What the parts of a worker emit its events through (the Worker itself). */
export interface WorkerEmitter {
  emit<E extends keyof WorkerEvents>(event: E, ...args: WorkerEvents[E]): boolean;
}
