-- Start marks (queues.task_lease_started) for runs that outlast a heartbeat: a task's start
-- travels with its completion (queues.settle_tasks' _started_us, kept in task_completed
-- and task_attempt_failed), and nothing is written when a task starts. A run still going
-- at its worker's next heartbeat is marked then, once, with the time it started, so that
-- the readers of running work (public.worker_tasks' claimed and running, the task page)
-- see it as running within one heartbeat interval. A revocation of a marked lease counts
-- towards abandoning its task (queues.revoke_worker_leases, which also marks the tasks a
-- dead pool process said it ran, and queues.recover_stale_leases_at); an expiry does not
-- (see queues.claim_tasks_at).
--
-- Marks each given lease that is still its task's current lease; returns the task ids
-- whose lease is not (taken over, released, or already settled: nothing to mark).
-- _started_us: parallel, when each run started, in microseconds since the epoch (null:
-- now).
create or replace function queues.mark_started(
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _started_us     bigint[] default null
) returns setof bigint
  language plpgsql volatile
  rows 1
  security definer
  set plan_cache_mode = force_generic_plan
  -- Every row it reads is found by key (see queues.claim_tasks_at's lease_map).
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  if _started_us is not null and cardinality(_started_us) <> cardinality(_task_ids) then
    raise exception 'started_us must have one element per lease (% leases, % start times)',
      cardinality(_task_ids), cardinality(_started_us) using errcode = '22023';
  end if;
  -- Each pair probed by primary key (a scalar subquery: no join of the input to
  -- task_pending planned from its statistics).
  return query
  with input as (
    select i.task_id, i.task_lease_id, i.started_us,
           coalesce((select true from queues.task_pending p
                      where p.task_id = i.task_id and p.current_lease_id = i.task_lease_id),
                    -- no row: held by the claim lease that names it until it ends (the
                    -- ready set)
                    (select true from queues.lease_held_of(i.task_id) h
                      where h.task_lease_id = i.task_lease_id),
                    false) as held
      from unnest(_task_ids, _task_lease_ids,
                  coalesce(_started_us, array_fill(null::bigint, array[cardinality(_task_ids)])))
           as i(task_id, task_lease_id, started_us)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id, started_at)
    select i.task_id, i.task_lease_id, coalesce(to_timestamp(i.started_us / 1000000.0), now())
      from input i where i.held
    on conflict do nothing
  )
  select i.task_id from input i where not i.held;
end;
$$;
