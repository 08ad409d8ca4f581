/** Progress reports of running tasks (queues.record_progress, sql/queues/progress.sql). */
import { taskRecordProgress } from './queries/progress.queries.js';
import type { Queryable } from './connection.js';
import { mapErrors } from './errors.js';
import type { Id } from './tasks.js';

export interface ProgressReport {
  /** How much is done: a whole number, at least 0. */
  done: number;
  /** Out of how much (at least `done`); unknown when left out. */
  total?: number;
  /** What it is doing, at most 500 characters. */
  note?: string;
}

/**
 * Records a progress report of the run under `taskLeaseId`, fenced by that lease: a lost
 * lease is a QueueError of kind `lease_lost`, bad values `invalid_input`.
 */
export async function recordProgress(
  db: Queryable,
  taskId: Id,
  taskLeaseId: Id,
  report: ProgressReport,
): Promise<void> {
  await mapErrors(
    taskRecordProgress.run(
      { taskId, taskLeaseId, done: report.done, total: report.total ?? null, note: report.note ?? null },
      db,
    ),
  );
}
