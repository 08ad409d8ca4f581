-- Maintenance of the derived claim index. Owner only.

-- Rebuilds queues.task_pending from the facts: every task without a completion, available
-- at its scheduled time or at the effective expiry of its newest lease (heartbeats and
-- releases applied), whichever is later.
-- Returns the number of pending tasks.
create or replace function queues.rebuild_task_pending() returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _count bigint;
begin
  lock table queues.task_pending in exclusive mode;
  delete from queues.task_pending;
  insert into queues.task_pending
    (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
     lease_count, released_count)
  select t.task_id, t.task_type, t.priority, t.scheduled_at, t.resource_key,
         greatest(t.scheduled_at, l.expires_at),
         case when l.released_at is null then l.task_lease_id end,
         coalesce(l.lease_count, 0), coalesce(l.released_count, 0)
    from queues.task t
    left join lateral (
      select le.task_lease_id, le.expires_at, le.released_at,
             count(*) over () :: integer as lease_count,
             count(le.released_at) over () :: integer as released_count
        from queues.task_lease_effective le
       where le.task_id = t.task_id
       order by le.task_lease_id desc
       limit 1
    ) l on true
   where not exists (select 1 from queues.task_completed c where c.task_id = t.task_id);
  get diagnostics _count = row_count;
  return _count;
end;
$$;
