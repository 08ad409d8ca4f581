--! Previous: sha1:d06285eca6908ed996725387b02c18ca72a47dc3
--! Hash: sha1:18dc209c0bbc45d16edc195120a418708fb733e5
--! Message: The claim's pause check, the steps' lease check and the handlers' completion plan once a session

--! split: 400-plans-once-a-session.sql
set local lock_timeout = '5s';

-- The pause check of every claim (queues.claimable_task_types), the lease check of a
-- batch of steps (queues.current_leases) and the completion of a round with handlers
-- (queues.settle_with_handlers) plan their statements once per session
-- (plan_cache_mode = force_generic_plan): a custom plan that looked cheaper than the
-- generic one was chosen, and made, at every call. The lease check, whose every read is
-- by key, also sets enable_seqscan = off, so that the plan its session keeps never scans
-- the claim leases.
--! Included queues/pause.sql
-- Pausing claims per task type (queue controls). Facts: queues.task_type_paused and
-- queues.task_type_resumed (created in migration 000002). The public claim
-- functions (sql/queues/claim.sql) pass the types they may claim through
-- queues.claimable_task_types, so every worker honours a pause on its next claim; the
-- owner-only claim_tasks_at is unaffected.

-- Task types paused now: a pause without a resumption.
create or replace function queues.paused_task_types()
  returns text[]
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(array_agg(p.task_type order by p.task_type), '{}')
    from queues.task_type_paused p
   where not exists (select 1 from queues.task_type_resumed r where r.task_type_paused_id = p.task_type_paused_id)
$$;

-- The task types a claim for _task_types (null: any type) may take: _task_types itself
-- when nothing is paused (the common case: one probe of an empty or tiny table) or when
-- it is empty (the claim refuses that); else the requested (or registered) types minus
-- the paused ones. When pauses leave no type it returns {NULL}, which no task type
-- equals: the claim still checks its arguments, and takes nothing.
create or replace function queues.claimable_task_types(_task_types text[])
  returns text[]
  language sql stable
  -- Planned once per session, not at each claim: a custom plan (the types known) looked
  -- cheaper than the generic one, so every call was planned again.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
  select case
           when cardinality(x.paused) = 0 or cardinality(_task_types) = 0 then _task_types
           else coalesce(nullif(array(select t.task_type from queues.task_type t
                                       where (_task_types is null or t.task_type = any (_task_types))
                                         and not (t.task_type = any (x.paused))
                                       order by t.task_type), '{}'),
                         array[null]::text[])
         end
    -- OFFSET 0 keeps the subquery (not pulled up), so the pauses are read once per call,
    -- not once per reference to x.paused.
    from (select queues.paused_task_types() as paused offset 0) x
