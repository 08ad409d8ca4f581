-- The skeleton of a pure SQL process: no channel task; each supervisor run that is not
-- terminal is one attempt, which runs the process's work function in a subtransaction
-- and records the outcome. Attempts are bounded by the maximum, so they double as the run
-- cap. Built on sql/internal/process_supervisor.sql.
--
-- A pure SQL process <schema>.<name> has, beside its root and terminal facts:
--   <name>_attempt            one row per run of the work (<name>_attempt_id, <name>_task_id)
--   <name>_attempt_succeeded  <name>_attempt_failed(error_message)   one of them per attempt
-- Called only from security definer functions: no grants.

-- What the supervisor decides on besides the terminal facts.
create or replace function internal.sql_attempt_facts(
  _schema text, _name text, _root_id bigint,
  out has_success  boolean,
  out num_attempts integer,
  out num_failures integer
)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format($q$
    select exists (select 1 from %1$I.%2$I a join %1$I.%3$I s using (%6$I) where a.%5$I = $1),
           (select count(*)::integer from %1$I.%2$I a where a.%5$I = $1),
           (select count(*)::integer from %1$I.%2$I a join %1$I.%4$I f using (%6$I) where a.%5$I = $1)
    $q$, _schema, _name || '_attempt', _name || '_attempt_succeeded', _name || '_attempt_failed',
         _name || '_task_id', _name || '_attempt_id')
  into has_success, num_attempts, num_failures using _root_id;
end;
$$;

-- One attempt: records it, calls _work with the root's _work_column in a subtransaction,
-- records the outcome. Returns NULL on success, else the error message (the work is
-- rolled back).
create or replace function internal.run_sql_attempt(
  _schema text, _name text, _root_id bigint, _work regprocedure, _work_column text
) returns text
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _argument bigint;
  _attempt_id bigint;
  _error text;
begin
  execute format('select t.%I from %I.%I t where t.%I = $1', _work_column, _schema, _name || '_task', _name || '_task_id')
    into _argument using _root_id;
  execute format('insert into %I.%I (%I) values ($1) returning %I', _schema, _name || '_attempt', _name || '_task_id', _name || '_attempt_id')
    into _attempt_id using _root_id;
  begin
    -- regproc prints the function's name as the catalog spells it, quoted where needed.
    execute format('select %s($1)', _work::regproc) using _argument;
  exception when others then
    _error := left(sqlerrm, 2000);
  end;
  if _error is null then
    execute format('insert into %I.%I (%I) values ($1)', _schema, _name || '_attempt_succeeded', _name || '_attempt_id')
      using _attempt_id;
  else
    execute format('insert into %I.%I (%I, error_message) values ($1, $2)', _schema, _name || '_attempt_failed', _name || '_attempt_id')
      using _attempt_id, _error;
  end if;
  return _error;
end;
$$;

-- The supervisor of a pure SQL process, in this order: open the run
-- (internal.open_supervisor_run); ended → report it; a succeeded attempt → succeeded;
-- failures at _max_attempts → failed 'max_attempts_reached'; else one attempt of _work
-- (called with the root's _work_column): success → succeeded, the last allowed failure →
-- 'max_attempts_reached' with the error, another failure → the next run after
-- 5 s · 2^failures, capped at _backoff_cap_seconds.
-- Returns {success: true, payload: {status: succeeded | attempt_failed, ...}} or, when the
-- process failed, {status: <reason>}.
create or replace function internal.run_sql_process_supervisor(
  _schema text, _name text, _supervisor text, payload jsonb,
  _work regprocedure, _work_column text, _max_attempts integer, _backoff_cap_seconds integer
) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _run record := internal.open_supervisor_run(_schema, _name, _supervisor, payload);
  _ended record;
  _facts record;
  _error text;
begin
  if _run.root_id is null then
    return _run.refusal;
  end if;
  _ended := internal.process_terminal_facts(_schema, _name, _run.root_id);
  if _ended.has_task_succeeded then
    return internal.supervisor_progress('succeeded');
  end if;
  if _ended.task_failure is not null then
    return jsonb_build_object('status', _ended.task_failure);
  end if;
  _facts := internal.sql_attempt_facts(_schema, _name, _run.root_id);
  if _facts.has_success then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, null);
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.num_failures >= _max_attempts then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached');
  end if;

  _error := internal.run_sql_attempt(_schema, _name, _run.root_id, _work, _work_column);
  if _error is null then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, null);
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.num_failures + 1 >= _max_attempts then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached', 'payload', jsonb_build_object('error', _error));
  end if;
  return internal.supervisor_progress('attempt_failed', jsonb_build_object('error', _error,
    'next_check_at', internal.schedule_next_supervisor_run(_supervisor, _name || '_task_id', _run.root_id,
                                                           _facts.num_failures + 1, _backoff_cap_seconds)));
end;
$$;
