-- The REST API's face of run timeouts per task type (sql/queues/timeouts.sql).

-- Sets (NULL: clears) the run timeout of a task type, in seconds (0.001 to 86400).
create or replace function admin.set_task_type_timeout(_task_type text, _timeout_seconds numeric)
  returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _timeout_seconds is not null and _timeout_seconds not between 0.001 and 86400 then
    raise exception 'timeout_seconds must be between 0.001 and 86400, got %', _timeout_seconds using errcode = '22023';
  end if;
  perform queues.set_task_type_timeout(_task_type, (_timeout_seconds * 1000)::integer);
end;
$$;
