--! Previous: sha1:209e877d29787adaccf25e467d87720f10ea59e9
--! Hash: sha1:39d9b738e578396c5d5418f6d19619aaae378ca2
--! Message: Cancel running tasks, run timeouts, progress; fewer statements per channel process

--! split: 600-cancel-running.sql
set local lock_timeout = '5s';
-- Cancelling running tasks (sql/queues/cancel.sql): admin.cancel_tasks now ends tasks
-- under a live lease too; the worker learns it at its next heartbeat.
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
  perform admin.assert_task_ids(_task_ids);
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
  perform admin.assert_task_ids(_task_ids);
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
--! Included internal/process_support.sql
-- Helpers shared by every business process (comms, files, accounts, schedules):
-- reading ids from payloads, the validation-failure envelope, and the isolation guard
-- of supervisors. Called only from security definer functions: no grants.

-- A positive bigint id read from a jsonb object, or NULL when the key is missing, not
-- an integer, or out of range. Supervisors and handlers validate with this instead of
-- casting, so a malformed payload is a validation failure, not an exception.
create or replace function internal.id_from_payload(_payload jsonb, _key text)
  returns bigint
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select case
    when jsonb_typeof(_payload) = 'object'
     and jsonb_typeof(_payload -> _key) in ('number', 'string')
     and (_payload ->> _key) ~ '^[1-9][0-9]{0,17}$'
    then (_payload ->> _key)::bigint
  end
$$;

-- The envelope for input a function cannot act on: non-retriable, nothing written.
create or replace function internal.validation_failure(_message text)
  returns jsonb
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', false, 'validation_failure_message', _message)
$$;

-- Refuses to run a supervisor outside READ COMMITTED. A supervisor serialises on its
-- root row, then reads facts. Under READ COMMITTED every statement after the lock wait
-- takes a fresh snapshot and sees what the previous holder committed; under REPEATABLE
-- READ (or SERIALIZABLE) the snapshot is from before the wait, so two runs would both
-- see "no outstanding attempt" and schedule two.
create or replace function internal.assert_read_committed(_function_name text)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception '% must run under READ COMMITTED, not %', _function_name,
      upper(current_setting('transaction_isolation'))
      using errcode = '25000',
            detail = 'Under REPEATABLE READ or SERIALIZABLE the lock on the root row does not stop double scheduling: facts read after the lock wait come from a snapshot taken before it.',
            hint = 'Call supervisors in a READ COMMITTED transaction (the default).';
  end if;
end;
$$;

-- Why the queue gave up on a channel task, or NULL while it has not: the task is
-- completed (abandoned after its leases expired, dead-lettered, cancelled while pending or
-- running, failed because its success or error handler raised) although its attempt has
-- no outcome. Supervisors record this as the attempt's failure at their next run. The
-- message ends with the task's last error or, for a cancelled task, the cancel's reason.
--
-- A task that is no longer in queues.task was given up on too: history retention drops a
-- task only with its whole partition set, and only once every task in the set has a
-- completion (queues.maintain_history_at), so a task that is gone was completed, at
-- least the retention window ago, and its attempt got no outcome from it. A supervisor
-- silent for that long (db_function paused) still sees its attempt end.
--
-- When an at-most-once provider call was started for the task
-- (internal.provider_call_started, which retention keeps), the call may have happened:
-- the message then starts with internal.unknown_outcome_prefix(), so the supervisor ends
-- the process delivery_outcome_unknown instead of calling again.
create or replace function internal.queue_gave_up_message(_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select left(coalesce((select format('%slease %s started the provider call at %s and no outcome was recorded; ',
                                      internal.unknown_outcome_prefix(), s.task_lease_id, s.started_at)
                          from internal.provider_call_started s
                         where s.task_id = k.task_id
                         order by s.task_lease_id limit 1), '')
              || case when t.task_id is null
                      then format('the queue gave up on task %s: its history was dropped by retention before its attempt had an outcome',
                                  k.task_id)
                      else format('the queue gave up on %s task %s (%s)%s', t.task_type, t.task_id, c.outcome,
                                  coalesce(': ' || (select e.error_message from queues.error e
                                                     where e.task_id = t.task_id order by e.error_id desc limit 1),
                                           ': ' || (select nullif(x.reason, '') from queues.task_cancelled x
                                                     where x.task_id = t.task_id and c.outcome = 'cancelled'), ''))
                 end, 2000)
    from (select _task_id as task_id) k
    left join queues.task t on t.task_id = k.task_id
    left join queues.task_completed c on c.task_id = t.task_id
   where k.task_id is not null and (t.task_id is null or c.task_id is not null)
$$;

-- True when an attempt's error is the worker's "unknown outcome" failure of an
-- at-most-once channel (internal.start_provider_call): the call may have happened, so a
-- supervisor must not make another attempt.
create or replace function internal.is_unknown_outcome(_error_message text)
  returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select starts_with(coalesce(_error_message, ''), 'unknown outcome: ')
$$;

-- The namespace of provider idempotency keys: this database's cluster (its system
-- identifier) and name, so two databases sending through one provider account never
-- share a key. Stable for the life of the database.
create or replace function internal.idempotency_namespace()
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select format('%s:%s', (select s.system_identifier from pg_control_system() s), current_database())
$$;
--! EndIncluded internal/process_support.sql

--! split: 601-run-timeouts.sql
set local lock_timeout = '5s';
-- Run timeouts per task type (sql/queues/timeouts.sql): settings as facts, the latest per
-- type wins.
create table if not exists queues.task_type_timeout_set (
  task_type_timeout_set_id bigint generated always as identity primary key,
  task_type text not null references queues.task_type (task_type) on delete cascade,
  timeout_ms integer check (timeout_ms between 1 and 86400000),
  set_at timestamptz not null default now()
);
comment on table queues.task_type_timeout_set is
  'Append-only: a run timeout set (or, NULL, cleared) for a task type; the latest per type is in force (queues.task_type_timeouts).';
drop trigger if exists forbid_update on queues.task_type_timeout_set;
create trigger forbid_update before update on queues.task_type_timeout_set
  for each statement execute function queues.forbid_fact_update();
create index if not exists task_type_timeout_set_type on queues.task_type_timeout_set (task_type, task_type_timeout_set_id);
--! Included queues/timeouts.sql
-- Run timeouts per task type: how long a run may take before its worker gives up on it.
-- Set as facts (queues.task_type_timeout_set, the latest per type wins; a NULL timeout
-- clears it), read by every worker at start and at each heartbeat
-- (queues.task_type_timeouts). At the deadline the worker aborts the processor's signal,
-- records the run as failed with "<type> timed out after <n> ms" (retried while attempts
-- remain), and stops extending its lease; the run's late outcome is never recorded (the
-- failure ended its lease: a completion with it is refused), and its slot stays taken
-- until the processor returns (packages/worker/src/timeouts.ts).

-- Sets (or, with NULL, clears) the run timeout of _task_type: 1 ms to 24 hours. Owner only
-- (a migration, owner SQL); the REST API's database user calls admin.set_task_type_timeout.
-- An unknown type is 23503, a timeout out of range 22023; nothing is written then.
create or replace function queues.set_task_type_timeout(_task_type text, _timeout_ms integer)
  returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task type %', quote_literal(left(_task_type, 100)) using errcode = '23503';
  end if;
  if _timeout_ms is not null and _timeout_ms not between 1 and 86400000 then
    raise exception 'timeout_ms must be between 1 and 86400000 (24 hours), got %', _timeout_ms using errcode = '22023';
  end if;
  insert into queues.task_type_timeout_set (task_type, timeout_ms) values (_task_type, _timeout_ms);
end;
$$;

-- The run timeout of each task type that has one (the latest setting per type, when not
-- cleared). Read by the worker at start and at every heartbeat: a small table, one row
-- per setting ever made.
create or replace function queues.task_type_timeouts()
  returns table (task_type text, timeout_ms integer)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select l.task_type, l.timeout_ms
    from (select distinct on (s.task_type) s.task_type, s.timeout_ms
            from queues.task_type_timeout_set s
           order by s.task_type, s.task_type_timeout_set_id desc) l
   where l.timeout_ms is not null
   order by l.task_type
$$;
--! EndIncluded queues/timeouts.sql
--! Included admin/timeouts.sql
-- The REST API's face of run timeouts per task type (sql/queues/timeouts.sql).

-- Sets (NULL: clears) the run timeout of a task type, in seconds (0.001 to 86400).
create or replace function admin.set_task_type_timeout(_task_type text, _timeout_seconds numeric)
  returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _timeout_seconds is not null and _timeout_seconds not between 0.001 and 86400 then
    raise exception 'timeout_seconds must be between 0.001 and 86400, got %', _timeout_seconds using errcode = '22023';
  end if;
  perform queues.set_task_type_timeout(_task_type, (_timeout_seconds * 1000)::integer);
end;
$$;
--! EndIncluded admin/timeouts.sql

--! split: 602-progress.sql
set local lock_timeout = '5s';
-- Progress reports of running tasks (sql/queues/progress.sql).
create table if not exists queues.task_progress (
  task_progress_id bigint generated always as identity primary key,
  task_id bigint not null,
  task_lease_id bigint not null,
  reported_at timestamptz not null default now(),
  done bigint not null check (done >= 0),
  total bigint check (total >= done),
  note text not null default '' check (length(note) <= 500)
);
comment on table queues.task_progress is
  'Append-only: a progress report of a running task (done out of total, a note), at most one per task per second from the worker (queues.record_progress).';
drop trigger if exists forbid_update on queues.task_progress;
create trigger forbid_update before update on queues.task_progress
  for each statement execute function queues.forbid_fact_update();
create index if not exists task_progress_task on queues.task_progress (task_id, task_progress_id);
--! Included queues/progress.sql
-- Progress of a running task, as facts (queues.task_progress): a processor reports how far
-- it got (`done` out of `total`, and a note) through its context (ctx.progress), and the
-- worker records at most one report per task per second (the latest one wins a second),
-- fenced by the run's lease. Shown by admin.get_task ('progress': the latest report) and
-- so by GET /api/tasks/:id and `queue tasks show`.

-- Records one progress report of the run under _task_lease_id: done (>= 0), total (NULL:
-- unknown; otherwise >= done) and a note (at most 500 characters). Refused when the lease
-- is not the task's current one (55000, constraint task_lease_current: lease_lost), and
-- for bad values (22004, 22023); nothing is written then.
create or replace function queues.record_progress(
  _task_id bigint, _task_lease_id bigint, _done bigint, _total bigint, _note text
) returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_id is null or _task_lease_id is null or _done is null then
    raise exception 'task_id, task_lease_id and done must not be null' using errcode = '22004';
  end if;
  if _done < 0 then
    raise exception 'done must not be negative, got %', _done using errcode = '22023';
  end if;
  if _total is not null and _total < _done then
    raise exception 'total must be at least done (%), got %', _done, _total using errcode = '22023';
  end if;
  if _note is not null and length(_note) > 500 then
    raise exception 'note must be at most 500 characters, got %', length(_note) using errcode = '22023';
  end if;
  if not queues.is_current_lease(_task_id, _task_lease_id) then
    raise exception 'lease % is not the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', schema = 'queues', constraint = 'task_lease_current';
  end if;
  insert into queues.task_progress (task_id, task_lease_id, done, total, note)
  values (_task_id, _task_lease_id, _done, _total, coalesce(_note, ''));
end;
$$;

-- The latest progress report of a task as {progress: {done, total, note, reported_at,
-- task_lease_id, reports}} (reports: how many were recorded), or {progress: null}.
create or replace function queues.task_progress_facts(_task_id bigint)
  returns jsonb
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('progress', (
    select jsonb_build_object('done', p.done, 'total', p.total, 'note', p.note, 'reported_at', p.reported_at,
                              'task_lease_id', p.task_lease_id,
                              'reports', (select count(*) from queues.task_progress x where x.task_id = _task_id))
      from queues.task_progress p
     where p.task_id = _task_id
     order by p.task_progress_id desc
     limit 1))
