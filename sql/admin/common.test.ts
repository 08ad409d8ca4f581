// The windows that count completions (admin.throughput_at, admin.task_counts_at,
// admin.queue_depth_at) count a completion round's tasks from one row
// (admin.completion_counts_between): every task counts, in both shapes.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const NOW = '2030-01-01T12:00:00Z';

it('a round of 3 tasks counts 3, and a completion row 1, in throughput, task counts and queue depth', async () => {
  await db.query(`insert into queues.task_type (task_type) values ('counted') on conflict do nothing`);
  // Four tasks enqueued 10 minutes before NOW: three end in one round 5 minutes before,
  // one fails in a row of its own then.
  const { rows } = await db.query<{ task_id: string }>(
    `insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
     select 'counted', '{}', $1::timestamptz - interval '10 minutes', $1::timestamptz - interval '10 minutes'
       from generate_series(1, 4) returning task_id::text`,
    [NOW],
  );
  const ids = rows.map((r) => r.task_id);
  await db.query(
    `insert into queues.completion_round (task_id, completed_at, task_type, task_ids, task_lease_ids, started_us, task_range)
     values ($2, $1::timestamptz - interval '5 minutes', 'counted', $3::bigint[], array[1, 1, 1], array[null, null, null]::bigint[],
             int8range(($3::bigint[])[1], $2, '[]'))`,
    [NOW, ids[2], ids.slice(0, 3)],
  );
  await db.query(
    `insert into queues.task_completed (task_id, completed_at, outcome, task_type)
     values ($2, $1::timestamptz - interval '5 minutes', 'failed', 'counted')`,
    [NOW, ids[3]],
  );
  const throughput = await db.query(
    `select outcome, completed::int from admin.throughput_at($1, 3600, 60) where task_type = 'counted' order by 1`,
    [NOW],
  );
  expect(throughput.rows).toEqual([
    { outcome: 'failed', completed: 1 },
    { outcome: 'succeeded', completed: 3 },
  ]);
  const counts = await db.query(
    `select state, count::int from admin.task_counts_at($1, 3600) where task_type = 'counted' order by 1`,
    [NOW],
  );
  expect(counts.rows).toEqual([
    { state: 'failed', count: 1 },
    { state: 'succeeded', count: 3 },
  ]);
  // Pending 7 minutes before NOW (enqueued, not yet completed): 4; 3 minutes before: none.
  const depth = await db.query(
    `select depth::int from admin.queue_depth_at($1, 600, 60)
      where task_type = 'counted' and bucket_end in ($1::timestamptz - interval '7 minutes', $1::timestamptz - interval '3 minutes')
      order by bucket_end`,
    [NOW],
  );
  expect(depth.rows).toEqual([{ depth: 4 }, { depth: 0 }]);
});
