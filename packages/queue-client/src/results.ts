/**
 * Task results: what a task's run produced (the seed's `result jsonb`), kept as an
 * append-only fact per lease (queues.task_result). A worker records one in the
 * transaction that completes the task; the lease fences it like the completion.
 */
import type { Queryable } from './connection.js';
import { mapErrors } from './errors.js';
import { toJsonText } from './json.js';
import { taskResultList, taskResultRecord } from './queries/result.queries.js';
import type { Id, JsonObject } from './tasks.js';

export interface TaskResult {
  /** The lease of the run that recorded it. */
  taskLeaseId: Id;
  result: JsonObject;
  recordedAt: Date;
}

/**
 * Records `result` for the run holding `taskLeaseId`. Call it in the transaction that
 * completes the task. QueueError 'lease_lost' when the lease is no longer current.
 */
export async function recordTaskResult(
  db: Queryable,
  input: { taskId: Id | number; taskLeaseId: Id | number; result: JsonObject },
): Promise<void> {
  await mapErrors(
    taskResultRecord.run(
      {
        taskId: String(input.taskId),
        taskLeaseId: String(input.taskLeaseId),
        result: toJsonText(input.result, 'result'),
      },
      db,
    ),
  );
}

/** Every result recorded for a task, oldest first (the app and api roles). */
export async function listTaskResults(db: Queryable, taskId: Id | number): Promise<TaskResult[]> {
  const rows = await mapErrors(taskResultList.run({ taskId: String(taskId) }, db));
  return rows.map((r) => ({
    taskLeaseId: String(r.taskLeaseId),
    result: r.result as JsonObject,
    recordedAt: r.recordedAt,
  }));
}
