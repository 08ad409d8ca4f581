-- The send-SMS process: what is particular to SMS. The skeleton (supervisor, facts,
-- attempts, handlers' bookkeeping) is the shared channel process of
-- sql/internal/channel_process.sql; what the message channels share beyond it (the named
-- entry points, checking an attempt, creating a message, the kickoff) is
-- sql/comms/channel.sql. Here: its limits, the provider payload, and its message's fields
-- and their checks.
--
--   comms.send_sms(...)             app: create the message and kick off (idempotent); here
--   comms.get_sms_payload           before_handler: the provider payload; here
--   comms.kickoff_send_sms(id)      root task + first supervisor task (idempotent)
--   comms.send_sms_supervisor       db_function: internal.run_channel_supervisor
--   comms.send_sms_supervisor_facts(id)  what the supervisor decides on
--   comms.record_sms_success        success_handler: attempt succeeded fact
--   comms.record_sms_failure        error_handler: attempt failed fact
-- (the last five made by comms.register_message_channel).

-- Limits: 3 provider calls per message (the first and two retries); 30 non-terminal
-- supervisor runs (about 21 hours with the backoff, capped at an hour), after which a
-- loop bug ends in send_sms_task_failed('run_limit_reached') instead of running forever.
select comms.register_message_channel('sms', _max_attempts => 3, _max_supervisor_runs => 30, _backoff_cap_seconds => 3600);

-- before_handler. Payload: the SMS task's ({send_sms_attempt_id, ...}). Returns the
-- provider payload of @org/contracts smsPayload. Its idempotency_key is the attempt
-- id namespaced by the database (internal.idempotency_namespace), so a redelivered
-- attempt is deduplicated by the provider and two databases never share a key. Refused
-- (validation failure): an attempt with an outcome, or of a process that ended.
create or replace function comms.get_sms_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt record;
  _provider_payload jsonb;
begin
  select * into _attempt from comms.channel_attempt('sms', payload);
  if _attempt.refusal is not null then
    return _attempt.refusal;
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
   where a.send_sms_attempt_id = _attempt.attempt_id;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
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
  _message record;
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

  select * into _message from comms.create_channel_message('sms', _idempotency_key);
  message_id := _message.message_id;
  if not _message.created then
    -- A repeated request: what the first one created (or why the key cannot be reused).
    send_sms_task_id := _message.task_id;
    validation_failure_message := _message.validation_failure_message;
    return;
  end if;

  insert into comms.sms_message (message_id, to_number, from_number, body)
  values (message_id, _to_number, _from_number, _body);

  _kickoff := comms.kickoff_send_sms(message_id, _scheduled_at);
  send_sms_task_id := _kickoff.send_sms_task_id;
end;
$$;
