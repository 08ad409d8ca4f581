--! Previous: sha1:ff006609b94187e8573238d75191816deaeda675
--! Hash: sha1:4cf1f01360c1366296ee2c961298dc7234478aeb
--! Message: Steps once per call, live leases for provider calls, cancel answers after waits; attempts beyond retention; API change facts; the specification's surface and validation_failed; unique tasks, 25 attempts by default, schedules in a time zone; task type registration

--! split: 100-live-lease-steps-once-cancel-answers.sql
set local lock_timeout = '5s';
-- A provider call judges its lease as the queue does (heartbeats applied); each step body
-- runs once per attempt; cancel, run-now and redrive answer from a fresh read after a wait.

-- Registered functions are called through internal.call_runnable, built from the
-- registry (and rebuilt by each registration from now on).
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
-- the caller needs EXECUTE on the target itself.
create or replace function internal.run_function(function_name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _oid regprocedure := internal.resolve_runnable_function(function_name);
  _schema name;
  _name name;
  _result jsonb;
begin
  if not has_function_privilege(_oid, 'execute') then
    raise exception 'permission denied: % may not execute %', current_user, function_name
      using errcode = '42501';
  end if;
  select n.nspname, p.proname into _schema, _name
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where p.oid = _oid;
  execute format('select %I.%I($1::jsonb)', _schema, _name) into _result using payload;
  return _result;
end;
$$;

-- A runnable no-op: returns the success envelope. Used by benchmarks and smoke tests.
create or replace function internal.noop(payload jsonb) returns jsonb
  language sql immutable
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select jsonb_build_object('success', true) $$;
--! EndIncluded internal/run_function.sql
select internal.build_call_runnable();
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
  -- The live lease of an open task: its current lease (a completed task has none), not
  -- expired, heartbeats applied; judged as the completion that follows the call is fenced.
  if not coalesce(queues.current_lease_expiry(_task_id, _lease_id) > _now, false) then
    return internal.validation_failure(format('lease %s is not the live lease of task %s; not calling the provider', _lease_id, _task_id));
  end if;

  _mode := internal.delivery_mode(_task_type);
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

-- internal.start_provider_call_at at now(): what the worker runs before a provider call.
create or replace function internal.start_provider_call(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select internal.start_provider_call_at(now(), payload)
$$;
--! EndIncluded internal/delivery.sql
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
-- The answers for the tasks it did not lock are read by a statement of their own, after
-- the locks: a completion this call waited for (its row gone when the wait ended) is
-- committed by then, and seen; the statement that waited saw the tables as they were
-- when it started, without it ('unknown_task' for a task that exists).
create or replace function admin.cancel_tasks_at(_now timestamptz, _task_ids bigint[], _reason text)
  returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _locked bigint[];
  _cancelled bigint[];
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
  select coalesce(array_agg(l.task_id), '{}'), coalesce((select array_agg(c.task_id) from completed c), '{}')
    into _locked, _cancelled
    from locked l;

  -- A statement after the locks (see above).
  return query
  select i.task_id,
         case when c.task_id is not null then 'cancelled'
              when l.task_id is not null then 'running'
              when exists (select 1 from queues.task_completed x where x.task_id = i.task_id) then 'already_completed'
              else 'unknown_task' end
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join unnest(_locked) as l(task_id) on l.task_id = i.task_id
    left join unnest(_cancelled) as c(task_id) on c.task_id = i.task_id
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
-- The answers for the tasks it did not lock are read after the locks, by a statement of
-- their own (as admin.cancel_tasks_at's).
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

  -- A statement after the locks (see admin.cancel_tasks_at).
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

--! split: 210-attempt-ends-and-signing-lifetime.sql
set local lock_timeout = '5s';

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
-- completed (abandoned after its leases expired, dead-lettered, cancelled, failed because
-- its success or error handler raised) although its attempt has no outcome. Supervisors
-- record this as the attempt's failure at their next run.
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
                                                     where e.task_id = t.task_id order by e.error_id desc limit 1), ''))
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
--! Included files/signing.sql
-- What the files service may sign, and for how long. It issues a signed DELETE URL only
-- for an object whose deletion a worker is performing now: a file row with that bucket
-- and key whose deletion has an attempt without an outcome, in a process that has not
-- ended, whose account deletion (if any) has not failed, and whose file_delete task is
-- not completed and is held by a live lease (the newest lease, its expiry with heartbeats
-- and releases applied still ahead). The URL is signed for no longer than that lease has
-- left: storage checks nothing but the signature and its expiry, so a URL is bound to the
-- attempt by its lifetime. Once the lease is over (the attempt failed, expired, was
-- revoked; the process or the account deletion failed meanwhile) no URL signed for it
-- is valid any more. The files service asks through internal.run_function (its only
-- database privileges are those of the worker role).

-- The time left on the live lease of the attempt deleting (_bucket, _object_key), or NULL
-- when no attempt may delete it now (the longest, when several file rows name the
-- object). NULLs: NULL.
create or replace function files.file_delete_lease_left(_bucket text, _object_key text)
  returns interval
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select max(l.expires_at - now())
    from files.file f
    join files.file_deletion_task t on t.file_id = f.file_id
    join files.file_deletion_attempt a on a.file_deletion_task_id = t.file_deletion_task_id
    -- The task's newest lease with its effective expiry (a task has one live lease at most).
    cross join lateral (
      select e.expires_at from queues.task_lease_effective e
       where e.task_id = a.task_id
       order by e.task_lease_id desc
       limit 1
    ) l
   where f.bucket = _bucket and f.object_key = _object_key
     and l.expires_at > now()
     and not exists (select 1 from queues.task_completed c where c.task_id = a.task_id)
     and not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
     and not exists (select 1 from files.file_deletion_attempt_failed x
                      where x.file_deletion_attempt_id = a.file_deletion_attempt_id)
     and not exists (select 1 from files.file_deletion_task_succeeded ts where ts.file_deletion_task_id = t.file_deletion_task_id)
     and not exists (select 1 from files.file_deletion_task_failed tf where tf.file_deletion_task_id = t.file_deletion_task_id)
     and not files.has_account_deletion_failed(f.account_id)
$$;

-- True when (_bucket, _object_key) may be deleted now (files.file_delete_lease_left).
-- NULLs: false.
create or replace function files.is_file_delete_scheduled(_bucket text, _object_key text)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select files.file_delete_lease_left(_bucket, _object_key) is not null
$$;

-- Runnable, for the files service. Payload: {bucket, object_key}. Returns
-- {success: true, payload: {scheduled, lease_seconds_left}}: lease_seconds_left is the
-- time left on the deleting attempt's lease, in seconds (null when not scheduled); the
-- service signs for no longer. A payload without both strings is a validation failure.
-- Reads only.
create or replace function files.check_file_delete_signing(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _left interval;
begin
  if jsonb_typeof(payload -> 'bucket') is distinct from 'string' or jsonb_typeof(payload -> 'object_key') is distinct from 'string' then
    return internal.validation_failure('bucket and object_key must be strings');
  end if;
  _left := files.file_delete_lease_left(payload ->> 'bucket', payload ->> 'object_key');
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'scheduled', _left is not null,
    'lease_seconds_left', extract(epoch from _left)));
end;
$$;
--! EndIncluded files/signing.sql

--! split: 400-api-change.sql
set local lock_timeout = '5s';

-- Changes made through the operations API, one fact per change: who (the API user and
-- level), when, the request (method, route, request id), what it targeted and the
-- function's answer. Written by admin.record_api_change in the transaction of the change
-- itself, so a change and its fact commit together or not at all. Append-only.
create table if not exists admin.api_change (
  api_change_id bigint generated always as identity primary key,
  changed_at    timestamptz not null default now(),
  user_name     text not null check (length(user_name) between 1 and 100),
  user_level    text not null check (user_level in ('read', 'operator')),
  request_id    text not null check (length(request_id) between 1 and 200),
  method        text not null check (method in ('POST', 'PUT', 'PATCH', 'DELETE', 'CLI')),
  route         text not null check (length(route) between 1 and 200),
  action        text not null check (action ~ '^[a-z][a-z0-9_]{0,62}$'),
  task_ids      bigint[] not null default '{}',
  task_type     text,
  schedule_name text,
  worker_id     text,
  input         jsonb not null default '{}'::jsonb check (jsonb_typeof(input) = 'object'),
  answer        jsonb not null
);

comment on table admin.api_change is
  'Facts: one row per change made through the operations API (admin.record_api_change), in the change''s own transaction. Read with admin.list_api_changes.';

-- The task page asks for the changes that named one task.
create index if not exists api_change_task_ids on admin.api_change using gin (task_ids);

create or replace trigger forbid_update
  before update on admin.api_change
  for each statement execute function queues.forbid_fact_update();

--! Included admin/api_changes.sql
-- The audit trail of the operations API: admin.api_change holds one fact per change made
-- through the API. The API calls admin.record_api_change in the same transaction as the
-- admin function that makes the change (packages/web/src/app.ts, `change`), so no change
-- commits without its fact and no fact without its change. The API database user has no
-- privilege on the table: it inserts only through this function and reads through
-- admin.list_api_changes.

-- Records one change made by API user _user_name (level _user_level) for the request
-- _request_id (_method _route); _action names what it did (cancel_tasks, pause_task_type,
-- ...), _task_ids the tasks it targeted or made, _task_type / _schedule_name / _worker_id
-- the queue, schedule or worker it acted on, _input the request's parameters and _answer
-- what the change answered. Returns the fact's id. 22004 for a NULL required argument,
-- 22023 for a malformed one.
create or replace function admin.record_api_change(
  _user_name     text,
  _user_level    text,
  _request_id    text,
  _method        text,
  _route         text,
  _action        text,
  _task_ids      bigint[],
  _task_type     text,
  _schedule_name text,
  _worker_id     text,
  _input         jsonb,
  _answer        jsonb
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _id bigint;
begin
  if _user_name is null then
    raise exception 'user_name must not be null' using errcode = '22004';
  end if;
  if length(_user_name) not between 1 and 100 then
    raise exception 'user_name must be 1 to 100 characters' using errcode = '22023';
  end if;
  if _user_level is null then
    raise exception 'user_level must not be null' using errcode = '22004';
  end if;
  if _user_level not in ('read', 'operator') then
    raise exception 'user_level must be read or operator, got %', quote_literal(_user_level) using errcode = '22023';
  end if;
  if _request_id is null then
    raise exception 'request_id must not be null' using errcode = '22004';
  end if;
  if length(_request_id) not between 1 and 200 then
    raise exception 'request_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _method is null then
    raise exception 'method must not be null' using errcode = '22004';
  end if;
  -- CLI: a change made with the `queue` command line (route: the command, e.g. 'queue cancel').
  if _method not in ('POST', 'PUT', 'PATCH', 'DELETE', 'CLI') then
    raise exception 'method must be POST, PUT, PATCH, DELETE or CLI, got %', quote_literal(_method) using errcode = '22023';
  end if;
  if _route is null then
    raise exception 'route must not be null' using errcode = '22004';
  end if;
  if length(_route) not between 1 and 200 then
    raise exception 'route must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _action is null then
    raise exception 'action must not be null' using errcode = '22004';
  end if;
  if _action !~ '^[a-z][a-z0-9_]{0,62}$' then
    raise exception 'action must be a lowercase name such as cancel_tasks, got %', quote_literal(_action) using errcode = '22023';
  end if;
  if _input is not null and jsonb_typeof(_input) <> 'object' then
    raise exception 'input must be a JSON object, got %', jsonb_typeof(_input) using errcode = '22023';
  end if;
  if _answer is null then
    raise exception 'answer must not be null' using errcode = '22004';
  end if;
  if _task_ids is not null and array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain NULL' using errcode = '22004';
  end if;
  insert into admin.api_change
    (user_name, user_level, request_id, method, route, action, task_ids, task_type, schedule_name, worker_id, input, answer)
  values
    (_user_name, _user_level, _request_id, _method, _route, _action,
     coalesce((select array_agg(distinct t order by t) from unnest(_task_ids) t), '{}'),
     _task_type, _schedule_name, _worker_id, coalesce(_input, '{}'::jsonb), _answer)
  returning api_change_id into _id;
  return _id;
end;
$$;

-- The changes made through the API, newest first: all of them, or those that named task
-- _task_id (targeted or made it). _limit 1..500 (default 50); _before_id pages back
-- (changes with a smaller id). 22023 for a limit out of range.
create or replace function admin.list_api_changes(_task_id bigint, _limit integer, _before_id bigint)
  returns table (
    api_change_id bigint,
    changed_at    timestamptz,
    user_name     text,
    user_level    text,
    request_id    text,
    method        text,
    route         text,
    action        text,
    task_ids      bigint[],
    task_type     text,
    schedule_name text,
    worker_id     text,
    input         jsonb,
    answer        jsonb
  )
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n integer := coalesce(_limit, 50);
begin
  if _n < 1 or _n > 500 then
    raise exception 'limit must be between 1 and 500, got %', _n using errcode = '22023';
  end if;
  if _task_id is null then
    -- Newest first by the primary key, stopping after _n rows.
    return query
      select c.api_change_id, c.changed_at, c.user_name, c.user_level, c.request_id, c.method, c.route,
             c.action, c.task_ids, c.task_type, c.schedule_name, c.worker_id, c.input, c.answer
        from admin.api_change c
       where c.api_change_id < coalesce(_before_id, 9223372036854775807)
       order by c.api_change_id desc
       limit _n;
  else
    -- The GIN index on task_ids finds the changes that named the task.
    return query
      select c.api_change_id, c.changed_at, c.user_name, c.user_level, c.request_id, c.method, c.route,
             c.action, c.task_ids, c.task_type, c.schedule_name, c.worker_id, c.input, c.answer
        from admin.api_change c
       where c.task_ids @> array[_task_id]
         and c.api_change_id < coalesce(_before_id, 9223372036854775807)
       order by c.api_change_id desc
       limit _n;
  end if;
end;
$$;
--! EndIncluded admin/api_changes.sql

--! split: 500-spec-surface.sql
set local lock_timeout = '5s';
-- The specification's own SQL surface: its capacity view, worker_tasks, stale recovery and
-- resync generation under the names it uses (schema public); capacity measured per busy
-- worker-hour; envelopes that only report an error; fail_task then complete_task keeps
-- the failure; a validation failure is an outcome of its own (validation_failed), final
-- and not a dead letter.

-- lock: access exclusive on queues.task_completed: its outcome check gains 'validation_failed' (NOT VALID, so no partition is scanned: every outcome written before is among the new ones; the check holds for every row written from now on)
alter table queues.task_completed drop constraint if exists task_completed_outcome_check;
alter table queues.task_completed add constraint task_completed_outcome_check
  check (outcome in ('succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed')) not valid;

--! Included admin/common.sql
-- Helpers shared by the admin functions: task states, page sizes, task type filters.
-- Called only from definer functions: no grants.

-- The state of a task that is not completed, from its claim-index row at _now:
--   ready      claimable now (scheduled time reached; no live lease)
--   running    a live lease holds it
--   retrying   leased before, waiting for its retry time (no live lease)
--   scheduled  never leased, scheduled in the future
-- No SET clause: a function with one is never inlined, and the dashboard's counts call
-- this once per pending task (20,000 calls took 140 ms with it, a few ms inlined). It
-- names no object, so the search path cannot change what it does; it is not a security
-- definer.
create or replace function admin.pending_state(
  _available_at timestamptz, _current_lease_id bigint, _lease_count integer, _now timestamptz
) returns text
  language sql immutable parallel safe
as $$
  select case
           when _available_at <= _now then 'ready'
           when _current_lease_id is not null then 'running'
           when _lease_count > 0 then 'retrying'
           else 'scheduled'
         end
$$;

-- Every state a task can be in: the pending ones above, then the completion outcomes.
create or replace function admin.task_states() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['scheduled', 'ready', 'running', 'retrying',
               'succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed']
$$;

-- Validates a page size: NULL means _default; else 1 to 500.
create or replace function admin.page_limit(_limit integer, _default integer default 50)
  returns integer
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _limit is null then
    return _default;
  end if;
  if _limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500, got %', _limit using errcode = '22023';
  end if;
  return _limit;
end;
$$;

-- Validates an optional task type filter: NULL, or a registered type (22023 otherwise).
create or replace function admin.assert_task_type(_task_type text)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_type is not null
     and not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
end;
$$;

-- Completions in (_from, _to] with their task's type: the type the completion names, or,
-- for a completion written before task_completed.task_type existed, its task's (a
-- primary-key probe of queues.task, made only for those). Inlined into its callers (SQL,
-- stable, no SET clause), so their filters on the window reach task_completed's
-- completed_at index. Every object it names is schema-qualified and it is not a security
-- definer; called only from definer functions with a pinned search path: no grants.
create or replace function admin.completions_between(_from timestamptz, _to timestamptz)
  returns table (task_id bigint, task_lease_id bigint, completed_at timestamptz, outcome text, task_type text)
  language sql stable
as $$
  select c.task_id, c.task_lease_id, c.completed_at, c.outcome,
         coalesce(c.task_type, (select x.task_type from queues.task x where x.task_id = c.task_id))
    from queues.task_completed c
   where c.completed_at > _from and c.completed_at <= _to
$$;
--! EndIncluded admin/common.sql
--! Included admin/capacity.sql
-- Capacity planning per role (= task_type): how much work is waiting, how fast a worker
-- gets through it while it works, and how many workers would drain it in 1, 4 or 8 hours.
-- The role-based specification's view of it is public.v_worker_capacity
-- (sql/public/role_based_worker.sql).
--
-- Cost: pending/ready/running count queues.task_pending (bounded by pending work);
-- throughput reads only the completions of the last _window_seconds, through
-- task_completed_completed_at_idx, and the leases of the tasks enqueued in that window
-- (a range of task_lease's primary key; a primary-key probe for a completion of an older
-- task), with a primary-key probe of task_lease_started per completion; active workers
-- read queues.worker. Nothing scans history.
--
-- Figures:
--   pending               tasks not completed (scheduled, ready, running, retrying)
--   ready                 claimable now
--   running               held by a live lease
--   active_workers        registered workers of this type seen within _dead_after_seconds
--                         and not stopped
--   completed_in_window   completions (any outcome) in the window
--   window_workers        distinct workers whose leases completed those tasks
--   tasks_per_worker_hour capacity: the window's completions that ran under a lease,
--                         divided by the hours their workers were busy with this type
--                         (per worker, the union of its runs, each from its start, or its
--                         lease when no start was recorded, to its completion, within the
--                         window). A worker that waits for work is not busy, so this is
--                         what a worker gets through while it works, not the arrival rate;
--                         a worker running tasks side by side counts each hour once. Null
--                         without such completions in the window
--   estimated_hours_to_drain  ready / (tasks_per_worker_hour * active_workers): the
--                         backlog claimable now; tasks scheduled later are not backlog (they
--                         cannot run sooner). 0 when nothing is ready; null without a rate
--                         or without workers
--   workers_needed_1h/4h/8h   ceil(pending / (tasks_per_worker_hour * hours)); 0 when
--                         nothing is pending; null without a rate

