-- Progress of a running task, as facts (queues.task_progress): a processor reports how far
-- it got (`done` out of `total`, and a note) through its context (ctx.progress), and the
-- worker records at most one report per task per second (the latest one wins a second),
-- fenced by the run's lease. Shown by admin.get_task ('progress': the latest report) and
-- so by GET /api/tasks/:id and `queue tasks show`.

-- Records one progress report of the run under _task_lease_id: done (>= 0), total (NULL:
-- unknown; otherwise >= done) and a note (at most 500 characters). Refused when the lease
-- is not the task's current one (55000, constraint task_lease_current: lease_lost), and
-- for bad values (22004, 22023); nothing is written then.
create or replace function queues.record_progress(
  _task_id bigint, _task_lease_id bigint, _done bigint, _total bigint, _note text
) returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_id is null or _task_lease_id is null or _done is null then
    raise exception 'task_id, task_lease_id and done must not be null' using errcode = '22004';
  end if;
  if _done < 0 then
    raise exception 'done must not be negative, got %', _done using errcode = '22023';
  end if;
  if _total is not null and _total < _done then
    raise exception 'total must be at least done (%), got %', _done, _total using errcode = '22023';
  end if;
  if _note is not null and length(_note) > 500 then
    raise exception 'note must be at most 500 characters, got %', length(_note) using errcode = '22023';
  end if;
  if not queues.is_current_lease(_task_id, _task_lease_id) then
    raise exception 'lease % is not the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', schema = 'queues', constraint = 'task_lease_current';
  end if;
  insert into queues.task_progress (task_id, task_lease_id, done, total, note)
  values (_task_id, _task_lease_id, _done, _total, coalesce(_note, ''));
end;
$$;

-- The latest progress report of a task as {progress: {done, total, note, reported_at,
-- task_lease_id, reports}} (reports: how many were recorded), or {progress: null}.
create or replace function queues.task_progress_facts(_task_id bigint)
  returns jsonb
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('progress', (
    select jsonb_build_object('done', p.done, 'total', p.total, 'note', p.note, 'reported_at', p.reported_at,
                              'task_lease_id', p.task_lease_id,
                              'reports', (select count(*) from queues.task_progress x where x.task_id = _task_id))
      from queues.task_progress p
     where p.task_id = _task_id
     order by p.task_progress_id desc
     limit 1))
$$;
