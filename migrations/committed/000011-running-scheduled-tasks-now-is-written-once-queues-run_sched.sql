--! Previous: sha1:41c73a0c8584853c477c97eaa5146d307e6fb7bd
--! Hash: sha1:66784094fd5bfb49b9ff8cea6e76831f173fe45f
--! Message: running scheduled tasks now is written once (queues.run_scheduled_now)

--! split: 100-run-scheduled-now-written-once.sql
-- Running scheduled tasks now is written once, in queues.run_scheduled_now: the
-- dashboard's admin.run_tasks_now_at and queues.hasten_task call it.
set local lock_timeout = '5s';

-- New; dropped first so a re-run of this file may change its signature.
drop function if exists queues.run_scheduled_now(timestamptz, bigint[]);
--! Included queues/hasten.sql
-- Running scheduled tasks now. queues.run_scheduled_now writes it (the fact
-- queues.task_run_now, the claim-index row due now, the wake-up), for the dashboard's
-- "run now" (admin.run_tasks_now) and for queues.hasten_task, with which the owner's SQL
-- makes a task that no worker has taken yet due now (a channel process's success handler
-- wakes the supervisor run its backoff scheduled this way, rather than enqueue another
-- run beside it). Owner only (no grants).

-- Makes the scheduled tasks among _task_ids (never leased, not due at _now) due at _now:
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
  -- Nothing to do when it is due already.
  perform queues.run_scheduled_now(now(), array[_task_id]);
  return 'hastened';
end;
$$;
--! EndIncluded queues/hasten.sql
--! Included admin/task_actions.sql
-- Bulk actions on tasks for the dashboard: cancel pending tasks, run scheduled tasks now,
-- redrive dead letters. Each takes a selection (task ids, at most 1000) and reports per
-- task what happened; the *_matching variants take a filter instead and act on up to
-- _limit tasks that match it. Owner-only *_at(_now, ...) variants take the clock.

-- Cancels pending tasks that no worker holds (scheduled, ready, retrying): each gets the
-- terminal fact queues.task_completed with outcome 'cancelled' (and queues.task_cancelled
-- with the reason) and leaves the claim index, in one transaction. A task under a live
-- lease is not cancelled ('running': its worker will complete it). Rows, in input order:
--   cancelled | running | already_completed | unknown_task
create or replace function admin.cancel_tasks_at(_now timestamptz, _task_ids bigint[], _reason text)
  returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_ids(_task_ids);
  if _reason is not null and length(_reason) > 500 then
    raise exception 'reason must be at most 500 characters' using errcode = '22023';
  end if;
  -- Same lock order as the claim (resource keys first), then the pending rows: a claim
  -- that took a row first makes it 'running' here; a claim after us skips it.
  perform queues.lock_resource_keys(_task_ids);
  return query
  with locked as (
    select p.task_id, p.task_type, p.resource_key,
           (p.current_lease_id is not null and p.available_at > _now) as held
      from queues.task_pending p
     where p.task_id = any (_task_ids)
     order by p.task_id
       for update
  ),
  completed as (
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
    select l.task_id, null, _now, 'cancelled', l.task_type from locked l where not l.held
    returning task_id
  ),
  reasons as (
    insert into queues.task_cancelled (task_id, reason, cancelled_at)
    select c.task_id, coalesce(_reason, ''), _now from completed c
  ),
  removed as (
    delete from queues.task_pending p where p.task_id = any (array(select c.task_id from completed c))
  ),
  key_freed as (
    delete from queues.resource_lease k
     where k.task_id = any (array(select c.task_id from completed c))
  )
  select i.task_id,
         case when c.task_id is not null then 'cancelled'
              when l.task_id is not null then 'running'
              when exists (select 1 from queues.task_completed x where x.task_id = i.task_id) then 'already_completed'
              else 'unknown_task' end
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join locked l on l.task_id = i.task_id
    left join completed c on c.task_id = i.task_id
   order by i.n;
end;
$$;

create or replace function admin.cancel_tasks(_task_ids bigint[], _reason text default null)
  returns table (task_id bigint, result text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.cancel_tasks_at(now(), _task_ids, _reason)
$$;

-- Cancels up to _limit (1 to 1000) pending tasks of _task_type (null: any) in _state
-- (scheduled, ready or retrying; null: all three), oldest first.
create or replace function admin.cancel_tasks_matching(
  _task_type text, _state text, _limit integer, _reason text default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _ids bigint[];
begin
  perform admin.assert_task_type(_task_type);
  if _state is not null and _state not in ('scheduled', 'ready', 'retrying') then
    raise exception 'state must be scheduled, ready or retrying to cancel by filter, got %', quote_literal(left(_state, 100))
      using errcode = '22023';
  end if;
  if _limit is null or _limit not between 1 and 1000 then
    raise exception 'limit must be between 1 and 1000, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  _ids := array(
    select p.task_id from queues.task_pending p
     where (_task_type is null or p.task_type = _task_type)
       and admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, now())
           = any (case when _state is null then array['scheduled', 'ready', 'retrying'] else array[_state] end)
     order by p.task_id
     limit _limit);
  if cardinality(_ids) > 0 then
    return query select * from admin.cancel_tasks_at(now(), _ids, _reason);
  end if;