$$;
--! EndIncluded queues/pause.sql
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
  -- Planned once per session: with the arrays' sizes known, a custom plan looked cheaper
  -- than the generic one at every call, so each call was planned again (the claim
  -- leases' partitions included: a few milliseconds a call). Every read is by key, and
  -- the functions it reads through are inlined: no plan made while a table was small
  -- scans it after it has grown.
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
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
--! Included queues/settle.sql
-- The worker's completer: one call per round trip that completes tasks with their error
-- rows and start times (queues.settle_tasks, owner-run: security definer like every queue
-- writer); and a completion with its handler in one statement (queues.settle_with_handler,
-- run as the worker).

-- Completes tasks (see queues.complete_tasks: fenced by lease, retries, results),
-- recording each error message against its task in the same transaction, only if this
-- call completed the task or scheduled its retry (a refused completion records nothing).
--   _task_ids, _task_lease_ids, _outcomes, _retries   parallel: as queues.complete_tasks
--   _error_task_ids, _error_messages        parallel: errors, any number per completed task
--   _started_us                             parallel to _task_ids (or null): when each run
--                                           started, in microseconds since the epoch (sent
--                                           as integers: a timestamptz[] of hundreds costs
--                                           more to parse than the insert it feeds)
-- Returns one row per completion, in input order, with the result of queues.complete_tasks.
create or replace function queues.settle_tasks(
  _task_ids          bigint[],
  _task_lease_ids    bigint[] default null,
  _outcomes          text[] default null,
  _retries           boolean[] default null,
  _error_task_ids    bigint[] default null,
  _error_messages    text[] default null,
  _started_us        bigint[] default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _errors bigint[] := coalesce(_error_task_ids, '{}');
  _messages text[] := coalesce(_error_messages, '{}');
begin
  if cardinality(_errors) <> cardinality(_messages) then
    raise exception 'error_task_ids and error_messages must have the same length (% and %)',
      cardinality(_errors), cardinality(_messages) using errcode = '22023';
  end if;
  -- (Read only when there are errors: a round of plain completions runs no query here.)
  if cardinality(_errors) > 0 then
    if array_position(_errors, null) is not null then
      raise exception 'error_task_ids must not contain null' using errcode = '22004';
    end if;
    if exists (select 1 from unnest(_messages) m where m is null or btrim(m) = '') then
      raise exception 'error_messages must not be empty' using errcode = '22004';
    end if;
    if exists (select 1 from unnest(_errors) e where e <> all (coalesce(_task_ids, '{}'))) then
      raise exception 'error_task_ids must name tasks completed in the same call' using errcode = '22023';
    end if;
  end if;
  if _started_us is not null and cardinality(_started_us) <> cardinality(coalesce(_task_ids, '{}')) then
    raise exception 'started_us must have one element per task (% tasks, % start times)',
      cardinality(coalesce(_task_ids, '{}')), cardinality(_started_us) using errcode = '22023';
  end if;

  if cardinality(coalesce(_task_ids, '{}')) = 0 then
    return;
  end if;

  -- No error to record (a round of plain completions, the common case): the completion's
  -- rows as they come, in input order, without the join that records errors.
  if cardinality(_errors) = 0 then
    return query
    select c.task_id, c.result
      from queues.complete_tasks(_task_ids, _task_lease_ids, _outcomes, _retries,
                                 case when _started_us is not null then
                                   array(select to_timestamp(u.us::float8 / 1000000)
                                         from unnest(_started_us) with ordinality u(us, i) order by u.i) end) c;
    return;
  end if;

  return query
  with done as (
    select c.task_id, c.result, row_number() over () as ord
      from queues.complete_tasks(_task_ids, _task_lease_ids, _outcomes, _retries,
                                 case when _started_us is not null then
                                   -- float8, not numeric: exact to the microsecond
                                   -- (to_timestamp rounds to it) and about 0.2 ms less
                                   -- per round of 500 than a numeric division each.
                                   array(select to_timestamp(u.us::float8 / 1000000)
                                         from unnest(_started_us) with ordinality u(us, i) order by u.i) end) c
  ),
  leases as (
    select l.task_id, l.task_lease_id
      from unnest(_task_ids, coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])))
           as l(task_id, task_lease_id)
  ),
  recorded as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select e.task_id, l.task_lease_id,
           case when length(e.message) > queues.max_error_message_length()
                then left(e.message, queues.max_error_message_length()) || ' [truncated]'
                else e.message end
      from unnest(_errors, _messages) with ordinality as e(task_id, message, ord)
      join done d on d.task_id = e.task_id and d.result in ('completed', 'retry_scheduled')
      join leases l on l.task_id = e.task_id
     order by e.ord
  )
  select d.task_id, d.result from done d order by d.ord;
end;
$$;