$$;
--! EndIncluded queues/progress.sql
--! Included admin/tasks.sql
-- Reading tasks for the operations API: a keyset-paginated list, one task with its facts,
-- and counts by type and state. The *_at functions take the clock (owner only, for
-- tests); the API calls the wrappers, which pass now().

-- Tasks newest first (by task_id), _limit per page (default 50, at most 500), older than
-- _before_task_id (the last id of the previous page: keyset pagination, so a page costs
-- the same at any depth). Filters, each optional and combined with AND:
--   _task_type            a registered type
--   _state                one of admin.task_states(), or a status of the role-based
--                         specification (its worker_tasks table; public.worker_tasks):
--                         pending    scheduled, ready or retrying (no live lease)
--                         claimed    running, its run not seen to start (no start mark:
--                                    a heartbeat marks a run still going), its worker
--                                    not silent
--                         completed  succeeded
--                         stale      held by a lease that expired uncompleted, or whose
--                                    worker is silent for longer than three of its
--                                    heartbeat intervals (public.recover_stale_tasks)
--                         Rows carry the queue's own state.
--   _worker_id            tasks leased at least once by this worker
--   _resource_key         tasks with this resource key
--   _enqueued_from/_to    enqueued_at in [from, to)
--   _payload_path/_value  payload #> path = value (a JSON value)
-- Which table drives the walk: pending states walk queues.task_pending (bounded by
-- pending work); outcomes walk queues.task_completed by key (failed and abandoned ones
-- by task_completed_unsuccessful_task_idx, which holds only those); a resource key walks
-- task_resource_key_idx; otherwise queues.task by its primary key, newest first. Every
-- walk stops after _limit matches, so its cost is the rows it has to pass over to find
-- them: a filter that matches only old or rare tasks (a payload value, a worker gone for
-- a week, a time range far back) reads the newer tasks in between. The statement is
-- built from constant fragments; every value is a parameter.
-- History is partitioned by task id (sql/queues/partitions.sql), so the newest tasks sit
-- in the newest partition set. Every walk but the pending states' runs the statement once
-- per range of queues.history_walk (a set, or the two newest), newest first, until the
-- page is full: each run has the range's bounds as values ($12, $13), so the planner reads
-- the range's partitions of task, task_completed and task_lease instead of planning,
-- opening and locking all of them and merging every set for the newest 50. Null bounds
-- (the pending states; a task in the default partition) read every partition at once.
create or replace function admin.list_tasks_at(
  _now            timestamptz,
  _task_type      text,
  _state          text,
  _limit          integer,
  _before_task_id bigint,
  _worker_id      text,
  _resource_key   text,
  _enqueued_from  timestamptz,
  _enqueued_to    timestamptz,
  _payload_path   text[],
  _payload_value  jsonb
) returns table (
  task_id       bigint,
  task_type     text,
  state         text,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  lease_count   integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  available_at  timestamptz,
  completed_at  timestamptz
)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _filters text := '';
  _sql text;
  _worker_key integer;
  _lower bigint;
  _upper bigint;
  _found bigint;
  _remaining integer;
  -- The states _state stands for, and the branch that walks them.
  _states text[] := case _state
                      when 'pending' then array['scheduled', 'ready', 'retrying']
                      when 'claimed' then array['running']
                      when 'completed' then array['succeeded']
                      when 'stale' then array['ready', 'running']
                      else array[_state] end;
  _pending_walk boolean := _states <@ array['scheduled', 'ready', 'running', 'retrying'];
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  if _state is not null and not (_state = any (admin.task_states() || array['pending', 'claimed', 'completed', 'stale'])) then
    raise exception 'unknown state %; expected one of %, or pending, claimed, completed or stale', quote_literal(left(_state, 100)),
      array_to_string(admin.task_states(), ', ') using errcode = '22023';
  end if;
  if _before_task_id is not null and _before_task_id < 1 then
    raise exception 'before_task_id must be a positive task id, got %', _before_task_id
      using errcode = '22023';
  end if;
  if _worker_id is not null and length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _resource_key is not null and length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _enqueued_from is not null and _enqueued_to is not null and _enqueued_from >= _enqueued_to then
    raise exception 'enqueued_from (%) must be before enqueued_to (%)', _enqueued_from, _enqueued_to
      using errcode = '22023';
  end if;
  if (_payload_path is null) <> (_payload_value is null) then
    raise exception 'payload_path and payload_value go together: give both or neither' using errcode = '22023';
  end if;
  if _payload_path is not null and (cardinality(_payload_path) not between 1 and 10
      or exists (select 1 from unnest(_payload_path) e where e is null or length(e) not between 1 and 100)) then
    raise exception 'payload_path must have 1 to 10 keys of 1 to 100 characters each' using errcode = '22023';
  end if;

  if _task_type is not null then _filters := _filters || ' and t.task_type = $2'; end if;
  if _worker_id is not null then
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
    _filters := _filters || ' and exists (select 1 from queues.task_lease l where l.task_id = t.task_id
                                             and (l.worker_key = $14 or l.worker_id = $6)
                                             and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))';
  end if;
  if _resource_key is not null then _filters := _filters || ' and t.resource_key = $7'; end if;
  if _enqueued_from is not null then _filters := _filters || ' and t.enqueued_at >= $8'; end if;
  if _enqueued_to is not null then _filters := _filters || ' and t.enqueued_at < $9'; end if;
  if _payload_path is not null then _filters := _filters || ' and t.payload #> $10 = $11'; end if;

  if _state in ('stale', 'claimed') then
    -- stale: a lease is held (current_lease_id) and either expired or its worker is
    -- silent. claimed: a live lease of a worker that is not silent, whose run has not
    -- started (public.worker_tasks says the same).
    _filters := _filters || case _state when 'stale' then ' and p.current_lease_id is not null and (p.available_at <= $1 or '
                                        else ' and not exists (select 1 from queues.task_lease_started st
                                                                where st.task_id = p.task_id and st.task_lease_id = p.current_lease_id)
                                               and not (' end
                         || 'exists (select 1 from queues.task_lease l
                                       left join queues.worker_name n on n.worker_key = l.worker_key
                                       join queues.worker w on w.worker_id = coalesce(l.worker_id, n.worker_id)
                                      where l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
                                        and w.stopped_at is null
                                        and w.last_seen_at < $1 - queues.worker_silence_bound(w.heartbeat_interval_ms)))';
  end if;
  if _pending_walk then
    _sql := 'select p.task_id, p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1),
                    p.priority, t.resource_key, t.max_attempts, p.lease_count,
                    t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
               from queues.task_pending p
              -- lateral + limit 1: one primary-key probe per pending task passed over
              cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
              where admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1) = any ($15)
                and ($4::bigint is null or p.task_id < $4)' || _filters || '
              order by p.task_id desc
              limit $5';
  elsif _state is not null then
    _sql := 'select c.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
                    (select count(*)::integer from queues.task_lease l where l.task_id = c.task_id
                        and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13)),
                    t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
               from queues.task_completed c
              cross join lateral (select * from queues.task x where x.task_id = c.task_id
                                     and ($12::bigint is null or x.task_id >= $12) and ($13::bigint is null or x.task_id < $13)
                                   limit 1) t
              where c.outcome = any ($15)
                and ($4::bigint is null or c.task_id < $4)
                and ($12::bigint is null or c.task_id >= $12) and ($13::bigint is null or c.task_id < $13)' || _filters || '
              order by c.task_id desc
              limit $5';
  else
    _sql := 'select t.task_id, t.task_type,
                    coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1)),
                    t.priority, t.resource_key, t.max_attempts,
                    coalesce(p.lease_count,
                             (select count(*)::integer from queues.task_lease l where l.task_id = t.task_id
                                 and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))),
                    t.enqueued_at, t.scheduled_at, p.available_at, c.completed_at
               from queues.task t
               left join queues.task_pending p on p.task_id = t.task_id
               left join queues.task_completed c on c.task_id = t.task_id
                 and ($12::bigint is null or c.task_id >= $12) and ($13::bigint is null or c.task_id < $13)
              where ($4::bigint is null or t.task_id < $4)
                and ($12::bigint is null or t.task_id >= $12) and ($13::bigint is null or t.task_id < $13)' || _filters || '
              order by t.task_id desc
              limit $5';
  end if;

  if _pending_walk then
    return query execute _sql
      using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, null::bigint, null::bigint, _worker_key,
            _states;
    return;
  end if;
  _remaining := _page;
  for _lower, _upper in
    select w.lower_bound, w.upper_bound from queues.history_walk(_before_task_id) w
     order by w.lower_bound desc nulls first
  loop
    return query execute _sql
      using _now, _task_type, _state, _before_task_id, _remaining, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, _lower, _upper, _worker_key, _states;
    get diagnostics _found = row_count;
    _remaining := _remaining - _found;
    exit when _remaining <= 0;
  end loop;
end;
$$;

create or replace function admin.list_tasks(
  _task_type      text default null,
  _state          text default null,
  _limit          integer default null,
  _before_task_id bigint default null,
  _worker_id      text default null,
  _resource_key   text default null,
  _enqueued_from  timestamptz default null,
  _enqueued_to    timestamptz default null,
  _payload_path   text[] default null,
  _payload_value  jsonb default null
) returns table (
  task_id       bigint,
  task_type     text,
  state         text,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  lease_count   integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  available_at  timestamptz,
  completed_at  timestamptz
)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_tasks_at(now(), _task_type, _state, _limit, _before_task_id, _worker_id,
                                    _resource_key, _enqueued_from, _enqueued_to, _payload_path, _payload_value)
$$;

-- One task with everything recorded about it, as a JSON object:
--   {task: {..., state}, leases: [...], errors: [...], completion: {...} | null,
--    failed_attempts: [...], redriven_to: id | null, redriven_from: id | null,
--    progress: {done, total, note, reported_at, task_lease_id, reports} | null}
-- Raises 23503 when there is no such task.
create or replace function admin.get_task_at(_now timestamptz, _task_id bigint)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;

  select jsonb_build_object(
           'task', to_jsonb(t) || jsonb_build_object(
             'state', coalesce(c.outcome,
                               admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)),
             'available_at', p.available_at,
             'current_lease_id', p.current_lease_id),
           'leases', coalesce((
             select jsonb_agg(jsonb_build_object(
                      'task_lease_id', l.task_lease_id, 'worker_id', l.worker_id,
                      'leased_at', l.leased_at, 'expires_at', l.expires_at,
                      'released_at', l.released_at, 'revoked_at', l.revoked_at, 'extensions', l.extensions,
                      'live', coalesce(l.task_lease_id = p.current_lease_id and p.available_at > _now, false))
                      order by l.task_lease_id)
               from queues.task_lease_effective l where l.task_id = t.task_id), '[]'::jsonb),
           'errors', coalesce((
             select jsonb_agg(to_jsonb(e) - 'task_id' order by e.error_id)
               from queues.error e where e.task_id = t.task_id), '[]'::jsonb),
           -- task_type is the task's own, given above.
           'completion', case when c.task_id is not null then to_jsonb(c) - 'task_id' - 'task_type' end)
    into _result
    from queues.task t
    left join queues.task_pending p on p.task_id = t.task_id
    left join queues.task_completed c on c.task_id = t.task_id
   where t.task_id = _task_id;

  if _result is null then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  return _result || admin.task_retry_facts(_task_id) || admin.task_dashboard_facts(_task_id)
         || queues.task_progress_facts(_task_id);
end;
$$;

create or replace function admin.get_task(_task_id bigint)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.get_task_at(now(), _task_id)
$$;

