/** Run timeouts per task type (queues.task_type_timeouts, sql/queues/timeouts.sql). */
import { taskTypeTimeouts as taskTypeTimeoutsQuery } from './queries/timeout.queries.js';
import type { Queryable } from './connection.js';
import { mapErrors } from './errors.js';

/** The run timeout of each task type that has one, in ms. */
export async function taskTypeTimeouts(db: Queryable): Promise<Map<string, number>> {
  const rows = await mapErrors(taskTypeTimeoutsQuery.run(undefined, db));
  return new Map(rows.map((r) => [r.taskType, r.timeoutMs]));
}
