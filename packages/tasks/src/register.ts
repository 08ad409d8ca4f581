import { registerTaskTypes, type Queryable } from '@org/queue-client';
import type { AnyTaskDefinition } from './index.js';

/**
 * Registers the definitions' task types (queues.register_task_types): creates the missing
 * ones, updates descriptions, all or nothing. `db` must be connected as the owner database
 * user: the worker and app users may not create task types.
 */
export function registerTasks(
  db: Queryable,
  definitions: readonly AnyTaskDefinition[],
): Promise<{ taskType: string; created: boolean }[]> {
  return registerTaskTypes(
    db,
    definitions.map((d) => ({ taskType: d.name, description: d.description ?? '' })),
  );
}