create or replace function admin.capacity_at(
  _now                timestamptz,
  _task_type          text,
  _window_seconds     integer,
  _dead_after_seconds integer
) returns table (
  task_type                text,
  pending                  bigint,
  ready                    bigint,
  running                  bigint,
  active_workers           bigint,
  completed_in_window      bigint,
  window_workers           bigint,
  window_seconds           integer,
  tasks_per_worker_hour    double precision,
  estimated_hours_to_drain double precision,
  workers_needed_1h        bigint,
  workers_needed_4h        bigint,
  workers_needed_8h        bigint
)
  language plpgsql stable
  security definer
  -- The window's completions meet the leases of the window's tasks in one hash join: a
  -- nested loop would probe task_lease once per completion (the CTE's row estimate is a
  -- guess). The lateral probes of older completions stay nested loops, the only plan
  -- they have.
  set enable_nestloop = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 3600);
  _dead_after integer := coalesce(_dead_after_seconds, 600);
  _first bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_type is not null
     and not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '23503', hint = 'Known task types are listed in queues.task_type.';
  end if;
  if _window not between 60 and 604800 then
    raise exception 'window_seconds must be between 60 and 604800 (7 days), got %', _window
      using errcode = '22023';
  end if;
  if _dead_after not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead_after
      using errcode = '22023';
  end if;

  _first := admin.first_task_id_after(_now - make_interval(secs => _window));
  return query
  with types as (
    select t.task_type from queues.task_type t
     where _task_type is null or t.task_type = _task_type
  ),
  queue as (
    select p.task_type,
           count(*) as pending,
           count(*) filter (where p.available_at <= _now) as ready,
           count(*) filter (where p.available_at > _now and p.current_lease_id is not null) as running
      from queues.task_pending p
     where _task_type is null or p.task_type = _task_type
     group by p.task_type
  ),
  -- Completions in the window by completed_at (index range scan), with their type
  -- (admin.completions_between).
  completion as materialized (
    select c.task_id, c.task_lease_id, c.task_type, c.completed_at
      from admin.completions_between(_now - make_interval(secs => _window), _now) c
     where _task_type is null or c.task_type = _task_type
  ),
  -- The run of each completing lease: its worker, its start (the start mark, else the
  -- lease) and its end. The leases of tasks enqueued in the window (ids from _first on)
  -- are one range of task_lease's primary key, joined at once; a completion of an older
  -- task probes its lease by primary key; each start mark is a primary-key probe (a scalar
  -- subquery). A lease names its worker by key (queues.worker_name), or by id if written
  -- before that key existed: a worker counts once per way it is named (twice, for one
  -- window, if it ran across that migration). A completion without a lease (cancelled,
  -- abandoned) names none and ran nowhere.
  completion_run as (
    select x.task_type, x.worker_key, x.worker_id,
           greatest(x.run_from, _now - make_interval(secs => _window)) as run_from, x.run_to
      from (select c.task_type, l.worker_key, l.worker_id, c.completed_at as run_to,
                   coalesce((select st.started_at from queues.task_lease_started st
                              where st.task_id = c.task_id and st.task_lease_id = c.task_lease_id),
                            l.leased_at) as run_from
              from completion c
              join queues.task_lease l on l.task_id = c.task_id and l.task_lease_id = c.task_lease_id
             where c.task_id >= _first and l.task_id >= _first
            union all
            select c.task_type, l.worker_key, l.worker_id, c.completed_at,
                   coalesce((select st.started_at from queues.task_lease_started st
                              where st.task_id = c.task_id and st.task_lease_id = c.task_lease_id),
                            l.leased_at)
              from completion c
             cross join lateral (select y.worker_key, y.worker_id, y.leased_at from queues.task_lease y
                                  where y.task_id = c.task_id and y.task_lease_id = c.task_lease_id limit 1) l
             where c.task_id < _first) x
  ),
  -- Busy time per type and worker: the union of its runs (gaps and islands: a run that
  -- starts after every earlier run of the worker ended opens a new island).
  run_marked as (
    select r.*,
           max(r.run_to) over (partition by r.task_type, r.worker_key, r.worker_id
                               order by r.run_from, r.run_to
                               rows between unbounded preceding and 1 preceding) as before_to
      from completion_run r
  ),
  run_island as (
    select m.*,
           count(*) filter (where m.before_to is null or m.run_from > m.before_to)
             over (partition by m.task_type, m.worker_key, m.worker_id order by m.run_from, m.run_to
                   rows between unbounded preceding and current row) as island
      from run_marked m
  ),
  busy as (
    select i.task_type,
           count(distinct (i.worker_key, i.worker_id)) as workers,
           sum(i.runs) as runs,
           sum(extract(epoch from i.island_to - i.island_from)) as seconds
      from (select r.task_type, r.worker_key, r.worker_id, count(*) as runs,
                   min(r.run_from) as island_from, max(r.run_to) as island_to
              from run_island r
             group by r.task_type, r.worker_key, r.worker_id, r.island) i
     group by i.task_type
  ),
  recent as (
    select c.task_type, count(*) as completed,
           coalesce((select b.workers from busy b where b.task_type = c.task_type), 0) as workers,
           (select b.runs from busy b where b.task_type = c.task_type) as runs,
           (select b.seconds from busy b where b.task_type = c.task_type) as busy_seconds
      from completion c
     group by c.task_type
  ),
  workers as (
    select r.task_type, count(*) as active
      from queues.worker w
     cross join lateral unnest(w.task_types) as r(task_type)
     where w.stopped_at is null
       and w.last_seen_at > _now - make_interval(secs => _dead_after)
     group by r.task_type
  ),
  figures as (
    select ty.task_type,
           coalesce(q.pending, 0) as pending,
           coalesce(q.ready, 0) as ready,
           coalesce(q.running, 0) as running,
           coalesce(w.active, 0) as active,
           coalesce(r.completed, 0) as completed,
           coalesce(r.workers, 0) as workers,
           case when r.runs > 0 and r.busy_seconds > 0
                then r.runs::double precision / (r.busy_seconds::double precision / 3600.0)
           end as rate
      from types ty
      left join queue q on q.task_type = ty.task_type
      left join recent r on r.task_type = ty.task_type
      left join workers w on w.task_type = ty.task_type
  )
  select f.task_type, f.pending, f.ready, f.running, f.active, f.completed, f.workers, _window,
         f.rate,
         case when f.ready = 0 then 0
              when f.rate is null or f.active = 0 then null
              else f.ready / (f.rate * f.active) end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 1))::bigint end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 4))::bigint end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 8))::bigint end
    from figures f
   order by f.task_type;
end;
$$;

-- Capacity of every role (_task_type null) or of one (23503 if unknown), over the last
-- hour of completions, counting workers seen within 10 minutes.
create or replace function admin.capacity(_task_type text default null)
  returns table (
    task_type                text,
    pending                  bigint,
    ready                    bigint,
    running                  bigint,
    active_workers           bigint,
    completed_in_window      bigint,
    window_workers           bigint,
    window_seconds           integer,
    tasks_per_worker_hour    double precision,
    estimated_hours_to_drain double precision,
    workers_needed_1h        bigint,
    workers_needed_4h        bigint,
    workers_needed_8h        bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.capacity_at(now(), _task_type, 3600, 600)
$$;
--! EndIncluded admin/capacity.sql
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
--                         claimed    running, its run not started (no start mark), its
--                                    worker not silent
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
--    failed_attempts: [...], redriven_to: id | null, redriven_from: id | null}
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
  return _result || admin.task_retry_facts(_task_id) || admin.task_dashboard_facts(_task_id);
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
--! Included queues/steps.sql
-- Server-side steps: db_function tasks run in the database, many per call.
--
--   queues.parse_envelope(result)            a step function's result envelope, read
--   queues.current_lease_expiry(task, lease)  read only: the expiry of the task's current lease
--   queues.is_current_lease(task, lease)     read only: is the lease still current
--   queues.current_leases(tasks, leases)     the same for many, one boolean each
--   queues.run_step(task, lease, fn, payload)   one step with its completion (the reference)
--   queues.complete_steps(...)               the completions and results of many steps
--   queues.run_steps(tasks, leases, fns, payloads)   many steps in one call (the worker's)

-- Reads a function's result envelope (the worker's parseEnvelope, in SQL):
--   {status: text, payload?}                                   succeeded | status
--   {success: bool, error?, validation_failure_message?, payload?}   succeeded | error | invalid
--   {error: text, payload?} or {validation_failure_message: text, payload?}, without
--     success (the supervisors specification's `{"error": "missing_task_id"}`)   error | invalid
-- outcome is 'succeeded', 'status', 'error', 'invalid' or 'malformed' (message says why).
create or replace function queues.parse_envelope(_result jsonb, out outcome text, out message text)
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _extra text;
  _error text;
  _invalid text;
begin
  if _result is null or jsonb_typeof(_result) = 'null' then
    outcome := 'malformed'; message := 'malformed result envelope: expected an object, got null'; return;
  end if;
  if jsonb_typeof(_result) <> 'object' then
    outcome := 'malformed';
    message := format('malformed result envelope: expected an object, got %s',
                      case jsonb_typeof(_result) when 'array' then 'an array' else 'a ' || jsonb_typeof(_result) end);
    return;
  end if;
  if _result ? 'status' and _result ? 'success' then
    outcome := 'malformed'; message := 'malformed result envelope: has both "status" and "success"'; return;
  end if;
  if _result ? 'status' then
    select string_agg(k, ', ') into _extra from jsonb_object_keys(_result) k where k not in ('status', 'payload');
    if _extra is not null then
      outcome := 'malformed'; message := format('malformed result envelope: unrecognized key(s) %s', _extra); return;
    end if;
    if jsonb_typeof(_result -> 'status') <> 'string' or length(_result ->> 'status') not between 1 and 200 then
      outcome := 'malformed'; message := 'malformed result envelope: status must be a string of 1 to 200 characters'; return;
    end if;
    if _result ->> 'status' = 'succeeded' then outcome := 'succeeded'; else outcome := 'status'; message := _result ->> 'status'; end if;
    return;
  end if;
  if _result ? 'success' or _result ? 'error' or _result ? 'validation_failure_message' then
    select string_agg(k, ', ') into _extra from jsonb_object_keys(_result) k
     where k not in ('success', 'error', 'validation_failure_message', 'payload');
    if _extra is not null then
      outcome := 'malformed'; message := format('malformed result envelope: unrecognized key(s) %s', _extra); return;
    end if;
    if _result ? 'success' and jsonb_typeof(_result -> 'success') <> 'boolean' then
      outcome := 'malformed'; message := 'malformed result envelope: success must be a boolean'; return;
    end if;
    if coalesce(jsonb_typeof(_result -> 'error'), 'null') not in ('string', 'null')
       or coalesce(jsonb_typeof(_result -> 'validation_failure_message'), 'null') not in ('string', 'null')
       or length(_result ->> 'error') > 100000 or length(_result ->> 'validation_failure_message') > 100000 then
      outcome := 'malformed'; message := 'malformed result envelope: error and validation_failure_message must be strings'; return;
    end if;
    _error := nullif(btrim(coalesce(_result ->> 'error', '')), '');
    _invalid := nullif(btrim(coalesce(_result ->> 'validation_failure_message', '')), '');
    if _error is not null then outcome := 'error'; message := _result ->> 'error'; return; end if;
    if _invalid is not null then outcome := 'invalid'; message := _result ->> 'validation_failure_message'; return; end if;
    if not (_result ? 'success') then
      outcome := 'malformed';
      message := 'malformed result envelope: needs "status" or "success", or a non-empty error or validation_failure_message';
      return;
    end if;
    if not (_result ->> 'success')::boolean then
      outcome := 'malformed';
      message := 'malformed result envelope: success is false but neither error nor validation_failure_message is set';
      return;
    end if;
    outcome := 'succeeded';
    return;
  end if;
  outcome := 'malformed'; message := 'malformed result envelope: needs "status" or "success"';
end;
$$;

-- The expiry in force of _task_lease_id if it is still the current lease of _task_id, else
-- NULL (read only: no lock, no fact). The one definition of a task's current lease: the
-- lease queues.task_pending names (a claim sets it; a completion, a retry, a release or a
-- revocation ends it; a later claim replaces it), with the expiry heartbeats moved
-- (task_pending.available_at, which queues.extend_leases_at keeps; the claim's
-- task_lease.expires_at is only the first). The completions are fenced by the same row
-- (queues.complete_tasks, which also asks a keyed task to hold its key); a lease is live
-- while this is later than now (internal.start_provider_call_at).
-- A primary-key probe: the lease is compared in the select list, not the condition.
create or replace function queues.current_lease_expiry(_task_id bigint, _task_lease_id bigint)
  returns timestamptz
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select case when p.current_lease_id = _task_lease_id then p.available_at end
    from queues.task_pending p
   where p.task_id = _task_id
$$;

-- Whether _task_lease_id is still the current lease of _task_id (read only: no lock, no
-- fact), expired or not (queues.current_lease_expiry). The worker's steps check it before
-- they run.
create or replace function queues.is_current_lease(_task_id bigint, _task_lease_id bigint)
  returns boolean
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.current_lease_expiry(_task_id, _task_lease_id) is not null
$$;


-- For each (_task_ids[i], _task_lease_ids[i]): whether the lease is still the task's
-- current one (read only: no lock, no fact), in input order. One primary-key probe per
-- task: the subquery names the primary key only (with the lease in its condition, the
-- planner scanned every leased row through the index of leased rows for each task).
create or replace function queues.current_leases(_task_ids bigint[], _task_lease_ids bigint[])
  returns boolean[]
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(array_agg(coalesce((select p.current_lease_id from queues.task_pending p
                                       where p.task_id = i.task_id) = i.task_lease_id, false)
                            order by i.ord), '{}')
    from unnest(_task_ids, _task_lease_ids) with ordinality as i(task_id, task_lease_id, ord)
$$;

-- Runs one db_function step with its completion, in a subtransaction of their own:
-- internal.run_function(_function_name, _payload), then the completion fenced by the lease
-- (queues.settle_tasks), so the step's writes and its completion commit together or not
-- at all, exactly once. Outcomes as the worker's db_function processor: success and
-- status complete 'succeeded' (a status is returned as note); an error keeps the writes and
-- completes 'failed' with an error row; a validation failure keeps the writes and
-- completes 'validation_failed' with an error row (final: never retried, not a dead
-- letter); a malformed envelope or an exception rolls the step back, then completes
-- 'failed' with an error row. A step whose lease is no longer held is not run. A
-- well-formed envelope is kept as the step's result (queues.record_task_result) before its
-- completion. queues.run_steps runs many steps faster and falls back to this one.
-- Runs as the caller (security invoker): the step has the worker's privileges.
-- result: as queues.complete_tasks ('completed', 'retry_scheduled', 'lease_lost', ...) or
-- 'transient' (a serialization failure or deadlock rolled the step back and recorded
-- nothing: release the lease, it runs again).
create or replace function queues.run_step(
  _task_id bigint, _task_lease_id bigint, _function_name text, _payload jsonb,
  out result text, out outcome text, out error text, out note text
)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _env record;
  _raw jsonb;
begin
  begin
    -- A lease no longer held is not run.
    result := case when queues.is_current_lease(_task_id, _task_lease_id) then 'started' else 'lease_lost' end;
    if result = 'started' then
      _raw := internal.run_function(_function_name, _payload);
      select * into _env from queues.parse_envelope(_raw);
      if _env.outcome = 'malformed' then
        raise exception '%: %', _function_name, _env.message using errcode = 'QSTEP';
      end if;
      -- The function's envelope is kept as the run's result (queues.task_result), fenced by
      -- the lease, before the completion.
      perform queues.record_task_result(_task_id, _task_lease_id, _raw);
      case _env.outcome
        when 'succeeded' then outcome := 'succeeded';
        when 'status' then outcome := 'succeeded'; note := 'status ' || _env.message;
        when 'invalid' then
          -- Its own outcome: final, never retried, not a dead letter.
          outcome := 'validation_failed'; error := format('%s: validation failure: %s', _function_name, _env.message);
          note := _env.message;
        else outcome := 'failed'; error := format('%s: %s', _function_name, _env.message);
      end case;
      select s.result into result
        from queues.settle_tasks('{}', '{}', array[_task_id], array[_task_lease_id], array[outcome],
                                 -- A validation failure is final: no retry.
                                 array[case when _env.outcome = 'invalid' then false end],
                                 case when error is null then '{}'::bigint[] else array[_task_id] end,
                                 case when error is null then '{}'::text[] else array[error] end) s;
      if result not in ('completed', 'retry_scheduled') then
        -- Refused (the lease was lost meanwhile): the step's writes must not commit.
        raise exception 'refused: %', result using errcode = 'QREFU';
      end if;
    end if;
  exception
    when sqlstate 'QREFU' then
      outcome := null; error := null; note := null;
    when serialization_failure or deadlock_detected then
      result := 'transient'; outcome := null; error := sqlerrm; note := null;
    when others then
      -- Rolled back; record why, in a subtransaction of its own.
      outcome := 'failed';
      error := case when sqlstate = 'QSTEP' then sqlerrm else format('%s raised: %s', _function_name, sqlerrm) end;
      note := null;
      select s.result into result
        from queues.settle_tasks('{}', '{}', array[_task_id], array[_task_lease_id], array['failed'], null,
                                 array[_task_id], array[error]) s;
  end;
  if result = 'started' then
    result := 'lease_lost';
  end if;
end;
$$;

-- Completes steps that ran in the caller's transaction (queues.run_steps): as
-- queues.settle_tasks (fenced by lease, retries, error rows only for completions this call
-- made), and keeps _results[i] (the step's envelope; NULL for none) as the task's result
-- (queues.task_result) only if this call completed the task or scheduled its retry.
-- Returns one row per task, in input order, with the result of queues.complete_tasks.
-- Refuses: a lease id missing (22004), arrays of different lengths, a result that is not
-- a JSON object (22023), a result over queues.max_payload_bytes() (54000).
create or replace function queues.complete_steps(
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _outcomes       text[],
  _retries        boolean[],
  _error_task_ids bigint[],
  _error_messages text[],
  _results        jsonb[]
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _task_ids is null or _task_lease_ids is null or _results is null then
    raise exception 'task_ids, task_lease_ids and results must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> cardinality(_task_ids) or cardinality(_results) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids and results must have one element per task (% tasks, % lease ids, % results)',
      cardinality(_task_ids), cardinality(_task_lease_ids), cardinality(_results) using errcode = '22023';
  end if;
  if array_position(_task_lease_ids, null) is not null then
    raise exception 'task_lease_ids must not contain null: a step completes under its lease' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_results) r where jsonb_typeof(r) <> 'object') then
    raise exception 'results must be JSON objects' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_results) r where pg_column_size(r) > queues.max_payload_bytes()) then
    raise exception 'a result is over the limit of % bytes', queues.max_payload_bytes() using errcode = '54000';
  end if;
  return query
  with done as (
    select s.task_id, s.result, row_number() over () as ord
      from queues.settle_tasks('{}', '{}', _task_ids, _task_lease_ids, _outcomes, _retries,
                               _error_task_ids, _error_messages) s
  ),
  kept as (
    insert into queues.task_result (task_id, task_lease_id, result)
    select r.task_id, r.task_lease_id, r.result
      from unnest(_task_ids, _task_lease_ids, _results) as r(task_id, task_lease_id, result)
      join done d on d.task_id = r.task_id and d.result in ('completed', 'retry_scheduled')
     where r.result is not null
  )
  select d.task_id, d.result from done d order by d.ord;
end;
$$;

