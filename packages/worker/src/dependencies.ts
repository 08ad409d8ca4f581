/**
 * A running task's dependencies (fan-in, sql/queues/dependencies.sql): `ctx.dependencies()`
 * reads, on the worker's pool, the tasks it was enqueued to wait for, each with how it
 * ended and the result it recorded (queues.list_task_dependencies). A task runs only once
 * every dependency succeeded, so each reads 'succeeded'; a task enqueued without
 * dependencies reads an empty list. Read on demand (a round trip per call): nothing is
 * fetched for tasks that do not ask.
 */
import type pg from 'pg';
import { listTaskDependencies, type ClaimedTask, type TaskDependency } from '@org/queue-client';

export type { TaskDependency };

export function readDependencies(pool: pg.Pool, task: ClaimedTask): Promise<TaskDependency[]> {
  return listTaskDependencies(pool, task.taskId);
}
