-- Completion rounds (docs/design/hot-path.md, stage 2): the completer's plain successes
-- are written as one append-only fact per completion call and task type,
-- queues.completion_round, naming its tasks (task_ids, sorted), the lease each was
-- completed under and when each started (microseconds since the epoch), instead of one
-- queues.task_completed row per task. Every other end stays a task_completed row. A
-- task's end, in either shape, is read through queues.task_end (a view) and
-- queues.task_end_of(task_id) (an inlinable function: an index probe of each shape).
-- The table is a history table, range-partitioned by the largest task id a round names
-- (its task_id column), on the sets' bounds; retention keeps a set while a round in it
-- names a task of an older set still kept (sql/queues/partitions_maintain.sql).
-- Locks: the new table and its partitions only (SHARE or SHARE UPDATE EXCLUSIVE on
-- queues.completion_round, ACCESS EXCLUSIVE on its empty default while a set's partition
-- is attached); no other hot table.
set local lock_timeout = '5s';

create table if not exists queues.completion_round (
  -- The largest task id the round names (task_ids' last element): the partition key, as
  -- every history table's task_id, so that the round lives in the set of its newest task.
  task_id        bigint not null,
  completed_at   timestamptz not null default now(),
  task_type      text not null,
  -- The tasks that succeeded, ascending, each once.
  task_ids       bigint[] not null,
  -- Parallel to task_ids: the lease the completing caller held (null: it passed none).
  task_lease_ids bigint[] not null,
  -- Parallel to task_ids: when each run started, in microseconds since the epoch (null:
  -- not reported).
  started_us     bigint[] not null,
  -- [first task id, last task id]: what the GiST index finds a task's rounds by.
  task_range     int8range not null,
  constraint completion_round_shape check (
    cardinality(task_ids) between 1 and 1000
    and array_ndims(task_ids) = 1
    and task_id = task_ids[cardinality(task_ids)]
    and task_range = int8range(task_ids[1], task_id, '[]')
    and cardinality(task_lease_ids) = cardinality(task_ids)
    and cardinality(started_us) = cardinality(task_ids))
) partition by range (task_id);
comment on table queues.completion_round is
  'Append-only: a completion round, the plain successes one completion call recorded for one task type (task_ids with their leases and start times). Read a task''s end through queues.task_end / queues.task_end_of. See sql/queues/complete.sql.';
create index if not exists completion_round_task_range_idx on queues.completion_round using gist (task_range);
create index if not exists completion_round_completed_at_idx on queues.completion_round (completed_at);
drop trigger if exists forbid_update on queues.completion_round;
create trigger forbid_update before update on queues.completion_round
  for each statement execute function queues.forbid_fact_update();
create table if not exists queues.completion_round_default partition of queues.completion_round default;
drop trigger if exists forbid_update on queues.completion_round_default;
create trigger forbid_update before update on queues.completion_round_default
  for each statement execute function queues.forbid_fact_update();

-- (queues/partitions.sql, which makes completion_round a history table, and the
-- partitions of completion_round for the sets there are: migration 500.)

--!include queues/task_end.sql
--!include queues/partitions_status.sql
--!include queues/cancel.sql
--!include admin/history.sql
--!include admin/schedules.sql
--!include internal/process_support.sql
