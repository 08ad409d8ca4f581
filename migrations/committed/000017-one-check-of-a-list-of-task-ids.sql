--! Previous: sha1:575faf57943937c382e35288182feaaa6a6f3cc4
--! Hash: sha1:a3b44b56dedd2c85eb27f54bc93dd32f11d151e7
--! Message: One check of a list of task ids

--! split: 120-one-task-id-check.sql
set local lock_timeout = '5s';

-- One check of a list of task ids (queues.assert_task_ids), called by the queue's cancel
-- and the API's actions alike; the start times of a settlement read in input order.
--! Included queues/cancel.sql
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
  _cancelled bigint[];
  _running bigint[];
  _try integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform queues.assert_task_ids(_task_ids);
  if _reason is not null and length(_reason) > 500 then
    raise exception 'reason must be at most 500 characters, got %', length(_reason) using errcode = '22023';
  end if;
  -- Same lock order as the claim, the heartbeat and the completion (resource keys first),
  -- then the pending rows by primary key. A completion in flight holds its row: the cancel
  -- waits for it, then finds the task gone (already_completed). A completion batch locks
  -- its rows in its own order, so a cancel of several tasks can deadlock with one: the
  -- cancel's part is then rolled back (a subtransaction) and tried again, up to five times.
  perform queues.lock_resource_keys(_task_ids);
  for _try in 1..5 loop
  begin
  with locked as (
    select p.task_id, p.task_type, p.current_lease_id,
           (p.current_lease_id is not null and p.available_at > _now) as held
      from queues.task_pending p
     where p.task_id = any (_task_ids)
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
    into _cancelled, _running
    from locked l;
  exit;
  exception when deadlock_detected then
    if _try = 5 then
      raise;
    end if;
  end;
  end loop;

  return query
  select i.task_id,
         case when c.task_id is not null then 'cancelled'
              when exists (select 1 from queues.task_completed x where x.task_id = i.task_id) then 'already_completed'
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
--! EndIncluded queues/cancel.sql
--! Included queues/settle.sql
-- The worker's completer: one call per round trip that completes tasks with their error
-- rows and start times (queues.settle_tasks, owner-run: security definer like every queue
-- writer); and a completion with its handler in one statement (queues.settle_with_handler,
-- run as the worker).

-- Completes tasks (see queues.complete_tasks: fenced by lease, retries, results),
-- recording each error message against its task in the same transaction, only if this
-- call completed the task or scheduled its retry (a refused completion records nothing).
--   _task_ids, _task_lease_ids, _outcomes, _retries   parallel: as queues.complete_tasks
--   _error_task_ids, _error_messages        parallel: errors, any number per completed task
--   _started_us                             parallel to _task_ids (or null): when each run
--                                           started, in microseconds since the epoch (sent
--                                           as integers: a timestamptz[] of hundreds costs
--                                           more to parse than the insert it feeds)
-- Returns one row per completion, in input order, with the result of queues.complete_tasks.
create or replace function queues.settle_tasks(
  _task_ids          bigint[],
  _task_lease_ids    bigint[] default null,
  _outcomes          text[] default null,
  _retries           boolean[] default null,
  _error_task_ids    bigint[] default null,
  _error_messages    text[] default null,
  _started_us        bigint[] default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _errors bigint[] := coalesce(_error_task_ids, '{}');
  _messages text[] := coalesce(_error_messages, '{}');
begin
  if cardinality(_errors) <> cardinality(_messages) then
    raise exception 'error_task_ids and error_messages must have the same length (% and %)',
      cardinality(_errors), cardinality(_messages) using errcode = '22023';
  end if;
  if array_position(_errors, null) is not null then
    raise exception 'error_task_ids must not contain null' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_messages) m where m is null or btrim(m) = '') then
    raise exception 'error_messages must not be empty' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_errors) e where e <> all (coalesce(_task_ids, '{}'))) then
    raise exception 'error_task_ids must name tasks completed in the same call' using errcode = '22023';
  end if;
  if _started_us is not null and cardinality(_started_us) <> cardinality(coalesce(_task_ids, '{}')) then
    raise exception 'started_us must have one element per task (% tasks, % start times)',
      cardinality(coalesce(_task_ids, '{}')), cardinality(_started_us) using errcode = '22023';
  end if;

  if cardinality(coalesce(_task_ids, '{}')) = 0 then
    return;
  end if;

  return query
  with done as (
    select c.task_id, c.result, row_number() over () as ord
      from queues.complete_tasks(_task_ids, _task_lease_ids, _outcomes, _retries,
                                 case when _started_us is not null then
                                   array(select to_timestamp(u.us / 1000000.0)
                                         from unnest(_started_us) with ordinality u(us, i) order by u.i) end) c
  ),
  leases as (
    select l.task_id, l.task_lease_id
      from unnest(_task_ids, coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])))
           as l(task_id, task_lease_id)
  ),
  recorded as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select e.task_id, l.task_lease_id,
           case when length(e.message) > queues.max_error_message_length()
                then left(e.message, queues.max_error_message_length()) || ' [truncated]'
                else e.message end
      from unnest(_errors, _messages) with ordinality as e(task_id, message, ord)
      join done d on d.task_id = e.task_id and d.result in ('completed', 'retry_scheduled')
      join leases l on l.task_id = e.task_id
     order by e.ord
  )
  select d.task_id, d.result from done d order by d.ord;
