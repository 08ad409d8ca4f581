--! Previous: sha1:726add09fc9e8c844089d7f44347042d9869ef93
--! Hash: sha1:5ee3dca8044810983d80429d9022a19af17c9026
--! Message: Lease-held tasks read through queues.lease_held_of and queues.lease_held_tasks in the lease checks, start marks, stale leases, revocations and hold_rows_of

--! split: 100-lease-held-reads.sql
set local lock_timeout = '5s';
-- The lease checks, start marks, stale leases, revocations and queues.hold_rows_of read a
-- task held by its claim lease through queues.lease_held_of / queues.lease_held_tasks.
--! Included queues/steps.sql
-- Server-side steps: db_function tasks run in the database, many per call.
--
--   queues.parse_envelope(result)            a step function's result envelope, read
--   queues.current_lease_expiry(task, lease)  read only: the expiry of the task's current lease
--   queues.is_current_lease(task, lease)     read only: is the lease still current
--   queues.current_leases(tasks, leases)     the same for many, one boolean each
--   queues.run_step(task, lease, fn, payload)   one step with its completion (the reference)
--   queues.complete_steps(...)               the completions and results of many steps
--   queues.run_steps(tasks, leases, fns, payloads, traceparents)   many steps in one call (the worker's)

-- Reads a function's result envelope (the worker's parseEnvelope, in SQL):
--   {status: text, payload?}                                   succeeded | status
--   {success: bool, error?, validation_failure_message?, payload?}   succeeded | error | invalid
--   {error: text, payload?} or {validation_failure_message: text, payload?}, without
--     success (the supervisors specification's `{"error": "missing_task_id"}`)   error | invalid
-- outcome is 'succeeded', 'status', 'error', 'invalid' or 'malformed' (message says why).
create or replace function queues.parse_envelope(_result jsonb, out outcome text, out message text)
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _extra text;
  _error text;
  _invalid text;
begin
  if _result is null or jsonb_typeof(_result) = 'null' then
    outcome := 'malformed'; message := 'malformed result envelope: expected an object, got null'; return;
  end if;
  if jsonb_typeof(_result) <> 'object' then
    outcome := 'malformed';
    message := format('malformed result envelope: expected an object, got %s',
                      case jsonb_typeof(_result) when 'array' then 'an array' else 'a ' || jsonb_typeof(_result) end);
    return;
  end if;
  if _result ? 'status' and _result ? 'success' then
    outcome := 'malformed'; message := 'malformed result envelope: has both "status" and "success"'; return;
  end if;
  if _result ? 'status' then
    select string_agg(k, ', ') into _extra from jsonb_object_keys(_result) k where k not in ('status', 'payload');
    if _extra is not null then
      outcome := 'malformed'; message := format('malformed result envelope: unrecognized key(s) %s', _extra); return;
    end if;
    if jsonb_typeof(_result -> 'status') <> 'string' or length(_result ->> 'status') not between 1 and 200 then
      outcome := 'malformed'; message := 'malformed result envelope: status must be a string of 1 to 200 characters'; return;
    end if;
    if _result ->> 'status' = 'succeeded' then outcome := 'succeeded'; else outcome := 'status'; message := _result ->> 'status'; end if;
    return;
  end if;
  if _result ? 'success' or _result ? 'error' or _result ? 'validation_failure_message' then
    select string_agg(k, ', ') into _extra from jsonb_object_keys(_result) k
     where k not in ('success', 'error', 'validation_failure_message', 'payload');
    if _extra is not null then
      outcome := 'malformed'; message := format('malformed result envelope: unrecognized key(s) %s', _extra); return;
    end if;
    if _result ? 'success' and jsonb_typeof(_result -> 'success') <> 'boolean' then
      outcome := 'malformed'; message := 'malformed result envelope: success must be a boolean'; return;
    end if;
    if coalesce(jsonb_typeof(_result -> 'error'), 'null') not in ('string', 'null')
       or coalesce(jsonb_typeof(_result -> 'validation_failure_message'), 'null') not in ('string', 'null')
       or length(_result ->> 'error') > 100000 or length(_result ->> 'validation_failure_message') > 100000 then
      outcome := 'malformed'; message := 'malformed result envelope: error and validation_failure_message must be strings'; return;
    end if;
    _error := nullif(btrim(coalesce(_result ->> 'error', '')), '');
    _invalid := nullif(btrim(coalesce(_result ->> 'validation_failure_message', '')), '');
    if _error is not null then outcome := 'error'; message := _result ->> 'error'; return; end if;
    if _invalid is not null then outcome := 'invalid'; message := _result ->> 'validation_failure_message'; return; end if;
    if not (_result ? 'success') then
      outcome := 'malformed';
      message := 'malformed result envelope: needs "status" or "success", or a non-empty error or validation_failure_message';
      return;
    end if;
    if not (_result ->> 'success')::boolean then
      outcome := 'malformed';
      message := 'malformed result envelope: success is false but neither error nor validation_failure_message is set';
      return;
    end if;
    outcome := 'succeeded';
    return;
  end if;
  outcome := 'malformed'; message := 'malformed result envelope: needs "status" or "success"';
end;
$$;

-- The expiry in force of _task_lease_id if it is still the current lease of _task_id, else
-- NULL (read only: no lock, no fact). The one definition of a task's current lease: the
-- lease queues.task_pending names (a claim sets it; a completion, a retry, a release or a
-- revocation ends it; a later claim replaces it), with the expiry heartbeats moved
-- (task_pending.available_at, which queues.extend_leases_at keeps; the claim's
-- lease's expires_at is only the first). The completions are fenced by the same row
-- (queues.complete_tasks, which also asks a keyed task to hold its key); a lease is live
-- while this is later than now (internal.start_provider_call_at).
-- A primary-key probe: the lease is compared in the select list, not the condition.
create or replace function queues.current_lease_expiry(_task_id bigint, _task_lease_id bigint)
  returns timestamptz
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select case when p.current_lease_id = _task_lease_id then p.available_at end
    from queues.task_pending p
   where p.task_id = _task_id
  union all
  -- The ready set (docs/design/hot-path.md): a task its claim took out of the claim index
  -- has no row; until it ends, the claim lease that names it holds it, until its expiry.
  select h.expires_at from queues.lease_held_of(_task_id) h where h.task_lease_id = _task_lease_id
  limit 1
$$;

-- Whether _task_lease_id is still the current lease of _task_id (read only: no lock, no
-- fact), expired or not (queues.current_lease_expiry). The worker's steps check it before
-- they run.
create or replace function queues.is_current_lease(_task_id bigint, _task_lease_id bigint)
  returns boolean
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.current_lease_expiry(_task_id, _task_lease_id) is not null
$$;


-- For each (_task_ids[i], _task_lease_ids[i]): whether the lease is still the task's
-- current one (read only: no lock, no fact), in input order. One primary-key probe per
-- task: the subquery names the primary key only (with the lease in its condition, the
-- planner scanned every leased row through the index of leased rows for each task).
create or replace function queues.current_leases(_task_ids bigint[], _task_lease_ids bigint[])
  returns boolean[]
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(array_agg(coalesce((select p.current_lease_id from queues.task_pending p
                                       where p.task_id = i.task_id) = i.task_lease_id,
                                      -- no row: held by its claim lease until it ends
                                      exists (select 1 from queues.lease_held_of(i.task_id) h
                                               where h.task_lease_id = i.task_lease_id))
                            order by i.ord), '{}')
    from unnest(_task_ids, _task_lease_ids) with ordinality as i(task_id, task_lease_id, ord)
$$;

-- Runs one db_function step with its completion, in a subtransaction of their own:
-- internal.run_function(_function_name, _payload), then the completion fenced by the lease
-- (queues.settle_tasks), so the step's writes and its completion commit together or not
-- at all, exactly once. Outcomes as the worker's db_function processor: success and
-- status complete 'succeeded' (a status is returned as note); an error keeps the writes and
-- completes 'failed' with an error row; a validation failure keeps the writes and
-- completes 'validation_failed' with an error row (final: never retried, not a dead
-- letter); a malformed envelope or an exception rolls the step back, then completes
-- 'failed' with an error row. A step whose lease is no longer held is not run. A
-- well-formed envelope is kept as the step's result (queues.record_task_result) before its
-- completion. queues.run_steps runs many steps faster and falls back to this one.
-- Runs as the caller (security invoker): the step has the worker's privileges.
-- result: as queues.complete_tasks ('completed', 'retry_scheduled', 'lease_lost', ...) or
-- 'transient' (a serialization failure or deadlock rolled the step back and recorded
-- nothing: release the lease, it runs again).
create or replace function queues.run_step(
  _task_id bigint, _task_lease_id bigint, _function_name text, _payload jsonb,
  out result text, out outcome text, out error text, out note text
)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _env record;
  _raw jsonb;
begin
  begin
    -- A lease no longer held is not run.
    result := case when queues.is_current_lease(_task_id, _task_lease_id) then 'started' else 'lease_lost' end;
    if result = 'started' then
      _raw := internal.run_function(_function_name, _payload);
      select * into _env from queues.parse_envelope(_raw);
      if _env.outcome = 'malformed' then
        raise exception '%: %', _function_name, _env.message using errcode = 'QSTEP';
      end if;
      -- The function's envelope is kept as the run's result (queues.task_result), fenced by
      -- the lease, before the completion.
      perform queues.record_task_result(_task_id, _task_lease_id, _raw);
      case _env.outcome
        when 'succeeded' then outcome := 'succeeded';
        when 'status' then outcome := 'succeeded'; note := 'status ' || _env.message;
        when 'invalid' then
          -- Its own outcome: final, never retried, not a dead letter.
          outcome := 'validation_failed'; error := format('%s: validation failure: %s', _function_name, _env.message);
          note := _env.message;
        else outcome := 'failed'; error := format('%s: %s', _function_name, _env.message);
      end case;
      select s.result into result
        from queues.settle_tasks(array[_task_id], array[_task_lease_id], array[outcome],
                                 -- A validation failure is final: no retry.
                                 array[case when _env.outcome = 'invalid' then false end],
                                 case when error is null then '{}'::bigint[] else array[_task_id] end,
                                 case when error is null then '{}'::text[] else array[error] end,
                                 -- The step started with its call's transaction.
                                 array[(extract(epoch from now()) * 1000000)::bigint]) s;
      if result not in ('completed', 'retry_scheduled') then
        -- Refused (the lease was lost meanwhile): the step's writes must not commit.
        raise exception 'refused: %', result using errcode = 'QREFU';
      end if;
    end if;
  exception
    when sqlstate 'QREFU' then
      outcome := null; error := null; note := null;
    when serialization_failure or deadlock_detected then
      result := 'transient'; outcome := null; error := sqlerrm; note := null;
    when others then
      -- Rolled back; record why, in a subtransaction of its own.
      outcome := 'failed';
      error := case when sqlstate = 'QSTEP' then sqlerrm else format('%s raised: %s', _function_name, sqlerrm) end;
      note := null;
      select s.result into result
        from queues.settle_tasks(array[_task_id], array[_task_lease_id], array['failed'], null,
                                 array[_task_id], array[error], array[(extract(epoch from now()) * 1000000)::bigint]) s;
  end;
  if result = 'started' then
    result := 'lease_lost';
  end if;
end;
$$;

-- Completes steps that ran in the caller's transaction (queues.run_steps): as
-- queues.settle_tasks (fenced by lease, retries, error rows only for completions this call
-- made), and keeps _results[i] (the step's envelope; NULL for none) as the task's result
-- (queues.task_result) only if this call completed the task or scheduled its retry.
-- Returns one row per task, in input order, with the result of queues.complete_tasks.
-- Refuses: a lease id missing (22004), arrays of different lengths, a result that is not
-- a JSON object (22023), a result over queues.max_payload_bytes() (54000).
create or replace function queues.complete_steps(
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _outcomes       text[],
  _retries        boolean[],
  _error_task_ids bigint[],
  _error_messages text[],
  _results        jsonb[]
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _task_ids is null or _task_lease_ids is null or _results is null then
    raise exception 'task_ids, task_lease_ids and results must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> cardinality(_task_ids) or cardinality(_results) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids and results must have one element per task (% tasks, % lease ids, % results)',
      cardinality(_task_ids), cardinality(_task_lease_ids), cardinality(_results) using errcode = '22023';
  end if;
  if array_position(_task_lease_ids, null) is not null then
    raise exception 'task_lease_ids must not contain null: a step completes under its lease' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_results) r where jsonb_typeof(r) <> 'object') then
    raise exception 'results must be JSON objects' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_results) r where pg_column_size(r) > queues.max_payload_bytes()) then
    raise exception 'a result is over the limit of % bytes', queues.max_payload_bytes() using errcode = '54000';
  end if;
  return query
  with done as (
    select s.task_id, s.result, row_number() over () as ord
      from queues.settle_tasks(_task_ids, _task_lease_ids, _outcomes, _retries,
                               _error_task_ids, _error_messages,
                               -- The steps started with their call's transaction.
                               array_fill((extract(epoch from now()) * 1000000)::bigint, array[cardinality(_task_ids)])) s
  ),
  kept as (
    insert into queues.task_result (task_id, task_lease_id, result)
    select r.task_id, r.task_lease_id, r.result
      from unnest(_task_ids, _task_lease_ids, _results) as r(task_id, task_lease_id, result)
      join done d on d.task_id = r.task_id and d.result in ('completed', 'retry_scheduled')
     where r.result is not null
  )
  select d.task_id, d.result from done d order by d.ord;
