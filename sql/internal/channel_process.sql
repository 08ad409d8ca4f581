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
--   <name>_supervisor_run     one row per non-terminal supervisor run (run cap)
--   <name>_attempt            one row per scheduled channel task (task_id: its queue task)
--   <name>_attempt_succeeded  <name>_attempt_failed   at most one each per attempt
--   <name>_task_succeeded     <name>_task_failed      terminal facts
-- Keys: <name>_task_id, <name>_attempt_id. Table names reach dynamic SQL only through
-- format('%I.%I') from a registered row whose tables were found in the catalog.
-- Registration also makes the two functions every supervisor run calls, as static SQL
-- over those tables (internal.create_channel_process_functions):
--   <name>_process_facts      <name>_close_given_up_attempts

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
  execute format('create table if not exists %I.%I (id bigint generated always as identity primary key,
                    %I bigint not null references %s on delete cascade, created_at timestamptz not null default now())',
                 _schema, _name || '_supervisor_run', _rk, _root);
  execute format('create index if not exists %I on %I.%I (%I)', _name || '_supervisor_run_task_idx', _schema, _name || '_supervisor_run', _rk);
  execute format('create table if not exists %s (%I bigint generated always as identity primary key,
                    %I bigint not null references %s on delete cascade,
                    task_id bigint references queues.task on delete set null,
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

-- The functions of a channel process that every supervisor run calls, made from its
-- table names once (at registration) instead of on every call: their SQL is static, so a
-- connection plans it once and keeps the plan. (Built per call with format() and EXECUTE,
-- planning these two statements took most of the database's time per email process:
-- BENCHMARKS.md, "where a task's time goes".)
-- Identifiers reach the text only through format('%I'). Owner only, like the tables.
--   <schema>.<name>_process_facts(root_id)           the facts (internal.channel_process_facts)
--   <schema>.<name>_close_given_up_attempts(root_id) internal.close_given_up_channel_attempts
create or replace function internal.create_channel_process_functions(_schema text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format($f$
    create or replace function %1$I.%10$I(
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
      set search_path = pg_catalog, pg_temp
      set plan_cache_mode = force_generic_plan
      -- Every row is read by key; the plan is made once per connection, perhaps while
      -- the tables were small (see sql/CONVENTIONS.md).
      set enable_seqscan = off
    as $body$
    begin
      -- One pass over the root's attempts (its index), each attempt's outcomes probed by
      -- primary key (scalar subqueries: no join order for the planner to get wrong), once
      -- (materialized: each probe is used by several aggregates).
      with attempt as materialized (
        select (select true from %1$I.%5$I s where s.%9$I = a.%9$I) as succeeded,
               (select f.error_message from %1$I.%6$I f where f.%9$I = a.%9$I) as failure
          from %1$I.%4$I a
         where a.%8$I = _root_id
      )
      select (select true from %1$I.%2$I x where x.%8$I = _root_id) is not null,
             (select x.reason from %1$I.%3$I x where x.%8$I = _root_id),
             coalesce(bool_or(a.succeeded), false),
             count(*)::integer,
             (count(*) filter (where a.succeeded is null and a.failure is not null))::integer,
             (count(*) filter (where a.succeeded is null and a.failure is null))::integer,
             (select count(*)::integer from %1$I.%7$I r where r.%8$I = _root_id),
             coalesce(bool_or(a.succeeded is null and a.failure is not null
                              and internal.is_unknown_outcome(a.failure)), false)
        into has_task_succeeded, task_failure, has_success, num_attempts, num_failures, num_outstanding,
             num_runs, has_unknown_outcome
        from attempt a;
    end;
    $body$
    $f$, _schema, _name || '_task_succeeded', _name || '_task_failed', _name || '_attempt',
         _name || '_attempt_succeeded', _name || '_attempt_failed', _name || '_supervisor_run',
         _name || '_task_id', _name || '_attempt_id', _name || '_process_facts');
  execute format($f$
    create or replace function %1$I.%7$I(_root_id bigint)
      returns integer
      language plpgsql volatile
      set search_path = pg_catalog, pg_temp
      set plan_cache_mode = force_generic_plan
      -- Every row is read by key; the plan is made once per connection, perhaps while
      -- the tables were small (see sql/CONVENTIONS.md).
      set enable_seqscan = off
    as $body$
    declare
      _closed integer;
    begin
      with closed as (
        insert into %1$I.%4$I (%6$I, error_message)
        select a.%6$I, internal.queue_gave_up_message(a.task_id)
          from %1$I.%2$I a
         where a.%5$I = _root_id
           and (select true from %1$I.%3$I s where s.%6$I = a.%6$I) is null
           and (select true from %1$I.%4$I f where f.%6$I = a.%6$I) is null
           and internal.queue_gave_up_message(a.task_id) is not null
        on conflict do nothing
        returning 1)
      select count(*)::integer into _closed from closed;
      return _closed;
    end;
    $body$
    $f$, _schema, _name || '_attempt', _name || '_attempt_succeeded', _name || '_attempt_failed',
         _name || '_task_id', _name || '_attempt_id', _name || '_close_given_up_attempts');
  execute format('revoke execute on function %I.%I(bigint) from public', _schema, _name || '_process_facts');
  execute format('revoke execute on function %I.%I(bigint) from public', _schema, _name || '_close_given_up_attempts');
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

-- Facts ---------------------------------------------------------------------------------

-- Everything a supervisor decides on, for one root. An attempt with both outcomes counts
-- as succeeded; an outstanding attempt has neither. Reads through the process's own
-- <name>_process_facts (internal.create_channel_process_functions).
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

-- Records a failure for every attempt whose channel task the queue gave up on without an
-- outcome (internal.queue_gave_up_message); returns how many. Through the process's own
-- <name>_close_given_up_attempts (internal.create_channel_process_functions).
create or replace function internal.close_given_up_channel_attempts(_schema text, _name text, _root_id bigint)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _closed integer;
begin
  execute format('select %I.%I($1)', _schema, _name || '_close_given_up_attempts') into _closed using _root_id;
  return _closed;
end;
$$;

-- Records an attempt and enqueues its channel task; returns the attempt id. The id is
-- drawn first (the task's payload names it), the row written after the enqueue (it names
-- the queue task).
create or replace function internal.schedule_channel_attempt(_p internal.channel_process, _root_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt text := format('%I.%I', _p.process_schema, _p.process_name || '_attempt');
  _ak text := _p.process_name || '_attempt_id';
  _attempt_id bigint := nextval(pg_get_serial_sequence(_attempt, _ak));
  _extra jsonb := '{}';
  _queue_task_id bigint;
begin
  if _p.attempt_payload is not null then
    execute format('select %s($1)', _p.attempt_payload::regproc) into _extra using _root_id;
  end if;
  _queue_task_id := queues.enqueue_internal(_p.task_type, coalesce(_extra, '{}') || jsonb_build_object(
    'task_type', _p.task_type,
    _p.process_name || '_task_id', _root_id,
    _ak, _attempt_id,
    'before_handler', _p.before_handler,
    'success_handler', _p.success_handler,
    'error_handler', _p.error_handler));
  execute format('insert into %s (%I, %I, task_id) overriding system value values ($1, $2, $3)',
                 _attempt, _ak, _p.process_name || '_task_id')
    using _attempt_id, _root_id, _queue_task_id;
  return _attempt_id;
end;
$$;

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
-- COMMITTED, lock the root, close attempts the queue gave up on, facts, terminal checks
-- (ended; a succeeded attempt; an unknown outcome; failures at max_attempts; runs at
-- max_supervisor_runs), then record the run, schedule an attempt when none is in flight
-- and enqueue the next run after 5 s · 2^(runs − 1), capped at backoff_cap_seconds.
-- Returns the envelopes documented in docs/adding-a-business-process.md.
create or replace function internal.run_channel_supervisor(_schema text, _name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p internal.channel_process := internal.get_channel_process(_schema, _name);
  _run record := internal.open_supervisor_run(_schema, _name, _p.supervisor, payload);
  _task_id bigint := _run.root_id;
  _facts record;
  _attempt_id bigint;
begin
  if _task_id is null then
    return _run.refusal;
  end if;
  perform internal.close_given_up_channel_attempts(_schema, _name, _task_id);
  _facts := internal.channel_process_facts(_schema, _name, _task_id);

  if _facts.has_task_succeeded then
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform internal.record_process_outcome(_schema, _name, _task_id, null);
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.has_unknown_outcome then
    perform internal.record_process_outcome(_schema, _name, _task_id, 'delivery_outcome_unknown');
    return jsonb_build_object('status', 'delivery_outcome_unknown');
  end if;
  if _facts.num_failures >= _p.max_attempts then
    perform internal.record_process_outcome(_schema, _name, _task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached',
                              'payload', jsonb_build_object('num_failures', _facts.num_failures));
  end if;
  if _facts.num_runs >= _p.max_supervisor_runs then
    perform internal.record_process_outcome(_schema, _name, _task_id, 'run_limit_reached');
    return jsonb_build_object('status', 'run_limit_reached',
                              'payload', jsonb_build_object('num_runs', _facts.num_runs));
  end if;

  perform internal.record_supervisor_run(_schema, _name, _task_id);
  if _facts.num_outstanding = 0 then
    _attempt_id := internal.schedule_channel_attempt(_p, _task_id);
  end if;
  return internal.supervisor_progress(
    case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
    jsonb_build_object(_name || '_attempt_id', _attempt_id,
                       'next_check_at', internal.schedule_next_supervisor_run(_p.supervisor, _name || '_task_id', _task_id,
                                                                              _facts.num_runs, _p.backoff_cap_seconds)));
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
  _root_id bigint;
  _has_outcome boolean;
  _facts record;
begin
  execute format($q$
    select a.%4$I,
           exists (select 1 from %1$I.%2$I s where s.%5$I = a.%5$I) or exists (select 1 from %1$I.%3$I f where f.%5$I = a.%5$I)
      from %1$I.%6$I a where a.%5$I = $1
    $q$, _schema, _name || '_attempt_succeeded', _name || '_attempt_failed', _name || '_task_id', _name || '_attempt_id', _name || '_attempt')
  into _root_id, _has_outcome using _attempt_id;
  if _root_id is null then
    return format('%s %s not found', _name || '_attempt', _attempt_id);
  end if;
  if _has_outcome then
    return format('%s %s already has an outcome; not %s it again', _name || '_attempt', _attempt_id, _verb);
  end if;
  _facts := internal.channel_process_facts(_schema, _name, _root_id);
  if _facts.has_task_succeeded or _facts.task_failure is not null then
    return format('%s %s already ended (%s); not %s attempt %s', _name || '_task', _root_id,
                  coalesce(_facts.task_failure, 'succeeded'), _verb, _attempt_id);
  end if;
  return null;
end;
$$;

-- The success handler: body {original_payload, worker_payload}; records the attempt's
-- success, and enqueues a supervisor run due at once, so the process ends now rather
-- than at its next backoff (5 s or more later; the run already scheduled then finds the
-- process ended and does nothing). A second delivery changes nothing. A failure wakes
-- nobody: the backoff is the pause before the next attempt.
create or replace function internal.record_channel_attempt_success(_schema text, _name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _ak text := _name || '_attempt_id';
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', _ak);
  _root_id bigint;
  _recorded integer;
begin
  if _attempt_id is null then
    return internal.validation_failure(format('original_payload.%s must be a positive integer', _ak));
  end if;
  execute format('select a.%I from %I.%I a where a.%I = $1', _name || '_task_id', _schema, _name || '_attempt', _ak)
    into _root_id using _attempt_id;
  if _root_id is null then
    return internal.validation_failure(format('%s %s not found', _name || '_attempt', _attempt_id));
  end if;
  execute format('insert into %I.%I (%I, worker_payload) values ($1, $2) on conflict do nothing returning 1',
                 _schema, _name || '_attempt_succeeded', _ak)
    into _recorded using _attempt_id, payload -> 'worker_payload';
  if _recorded is not null then
    perform internal.enqueue_channel_supervisor(internal.get_channel_process(_schema, _name), _root_id, null);
  end if;
  return jsonb_build_object('success', true);
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
  _ak text := _name || '_attempt_id';
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', _ak);
  _exists integer;
begin
  if _attempt_id is null then
    return internal.validation_failure(format('original_payload.%s must be a positive integer', _ak));
  end if;
  execute format('select 1 from %I.%I a where a.%I = $1', _schema, _name || '_attempt', _ak) into _exists using _attempt_id;
  if _exists is null then
    return internal.validation_failure(format('%s %s not found', _name || '_attempt', _attempt_id));
  end if;
  execute format($q$
    insert into %1$I.%2$I (%4$I, error_message)
    select $1, left(coalesce(nullif($2, ''), 'unknown error'), 2000)
     where not exists (select 1 from %1$I.%3$I s where s.%4$I = $1)
    on conflict do nothing
    $q$, _schema, _name || '_attempt_failed', _name || '_attempt_succeeded', _ak)
    using _attempt_id, payload ->> 'error';
  return jsonb_build_object('success', true);
end;
$$;
