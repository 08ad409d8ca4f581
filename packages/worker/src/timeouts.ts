/**
 * Run timeouts (sql/queues/timeouts.sql): a task type may have one, set in the database
 * and read at start and at every heartbeat. At the deadline the worker aborts the
 * processor's signal with a TaskTimeoutError, records the run as failed with its message
 * (retried while attempts remain), and stops extending the lease; whatever the processor
 * returns later is not recorded (the failure ended the lease, so a completion with it would
 * be refused anyway), and its slot stays taken until it returns: a processor that ignores
 * its signal holds its slot, never a second one. Steps (db_function) are bounded by
 * STATEMENT_TIMEOUT_MS instead. A task may have its own timeout (set at enqueue, returned
 * by the claim), used in place of its type's. A worker with no timeouts set pays one map
 * lookup per task.
 */
import type pg from 'pg';
import { taskTypeTimeouts } from '@org/queue-client';
import { errorMessage } from './error-class.js';
import type { Logger } from './logger.js';

/** The reason a timed-out run's signal is aborted with, and the failure recorded. */
export class TaskTimeoutError extends Error {
  readonly timeoutMs: number;
  /** The processor's run, which goes on until it returns (its slot is taken until then). */
  readonly late: Promise<unknown>;

  constructor(taskType: string, timeoutMs: number, late: Promise<unknown>) {
    super(`${taskType} timed out after ${timeoutMs} ms`);
    this.name = 'TaskTimeoutError';
    this.timeoutMs = timeoutMs;
    this.late = late;
  }
}

export class RunTimeouts {
  #byType = new Map<string, number>();

  /** Reads the timeouts per task type again; on failure keeps the ones it had. */
  async refresh(pool: pg.Pool, log: Logger): Promise<void> {
    try {
      this.#byType = await taskTypeTimeouts(pool);
    } catch (error) {
      log.warn({ event: 'timeouts_read_failed', err: errorMessage(error) }, 'could not read the run timeouts');
    }
  }

  /** The run timeout of a task type, ms; undefined when it has none. */
  of(taskType: string): number | undefined {
    return this.#byType.size === 0 ? undefined : this.#byType.get(taskType);
  }

  /**
   * `run` as it settles, or a TaskTimeoutError once its timeout passes first (after
   * `onTimeout` was called with it, to abort the run): the task's own (`own`, set at
   * enqueue) when it has one, else `taskType`'s.
   */
  bound<T>(
    taskType: string,
    run: Promise<T>,
    onTimeout: (error: TaskTimeoutError) => void,
    own?: number | null,
  ): Promise<T> {
    const timeoutMs = own ?? this.of(taskType);
    if (timeoutMs === undefined) return run;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const error = new TaskTimeoutError(taskType, timeoutMs, run);
        onTimeout(error);
        reject(error);
      }, timeoutMs);
    });
    return Promise.race([run, deadline]).finally(() => clearTimeout(timer));
  }
}