end;
$$;

-- Runs db_function steps claimed by the caller, in input order, in one call, with the
-- guarantees of queues.run_step for each: its body runs once; its writes and its
-- completion commit together or not at all, exactly once; an error is recorded against its
-- own task and rolls back only its own step; a step whose lease is no longer held is not
-- run. The caller marks the steps started before the call (as the worker's start recorder
-- does for every task).
--
-- How (the cost per step is a subtransaction and a function call, not a statement of the
-- queue's):
--   1. queues.current_leases: the steps whose lease is held (the others: 'lease_lost',
--      not run). No lock is held on a step's task while it runs: a heartbeat, a release
--      at shutdown or a revocation is not held up by a long call.
--   2. Each step in a subtransaction of its own (a BEGIN ... EXCEPTION block): its
--      function (resolved and its EXECUTE privilege checked once per call, as
--      internal.run_function does; called through internal.call_runnable, whose static
--      calls keep their plans), then its envelope read. A raise, a malformed envelope
--      or a result over queues.max_payload_bytes() rolls back that step only, which is
--      completed 'failed' with the others; a serialization failure or a deadlock rolls it
--      back and records nothing ('transient'). Nothing runs a step twice.
--   3. One statement completes every step that ran and keeps its envelope as its result
--      (queues.complete_steps). If one of these completions is refused (another
--      transaction took the lease during the call: an expiry claimed, a revocation), the
--      writes of its step must not commit: the whole call is rolled back, that step is
--      answered as refused ('lease_lost'), and every other step that ran 'transient'
--      (nothing recorded; it runs again under a new lease).
-- A step can also change the tasks of the call itself (task code that completes or
-- releases a task). The call watches its own updates and deletes of queues.task_pending
-- and the transaction's completion calls (a task without a claim-index row ends without
-- touching one; queues.complete_tasks counts its calls in the transaction's setting
-- queues.completions), from the transaction's counts (pg_stat_get_xact_tuples_updated and
-- _deleted; every step is watched when track_counts is off): after a step that made any, each step runs only if
-- its lease is still current (else 'lease_lost'), and a step that changed its own task is
-- rolled back and completed 'failed', one that changed the task of a step before it (whose
-- completion is still to be written) is rolled back and answered 'transient' (it runs
-- again under a new lease, after that task's completion).
-- A step sees the writes of the steps before it in the call; it does not see their
-- completions (they are written at the end). The call is one transaction: now() is the
-- call's start for every step in it (the worker keeps a call to about 200 ms of steps).
-- Runs as the caller (security invoker): steps have the worker's privileges, not the owner's.
-- _traceparents (NULL when the worker traces nothing): per step, the W3C traceparent of
-- the step's span, set as queue.traceparent while the step runs (an empty string for a
-- NULL element), so that the tasks a step enqueues (a supervisor's child tasks) record
-- it as their trace context (sql/queues/trace.sql); reset to '' after the steps.
-- Returns one row per step, in input order: result as queues.complete_tasks ('completed',
-- 'retry_scheduled', 'lease_lost', ...) or 'transient' (the step was rolled back and
-- nothing recorded: release the lease, it runs again), with outcome, error, note.
create or replace function queues.run_steps(_task_ids bigint[], _task_lease_ids bigint[], _function_names text[],
                                            _payloads jsonb[], _traceparents text[] default null)
  returns table (task_id bigint, result text, outcome text, error text, note text)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _n integer;
  _held boolean[];
  -- Per step, in input order.
  _result text[];
  _outcome text[];
  _error text[];
  _note text[];
  _retry boolean[];
  -- The envelope to keep (null for none).
  _kept jsonb[];
  -- Ran (or could not run): completed by the final statement.
  _batched boolean[];
  -- Functions resolved in this call: name, name if it can run, or why it cannot.
  _names text[] := '{}';
  _calls text[] := '{}';
  _problems text[] := '{}';
  _oid regprocedure;
  _call text;
  _problem text;
  _i integer;
  _k integer;
  _m integer;
  _name text;
  _raw jsonb;
  _env record;
  _kind text;
  _ids bigint[];
  _settled text[];
  _max_bytes integer := queues.max_payload_bytes();
  -- The transaction's own updates and deletes of queues.task_pending (see above).
  _pending regclass := 'queues.task_pending'::regclass;
  _counted boolean := current_setting('track_counts')::boolean;
  _changes_at_start bigint;
  _changes bigint;
  _current boolean[];
begin
  if _task_ids is null or _task_lease_ids is null or _function_names is null or _payloads is null then
    raise exception 'task_ids, task_lease_ids, function_names and payloads must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> cardinality(_task_ids) or cardinality(_function_names) <> cardinality(_task_ids)
     or cardinality(_payloads) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids, function_names and payloads must have one element per task' using errcode = '22023';
  end if;
  if cardinality(_traceparents) <> cardinality(_task_ids) then
    raise exception 'traceparents must have one element per task (or be null)' using errcode = '22023';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 steps per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null then
    raise exception 'task_ids and task_lease_ids must not contain null' using errcode = '22004';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;
  _n := cardinality(_task_ids);
  if _n = 0 then
    return;
  end if;
  _held := queues.current_leases(_task_ids, _task_lease_ids);
  _result := array_fill(null::text, array[_n]);
  _outcome := _result;
  _error := _result;
  _note := _result;
  _retry := array_fill(null::boolean, array[_n]);
  _batched := array_fill(false, array[_n]);
  _kept := array_fill(null::jsonb, array[_n]);
  _changes_at_start := pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint;

  begin
    for _i in 1 .. _n loop
      if not _held[_i] then
        -- Not run.
        _result[_i] := 'lease_lost';
        continue;
      end if;
      -- A step before it changed pending rows: is this lease still current?
      if (not _counted
          or pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint <> _changes_at_start)
         and not queues.is_current_lease(_task_ids[_i], _task_lease_ids[_i]) then
        _result[_i] := 'lease_lost';
        continue;
      end if;
      _name := _function_names[_i];

      _k := array_position(_names, _name);
      if _k is null then
        -- Resolved as internal.run_function does, once per call.
        begin
          _oid := internal.resolve_runnable_function(_name);
          if not has_function_privilege(_oid, 'execute') then
            raise exception 'permission denied: % may not execute %', current_user, _name using errcode = '42501';
          end if;
          _call := _name;
          _problem := null;
        exception when others then
          _call := null;
          _problem := format('%s raised: %s', _name, sqlerrm);
        end;
        _names := _names || _name;
        _calls := _calls || _call;
        _problems := _problems || _problem;
        _k := cardinality(_names);
      end if;

      if _problems[_k] is not null then
        -- Cannot run (unknown, unregistered, not allowed): failed, nothing ran.
        _outcome[_i] := 'failed';
        _error[_i] := _problems[_k];
        _batched[_i] := true;
        continue;
      end if;

      _changes := pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint;
      if _traceparents is not null then
        -- The step's span: the trace context of what it enqueues.
        perform set_config('queue.traceparent', coalesce(_traceparents[_i], ''), true);
      end if;
      begin
        -- A static call per registered function (internal.build_call_runnable), planned
        -- once per session; the name was resolved and checked above.
        _raw := internal.call_runnable(_name, _payloads[_i]);
        if _raw = '{"success": true}'::jsonb then
          _kind := 'succeeded';
        else
          select * into _env from queues.parse_envelope(_raw);
          _kind := _env.outcome;
          if _kind = 'malformed' then
            raise exception '%: %', _name, _env.message using errcode = 'QSTEP';
          end if;
          if pg_column_size(_raw) > _max_bytes then
            raise exception 'result is % bytes, over the limit of % bytes', pg_column_size(_raw), _max_bytes
              using errcode = '54000';
          end if;
        end if;
        if not _counted
           or pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint <> _changes then
          -- The step updated or deleted pending rows: its own task, and those of the steps
          -- before it whose completions are still to be written, must be as they were.
          _current := queues.current_leases(
            array(select s.task_id from unnest(_task_ids, _batched) with ordinality as s(task_id, batched, ord)
                   where s.batched and s.ord < _i order by s.ord) || _task_ids[_i],
            array(select s.lease from unnest(_task_lease_ids, _batched) with ordinality as s(lease, batched, ord)
                   where s.batched and s.ord < _i order by s.ord) || _task_lease_ids[_i]);
          if not _current[cardinality(_current)] then
            raise exception '%: the step changed its own task (completed, failed or released it); the call that runs a step completes it',
              _name using errcode = 'QSTEP';
          end if;
          if false = any (_current) then
            raise exception '%: the step changed the task of a step that ran before it in the same call; it runs again after that completion',
              _name using errcode = 'QMEDL';
          end if;
        end if;
        -- Past every check: the step stands.
        case _kind
          when 'succeeded' then _outcome[_i] := 'succeeded';
          when 'status' then _outcome[_i] := 'succeeded'; _note[_i] := 'status ' || _env.message;
          when 'invalid' then
            _outcome[_i] := 'validation_failed'; _error[_i] := format('%s: validation failure: %s', _name, _env.message);
            _note[_i] := _env.message;
            -- A validation failure is final: no retry.
            _retry[_i] := false;
          else _outcome[_i] := 'failed'; _error[_i] := format('%s: %s', _name, _env.message);
        end case;
        _kept[_i] := _raw;
        _batched[_i] := true;
      exception
        when sqlstate 'QMEDL' then
          -- Rolled back, nothing recorded.
          _result[_i] := 'transient';
          _error[_i] := sqlerrm;
        when serialization_failure or deadlock_detected then
          -- Rolled back, nothing recorded: it runs again.
          _result[_i] := 'transient';
          _error[_i] := sqlerrm;
        when others then
          -- Rolled back: completed 'failed', with why.
          _outcome[_i] := 'failed';
          _error[_i] := case when sqlstate = 'QSTEP' then sqlerrm else format('%s raised: %s', _name, sqlerrm) end;
          _batched[_i] := true;
      end;
    end loop;
    if _traceparents is not null then
      perform set_config('queue.traceparent', '', true);
    end if;

    -- The completions (and kept envelopes) of every step that ran, in one statement.
    if true = any (_batched) then
      select array_agg(c.task_id order by c.ord), array_agg(c.result order by c.ord)
        into _ids, _settled
        from queues.complete_steps(
               array(select s.task_id from unnest(_task_ids, _batched) with ordinality as s(task_id, batched, ord)
                      where s.batched order by s.ord),
               array(select s.lease from unnest(_task_lease_ids, _batched) with ordinality as s(lease, batched, ord)
                      where s.batched order by s.ord),
               array(select s.outcome from unnest(_outcome, _batched) with ordinality as s(outcome, batched, ord)
                      where s.batched order by s.ord),
               array(select s.retry from unnest(_retry, _batched) with ordinality as s(retry, batched, ord)
                      where s.batched order by s.ord),
               array(select s.task_id from unnest(_task_ids, _error, _batched) with ordinality as s(task_id, error, batched, ord)
                      where s.batched and s.error is not null order by s.ord),
               array(select s.error from unnest(_error, _batched) with ordinality as s(error, batched, ord)
                      where s.batched and s.error is not null order by s.ord),
               array(select s.kept from unnest(_kept, _batched) with ordinality as s(kept, batched, ord)
                      where s.batched order by s.ord)
             ) with ordinality as c(task_id, result, ord);
      if exists (select 1 from unnest(_settled) r where r not in ('completed', 'retry_scheduled')) then
        -- A lease taken during the call: its step's writes must not commit.
        raise exception 'a completion of the call was refused' using errcode = 'QREFU';
      end if;
      _m := 1;
      for _i in 1 .. _n loop
        if _batched[_i] then
          if _ids[_m] <> _task_ids[_i] then
            raise exception 'completions out of order' using errcode = 'XX000';
          end if;
          _result[_i] := _settled[_m];
          _m := _m + 1;
        end if;
      end loop;
    end if;
  exception when sqlstate 'QREFU' then
    -- Everything above is rolled back, nothing recorded: the refused steps are answered as
    -- refused; every other step that ran runs again under a new lease.
    _m := 1;
    for _i in 1 .. _n loop
      if _batched[_i] then
        if _settled[_m] not in ('completed', 'retry_scheduled') then
          _result[_i] := _settled[_m];
          _error[_i] := null;
        else
          _result[_i] := 'transient';
          _error[_i] := 'a completion of another step of the call was refused (its lease was taken); the call was rolled back';
        end if;
        _outcome[_i] := null;
        _note[_i] := null;
        _m := _m + 1;
      end if;
    end loop;
  end;

  return query
  select s.task_id, s.result, s.outcome, s.error, s.note
    from unnest(_task_ids, _result, _outcome, _error, _note) with ordinality as s(task_id, result, outcome, error, note, ord)
   order by s.ord;
end;
$$;
--! EndIncluded queues/steps.sql
--! Included queues/start.sql
-- Start marks (queues.task_lease_started) for runs that outlast a heartbeat: a task's start
-- travels with its completion (queues.settle_tasks' _started_us, kept in task_completed
-- and task_attempt_failed), and nothing is written when a task starts. A run still going
-- at its worker's next heartbeat is marked then, once, with the time it started, so that
-- the readers of running work (public.worker_tasks' claimed and running, the task page)
-- see it as running within one heartbeat interval. Start marks play no part in the
-- suspect accounting (see queues.claim_tasks_at).
--
-- Marks each given lease that is still its task's current lease; returns the task ids
-- whose lease is not (taken over, released, or already settled: nothing to mark).
-- _started_us: parallel, when each run started, in microseconds since the epoch (null:
-- now).
create or replace function queues.mark_started(
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _started_us     bigint[] default null
) returns setof bigint
  language plpgsql volatile
  rows 1
  security definer
  set plan_cache_mode = force_generic_plan
  -- Every row it reads is found by key (see queues.claim_tasks_at's lease_map).
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  if _started_us is not null and cardinality(_started_us) <> cardinality(_task_ids) then
    raise exception 'started_us must have one element per lease (% leases, % start times)',
      cardinality(_task_ids), cardinality(_started_us) using errcode = '22023';
  end if;
  -- Each pair probed by primary key (a scalar subquery: no join of the input to
  -- task_pending planned from its statistics).
  return query
  with input as (
    select i.task_id, i.task_lease_id, i.started_us,
           coalesce((select true from queues.task_pending p
                      where p.task_id = i.task_id and p.current_lease_id = i.task_lease_id),
                    -- no row: held by the claim lease that names it until it ends (the
                    -- ready set)
                    (select true from queues.lease_held_of(i.task_id) h
                      where h.task_lease_id = i.task_lease_id),
                    false) as held
      from unnest(_task_ids, _task_lease_ids,
                  coalesce(_started_us, array_fill(null::bigint, array[cardinality(_task_ids)])))
           as i(task_id, task_lease_id, started_us)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id, started_at)
    select i.task_id, i.task_lease_id, coalesce(to_timestamp(i.started_us / 1000000.0), now())
      from input i where i.held
    on conflict do nothing
  )
  select i.task_id from input i where not i.held;
end;
$$;
--! EndIncluded queues/start.sql
--! Included queues/workers.sql
-- The worker registry and stale recovery. Workers report in on every heartbeat tick;
-- a worker not seen for a while is presumed dead, and the live leases it holds can be
-- revoked at once instead of waiting for them to expire.

-- Called by each worker on start and on every heartbeat tick, with the interval of its
-- heartbeats (null: the default, 30 s), from which stale recovery derives how long the
-- worker may be silent. At most 1000 task types, each a task type name.
create or replace function queues.record_worker_heartbeat(
  _worker_id             text,
  _task_types            text[],
  _heartbeat_interval_ms integer default null
) returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _task_types is null or cardinality(_task_types) = 0 or array_position(_task_types, null) is not null then
    raise exception 'task_types must name at least one task type' using errcode = '22023';
  end if;
  if cardinality(_task_types) > 1000 then
    raise exception 'task_types names % types, over the limit of 1000', cardinality(_task_types)
      using errcode = '54000';
  end if;
  if exists (select 1 from unnest(_task_types) t where t !~ '^[a-z][a-z0-9_]{0,62}$') then
    raise exception 'task_types must be task type names (a-z, 0-9, _, at most 63 characters)'
      using errcode = '22023';
  end if;
  if _heartbeat_interval_ms is not null and _heartbeat_interval_ms not between 1 and 86400000 then
    raise exception 'heartbeat_interval_ms must be between 1 and 86400000, got %', _heartbeat_interval_ms
      using errcode = '22023';
  end if;
  insert into queues.worker as w (worker_id, task_types, heartbeat_interval_ms)
  values (_worker_id, _task_types, _heartbeat_interval_ms)
  on conflict (worker_id) do update
     set task_types = excluded.task_types, last_seen_at = now(), stopped_at = null,
         heartbeat_interval_ms = excluded.heartbeat_interval_ms;
end;
$$;

-- How long a worker may be silent before it is taken for dead, whatever shorter bound a
-- caller asks for: three of its heartbeat intervals (30 s when it did not say).
create or replace function queues.worker_silence_bound(_heartbeat_interval_ms integer)
  returns interval
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select make_interval(secs => 3 * coalesce(_heartbeat_interval_ms, 30000) / 1000.0) $$;

-- Called by a worker that stops cleanly.
create or replace function queues.record_worker_stopped(_worker_id text)
  returns void
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  update queues.worker set stopped_at = now(), last_seen_at = now() where worker_id = _worker_id
$$;

-- Live leases held by workers not seen for _dead_after_seconds (and not stopped), at _now.
-- A bound shorter than the worker's own (queues.worker_silence_bound: three heartbeat
-- intervals) is raised to it: a worker between two heartbeats is never stale.
create or replace function queues.stale_leases_at(_now timestamptz, _dead_after_seconds integer)
  returns table (task_id bigint, task_lease_id bigint, worker_id text, last_seen_at timestamptz, expires_at timestamptz)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.task_id, p.current_lease_id, w.worker_id, w.last_seen_at, p.available_at
    from queues.task_pending p
    cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    left join queues.worker_name n on n.worker_key = l.worker_key
    join queues.worker w on w.worker_id = coalesce(l.worker_id, n.worker_id)
   where p.available_at > _now
     and w.stopped_at is null
     and w.last_seen_at < _now - greatest(make_interval(secs => _dead_after_seconds),
                                          queues.worker_silence_bound(w.heartbeat_interval_ms))
  union all
  -- The tasks held by a live claim lease without a row (the ready set:
  -- docs/design/hot-path.md).
  select h.task_id, h.task_lease_id, w.worker_id, w.last_seen_at, h.expires_at
    from queues.lease_held_tasks h
    join queues.worker_name n on n.worker_key = h.worker_key
    join queues.worker w on w.worker_id = n.worker_id
   where h.expires_at > _now
     and w.stopped_at is null
     and w.last_seen_at < _now - greatest(make_interval(secs => _dead_after_seconds),
                                          queues.worker_silence_bound(w.heartbeat_interval_ms))
$$;

-- The stale leases now, for workers presumed dead after 10 minutes of silence.
create or replace view queues.stale_lease as
select * from queues.stale_leases_at(now(), 600);
comment on view queues.stale_lease is 'Live leases held by workers not seen for 10 minutes.';

-- Revokes the stale leases (see stale_leases_at): their tasks are claimable at once. A
-- revocation of a started task counts as an expired lease towards abandoning it, and the revoked
-- worker can no longer complete or record against it. Returns what was revoked.
create or replace function queues.recover_stale_leases_at(_now timestamptz, _dead_after_seconds integer)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _dead_after_seconds is null or _dead_after_seconds not between 1 and 604800 then
    raise exception 'dead_after_seconds must be between 1 and 604800, got %', coalesce(_dead_after_seconds::text, 'null')
      using errcode = '22023';
  end if;
  perform queues.lock_resource_keys(array(select s.task_id from queues.stale_leases_at(_now, _dead_after_seconds) s));
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(array(select s.task_id from queues.stale_leases_at(_now, _dead_after_seconds) s));
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id from queues.stale_leases_at(_now, _dead_after_seconds) s
  ),
  -- Locked in task id order, as every call that locks several claim-index rows.
  locked as (
    select p.task_id from queues.task_pending p
     where p.task_id = any (array(select s.task_id from stale s))
     order by p.task_id
       for no key update
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null,
           -- Its task is a suspect from now on (see queues.claim_tasks_at); the lease counts
           -- towards abandonment only if it named the task its suspect.
           uncounted_count = p.uncounted_count + (not p.suspect_lease)::integer
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
       and p.task_id = any (array(select l.task_id from locked l))
    returning p.task_id, s.task_lease_id, s.worker_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, _now, format('worker %s not seen for %s s', r.worker_id, _dead_after_seconds) from revoked r
  ),
  key_freed as (
    delete from queues.resource_lease k
     using revoked r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select r.task_id, r.task_lease_id, r.worker_id from revoked r;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$$;

create or replace function queues.recover_stale_leases(_dead_after_seconds integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.recover_stale_leases_at(now(), coalesce(_dead_after_seconds, 600))
$$;

-- Revokes every lease a worker still holds, at once: called by the worker's process
-- supervisor when one of its processes died (its worker id is known and it can no longer
-- complete anything). Every task it held becomes a suspect (any of them may have killed
-- the process), and the revocation counts towards abandonment only for the task a lease
-- named its suspect (see queues.claim_tasks_at). The others are claimable at once
-- instead of when their leases expire; the named suspect stays unclaimable until its
-- lease would have expired, as without a supervisor, so a poison task's crash loop is
-- paced by its lease and the supervisor's spares keep up with the deaths instead of all
-- dying in a second.
-- Returns what was revoked; wakes listening workers.
create or replace function queues.revoke_worker_leases(_worker_id text)
  returns table (task_id bigint, task_lease_id bigint)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _worker_key integer;
begin
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  -- A lease names its worker by key (queues.worker_name), or by id if written before.
  select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
  perform queues.lock_resource_keys(array(
    select p.task_id from queues.task_pending p
     cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)));
  -- Its lease-held tasks (no row: the ready set) get their row back first.
  perform queues.hold_rows_of(array(select h.task_id from queues.lease_held_tasks h where h.worker_key = _worker_key));
  return query
  with held as (
    -- Locked in task id order, as every call that locks several claim-index rows.
    select p.task_id, p.current_lease_id as task_lease_id, p.suspect_lease as suspect
      from queues.task_pending p
     cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)
     order by p.task_id
       for no key update of p
  ),
  revoked as (
    -- available_at of a leased row is its lease's expiry (heartbeats included).
    update queues.task_pending p
       set available_at = case when h.suspect then p.available_at else now() end,
           current_lease_id = null,
           uncounted_count = p.uncounted_count + (not h.suspect)::integer
      from held h
     where p.task_id = h.task_id and p.current_lease_id = h.task_lease_id
    returning p.task_id, h.task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, now(), format('worker %s died', _worker_id) from revoked r
  ),
  key_freed as (
    delete from queues.resource_lease k
     using revoked r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select r.task_id, r.task_lease_id from revoked r;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$$;
--! EndIncluded queues/workers.sql
--! Included queues/held_rows.sql
-- The ready set's per-task paths (docs/design/hot-path.md): a claim takes a task out of
-- the claim index on its first lease, and its claim lease holds it; the task has no
-- `queues.task_pending` row until it ends. Every path that must hold such a task on its
-- row (a result, a release and a throttle's give-back, an interruption, a cancel, a stale
-- recovery or revocation, a unique replace, an unfenced completion, an enqueue that
-- depends on it, a heartbeat) first gives it its row back, written from the facts as the
-- claim left it (leased by the claim lease, available at its expiry), and then holds it
-- there as before the ready set. The drain's paths (the completion's fence, the lease
-- checks of steps, starts and progress) hold it by its claim lease and write nothing, so
-- only the exceptions pay for a row.
--
--   queues.hold_rows_of(task_ids)   helper: the row-less, unended tasks get their row back

