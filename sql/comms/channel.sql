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
--                                     with the root's scheduled_at and until when the
--                                     channel's provider throttles it (throttled_until,
--                                     NULL when it does not: sql/queues/throttle.sql)
--                                     (select * from ...(123))
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
  out has_unknown_outcome boolean,
  out throttled_until     timestamptz
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $body$
  select f.has_task_succeeded, f.task_failure, f.has_success, f.num_attempts, f.num_failures,
         f.num_outstanding, f.num_runs, t.scheduled_at, f.has_unknown_outcome,
         queues.throttled_until('task_type', %11$L)
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
