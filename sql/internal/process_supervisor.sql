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
