-- Cancelling tasks, pending or running. A cancel is one transaction that ends the task:
-- queues.task_completed with outcome 'cancelled' (no lease: nobody's run completed it),
-- queues.task_cancelled with the reason, the claim-index row deleted and the resource key
-- freed; a task under a live lease also gets a queues.task_lease_revocation fact
-- ('cancelled: <reason>') for that lease.
--
-- The worker running a cancelled task learns it at its next heartbeat: the lease is
-- missing from queues.extend_leases' answer (the task is no longer pending), the worker
-- asks queues.cancelled_tasks why, aborts the processor's signal with the reason, and
-- records nothing (its completion would be refused: lease_lost). A completion and a
-- cancel of one task take turns on its claim-index row: whichever commits first wins, and
-- the other finds the task completed ('already_completed', or lease_lost).
--
-- A cancelled channel task is, to its process's supervisor, a task the queue gave up on
-- (internal.queue_gave_up_message: "... (cancelled): <reason>"), as an abandoned one.

-- Validates a list of task ids for a change made to each (cancel, run now, redrive):
-- 1 to 1000 ids, none null (22004), none repeated (22023).
create or replace function queues.assert_task_ids(_task_ids bigint[])
  returns void
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) not between 1 and 1000 then
    raise exception 'task_ids must name 1 to 1000 tasks, got %', cardinality(_task_ids) using errcode = '22023';
  end if;
  if array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain null' using errcode = '22004';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;
end;
$$;

-- Cancels the given tasks at _now. Rows in input order, one per task:
--   cancelled          it was pending (scheduled, ready, retrying, or leased: running)
--   already_completed  it had ended before (or a completion committed first)
--   unknown_task       no such task
-- `was_running` is true for a task cancelled under a live lease (its worker is told at its
-- next heartbeat). Owner only: owner SQL (a supervisor, a migration) calls it directly;
-- apps call queues.cancel_tasks, the REST API admin.cancel_tasks.
--
-- The answers for the tasks it did not lock are read by a statement of their own after the
-- locks (see admin.cancel_tasks_at): a completion this call waited for is seen.
create or replace function queues.cancel_tasks_at(_now timestamptz, _task_ids bigint[], _reason text)
  returns table (task_id bigint, result text, was_running boolean)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _cancelled bigint[] := '{}';
  _running bigint[] := '{}';
  _todo bigint[] := _task_ids;
  _c bigint[];
  _r bigint[];
  _pass integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform queues.assert_task_ids(_task_ids);
  if _reason is not null and length(_reason) > 500 then
    raise exception 'reason must be at most 500 characters, got %', length(_reason) using errcode = '22023';
  end if;
  -- Same lock order as the claim, the heartbeat and the completion (resource keys first),
  -- then the pending rows in task id order, as a completion batch, a lease release and a
  -- revocation lock theirs: none of them can deadlock with a cancel. A completion in
  -- flight holds its row: the cancel waits for it, then finds the task gone
  -- (already_completed).
  perform queues.lock_resource_keys(_task_ids);
  -- A task its claim took out of the claim index gets its row back first
  -- (queues.hold_rows_of). A claim in flight that takes a task out holds its row: the
  -- cancel waits for it, finds no row, and gives the task its row back in a second pass.
  for _pass in 1 .. 2 loop
    perform queues.hold_rows_of(_todo);
    with locked as (
      select p.task_id, p.task_type, p.current_lease_id,
             (p.current_lease_id is not null and p.available_at > _now) as held
        from queues.task_pending p
       where p.task_id = any (_todo)
       order by p.task_id
         for update
    ),
    completed as (
      insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
      select l.task_id, null, _now, 'cancelled', l.task_type from locked l
      returning task_id
    ),
    reasons as (
      insert into queues.task_cancelled (task_id, reason, cancelled_at)
      select l.task_id, coalesce(_reason, ''), _now from locked l
    ),
    revoked as (
      insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
      select l.task_id, l.current_lease_id, _now, left('cancelled: ' || coalesce(nullif(_reason, ''), 'no reason given'), 520)
        from locked l where l.held
      on conflict do nothing
    ),
    removed as (
      delete from queues.task_pending p where p.task_id = any (array(select l.task_id from locked l))
    ),
    key_freed as (
      delete from queues.resource_lease k where k.task_id = any (array(select l.task_id from locked l))
    )
    select coalesce((select array_agg(c.task_id) from completed c), '{}'),
           coalesce(array_agg(l.task_id) filter (where l.held), '{}')
      into _c, _r
      from locked l;
    _cancelled := _cancelled || _c;
    _running := _running || _r;
    -- The tasks still without an end (a statement after the locks: what a claim that held
    -- a row committed is seen).
    _todo := array(select t.task_id from queues.task t
                    where t.task_id = any (_todo) and t.task_id <> all (_c)
                      and not exists (select 1 from queues.task_end_of(t.task_id) e));
    exit when cardinality(_todo) = 0;
  end loop;

  return query
  select i.task_id,
         case when c.task_id is not null then 'cancelled'
              when coalesce((select true from queues.task_end_of(i.task_id) x limit 1), false) then 'already_completed'
              else 'unknown_task' end,
         r.task_id is not null
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join unnest(_cancelled) as c(task_id) on c.task_id = i.task_id
    left join unnest(_running) as r(task_id) on r.task_id = i.task_id
   order by i.n;
end;
$$;

-- Cancels tasks for an app (and owner SQL): queues.cancel_tasks_at at now(). Refuses, with
-- 42501 and nothing written, a worker-only task type (queues.internal_task_type: channel
-- tasks and steps belong to their processes) unless the session is the owner's, as
-- queues.enqueue does.
create or replace function queues.cancel_tasks(_task_ids bigint[], _reason text default null)
  returns table (task_id bigint, result text, was_running boolean)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _internal bigint;
begin
  if not queues.is_owner_session() then
    select t.task_id into _internal
      from queues.task t
     where t.task_id = any (_task_ids) and queues.is_internal_task_type(t.task_type)
     order by t.task_id limit 1;
    if found then
      raise exception 'task % is of a worker-only task type; only its process may cancel it', _internal
        using errcode = '42501';
    end if;
  end if;
  return query select * from queues.cancel_tasks_at(now(), _task_ids, _reason);
end;
$$;

-- For a worker whose heartbeat found leases lost: which of these tasks were cancelled,
-- and why (queues.task_cancelled). At most 1000 ids; a task not cancelled is left out.
create or replace function queues.cancelled_tasks(_task_ids bigint[])
  returns table (task_id bigint, reason text, cancelled_at timestamptz)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 task ids per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  -- A primary-key probe per id (= any of an array).
  return query
  select c.task_id, c.reason, c.cancelled_at
    from queues.task_cancelled c
   where c.task_id = any (_task_ids)
   order by c.task_id;
end;
$$;
