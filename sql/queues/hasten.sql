-- queues.hasten_task: the owner's SQL makes a task that no worker has taken yet due now
-- (a channel process's success handler wakes the supervisor run its backoff scheduled
-- this way, rather than enqueue another run beside it). Owner only (no grant); the
-- dashboard's "run now" is admin.run_tasks_now.

-- Makes task _task_id due now if no worker has ever taken it (no lease so far) and it is
-- not completed; returns true then. It locks the task's claim-index row until the
-- caller's transaction ends: claims skip locked rows, so the task runs after that
-- transaction commits, and sees what it wrote. When the task was not yet due, records
-- queues.task_run_now and sends the wake-up. False when the task was taken (it is
-- running, or it ran and waits for a retry), is completed, or is unknown: the caller
-- must wake its work another way.
create or replace function queues.hasten_task(_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _available_at timestamptz;
begin
  -- A claim that holds the row commits first; then the row is re-read, leased, and skipped.
  select p.available_at into _available_at
    from queues.task_pending p
   where p.task_id = _task_id and p.current_lease_id is null and p.lease_count = 0
     for update;
  if not found then
    return false;
  end if;
  if _available_at > now() then
    insert into queues.task_run_now (task_id, requested_at) values (_task_id, now())
    on conflict (task_id) do nothing;
    update queues.task_pending p set available_at = now(), scheduled_at = now() where p.task_id = _task_id;
    perform pg_notify('queues_task_ready', '');
  end if;
  return true;
end;
$$;
