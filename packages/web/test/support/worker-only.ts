// Fixture tasks of the worker-only types (queues.internal_task_type), which the REST API
// refuses (403): enqueued as the owner's SQL does (queues.enqueue_internal).
import type { TestDatabase } from '@org/testing';

export const WORKER_ONLY = new Set(['db_function', 'email', 'sms', 'file_delete']);

/** Enqueues a task given in the REST API's body shape as the owner; its id. */
export async function enqueueAsOwner(db: TestDatabase, body: Record<string, unknown>): Promise<number> {
  const { rows } = await db.query(
    `select queues.enqueue_internal($1, $2::jsonb, $3::timestamptz, $4::integer, $5, $6::integer)::text as id`,
    [
      body.task_type,
      JSON.stringify(body.payload ?? {}),
      body.scheduled_at ?? null,
      body.priority ?? null,
      body.resource_key ?? null,
      body.max_attempts ?? null,
    ],
  );
  return Number(rows[0].id);
}
