-- Run timeouts per task type: how long a run may take before its worker gives up on it.
-- Set as facts (queues.task_type_timeout_set, the latest per type wins; a NULL timeout
-- clears it), read by every worker at start and at each heartbeat
-- (queues.task_type_timeouts). At the deadline the worker aborts the processor's signal,
-- records the run as failed with "<type> timed out after <n> ms" (retried while attempts
-- remain), and stops extending its lease; the run's late outcome is never recorded (the
-- failure ended its lease: a completion with it is refused), and its slot stays taken
-- until the processor returns (packages/worker/src/timeouts.ts).

-- Sets (or, with NULL, clears) the run timeout of _task_type: 1 ms to 24 hours. Owner only
-- (a migration, owner SQL); the REST API's database user calls admin.set_task_type_timeout.
-- An unknown type is 23503, a timeout out of range 22023; nothing is written then.
create or replace function queues.set_task_type_timeout(_task_type text, _timeout_ms integer)
  returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task type %', quote_literal(left(_task_type, 100)) using errcode = '23503';
  end if;
  if _timeout_ms is not null and _timeout_ms not between 1 and 86400000 then
    raise exception 'timeout_ms must be between 1 and 86400000 (24 hours), got %', _timeout_ms using errcode = '22023';
  end if;
  insert into queues.task_type_timeout_set (task_type, timeout_ms) values (_task_type, _timeout_ms);
end;
$$;

-- The run timeout of each task type that has one (the latest setting per type, when not
-- cleared). Read by the worker at start and at every heartbeat: a small table, one row
-- per setting ever made.
create or replace function queues.task_type_timeouts()
  returns table (task_type text, timeout_ms integer)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select l.task_type, l.timeout_ms
    from (select distinct on (s.task_type) s.task_type, s.timeout_ms
            from queues.task_type_timeout_set s
           order by s.task_type, s.task_type_timeout_set_id desc) l
   where l.timeout_ms is not null
   order by l.task_type
$$;
