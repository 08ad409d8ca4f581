-- What the send processes of the message channels (email.sql, sms.sql) share beyond the
-- channel-process skeleton of sql/internal/channel_process.sql: checking an attempt
-- before the provider call, creating a message under an idempotency key, and the kickoff.
-- Each channel's file keeps what differs: its limits, its message's fields and their
-- checks, and the provider payload, with named wrappers over these.
--
-- A channel <c> (comms.message.channel: 'email', 'sms') has its message table
-- comms.<c>_message (message_id, then its fields) and the channel process comms.send_<c>
-- (registered in internal.channel_process; root comms.send_<c>_task, keyed by
-- send_<c>_task_id, one per message_id). Table and column names reach SQL only through
-- format('%I'), from a registered process and a table found in the catalog. The
-- statements are dynamic, so planned on each call: these run once per message (an app's
-- send, a kickoff) or once per provider call, never in a loop over tasks. Owner only:
-- they run inside the channels' definer functions.

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