-- A completion and its handler in one statement: the worker's completion of a channel task
-- (a success handler after the provider's call, an error handler after its failure), with
-- no transaction left open between round trips. Runs internal.run_function(_handler,
-- _body) in a subtransaction, reads its envelope (queues.parse_envelope), and records the
-- completion fenced by the lease (queues.settle_tasks):
--   _mode 'success' (_outcome 'succeeded'): a handler failure (an error, a validation
--     failure, a status or a malformed envelope) fails the task with that failure as its
--     error, the handler's writes kept; a handler that raises fails the task with
--     _raised_prefix followed by the message, its writes rolled back;
--   _mode 'error' (_outcome 'failed', or 'validation_failed' for a before handler's
--     validation failure; _errors the task's errors, _retry false for a failure no retry
--     can mend): a handler failure, or _raised_prefix and the message of
--     a raise (its writes rolled back), is one more error row.
-- If the completion is refused (the lease was lost), nothing of it commits, the handler's
-- writes included. A serialization failure or deadlock is raised: nothing is recorded and
-- the task runs again. Returns the completion's result (as queues.complete_tasks) with
-- the outcome and the errors recorded (or refused). _started_at: when the task's run
-- started (null: not known), kept with its completion. Messages are cut at 8,000 characters
-- (as the worker's). Runs as the caller (security invoker): the handler has the worker's
-- privileges, not the owner's.
create or replace function queues.settle_with_handler(
  _task_id bigint, _task_lease_id bigint, _outcome text, _errors text[], _retry boolean,
  _handler text, _body jsonb, _mode text, _raised_prefix text, _started_at timestamptz,
  out result text, out outcome text, out errors text[]
)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _env record;
  _failure text;
begin
  if _task_id is null or _task_lease_id is null or _handler is null or _mode is null then
    raise exception 'task_id, task_lease_id, handler and mode must not be null' using errcode = '22004';
  end if;
  if _mode not in ('success', 'error') then
    raise exception 'mode must be success or error, not %', _mode using errcode = '22023';
  end if;
  if not (_outcome is not distinct from 'succeeded' and _mode = 'success'
          or _outcome in ('failed', 'validation_failed') and _mode = 'error') then
    raise exception 'a % handler completes % tasks, not %', _mode,
      (case _mode when 'success' then 'succeeded' else 'failed or validation_failed' end), coalesce(_outcome, 'null')
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_errors) m where m is null or btrim(m) = '') then
    raise exception 'errors must not be empty' using errcode = '22004';
  end if;
  outcome := _outcome;
  errors := coalesce(_errors, '{}');
  begin
    begin
      select * into _env from queues.parse_envelope(internal.run_function(_handler, _body));
      _failure := case _env.outcome
                    when 'succeeded' then null
                    when 'invalid' then format('%s: validation failure: %s', _handler, _env.message)
                    when 'status' then format('%s: status %s', _handler, _env.message)
                    else format('%s: %s', _handler, _env.message) end;
    exception
      when serialization_failure or deadlock_detected then
        raise;
      when others then
        -- Its writes are rolled back with the subtransaction.
        _failure := coalesce(_raised_prefix, '') || sqlerrm;
    end;
    if _failure is not null then
      if length(_failure) > 8000 then
        _failure := left(_failure, 8000) || ' [truncated]';
      end if;
      if _mode = 'success' then
        outcome := 'failed';
        errors := array[_failure];
      else
        errors := errors || _failure;
      end if;
    end if;
    select s.result into result
      from queues.settle_tasks(array[_task_id], array[_task_lease_id], array[outcome], array[_retry],
                               array_fill(_task_id, array[cardinality(errors)]), errors,
                               array[(extract(epoch from _started_at) * 1000000)::bigint]) s;
    if result not in ('completed', 'retry_scheduled') then
      -- Refused: the handler's writes must not commit either.
      raise exception 'refused: %', result using errcode = 'QREFU';
    end if;
  exception
    when sqlstate 'QREFU' then
      null;
  end;
end;
$$;

-- Granted here, beside the function, so that a migration including
-- queues/privileges-hot-path.sql before this one does not name a function that does not
-- exist yet.
revoke execute on function
  queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text, timestamptz) from public;
grant execute on function
  queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text, timestamptz) to :DATABASE_WORKER;

-- Many completions with their handlers in one statement: what queues.settle_with_handler
-- does for one task, for every task of a completion round, with one completion statement
-- (queues.settle_tasks) and one commit for all of them instead of one each. Each handler
-- runs in a subtransaction of its own (its writes kept or rolled back as in
-- queues.settle_with_handler), then one queues.settle_tasks completes every task whose
-- handler ran. If a completion is refused (its lease was lost), nothing of that task
-- commits, its handler's writes included: the whole block is rolled back, the refused
-- tasks are answered as refused, and the handlers of the others run again (nothing of
-- theirs was committed). A serialization failure or deadlock in a task's handler records
-- nothing for that task ('transient': it runs again, as queues.settle_with_handler's
-- raise makes it), and the others go on.
-- Arguments: one element per task in each of _task_ids, _task_lease_ids, _outcomes,
-- _retries, _handlers, _bodies, _modes, _raised_prefixes, _started_us (microseconds since
-- the epoch, an element null when not known) and, when not null, _traceparents (the
-- queue.traceparent each handler runs with: the trace context of what it enqueues); each
-- task's errors in _error_task_ids and _error_messages (parallel, in order).
-- Returns one row per task, in input order: the result (as queues.complete_tasks, or
-- 'transient'), the outcome and the errors recorded (or refused). Runs as the caller.
-- At most 50 tasks per call.
create or replace function queues.settle_with_handlers(
  _task_ids bigint[], _task_lease_ids bigint[], _outcomes text[], _retries boolean[],
  _error_task_ids bigint[], _error_messages text[],
  _handlers text[], _bodies jsonb[], _modes text[], _raised_prefixes text[], _started_us bigint[],
  _traceparents text[] default null
) returns table (task_id bigint, result text, outcome text, errors text[])
  language plpgsql volatile
  security invoker
  -- Planned once per session: the completion statement below, with its arrays known,
  -- was given a custom plan at each call.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _n integer := cardinality(_task_ids);
  _errs jsonb[];
  _out text[];
  _result text[];
  -- Still to be completed (not refused, not transient).
  _open boolean[];
  _env record;
  _failure text;
  _i integer;
  _k integer;
  _ids bigint[];
  _settled text[];
  _refused boolean;
  -- Handlers resolved in this call (as internal.run_function does, once per name): name,
  -- and why it cannot run (null: it can).
  _names text[] := '{}';
  _problems text[] := '{}';
  _oid regprocedure;