-- Counts by task type and state: pending states over queues.task_pending (bounded by
-- pending work), completion outcomes over the last _window_seconds only (default 86400;
-- read through task_completed_completed_at_idx), so the cost never follows history.
-- Every registered type appears, with zero rows left out.
create or replace function admin.task_counts_at(_now timestamptz, _window_seconds integer)
  returns table (task_type text, state text, count bigint)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 86400);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 2592000 then
    raise exception 'window_seconds must be between 60 and 2592000 (30 days), got %', _window
      using errcode = '22023';
  end if;
  return query
  select p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state,
         count(*)
    from queues.task_pending p
   group by 1, 2
  union all
  select c.task_type, c.outcome, count(*)
    from admin.completions_between(_now - make_interval(secs => _window), _now) c
   group by 1, 2
   order by 1, 2;
end;
$$;

create or replace function admin.task_counts(_window_seconds integer default null)
  returns table (task_type text, state text, count bigint)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.task_counts_at(now(), _window_seconds)
$$;

-- The registered task types (roles), for filters and forms.
create or replace function admin.list_task_types()
  returns table (task_type text, description text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_type, t.description from queues.task_type t order by t.task_type
$$;

-- Facts of one task the dashboard adds to admin.get_task's answer:
--   {results: [{task_lease_id, result, recorded_at}], cancellation: {reason, cancelled_at} | null,
--    run_now_at: timestamptz | null, type_paused: boolean, process: {process, root_id} | null,
--    heartbeats: [{task_lease_id, extended_at, expires_at}]}
-- Results come from queues.task_result when that table exists (read through the catalog,
-- so this works with and without it).
create or replace function admin.task_dashboard_facts(_task_id bigint)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _results jsonb := '[]';
begin
  if to_regclass('queues.task_result') is not null then
    execute 'select coalesce(jsonb_agg(jsonb_build_object(''task_lease_id'', r.task_lease_id, ''result'', r.result,
                                                         ''recorded_at'', r.recorded_at) order by r.task_lease_id), ''[]'')
               from queues.task_result r where r.task_id = $1'
      into _results using _task_id;
  end if;
  return jsonb_build_object(
    'results', _results,
    'cancellation', (select jsonb_build_object('reason', c.reason, 'cancelled_at', c.cancelled_at)
                       from queues.task_cancelled c where c.task_id = _task_id),
    'run_now_at', (select r.requested_at from queues.task_run_now r where r.task_id = _task_id),
    'type_paused', (select t.task_type = any (queues.paused_task_types()) from queues.task t where t.task_id = _task_id),
    -- The business process the task works for: its payload names the root (X_task_id).
    'process', (select jsonb_build_object('process', p.process, 'root_id', (t.payload ->> (p.process || '_task_id'))::bigint)
                  from queues.task t cross join admin.processes() p
                 where t.task_id = _task_id and t.payload ->> (p.process || '_task_id') ~ '^[0-9]{1,18}$'
                 limit 1),
    'heartbeats', coalesce((
      select jsonb_agg(jsonb_build_object('task_lease_id', x.task_lease_id, 'extended_at', x.extended_at,
                                          'expires_at', x.expires_at) order by x.task_lease_extension_id)
        from queues.task_lease l
        join queues.task_lease_extension x on x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
       where l.task_id = _task_id), '[]'));
end;
$$;
--! EndIncluded admin/tasks.sql

--! split: 603-process-progress.sql
set local lock_timeout = '5s';
-- A process root's progress from its facts (files deleted out of files), on its process-tree node.
--! Included accounts/progress.sql
-- An account deletion's progress from its facts: files deleted out of the account's files
-- (files.account_file_deletion_facts), with a note naming the step it is at. A process
-- exposes its progress by a function S.X_progress(root_id bigint) returning
-- {done, total, note}; admin.process_node_at (the process tree: GET
-- /api/processes/:process/:id/tree) shows it as the node's `progress`.
create or replace function accounts.account_deletion_progress(_account_deletion_task_id bigint)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object(
           'done', ff.num_files_deleted,
           'total', ff.num_files,
           'note', case when ff.num_files_deleted = ff.num_files then 'files deleted'
                        when ff.num_files_without_task = ff.num_files then 'file deletions not started'
                        else format('deleting files (%s stuck)', cardinality(ff.stuck_file_ids)) end)
    from accounts.account_deletion_task t
   cross join lateral files.account_file_deletion_facts(t.account_id) ff
   where t.account_deletion_task_id = _account_deletion_task_id
$$;
--! EndIncluded accounts/progress.sql
--! Included admin/processes.sql
-- The process view: the fact timeline of one business process's root, for the
-- send_email / send_sms (comms), file_deletion (files), account_deletion and
-- account_anonymization (accounts) processes.
--
-- Generic over the domains' naming convention (sql/CONVENTIONS.md, "facts are named for
-- the event"): a process X in schema S has a root S.X_task (key X_task_id) and, when they
-- exist, the facts S.X_supervisor_run, S.X_attempt (key X_attempt_id),
-- S.X_attempt_succeeded, S.X_attempt_failed, S.X_task_succeeded and S.X_task_failed.
-- Table names are read from the catalog and quoted with format('%I.%I'); ids go through
-- `using`. Every read is by the root's key (each fact table is indexed on it).

-- The processes the view knows, with their schemas.
create or replace function admin.processes()
  returns table (process text, schema_name text)
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  values ('send_email', 'comms'), ('send_sms', 'comms'), ('file_deletion', 'files'),
         ('account_deletion', 'accounts'), ('account_anonymization', 'accounts')
$$;

-- The schema-qualified, quoted name of a process's table S.X<suffix>, read from the
-- catalog; null when there is no such table.
create or replace function admin.process_table(_process text, _suffix text)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select format('%I.%I', n.nspname, c.relname)
    from admin.processes() p
    join pg_namespace n on n.nspname = p.schema_name
    join pg_class c on c.relnamespace = n.oid and c.relname = p.process || _suffix and c.relkind = 'r'
   where p.process = _process
$$;

-- Validates a process name and root id: 22004 for nulls, 22023 for an unknown process,
-- 23503 for an unknown root.
create or replace function admin.assert_process_root(_process text, _root_id bigint)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _found boolean;
begin
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _root_id is null then
    raise exception 'root_id must not be null' using errcode = '22004';
  end if;
  execute format('select exists (select 1 from %s r where r.%I = $1)',
                 admin.process_table(_process, '_task'), _process || '_task_id')
    into _found using _root_id;
  if not _found then
    raise exception '% % does not exist', _process, _root_id using errcode = '23503';
  end if;
end;
$$;

-- Every fact of one root, oldest first: started, supervisor_run, attempt,
-- attempt_succeeded, attempt_failed, succeeded, failed; for a root that domain retention
-- pruned (internal.process_pruned), one 'pruned' row instead. `detail` is the fact row as JSON
-- without its keys and timestamp. An account deletion also shows its children: the
-- account's anonymization and the deletions of the account's files (their `process` and
-- `root_id` say which).
-- The queue tasks a process names (an attempt's task_id: the channel task that carried
-- it) may be gone while the process's facts stay: retention dropped the partition set
-- that held them (queues.history_partition_dropped). For each such set, one
-- 'queue_history_pruned' row at the time of the drop, with detail {task_ids (this root's
-- tasks in the set), lower_bound, upper_bound, last_completed_at, dropped_at}.
create or replace function admin.process_timeline(_process text, _root_id bigint)
  returns table (at timestamptz, process text, root_id bigint, fact text, attempt_id bigint, detail jsonb)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text := _process || '_task_id';
  _attempt_key text := _process || '_attempt_id';
  _attempt text;
  _parts text[] := '{}';
  _table text;
  _child record;
  _pruned internal.process_pruned;
begin
  begin
    perform admin.assert_process_root(_process, _root_id);
  exception when foreign_key_violation then
    -- A root that domain retention removed: one 'pruned' row says when and why.
    _pruned := internal.process_root_pruned(_process, _root_id);
    if _pruned.process_pruned_id is null then
      raise;
    end if;
    return query select _pruned.pruned_at, _process, _root_id, 'pruned'::text, null::bigint,
                        jsonb_build_object('finished_before', _pruned.finished_before,
                                           'pruned_at', _pruned.pruned_at);
    return;
  end;
  _attempt := admin.process_table(_process, '_attempt');

  _parts := _parts || format(
    'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint, to_jsonb(f) - %L - ''created_at''
       from %s f where f.%I = $1',
    _process, _root_id, 'started', _key, admin.process_table(_process, '_task'), _key);
  foreach _table in array array['_supervisor_run', '_task_succeeded', '_task_failed'] loop
    if admin.process_table(_process, _table) is not null then
      _parts := _parts || format(
        'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint,
                to_jsonb(f) - %L - %L - ''created_at''
           from %s f where f.%I = $1',
        _process, _root_id,
        case _table when '_supervisor_run' then 'supervisor_run'
                    when '_task_succeeded' then 'succeeded' else 'failed' end,
        _key, _process || _table || '_id', admin.process_table(_process, _table), _key);
    end if;
  end loop;
  if _attempt is not null then
    _parts := _parts || format(
      'select f.created_at, %L::text, %s::bigint, ''attempt''::text, f.%I, to_jsonb(f) - %L - %L - ''created_at''
         from %s f where f.%I = $1',
      _process, _root_id, _attempt_key, _key, _attempt_key, _attempt, _key);
    foreach _table in array array['_attempt_succeeded', '_attempt_failed'] loop
      if admin.process_table(_process, _table) is not null then
        _parts := _parts || format(
          'select f.created_at, %L::text, %s::bigint, %L::text, f.%I, to_jsonb(f) - %L - ''created_at''
             from %s f join %s a on a.%I = f.%I where a.%I = $1',
          _process, _root_id, substr(_table, 2), _attempt_key, _attempt_key,
          admin.process_table(_process, _table), _attempt, _attempt_key, _attempt_key, _key);
      end if;
    end loop;
    if exists (select 1 from pg_attribute a
                where a.attrelid = _attempt::regclass and a.attname = 'task_id' and not a.attisdropped) then
      -- history_partition_dropped has a row per dropped set: a few hundred a year.
      _parts := _parts || format(
        'select d.dropped_at, %L::text, %s::bigint, ''queue_history_pruned''::text, null::bigint,
                jsonb_build_object(''task_ids'', jsonb_agg(a.task_id order by a.task_id),
                                   ''lower_bound'', d.lower_bound, ''upper_bound'', d.upper_bound,
                                   ''last_completed_at'', d.last_completed_at, ''dropped_at'', d.dropped_at)
           from %s a
           join queues.history_partition_dropped d on a.task_id >= d.lower_bound and a.task_id < d.upper_bound
          where a.%I = $1
          group by d.history_partition_dropped_id',
        _process, _root_id, _attempt, _key);
    end if;
  end if;

  return query execute
    'select * from (' || array_to_string(_parts, ' union all ') || ') t order by 1, 4'
    using _root_id;

  -- An account deletion's children, by account.
  if _process = 'account_deletion' then
    for _child in
      select 'account_anonymization' as process, x.account_anonymization_task_id as root_id
        from accounts.account_deletion_task d
        join accounts.account_anonymization_task x on x.account_id = d.account_id
       where d.account_deletion_task_id = _root_id
      union all
      select 'file_deletion', fd.file_deletion_task_id
        from accounts.account_deletion_task d
        join files.file f on f.account_id = d.account_id
        join files.file_deletion_task fd on fd.file_id = f.file_id
       where d.account_deletion_task_id = _root_id
    loop
      return query select * from admin.process_timeline(_child.process, _child.root_id);
    end loop;
  end if;
end;
$$;