-- Gives each of _task_ids with neither a claim-index row nor an end, named by a claim
-- lease, its row back (queues.pending_rows_of) and returns those tasks. Under each such
-- lease's advisory lock (class 20253), taken exclusively and waited for, in lease id
-- order, as the completions of the lease and the rescuer take it: a completion of the
-- task in flight ends it first (then it is left alone), and a rescue writes its row first
-- (then the insert finds it). Call it after queues.lock_resource_keys and before locking
-- any row, the order the completion keeps.
create or replace function queues.hold_rows_of(_task_ids bigint[])
  returns bigint[]
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _leases bigint[];
  _held bigint[];
begin
  -- The lease-held tasks' claim leases (queues.lease_held_of: a task with a row costs one
  -- primary-key probe).
  _leases := array(select distinct h.task_lease_id
                     from unnest(_task_ids) i(id) cross join lateral queues.lease_held_of(i.id) h
                    order by 1);
  if cardinality(_leases) = 0 then
    return '{}';
  end if;
  perform pg_advisory_xact_lock(20253, hashint8(l.id)) from unnest(_leases) l(id);
  -- A new statement, so a new snapshot: what a completion or a rescue that held a lock
  -- committed is seen.
  _held := array(select distinct h.task_id
                   from unnest(_task_ids) i(id) cross join lateral queues.lease_held_of(i.id) h
                  order by 1);
  if cardinality(_held) = 0 then
    return '{}';
  end if;
  perform queues.write_pending_rows(_held);
  return _held;
end;
$$;
--! EndIncluded queues/held_rows.sql
