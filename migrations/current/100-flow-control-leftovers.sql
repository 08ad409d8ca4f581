set local lock_timeout = '5s';

-- Unique enqueues take depends_on, group_key and timeout_ms; enqueue_and_commit takes
-- depends_on.
drop function if exists queues.enqueue_unique_task(text, jsonb, text, text, interval, timestamptz, integer, text,
                                                   integer, boolean, boolean);
drop function if exists queues.enqueue_unique(text, jsonb, text, text, interval, timestamptz, integer, text, integer);
drop function if exists queues.enqueue_unique_internal(text, jsonb, text, text, interval, timestamptz, integer, text,
                                                       integer);
drop procedure if exists queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint, text,
                                                   integer);
-- The waiting tasks (sql/queues/dependencies.sql): the triggers on a task's end probe
-- this index, empty while no task waits, instead of the partitioned dependency table.
-- task_pending holds only pending tasks: the build is short (SHARE lock, writes wait).
create index if not exists task_pending_waiting_idx on queues.task_pending (task_id)
  where available_at = 'infinity';
--!include queues/dependencies.sql
--!include queues/enqueue.sql
--!include queues/unique.sql
--!include queues/complete.sql
--!include queues/cancel.sql
--!include queues/lease.sql
--!include queues/workers.sql
--!include admin/workers.sql
-- queues.record_throttle gives back the worker's waiting tasks the throttle covers.
drop function if exists queues.record_throttle(text, text, timestamptz, numeric, text, text, bigint, bigint);
drop function if exists queues.record_throttle_at(timestamptz, text, text, timestamptz, numeric, text, text, bigint,
                                                  bigint);
--!include queues/throttle.sql
--!include queues/dead_letter.sql
--!include admin/task_actions.sql
--!include admin/throttles.sql
--!include admin/limits.sql
--!include admin/privileges.sql
