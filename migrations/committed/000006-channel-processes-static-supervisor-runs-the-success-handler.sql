--! Previous: sha1:eb4a7bf41d52c5b9635efe7c6be26046f0fc657e
--! Hash: sha1:9c88a5432fe32ca9a2eb35d8a139f5b146870bfc
--! Message: channel processes: static supervisor runs, the success handler wakes the scheduled run

--! split: 100-supervisor-wakes-its-next-run.sql
-- A channel process's supervisor and its handlers' bookkeeping are static SQL in
-- functions of the process's own, made at registration (<name>_supervise,
-- <name>_attempt_refusal, <name>_record_attempt_success, <name>_record_attempt_failure,
-- beside <name>_process_facts and <name>_close_given_up_attempts): a connection plans
-- them once, where the dynamic SQL before was planned on every call. A run records the
-- queue task of the run it scheduled (<name>_supervisor_run.next_task_id), and the
-- success handler makes that run due now (queues.hasten_task), or leaves it to the worker
-- that took it, instead of enqueuing a second one beside it.
set local lock_timeout = '5s';

-- Now returns the task id.
drop function if exists internal.enqueue_supervisor_run(text, text, bigint, timestamptz);
-- Now part of each process's <name>_supervise.
drop function if exists internal.schedule_channel_attempt(internal.channel_process, bigint);

-- New; dropped first so a re-run of this file may change its signature.
drop function if exists queues.hasten_task(bigint);
--! Included queues/hasten.sql
-- queues.hasten_task: the owner's SQL makes a task that no worker has taken yet due now
-- (a channel process's success handler wakes the supervisor run its backoff scheduled
-- this way, rather than enqueue another run beside it). Owner only (no grant); the
-- dashboard's "run now" is admin.run_tasks_now.

-- Makes task _task_id due now if no worker has ever taken it. Returns:
--   'hastened'     no lease so far: due now (queues.task_run_now recorded and the wake-up
--                  sent when it was not yet due). Its claim-index row stays locked until
--                  the caller's transaction ends, and claims skip locked rows, so the task
--                  runs after that transaction commits and sees what it wrote.
--   'taken'        a worker holds it, or it ran and waits for a retry: it runs (again) in
--                  its own time; left as it is.
--   'not_pending'  completed, or no such task.
create or replace function queues.hasten_task(_task_id bigint)
  returns text
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending record;
begin
  -- A claim that holds the row commits first; the row is then read as it left it.
  select p.available_at, p.current_lease_id is null and p.lease_count = 0 as untaken into _pending
    from queues.task_pending p
   where p.task_id = _task_id
     for update;
  if not found then
    return 'not_pending';
  end if;
  if not _pending.untaken then
    return 'taken';
  end if;
  if _pending.available_at > now() then
    insert into queues.task_run_now (task_id, requested_at) values (_task_id, now())
    on conflict (task_id) do nothing;
    update queues.task_pending p set available_at = now(), scheduled_at = now() where p.task_id = _task_id;
    perform pg_notify('queues_task_ready', '');
  end if;
  return 'hastened';
end;
$$;
--! EndIncluded queues/hasten.sql
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
  queues.enqueue_many(jsonb)
to :DATABASE_APP;
-- The client's enqueue on a pool (commit, then the wake-up; sql/queues/enqueue.sql).
revoke execute on all procedures in schema queues from public;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint)
  to :DATABASE_APP;
--! EndIncluded queues/privileges.sql
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
-- at _at (NULL: now); returns its task id.
create or replace function internal.enqueue_supervisor_run(_supervisor text, _root_key text, _root_id bigint, _at timestamptz)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', _supervisor,
    _root_key, _root_id), coalesce(_at, now()));
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
--   <name>_close_given_up_attempts(root_id)   internal.close_given_up_channel_attempts
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
  -- The names every template below refers to, by position.
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
    format('%I.%I', _schema, _name || '_attempt')  -- 19 the attempt table, for its sequence
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
      set search_path = pg_catalog, pg_temp
      set plan_cache_mode = force_generic_plan
      -- Every row is read by key; the plan is made once per connection, perhaps while
      -- the tables were small (see sql/CONVENTIONS.md).
      set enable_seqscan = off
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
          'error_handler', _p.error_handler));
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
      set search_path = pg_catalog, pg_temp
      set plan_cache_mode = force_generic_plan
      -- Every row is read by key; the plan is made once per connection, perhaps while
      -- the tables were small (see sql/CONVENTIONS.md).
      set enable_seqscan = off
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
      set search_path = pg_catalog, pg_temp
      set plan_cache_mode = force_generic_plan
      -- Every row is read by key; the plan is made once per connection, perhaps while
      -- the tables were small (see sql/CONVENTIONS.md).
      set enable_seqscan = off
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
      set search_path = pg_catalog, pg_temp
      set plan_cache_mode = force_generic_plan
      -- Every row is read by key; the plan is made once per connection, perhaps while
      -- the tables were small (see sql/CONVENTIONS.md).
      set enable_seqscan = off
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

