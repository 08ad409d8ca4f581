-- Bulk actions on tasks for the dashboard: cancel pending tasks, run scheduled tasks now,
-- redrive dead letters. Each takes a selection (task ids, at most 1000) and reports per
-- task what happened; the *_matching variants take a filter instead and act on up to
-- _limit tasks that match it. Owner-only *_at(_now, ...) variants take the clock.

-- Cancels tasks, pending or running (queues.cancel_tasks_at, sql/queues/cancel.sql): each
-- ends 'cancelled' at once (queues.task_completed, queues.task_cancelled with the reason),
-- in one transaction; the worker running one is told at its next heartbeat, aborts it and
-- records nothing. Rows, in input order:
--   cancelled | already_completed | unknown_task
create or replace function admin.cancel_tasks_at(_now timestamptz, _task_ids bigint[], _reason text)
  returns table (task_id bigint, result text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select c.task_id, c.result from queues.cancel_tasks_at(_now, _task_ids, _reason) c
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
-- (waiting, scheduled, ready or retrying; null: all four), oldest first.
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
  if _state is not null and _state not in ('waiting', 'scheduled', 'ready', 'retrying') then
    raise exception 'state must be waiting, scheduled, ready or retrying to cancel by filter, got %', quote_literal(left(_state, 100))
      using errcode = '22023';
  end if;
  if _limit is null or _limit not between 1 and 1000 then
    raise exception 'limit must be between 1 and 1000, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  _ids := array(
    -- the claim index and the lease-held tasks (sql/queues/lease_held.sql: one whose claim
    -- lease expired is ready)
    select p.task_id from queues.task_pending_or_held p
     where (_task_type is null or p.task_type = _task_type)
       and admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, now())
           = any (case when _state is null then array['waiting', 'scheduled', 'ready', 'retrying'] else array[_state] end)
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
-- The answers for the tasks it did not lock are read after the locks, by a statement of
-- their own (as queues.cancel_tasks_at's).
create or replace function admin.run_tasks_now_at(_now timestamptz, _task_ids bigint[])
  returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _locked bigint[];
  _moved bigint[];
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform queues.assert_task_ids(_task_ids);
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
  select coalesce(array_agg(l.task_id), '{}'), coalesce((select array_agg(m.task_id) from moved m), '{}')
    into _locked, _moved
    from locked l;

  -- A statement after the locks (see queues.cancel_tasks_at).
  return query
  select i.task_id,
         case when m.task_id is not null then 'run_now'
              when l.task_id is not null then 'not_scheduled'
              when coalesce((select true from queues.task_end_of(i.task_id) x limit 1), false) then 'already_completed'
              -- no row and no end: held by the claim lease that took it out of the claim
              -- index (the ready set), so running
              when exists (select 1 from queues.task t where t.task_id = i.task_id) then 'not_scheduled'
              else 'unknown_task' end
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join unnest(_locked) as l(task_id) on l.task_id = i.task_id
    left join unnest(_moved) as m(task_id) on m.task_id = i.task_id
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
--   | dependency_not_redriven (a dependency ended other than succeeded and was not
--     redriven: queues.redrive_blocker; redrive it first, or in the same call)
-- The tasks are redriven in task id order, whatever the input order: a dependency is
-- always older than its dependents, so a call naming both redrives the dependency first
-- and the dependent's copy waits for the dependency's copy.
-- Each task is judged after its completion row is locked (as queues.redrive_task
-- serialises redrives), by statements that start after the lock: a redrive of the same
-- task that this one waited for is seen ('not_a_dead_letter'), not refused as an error.
create or replace function admin.redrive_tasks(_task_ids bigint[])
  returns table (task_id bigint, result text, new_task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _id bigint;
  _ids bigint[] := '{}';
  _results text[] := '{}';
  _new_ids bigint[] := '{}';
  _result text;
  _new bigint;
begin
  perform queues.assert_task_ids(_task_ids);
  for _id in select t from unnest(_task_ids) t order by t loop
    _new := null;
    perform 1 from queues.task_completed c where c.task_id = _id for update;
    if not exists (select 1 from queues.task t where t.task_id = _id) then
      _result := 'unknown_task';
    elsif not exists (select 1 from queues.dead_letter d where d.task_id = _id) then
      _result := 'not_a_dead_letter';
    elsif queues.redrive_blocker(_id) is not null then
      _result := 'dependency_not_redriven';
    else
      _new := queues.redrive_task(_id);
      _result := 'redriven';
    end if;
    _ids := _ids || _id;
    _results := _results || _result;
    _new_ids := _new_ids || _new;
  end loop;
  return query
  select i.id, r.result, r.new_id
    from unnest(_task_ids) with ordinality i(id, n)
    join unnest(_ids, _results, _new_ids) r(id, result, new_id) on r.id = i.id
   order by i.n;
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
