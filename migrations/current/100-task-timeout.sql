set local lock_timeout = '5s';
-- A run timeout per task (docs/flow-control.md, "Run timeouts"): set at enqueue, in place
-- of its type's (sql/queues/timeouts.sql), and returned by the claim. A nullable column
-- without a default: a catalog change, no rewrite. Its range (1 ms to 24 hours) is
-- checked by the enqueue.
-- lock: access exclusive on queues.task: adds the nullable column timeout_ms (catalog only, no rewrite)
alter table queues.task add column if not exists timeout_ms integer;
comment on column queues.task.timeout_ms is
  'The task''s run timeout in ms, in place of its type''s (queues.task_type_timeouts); NULL: the type''s.';

-- The enqueues take a trailing _timeout_ms, and the claims return timeout_ms.
drop function if exists queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean, bigint[], text);
drop function if exists queues.enqueue_internal(text, jsonb, timestamptz, integer, text, integer, bigint[], text);
drop function if exists queues.enqueue_task(text, jsonb, timestamptz, integer, text, integer, boolean, boolean, boolean,
                                            bigint[], text);
drop procedure if exists queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint, text);
drop function if exists queues.claim_tasks(text, integer, text[], integer, integer);
drop function if exists queues.claim_tasks_at(timestamptz, text, integer, text[], integer, integer);
--!include queues/enqueue.sql
--!include queues/claim.sql
-- The task page shows the run timeout in force (the task's own, or its type's).
--!include admin/tasks.sql

--!include queues/privileges.sql
--!include admin/privileges.sql
