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
     -- A call its provider refused (a throttle reported under that lease, with the lease's
     -- release: sql/queues/throttle.sql) was not made.
     -- (By task and lease: the tasks of one claim share its lease id.)
     and (select true from queues.throttle th
           where th.task_lease_id = s.task_lease_id and th.task_id = s.task_id limit 1) is null
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

-- internal.run_before_provider_call for a batch of channel tasks in one statement (the
-- tasks a worker starts in one turn of its event loop): one round trip for the batch.
-- _calls: a JSON array of {before_handler, payload, task_id, task_lease_id, traceparent?}.
-- Returns one row per call, ord its 1-based position. Each call runs in a subtransaction
-- of its own, so the calls stay apart: a raise of one handler (or of its check) rolls back
-- that call's writes only and is reported on its row (before_error, before_sqlstate; the
-- worker classifies it as it would the raise of a statement of its own: a deadlock or a
-- serialization failure interrupts that task, anything else fails it); a lease that is
-- no longer live fails that call's check only (start_result, a validation failure). A
-- call's traceparent (optional) is the trace context of the tasks its handler enqueues
-- (queue.traceparent, set for the call and cleared after it, as FunctionRunTraced does).
-- A statement timeout or a cancel (57014) is not caught by a call's subtransaction: it
-- ends the whole statement, and the worker sends each call again alone.
-- At most 50 calls (a subtransaction each; PostgreSQL caches 64 per backend).
create or replace function internal.run_before_provider_calls(_calls jsonb)
  returns table (ord integer, before_result jsonb, start_result jsonb, start_error text,
                 before_error text, before_sqlstate text)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _call jsonb;
  _n integer;
  _ran record;
begin
  if jsonb_typeof(_calls) is distinct from 'array' then
    raise exception 'calls must be a JSON array' using errcode = '22023';
  end if;
  _n := jsonb_array_length(_calls);
  if _n > 50 then
    raise exception 'at most 50 calls in one group, got %', _n using errcode = '22023';
  end if;
  for _i in 1 .. _n loop
    _call := _calls -> (_i - 1);
    ord := _i;
    before_result := null;
    start_result := null;
    start_error := null;
    before_error := null;
    before_sqlstate := null;
    if _call ->> 'traceparent' is not null then
      perform set_config('queue.traceparent', _call ->> 'traceparent', true);
    end if;
    begin
      -- An assignment, not a query: no statement of its own for each call.
      _ran := internal.run_before_provider_call(
        _call ->> 'before_handler', _call -> 'payload',
        (_call ->> 'task_id')::bigint, (_call ->> 'task_lease_id')::bigint);
      before_result := _ran.before_result;
      start_result := _ran.start_result;
      start_error := _ran.start_error;
    exception
      when others then
        before_error := sqlerrm;
        before_sqlstate := sqlstate;
    end;
    if _call ->> 'traceparent' is not null then
      perform set_config('queue.traceparent', '', true);
    end if;
    return next;
  end loop;
end;
$$;