-- Runs db_function steps claimed by the caller, in input order, in one call, with the
-- guarantees of queues.run_step for each: its body runs once; its writes and its
-- completion commit together or not at all, exactly once; an error is recorded against its
-- own task and rolls back only its own step; a step whose lease is no longer held is not
-- run. The caller marks the steps started before the call (as the worker's start recorder
-- does for every task).
--
-- How (the cost per step is a subtransaction and a function call, not a statement of the
-- queue's):
--   1. queues.current_leases: the steps whose lease is held (the others: 'lease_lost',
--      not run). No lock is held on a step's task while it runs: a heartbeat, a release
--      at shutdown or a revocation is not held up by a long call.
--   2. Each step in a subtransaction of its own (a BEGIN ... EXCEPTION block): its
--      function (resolved and its EXECUTE privilege checked once per call, as
--      internal.run_function does; called through internal.call_runnable, whose static
--      calls keep their plans), then its envelope read. A raise, a malformed envelope
--      or a result over queues.max_payload_bytes() rolls back that step only, which is
--      completed 'failed' with the others; a serialization failure or a deadlock rolls it
--      back and records nothing ('transient'). Nothing runs a step twice.
--   3. One statement completes every step that ran and keeps its envelope as its result
--      (queues.complete_steps). If one of these completions is refused (another
--      transaction took the lease during the call: an expiry claimed, a revocation), the
--      writes of its step must not commit: the whole call is rolled back, that step is
--      answered as refused ('lease_lost'), and every other step that ran 'transient'
--      (nothing recorded; it runs again under a new lease).
-- A step can also change the tasks of the call itself (task code that completes or
-- releases a task). The call watches its own updates and deletes of queues.task_pending
-- (the transaction's counts, pg_stat_get_xact_tuples_updated and _deleted; every step is
-- watched when track_counts is off): after a step that made any, each step runs only if
-- its lease is still current (else 'lease_lost'), and a step that changed its own task is
-- rolled back and completed 'failed', one that changed the task of a step before it (whose
-- completion is still to be written) is rolled back and answered 'transient' (it runs
-- again under a new lease, after that task's completion).
-- A step sees the writes of the steps before it in the call; it does not see their
-- completions (they are written at the end). The call is one transaction: now() is the
-- call's start for every step in it (the worker keeps a call to about 200 ms of steps).
-- Runs as the caller (security invoker): steps have the worker's privileges, not the owner's.
-- Returns one row per step, in input order: result as queues.complete_tasks ('completed',
-- 'retry_scheduled', 'lease_lost', ...) or 'transient' (the step was rolled back and
-- nothing recorded: release the lease, it runs again), with outcome, error, note.
create or replace function queues.run_steps(_task_ids bigint[], _task_lease_ids bigint[], _function_names text[], _payloads jsonb[])
  returns table (task_id bigint, result text, outcome text, error text, note text)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _n integer;
  _held boolean[];
  -- Per step, in input order.
  _result text[];
  _outcome text[];
  _error text[];
  _note text[];
  _retry boolean[];
  -- The envelope to keep (null for none).
  _kept jsonb[];
  -- Ran (or could not run): completed by the final statement.
  _batched boolean[];
  -- Functions resolved in this call: name, name if it can run, or why it cannot.
  _names text[] := '{}';
  _calls text[] := '{}';
  _problems text[] := '{}';
  _oid regprocedure;
  _call text;
  _problem text;
  _i integer;
  _k integer;
  _m integer;
  _name text;
  _raw jsonb;
  _env record;
  _kind text;
  _ids bigint[];
  _settled text[];
  _max_bytes integer := queues.max_payload_bytes();
  -- The transaction's own updates and deletes of queues.task_pending (see above).
  _pending regclass := 'queues.task_pending'::regclass;
  _counted boolean := current_setting('track_counts')::boolean;
  _changes_at_start bigint;
  _changes bigint;
  _current boolean[];
begin
  if _task_ids is null or _task_lease_ids is null or _function_names is null or _payloads is null then
    raise exception 'task_ids, task_lease_ids, function_names and payloads must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> cardinality(_task_ids) or cardinality(_function_names) <> cardinality(_task_ids)
     or cardinality(_payloads) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids, function_names and payloads must have one element per task' using errcode = '22023';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 steps per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null then
    raise exception 'task_ids and task_lease_ids must not contain null' using errcode = '22004';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;
  _n := cardinality(_task_ids);
  if _n = 0 then
    return;
  end if;
  _held := queues.current_leases(_task_ids, _task_lease_ids);
  _result := array_fill(null::text, array[_n]);
  _outcome := _result;
  _error := _result;
  _note := _result;
  _retry := array_fill(null::boolean, array[_n]);
  _batched := array_fill(false, array[_n]);
  _kept := array_fill(null::jsonb, array[_n]);
  _changes_at_start := pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending);

  begin
    for _i in 1 .. _n loop
      if not _held[_i] then
        -- Not run.
        _result[_i] := 'lease_lost';
        continue;
      end if;
      -- A step before it changed pending rows: is this lease still current?
      if (not _counted
          or pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending) <> _changes_at_start)
         and not queues.is_current_lease(_task_ids[_i], _task_lease_ids[_i]) then
        _result[_i] := 'lease_lost';
        continue;
      end if;
      _name := _function_names[_i];

      _k := array_position(_names, _name);
      if _k is null then
        -- Resolved as internal.run_function does, once per call.
        begin
          _oid := internal.resolve_runnable_function(_name);
          if not has_function_privilege(_oid, 'execute') then
            raise exception 'permission denied: % may not execute %', current_user, _name using errcode = '42501';
          end if;
          _call := _name;
          _problem := null;
        exception when others then
          _call := null;
          _problem := format('%s raised: %s', _name, sqlerrm);
        end;
        _names := _names || _name;
        _calls := _calls || _call;
        _problems := _problems || _problem;
        _k := cardinality(_names);
      end if;

      if _problems[_k] is not null then
        -- Cannot run (unknown, unregistered, not allowed): failed, nothing ran.
        _outcome[_i] := 'failed';
        _error[_i] := _problems[_k];
        _batched[_i] := true;
        continue;
      end if;

      _changes := pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending);
      begin
        -- A static call per registered function (internal.build_call_runnable), planned
        -- once per session; the name was resolved and checked above.
        _raw := internal.call_runnable(_name, _payloads[_i]);
        if _raw = '{"success": true}'::jsonb then
          _kind := 'succeeded';
        else
          select * into _env from queues.parse_envelope(_raw);
          _kind := _env.outcome;
          if _kind = 'malformed' then
            raise exception '%: %', _name, _env.message using errcode = 'QSTEP';
          end if;
          if pg_column_size(_raw) > _max_bytes then
            raise exception 'result is % bytes, over the limit of % bytes', pg_column_size(_raw), _max_bytes
              using errcode = '54000';
          end if;
        end if;
        if not _counted
           or pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending) <> _changes then
          -- The step updated or deleted pending rows: its own task, and those of the steps
          -- before it whose completions are still to be written, must be as they were.
          _current := queues.current_leases(
            array(select s.task_id from unnest(_task_ids, _batched) with ordinality as s(task_id, batched, ord)
                   where s.batched and s.ord < _i order by s.ord) || _task_ids[_i],
            array(select s.lease from unnest(_task_lease_ids, _batched) with ordinality as s(lease, batched, ord)
                   where s.batched and s.ord < _i order by s.ord) || _task_lease_ids[_i]);
          if not _current[cardinality(_current)] then
            raise exception '%: the step changed its own task (completed, failed or released it); the call that runs a step completes it',
              _name using errcode = 'QSTEP';
          end if;
          if false = any (_current) then
            raise exception '%: the step changed the task of a step that ran before it in the same call; it runs again after that completion',
              _name using errcode = 'QMEDL';
          end if;
        end if;
        -- Past every check: the step stands.
        case _kind
          when 'succeeded' then _outcome[_i] := 'succeeded';
          when 'status' then _outcome[_i] := 'succeeded'; _note[_i] := 'status ' || _env.message;
          when 'invalid' then
            _outcome[_i] := 'validation_failed'; _error[_i] := format('%s: validation failure: %s', _name, _env.message);
            _note[_i] := _env.message;
            -- A validation failure is final: no retry.
            _retry[_i] := false;
          else _outcome[_i] := 'failed'; _error[_i] := format('%s: %s', _name, _env.message);
        end case;
        _kept[_i] := _raw;
        _batched[_i] := true;
      exception
        when sqlstate 'QMEDL' then
          -- Rolled back, nothing recorded.
          _result[_i] := 'transient';
          _error[_i] := sqlerrm;
        when serialization_failure or deadlock_detected then
          -- Rolled back, nothing recorded: it runs again.
          _result[_i] := 'transient';
          _error[_i] := sqlerrm;
        when others then
          -- Rolled back: completed 'failed', with why.
          _outcome[_i] := 'failed';
          _error[_i] := case when sqlstate = 'QSTEP' then sqlerrm else format('%s raised: %s', _name, sqlerrm) end;
          _batched[_i] := true;
      end;
    end loop;

    -- The completions (and kept envelopes) of every step that ran, in one statement.
    if true = any (_batched) then
      select array_agg(c.task_id order by c.ord), array_agg(c.result order by c.ord)
        into _ids, _settled
        from queues.complete_steps(
               array(select s.task_id from unnest(_task_ids, _batched) with ordinality as s(task_id, batched, ord)
                      where s.batched order by s.ord),
               array(select s.lease from unnest(_task_lease_ids, _batched) with ordinality as s(lease, batched, ord)
                      where s.batched order by s.ord),
               array(select s.outcome from unnest(_outcome, _batched) with ordinality as s(outcome, batched, ord)
                      where s.batched order by s.ord),
               array(select s.retry from unnest(_retry, _batched) with ordinality as s(retry, batched, ord)
                      where s.batched order by s.ord),
               array(select s.task_id from unnest(_task_ids, _error, _batched) with ordinality as s(task_id, error, batched, ord)
                      where s.batched and s.error is not null order by s.ord),
               array(select s.error from unnest(_error, _batched) with ordinality as s(error, batched, ord)
                      where s.batched and s.error is not null order by s.ord),
               array(select s.kept from unnest(_kept, _batched) with ordinality as s(kept, batched, ord)
                      where s.batched order by s.ord)
             ) with ordinality as c(task_id, result, ord);
      if exists (select 1 from unnest(_settled) r where r not in ('completed', 'retry_scheduled')) then
        -- A lease taken during the call: its step's writes must not commit.
        raise exception 'a completion of the call was refused' using errcode = 'QREFU';
      end if;
      _m := 1;
      for _i in 1 .. _n loop
        if _batched[_i] then
          if _ids[_m] <> _task_ids[_i] then
            raise exception 'completions out of order' using errcode = 'XX000';
          end if;
          _result[_i] := _settled[_m];
          _m := _m + 1;
        end if;
      end loop;
    end if;
  exception when sqlstate 'QREFU' then
    -- Everything above is rolled back, nothing recorded: the refused steps are answered as
    -- refused; every other step that ran runs again under a new lease.
    _m := 1;
    for _i in 1 .. _n loop
      if _batched[_i] then
        if _settled[_m] not in ('completed', 'retry_scheduled') then
          _result[_i] := _settled[_m];
          _error[_i] := null;
        else
          _result[_i] := 'transient';
          _error[_i] := 'a completion of another step of the call was refused (its lease was taken); the call was rolled back';
        end if;
        _outcome[_i] := null;
        _note[_i] := null;
        _m := _m + 1;
      end if;
    end loop;
  end;

  return query
  select s.task_id, s.result, s.outcome, s.error, s.note
    from unnest(_task_ids, _result, _outcome, _error, _note) with ordinality as s(task_id, result, outcome, error, note, ord)
   order by s.ord;
end;
$$;
--! EndIncluded queues/steps.sql
--! Included queues/complete.sql
-- Completion: queues.complete_task (one) and queues.complete_tasks (a batch).
--
-- Fencing: a caller that passes the lease it holds can only complete while that lease
-- is the task's newest one. A worker whose lease expired and was re-claimed by another
-- worker gets 'lease_lost' and changes nothing.

-- Completes a batch. Parallel arrays: _task_lease_ids, _outcomes and _retries may be
-- null (no fencing, outcome by default, retries allowed) or have one element per task
-- (elements may be null).
-- The default outcome (a null element) keeps a failure reported with queues.fail_task:
-- 'failed' when an error was recorded against the task during its current run (under
-- its current lease, or without a lease since that lease was taken; since it was
-- enqueued when it holds none), else 'succeeded'. So the specification's worker contract,
-- fail_task and then complete_task, completes the task failed.
-- A 'failed' outcome for a task with max_attempts > 1 and attempts left is not terminal
-- unless its _retries element is false (a failure no retry can mend, such as a
-- validation failure): the attempt is recorded (queues.task_attempt_failed) and the task
-- runs again after an exponential backoff (internal.backoff).
-- 'validation_failed' (a validation_failure_message: a business outcome no retry can
-- mend) is final too, and, unlike 'failed', never a dead letter.
-- A keyed task's lease completes only while the task holds its resource key.
-- Returns one row per input task, in input order: result is
--   'completed'          this call completed it
--   'retry_scheduled'    a failed attempt of a task that runs again
--   'already_completed'  it was completed before by a caller passing the same lease, or
--                        this call passes none (idempotent; nothing changed)
--   'lease_lost'         _task_lease_id is not the task's current lease, its resource key
--                        went to another task, or the task was completed by anyone not
--                        passing this lease: another worker, an unfenced caller, or the
--                        queue abandoning it (nothing changed)
--   'unknown_task'       no such task
create or replace function queues.complete_tasks(
  _task_ids       bigint[],
  _task_lease_ids bigint[] default null,
  _outcomes       text[] default null,
  _retries        boolean[] default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  -- Planned once, not per call: the statements below have one good plan whatever the
  -- arguments (index order with a LIMIT; primary-key probes), and planning was about
  -- 40% of the call's cost.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _bad text;
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 tasks per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain null' using errcode = '22004';
  end if;
  if _task_lease_ids is not null and cardinality(_task_lease_ids) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids must have one element per task (% tasks, % lease ids)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if _outcomes is not null and cardinality(_outcomes) <> cardinality(_task_ids) then
    raise exception 'outcomes must have one element per task (% tasks, % outcomes)',
      cardinality(_task_ids), cardinality(_outcomes) using errcode = '22023';
  end if;
  select o into _bad from unnest(_outcomes) o
   where o is not null and o not in ('succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed') limit 1;
  if found then
    raise exception 'unknown outcome %; expected succeeded, failed, abandoned, cancelled or validation_failed',
      quote_literal(left(_bad, 100)) using errcode = '22023';
  end if;
  if _retries is not null and cardinality(_retries) <> cardinality(_task_ids) then
    raise exception 'retries must have one element per task (% tasks, % retries)',
      cardinality(_task_ids), cardinality(_retries) using errcode = '22023';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;

  perform queues.lock_resource_keys(_task_ids);

  return query
  with input as (
    select i.task_id, i.task_lease_id, i.outcome,
           coalesce(i.retry, true) as may_retry, i.ord
      from unnest(_task_ids,
                  coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])),
                  coalesce(_outcomes, array_fill(null::text, array[cardinality(_task_ids)])),
                  coalesce(_retries, array_fill(null::boolean, array[cardinality(_task_ids)])))
           with ordinality as i(task_id, task_lease_id, outcome, retry, ord)
  ),
  -- The pending rows this call may act on, locked: a concurrent claim skips them, a
  -- concurrent completion waits and then finds nothing.
  held as (
    select h.task_id, h.task_type, h.current_lease_id, h.resource_key, h.task_lease_id, h.outcome,
           h.outcome = 'failed' and h.may_retry and h.failed_attempts + 1 < h.max_attempts as retry,
           h.failed_attempts
      from (
    select p.task_id, p.task_type, p.current_lease_id, p.resource_key, i.task_lease_id, i.may_retry,
           p.failed_attempts, p.max_attempts,
           case
             when i.outcome is not null then i.outcome
             -- The default: an error of the current run makes it a failure (evaluated only
             -- for a null outcome; the worker always names its outcome).
             when exists (select 1 from queues.error e
                           where e.task_id = p.task_id
                             and (e.task_lease_id = p.current_lease_id
                                  or (e.task_lease_id is null
                                      and e.created_at >= coalesce(
                                            (select l.leased_at from queues.task_lease l
                                              where l.task_id = p.task_id and l.task_lease_id = p.current_lease_id),
                                            (select t.enqueued_at from queues.task t where t.task_id = p.task_id)))))
               then 'failed'
             else 'succeeded'
           end as outcome
      from queues.task_pending p
      join input i on i.task_id = p.task_id
     -- A primary-key probe per task, whatever the planner estimates for the input.
     where p.task_id = any (_task_ids)
       and (i.task_lease_id is null
            or (p.current_lease_id = i.task_lease_id
                -- A keyed task completes under its lease only while it holds its key.
                and (p.resource_key is null
                     or exists (select 1 from queues.resource_lease r
                                 where r.resource_key = p.resource_key and r.task_id = p.task_id))))
       for update of p
      ) h
  ),
  -- Simple retries: a failed attempt with attempts left runs again after a backoff.
  retry_facts as (
    insert into queues.task_attempt_failed (task_id, task_lease_id, failed_at, retry_at)
    select h.task_id, h.current_lease_id, now(), now() + internal.backoff(h.failed_attempts, 3600)
      from held h where h.retry
    returning task_id, retry_at
  ),
  retried as (
    update queues.task_pending p
       set available_at = r.retry_at,
           current_lease_id = null,
           failed_attempts = p.failed_attempts + 1
      from retry_facts r
     where p.task_id = r.task_id
       and p.task_id = any (array(select r2.task_id from retry_facts r2))
    returning p.task_id
  ),
  removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select h.task_id from held h where not h.retry))
    returning p.task_id
  ),
  completed as (
    insert into queues.task_completed (task_id, task_lease_id, outcome, task_type)
    -- The lease the caller held; null when it passed none. A fenced caller is told
    -- 'already_completed' only for a completion made under its own lease.
    select h.task_id, h.task_lease_id, h.outcome, h.task_type
      from held h where not h.retry
    on conflict do nothing
    returning task_completed.task_id
  ),
  -- The task's resource key (if any) is free again, whether it completed or waits to retry.
  unlocked as (
    delete from queues.resource_lease r
     using held h
     where h.resource_key is not null and r.resource_key = h.resource_key and r.task_id = h.task_id
  )
  select i.task_id,
         case
           when c.task_id is not null then 'completed'
           when rt.task_id is not null then 'retry_scheduled'
           -- Completed under another lease: the caller's lease was taken over, and its
           -- transaction must not commit as if it had completed the task.
           when exists (select 1 from queues.task_completed tc
                         where tc.task_id = i.task_id
                           and i.task_lease_id is not null
                           and tc.task_lease_id is distinct from i.task_lease_id)
             then 'lease_lost'
           when exists (select 1 from queues.task_completed tc where tc.task_id = i.task_id)
             then 'already_completed'
           when not exists (select 1 from queues.task t where t.task_id = i.task_id)
             then 'unknown_task'
           else 'lease_lost'
         end
    from input i
    left join completed c on c.task_id = i.task_id
    left join retried rt on rt.task_id = i.task_id
   order by i.ord;
end;
$$;

-- The seeds' completion, extended: idempotent (true when this call completed the task or
-- scheduled its retry, false when it was already completed); fenced when _task_lease_id
-- is given (raises when that lease is no longer current); raises for an unknown task.
create or replace function queues.complete_task(
  _task_id       bigint,
  _task_lease_id bigint default null,
  _outcome       text default null
) returns boolean
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result text;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  select c.result into _result
    from queues.complete_tasks(array[_task_id], array[_task_lease_id], array[_outcome]) c;
  if _result = 'unknown_task' then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  elsif _result = 'lease_lost' then
    -- The queue's lease-loss marker: SQLSTATE 55000 with schema queues and constraint
    -- task_lease_current (clients read lease loss from it, not from 55000 alone).
    raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', schema = 'queues', constraint = 'task_lease_current',
            hint = 'Another worker claimed the task after this lease expired, or it was completed without this lease.';
  end if;
  return _result in ('completed', 'retry_scheduled');
