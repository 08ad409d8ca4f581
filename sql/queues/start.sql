-- Marks tasks started (queues.task_lease_started): the worker's start recorder calls it
-- for every task it runs, in the instant the task starts, so the queue knows which of a
-- dead worker's leases were started (those count towards abandonment and make their task
-- a suspect; the leases of tasks that only waited in its local queue count for nothing).
-- A lease that is still its task's current lease is marked, and so is one that its own
-- settlement already ended (completed, failed an attempt, interrupted): the completion
-- of a fast task, or a step that ran in the database, may commit before the mark of its
-- start, and that task did start. Returns the task ids whose lease was neither: taken
-- over by another worker (revoked, expired) or released.
-- Set-based and lean (one statement for the leases still held, the usual case; no per-row
-- work): it runs once per group of tasks starting together, so its cost is paid per task.
create or replace function queues.mark_started(_task_ids bigint[], _task_lease_ids bigint[])
  returns setof bigint
  language plpgsql volatile
  rows 1
  security definer
  set plan_cache_mode = force_generic_plan
  -- Every row it reads is found by key. Its plans are made once per connection, and a
  -- table that was small then (a fresh set of history partitions) would be scanned whole
  -- for each lease once it has grown.
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _not_held bigint[];
  _not_held_leases bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  -- One pass over the input, each pair probed by primary key (a subquery, so no join of
  -- the input to task_pending is planned from its statistics; a statement of 500 starts
  -- stays linear). Marks the held leases; collects the others. Each probe is a scalar
  -- subquery, not EXISTS: the planner may turn an EXISTS into a hashed subplan, which reads
  -- the whole table once per call, and this plan is made once per connection, from
  -- whatever the statistics said then (a small table at the time).
  with input as (
    select i.task_id, i.task_lease_id,
           coalesce((select true from queues.task_pending p
                      where p.task_id = i.task_id and p.current_lease_id = i.task_lease_id), false) as held
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id)
    select i.task_id, i.task_lease_id from input i where i.held
    on conflict do nothing
  )
  select array_agg(i.task_id), array_agg(i.task_lease_id) into _not_held, _not_held_leases
    from input i where not i.held;
  if _not_held is null then
    return;
  end if;
  -- The few that are not held (normally none): a lease that its own settlement already
  -- ended is marked too. A statement of its own, run only then: its plan locks every
  -- partition of three history tables, which the attach of a new partition must wait for.
  return query
  with ended as (
    select i.task_id, i.task_lease_id,
           -- Probes by primary key (scalar subqueries, as above: as an EXISTS, this read
           -- the whole of task_completed, 3.4 ms a call at 20,000 completed tasks).
           coalesce((select true from queues.task_completed c
                      where c.task_id = i.task_id and c.task_lease_id = i.task_lease_id), false)
           or coalesce((select true from queues.task_attempt_failed f
                         where f.task_id = i.task_id and f.task_lease_id = i.task_lease_id limit 1), false)
           or coalesce((select true from queues.task_interruption x
                         where x.task_id = i.task_id and x.task_lease_id = i.task_lease_id limit 1), false) as started
      from unnest(_not_held, _not_held_leases) as i(task_id, task_lease_id)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id)
    select e.task_id, e.task_lease_id from ended e where e.started
    on conflict do nothing
  )
  select e.task_id from ended e where not e.started;
end;
$$;