-- Records a failure for every attempt whose channel task the queue gave up on without an
-- outcome (internal.queue_gave_up_message); returns how many.
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

select internal.create_channel_process_tables(p.process_schema, p.process_name)
  from internal.channel_process p;
select internal.create_channel_process_functions(p.process_schema, p.process_name)
  from internal.channel_process p;

--! split: 110-claim-comment.sql
-- The claim's comment names the committed migration that made its expiry index.
set local lock_timeout = '5s';

--! Included queues/claim.sql
-- Claiming: queues.claim_tasks (batch), queues.dequeue_next_available_task (the seeds'
-- single claim), both on top of queues.claim_tasks_at, which takes the clock as an
-- argument so tests can move time forward. Only the owner may call claim_tasks_at:
-- a worker that chose its own clock could take live leases.
--
-- Resource keys: at most one task per resource_key is leased at a time; the others wait
-- (they are skipped, not failed) until the holder completes, releases or lets its lease
-- expire. A long queue of tasks blocked on one key is re-read by each claim.
--
-- Poison tasks: a task that comes up for claiming after _max_leases leases expired
-- without completion (releases, reported failed attempts and leases of tasks never
-- started excepted, see queues.task_lease_started) is completed as 'abandoned' with an error
-- instead of being leased again, so a task that kills its worker cannot loop forever.