end;
$$;
--! EndIncluded queues/complete.sql
--! Included queues/settle.sql
-- The worker's completer: one call per round trip that marks tasks started and completes
-- others, with their error rows (queues.settle_tasks, owner-run: security definer like
-- every queue writer); and a completion with its handler in one statement
-- (queues.settle_with_handler, run as the worker).

-- Marks leases started (see queues.task_lease_started) and completes tasks (see
-- queues.complete_tasks: fenced by lease, retries, results), recording each error message
-- against its task in the same transaction, only if this call completed the task or
-- scheduled its retry (a refused completion records nothing).
--   _started_task_ids, _started_lease_ids   parallel: leases whose tasks are about to run
--   _task_ids, _task_lease_ids, _outcomes, _retries   parallel: as queues.complete_tasks
--   _error_task_ids, _error_messages        parallel: errors, any number per completed task
-- Returns one row per start (kind 'start', result 'started' or 'lease_lost': the lease is
-- no longer the task's current one, and the task must not run) and one per completion
-- (kind 'complete', result as queues.complete_tasks), starts first, each in input order.
create or replace function queues.settle_tasks(
  _started_task_ids  bigint[],
  _started_lease_ids bigint[],
  _task_ids          bigint[],
  _task_lease_ids    bigint[] default null,
  _outcomes          text[] default null,
  _retries           boolean[] default null,
  _error_task_ids    bigint[] default null,
  _error_messages    text[] default null
) returns table (task_id bigint, kind text, result text)
  language plpgsql volatile
  security definer
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _started bigint[] := coalesce(_started_task_ids, '{}');
  _started_leases bigint[] := coalesce(_started_lease_ids, '{}');
  _errors bigint[] := coalesce(_error_task_ids, '{}');
  _messages text[] := coalesce(_error_messages, '{}');
begin
  perform queues.assert_lease_pairs(_started, _started_leases);
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

  -- Starts: a lease that is still its task's current lease.
  return query
  with input as (
    select i.task_id, i.task_lease_id, i.ord
      from unnest(_started, _started_leases) with ordinality as i(task_id, task_lease_id, ord)
  ),
  held as (
    select p.task_id, p.current_lease_id
      from queues.task_pending p
     where p.task_id = any (_started)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id)
    select i.task_id, i.task_lease_id
      from input i join held h on h.task_id = i.task_id and h.current_lease_id = i.task_lease_id
    on conflict do nothing
  )
  select i.task_id, 'start'::text,
         case when h.task_id is not null then 'started' else 'lease_lost' end
    from input i
    left join held h on h.task_id = i.task_id and h.current_lease_id = i.task_lease_id
   order by i.ord;

  if cardinality(coalesce(_task_ids, '{}')) = 0 then
    return;
  end if;

  return query
  with done as (
    select c.task_id, c.result, row_number() over () as ord
      from queues.complete_tasks(_task_ids, _task_lease_ids, _outcomes, _retries) c
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
  select d.task_id, 'complete'::text, d.result from done d order by d.ord;
end;
$$;

-- A completion and its handler in one statement: the worker's completion of a handler task
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
-- the outcome and the errors recorded (or refused). Messages are cut at 8,000 characters
-- (as the worker's). Runs as the caller (security invoker): the handler has the worker's
-- privileges, not the owner's.
create or replace function queues.settle_with_handler(
  _task_id bigint, _task_lease_id bigint, _outcome text, _errors text[], _retry boolean,
  _handler text, _body jsonb, _mode text, _raised_prefix text,
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
      from queues.settle_tasks('{}', '{}', array[_task_id], array[_task_lease_id], array[outcome], array[_retry],
                               array_fill(_task_id, array[cardinality(errors)]), errors) s;
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
  queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text) from public;
grant execute on function
  queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text) to :DATABASE_WORKER;
--! EndIncluded queues/settle.sql
--! Included public/role_based_worker.sql
-- The role-based worker system's SQL names (the specification's
-- role-based-worker-system.md), in schema public so that they resolve unqualified on the
-- default search_path ("$user", public) of every database user, as the specification
-- writes them. Each is a thin face over the queue's own objects; nothing here keeps
-- state. Who may use what: sql/public/privileges.sql.
--
--   v_worker_capacity                          view: capacity per role (admin.capacity)
--   worker_tasks                               view: every task in the specification's
--                                              columns and statuses (read only)
--   recover_stale_tasks(threshold_minutes)     revokes the leases of workers silent for
--                                              that long (admin.recover_stale_leases)
--   generate_resync_tasks(batches, date)       menus.generate_resync_tasks

-- Capacity per role, in the specification's columns, then the queue's own figures. The
-- view calls admin.capacity(), so its reader needs EXECUTE on that function (the api
-- database user has it). See sql/admin/capacity.sql for how each figure is measured:
-- tasks_per_worker_hour is completions per busy worker-hour (capacity, not the arrival
-- rate) and estimated_hours_to_drain counts the tasks ready now.
create or replace view public.v_worker_capacity as
select c.task_type                as role,
       c.pending                  as pending_tasks,
       c.ready                    as ready_tasks,
       c.running                  as running_tasks,
       c.active_workers,
       c.tasks_per_worker_hour,
       c.estimated_hours_to_drain,
       c.workers_needed_1h,
       c.workers_needed_4h,
       c.workers_needed_8h,
       c.completed_in_window,
       c.window_workers,
       c.window_seconds
  from admin.capacity() c;
comment on view public.v_worker_capacity is
  'The role-based specification''s capacity view: admin.capacity() per role (task type), in its column names.';

-- Every task as a row of the specification's worker_tasks table, derived from the facts
-- (nothing is stored; it cannot be written). Columns:
--   id                 queues.task.task_id
--   role               task_type
--   dispensary_id      payload.store_id when it is a whole number (menus.store), else null
--   platform           payload.platform, else null
--   status             pending    not completed and not held: scheduled, ready, or waiting
--                                 for a retry
--                      claimed    held by a live lease whose run has not started
--                      running    held by a live lease whose run started
--                      stale      held by a lease that expired uncompleted, or whose
--                                 worker is silent for longer than three of its heartbeat
--                                 intervals (its worker died: recover_stale_tasks)
--                      completed  completed 'succeeded'
--                      failed     completed 'failed', 'abandoned' or 'validation_failed'
--                      cancelled  completed 'cancelled'
--   priority, scheduled_for (scheduled_at), created_at (enqueued_at)
--   worker_id          the newest lease's worker
--   claimed_at         the newest lease's leased_at
--   started_at         the newest lease's start mark (queues.task_lease_started)
--   completed_at       queues.task_completed.completed_at
--   last_heartbeat_at  the newest lease's last sign of life: its worker's last heartbeat
--                      while it holds the task, else the lease's newest extension, start
--                      or claim
--   result             the newest result recorded (queues.task_result)
--   error_message      the newest error (queues.error)
--   retry_count        failed attempts that were retried (queues.task_attempt_failed)
--   max_retries        max_attempts - 1
--   updated_at         the newest of the times above
--   outcome            the completion's own outcome (null while pending), beside status
-- Reading it reads every task (a row costs a few primary-key probes): it is for ad-hoc
-- checks such as the specification's health-check queries. The REST API and the admin
-- functions answer the same questions from bounded reads.
create or replace view public.worker_tasks as
select t.task_id                                      as id,
       t.task_type                                    as role,
       case when t.payload ->> 'store_id' ~ '^[0-9]{1,18}$' then (t.payload ->> 'store_id')::bigint end
                                                      as dispensary_id,
       case when jsonb_typeof(t.payload -> 'platform') = 'string' then left(t.payload ->> 'platform', 100) end
                                                      as platform,
       case
         when c.outcome = 'succeeded' then 'completed'
         when c.outcome in ('failed', 'abandoned', 'validation_failed') then 'failed'
         when c.outcome is not null then c.outcome
         when p.current_lease_id is null then 'pending'
         when p.available_at <= now() then 'stale'
         when w.last_seen_at < now() - make_interval(secs => 3 * coalesce(w.heartbeat_interval_ms, 30000) / 1000.0)
              and w.stopped_at is null then 'stale'
         when st.started_at is null then 'claimed'
         else 'running'
       end                                            as status,
       t.priority,
       t.scheduled_at                                 as scheduled_for,
       l.worker_id,
       l.leased_at                                    as claimed_at,
       st.started_at,
       c.completed_at,
       case when c.task_id is null and p.current_lease_id = l.task_lease_id and w.last_seen_at is not null
            then w.last_seen_at
            else greatest(l.leased_at, st.started_at,
                          (select max(x.extended_at) from queues.task_lease_extension x
                            where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id))
       end                                            as last_heartbeat_at,
       (select r.result from queues.task_result r where r.task_id = t.task_id
         order by r.task_lease_id desc limit 1)      as result,
       (select e.error_message from queues.error e where e.task_id = t.task_id
         order by e.error_id desc limit 1)           as error_message,
       coalesce(p.failed_attempts,
                (select count(*)::integer from queues.task_attempt_failed f where f.task_id = t.task_id))
                                                      as retry_count,
       t.max_attempts - 1                             as max_retries,
       t.enqueued_at                                  as created_at,
       greatest(t.enqueued_at, l.leased_at, st.started_at, c.completed_at)
                                                      as updated_at,
       c.outcome
  from queues.task t
  left join queues.task_pending p on p.task_id = t.task_id
  left join queues.task_completed c on c.task_id = t.task_id
  -- The newest lease, with its worker's id (a lease names its worker by key in
  -- queues.worker_name, or, written before that, by id).
  left join lateral (
    select y.task_id, y.task_lease_id, y.leased_at,
           coalesce(y.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = y.worker_key))
             as worker_id
      from queues.task_lease y
     where y.task_id = t.task_id
     order by y.task_lease_id desc
     limit 1
  ) l on true
  left join queues.task_lease_started st on st.task_id = l.task_id and st.task_lease_id = l.task_lease_id
  left join queues.worker w on w.worker_id = l.worker_id;
comment on view public.worker_tasks is
  'The role-based specification''s worker_tasks table as a read-only view over the queue''s facts, with its statuses.';

-- The specification's stale recovery: the live leases of workers not seen for
-- threshold_minutes (null: 10, as in the specification; 1 to 1440) are revoked, and their
-- tasks are claimable at once (pending again). A task whose revoked leases reach
-- MAX_LEASES is abandoned at its next claim, where the specification stops at
-- max_retries. A worker is never taken for dead sooner than three of its own heartbeat
-- intervals. Returns the leases revoked. The argument keeps the specification's name
-- (threshold_minutes), so `recover_stale_tasks(threshold_minutes => 5)` works too.
create or replace function public.recover_stale_tasks(threshold_minutes integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _minutes integer := coalesce(threshold_minutes, 10);
begin
  if _minutes not between 1 and 1440 then
    raise exception 'threshold_minutes must be between 1 and 1440, got %', _minutes using errcode = '22023';
  end if;
  return query select r.task_id, r.task_lease_id, r.worker_id from admin.recover_stale_leases(_minutes * 60) r;
end;
$$;

-- The specification's daily resync generation, unqualified: menus.generate_resync_tasks
-- (sql/menus/generate.sql), run as the caller (who needs EXECUTE on it too).
create or replace function public.generate_resync_tasks(_batches integer, _date date)
  returns table (batch integer, scheduled_at timestamptz, task_count integer)
  language sql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
  select * from menus.generate_resync_tasks(_batches, _date)
$$;
--! EndIncluded public/role_based_worker.sql

--! split: 600-flow-enqueue.sql
-- Unique tasks (sql/queues/unique.sql), a default of 25 attempts for tasks enqueued
-- without max_attempts (queues.default_max_attempts), with the business processes'
-- channel tasks and supervisor runs enqueued with one attempt as before, and schedules
-- in a time zone (schedules.schedule_version.time_zone, sql/schedules/cron.sql).
set local lock_timeout = '5s';

create table if not exists queues.task_unique (
  task_id bigint primary key,
  unique_key text not null check (length(unique_key) between 1 and 200),
  enqueued_at timestamptz not null default now()
);
comment on table queues.task_unique is
  'Append-only: the unique key a task was enqueued with (queues.enqueue_unique). Rows of tasks whose history was dropped are removed by queues.prune_task_unique_keys().';
drop trigger if exists forbid_update on queues.task_unique;
create trigger forbid_update before update on queues.task_unique
  for each statement execute function queues.forbid_fact_update();

create table if not exists queues.task_unique_key (
  unique_key text primary key,
  task_id bigint
) with (autovacuum_vacuum_cost_delay = 0, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        fillfactor = 80);
comment on table queues.task_unique_key is
  'Derived: per unique key, the newest task enqueued with it; the key is free once that task is no longer pending. Rebuild with queues.rebuild_task_unique_key().';

drop function if exists queues.enqueue_task(text, jsonb, timestamptz, integer, text, integer, boolean, boolean);

--! Included queues/enqueue.sql
-- queues.enqueue / queues.enqueue_many: add tasks. Apps call them through
-- @org/queue-client; they refuse internal task types (sql/queues/enqueue_permission.sql).
-- The owner's SQL (supervisors, handlers, kickoffs, schedules) calls the grant-less
-- queues.enqueue_internal. The worker never enqueues.
--
-- What one enqueue costs (BENCHMARKS.md, "where a task's time goes"): for an app, one
-- probe of queues.internal_task_type; its fields checked as plain expressions; one
-- statement that reads the task type and inserts the task and its claim-index row; one
-- pg_notify. A batch is one insert statement whatever its size: the rows are checked
-- inside it (the first bad one, in input order, raises and the statement writes
-- nothing), the task types read once per call. queues.task has no foreign key to queues.task_type: it
-- locked the type's row (FOR KEY SHARE, a MultiXact once callers overlap) for every task;
-- queues.guard_task_type_in_use (triggers.sql) refuses deleting or renaming a type in use.
--
-- Wake-ups: an enqueue that adds a task due within a minute (ready now, or scheduled a
-- moment ahead, like a supervisor's next run) sends NOTIFY queues_task_ready, and
-- PostgreSQL folds identical notifications of one transaction into one at commit. A
-- worker that finds nothing ready asks when the next task is due
-- (queues.next_claim_in_ms) and looks again then; a task due later is found by a
-- worker's poll, which asks the same. A
-- notifying commit holds a database-wide lock from just before its commit record until
-- it ends, so notifying transactions commit one at a time, each waiting for its own WAL
-- flush. queues.enqueue_and_commit (for callers outside a transaction block: the
-- client's enqueue on a pool) commits the task first, without the lock, and notifies in
-- a second transaction that writes no data and so does not wait for a flush.

-- Payloads are limited so one bad caller cannot fill the table or the worker's memory.
create or replace function queues.max_payload_bytes() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 1048576 $$;

-- And so is their nesting: a payload nested deeper than queues.max_payload_depth()
-- containers (objects and arrays) is refused, since parsers that recurse (the worker's
-- among them) would run out of stack. The test is jsonb_path_exists(payload,
-- 'strict $.**{65}'), written out where it is used (65 = max_payload_depth() + 1: a
-- jsonpath level must be a literal).
create or replace function queues.max_payload_depth() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 64 $$;

-- The attempts a task gets when its enqueue names none: 25, as graphile-worker and River,
-- with the queue's backoff between them (internal.backoff: 5 s, 10 s, 20 s, ... capped
-- at an hour, about 19 hours in all). The owner's SQL that enqueues the tasks of a
-- business process (channel tasks, supervisor runs) passes its own max_attempts (1): a
-- process retries through new attempts, never through task retries.
create or replace function queues.default_max_attempts() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 25 $$;

-- The core of the single enqueue (no grants): validates one task and inserts it and its
-- claim-index row in one statement; returns its task_id. _public: called for an app or
-- the API (queues.enqueue), so internal task types are refused (42501) unless the
-- session is the owner's. _notify: send the wake-up (false: the caller sends it after
-- its commit, see queues.enqueue_and_commit). NULL arguments take the defaults (now, 0,
-- no resource key, queues.default_max_attempts()).
-- _check_only: run every check (the task type's existence included) and return NULL
-- without writing (queues.enqueue_unique_task checks before it decides to skip).
--
-- Checks, in order: for _public, a worker-only task type (refused before anything else
-- is read, as queues.assert_may_enqueue words it); task_type NULL; the payload (NULL, not
-- an object, over the size limit, nested too deep), priority, resource key, max
-- attempts, scheduled time (plain expressions, no statement); then the insert, which
-- reads the type in its own statement: when it inserts nothing, the type is unknown
-- (22023). The insert's snapshot is taken once it holds its
-- lock on queues.task, so a type deleted meanwhile is not used (the delete waits for
-- that lock, see queues.guard_task_type_in_use). Under REPEATABLE READ or SERIALIZABLE
-- the snapshot is the transaction's, older than the lock: the type's row is locked FOR
-- KEY SHARE first, as the foreign key did, so that a type deleted since is a
-- serialization failure rather than a task of a type that is gone.
create or replace function queues.enqueue_task(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz,
  _priority     integer,
  _resource_key text,
  _max_attempts integer,
  _public       boolean default false,
  _notify       boolean default true,
  _check_only   boolean default false
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  if _public and exists (select 1 from queues.internal_task_type i where i.task_type = _task_type) then
    perform queues.assert_may_enqueue(_task_type);
  end if;
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if _payload is null then
    raise exception 'payload must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_payload) <> 'object' then
    raise exception 'payload must be a JSON object, got %', jsonb_typeof(_payload) using errcode = '22023';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    raise exception 'payload is % bytes, over the limit of % bytes', pg_column_size(_payload), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  if jsonb_path_exists(_payload, 'strict $.**{65}') then
    raise exception 'payload is nested deeper than % levels', queues.max_payload_depth() using errcode = '54000';
  end if;
  if _priority not between -1000 and 1000 then
    raise exception 'priority must be between -1000 and 1000, got %', _priority using errcode = '22023';
  end if;
  if length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _max_attempts not between 1 and 100 then
    raise exception 'max_attempts must be between 1 and 100, got %', _max_attempts using errcode = '22023';
  end if;
  if not isfinite(_scheduled_at) then
    raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
  end if;
  if _check_only then
    if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
      raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
        using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
    end if;
    return null;
  end if;
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t where t.task_type = _task_type for key share;
  end if;

  with inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
    select t.task_type, _payload, coalesce(_priority, 0), _resource_key,
           coalesce(_max_attempts, queues.default_max_attempts()), coalesce(_scheduled_at, now())
      from queues.task_type t
     where t.task_type = _task_type
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts
  )
  insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts)
  select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts
    from inserted i
  returning task_id into _task_id;

  if _task_id is null then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
  -- A task due more than a minute ahead wakes nobody now: workers poll for it.
  if _notify and (_scheduled_at is null or _scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _task_id;
end;
$$;

-- Enqueue one task for an app or the API; returns its task_id. NULL arguments take the
-- defaults (now, 0, no resource key, queues.default_max_attempts()), since generated
-- clients send undefined as NULL. A unique task: queues.enqueue_unique (unique.sql). Refuses internal task types (42501). _notify => false leaves the wake-up to
-- the caller (queues.enqueue_and_commit sends it after the commit).
create or replace function queues.enqueue(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  _notify       boolean default true
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts,
                             true, coalesce(_notify, true));
end;
$$;

-- queues.enqueue, then COMMIT, then the wake-up in a transaction of its own; returns the
-- task_id in _task_id. For callers outside a transaction block (CALL inside one fails
-- with 2D000, invalid transaction termination): the client's enqueue on a pool. The
-- task's commit takes no notification lock, so concurrent callers share WAL flushes; the
-- wake-up's transaction writes no data and does not wait for a flush (see the top of
-- this file). Crash between the two: the task is committed and found by the workers'
-- poll instead.
-- Not security definer and no SET clause: PostgreSQL allows COMMIT in a procedure only
-- without them. It runs with the caller's rights and search_path, names every object
-- with its schema, and does nothing a caller could not do itself.
create or replace procedure queues.enqueue_and_commit(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  inout _task_id bigint default null
)
  language plpgsql
as $$
begin
  _task_id := queues.enqueue(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, false);
  commit;
  if _scheduled_at is null
     or _scheduled_at operator(pg_catalog.<=) (pg_catalog.now() operator(pg_catalog.+) interval '1 minute') then
    perform pg_catalog.pg_notify('queues_task_ready', '');
  end if;
end;
$$;

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, queues.default_max_attempts()), since generated clients send undefined as NULL.
-- Owner only (no grant): the owner's SQL enqueues any task type through it. A thin alias
-- of the core queues.enqueue_task, with the defaults of queues.enqueue.
create or replace function queues.enqueue_internal(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts);
end;
$$;

