-- Running scheduled tasks now. queues.run_scheduled_now writes it (the fact
-- queues.task_run_now, the claim-index row due now, the wake-up), for the dashboard's
-- "run now" (admin.run_tasks_now) and for queues.run_task_now, with which the owner's SQL
-- makes a task that no worker has taken yet due now (a channel process's success handler
-- wakes the supervisor run its backoff scheduled this way, rather than enqueue another
-- run beside it). Owner only (no grants).

-- Makes the scheduled tasks among _task_ids (never leased, not due at _now, not waiting for
-- dependencies) due at _now:
-- records queues.task_run_now, moves their claim-index rows, and sends the wake-up when
-- any moved. Their rows stay locked until the caller's transaction ends (a claim that
-- holds one commits first; the row is then read as it left it). Returns the ids moved.
create or replace function queues.run_scheduled_now(_now timestamptz, _task_ids bigint[])
  returns setof bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  return query
  with locked as (
    select p.task_id
      from queues.task_pending p
     where p.task_id = any (_task_ids)
       and p.available_at > _now and p.current_lease_id is null and p.lease_count = 0
       -- A task waiting for its dependencies is not scheduled: it runs when they end.
       and p.available_at <> 'infinity'
     order by p.task_id
       for update
  ),
  recorded as (
    insert into queues.task_run_now (task_id, requested_at)
    select l.task_id, _now from locked l
    on conflict (task_id) do nothing
    returning task_id
  ),
  moved as (
    update queues.task_pending p set available_at = _now, scheduled_at = _now
     where p.task_id = any (array(select r.task_id from recorded r))
    returning p.task_id
  )
  select m.task_id from moved m;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$$;

-- Makes task _task_id due now if no worker has ever taken it. Returns:
--   'due_now'      no lease so far: due now (queues.task_run_now recorded and the wake-up
--                  sent when it was not yet due). Its claim-index row stays locked until
--                  the caller's transaction ends, and claims skip locked rows, so the task
--                  runs after that transaction commits and sees what it wrote.
--   'taken'        a worker holds it, or it ran and waits for a retry: it runs (again) in
--                  its own time; left as it is.
--   'not_pending'  completed, or no such task.
-- A null id is refused (22004).
create or replace function queues.run_task_now(_task_id bigint)
  returns text
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending record;
  _found boolean;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  -- A claim that holds the row commits first; the row is then read as it left it.
  select p.available_at, p.current_lease_id is null and p.lease_count = 0 as untaken into _pending
    from queues.task_pending p
   where p.task_id = _task_id
     for update;
  _found := found;
  -- No row: a task in a ready batch gets one (sql/queues/ready_batch.sql), locked as any
  -- other.
  if not _found and cardinality(queues.unbatch_tasks(array[_task_id])) > 0 then
    select p.available_at, p.current_lease_id is null and p.lease_count = 0 as untaken into _pending
      from queues.task_pending p
     where p.task_id = _task_id
       for update;
    _found := found;
  end if;
  if not _found then
    -- No row: ended (or no such task), or held by the claim lease that took it out of the
    -- claim index (the ready set: docs/design/hot-path.md).
    if exists (select 1 from queues.task t where t.task_id = _task_id)
       and not exists (select 1 from queues.task_end_of(_task_id) e) then
      return 'taken';
    end if;
    return 'not_pending';
  end if;
  if not _pending.untaken then
    return 'taken';
  end if;
  -- Nothing to do when it is due already.
  perform queues.run_scheduled_now(now(), array[_task_id]);
  return 'due_now';
end;
$$;
