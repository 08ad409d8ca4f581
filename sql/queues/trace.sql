-- Trace context of tasks: the W3C Trace Context (traceparent, tracestate) an enqueue was
-- made in, kept as the fact queues.task_trace (one row per task enqueued with one; a
-- history table, partitioned by task id and dropped with its task by retention:
-- sql/queues/partitions.sql). docs/operations.md, "Traces", has the whole picture.
--
-- How the context reaches an enqueue without an argument of every enqueue function: the
-- transaction-local settings queue.traceparent and queue.tracestate
-- (set_config('queue.traceparent', '00-...', true)). Every enqueue path reads them
-- (queues.enqueue_task, which the single, unique and element-by-element batch enqueues
-- share, and the batch insert of queues.enqueue_tasks), so the owner's SQL that enqueues
-- (a supervisor's child tasks, a kickoff, a handler) needs no change: queues.run_steps sets
-- queue.traceparent to each step's span while it runs, the worker's statements that run a
-- handler set it to the handler's span, and an app that calls a kickoff in its
-- transaction sets it first (@org/queue-client's setTraceContext; its enqueue functions
-- set it themselves, in the same statement).
--
-- Cost: an enqueue without the setting (tracing off, the default) reads one setting and
-- writes nothing more; with it, one row per task.
--
-- A malformed value is ignored, never an error: a trace is an aid, and an enqueue (an
-- order, an email) must not fail for it. It is reported with a NOTICE (sent to the
-- client, not written to the server log at the default log_min_messages): a bad
-- traceparent means no row; a bad tracestate alone is dropped and the traceparent kept,
-- as the W3C recommendation says.

-- Whether _traceparent is a W3C traceparent the queue keeps: lowercase hex fields
-- version-traceid-parentid-flags; version 00 exactly 55 characters, a later version (not
-- ff) 55 or more with a dash after the 55th (only the first 55 are kept, as the W3C
-- recommendation asks of a parser that meets a later version); the trace id and parent id
-- not all zeros.
create or replace function queues.is_valid_traceparent(_traceparent text) returns boolean
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(
           _traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$'
           and left(_traceparent, 2) <> 'ff'
           and (length(_traceparent) = 55 or left(_traceparent, 2) <> '00')
           and substr(_traceparent, 4, 32) <> repeat('0', 32)
           and substr(_traceparent, 37, 16) <> repeat('0', 16),
         false)
$$;

-- Whether _tracestate is kept: at most 512 characters of printable ASCII (the W3C list
-- of key=value members; its members are not parsed).
create or replace function queues.is_valid_tracestate(_tracestate text) returns boolean
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(length(_tracestate) <= 512 and _tracestate ~ '^[ -~]*$', false)
$$;

-- Records the transaction's trace context (queue.traceparent, queue.tracestate) for the
-- tasks _task_ids, just enqueued; returns whether it wrote anything. Nothing when
-- queue.traceparent is unset or empty; a malformed one is ignored with a NOTICE (see the
-- top of this file). No grants: called by the enqueue functions, as the owner.
create or replace function queues.record_task_trace(_task_ids bigint[]) returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _traceparent text := current_setting('queue.traceparent', true);
  _tracestate text := nullif(current_setting('queue.tracestate', true), '');
begin
  if _traceparent is null or _traceparent = '' or _task_ids is null or cardinality(_task_ids) = 0 then
    return false;
  end if;
  if not queues.is_valid_traceparent(_traceparent) then
    raise notice 'queue.traceparent is not a W3C traceparent; the task is enqueued without a trace context: %',
      quote_literal(left(_traceparent, 100));
    return false;
  end if;
  if _tracestate is not null and not queues.is_valid_tracestate(_tracestate) then
    raise notice 'queue.tracestate is not a W3C tracestate of at most 512 characters; kept the traceparent only';
    _tracestate := null;
  end if;
  insert into queues.task_trace (task_id, traceparent, tracestate)
  select t.id, left(_traceparent, 55), _tracestate from unnest(_task_ids) t(id);
  return true;
end;
$$;

-- The trace contexts of the tasks _task_ids that have one (the worker reads those of a
-- claim's tasks in one call when tracing is on). One row per task found; tasks enqueued
-- without a context have none.
create or replace function queues.task_traces(_task_ids bigint[])
  returns table (task_id bigint, traceparent text, tracestate text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_id, t.traceparent, t.tracestate
    from queues.task_trace t
   where t.task_id = any (_task_ids)
$$;

-- Granted here, beside the functions (as in partitions.sql), so that a migration that
-- includes sql/queues/privileges.sql before this file names no function missing yet.
revoke execute on function queues.is_valid_traceparent(text), queues.is_valid_tracestate(text),
  queues.record_task_trace(bigint[]), queues.task_traces(bigint[])
  from public;
grant execute on function queues.task_traces(bigint[]) to :DATABASE_WORKER;
