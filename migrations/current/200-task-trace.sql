-- Traces from enqueue to completion: the W3C trace context an enqueue was made in is kept
-- per task as the fact queues.task_trace, a history table (partitioned by task id like
-- the others, so retention drops it with its tasks), written only when the caller set one
-- (sql/queues/trace.sql). queues.run_steps takes each step's traceparent, so the tasks a
-- step enqueues (a supervisor's child tasks) continue the step's trace.
-- Locks: the new table and its partitions only (SHARE or SHARE UPDATE EXCLUSIVE on
-- queues.task_trace, ACCESS EXCLUSIVE on its empty default while a set's partition is
-- attached); no hot table.
set local lock_timeout = '5s';

create table if not exists queues.task_trace (
  task_id     bigint not null,
  -- W3C traceparent: version-traceid-parentid-flags (queues.is_valid_traceparent).
  traceparent text not null check (length(traceparent) = 55),
  -- W3C tracestate, as given (queues.is_valid_tracestate).
  tracestate  text check (length(tracestate) <= 512),
  constraint task_trace_pkey primary key (task_id)
) partition by range (task_id);
comment on table queues.task_trace is
  'Append-only: the W3C trace context a task was enqueued in (tasks enqueued with one only). See sql/queues/trace.sql.';
drop trigger if exists forbid_update on queues.task_trace;
create trigger forbid_update before update on queues.task_trace
  for each statement execute function queues.forbid_fact_update();
create table if not exists queues.task_trace_default partition of queues.task_trace default;
drop trigger if exists forbid_update on queues.task_trace_default;
create trigger forbid_update before update on queues.task_trace_default
  for each statement execute function queues.forbid_fact_update();

-- TRUNCATE queues.task empties every history table, task_trace included.
create or replace function queues.truncate_task_facts() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  truncate queues.task_pending, queues.resource_lease, queues.task_lease, queues.task_completed,
           queues.error, queues.task_lease_extension, queues.task_lease_release,
           queues.task_lease_revocation, queues.task_attempt_failed, queues.task_redriven,
           queues.task_lease_started, queues.task_interruption, queues.task_cancelled,
           queues.task_result, queues.task_run_now, queues.task_trace;
  return null;
end;
$$;

-- queues.run_steps gains _traceparents (default null): the old signature goes.
drop function if exists queues.run_steps(bigint[], bigint[], text[], jsonb[]);

--!include queues/partitions.sql

-- A partition of queues.task_trace for every partition set there is (a set half made by
-- maintenance gets its own when maintenance finishes the set).
select queues.attach_history_partition('task_trace', s.lower_bound, s.upper_bound)
  from queues.history_sets() s
 where not s.is_default
 order by s.lower_bound;

--!include queues/trace.sql
--!include queues/enqueue.sql
-- queues/steps.sql (run_steps with _traceparents) is included by 100-hot-path-named-suspects.sql;
-- the grants by 900-privileges.sql.