end;
$$;

-- A completion and its handler in one statement: the worker's completion of a channel task
-- (a success handler after the provider's call, an error handler after its failure), with
-- no transaction left open between round trips. Runs internal.run_function(_handler,
-- _body) in a subtransaction, reads its envelope (queues.parse_envelope), and records the
-- completion fenced by the lease (queues.settle_tasks):
--   _mode 'success' (_outcome 'succeeded'): a handler failure (an error, a validation
--     failure, a status or a malformed envelope) fails the task with that failure as its
--     error, the handler's writes kept; a handler that raises fails the task with
--     _raised_prefix followed by the message, its writes rolled back;
--   _mode 'error' (_outcome 'failed', or 'validation_failed' for a before handler's
--     validation failure; _errors the task's errors, _retry false for a failure no retry
--     can mend): a handler failure, or _raised_prefix and the message of
--     a raise (its writes rolled back), is one more error row.
-- If the completion is refused (the lease was lost), nothing of it commits, the handler's
-- writes included. A serialization failure or deadlock is raised: nothing is recorded and
-- the task runs again. Returns the completion's result (as queues.complete_tasks) with
-- the outcome and the errors recorded (or refused). _started_at: when the task's run
-- started (null: not known), kept with its completion. Messages are cut at 8,000 characters
-- (as the worker's). Runs as the caller (security invoker): the handler has the worker's
-- privileges, not the owner's.
create or replace function queues.settle_with_handler(
  _task_id bigint, _task_lease_id bigint, _outcome text, _errors text[], _retry boolean,
  _handler text, _body jsonb, _mode text, _raised_prefix text, _started_at timestamptz,
  out result text, out outcome text, out errors text[]
)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _env record;
  _failure text;
begin
  if _task_id is null or _task_lease_id is null or _handler is null or _mode is null then
    raise exception 'task_id, task_lease_id, handler and mode must not be null' using errcode = '22004';
  end if;
  if _mode not in ('success', 'error') then
    raise exception 'mode must be success or error, not %', _mode using errcode = '22023';
  end if;
  if not (_outcome is not distinct from 'succeeded' and _mode = 'success'
          or _outcome in ('failed', 'validation_failed') and _mode = 'error') then
    raise exception 'a % handler completes % tasks, not %', _mode,
      (case _mode when 'success' then 'succeeded' else 'failed or validation_failed' end), coalesce(_outcome, 'null')
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_errors) m where m is null or btrim(m) = '') then
    raise exception 'errors must not be empty' using errcode = '22004';
  end if;
  outcome := _outcome;
  errors := coalesce(_errors, '{}');
  begin
    begin
      select * into _env from queues.parse_envelope(internal.run_function(_handler, _body));
      _failure := case _env.outcome
                    when 'succeeded' then null
                    when 'invalid' then format('%s: validation failure: %s', _handler, _env.message)
                    when 'status' then format('%s: status %s', _handler, _env.message)
                    else format('%s: %s', _handler, _env.message) end;
    exception
      when serialization_failure or deadlock_detected then
        raise;
      when others then
        -- Its writes are rolled back with the subtransaction.
        _failure := coalesce(_raised_prefix, '') || sqlerrm;
    end;
    if _failure is not null then
      if length(_failure) > 8000 then
        _failure := left(_failure, 8000) || ' [truncated]';
      end if;
      if _mode = 'success' then
        outcome := 'failed';
        errors := array[_failure];
      else
        errors := errors || _failure;
      end if;
    end if;
    select s.result into result
      from queues.settle_tasks(array[_task_id], array[_task_lease_id], array[outcome], array[_retry],
                               array_fill(_task_id, array[cardinality(errors)]), errors,
                               array[(extract(epoch from _started_at) * 1000000)::bigint]) s;
    if result not in ('completed', 'retry_scheduled') then
      -- Refused: the handler's writes must not commit either.
      raise exception 'refused: %', result using errcode = 'QREFU';
    end if;
  exception
    when sqlstate 'QREFU' then
      null;
  end;
end;
$$;

-- Granted here, beside the function, so that a migration including
-- queues/privileges-hot-path.sql before this one does not name a function that does not
-- exist yet.
revoke execute on function
  queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text, timestamptz) from public;
grant execute on function
  queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text, timestamptz) to :DATABASE_WORKER;
--! EndIncluded queues/settle.sql
--! Included admin/task_actions.sql
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
              when exists (select 1 from queues.task_completed x where x.task_id = i.task_id) then 'already_completed'
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
-- Each task is judged after its completion row is locked (as queues.redrive_task
-- serialises redrives), by statements that start after the lock: a redrive of the same
-- task that this one waited for is seen ('not_a_dead_letter'), not refused as an error.
create or replace function admin.redrive_tasks(_task_ids bigint[])
  returns table (task_id bigint, result text, new_task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _id bigint;
begin
  perform queues.assert_task_ids(_task_ids);
  foreach _id in array _task_ids loop
    task_id := _id;
    new_task_id := null;
    perform 1 from queues.task_completed c where c.task_id = _id for update;
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
--! EndIncluded admin/task_actions.sql
drop function if exists admin.assert_task_ids(bigint[]);
