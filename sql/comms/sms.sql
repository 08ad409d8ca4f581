-- The send-SMS process: facts → logic → effects, then the handlers the worker calls
-- around the provider, then the kickoffs.
--
--   comms.send_sms(...)             app: create the message and kick off (idempotent)
--   comms.kickoff_send_sms(id)      root task + first supervisor task (idempotent)
--   comms.send_sms_supervisor       db_function: decides, schedules, re-enqueues itself
--   comms.get_sms_payload           before_handler: the provider payload
--   comms.record_sms_success        success_handler: attempt succeeded fact
--   comms.record_sms_failure        error_handler: attempt failed fact

-- Limits ------------------------------------------------------------------------------

-- Provider calls per message: the first and two retries.
create or replace function comms.send_sms_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 3 $$;

-- Non-terminal supervisor runs per message. A loop bug (or a flood of duplicate
-- supervisor tasks) ends in send_sms_task_failed('run_limit_reached') instead of
-- running forever. With the backoff below, 30 runs span about 21 hours.
create or replace function comms.send_sms_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 30 $$;

-- Facts -------------------------------------------------------------------------------

create or replace function comms.has_send_sms_succeeded_attempt(_send_sms_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from comms.send_sms_attempt a
      join comms.send_sms_attempt_succeeded s using (send_sms_attempt_id)
     where a.send_sms_task_id = _send_sms_task_id)
$$;

