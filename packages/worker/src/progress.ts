/**
 * Progress reports (sql/queues/progress.sql): a processor calls `ctx.progress(done, total,
 * note)` as often as it likes; the worker records at most one report per task per
 * PROGRESS_INTERVAL_MS, the first at once and the latest of an interval at its end, on the
 * worker's pool, fenced by the run's lease. A report checks its values at once (a bad one
 * throws a RangeError in the processor) and never fails the run: a report refused or lost
 * (the lease lost, the database away) is logged at debug level. Once the run is over, a
 * report still waiting is dropped.
 */
import type pg from 'pg';
import { recordProgress, type ClaimedTask, type ProgressReport } from '@org/queue-client';
import { errorMessage } from './error-class.js';
import type { Logger } from './logger.js';

/** At most one report per task per this many ms reaches the database. */
export const PROGRESS_INTERVAL_MS = 1000;

/** Checks a report's values; throws a RangeError naming the bad one. */
export function checkProgress(report: ProgressReport): ProgressReport {
  const { done, total, note } = report;
  if (!Number.isSafeInteger(done) || done < 0)
    throw new RangeError(`progress done must be a whole number >= 0, got ${String(done)}`);
  if (total !== undefined && (!Number.isSafeInteger(total) || total < done))
    throw new RangeError(`progress total must be a whole number >= done (${done}), got ${String(total)}`);
  if (note !== undefined && (typeof note !== 'string' || note.length > 500))
    throw new RangeError('progress note must be a string of at most 500 characters');
  return report;
}

/** One run's reporter: made on the first report. */
export class ProgressReporter {
  readonly #pool: pg.Pool;
  readonly #task: ClaimedTask;
  readonly #log: () => Logger;
  #lastAt = -Infinity;
  #waiting: ProgressReport | undefined;
  #timer: NodeJS.Timeout | undefined;
  #over = false;

  constructor(pool: pg.Pool, task: ClaimedTask, log: () => Logger) {
    this.#pool = pool;
    this.#task = task;
    this.#log = log;
  }

  report(report: ProgressReport): void {
    checkProgress(report);
    if (this.#over) return;
    const wait = this.#lastAt + PROGRESS_INTERVAL_MS - performance.now();
    if (wait <= 0 && this.#timer === undefined) {
      this.#write(report);
      return;
    }
    this.#waiting = report;
    this.#timer ??= setTimeout(
      () => {
        this.#timer = undefined;
        const next = this.#waiting;
        this.#waiting = undefined;
        if (next && !this.#over) this.#write(next);
      },
      Math.max(wait, 0),
    );
  }

  /** The run is over: a report still waiting is dropped. */
  end(): void {
    this.#over = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#waiting = undefined;
  }

  #write(report: ProgressReport): void {
    this.#lastAt = performance.now();
    recordProgress(this.#pool, this.#task.taskId, this.#task.taskLeaseId, report).catch((error: unknown) =>
      this.#log().debug({ event: 'progress_not_recorded', err: errorMessage(error) }, 'progress not recorded'),
    );
  }
}