-- Raises the problem found in element _idx of a batch (queues.enqueue_tasks):
-- _problem is '<SQLSTATE> <message>'. Returns nothing; typed jsonb so it can stand in a
-- select list for the payload it refuses.
create or replace function queues.raise_enqueue_problem(_idx bigint, _problem text) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _problem like '22023 unknown task_type%' then
    raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = '22023',
      hint = 'Known task types are listed in queues.task_type.';
  end if;
  raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = left(_problem, 5);
end;
$$;

-- Enqueue many tasks in one statement. _tasks is a JSON array of objects:
--   {"task_type": "...", "payload": {...}, "scheduled_at"?: "...", "priority"?: 0,
--    "resource_key"?: "...", "max_attempts"?: 25,
--    "unique_key"?: "...", "unique_policy"?: "skip", "unique_period"?: "30 seconds"}
-- (the unique fields as in queues.enqueue_unique; a skipped element answers the pending
-- task's id)
-- Returns the task_ids in input order. All or nothing: the first bad element, in input
-- order, raises an error naming it (tasks[i]: ...) and nothing is written. _public as in
-- queues.enqueue_task: a worker-only task type anywhere in the batch is refused (42501)
-- first, unless the session is the owner's. The core of queues.enqueue_many (no grants).
--
-- One statement inserts the batch: each element is checked as it is inserted (a CASE
-- that calls queues.raise_enqueue_problem only for a bad element), its task type against
-- queues.task_type read once per call (a hashed subplan), then the tasks' claim-index
-- rows; then one wake-up if any task is ready now. For _public, one statement before it
-- looks for worker-only types (queues.internal_task_type, also read once).
create or replace function queues.enqueue_tasks(_tasks jsonb, _public boolean default false)
  returns table (task_id bigint)
  language plpgsql volatile
  -- Planned once per connection, not per call: the plan is the same for any batch (the
  -- elements in order, hashed lookups of the task types), and planning the insert took
  -- a few milliseconds of each of a connection's first five batches.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _ids bigint[];
  _ready boolean;
  _refused record;
begin
  if _tasks is null then
    raise exception 'tasks must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_tasks) <> 'array' then
    raise exception 'tasks must be a JSON array, got %', jsonb_typeof(_tasks) using errcode = '22023';
  end if;
  if jsonb_array_length(_tasks) > 10000 then
    raise exception 'at most 10000 tasks per call, got %', jsonb_array_length(_tasks)
      using errcode = '54000';
  end if;
  -- A worker-only task type anywhere refuses the batch before any element is read
  -- further (the first such element is named), unless the session is the owner's.
  if _public and not queues.is_owner_session() then
    select e.ordinality - 1 as idx, e.value ->> 'task_type' as task_type into _refused
      from jsonb_array_elements(_tasks) with ordinality e
     where e.value ->> 'task_type' in (select i.task_type from queues.internal_task_type i)
     order by e.ordinality
     limit 1;
    if found then
      perform queues.assert_may_enqueue(_refused.task_type, format('tasks[%s]: ', _refused.idx));
    end if;
  end if;
  -- A batch naming a unique key goes element by element (sql/queues/unique.sql); a batch
  -- without one pays only this walk of its elements' keys.
  if jsonb_path_exists(_tasks, 'lax $[*] ? (exists(@.unique_key) || exists(@.unique_policy) || exists(@.unique_period))') then
    return query select u.task_id from queues.enqueue_tasks_one_by_one(_tasks, _public) u;
    return;
  end if;
  -- Under REPEATABLE READ or SERIALIZABLE, lock the types FOR KEY SHARE (see
  -- queues.enqueue_task).
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t
     where t.task_type in (select e.value ->> 'task_type' from jsonb_array_elements(_tasks) e)
       for key share;
  end if;

  with input as (
    select e.ordinality - 1 as idx, e.value as element,
           e.value ->> 'task_type' as task_type,
           e.value -> 'payload' as payload,
           (e.value ->> 'scheduled_at')::timestamptz as scheduled_at,
           (e.value ->> 'priority')::integer as priority,
           e.value ->> 'resource_key' as resource_key,
           (e.value ->> 'max_attempts')::integer as max_attempts
      from jsonb_array_elements(_tasks) with ordinality e
  ),
  checked as (
    -- The problem of each element as '<SQLSTATE> <message>', NULL when it has none: its
    -- shape (an object of known fields), then the checks of queues.enqueue_task.
    select c.*,
           case
             when jsonb_typeof(c.element) <> 'object' then
               '22023 must be a JSON object, got ' || jsonb_typeof(c.element)
             when c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts}'::text[] <> '{}' then
               '22023 unknown field(s) ' || left((select string_agg(k, ', ') from jsonb_object_keys(
                 c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts}'::text[]) k), 200)
             when c.task_type is null then '22004 task_type must not be null'
             when c.task_type not in (select t.task_type from queues.task_type t) then
               '22023 unknown task_type ' || quote_literal(left(c.task_type, 100))
             when c.payload is null then '22004 payload must not be null'
             when jsonb_typeof(c.payload) <> 'object' then
               '22023 payload must be a JSON object, got ' || jsonb_typeof(c.payload)
             when pg_column_size(c.payload) > queues.max_payload_bytes() then
               format('54000 payload is %s bytes, over the limit of %s bytes', pg_column_size(c.payload), queues.max_payload_bytes())
             -- Nesting deeper than 64 levels takes over 512 bytes (an uncompressed value,
             -- as c.payload is: just taken out of the batch), so smaller ones are not walked.
             when pg_column_size(c.payload) > 512 and jsonb_path_exists(c.payload, 'strict $.**{65}') then
               format('54000 payload is nested deeper than %s levels', queues.max_payload_depth())
             when c.priority not between -1000 and 1000 then
               '22023 priority must be between -1000 and 1000, got ' || c.priority
             when length(c.resource_key) not between 1 and 200 then '22023 resource_key must be 1 to 200 characters'
             when c.max_attempts not between 1 and 100 then
               '22023 max_attempts must be between 1 and 100, got ' || c.max_attempts
             when not isfinite(c.scheduled_at) then
               '22023 scheduled_at must be a finite time, got ' || c.scheduled_at
           end as problem
      from input c
  ),
  inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
    select c.task_type,
           case when c.problem is null then c.payload else queues.raise_enqueue_problem(c.idx, c.problem) end,
           coalesce(c.priority, 0), c.resource_key, coalesce(c.max_attempts, queues.default_max_attempts()), coalesce(c.scheduled_at, now())
      from checked c
     order by c.idx
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts
  ),
  pending as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts)
    select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts
      from inserted i
  )
  select array_agg(i.task_id order by i.task_id), bool_or(i.scheduled_at <= now() + interval '1 minute')
    into _ids, _ready
    from inserted i;

  if _ready then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select u.id from unnest(_ids) u(id);
end;
$$;

-- Enqueue many tasks (see queues.enqueue_tasks), for an app or the API: refuses internal
-- task types (42501), as queues.enqueue.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_id from queues.enqueue_tasks(_tasks, true) t
$$;
--! EndIncluded queues/enqueue.sql
--! Included queues/unique.sql
-- Unique tasks: an enqueue that names a unique key, and what it does when a task with
-- that key is still pending (not completed; scheduled, ready, retrying or running).
--
--   policy     a task with the key is pending, no live lease     ... under a live lease
--   skip       nothing written; answers that task's id            the same
--   replace    a new task (payload, time, priority, ... as given)  a new task; the running
--              replaces it: the old one is completed 'cancelled'  one runs on (its worker
--              with the reason 'replaced by task N'                completes it)
--   debounce   as replace, the new task due at                     as replace
--              coalesce(scheduled_at, now) + period
--
-- With no pending task of the key, each policy enqueues a new task ('inserted'); debounce
-- schedules it at coalesce(scheduled_at, now) + period, so a burst of enqueues within the
-- period leaves one task, due one period after the last, with the last payload. Under a
-- live lease replace and debounce enqueue a new task rather than skip: the running task
-- started with the old payload, and the newest payload must still be processed.
--
-- Facts and structures: the fact queues.task_unique says which task was enqueued with
-- which key (one row per unique task, written with the task); a replaced task ends with
-- the facts a cancel writes (queues.task_completed 'cancelled', queues.task_cancelled with
-- the reason). The derived
-- queues.task_unique_key holds, per key, the newest task enqueued with it; its row is
-- what concurrent enqueuers of one key lock (FOR UPDATE), one after another, so 16 at
-- once leave one task. A row whose task is no longer pending counts as no row; such rows
-- (and the facts of tasks whose history partitions were dropped) are removed by
-- queues.prune_task_unique_keys, which the owner runs (it is not scheduled: until it
-- runs, the table keeps one row per key ever used), and the whole table is rebuilt from
-- the facts by queues.rebuild_task_unique_key. An enqueue without a key never reads it: the
-- plain queues.enqueue is unchanged.
--
-- Under REPEATABLE READ or SERIALIZABLE, an enqueuer whose snapshot misses another's
-- task of the same key gets a serialization failure (40001): retry the transaction.