-- Roots of one process newest first, _limit per page (default 50, at most 500), older
-- than _before_root_id, with their status (succeeded, failed or running) and the root
-- row's other columns as `subject`.
create or replace function admin.list_process_roots(
  _process        text,
  _limit          integer default null,
  _before_root_id bigint default null
) returns table (root_id bigint, created_at timestamptz, status text, subject jsonb)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _key text := _process || '_task_id';
begin
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _before_root_id is not null and _before_root_id < 1 then
    raise exception 'before_root_id must be a positive id, got %', _before_root_id using errcode = '22023';
  end if;
  return query execute format(
    'select r.%1$I, r.created_at,
            case when exists (select 1 from %3$s s where s.%1$I = r.%1$I) then ''succeeded''
                 when exists (select 1 from %4$s x where x.%1$I = r.%1$I) then ''failed''
                 else ''running'' end,
            to_jsonb(r) - %1$L - ''created_at''
       from %2$s r
      where $1 is null or r.%1$I < $1
      order by r.%1$I desc
      limit $2',
    _key, admin.process_table(_process, '_task'),
    admin.process_table(_process, '_task_succeeded'), admin.process_table(_process, '_task_failed'))
  using _before_root_id, _page;
end;
$$;

-- The process names the view knows (for the API's list).
create or replace function admin.list_processes()
  returns table (process text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.process from admin.processes() p order by 1
$$;

-- A process root's own progress, when its process defines S.X_progress(bigint) returning
-- {done, total, note} from its facts (accounts.account_deletion_progress: files deleted out
-- of files); null otherwise. The function's name is read from the catalog.
create or replace function admin.process_progress(_process text, _root_id bigint)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _function text;
  _progress jsonb;
begin
  select format('%I.%I', n.nspname, f.proname) into _function
    from admin.processes() p
    join pg_namespace n on n.nspname = p.schema_name
    join pg_proc f on f.pronamespace = n.oid and f.proname = p.process || '_progress'
   where p.process = _process and f.pronargs = 1 and f.proargtypes[0] = 'bigint'::regtype
   limit 1;
  if _function is null then
    return null;
  end if;
  execute format('select %s($1)', _function) into _progress using _root_id;
  return _progress;
end;
$$;
--! EndIncluded admin/processes.sql
--! Included admin/process_tree.sql
-- The process view as a supervision tree: each node (a process root) with its state,
-- attempts and the time of its newest fact, and its children (an account deletion
-- supervises one file deletion per file of the account, then the account's
-- anonymization). Generic over the naming convention described in sql/admin/processes.sql;
-- table names come from the catalog (admin.process_table), ids go through `using`.
--
-- A node's status: succeeded or failed (its terminal fact), else stuck when its newest
-- _stuck_failed_attempts (3) attempts all failed or nothing was recorded for it for
-- _stuck_after_seconds (default 600), else running.

-- One node, without children, at _now.
create or replace function admin.process_node_at(_now timestamptz, _process text, _root_id bigint, _stuck_after_seconds integer)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text := _process || '_task_id';
  _akey text := _process || '_attempt_id';
  _attempt text := admin.process_table(_process, '_attempt');
  _sql text;
  _node jsonb;
  _status text;
begin
  _sql := format('select jsonb_build_object(
      ''process'', %L::text, ''root_id'', r.%I, ''created_at'', r.created_at,
      ''subject'', to_jsonb(r) - %L - ''created_at'',
      ''succeeded_at'', %s, ''failure'', %s, ''supervisor_runs'', %s,
      ''attempts'', %s, ''failed_attempts'', %s, ''recent_attempts_failed'', %s, ''last_fact_at'', greatest(r.created_at, %s, %s))
    from %s r where r.%I = $1',
    _process, _key, _key,
    case when admin.process_table(_process, '_task_succeeded') is null then 'null::timestamptz'
         else format('(select s.created_at from %s s where s.%I = r.%I)', admin.process_table(_process, '_task_succeeded'), _key, _key) end,
    case when admin.process_table(_process, '_task_failed') is null then 'null::jsonb'
         else format('(select to_jsonb(f) - %L from %s f where f.%I = r.%I)', _key, admin.process_table(_process, '_task_failed'), _key, _key) end,
    case when admin.process_table(_process, '_supervisor_run') is null then '0'
         else format('(select count(*) from %s s where s.%I = r.%I)', admin.process_table(_process, '_supervisor_run'), _key, _key) end,
    case when _attempt is null then '0' else format('(select count(*) from %s a where a.%I = r.%I)', _attempt, _key, _key) end,
    case when _attempt is null or admin.process_table(_process, '_attempt_failed') is null then '0'
         else format('(select count(*) from %s a join %s f on f.%I = a.%I where a.%I = r.%I)',
                     _attempt, admin.process_table(_process, '_attempt_failed'), _akey, _akey, _key, _key) end,
    -- the newest three attempts exist and all failed
    case when _attempt is null or admin.process_table(_process, '_attempt_failed') is null then 'false'
         else format('(select count(*) = 3 and bool_and(f.%I is not null) from (select a.%I from %s a where a.%I = r.%I order by a.%I desc limit 3) a left join %s f on f.%I = a.%I)',
                     _akey, _akey, _attempt, _key, _key, _akey, admin.process_table(_process, '_attempt_failed'), _akey, _akey) end,
    case when admin.process_table(_process, '_supervisor_run') is null then 'null::timestamptz'
         else format('(select max(s.created_at) from %s s where s.%I = r.%I)', admin.process_table(_process, '_supervisor_run'), _key, _key) end,
    case when _attempt is null then 'null::timestamptz' else format('(select max(a.created_at) from %s a where a.%I = r.%I)', _attempt, _key, _key) end,
    admin.process_table(_process, '_task'), _key);
  execute _sql into _node using _root_id;
  if _node is null then
    return null;
  end if;
  _status := case
    when _node ->> 'succeeded_at' is not null then 'succeeded'
    when _node -> 'failure' <> 'null'::jsonb then 'failed'
    when (_node ->> 'recent_attempts_failed')::boolean
      or (_node ->> 'last_fact_at')::timestamptz < _now - make_interval(secs => coalesce(_stuck_after_seconds, 600)) then 'stuck'
    else 'running' end;
  return _node || jsonb_build_object('status', _status, 'progress', admin.process_progress(_process, _root_id));
end;
$$;

-- The children of one node (ids of other processes' roots), in the order they run.
create or replace function admin.process_children(_process text, _root_id bigint)
  returns table (process text, root_id bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select 'file_deletion', fd.file_deletion_task_id
    from accounts.account_deletion_task d
    join files.file f on f.account_id = d.account_id
    join files.file_deletion_task fd on fd.file_id = f.file_id
   where _process = 'account_deletion' and d.account_deletion_task_id = _root_id
  union all
  select 'account_anonymization', x.account_anonymization_task_id
    from accounts.account_deletion_task d
    join accounts.account_anonymization_task x on x.account_id = d.account_id
   where _process = 'account_deletion' and d.account_deletion_task_id = _root_id
$$;

-- The tree of one root as JSON: the node (admin.process_node_at) with `children`, a list
-- of nodes, and `stuck_descendants`, how many nodes below it are stuck or failed.
-- 22004/22023/23503 as admin.assert_process_root.
create or replace function admin.process_tree_at(_now timestamptz, _process text, _root_id bigint, _stuck_after_seconds integer)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _node jsonb;
  _children jsonb := '[]';
  _child record;
  _sub jsonb;
  _bad integer := 0;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _stuck_after_seconds is not null and _stuck_after_seconds not between 1 and 604800 then
    raise exception 'stuck_after_seconds must be between 1 and 604800, got %', _stuck_after_seconds using errcode = '22023';
  end if;
  perform admin.assert_process_root(_process, _root_id);
  _node := admin.process_node_at(_now, _process, _root_id, _stuck_after_seconds);
  for _child in select * from admin.process_children(_process, _root_id) loop
    _sub := admin.process_tree_at(_now, _child.process, _child.root_id, _stuck_after_seconds);
    _bad := _bad + (_sub ->> 'stuck_descendants')::integer
            + case when _sub ->> 'status' in ('stuck', 'failed') then 1 else 0 end;
    _children := _children || jsonb_build_array(_sub);
  end loop;
  return _node || jsonb_build_object('children', _children, 'stuck_descendants', _bad);
end;
$$;

create or replace function admin.process_tree(_process text, _root_id bigint)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.process_tree_at(now(), _process, _root_id, null)
$$;

-- Roots of one process: the page of the _limit newest roots older than _before_root_id
-- (keyset by root id), listed stuck first, then failed, then running, then succeeded,
-- newest first within each; a root counts as stuck when it or a node below it is stuck.
create or replace function admin.list_process_roots_at(
  _now timestamptz, _process text, _limit integer, _before_root_id bigint
) returns table (root_id bigint, created_at timestamptz, status text, subject jsonb, attempts bigint,
                 stuck_descendants integer, last_fact_at timestamptz)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _before_root_id is not null and _before_root_id < 1 then
    raise exception 'before_root_id must be a positive id, got %', _before_root_id using errcode = '22023';
  end if;
  return query
  select (t ->> 'root_id')::bigint, (t ->> 'created_at')::timestamptz,
         case when (t ->> 'stuck_descendants')::integer > 0 and t ->> 'status' = 'running' then 'stuck' else t ->> 'status' end,
         t -> 'subject', (t ->> 'attempts')::bigint, (t ->> 'stuck_descendants')::integer, (t ->> 'last_fact_at')::timestamptz
    from (select admin.process_tree_at(_now, _process, r.root_id, null) as t
            from admin.list_process_roots(_process, _page, _before_root_id) r) x
   order by case when (t ->> 'stuck_descendants')::integer > 0 and t ->> 'status' = 'running' then 0
                 else array_position(array['stuck', 'failed', 'running', 'succeeded'], t ->> 'status') - 1 end,
            (t ->> 'root_id')::bigint desc;
end;
$$;

create or replace function admin.list_process_roots_ranked(_process text, _limit integer default null, _before_root_id bigint default null)
  returns table (root_id bigint, created_at timestamptz, status text, subject jsonb, attempts bigint,
                 stuck_descendants integer, last_fact_at timestamptz)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_process_roots_at(now(), _process, _limit, _before_root_id)
$$;
--! EndIncluded admin/process_tree.sql

--! split: 700-process-statements.sql
set local lock_timeout = '5s';
-- Fewer statements per channel process (BENCHMARKS.md, "business processes"): a channel
-- task's before_handler and its provider-call check in one statement
-- (internal.run_before_provider_call); internal.run_function calls its target through
-- internal.call_runnable (a kept plan) instead of a catalog look-up and an EXECUTE; a
-- supervisor run checks its isolation level in an expression, not a statement of its own;
-- the comms entry points call the process's own functions directly (comms/channel.sql,
-- made again by the registrations in email.sql and sms.sql). The grants: 900-privileges.sql.
--! Included internal/run_function.sql
-- internal.run_function(function_name, payload): the worker's way into business SQL.
--
-- The name is checked against a strict pattern, resolved to exactly one function
-- schema.name(jsonb) returning jsonb, checked against the allowlist and the caller's
-- EXECUTE privilege, and called through format('%I.%I'), never by pasting the name.
-- pg_catalog, information_schema and temporary schemas are never runnable.

-- Registers a function as runnable. Owner only; called from migrations.
create or replace function internal.register_runnable_function(_function regprocedure)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _proc record;
begin
  if _function is null then
    raise exception 'function must not be null' using errcode = '22004';
  end if;
  select n.nspname, p.proname, p.prorettype, p.pronargs, p.proargtypes[0] as argtype, p.prokind
    into _proc
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where p.oid = _function;
  if _proc.nspname in ('pg_catalog', 'information_schema') or _proc.nspname like 'pg\_%' then
    raise exception 'functions in % cannot be runnable', _proc.nspname using errcode = '42501';
  end if;
  if _proc.prokind <> 'f' or _proc.pronargs <> 1 or _proc.argtype <> 'jsonb'::regtype
     or _proc.prorettype <> 'jsonb'::regtype then
    raise exception '% must be a function taking one jsonb argument and returning jsonb', _function
      using errcode = '22023';
  end if;
  if _proc.nspname !~ '^[a-z_][a-z0-9_]*$' or _proc.proname !~ '^[a-z_][a-z0-9_]*$' then
    raise exception '% must have a lowercase schema.name made of a-z, 0-9 and _', _function
      using errcode = '22023';
  end if;
  insert into internal.runnable_function (function_schema, function_name)
  values (_proc.nspname, _proc.proname)
  on conflict do nothing;
  if found then
    perform internal.build_call_runnable();
  end if;
end;
$$;

-- (Re)builds internal.call_runnable(function_name text, payload jsonb) returns jsonb from
-- internal.runnable_function: one static call per registered function, chosen by its
-- name (schema.name), so that each call's plan is kept for the session (an EXECUTE is
-- planned on every call). A name it does not list raises 42883. Security invoker: the
-- caller needs EXECUTE on the target itself. queues.run_steps calls it for each step.
-- internal.register_runnable_function calls this; its grants (internal/privileges.sql)
-- stay with the function.
create or replace function internal.build_call_runnable()
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _cases text;
begin
  select string_agg(format('    when %L then return %I.%I(payload);',
                           r.function_schema || '.' || r.function_name, r.function_schema, r.function_name),
                    e'\n' order by r.function_schema, r.function_name)
    into _cases
    from internal.runnable_function r;
  execute format($f$
create or replace function internal.call_runnable(function_name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $body$
begin
  case function_name
%s
    else
      raise exception 'function %% is not registered as runnable', function_name using errcode = '42883';
  end case;
end;
$body$
$f$, coalesce(_cases, '    when null then return null;'));
end;
$$;

-- Resolves a runnable function name to its OID, or raises a clear error. Security
-- definer so that callers need no privilege on the allowlist table.
create or replace function internal.resolve_runnable_function(_function_name text)
  returns regprocedure
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _parts text[];
  _oid regprocedure;
begin
  if _function_name is null then
    raise exception 'function_name must not be null' using errcode = '22004';
  end if;
  _parts := regexp_match(_function_name, '^([a-z_][a-z0-9_]{0,62})\.([a-z_][a-z0-9_]{0,62})$');
  if _parts is null then
    raise exception 'invalid function_name %: expected schema.function in lowercase letters, digits and _, with no argument list',
      quote_literal(left(_function_name, 100)) using errcode = '22023';
  end if;
  if _parts[1] in ('pg_catalog', 'information_schema') or _parts[1] like 'pg\_%' then
    raise exception 'function % is in a system or temporary schema and is never runnable',
      _function_name using errcode = '42501';
  end if;
  _oid := to_regprocedure(format('%I.%I(jsonb)', _parts[1], _parts[2]));
  if _oid is null then
    raise exception 'function %(jsonb) does not exist', _function_name using errcode = '42883';
  end if;
  if not exists (select 1 from internal.runnable_function r
                  where r.function_schema = _parts[1] and r.function_name = _parts[2]) then
    raise exception 'function % is not registered as runnable', _function_name
      using errcode = '42501',
            hint = 'Register it in a migration: select internal.register_runnable_function(''schema.name(jsonb)'');';
  end if;
  if (select p.prorettype from pg_proc p where p.oid = _oid) <> 'jsonb'::regtype then
    raise exception 'function % does not return jsonb', _function_name using errcode = '42804';
  end if;
  return _oid;
end;
$$;

-- Runs a registered function with the payload and returns its jsonb. Security invoker:
-- the caller needs EXECUTE on the target itself. Resolved and checked here, then called
-- through internal.call_runnable, whose static call keeps its plan for the session (an
-- EXECUTE was planned on every call, after a catalog look-up of its name).
create or replace function internal.run_function(function_name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _oid regprocedure := internal.resolve_runnable_function(function_name);
begin
  if not has_function_privilege(_oid, 'execute') then
    raise exception 'permission denied: % may not execute %', current_user, function_name
      using errcode = '42501';
  end if;
  return internal.call_runnable(function_name, payload);
end;
$$;

-- A runnable no-op: returns the success envelope. Used by benchmarks and smoke tests.
create or replace function internal.noop(payload jsonb) returns jsonb
  language sql immutable
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select jsonb_build_object('success', true) $$;
--! EndIncluded internal/run_function.sql
--! Included internal/delivery.sql
-- Delivery modes of channel tasks (internal.channel_delivery_mode):
--   at_least_once  the worker calls the provider on every lease until an outcome is
--                  recorded; a crash between the call and the success handler repeats
--                  the call, so the provider must deduplicate (Resend's Idempotency-Key).
--   at_most_once   the worker records the start of the call (internal.provider_call_started,
--                  committed) before making it; a later lease of the same task that finds a
--                  started call without an outcome does not call again: the task fails with
--                  an "unknown outcome" error, which the error handler records.

-- The delivery mode of a task type ('at_least_once' when not listed).
create or replace function internal.delivery_mode(_task_type text)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((select m.delivery_mode from internal.channel_delivery_mode m where m.task_type = _task_type),
                  'at_least_once')
$$;

-- The prefix of the error an at-most-once task fails with when a previous lease started
-- its provider call and never recorded an outcome. Supervisors recognise it.
create or replace function internal.unknown_outcome_prefix()
  returns text
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$ select 'unknown outcome: ' $$;

-- The body of internal.start_provider_call_at (_at_most_once true); with _at_most_once
-- false it answers only for an at-least-once task, and returns NULL for an at-most-once
-- one (nothing recorded): internal.check_at_least_once_provider_call.
create or replace function internal.provider_call_start(_now timestamptz, payload jsonb, _at_most_once boolean)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'task_id');
  _lease_id bigint := internal.id_from_payload(payload, 'task_lease_id');
  _task_type text;
  _mode text;
  _started record;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_id is null or _lease_id is null then
    return internal.validation_failure('task_id and task_lease_id must be positive integers');
  end if;
  select t.task_type into _task_type from queues.task t where t.task_id = _task_id;
  if _task_type is null then
    return internal.validation_failure(format('task %s not found', _task_id));
  end if;
  _mode := internal.delivery_mode(_task_type);
  if _mode <> 'at_least_once' and not _at_most_once then
    return null;
  end if;
  -- The live lease of an open task: its current lease (a completed task has none), not
  -- expired, heartbeats applied; judged as the completion that follows the call is fenced.
  if not coalesce(queues.current_lease_expiry(_task_id, _lease_id) > _now, false) then
    return internal.validation_failure(format('lease %s is not the live lease of task %s; not calling the provider', _lease_id, _task_id));
  end if;

  if _mode = 'at_least_once' then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('delivery_mode', _mode, 'proceed', true));
  end if;

  select s.task_lease_id, s.started_at into _started
    from internal.provider_call_started s
   where s.task_id = _task_id and s.task_lease_id <> _lease_id
   order by s.task_lease_id
   limit 1;
  if found then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object(
      'delivery_mode', _mode, 'proceed', false,
      'error', format('%slease %s started the %s provider call at %s and no outcome was recorded; at-most-once delivery: not calling again',
                      internal.unknown_outcome_prefix(), _started.task_lease_id, _task_type, _started.started_at)));
  end if;
  insert into internal.provider_call_started (task_id, task_lease_id) values (_task_id, _lease_id)
  on conflict do nothing;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object('delivery_mode', _mode, 'proceed', true));
