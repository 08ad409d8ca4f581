-- Marks tasks started (queues.task_lease_started): the worker's start recorder calls it
-- for every task it runs, in the instant the task starts, so the queue knows which of a
-- dead worker's leases were started (those count towards abandonment and make their task
-- a suspect; the leases of tasks that only waited in its local queue count for nothing).
-- A lease that is still its task's current lease is marked, and so is one that its own
-- settlement already ended (completed, failed an attempt, interrupted): the completion
-- of a fast task, or a step that ran in the database, may commit before the mark of its
-- start, and that task did start. Returns the task ids whose lease was neither: taken
-- over by another worker (revoked, expired) or released.
-- Set-based and lean (one statement, no per-row work): it runs once per group of tasks
-- starting together, so its cost is paid per task.
create or replace function queues.mark_started(_task_ids bigint[], _task_lease_ids bigint[])
  returns setof bigint
  language plpgsql volatile
  rows 1
  security definer
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  -- One pass over the input, each pair probed by key (subqueries, so no join of the input
  -- to a table or of one CTE to another is planned from row estimates; a statement of
  -- 500 starts stays linear). Only pairs that are not held are looked up in the outcomes.
  return query
  with input as (
    select i.task_id, i.task_lease_id,
           exists (select 1 from queues.task_pending p
                    where p.task_id = i.task_id and p.current_lease_id = i.task_lease_id)
           or exists (select 1 from queues.task_completed c
                       where c.task_id = i.task_id and c.task_lease_id = i.task_lease_id)
           or exists (select 1 from queues.task_attempt_failed f
                       where f.task_id = i.task_id and f.task_lease_id = i.task_lease_id)
           or exists (select 1 from queues.task_interruption x
                       where x.task_id = i.task_id and x.task_lease_id = i.task_lease_id) as started
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id)
    select i.task_id, i.task_lease_id from input i where i.started
    on conflict do nothing
  )
  select i.task_id from input i where not i.started;
end;
$$;
