/** Task types (queues.task_type): registering the ones an app's task definitions declare. */
import { taskTypeRegister } from './queries/task_type.queries.js';
import type { Queryable } from './connection.js';
import { mapErrors } from './errors.js';

export interface TaskTypeRegistration {
  taskType: string;
  /** Shown on the dashboard and in queues.task_type; an empty one keeps the type's own. */
  description?: string;
}

/**
 * Registers task types (queues.register_task_types): creates the missing ones and updates
 * descriptions, all or nothing. Only the owner database user may call it. Returns each
 * type and whether this call created it.
 */
export async function registerTaskTypes(
  db: Queryable,
  taskTypes: TaskTypeRegistration[],
): Promise<{ taskType: string; created: boolean }[]> {
  const json = taskTypes.map((t) => ({ task_type: t.taskType, description: t.description ?? '' }));
  return mapErrors(taskTypeRegister.run({ taskTypes: JSON.stringify(json) }, db));
}