create or replace function queues.claim_tasks_at(
  _now           timestamptz,
  _worker_id     text,
  _limit         integer,
  _task_types    text[],
  _lease_seconds integer,
  _max_leases    integer
) returns table (
  task_id       bigint,
  task_type     text,
  payload       jsonb,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  task_lease_id bigint,
  leased_at     timestamptz,
  expires_at    timestamptz,
  lease_count   integer
)
  language plpgsql volatile
  rows 10
  security definer
  -- Planned once, not per call: the statements below have one good plan whatever the
  -- arguments (index order with a LIMIT; primary-key probes), and planning was about
  -- 40% of the call's cost.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _worker_key integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _limit is null or _limit not between 1 and 1000 then
    raise exception 'limit must be between 1 and 1000, got %', coalesce(_limit::text, 'null')
      using errcode = '22023';
  end if;
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;
  if _max_leases is null or _max_leases not between 1 and 100 then
    raise exception 'max_leases must be between 1 and 100, got %', coalesce(_max_leases::text, 'null')
      using errcode = '22023';
  end if;
  if _task_types is not null and cardinality(_task_types) = 0 then
    raise exception 'task_types must be null (any type) or name at least one type'
      using errcode = '22023';
  end if;
  -- A lease names its worker by key (queues.worker_name: each worker id kept once, an
  -- integer on every lease instead of the id's text). One probe of the id's unique index;
  -- the first claim of a worker id adds it (a concurrent first claim waits, then reads it).
  select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
  if _worker_key is null then
    insert into queues.worker_name (worker_id) values (_worker_id)
    on conflict (worker_id) do nothing
    returning worker_key into _worker_key;
    if _worker_key is null then
      select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
    end if;
  end if;

  return query
  with candidate as (
    -- Ready tasks without a lease, per task type, from task_pending_ready_idx in claim
    -- order: rows leased by anyone are not in that index, and scheduled_at <= _now lets
    -- the scan stop (or skip to the next priority) at the first future task. (For a row
    -- without a lease available_at >= scheduled_at, so the extra bound changes nothing.)
    -- SKIP LOCKED skips rows another claimer holds; the update below makes any claimer
    -- that arrives after our commit re-check current_lease_id on the new row version.
    select r.*
      from (select distinct u.task_type
              from unnest(coalesce(_task_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
     cross join lateral (
       select p.task_id, p.current_lease_id, p.resource_key, p.priority, p.scheduled_at,
              p.lease_count - p.released_count - p.failed_attempts - p.unstarted_count as ended_leases
         from queues.task_pending p
        where p.task_type = ty.task_type
          and p.current_lease_id is null
          and p.scheduled_at <= _now
          and p.available_at <= _now
          -- Tasks whose resource key another task holds wait (the upsert below decides).
          and (p.resource_key is null or not exists (
                select 1 from queues.resource_lease r
                 where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
        order by p.priority desc, p.scheduled_at, p.task_id
        limit _limit
          for update skip locked
     ) r
    union all
    -- Tasks whose lease expired (their worker died or stopped heartbeating), from
    -- task_pending_lease_expiry_idx (its predicate is current_lease_id > 0, see
    -- migration 000005, section 520-hot-path-plans.sql): only expired leases are read.
    select x.*
      from (
        select p.task_id, p.current_lease_id, p.resource_key, p.priority, p.scheduled_at,
               p.lease_count - p.released_count - p.failed_attempts - p.unstarted_count as ended_leases
          from queues.task_pending p
         where p.current_lease_id > 0
           and p.available_at <= _now
           and (_task_types is null or p.task_type = any (_task_types))
           and (p.resource_key is null or not exists (
                 select 1 from queues.resource_lease r
                  where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
         order by p.available_at
         limit _limit
           for update skip locked
      ) x
  ),
  picked as (
    -- Of the candidates (locked until commit), the first _limit in claim order. An expired
    -- lease counts towards abandonment (and makes the task a suspect) only if its task
    -- was started: a task that waited in a dead worker's local queue is not suspect.
    select c.task_id, c.current_lease_id, c.resource_key, c.priority, c.scheduled_at,
           c.ended_leases - c.unstarted_expiry::integer >= _max_leases as poisoned,
           c.ended_leases - c.unstarted_expiry::integer as expired_leases
      from (
        select c.*,
               c.current_lease_id is not null and not exists (
                 select 1 from queues.task_lease_started s
                  where s.task_id = c.task_id and s.task_lease_id = c.current_lease_id) as unstarted_expiry
          from candidate c
         order by c.priority desc, c.scheduled_at, c.task_id
         limit _limit
      ) c
  ),
  -- Resource keys: one task per key in this batch, and only if no other task holds the
  -- key. The upsert decides on the newest committed row (not this statement's snapshot),
  -- so two claimers never both take a key.
  -- Suspects (tasks a started lease of which expired: their worker may have died of them)
  -- are leased one per claim, so the tasks a crashed worker was running, which all come
  -- back at the same moment, do not all land in one worker again beside the task that
  -- crashed it.
  allowed as (
    select pk.task_id, pk.resource_key, pk.priority, pk.scheduled_at
      from (select pk.*,
                   row_number() over (partition by pk.expired_leases > 0
                                      order by pk.priority desc, pk.scheduled_at, pk.task_id) as rank
              from picked pk
             where not pk.poisoned) pk
     where pk.expired_leases = 0 or pk.rank = 1
  ),
  keyed as (
    select k.task_id, k.resource_key
      from (select distinct on (pk.resource_key) pk.task_id, pk.resource_key
              from allowed pk
             where pk.resource_key is not null
             order by pk.resource_key, pk.priority desc, pk.scheduled_at, pk.task_id) k
     -- Skip a key another transaction is working on (see queues.lock_resource_keys):
     -- a claim never waits, so it cannot be part of a deadlock.
     where pg_try_advisory_xact_lock(20251, hashtext(k.resource_key))
  ),
  key_taken as (
    insert into queues.resource_lease as r (resource_key, task_id, expires_at)
    select k.resource_key, k.task_id, _now + make_interval(secs => _lease_seconds) from keyed k
    on conflict (resource_key) do update
       set task_id = excluded.task_id, expires_at = excluded.expires_at
     where r.expires_at <= _now or r.task_id = excluded.task_id
    returning r.task_id
  ),
  eligible as (
    select pk.task_id
      from allowed pk
     where pk.resource_key is null or pk.task_id in (select kt.task_id from key_taken kt)
  ),
  abandoned_error as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select pk.task_id, pk.current_lease_id,
           format('abandoned: %s leases expired without completion (max_leases %s)', pk.expired_leases, _max_leases)
      from picked pk where pk.poisoned
  ),
  abandoned as (
    -- No lease: the claimer abandoning the task does not hold one, so the last holder's
    -- fenced completion is refused as lease_lost.
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome)
    select pk.task_id, null, _now, 'abandoned' from picked pk where pk.poisoned
  ),
  abandoned_removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select pk.task_id from picked pk where pk.poisoned))
  ),
  leased as (
    insert into queues.task_lease (task_id, worker_key, leased_at, expires_at)
    select e.task_id, _worker_key, _now, _now + make_interval(secs => _lease_seconds)
      from eligible e
    returning *
  ),
  -- Set-based, and one plan whatever the statistics say: the claimed rows are found by
  -- primary key from the array of their ids (an index condition), and each row's new
  -- lease is looked up in a map of the leases by task id. A join of task_pending to
  -- the leases would be planned from task_pending's statistics, and statistics taken
  -- when a busy queue had just drained (many pages, nearly no live rows) made the
  -- planner scan the whole table and compare every row with every lease (seconds per
  -- claim once the queue filled again). SET expressions read the row as it was: a lease
  -- still current here expired, and counts as unstarted if its task never started.
  lease_map as (
    select jsonb_object_agg(l.task_id::text, l.task_lease_id) as leases from leased l
  ),
  moved as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds),
           current_lease_id = (m.leases ->> p.task_id::text)::bigint,
           lease_count = p.lease_count + 1,
           unstarted_count = p.unstarted_count + (p.current_lease_id is not null and not exists (
             select 1 from queues.task_lease_started s
              where s.task_id = p.task_id and s.task_lease_id = p.current_lease_id))::integer
      from lease_map m
     where p.task_id = any (array(select l.task_id from leased l))
    returning p.task_id, p.lease_count, p.current_lease_id as task_lease_id, _now as leased_at,
              p.available_at as expires_at
  )
  select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
         t.enqueued_at, t.scheduled_at, m.task_lease_id, m.leased_at, m.expires_at, m.lease_count
    from moved m
   cross join lateral (
     select * from queues.task t where t.task_id = m.task_id limit 1
   ) t
   order by t.priority desc, t.scheduled_at, t.task_id;
end;
$$;

-- Claim up to _limit ready tasks (optionally only of _task_types) for _worker_id, each
-- with a new lease of _lease_seconds (default 300). Ready: not completed, scheduled_at
-- reached, no live lease. Order: priority desc, scheduled_at, task_id. Tasks that had
-- _max_leases (default 5) leases expire are abandoned instead (see above).
create or replace function queues.claim_tasks(
  _worker_id     text,
  _limit         integer default null,
  _task_types    text[] default null,
  _lease_seconds integer default null,
  _max_leases    integer default null
) returns table (
  task_id       bigint,
  task_type     text,
  payload       jsonb,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  task_lease_id bigint,
  leased_at     timestamptz,
  expires_at    timestamptz,
  lease_count   integer
)
  language sql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  -- Paused task types are left out (queues.claimable_task_types).
  select * from queues.claim_tasks_at(now(), _worker_id, coalesce(_limit, 1),
                                      queues.claimable_task_types(_task_types),
                                      coalesce(_lease_seconds, 300), coalesce(_max_leases, 5))
$$;

-- When a worker whose claim came back short should look again: the milliseconds until
-- the earliest task of _task_types (null: any type; paused types left out, as the claim
-- leaves them out) without a lease is scheduled, counted from the database's clock; null
-- when no such task is scheduled later than now (at most 2,147,483,647, about 24 days,
-- for a task further ahead). Workers sleep until then, or their poll interval,
-- whichever comes first, so a task scheduled a moment ahead (a supervisor's next run
-- after its backoff) starts when it is due, not at the next poll; its enqueue woke them
-- (queues.enqueue notifies for tasks due within a minute) so that they ask. Not seen: a
-- retry's backoff (available_at of a task scheduled in the past), which the next poll
-- finds. Cost: per task type, one probe of task_pending_ready_idx per priority in use (a
-- loose scan of the distinct priorities, then the earliest future task of each),
-- whatever the number of tasks scheduled.
create or replace function queues.next_claim_in_ms(_task_types text[] default null)
  returns integer
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  with recursive types as (
    select distinct u.task_type
      from unnest(coalesce(queues.claimable_task_types(_task_types),
                           array(select tt.task_type from queues.task_type tt))) as u(task_type)
     where u.task_type is not null
  ),
  priorities (task_type, priority) as (
    select ty.task_type,
           (select p.priority from queues.task_pending p
             where p.task_type = ty.task_type and p.current_lease_id is null
             order by p.priority desc limit 1)
      from types ty
    union all
    select pr.task_type,
           (select p.priority from queues.task_pending p
             where p.task_type = pr.task_type and p.current_lease_id is null and p.priority < pr.priority
             order by p.priority desc limit 1)
      from priorities pr
     where pr.priority is not null
  )
  -- (greatest would turn "none" into 0: it ignores nulls; beyond about 24 days, the
  -- integer's largest value)
  select case when min(n.scheduled_at) is not null
              then least(greatest(ceil(extract(epoch from min(n.scheduled_at) - clock_timestamp()) * 1000), 0),
                         2147483647)::integer end
    from priorities pr
   cross join lateral (
     select p.scheduled_at from queues.task_pending p
      where p.task_type = pr.task_type and p.current_lease_id is null and p.priority = pr.priority
        and p.scheduled_at > clock_timestamp()
      order by p.scheduled_at
      limit 1
   ) n
   where pr.priority is not null
$$;

-- The seeds' single claim: one ready task with a new lease, or no row.
create or replace function queues.dequeue_next_available_task(
  _worker_id     text default null,
  _lease_seconds integer default null
) returns setof queues.task
  language sql volatile
  rows 1
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  -- The columns of queues.task, in table order.
  select c.task_id, c.task_type, c.payload, c.priority, c.resource_key, c.max_attempts,
         c.enqueued_at, c.scheduled_at
    from queues.claim_tasks_at(now(), coalesce(_worker_id, session_user::text), 1,
                               queues.claimable_task_types(null), coalesce(_lease_seconds, 300), 5) c
$$;
--! EndIncluded queues/claim.sql