end;
$$;

-- Runs scheduled tasks (never leased, scheduled_at in the future) now
-- (queues.run_scheduled_now: records queues.task_run_now and makes the claim-index row
-- claimable at _now). Rows, in input order:
--   run_now | not_scheduled (ready, running, retrying) | already_completed | unknown_task
create or replace function admin.run_tasks_now_at(_now timestamptz, _task_ids bigint[])
  returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_ids(_task_ids);
  return query
  with locked as (
    select p.task_id, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state
      from queues.task_pending p
     where p.task_id = any (_task_ids)
     order by p.task_id
       for update
  ),
  moved as (
    select m as task_id
      from queues.run_scheduled_now(_now, array(select l.task_id from locked l where l.state = 'scheduled')) m
  )
  select i.task_id,
         case when m.task_id is not null then 'run_now'
              when l.task_id is not null then 'not_scheduled'
              when exists (select 1 from queues.task_completed x where x.task_id = i.task_id) then 'already_completed'
              else 'unknown_task' end
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join locked l on l.task_id = i.task_id
    left join moved m on m.task_id = i.task_id
   order by i.n;
end;
$$;

create or replace function admin.run_tasks_now(_task_ids bigint[])
  returns table (task_id bigint, result text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.run_tasks_now_at(now(), _task_ids)
$$;

-- Redrives dead letters (queues.redrive_task for each). Rows, in input order:
--   redriven (new_task_id set) | not_a_dead_letter | unknown_task
create or replace function admin.redrive_tasks(_task_ids bigint[])
  returns table (task_id bigint, result text, new_task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _id bigint;
begin
  perform admin.assert_task_ids(_task_ids);
  foreach _id in array _task_ids loop
    task_id := _id;
    new_task_id := null;
    if not exists (select 1 from queues.task t where t.task_id = _id) then
      result := 'unknown_task';
    elsif not exists (select 1 from queues.dead_letter d where d.task_id = _id) then
      result := 'not_a_dead_letter';
    else
      new_task_id := queues.redrive_task(_id);
      result := 'redriven';
    end if;
    return next;
  end loop;
end;
$$;

-- Redrives up to _limit (1 to 500) dead letters of _task_type (null: any), newest first.
create or replace function admin.redrive_tasks_matching(_task_type text, _limit integer)
  returns table (task_id bigint, result text, new_task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _ids bigint[];
begin
  perform admin.assert_task_type(_task_type);
  if _limit is null or _limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  _ids := array(select d.task_id from admin.list_dead_letters(_task_type, _limit, null) d);
  if cardinality(_ids) > 0 then
    return query select * from admin.redrive_tasks(_ids);
  end if;
end;
$$;

-- Validates a selection: not null, 1 to 1000 ids, no nulls, no duplicates.
create or replace function admin.assert_task_ids(_task_ids bigint[])
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
--! EndIncluded admin/task_actions.sql
--! Included queues/privileges.sql
-- Who may call what in queues. Roles come from placeholders (see .gmrc):
--   :DATABASE_WORKER  the worker: claim (and ask when the next scheduled task is due),
--                     extend and release leases, complete, fail, interrupt (a transient
--                     error).
--                     No table privileges.
--   :DATABASE_APP     applications: enqueue.
-- Every function starts with EXECUTE revoked from PUBLIC; grants are explicit.

revoke all on all tables in schema queues from public;
revoke all on all sequences in schema queues from public;
revoke execute on all functions in schema queues from public;

grant usage on schema queues to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  queues.claim_tasks(text, integer, text[], integer, integer),
  queues.next_claim_in_ms(text[]),
  queues.extend_leases(bigint[], bigint[], integer),
  queues.release_leases(bigint[], bigint[]),
  queues.dequeue_next_available_task(text, integer),
  queues.complete_task(bigint, bigint, text),
  queues.complete_tasks(bigint[], bigint[], text[], boolean[]),
  queues.fail_task(bigint, text, bigint),
  queues.interrupt_task(bigint, bigint, text, integer),
  queues.record_worker_heartbeat(text, text[], integer),
  queues.record_worker_stopped(text)
to :DATABASE_WORKER;

grant execute on function
  queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean),
  queues.enqueue_many(jsonb)
to :DATABASE_APP;
-- The client's enqueue on a pool (commit, then the wake-up; sql/queues/enqueue.sql).
revoke execute on all procedures in schema queues from public;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint)
  to :DATABASE_APP;
--! EndIncluded queues/privileges.sql
