import type { TestDatabase } from './test-database.js';

/**
 * Ends every unfinished task, or those of `taskIds`, as `cancelled` (an unfenced
 * `queues.complete_tasks`, 1,000 tasks a call), so a test starts from an empty queue.
 * Deleting claim-index rows does not do it: a task its claim took out of the claim index
 * (the ready set) has no row, and the rescuer gives a task with neither a row nor an end
 * back to the claim index when its claim lease expires.
 */
export async function endPendingTasks(db: TestDatabase, taskIds?: string[]): Promise<void> {
  const { rows } = await db.query<{ task_id: string }>(
    `select t.task_id::text from queues.task t
      where ($1::bigint[] is null or t.task_id = any ($1::bigint[]))
        and not exists (select 1 from queues.task_end_of(t.task_id) e)
      order by t.task_id`,
    [taskIds ?? null],
  );
  for (let i = 0; i < rows.length; i += 1000) {
    const ids = rows.slice(i, i + 1000).map((r) => r.task_id);
    await db.query(
      `select count(*) from queues.complete_tasks($1::bigint[], null, array_fill('cancelled'::text, array[$2::int]))`,
      [ids, ids.length],
    );
  }
}