create or replace function comms.count_send_sms_attempts(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_attempt a
   where a.send_sms_task_id = _send_sms_task_id
$$;

-- Failed attempts. An attempt with both outcomes (a redelivered task whose success
-- arrived after a failure) counts as succeeded, not failed.
create or replace function comms.count_send_sms_failed_attempts(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_attempt a
    join comms.send_sms_attempt_failed f using (send_sms_attempt_id)
   where a.send_sms_task_id = _send_sms_task_id
     and not exists (select 1 from comms.send_sms_attempt_succeeded s
                      where s.send_sms_attempt_id = a.send_sms_attempt_id)
$$;

-- Attempts with no outcome yet: the provider call is queued or in flight.
create or replace function comms.count_send_sms_outstanding_attempts(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_attempt a
   where a.send_sms_task_id = _send_sms_task_id
     and not exists (select 1 from comms.send_sms_attempt_succeeded s
                      where s.send_sms_attempt_id = a.send_sms_attempt_id)
     and not exists (select 1 from comms.send_sms_attempt_failed f
                      where f.send_sms_attempt_id = a.send_sms_attempt_id)
$$;

-- True when an attempt failed with an unknown outcome (an at-most-once call that may
-- have happened): another attempt could deliver twice.
create or replace function comms.has_send_sms_unknown_outcome(_send_sms_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from comms.send_sms_attempt a
      join comms.send_sms_attempt_failed f using (send_sms_attempt_id)
     where a.send_sms_task_id = _send_sms_task_id
       and internal.is_unknown_outcome(f.error_message)
       and not exists (select 1 from comms.send_sms_attempt_succeeded s
                        where s.send_sms_attempt_id = a.send_sms_attempt_id))
$$;

create or replace function comms.count_send_sms_supervisor_runs(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_supervisor_run r
   where r.send_sms_task_id = _send_sms_task_id
$$;

create or replace function comms.has_send_sms_task_succeeded(_send_sms_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from comms.send_sms_task_succeeded t
                  where t.send_sms_task_id = _send_sms_task_id)
$$;

-- The terminal failure reason, or NULL while the process has not failed.
create or replace function comms.get_send_sms_task_failure(_send_sms_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from comms.send_sms_task_failed t
   where t.send_sms_task_id = _send_sms_task_id
$$;

-- Everything the supervisor decides on, in one record: call it by hand to see what
-- the supervisor saw (select * from comms.send_sms_supervisor_facts(123)).
create or replace function comms.send_sms_supervisor_facts(
  _send_sms_task_id bigint,
  out has_task_succeeded boolean,
  out task_failure       text,
  out has_success        boolean,
  out num_attempts       integer,
  out num_failures       integer,
  out num_outstanding    integer,
  out num_runs           integer,
  out scheduled_at       timestamptz,
  out has_unknown_outcome boolean
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select comms.has_send_sms_task_succeeded(t.send_sms_task_id),
         comms.get_send_sms_task_failure(t.send_sms_task_id),
         comms.has_send_sms_succeeded_attempt(t.send_sms_task_id),
         comms.count_send_sms_attempts(t.send_sms_task_id),
         comms.count_send_sms_failed_attempts(t.send_sms_task_id),
         comms.count_send_sms_outstanding_attempts(t.send_sms_task_id),
         comms.count_send_sms_supervisor_runs(t.send_sms_task_id),
         t.scheduled_at,
         comms.has_send_sms_unknown_outcome(t.send_sms_task_id)
    from comms.send_sms_task t
   where t.send_sms_task_id = _send_sms_task_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row for the rest of the transaction; false when there is no such row.
-- FOR NO KEY UPDATE, not FOR UPDATE: it serialises supervisors exactly as well (the two
-- modes conflict with themselves), but it does not conflict with the FOR KEY SHARE lock
-- that inserting a referencing row takes, so handlers and other writers of facts that
-- reference the root never wait on a running supervisor.
create or replace function comms.lock_send_sms_task(_send_sms_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from comms.send_sms_task t
   where t.send_sms_task_id = _send_sms_task_id
     for no key update;
  return found;
end;
$$;

-- Records a failure for every attempt of the task whose channel task the queue gave up
-- on (internal.queue_gave_up_message) without an outcome; returns how many.
create or replace function comms.close_given_up_sms_attempts(_send_sms_task_id bigint)
  returns integer
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  with closed as (
    insert into comms.send_sms_attempt_failed (send_sms_attempt_id, error_message)
    select a.send_sms_attempt_id, internal.queue_gave_up_message(a.task_id)
      from comms.send_sms_attempt a
     where a.send_sms_task_id = _send_sms_task_id
       and internal.queue_gave_up_message(a.task_id) is not null
       and not exists (select 1 from comms.send_sms_attempt_succeeded s
                        where s.send_sms_attempt_id = a.send_sms_attempt_id)
       and not exists (select 1 from comms.send_sms_attempt_failed f
                        where f.send_sms_attempt_id = a.send_sms_attempt_id)
    on conflict do nothing
    returning 1)
  select count(*)::integer from closed
$$;

create or replace function comms.record_send_sms_supervisor_run(_send_sms_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_sms_supervisor_run (send_sms_task_id) values (_send_sms_task_id)
$$;

create or replace function comms.record_send_sms_task_succeeded(_send_sms_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_sms_task_succeeded (send_sms_task_id) values (_send_sms_task_id)
  on conflict do nothing
$$;

create or replace function comms.record_send_sms_task_failed(_send_sms_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_sms_task_failed (send_sms_task_id, reason) values (_send_sms_task_id, _reason)
  on conflict do nothing
$$;

-- Records an attempt and enqueues the sms channel task for it; returns the attempt id.
create or replace function comms.schedule_sms_attempt(_send_sms_task_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  -- The attempt id is drawn first (the channel task's payload names it), the row is
  -- written after the enqueue (it names the channel task).
  _attempt_id bigint := nextval(pg_get_serial_sequence('comms.send_sms_attempt', 'send_sms_attempt_id'));
  _queue_task_id bigint;
begin
  _queue_task_id := queues.enqueue_internal('sms', jsonb_build_object(
    'task_type', 'sms',
    'send_sms_task_id', _send_sms_task_id,
    'send_sms_attempt_id', _attempt_id,
    'before_handler', 'comms.get_sms_payload',
    'success_handler', 'comms.record_sms_success',
    'error_handler', 'comms.record_sms_failure'));
  insert into comms.send_sms_attempt (send_sms_attempt_id, send_sms_task_id, task_id)
  overriding system value
  values (_attempt_id, _send_sms_task_id, _queue_task_id);
  return _attempt_id;
end;
$$;

-- Enqueues the next supervisor run and returns its time: after an exponential backoff
-- on the runs so far, 5 s · 2^(runs − 1), capped at an hour. Every failure costs a run, so retries back off exponentially; and waiting on
-- a slow attempt backs off too, instead of burning the run cap in minutes.
create or replace function comms.schedule_send_sms_recheck(
  _send_sms_task_id bigint, _num_runs integer
) returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz :=
    now() + internal.backoff(_num_runs - 1, 3600);
begin
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'comms.send_sms_supervisor',
    'send_sms_task_id', _send_sms_task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Drives one send_sms_task to a terminal fact. Payload: {send_sms_task_id}.
-- Returns {success: true, payload: {status, ...}} while running or on success,
-- {status: 'max_attempts_reached' | 'run_limit_reached', payload} when the process
-- failed, {success: false, validation_failure_message} for a bad payload. Raises 25000
-- outside READ COMMITTED.
create or replace function comms.send_sms_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'send_sms_task_id');
  _facts record;
  _attempt_id bigint;
  _next_check_at timestamptz;
begin
  -- 1. Validation.
  if _task_id is null then
    return internal.validation_failure('send_sms_task_id must be a positive integer');
  end if;
  perform internal.assert_read_committed('comms.send_sms_supervisor');

  -- 2. Lock the root, then read facts (in this order: facts read after the lock wait
  --    include everything the previous holder committed).
  if not comms.lock_send_sms_task(_task_id) then
    return internal.validation_failure(format('send_sms_task %s not found', _task_id));
  end if;

  -- 3. Facts.
  perform comms.close_given_up_sms_attempts(_task_id);
  _facts := comms.send_sms_supervisor_facts(_task_id);

  -- 4. Logic and effects. Terminal states first.
  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform comms.record_send_sms_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.has_unknown_outcome then
    perform comms.record_send_sms_task_failed(_task_id, 'delivery_outcome_unknown');
    return jsonb_build_object('status', 'delivery_outcome_unknown');
  end if;
  if _facts.num_failures >= comms.send_sms_max_attempts() then
    perform comms.record_send_sms_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached',
                              'payload', jsonb_build_object('num_failures', _facts.num_failures));
  end if;
  if _facts.num_runs >= comms.send_sms_max_supervisor_runs() then
    perform comms.record_send_sms_task_failed(_task_id, 'run_limit_reached');
    return jsonb_build_object('status', 'run_limit_reached',
                              'payload', jsonb_build_object('num_runs', _facts.num_runs));
  end if;

  perform comms.record_send_sms_supervisor_run(_task_id);

  -- At most one attempt in flight.
  if _facts.num_outstanding = 0 then
    _attempt_id := comms.schedule_sms_attempt(_task_id);
  end if;

  _next_check_at := comms.schedule_send_sms_recheck(_task_id, _facts.num_runs + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
    'send_sms_attempt_id', _attempt_id,
    'next_check_at', _next_check_at));
end;
$$;

-- Handlers ----------------------------------------------------------------------------

-- before_handler. Payload: the sms task's ({send_sms_attempt_id, ...}). Returns the
-- provider payload of @org/handler-types smsPayload, with idempotency_key = the
-- attempt id, so a redelivered attempt is deduplicated by the provider. An attempt that
-- already has an outcome is not sent again (validation failure).
create or replace function comms.get_sms_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload, 'send_sms_attempt_id');
  _provider_payload jsonb;
  _ended text;
begin
  if _attempt_id is null then
    return internal.validation_failure('send_sms_attempt_id must be a positive integer');
  end if;
  if exists (select 1 from comms.send_sms_attempt_succeeded s where s.send_sms_attempt_id = _attempt_id)
     or exists (select 1 from comms.send_sms_attempt_failed f where f.send_sms_attempt_id = _attempt_id) then
    return internal.validation_failure(format('send_sms_attempt %s already has an outcome; not sending it again', _attempt_id));
  end if;
  -- A process that already ended sends nothing more (an attempt still queued when a
  -- supervisor recorded run_limit_reached, for example).
  select format('send_sms_task %s already ended (%s); not sending attempt %s', a.send_sms_task_id,
                coalesce(comms.get_send_sms_task_failure(a.send_sms_task_id), 'succeeded'), _attempt_id)
    into _ended
    from comms.send_sms_attempt a
   where a.send_sms_attempt_id = _attempt_id
     and (comms.has_send_sms_task_succeeded(a.send_sms_task_id)
          or comms.get_send_sms_task_failure(a.send_sms_task_id) is not null);
  if _ended is not null then
    return internal.validation_failure(_ended);
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
           'message_id', m.message_id,
           'idempotency_key', format('%s:send_sms_attempt:%s', internal.idempotency_namespace(), a.send_sms_attempt_id),
           'to_number', m.to_number,
           'from_number', m.from_number,
           'body', m.body))
    into _provider_payload
    from comms.send_sms_attempt a
    join comms.send_sms_task t using (send_sms_task_id)
    join comms.sms_message m using (message_id)
   where a.send_sms_attempt_id = _attempt_id;

  if _provider_payload is null then
    return internal.validation_failure(format('send_sms_attempt %s not found', _attempt_id));
  end if;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- success_handler. Body: {original_payload, worker_payload}. Records the attempt's
-- success; a second delivery changes nothing.
create or replace function comms.record_sms_success(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'send_sms_attempt_id');
begin
  if _attempt_id is null then
    return internal.validation_failure('original_payload.send_sms_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from comms.send_sms_attempt a where a.send_sms_attempt_id = _attempt_id) then
    return internal.validation_failure(format('send_sms_attempt %s not found', _attempt_id));
  end if;
  insert into comms.send_sms_attempt_succeeded (send_sms_attempt_id, worker_payload)
  values (_attempt_id, payload -> 'worker_payload')
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

-- error_handler. Body: {original_payload, error}. Records the attempt's failure unless
-- it already succeeded; a second delivery changes nothing.
create or replace function comms.record_sms_failure(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'send_sms_attempt_id');
begin
  if _attempt_id is null then
    return internal.validation_failure('original_payload.send_sms_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from comms.send_sms_attempt a where a.send_sms_attempt_id = _attempt_id) then
    return internal.validation_failure(format('send_sms_attempt %s not found', _attempt_id));
  end if;
  insert into comms.send_sms_attempt_failed (send_sms_attempt_id, error_message)
  select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
   where not exists (select 1 from comms.send_sms_attempt_succeeded s
                      where s.send_sms_attempt_id = _attempt_id)
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

-- Kickoff -----------------------------------------------------------------------------

-- Starts the send process for an existing sms message: the root task and the first
-- supervisor run, at _scheduled_at (NULL: now). A second call for the same message
-- returns the existing task and enqueues nothing. Bad input: a validation_failure_message
-- and nothing written.
create or replace function comms.kickoff_send_sms(
  _message_id bigint,
  _scheduled_at timestamptz default null,
  out send_sms_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _at timestamptz := coalesce(_scheduled_at, now());
begin
  if _message_id is null then
    validation_failure_message := 'message_id is required';
    return;
  end if;
  if not exists (select 1 from comms.sms_message m where m.message_id = _message_id) then
    validation_failure_message := format('sms message %s not found', _message_id);
    return;
  end if;

  insert into comms.send_sms_task (message_id, scheduled_at) values (_message_id, _at)
  on conflict (message_id) do nothing
  returning send_sms_task.send_sms_task_id into send_sms_task_id;

  if send_sms_task_id is null then
    -- Already kicked off: its supervisor is running. No-op.
    select t.send_sms_task_id into send_sms_task_id
      from comms.send_sms_task t where t.message_id = _message_id;
    return;
  end if;

  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'comms.send_sms_supervisor',
    'send_sms_task_id', send_sms_task_id), _at);
end;
$$;

-- For apps: stores the message and starts sending it at _scheduled_at (NULL: now).
-- With an _idempotency_key, a repeated request returns the first request's message and
-- task and writes nothing. Bad input: a validation_failure_message naming the field,
-- and nothing written.
create or replace function comms.send_sms(
  _to_number       text,
  _body            text,
  _from_number     text default null,
  _scheduled_at    timestamptz default null,
  _idempotency_key text default null,
  out message_id                 bigint,
  out send_sms_task_id           bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _kickoff record;
begin
  validation_failure_message := case
    when not comms.is_e164_number(_to_number)
      then 'to_number must be an E.164 number such as +14155550100'
    when _body is null or length(_body) not between 1 and 1600
      then 'body is required (1 to 1600 characters)'
    when _from_number is not null and not comms.is_e164_number(_from_number)
      then 'from_number must be an E.164 number such as +14155550100'
    when _idempotency_key is not null and length(_idempotency_key) not between 1 and 200
      then 'idempotency_key must be 1 to 200 characters'
  end;
  if validation_failure_message is not null then
    return;
  end if;

  insert into comms.message (channel, idempotency_key) values ('sms', _idempotency_key)
  on conflict (idempotency_key) do nothing
  returning message.message_id into message_id;

  if message_id is null then
    -- A repeated request: return what the first one created.
    select m.message_id, t.send_sms_task_id into message_id, send_sms_task_id
      from comms.message m
      left join comms.send_sms_task t on t.message_id = m.message_id
     where m.idempotency_key = _idempotency_key;
    if send_sms_task_id is null then
      message_id := null;
      validation_failure_message := 'idempotency_key was already used for a message on another channel';
    end if;
    return;
  end if;

  insert into comms.sms_message (message_id, to_number, from_number, body)
  values (message_id, _to_number, _from_number, _body);

  _kickoff := comms.kickoff_send_sms(message_id, _scheduled_at);
  send_sms_task_id := _kickoff.send_sms_task_id;
end;
$$;
