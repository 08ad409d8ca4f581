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
