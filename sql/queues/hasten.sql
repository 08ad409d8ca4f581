-- queues.hasten_task: the owner's SQL makes a task that no worker has taken yet due now
-- (a channel process's success handler wakes the supervisor run its backoff scheduled
-- this way, rather than enqueue another run beside it). Owner only (no grant); the
-- dashboard's "run now" is admin.run_tasks_now.

-- Makes task _task_id due now if no worker has ever taken it. Returns:
--   'hastened'     no lease so far: due now (queues.task_run_now recorded and the wake-up
--                  sent when it was not yet due). Its claim-index row stays locked until
--                  the caller's transaction ends, and claims skip locked rows, so the task
--                  runs after that transaction commits and sees what it wrote.
--   'taken'        a worker holds it, or it ran and waits for a retry: it runs (again) in
--                  its own time; left as it is.
--   'not_pending'  completed, or no such task.
create or replace function queues.hasten_task(_task_id bigint)
  returns text
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending record;
begin
  -- A claim that holds the row commits first; the row is then read as it left it.
  select p.available_at, p.current_lease_id is null and p.lease_count = 0 as untaken into _pending
    from queues.task_pending p
   where p.task_id = _task_id
     for update;
  if not found then
    return 'not_pending';
  end if;
  if not _pending.untaken then
    return 'taken';
  end if;
  if _pending.available_at > now() then
    insert into queues.task_run_now (task_id, requested_at) values (_task_id, now())
    on conflict (task_id) do nothing;
    update queues.task_pending p set available_at = now(), scheduled_at = now() where p.task_id = _task_id;
    perform pg_notify('queues_task_ready', '');
  end if;
  return 'hastened';
end;
$$;