end;
$$;

-- Runnable by the worker just before a provider call, in its own transaction.
-- Payload: {task_id, task_lease_id}. Returns {success: true, payload: {delivery_mode,
-- proceed}}: at_least_once → proceed, nothing recorded; at_most_once → records
-- provider_call_started for this lease and proceeds, unless an earlier lease of the task
-- started the call: then proceed is false and payload.error says why (the worker fails
-- the task with it instead of calling). A lease that is not the task's live lease (its
-- current lease, as queues.current_lease_expiry defines it, with heartbeats applied, not
-- expired at _now), or a completed task, is a validation failure (nothing recorded, no
-- call). Owner only, so tests can move the clock; the worker calls
-- internal.start_provider_call, which passes now().
create or replace function internal.start_provider_call_at(_now timestamptz, payload jsonb)
  returns jsonb
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  select internal.provider_call_start(_now, payload, true)
$$;

-- internal.start_provider_call_at at now(): what the worker runs before a provider call.
create or replace function internal.start_provider_call(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select internal.provider_call_start(now(), payload, true)
$$;

-- The provider-call check of an at-least-once task, made with its before_handler
-- (internal.run_before_provider_call): internal.start_provider_call's answer (which
-- records nothing for such a task), or NULL for an at-most-once task, whose start the
-- worker records by a call of its own once it has checked the provider payload (nothing
-- is recorded for a call the worker then does not make). Payload as
-- internal.start_provider_call's.
create or replace function internal.check_at_least_once_provider_call(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return internal.provider_call_start(now(), payload, false);
end;
$$;

-- A channel task's before_handler and its provider-call check in one statement, one
-- round trip for the worker: internal.run_function(_before_handler, _payload), as the
-- caller (security invoker: the worker's privileges, as when it calls the handler
-- itself), then, when the handler returned a success envelope, the check
-- (internal.check_at_least_once_provider_call) for _task_id under _task_lease_id.
--   before_result  what the handler returned (a raise of the handler raises: the
--                  statement fails, and nothing of it commits)
--   start_result   the check's envelope, as internal.start_provider_call returns it; NULL
--                  when no check was made (the handler did not succeed, or the task is
--                  at-most-once): the worker calls internal.start_provider_call itself
--   start_error    the message of a raise of the check (its error, not the handler's)
create or replace function internal.run_before_provider_call(
  _before_handler text, _payload jsonb, _task_id bigint, _task_lease_id bigint,
  out before_result jsonb, out start_result jsonb, out start_error text
)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
begin
  before_result := internal.run_function(_before_handler, _payload);
  if jsonb_typeof(before_result) = 'object' and before_result -> 'success' = 'true'::jsonb then
    begin
      start_result := internal.check_at_least_once_provider_call(
        jsonb_build_object('task_id', _task_id, 'task_lease_id', _task_lease_id));
    exception
      when serialization_failure or deadlock_detected then
        raise;
      when others then
        start_error := sqlerrm;
    end;
  end if;
end;
$$;
--! EndIncluded internal/delivery.sql
--! Included internal/channel_process.sql
-- The skeleton of a channel process (a supervisor that schedules provider calls through
-- a channel task), written once. A process registers its names and limits in
-- internal.channel_process; its own file keeps only its decisions (what the kickoff
-- accepts, what the provider is sent) and thin named wrappers over these blocks.
--
-- The supervisor is built from the blocks of sql/internal/process_supervisor.sql.
--
-- A channel process <schema>.<name> has these tables (internal.create_channel_process_tables
-- makes all but the root):
--   <name>_task               the root, created by the process (its domain columns)
--   <name>_supervisor_run     one row per non-terminal supervisor run (run cap), with the
--                             queue task of the run it scheduled (next_task_id)
--   <name>_attempt            one row per scheduled channel task (task_id: its queue task)
--   <name>_attempt_succeeded  <name>_attempt_failed   at most one each per attempt
--   <name>_task_succeeded     <name>_task_failed      terminal facts
-- Keys: <name>_task_id, <name>_attempt_id. Table names reach dynamic SQL only through
-- format('%I.%I') from a registered row whose tables were found in the catalog.
-- Registration also makes the process's own functions, static SQL over those tables
-- (internal.create_channel_process_functions): the supervisor, its facts, and the
-- handlers' bookkeeping. The generic functions at the end of this file call them.

-- Registers (or updates) a channel process, and (re)makes its functions
-- (internal.create_channel_process_functions). Raises 22023 naming a missing table.
-- _attempt_payload: optional function (root id bigint) returning jsonb fields added to
-- each channel task's payload (file deletion adds the file_id).
create or replace function internal.register_channel_process(
  _schema text, _name text, _task_type text,
  _supervisor text, _before_handler text, _success_handler text, _error_handler text,
  _max_attempts integer, _max_supervisor_runs integer, _backoff_cap_seconds integer default 3600,
  _attempt_payload regprocedure default null
) returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _suffix text;
begin
  foreach _suffix in array array['_task', '_supervisor_run', '_attempt', '_attempt_succeeded', '_attempt_failed',
                                 '_task_succeeded', '_task_failed'] loop
    if to_regclass(format('%I.%I', _schema, _name || _suffix)) is null then
      raise exception 'channel process %.%: table %.% does not exist', _schema, _name, _schema, _name || _suffix
        using errcode = '22023';
    end if;
  end loop;
  if not exists (select 1 from pg_attribute a
                  where a.attrelid = to_regclass(format('%I.%I', _schema, _name || '_supervisor_run'))
                    and a.attname = 'next_task_id' and not a.attisdropped) then
    raise exception 'channel process %.%: table %.% has no column next_task_id (internal.create_channel_process_tables adds it)',
      _schema, _name, _schema, _name || '_supervisor_run' using errcode = '22023';
  end if;
  insert into internal.channel_process as p
    (process_schema, process_name, task_type, supervisor, before_handler, success_handler, error_handler,
     max_attempts, max_supervisor_runs, backoff_cap_seconds, attempt_payload)
  values (_schema, _name, _task_type, _supervisor, _before_handler, _success_handler, _error_handler,
          _max_attempts, _max_supervisor_runs, _backoff_cap_seconds, _attempt_payload)
  on conflict (process_schema, process_name) do update
     set task_type = excluded.task_type, supervisor = excluded.supervisor,
         before_handler = excluded.before_handler, success_handler = excluded.success_handler,
         error_handler = excluded.error_handler, max_attempts = excluded.max_attempts,
         max_supervisor_runs = excluded.max_supervisor_runs, backoff_cap_seconds = excluded.backoff_cap_seconds,
         attempt_payload = excluded.attempt_payload;
  perform internal.create_channel_process_functions(_schema, _name);
end;
$$;

-- Creates the fact tables of a channel process beside its root <schema>.<name>_task
-- (which must exist, with a bigint identity key <name>_task_id), with the append-only
-- trigger on each. Idempotent. Owner only: migrations call it.
create or replace function internal.create_channel_process_tables(_schema text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _root text := format('%I.%I', _schema, _name || '_task');
  _attempt text := format('%I.%I', _schema, _name || '_attempt');
  _rk text := _name || '_task_id';
  _ak text := _name || '_attempt_id';
  _table text;
begin
  if to_regclass(_root) is null then
    raise exception 'channel process %.%: create its root table %.% first', _schema, _name, _schema, _name || '_task'
      using errcode = '22023';
  end if;
  execute format('create table if not exists %I.%I (%I bigint generated always as identity primary key,
                    %I bigint not null references %s on delete cascade, created_at timestamptz not null default now())',
                 _schema, _name || '_supervisor_run', _name || '_supervisor_run_id', _rk, _root);
  -- next_task_id: the queue task of the run this run scheduled. Queue tasks are named
  -- without foreign keys (here and in <name>_attempt.task_id): history retention drops
  -- whole partitions of queues.task.
  execute format('alter table %I.%I add column if not exists next_task_id bigint', _schema, _name || '_supervisor_run');
  execute format('create index if not exists %I on %I.%I (%I)', _name || '_supervisor_run_task_idx', _schema, _name || '_supervisor_run', _rk);
  execute format('create table if not exists %s (%I bigint generated always as identity primary key,
                    %I bigint not null references %s on delete cascade,
                    task_id bigint,
                    created_at timestamptz not null default now())', _attempt, _ak, _rk, _root);
  execute format('create index if not exists %I on %s (%I)', _name || '_attempt_task_idx', _attempt, _rk);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    worker_payload jsonb, created_at timestamptz not null default now())',
                 _schema, _name || '_attempt_succeeded', _ak, _attempt);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    error_message text not null, created_at timestamptz not null default now())',
                 _schema, _name || '_attempt_failed', _ak, _attempt);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    created_at timestamptz not null default now())', _schema, _name || '_task_succeeded', _rk, _root);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    reason text not null, created_at timestamptz not null default now())', _schema, _name || '_task_failed', _rk, _root);
  foreach _table in array array['_task', '_supervisor_run', '_attempt', '_attempt_succeeded', '_attempt_failed',
                                '_task_succeeded', '_task_failed'] loop
    if not exists (select 1 from pg_trigger
                    where tgrelid = to_regclass(format('%I.%I', _schema, _name || _table)) and tgname = 'forbid_update') then
      execute format('create trigger forbid_update before update on %I.%I
                        for each statement execute function queues.forbid_fact_update()', _schema, _name || _table);
    end if;
  end loop;
end;
$$;

-- The functions of a channel process, made from its table names once (at registration)
-- instead of on every call: their SQL is static, so a connection plans it once and keeps
-- the plan. (Built per call with format() and EXECUTE, planning took most of the
-- database's time per email process: BENCHMARKS.md, "where a task's time goes".)
-- Identifiers reach the text only through format('%I'), literals through format('%L').
-- Owner only, like the tables; the generic functions below call them.
--   <name>_process_facts(root_id)             the facts (internal.channel_process_facts)
--   <name>_close_given_up_attempts(root_id)   records a failure for every outstanding attempt
--                                             whose channel task the queue gave up on
--                                             (internal.queue_gave_up_message); how many
--   <name>_supervise(payload)                 the supervisor (internal.run_channel_supervisor)
--   <name>_attempt_refusal(attempt_id, verb)  internal.channel_attempt_refusal
--   <name>_record_attempt_success(payload)    internal.record_channel_attempt_success
--   <name>_record_attempt_failure(payload)    internal.record_channel_attempt_failure
create or replace function internal.create_channel_process_functions(_schema text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p internal.channel_process := internal.get_channel_process(_schema, _name);
  _suffixes text[] := array['_process_facts', '_close_given_up_attempts', '_supervise', '_attempt_refusal',
                            '_record_attempt_success', '_record_attempt_failure'];
  -- The names (and the settings) every template below refers to, by position.
  _names text[] := array[
    _schema,                                      -- 1
    _name || '_task',                             -- 2  the root
    _name || '_supervisor_run',                   -- 3
    _name || '_attempt',                          -- 4
    _name || '_attempt_succeeded',                -- 5
    _name || '_attempt_failed',                   -- 6
    _name || '_task_succeeded',                   -- 7
    _name || '_task_failed',                      -- 8
    _name || '_task_id',                          -- 9  the root's key
    _name || '_attempt_id',                       -- 10 the attempt's key
    _name,                                        -- 11
    _name || _suffixes[1], _name || _suffixes[2], _name || _suffixes[3],    -- 12, 13, 14
    _name || _suffixes[4], _name || _suffixes[5], _name || _suffixes[6],    -- 15, 16, 17
    -- 18: the fields the process adds to each channel task's payload (its attempt_payload)
    coalesce((select format('%I.%I(_task_id)', n.nspname, f.proname)
                from pg_proc f join pg_namespace n on n.oid = f.pronamespace
               where f.oid = _p.attempt_payload), '''{}''::jsonb'),
    format('%I.%I', _schema, _name || '_attempt'),  -- 19 the attempt table, for its sequence
    -- 20: the settings of every function. Every row is read by key, and a plan is made
    -- once per connection, perhaps while the tables were small (see sql/CONVENTIONS.md).
    'set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off'
  ];
  _suffix text;
begin
  execute format($f$
    create or replace function %1$I.%12$I(
      _root_id bigint,
      out has_task_succeeded  boolean,
      out task_failure        text,
      out has_success         boolean,
      out num_attempts        integer,
      out num_failures        integer,
      out num_outstanding     integer,
      out num_runs            integer,
      out has_unknown_outcome boolean
    )
      language plpgsql stable
      %20$s
    as $body$
    begin
      -- One pass over the root's attempts (its index), each attempt's outcomes probed by
      -- primary key (scalar subqueries: no join order for the planner to get wrong), once
      -- (materialized: each probe is used by several aggregates).
      with attempt as materialized (
        select (select true from %1$I.%5$I s where s.%10$I = a.%10$I) as succeeded,
               (select f.error_message from %1$I.%6$I f where f.%10$I = a.%10$I) as failure
          from %1$I.%4$I a
         where a.%9$I = _root_id
      )
      select (select true from %1$I.%7$I x where x.%9$I = _root_id) is not null,
             (select x.reason from %1$I.%8$I x where x.%9$I = _root_id),
             coalesce(bool_or(a.succeeded), false),
             count(*)::integer,
             (count(*) filter (where a.succeeded is null and a.failure is not null))::integer,
             (count(*) filter (where a.succeeded is null and a.failure is null))::integer,
             (select count(*)::integer from %1$I.%3$I r where r.%9$I = _root_id),
             coalesce(bool_or(a.succeeded is null and a.failure is not null
                              and internal.is_unknown_outcome(a.failure)), false)
        into has_task_succeeded, task_failure, has_success, num_attempts, num_failures, num_outstanding,
             num_runs, has_unknown_outcome
        from attempt a;
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%13$I(_root_id bigint)
      returns integer
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _closed integer;
    begin
      with closed as (
        insert into %1$I.%6$I (%10$I, error_message)
        select a.%10$I, internal.queue_gave_up_message(a.task_id)
          from %1$I.%4$I a
         where a.%9$I = _root_id
           and (select true from %1$I.%5$I s where s.%10$I = a.%10$I) is null
           and (select true from %1$I.%6$I f where f.%10$I = a.%10$I) is null
           and internal.queue_gave_up_message(a.task_id) is not null
        on conflict do nothing
        returning 1)
      select count(*)::integer into _closed from closed;
      return _closed;
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%14$I(payload jsonb)
      returns jsonb
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _p internal.channel_process := internal.get_channel_process(%1$L, %11$L);
      _task_id bigint := internal.id_from_payload(payload, %9$L);
      _facts record;
      _attempt_id bigint;
      _queue_task_id bigint;
      _next_at timestamptz;
      _next_task_id bigint;
    begin
      if _task_id is null then
        return internal.validation_failure(%9$L || ' must be a positive integer');
      end if;
      -- The check's statement only when it raises (the setting is read in an expression).
      if current_setting('transaction_isolation') <> 'read committed' then
        perform internal.assert_read_committed(_p.supervisor);
      end if;
      -- Lock, then read: facts read after the lock wait include what the last holder
      -- committed. FOR NO KEY UPDATE: inserting a fact that references the root takes FOR
      -- KEY SHARE, which does not wait on it.
      perform 1 from %1$I.%2$I t where t.%9$I = _task_id for no key update;
      if not found then
        return internal.validation_failure(%2$L || ' ' || _task_id || ' not found');
      end if;
      _facts := %1$I.%12$I(_task_id);
      -- An attempt the queue gave up on is among the outstanding ones: closed with a
      -- failure, then the facts read again.
      if _facts.num_outstanding > 0 and %1$I.%13$I(_task_id) > 0 then
        _facts := %1$I.%12$I(_task_id);
      end if;

      if _facts.has_task_succeeded then
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.task_failure is not null then
        return jsonb_build_object('status', _facts.task_failure);
      end if;
      if _facts.has_success then
        insert into %1$I.%7$I (%9$I) values (_task_id) on conflict do nothing;
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.has_unknown_outcome then
        insert into %1$I.%8$I (%9$I, reason) values (_task_id, 'delivery_outcome_unknown') on conflict do nothing;
        return jsonb_build_object('status', 'delivery_outcome_unknown');
      end if;
      if _facts.num_failures >= _p.max_attempts then
        insert into %1$I.%8$I (%9$I, reason) values (_task_id, 'max_attempts_reached') on conflict do nothing;
        return jsonb_build_object('status', 'max_attempts_reached',
                                  'payload', jsonb_build_object('num_failures', _facts.num_failures));
      end if;
      if _facts.num_runs >= _p.max_supervisor_runs then
        insert into %1$I.%8$I (%9$I, reason) values (_task_id, 'run_limit_reached') on conflict do nothing;
        return jsonb_build_object('status', 'run_limit_reached',
                                  'payload', jsonb_build_object('num_runs', _facts.num_runs));
      end if;

      if _facts.num_outstanding = 0 then
        -- The attempt's id is drawn first (the task's payload names it), its row written
        -- after the enqueue (it names the queue task).
        _attempt_id := nextval(pg_get_serial_sequence(%19$L, %10$L));
        _queue_task_id := queues.enqueue_internal(_p.task_type, coalesce(%18$s, '{}') || jsonb_build_object(
          'task_type', _p.task_type,
          %9$L, _task_id,
          %10$L, _attempt_id,
          'before_handler', _p.before_handler,
          'success_handler', _p.success_handler,
          'error_handler', _p.error_handler),
          -- One run: the process retries through a new attempt, never a task retry
          -- (a retried send would call the provider again outside the process's count).
          _max_attempts => 1);
        insert into %1$I.%4$I (%10$I, %9$I, task_id) overriding system value
        values (_attempt_id, _task_id, _queue_task_id);
      end if;
      _next_at := now() + internal.backoff(_facts.num_runs, _p.backoff_cap_seconds);
      _next_task_id := internal.enqueue_supervisor_run(_p.supervisor, %9$L, _task_id, _next_at);
      -- The run, with the run it scheduled: the success handler wakes that one.
      insert into %1$I.%3$I (%9$I, next_task_id) values (_task_id, _next_task_id);
      return internal.supervisor_progress(
        case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
        jsonb_build_object(%10$L, _attempt_id, 'next_check_at', _next_at));
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%15$I(_attempt_id bigint, _verb text)
      returns text
      language plpgsql stable
      %20$s
    as $body$
    declare
      _root_id bigint;
      _has_outcome boolean;
      _facts record;
    begin
      select a.%9$I,
             (select true from %1$I.%5$I s where s.%10$I = a.%10$I) is not null
             or (select true from %1$I.%6$I f where f.%10$I = a.%10$I) is not null
        into _root_id, _has_outcome
        from %1$I.%4$I a where a.%10$I = _attempt_id;
      if _root_id is null then
        return %4$L || ' ' || _attempt_id || ' not found';
      end if;
      if _has_outcome then
        return %4$L || ' ' || _attempt_id || ' already has an outcome; not ' || _verb || ' it again';
      end if;
      _facts := %1$I.%12$I(_root_id);
      if _facts.has_task_succeeded or _facts.task_failure is not null then
        return %2$L || ' ' || _root_id || ' already ended (' || coalesce(_facts.task_failure, 'succeeded')
               || '); not ' || _verb || ' attempt ' || _attempt_id;
      end if;
      return null;
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%16$I(payload jsonb)
      returns jsonb
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', %10$L);
      _root_id bigint;
      _next_task_id bigint;
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || %10$L || ' must be a positive integer');
      end if;
      select a.%9$I into _root_id from %1$I.%4$I a where a.%10$I = _attempt_id;
      if _root_id is null then
        return internal.validation_failure(%4$L || ' ' || _attempt_id || ' not found');
      end if;
      insert into %1$I.%5$I (%10$I, worker_payload) values (_attempt_id, payload -> 'worker_payload')
      on conflict do nothing;
      if found then
        -- Wake the supervisor, so the process ends now rather than at its backoff. With
        -- the root's lock (never waited for: a run under way holds it), no run is under
        -- way, and any run that starts waits for this transaction to commit, then sees the
        -- success. So the run the last run scheduled (runs hold the lock one after the
        -- other, so its task has the highest id) will see it: made due now when no worker
        -- has taken it yet, left to its worker when one has. A new run due now is enqueued
        -- when a run holds the lock (it may have read the facts already) or that task is
        -- no longer pending (it ended without scheduling another).
        perform 1 from %1$I.%2$I t where t.%9$I = _root_id for no key update skip locked;
        if found then
          select max(r.next_task_id) into _next_task_id from %1$I.%3$I r where r.%9$I = _root_id;
        end if;
        if _next_task_id is null or queues.hasten_task(_next_task_id) = 'not_pending' then
          perform internal.enqueue_channel_supervisor(internal.get_channel_process(%1$L, %11$L), _root_id, null);
        end if;
      end if;
      return jsonb_build_object('success', true);
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%17$I(payload jsonb)
      returns jsonb
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', %10$L);
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || %10$L || ' must be a positive integer');
      end if;
      perform 1 from %1$I.%4$I a where a.%10$I = _attempt_id;
      if not found then
        return internal.validation_failure(%4$L || ' ' || _attempt_id || ' not found');
      end if;
      insert into %1$I.%6$I (%10$I, error_message)
      select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
       where (select true from %1$I.%5$I s where s.%10$I = _attempt_id) is null
      on conflict do nothing;
      return jsonb_build_object('success', true);
    end;
    $body$
    $f$, variadic _names);

  foreach _suffix in array _suffixes loop
    execute format('revoke execute on function %s from public',
                   (select p.oid::regprocedure from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                     where n.nspname = _schema and p.proname = _name || _suffix));
  end loop;
end;
$$;

-- The registered process; raises 22023 when there is none.
create or replace function internal.get_channel_process(_schema text, _name text)
  returns internal.channel_process
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p internal.channel_process;
begin
  select * into _p from internal.channel_process p where p.process_schema = _schema and p.process_name = _name;
  if not found then
    raise exception 'no channel process %.% is registered', _schema, _name using errcode = '22023';
  end if;
  return _p;
end;
$$;

-- The generic entry points: each calls the process's own function
-- (internal.create_channel_process_functions). Their contracts are documented here.

-- Facts ---------------------------------------------------------------------------------

-- Everything a supervisor decides on, for one root. An attempt with both outcomes counts
-- as succeeded; an outstanding attempt has neither.
create or replace function internal.channel_process_facts(
  _schema text, _name text, _root_id bigint,
  out has_task_succeeded  boolean,
  out task_failure        text,
  out has_success         boolean,
  out num_attempts        integer,
  out num_failures        integer,
  out num_outstanding     integer,
  out num_runs            integer,
  out has_unknown_outcome boolean
)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('select * from %I.%I($1)', _schema, _name || '_process_facts')
  into has_task_succeeded, task_failure, has_success, num_attempts, num_failures, num_outstanding,
       num_runs, has_unknown_outcome
  using _root_id;
end;
$$;

-- Effects -------------------------------------------------------------------------------

-- Enqueues a supervisor run of the root at _at (NULL: now).
create or replace function internal.enqueue_channel_supervisor(_p internal.channel_process, _root_id bigint, _at timestamptz)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform internal.enqueue_supervisor_run(_p.supervisor, _p.process_name || '_task_id', _root_id, _at);
end;
$$;

-- Supervisor ----------------------------------------------------------------------------

-- The supervisor of a registered channel process, in the fixed order: validate, READ
-- COMMITTED, lock the root, facts (after closing the outstanding attempts the queue gave
-- up on, when there are outstanding attempts), terminal checks
-- (ended; a succeeded attempt; an unknown outcome; failures at max_attempts; runs at
-- max_supervisor_runs), then schedule an attempt when none is in flight, enqueue the next
-- run after 5 s · 2^(runs − 1), capped at backoff_cap_seconds, and record the run with
-- the id of that next run's task (the success handler wakes it).
-- Returns the envelopes documented in docs/adding-a-business-process.md.
create or replace function internal.run_channel_supervisor(_schema text, _name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb;
begin
  execute format('select %I.%I($1)', _schema, _name || '_supervise') into _result using payload;
  return _result;
end;
$$;

-- Handlers ------------------------------------------------------------------------------

-- Why a before_handler must not act on attempt _attempt_id, or NULL when it may: the
-- attempt already has an outcome (a redelivery), or its process ended. _verb names the
-- side effect in messages ('sending', 'deleting').
create or replace function internal.channel_attempt_refusal(_schema text, _name text, _attempt_id bigint, _verb text default 'sending')
  returns text
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _refusal text;
begin
  execute format('select %I.%I($1, $2)', _schema, _name || '_attempt_refusal') into _refusal using _attempt_id, _verb;
  return _refusal;
end;
$$;

-- The success handler: body {original_payload, worker_payload}; records the attempt's
-- success and wakes the supervisor, so the process ends now rather than at its next
-- backoff (5 s or more later): the run the last run scheduled is made due now
-- (queues.hasten_task, recorded in queues.task_run_now) while no worker has taken it, or
-- left to the worker that has; a new run due now is enqueued only when a run holds the
-- root at that moment or the scheduled run is no longer pending. A second delivery
-- changes nothing. A failure wakes nobody: the backoff is the pause before the next
-- attempt.
create or replace function internal.record_channel_attempt_success(_schema text, _name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb;
begin
  execute format('select %I.%I($1)', _schema, _name || '_record_attempt_success') into _result using payload;
  return _result;
end;
$$;

-- The error handler: body {original_payload, error}; records the attempt's failure unless
-- it succeeded. A second delivery changes nothing.
create or replace function internal.record_channel_attempt_failure(_schema text, _name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb;
begin
  execute format('select %I.%I($1)', _schema, _name || '_record_attempt_failure') into _result using payload;
  return _result;
end;
$$;
--! EndIncluded internal/channel_process.sql

-- Every registered channel process gets its functions again from the new templates.
select internal.create_channel_process_functions(p.process_schema, p.process_name)
  from internal.channel_process p
 order by p.process_schema, p.process_name;

--! Included comms/channel.sql
-- What the send processes of the message channels (email.sql, sms.sql) share beyond the
-- channel-process skeleton of sql/internal/channel_process.sql: their registration with
-- the named entry points the worker and apps call, checking an attempt before the
-- provider call, creating a message under an idempotency key, and the kickoff. Each
-- channel's file keeps what differs: its limits, its message's fields and their checks,
-- and the provider payload.
--
-- A channel <c> (comms.message.channel: 'email', 'sms') has its message table
-- comms.<c>_message (message_id, then its fields) and the channel process comms.send_<c>
-- (registered in internal.channel_process; root comms.send_<c>_task, keyed by
-- send_<c>_task_id, one per message_id). Table and column names reach SQL only through
-- format('%I'), from a registered process and tables found in the catalog. The
-- statements below are dynamic, so planned on each call: they run once per message (an
-- app's send, a kickoff) or once per provider call, never in a loop over tasks; the
-- entry points comms.register_message_channel makes are static SQL. Owner only: they run
-- inside the channels' definer functions, or in migrations.

-- Registers the send process of _channel (internal.register_channel_process, with the
-- limits given) and makes its entry points, static SQL over its tables, each a thin
-- wrapper over the generic block named (the last three call the process's own function
-- that block runs, comms.send_<c>_supervise, ..._record_attempt_success,
-- ..._record_attempt_failure, directly):
--   comms.send_<c>_supervisor_facts(_send_<c>_task_id)  what the supervisor decides on,
--                                     with the root's scheduled_at (select * from ...(123))
--   comms.send_<c>_supervisor(payload)  db_function: internal.run_channel_supervisor
--   comms.record_<c>_success(payload)   success_handler: internal.record_channel_attempt_success
--   comms.record_<c>_failure(payload)   error_handler: internal.record_channel_attempt_failure
--   comms.kickoff_send_<c>(_message_id, _scheduled_at)  comms.kickoff_channel_send
-- The before_handler, comms.get_<c>_payload, is the channel's own (its file writes it).
-- Their grants are in sql/comms/privileges.sql. Raises 22023 naming a missing table.
create or replace function comms.register_message_channel(
  _channel text, _max_attempts integer, _max_supervisor_runs integer, _backoff_cap_seconds integer
) returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _process text := 'send_' || _channel;
  -- The names every template below refers to, by position.
  _names text[] := array[
    'comms',                                      -- 1
    _process || '_task',                          -- 2  the root
    _process || '_task_id',                       -- 3  its key
    '_' || _process || '_task_id',                -- 4  the facts' argument
    _process,                                     -- 5  the process, as a literal
    _process || '_supervisor_facts',              -- 6
    _process || '_supervisor',                    -- 7
    'record_' || _channel || '_success',          -- 8
    'record_' || _channel || '_failure',          -- 9
    'kickoff_' || _process,                       -- 10
    _channel,                                     -- 11 the channel, as a literal
    -- 12 to 14: the process's own functions (internal.create_channel_process_functions),
    -- which the entry points call directly rather than through the generic blocks'
    -- dynamic SQL (a statement and a plan fewer per call)
    _process || '_supervise',                     -- 12
    _process || '_record_attempt_success',        -- 13
    _process || '_record_attempt_failure'         -- 14
  ];
  _table text;
begin
  foreach _table in array array[_channel || '_message', _process || '_task'] loop
    if to_regclass(format('%I.%I', 'comms', _table)) is null then
      raise exception 'channel %: table comms.% does not exist', _channel, _table using errcode = '22023';
    end if;
  end loop;

  perform internal.register_channel_process('comms', _process, _channel,
    _supervisor => format('%I.%I', 'comms', _names[7]),
    _before_handler => format('%I.%I', 'comms', 'get_' || _channel || '_payload'),
    _success_handler => format('%I.%I', 'comms', _names[8]),
    _error_handler => format('%I.%I', 'comms', _names[9]),
    _max_attempts => _max_attempts, _max_supervisor_runs => _max_supervisor_runs,
    _backoff_cap_seconds => _backoff_cap_seconds);

  execute format($f$
create or replace function %1$I.%6$I(
  %4$I bigint,
  out has_task_succeeded  boolean,
  out task_failure        text,
  out has_success         boolean,
  out num_attempts        integer,
  out num_failures        integer,
  out num_outstanding     integer,
  out num_runs            integer,
  out scheduled_at        timestamptz,
  out has_unknown_outcome boolean
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $body$
  select f.has_task_succeeded, f.task_failure, f.has_success, f.num_attempts, f.num_failures,
         f.num_outstanding, f.num_runs, t.scheduled_at, f.has_unknown_outcome
    from %1$I.%2$I t
   cross join lateral internal.channel_process_facts(%1$L, %5$L, t.%3$I) f
   where t.%3$I = %4$I
$body$;

create or replace function %1$I.%7$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select %1$I.%12$I(payload) $body$;

create or replace function %1$I.%8$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select %1$I.%13$I(payload) $body$;

create or replace function %1$I.%9$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select %1$I.%14$I(payload) $body$;

create or replace function %1$I.%10$I(
  _message_id bigint,
  _scheduled_at timestamptz default null,
  out %3$I bigint,
  out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select k.task_id, k.validation_failure_message from comms.kickoff_channel_send(%11$L, _message_id, _scheduled_at) k $body$;
$f$, variadic _names);

  execute format('revoke execute on function %1$I.%2$I(bigint), %1$I.%3$I(jsonb), %1$I.%4$I(jsonb), %1$I.%5$I(jsonb),
                  %1$I.%6$I(bigint, timestamptz) from public',
                 'comms', _names[6], _names[7], _names[8], _names[9], _names[10]);
end;
$$;

-- The channel process of _channel and its message table, checked: raises 22023 for a
-- channel without one.
create or replace function comms.channel_send_process(_channel text, out process internal.channel_process,
                                                      out message_table text)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if to_regclass(format('%I.%I', 'comms', _channel || '_message')) is null then
    raise exception 'channel %: table comms.%_message does not exist', _channel, _channel using errcode = '22023';
  end if;
  process := internal.get_channel_process('comms', 'send_' || _channel);
  message_table := _channel || '_message';
end;
$$;

-- For a before_handler: the attempt its payload names ({send_<c>_attempt_id, ...}), or
-- the validation failure to return instead: the id missing or not a positive integer, or
-- the attempt refused (internal.channel_attempt_refusal: it has an outcome already, or
-- its process ended). Exactly one of the two is set.
create or replace function comms.channel_attempt(_channel text, payload jsonb,
                                                 out attempt_id bigint, out refusal jsonb)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _process text := 'send_' || _channel;
  _refusal text;
begin
  attempt_id := internal.id_from_payload(payload, _process || '_attempt_id');
  if attempt_id is null then
    refusal := internal.validation_failure(_process || '_attempt_id must be a positive integer');
    return;
  end if;
  _refusal := internal.channel_attempt_refusal('comms', _process, attempt_id);
  if _refusal is not null then
    attempt_id := null;
    refusal := internal.validation_failure(_refusal);
  end if;
end;
$$;

-- For an app's send: a new comms.message of _channel under _idempotency_key (NULL: none).
-- created: message_id is new, and the caller stores its comms.<c>_message row and kicks
-- it off. Otherwise the key was used before: message_id and task_id are the first
-- request's, or, when that was a message on another channel, both NULL with a
-- validation_failure_message; the caller returns them and writes nothing more.
create or replace function comms.create_channel_message(
  _channel text,
  _idempotency_key text,
  out created boolean,
  out message_id bigint,
  out task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _root text := ((comms.channel_send_process(_channel)).process).process_name || '_task';
begin
  insert into comms.message (channel, idempotency_key) values (_channel, _idempotency_key)
  on conflict (idempotency_key) do nothing
  returning message.message_id into message_id;
  created := message_id is not null;
  if created then
    return;
  end if;

  -- A repeated request: what the first one created.
  execute format('select m.message_id, t.%3$I from comms.message m left join %1$I.%2$I t on t.message_id = m.message_id
                   where m.idempotency_key = $1',
                 'comms', _root, _root || '_id')
    into message_id, task_id using _idempotency_key;
  if task_id is null then
    message_id := null;
    validation_failure_message := 'idempotency_key was already used for a message on another channel';
  end if;
end;
$$;

-- Starts the send process of the existing _channel message _message_id: the root task and
-- the first supervisor run, at _scheduled_at (NULL: now). A second call for the same
-- message returns the existing task and enqueues nothing. Bad input: a
-- validation_failure_message and nothing written.
create or replace function comms.kickoff_channel_send(
  _channel text,
  _message_id bigint,
  _scheduled_at timestamptz,
  out task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p record;
  _at timestamptz := coalesce(_scheduled_at, now());
  _root text;
  _found boolean;
begin
  select * into _p from comms.channel_send_process(_channel);
  _root := (_p.process).process_name || '_task';
  if _message_id is null then
    validation_failure_message := 'message_id is required';
    return;
  end if;
  execute format('select exists (select 1 from %I.%I m where m.message_id = $1)', 'comms', _p.message_table)
    into _found using _message_id;
  if not _found then
    validation_failure_message := format('%s message %s not found', _channel, _message_id);
    return;
  end if;

  execute format('insert into %1$I.%2$I (message_id, scheduled_at) values ($1, $2)
                  on conflict (message_id) do nothing returning %3$I', 'comms', _root, _root || '_id')
    into task_id using _message_id, _at;

  if task_id is null then
    -- Already kicked off: its supervisor is running. No-op.
    execute format('select t.%3$I from %1$I.%2$I t where t.message_id = $1', 'comms', _root, _root || '_id')
      into task_id using _message_id;
    return;
  end if;

  perform internal.enqueue_channel_supervisor(_p.process, task_id, _at);
end;
$$;
--! EndIncluded comms/channel.sql
-- The channels' entry points made again from the new templates, with the limits their
-- files register (sql/comms/email.sql, sms.sql; their own functions are unchanged, so
-- the files are not included).
select comms.register_message_channel('email', _max_attempts => 3, _max_supervisor_runs => 30, _backoff_cap_seconds => 3600);
select comms.register_message_channel('sms', _max_attempts => 3, _max_supervisor_runs => 30, _backoff_cap_seconds => 3600);

--! split: 900-privileges.sql
set local lock_timeout = '5s';
-- The grants of 600-cancel-running, 601-run-timeouts and 700-process-statements, after
-- every file defining them.
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
  queues.complete_tasks(bigint[], bigint[], text[], boolean[], timestamptz[]),
  queues.fail_task(bigint, text, bigint),
  queues.interrupt_task(bigint, bigint, text, integer),
  queues.record_worker_heartbeat(text, text[], integer),
  queues.record_worker_stopped(text),
  queues.cancelled_tasks(bigint[]),
  queues.task_type_timeouts(),
  queues.record_progress(bigint, bigint, bigint, bigint, text)
to :DATABASE_WORKER;

grant execute on function
  queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean),
  queues.enqueue_many(jsonb),
  queues.enqueue_unique(text, jsonb, text, text, interval, timestamptz, integer, text, integer),
  queues.cancel_tasks(bigint[], text)
to :DATABASE_APP;
-- The client's enqueue on a pool (commit, then the wake-up; sql/queues/enqueue.sql).
revoke execute on all procedures in schema queues from public;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint)
  to :DATABASE_APP;
--! EndIncluded queues/privileges.sql
--! Included admin/privileges.sql
-- Who may call what in admin. The operations API (:DATABASE_API) has no table or view
-- privileges: it reads and acts through the security definer functions below, plus
-- queues.enqueue to create tasks. Every grant is listed in sql/role-allowlist.json ("api").
-- The *_at functions take the clock and stay owner only.

revoke all on all tables in schema admin from public;
revoke execute on all functions in schema admin from public;

grant usage on schema admin to :DATABASE_API;
grant usage on schema queues to :DATABASE_API;

grant execute on function
  admin.list_tasks(text, text, integer, bigint, text, text, timestamptz, timestamptz, text[], jsonb),
  admin.get_task(bigint),
  admin.task_counts(integer),
  admin.list_task_types(),
  admin.capacity(text),
  admin.throughput(integer, integer),
  admin.completion_stats(integer),
  admin.list_dead_letters(text, integer, bigint),
  admin.redrive_task(bigint),
  admin.recover_stale_leases(integer),
  admin.list_stale_leases(),
  admin.process_timeline(text, bigint),
  admin.list_process_roots(text, integer, bigint),
  admin.list_processes(),
  admin.cancel_tasks(bigint[], text),
  admin.cancel_tasks_matching(text, text, integer, text),
  admin.run_tasks_now(bigint[]),
  admin.redrive_tasks(bigint[]),
  admin.redrive_tasks_matching(text, integer),
  admin.queue_depth(integer, integer),
  admin.pause_task_type(text, text),
  admin.resume_task_type(text),
  admin.list_queues(),
  admin.list_workers(),
  admin.recover_worker_leases(text, integer),
  admin.list_schedules(integer),
  admin.process_tree(text, bigint),
  admin.list_process_roots_ranked(text, integer, bigint),
  admin.record_api_change(text, text, text, text, text, text, bigint[], text, text, text, jsonb, jsonb),
  admin.list_api_changes(bigint, integer, bigint),
  admin.set_task_type_timeout(text, numeric)
to :DATABASE_API;

grant execute on function queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean) to :DATABASE_API;
grant execute on function queues.enqueue_unique(text, jsonb, text, text, interval, timestamptz, integer, text, integer)
  to :DATABASE_API;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint)
  to :DATABASE_API;
--! EndIncluded admin/privileges.sql
--! Included internal/privileges.sql
-- Who may call what in internal. The worker runs registered functions through
-- internal.run_function; it also needs EXECUTE on each target (granted beside it).

revoke all on all tables in schema internal from public;
revoke execute on all functions in schema internal from public;

grant usage on schema internal to :DATABASE_WORKER;

grant execute on function
  internal.run_function(text, jsonb),
  internal.resolve_runnable_function(text),
  internal.noop(jsonb),
  internal.start_provider_call(jsonb),
  internal.check_at_least_once_provider_call(jsonb),
  internal.run_before_provider_call(text, jsonb, bigint, bigint),
  internal.call_runnable(text, jsonb)
to :DATABASE_WORKER;

select internal.register_runnable_function('internal.noop(jsonb)');
select internal.register_runnable_function('internal.start_provider_call(jsonb)');
--! EndIncluded internal/privileges.sql