-- The core (no grants). Checks its own arguments (22004 for a NULL key, 22023 for an
-- empty or long key, an unknown policy, a period with a policy other than debounce, a
-- negative or infinite period) and then every check of queues.enqueue_task, before it
-- reads or writes anything, so bad input is refused even when the policy would skip.
-- Returns the task id (the new task's, or the pending one's for 'skipped'), the outcome
-- ('inserted', 'skipped', 'replaced') and the id of the task replaced.
create or replace function queues.enqueue_unique_task(
  _task_type     text,
  _payload       jsonb,
  _unique_key    text,
  _unique_policy text,
  _unique_period interval,
  _scheduled_at  timestamptz,
  _priority      integer,
  _resource_key  text,
  _max_attempts  integer,
  _public        boolean default false,
  _notify        boolean default true,
  out task_id          bigint,
  out outcome          text,
  out replaced_task_id bigint
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  _policy text := coalesce(_unique_policy, 'skip');
  _at timestamptz := _scheduled_at;
  _old bigint;
  _held boolean;
begin
  if _public and queues.is_internal_task_type(_task_type) then
    perform queues.assert_may_enqueue(_task_type);
  end if;
  if _unique_key is null then
    raise exception 'unique_key must not be null' using errcode = '22004';
  end if;
  if length(_unique_key) not between 1 and 200 then
    raise exception 'unique_key must be 1 to 200 characters, got %', length(_unique_key) using errcode = '22023';
  end if;
  if _policy not in ('skip', 'replace', 'debounce') then
    raise exception 'unique_policy must be ''skip'', ''replace'' or ''debounce'', got %', quote_literal(left(_policy, 50))
      using errcode = '22023';
  end if;
  if _policy = 'debounce' then
    if _unique_period is null then
      raise exception 'unique_period must not be null with the debounce policy' using errcode = '22004';
    end if;
    if not isfinite(_unique_period) or _unique_period < interval '0' then
      raise exception 'unique_period must be a finite, non-negative interval, got %', _unique_period
        using errcode = '22023';
    end if;
    if not isfinite(_scheduled_at) then
      raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
    end if;
    _at := coalesce(_scheduled_at, now()) + _unique_period;
  elsif _unique_period is not null then
    raise exception 'unique_period applies only to the debounce policy, not %', quote_literal(_policy)
      using errcode = '22023';
  end if;
  -- Every check of a plain enqueue, writing nothing.
  perform queues.enqueue_task(_task_type, _payload, _at, _priority, _resource_key, _max_attempts,
                              _public, false, true);

  -- The key's row, locked: a concurrent enqueuer of the key waits here until this
  -- transaction ends, then sees its task. The insert of a new key waits for a concurrent
  -- insert of the same key to commit and then does nothing; the loop then locks that row.
  loop
    select k.task_id into _old from queues.task_unique_key k where k.unique_key = _unique_key for update;
    exit when found;
    insert into queues.task_unique_key (unique_key, task_id) values (_unique_key, null) on conflict do nothing;
    exit when found;
  end loop;
  if _old is not null then
    select (p.current_lease_id is not null and p.available_at > now()) into _held
      from queues.task_pending p where p.task_id = _old;
    if not found then
      _old := null;
    end if;
  end if;

  if _old is not null and _policy = 'skip' then
    task_id := _old;
    outcome := 'skipped';
    return;
  end if;

  task_id := queues.enqueue_task(_task_type, _payload, _at, _priority, _resource_key, _max_attempts,
                                 _public, _notify);
  insert into queues.task_unique (task_id, unique_key) values (task_id, _unique_key);
  update queues.task_unique_key k set task_id = enqueue_unique_task.task_id where k.unique_key = _unique_key;
  outcome := 'inserted';
  if _old is not null and not _held
     and queues.supersede_task(_old, format('replaced by task %s (unique key %s)', task_id, quote_literal(_unique_key))) then
    outcome := 'replaced';
    replaced_task_id := _old;
  end if;
end;
$$;

-- Completes a pending task no worker holds as 'cancelled' with _reason (as
-- admin.cancel_tasks does: queues.task_completed, queues.task_cancelled, out of the claim
-- index, its resource key freed); true when it did. False when a live lease holds it
-- (its worker completes it) or it is no longer pending. Takes the claim's lock order
-- (resource key, then the pending row), so a claim that took the row first wins.
create or replace function queues.supersede_task(_task_id bigint, _reason text)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p record;
begin
  perform queues.lock_resource_keys(array[_task_id]);
  select p.task_type, (p.current_lease_id is not null and p.available_at > now()) as held into _p
    from queues.task_pending p where p.task_id = _task_id for update;
  if not found or _p.held then
    return false;
  end if;
  insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
  values (_task_id, null, now(), 'cancelled', _p.task_type);
  insert into queues.task_cancelled (task_id, reason, cancelled_at) values (_task_id, left(_reason, 500), now());
  delete from queues.task_pending p where p.task_id = _task_id;
  delete from queues.resource_lease k where k.task_id = _task_id;
  return true;
end;
$$;

-- Enqueue a unique task for an app or the API: queues.enqueue's arguments plus the key,
-- the policy (NULL: 'skip') and the debounce period. One row: task_id, outcome
-- ('inserted', 'skipped', 'replaced'), replaced_task_id. Refuses internal task types
-- (42501), as queues.enqueue. Sends the wake-up in its own transaction (a caller on a
-- pool calls it as a statement of its own).
create or replace function queues.enqueue_unique(
  _task_type     text,
  _payload       jsonb,
  _unique_key    text,
  _unique_policy text default null,
  _unique_period interval default null,
  _scheduled_at  timestamptz default null,
  _priority      integer default null,
  _resource_key  text default null,
  _max_attempts  integer default null
) returns table (task_id bigint, outcome text, replaced_task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select u.task_id, u.outcome, u.replaced_task_id
    from queues.enqueue_unique_task(_task_type, _payload, _unique_key, _unique_policy, _unique_period,
                                    _scheduled_at, _priority, _resource_key, _max_attempts, true, true) u
$$;

-- The owner's SQL's unique enqueue (no grant), as queues.enqueue_internal: any task type.
create or replace function queues.enqueue_unique_internal(
  _task_type     text,
  _payload       jsonb,
  _unique_key    text,
  _unique_policy text default null,
  _unique_period interval default null,
  _scheduled_at  timestamptz default null,
  _priority      integer default null,
  _resource_key  text default null,
  _max_attempts  integer default null
) returns table (task_id bigint, outcome text, replaced_task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select u.task_id, u.outcome, u.replaced_task_id
    from queues.enqueue_unique_task(_task_type, _payload, _unique_key, _unique_policy, _unique_period,
                                    _scheduled_at, _priority, _resource_key, _max_attempts) u
$$;

-- A batch of queues.enqueue_tasks in which some element names a unique key (or a policy
-- or period), enqueued element by element in input order, so that a key met twice in one
-- batch sees its first task. Returns the task ids in input order (the pending task's for
-- a skipped element). All or nothing; the first bad element raises, named tasks[i], with
-- its own SQLSTATE (one exception block around the loop, not one per element: a
-- subtransaction per element would overflow the backend's cache of 64 past a batch of
-- 64). One wake-up at the end if any of the tasks is due within a minute.
create or replace function queues.enqueue_tasks_one_by_one(_tasks jsonb, _public boolean)
  returns table (task_id bigint)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _idx bigint := -1;
  _e jsonb;
  _id bigint;
  _ids bigint[] := '{}';
  _state text;
  _message text;
  _hint text;
  _fields constant text[] := '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,unique_key,unique_policy,unique_period}';
begin
  begin
    for _e in select x.value from jsonb_array_elements(_tasks) x loop
      _idx := _idx + 1;
      if jsonb_typeof(_e) <> 'object' then
        raise exception 'must be a JSON object, got %', jsonb_typeof(_e) using errcode = '22023';
      end if;
      if _e - _fields <> '{}' then
        raise exception 'unknown field(s) %',
          left((select string_agg(k, ', ') from jsonb_object_keys(_e - _fields) k), 200) using errcode = '22023';
      end if;
      if _e ->> 'unique_key' is null then
        if _e ->> 'unique_policy' is not null or _e ->> 'unique_period' is not null then
          raise exception 'unique_key must not be null when unique_policy or unique_period is given'
            using errcode = '22004';
        end if;
        _id := queues.enqueue_task(_e ->> 'task_type', _e -> 'payload', (_e ->> 'scheduled_at')::timestamptz,
                                   (_e ->> 'priority')::integer, _e ->> 'resource_key',
                                   (_e ->> 'max_attempts')::integer, _public, false);
      else
        select u.task_id into _id
          from queues.enqueue_unique_task(_e ->> 'task_type', _e -> 'payload', _e ->> 'unique_key',
                                          _e ->> 'unique_policy', (_e ->> 'unique_period')::interval,
                                          (_e ->> 'scheduled_at')::timestamptz, (_e ->> 'priority')::integer,
                                          _e ->> 'resource_key', (_e ->> 'max_attempts')::integer,
                                          _public, false) u;
      end if;
      _ids := _ids || _id;
    end loop;
  exception when others then
    get stacked diagnostics _state = returned_sqlstate, _message = message_text, _hint = pg_exception_hint;
    raise exception 'tasks[%]: %', _idx, _message using errcode = _state, hint = _hint;
  end;
  if exists (select 1 from queues.task_pending p
              where p.task_id = any (_ids) and p.scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select u.id from unnest(_ids) with ordinality u(id, n) order by u.n;
end;
$$;

-- Removes up to _limit rows of queues.task_unique_key whose task is no longer pending
-- (rows an enqueuer holds are passed over), and the facts queues.task_unique of tasks
-- older than the oldest task kept (their history partitions were dropped); returns how
-- many key rows it removed. Owner only. Such key rows change nothing (a key whose task
-- completed is free), so this only keeps the table to about one row per pending unique
-- task.
create or replace function queues.prune_task_unique_keys(_limit integer default 10000)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n integer;
begin
  delete from queues.task_unique u
   where u.task_id < coalesce((select min(t.task_id) from queues.task t), 9223372036854775807);
  with stale as (
    select k.unique_key from queues.task_unique_key k
     where k.task_id is not null
       and not exists (select 1 from queues.task_pending p where p.task_id = k.task_id)
     limit coalesce(_limit, 10000)
       for update skip locked
  )
  delete from queues.task_unique_key k using stale s where k.unique_key = s.unique_key;
  get diagnostics _n = row_count;
  return _n;
end;
$$;

-- Rebuilds queues.task_unique_key from the facts: per key, the newest pending task
-- enqueued with it. Returns the number of rows. Owner only; locks out unique enqueues
-- while it runs.
create or replace function queues.rebuild_task_unique_key() returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n bigint;
begin
  lock table queues.task_unique_key in exclusive mode;
  delete from queues.task_unique_key;
  insert into queues.task_unique_key (unique_key, task_id)
  select distinct on (u.unique_key) u.unique_key, u.task_id
    from queues.task_pending p
    join queues.task_unique u on u.task_id = p.task_id
   order by u.unique_key, u.task_id desc;
  get diagnostics _n = row_count;
  return _n;
end;
$$;
--! EndIncluded queues/unique.sql
--! Included internal/process_supervisor.sql
-- The blocks every supervisor is built from, channel process or not: open a run
-- (validate, READ COMMITTED, lock the root), read the terminal facts, count and record
-- runs, record the outcome, enqueue the next run, and the envelope of a run that did its
-- job. sql/internal/channel_process.sql builds the channel skeleton on them;
-- sql/internal/sql_process.sql the pure SQL one; account deletion composes them itself.
--
-- A process <schema>.<name> has a root <name>_task keyed by <name>_task_id (a bigint
-- identity) and the terminal facts <name>_task_succeeded and <name>_task_failed(reason),
-- both keyed by <name>_task_id; a run cap adds <name>_supervisor_run. Schema and name are
-- constants in the owner's SQL and reach dynamic SQL only through format('%I.%I').
-- Called only from security definer functions: no grants.

-- Locks the root row FOR NO KEY UPDATE (it serialises supervisors; inserting a fact that
-- references the root takes FOR KEY SHARE, which does not wait on it). False: no such root.
create or replace function internal.lock_process_root(_schema text, _name text, _root_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _found integer;
begin
  execute format('select 1 from %I.%I t where t.%I = $1 for no key update', _schema, _name || '_task', _name || '_task_id')
    into _found using _root_id;
  return _found is not null;
end;
$$;

-- The opening of every supervisor run, in this order: read <name>_task_id from the
-- payload, refuse anything but READ COMMITTED (25000, naming _supervisor), lock the root.
-- root_id is the locked root; when there is none, refusal is the validation failure
-- the supervisor returns (a malformed id, or no such root) and root_id is NULL.
create or replace function internal.open_supervisor_run(
  _schema text, _name text, _supervisor text, _payload jsonb,
  out root_id bigint,
  out refusal jsonb
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text := _name || '_task_id';
  _id bigint := internal.id_from_payload(_payload, _key);
begin
  if _id is null then
    refusal := internal.validation_failure(format('%s must be a positive integer', _key));
    return;
  end if;
  perform internal.assert_read_committed(_supervisor);
  -- Lock, then read: facts read after the lock wait include what the last holder committed.
  if not internal.lock_process_root(_schema, _name, _id) then
    refusal := internal.validation_failure(format('%s %s not found', _name || '_task', _id));
    return;
  end if;
  root_id := _id;
end;
$$;

-- The terminal facts of a root: whether it succeeded, and the reason it failed (NULL
-- while it has not).
create or replace function internal.process_terminal_facts(
  _schema text, _name text, _root_id bigint,
  out has_task_succeeded boolean,
  out task_failure       text
)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('select exists (select 1 from %1$I.%2$I x where x.%4$I = $1),
                         (select x.reason from %1$I.%3$I x where x.%4$I = $1)',
                 _schema, _name || '_task_succeeded', _name || '_task_failed', _name || '_task_id')
    into has_task_succeeded, task_failure using _root_id;
end;
$$;

-- Appends a terminal fact (_reason NULL: succeeded). A second call changes nothing.
create or replace function internal.record_process_outcome(_schema text, _name text, _root_id bigint, _reason text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _reason is null then
    execute format('insert into %I.%I (%I) values ($1) on conflict do nothing', _schema, _name || '_task_succeeded', _name || '_task_id')
      using _root_id;
  else
    execute format('insert into %I.%I (%I, reason) values ($1, $2) on conflict do nothing', _schema, _name || '_task_failed', _name || '_task_id')
      using _root_id, _reason;
  end if;
end;
$$;

-- How many non-terminal runs a root has had (the rows of <name>_supervisor_run).
create or replace function internal.count_supervisor_runs(_schema text, _name text, _root_id bigint)
  returns integer
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _runs integer;
begin
  execute format('select count(*)::integer from %I.%I r where r.%I = $1', _schema, _name || '_supervisor_run', _name || '_task_id')
    into _runs using _root_id;
  return _runs;
end;
$$;

-- Records one non-terminal run (the run cap counts these).
create or replace function internal.record_supervisor_run(_schema text, _name text, _root_id bigint)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('insert into %I.%I (%I) values ($1)', _schema, _name || '_supervisor_run', _name || '_task_id') using _root_id;
end;
$$;

-- Enqueues a run of _supervisor (a db_function task) for the root _root_key = _root_id
-- at _at (NULL: now); returns its task id. One attempt (not queues.default_max_attempts):
-- a supervisor run that fails is followed by the runs the process schedules itself.
create or replace function internal.enqueue_supervisor_run(_supervisor text, _root_key text, _root_id bigint, _at timestamptz)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', _supervisor,
    _root_key, _root_id), coalesce(_at, now()), _max_attempts => 1);
end;
$$;

-- Enqueues the next run after the backoff 5 s · 2^_exponent, capped at _cap_seconds
-- (internal.backoff); returns when it is due.
create or replace function internal.schedule_next_supervisor_run(
  _supervisor text, _root_key text, _root_id bigint, _exponent integer, _cap_seconds integer
) returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz := now() + internal.backoff(_exponent, _cap_seconds);
begin
  perform internal.enqueue_supervisor_run(_supervisor, _root_key, _root_id, _next_check_at);
  return _next_check_at;
end;
$$;

-- The envelope of a run that did its job: {success: true, payload: {status} || _extra}.
create or replace function internal.supervisor_progress(_status text, _extra jsonb default null)
  returns jsonb
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', jsonb_build_object('status', _status) || coalesce(_extra, '{}'))
$$;

-- Creates the root of a process about _column = _value (unique in the root table) unless
-- one exists; returns its id and whether this call created it.
create or replace function internal.create_process_root(
  _schema text, _name text, _column text, _value bigint,
  out root_id bigint,
  out created boolean
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('insert into %1$I.%2$I as t (%3$I) values ($1) on conflict (%3$I) do nothing returning t.%4$I',
                 _schema, _name || '_task', _column, _name || '_task_id')
    into root_id using _value;
  created := root_id is not null;
  if not created then
    execute format('select t.%4$I from %1$I.%2$I t where t.%3$I = $1', _schema, _name || '_task', _column, _name || '_task_id')
      into root_id using _value;
  end if;
end;
$$;

-- Starts a process about _column = _value: creates its root (internal.create_process_root)
-- and, when this call created it, enqueues the first run of _supervisor at _at (NULL: now).
create or replace function internal.start_process(
  _schema text, _name text, _supervisor text, _column text, _value bigint, _at timestamptz default null,
  out root_id bigint,
  out created boolean
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  select r.root_id, r.created into root_id, created from internal.create_process_root(_schema, _name, _column, _value) r;
  if created then
    perform internal.enqueue_supervisor_run(_supervisor, _name || '_task_id', root_id, _at);
  end if;
end;
$$;
--! EndIncluded internal/process_supervisor.sql
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
      perform internal.assert_read_committed(_p.supervisor);
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

-- The channel processes' functions again, from the template that passes one attempt.
select internal.create_channel_process_functions(p.process_schema, p.process_name)
  from internal.channel_process p
 order by p.process_schema, p.process_name;

-- Schedules in a time zone. schedule_version is not a hot table (schedules are written
-- by people and read by the schedule supervisor).
alter table schedules.schedule_version add column if not exists time_zone text not null default 'UTC';
comment on column schedules.schedule_version.time_zone is
  'IANA time zone whose wall clock the cron is read on (schedules.next_fire_time(cron, after, time_zone)).';

drop function if exists schedules.schedule_definition_error(text, text, text, jsonb, integer, text);
drop function if exists schedules.append_schedule_version(timestamptz, bigint, text, text, jsonb, integer, text, boolean);
drop function if exists schedules.upsert_schedule_at(timestamptz, text, text, text, jsonb, integer, text);
drop function if exists schedules.upsert_schedule(text, text, text, jsonb, integer, text);
drop function if exists admin.list_schedules(integer);
drop function if exists admin.list_schedules_at(timestamptz, integer);
drop function if exists schedules.list_schedules();

--! Included schedules/cron.sql
-- Cron expressions, evaluated in UTC or in an IANA time zone.
--
-- Five fields: minute (0-59) hour (0-23) day-of-month (1-31) month (1-12)
-- day-of-week (0-7; 0 and 7 are Sunday). Each field is a comma list of items:
--   *      every value              a      one value
--   a-b    a range (a <= b)         */n    every n-th value from the field's minimum
--   a-b/n  every n-th value of a-b  a/n    every n-th value from a to the field's maximum
-- Names (JAN, MON), L, W, # and ? are not supported.
--
-- Day rule (Vixie/ISC cron, as cronie and Debian cron): when both day-of-month and
-- day-of-week are restricted, a day matches if EITHER matches; when either field
-- begins with '*' (so '*' or '*/n'), a day matches only if BOTH match.
--
--   schedules.parse_cron(cron)                the parsed fields; raises 22023/22004
--   schedules.next_fire_time(cron, after)     first fire time strictly after `after`
--   schedules.prev_fire_time(cron, before)    last fire time strictly before `before`
--   schedules.cron_error(cron)                the parse error message, or null
--   schedules.next_fire_time(cron, after, time_zone), prev_fire_time(cron, before, time_zone)
--                                             the same in a time zone (below)
--
-- In a time zone the fields match the local wall clock, and daylight-saving changes follow
-- cronie's rule, by whether the job runs every hour (its hour field allows all 24 hours,
-- '*' or '*/1') or at fixed hours:
--   clocks go forward (a wall time that does not exist, 02:30 in Berlin on 2026-03-29):
--     a fixed-hour job fires once, at the first valid time after the gap (03:00 local,
--     the moment of the change); an every-hour job skips the missing times (it fires in
--     every real hour anyway)
--   clocks go back (a wall time that occurs twice, 02:30 in Berlin on 2026-10-25):
--     a fixed-hour job fires once, at the first occurrence; an every-hour job fires at
--     both, so it fires in every real hour
-- Zone offsets are read from PostgreSQL's time zone data; a change of a zone's offset by
-- more than 3 hours at once (Pacific/Apia skipping 2011-12-30) is not searched across.

-- One field: a sorted array of the values it allows. _name names the field in errors.
create or replace function schedules.parse_cron_field(
  _field text, _name text, _min integer, _max integer
) returns integer[]
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _item text;
  _parts text[];
  _lo integer;
  _hi integer;
  _step integer;
  _values integer[] := '{}';
begin
  foreach _item in array string_to_array(_field, ',') loop
    -- (range)(/step)?, range: * | a | a-b
    _parts := regexp_match(_item, '^(\*|([0-9]{1,4})(?:-([0-9]{1,4}))?)(?:/([0-9]{1,4}))?$');
    if _parts is null then
      raise exception 'cron % field: % is not a number, a range a-b, * or a step x/n',
        _name, quote_literal(left(_item, 50))
        using errcode = '22023',
              hint = 'Fields are: minute hour day-of-month month day-of-week, e.g. ''*/15 0-6 * * 1-5''.';
    end if;
    if _parts[1] = '*' then
      _lo := _min;
      _hi := _max;
    else
      _lo := _parts[2]::integer;
      _hi := coalesce(_parts[3]::integer, case when _parts[4] is null then _lo else _max end);
      if _lo not between _min and _max then
        raise exception 'cron % field: % is out of range %-%', _name, _lo, _min, _max using errcode = '22023';
      end if;
      if _hi not between _min and _max then
        raise exception 'cron % field: % is out of range %-%', _name, _hi, _min, _max using errcode = '22023';
      end if;
      if _hi < _lo then
        raise exception 'cron % field: range %-% goes backwards', _name, _lo, _hi using errcode = '22023';
      end if;
    end if;
    _step := coalesce(_parts[4]::integer, 1);
    if _step < 1 then
      raise exception 'cron % field: step must be at least 1, got %', _name, _step using errcode = '22023';
    end if;
    _values := _values || array(select generate_series(_lo, _hi, _step));
  end loop;
  return array(select distinct v from unnest(_values) v order by v);
end;
$$;

-- The parsed fields of a 5-field cron expression; raises 22004 (null) or 22023 (malformed)
-- with a message naming the field. dows holds 0-6 (7 becomes 0). dom_restricted and
-- dow_restricted say whether the day fields are restricted for the day rule above.
create or replace function schedules.parse_cron(
  _cron text,
  out minutes integer[], out hours integer[], out doms integer[], out months integer[],
  out dows integer[], out dom_restricted boolean, out dow_restricted boolean
)
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _fields text[];
begin
  if _cron is null then
    raise exception 'cron must not be null' using errcode = '22004';
  end if;
  _fields := regexp_split_to_array(btrim(_cron, E' \t\n\r'), E'[ \t]+');
  if btrim(_cron, E' \t\n\r') = '' or cardinality(_fields) <> 5 then
    raise exception 'cron must have 5 fields (minute hour day-of-month month day-of-week), got % in %',
      case when btrim(_cron, E' \t\n\r') = '' then 0 else cardinality(_fields) end,
      quote_literal(left(_cron, 100))
      using errcode = '22023';
  end if;
  minutes := schedules.parse_cron_field(_fields[1], 'minute', 0, 59);
  hours   := schedules.parse_cron_field(_fields[2], 'hour', 0, 23);
  doms    := schedules.parse_cron_field(_fields[3], 'day-of-month', 1, 31);
  months  := schedules.parse_cron_field(_fields[4], 'month', 1, 12);
  dows    := array(select distinct case when d = 7 then 0 else d end
                     from unnest(case when _fields[5] ~ '^\*'
                                      then schedules.parse_cron_field(_fields[5], 'day-of-week', 0, 6)
                                      else schedules.parse_cron_field(_fields[5], 'day-of-week', 0, 7) end) d
                    order by 1);
  dom_restricted := _fields[3] !~ '^\*';
  dow_restricted := _fields[5] !~ '^\*';
end;
$$;

-- Whether a (UTC) day matches the day fields, by the day rule above.
create or replace function schedules.cron_day_matches(
  _day timestamp, _doms integer[], _dows integer[], _dom_restricted boolean, _dow_restricted boolean
) returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select case when _dom_restricted and _dow_restricted
              then extract(day from _day)::integer = any (_doms) or extract(dow from _day)::integer = any (_dows)
              else extract(day from _day)::integer = any (_doms) and extract(dow from _day)::integer = any (_dows)
         end
$$;

-- How far next_fire_time and prev_fire_time search before answering null: the rarest
-- possible cron ('0 0 29 2 *') fires at least every 8 years.
create or replace function schedules.cron_search_horizon() returns interval
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select interval '30 years' $$;

-- The first fire time strictly after _after (UTC, whole minutes), or null when the cron
-- never fires (e.g. '0 0 30 2 *'). Walks month → day → hour → minute, jumping over
-- non-matching months, days and hours, so a call costs tens of steps, not minutes.
create or replace function schedules.next_fire_time(_cron text, _after timestamptz)
  returns timestamptz
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _c record := schedules.parse_cron(_cron);
  _t timestamp;
  _limit timestamp;
  _h integer;
  _m integer;
begin
  if _after is null then
    raise exception 'after must not be null' using errcode = '22004';
  end if;
  _t := date_trunc('minute', _after at time zone 'UTC') + interval '1 minute';
  _limit := _t + schedules.cron_search_horizon();
  loop
    if _t > _limit then
      return null;
    end if;
    if not extract(month from _t)::integer = any (_c.months) then
      _t := date_trunc('month', _t) + interval '1 month';
      continue;
    end if;
    if not schedules.cron_day_matches(_t, _c.doms, _c.dows, _c.dom_restricted, _c.dow_restricted) then
      _t := date_trunc('day', _t) + interval '1 day';
      continue;
    end if;
    if not extract(hour from _t)::integer = any (_c.hours) then
      select min(h) into _h from unnest(_c.hours) h where h > extract(hour from _t)::integer;
      _t := case when _h is null then date_trunc('day', _t) + interval '1 day'
                 else date_trunc('day', _t) + make_interval(hours => _h) end;
      continue;
    end if;
    select min(m) into _m from unnest(_c.minutes) m where m >= extract(minute from _t)::integer;
    if _m is null then
      _t := date_trunc('hour', _t) + interval '1 hour';
      continue;
    end if;
    return (date_trunc('hour', _t) + make_interval(mins => _m)) at time zone 'UTC';
  end loop;
end;
$$;

-- The last fire time strictly before _before (UTC, whole minutes), or null when there is
-- none within the search horizon. The mirror image of next_fire_time.
create or replace function schedules.prev_fire_time(_cron text, _before timestamptz)
  returns timestamptz
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _c record := schedules.parse_cron(_cron);
  _b timestamp;
  _t timestamp;
  _limit timestamp;
  _h integer;
  _m integer;
begin
  if _before is null then
    raise exception 'before must not be null' using errcode = '22004';
  end if;
  _b := _before at time zone 'UTC';
  _t := date_trunc('minute', _b);
  if _t = _b then
    _t := _t - interval '1 minute';
  end if;
  _limit := _t - schedules.cron_search_horizon();
  loop
    if _t < _limit then
      return null;
    end if;
    if not extract(month from _t)::integer = any (_c.months) then
      _t := date_trunc('month', _t) - interval '1 minute';
      continue;
    end if;
    if not schedules.cron_day_matches(_t, _c.doms, _c.dows, _c.dom_restricted, _c.dow_restricted) then
      _t := date_trunc('day', _t) - interval '1 minute';
      continue;
    end if;
    if not extract(hour from _t)::integer = any (_c.hours) then
      select max(h) into _h from unnest(_c.hours) h where h < extract(hour from _t)::integer;
      _t := case when _h is null then date_trunc('day', _t) - interval '1 minute'
                 else date_trunc('day', _t) + make_interval(hours => _h, mins => 59) end;
      continue;
    end if;
    select max(m) into _m from unnest(_c.minutes) m where m <= extract(minute from _t)::integer;
    if _m is null then
      _t := date_trunc('hour', _t) - interval '1 minute';
      continue;
    end if;
    return (date_trunc('hour', _t) + make_interval(mins => _m)) at time zone 'UTC';
  end loop;
end;
$$;

-- Null when _cron is a valid cron that fires; else the message of what is wrong with it.
create or replace function schedules.cron_error(_cron text) returns text
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _cron is null then
    return 'cron is required';
  end if;
  perform schedules.parse_cron(_cron);
  if schedules.next_fire_time(_cron, '2000-01-01 00:00:00+00') is null then
    return format('cron %s never fires (no month has such a day)', quote_literal(left(_cron, 100)));
  end if;
  return null;
exception
  when sqlstate '22023' or sqlstate '22004' then
    return sqlerrm;
end;
$$;

-- The zone's offset from UTC at _at (local wall time minus UTC).
create or replace function schedules.zone_offset(_at timestamptz, _time_zone text) returns interval
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select (_at at time zone _time_zone) - (_at at time zone 'UTC')
$$;

-- The instants at which the local wall time _wall fires in _time_zone, by the rules at
-- the top: one instant; none or the end of the gap when the clocks went forward over it;
-- the first or both occurrences when they went back over it. _every_hour: the cron's
-- hour field allows all 24 hours. Offsets a day before and after are the candidates: a
-- zone's offset changes at most once within two days.
create or replace function schedules.wall_fire_instants(_wall timestamp, _time_zone text, _every_hour boolean)
  returns timestamptz[]
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _u timestamptz := _wall at time zone 'UTC';
  _o_pre interval := schedules.zone_offset(_u - interval '1 day', _time_zone);
  _o_post interval := schedules.zone_offset(_u + interval '1 day', _time_zone);
  _valid timestamptz[] := '{}';
  _lo bigint;
  _hi bigint;
  _mid bigint;
begin
  if schedules.zone_offset(_u - _o_pre, _time_zone) = _o_pre then
    _valid := _valid || (_u - _o_pre);
  end if;
  if _o_post <> _o_pre and schedules.zone_offset(_u - _o_post, _time_zone) = _o_post then
    _valid := _valid || (_u - _o_post);
  end if;
  if cardinality(_valid) = 2 then
    _valid := array(select v from unnest(_valid) v order by v);
    return case when _every_hour then _valid else _valid[1:1] end;
  elsif cardinality(_valid) = 1 then
    return _valid;
  elsif _every_hour or _o_pre = _o_post then
    return '{}';
  end if;
  -- In the gap: the change happened between _u - _o_post (still _o_pre) and _u - _o_pre
  -- (already _o_post); find its second.
  _lo := extract(epoch from _u - _o_post)::bigint;
  _hi := extract(epoch from _u - _o_pre)::bigint;
  while _hi - _lo > 1 loop
    _mid := (_lo + _hi) / 2;
    if schedules.zone_offset(to_timestamp(_mid), _time_zone) = _o_pre then
      _lo := _mid;
    else
      _hi := _mid;
    end if;
  end loop;
  return array[to_timestamp(_hi)];
end;
$$;

-- The first fire time strictly after _after of _cron read in _time_zone (NULL or 'UTC':
-- schedules.next_fire_time(_cron, _after)), or null when it never fires. Far from a
-- daylight-saving change it is the UTC walk on wall times, mapped back with the zone's
-- offset; within 3 hours of one (or more than a week ahead) it walks the wall times
-- from 3 hours before _after's and maps each by schedules.wall_fire_instants, keeping the
-- earliest instant after _after.
create or replace function schedules.next_fire_time(_cron text, _after timestamptz, _time_zone text)
  returns timestamptz
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _every_hour boolean;
  _o interval;
  _w timestamp;
  _i timestamptz;
  _best timestamptz;
begin
  if _time_zone is null or _time_zone = 'UTC' then
    return schedules.next_fire_time(_cron, _after);
  end if;
  if _after is null then
    raise exception 'after must not be null' using errcode = '22004';
  end if;
  _every_hour := cardinality((schedules.parse_cron(_cron)).hours) = 24;
  _o := schedules.zone_offset(_after, _time_zone);
  -- Wall times are walked as if they were UTC instants.
  _w := schedules.next_fire_time(_cron, (_after at time zone _time_zone) at time zone 'UTC') at time zone 'UTC';
  if _w is null then
    return null;
  end if;
  _i := (_w at time zone 'UTC') - _o;
  if _i - _after <= interval '7 days'
     and schedules.zone_offset(_i, _time_zone) = _o
     and schedules.zone_offset(_after - interval '3 hours', _time_zone) = _o then
    return _i;
  end if;
  _w := schedules.next_fire_time(_cron,
          ((_after at time zone _time_zone) - interval '3 hours 1 minute') at time zone 'UTC') at time zone 'UTC';
  while _w is not null and (_best is null or _w <= (_best at time zone _time_zone) + interval '3 hours') loop
    foreach _i in array schedules.wall_fire_instants(_w, _time_zone, _every_hour) loop
      if _i > _after and (_best is null or _i < _best) then
        _best := _i;
      end if;
    end loop;
    _w := schedules.next_fire_time(_cron, _w at time zone 'UTC') at time zone 'UTC';
  end loop;
  return _best;
end;
$$;

-- The last fire time strictly before _before of _cron read in _time_zone, or null; the
-- mirror image of the zone's next_fire_time.
create or replace function schedules.prev_fire_time(_cron text, _before timestamptz, _time_zone text)
  returns timestamptz
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _every_hour boolean;
  _o interval;
  _w timestamp;
  _i timestamptz;
  _best timestamptz;
begin
  if _time_zone is null or _time_zone = 'UTC' then
    return schedules.prev_fire_time(_cron, _before);
  end if;
  if _before is null then
    raise exception 'before must not be null' using errcode = '22004';
  end if;
  _every_hour := cardinality((schedules.parse_cron(_cron)).hours) = 24;
  _o := schedules.zone_offset(_before, _time_zone);
  _w := schedules.prev_fire_time(_cron, (_before at time zone _time_zone) at time zone 'UTC') at time zone 'UTC';
  if _w is null then
    return null;
  end if;
  _i := (_w at time zone 'UTC') - _o;
  if _before - _i <= interval '7 days'
     and schedules.zone_offset(_i, _time_zone) = _o
     and schedules.zone_offset(_i - interval '3 hours', _time_zone) = _o then
    return _i;
  end if;
  _w := schedules.prev_fire_time(_cron,
          ((_before at time zone _time_zone) + interval '3 hours 1 minute') at time zone 'UTC') at time zone 'UTC';
  while _w is not null and (_best is null or _w >= (_best at time zone _time_zone) - interval '3 hours') loop
    foreach _i in array schedules.wall_fire_instants(_w, _time_zone, _every_hour) loop
      if _i < _before and (_best is null or _i > _best) then
        _best := _i;
      end if;
    end loop;
    _w := schedules.prev_fire_time(_cron, _w at time zone 'UTC') at time zone 'UTC';
  end loop;
  return _best;
end;
$$;

-- Null when _time_zone names a time zone of PostgreSQL's IANA data (pg_timezone_names:
-- Europe/Berlin, America/New_York, UTC), spelt as there; else the message. Abbreviations
-- that are not zone names (PDT) and POSIX strings ('UTC+5') are refused: they have no
-- daylight-saving rules, or not the ones meant. Reads the zone directory (milliseconds):
-- called when a schedule is written, never per fire time.
create or replace function schedules.time_zone_error(_time_zone text) returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select case
           when _time_zone is null then 'time_zone must not be null'
           when not exists (select 1 from pg_catalog.pg_timezone_names z where z.name = _time_zone)
             then format('time_zone must be an IANA time zone name such as ''Europe/Berlin'' or ''UTC'', got %s',
                         quote_literal(left(_time_zone, 100)))
         end
$$;
--! EndIncluded schedules/cron.sql
--! Included schedules/schedule.sql
-- Managing schedules: create or update, enable, disable, list. Apps and the REST API call
-- the public functions; each has an owner-only *_at(_now, ...) variant for tests. Bad
-- business input returns a validation_failure_message instead of raising.
--
-- A schedule's definition is append-only (schedule_version); the newest row is in force.
-- fires_after (fire times at or before it are never due) moves to now when a schedule is
-- created, re-enabled, or its cron changes; other changes keep it, so an edit of the
-- payload neither skips nor repeats a fire time.

-- Null when the definition is valid; else what is wrong with it (the first problem).
-- _time_zone NULL means UTC.
create or replace function schedules.schedule_definition_error(
  _name text, _cron text, _task_type text, _payload jsonb, _priority integer, _missed_run_policy text,
  _time_zone text default null
) returns text
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _error text;
begin
  if _name is null or _name !~ '^[a-z][a-z0-9_.-]{0,99}$' then
    return 'name is required: 1 to 100 characters, lowercase letters, digits, _ . or -, starting with a letter';
  end if;
  _error := schedules.cron_error(_cron);
  if _error is not null then
    return _error;
  end if;
  if _time_zone is not null then
    _error := schedules.time_zone_error(_time_zone);
    if _error is not null then
      return _error;
    end if;
  end if;
  if _task_type is null then
    return 'task_type is required';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    return format('unknown task_type %s', quote_literal(left(_task_type, 100)));
  end if;
  if _payload is null or jsonb_typeof(_payload) <> 'object' then
    return 'payload is required and must be a JSON object';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    return format('payload is %s bytes, over the limit of %s bytes', pg_column_size(_payload), queues.max_payload_bytes());
  end if;
  if _task_type = 'db_function' then
    begin
      perform internal.resolve_runnable_function(_payload ->> 'db_function');
    exception when others then
      return format('payload.db_function must name a runnable function: %s', sqlerrm);
    end;
  end if;
  if _priority is not null and _priority not between -1000 and 1000 then
    return format('priority must be between -1000 and 1000, got %s', _priority);
  end if;
  if _missed_run_policy is not null and _missed_run_policy not in ('skip', 'catch_up_once') then
    return format('missed_run_policy must be ''skip'' or ''catch_up_once'', got %s',
                  quote_literal(left(_missed_run_policy, 50)));
  end if;
  return null;
end;
$$;

-- Appends a version to a locked schedule unless it would change nothing; returns the
-- version in force. _time_zone NULL keeps the version's zone (UTC for a new schedule).
create or replace function schedules.append_schedule_version(
  _now timestamptz, _schedule_id bigint, _cron text, _task_type text, _payload jsonb,
  _priority integer, _missed_run_policy text, _enabled boolean, _time_zone text default null
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _current schedules.schedule_version := schedules.current_version(_schedule_id);
  _zone text := coalesce(_time_zone, _current.time_zone, 'UTC');
  _id bigint;
begin
  if _current.schedule_version_id is not null
     and (_current.cron, _current.task_type, _current.payload, _current.priority,
          _current.missed_run_policy, _current.enabled, _current.time_zone)
         is not distinct from (_cron, _task_type, _payload, _priority, _missed_run_policy, _enabled, _zone) then
    return _current.schedule_version_id;
  end if;
  insert into schedules.schedule_version
    (schedule_id, cron, task_type, payload, priority, missed_run_policy, enabled, fires_after, created_at, time_zone)
  values (_schedule_id, _cron, _task_type, _payload, _priority, _missed_run_policy, _enabled,
          case when _current.schedule_version_id is null or (_enabled and not _current.enabled)
                    or _current.cron <> _cron or _current.time_zone <> _zone
               then _now else _current.fires_after end,
          _now, _zone)
  returning schedule_version_id into _id;
  return _id;
end;
$$;

-- Owner only. Creates the schedule _name (enabled), or updates its definition (keeping
-- whether it is enabled). NULL priority means 0, NULL missed_run_policy 'skip' and NULL
-- time_zone 'UTC' (an IANA name, schedules.time_zone_error; the cron is read on its wall
-- clock, sql/schedules/cron.sql). Changing the cron or the time zone counts from now.
-- Kicks off the supervisor. Idempotent: the same definition again appends nothing.
create or replace function schedules.upsert_schedule_at(
  _now               timestamptz,
  _name              text,
  _cron              text,
  _task_type         text,
  _payload           jsonb,
  _priority          integer default null,
  _missed_run_policy text default null,
  _time_zone         text default null,
  out schedule_id                bigint,
  out schedule_version_id        bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _enabled boolean;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  validation_failure_message := schedules.schedule_definition_error(
    _name, _cron, _task_type, _payload, _priority, _missed_run_policy, _time_zone);
  if validation_failure_message is not null then
    return;
  end if;

  -- The supervisor's lock first, then the schedule row: the supervisor takes them in
  -- this order too, so an edit and a supervisor run never deadlock.
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());
  insert into schedules.schedule (name, created_at) values (_name, _now) on conflict (name) do nothing;
  select s.schedule_id into schedule_id from schedules.schedule s where s.name = _name for no key update;
  _enabled := coalesce((schedules.current_version(schedule_id)).enabled, true);
  schedule_version_id := schedules.append_schedule_version(
    _now, schedule_id, btrim(_cron), _task_type, _payload, coalesce(_priority, 0),
    coalesce(_missed_run_policy, 'skip'), _enabled, coalesce(_time_zone, 'UTC'));
  perform schedules.ensure_schedule_supervisor_at(_now);
end;
$$;

create or replace function schedules.upsert_schedule(
  _name              text,
  _cron              text,
  _task_type         text,
  _payload           jsonb,
  _priority          integer default null,
  _missed_run_policy text default null,
  _time_zone         text default null,
  out schedule_id                bigint,
  out schedule_version_id        bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  -- Apps and the REST API schedule only what they could enqueue themselves: a schedule
  -- of an internal task type (a channel task, a db_function step) is the owner's to
  -- install, with schedules.upsert_schedule_at in a migration.
  perform queues.assert_may_enqueue(_task_type);
  select * into schedule_id, schedule_version_id, validation_failure_message
    from schedules.upsert_schedule_at(now(), _name, _cron, _task_type, _payload, _priority, _missed_run_policy,
                                      _time_zone);
end;
$$;

-- Owner only. Enables or disables the schedule _name; unchanged when it already is.
-- Re-enabling counts from now: fire times missed while disabled are never run.
create or replace function schedules.set_schedule_enabled_at(
  _now timestamptz, _name text, _enabled boolean,
  out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _v schedules.schedule_version;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _enabled is null then
    raise exception 'enabled must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key()); -- before the row lock, as above
  select s.schedule_id into schedule_id from schedules.schedule s where s.name = _name for no key update;
  if schedule_id is null then
    validation_failure_message := format('no schedule named %s', coalesce(quote_literal(left(_name, 100)), 'null'));
    return;
  end if;
  _v := schedules.current_version(schedule_id);
  schedule_version_id := schedules.append_schedule_version(
    _now, schedule_id, _v.cron, _v.task_type, _v.payload, _v.priority, _v.missed_run_policy, _enabled,
    _v.time_zone);
  if _enabled then
    perform schedules.ensure_schedule_supervisor_at(_now);
  end if;
end;
$$;

create or replace function schedules.enable_schedule(
  _name text, out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from schedules.set_schedule_enabled_at(now(), _name, true)
$$;

create or replace function schedules.disable_schedule(
  _name text, out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from schedules.set_schedule_enabled_at(now(), _name, false)
$$;

-- Every schedule with its definition in force, the last fire time handled and the next
-- one due (in the past when the supervisor is behind; null when disabled).
create or replace function schedules.list_schedules()
  returns table (
    schedule_id bigint, name text, cron text, task_type text, payload jsonb, priority integer,
    missed_run_policy text, enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz,
    created_at timestamptz, updated_at timestamptz, time_zone text
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select s.schedule_id, s.name, v.cron, v.task_type, v.payload, v.priority, v.missed_run_policy,
         v.enabled, schedules.last_fire_at(s.schedule_id), schedules.next_due_fire_at(s.schedule_id),
         s.created_at, v.created_at, v.time_zone
    from schedules.schedule s
   cross join lateral schedules.current_version(s.schedule_id) v
   order by s.name
$$;
--! EndIncluded schedules/schedule.sql
--! Included schedules/supervisor.sql
-- The schedule supervisor: a db_function task that enqueues due schedule runs, records
-- them as facts, and re-enqueues itself at the next fire time among all schedules (at
-- most schedules.max_supervisor_sleep() later).
--
--   schedules.schedule_supervisor(payload)            worker: run through internal.run_function
--   schedules.schedule_supervisor_at(_now, payload)   owner only: the same with a chosen clock
--   schedules.ensure_schedule_supervisor()            app/api: idempotent kickoff
--   schedules.ensure_schedule_supervisor_at(_now)     owner only
--
-- Missed-run policies, for the fire times due (after the last handled one, up to now):
--   skip           fire times older than schedules.skip_grace_period() are not run: one
--                  'skipped' fact covers them all; each fire time within the grace window
--                  is enqueued as its own task.
--   catch_up_once  one task covers all of them: it is recorded under the latest due fire
--                  time, with first_fire_at the earliest.
-- Tasks are enqueued with scheduled_at = their fire time and the stored payload as is.
--
-- At most once per fire time: supervisors serialise on a transaction advisory lock, and
-- unique (schedule_id, fire_at) on schedule_run rejects any second enqueue of a fire time.

-- Fire times at most this old still run under the 'skip' policy.
create or replace function schedules.skip_grace_period() returns interval
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select interval '10 minutes' $$;

-- The supervisor wakes at least this often while any schedule is enabled, so a schedule
-- created without a kickoff (or a lost supervisor chain after ensure) is never far off.
create or replace function schedules.max_supervisor_sleep() returns interval
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select interval '1 hour' $$;

-- The advisory lock key that serialises supervisors and kickoffs.
create or replace function schedules.supervisor_lock_key() returns bigint
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 7305871629419384611::bigint $$;

-- Facts -------------------------------------------------------------------------------

-- The definition in force for a schedule (its newest version).
create or replace function schedules.current_version(_schedule_id bigint)
  returns schedules.schedule_version
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select v.* from schedules.schedule_version v
   where v.schedule_id = _schedule_id
   order by v.schedule_version_id desc
   limit 1
$$;

-- The latest fire time handled (enqueued or skipped), or null. A backward scan of the
-- unique (schedule_id, fire_at) index, limit 1: cost does not grow with history.
create or replace function schedules.last_fire_at(_schedule_id bigint)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select r.fire_at from schedules.schedule_run r
   where r.schedule_id = _schedule_id
   order by r.fire_at desc
   limit 1
$$;

-- The next fire time not yet handled (it may be in the past: then it is due), or null for
-- a disabled schedule.
create or replace function schedules.next_due_fire_at(_schedule_id bigint)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select case when v.enabled
              then schedules.next_fire_time(v.cron, greatest(v.fires_after, schedules.last_fire_at(_schedule_id)),
                                            v.time_zone)
         end
    from schedules.current_version(_schedule_id) v
$$;

-- When the supervisor should next run: the earliest next due fire time (now if one is
-- overdue), at most max_supervisor_sleep() from now; null when no schedule is enabled.
create or replace function schedules.supervisor_wake_at(_now timestamptz)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select least(greatest(min(n.fire_at), _now), _now + schedules.max_supervisor_sleep())
    from schedules.schedule s
   cross join lateral (select schedules.next_due_fire_at(s.schedule_id) as fire_at) n
  having count(n.fire_at) > 0
$$;

-- The pending supervisor task that will run next, among those no worker holds a live
-- lease on (the running supervisor itself is leased, so it never counts): task_id and
-- when it becomes claimable. Only the newest 100 supervisor tasks are probed, by primary
-- key (`= any(array(...))`), so the cost does not grow with history; every older
-- supervisor task is completed in practice, and one that is not only costs a spare run.
create or replace function schedules.pending_supervisor_task(
  _now timestamptz, out task_id bigint, out available_at timestamptz
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select p.task_id, p.available_at
    from queues.task_pending p
   where p.task_id = any (array(select s.task_id from schedules.supervisor_task s
                                 order by s.task_id desc limit 100))
     and (p.current_lease_id is null or p.available_at <= _now)
   order by p.available_at, p.task_id
   limit 1
$$;

-- Effects -----------------------------------------------------------------------------

-- Enqueues the schedule's task for a fire time and records the run; returns the task_id.
create or replace function schedules.enqueue_schedule_run(
  _version schedules.schedule_version, _fire_at timestamptz, _first_fire_at timestamptz, _now timestamptz
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  _task_id := queues.enqueue_internal(_version.task_type, _version.payload, _fire_at, _version.priority);
  insert into schedules.schedule_run
    (schedule_id, schedule_version_id, fire_at, first_fire_at, outcome, task_id, enqueued_at)
  values (_version.schedule_id, _version.schedule_version_id, _fire_at, _first_fire_at,
          'enqueued', _task_id, _now);
  return _task_id;
end;
$$;

-- Handles one schedule's due fire times at _now by its missed-run policy. Returns
-- {name, enqueued: [{fire_at, first_fire_at, task_id}], skipped: {first_fire_at, fire_at}}
-- or null when nothing was due. Locks the schedule row (FOR NO KEY UPDATE) first.
create or replace function schedules.run_schedule_at(_now timestamptz, _schedule_id bigint)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
  _v schedules.schedule_version;
  _first timestamptz;
  _last timestamptz;
  _from timestamptz;
  _fire timestamptz;
  _enqueued jsonb := '[]';
  _skipped jsonb;
  _task_id bigint;
begin
  select s.name into _name from schedules.schedule s where s.schedule_id = _schedule_id for no key update;
  _v := schedules.current_version(_schedule_id);
  if _name is null or not coalesce(_v.enabled, false) then
    return null;
  end if;
  _from := greatest(_v.fires_after, schedules.last_fire_at(_schedule_id));
  _first := schedules.next_fire_time(_v.cron, _from, _v.time_zone);
  if _first is null or _first > _now then
    return null;
  end if;

  if _v.missed_run_policy = 'catch_up_once' then
    -- The latest fire time at or before now (at least _first).
    _last := schedules.prev_fire_time(_v.cron, _now + interval '1 microsecond', _v.time_zone);
    _task_id := schedules.enqueue_schedule_run(_v, _last, _first, _now);
    _enqueued := jsonb_build_array(jsonb_build_object(
      'fire_at', _last, 'first_fire_at', _first, 'task_id', _task_id));
  else
    if _first < _now - schedules.skip_grace_period() then
      _last := schedules.prev_fire_time(_v.cron, _now - schedules.skip_grace_period(), _v.time_zone);
      insert into schedules.schedule_run
        (schedule_id, schedule_version_id, fire_at, first_fire_at, outcome, task_id, enqueued_at)
      values (_schedule_id, _v.schedule_version_id, _last, _first, 'skipped', null, _now);
      _skipped := jsonb_build_object('first_fire_at', _first, 'fire_at', _last);
      _from := _last;
    end if;
    -- Within the grace window: each fire time is its own run (at most grace / 1 minute).
    loop
      _fire := schedules.next_fire_time(_v.cron, _from, _v.time_zone);
      exit when _fire is null or _fire > _now;
      _task_id := schedules.enqueue_schedule_run(_v, _fire, _fire, _now);
      _enqueued := _enqueued || jsonb_build_object('fire_at', _fire, 'first_fire_at', _fire, 'task_id', _task_id);
      _from := _fire;
    end loop;
  end if;
  return jsonb_build_object('name', _name, 'enqueued', _enqueued, 'skipped', _skipped);
end;
$$;

-- Enqueues the next supervisor run at _wake unless a pending supervisor task (not held
-- by a live lease) already becomes claimable by then; returns the task that will run.
-- Caller holds the supervisor advisory lock.
create or replace function schedules.plan_supervisor_at(_now timestamptz, _wake timestamptz)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending record;
  _task_id bigint;
begin
  select * into _pending from schedules.pending_supervisor_task(_now);
  if _wake is null then
    return _pending.task_id;
  end if;
  if _pending.task_id is not null and _pending.available_at <= _wake then
    return _pending.task_id;
  end if;
  _task_id := queues.enqueue_internal('db_function',
    jsonb_build_object('task_type', 'db_function', 'db_function', 'schedules.schedule_supervisor'),
    _wake, 100, null, 3);
  insert into schedules.supervisor_task (task_id, scheduled_at, enqueued_at) values (_task_id, _wake, _now);
  return _task_id;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Owner only (tests move the clock). Handles every enabled schedule's due fire times,
-- then plans the next run. Returns {success: true, payload: {runs, enqueued, skipped,
-- next_supervisor_task_id, next_run_at}}; when a schedule raised, its effects are rolled
-- back, the others stand, and the envelope is {success: false, error, payload}.
create or replace function schedules.schedule_supervisor_at(_now timestamptz, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _schedule record;
  _run jsonb;
  _runs jsonb := '[]';
  _errors jsonb := '[]';
  _enqueued integer := 0;
  _skipped integer := 0;
  _wake timestamptz;
  _next_task_id bigint;
  _result jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());

  for _schedule in select s.schedule_id, s.name from schedules.schedule s order by s.schedule_id loop
    begin
      _run := schedules.run_schedule_at(_now, _schedule.schedule_id);
      if _run is not null then
        _runs := _runs || _run;
        _enqueued := _enqueued + jsonb_array_length(_run -> 'enqueued');
        _skipped := _skipped + case when _run -> 'skipped' = 'null' then 0 else 1 end;
      end if;
    exception when others then
      _errors := _errors || jsonb_build_object('name', _schedule.name, 'error', sqlerrm, 'sqlstate', sqlstate);
    end;
  end loop;

  _wake := schedules.supervisor_wake_at(_now);
  _next_task_id := schedules.plan_supervisor_at(_now, _wake);
  _result := jsonb_build_object(
    'status', 'ok', 'runs', _runs, 'enqueued', _enqueued, 'skipped', _skipped,
    'next_supervisor_task_id', _next_task_id, 'next_run_at', _wake);
  if jsonb_array_length(_errors) > 0 then
    return jsonb_build_object('success', false,
      'error', format('%s schedule(s) failed: %s', jsonb_array_length(_errors), _errors::text),
      'payload', _result || jsonb_build_object('errors', _errors));
  end if;
  return jsonb_build_object('success', true, 'payload', _result);
end;
$$;

-- The db_function the worker runs. Payload: {db_function: 'schedules.schedule_supervisor'}
-- (no other fields are read). See schedule_supervisor_at.
create or replace function schedules.schedule_supervisor(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select schedules.schedule_supervisor_at(now(), payload)
$$;

-- Kickoff --------------------------------------------------------------------------------

-- Owner only. Makes sure a supervisor task will run by the next due fire time (or within
-- max_supervisor_sleep()); enqueues one only when no pending supervisor task does.
-- Returns that task's id; null when no schedule is enabled and none is pending.
create or replace function schedules.ensure_schedule_supervisor_at(_now timestamptz)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());
  return schedules.plan_supervisor_at(_now, schedules.supervisor_wake_at(_now));
end;
$$;

-- Idempotent kickoff for apps and deploy scripts; see ensure_schedule_supervisor_at.
create or replace function schedules.ensure_schedule_supervisor()
  returns bigint
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select schedules.ensure_schedule_supervisor_at(now())
$$;
--! EndIncluded schedules/supervisor.sql
--! Included admin/schedules.sql
-- Recurring schedules for the dashboard: each schedule in force (schedules.list_schedules)
-- with its last runs and how their tasks ended.

-- Every schedule with cron, its time zone, next and last fire times, enabled, and its last _runs (1 to
-- 20, default 5) runs newest first as JSON: [{fire_at, outcome (enqueued/skipped),
-- task_id, task_state}], task_state being the task's outcome or pending state.
create or replace function admin.list_schedules_at(_now timestamptz, _runs integer)
  returns table (
    name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text,
    enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz, updated_at timestamptz, last_runs jsonb,
    time_zone text
  )
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n integer := coalesce(_runs, 5);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _n not between 1 and 20 then
    raise exception 'runs must be between 1 and 20, got %', _n using errcode = '22023';
  end if;
  return query
  select s.name, s.cron, s.task_type, s.payload, s.priority, s.missed_run_policy, s.enabled,
         s.last_fire_at, s.next_fire_at, s.updated_at,
         coalesce((
           select jsonb_agg(jsonb_build_object(
                    'fire_at', r.fire_at, 'outcome', r.outcome, 'task_id', r.task_id,
                    'task_state', coalesce(c.outcome,
                      (select admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)
                         from queues.task_pending p where p.task_id = r.task_id)))
                    order by r.fire_at desc)
             from (select * from schedules.schedule_run x
                    where x.schedule_id = s.schedule_id
                    order by x.fire_at desc limit _n) r
             left join queues.task_completed c on c.task_id = r.task_id), '[]'),
         s.time_zone
    from schedules.list_schedules() s;
end;
$$;

create or replace function admin.list_schedules(_runs integer default null)
  returns table (
    name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text,
    enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz, updated_at timestamptz, last_runs jsonb,
    time_zone text
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_schedules_at(now(), _runs)
$$;
--! EndIncluded admin/schedules.sql

--! split: 800-register-task-types.sql
set local lock_timeout = '5s';

-- queues.register_task_types: the owner registers the task types an app's task
-- definitions (@org/tasks) declare.
--! Included queues/task_type.sql
-- Task types declared by an app's task definitions (@org/tasks, defineTask): registered by
-- the owner's deploy step (`npm run migrate`, `queue-tasks register`) and by `npm start`'s
-- local set-up, never by the worker, whose database user may not create task types.
--
-- _task_types: a JSON array of {"task_type": "fax", "description": "..."} (description
-- optional, at most 1,000 characters). Inserts the types that are missing; for a type
-- that exists, a non-empty description replaces its own. Never deletes a type (one that
-- tasks name cannot be deleted anyway: queues.guard_task_type_in_use). Worker-only types
-- (queues.internal_task_type) are refused: their tasks make the worker act with the owner's
-- authority, and no definition's run() may stand in for them. All or nothing: the first
-- bad element is named (task_types[2].task_type: ...), and nothing is written.
-- Returns each element's type, and whether this call created it.
create or replace function queues.register_task_types(_task_types jsonb)
  returns table (task_type text, created boolean)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _element     jsonb;
  _index       integer := 0;
  _name        text;
  _description text;
begin
  if _task_types is null then
    raise exception 'task_types must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_task_types) <> 'array' then
    raise exception 'task_types must be a JSON array, got %', jsonb_typeof(_task_types) using errcode = '22023';
  end if;
  if jsonb_array_length(_task_types) > 1000 then
    raise exception 'task_types has % elements, over the limit of 1000', jsonb_array_length(_task_types)
      using errcode = '54000';
  end if;
  for _element in select e from jsonb_array_elements(_task_types) e loop
    if jsonb_typeof(_element) <> 'object' then
      raise exception 'task_types[%] must be an object, got %', _index, jsonb_typeof(_element) using errcode = '22023';
    end if;
    if exists (select 1 from jsonb_object_keys(_element) k where k not in ('task_type', 'description')) then
      raise exception 'task_types[%]: unknown field(s) %', _index,
        (select string_agg(k, ', ' order by k) from jsonb_object_keys(_element) k where k not in ('task_type', 'description'))
        using errcode = '22023';
    end if;
    if jsonb_typeof(_element->'task_type') is distinct from 'string' then
      raise exception 'task_types[%].task_type must be a string', _index using errcode = '22023';
    end if;
    _name := _element->>'task_type';
    if _name !~ '^[a-z][a-z0-9_]{0,62}$' then
      raise exception 'task_types[%].task_type must be a-z, 0-9 and _, starting with a letter, at most 63 characters, got %',
        _index, quote_literal(left(_name, 100)) using errcode = '22023';
    end if;
    if _element ? 'description' and jsonb_typeof(_element->'description') not in ('string', 'null') then
      raise exception 'task_types[%].description must be a string', _index using errcode = '22023';
    end if;
    _description := coalesce(_element->>'description', '');
    if length(_description) > 1000 then
      raise exception 'task_types[%].description is % characters, over the limit of 1000', _index, length(_description)
        using errcode = '54000';
    end if;
    if exists (select 1 from queues.internal_task_type i where i.task_type = _name) then
      raise exception 'task_types[%].task_type % is a worker-only task type of the queue; choose another name',
        _index, quote_literal(_name) using errcode = '42501';
    end if;
    _index := _index + 1;
  end loop;

  return query
  with wanted as (
    select distinct on (e->>'task_type') e->>'task_type' as name, coalesce(e->>'description', '') as description
      from jsonb_array_elements(_task_types) with ordinality as a(e, n)
     order by e->>'task_type', n desc
  ),
  inserted as (
    insert into queues.task_type as t (task_type, description)
    select w.name, w.description from wanted w
    on conflict on constraint task_type_pkey do nothing
    returning t.task_type
  ),
  -- A description given replaces the type's own (an update of description alone: no
  -- lock that enqueues wait for, see queues.guard_task_type_in_use).
  described as (
    update queues.task_type t
       set description = w.description
      from wanted w
     where t.task_type = w.name
       and w.description <> ''
       and t.description is distinct from w.description
       and w.name not in (select i.task_type from inserted i)
    returning t.task_type
  )
  select w.name, w.name in (select i.task_type from inserted i)
    from wanted w
   order by w.name;
end;
$$;

comment on function queues.register_task_types(jsonb) is
  'Registers the task types an app''s task definitions declare (owner only): inserts missing ones, updates descriptions, never deletes.';

revoke execute on function queues.register_task_types(jsonb) from public;
--! EndIncluded queues/task_type.sql

--! split: 900-privileges.sql
set local lock_timeout = '5s';

-- The grants of every schema whose functions the changes above added or replaced, after
-- all of them: a privileges file grants by full signature, so each function it names must
-- exist by then.
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
  internal.call_runnable(text, jsonb)
to :DATABASE_WORKER;

select internal.register_runnable_function('internal.noop(jsonb)');
select internal.register_runnable_function('internal.start_provider_call(jsonb)');
--! EndIncluded internal/privileges.sql
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
  queues.enqueue_many(jsonb),
  queues.enqueue_unique(text, jsonb, text, text, interval, timestamptz, integer, text, integer)
to :DATABASE_APP;
-- The client's enqueue on a pool (commit, then the wake-up; sql/queues/enqueue.sql).
revoke execute on all procedures in schema queues from public;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint)
  to :DATABASE_APP;
--! EndIncluded queues/privileges.sql
--! Included queues/privileges-hot-path.sql
-- Grants of the worker's hot-path functions (settle, steps, revocation of a dead
-- process's leases); included after the files that define them. queues/privileges.sql
-- revokes EXECUTE from PUBLIC on every queue function first.

revoke execute on all functions in schema queues from public;

grant execute on function
  queues.settle_tasks(bigint[], bigint[], bigint[], bigint[], text[], boolean[], bigint[], text[]),
  queues.run_steps(bigint[], bigint[], text[], jsonb[]),
  queues.run_step(bigint, bigint, text, jsonb),
  queues.complete_steps(bigint[], bigint[], text[], boolean[], bigint[], text[], jsonb[]),
  queues.current_leases(bigint[], bigint[]),
  queues.parse_envelope(jsonb),
  queues.is_current_lease(bigint, bigint),
  queues.max_payload_bytes(),
  queues.mark_started(bigint[], bigint[]),
  queues.revoke_worker_leases(text)
to :DATABASE_WORKER;
--! EndIncluded queues/privileges-hot-path.sql
--! Included files/privileges.sql
-- Who may call what in files: the worker runs the supervisor and handlers (granted and
-- registered); apps may start a file deletion. Everything else has no grant.

revoke all on all tables in schema files from public;
revoke all on all sequences in schema files from public;
revoke execute on all functions in schema files from public;

grant usage on schema files to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  files.file_deletion_supervisor(jsonb),
  files.get_file_delete_payload(jsonb),
  files.record_file_delete_success(jsonb),
  files.record_file_delete_failure(jsonb)
to :DATABASE_WORKER;

-- The files service asks before signing (sql/files/signing.sql), through
-- internal.run_function as the worker role, which deletes files anyway.
grant execute on function files.check_file_delete_signing(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('files.check_file_delete_signing(jsonb)');

select internal.register_runnable_function('files.file_deletion_supervisor(jsonb)');
select internal.register_runnable_function('files.get_file_delete_payload(jsonb)');
select internal.register_runnable_function('files.record_file_delete_success(jsonb)');
select internal.register_runnable_function('files.record_file_delete_failure(jsonb)');

grant execute on function files.kickoff_file_deletion(bigint, timestamptz) to :DATABASE_APP;
--! EndIncluded files/privileges.sql
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
  admin.list_api_changes(bigint, integer, bigint)
to :DATABASE_API;

grant execute on function queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean) to :DATABASE_API;
grant execute on function queues.enqueue_unique(text, jsonb, text, text, interval, timestamptz, integer, text, integer)
  to :DATABASE_API;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint)
  to :DATABASE_API;
--! EndIncluded admin/privileges.sql
--! Included schedules/privileges.sql
-- Who may call what in schedules. The worker runs the supervisor through
-- internal.run_function; apps and the REST API manage schedules and generate staggered
-- batches. The *_at(_now, ...) variants, facts and effects are owner only.

revoke all on all tables in schema schedules from public;
revoke all on all sequences in schema schedules from public;
revoke execute on all functions in schema schedules from public;

grant usage on schema schedules to :DATABASE_WORKER, :DATABASE_APP, :DATABASE_API;

grant execute on function schedules.schedule_supervisor(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('schedules.schedule_supervisor(jsonb)');

grant execute on function
  schedules.upsert_schedule(text, text, text, jsonb, integer, text, text),
  schedules.enable_schedule(text),
  schedules.disable_schedule(text),
  schedules.list_schedules(),
  schedules.ensure_schedule_supervisor(),
  schedules.generate_staggered_tasks(text, jsonb, timestamptz, interval, integer, integer)
to :DATABASE_APP, :DATABASE_API;
--! EndIncluded schedules/privileges.sql
--! Included public/privileges.sql
-- Who may use the role-based specification's names in schema public
-- (sql/public/role_based_worker.sql). The views run as their owner over the queue's
-- tables (their readers get SELECT on the view only); a function a view calls is checked
-- against the reader. Listed in sql/role-allowlist.json ("api_views" and the roles).

revoke all on public.v_worker_capacity, public.worker_tasks from public;
revoke execute on function
  public.recover_stale_tasks(integer),
  public.generate_resync_tasks(integer, date)
from public;

grant select on public.v_worker_capacity, public.worker_tasks to :DATABASE_API;
grant execute on function public.recover_stale_tasks(integer) to :DATABASE_API;
grant execute on function public.generate_resync_tasks(integer, date) to :DATABASE_APP, :DATABASE_API;
--! EndIncluded public/privileges.sql