begin
  if _task_ids is null or _task_lease_ids is null or _outcomes is null or _handlers is null or _bodies is null
     or _modes is null or _raised_prefixes is null then
    raise exception 'task_ids, task_lease_ids, outcomes, handlers, bodies, modes and raised_prefixes must not be null'
      using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> _n or cardinality(_outcomes) <> _n or cardinality(_handlers) <> _n
     or cardinality(_bodies) <> _n or cardinality(_modes) <> _n or cardinality(_raised_prefixes) <> _n
     or cardinality(coalesce(_retries, array_fill(null::boolean, array[_n]))) <> _n
     or cardinality(coalesce(_started_us, array_fill(null::bigint, array[_n]))) <> _n
     or cardinality(coalesce(_traceparents, array_fill(null::text, array[_n]))) <> _n then
    raise exception 'every array must have one element per task (% tasks)', _n using errcode = '22023';
  end if;
  if cardinality(coalesce(_error_task_ids, '{}')) <> cardinality(coalesce(_error_messages, '{}')) then
    raise exception 'error_task_ids and error_messages must have the same length' using errcode = '22023';
  end if;
  -- A subtransaction per handler: past PostgreSQL's 64 cached per backend, every snapshot
  -- taken while this transaction runs (here and on replicas) reads pg_subtrans.
  if _n > 50 then
    raise exception 'at most 50 completions per call, got %', _n using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null
     or array_position(_handlers, null) is not null or array_position(_modes, null) is not null then
    raise exception 'task_ids, task_lease_ids, handlers and modes must not contain null' using errcode = '22004';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m not in ('success', 'error')) then
    raise exception 'modes must be success or error' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_outcomes, _modes) as x(o, m)
              where not (o is not distinct from 'succeeded' and m = 'success'
                         or o in ('failed', 'validation_failed') and m = 'error')) then
    raise exception 'a success handler completes succeeded tasks, an error handler failed or validation_failed ones'
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_error_messages) m where m is null or btrim(m) = '') then
    raise exception 'errors must not be empty' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_error_task_ids) e where e is null or e <> all (_task_ids)) then
    raise exception 'error_task_ids must name tasks of the call' using errcode = '22023';
  end if;
  if _n = 0 then
    return;
  end if;
  _result := array_fill(null::text, array[_n]);
  _out := _outcomes;
  _errs := array_fill(null::jsonb, array[_n]);
  _open := array_fill(true, array[_n]);

  -- Once, and again after a refusal (each pass has one refusal fewer to make).
  for _pass in 1 .. _n + 1 loop
    _refused := false;
    begin
      for _i in 1 .. _n loop
        continue when not _open[_i];
        _out[_i] := _outcomes[_i];
        -- Its errors (most completions with a handler have none: no statement for them).
        if _task_ids[_i] = any (_error_task_ids) then
          _errs[_i] := (select jsonb_agg(e.m order by e.ord)
                          from unnest(_error_task_ids, _error_messages) with ordinality as e(t, m, ord)
                         where e.t = _task_ids[_i]);
        else
          _errs[_i] := '[]';
        end if;
        if _traceparents is not null then
          perform set_config('queue.traceparent', coalesce(_traceparents[_i], ''), true);
        end if;
        _k := array_position(_names, _handlers[_i]);
        if _k is null then
          begin
            _oid := internal.resolve_runnable_function(_handlers[_i]);
            if not has_function_privilege(_oid, 'execute') then
              raise exception 'permission denied: % may not execute %', current_user, _handlers[_i]
                using errcode = '42501';
            end if;
            _problems := _problems || null::text;
          exception when others then
            _problems := _problems || sqlerrm;
          end;
          _names := _names || _handlers[_i];
          _k := cardinality(_names);
        end if;
        begin
          if _problems[_k] is not null then
            -- Cannot run: a handler that raises (internal.run_function would have raised so).
            raise exception '%', _problems[_k];
          end if;
          -- Resolved and checked above; the static call keeps its plan for the session.
          select * into _env from queues.parse_envelope(internal.call_runnable(_handlers[_i], _bodies[_i]));
          _failure := case _env.outcome
                        when 'succeeded' then null
                        when 'invalid' then format('%s: validation failure: %s', _handlers[_i], _env.message)
                        when 'status' then format('%s: status %s', _handlers[_i], _env.message)
                        else format('%s: %s', _handlers[_i], _env.message) end;
        exception
          when serialization_failure or deadlock_detected then
            -- Its writes rolled back, nothing recorded: the task runs again.
            _result[_i] := 'transient';
            _errs[_i] := to_jsonb(array[sqlerrm]);
            _out[_i] := null;
            _open[_i] := false;
            continue;
          when others then
            _failure := coalesce(_raised_prefixes[_i], '') || sqlerrm;
        end;
        if _failure is not null then
          if length(_failure) > 8000 then
            _failure := left(_failure, 8000) || ' [truncated]';
          end if;
          if _modes[_i] = 'success' then
            _out[_i] := 'failed';
            _errs[_i] := to_jsonb(array[_failure]);
          else
            _errs[_i] := _errs[_i] || to_jsonb(_failure);
          end if;
        end if;
      end loop;
      if _traceparents is not null then
        perform set_config('queue.traceparent', '', true);
      end if;
      if true = any (_open) then
        select array_agg(s.task_id order by s.ord), array_agg(s.result order by s.ord)
          into _ids, _settled
          from queues.settle_tasks(
                 array(select o.t from unnest(_task_ids, _open) with ordinality as o(t, open, ord)
                        where o.open order by o.ord),
                 array(select o.l from unnest(_task_lease_ids, _open) with ordinality as o(l, open, ord)
                        where o.open order by o.ord),
                 array(select o.x from unnest(_out, _open) with ordinality as o(x, open, ord)
                        where o.open order by o.ord),
                 array(select o.r from unnest(coalesce(_retries, array_fill(null::boolean, array[_n])), _open)
                                       with ordinality as o(r, open, ord)
                        where o.open order by o.ord),
                 array(select o.t from unnest(_task_ids, _errs, _open) with ordinality as o(t, e, open, ord),
                                       jsonb_array_elements_text(o.e) with ordinality as m(msg, k)
                        where o.open order by o.ord, m.k),
                 array(select m.msg from unnest(_errs, _open) with ordinality as o(e, open, ord),
                                         jsonb_array_elements_text(o.e) with ordinality as m(msg, k)
                        where o.open order by o.ord, m.k),
                 array(select o.s from unnest(coalesce(_started_us, array_fill(null::bigint, array[_n])), _open)
                                       with ordinality as o(s, open, ord)
                        where o.open order by o.ord)
               ) with ordinality as s(task_id, result, ord);
        _k := 1;
        for _i in 1 .. _n loop
          continue when not _open[_i];
          if _ids[_k] <> _task_ids[_i] then
            raise exception 'completions out of order' using errcode = 'XX000';
          end if;
          _result[_i] := _settled[_k];
          if _settled[_k] not in ('completed', 'retry_scheduled') then
            -- Refused: nothing of this task may commit.
            _open[_i] := false;
            _refused := true;
          end if;
          _k := _k + 1;
        end loop;
        if _refused then
          raise exception 'a completion of the call was refused' using errcode = 'QREFU';
        end if;
      end if;
    exception when sqlstate 'QREFU' then
      -- Everything of this pass rolled back; the others again, without the refused ones.
      null;
    end;
    exit when not _refused;
  end loop;

  return query
  select s.t, s.r, s.o, array(select jsonb_array_elements_text(coalesce(s.e, '[]')))
    from unnest(_task_ids, _result, _out, _errs) with ordinality as s(t, r, o, e, ord)
   order by s.ord;
end;
$$;

revoke execute on function queues.settle_with_handlers(bigint[], bigint[], text[], boolean[], bigint[], text[],
                                                       text[], jsonb[], text[], text[], bigint[], text[]) from public;
grant execute on function queues.settle_with_handlers(bigint[], bigint[], text[], boolean[], bigint[], text[],
                                                      text[], jsonb[], text[], text[], bigint[], text[]) to :DATABASE_WORKER;
--! EndIncluded queues/settle.sql
