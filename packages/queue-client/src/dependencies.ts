/**
 * Task dependencies (fan-in, sql/queues/dependencies.sql): a task enqueued with
 * `dependsOn` waits until every task it names has ended, runs when all succeeded, and is
 * completed 'failed' when one did not. This reads a task's dependencies with how each
 * ended and the result it recorded (queues.task_result), for its processor
 * (`ctx.dependencies()` in @org/worker), apps and the API.
 */
import type { Queryable } from './connection.js';
import { mapErrors } from './errors.js';
import { taskDependencyList } from './queries/dependency.queries.js';
import type { CompletionOutcome, Id, JsonObject } from './tasks.js';

export interface TaskDependency {
  taskId: Id;
  taskType: string;
  /**
   * How it ended; null while it is still pending (never, for a task that runs: it runs
   * only once all of them succeeded).
   */
  outcome: CompletionOutcome | null;
  /** When it ended (null while pending, or for a success recorded without a completion row). */
  completedAt: Date | null;
  /** The newest result it recorded (`recordTaskResult`), null when none. */
  result: JsonObject | null;
}

/** The dependencies of `taskId`, in task id order (none for an unknown task). */
export async function listTaskDependencies(db: Queryable, taskId: Id | number): Promise<TaskDependency[]> {
  const rows = await mapErrors(taskDependencyList.run({ taskId: String(taskId) }, db));
  return rows.map((r) => ({
    taskId: String(r.taskId),
    taskType: r.taskType,
    outcome: r.outcome as CompletionOutcome | null,
    completedAt: r.completedAt,
    result: (r.result as JsonObject | null) ?? null,
  }));
}
