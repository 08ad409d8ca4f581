--! Previous: sha1:439c0fb2292221326e62cc5039b6553dfc6a2e91
--! Hash: sha1:eb4a7bf41d52c5b9635efe7c6be26046f0fc657e
--! Message: Steps in batches, history maintenance in short steps, lean enqueue, suspects paced, endpoints at scale, start marks and heartbeats that never wait, per-process supervisor functions

--! split: 400-batched-steps.sql
set local lock_timeout = '5s';

-- Server-side steps in batches: queues.run_steps runs consecutive steps of one function in
-- one statement and completes them in one statement (queues.complete_steps), falling back
-- to one step at a time (queues.run_step) when a step raises or a completion is refused.
--! Included queues/steps.sql
-- Server-side steps: db_function tasks run in the database, many per call.
--
--   queues.parse_envelope(result)            a step function's result envelope, read
--   queues.is_current_lease(task, lease)     read only: is the lease still current
--   queues.current_leases(tasks, leases)     the same for many, one boolean each
--   queues.run_step(task, lease, fn, payload)   one step with its completion (the reference)
--   queues.complete_steps(...)               the completions and results of many steps
--   queues.run_steps(tasks, leases, fns, payloads)   many steps in one call (the worker's)

-- Reads a function's result envelope (the worker's parseEnvelope, in SQL):
--   {status: text, payload?}                                   succeeded | status
--   {success: bool, error?, validation_failure_message?, payload?}   succeeded | error | invalid
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
  if _result ? 'success' then
    select string_agg(k, ', ') into _extra from jsonb_object_keys(_result) k
     where k not in ('success', 'error', 'validation_failure_message', 'payload');
    if _extra is not null then
      outcome := 'malformed'; message := format('malformed result envelope: unrecognized key(s) %s', _extra); return;
    end if;
    if jsonb_typeof(_result -> 'success') <> 'boolean' then
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

-- Whether _task_lease_id is still the current lease of _task_id (read only: no lock, no
-- fact). The worker's steps check it before they run.
create or replace function queues.is_current_lease(_task_id bigint, _task_lease_id bigint)
  returns boolean
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from queues.task_pending p
                  where p.task_id = _task_id and p.current_lease_id = _task_lease_id)
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
                                       where p.task_id = i.task_id) = i.task_lease_id, false)
                            order by i.ord), '{}')
    from unnest(_task_ids, _task_lease_ids) with ordinality as i(task_id, task_lease_id, ord)
$$;

-- Runs one db_function step with its completion, in a subtransaction of their own:
-- internal.run_function(_function_name, _payload), then the completion fenced by the lease
-- (queues.settle_tasks), so the step's writes and its completion commit together or not
-- at all, exactly once. Outcomes as the worker's db_function processor: success and
-- status complete 'succeeded' (a status is returned as note); error and validation failure
-- keep the writes and complete 'failed' with an error row (a validation failure is never
-- retried); a malformed envelope or an exception rolls the step back, then completes
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
          outcome := 'failed'; error := format('%s: validation failure: %s', _function_name, _env.message);
          note := _env.message;
        else outcome := 'failed'; error := format('%s: %s', _function_name, _env.message);
      end case;
      select s.result into result
        from queues.settle_tasks('{}', '{}', array[_task_id], array[_task_lease_id], array[outcome],
                                 -- A validation failure is final: no retry.
                                 array[case when _env.outcome = 'invalid' then false end],
                                 case when error is null then '{}'::bigint[] else array[_task_id] end,
                                 case when error is null then '{}'::text[] else array[error] end) s;
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
        from queues.settle_tasks('{}', '{}', array[_task_id], array[_task_lease_id], array['failed'], null,
                                 array[_task_id], array[error]) s;
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
      from queues.settle_tasks('{}', '{}', _task_ids, _task_lease_ids, _outcomes, _retries,
                               _error_task_ids, _error_messages) s
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
-- guarantees of queues.run_step for each: a step's writes and its completion commit
-- together or not at all, exactly once; an error is recorded against its own task and
-- rolls back only its own step; a step whose lease is no longer held is not run, and one
-- whose lease is lost before the call ends is not completed and its writes do not commit.
-- The caller marks the steps started before the call (as the worker's start recorder does
-- for every task).
--
-- How (the cost per step is a function call, not a statement per step):
--   1. queues.current_leases: the steps whose lease is held (the others: 'lease_lost').
--   2. Consecutive steps of one function form a group, run in one statement
--      (select array_agg(f(payload)) ...) in a subtransaction; the function is resolved and
--      its EXECUTE privilege checked once per call, as internal.run_function does. If the
--      statement raises (a step raised, deadlocked, ...) or an envelope is malformed, the
--      group is rolled back and its steps run one by one (queues.run_step), each with its
--      own completion.
--   3. One statement completes the steps of every group that ran whole and keeps their
--      envelopes as results (queues.complete_steps). No lock is held on a step's task
--      while it runs (heartbeats and revocations are not held up); so if any of these
--      completions is refused (the lease was taken over during the call, or a step
--      changed another step's task), everything above is rolled back and every step runs
--      again one by one with queues.run_step, which fences each on its own.
-- A step sees the writes of the steps before it in the call; it does not see their
-- completions (they are written at the end). The call is one transaction: now() is the
-- call's start for every step in it (the worker keeps a call to about 200 ms of steps).
-- Runs as the caller (security invoker): steps have the worker's privileges, not the owner's.
-- Returns one row per step, in input order: result as queues.complete_tasks ('completed',
-- 'retry_scheduled', 'lease_lost', ...) or 'transient' (a serialization failure or deadlock
-- rolled the step back and recorded nothing: release the lease, it runs again), with
-- outcome, error, note.
create or replace function queues.run_steps(_task_ids bigint[], _task_lease_ids bigint[], _function_names text[], _payloads jsonb[])
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
  -- The envelope to keep, for steps completed by the final statement (null otherwise).
  _kept jsonb[];
  _batched boolean[];
  -- Functions resolved in this call: name, statement that runs a group, or why it cannot run.
  _names text[] := '{}';
  _calls text[] := '{}';
  _problems text[] := '{}';
  _oid regprocedure;
  _call text;
  _problem text;
  _i integer;
  _j integer;
  _k integer;
  _m integer;
  _name text;
  _raws jsonb[];
  _raw jsonb;
  _env record;
  _one record;
  _ids bigint[];
  _settled text[];
begin
  if _task_ids is null or _task_lease_ids is null or _function_names is null or _payloads is null then
    raise exception 'task_ids, task_lease_ids, function_names and payloads must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> cardinality(_task_ids) or cardinality(_function_names) <> cardinality(_task_ids)
     or cardinality(_payloads) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids, function_names and payloads must have one element per task' using errcode = '22023';
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

  begin
    _i := 1;
    while _i <= _n loop
      if not _held[_i] then
        -- Not run.
        _result[_i] := 'lease_lost';
        _i := _i + 1;
        continue;
      end if;
      _name := _function_names[_i];
      _j := _i;
      while _j < _n and _held[_j + 1] and _function_names[_j + 1] is not distinct from _name loop
        _j := _j + 1;
      end loop;

      _k := array_position(_names, _name);
      if _k is null then
        -- Resolved as internal.run_function does, once per call.
        begin
          _oid := internal.resolve_runnable_function(_name);
          if not has_function_privilege(_oid, 'execute') then
            raise exception 'permission denied: % may not execute %', current_user, _name using errcode = '42501';
          end if;
          select format('select array_agg(%I.%I(u.payload) order by u.ord) from unnest($1::jsonb[]) with ordinality as u(payload, ord)',
                        n.nspname, p.proname)
            into _call
            from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where p.oid = _oid;
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
        for _m in _i .. _j loop
          _outcome[_m] := 'failed';
          _error[_m] := _problems[_k];
          _batched[_m] := true;
        end loop;
      else
        begin
          execute _calls[_k] into _raws using _payloads[_i:_j];
          _m := _i;
          foreach _raw in array _raws loop
            if _raw = '{"success": true}'::jsonb then
              _outcome[_m] := 'succeeded';
            else
              select * into _env from queues.parse_envelope(_raw);
              case _env.outcome
                when 'succeeded' then _outcome[_m] := 'succeeded';
                when 'status' then _outcome[_m] := 'succeeded'; _note[_m] := 'status ' || _env.message;
                when 'invalid' then
                  _outcome[_m] := 'failed'; _error[_m] := format('%s: validation failure: %s', _name, _env.message);
                  _note[_m] := _env.message;
                  -- A validation failure is final: no retry.
                  _retry[_m] := false;
                when 'error' then _outcome[_m] := 'failed'; _error[_m] := format('%s: %s', _name, _env.message);
                else
                  -- Malformed: this step rolls back, so the group runs again one by one.
                  raise exception 'malformed envelope' using errcode = 'QSTEP';
              end case;
            end if;
            _kept[_m] := _raw;
            _batched[_m] := true;
            _m := _m + 1;
          end loop;
        exception when others then
          -- The group is rolled back: its steps run one by one, each with its completion.
          for _m in _i .. _j loop
            _outcome[_m] := null; _error[_m] := null; _note[_m] := null; _retry[_m] := null;
            _kept[_m] := null; _batched[_m] := false;
            select * into _one from queues.run_step(_task_ids[_m], _task_lease_ids[_m], _name, _payloads[_m]);
            _result[_m] := _one.result;
            _outcome[_m] := _one.outcome;
            _error[_m] := _one.error;
            _note[_m] := _one.note;
          end loop;
        end;
      end if;
      _i := _j + 1;
    end loop;

    -- The completions (and kept envelopes) of every step that ran in a group, in one statement.
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
        -- A completion refused: the writes of its step must not commit. Roll back and run
        -- every step one by one.
        raise exception 'a completion was refused' using errcode = 'QREFU';
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
  exception when others then
    -- Everything above is rolled back: the steps run one by one, each fenced on its own.
    for _i in 1 .. _n loop
      select * into _one from queues.run_step(_task_ids[_i], _task_lease_ids[_i], _function_names[_i], _payloads[_i]);
      _result[_i] := _one.result;
      _outcome[_i] := _one.outcome;
      _error[_i] := _one.error;
      _note[_i] := _one.note;
    end loop;
  end;

  return query
  select s.task_id, s.result, s.outcome, s.error, s.note
    from unnest(_task_ids, _result, _outcome, _error, _note) with ordinality as s(task_id, result, outcome, error, note, ord)
   order by s.ord;
end;
$$;
--! EndIncluded queues/steps.sql
--! Included queues/privileges-hot-path.sql
-- Grants of the worker's hot-path functions (settle, steps, revocation of a dead
-- process's leases); included after the files that define them. queues/privileges.sql
-- revokes EXECUTE from PUBLIC on every queue function first.

revoke execute on all functions in schema queues from public;

grant execute on function
  queues.settle_tasks(bigint[], bigint[], bigint[], bigint[], text[], boolean[], bigint[], text[]),
  queues.run_steps(bigint[], bigint[], text[], jsonb[]),
  queues.run_step(bigint, bigint, text, jsonb),
  queues.complete_steps(bigint[], bigint[], text[], boolean[], bigint[], text[], jsonb[]),
  queues.current_leases(bigint[], bigint[]),
  queues.parse_envelope(jsonb),
  queues.is_current_lease(bigint, bigint),
  queues.mark_started(bigint[], bigint[]),
  queues.revoke_worker_leases(text)
to :DATABASE_WORKER;
--! EndIncluded queues/privileges-hot-path.sql

--! split: 420-history-dashboard.sql
-- What operators see of the history: when each partition set was created, the History
-- page's status (admin.history_status), and process timelines that say which of their
-- queue tasks retention dropped.
set local lock_timeout = '5s';

-- When maintenance created each partition set (queues.create_history_partition). Sets
-- made before this table existed have no row.
create table if not exists queues.history_partition_created (
  lower_bound bigint primary key,
  upper_bound bigint not null check (upper_bound > lower_bound),
  created_at  timestamptz not null default now()
);
comment on table queues.history_partition_created is
  'Append-only: partition sets of queue history created by maintenance (task ids [lower_bound, upper_bound)).';
drop trigger if exists forbid_update on queues.history_partition_created;
create trigger forbid_update before update on queues.history_partition_created
  for each statement execute function queues.forbid_fact_update();

--! Included queues/partitions.sql
-- History partitions: queues.task and every fact table keyed by task are range-partitioned
-- by task_id, all on the same bounds (a "partition set"). Old history leaves by dropping a
-- whole set, never by row-by-row DELETE. Settings: queues.history_setting; what was
-- dropped: queues.history_partition_dropped (both in migrations/committed/000004); when
-- each set was created: queues.history_partition_created.
--
-- Why task_id and not time: every fact carries task_id, so a row is routed without an
-- extra column; a task and all its facts sit in the same set, so a set can be dropped
-- alone; every lookup of the hot path is by task_id, so it is pruned to one partition;
-- and ids only grow, so a set whose range lies below the id sequence receives no new
-- task. docs/operations.md ("Retention and partitions") has the full reasoning.
--
--   queues.history_tables()                    the partitioned tables, parent first
--   queues.lock_history_tables(t, m, ms)       a step's locks, between transactions; owner only
--   queues.cancel_autovacuum(t)                cancels autovacuum of tables a step must lock; owner only
--   queues.create_history_table(t, name)       a standalone table like t, to attach; owner only
--   queues.attach_history_partition(t, lo, hi) one table's partition of a set, owner only
--   queues.create_history_partition(lo, hi)    one set [lo, hi), owner only
--   queues.adopt_history_range(lo, hi)         a set [lo, hi) of rows in the default
--                                              partitions, moved out of them; owner only
--   queues.history_partition_bounds()          every table's partitions and their bounds
--   queues.history_sets()                      the sets' bounds, from the catalog only
--   queues.history_walk(_before)               the id ranges a newest-first read walks
--   queues.history_set_bytes(lower_bounds)     the table and index bytes of the sets given
--   queues.history_partition_sizes()           the sets with table and index bytes
--   queues.measure_history_sets(_now)          the sets that are done, measured for readers
--                                              (queues.history_set_measured); owner only
--   queues.history_partitions()                the sets with their total bytes
--   queues.maintain_history_step_at(_now)      one short step of maintenance; owner only
--   queues.maintain_history_step(payload)      the same at now(), a runnable db_function
--                                              (the schedule's: one transaction per step)
--   queues.maintain_history_at(_now)           every step in one transaction; owner only
--   queues.maintain_history(payload)           the same at now(), a runnable db_function
--   queues.history_summary_at(_now)            settings, oldest task, what the next drop waits for
--   queues.history_status_at(_now)             the same with the sets and their sizes
--
-- Locks. The claim and the completion read queues.task, task_lease_started and
-- task_completed through generic plans, which lock every partition of those tables,
-- default included, and every writer takes ROW EXCLUSIVE on the parents. So each step
-- locks one table (its parent, the partition, the default) in the order the hot path
-- takes its own (parent, then partition, then default), without waiting in a lock queue
-- (queues.lock_history_tables: asked for without waiting, again every few ms, for up to
-- lock_timeout_ms, then one last try that waits at most 50 ms), and holds the locks only
-- for a catalog change, in a transaction of its own when run by the schedule
-- (queues.maintain_history_step with "repeat"): a claim waits behind maintenance at most
-- 50 ms plus that change. Measured locks (PostgreSQL 18):
--   create table .. partition of     ACCESS EXCLUSIVE on the parent and its default: not used
--   create table (like ..) + attach  SHARE UPDATE EXCLUSIVE on the parent (no conflict with
--                                    DML), ACCESS EXCLUSIVE on the default partition (a
--                                    conflict only for task, task_lease_started and
--                                    task_completed, whose defaults the hot path's plans lock)
--                                    and, for a set made late (its range within reach of the
--                                    ids handed out), SHARE on the parent first: writers of
--                                    that table wait for the attach (a writer that routed its
--                                    row before the attach commits would fail on the
--                                    default's new constraint; see attach_history_partition)
--   detach partition                 ACCESS EXCLUSIVE on the parent, default and partition;
--                                    catalog only (no scan); detach concurrently is refused
--                                    while a default partition exists, and in a function
--   drop table (attached partition)  the same plus unlinking its files under those locks:
--                                    not used; a detached table is dropped instead, which
--                                    locks only itself, except a table with a foreign key
--                                    (none today), whose drop takes ACCESS EXCLUSIVE on
--                                    the table it references: it is truncated first (under
--                                    its own lock only), so that drop is a catalog change

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now']
$$;

-- The partition of _table holding [_lower, _upper) is named <table>_p<lower>.
-- No SET clause: a function with one is never inlined, and the status pages name every
-- partition of every set with it (196 calls at 14 sets). It names no object, so the
-- search path cannot change what it does (like admin.pending_state).
create or replace function queues.history_partition_name(_table text, _lower bigint) returns text
  language sql immutable parallel safe
as $$
  select _table || '_p' || _lower::text
$$;

-- Cancels the autovacuum workers that hold a lock on one of _tables (names in schema
-- queues) in this database, as PostgreSQL itself does for a lock request that has waited
-- deadlock_timeout (1 s): a maintenance step never waits that long (claims would queue
-- behind it), so without this a long autovacuum of a default partition or of a set kept
-- every step that must lock that table skipping until it ended. Autovacuum comes back
-- later. An autovacuum that prevents wraparound (the table's age past
-- autovacuum_freeze_max_age or autovacuum_multixact_freeze_max_age) is left alone, as
-- PostgreSQL leaves it. Needs membership in pg_signal_autovacuum_worker (PostgreSQL 18;
-- the owner gets it when the database users are provisioned, docs/operations.md);
-- without it, nothing is cancelled. Returns how many were cancelled. Owner only.
create or replace function queues.cancel_autovacuum(_tables text[])
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pid integer;
  _cancelled integer := 0;
begin
  for _pid in
    select distinct l.pid
      from pg_locks l
      join pg_stat_activity a on a.pid = l.pid
      join pg_class c on c.oid = l.relation
     where l.locktype = 'relation' and l.granted
       and l.database = (select d.oid from pg_database d where d.datname = current_database())
       -- An autovacuum worker runs as no role: its usesysid is null, and a role without
       -- pg_read_all_stats sees its backend_type as null too (it is shown to those with it).
       and a.usesysid is null and coalesce(a.backend_type, 'autovacuum worker') = 'autovacuum worker'
       and c.relnamespace = 'queues'::regnamespace and c.relname = any (_tables)
       and age(c.relfrozenxid) < current_setting('autovacuum_freeze_max_age')::bigint
       and mxid_age(c.relminmxid) < current_setting('autovacuum_multixact_freeze_max_age')::bigint
  loop
    begin
      if pg_cancel_backend(_pid) then
        _cancelled := _cancelled + 1;
      end if;
    exception
      when insufficient_privilege then
        return _cancelled;
    end;
  end loop;
  return _cancelled;
end;
$$;

-- Takes the locks of one maintenance step, _modes[i] on queues._tables[i] (only the table
-- named: a partitioned parent's partitions are not locked with it), in order, without
-- waiting in a lock queue until its last try: each try asks for every lock with NOWAIT,
-- and a try that meets a holder gives back what it took and tries again 1 to 4 ms later,
-- until the locks are had or _within_ms has passed; then one last try waits in the queue
-- for at most 50 ms, and failing that, lock_not_available (55P03, naming the tables and
-- the tries). Why not wait: a lock request that waits holds every later request behind
-- it, so a claim would queue behind maintenance for as long as the longest transaction in
-- flight keeps maintenance waiting (a batch of server-side steps holds task's partitions
-- for tens of milliseconds; under a steady load one is always in flight, so a waiting
-- request rarely got its lock within a short lock_timeout). Asking without waiting takes
-- the moments between transactions and leaves the queue's own order alone (but see the
-- two 50 ms below). Modes: 'share update exclusive', 'share', 'access exclusive'. Returns
-- the tries it took. Owner only.
create or replace function queues.lock_history_tables(_tables text[], _modes text[], _within_ms integer)
  returns integer
  language plpgsql volatile
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _deadline timestamptz;
  _tries integer := 0;
  _last boolean;
  _last_until timestamptz;
  _autovacuum_cancelled boolean := false;
begin
  if _tables is null or _modes is null or cardinality(_tables) = 0 or cardinality(_tables) <> cardinality(_modes) then
    raise exception 'tables and modes must be non-empty arrays of the same length' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m is null or m not in ('share update exclusive', 'share', 'access exclusive')) then
    raise exception 'a lock mode must be share update exclusive, share or access exclusive, got %', _modes
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_tables) t where t is null or to_regclass(format('queues.%I', t)) is null) then
    raise exception 'every table must name a table in schema queues, got %', _tables using errcode = '22023';
  end if;
  if _within_ms is null or _within_ms < 0 then
    raise exception 'within_ms must be 0 or more, got %', _within_ms using errcode = '22023';
  end if;
  -- A transaction that already holds a lock of this kind (steps run together, as in
  -- queues.maintain_history_at, or a partition made earlier in it) keeps the queue
  -- waiting while it tries, and a holder in its way may be waiting for it: it tries for
  -- at most 50 ms then.
  if exists (select 1 from pg_locks l
              where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.granted
                and l.mode in ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                               'ExclusiveLock', 'AccessExclusiveLock')) then
    _within_ms := least(_within_ms, 50);
  end if;
  _deadline := clock_timestamp() + make_interval(secs => _within_ms / 1000.0);
  loop
    _tries := _tries + 1;
    -- The last try, once the window has passed, waits in the queue for at most 50 ms
    -- (restored on return): transactions that follow one another without a moment
    -- between (one connection's statements back to back) are waited for, and whatever
    -- queues behind this try waits no longer.
    -- The 50 ms are for the whole try, however many tables it locks (each lock waits
    -- only for what is left of them).
    _last := clock_timestamp() >= _deadline;
    _last_until := clock_timestamp() + make_interval(secs => greatest(least(_within_ms, 50), 1) / 1000.0);
    begin
      for _i in 1 .. cardinality(_tables) loop
        if _last then
          perform set_config('lock_timeout',
            greatest(ceil(extract(epoch from _last_until - clock_timestamp()) * 1000), 1)::integer || 'ms', true);
        end if;
        -- The mode is one of the three above (checked), the table quoted as an identifier.
        execute format('lock table only queues.%I in %s mode%s', _tables[_i], _modes[_i],
                       case when _last then '' else ' nowait' end);
      end loop;
      return _tries;
    exception
      when lock_not_available then
        -- The block's locks are given back with it. An autovacuum in the way is cancelled
        -- (once per call); the next try, a few ms later, finds the table free.
        if not _autovacuum_cancelled then
          _autovacuum_cancelled := true;
          perform queues.cancel_autovacuum(_tables);
        end if;
    end;
    exit when _last;
    perform pg_sleep((1 + random() * 3) / 1000.0);
  end loop;
  raise exception 'could not lock % in % tries over % ms: other transactions held them throughout',
    array_to_string(_tables, ', '), _tries, _within_ms
    using errcode = '55P03';
end;
$$;

-- Creates queues._name, a standalone table like the history table _table (columns,
-- defaults, constraints, indexes) with the trigger that refuses updates (a statement
-- trigger on the parent does not fire for a statement that names the partition), to be
-- attached as its partition. Owner only.
create or replace function queues.create_history_table(_table text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('create table queues.%I (like queues.%I including defaults including constraints including indexes including storage)',
                 _name, _table);
  execute format('create trigger forbid_update before update on queues.%I
                    for each statement execute function queues.forbid_fact_update()', _name);
end;
$$;

-- Makes the partition [_lower, _upper) of the history table _table unless it exists: a
-- standalone table like its parent (columns, defaults, constraints, indexes) with the
-- trigger that refuses updates (a statement trigger on the parent does not fire for a
-- statement that names the partition), then attached to the parent. Attaching takes
-- SHARE UPDATE EXCLUSIVE on the parent where `create table .. partition of` takes ACCESS
-- EXCLUSIVE, and the new table is empty, so nothing is scanned. Returns whether it made
-- the partition. Owner only.
create or replace function queues.attach_history_partition(_table text, _lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
begin
  if _table is null or _table <> all (queues.history_tables()) then
    raise exception 'table must name a history table (queues.history_tables()), got %',
      coalesce(quote_literal(left(_table, 100)), 'null') using errcode = '22023';
  end if;
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  _name := queues.history_partition_name(_table, _lower);
  if to_regclass(format('queues.%I', _name)) is not null then
    return false;
  end if;
  -- A range within reach of the task ids handed out (within one set's width, or the
  -- 10,000 tasks a statement may enqueue, above the last one) may receive rows while it
  -- is attached: a writer that routed its row before the attach committed would send it
  -- to the default partition, wait there for the attach's lock, and then fail the
  -- default's new constraint ("new row for relation .._default violates partition
  -- constraint"). For such a range (a set made late), SHARE on the parent: taken when no
  -- writer is in flight, it holds new ones at the parent until commit; they then route
  -- with the new partition. A set made ahead of need, as maintenance makes them, is out
  -- of reach and needs no lock that writers wait for (under a steady load of writers, a
  -- moment without one is rare).
  -- Its locks first (queues.lock_history_tables: taken between transactions, never
  -- queued for): the parent, SHARE UPDATE EXCLUSIVE (what attaching takes; SHARE for a
  -- set made late), then the default partition, ACCESS EXCLUSIVE (attaching checks it
  -- holds no row of the range).
  perform queues.lock_history_tables(
    array[_table, _table || '_default'],
    array[case when _lower <= queues.last_task_id() + greatest(_upper - _lower, 10000) then 'share'
               else 'share update exclusive' end,
          'access exclusive'],
    (select s.lock_timeout_ms from queues.history_setting s));
  perform queues.create_history_table(_table, _name);
  execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                 _table, _name, _lower, _upper);
  return true;
end;
$$;

-- Creates the partition set [_lower, _upper) of every history table (those that exist
-- already are kept), task's last: a set is in use once task has its partition. One
-- transaction; maintenance makes a set one table per step instead. Records when in
-- queues.history_partition_created. Returns whether anything was created. Owner only.
create or replace function queues.create_history_partition(_lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _created boolean := false;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _created := queues.attach_history_partition(_table, _lower, _upper) or _created;
  end loop;
  if _created then
    insert into queues.history_partition_created (lower_bound, upper_bound)
    values (_lower, _upper) on conflict (lower_bound) do nothing;
  end if;
  return _created;
end;
$$;

-- Makes [_lower, _upper) a set from rows that fell into the default partitions (tasks
-- given ids while no set covered them, and their facts): for each history table without
-- a partition of that range, a standalone table like its parent, the range's rows moved
-- into it from the table's default partition (deleted there and inserted here, in this
-- transaction), then attached. Nothing is lost or seen twice: readers of the parent see
-- each row in the default until this commits and in the new partition after. The caller
-- holds every history table's parent (SHARE) and default (ACCESS EXCLUSIVE), so no row of
-- the range is written meanwhile. Records the set in queues.history_partition_created.
-- Returns the tasks moved. Owner only.
create or replace function queues.adopt_history_range(_lower bigint, _upper bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _name text;
  _columns text;
  _moved bigint;
  _tasks bigint := 0;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'range bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _name := queues.history_partition_name(_table, _lower);
    continue when to_regclass(format('queues.%I', _name)) is not null;
    perform queues.create_history_table(_table, _name);
    -- The parent's columns by name (each quoted as an identifier), in its order.
    select string_agg(format('%I', a.attname), ', ' order by a.attnum) into _columns
      from pg_attribute a
     where a.attrelid = format('queues.%I', _table)::regclass and a.attnum > 0 and not a.attisdropped;
    execute format('with moved as (delete from queues.%I where task_id >= $1 and task_id < $2 returning %s)
                    insert into queues.%I (%s) select %s from moved',
                   _table || '_default', _columns, _name, _columns, _columns)
      using _lower, _upper;
    get diagnostics _moved = row_count;
    if _table = 'task' then
      _tasks := _moved;
    end if;
    execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                   _table, _name, _lower, _upper);
  end loop;
  insert into queues.history_partition_created (lower_bound, upper_bound)
  values (_lower, _upper) on conflict (lower_bound) do nothing;
  return _tasks;
end;
$$;

-- Every partition of every history table but the defaults, with its bounds. Owner only.
create or replace function queues.history_partition_bounds()
  returns table (table_name text, partition_name text, lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.name, c.relname::text, m.b[1]::bigint, m.b[2]::bigint
    from unnest(queues.history_tables()) t(name)
    join pg_inherits i on i.inhparent = to_regclass(format('queues.%I', t.name))
    join pg_class c on c.oid = i.inhrelid
   cross join lateral regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?\d+)''?\) TO \(''?(-?\d+)''?\)') as m(b)
   where m.b is not null
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last: bounds and the planner's
-- estimate of their tasks only, from the catalog (no relation is opened). What the list
-- endpoints walk and maintenance reads; queues.history_partitions() adds sizes.
create or replace function queues.history_sets()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  -- A bound reads FOR VALUES FROM ('<lower>') TO ('<upper>'), or DEFAULT. It holds no
  -- column, so it is deparsed without opening the partition (relation 0), and its two
  -- quoted values are the 2nd and 4th fields between quotes (a regular expression took
  -- 10 us a row).
  select nullif(split_part(b.bound, '''', 2), '')::bigint, nullif(split_part(b.bound, '''', 4), '')::bigint,
         b.relname::text, greatest(b.reltuples, 0)::bigint, b.bound = 'DEFAULT'
    from (select c.relname, c.reltuples, pg_get_expr(c.relpartbound, 0) as bound
            from pg_inherits i
            join pg_class c on c.oid = i.inhrelid
           where i.inhparent = 'queues.task'::regclass) b
   order by b.bound = 'DEFAULT', 1
$$;

-- The task id ranges [lower_bound, upper_bound) that a newest-first read of history
-- walks, newest first: the sets that can hold a task below _before (null: any) and not
-- above the last task id handed out (sets above it hold none), upper bounds capped at
-- _before. Each range is one set, except the first, which spans the two newest: the set
-- being filled may have begun a moment ago, and two partitions per table cost the planner
-- little more than one, so a page usually takes one statement. A reader that gives each
-- range's bounds to its statement as values gets a plan of these partitions only.
-- While the default partition holds a task (outside every set; normally none), one range
-- instead, (null, _before): everything below _before, in one statement.
create or replace function queues.history_walk(_before bigint)
  returns table (lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (
    select s.lower_bound, least(s.upper_bound, _before) as upper_bound,
           row_number() over (order by s.lower_bound desc) as n
      from queues.history_sets() s
     where not s.is_default
       -- once, not once per set (a call reads the sequence's catalog entry)
       and s.lower_bound <= (select queues.last_task_id())
       and (_before is null or s.lower_bound < _before)
  ),
  walk as (
    select coalesce((select b.lower_bound from s b where b.n = 2), a.lower_bound) as lower_bound, a.upper_bound
      from s a where a.n = 1
    union all
    select s.lower_bound, s.upper_bound from s where s.n > 2
  ),
  spill as (select exists (select 1 from queues.task_default) as any)
  select w.lower_bound, w.upper_bound from walk w, spill where not spill.any
  union all
  select null, _before from spill where spill.any
  order by 1 desc nulls first
$$;

-- The bytes of the sets whose lower bounds are given (a null element: the default
-- partitions), summed over every history table: the data of tables with their TOAST, and
-- of their indexes (each relation's main fork: its free space and visibility maps, a
-- fraction of a percent, are left out, which halves the files looked at). Each partition
-- is looked up by name (queues.history_partition_name) through the catalog's name index;
-- sizing opens each partition and its indexes (a lock and a file size each, about 50
-- relations a set), so this is the one place that costs per partition: callers pass
-- every set they need in one call (one plan).
create or replace function queues.history_set_bytes(_lower_bounds bigint[])
  returns table (lower_bound bigint, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select l.lower_bound,
         coalesce(sum(pg_relation_size(c.oid) + coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0)), 0)::bigint,
         coalesce(sum((select sum(pg_relation_size(i.indexrelid)) from pg_index i where i.indrelid = c.oid)), 0)::bigint
    from unnest(_lower_bounds) l(lower_bound)
   cross join unnest(queues.history_tables()) t(name)
    left join pg_class c on c.relnamespace = 'queues'::regnamespace
                        and c.relname = case when l.lower_bound is null then t.name || '_default'
                                             else queues.history_partition_name(t.name, l.lower_bound) end
   group by l.lower_bound
$$;

-- queues.history_sets() with each set's bytes (queues.history_set_bytes), every set sized
-- on each call: the History page reads queues.history_set_measured for the sets that are
-- done instead (admin.history_status_at).
create or replace function queues.history_partition_sizes()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (select * from queues.history_sets())
  select s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default,
         b.table_bytes, b.index_bytes
    from s
    join queues.history_set_bytes(array(select s.lower_bound from s)) b
      on b.lower_bound is not distinct from s.lower_bound
   order by s.is_default, s.lower_bound
$$;

-- Measures the sets that are done into queues.history_set_measured: every set whose range
-- lies below the last task id and that holds no pending task, with its bytes
-- (queues.history_set_bytes) and its oldest and newest task. Such a set's tables change
-- only by a rare late fact (a redrive, a revocation or start mark that arrives after the
-- completion) until it is dropped, so a reader that answers often (the History page, every
-- dashboard's poll and /metrics) takes its figures from here and sizes only the sets still
-- filling. A row is written only when a figure changed; rows of sets no longer there are
-- deleted. Maintenance calls it at the end of each run (queues.maintain_history_step_at).
-- Returns the number of sets whose figures were written. Owner only.
create or replace function queues.measure_history_sets(_now timestamptz)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _last_id bigint := queues.last_task_id();
  _written integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  delete from queues.history_set_measured m
   where not exists (select 1 from queues.history_sets() s
                      where s.lower_bound = m.lower_bound and s.upper_bound = m.upper_bound);
  with done as (
    select s.lower_bound, s.upper_bound
      from queues.history_sets() s
     where not s.is_default and s.upper_bound <= _last_id
       and not exists (select 1 from queues.task_pending tp
                        where tp.task_id >= s.lower_bound and tp.task_id < s.upper_bound)
  ),
  measured as (
    select d.lower_bound, d.upper_bound, f.task_id as first_task_id, f.enqueued_at as first_enqueued_at,
           n.task_id as last_task_id, b.table_bytes, b.index_bytes
      from done d
      join queues.history_set_bytes(array(select d.lower_bound from done d)) b on b.lower_bound = d.lower_bound
      left join lateral (select t.task_id, t.enqueued_at from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id limit 1) f on true
      left join lateral (select t.task_id from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id desc limit 1) n on true
  )
  insert into queues.history_set_measured as m
         (lower_bound, upper_bound, first_task_id, first_enqueued_at, last_task_id, table_bytes, index_bytes,
          measured_at)
  select x.lower_bound, x.upper_bound, x.first_task_id, x.first_enqueued_at, x.last_task_id, x.table_bytes,
         x.index_bytes, _now
    from measured x
  on conflict (lower_bound) do update
     set upper_bound = excluded.upper_bound, first_task_id = excluded.first_task_id,
         first_enqueued_at = excluded.first_enqueued_at, last_task_id = excluded.last_task_id,
         table_bytes = excluded.table_bytes, index_bytes = excluded.index_bytes, measured_at = excluded.measured_at
   where (m.upper_bound, m.first_task_id, m.first_enqueued_at, m.last_task_id, m.table_bytes, m.index_bytes)
         is distinct from (excluded.upper_bound, excluded.first_task_id, excluded.first_enqueued_at,
                           excluded.last_task_id, excluded.table_bytes, excluded.index_bytes);
  get diagnostics _written = row_count;
  return _written;
end;
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last. Sizes are summed over
-- every history table (tables, TOAST and indexes); tasks is the planner's estimate.
create or replace function queues.history_partitions()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, total_bytes bigint, is_default boolean)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.lower_bound, p.upper_bound, p.partition_name, p.estimated_tasks,
         p.table_bytes + p.index_bytes, p.is_default
    from queues.history_partition_sizes() p
   order by p.is_default, p.lower_bound
$$;

-- The last task id handed out (0 before the first task).
create or replace function queues.last_task_id() returns bigint
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(pg_sequence_last_value(pg_get_serial_sequence('queues.task', 'task_id')::regclass), 0)
$$;

-- One step of partition maintenance at _now: the first of these that has work to do,
-- locking one table only (see "Locks" above), its locks taken between the queue's
-- transactions within lock_timeout_ms (queues.lock_history_tables):
-- 1. Sets ahead of need, one table per step: first a set left half made (some table has
--    its partition, task not yet; task's is made last), then a new set above every range
--    there is or was and above any task in the default partition, of partition_size task
--    ids, while the sets above the last task id handed out cover less than
--    partitions_ahead * partition_size ids. A set less than partition_size ids above the
--    last id (maintenance fell behind) is made whole in one step instead, above the last id.
-- 1b. Tasks in the default partition (ids handed out while no set covered them) are made
--    a set with their facts, at most 2,000 tasks per step: a half made set they fell into
--    is finished so, or a range of the gap they lie in (queues.adopt_history_range).
-- 2. A table detached from a dropped set is dropped (truncated first if it has rows and
--    a foreign key).
-- 3. A fact table's partition of a dropped set is detached.
-- 4. The oldest set that may go is dropped, starting with its task partition, which is
--    detached (the set's tasks are gone from then on; steps 3 and 2 take its facts and the
--    detached tables away): a set goes when its whole range lies below the last task id
--    (no new task can land in it), it holds no pending task (queues.task_pending, then
--    every task checked against its completion), and its newest completion is older than
--    the retention window. A set with one pending task is kept, however old.
-- 5. With nothing else to do: the sets that are done are measured for the History page
--    (queues.measure_history_sets).
-- Drops are recorded in queues.history_partition_dropped. A step that cannot get its lock
-- in time (or finds a task fell into the default partition in the range it makes) is
-- rolled back, recorded in queues.history_step_skipped and reported skipped; the run goes
-- on ("more") until 5 steps have been skipped within a minute. Returns
--   {"action": "attached" | "set_created" | "set_adopted" | "dropped_table" | "truncated" | "detached" |
--              "set_dropped" | "none" | "skipped" | "busy",
--    "table", "lower_bound", "upper_bound", "tasks", "reason", "late": as they apply,
--    "measured": with "none", the sets whose figures step 5 wrote,
--    "kept": sets below the last task id kept so far, "more": whether to call again}
-- "busy": another maintenance step is in flight (one maintainer at a time). Owner only.
create or replace function queues.maintain_history_step_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  -- A bound for any other lock a statement here might wait for (its own are taken
  -- first, without waiting); restored when the function returns.
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint;
  _doing text;
  _table text;
  _name text;
  _lower bigint;
  _upper bigint;
  _truncate boolean;
  _kept integer := 0;
  _set record;
  _tasks bigint;
  _last_completed timestamptz;
  _measured integer;
  _spilled bigint;
  _gap_lower bigint;
  _gap_upper bigint;
  -- The locks that keep every writer of history out (a late set, a move out of the
  -- default partitions): SHARE on each parent, ACCESS EXCLUSIVE on its default.
  _writers_out text[] := array(select x from unnest(queues.history_tables()) t(name),
                                 lateral (values (t.name), (t.name || '_default')) v(x));
  _writers_out_modes text[] := array(select m from unnest(queues.history_tables()) t(name),
                                       lateral (values ('share'), ('access exclusive')) v(m));
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if not pg_try_advisory_xact_lock(20252, 1) then
    return jsonb_build_object('action', 'busy', 'more', false);
  end if;
  select * into _setting from queues.history_setting;
  _last_id := queues.last_task_id();

  begin
    -- 1. Ahead of need: a half made set, unless a task fell into the default partition in
    --    its range (maintenance fell behind while it was half made): then task's
    --    partition cannot be attached, new sets start above it, and step 1b finishes it
    --    by moving those tasks into it.
    with b as (select * from queues.history_partition_bounds())
    select h.lower_bound, h.upper_bound into _lower, _upper
      from (select distinct b.lower_bound, b.upper_bound from b) h
     where not exists (select 1 from b x where x.table_name = 'task' and x.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.task_default t where t.task_id >= h.lower_bound and t.task_id < h.upper_bound)
     order by h.lower_bound
     limit 1;
    if _lower is null then
      -- A new set. Ranges are never reused: above every partition there is or was, and
      -- above any task in the default partition (a new set cannot overlap rows there).
      select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                      coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                      coalesce((select max(t.task_id) + 1 from queues.task_default t), 0))
        into _lower;
      if _lower < _last_id + 1 + _setting.partitions_ahead::bigint * _setting.partition_size then
        _upper := _lower + _setting.partition_size;
      else
        _lower := null;
      end if;
    end if;
    if _lower is not null and _lower <= _last_id + _setting.partition_size then
      -- Late: less than one set's width of ids is left before the ids handed out reach
      -- the set (maintenance fell behind). Made table by table, it could be outrun: a
      -- task given an id in its range before task's partition exists falls into the
      -- default partition, its facts into theirs, and the next table's attach fails on
      -- them, run after run. So the whole set is made in this one step, under locks
      -- that keep every writer of history out (SHARE on each parent, ACCESS EXCLUSIVE on
      -- each default), starting above the last id read under them: no task of its range
      -- exists, and none can be written until it commits. The ids handed out before it
      -- fall into the default partitions (queues.history_summary_at counts them).
      _doing := format('make the set from %s at once (late)', _lower);
      perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
      _last_id := queues.last_task_id();
      if exists (select 1 from queues.history_partition_bounds() b where b.lower_bound = _lower)
         and not exists (select 1 from queues.task_default t where t.task_id >= _lower and t.task_id < _upper) then
        null; -- a half made set that no task has reached: finished as it is
      else
        select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                        coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                        coalesce((select max(t.task_id) + 1 from queues.task_default t), 0),
                        _last_id + 1)
          into _lower;
        _upper := _lower + _setting.partition_size;
      end if;
      perform queues.create_history_partition(_lower, _upper);
      return jsonb_build_object('action', 'set_created', 'table', queues.history_partition_name('task', _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'late', true, 'more', true);
    end if;
    if _lower is not null then
      select t.name into _table
        from unnest(queues.history_tables()) with ordinality t(name, n)
       where to_regclass(format('queues.%I', queues.history_partition_name(t.name, _lower))) is null
       order by t.name = 'task', t.n
       limit 1;
      _doing := format('attach queues.%I', queues.history_partition_name(_table, _lower));
      perform queues.attach_history_partition(_table, _lower, _upper);
      if _table = 'task' then
        insert into queues.history_partition_created (lower_bound, upper_bound)
        values (_lower, _upper) on conflict (lower_bound) do nothing;
      end if;
      return jsonb_build_object('action', case when _table = 'task' then 'set_created' else 'attached' end,
                                'table', queues.history_partition_name(_table, _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'more', true);
    end if;

    -- 1b. Tasks in the default partition (ids handed out while no set covered them): the
    --    range around the lowest is made a set, its rows moved out of the default
    --    partitions (queues.adopt_history_range), so that retention drops them with it
    --    and pending ones stay claimable. The range: a half made set's own (finished so),
    --    or the gap between the ranges there are or were, below the lowest range above
    --    the task and cut after its 2,000th task (a step moves at most that many tasks,
    --    with their facts, under its locks). Not while no range lies above the task: the
    --    ids may still be handed out, and step 1 makes the set above them first.
    select t.task_id into _spilled from queues.task_default t order by t.task_id limit 1;
    if _spilled is not null then
      with r as (
        select b.lower_bound, b.upper_bound from queues.history_partition_bounds() b
        union all
        select d.lower_bound, d.upper_bound from queues.history_partition_dropped d
      )
      select (select min(r.lower_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             (select max(r.upper_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             coalesce((select max(r.upper_bound) from r where r.upper_bound <= _spilled), 0),
             (select min(r.lower_bound) from r where r.lower_bound > _spilled)
        into _lower, _upper, _gap_lower, _gap_upper;
      if _lower is null and _gap_upper is not null then
        -- The gap, cut after its 2,000th task.
        _lower := _gap_lower;
        _upper := least(_gap_upper,
                        coalesce((select t.task_id from queues.task_default t
                                   where t.task_id >= _spilled and t.task_id < _gap_upper
                                   order by t.task_id offset 2000 limit 1), _gap_upper));
      end if;
      if _upper is not null and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = _lower) then
        _doing := format('adopt the default partitions'' tasks in [%s, %s)', _lower, _upper);
        perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
        _tasks := queues.adopt_history_range(_lower, _upper);
        return jsonb_build_object('action', 'set_adopted', 'table', queues.history_partition_name('task', _lower),
                                  'lower_bound', _lower, 'upper_bound', _upper, 'tasks', _tasks, 'more', true);
      end if;
    end if;

    -- 2. A table detached from a dropped set (named as a partition, no longer one). Its
    --    drop locks only itself, so its files are unlinked under no lock the queue waits
    --    for; but dropping a foreign key takes ACCESS EXCLUSIVE on the table it
    --    references, so a table with one (none has today) is truncated first (under its
    --    own lock) and that drop is a catalog change only.
    select c.relname,
           pg_relation_size(c.oid) > 0 and exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'f')
      into _name, _truncate
      from pg_class c
      join unnest(queues.history_tables()) t(name)
        on c.relname = queues.history_partition_name(t.name, substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     where c.relnamespace = 'queues'::regnamespace and c.relkind = 'r' and not c.relispartition
       and exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     order by c.relname
     limit 1;
    if _name is not null then
      if _truncate then
        _doing := format('truncate queues.%I', _name);
        execute format('truncate queues.%I', _name);
        return jsonb_build_object('action', 'truncated', 'table', _name, 'more', true);
      end if;
      _doing := format('drop queues.%I', _name);
      execute format('drop table queues.%I', _name);
      return jsonb_build_object('action', 'dropped_table', 'table', _name, 'more', true);
    end if;

    -- 3. A fact table's partition of a dropped set: detached, a catalog change.
    select b.table_name, b.partition_name, b.lower_bound, b.upper_bound into _table, _name, _lower, _upper
      from queues.history_partition_bounds() b
     where exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = b.lower_bound and d.upper_bound = b.upper_bound)
     order by b.lower_bound, b.table_name
     limit 1;
    if _name is not null then
      _doing := format('detach queues.%I', _name);
      perform queues.lock_history_tables(array[_table, _name, _table || '_default'],
                                         array['access exclusive', 'access exclusive', 'access exclusive'],
                                         _setting.lock_timeout_ms);
      execute format('alter table queues.%I detach partition queues.%I', _table, _name);
      return jsonb_build_object('action', 'detached', 'table', _name, 'lower_bound', _lower, 'upper_bound', _upper,
                                'more', true);
    end if;

    -- 4. Expired sets, oldest first.
    for _set in
      select p.lower_bound, p.upper_bound from queues.history_sets() p
       where not p.is_default and p.upper_bound <= _last_id
       order by p.lower_bound
    loop
      -- Cheap checks first, without strong locks: a pending task, or a recent completion.
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      select max(c.completed_at) into _last_completed from queues.task_completed c
       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound;
      if _last_completed > _now - _setting.retention then
        _kept := _kept + 1;
        continue;
      end if;
      -- Every task completed, from the facts (one scan of the set's two partitions).
      select count(*) into _tasks from queues.task t
       where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound;
      if exists (select 1 from queues.task t
                  where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound
                    and not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)) then
        _kept := _kept + 1;
        continue;
      end if;

      _name := queues.history_partition_name('task', _set.lower_bound);
      _doing := format('detach queues.%I', _name);
      begin
        -- Detaching holds ACCESS EXCLUSIVE on queues.task and the partition, so no
        -- transaction that wrote to the set or read it to complete a task is still open:
        -- check again what could have changed (a task enqueued with an id handed out
        -- before the checks, and its completion).
        perform queues.lock_history_tables(array['task', _name, 'task_default'],
                                           array['access exclusive', 'access exclusive', 'access exclusive'],
                                           _setting.lock_timeout_ms);
        execute format('alter table queues.task detach partition queues.%I', _name);
        if exists (select 1 from queues.task_pending tp
                    where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_completed c
                       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                         and c.completed_at > _now - _setting.retention) then
          -- Roll the block back, which attaches the partition again.
          raise exception 'set [%, %) changed since it was checked', _set.lower_bound, _set.upper_bound
            using errcode = 'QH001';
        end if;
        insert into queues.history_partition_dropped (lower_bound, upper_bound, tasks, last_completed_at, dropped_at)
        values (_set.lower_bound, _set.upper_bound, _tasks, _last_completed, _now);
        return jsonb_build_object('action', 'set_dropped', 'table', _name, 'lower_bound', _set.lower_bound,
                                  'upper_bound', _set.upper_bound, 'tasks', _tasks, 'kept', _kept, 'more', true);
      exception
        when sqlstate 'QH001' then
          _kept := _kept + 1;
      end;
    end loop;

    -- 5. Nothing left to change: the sets that are done are measured for the readers.
    _measured := queues.measure_history_sets(_now);
    delete from queues.history_step_skipped k where k.skipped_at < _now - interval '1 day';
  exception
    -- check_violation: a task landed in a default partition, in the range being made,
    -- since it was read above; the next step starts above it. The skip is recorded, and
    -- the run goes on (a later try may find its moment) until 5 steps have been skipped
    -- within a minute.
    when lock_not_available or deadlock_detected or check_violation then
      insert into queues.history_step_skipped (step, reason) values (coalesce(_doing, 'a step'), sqlerrm);
      return jsonb_build_object('action', 'skipped', 'step', _doing, 'reason', sqlerrm, 'kept', _kept,
                                'more', (select count(*) from queues.history_step_skipped k
                                          where k.skipped_at > clock_timestamp() - interval '1 minute') < 5);
  end;
  return jsonb_build_object('action', 'none', 'kept', _kept, 'measured', _measured, 'more', false);
end;
$$;

-- Partition maintenance at _now, every step of queues.maintain_history_step_at in one
-- transaction, until none is left or one is skipped: its locks are held until that
-- transaction ends, so this is for tests and for running it by hand; the schedule runs
-- each step in a transaction of its own (queues.maintain_history_step). Returns
--   {"created": [[lo, hi], ...], "dropped": [[lo, hi], ...], "skipped": [{...}], "kept": n}
create or replace function queues.maintain_history_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _created jsonb := '[]';
  _dropped jsonb := '[]';
  _skipped jsonb := '[]';
  _adopted jsonb := '[]';
  _kept integer := 0;
  _step jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  -- Each step changes the catalog or ends the run (skips end it after 5 within a minute);
  -- the bound only guards against a bug.
  for _i in 1 .. 100000 loop
    _step := queues.maintain_history_step_at(_now);
    case _step ->> 'action'
      when 'set_created' then
        _created := _created || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_dropped' then
        _dropped := _dropped || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_adopted' then
        _adopted := _adopted || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'skipped', 'busy' then
        _skipped := _skipped || jsonb_build_array(_step);
      else
        null;
    end case;
    _kept := coalesce((_step ->> 'kept')::integer, _kept);
    exit when not (_step ->> 'more')::boolean;
  end loop;
  return jsonb_build_object('created', _created, 'dropped', _dropped, 'adopted', _adopted, 'skipped', _skipped,
                            'kept', _kept);
end;
$$;

-- A db_function step: maintain_history_at(now()), every step in the caller's transaction
-- (for a one-off run; the schedule runs queues.maintain_history_step).
create or replace function queues.maintain_history(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_at(now()))
$$;

-- The schedule's step: one step of maintenance (maintain_history_step_at(now())), its
-- report as the payload of a success envelope. The schedule's payload asks the worker to
-- call it again while the report says "more" ("repeat": true, see the worker's
-- db_function processor), each call a transaction of its own, so that no step's lock is
-- held while another step runs.
create or replace function queues.maintain_history_step(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_step_at(now()))
$$;

-- What operators watch, without the list of sets: the settings, the oldest retained task,
-- and the next drop (the lowest set below the last task id with its newest completion: it
-- can go at last_completed_at + retention, unless it holds pending tasks). Each read of
-- a partitioned table is pruned at plan time to the set it needs (EXECUTE with the set's
-- bounds as values), so the cost does not grow with the number of sets beyond the catalog
-- read of their bounds.
create or replace function queues.history_summary_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _set record;
  _next record;
  _next_json jsonb;
  _oldest_id bigint;
  _oldest_at timestamptz;
  _default_id bigint;
  _default_at timestamptz;
  _last_completed timestamptz;
  _pending bigint;
begin
  select * into _setting from queues.history_setting;
  -- The oldest task: in the lowest set that holds one (or in the default partition).
  for _set in
    select s.lower_bound, s.upper_bound from queues.history_sets() s
     where not s.is_default and s.lower_bound <= _last_id
     order by s.lower_bound
  loop
    execute 'select t.task_id, t.enqueued_at from queues.task t
              where t.task_id >= $1 and t.task_id < $2 order by t.task_id limit 1'
      into _oldest_id, _oldest_at using _set.lower_bound, _set.upper_bound;
    exit when _oldest_id is not null;
  end loop;
  select t.task_id, t.enqueued_at into _default_id, _default_at from queues.task_default t order by t.task_id limit 1;
  if _default_id < _oldest_id or _oldest_id is null then
    _oldest_id := _default_id;
    _oldest_at := _default_at;
  end if;

  select s.lower_bound, s.upper_bound into _next
    from queues.history_sets() s
   where not s.is_default and s.upper_bound <= _last_id
   order by s.lower_bound
   limit 1;
  if found then
    execute 'select max(c.completed_at) from queues.task_completed c where c.task_id >= $1 and c.task_id < $2'
      into _last_completed using _next.lower_bound, _next.upper_bound;
    _pending := (select count(*) from queues.task_pending tp
                  where tp.task_id >= _next.lower_bound and tp.task_id < _next.upper_bound);
    _next_json := jsonb_build_object(
      'lower_bound', _next.lower_bound, 'upper_bound', _next.upper_bound,
      'pending_tasks', _pending,
      'last_completed_at', _last_completed,
      'drop_after', case when _pending = 0 then coalesce(_last_completed + _setting.retention, _now) end);
  end if;
  return jsonb_build_object(
    'retention_seconds', extract(epoch from _setting.retention)::bigint,
    'partition_size', _setting.partition_size,
    'partitions_ahead', _setting.partitions_ahead,
    'last_task_id', _last_id,
    'oldest_task_id', _oldest_id,
    'oldest_enqueued_at', _oldest_at,
    'default_partition_tasks', (select count(*) from queues.task_default),
    'next_drop', _next_json,
    'dropped_sets', (select count(*) from queues.history_partition_dropped),
    'skipped_steps_last_hour', (select count(*) from queues.history_step_skipped k where k.skipped_at > _now - interval '1 hour'),
    'last_skipped_step', (select jsonb_build_object('skipped_at', k.skipped_at, 'step', k.step, 'reason', k.reason)
                            from queues.history_step_skipped k order by k.skipped_at desc limit 1),
    'last_dropped_at', (select max(d.dropped_at) from queues.history_partition_dropped d));
end;
$$;

-- queues.history_summary_at(_now) and the sets with their sizes (queues.history_partitions()).
create or replace function queues.history_status_at(_now timestamptz)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.history_summary_at(_now) || jsonb_build_object(
    'partitions', coalesce((select jsonb_agg(jsonb_build_object(
        'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'name', p.partition_name,
        'estimated_tasks', p.estimated_tasks, 'total_bytes', p.total_bytes, 'is_default', p.is_default)
        order by p.is_default, p.lower_bound)
      from queues.history_partitions() p), '[]'))
$$;

-- The worker runs maintenance as the db_function task of its schedule; operators read the
-- status through admin.history_status(). Everything else here is owner only. Granted
-- here, beside the functions, so that a migration including sql/queues/privileges.sql
-- before this file does not name a function that does not exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.maintain_history_step_at(timestamptz),
  queues.history_status_at(timestamptz), queues.history_summary_at(timestamptz), queues.history_partitions(),
  queues.history_partition_bounds(), queues.history_sets(), queues.history_partition_sizes(),
  queues.history_set_bytes(bigint[]), queues.measure_history_sets(timestamptz),
  queues.history_walk(bigint), queues.create_history_partition(bigint, bigint),
  queues.attach_history_partition(text, bigint, bigint), queues.lock_history_tables(text[], text[], integer),
  queues.adopt_history_range(bigint, bigint), queues.create_history_table(text, text),
  queues.cancel_autovacuum(text[])
  from public;
grant execute on function queues.maintain_history(jsonb), queues.maintain_history_step(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
select internal.register_runnable_function('queues.maintain_history_step(jsonb)');
--! EndIncluded queues/partitions.sql
--! Included admin/history.sql
-- History and retention, for operators (the dashboard's History page, GET /api/history,
-- the queue_history_* gauges of /metrics): the settings and the maintenance schedule,
-- every partition set of the queue's history with its state and sizes, the oldest
-- retained task, the next set retention will drop (queues.history_status_at,
-- sql/queues/partitions.sql) and the recent drops.
--
-- Cost: catalog reads, and per partition set a range count of its pending tasks in
-- queues.task_pending (the claim index: its cost follows pending work, never history) and
-- a row of queues.history_set_measured for a set that is done (every task completed, its
-- range below the last task id: maintenance measured it), or else its sizes (each of its
-- partitions opened) and three primary-key reads (its oldest and newest task) planned for
-- its partition alone. Only the sets still filling (normally the current one and those
-- ahead) are opened on each read. No scan of history.

-- The status at _now: queues.history_status_at(_now) with these keys added or extended:
--   now                  _now
--   lock_timeout_ms      how long a maintenance step keeps asking for its locks
--   partitions[]         each set, lowest first, the default partition last:
--     lower_bound, upper_bound, name, is_default, estimated_tasks (planner), total_bytes,
--     table_bytes, index_bytes  tables with TOAST / indexes, summed over every history table
--     tasks                     task ids handed out in the set, from its oldest to its
--                               newest task (ids only grow and no task is ever deleted
--                               alone, so this is the number of tasks unless an enqueue
--                               rolled back); the default partition: its exact count
--     first_task_id, first_enqueued_at, last_task_id   the set's oldest and newest task
--     pending_tasks             tasks in it not completed (queues.task_pending)
--     measured_at               when maintenance measured the set's bytes and tasks
--                               (queues.history_set_measured: a set below the last task
--                               id with no pending task); null: measured for this answer
--     created_at                when maintenance created it (queues.history_partition_created);
--                               null for sets made before creations were recorded
--     state                     ahead (above the last task id), current (holds the last
--                               task id), next_drop (the set next_drop names), retained
--                               (below the last task id, kept), default
--   totals               sets (not counting the default partition), tasks, table_bytes,
--                        index_bytes, total_bytes
--   recent_drops[]       the 10 newest rows of queues.history_partition_dropped
--   maintenance          the queue_history_maintenance schedule (cron, enabled, next and
--                        last fire) and its last run (task, state, and the run's report
--                        {created, dropped, skipped, kept} once it completed); null
--                        without the schedule
-- Owner only (it takes the clock); the API calls admin.history_status().
create or replace function admin.history_status_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _status jsonb;
  _last_id bigint;
  _next_lower bigint;
  _default record;
  _sets jsonb;
  _set record;
  _first record;
  _probes jsonb := '{}';
  _parts jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  _status := queues.history_summary_at(_now);
  _last_id := (_status ->> 'last_task_id')::bigint;
  _next_lower := (_status -> 'next_drop' ->> 'lower_bound')::bigint;

  -- The default partition, read by itself (normally empty).
  select (select t.task_id from queues.task_default t order by t.task_id limit 1) as first_task_id,
         (select t.enqueued_at from queues.task_default t order by t.task_id limit 1) as first_enqueued_at,
         (select max(t.task_id) from queues.task_default t) as last_task_id,
         (select count(*) from queues.task_default t) as tasks,
         (select count(*) from queues.task_default t
           where not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)) as pending_tasks
    into _default;

  -- Every set once, with its pending count (a range count of queues.task_pending) and its
  -- row of queues.history_set_measured if it is done (its range below the last task id,
  -- no pending task) and maintenance measured it.
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'partition_name', p.partition_name,
           'estimated_tasks', p.estimated_tasks, 'is_default', p.is_default, 'created_at', c.created_at,
           'pending', pe.pending, 'measured', m.lower_bound is not null, 'first_task_id', m.first_task_id,
           'first_enqueued_at', m.first_enqueued_at, 'last_task_id', m.last_task_id,
           'table_bytes', m.table_bytes, 'index_bytes', m.index_bytes, 'measured_at', m.measured_at)), '[]')
    into _sets
    from queues.history_sets() p
    left join queues.history_partition_created c on c.lower_bound = p.lower_bound and not p.is_default
   cross join lateral (select count(*) as pending from queues.task_pending tp
                        where not p.is_default and tp.task_id >= p.lower_bound and tp.task_id < p.upper_bound) pe
    left join queues.history_set_measured m
      on m.lower_bound = p.lower_bound and m.upper_bound = p.upper_bound
     and not p.is_default and p.upper_bound <= _last_id and pe.pending = 0;

  -- The oldest and newest task of each set that is not measured and may hold one (not
  -- above the last task id), by primary key, each read given its set's bounds as values
  -- so that it is planned for that set's partition only.
  for _set in
    select x.lower_bound, x.upper_bound
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, is_default boolean, measured boolean)
     where not x.is_default and not x.measured and x.lower_bound <= _last_id
  loop
    execute 'select (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_task_id,
                    (select t.enqueued_at from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_enqueued_at,
                    (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id desc limit 1) as last_task_id'
      into _first using _set.lower_bound, _set.upper_bound;
    _probes := _probes || jsonb_build_object(_set.lower_bound::text, to_jsonb(_first));
  end loop;

  -- The answer: sizes from the measurement, or from one queues.history_set_bytes call for
  -- every set that is not measured.
  with s as (
    select x.*, coalesce(x.first_task_id, (_probes -> x.lower_bound::text ->> 'first_task_id')::bigint) as first_id,
           coalesce(x.first_enqueued_at, (_probes -> x.lower_bound::text ->> 'first_enqueued_at')::timestamptz) as first_at,
           coalesce(x.last_task_id, (_probes -> x.lower_bound::text ->> 'last_task_id')::bigint) as last_id
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, partition_name text,
                                       estimated_tasks bigint, is_default boolean, created_at timestamptz,
                                       pending bigint, measured boolean, first_task_id bigint,
                                       first_enqueued_at timestamptz, last_task_id bigint, table_bytes bigint,
                                       index_bytes bigint, measured_at timestamptz)
  ),
  sized as (
    select * from queues.history_set_bytes(array(select s.lower_bound from s where not s.measured))
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', s.lower_bound, 'upper_bound', s.upper_bound, 'name', s.partition_name,
           'is_default', s.is_default, 'estimated_tasks', s.estimated_tasks,
           'total_bytes', coalesce(s.table_bytes, b.table_bytes) + coalesce(s.index_bytes, b.index_bytes),
           'table_bytes', coalesce(s.table_bytes, b.table_bytes),
           'index_bytes', coalesce(s.index_bytes, b.index_bytes),
           'tasks', case when s.is_default then _default.tasks else coalesce(s.last_id - s.first_id + 1, 0) end,
           'first_task_id', case when s.is_default then _default.first_task_id else s.first_id end,
           'first_enqueued_at', case when s.is_default then _default.first_enqueued_at else s.first_at end,
           'last_task_id', case when s.is_default then _default.last_task_id else s.last_id end,
           'pending_tasks', case when s.is_default then _default.pending_tasks else s.pending end,
           'measured_at', s.measured_at,
           'created_at', s.created_at,
           'state', case when s.is_default then 'default'
                         when s.lower_bound > _last_id then 'ahead'
                         when s.upper_bound > _last_id then 'current'
                         when s.lower_bound = _next_lower then 'next_drop'
                         else 'retained' end)
           order by s.is_default, s.lower_bound), '[]')
    into _parts
    from s
    left join sized b on not s.measured and b.lower_bound is not distinct from s.lower_bound;

  return _status || jsonb_build_object(
    'now', _now,
    'lock_timeout_ms', (select s.lock_timeout_ms from queues.history_setting s),
    'partitions', _parts,
    'totals', (select jsonb_build_object(
                 'sets', count(*) filter (where not (x ->> 'is_default')::boolean),
                 'tasks', coalesce(sum((x ->> 'tasks')::bigint), 0),
                 'table_bytes', coalesce(sum((x ->> 'table_bytes')::bigint), 0),
                 'index_bytes', coalesce(sum((x ->> 'index_bytes')::bigint), 0),
                 'total_bytes', coalesce(sum((x ->> 'total_bytes')::bigint), 0))
                 from jsonb_array_elements(_parts) x),
    'recent_drops', coalesce((
      select jsonb_agg(jsonb_build_object(
               'lower_bound', d.lower_bound, 'upper_bound', d.upper_bound, 'tasks', d.tasks,
               'last_completed_at', d.last_completed_at, 'dropped_at', d.dropped_at)
             order by d.history_partition_dropped_id desc)
        from (select * from queues.history_partition_dropped x
               order by x.history_partition_dropped_id desc limit 10) d), '[]'),
    'maintenance', (
      select jsonb_build_object(
               'schedule', s.name, 'cron', s.cron, 'enabled', s.enabled,
               'next_fire_at', s.next_fire_at, 'last_fire_at', s.last_fire_at,
               'last_run', (
                 select jsonb_build_object(
                          'fire_at', r.fire_at, 'outcome', r.outcome, 'task_id', r.task_id,
                          'task_state', coalesce(
                            (select c.outcome from queues.task_completed c where c.task_id = r.task_id),
                            (select admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)
                               from queues.task_pending p where p.task_id = r.task_id)),
                          'report', (select x.result -> 'payload' from queues.task_result x
                                      where x.task_id = r.task_id order by x.task_lease_id desc limit 1))
                   from schedules.schedule_run r
                  where r.schedule_id = s.schedule_id
                  order by r.fire_at desc limit 1))
        from schedules.list_schedules() s
       where s.name = 'queue_history_maintenance'));
end;
$$;

create or replace function admin.history_status()
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.history_status_at(now())
$$;

-- Granted here, beside the function (see sql/queues/partitions.sql for why); the clock
-- variant stays owner only.
revoke execute on function admin.history_status_at(timestamptz) from public;
grant execute on function admin.history_status() to :DATABASE_API;
--! EndIncluded admin/history.sql
--! Included admin/processes.sql
-- The process view: the fact timeline of one business process's root, for the
-- send_email / send_sms (comms), file_deletion (files), account_deletion and
-- account_anonymization (accounts) processes.
--
-- Generic over the domains' naming convention (sql/CONVENTIONS.md, "facts are named for
-- the event"): a process X in schema S has a root S.X_task (key X_task_id) and, when they
-- exist, the facts S.X_supervisor_run, S.X_attempt (key X_attempt_id),
-- S.X_attempt_succeeded, S.X_attempt_failed, S.X_task_succeeded and S.X_task_failed.
-- Table names are read from the catalog and quoted with format('%I.%I'); ids go through
-- `using`. Every read is by the root's key (each fact table is indexed on it).

-- The processes the view knows, with their schemas.
create or replace function admin.processes()
  returns table (process text, schema_name text)
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  values ('send_email', 'comms'), ('send_sms', 'comms'), ('file_deletion', 'files'),
         ('account_deletion', 'accounts'), ('account_anonymization', 'accounts')
$$;

-- The schema-qualified, quoted name of a process's table S.X<suffix>, read from the
-- catalog; null when there is no such table.
create or replace function admin.process_table(_process text, _suffix text)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select format('%I.%I', n.nspname, c.relname)
    from admin.processes() p
    join pg_namespace n on n.nspname = p.schema_name
    join pg_class c on c.relnamespace = n.oid and c.relname = p.process || _suffix and c.relkind = 'r'
   where p.process = _process
$$;

-- Validates a process name and root id: 22004 for nulls, 22023 for an unknown process,
-- 23503 for an unknown root.
create or replace function admin.assert_process_root(_process text, _root_id bigint)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _found boolean;
begin
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _root_id is null then
    raise exception 'root_id must not be null' using errcode = '22004';
  end if;
  execute format('select exists (select 1 from %s r where r.%I = $1)',
                 admin.process_table(_process, '_task'), _process || '_task_id')
    into _found using _root_id;
  if not _found then
    raise exception '% % does not exist', _process, _root_id using errcode = '23503';
  end if;
end;
$$;

-- Every fact of one root, oldest first: started, supervisor_run, attempt,
-- attempt_succeeded, attempt_failed, succeeded, failed; for a root that domain retention
-- pruned (internal.process_pruned), one 'pruned' row instead. `detail` is the fact row as JSON
-- without its keys and timestamp. An account deletion also shows its children: the
-- account's anonymization and the deletions of the account's files (their `process` and
-- `root_id` say which).
-- The queue tasks a process names (an attempt's task_id: the channel task that carried
-- it) may be gone while the process's facts stay: retention dropped the partition set
-- that held them (queues.history_partition_dropped). For each such set, one
-- 'queue_history_pruned' row at the time of the drop, with detail {task_ids (this root's
-- tasks in the set), lower_bound, upper_bound, last_completed_at, dropped_at}.
create or replace function admin.process_timeline(_process text, _root_id bigint)
  returns table (at timestamptz, process text, root_id bigint, fact text, attempt_id bigint, detail jsonb)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text := _process || '_task_id';
  _attempt_key text := _process || '_attempt_id';
  _attempt text;
  _parts text[] := '{}';
  _table text;
  _child record;
  _pruned internal.process_pruned;
begin
  begin
    perform admin.assert_process_root(_process, _root_id);
  exception when foreign_key_violation then
    -- A root that domain retention removed: one 'pruned' row says when and why.
    _pruned := internal.process_root_pruned(_process, _root_id);
    if _pruned.process_pruned_id is null then
      raise;
    end if;
    return query select _pruned.pruned_at, _process, _root_id, 'pruned'::text, null::bigint,
                        jsonb_build_object('finished_before', _pruned.finished_before,
                                           'pruned_at', _pruned.pruned_at);
    return;
  end;
  _attempt := admin.process_table(_process, '_attempt');

  _parts := _parts || format(
    'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint, to_jsonb(f) - %L - ''created_at''
       from %s f where f.%I = $1',
    _process, _root_id, 'started', _key, admin.process_table(_process, '_task'), _key);
  foreach _table in array array['_supervisor_run', '_task_succeeded', '_task_failed'] loop
    if admin.process_table(_process, _table) is not null then
      _parts := _parts || format(
        'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint,
                to_jsonb(f) - %L - %L - ''created_at''
           from %s f where f.%I = $1',
        _process, _root_id,
        case _table when '_supervisor_run' then 'supervisor_run'
                    when '_task_succeeded' then 'succeeded' else 'failed' end,
        _key, _process || _table || '_id', admin.process_table(_process, _table), _key);
    end if;
  end loop;
  if _attempt is not null then
    _parts := _parts || format(
      'select f.created_at, %L::text, %s::bigint, ''attempt''::text, f.%I, to_jsonb(f) - %L - %L - ''created_at''
         from %s f where f.%I = $1',
      _process, _root_id, _attempt_key, _key, _attempt_key, _attempt, _key);
    foreach _table in array array['_attempt_succeeded', '_attempt_failed'] loop
      if admin.process_table(_process, _table) is not null then
        _parts := _parts || format(
          'select f.created_at, %L::text, %s::bigint, %L::text, f.%I, to_jsonb(f) - %L - ''created_at''
             from %s f join %s a on a.%I = f.%I where a.%I = $1',
          _process, _root_id, substr(_table, 2), _attempt_key, _attempt_key,
          admin.process_table(_process, _table), _attempt, _attempt_key, _attempt_key, _key);
      end if;
    end loop;
    if exists (select 1 from pg_attribute a
                where a.attrelid = _attempt::regclass and a.attname = 'task_id' and not a.attisdropped) then
      -- history_partition_dropped has a row per dropped set: a few hundred a year.
      _parts := _parts || format(
        'select d.dropped_at, %L::text, %s::bigint, ''queue_history_pruned''::text, null::bigint,
                jsonb_build_object(''task_ids'', jsonb_agg(a.task_id order by a.task_id),
                                   ''lower_bound'', d.lower_bound, ''upper_bound'', d.upper_bound,
                                   ''last_completed_at'', d.last_completed_at, ''dropped_at'', d.dropped_at)
           from %s a
           join queues.history_partition_dropped d on a.task_id >= d.lower_bound and a.task_id < d.upper_bound
          where a.%I = $1
          group by d.history_partition_dropped_id',
        _process, _root_id, _attempt, _key);
    end if;
  end if;

  return query execute
    'select * from (' || array_to_string(_parts, ' union all ') || ') t order by 1, 4'
    using _root_id;

  -- An account deletion's children, by account.
  if _process = 'account_deletion' then
    for _child in
      select 'account_anonymization' as process, x.account_anonymization_task_id as root_id
        from accounts.account_deletion_task d
        join accounts.account_anonymization_task x on x.account_id = d.account_id
       where d.account_deletion_task_id = _root_id
      union all
      select 'file_deletion', fd.file_deletion_task_id
        from accounts.account_deletion_task d
        join files.file f on f.account_id = d.account_id
        join files.file_deletion_task fd on fd.file_id = f.file_id
       where d.account_deletion_task_id = _root_id
    loop
      return query select * from admin.process_timeline(_child.process, _child.root_id);
    end loop;
  end if;
end;
$$;

-- Roots of one process newest first, _limit per page (default 50, at most 500), older
-- than _before_root_id, with their status (succeeded, failed or running) and the root
-- row's other columns as `subject`.
create or replace function admin.list_process_roots(
  _process        text,
  _limit          integer default null,
  _before_root_id bigint default null
) returns table (root_id bigint, created_at timestamptz, status text, subject jsonb)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _key text := _process || '_task_id';
begin
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _before_root_id is not null and _before_root_id < 1 then
    raise exception 'before_root_id must be a positive id, got %', _before_root_id using errcode = '22023';
  end if;
  return query execute format(
    'select r.%1$I, r.created_at,
            case when exists (select 1 from %3$s s where s.%1$I = r.%1$I) then ''succeeded''
                 when exists (select 1 from %4$s x where x.%1$I = r.%1$I) then ''failed''
                 else ''running'' end,
            to_jsonb(r) - %1$L - ''created_at''
       from %2$s r
      where $1 is null or r.%1$I < $1
      order by r.%1$I desc
      limit $2',
    _key, admin.process_table(_process, '_task'),
    admin.process_table(_process, '_task_succeeded'), admin.process_table(_process, '_task_failed'))
  using _before_root_id, _page;
end;
$$;

-- The process names the view knows (for the API's list).
create or replace function admin.list_processes()
  returns table (process text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.process from admin.processes() p order by 1
$$;
--! EndIncluded admin/processes.sql

--! split: 440-history-maintenance-steps.sql
-- History maintenance in short steps (sql/queues/partitions.sql): a set is made one table
-- at a time, each as a standalone table then attached, and dropped one table at a time,
-- each detached then dropped; the schedule runs each step in a transaction of its own
-- (queues.maintain_history_step with "repeat"), so no step's lock is held while another
-- runs, and a claim waits at most lock_timeout_ms plus one catalog change behind it.
set local lock_timeout = '5s';

-- A claim waits for maintenance's pending lock at most this long: 50 ms, down from 100,
-- so that the wait plus the catalog change stays under 100 ms. A database still at the
-- old default moves to the new one.
alter table queues.history_setting alter column lock_timeout_ms set default 50;
update queues.history_setting set lock_timeout_ms = 50, updated_at = now() where lock_timeout_ms = 100;

--! Included queues/partitions.sql
-- History partitions: queues.task and every fact table keyed by task are range-partitioned
-- by task_id, all on the same bounds (a "partition set"). Old history leaves by dropping a
-- whole set, never by row-by-row DELETE. Settings: queues.history_setting; what was
-- dropped: queues.history_partition_dropped (both in migrations/committed/000004); when
-- each set was created: queues.history_partition_created.
--
-- Why task_id and not time: every fact carries task_id, so a row is routed without an
-- extra column; a task and all its facts sit in the same set, so a set can be dropped
-- alone; every lookup of the hot path is by task_id, so it is pruned to one partition;
-- and ids only grow, so a set whose range lies below the id sequence receives no new
-- task. docs/operations.md ("Retention and partitions") has the full reasoning.
--
--   queues.history_tables()                    the partitioned tables, parent first
--   queues.lock_history_tables(t, m, ms)       a step's locks, between transactions; owner only
--   queues.cancel_autovacuum(t)                cancels autovacuum of tables a step must lock; owner only
--   queues.create_history_table(t, name)       a standalone table like t, to attach; owner only
--   queues.attach_history_partition(t, lo, hi) one table's partition of a set, owner only
--   queues.create_history_partition(lo, hi)    one set [lo, hi), owner only
--   queues.adopt_history_range(lo, hi)         a set [lo, hi) of rows in the default
--                                              partitions, moved out of them; owner only
--   queues.history_partition_bounds()          every table's partitions and their bounds
--   queues.history_sets()                      the sets' bounds, from the catalog only
--   queues.history_walk(_before)               the id ranges a newest-first read walks
--   queues.history_set_bytes(lower_bounds)     the table and index bytes of the sets given
--   queues.history_partition_sizes()           the sets with table and index bytes
--   queues.measure_history_sets(_now)          the sets that are done, measured for readers
--                                              (queues.history_set_measured); owner only
--   queues.history_partitions()                the sets with their total bytes
--   queues.maintain_history_step_at(_now)      one short step of maintenance; owner only
--   queues.maintain_history_step(payload)      the same at now(), a runnable db_function
--                                              (the schedule's: one transaction per step)
--   queues.maintain_history_at(_now)           every step in one transaction; owner only
--   queues.maintain_history(payload)           the same at now(), a runnable db_function
--   queues.history_summary_at(_now)            settings, oldest task, what the next drop waits for
--   queues.history_status_at(_now)             the same with the sets and their sizes
--
-- Locks. The claim and the completion read queues.task, task_lease_started and
-- task_completed through generic plans, which lock every partition of those tables,
-- default included, and every writer takes ROW EXCLUSIVE on the parents. So each step
-- locks one table (its parent, the partition, the default) in the order the hot path
-- takes its own (parent, then partition, then default), without waiting in a lock queue
-- (queues.lock_history_tables: asked for without waiting, again every few ms, for up to
-- lock_timeout_ms, then one last try that waits at most 50 ms), and holds the locks only
-- for a catalog change, in a transaction of its own when run by the schedule
-- (queues.maintain_history_step with "repeat"): a claim waits behind maintenance at most
-- 50 ms plus that change. Measured locks (PostgreSQL 18):
--   create table .. partition of     ACCESS EXCLUSIVE on the parent and its default: not used
--   create table (like ..) + attach  SHARE UPDATE EXCLUSIVE on the parent (no conflict with
--                                    DML), ACCESS EXCLUSIVE on the default partition (a
--                                    conflict only for task, task_lease_started and
--                                    task_completed, whose defaults the hot path's plans lock)
--                                    and, for a set made late (its range within reach of the
--                                    ids handed out), SHARE on the parent first: writers of
--                                    that table wait for the attach (a writer that routed its
--                                    row before the attach commits would fail on the
--                                    default's new constraint; see attach_history_partition)
--   detach partition                 ACCESS EXCLUSIVE on the parent, default and partition;
--                                    catalog only (no scan); detach concurrently is refused
--                                    while a default partition exists, and in a function
--   drop table (attached partition)  the same plus unlinking its files under those locks:
--                                    not used; a detached table is dropped instead, which
--                                    locks only itself, except a table with a foreign key
--                                    (none today), whose drop takes ACCESS EXCLUSIVE on
--                                    the table it references: it is truncated first (under
--                                    its own lock only), so that drop is a catalog change

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now']
$$;

-- The partition of _table holding [_lower, _upper) is named <table>_p<lower>.
-- No SET clause: a function with one is never inlined, and the status pages name every
-- partition of every set with it (196 calls at 14 sets). It names no object, so the
-- search path cannot change what it does (like admin.pending_state).
create or replace function queues.history_partition_name(_table text, _lower bigint) returns text
  language sql immutable parallel safe
as $$
  select _table || '_p' || _lower::text
$$;

-- Cancels the autovacuum workers that hold a lock on one of _tables (names in schema
-- queues) in this database, as PostgreSQL itself does for a lock request that has waited
-- deadlock_timeout (1 s): a maintenance step never waits that long (claims would queue
-- behind it), so without this a long autovacuum of a default partition or of a set kept
-- every step that must lock that table skipping until it ended. Autovacuum comes back
-- later. An autovacuum that prevents wraparound (the table's age past
-- autovacuum_freeze_max_age or autovacuum_multixact_freeze_max_age) is left alone, as
-- PostgreSQL leaves it. Needs membership in pg_signal_autovacuum_worker (PostgreSQL 18;
-- the owner gets it when the database users are provisioned, docs/operations.md);
-- without it, nothing is cancelled. Returns how many were cancelled. Owner only.
create or replace function queues.cancel_autovacuum(_tables text[])
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pid integer;
  _cancelled integer := 0;
begin
  for _pid in
    select distinct l.pid
      from pg_locks l
      join pg_stat_activity a on a.pid = l.pid
      join pg_class c on c.oid = l.relation
     where l.locktype = 'relation' and l.granted
       and l.database = (select d.oid from pg_database d where d.datname = current_database())
       -- An autovacuum worker runs as no role: its usesysid is null, and a role without
       -- pg_read_all_stats sees its backend_type as null too (it is shown to those with it).
       and a.usesysid is null and coalesce(a.backend_type, 'autovacuum worker') = 'autovacuum worker'
       and c.relnamespace = 'queues'::regnamespace and c.relname = any (_tables)
       and age(c.relfrozenxid) < current_setting('autovacuum_freeze_max_age')::bigint
       and mxid_age(c.relminmxid) < current_setting('autovacuum_multixact_freeze_max_age')::bigint
  loop
    begin
      if pg_cancel_backend(_pid) then
        _cancelled := _cancelled + 1;
      end if;
    exception
      when insufficient_privilege then
        return _cancelled;
    end;
  end loop;
  return _cancelled;
end;
$$;

-- Takes the locks of one maintenance step, _modes[i] on queues._tables[i] (only the table
-- named: a partitioned parent's partitions are not locked with it), in order, without
-- waiting in a lock queue until its last try: each try asks for every lock with NOWAIT,
-- and a try that meets a holder gives back what it took and tries again 1 to 4 ms later,
-- until the locks are had or _within_ms has passed; then one last try waits in the queue
-- for at most 50 ms, and failing that, lock_not_available (55P03, naming the tables and
-- the tries). Why not wait: a lock request that waits holds every later request behind
-- it, so a claim would queue behind maintenance for as long as the longest transaction in
-- flight keeps maintenance waiting (a batch of server-side steps holds task's partitions
-- for tens of milliseconds; under a steady load one is always in flight, so a waiting
-- request rarely got its lock within a short lock_timeout). Asking without waiting takes
-- the moments between transactions and leaves the queue's own order alone (but see the
-- two 50 ms below). Modes: 'share update exclusive', 'share', 'access exclusive'. Returns
-- the tries it took. Owner only.
create or replace function queues.lock_history_tables(_tables text[], _modes text[], _within_ms integer)
  returns integer
  language plpgsql volatile
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _deadline timestamptz;
  _tries integer := 0;
  _last boolean;
  _last_until timestamptz;
  _autovacuum_cancelled boolean := false;
begin
  if _tables is null or _modes is null or cardinality(_tables) = 0 or cardinality(_tables) <> cardinality(_modes) then
    raise exception 'tables and modes must be non-empty arrays of the same length' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m is null or m not in ('share update exclusive', 'share', 'access exclusive')) then
    raise exception 'a lock mode must be share update exclusive, share or access exclusive, got %', _modes
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_tables) t where t is null or to_regclass(format('queues.%I', t)) is null) then
    raise exception 'every table must name a table in schema queues, got %', _tables using errcode = '22023';
  end if;
  if _within_ms is null or _within_ms < 0 then
    raise exception 'within_ms must be 0 or more, got %', _within_ms using errcode = '22023';
  end if;
  -- A transaction that already holds a lock of this kind (steps run together, as in
  -- queues.maintain_history_at, or a partition made earlier in it) keeps the queue
  -- waiting while it tries, and a holder in its way may be waiting for it: it tries for
  -- at most 50 ms then.
  if exists (select 1 from pg_locks l
              where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.granted
                and l.mode in ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                               'ExclusiveLock', 'AccessExclusiveLock')) then
    _within_ms := least(_within_ms, 50);
  end if;
  _deadline := clock_timestamp() + make_interval(secs => _within_ms / 1000.0);
  loop
    _tries := _tries + 1;
    -- The last try, once the window has passed, waits in the queue for at most 50 ms
    -- (restored on return): transactions that follow one another without a moment
    -- between (one connection's statements back to back) are waited for, and whatever
    -- queues behind this try waits no longer.
    -- The 50 ms are for the whole try, however many tables it locks (each lock waits
    -- only for what is left of them).
    _last := clock_timestamp() >= _deadline;
    _last_until := clock_timestamp() + make_interval(secs => greatest(least(_within_ms, 50), 1) / 1000.0);
    begin
      for _i in 1 .. cardinality(_tables) loop
        if _last then
          perform set_config('lock_timeout',
            greatest(ceil(extract(epoch from _last_until - clock_timestamp()) * 1000), 1)::integer || 'ms', true);
        end if;
        -- The mode is one of the three above (checked), the table quoted as an identifier.
        execute format('lock table only queues.%I in %s mode%s', _tables[_i], _modes[_i],
                       case when _last then '' else ' nowait' end);
      end loop;
      return _tries;
    exception
      when lock_not_available then
        -- The block's locks are given back with it. An autovacuum in the way is cancelled
        -- (once per call); the next try, a few ms later, finds the table free.
        if not _autovacuum_cancelled then
          _autovacuum_cancelled := true;
          perform queues.cancel_autovacuum(_tables);
        end if;
    end;
    exit when _last;
    perform pg_sleep((1 + random() * 3) / 1000.0);
  end loop;
  raise exception 'could not lock % in % tries over % ms: other transactions held them throughout',
    array_to_string(_tables, ', '), _tries, _within_ms
    using errcode = '55P03';
end;
$$;

-- Creates queues._name, a standalone table like the history table _table (columns,
-- defaults, constraints, indexes) with the trigger that refuses updates (a statement
-- trigger on the parent does not fire for a statement that names the partition), to be
-- attached as its partition. Owner only.
create or replace function queues.create_history_table(_table text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('create table queues.%I (like queues.%I including defaults including constraints including indexes including storage)',
                 _name, _table);
  execute format('create trigger forbid_update before update on queues.%I
                    for each statement execute function queues.forbid_fact_update()', _name);
end;
$$;

-- Makes the partition [_lower, _upper) of the history table _table unless it exists: a
-- standalone table like its parent (columns, defaults, constraints, indexes) with the
-- trigger that refuses updates (a statement trigger on the parent does not fire for a
-- statement that names the partition), then attached to the parent. Attaching takes
-- SHARE UPDATE EXCLUSIVE on the parent where `create table .. partition of` takes ACCESS
-- EXCLUSIVE, and the new table is empty, so nothing is scanned. Returns whether it made
-- the partition. Owner only.
create or replace function queues.attach_history_partition(_table text, _lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
begin
  if _table is null or _table <> all (queues.history_tables()) then
    raise exception 'table must name a history table (queues.history_tables()), got %',
      coalesce(quote_literal(left(_table, 100)), 'null') using errcode = '22023';
  end if;
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  _name := queues.history_partition_name(_table, _lower);
  if to_regclass(format('queues.%I', _name)) is not null then
    return false;
  end if;
  -- A range within reach of the task ids handed out (within one set's width, or the
  -- 10,000 tasks a statement may enqueue, above the last one) may receive rows while it
  -- is attached: a writer that routed its row before the attach committed would send it
  -- to the default partition, wait there for the attach's lock, and then fail the
  -- default's new constraint ("new row for relation .._default violates partition
  -- constraint"). For such a range (a set made late), SHARE on the parent: taken when no
  -- writer is in flight, it holds new ones at the parent until commit; they then route
  -- with the new partition. A set made ahead of need, as maintenance makes them, is out
  -- of reach and needs no lock that writers wait for (under a steady load of writers, a
  -- moment without one is rare).
  -- Its locks first (queues.lock_history_tables: taken between transactions, never
  -- queued for): the parent, SHARE UPDATE EXCLUSIVE (what attaching takes; SHARE for a
  -- set made late), then the default partition, ACCESS EXCLUSIVE (attaching checks it
  -- holds no row of the range).
  perform queues.lock_history_tables(
    array[_table, _table || '_default'],
    array[case when _lower <= queues.last_task_id() + greatest(_upper - _lower, 10000) then 'share'
               else 'share update exclusive' end,
          'access exclusive'],
    (select s.lock_timeout_ms from queues.history_setting s));
  perform queues.create_history_table(_table, _name);
  execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                 _table, _name, _lower, _upper);
  return true;
end;
$$;

-- Creates the partition set [_lower, _upper) of every history table (those that exist
-- already are kept), task's last: a set is in use once task has its partition. One
-- transaction; maintenance makes a set one table per step instead. Records when in
-- queues.history_partition_created. Returns whether anything was created. Owner only.
create or replace function queues.create_history_partition(_lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _created boolean := false;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _created := queues.attach_history_partition(_table, _lower, _upper) or _created;
  end loop;
  if _created then
    insert into queues.history_partition_created (lower_bound, upper_bound)
    values (_lower, _upper) on conflict (lower_bound) do nothing;
  end if;
  return _created;
end;
$$;

-- Makes [_lower, _upper) a set from rows that fell into the default partitions (tasks
-- given ids while no set covered them, and their facts): for each history table without
-- a partition of that range, a standalone table like its parent, the range's rows moved
-- into it from the table's default partition (deleted there and inserted here, in this
-- transaction), then attached. Nothing is lost or seen twice: readers of the parent see
-- each row in the default until this commits and in the new partition after. The caller
-- holds every history table's parent (SHARE) and default (ACCESS EXCLUSIVE), so no row of
-- the range is written meanwhile. Records the set in queues.history_partition_created.
-- Returns the tasks moved. Owner only.
create or replace function queues.adopt_history_range(_lower bigint, _upper bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _name text;
  _columns text;
  _moved bigint;
  _tasks bigint := 0;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'range bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _name := queues.history_partition_name(_table, _lower);
    continue when to_regclass(format('queues.%I', _name)) is not null;
    perform queues.create_history_table(_table, _name);
    -- The parent's columns by name (each quoted as an identifier), in its order.
    select string_agg(format('%I', a.attname), ', ' order by a.attnum) into _columns
      from pg_attribute a
     where a.attrelid = format('queues.%I', _table)::regclass and a.attnum > 0 and not a.attisdropped;
    execute format('with moved as (delete from queues.%I where task_id >= $1 and task_id < $2 returning %s)
                    insert into queues.%I (%s) select %s from moved',
                   _table || '_default', _columns, _name, _columns, _columns)
      using _lower, _upper;
    get diagnostics _moved = row_count;
    if _table = 'task' then
      _tasks := _moved;
    end if;
    execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                   _table, _name, _lower, _upper);
  end loop;
  insert into queues.history_partition_created (lower_bound, upper_bound)
  values (_lower, _upper) on conflict (lower_bound) do nothing;
  return _tasks;
end;
$$;

-- Every partition of every history table but the defaults, with its bounds. Owner only.
create or replace function queues.history_partition_bounds()
  returns table (table_name text, partition_name text, lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.name, c.relname::text, m.b[1]::bigint, m.b[2]::bigint
    from unnest(queues.history_tables()) t(name)
    join pg_inherits i on i.inhparent = to_regclass(format('queues.%I', t.name))
    join pg_class c on c.oid = i.inhrelid
   cross join lateral regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?\d+)''?\) TO \(''?(-?\d+)''?\)') as m(b)
   where m.b is not null
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last: bounds and the planner's
-- estimate of their tasks only, from the catalog (no relation is opened). What the list
-- endpoints walk and maintenance reads; queues.history_partitions() adds sizes.
create or replace function queues.history_sets()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  -- A bound reads FOR VALUES FROM ('<lower>') TO ('<upper>'), or DEFAULT. It holds no
  -- column, so it is deparsed without opening the partition (relation 0), and its two
  -- quoted values are the 2nd and 4th fields between quotes (a regular expression took
  -- 10 us a row).
  select nullif(split_part(b.bound, '''', 2), '')::bigint, nullif(split_part(b.bound, '''', 4), '')::bigint,
         b.relname::text, greatest(b.reltuples, 0)::bigint, b.bound = 'DEFAULT'
    from (select c.relname, c.reltuples, pg_get_expr(c.relpartbound, 0) as bound
            from pg_inherits i
            join pg_class c on c.oid = i.inhrelid
           where i.inhparent = 'queues.task'::regclass) b
   order by b.bound = 'DEFAULT', 1
$$;

-- The task id ranges [lower_bound, upper_bound) that a newest-first read of history
-- walks, newest first: the sets that can hold a task below _before (null: any) and not
-- above the last task id handed out (sets above it hold none), upper bounds capped at
-- _before. Each range is one set, except the first, which spans the two newest: the set
-- being filled may have begun a moment ago, and two partitions per table cost the planner
-- little more than one, so a page usually takes one statement. A reader that gives each
-- range's bounds to its statement as values gets a plan of these partitions only.
-- While the default partition holds a task (outside every set; normally none), one range
-- instead, (null, _before): everything below _before, in one statement.
create or replace function queues.history_walk(_before bigint)
  returns table (lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (
    select s.lower_bound, least(s.upper_bound, _before) as upper_bound,
           row_number() over (order by s.lower_bound desc) as n
      from queues.history_sets() s
     where not s.is_default
       -- once, not once per set (a call reads the sequence's catalog entry)
       and s.lower_bound <= (select queues.last_task_id())
       and (_before is null or s.lower_bound < _before)
  ),
  walk as (
    select coalesce((select b.lower_bound from s b where b.n = 2), a.lower_bound) as lower_bound, a.upper_bound
      from s a where a.n = 1
    union all
    select s.lower_bound, s.upper_bound from s where s.n > 2
  ),
  spill as (select exists (select 1 from queues.task_default) as any)
  select w.lower_bound, w.upper_bound from walk w, spill where not spill.any
  union all
  select null, _before from spill where spill.any
  order by 1 desc nulls first
$$;

-- The bytes of the sets whose lower bounds are given (a null element: the default
-- partitions), summed over every history table: the data of tables with their TOAST, and
-- of their indexes (each relation's main fork: its free space and visibility maps, a
-- fraction of a percent, are left out, which halves the files looked at). Each partition
-- is looked up by name (queues.history_partition_name) through the catalog's name index;
-- sizing opens each partition and its indexes (a lock and a file size each, about 50
-- relations a set), so this is the one place that costs per partition: callers pass
-- every set they need in one call (one plan).
create or replace function queues.history_set_bytes(_lower_bounds bigint[])
  returns table (lower_bound bigint, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select l.lower_bound,
         coalesce(sum(pg_relation_size(c.oid) + coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0)), 0)::bigint,
         coalesce(sum((select sum(pg_relation_size(i.indexrelid)) from pg_index i where i.indrelid = c.oid)), 0)::bigint
    from unnest(_lower_bounds) l(lower_bound)
   cross join unnest(queues.history_tables()) t(name)
    left join pg_class c on c.relnamespace = 'queues'::regnamespace
                        and c.relname = case when l.lower_bound is null then t.name || '_default'
                                             else queues.history_partition_name(t.name, l.lower_bound) end
   group by l.lower_bound
$$;

-- queues.history_sets() with each set's bytes (queues.history_set_bytes), every set sized
-- on each call: the History page reads queues.history_set_measured for the sets that are
-- done instead (admin.history_status_at).
create or replace function queues.history_partition_sizes()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (select * from queues.history_sets())
  select s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default,
         b.table_bytes, b.index_bytes
    from s
    join queues.history_set_bytes(array(select s.lower_bound from s)) b
      on b.lower_bound is not distinct from s.lower_bound
   order by s.is_default, s.lower_bound
$$;

-- Measures the sets that are done into queues.history_set_measured: every set whose range
-- lies below the last task id and that holds no pending task, with its bytes
-- (queues.history_set_bytes) and its oldest and newest task. Such a set's tables change
-- only by a rare late fact (a redrive, a revocation or start mark that arrives after the
-- completion) until it is dropped, so a reader that answers often (the History page, every
-- dashboard's poll and /metrics) takes its figures from here and sizes only the sets still
-- filling. A row is written only when a figure changed; rows of sets no longer there are
-- deleted. Maintenance calls it at the end of each run (queues.maintain_history_step_at).
-- Returns the number of sets whose figures were written. Owner only.
create or replace function queues.measure_history_sets(_now timestamptz)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _last_id bigint := queues.last_task_id();
  _written integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  delete from queues.history_set_measured m
   where not exists (select 1 from queues.history_sets() s
                      where s.lower_bound = m.lower_bound and s.upper_bound = m.upper_bound);
  with done as (
    select s.lower_bound, s.upper_bound
      from queues.history_sets() s
     where not s.is_default and s.upper_bound <= _last_id
       and not exists (select 1 from queues.task_pending tp
                        where tp.task_id >= s.lower_bound and tp.task_id < s.upper_bound)
  ),
  measured as (
    select d.lower_bound, d.upper_bound, f.task_id as first_task_id, f.enqueued_at as first_enqueued_at,
           n.task_id as last_task_id, b.table_bytes, b.index_bytes
      from done d
      join queues.history_set_bytes(array(select d.lower_bound from done d)) b on b.lower_bound = d.lower_bound
      left join lateral (select t.task_id, t.enqueued_at from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id limit 1) f on true
      left join lateral (select t.task_id from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id desc limit 1) n on true
  )
  insert into queues.history_set_measured as m
         (lower_bound, upper_bound, first_task_id, first_enqueued_at, last_task_id, table_bytes, index_bytes,
          measured_at)
  select x.lower_bound, x.upper_bound, x.first_task_id, x.first_enqueued_at, x.last_task_id, x.table_bytes,
         x.index_bytes, _now
    from measured x
  on conflict (lower_bound) do update
     set upper_bound = excluded.upper_bound, first_task_id = excluded.first_task_id,
         first_enqueued_at = excluded.first_enqueued_at, last_task_id = excluded.last_task_id,
         table_bytes = excluded.table_bytes, index_bytes = excluded.index_bytes, measured_at = excluded.measured_at
   where (m.upper_bound, m.first_task_id, m.first_enqueued_at, m.last_task_id, m.table_bytes, m.index_bytes)
         is distinct from (excluded.upper_bound, excluded.first_task_id, excluded.first_enqueued_at,
                           excluded.last_task_id, excluded.table_bytes, excluded.index_bytes);
  get diagnostics _written = row_count;
  return _written;
end;
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last. Sizes are summed over
-- every history table (tables, TOAST and indexes); tasks is the planner's estimate.
create or replace function queues.history_partitions()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, total_bytes bigint, is_default boolean)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.lower_bound, p.upper_bound, p.partition_name, p.estimated_tasks,
         p.table_bytes + p.index_bytes, p.is_default
    from queues.history_partition_sizes() p
   order by p.is_default, p.lower_bound
$$;

-- The last task id handed out (0 before the first task).
create or replace function queues.last_task_id() returns bigint
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(pg_sequence_last_value(pg_get_serial_sequence('queues.task', 'task_id')::regclass), 0)
$$;

-- One step of partition maintenance at _now: the first of these that has work to do,
-- locking one table only (see "Locks" above), its locks taken between the queue's
-- transactions within lock_timeout_ms (queues.lock_history_tables):
-- 1. Sets ahead of need, one table per step: first a set left half made (some table has
--    its partition, task not yet; task's is made last), then a new set above every range
--    there is or was and above any task in the default partition, of partition_size task
--    ids, while the sets above the last task id handed out cover less than
--    partitions_ahead * partition_size ids. A set less than partition_size ids above the
--    last id (maintenance fell behind) is made whole in one step instead, above the last id.
-- 1b. Tasks in the default partition (ids handed out while no set covered them) are made
--    a set with their facts, at most 2,000 tasks per step: a half made set they fell into
--    is finished so, or a range of the gap they lie in (queues.adopt_history_range).
-- 2. A table detached from a dropped set is dropped (truncated first if it has rows and
--    a foreign key).
-- 3. A fact table's partition of a dropped set is detached.
-- 4. The oldest set that may go is dropped, starting with its task partition, which is
--    detached (the set's tasks are gone from then on; steps 3 and 2 take its facts and the
--    detached tables away): a set goes when its whole range lies below the last task id
--    (no new task can land in it), it holds no pending task (queues.task_pending, then
--    every task checked against its completion), and its newest completion is older than
--    the retention window. A set with one pending task is kept, however old.
-- 5. With nothing else to do: the sets that are done are measured for the History page
--    (queues.measure_history_sets).
-- Drops are recorded in queues.history_partition_dropped. A step that cannot get its lock
-- in time (or finds a task fell into the default partition in the range it makes) is
-- rolled back, recorded in queues.history_step_skipped and reported skipped; the run goes
-- on ("more") until 5 steps have been skipped within a minute. Returns
--   {"action": "attached" | "set_created" | "set_adopted" | "dropped_table" | "truncated" | "detached" |
--              "set_dropped" | "none" | "skipped" | "busy",
--    "table", "lower_bound", "upper_bound", "tasks", "reason", "late": as they apply,
--    "measured": with "none", the sets whose figures step 5 wrote,
--    "kept": sets below the last task id kept so far, "more": whether to call again}
-- "busy": another maintenance step is in flight (one maintainer at a time). Owner only.
create or replace function queues.maintain_history_step_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  -- A bound for any other lock a statement here might wait for (its own are taken
  -- first, without waiting); restored when the function returns.
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint;
  _doing text;
  _table text;
  _name text;
  _lower bigint;
  _upper bigint;
  _truncate boolean;
  _kept integer := 0;
  _set record;
  _tasks bigint;
  _last_completed timestamptz;
  _measured integer;
  _spilled bigint;
  _gap_lower bigint;
  _gap_upper bigint;
  -- The locks that keep every writer of history out (a late set, a move out of the
  -- default partitions): SHARE on each parent, ACCESS EXCLUSIVE on its default.
  _writers_out text[] := array(select x from unnest(queues.history_tables()) t(name),
                                 lateral (values (t.name), (t.name || '_default')) v(x));
  _writers_out_modes text[] := array(select m from unnest(queues.history_tables()) t(name),
                                       lateral (values ('share'), ('access exclusive')) v(m));
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if not pg_try_advisory_xact_lock(20252, 1) then
    return jsonb_build_object('action', 'busy', 'more', false);
  end if;
  select * into _setting from queues.history_setting;
  _last_id := queues.last_task_id();

  begin
    -- 1. Ahead of need: a half made set, unless a task fell into the default partition in
    --    its range (maintenance fell behind while it was half made): then task's
    --    partition cannot be attached, new sets start above it, and step 1b finishes it
    --    by moving those tasks into it.
    with b as (select * from queues.history_partition_bounds())
    select h.lower_bound, h.upper_bound into _lower, _upper
      from (select distinct b.lower_bound, b.upper_bound from b) h
     where not exists (select 1 from b x where x.table_name = 'task' and x.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.task_default t where t.task_id >= h.lower_bound and t.task_id < h.upper_bound)
     order by h.lower_bound
     limit 1;
    if _lower is null then
      -- A new set. Ranges are never reused: above every partition there is or was, and
      -- above any task in the default partition (a new set cannot overlap rows there).
      select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                      coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                      coalesce((select max(t.task_id) + 1 from queues.task_default t), 0))
        into _lower;
      if _lower < _last_id + 1 + _setting.partitions_ahead::bigint * _setting.partition_size then
        _upper := _lower + _setting.partition_size;
      else
        _lower := null;
      end if;
    end if;
    if _lower is not null and _lower <= _last_id + _setting.partition_size then
      -- Late: less than one set's width of ids is left before the ids handed out reach
      -- the set (maintenance fell behind). Made table by table, it could be outrun: a
      -- task given an id in its range before task's partition exists falls into the
      -- default partition, its facts into theirs, and the next table's attach fails on
      -- them, run after run. So the whole set is made in this one step, under locks
      -- that keep every writer of history out (SHARE on each parent, ACCESS EXCLUSIVE on
      -- each default), starting above the last id read under them: no task of its range
      -- exists, and none can be written until it commits. The ids handed out before it
      -- fall into the default partitions (queues.history_summary_at counts them).
      _doing := format('make the set from %s at once (late)', _lower);
      perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
      _last_id := queues.last_task_id();
      if exists (select 1 from queues.history_partition_bounds() b where b.lower_bound = _lower)
         and not exists (select 1 from queues.task_default t where t.task_id >= _lower and t.task_id < _upper) then
        null; -- a half made set that no task has reached: finished as it is
      else
        select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                        coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                        coalesce((select max(t.task_id) + 1 from queues.task_default t), 0),
                        _last_id + 1)
          into _lower;
        _upper := _lower + _setting.partition_size;
      end if;
      perform queues.create_history_partition(_lower, _upper);
      return jsonb_build_object('action', 'set_created', 'table', queues.history_partition_name('task', _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'late', true, 'more', true);
    end if;
    if _lower is not null then
      select t.name into _table
        from unnest(queues.history_tables()) with ordinality t(name, n)
       where to_regclass(format('queues.%I', queues.history_partition_name(t.name, _lower))) is null
       order by t.name = 'task', t.n
       limit 1;
      _doing := format('attach queues.%I', queues.history_partition_name(_table, _lower));
      perform queues.attach_history_partition(_table, _lower, _upper);
      if _table = 'task' then
        insert into queues.history_partition_created (lower_bound, upper_bound)
        values (_lower, _upper) on conflict (lower_bound) do nothing;
      end if;
      return jsonb_build_object('action', case when _table = 'task' then 'set_created' else 'attached' end,
                                'table', queues.history_partition_name(_table, _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'more', true);
    end if;

    -- 1b. Tasks in the default partition (ids handed out while no set covered them): the
    --    range around the lowest is made a set, its rows moved out of the default
    --    partitions (queues.adopt_history_range), so that retention drops them with it
    --    and pending ones stay claimable. The range: a half made set's own (finished so),
    --    or the gap between the ranges there are or were, below the lowest range above
    --    the task and cut after its 2,000th task (a step moves at most that many tasks,
    --    with their facts, under its locks). Not while no range lies above the task: the
    --    ids may still be handed out, and step 1 makes the set above them first.
    select t.task_id into _spilled from queues.task_default t order by t.task_id limit 1;
    if _spilled is not null then
      with r as (
        select b.lower_bound, b.upper_bound from queues.history_partition_bounds() b
        union all
        select d.lower_bound, d.upper_bound from queues.history_partition_dropped d
      )
      select (select min(r.lower_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             (select max(r.upper_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             coalesce((select max(r.upper_bound) from r where r.upper_bound <= _spilled), 0),
             (select min(r.lower_bound) from r where r.lower_bound > _spilled)
        into _lower, _upper, _gap_lower, _gap_upper;
      if _lower is null and _gap_upper is not null then
        -- The gap, cut after its 2,000th task.
        _lower := _gap_lower;
        _upper := least(_gap_upper,
                        coalesce((select t.task_id from queues.task_default t
                                   where t.task_id >= _spilled and t.task_id < _gap_upper
                                   order by t.task_id offset 2000 limit 1), _gap_upper));
      end if;
      if _upper is not null and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = _lower) then
        _doing := format('adopt the default partitions'' tasks in [%s, %s)', _lower, _upper);
        perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
        _tasks := queues.adopt_history_range(_lower, _upper);
        return jsonb_build_object('action', 'set_adopted', 'table', queues.history_partition_name('task', _lower),
                                  'lower_bound', _lower, 'upper_bound', _upper, 'tasks', _tasks, 'more', true);
      end if;
    end if;

    -- 2. A table detached from a dropped set (named as a partition, no longer one). Its
    --    drop locks only itself, so its files are unlinked under no lock the queue waits
    --    for; but dropping a foreign key takes ACCESS EXCLUSIVE on the table it
    --    references, so a table with one (none has today) is truncated first (under its
    --    own lock) and that drop is a catalog change only.
    select c.relname,
           pg_relation_size(c.oid) > 0 and exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'f')
      into _name, _truncate
      from pg_class c
      join unnest(queues.history_tables()) t(name)
        on c.relname = queues.history_partition_name(t.name, substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     where c.relnamespace = 'queues'::regnamespace and c.relkind = 'r' and not c.relispartition
       and exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     order by c.relname
     limit 1;
    if _name is not null then
      if _truncate then
        _doing := format('truncate queues.%I', _name);
        execute format('truncate queues.%I', _name);
        return jsonb_build_object('action', 'truncated', 'table', _name, 'more', true);
      end if;
      _doing := format('drop queues.%I', _name);
      execute format('drop table queues.%I', _name);
      return jsonb_build_object('action', 'dropped_table', 'table', _name, 'more', true);
    end if;

    -- 3. A fact table's partition of a dropped set: detached, a catalog change.
    select b.table_name, b.partition_name, b.lower_bound, b.upper_bound into _table, _name, _lower, _upper
      from queues.history_partition_bounds() b
     where exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = b.lower_bound and d.upper_bound = b.upper_bound)
     order by b.lower_bound, b.table_name
     limit 1;
    if _name is not null then
      _doing := format('detach queues.%I', _name);
      perform queues.lock_history_tables(array[_table, _name, _table || '_default'],
                                         array['access exclusive', 'access exclusive', 'access exclusive'],
                                         _setting.lock_timeout_ms);
      execute format('alter table queues.%I detach partition queues.%I', _table, _name);
      return jsonb_build_object('action', 'detached', 'table', _name, 'lower_bound', _lower, 'upper_bound', _upper,
                                'more', true);
    end if;

    -- 4. Expired sets, oldest first.
    for _set in
      select p.lower_bound, p.upper_bound from queues.history_sets() p
       where not p.is_default and p.upper_bound <= _last_id
       order by p.lower_bound
    loop
      -- Cheap checks first, without strong locks: a pending task, or a recent completion.
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      select max(c.completed_at) into _last_completed from queues.task_completed c
       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound;
      if _last_completed > _now - _setting.retention then
        _kept := _kept + 1;
        continue;
      end if;
      -- Every task completed, from the facts (one scan of the set's two partitions).
      select count(*) into _tasks from queues.task t
       where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound;
      if exists (select 1 from queues.task t
                  where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound
                    and not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)) then
        _kept := _kept + 1;
        continue;
      end if;

      _name := queues.history_partition_name('task', _set.lower_bound);
      _doing := format('detach queues.%I', _name);
      begin
        -- Detaching holds ACCESS EXCLUSIVE on queues.task and the partition, so no
        -- transaction that wrote to the set or read it to complete a task is still open:
        -- check again what could have changed (a task enqueued with an id handed out
        -- before the checks, and its completion).
        perform queues.lock_history_tables(array['task', _name, 'task_default'],
                                           array['access exclusive', 'access exclusive', 'access exclusive'],
                                           _setting.lock_timeout_ms);
        execute format('alter table queues.task detach partition queues.%I', _name);
        if exists (select 1 from queues.task_pending tp
                    where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_completed c
                       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                         and c.completed_at > _now - _setting.retention) then
          -- Roll the block back, which attaches the partition again.
          raise exception 'set [%, %) changed since it was checked', _set.lower_bound, _set.upper_bound
            using errcode = 'QH001';
        end if;
        insert into queues.history_partition_dropped (lower_bound, upper_bound, tasks, last_completed_at, dropped_at)
        values (_set.lower_bound, _set.upper_bound, _tasks, _last_completed, _now);
        return jsonb_build_object('action', 'set_dropped', 'table', _name, 'lower_bound', _set.lower_bound,
                                  'upper_bound', _set.upper_bound, 'tasks', _tasks, 'kept', _kept, 'more', true);
      exception
        when sqlstate 'QH001' then
          _kept := _kept + 1;
      end;
    end loop;

    -- 5. Nothing left to change: the sets that are done are measured for the readers.
    _measured := queues.measure_history_sets(_now);
    delete from queues.history_step_skipped k where k.skipped_at < _now - interval '1 day';
  exception
    -- check_violation: a task landed in a default partition, in the range being made,
    -- since it was read above; the next step starts above it. The skip is recorded, and
    -- the run goes on (a later try may find its moment) until 5 steps have been skipped
    -- within a minute.
    when lock_not_available or deadlock_detected or check_violation then
      insert into queues.history_step_skipped (step, reason) values (coalesce(_doing, 'a step'), sqlerrm);
      return jsonb_build_object('action', 'skipped', 'step', _doing, 'reason', sqlerrm, 'kept', _kept,
                                'more', (select count(*) from queues.history_step_skipped k
                                          where k.skipped_at > clock_timestamp() - interval '1 minute') < 5);
  end;
  return jsonb_build_object('action', 'none', 'kept', _kept, 'measured', _measured, 'more', false);
end;
$$;

-- Partition maintenance at _now, every step of queues.maintain_history_step_at in one
-- transaction, until none is left or one is skipped: its locks are held until that
-- transaction ends, so this is for tests and for running it by hand; the schedule runs
-- each step in a transaction of its own (queues.maintain_history_step). Returns
--   {"created": [[lo, hi], ...], "dropped": [[lo, hi], ...], "skipped": [{...}], "kept": n}
create or replace function queues.maintain_history_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _created jsonb := '[]';
  _dropped jsonb := '[]';
  _skipped jsonb := '[]';
  _adopted jsonb := '[]';
  _kept integer := 0;
  _step jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  -- Each step changes the catalog or ends the run (skips end it after 5 within a minute);
  -- the bound only guards against a bug.
  for _i in 1 .. 100000 loop
    _step := queues.maintain_history_step_at(_now);
    case _step ->> 'action'
      when 'set_created' then
        _created := _created || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_dropped' then
        _dropped := _dropped || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_adopted' then
        _adopted := _adopted || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'skipped', 'busy' then
        _skipped := _skipped || jsonb_build_array(_step);
      else
        null;
    end case;
    _kept := coalesce((_step ->> 'kept')::integer, _kept);
    exit when not (_step ->> 'more')::boolean;
  end loop;
  return jsonb_build_object('created', _created, 'dropped', _dropped, 'adopted', _adopted, 'skipped', _skipped,
                            'kept', _kept);
end;
$$;

-- A db_function step: maintain_history_at(now()), every step in the caller's transaction
-- (for a one-off run; the schedule runs queues.maintain_history_step).
create or replace function queues.maintain_history(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_at(now()))
$$;

-- The schedule's step: one step of maintenance (maintain_history_step_at(now())), its
-- report as the payload of a success envelope. The schedule's payload asks the worker to
-- call it again while the report says "more" ("repeat": true, see the worker's
-- db_function processor), each call a transaction of its own, so that no step's lock is
-- held while another step runs.
create or replace function queues.maintain_history_step(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_step_at(now()))
$$;

-- What operators watch, without the list of sets: the settings, the oldest retained task,
-- and the next drop (the lowest set below the last task id with its newest completion: it
-- can go at last_completed_at + retention, unless it holds pending tasks). Each read of
-- a partitioned table is pruned at plan time to the set it needs (EXECUTE with the set's
-- bounds as values), so the cost does not grow with the number of sets beyond the catalog
-- read of their bounds.
create or replace function queues.history_summary_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _set record;
  _next record;
  _next_json jsonb;
  _oldest_id bigint;
  _oldest_at timestamptz;
  _default_id bigint;
  _default_at timestamptz;
  _last_completed timestamptz;
  _pending bigint;
begin
  select * into _setting from queues.history_setting;
  -- The oldest task: in the lowest set that holds one (or in the default partition).
  for _set in
    select s.lower_bound, s.upper_bound from queues.history_sets() s
     where not s.is_default and s.lower_bound <= _last_id
     order by s.lower_bound
  loop
    execute 'select t.task_id, t.enqueued_at from queues.task t
              where t.task_id >= $1 and t.task_id < $2 order by t.task_id limit 1'
      into _oldest_id, _oldest_at using _set.lower_bound, _set.upper_bound;
    exit when _oldest_id is not null;
  end loop;
  select t.task_id, t.enqueued_at into _default_id, _default_at from queues.task_default t order by t.task_id limit 1;
  if _default_id < _oldest_id or _oldest_id is null then
    _oldest_id := _default_id;
    _oldest_at := _default_at;
  end if;

  select s.lower_bound, s.upper_bound into _next
    from queues.history_sets() s
   where not s.is_default and s.upper_bound <= _last_id
   order by s.lower_bound
   limit 1;
  if found then
    execute 'select max(c.completed_at) from queues.task_completed c where c.task_id >= $1 and c.task_id < $2'
      into _last_completed using _next.lower_bound, _next.upper_bound;
    _pending := (select count(*) from queues.task_pending tp
                  where tp.task_id >= _next.lower_bound and tp.task_id < _next.upper_bound);
    _next_json := jsonb_build_object(
      'lower_bound', _next.lower_bound, 'upper_bound', _next.upper_bound,
      'pending_tasks', _pending,
      'last_completed_at', _last_completed,
      'drop_after', case when _pending = 0 then coalesce(_last_completed + _setting.retention, _now) end);
  end if;
  return jsonb_build_object(
    'retention_seconds', extract(epoch from _setting.retention)::bigint,
    'partition_size', _setting.partition_size,
    'partitions_ahead', _setting.partitions_ahead,
    'last_task_id', _last_id,
    'oldest_task_id', _oldest_id,
    'oldest_enqueued_at', _oldest_at,
    'default_partition_tasks', (select count(*) from queues.task_default),
    'next_drop', _next_json,
    'dropped_sets', (select count(*) from queues.history_partition_dropped),
    'skipped_steps_last_hour', (select count(*) from queues.history_step_skipped k where k.skipped_at > _now - interval '1 hour'),
    'last_skipped_step', (select jsonb_build_object('skipped_at', k.skipped_at, 'step', k.step, 'reason', k.reason)
                            from queues.history_step_skipped k order by k.skipped_at desc limit 1),
    'last_dropped_at', (select max(d.dropped_at) from queues.history_partition_dropped d));
end;
$$;

-- queues.history_summary_at(_now) and the sets with their sizes (queues.history_partitions()).
create or replace function queues.history_status_at(_now timestamptz)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.history_summary_at(_now) || jsonb_build_object(
    'partitions', coalesce((select jsonb_agg(jsonb_build_object(
        'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'name', p.partition_name,
        'estimated_tasks', p.estimated_tasks, 'total_bytes', p.total_bytes, 'is_default', p.is_default)
        order by p.is_default, p.lower_bound)
      from queues.history_partitions() p), '[]'))
$$;

-- The worker runs maintenance as the db_function task of its schedule; operators read the
-- status through admin.history_status(). Everything else here is owner only. Granted
-- here, beside the functions, so that a migration including sql/queues/privileges.sql
-- before this file does not name a function that does not exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.maintain_history_step_at(timestamptz),
  queues.history_status_at(timestamptz), queues.history_summary_at(timestamptz), queues.history_partitions(),
  queues.history_partition_bounds(), queues.history_sets(), queues.history_partition_sizes(),
  queues.history_set_bytes(bigint[]), queues.measure_history_sets(timestamptz),
  queues.history_walk(bigint), queues.create_history_partition(bigint, bigint),
  queues.attach_history_partition(text, bigint, bigint), queues.lock_history_tables(text[], text[], integer),
  queues.adopt_history_range(bigint, bigint), queues.create_history_table(text, text),
  queues.cancel_autovacuum(text[])
  from public;
grant execute on function queues.maintain_history(jsonb), queues.maintain_history_step(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
select internal.register_runnable_function('queues.maintain_history_step(jsonb)');
--! EndIncluded queues/partitions.sql

-- The maintenance schedule runs the step function, called again while there is more,
-- each call its own transaction. Only the definition this project installed is changed
-- (cron, priority, missed-run policy and whether it is enabled are kept); an operator's
-- own payload is left alone.
do $$
declare
  _s schedules.schedule;
  _v schedules.schedule_version;
begin
  select * into _s from schedules.schedule s where s.name = 'queue_history_maintenance';
  if not found then
    return;
  end if;
  _v := schedules.current_version(_s.schedule_id);
  if _v.task_type = 'db_function' and _v.payload = '{"db_function": "queues.maintain_history"}'::jsonb then
    perform schedules.append_schedule_version(
      now(), _s.schedule_id, _v.cron, _v.task_type, '{"db_function": "queues.maintain_history_step", "repeat": true}',
      _v.priority, _v.missed_run_policy, _v.enabled);
  end if;
end;
$$;

--! split: 441-lease-worker-key.sql
-- Bytes per task: a lease names its worker by an integer key instead of repeating the
-- worker id's text on every lease (RELIABILITY.md, "Bytes per task"). Each worker id is
-- kept once, in queues.worker_name; queues.claim_tasks_at looks its key up (adding it on
-- a worker id's first claim) and writes it to queues.task_lease.worker_key. Leases written
-- before keep their worker_id text (no rewrite of the history; retention drops them in
-- time); every reader takes the id from either (queues.task_lease_effective,
-- queues.stale_leases_at, admin.list_workers, admin.list_tasks, admin.capacity).
-- Partitions made from now on get the column from their parent
-- (queues.attach_history_partition copies the parent's columns and constraints).
set local lock_timeout = '5s';

-- Append-only and small (one row per worker process that ever claimed); claims read it
-- on every call, by the unique index on worker_id.
create table if not exists queues.worker_name (
  worker_key integer generated always as identity primary key,
  worker_id  text not null unique check (length(worker_id) between 1 and 200)
);
comment on table queues.worker_name is
  'Append-only: each worker id that took a lease, once, with the key its leases name it by (queues.task_lease.worker_key).';
create or replace trigger forbid_update before update on queues.worker_name
  for each statement execute function queues.forbid_fact_update();

-- lock: access exclusive on queues.task_lease: adds the nullable column worker_key, drops worker_id's not null and adds a check not valid: catalog changes only (no rewrite, no scan), once; no lock when already done
do $$
begin
  if not exists (select 1 from pg_attribute
                  where attrelid = 'queues.task_lease'::regclass and attname = 'worker_key' and not attisdropped) then
    alter table queues.task_lease add column worker_key integer;
    alter table queues.task_lease alter column worker_id drop not null;
    -- Every lease names its worker one way or the other. Not valid: rows written before
    -- all have worker_id, and validating would scan the whole history under the lock.
    alter table queues.task_lease add constraint task_lease_worker_named
      check (worker_key is not null or worker_id is not null) not valid;
  end if;
end;
$$;
comment on column queues.task_lease.worker_key is
  'The worker that took the lease (queues.worker_name); null on leases written before, which have worker_id.';
comment on column queues.task_lease.worker_id is
  'The worker that took the lease, on leases written before worker_key; null since.';

--! Included queues/task_lease_effective.sql
-- Each lease with the expiry in force: released, else revoked, else the newest
-- extension's, else as claimed; and its worker's id (a lease names its worker by key in
-- queues.worker_name, or, written before that, by id). Lease facts are joined on
-- (task_id, task_lease_id), their primary keys, so a task's leases are read from its own
-- partition set.
create or replace view queues.task_lease_effective as
select l.task_lease_id, l.task_id,
       coalesce(l.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = l.worker_key)) as worker_id,
       l.leased_at,
       coalesce(r.released_at, v.revoked_at, e.expires_at, l.expires_at) as expires_at,
       r.released_at,
       coalesce(e.extensions, 0) as extensions,
       v.revoked_at
  from queues.task_lease l
  left join queues.task_lease_release r on r.task_id = l.task_id and r.task_lease_id = l.task_lease_id
  left join queues.task_lease_revocation v on v.task_id = l.task_id and v.task_lease_id = l.task_lease_id
  left join lateral (
    select max(x.expires_at) as expires_at, count(*)::integer as extensions
      from queues.task_lease_extension x
     where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
  ) e on true;
comment on view queues.task_lease_effective is 'Leases with their effective expiry (releases and heartbeats applied).';
--! EndIncluded queues/task_lease_effective.sql
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
    -- migrations/current/520-hot-path-plans.sql): only expired leases are read.
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
    join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    left join queues.worker_name n on n.worker_key = l.worker_key
    join queues.worker w on w.worker_id = coalesce(l.worker_id, n.worker_id)
   where p.available_at > _now
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
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id from queues.stale_leases_at(_now, _dead_after_seconds) s
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null,
           -- A lease whose task never started does not count towards abandonment.
           unstarted_count = p.unstarted_count + (not exists (
             select 1 from queues.task_lease_started st
              where st.task_id = p.task_id and st.task_lease_id = s.task_lease_id))::integer
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
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
-- complete anything). The tasks it never started (its local queue) are claimable at once
-- instead of when their leases expire, and their revocation does not count towards
-- abandonment. The tasks it had started count an expired lease and are suspects (one of
-- them may have killed the process): they stay unclaimable until their leases would have
-- expired, as without a supervisor, so a poison task's crash loop is paced by its lease
-- and the supervisor's spares keep up with the deaths instead of all dying in a second.
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
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)));
  return query
  with held as (
    select p.task_id, p.current_lease_id as task_lease_id,
           exists (select 1 from queues.task_lease_started st
                    where st.task_id = p.task_id and st.task_lease_id = p.current_lease_id) as started
      from queues.task_pending p
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)
  ),
  revoked as (
    -- available_at of a leased row is its lease's expiry (heartbeats included).
    update queues.task_pending p
       set available_at = case when h.started then p.available_at else now() end,
           current_lease_id = null,
           unstarted_count = p.unstarted_count + (not h.started)::integer
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
--! Included admin/workers.sql
-- Workers for the dashboard: the registry (queues.worker) with heartbeat age and tasks in
-- flight, and stale recovery for one worker.

-- Every registered worker, live ones first: status live (seen within _dead_after_seconds,
-- default 600), stale (not seen since, not stopped: its leases can be recovered) or
-- stopped; its task types; the seconds since its last heartbeat; the live leases it holds.
create or replace function admin.list_workers_at(_now timestamptz, _dead_after_seconds integer)
  returns table (
    worker_id text, task_types text[], status text, started_at timestamptz, last_seen_at timestamptz,
    stopped_at timestamptz, heartbeat_age_seconds double precision, tasks_in_flight bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  with in_flight as (
    -- live leases: the pending rows under a lease that has not expired (bounded by pending work)
    select coalesce(l.worker_id, n.worker_id) as worker_id, count(*) as n
      from queues.task_pending p
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
      -- a lease names its worker by key (queues.worker_name), or by id if written before
      left join queues.worker_name n on n.worker_key = l.worker_key
     where p.available_at > _now
     group by 1
  )
  select w.worker_id, w.task_types,
         case when w.stopped_at is not null then 'stopped'
              when w.last_seen_at < _now - make_interval(secs => coalesce(_dead_after_seconds, 600)) then 'stale'
              else 'live' end,
         w.started_at, w.last_seen_at, w.stopped_at,
         extract(epoch from _now - w.last_seen_at)::double precision,
         coalesce(f.n, 0)
    from queues.worker w
    left join in_flight f on f.worker_id = w.worker_id
   order by (w.stopped_at is not null), w.last_seen_at desc, w.worker_id
   limit 1000
$$;

create or replace function admin.list_workers()
  returns table (
    worker_id text, task_types text[], status text, started_at timestamptz, last_seen_at timestamptz,
    stopped_at timestamptz, heartbeat_age_seconds double precision, tasks_in_flight bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_workers_at(now(), 600)
$$;

-- Revokes the live leases of one worker that has not been seen for _dead_after_seconds
-- (10 to 86400, default 600), like queues.recover_stale_leases does for all of them.
-- 23503 for an unknown worker; 55000 when the worker is live or stopped (nothing to
-- recover from a worker that is still heartbeating). Returns what was revoked.
create or replace function admin.recover_worker_leases_at(_now timestamptz, _worker_id text, _dead_after_seconds integer)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _dead integer := coalesce(_dead_after_seconds, 600);
  _w queues.worker;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _worker_id is null then
    raise exception 'worker_id must not be null' using errcode = '22004';
  end if;
  if _dead not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead using errcode = '22023';
  end if;
  select * into _w from queues.worker w where w.worker_id = _worker_id;
  if not found then
    raise exception 'worker % is not registered', quote_literal(left(_worker_id, 200)) using errcode = '23503';
  end if;
  if _w.stopped_at is not null then
    raise exception 'worker % stopped at %; it holds no leases to recover', _worker_id, _w.stopped_at using errcode = '55000';
  end if;
  if _w.last_seen_at >= _now - make_interval(secs => _dead) then
    raise exception 'worker % was seen % s ago, within % s: it is not stale', _worker_id,
      round(extract(epoch from _now - _w.last_seen_at)), _dead using errcode = '55000';
  end if;
  perform queues.lock_resource_keys(array(
    select s.task_id from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id));
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id
      from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
    returning p.task_id, s.task_lease_id, s.worker_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, _now, format('worker %s not seen for %s s (recovered from the dashboard)', r.worker_id, _dead)
      from revoked r
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

create or replace function admin.recover_worker_leases(_worker_id text, _dead_after_seconds integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.recover_worker_leases_at(now(), _worker_id, _dead_after_seconds)
$$;
--! EndIncluded admin/workers.sql
--! Included admin/capacity.sql
-- Capacity planning per role (= task_type): how much work is waiting, how fast workers
-- get through it, and how many workers would drain it in 1, 4 or 8 hours.
--
-- Cost: pending/ready/running count queues.task_pending (bounded by pending work);
-- throughput reads only the completions of the last _window_seconds, through
-- task_completed_completed_at_idx, with primary-key probes into task and task_lease for
-- each of them; active workers read queues.worker. Nothing scans history.
--
-- Figures:
--   pending               tasks not completed (scheduled, ready, running, retrying)
--   ready                 claimable now
--   running               held by a live lease
--   active_workers        registered workers of this type seen within _dead_after_seconds
--                         and not stopped
--   completed_in_window   completions (any outcome) in the window
--   window_workers        distinct workers whose leases completed those tasks
--   tasks_per_worker_hour completed_in_window / (window_workers * window hours); null
--                         without completions in the window
--   estimated_hours_to_drain  pending / (tasks_per_worker_hour * active_workers); 0 when
--                         nothing is pending; null without a rate or without workers
--   workers_needed_1h/4h/8h   ceil(pending / (tasks_per_worker_hour * hours)); 0 when
--                         nothing is pending; null without a rate

create or replace function admin.capacity_at(
  _now                timestamptz,
  _task_type          text,
  _window_seconds     integer,
  _dead_after_seconds integer
) returns table (
  task_type                text,
  pending                  bigint,
  ready                    bigint,
  running                  bigint,
  active_workers           bigint,
  completed_in_window      bigint,
  window_workers           bigint,
  window_seconds           integer,
  tasks_per_worker_hour    double precision,
  estimated_hours_to_drain double precision,
  workers_needed_1h        bigint,
  workers_needed_4h        bigint,
  workers_needed_8h        bigint
)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 3600);
  _dead_after integer := coalesce(_dead_after_seconds, 600);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_type is not null
     and not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '23503', hint = 'Known task types are listed in queues.task_type.';
  end if;
  if _window not between 60 and 604800 then
    raise exception 'window_seconds must be between 60 and 604800 (7 days), got %', _window
      using errcode = '22023';
  end if;
  if _dead_after not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead_after
      using errcode = '22023';
  end if;

  return query
  with types as (
    select t.task_type from queues.task_type t
     where _task_type is null or t.task_type = _task_type
  ),
  queue as (
    select p.task_type,
           count(*) as pending,
           count(*) filter (where p.available_at <= _now) as ready,
           count(*) filter (where p.available_at > _now and p.current_lease_id is not null) as running
      from queues.task_pending p
     where _task_type is null or p.task_type = _task_type
     group by p.task_type
  ),
  recent as (
    -- Completions in the window by completed_at (index range scan); each is joined to its
    -- task and lease by primary key (lateral + limit 1 keeps these nested loops).
    -- A lease names its worker by key (queues.worker_name), or by id if written before
    -- that key existed: a worker counts once per way it is named (twice, for one window,
    -- if it ran across that migration).
    select t.task_type, count(*) as completed, count(distinct (l.worker_key, l.worker_id)) as workers
      from queues.task_completed c
     cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
      left join lateral (select y.worker_key, y.worker_id from queues.task_lease y
                          where y.task_id = c.task_id and y.task_lease_id = c.task_lease_id limit 1) l on true
     where c.completed_at > _now - make_interval(secs => _window)
       and c.completed_at <= _now
       and (_task_type is null or t.task_type = _task_type)
     group by t.task_type
  ),
  workers as (
    select r.task_type, count(*) as active
      from queues.worker w
     cross join lateral unnest(w.task_types) as r(task_type)
     where w.stopped_at is null
       and w.last_seen_at > _now - make_interval(secs => _dead_after)
     group by r.task_type
  ),
  figures as (
    select ty.task_type,
           coalesce(q.pending, 0) as pending,
           coalesce(q.ready, 0) as ready,
           coalesce(q.running, 0) as running,
           coalesce(w.active, 0) as active,
           coalesce(r.completed, 0) as completed,
           coalesce(r.workers, 0) as workers,
           case when coalesce(r.completed, 0) > 0 and r.workers > 0
                then r.completed::double precision / (r.workers * (_window / 3600.0))
           end as rate
      from types ty
      left join queue q on q.task_type = ty.task_type
      left join recent r on r.task_type = ty.task_type
      left join workers w on w.task_type = ty.task_type
  )
  select f.task_type, f.pending, f.ready, f.running, f.active, f.completed, f.workers, _window,
         f.rate,
         case when f.pending = 0 then 0
              when f.rate is null or f.active = 0 then null
              else f.pending / (f.rate * f.active) end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 1))::bigint end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 4))::bigint end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 8))::bigint end
    from figures f
   order by f.task_type;
end;
$$;

-- Capacity of every role (_task_type null) or of one (23503 if unknown), over the last
-- hour of completions, counting workers seen within 10 minutes.
create or replace function admin.capacity(_task_type text default null)
  returns table (
    task_type                text,
    pending                  bigint,
    ready                    bigint,
    running                  bigint,
    active_workers           bigint,
    completed_in_window      bigint,
    window_workers           bigint,
    window_seconds           integer,
    tasks_per_worker_hour    double precision,
    estimated_hours_to_drain double precision,
    workers_needed_1h        bigint,
    workers_needed_4h        bigint,
    workers_needed_8h        bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.capacity_at(now(), _task_type, 3600, 600)
$$;
--! EndIncluded admin/capacity.sql
--! Included admin/tasks.sql
-- Reading tasks for the operations API: a keyset-paginated list, one task with its facts,
-- and counts by type and state. The *_at functions take the clock (owner only, for
-- tests); the API calls the wrappers, which pass now().

-- Tasks newest first (by task_id), _limit per page (default 50, at most 500), older than
-- _before_task_id (the last id of the previous page: keyset pagination, so a page costs
-- the same at any depth). Filters, each optional and combined with AND:
--   _task_type            a registered type
--   _state                one of admin.task_states()
--   _worker_id            tasks leased at least once by this worker
--   _resource_key         tasks with this resource key
--   _enqueued_from/_to    enqueued_at in [from, to)
--   _payload_path/_value  payload #> path = value (a JSON value)
-- Which table drives the walk: pending states walk queues.task_pending (bounded by
-- pending work); outcomes walk queues.task_completed by key (failed and abandoned ones
-- by task_completed_unsuccessful_task_idx, which holds only those); a resource key walks
-- task_resource_key_idx; otherwise queues.task by its primary key, newest first. Every
-- walk stops after _limit matches, so its cost is the rows it has to pass over to find
-- them: a filter that matches only old or rare tasks (a payload value, a worker gone for
-- a week, a time range far back) reads the newer tasks in between. The statement is
-- built from constant fragments; every value is a parameter.
-- History is partitioned by task id (sql/queues/partitions.sql), so the newest tasks sit
-- in the newest partition set. Every walk but the pending states' runs the statement once
-- per range of queues.history_walk (a set, or the two newest), newest first, until the
-- page is full: each run has the range's bounds as values ($12, $13), so the planner reads
-- the range's partitions of task, task_completed and task_lease instead of planning,
-- opening and locking all of them and merging every set for the newest 50. Null bounds
-- (the pending states; a task in the default partition) read every partition at once.
create or replace function admin.list_tasks_at(
  _now            timestamptz,
  _task_type      text,
  _state          text,
  _limit          integer,
  _before_task_id bigint,
  _worker_id      text,
  _resource_key   text,
  _enqueued_from  timestamptz,
  _enqueued_to    timestamptz,
  _payload_path   text[],
  _payload_value  jsonb
) returns table (
  task_id       bigint,
  task_type     text,
  state         text,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  lease_count   integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  available_at  timestamptz,
  completed_at  timestamptz
)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _filters text := '';
  _sql text;
  _worker_key integer;
  _lower bigint;
  _upper bigint;
  _found bigint;
  _remaining integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  if _state is not null and not (_state = any (admin.task_states())) then
    raise exception 'unknown state %; expected one of %', quote_literal(left(_state, 100)),
      array_to_string(admin.task_states(), ', ') using errcode = '22023';
  end if;
  if _before_task_id is not null and _before_task_id < 1 then
    raise exception 'before_task_id must be a positive task id, got %', _before_task_id
      using errcode = '22023';
  end if;
  if _worker_id is not null and length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _resource_key is not null and length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _enqueued_from is not null and _enqueued_to is not null and _enqueued_from >= _enqueued_to then
    raise exception 'enqueued_from (%) must be before enqueued_to (%)', _enqueued_from, _enqueued_to
      using errcode = '22023';
  end if;
  if (_payload_path is null) <> (_payload_value is null) then
    raise exception 'payload_path and payload_value go together: give both or neither' using errcode = '22023';
  end if;
  if _payload_path is not null and (cardinality(_payload_path) not between 1 and 10
      or exists (select 1 from unnest(_payload_path) e where e is null or length(e) not between 1 and 100)) then
    raise exception 'payload_path must have 1 to 10 keys of 1 to 100 characters each' using errcode = '22023';
  end if;

  if _task_type is not null then _filters := _filters || ' and t.task_type = $2'; end if;
  if _worker_id is not null then
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
    _filters := _filters || ' and exists (select 1 from queues.task_lease l where l.task_id = t.task_id
                                             and (l.worker_key = $14 or l.worker_id = $6)
                                             and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))';
  end if;
  if _resource_key is not null then _filters := _filters || ' and t.resource_key = $7'; end if;
  if _enqueued_from is not null then _filters := _filters || ' and t.enqueued_at >= $8'; end if;
  if _enqueued_to is not null then _filters := _filters || ' and t.enqueued_at < $9'; end if;
  if _payload_path is not null then _filters := _filters || ' and t.payload #> $10 = $11'; end if;

  if _state in ('scheduled', 'ready', 'running', 'retrying') then
    _sql := 'select p.task_id, p.task_type, $3, p.priority, t.resource_key, t.max_attempts, p.lease_count,
                    t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
               from queues.task_pending p
              -- lateral + limit 1: one primary-key probe per pending task passed over
              cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
              where admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1) = $3
                and ($4::bigint is null or p.task_id < $4)' || _filters || '
              order by p.task_id desc
              limit $5';
  elsif _state is not null then
    _sql := 'select c.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
                    (select count(*)::integer from queues.task_lease l where l.task_id = c.task_id
                        and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13)),
                    t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
               from queues.task_completed c
              cross join lateral (select * from queues.task x where x.task_id = c.task_id
                                     and ($12::bigint is null or x.task_id >= $12) and ($13::bigint is null or x.task_id < $13)
                                   limit 1) t
              where c.outcome = $3
                and ($4::bigint is null or c.task_id < $4)
                and ($12::bigint is null or c.task_id >= $12) and ($13::bigint is null or c.task_id < $13)' || _filters || '
              order by c.task_id desc
              limit $5';
  else
    _sql := 'select t.task_id, t.task_type,
                    coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1)),
                    t.priority, t.resource_key, t.max_attempts,
                    coalesce(p.lease_count,
                             (select count(*)::integer from queues.task_lease l where l.task_id = t.task_id
                                 and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))),
                    t.enqueued_at, t.scheduled_at, p.available_at, c.completed_at
               from queues.task t
               left join queues.task_pending p on p.task_id = t.task_id
               left join queues.task_completed c on c.task_id = t.task_id
                 and ($12::bigint is null or c.task_id >= $12) and ($13::bigint is null or c.task_id < $13)
              where ($4::bigint is null or t.task_id < $4)
                and ($12::bigint is null or t.task_id >= $12) and ($13::bigint is null or t.task_id < $13)' || _filters || '
              order by t.task_id desc
              limit $5';
  end if;

  if _state in ('scheduled', 'ready', 'running', 'retrying') then
    return query execute _sql
      using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, null::bigint, null::bigint, _worker_key;
    return;
  end if;
  _remaining := _page;
  for _lower, _upper in
    select w.lower_bound, w.upper_bound from queues.history_walk(_before_task_id) w
     order by w.lower_bound desc nulls first
  loop
    return query execute _sql
      using _now, _task_type, _state, _before_task_id, _remaining, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, _lower, _upper, _worker_key;
    get diagnostics _found = row_count;
    _remaining := _remaining - _found;
    exit when _remaining <= 0;
  end loop;
end;
$$;

create or replace function admin.list_tasks(
  _task_type      text default null,
  _state          text default null,
  _limit          integer default null,
  _before_task_id bigint default null,
  _worker_id      text default null,
  _resource_key   text default null,
  _enqueued_from  timestamptz default null,
  _enqueued_to    timestamptz default null,
  _payload_path   text[] default null,
  _payload_value  jsonb default null
) returns table (
  task_id       bigint,
  task_type     text,
  state         text,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  lease_count   integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  available_at  timestamptz,
  completed_at  timestamptz
)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_tasks_at(now(), _task_type, _state, _limit, _before_task_id, _worker_id,
                                    _resource_key, _enqueued_from, _enqueued_to, _payload_path, _payload_value)
$$;

-- One task with everything recorded about it, as a JSON object:
--   {task: {..., state}, leases: [...], errors: [...], completion: {...} | null,
--    failed_attempts: [...], redriven_to: id | null, redriven_from: id | null}
-- Raises 23503 when there is no such task.
create or replace function admin.get_task_at(_now timestamptz, _task_id bigint)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;

  select jsonb_build_object(
           'task', to_jsonb(t) || jsonb_build_object(
             'state', coalesce(c.outcome,
                               admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)),
             'available_at', p.available_at,
             'current_lease_id', p.current_lease_id),
           'leases', coalesce((
             select jsonb_agg(jsonb_build_object(
                      'task_lease_id', l.task_lease_id, 'worker_id', l.worker_id,
                      'leased_at', l.leased_at, 'expires_at', l.expires_at,
                      'released_at', l.released_at, 'revoked_at', l.revoked_at, 'extensions', l.extensions,
                      'live', coalesce(l.task_lease_id = p.current_lease_id and p.available_at > _now, false))
                      order by l.task_lease_id)
               from queues.task_lease_effective l where l.task_id = t.task_id), '[]'::jsonb),
           'errors', coalesce((
             select jsonb_agg(to_jsonb(e) - 'task_id' order by e.error_id)
               from queues.error e where e.task_id = t.task_id), '[]'::jsonb),
           'completion', case when c.task_id is not null then to_jsonb(c) - 'task_id' end)
    into _result
    from queues.task t
    left join queues.task_pending p on p.task_id = t.task_id
    left join queues.task_completed c on c.task_id = t.task_id
   where t.task_id = _task_id;

  if _result is null then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  return _result || admin.task_retry_facts(_task_id) || admin.task_dashboard_facts(_task_id);
end;
$$;

create or replace function admin.get_task(_task_id bigint)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.get_task_at(now(), _task_id)
$$;

-- Counts by task type and state: pending states over queues.task_pending (bounded by
-- pending work), completion outcomes over the last _window_seconds only (default 86400;
-- read through task_completed_completed_at_idx), so the cost never follows history.
-- Every registered type appears, with zero rows left out.
create or replace function admin.task_counts_at(_now timestamptz, _window_seconds integer)
  returns table (task_type text, state text, count bigint)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 86400);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 2592000 then
    raise exception 'window_seconds must be between 60 and 2592000 (30 days), got %', _window
      using errcode = '22023';
  end if;
  return query
  select p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state,
         count(*)
    from queues.task_pending p
   group by 1, 2
  union all
  select t.task_type, c.outcome, count(*)
    from queues.task_completed c
   -- lateral + limit 1: a primary-key probe per completion in the window
   cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
   where c.completed_at > _now - make_interval(secs => _window)
     and c.completed_at <= _now
   group by 1, 2
   order by 1, 2;
end;
$$;

create or replace function admin.task_counts(_window_seconds integer default null)
  returns table (task_type text, state text, count bigint)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.task_counts_at(now(), _window_seconds)
$$;

-- The registered task types (roles), for filters and forms.
create or replace function admin.list_task_types()
  returns table (task_type text, description text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_type, t.description from queues.task_type t order by t.task_type
$$;

-- Facts of one task the dashboard adds to admin.get_task's answer:
--   {results: [{task_lease_id, result, recorded_at}], cancellation: {reason, cancelled_at} | null,
--    run_now_at: timestamptz | null, type_paused: boolean, process: {process, root_id} | null,
--    heartbeats: [{task_lease_id, extended_at, expires_at}]}
-- Results come from queues.task_result when that table exists (read through the catalog,
-- so this works with and without it).
create or replace function admin.task_dashboard_facts(_task_id bigint)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _results jsonb := '[]';
begin
  if to_regclass('queues.task_result') is not null then
    execute 'select coalesce(jsonb_agg(jsonb_build_object(''task_lease_id'', r.task_lease_id, ''result'', r.result,
                                                         ''recorded_at'', r.recorded_at) order by r.task_lease_id), ''[]'')
               from queues.task_result r where r.task_id = $1'
      into _results using _task_id;
  end if;
  return jsonb_build_object(
    'results', _results,
    'cancellation', (select jsonb_build_object('reason', c.reason, 'cancelled_at', c.cancelled_at)
                       from queues.task_cancelled c where c.task_id = _task_id),
    'run_now_at', (select r.requested_at from queues.task_run_now r where r.task_id = _task_id),
    'type_paused', (select t.task_type = any (queues.paused_task_types()) from queues.task t where t.task_id = _task_id),
    -- The business process the task works for: its payload names the root (X_task_id).
    'process', (select jsonb_build_object('process', p.process, 'root_id', (t.payload ->> (p.process || '_task_id'))::bigint)
                  from queues.task t cross join admin.processes() p
                 where t.task_id = _task_id and t.payload ->> (p.process || '_task_id') ~ '^[0-9]{1,18}$'
                 limit 1),
    'heartbeats', coalesce((
      select jsonb_agg(jsonb_build_object('task_lease_id', x.task_lease_id, 'extended_at', x.extended_at,
                                          'expires_at', x.expires_at) order by x.task_lease_extension_id)
        from queues.task_lease l
        join queues.task_lease_extension x on x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
       where l.task_id = _task_id), '[]'));
end;
$$;
--! EndIncluded admin/tasks.sql

--! split: 460-enqueue.sql
-- Enqueue: one statement per batch, one lookup of the task type per call, the wake-up
-- sent by the enqueue functions (after the commit for queues.enqueue_and_commit), no
-- foreign key from queues.task to queues.task_type (sql/queues/enqueue.sql says why).
set local lock_timeout = '5s';

-- The key locked the type's row for every task inserted. Dropping it takes ACCESS
-- EXCLUSIVE on queues.task and on queues.task_type (their triggers of the key go):
-- catalog only, no scan, for the instant of the change.
-- lock: access exclusive on queues.task: dropping its foreign key to queues.task_type; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_type: dropping the foreign key from queues.task (its triggers on task_type); catalog only, held for the instant of the change
alter table queues.task drop constraint if exists task_task_type_fkey;

-- The wake-up moves from the statement trigger into the functions, so that
-- queues.enqueue_and_commit can send it after its commit.
-- lock: access exclusive on queues.task_pending: dropping the notify_task_ready trigger; catalog only, held for the instant of the change
drop trigger if exists notify_task_ready on queues.task_pending;
drop function if exists queues.notify_task_ready();

-- Replaced: enqueue gains _notify, the cores gain _public (and _notify); the per-task
-- validation and the batch permission check are folded into them.
drop function if exists queues.enqueue(text, jsonb, timestamptz, integer, text, integer);
drop function if exists queues.enqueue_task(text, jsonb, timestamptz, integer, text, integer);
drop function if exists queues.enqueue_tasks(jsonb);
drop function if exists queues.assert_valid_task(text, jsonb, integer, text, integer, text);
drop function if exists queues.assert_may_enqueue_many(jsonb);
drop function if exists queues.is_payload_too_deep(jsonb);

--! Included queues/triggers.sql
-- Trigger functions of the queue's tables, also used by every domain's fact tables.

-- Facts are never updated: a statement-level `before update` trigger on every fact table
-- (queues, comms, files, accounts, schedules) calls this.
create or replace function queues.forbid_fact_update() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception '%.% is append-only: rows are never updated', tg_table_schema, tg_table_name
    using errcode = '55000';
end;
$$;

-- Wake-ups (NOTIFY queues_task_ready) are sent by the functions that add ready work
-- (queues.enqueue_task, queues.enqueue_tasks, queues.rebuild_task_pending, releases and
-- run-now requests), not by a trigger: see sql/queues/enqueue.sql for why an enqueue may
-- send its wake-up after its commit.

-- queues.task has no foreign key to queues.task_type (it cost every enqueued task a row
-- lock on its type). This `before delete or update of task_type` row trigger on
-- queues.task_type, and a `before truncate` one, refuse to remove a type that tasks
-- still name (23503, as the key's ON DELETE RESTRICT did). LOCK ... SHARE waits for
-- every transaction that is inserting tasks (they hold ROW EXCLUSIVE on queues.task until
-- they end) and keeps new ones out until this one ends; the check then sees all their
-- tasks. An enqueue re-reads its type in the statement that inserts the task, after it
-- holds its lock on queues.task, so it never inserts a type this removed.
create or replace function queues.guard_task_type_in_use() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
declare
  _type text;
begin
  if tg_op = 'UPDATE' and new.task_type = old.task_type then
    return new;
  end if;
  lock table queues.task in share mode;
  if tg_op = 'TRUNCATE' then
    select t.task_type into _type from queues.task t limit 1;
  else
    select t.task_type into _type from queues.task t where t.task_type = old.task_type limit 1;
  end if;
  if found then
    raise exception 'task_type % is named by tasks in queues.task', quote_literal(_type)
      using errcode = '23503', schema = 'queues', table = 'task_type';
  end if;
  return case tg_op when 'DELETE' then old when 'UPDATE' then new end;
end;
$$;
--! EndIncluded queues/triggers.sql
--! Included queues/enqueue_permission.sql
-- Who may enqueue what. Task types listed in queues.internal_task_type (the channel
-- types email, sms, file_delete and db_function) make the worker act with the owner's
-- authority: a channel task calls a provider, a db_function step runs a registered
-- function as the worker. Only SQL the owner wrote enqueues them (supervisors, handlers,
-- kickoffs, schedules the owner installs), through the grant-less
-- queues.enqueue_internal; apps start processes through their kickoff functions. The
-- public queues.enqueue and queues.enqueue_many refuse internal types with 42501 unless
-- the session itself is the owner's (migrations, operators at psql). Both refuse before
-- they read anything else: queues.enqueue_task probes queues.internal_task_type once,
-- queues.enqueue_tasks asks queues.is_owner_session() once per batch and then checks
-- every element's type against queues.internal_task_type read once (hashed).

-- True when _task_type may be enqueued only by the owner's SQL.
create or replace function queues.is_internal_task_type(_task_type text)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from queues.internal_task_type i where i.task_type = _task_type)
$$;

-- True when the session's login role is (a member of) the role owning the queue schema:
-- the owner running SQL by hand or in a migration, not SQL reached from another role.
create or replace function queues.is_owner_session()
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select pg_has_role(session_user, n.nspowner, 'member')
    from pg_namespace n where n.nspname = 'queues'
$$;

-- Raises 42501 when the caller may not enqueue _task_type (_where prefixes the message,
-- 'tasks[3]: ' in a batch). Unknown or NULL types pass: queues.enqueue_task names them.
create or replace function queues.assert_may_enqueue(_task_type text, _where text default '')
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if queues.is_internal_task_type(_task_type) and not queues.is_owner_session() then
    raise exception '%task_type % may be enqueued only by the database''s own processes, not by %',
      _where, quote_literal(_task_type), session_user
      using errcode = '42501',
            detail = 'Channel tasks (email, sms, file_delete) and db_function steps act with the owner''s authority.',
            hint = 'Start the business process through its kickoff function (comms.send_email, comms.send_sms, files.kickoff_file_deletion, api.request_account_deletion).';
  end if;
end;
$$;
--! EndIncluded queues/enqueue_permission.sql
--! Included queues/enqueue.sql
-- queues.enqueue / queues.enqueue_many: add tasks. Apps call them through
-- @org/queue-client; they refuse internal task types (sql/queues/enqueue_permission.sql).
-- The owner's SQL (supervisors, handlers, kickoffs, schedules) calls the grant-less
-- queues.enqueue_internal. The worker never enqueues.
--
-- What one enqueue costs (BENCHMARKS.md, "where a task's time goes"): for an app, one
-- probe of queues.internal_task_type; its fields checked as plain expressions; one
-- statement that reads the task type and inserts the task and its claim-index row; one
-- pg_notify. A batch is one insert statement whatever its size: the rows are checked
-- inside it (the first bad one, in input order, raises and the statement writes
-- nothing), the task types read once per call. queues.task has no foreign key to queues.task_type: it
-- locked the type's row (FOR KEY SHARE, a MultiXact once callers overlap) for every task;
-- queues.guard_task_type_in_use (triggers.sql) refuses deleting or renaming a type in use.
--
-- Wake-ups: an enqueue that adds a task due within a minute (ready now, or scheduled a
-- moment ahead, like a supervisor's next run) sends NOTIFY queues_task_ready, and
-- PostgreSQL folds identical notifications of one transaction into one at commit. A
-- worker that finds nothing ready asks when the next task is due
-- (queues.next_claim_in_ms) and looks again then; a task due later is found by a
-- worker's poll, which asks the same. A
-- notifying commit holds a database-wide lock from just before its commit record until
-- it ends, so notifying transactions commit one at a time, each waiting for its own WAL
-- flush. queues.enqueue_and_commit (for callers outside a transaction block: the
-- client's enqueue on a pool) commits the task first, without the lock, and notifies in
-- a second transaction that writes no data and so does not wait for a flush.

-- Payloads are limited so one bad caller cannot fill the table or the worker's memory.
create or replace function queues.max_payload_bytes() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 1048576 $$;

-- And so is their nesting: a payload nested deeper than queues.max_payload_depth()
-- containers (objects and arrays) is refused, since parsers that recurse (the worker's
-- among them) would run out of stack. The test is jsonb_path_exists(payload,
-- 'strict $.**{65}'), written out where it is used (65 = max_payload_depth() + 1: a
-- jsonpath level must be a literal).
create or replace function queues.max_payload_depth() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 64 $$;

-- The core of the single enqueue (no grants): validates one task and inserts it and its
-- claim-index row in one statement; returns its task_id. _public: called for an app or
-- the API (queues.enqueue), so internal task types are refused (42501) unless the
-- session is the owner's. _notify: send the wake-up (false: the caller sends it after
-- its commit, see queues.enqueue_and_commit). NULL arguments take the defaults (now, 0,
-- no resource key, one attempt).
--
-- Checks, in order: for _public, a worker-only task type (refused before anything else
-- is read, as queues.assert_may_enqueue words it); task_type NULL; the payload (NULL, not
-- an object, over the size limit, nested too deep), priority, resource key, max
-- attempts, scheduled time (plain expressions, no statement); then the insert, which
-- reads the type in its own statement: when it inserts nothing, the type is unknown
-- (22023). The insert's snapshot is taken once it holds its
-- lock on queues.task, so a type deleted meanwhile is not used (the delete waits for
-- that lock, see queues.guard_task_type_in_use). Under REPEATABLE READ or SERIALIZABLE
-- the snapshot is the transaction's, older than the lock: the type's row is locked FOR
-- KEY SHARE first, as the foreign key did, so that a type deleted since is a
-- serialization failure rather than a task of a type that is gone.
create or replace function queues.enqueue_task(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz,
  _priority     integer,
  _resource_key text,
  _max_attempts integer,
  _public       boolean default false,
  _notify       boolean default true
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  if _public and exists (select 1 from queues.internal_task_type i where i.task_type = _task_type) then
    perform queues.assert_may_enqueue(_task_type);
  end if;
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if _payload is null then
    raise exception 'payload must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_payload) <> 'object' then
    raise exception 'payload must be a JSON object, got %', jsonb_typeof(_payload) using errcode = '22023';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    raise exception 'payload is % bytes, over the limit of % bytes', pg_column_size(_payload), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  if jsonb_path_exists(_payload, 'strict $.**{65}') then
    raise exception 'payload is nested deeper than % levels', queues.max_payload_depth() using errcode = '54000';
  end if;
  if _priority not between -1000 and 1000 then
    raise exception 'priority must be between -1000 and 1000, got %', _priority using errcode = '22023';
  end if;
  if length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _max_attempts not between 1 and 100 then
    raise exception 'max_attempts must be between 1 and 100, got %', _max_attempts using errcode = '22023';
  end if;
  if not isfinite(_scheduled_at) then
    raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
  end if;
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t where t.task_type = _task_type for key share;
  end if;

  with inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
    select t.task_type, _payload, coalesce(_priority, 0), _resource_key,
           coalesce(_max_attempts, 1), coalesce(_scheduled_at, now())
      from queues.task_type t
     where t.task_type = _task_type
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts
  )
  insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts)
  select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts
    from inserted i
  returning task_id into _task_id;

  if _task_id is null then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
  -- A task due more than a minute ahead wakes nobody now: workers poll for it.
  if _notify and (_scheduled_at is null or _scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _task_id;
end;
$$;

-- Enqueue one task for an app or the API; returns its task_id. NULL arguments take the
-- defaults (now, 0, no resource key, one attempt), since generated clients send undefined
-- as NULL. Refuses internal task types (42501). _notify => false leaves the wake-up to
-- the caller (queues.enqueue_and_commit sends it after the commit).
create or replace function queues.enqueue(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  _notify       boolean default true
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts,
                             true, coalesce(_notify, true));
end;
$$;

-- queues.enqueue, then COMMIT, then the wake-up in a transaction of its own; returns the
-- task_id in _task_id. For callers outside a transaction block (CALL inside one fails
-- with 2D000, invalid transaction termination): the client's enqueue on a pool. The
-- task's commit takes no notification lock, so concurrent callers share WAL flushes; the
-- wake-up's transaction writes no data and does not wait for a flush (see the top of
-- this file). Crash between the two: the task is committed and found by the workers'
-- poll instead.
-- Not security definer and no SET clause: PostgreSQL allows COMMIT in a procedure only
-- without them. It runs with the caller's rights and search_path, names every object
-- with its schema, and does nothing a caller could not do itself.
create or replace procedure queues.enqueue_and_commit(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  inout _task_id bigint default null
)
  language plpgsql
as $$
begin
  _task_id := queues.enqueue(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, false);
  commit;
  if _scheduled_at is null
     or _scheduled_at operator(pg_catalog.<=) (pg_catalog.now() operator(pg_catalog.+) interval '1 minute') then
    perform pg_catalog.pg_notify('queues_task_ready', '');
  end if;
end;
$$;

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, one attempt), since generated clients send undefined as NULL.
-- Owner only (no grant): the owner's SQL enqueues any task type through it. A thin alias
-- of the core queues.enqueue_task, with the defaults of queues.enqueue.
create or replace function queues.enqueue_internal(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts);
end;
$$;

-- Raises the problem found in element _idx of a batch (queues.enqueue_tasks):
-- _problem is '<SQLSTATE> <message>'. Returns nothing; typed jsonb so it can stand in a
-- select list for the payload it refuses.
create or replace function queues.raise_enqueue_problem(_idx bigint, _problem text) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _problem like '22023 unknown task_type%' then
    raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = '22023',
      hint = 'Known task types are listed in queues.task_type.';
  end if;
  raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = left(_problem, 5);
end;
$$;

-- Enqueue many tasks in one statement. _tasks is a JSON array of objects:
--   {"task_type": "...", "payload": {...}, "scheduled_at"?: "...", "priority"?: 0,
--    "resource_key"?: "...", "max_attempts"?: 1}
-- Returns the task_ids in input order. All or nothing: the first bad element, in input
-- order, raises an error naming it (tasks[i]: ...) and nothing is written. _public as in
-- queues.enqueue_task: a worker-only task type anywhere in the batch is refused (42501)
-- first, unless the session is the owner's. The core of queues.enqueue_many (no grants).
--
-- One statement inserts the batch: each element is checked as it is inserted (a CASE
-- that calls queues.raise_enqueue_problem only for a bad element), its task type against
-- queues.task_type read once per call (a hashed subplan), then the tasks' claim-index
-- rows; then one wake-up if any task is ready now. For _public, one statement before it
-- looks for worker-only types (queues.internal_task_type, also read once).
create or replace function queues.enqueue_tasks(_tasks jsonb, _public boolean default false)
  returns table (task_id bigint)
  language plpgsql volatile
  -- Planned once per connection, not per call: the plan is the same for any batch (the
  -- elements in order, hashed lookups of the task types), and planning the insert took
  -- a few milliseconds of each of a connection's first five batches.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _ids bigint[];
  _ready boolean;
  _refused record;
begin
  if _tasks is null then
    raise exception 'tasks must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_tasks) <> 'array' then
    raise exception 'tasks must be a JSON array, got %', jsonb_typeof(_tasks) using errcode = '22023';
  end if;
  if jsonb_array_length(_tasks) > 10000 then
    raise exception 'at most 10000 tasks per call, got %', jsonb_array_length(_tasks)
      using errcode = '54000';
  end if;
  -- A worker-only task type anywhere refuses the batch before any element is read
  -- further (the first such element is named), unless the session is the owner's.
  if _public and not queues.is_owner_session() then
    select e.ordinality - 1 as idx, e.value ->> 'task_type' as task_type into _refused
      from jsonb_array_elements(_tasks) with ordinality e
     where e.value ->> 'task_type' in (select i.task_type from queues.internal_task_type i)
     order by e.ordinality
     limit 1;
    if found then
      perform queues.assert_may_enqueue(_refused.task_type, format('tasks[%s]: ', _refused.idx));
    end if;
  end if;
  -- Under REPEATABLE READ or SERIALIZABLE, lock the types FOR KEY SHARE (see
  -- queues.enqueue_task).
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t
     where t.task_type in (select e.value ->> 'task_type' from jsonb_array_elements(_tasks) e)
       for key share;
  end if;

  with input as (
    select e.ordinality - 1 as idx, e.value as element,
           e.value ->> 'task_type' as task_type,
           e.value -> 'payload' as payload,
           (e.value ->> 'scheduled_at')::timestamptz as scheduled_at,
           (e.value ->> 'priority')::integer as priority,
           e.value ->> 'resource_key' as resource_key,
           (e.value ->> 'max_attempts')::integer as max_attempts
      from jsonb_array_elements(_tasks) with ordinality e
  ),
  checked as (
    -- The problem of each element as '<SQLSTATE> <message>', NULL when it has none: its
    -- shape (an object of known fields), then the checks of queues.enqueue_task.
    select c.*,
           case
             when jsonb_typeof(c.element) <> 'object' then
               '22023 must be a JSON object, got ' || jsonb_typeof(c.element)
             when c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts}'::text[] <> '{}' then
               '22023 unknown field(s) ' || left((select string_agg(k, ', ') from jsonb_object_keys(
                 c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts}'::text[]) k), 200)
             when c.task_type is null then '22004 task_type must not be null'
             when c.task_type not in (select t.task_type from queues.task_type t) then
               '22023 unknown task_type ' || quote_literal(left(c.task_type, 100))
             when c.payload is null then '22004 payload must not be null'
             when jsonb_typeof(c.payload) <> 'object' then
               '22023 payload must be a JSON object, got ' || jsonb_typeof(c.payload)
             when pg_column_size(c.payload) > queues.max_payload_bytes() then
               format('54000 payload is %s bytes, over the limit of %s bytes', pg_column_size(c.payload), queues.max_payload_bytes())
             -- Nesting deeper than 64 levels takes over 512 bytes (an uncompressed value,
             -- as c.payload is: just taken out of the batch), so smaller ones are not walked.
             when pg_column_size(c.payload) > 512 and jsonb_path_exists(c.payload, 'strict $.**{65}') then
               format('54000 payload is nested deeper than %s levels', queues.max_payload_depth())
             when c.priority not between -1000 and 1000 then
               '22023 priority must be between -1000 and 1000, got ' || c.priority
             when length(c.resource_key) not between 1 and 200 then '22023 resource_key must be 1 to 200 characters'
             when c.max_attempts not between 1 and 100 then
               '22023 max_attempts must be between 1 and 100, got ' || c.max_attempts
             when not isfinite(c.scheduled_at) then
               '22023 scheduled_at must be a finite time, got ' || c.scheduled_at
           end as problem
      from input c
  ),
  inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
    select c.task_type,
           case when c.problem is null then c.payload else queues.raise_enqueue_problem(c.idx, c.problem) end,
           coalesce(c.priority, 0), c.resource_key, coalesce(c.max_attempts, 1), coalesce(c.scheduled_at, now())
      from checked c
     order by c.idx
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts
  ),
  pending as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts)
    select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts
      from inserted i
  )
  select array_agg(i.task_id order by i.task_id), bool_or(i.scheduled_at <= now() + interval '1 minute')
    into _ids, _ready
    from inserted i;

  if _ready then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select u.id from unnest(_ids) u(id);
end;
$$;

-- Enqueue many tasks (see queues.enqueue_tasks), for an app or the API: refuses internal
-- task types (42501), as queues.enqueue.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_id from queues.enqueue_tasks(_tasks, true) t
$$;
--! EndIncluded queues/enqueue.sql
--! Included queues/maintenance.sql
-- Maintenance of the derived structures (task_pending, resource_lease). Owner only.

-- Rebuilds queues.task_pending and queues.resource_lease from the facts: every task
-- without a completion, available at its scheduled time, the retry time of its last
-- failed attempt, the retry time of its last transient interruption, or the effective
-- expiry of its newest lease (heartbeats, releases and revocations applied), whichever is
-- latest. Returns the number of pending tasks.
create or replace function queues.rebuild_task_pending() returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _count bigint;
begin
  lock table queues.task_pending, queues.resource_lease in exclusive mode;
  delete from queues.task_pending;
  delete from queues.resource_lease;
  insert into queues.task_pending
    (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
     lease_count, released_count, max_attempts, failed_attempts, unstarted_count, interrupted_count)
  -- A scheduled task asked to run now (queues.task_run_now) counts from that request.
  select t.task_id, t.task_type, t.priority, least(t.scheduled_at, rn.requested_at), t.resource_key,
         greatest(least(t.scheduled_at, rn.requested_at),
                  -- a lease ended by a failed attempt gives way to the attempt's retry time
                  case when f.task_lease_id is null or f.task_lease_id < l.task_lease_id then l.expires_at end,
                  f.retry_at,
                  -- a lease ended by a transient interruption gives way to its retry time
                  i.retry_at),
         -- A lease ended by a release, a revocation or a later failed attempt is not held.
         case when l.released_at is null and l.revoked_at is null
                   and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id)
              then l.task_lease_id end,
         coalesce(l.lease_count, 0), coalesce(l.released_count, 0),
         t.max_attempts, coalesce(f.failed_attempts, 0),
         -- Leases that ended unstarted: neither released, nor ended by a failed attempt,
         -- nor started, nor the lease still held (a claim counts that one when it expires).
         (select count(*)::integer
            from queues.task_lease_effective u
           where u.task_id = t.task_id
             and u.released_at is null
             and not exists (select 1 from queues.task_lease_started s
                              where s.task_id = u.task_id and s.task_lease_id = u.task_lease_id)
             and not exists (select 1 from queues.task_attempt_failed a where a.task_id = u.task_id and a.task_lease_id = u.task_lease_id)
             and not (u.task_lease_id = l.task_lease_id and l.revoked_at is null
                      and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id))),
         coalesce(i.interrupted_count, 0)
    from queues.task t
    left join lateral (
      select le.task_lease_id, le.expires_at, le.released_at, le.revoked_at,
             count(*) over () :: integer as lease_count,
             count(le.released_at) over () :: integer as released_count
        from queues.task_lease_effective le
       where le.task_id = t.task_id
       order by le.task_lease_id desc
       limit 1
    ) l on true
    left join lateral (
      select a.retry_at, a.task_lease_id, count(*) over () :: integer as failed_attempts
        from queues.task_attempt_failed a
       where a.task_id = t.task_id
       order by a.task_attempt_failed_id desc
       limit 1
    ) f on true
    left join lateral (
      select max(x.retry_at) as retry_at, count(*)::integer as interrupted_count
        from queues.task_interruption x
       where x.task_id = t.task_id
    ) i on true
    left join queues.task_run_now rn on rn.task_id = t.task_id
   where not exists (select 1 from queues.task_completed c where c.task_id = t.task_id);
  get diagnostics _count = row_count;

  -- Each resource key held by a live lease, as the claim left it.
  insert into queues.resource_lease (resource_key, task_id, expires_at)
  select distinct on (p.resource_key) p.resource_key, p.task_id, p.available_at
    from queues.task_pending p
   where p.resource_key is not null and p.current_lease_id is not null
   order by p.resource_key, p.available_at desc;
  if _count > 0 then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _count;
end;
$$;
--! EndIncluded queues/maintenance.sql
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
--! Included admin/privileges.sql
-- Who may call what in admin. The operations API (:DATABASE_API) has no table or view
-- privileges: it reads and acts through the security definer functions below, plus
-- queues.enqueue to create tasks. Every grant is listed in sql/role-allowlist.json ("api").
-- The *_at functions take the clock and stay owner only.

revoke all on all tables in schema admin from public;
revoke execute on all functions in schema admin from public;

grant usage on schema admin to :DATABASE_API;
grant usage on schema queues to :DATABASE_API;

grant execute on function
  admin.list_tasks(text, text, integer, bigint, text, text, timestamptz, timestamptz, text[], jsonb),
  admin.get_task(bigint),
  admin.task_counts(integer),
  admin.list_task_types(),
  admin.capacity(text),
  admin.throughput(integer, integer),
  admin.completion_stats(integer),
  admin.list_dead_letters(text, integer, bigint),
  admin.redrive_task(bigint),
  admin.recover_stale_leases(integer),
  admin.list_stale_leases(),
  admin.process_timeline(text, bigint),
  admin.list_process_roots(text, integer, bigint),
  admin.list_processes(),
  admin.cancel_tasks(bigint[], text),
  admin.cancel_tasks_matching(text, text, integer, text),
  admin.run_tasks_now(bigint[]),
  admin.redrive_tasks(bigint[]),
  admin.redrive_tasks_matching(text, integer),
  admin.queue_depth(integer, integer),
  admin.pause_task_type(text, text),
  admin.resume_task_type(text),
  admin.list_queues(),
  admin.list_workers(),
  admin.recover_worker_leases(text, integer),
  admin.list_schedules(integer),
  admin.process_tree(text, bigint),
  admin.list_process_roots_ranked(text, integer, bigint)
to :DATABASE_API;

grant execute on function queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean) to :DATABASE_API;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint)
  to :DATABASE_API;
--! EndIncluded admin/privileges.sql

-- A task type that tasks name cannot be deleted, renamed or truncated away (what the
-- foreign key's ON DELETE RESTRICT did). CREATE OR REPLACE TRIGGER takes SHARE ROW
-- EXCLUSIVE on queues.task_type, not ACCESS EXCLUSIVE.
create or replace trigger guard_task_type_in_use
  before delete or update of task_type on queues.task_type
  for each row execute function queues.guard_task_type_in_use();
create or replace trigger guard_task_type_in_use_truncate
  before truncate on queues.task_type
  for each statement execute function queues.guard_task_type_in_use();

--! split: 480-suspect-pacing.sql
-- A dead worker process's started tasks (suspects) wait for their leases' expiry after
-- a revocation; its queued tasks are claimable at once (queues.revoke_worker_leases).
set local lock_timeout = '5s';

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
    join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    left join queues.worker_name n on n.worker_key = l.worker_key
    join queues.worker w on w.worker_id = coalesce(l.worker_id, n.worker_id)
   where p.available_at > _now
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
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id from queues.stale_leases_at(_now, _dead_after_seconds) s
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null,
           -- A lease whose task never started does not count towards abandonment.
           unstarted_count = p.unstarted_count + (not exists (
             select 1 from queues.task_lease_started st
              where st.task_id = p.task_id and st.task_lease_id = s.task_lease_id))::integer
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
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
-- complete anything). The tasks it never started (its local queue) are claimable at once
-- instead of when their leases expire, and their revocation does not count towards
-- abandonment. The tasks it had started count an expired lease and are suspects (one of
-- them may have killed the process): they stay unclaimable until their leases would have
-- expired, as without a supervisor, so a poison task's crash loop is paced by its lease
-- and the supervisor's spares keep up with the deaths instead of all dying in a second.
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
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)));
  return query
  with held as (
    select p.task_id, p.current_lease_id as task_lease_id,
           exists (select 1 from queues.task_lease_started st
                    where st.task_id = p.task_id and st.task_lease_id = p.current_lease_id) as started
      from queues.task_pending p
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)
  ),
  revoked as (
    -- available_at of a leased row is its lease's expiry (heartbeats included).
    update queues.task_pending p
       set available_at = case when h.started then p.available_at else now() end,
           current_lease_id = null,
           unstarted_count = p.unstarted_count + (not h.started)::integer
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

--! split: 500-endpoints-at-scale.sql
-- The operations endpoints cost the same with a long history: the task and dead letter
-- lists walk the partition sets newest first (each read pruned to one set at plan time),
-- and the history status sizes each partition once and reads its sets in one statement.
set local lock_timeout = '5s';

--! Included queues/partitions.sql
-- History partitions: queues.task and every fact table keyed by task are range-partitioned
-- by task_id, all on the same bounds (a "partition set"). Old history leaves by dropping a
-- whole set, never by row-by-row DELETE. Settings: queues.history_setting; what was
-- dropped: queues.history_partition_dropped (both in migrations/committed/000004); when
-- each set was created: queues.history_partition_created.
--
-- Why task_id and not time: every fact carries task_id, so a row is routed without an
-- extra column; a task and all its facts sit in the same set, so a set can be dropped
-- alone; every lookup of the hot path is by task_id, so it is pruned to one partition;
-- and ids only grow, so a set whose range lies below the id sequence receives no new
-- task. docs/operations.md ("Retention and partitions") has the full reasoning.
--
--   queues.history_tables()                    the partitioned tables, parent first
--   queues.lock_history_tables(t, m, ms)       a step's locks, between transactions; owner only
--   queues.cancel_autovacuum(t)                cancels autovacuum of tables a step must lock; owner only
--   queues.create_history_table(t, name)       a standalone table like t, to attach; owner only
--   queues.attach_history_partition(t, lo, hi) one table's partition of a set, owner only
--   queues.create_history_partition(lo, hi)    one set [lo, hi), owner only
--   queues.adopt_history_range(lo, hi)         a set [lo, hi) of rows in the default
--                                              partitions, moved out of them; owner only
--   queues.history_partition_bounds()          every table's partitions and their bounds
--   queues.history_sets()                      the sets' bounds, from the catalog only
--   queues.history_walk(_before)               the id ranges a newest-first read walks
--   queues.history_set_bytes(lower_bounds)     the table and index bytes of the sets given
--   queues.history_partition_sizes()           the sets with table and index bytes
--   queues.measure_history_sets(_now)          the sets that are done, measured for readers
--                                              (queues.history_set_measured); owner only
--   queues.history_partitions()                the sets with their total bytes
--   queues.maintain_history_step_at(_now)      one short step of maintenance; owner only
--   queues.maintain_history_step(payload)      the same at now(), a runnable db_function
--                                              (the schedule's: one transaction per step)
--   queues.maintain_history_at(_now)           every step in one transaction; owner only
--   queues.maintain_history(payload)           the same at now(), a runnable db_function
--   queues.history_summary_at(_now)            settings, oldest task, what the next drop waits for
--   queues.history_status_at(_now)             the same with the sets and their sizes
--
-- Locks. The claim and the completion read queues.task, task_lease_started and
-- task_completed through generic plans, which lock every partition of those tables,
-- default included, and every writer takes ROW EXCLUSIVE on the parents. So each step
-- locks one table (its parent, the partition, the default) in the order the hot path
-- takes its own (parent, then partition, then default), without waiting in a lock queue
-- (queues.lock_history_tables: asked for without waiting, again every few ms, for up to
-- lock_timeout_ms, then one last try that waits at most 50 ms), and holds the locks only
-- for a catalog change, in a transaction of its own when run by the schedule
-- (queues.maintain_history_step with "repeat"): a claim waits behind maintenance at most
-- 50 ms plus that change. Measured locks (PostgreSQL 18):
--   create table .. partition of     ACCESS EXCLUSIVE on the parent and its default: not used
--   create table (like ..) + attach  SHARE UPDATE EXCLUSIVE on the parent (no conflict with
--                                    DML), ACCESS EXCLUSIVE on the default partition (a
--                                    conflict only for task, task_lease_started and
--                                    task_completed, whose defaults the hot path's plans lock)
--                                    and, for a set made late (its range within reach of the
--                                    ids handed out), SHARE on the parent first: writers of
--                                    that table wait for the attach (a writer that routed its
--                                    row before the attach commits would fail on the
--                                    default's new constraint; see attach_history_partition)
--   detach partition                 ACCESS EXCLUSIVE on the parent, default and partition;
--                                    catalog only (no scan); detach concurrently is refused
--                                    while a default partition exists, and in a function
--   drop table (attached partition)  the same plus unlinking its files under those locks:
--                                    not used; a detached table is dropped instead, which
--                                    locks only itself, except a table with a foreign key
--                                    (none today), whose drop takes ACCESS EXCLUSIVE on
--                                    the table it references: it is truncated first (under
--                                    its own lock only), so that drop is a catalog change

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now']
$$;

-- The partition of _table holding [_lower, _upper) is named <table>_p<lower>.
-- No SET clause: a function with one is never inlined, and the status pages name every
-- partition of every set with it (196 calls at 14 sets). It names no object, so the
-- search path cannot change what it does (like admin.pending_state).
create or replace function queues.history_partition_name(_table text, _lower bigint) returns text
  language sql immutable parallel safe
as $$
  select _table || '_p' || _lower::text
$$;

-- Cancels the autovacuum workers that hold a lock on one of _tables (names in schema
-- queues) in this database, as PostgreSQL itself does for a lock request that has waited
-- deadlock_timeout (1 s): a maintenance step never waits that long (claims would queue
-- behind it), so without this a long autovacuum of a default partition or of a set kept
-- every step that must lock that table skipping until it ended. Autovacuum comes back
-- later. An autovacuum that prevents wraparound (the table's age past
-- autovacuum_freeze_max_age or autovacuum_multixact_freeze_max_age) is left alone, as
-- PostgreSQL leaves it. Needs membership in pg_signal_autovacuum_worker (PostgreSQL 18;
-- the owner gets it when the database users are provisioned, docs/operations.md);
-- without it, nothing is cancelled. Returns how many were cancelled. Owner only.
create or replace function queues.cancel_autovacuum(_tables text[])
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pid integer;
  _cancelled integer := 0;
begin
  for _pid in
    select distinct l.pid
      from pg_locks l
      join pg_stat_activity a on a.pid = l.pid
      join pg_class c on c.oid = l.relation
     where l.locktype = 'relation' and l.granted
       and l.database = (select d.oid from pg_database d where d.datname = current_database())
       -- An autovacuum worker runs as no role: its usesysid is null, and a role without
       -- pg_read_all_stats sees its backend_type as null too (it is shown to those with it).
       and a.usesysid is null and coalesce(a.backend_type, 'autovacuum worker') = 'autovacuum worker'
       and c.relnamespace = 'queues'::regnamespace and c.relname = any (_tables)
       and age(c.relfrozenxid) < current_setting('autovacuum_freeze_max_age')::bigint
       and mxid_age(c.relminmxid) < current_setting('autovacuum_multixact_freeze_max_age')::bigint
  loop
    begin
      if pg_cancel_backend(_pid) then
        _cancelled := _cancelled + 1;
      end if;
    exception
      when insufficient_privilege then
        return _cancelled;
    end;
  end loop;
  return _cancelled;
end;
$$;

-- Takes the locks of one maintenance step, _modes[i] on queues._tables[i] (only the table
-- named: a partitioned parent's partitions are not locked with it), in order, without
-- waiting in a lock queue until its last try: each try asks for every lock with NOWAIT,
-- and a try that meets a holder gives back what it took and tries again 1 to 4 ms later,
-- until the locks are had or _within_ms has passed; then one last try waits in the queue
-- for at most 50 ms, and failing that, lock_not_available (55P03, naming the tables and
-- the tries). Why not wait: a lock request that waits holds every later request behind
-- it, so a claim would queue behind maintenance for as long as the longest transaction in
-- flight keeps maintenance waiting (a batch of server-side steps holds task's partitions
-- for tens of milliseconds; under a steady load one is always in flight, so a waiting
-- request rarely got its lock within a short lock_timeout). Asking without waiting takes
-- the moments between transactions and leaves the queue's own order alone (but see the
-- two 50 ms below). Modes: 'share update exclusive', 'share', 'access exclusive'. Returns
-- the tries it took. Owner only.
create or replace function queues.lock_history_tables(_tables text[], _modes text[], _within_ms integer)
  returns integer
  language plpgsql volatile
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _deadline timestamptz;
  _tries integer := 0;
  _last boolean;
  _last_until timestamptz;
  _autovacuum_cancelled boolean := false;
begin
  if _tables is null or _modes is null or cardinality(_tables) = 0 or cardinality(_tables) <> cardinality(_modes) then
    raise exception 'tables and modes must be non-empty arrays of the same length' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m is null or m not in ('share update exclusive', 'share', 'access exclusive')) then
    raise exception 'a lock mode must be share update exclusive, share or access exclusive, got %', _modes
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_tables) t where t is null or to_regclass(format('queues.%I', t)) is null) then
    raise exception 'every table must name a table in schema queues, got %', _tables using errcode = '22023';
  end if;
  if _within_ms is null or _within_ms < 0 then
    raise exception 'within_ms must be 0 or more, got %', _within_ms using errcode = '22023';
  end if;
  -- A transaction that already holds a lock of this kind (steps run together, as in
  -- queues.maintain_history_at, or a partition made earlier in it) keeps the queue
  -- waiting while it tries, and a holder in its way may be waiting for it: it tries for
  -- at most 50 ms then.
  if exists (select 1 from pg_locks l
              where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.granted
                and l.mode in ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                               'ExclusiveLock', 'AccessExclusiveLock')) then
    _within_ms := least(_within_ms, 50);
  end if;
  _deadline := clock_timestamp() + make_interval(secs => _within_ms / 1000.0);
  loop
    _tries := _tries + 1;
    -- The last try, once the window has passed, waits in the queue for at most 50 ms
    -- (restored on return): transactions that follow one another without a moment
    -- between (one connection's statements back to back) are waited for, and whatever
    -- queues behind this try waits no longer.
    -- The 50 ms are for the whole try, however many tables it locks (each lock waits
    -- only for what is left of them).
    _last := clock_timestamp() >= _deadline;
    _last_until := clock_timestamp() + make_interval(secs => greatest(least(_within_ms, 50), 1) / 1000.0);
    begin
      for _i in 1 .. cardinality(_tables) loop
        if _last then
          perform set_config('lock_timeout',
            greatest(ceil(extract(epoch from _last_until - clock_timestamp()) * 1000), 1)::integer || 'ms', true);
        end if;
        -- The mode is one of the three above (checked), the table quoted as an identifier.
        execute format('lock table only queues.%I in %s mode%s', _tables[_i], _modes[_i],
                       case when _last then '' else ' nowait' end);
      end loop;
      return _tries;
    exception
      when lock_not_available then
        -- The block's locks are given back with it. An autovacuum in the way is cancelled
        -- (once per call); the next try, a few ms later, finds the table free.
        if not _autovacuum_cancelled then
          _autovacuum_cancelled := true;
          perform queues.cancel_autovacuum(_tables);
        end if;
    end;
    exit when _last;
    perform pg_sleep((1 + random() * 3) / 1000.0);
  end loop;
  raise exception 'could not lock % in % tries over % ms: other transactions held them throughout',
    array_to_string(_tables, ', '), _tries, _within_ms
    using errcode = '55P03';
end;
$$;

-- Creates queues._name, a standalone table like the history table _table (columns,
-- defaults, constraints, indexes) with the trigger that refuses updates (a statement
-- trigger on the parent does not fire for a statement that names the partition), to be
-- attached as its partition. Owner only.
create or replace function queues.create_history_table(_table text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('create table queues.%I (like queues.%I including defaults including constraints including indexes including storage)',
                 _name, _table);
  execute format('create trigger forbid_update before update on queues.%I
                    for each statement execute function queues.forbid_fact_update()', _name);
end;
$$;

-- Makes the partition [_lower, _upper) of the history table _table unless it exists: a
-- standalone table like its parent (columns, defaults, constraints, indexes) with the
-- trigger that refuses updates (a statement trigger on the parent does not fire for a
-- statement that names the partition), then attached to the parent. Attaching takes
-- SHARE UPDATE EXCLUSIVE on the parent where `create table .. partition of` takes ACCESS
-- EXCLUSIVE, and the new table is empty, so nothing is scanned. Returns whether it made
-- the partition. Owner only.
create or replace function queues.attach_history_partition(_table text, _lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
begin
  if _table is null or _table <> all (queues.history_tables()) then
    raise exception 'table must name a history table (queues.history_tables()), got %',
      coalesce(quote_literal(left(_table, 100)), 'null') using errcode = '22023';
  end if;
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  _name := queues.history_partition_name(_table, _lower);
  if to_regclass(format('queues.%I', _name)) is not null then
    return false;
  end if;
  -- A range within reach of the task ids handed out (within one set's width, or the
  -- 10,000 tasks a statement may enqueue, above the last one) may receive rows while it
  -- is attached: a writer that routed its row before the attach committed would send it
  -- to the default partition, wait there for the attach's lock, and then fail the
  -- default's new constraint ("new row for relation .._default violates partition
  -- constraint"). For such a range (a set made late), SHARE on the parent: taken when no
  -- writer is in flight, it holds new ones at the parent until commit; they then route
  -- with the new partition. A set made ahead of need, as maintenance makes them, is out
  -- of reach and needs no lock that writers wait for (under a steady load of writers, a
  -- moment without one is rare).
  -- Its locks first (queues.lock_history_tables: taken between transactions, never
  -- queued for): the parent, SHARE UPDATE EXCLUSIVE (what attaching takes; SHARE for a
  -- set made late), then the default partition, ACCESS EXCLUSIVE (attaching checks it
  -- holds no row of the range).
  perform queues.lock_history_tables(
    array[_table, _table || '_default'],
    array[case when _lower <= queues.last_task_id() + greatest(_upper - _lower, 10000) then 'share'
               else 'share update exclusive' end,
          'access exclusive'],
    (select s.lock_timeout_ms from queues.history_setting s));
  perform queues.create_history_table(_table, _name);
  execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                 _table, _name, _lower, _upper);
  return true;
end;
$$;

-- Creates the partition set [_lower, _upper) of every history table (those that exist
-- already are kept), task's last: a set is in use once task has its partition. One
-- transaction; maintenance makes a set one table per step instead. Records when in
-- queues.history_partition_created. Returns whether anything was created. Owner only.
create or replace function queues.create_history_partition(_lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _created boolean := false;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _created := queues.attach_history_partition(_table, _lower, _upper) or _created;
  end loop;
  if _created then
    insert into queues.history_partition_created (lower_bound, upper_bound)
    values (_lower, _upper) on conflict (lower_bound) do nothing;
  end if;
  return _created;
end;
$$;

-- Makes [_lower, _upper) a set from rows that fell into the default partitions (tasks
-- given ids while no set covered them, and their facts): for each history table without
-- a partition of that range, a standalone table like its parent, the range's rows moved
-- into it from the table's default partition (deleted there and inserted here, in this
-- transaction), then attached. Nothing is lost or seen twice: readers of the parent see
-- each row in the default until this commits and in the new partition after. The caller
-- holds every history table's parent (SHARE) and default (ACCESS EXCLUSIVE), so no row of
-- the range is written meanwhile. Records the set in queues.history_partition_created.
-- Returns the tasks moved. Owner only.
create or replace function queues.adopt_history_range(_lower bigint, _upper bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _name text;
  _columns text;
  _moved bigint;
  _tasks bigint := 0;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'range bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _name := queues.history_partition_name(_table, _lower);
    continue when to_regclass(format('queues.%I', _name)) is not null;
    perform queues.create_history_table(_table, _name);
    -- The parent's columns by name (each quoted as an identifier), in its order.
    select string_agg(format('%I', a.attname), ', ' order by a.attnum) into _columns
      from pg_attribute a
     where a.attrelid = format('queues.%I', _table)::regclass and a.attnum > 0 and not a.attisdropped;
    execute format('with moved as (delete from queues.%I where task_id >= $1 and task_id < $2 returning %s)
                    insert into queues.%I (%s) select %s from moved',
                   _table || '_default', _columns, _name, _columns, _columns)
      using _lower, _upper;
    get diagnostics _moved = row_count;
    if _table = 'task' then
      _tasks := _moved;
    end if;
    execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                   _table, _name, _lower, _upper);
  end loop;
  insert into queues.history_partition_created (lower_bound, upper_bound)
  values (_lower, _upper) on conflict (lower_bound) do nothing;
  return _tasks;
end;
$$;

-- Every partition of every history table but the defaults, with its bounds. Owner only.
create or replace function queues.history_partition_bounds()
  returns table (table_name text, partition_name text, lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.name, c.relname::text, m.b[1]::bigint, m.b[2]::bigint
    from unnest(queues.history_tables()) t(name)
    join pg_inherits i on i.inhparent = to_regclass(format('queues.%I', t.name))
    join pg_class c on c.oid = i.inhrelid
   cross join lateral regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?\d+)''?\) TO \(''?(-?\d+)''?\)') as m(b)
   where m.b is not null
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last: bounds and the planner's
-- estimate of their tasks only, from the catalog (no relation is opened). What the list
-- endpoints walk and maintenance reads; queues.history_partitions() adds sizes.
create or replace function queues.history_sets()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  -- A bound reads FOR VALUES FROM ('<lower>') TO ('<upper>'), or DEFAULT. It holds no
  -- column, so it is deparsed without opening the partition (relation 0), and its two
  -- quoted values are the 2nd and 4th fields between quotes (a regular expression took
  -- 10 us a row).
  select nullif(split_part(b.bound, '''', 2), '')::bigint, nullif(split_part(b.bound, '''', 4), '')::bigint,
         b.relname::text, greatest(b.reltuples, 0)::bigint, b.bound = 'DEFAULT'
    from (select c.relname, c.reltuples, pg_get_expr(c.relpartbound, 0) as bound
            from pg_inherits i
            join pg_class c on c.oid = i.inhrelid
           where i.inhparent = 'queues.task'::regclass) b
   order by b.bound = 'DEFAULT', 1
$$;

-- The task id ranges [lower_bound, upper_bound) that a newest-first read of history
-- walks, newest first: the sets that can hold a task below _before (null: any) and not
-- above the last task id handed out (sets above it hold none), upper bounds capped at
-- _before. Each range is one set, except the first, which spans the two newest: the set
-- being filled may have begun a moment ago, and two partitions per table cost the planner
-- little more than one, so a page usually takes one statement. A reader that gives each
-- range's bounds to its statement as values gets a plan of these partitions only.
-- While the default partition holds a task (outside every set; normally none), one range
-- instead, (null, _before): everything below _before, in one statement.
create or replace function queues.history_walk(_before bigint)
  returns table (lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (
    select s.lower_bound, least(s.upper_bound, _before) as upper_bound,
           row_number() over (order by s.lower_bound desc) as n
      from queues.history_sets() s
     where not s.is_default
       -- once, not once per set (a call reads the sequence's catalog entry)
       and s.lower_bound <= (select queues.last_task_id())
       and (_before is null or s.lower_bound < _before)
  ),
  walk as (
    select coalesce((select b.lower_bound from s b where b.n = 2), a.lower_bound) as lower_bound, a.upper_bound
      from s a where a.n = 1
    union all
    select s.lower_bound, s.upper_bound from s where s.n > 2
  ),
  spill as (select exists (select 1 from queues.task_default) as any)
  select w.lower_bound, w.upper_bound from walk w, spill where not spill.any
  union all
  select null, _before from spill where spill.any
  order by 1 desc nulls first
$$;

-- The bytes of the sets whose lower bounds are given (a null element: the default
-- partitions), summed over every history table: the data of tables with their TOAST, and
-- of their indexes (each relation's main fork: its free space and visibility maps, a
-- fraction of a percent, are left out, which halves the files looked at). Each partition
-- is looked up by name (queues.history_partition_name) through the catalog's name index;
-- sizing opens each partition and its indexes (a lock and a file size each, about 50
-- relations a set), so this is the one place that costs per partition: callers pass
-- every set they need in one call (one plan).
create or replace function queues.history_set_bytes(_lower_bounds bigint[])
  returns table (lower_bound bigint, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select l.lower_bound,
         coalesce(sum(pg_relation_size(c.oid) + coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0)), 0)::bigint,
         coalesce(sum((select sum(pg_relation_size(i.indexrelid)) from pg_index i where i.indrelid = c.oid)), 0)::bigint
    from unnest(_lower_bounds) l(lower_bound)
   cross join unnest(queues.history_tables()) t(name)
    left join pg_class c on c.relnamespace = 'queues'::regnamespace
                        and c.relname = case when l.lower_bound is null then t.name || '_default'
                                             else queues.history_partition_name(t.name, l.lower_bound) end
   group by l.lower_bound
$$;

-- queues.history_sets() with each set's bytes (queues.history_set_bytes), every set sized
-- on each call: the History page reads queues.history_set_measured for the sets that are
-- done instead (admin.history_status_at).
create or replace function queues.history_partition_sizes()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (select * from queues.history_sets())
  select s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default,
         b.table_bytes, b.index_bytes
    from s
    join queues.history_set_bytes(array(select s.lower_bound from s)) b
      on b.lower_bound is not distinct from s.lower_bound
   order by s.is_default, s.lower_bound
$$;

-- Measures the sets that are done into queues.history_set_measured: every set whose range
-- lies below the last task id and that holds no pending task, with its bytes
-- (queues.history_set_bytes) and its oldest and newest task. Such a set's tables change
-- only by a rare late fact (a redrive, a revocation or start mark that arrives after the
-- completion) until it is dropped, so a reader that answers often (the History page, every
-- dashboard's poll and /metrics) takes its figures from here and sizes only the sets still
-- filling. A row is written only when a figure changed; rows of sets no longer there are
-- deleted. Maintenance calls it at the end of each run (queues.maintain_history_step_at).
-- Returns the number of sets whose figures were written. Owner only.
create or replace function queues.measure_history_sets(_now timestamptz)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _last_id bigint := queues.last_task_id();
  _written integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  delete from queues.history_set_measured m
   where not exists (select 1 from queues.history_sets() s
                      where s.lower_bound = m.lower_bound and s.upper_bound = m.upper_bound);
  with done as (
    select s.lower_bound, s.upper_bound
      from queues.history_sets() s
     where not s.is_default and s.upper_bound <= _last_id
       and not exists (select 1 from queues.task_pending tp
                        where tp.task_id >= s.lower_bound and tp.task_id < s.upper_bound)
  ),
  measured as (
    select d.lower_bound, d.upper_bound, f.task_id as first_task_id, f.enqueued_at as first_enqueued_at,
           n.task_id as last_task_id, b.table_bytes, b.index_bytes
      from done d
      join queues.history_set_bytes(array(select d.lower_bound from done d)) b on b.lower_bound = d.lower_bound
      left join lateral (select t.task_id, t.enqueued_at from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id limit 1) f on true
      left join lateral (select t.task_id from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id desc limit 1) n on true
  )
  insert into queues.history_set_measured as m
         (lower_bound, upper_bound, first_task_id, first_enqueued_at, last_task_id, table_bytes, index_bytes,
          measured_at)
  select x.lower_bound, x.upper_bound, x.first_task_id, x.first_enqueued_at, x.last_task_id, x.table_bytes,
         x.index_bytes, _now
    from measured x
  on conflict (lower_bound) do update
     set upper_bound = excluded.upper_bound, first_task_id = excluded.first_task_id,
         first_enqueued_at = excluded.first_enqueued_at, last_task_id = excluded.last_task_id,
         table_bytes = excluded.table_bytes, index_bytes = excluded.index_bytes, measured_at = excluded.measured_at
   where (m.upper_bound, m.first_task_id, m.first_enqueued_at, m.last_task_id, m.table_bytes, m.index_bytes)
         is distinct from (excluded.upper_bound, excluded.first_task_id, excluded.first_enqueued_at,
                           excluded.last_task_id, excluded.table_bytes, excluded.index_bytes);
  get diagnostics _written = row_count;
  return _written;
end;
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last. Sizes are summed over
-- every history table (tables, TOAST and indexes); tasks is the planner's estimate.
create or replace function queues.history_partitions()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, total_bytes bigint, is_default boolean)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.lower_bound, p.upper_bound, p.partition_name, p.estimated_tasks,
         p.table_bytes + p.index_bytes, p.is_default
    from queues.history_partition_sizes() p
   order by p.is_default, p.lower_bound
$$;

-- The last task id handed out (0 before the first task).
create or replace function queues.last_task_id() returns bigint
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(pg_sequence_last_value(pg_get_serial_sequence('queues.task', 'task_id')::regclass), 0)
$$;

-- One step of partition maintenance at _now: the first of these that has work to do,
-- locking one table only (see "Locks" above), its locks taken between the queue's
-- transactions within lock_timeout_ms (queues.lock_history_tables):
-- 1. Sets ahead of need, one table per step: first a set left half made (some table has
--    its partition, task not yet; task's is made last), then a new set above every range
--    there is or was and above any task in the default partition, of partition_size task
--    ids, while the sets above the last task id handed out cover less than
--    partitions_ahead * partition_size ids. A set less than partition_size ids above the
--    last id (maintenance fell behind) is made whole in one step instead, above the last id.
-- 1b. Tasks in the default partition (ids handed out while no set covered them) are made
--    a set with their facts, at most 2,000 tasks per step: a half made set they fell into
--    is finished so, or a range of the gap they lie in (queues.adopt_history_range).
-- 2. A table detached from a dropped set is dropped (truncated first if it has rows and
--    a foreign key).
-- 3. A fact table's partition of a dropped set is detached.
-- 4. The oldest set that may go is dropped, starting with its task partition, which is
--    detached (the set's tasks are gone from then on; steps 3 and 2 take its facts and the
--    detached tables away): a set goes when its whole range lies below the last task id
--    (no new task can land in it), it holds no pending task (queues.task_pending, then
--    every task checked against its completion), and its newest completion is older than
--    the retention window. A set with one pending task is kept, however old.
-- 5. With nothing else to do: the sets that are done are measured for the History page
--    (queues.measure_history_sets).
-- Drops are recorded in queues.history_partition_dropped. A step that cannot get its lock
-- in time (or finds a task fell into the default partition in the range it makes) is
-- rolled back, recorded in queues.history_step_skipped and reported skipped; the run goes
-- on ("more") until 5 steps have been skipped within a minute. Returns
--   {"action": "attached" | "set_created" | "set_adopted" | "dropped_table" | "truncated" | "detached" |
--              "set_dropped" | "none" | "skipped" | "busy",
--    "table", "lower_bound", "upper_bound", "tasks", "reason", "late": as they apply,
--    "measured": with "none", the sets whose figures step 5 wrote,
--    "kept": sets below the last task id kept so far, "more": whether to call again}
-- "busy": another maintenance step is in flight (one maintainer at a time). Owner only.
create or replace function queues.maintain_history_step_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  -- A bound for any other lock a statement here might wait for (its own are taken
  -- first, without waiting); restored when the function returns.
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint;
  _doing text;
  _table text;
  _name text;
  _lower bigint;
  _upper bigint;
  _truncate boolean;
  _kept integer := 0;
  _set record;
  _tasks bigint;
  _last_completed timestamptz;
  _measured integer;
  _spilled bigint;
  _gap_lower bigint;
  _gap_upper bigint;
  -- The locks that keep every writer of history out (a late set, a move out of the
  -- default partitions): SHARE on each parent, ACCESS EXCLUSIVE on its default.
  _writers_out text[] := array(select x from unnest(queues.history_tables()) t(name),
                                 lateral (values (t.name), (t.name || '_default')) v(x));
  _writers_out_modes text[] := array(select m from unnest(queues.history_tables()) t(name),
                                       lateral (values ('share'), ('access exclusive')) v(m));
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if not pg_try_advisory_xact_lock(20252, 1) then
    return jsonb_build_object('action', 'busy', 'more', false);
  end if;
  select * into _setting from queues.history_setting;
  _last_id := queues.last_task_id();

  begin
    -- 1. Ahead of need: a half made set, unless a task fell into the default partition in
    --    its range (maintenance fell behind while it was half made): then task's
    --    partition cannot be attached, new sets start above it, and step 1b finishes it
    --    by moving those tasks into it.
    with b as (select * from queues.history_partition_bounds())
    select h.lower_bound, h.upper_bound into _lower, _upper
      from (select distinct b.lower_bound, b.upper_bound from b) h
     where not exists (select 1 from b x where x.table_name = 'task' and x.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.task_default t where t.task_id >= h.lower_bound and t.task_id < h.upper_bound)
     order by h.lower_bound
     limit 1;
    if _lower is null then
      -- A new set. Ranges are never reused: above every partition there is or was, and
      -- above any task in the default partition (a new set cannot overlap rows there).
      select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                      coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                      coalesce((select max(t.task_id) + 1 from queues.task_default t), 0))
        into _lower;
      if _lower < _last_id + 1 + _setting.partitions_ahead::bigint * _setting.partition_size then
        _upper := _lower + _setting.partition_size;
      else
        _lower := null;
      end if;
    end if;
    if _lower is not null and _lower <= _last_id + _setting.partition_size then
      -- Late: less than one set's width of ids is left before the ids handed out reach
      -- the set (maintenance fell behind). Made table by table, it could be outrun: a
      -- task given an id in its range before task's partition exists falls into the
      -- default partition, its facts into theirs, and the next table's attach fails on
      -- them, run after run. So the whole set is made in this one step, under locks
      -- that keep every writer of history out (SHARE on each parent, ACCESS EXCLUSIVE on
      -- each default), starting above the last id read under them: no task of its range
      -- exists, and none can be written until it commits. The ids handed out before it
      -- fall into the default partitions (queues.history_summary_at counts them).
      _doing := format('make the set from %s at once (late)', _lower);
      perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
      _last_id := queues.last_task_id();
      if exists (select 1 from queues.history_partition_bounds() b where b.lower_bound = _lower)
         and not exists (select 1 from queues.task_default t where t.task_id >= _lower and t.task_id < _upper) then
        null; -- a half made set that no task has reached: finished as it is
      else
        select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                        coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                        coalesce((select max(t.task_id) + 1 from queues.task_default t), 0),
                        _last_id + 1)
          into _lower;
        _upper := _lower + _setting.partition_size;
      end if;
      perform queues.create_history_partition(_lower, _upper);
      return jsonb_build_object('action', 'set_created', 'table', queues.history_partition_name('task', _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'late', true, 'more', true);
    end if;
    if _lower is not null then
      select t.name into _table
        from unnest(queues.history_tables()) with ordinality t(name, n)
       where to_regclass(format('queues.%I', queues.history_partition_name(t.name, _lower))) is null
       order by t.name = 'task', t.n
       limit 1;
      _doing := format('attach queues.%I', queues.history_partition_name(_table, _lower));
      perform queues.attach_history_partition(_table, _lower, _upper);
      if _table = 'task' then
        insert into queues.history_partition_created (lower_bound, upper_bound)
        values (_lower, _upper) on conflict (lower_bound) do nothing;
      end if;
      return jsonb_build_object('action', case when _table = 'task' then 'set_created' else 'attached' end,
                                'table', queues.history_partition_name(_table, _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'more', true);
    end if;

    -- 1b. Tasks in the default partition (ids handed out while no set covered them): the
    --    range around the lowest is made a set, its rows moved out of the default
    --    partitions (queues.adopt_history_range), so that retention drops them with it
    --    and pending ones stay claimable. The range: a half made set's own (finished so),
    --    or the gap between the ranges there are or were, below the lowest range above
    --    the task and cut after its 2,000th task (a step moves at most that many tasks,
    --    with their facts, under its locks). Not while no range lies above the task: the
    --    ids may still be handed out, and step 1 makes the set above them first.
    select t.task_id into _spilled from queues.task_default t order by t.task_id limit 1;
    if _spilled is not null then
      with r as (
        select b.lower_bound, b.upper_bound from queues.history_partition_bounds() b
        union all
        select d.lower_bound, d.upper_bound from queues.history_partition_dropped d
      )
      select (select min(r.lower_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             (select max(r.upper_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             coalesce((select max(r.upper_bound) from r where r.upper_bound <= _spilled), 0),
             (select min(r.lower_bound) from r where r.lower_bound > _spilled)
        into _lower, _upper, _gap_lower, _gap_upper;
      if _lower is null and _gap_upper is not null then
        -- The gap, cut after its 2,000th task.
        _lower := _gap_lower;
        _upper := least(_gap_upper,
                        coalesce((select t.task_id from queues.task_default t
                                   where t.task_id >= _spilled and t.task_id < _gap_upper
                                   order by t.task_id offset 2000 limit 1), _gap_upper));
      end if;
      if _upper is not null and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = _lower) then
        _doing := format('adopt the default partitions'' tasks in [%s, %s)', _lower, _upper);
        perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
        _tasks := queues.adopt_history_range(_lower, _upper);
        return jsonb_build_object('action', 'set_adopted', 'table', queues.history_partition_name('task', _lower),
                                  'lower_bound', _lower, 'upper_bound', _upper, 'tasks', _tasks, 'more', true);
      end if;
    end if;

    -- 2. A table detached from a dropped set (named as a partition, no longer one). Its
    --    drop locks only itself, so its files are unlinked under no lock the queue waits
    --    for; but dropping a foreign key takes ACCESS EXCLUSIVE on the table it
    --    references, so a table with one (none has today) is truncated first (under its
    --    own lock) and that drop is a catalog change only.
    select c.relname,
           pg_relation_size(c.oid) > 0 and exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'f')
      into _name, _truncate
      from pg_class c
      join unnest(queues.history_tables()) t(name)
        on c.relname = queues.history_partition_name(t.name, substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     where c.relnamespace = 'queues'::regnamespace and c.relkind = 'r' and not c.relispartition
       and exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     order by c.relname
     limit 1;
    if _name is not null then
      if _truncate then
        _doing := format('truncate queues.%I', _name);
        execute format('truncate queues.%I', _name);
        return jsonb_build_object('action', 'truncated', 'table', _name, 'more', true);
      end if;
      _doing := format('drop queues.%I', _name);
      execute format('drop table queues.%I', _name);
      return jsonb_build_object('action', 'dropped_table', 'table', _name, 'more', true);
    end if;

    -- 3. A fact table's partition of a dropped set: detached, a catalog change.
    select b.table_name, b.partition_name, b.lower_bound, b.upper_bound into _table, _name, _lower, _upper
      from queues.history_partition_bounds() b
     where exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = b.lower_bound and d.upper_bound = b.upper_bound)
     order by b.lower_bound, b.table_name
     limit 1;
    if _name is not null then
      _doing := format('detach queues.%I', _name);
      perform queues.lock_history_tables(array[_table, _name, _table || '_default'],
                                         array['access exclusive', 'access exclusive', 'access exclusive'],
                                         _setting.lock_timeout_ms);
      execute format('alter table queues.%I detach partition queues.%I', _table, _name);
      return jsonb_build_object('action', 'detached', 'table', _name, 'lower_bound', _lower, 'upper_bound', _upper,
                                'more', true);
    end if;

    -- 4. Expired sets, oldest first.
    for _set in
      select p.lower_bound, p.upper_bound from queues.history_sets() p
       where not p.is_default and p.upper_bound <= _last_id
       order by p.lower_bound
    loop
      -- Cheap checks first, without strong locks: a pending task, or a recent completion.
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      select max(c.completed_at) into _last_completed from queues.task_completed c
       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound;
      if _last_completed > _now - _setting.retention then
        _kept := _kept + 1;
        continue;
      end if;
      -- Every task completed, from the facts (one scan of the set's two partitions).
      select count(*) into _tasks from queues.task t
       where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound;
      if exists (select 1 from queues.task t
                  where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound
                    and not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)) then
        _kept := _kept + 1;
        continue;
      end if;

      _name := queues.history_partition_name('task', _set.lower_bound);
      _doing := format('detach queues.%I', _name);
      begin
        -- Detaching holds ACCESS EXCLUSIVE on queues.task and the partition, so no
        -- transaction that wrote to the set or read it to complete a task is still open:
        -- check again what could have changed (a task enqueued with an id handed out
        -- before the checks, and its completion).
        perform queues.lock_history_tables(array['task', _name, 'task_default'],
                                           array['access exclusive', 'access exclusive', 'access exclusive'],
                                           _setting.lock_timeout_ms);
        execute format('alter table queues.task detach partition queues.%I', _name);
        if exists (select 1 from queues.task_pending tp
                    where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_completed c
                       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                         and c.completed_at > _now - _setting.retention) then
          -- Roll the block back, which attaches the partition again.
          raise exception 'set [%, %) changed since it was checked', _set.lower_bound, _set.upper_bound
            using errcode = 'QH001';
        end if;
        insert into queues.history_partition_dropped (lower_bound, upper_bound, tasks, last_completed_at, dropped_at)
        values (_set.lower_bound, _set.upper_bound, _tasks, _last_completed, _now);
        return jsonb_build_object('action', 'set_dropped', 'table', _name, 'lower_bound', _set.lower_bound,
                                  'upper_bound', _set.upper_bound, 'tasks', _tasks, 'kept', _kept, 'more', true);
      exception
        when sqlstate 'QH001' then
          _kept := _kept + 1;
      end;
    end loop;

    -- 5. Nothing left to change: the sets that are done are measured for the readers.
    _measured := queues.measure_history_sets(_now);
    delete from queues.history_step_skipped k where k.skipped_at < _now - interval '1 day';
  exception
    -- check_violation: a task landed in a default partition, in the range being made,
    -- since it was read above; the next step starts above it. The skip is recorded, and
    -- the run goes on (a later try may find its moment) until 5 steps have been skipped
    -- within a minute.
    when lock_not_available or deadlock_detected or check_violation then
      insert into queues.history_step_skipped (step, reason) values (coalesce(_doing, 'a step'), sqlerrm);
      return jsonb_build_object('action', 'skipped', 'step', _doing, 'reason', sqlerrm, 'kept', _kept,
                                'more', (select count(*) from queues.history_step_skipped k
                                          where k.skipped_at > clock_timestamp() - interval '1 minute') < 5);
  end;
  return jsonb_build_object('action', 'none', 'kept', _kept, 'measured', _measured, 'more', false);
end;
$$;

-- Partition maintenance at _now, every step of queues.maintain_history_step_at in one
-- transaction, until none is left or one is skipped: its locks are held until that
-- transaction ends, so this is for tests and for running it by hand; the schedule runs
-- each step in a transaction of its own (queues.maintain_history_step). Returns
--   {"created": [[lo, hi], ...], "dropped": [[lo, hi], ...], "skipped": [{...}], "kept": n}
create or replace function queues.maintain_history_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _created jsonb := '[]';
  _dropped jsonb := '[]';
  _skipped jsonb := '[]';
  _adopted jsonb := '[]';
  _kept integer := 0;
  _step jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  -- Each step changes the catalog or ends the run (skips end it after 5 within a minute);
  -- the bound only guards against a bug.
  for _i in 1 .. 100000 loop
    _step := queues.maintain_history_step_at(_now);
    case _step ->> 'action'
      when 'set_created' then
        _created := _created || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_dropped' then
        _dropped := _dropped || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_adopted' then
        _adopted := _adopted || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'skipped', 'busy' then
        _skipped := _skipped || jsonb_build_array(_step);
      else
        null;
    end case;
    _kept := coalesce((_step ->> 'kept')::integer, _kept);
    exit when not (_step ->> 'more')::boolean;
  end loop;
  return jsonb_build_object('created', _created, 'dropped', _dropped, 'adopted', _adopted, 'skipped', _skipped,
                            'kept', _kept);
end;
$$;

-- A db_function step: maintain_history_at(now()), every step in the caller's transaction
-- (for a one-off run; the schedule runs queues.maintain_history_step).
create or replace function queues.maintain_history(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_at(now()))
$$;

-- The schedule's step: one step of maintenance (maintain_history_step_at(now())), its
-- report as the payload of a success envelope. The schedule's payload asks the worker to
-- call it again while the report says "more" ("repeat": true, see the worker's
-- db_function processor), each call a transaction of its own, so that no step's lock is
-- held while another step runs.
create or replace function queues.maintain_history_step(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_step_at(now()))
$$;

-- What operators watch, without the list of sets: the settings, the oldest retained task,
-- and the next drop (the lowest set below the last task id with its newest completion: it
-- can go at last_completed_at + retention, unless it holds pending tasks). Each read of
-- a partitioned table is pruned at plan time to the set it needs (EXECUTE with the set's
-- bounds as values), so the cost does not grow with the number of sets beyond the catalog
-- read of their bounds.
create or replace function queues.history_summary_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _set record;
  _next record;
  _next_json jsonb;
  _oldest_id bigint;
  _oldest_at timestamptz;
  _default_id bigint;
  _default_at timestamptz;
  _last_completed timestamptz;
  _pending bigint;
begin
  select * into _setting from queues.history_setting;
  -- The oldest task: in the lowest set that holds one (or in the default partition).
  for _set in
    select s.lower_bound, s.upper_bound from queues.history_sets() s
     where not s.is_default and s.lower_bound <= _last_id
     order by s.lower_bound
  loop
    execute 'select t.task_id, t.enqueued_at from queues.task t
              where t.task_id >= $1 and t.task_id < $2 order by t.task_id limit 1'
      into _oldest_id, _oldest_at using _set.lower_bound, _set.upper_bound;
    exit when _oldest_id is not null;
  end loop;
  select t.task_id, t.enqueued_at into _default_id, _default_at from queues.task_default t order by t.task_id limit 1;
  if _default_id < _oldest_id or _oldest_id is null then
    _oldest_id := _default_id;
    _oldest_at := _default_at;
  end if;

  select s.lower_bound, s.upper_bound into _next
    from queues.history_sets() s
   where not s.is_default and s.upper_bound <= _last_id
   order by s.lower_bound
   limit 1;
  if found then
    execute 'select max(c.completed_at) from queues.task_completed c where c.task_id >= $1 and c.task_id < $2'
      into _last_completed using _next.lower_bound, _next.upper_bound;
    _pending := (select count(*) from queues.task_pending tp
                  where tp.task_id >= _next.lower_bound and tp.task_id < _next.upper_bound);
    _next_json := jsonb_build_object(
      'lower_bound', _next.lower_bound, 'upper_bound', _next.upper_bound,
      'pending_tasks', _pending,
      'last_completed_at', _last_completed,
      'drop_after', case when _pending = 0 then coalesce(_last_completed + _setting.retention, _now) end);
  end if;
  return jsonb_build_object(
    'retention_seconds', extract(epoch from _setting.retention)::bigint,
    'partition_size', _setting.partition_size,
    'partitions_ahead', _setting.partitions_ahead,
    'last_task_id', _last_id,
    'oldest_task_id', _oldest_id,
    'oldest_enqueued_at', _oldest_at,
    'default_partition_tasks', (select count(*) from queues.task_default),
    'next_drop', _next_json,
    'dropped_sets', (select count(*) from queues.history_partition_dropped),
    'skipped_steps_last_hour', (select count(*) from queues.history_step_skipped k where k.skipped_at > _now - interval '1 hour'),
    'last_skipped_step', (select jsonb_build_object('skipped_at', k.skipped_at, 'step', k.step, 'reason', k.reason)
                            from queues.history_step_skipped k order by k.skipped_at desc limit 1),
    'last_dropped_at', (select max(d.dropped_at) from queues.history_partition_dropped d));
end;
$$;

-- queues.history_summary_at(_now) and the sets with their sizes (queues.history_partitions()).
create or replace function queues.history_status_at(_now timestamptz)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.history_summary_at(_now) || jsonb_build_object(
    'partitions', coalesce((select jsonb_agg(jsonb_build_object(
        'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'name', p.partition_name,
        'estimated_tasks', p.estimated_tasks, 'total_bytes', p.total_bytes, 'is_default', p.is_default)
        order by p.is_default, p.lower_bound)
      from queues.history_partitions() p), '[]'))
$$;

-- The worker runs maintenance as the db_function task of its schedule; operators read the
-- status through admin.history_status(). Everything else here is owner only. Granted
-- here, beside the functions, so that a migration including sql/queues/privileges.sql
-- before this file does not name a function that does not exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.maintain_history_step_at(timestamptz),
  queues.history_status_at(timestamptz), queues.history_summary_at(timestamptz), queues.history_partitions(),
  queues.history_partition_bounds(), queues.history_sets(), queues.history_partition_sizes(),
  queues.history_set_bytes(bigint[]), queues.measure_history_sets(timestamptz),
  queues.history_walk(bigint), queues.create_history_partition(bigint, bigint),
  queues.attach_history_partition(text, bigint, bigint), queues.lock_history_tables(text[], text[], integer),
  queues.adopt_history_range(bigint, bigint), queues.create_history_table(text, text),
  queues.cancel_autovacuum(text[])
  from public;
grant execute on function queues.maintain_history(jsonb), queues.maintain_history_step(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
select internal.register_runnable_function('queues.maintain_history_step(jsonb)');
--! EndIncluded queues/partitions.sql
--! Included admin/history.sql
-- History and retention, for operators (the dashboard's History page, GET /api/history,
-- the queue_history_* gauges of /metrics): the settings and the maintenance schedule,
-- every partition set of the queue's history with its state and sizes, the oldest
-- retained task, the next set retention will drop (queues.history_status_at,
-- sql/queues/partitions.sql) and the recent drops.
--
-- Cost: catalog reads, and per partition set a range count of its pending tasks in
-- queues.task_pending (the claim index: its cost follows pending work, never history) and
-- a row of queues.history_set_measured for a set that is done (every task completed, its
-- range below the last task id: maintenance measured it), or else its sizes (each of its
-- partitions opened) and three primary-key reads (its oldest and newest task) planned for
-- its partition alone. Only the sets still filling (normally the current one and those
-- ahead) are opened on each read. No scan of history.

-- The status at _now: queues.history_status_at(_now) with these keys added or extended:
--   now                  _now
--   lock_timeout_ms      how long a maintenance step keeps asking for its locks
--   partitions[]         each set, lowest first, the default partition last:
--     lower_bound, upper_bound, name, is_default, estimated_tasks (planner), total_bytes,
--     table_bytes, index_bytes  tables with TOAST / indexes, summed over every history table
--     tasks                     task ids handed out in the set, from its oldest to its
--                               newest task (ids only grow and no task is ever deleted
--                               alone, so this is the number of tasks unless an enqueue
--                               rolled back); the default partition: its exact count
--     first_task_id, first_enqueued_at, last_task_id   the set's oldest and newest task
--     pending_tasks             tasks in it not completed (queues.task_pending)
--     measured_at               when maintenance measured the set's bytes and tasks
--                               (queues.history_set_measured: a set below the last task
--                               id with no pending task); null: measured for this answer
--     created_at                when maintenance created it (queues.history_partition_created);
--                               null for sets made before creations were recorded
--     state                     ahead (above the last task id), current (holds the last
--                               task id), next_drop (the set next_drop names), retained
--                               (below the last task id, kept), default
--   totals               sets (not counting the default partition), tasks, table_bytes,
--                        index_bytes, total_bytes
--   recent_drops[]       the 10 newest rows of queues.history_partition_dropped
--   maintenance          the queue_history_maintenance schedule (cron, enabled, next and
--                        last fire) and its last run (task, state, and the run's report
--                        {created, dropped, skipped, kept} once it completed); null
--                        without the schedule
-- Owner only (it takes the clock); the API calls admin.history_status().
create or replace function admin.history_status_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _status jsonb;
  _last_id bigint;
  _next_lower bigint;
  _default record;
  _sets jsonb;
  _set record;
  _first record;
  _probes jsonb := '{}';
  _parts jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  _status := queues.history_summary_at(_now);
  _last_id := (_status ->> 'last_task_id')::bigint;
  _next_lower := (_status -> 'next_drop' ->> 'lower_bound')::bigint;

  -- The default partition, read by itself (normally empty).
  select (select t.task_id from queues.task_default t order by t.task_id limit 1) as first_task_id,
         (select t.enqueued_at from queues.task_default t order by t.task_id limit 1) as first_enqueued_at,
         (select max(t.task_id) from queues.task_default t) as last_task_id,
         (select count(*) from queues.task_default t) as tasks,
         (select count(*) from queues.task_default t
           where not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)) as pending_tasks
    into _default;

  -- Every set once, with its pending count (a range count of queues.task_pending) and its
  -- row of queues.history_set_measured if it is done (its range below the last task id,
  -- no pending task) and maintenance measured it.
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'partition_name', p.partition_name,
           'estimated_tasks', p.estimated_tasks, 'is_default', p.is_default, 'created_at', c.created_at,
           'pending', pe.pending, 'measured', m.lower_bound is not null, 'first_task_id', m.first_task_id,
           'first_enqueued_at', m.first_enqueued_at, 'last_task_id', m.last_task_id,
           'table_bytes', m.table_bytes, 'index_bytes', m.index_bytes, 'measured_at', m.measured_at)), '[]')
    into _sets
    from queues.history_sets() p
    left join queues.history_partition_created c on c.lower_bound = p.lower_bound and not p.is_default
   cross join lateral (select count(*) as pending from queues.task_pending tp
                        where not p.is_default and tp.task_id >= p.lower_bound and tp.task_id < p.upper_bound) pe
    left join queues.history_set_measured m
      on m.lower_bound = p.lower_bound and m.upper_bound = p.upper_bound
     and not p.is_default and p.upper_bound <= _last_id and pe.pending = 0;

  -- The oldest and newest task of each set that is not measured and may hold one (not
  -- above the last task id), by primary key, each read given its set's bounds as values
  -- so that it is planned for that set's partition only.
  for _set in
    select x.lower_bound, x.upper_bound
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, is_default boolean, measured boolean)
     where not x.is_default and not x.measured and x.lower_bound <= _last_id
  loop
    execute 'select (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_task_id,
                    (select t.enqueued_at from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_enqueued_at,
                    (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id desc limit 1) as last_task_id'
      into _first using _set.lower_bound, _set.upper_bound;
    _probes := _probes || jsonb_build_object(_set.lower_bound::text, to_jsonb(_first));
  end loop;

  -- The answer: sizes from the measurement, or from one queues.history_set_bytes call for
  -- every set that is not measured.
  with s as (
    select x.*, coalesce(x.first_task_id, (_probes -> x.lower_bound::text ->> 'first_task_id')::bigint) as first_id,
           coalesce(x.first_enqueued_at, (_probes -> x.lower_bound::text ->> 'first_enqueued_at')::timestamptz) as first_at,
           coalesce(x.last_task_id, (_probes -> x.lower_bound::text ->> 'last_task_id')::bigint) as last_id
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, partition_name text,
                                       estimated_tasks bigint, is_default boolean, created_at timestamptz,
                                       pending bigint, measured boolean, first_task_id bigint,
                                       first_enqueued_at timestamptz, last_task_id bigint, table_bytes bigint,
                                       index_bytes bigint, measured_at timestamptz)
  ),
  sized as (
    select * from queues.history_set_bytes(array(select s.lower_bound from s where not s.measured))
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', s.lower_bound, 'upper_bound', s.upper_bound, 'name', s.partition_name,
           'is_default', s.is_default, 'estimated_tasks', s.estimated_tasks,
           'total_bytes', coalesce(s.table_bytes, b.table_bytes) + coalesce(s.index_bytes, b.index_bytes),
           'table_bytes', coalesce(s.table_bytes, b.table_bytes),
           'index_bytes', coalesce(s.index_bytes, b.index_bytes),
           'tasks', case when s.is_default then _default.tasks else coalesce(s.last_id - s.first_id + 1, 0) end,
           'first_task_id', case when s.is_default then _default.first_task_id else s.first_id end,
           'first_enqueued_at', case when s.is_default then _default.first_enqueued_at else s.first_at end,
           'last_task_id', case when s.is_default then _default.last_task_id else s.last_id end,
           'pending_tasks', case when s.is_default then _default.pending_tasks else s.pending end,
           'measured_at', s.measured_at,
           'created_at', s.created_at,
           'state', case when s.is_default then 'default'
                         when s.lower_bound > _last_id then 'ahead'
                         when s.upper_bound > _last_id then 'current'
                         when s.lower_bound = _next_lower then 'next_drop'
                         else 'retained' end)
           order by s.is_default, s.lower_bound), '[]')
    into _parts
    from s
    left join sized b on not s.measured and b.lower_bound is not distinct from s.lower_bound;

  return _status || jsonb_build_object(
    'now', _now,
    'lock_timeout_ms', (select s.lock_timeout_ms from queues.history_setting s),
    'partitions', _parts,
    'totals', (select jsonb_build_object(
                 'sets', count(*) filter (where not (x ->> 'is_default')::boolean),
                 'tasks', coalesce(sum((x ->> 'tasks')::bigint), 0),
                 'table_bytes', coalesce(sum((x ->> 'table_bytes')::bigint), 0),
                 'index_bytes', coalesce(sum((x ->> 'index_bytes')::bigint), 0),
                 'total_bytes', coalesce(sum((x ->> 'total_bytes')::bigint), 0))
                 from jsonb_array_elements(_parts) x),
    'recent_drops', coalesce((
      select jsonb_agg(jsonb_build_object(
               'lower_bound', d.lower_bound, 'upper_bound', d.upper_bound, 'tasks', d.tasks,
               'last_completed_at', d.last_completed_at, 'dropped_at', d.dropped_at)
             order by d.history_partition_dropped_id desc)
        from (select * from queues.history_partition_dropped x
               order by x.history_partition_dropped_id desc limit 10) d), '[]'),
    'maintenance', (
      select jsonb_build_object(
               'schedule', s.name, 'cron', s.cron, 'enabled', s.enabled,
               'next_fire_at', s.next_fire_at, 'last_fire_at', s.last_fire_at,
               'last_run', (
                 select jsonb_build_object(
                          'fire_at', r.fire_at, 'outcome', r.outcome, 'task_id', r.task_id,
                          'task_state', coalesce(
                            (select c.outcome from queues.task_completed c where c.task_id = r.task_id),
                            (select admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)
                               from queues.task_pending p where p.task_id = r.task_id)),
                          'report', (select x.result -> 'payload' from queues.task_result x
                                      where x.task_id = r.task_id order by x.task_lease_id desc limit 1))
                   from schedules.schedule_run r
                  where r.schedule_id = s.schedule_id
                  order by r.fire_at desc limit 1))
        from schedules.list_schedules() s
       where s.name = 'queue_history_maintenance'));
end;
$$;

create or replace function admin.history_status()
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.history_status_at(now())
$$;

-- Granted here, beside the function (see sql/queues/partitions.sql for why); the clock
-- variant stays owner only.
revoke execute on function admin.history_status_at(timestamptz) from public;
grant execute on function admin.history_status() to :DATABASE_API;
--! EndIncluded admin/history.sql
--! Included admin/tasks.sql
-- Reading tasks for the operations API: a keyset-paginated list, one task with its facts,
-- and counts by type and state. The *_at functions take the clock (owner only, for
-- tests); the API calls the wrappers, which pass now().

-- Tasks newest first (by task_id), _limit per page (default 50, at most 500), older than
-- _before_task_id (the last id of the previous page: keyset pagination, so a page costs
-- the same at any depth). Filters, each optional and combined with AND:
--   _task_type            a registered type
--   _state                one of admin.task_states()
--   _worker_id            tasks leased at least once by this worker
--   _resource_key         tasks with this resource key
--   _enqueued_from/_to    enqueued_at in [from, to)
--   _payload_path/_value  payload #> path = value (a JSON value)
-- Which table drives the walk: pending states walk queues.task_pending (bounded by
-- pending work); outcomes walk queues.task_completed by key (failed and abandoned ones
-- by task_completed_unsuccessful_task_idx, which holds only those); a resource key walks
-- task_resource_key_idx; otherwise queues.task by its primary key, newest first. Every
-- walk stops after _limit matches, so its cost is the rows it has to pass over to find
-- them: a filter that matches only old or rare tasks (a payload value, a worker gone for
-- a week, a time range far back) reads the newer tasks in between. The statement is
-- built from constant fragments; every value is a parameter.
-- History is partitioned by task id (sql/queues/partitions.sql), so the newest tasks sit
-- in the newest partition set. Every walk but the pending states' runs the statement once
-- per range of queues.history_walk (a set, or the two newest), newest first, until the
-- page is full: each run has the range's bounds as values ($12, $13), so the planner reads
-- the range's partitions of task, task_completed and task_lease instead of planning,
-- opening and locking all of them and merging every set for the newest 50. Null bounds
-- (the pending states; a task in the default partition) read every partition at once.
create or replace function admin.list_tasks_at(
  _now            timestamptz,
  _task_type      text,
  _state          text,
  _limit          integer,
  _before_task_id bigint,
  _worker_id      text,
  _resource_key   text,
  _enqueued_from  timestamptz,
  _enqueued_to    timestamptz,
  _payload_path   text[],
  _payload_value  jsonb
) returns table (
  task_id       bigint,
  task_type     text,
  state         text,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  lease_count   integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  available_at  timestamptz,
  completed_at  timestamptz
)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _filters text := '';
  _sql text;
  _worker_key integer;
  _lower bigint;
  _upper bigint;
  _found bigint;
  _remaining integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  if _state is not null and not (_state = any (admin.task_states())) then
    raise exception 'unknown state %; expected one of %', quote_literal(left(_state, 100)),
      array_to_string(admin.task_states(), ', ') using errcode = '22023';
  end if;
  if _before_task_id is not null and _before_task_id < 1 then
    raise exception 'before_task_id must be a positive task id, got %', _before_task_id
      using errcode = '22023';
  end if;
  if _worker_id is not null and length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _resource_key is not null and length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _enqueued_from is not null and _enqueued_to is not null and _enqueued_from >= _enqueued_to then
    raise exception 'enqueued_from (%) must be before enqueued_to (%)', _enqueued_from, _enqueued_to
      using errcode = '22023';
  end if;
  if (_payload_path is null) <> (_payload_value is null) then
    raise exception 'payload_path and payload_value go together: give both or neither' using errcode = '22023';
  end if;
  if _payload_path is not null and (cardinality(_payload_path) not between 1 and 10
      or exists (select 1 from unnest(_payload_path) e where e is null or length(e) not between 1 and 100)) then
    raise exception 'payload_path must have 1 to 10 keys of 1 to 100 characters each' using errcode = '22023';
  end if;

  if _task_type is not null then _filters := _filters || ' and t.task_type = $2'; end if;
  if _worker_id is not null then
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
    _filters := _filters || ' and exists (select 1 from queues.task_lease l where l.task_id = t.task_id
                                             and (l.worker_key = $14 or l.worker_id = $6)
                                             and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))';
  end if;
  if _resource_key is not null then _filters := _filters || ' and t.resource_key = $7'; end if;
  if _enqueued_from is not null then _filters := _filters || ' and t.enqueued_at >= $8'; end if;
  if _enqueued_to is not null then _filters := _filters || ' and t.enqueued_at < $9'; end if;
  if _payload_path is not null then _filters := _filters || ' and t.payload #> $10 = $11'; end if;

  if _state in ('scheduled', 'ready', 'running', 'retrying') then
    _sql := 'select p.task_id, p.task_type, $3, p.priority, t.resource_key, t.max_attempts, p.lease_count,
                    t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
               from queues.task_pending p
              -- lateral + limit 1: one primary-key probe per pending task passed over
              cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
              where admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1) = $3
                and ($4::bigint is null or p.task_id < $4)' || _filters || '
              order by p.task_id desc
              limit $5';
  elsif _state is not null then
    _sql := 'select c.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
                    (select count(*)::integer from queues.task_lease l where l.task_id = c.task_id
                        and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13)),
                    t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
               from queues.task_completed c
              cross join lateral (select * from queues.task x where x.task_id = c.task_id
                                     and ($12::bigint is null or x.task_id >= $12) and ($13::bigint is null or x.task_id < $13)
                                   limit 1) t
              where c.outcome = $3
                and ($4::bigint is null or c.task_id < $4)
                and ($12::bigint is null or c.task_id >= $12) and ($13::bigint is null or c.task_id < $13)' || _filters || '
              order by c.task_id desc
              limit $5';
  else
    _sql := 'select t.task_id, t.task_type,
                    coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1)),
                    t.priority, t.resource_key, t.max_attempts,
                    coalesce(p.lease_count,
                             (select count(*)::integer from queues.task_lease l where l.task_id = t.task_id
                                 and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))),
                    t.enqueued_at, t.scheduled_at, p.available_at, c.completed_at
               from queues.task t
               left join queues.task_pending p on p.task_id = t.task_id
               left join queues.task_completed c on c.task_id = t.task_id
                 and ($12::bigint is null or c.task_id >= $12) and ($13::bigint is null or c.task_id < $13)
              where ($4::bigint is null or t.task_id < $4)
                and ($12::bigint is null or t.task_id >= $12) and ($13::bigint is null or t.task_id < $13)' || _filters || '
              order by t.task_id desc
              limit $5';
  end if;

  if _state in ('scheduled', 'ready', 'running', 'retrying') then
    return query execute _sql
      using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, null::bigint, null::bigint, _worker_key;
    return;
  end if;
  _remaining := _page;
  for _lower, _upper in
    select w.lower_bound, w.upper_bound from queues.history_walk(_before_task_id) w
     order by w.lower_bound desc nulls first
  loop
    return query execute _sql
      using _now, _task_type, _state, _before_task_id, _remaining, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, _lower, _upper, _worker_key;
    get diagnostics _found = row_count;
    _remaining := _remaining - _found;
    exit when _remaining <= 0;
  end loop;
end;
$$;

create or replace function admin.list_tasks(
  _task_type      text default null,
  _state          text default null,
  _limit          integer default null,
  _before_task_id bigint default null,
  _worker_id      text default null,
  _resource_key   text default null,
  _enqueued_from  timestamptz default null,
  _enqueued_to    timestamptz default null,
  _payload_path   text[] default null,
  _payload_value  jsonb default null
) returns table (
  task_id       bigint,
  task_type     text,
  state         text,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  lease_count   integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  available_at  timestamptz,
  completed_at  timestamptz
)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_tasks_at(now(), _task_type, _state, _limit, _before_task_id, _worker_id,
                                    _resource_key, _enqueued_from, _enqueued_to, _payload_path, _payload_value)
$$;

-- One task with everything recorded about it, as a JSON object:
--   {task: {..., state}, leases: [...], errors: [...], completion: {...} | null,
--    failed_attempts: [...], redriven_to: id | null, redriven_from: id | null}
-- Raises 23503 when there is no such task.
create or replace function admin.get_task_at(_now timestamptz, _task_id bigint)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;

  select jsonb_build_object(
           'task', to_jsonb(t) || jsonb_build_object(
             'state', coalesce(c.outcome,
                               admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)),
             'available_at', p.available_at,
             'current_lease_id', p.current_lease_id),
           'leases', coalesce((
             select jsonb_agg(jsonb_build_object(
                      'task_lease_id', l.task_lease_id, 'worker_id', l.worker_id,
                      'leased_at', l.leased_at, 'expires_at', l.expires_at,
                      'released_at', l.released_at, 'revoked_at', l.revoked_at, 'extensions', l.extensions,
                      'live', coalesce(l.task_lease_id = p.current_lease_id and p.available_at > _now, false))
                      order by l.task_lease_id)
               from queues.task_lease_effective l where l.task_id = t.task_id), '[]'::jsonb),
           'errors', coalesce((
             select jsonb_agg(to_jsonb(e) - 'task_id' order by e.error_id)
               from queues.error e where e.task_id = t.task_id), '[]'::jsonb),
           'completion', case when c.task_id is not null then to_jsonb(c) - 'task_id' end)
    into _result
    from queues.task t
    left join queues.task_pending p on p.task_id = t.task_id
    left join queues.task_completed c on c.task_id = t.task_id
   where t.task_id = _task_id;

  if _result is null then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  return _result || admin.task_retry_facts(_task_id) || admin.task_dashboard_facts(_task_id);
end;
$$;

create or replace function admin.get_task(_task_id bigint)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.get_task_at(now(), _task_id)
$$;

-- Counts by task type and state: pending states over queues.task_pending (bounded by
-- pending work), completion outcomes over the last _window_seconds only (default 86400;
-- read through task_completed_completed_at_idx), so the cost never follows history.
-- Every registered type appears, with zero rows left out.
create or replace function admin.task_counts_at(_now timestamptz, _window_seconds integer)
  returns table (task_type text, state text, count bigint)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 86400);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 2592000 then
    raise exception 'window_seconds must be between 60 and 2592000 (30 days), got %', _window
      using errcode = '22023';
  end if;
  return query
  select p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state,
         count(*)
    from queues.task_pending p
   group by 1, 2
  union all
  select t.task_type, c.outcome, count(*)
    from queues.task_completed c
   -- lateral + limit 1: a primary-key probe per completion in the window
   cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
   where c.completed_at > _now - make_interval(secs => _window)
     and c.completed_at <= _now
   group by 1, 2
   order by 1, 2;
end;
$$;

create or replace function admin.task_counts(_window_seconds integer default null)
  returns table (task_type text, state text, count bigint)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.task_counts_at(now(), _window_seconds)
$$;

-- The registered task types (roles), for filters and forms.
create or replace function admin.list_task_types()
  returns table (task_type text, description text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_type, t.description from queues.task_type t order by t.task_type
$$;

-- Facts of one task the dashboard adds to admin.get_task's answer:
--   {results: [{task_lease_id, result, recorded_at}], cancellation: {reason, cancelled_at} | null,
--    run_now_at: timestamptz | null, type_paused: boolean, process: {process, root_id} | null,
--    heartbeats: [{task_lease_id, extended_at, expires_at}]}
-- Results come from queues.task_result when that table exists (read through the catalog,
-- so this works with and without it).
create or replace function admin.task_dashboard_facts(_task_id bigint)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _results jsonb := '[]';
begin
  if to_regclass('queues.task_result') is not null then
    execute 'select coalesce(jsonb_agg(jsonb_build_object(''task_lease_id'', r.task_lease_id, ''result'', r.result,
                                                         ''recorded_at'', r.recorded_at) order by r.task_lease_id), ''[]'')
               from queues.task_result r where r.task_id = $1'
      into _results using _task_id;
  end if;
  return jsonb_build_object(
    'results', _results,
    'cancellation', (select jsonb_build_object('reason', c.reason, 'cancelled_at', c.cancelled_at)
                       from queues.task_cancelled c where c.task_id = _task_id),
    'run_now_at', (select r.requested_at from queues.task_run_now r where r.task_id = _task_id),
    'type_paused', (select t.task_type = any (queues.paused_task_types()) from queues.task t where t.task_id = _task_id),
    -- The business process the task works for: its payload names the root (X_task_id).
    'process', (select jsonb_build_object('process', p.process, 'root_id', (t.payload ->> (p.process || '_task_id'))::bigint)
                  from queues.task t cross join admin.processes() p
                 where t.task_id = _task_id and t.payload ->> (p.process || '_task_id') ~ '^[0-9]{1,18}$'
                 limit 1),
    'heartbeats', coalesce((
      select jsonb_agg(jsonb_build_object('task_lease_id', x.task_lease_id, 'extended_at', x.extended_at,
                                          'expires_at', x.expires_at) order by x.task_lease_extension_id)
        from queues.task_lease l
        join queues.task_lease_extension x on x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
       where l.task_id = _task_id), '[]'));
end;
$$;
--! EndIncluded admin/tasks.sql
--! Included admin/dead_letters.sql
-- Dead letters, redrive and stale-lease recovery for the operations API. The queue owns
-- the semantics (queues.dead_letter, queues.redrive_task, queues.recover_stale_leases);
-- these wrappers add paging and validation, so the API role needs EXECUTE on admin
-- functions only.

-- Dead letters newest first, optionally of one _task_type, _limit per page (default 50,
-- at most 500), older than _before_task_id.
-- The rows of queues.dead_letter (sql/queues/dead_letter.sql), read range by range of
-- queues.history_walk, newest first, until the page is full (as admin.list_tasks_at does,
-- for the same reason): the view's definition is repeated here with the range's bounds on
-- every partitioned table it reads, so each run opens the range's partitions only (pruned
-- when the plan starts). sql/admin/tasks_filters.test.ts checks that the pages give the
-- view's rows.
create or replace function admin.list_dead_letters(
  _task_type      text default null,
  _limit          integer default null,
  _before_task_id bigint default null
) returns table (
  task_id      bigint,
  task_type    text,
  payload      jsonb,
  outcome      text,
  completed_at timestamptz,
  last_error   text,
  attempts     integer
)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
  -- One plan per session, of a fixed shape: the newest unsuccessful completions of the
  -- range by index, each task and its facts probed by key, stopping at the page. Planned
  -- for each call's values, the planner took 1 ms a call; and its estimates (the view's two
  -- tests of outcome multiply into one row per set) made it sort every dead letter of the
  -- history first: 200 to 500 ms at 10,000,000 tasks, for the first five calls of every
  -- session, before the plan cache settled on a generic plan. Without these settings that
  -- generic plan may merge-join a whole set's tasks instead.
  set plan_cache_mode = force_generic_plan
  set enable_sort = off
  set enable_hashjoin = off
  set enable_mergejoin = off
as $$
declare
  _page integer := admin.page_limit(_limit);
  _lower bigint;
  _upper bigint;
  _found bigint;
  _remaining integer;
begin
  perform admin.assert_task_type(_task_type);
  if _before_task_id is not null and _before_task_id < 1 then
    raise exception 'before_task_id must be a positive task id, got %', _before_task_id
      using errcode = '22023';
  end if;
  _remaining := _page;
  for _lower, _upper in
    -- A range without bounds (a task in the default partition): every task id.
    select coalesce(w.lower_bound, -9223372036854775808), coalesce(w.upper_bound, 9223372036854775807)
      from queues.history_walk(_before_task_id) w
     order by w.lower_bound desc nulls first
  loop
    return query
    select c.task_id, t.task_type, t.payload, c.outcome, c.completed_at,
           (select e.error_message from queues.error e
             where e.task_id = c.task_id
               and e.task_id >= _lower and e.task_id < _upper
             order by e.error_id desc limit 1),
           (select count(*)::integer from queues.task_lease l
             where l.task_id = c.task_id
               and l.task_id >= _lower and l.task_id < _upper)
      from queues.task_completed c
     -- lateral + limit 1: the completions drive, each task probed by key
     cross join lateral (select x.task_type, x.payload from queues.task x
                          where x.task_id = c.task_id and x.task_id >= _lower and x.task_id < _upper
                          limit 1) t
     -- The view's outcome test, in a form the partial index's predicate follows from.
     where c.outcome in ('abandoned', 'failed')
       and (c.outcome = 'abandoned' or not t.payload ? 'error_handler')
       and not exists (select 1 from queues.task_redriven r
                        where r.task_id = c.task_id
                          and r.task_id >= _lower and r.task_id < _upper)
       and c.task_id >= _lower and c.task_id < _upper
       and (_task_type is null or t.task_type = _task_type)
     order by c.task_id desc
     limit _remaining;
    get diagnostics _found = row_count;
    _remaining := _remaining - _found;
    exit when _remaining <= 0;
  end loop;
end;
$$;

-- Redrives one dead letter: a new task with the same type, payload, priority, resource key
-- and max_attempts. Returns the new task id. 22004 for null, 23503 for an unknown task,
-- 22023 when the task is not a dead letter (queues.redrive_task decides).
create or replace function admin.redrive_task(_task_id bigint)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  return queues.redrive_task(_task_id);
end;
$$;

-- Releases at once the live leases of workers not seen for _dead_after_seconds (default
-- 600, between 10 and 86400). Returns the leases released.
create or replace function admin.recover_stale_leases(_dead_after_seconds integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _dead_after integer := coalesce(_dead_after_seconds, 600);
begin
  if _dead_after not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead_after
      using errcode = '22023';
  end if;
  return query
  select r.task_id, r.task_lease_id, r.worker_id from queues.recover_stale_leases(_dead_after) r;
end;
$$;

-- Leases that recover_stale_leases would release now.
create or replace function admin.list_stale_leases()
  returns table (task_id bigint, task_lease_id bigint, worker_id text,
                 last_seen_at timestamptz, expires_at timestamptz)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return query
  select s.task_id, s.task_lease_id, s.worker_id, s.last_seen_at, s.expires_at
    from queues.stale_lease s
   order by s.task_id
   limit 1000;
end;
$$;

-- Retry and redrive facts of one task, merged into admin.get_task's answer:
--   {failed_attempts: [{task_lease_id, failed_at, retry_at}], redriven_to, redriven_from}
create or replace function admin.task_retry_facts(_task_id bigint)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  return jsonb_build_object(
    'failed_attempts', coalesce((
      select jsonb_agg(jsonb_build_object('task_lease_id', f.task_lease_id, 'failed_at', f.failed_at,
                                          'retry_at', f.retry_at) order by f.failed_at)
        from queues.task_attempt_failed f where f.task_id = _task_id), '[]'::jsonb),
    'redriven_to', (select r.new_task_id from queues.task_redriven r where r.task_id = _task_id limit 1),
    'redriven_from', (select r.task_id from queues.task_redriven r where r.new_task_id = _task_id limit 1));
end;
$$;
--! EndIncluded admin/dead_letters.sql

--! split: 520-hot-path-plans.sql
-- The hot path's plans stop depending on task_pending's statistics, and a start mark that
-- arrives after its lease's own completion is recorded (queues.mark_started).
--
-- Autovacuum takes task_pending's statistics when a busy queue has just drained: many
-- pages, nearly no live row. Every plan made with them thought each of its indexes held
-- one row, so a full scan of task_pending_leased_idx cost as little as a primary-key probe,
-- and the planner chose it for probes by (task_id, current_lease_id): each probe then read
-- every leased row, dead index entries included (millions a second in a soak). Its
-- successor, task_pending_lease_expiry_idx, covers current_lease_id > 0 (lease ids are
-- positive): a probe's current_lease_id = <parameter> does not imply that, so only the
-- primary key serves it; the claim's expired leases and a worker's revocation name the
-- predicate themselves. The build holds writes of task_pending while it runs (the
-- pending tasks only, not the history).
set local lock_timeout = '5s';

create index if not exists task_pending_lease_expiry_idx
  on queues.task_pending (available_at) where current_lease_id > 0;
-- lock: access exclusive on queues.task_pending: dropping the old index is a catalog change (milliseconds), its successor is built first
drop index if exists queues.task_pending_leased_idx;

--! Included queues/start.sql
-- Marks tasks started (queues.task_lease_started): the worker's start recorder calls it
-- for every task it runs, in the instant the task starts, so the queue knows which of a
-- dead worker's leases were started (those count towards abandonment and make their task
-- a suspect; the leases of tasks that only waited in its local queue count for nothing).
-- A lease that is still its task's current lease is marked, and so is one that its own
-- settlement already ended (completed, failed an attempt, interrupted): the completion
-- of a fast task, or a step that ran in the database, may commit before the mark of its
-- start, and that task did start. Returns the task ids whose lease was neither: taken
-- over by another worker (revoked, expired) or released.
-- Set-based and lean (one statement for the leases still held, the usual case; no per-row
-- work): it runs once per group of tasks starting together, so its cost is paid per task.
create or replace function queues.mark_started(_task_ids bigint[], _task_lease_ids bigint[])
  returns setof bigint
  language plpgsql volatile
  rows 1
  security definer
  set plan_cache_mode = force_generic_plan
  -- Every row it reads is found by key. Its plans are made once per connection, and a
  -- table that was small then (a fresh set of history partitions) would be scanned whole
  -- for each lease once it has grown.
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _not_held bigint[];
  _not_held_leases bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  -- One pass over the input, each pair probed by primary key (a subquery, so no join of
  -- the input to task_pending is planned from its statistics; a statement of 500 starts
  -- stays linear). Marks the held leases; collects the others. Each probe is a scalar
  -- subquery, not EXISTS: the planner may turn an EXISTS into a hashed subplan, which reads
  -- the whole table once per call, and this plan is made once per connection, from
  -- whatever the statistics said then (a small table at the time).
  with input as (
    select i.task_id, i.task_lease_id,
           coalesce((select true from queues.task_pending p
                      where p.task_id = i.task_id and p.current_lease_id = i.task_lease_id), false) as held
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id)
    select i.task_id, i.task_lease_id from input i where i.held
    on conflict do nothing
  )
  select array_agg(i.task_id), array_agg(i.task_lease_id) into _not_held, _not_held_leases
    from input i where not i.held;
  if _not_held is null then
    return;
  end if;
  -- The few that are not held (normally none): a lease that its own settlement already
  -- ended is marked too. A statement of its own, run only then: its plan locks every
  -- partition of three history tables, which the attach of a new partition must wait for.
  return query
  with ended as (
    select i.task_id, i.task_lease_id,
           -- Probes by primary key (scalar subqueries, as above: as an EXISTS, this read
           -- the whole of task_completed, 3.4 ms a call at 20,000 completed tasks).
           coalesce((select true from queues.task_completed c
                      where c.task_id = i.task_id and c.task_lease_id = i.task_lease_id), false)
           or coalesce((select true from queues.task_attempt_failed f
                         where f.task_id = i.task_id and f.task_lease_id = i.task_lease_id limit 1), false)
           or coalesce((select true from queues.task_interruption x
                         where x.task_id = i.task_id and x.task_lease_id = i.task_lease_id limit 1), false) as started
      from unnest(_not_held, _not_held_leases) as i(task_id, task_lease_id)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id)
    select e.task_id, e.task_lease_id from ended e where e.started
    on conflict do nothing
  )
  select e.task_id from ended e where not e.started;
end;
$$;
--! EndIncluded queues/start.sql
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
    -- migrations/current/520-hot-path-plans.sql): only expired leases are read.
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
    join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    left join queues.worker_name n on n.worker_key = l.worker_key
    join queues.worker w on w.worker_id = coalesce(l.worker_id, n.worker_id)
   where p.available_at > _now
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
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id from queues.stale_leases_at(_now, _dead_after_seconds) s
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null,
           -- A lease whose task never started does not count towards abandonment.
           unstarted_count = p.unstarted_count + (not exists (
             select 1 from queues.task_lease_started st
              where st.task_id = p.task_id and st.task_lease_id = s.task_lease_id))::integer
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
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
-- complete anything). The tasks it never started (its local queue) are claimable at once
-- instead of when their leases expire, and their revocation does not count towards
-- abandonment. The tasks it had started count an expired lease and are suspects (one of
-- them may have killed the process): they stay unclaimable until their leases would have
-- expired, as without a supervisor, so a poison task's crash loop is paced by its lease
-- and the supervisor's spares keep up with the deaths instead of all dying in a second.
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
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)));
  return query
  with held as (
    select p.task_id, p.current_lease_id as task_lease_id,
           exists (select 1 from queues.task_lease_started st
                    where st.task_id = p.task_id and st.task_lease_id = p.current_lease_id) as started
      from queues.task_pending p
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)
  ),
  revoked as (
    -- available_at of a leased row is its lease's expiry (heartbeats included).
    update queues.task_pending p
       set available_at = case when h.started then p.available_at else now() end,
           current_lease_id = null,
           unstarted_count = p.unstarted_count + (not h.started)::integer
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
--! Included queues/lease.sql
-- Heartbeats and releases of leases. Both act only on a task's current lease: a worker
-- whose lease was taken over learns it from the missing row and must stop.

-- Validates parallel arrays of task ids and lease ids.
create or replace function queues.assert_lease_pairs(_task_ids bigint[], _task_lease_ids bigint[])
  returns void
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_ids is null or _task_lease_ids is null then
    raise exception 'task_ids and task_lease_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) <> cardinality(_task_lease_ids) then
    raise exception 'task_ids and task_lease_ids must have the same length (% and %)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 leases per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null then
    raise exception 'task_ids and task_lease_ids must not contain null' using errcode = '22004';
  end if;
end;
$$;

-- Resource-key locks. Everything that changes queues.resource_lease holds the key's
-- transaction-scoped advisory lock (class 20251, hashtext(key)) while it does: the claim
-- takes it with pg_try_advisory_xact_lock and skips a key it cannot get, so a claim
-- never waits on a key; the others (completion, heartbeat, release, revocation) take
-- theirs in one global order with this function, so they cannot deadlock each other.
create or replace function queues.lock_resource_keys(_task_ids bigint[])
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text;
begin
  for _key in
    select distinct p.resource_key
      from queues.task_pending p
     where p.task_id = any (_task_ids) and p.resource_key is not null
     order by 1
  loop
    perform pg_advisory_xact_lock(20251, hashtext(_key));
  end loop;
end;
$$;

-- Extends each given lease that is still its task's current lease to _now + _lease_seconds
-- and appends a queues.task_lease_extension fact. Parallel arrays of task and lease ids.
-- Never waits for a task's row: a lease whose row another transaction holds (a completion
-- of that task in flight, usually) is left as it is, its expiry unchanged, and returned
-- as still held; the next heartbeat extends it if it still is. Returns the leases still
-- held, extended or left; a lease missing from the result was lost (the task was
-- re-claimed after an expiry, or completed, or its resource key went to another task).
create or replace function queues.extend_leases_at(
  _now            timestamptz,
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _lease_seconds  integer
) returns table (task_id bigint, task_lease_id bigint, expires_at timestamptz)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _locked bigint[];
  _other bigint[] := '{}';
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;
  -- The rows first (a primary-key probe of `= any`), skipping those another transaction
  -- holds. A heartbeat that waited for a row held the rows it had already locked
  -- meanwhile, so a completion batch in flight made it wait, and the completions of its
  -- other tasks waited for it in turn (up to 3 s in a soak: RELIABILITY.md, scenario 10).
  _locked := array(select p.task_id from queues.task_pending p
                    where p.task_id = any (_task_ids) order by p.task_id for no key update skip locked);
  -- The others: rows held elsewhere, and tasks no longer pending (normally none).
  if cardinality(_locked) < cardinality(_task_ids) then
    _other := array(select i.id from unnest(_task_ids) i(id) except select l.id from unnest(_locked) l(id));
  end if;

  -- The rows by primary key from the array of ids, each row's lease looked up in a map of
  -- the input: no join of the input to task_pending, whose plan would follow
  -- task_pending's statistics (see queues.claim_tasks_at's moved).
  return query
  with m as (
    select jsonb_object_agg(i.task_id::text, i.task_lease_id) as leases
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
  ),
  extended as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds)
      from m
     where p.task_id = any (_locked)
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
       -- A keyed task extends only while it holds its key: once an expired lease's key
       -- went to another task (which may hold it still, or have completed), the lease
       -- is lost and must not come back to life beside the other task's.
       and (p.resource_key is null
            or exists (select 1 from queues.resource_lease r
                        where r.resource_key = p.resource_key and r.task_id = p.task_id))
    returning p.task_id, p.current_lease_id, p.available_at, p.resource_key
  ),
  -- The rows another transaction holds, as last committed: a lease still current there
  -- (with its key, for a keyed task) is still held.
  left_as_is as (
    select p.task_id, p.current_lease_id, p.available_at
      from queues.task_pending p, m
     where p.task_id = any (_other)
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
       and (p.resource_key is null
            or exists (select 1 from queues.resource_lease r
                        where r.resource_key = p.resource_key and r.task_id = p.task_id))
  ),
  recorded as (
    insert into queues.task_lease_extension (task_id, task_lease_id, extended_at, expires_at)
    select e.task_id, e.current_lease_id, _now, e.available_at from extended e
  ),
  key_extended as (
    update queues.resource_lease r
       set expires_at = e.available_at
      from extended e
     where e.resource_key is not null and r.resource_key = e.resource_key and r.task_id = e.task_id
  )
  select e.task_id, e.current_lease_id, e.available_at from extended e
  union all
  select l.task_id, l.current_lease_id, l.available_at from left_as_is l;
end;
$$;

create or replace function queues.extend_leases(
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _lease_seconds  integer default null
) returns table (task_id bigint, task_lease_id bigint, expires_at timestamptz)
  language sql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.extend_leases_at(now(), _task_ids, _task_lease_ids, coalesce(_lease_seconds, 300))
$$;

-- Gives leases back before they expire (graceful shutdown): each task whose current lease
-- is given becomes claimable at once, and the release is not counted towards abandoning
-- it. The lease ends there: completing, failing or extending with it is refused.
-- Returns the task ids released; wakes listening workers.
create or replace function queues.release_leases(
  _task_ids       bigint[],
  _task_lease_ids bigint[]
) returns table (task_id bigint)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _released bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);

  -- The rows by primary key from the array of ids, each row's lease looked up in a map of
  -- the input (see queues.extend_leases_at).
  with released as (
    update queues.task_pending p
       set available_at = now(),
           -- A released lease is no longer held: its worker can neither extend it nor
           -- complete or record against it.
           current_lease_id = null,
           released_count = p.released_count + 1
      from (select jsonb_object_agg(i.task_id::text, i.task_lease_id) as leases
              from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)) m
     where p.task_id = any (_task_ids)
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
    returning p.task_id, (m.leases ->> p.task_id::text)::bigint as task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_release (task_id, task_lease_id)
    select r.task_id, r.task_lease_id from released r
    on conflict do nothing
  ),
  key_freed as (
    delete from queues.resource_lease k
     using released r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select array_agg(r.task_id order by r.task_id) into _released from released r;

  if _released is not null then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select unnest(coalesce(_released, '{}'));
end;
$$;
--! EndIncluded queues/lease.sql

--! split: 540-maintenance-locks-between-transactions.sql
-- History maintenance takes its locks between the queue's transactions instead of
-- queueing for them (queues.lock_history_tables, sql/queues/partitions.sql): a lock
-- request that waits holds every later request behind it, so each claim queued behind
-- maintenance, and under a steady load (a batch of server-side steps always in flight,
-- holding task's partitions for tens of milliseconds) a request that waits at most 50 ms
-- was refused run after run. A step now asks without waiting, again every few ms, for up
-- to lock_timeout_ms: no claim waits for it meanwhile, so the window can be long. A
-- database still at the old default moves to the new one.
set local lock_timeout = '5s';

alter table queues.history_setting alter column lock_timeout_ms set default 2000;
update queues.history_setting set lock_timeout_ms = 2000, updated_at = now() where lock_timeout_ms = 50;

--! Included queues/partitions.sql
-- History partitions: queues.task and every fact table keyed by task are range-partitioned
-- by task_id, all on the same bounds (a "partition set"). Old history leaves by dropping a
-- whole set, never by row-by-row DELETE. Settings: queues.history_setting; what was
-- dropped: queues.history_partition_dropped (both in migrations/committed/000004); when
-- each set was created: queues.history_partition_created.
--
-- Why task_id and not time: every fact carries task_id, so a row is routed without an
-- extra column; a task and all its facts sit in the same set, so a set can be dropped
-- alone; every lookup of the hot path is by task_id, so it is pruned to one partition;
-- and ids only grow, so a set whose range lies below the id sequence receives no new
-- task. docs/operations.md ("Retention and partitions") has the full reasoning.
--
--   queues.history_tables()                    the partitioned tables, parent first
--   queues.lock_history_tables(t, m, ms)       a step's locks, between transactions; owner only
--   queues.cancel_autovacuum(t)                cancels autovacuum of tables a step must lock; owner only
--   queues.create_history_table(t, name)       a standalone table like t, to attach; owner only
--   queues.attach_history_partition(t, lo, hi) one table's partition of a set, owner only
--   queues.create_history_partition(lo, hi)    one set [lo, hi), owner only
--   queues.adopt_history_range(lo, hi)         a set [lo, hi) of rows in the default
--                                              partitions, moved out of them; owner only
--   queues.history_partition_bounds()          every table's partitions and their bounds
--   queues.history_sets()                      the sets' bounds, from the catalog only
--   queues.history_walk(_before)               the id ranges a newest-first read walks
--   queues.history_set_bytes(lower_bounds)     the table and index bytes of the sets given
--   queues.history_partition_sizes()           the sets with table and index bytes
--   queues.measure_history_sets(_now)          the sets that are done, measured for readers
--                                              (queues.history_set_measured); owner only
--   queues.history_partitions()                the sets with their total bytes
--   queues.maintain_history_step_at(_now)      one short step of maintenance; owner only
--   queues.maintain_history_step(payload)      the same at now(), a runnable db_function
--                                              (the schedule's: one transaction per step)
--   queues.maintain_history_at(_now)           every step in one transaction; owner only
--   queues.maintain_history(payload)           the same at now(), a runnable db_function
--   queues.history_summary_at(_now)            settings, oldest task, what the next drop waits for
--   queues.history_status_at(_now)             the same with the sets and their sizes
--
-- Locks. The claim and the completion read queues.task, task_lease_started and
-- task_completed through generic plans, which lock every partition of those tables,
-- default included, and every writer takes ROW EXCLUSIVE on the parents. So each step
-- locks one table (its parent, the partition, the default) in the order the hot path
-- takes its own (parent, then partition, then default), without waiting in a lock queue
-- (queues.lock_history_tables: asked for without waiting, again every few ms, for up to
-- lock_timeout_ms, then one last try that waits at most 50 ms), and holds the locks only
-- for a catalog change, in a transaction of its own when run by the schedule
-- (queues.maintain_history_step with "repeat"): a claim waits behind maintenance at most
-- 50 ms plus that change. Measured locks (PostgreSQL 18):
--   create table .. partition of     ACCESS EXCLUSIVE on the parent and its default: not used
--   create table (like ..) + attach  SHARE UPDATE EXCLUSIVE on the parent (no conflict with
--                                    DML), ACCESS EXCLUSIVE on the default partition (a
--                                    conflict only for task, task_lease_started and
--                                    task_completed, whose defaults the hot path's plans lock)
--                                    and, for a set made late (its range within reach of the
--                                    ids handed out), SHARE on the parent first: writers of
--                                    that table wait for the attach (a writer that routed its
--                                    row before the attach commits would fail on the
--                                    default's new constraint; see attach_history_partition)
--   detach partition                 ACCESS EXCLUSIVE on the parent, default and partition;
--                                    catalog only (no scan); detach concurrently is refused
--                                    while a default partition exists, and in a function
--   drop table (attached partition)  the same plus unlinking its files under those locks:
--                                    not used; a detached table is dropped instead, which
--                                    locks only itself, except a table with a foreign key
--                                    (none today), whose drop takes ACCESS EXCLUSIVE on
--                                    the table it references: it is truncated first (under
--                                    its own lock only), so that drop is a catalog change

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now']
$$;

-- The partition of _table holding [_lower, _upper) is named <table>_p<lower>.
-- No SET clause: a function with one is never inlined, and the status pages name every
-- partition of every set with it (196 calls at 14 sets). It names no object, so the
-- search path cannot change what it does (like admin.pending_state).
create or replace function queues.history_partition_name(_table text, _lower bigint) returns text
  language sql immutable parallel safe
as $$
  select _table || '_p' || _lower::text
$$;

-- Cancels the autovacuum workers that hold a lock on one of _tables (names in schema
-- queues) in this database, as PostgreSQL itself does for a lock request that has waited
-- deadlock_timeout (1 s): a maintenance step never waits that long (claims would queue
-- behind it), so without this a long autovacuum of a default partition or of a set kept
-- every step that must lock that table skipping until it ended. Autovacuum comes back
-- later. An autovacuum that prevents wraparound (the table's age past
-- autovacuum_freeze_max_age or autovacuum_multixact_freeze_max_age) is left alone, as
-- PostgreSQL leaves it. Needs membership in pg_signal_autovacuum_worker (PostgreSQL 18;
-- the owner gets it when the database users are provisioned, docs/operations.md);
-- without it, nothing is cancelled. Returns how many were cancelled. Owner only.
create or replace function queues.cancel_autovacuum(_tables text[])
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pid integer;
  _cancelled integer := 0;
begin
  for _pid in
    select distinct l.pid
      from pg_locks l
      join pg_stat_activity a on a.pid = l.pid
      join pg_class c on c.oid = l.relation
     where l.locktype = 'relation' and l.granted
       and l.database = (select d.oid from pg_database d where d.datname = current_database())
       -- An autovacuum worker runs as no role: its usesysid is null, and a role without
       -- pg_read_all_stats sees its backend_type as null too (it is shown to those with it).
       and a.usesysid is null and coalesce(a.backend_type, 'autovacuum worker') = 'autovacuum worker'
       and c.relnamespace = 'queues'::regnamespace and c.relname = any (_tables)
       and age(c.relfrozenxid) < current_setting('autovacuum_freeze_max_age')::bigint
       and mxid_age(c.relminmxid) < current_setting('autovacuum_multixact_freeze_max_age')::bigint
  loop
    begin
      if pg_cancel_backend(_pid) then
        _cancelled := _cancelled + 1;
      end if;
    exception
      when insufficient_privilege then
        return _cancelled;
    end;
  end loop;
  return _cancelled;
end;
$$;

-- Takes the locks of one maintenance step, _modes[i] on queues._tables[i] (only the table
-- named: a partitioned parent's partitions are not locked with it), in order, without
-- waiting in a lock queue until its last try: each try asks for every lock with NOWAIT,
-- and a try that meets a holder gives back what it took and tries again 1 to 4 ms later,
-- until the locks are had or _within_ms has passed; then one last try waits in the queue
-- for at most 50 ms, and failing that, lock_not_available (55P03, naming the tables and
-- the tries). Why not wait: a lock request that waits holds every later request behind
-- it, so a claim would queue behind maintenance for as long as the longest transaction in
-- flight keeps maintenance waiting (a batch of server-side steps holds task's partitions
-- for tens of milliseconds; under a steady load one is always in flight, so a waiting
-- request rarely got its lock within a short lock_timeout). Asking without waiting takes
-- the moments between transactions and leaves the queue's own order alone (but see the
-- two 50 ms below). Modes: 'share update exclusive', 'share', 'access exclusive'. Returns
-- the tries it took. Owner only.
create or replace function queues.lock_history_tables(_tables text[], _modes text[], _within_ms integer)
  returns integer
  language plpgsql volatile
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _deadline timestamptz;
  _tries integer := 0;
  _last boolean;
  _last_until timestamptz;
  _autovacuum_cancelled boolean := false;
begin
  if _tables is null or _modes is null or cardinality(_tables) = 0 or cardinality(_tables) <> cardinality(_modes) then
    raise exception 'tables and modes must be non-empty arrays of the same length' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m is null or m not in ('share update exclusive', 'share', 'access exclusive')) then
    raise exception 'a lock mode must be share update exclusive, share or access exclusive, got %', _modes
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_tables) t where t is null or to_regclass(format('queues.%I', t)) is null) then
    raise exception 'every table must name a table in schema queues, got %', _tables using errcode = '22023';
  end if;
  if _within_ms is null or _within_ms < 0 then
    raise exception 'within_ms must be 0 or more, got %', _within_ms using errcode = '22023';
  end if;
  -- A transaction that already holds a lock of this kind (steps run together, as in
  -- queues.maintain_history_at, or a partition made earlier in it) keeps the queue
  -- waiting while it tries, and a holder in its way may be waiting for it: it tries for
  -- at most 50 ms then.
  if exists (select 1 from pg_locks l
              where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.granted
                and l.mode in ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                               'ExclusiveLock', 'AccessExclusiveLock')) then
    _within_ms := least(_within_ms, 50);
  end if;
  _deadline := clock_timestamp() + make_interval(secs => _within_ms / 1000.0);
  loop
    _tries := _tries + 1;
    -- The last try, once the window has passed, waits in the queue for at most 50 ms
    -- (restored on return): transactions that follow one another without a moment
    -- between (one connection's statements back to back) are waited for, and whatever
    -- queues behind this try waits no longer.
    -- The 50 ms are for the whole try, however many tables it locks (each lock waits
    -- only for what is left of them).
    _last := clock_timestamp() >= _deadline;
    _last_until := clock_timestamp() + make_interval(secs => greatest(least(_within_ms, 50), 1) / 1000.0);
    begin
      for _i in 1 .. cardinality(_tables) loop
        if _last then
          perform set_config('lock_timeout',
            greatest(ceil(extract(epoch from _last_until - clock_timestamp()) * 1000), 1)::integer || 'ms', true);
        end if;
        -- The mode is one of the three above (checked), the table quoted as an identifier.
        execute format('lock table only queues.%I in %s mode%s', _tables[_i], _modes[_i],
                       case when _last then '' else ' nowait' end);
      end loop;
      return _tries;
    exception
      when lock_not_available then
        -- The block's locks are given back with it. An autovacuum in the way is cancelled
        -- (once per call); the next try, a few ms later, finds the table free.
        if not _autovacuum_cancelled then
          _autovacuum_cancelled := true;
          perform queues.cancel_autovacuum(_tables);
        end if;
    end;
    exit when _last;
    perform pg_sleep((1 + random() * 3) / 1000.0);
  end loop;
  raise exception 'could not lock % in % tries over % ms: other transactions held them throughout',
    array_to_string(_tables, ', '), _tries, _within_ms
    using errcode = '55P03';
end;
$$;

-- Creates queues._name, a standalone table like the history table _table (columns,
-- defaults, constraints, indexes) with the trigger that refuses updates (a statement
-- trigger on the parent does not fire for a statement that names the partition), to be
-- attached as its partition. Owner only.
create or replace function queues.create_history_table(_table text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('create table queues.%I (like queues.%I including defaults including constraints including indexes including storage)',
                 _name, _table);
  execute format('create trigger forbid_update before update on queues.%I
                    for each statement execute function queues.forbid_fact_update()', _name);
end;
$$;

-- Makes the partition [_lower, _upper) of the history table _table unless it exists: a
-- standalone table like its parent (columns, defaults, constraints, indexes) with the
-- trigger that refuses updates (a statement trigger on the parent does not fire for a
-- statement that names the partition), then attached to the parent. Attaching takes
-- SHARE UPDATE EXCLUSIVE on the parent where `create table .. partition of` takes ACCESS
-- EXCLUSIVE, and the new table is empty, so nothing is scanned. Returns whether it made
-- the partition. Owner only.
create or replace function queues.attach_history_partition(_table text, _lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
begin
  if _table is null or _table <> all (queues.history_tables()) then
    raise exception 'table must name a history table (queues.history_tables()), got %',
      coalesce(quote_literal(left(_table, 100)), 'null') using errcode = '22023';
  end if;
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  _name := queues.history_partition_name(_table, _lower);
  if to_regclass(format('queues.%I', _name)) is not null then
    return false;
  end if;
  -- A range within reach of the task ids handed out (within one set's width, or the
  -- 10,000 tasks a statement may enqueue, above the last one) may receive rows while it
  -- is attached: a writer that routed its row before the attach committed would send it
  -- to the default partition, wait there for the attach's lock, and then fail the
  -- default's new constraint ("new row for relation .._default violates partition
  -- constraint"). For such a range (a set made late), SHARE on the parent: taken when no
  -- writer is in flight, it holds new ones at the parent until commit; they then route
  -- with the new partition. A set made ahead of need, as maintenance makes them, is out
  -- of reach and needs no lock that writers wait for (under a steady load of writers, a
  -- moment without one is rare).
  -- Its locks first (queues.lock_history_tables: taken between transactions, never
  -- queued for): the parent, SHARE UPDATE EXCLUSIVE (what attaching takes; SHARE for a
  -- set made late), then the default partition, ACCESS EXCLUSIVE (attaching checks it
  -- holds no row of the range).
  perform queues.lock_history_tables(
    array[_table, _table || '_default'],
    array[case when _lower <= queues.last_task_id() + greatest(_upper - _lower, 10000) then 'share'
               else 'share update exclusive' end,
          'access exclusive'],
    (select s.lock_timeout_ms from queues.history_setting s));
  perform queues.create_history_table(_table, _name);
  execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                 _table, _name, _lower, _upper);
  return true;
end;
$$;

-- Creates the partition set [_lower, _upper) of every history table (those that exist
-- already are kept), task's last: a set is in use once task has its partition. One
-- transaction; maintenance makes a set one table per step instead. Records when in
-- queues.history_partition_created. Returns whether anything was created. Owner only.
create or replace function queues.create_history_partition(_lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _created boolean := false;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _created := queues.attach_history_partition(_table, _lower, _upper) or _created;
  end loop;
  if _created then
    insert into queues.history_partition_created (lower_bound, upper_bound)
    values (_lower, _upper) on conflict (lower_bound) do nothing;
  end if;
  return _created;
end;
$$;

-- Makes [_lower, _upper) a set from rows that fell into the default partitions (tasks
-- given ids while no set covered them, and their facts): for each history table without
-- a partition of that range, a standalone table like its parent, the range's rows moved
-- into it from the table's default partition (deleted there and inserted here, in this
-- transaction), then attached. Nothing is lost or seen twice: readers of the parent see
-- each row in the default until this commits and in the new partition after. The caller
-- holds every history table's parent (SHARE) and default (ACCESS EXCLUSIVE), so no row of
-- the range is written meanwhile. Records the set in queues.history_partition_created.
-- Returns the tasks moved. Owner only.
create or replace function queues.adopt_history_range(_lower bigint, _upper bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _name text;
  _columns text;
  _moved bigint;
  _tasks bigint := 0;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'range bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _name := queues.history_partition_name(_table, _lower);
    continue when to_regclass(format('queues.%I', _name)) is not null;
    perform queues.create_history_table(_table, _name);
    -- The parent's columns by name (each quoted as an identifier), in its order.
    select string_agg(format('%I', a.attname), ', ' order by a.attnum) into _columns
      from pg_attribute a
     where a.attrelid = format('queues.%I', _table)::regclass and a.attnum > 0 and not a.attisdropped;
    execute format('with moved as (delete from queues.%I where task_id >= $1 and task_id < $2 returning %s)
                    insert into queues.%I (%s) select %s from moved',
                   _table || '_default', _columns, _name, _columns, _columns)
      using _lower, _upper;
    get diagnostics _moved = row_count;
    if _table = 'task' then
      _tasks := _moved;
    end if;
    execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                   _table, _name, _lower, _upper);
  end loop;
  insert into queues.history_partition_created (lower_bound, upper_bound)
  values (_lower, _upper) on conflict (lower_bound) do nothing;
  return _tasks;
end;
$$;

-- Every partition of every history table but the defaults, with its bounds. Owner only.
create or replace function queues.history_partition_bounds()
  returns table (table_name text, partition_name text, lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.name, c.relname::text, m.b[1]::bigint, m.b[2]::bigint
    from unnest(queues.history_tables()) t(name)
    join pg_inherits i on i.inhparent = to_regclass(format('queues.%I', t.name))
    join pg_class c on c.oid = i.inhrelid
   cross join lateral regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?\d+)''?\) TO \(''?(-?\d+)''?\)') as m(b)
   where m.b is not null
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last: bounds and the planner's
-- estimate of their tasks only, from the catalog (no relation is opened). What the list
-- endpoints walk and maintenance reads; queues.history_partitions() adds sizes.
create or replace function queues.history_sets()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  -- A bound reads FOR VALUES FROM ('<lower>') TO ('<upper>'), or DEFAULT. It holds no
  -- column, so it is deparsed without opening the partition (relation 0), and its two
  -- quoted values are the 2nd and 4th fields between quotes (a regular expression took
  -- 10 us a row).
  select nullif(split_part(b.bound, '''', 2), '')::bigint, nullif(split_part(b.bound, '''', 4), '')::bigint,
         b.relname::text, greatest(b.reltuples, 0)::bigint, b.bound = 'DEFAULT'
    from (select c.relname, c.reltuples, pg_get_expr(c.relpartbound, 0) as bound
            from pg_inherits i
            join pg_class c on c.oid = i.inhrelid
           where i.inhparent = 'queues.task'::regclass) b
   order by b.bound = 'DEFAULT', 1
$$;

-- The task id ranges [lower_bound, upper_bound) that a newest-first read of history
-- walks, newest first: the sets that can hold a task below _before (null: any) and not
-- above the last task id handed out (sets above it hold none), upper bounds capped at
-- _before. Each range is one set, except the first, which spans the two newest: the set
-- being filled may have begun a moment ago, and two partitions per table cost the planner
-- little more than one, so a page usually takes one statement. A reader that gives each
-- range's bounds to its statement as values gets a plan of these partitions only.
-- While the default partition holds a task (outside every set; normally none), one range
-- instead, (null, _before): everything below _before, in one statement.
create or replace function queues.history_walk(_before bigint)
  returns table (lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (
    select s.lower_bound, least(s.upper_bound, _before) as upper_bound,
           row_number() over (order by s.lower_bound desc) as n
      from queues.history_sets() s
     where not s.is_default
       -- once, not once per set (a call reads the sequence's catalog entry)
       and s.lower_bound <= (select queues.last_task_id())
       and (_before is null or s.lower_bound < _before)
  ),
  walk as (
    select coalesce((select b.lower_bound from s b where b.n = 2), a.lower_bound) as lower_bound, a.upper_bound
      from s a where a.n = 1
    union all
    select s.lower_bound, s.upper_bound from s where s.n > 2
  ),
  spill as (select exists (select 1 from queues.task_default) as any)
  select w.lower_bound, w.upper_bound from walk w, spill where not spill.any
  union all
  select null, _before from spill where spill.any
  order by 1 desc nulls first
$$;

-- The bytes of the sets whose lower bounds are given (a null element: the default
-- partitions), summed over every history table: the data of tables with their TOAST, and
-- of their indexes (each relation's main fork: its free space and visibility maps, a
-- fraction of a percent, are left out, which halves the files looked at). Each partition
-- is looked up by name (queues.history_partition_name) through the catalog's name index;
-- sizing opens each partition and its indexes (a lock and a file size each, about 50
-- relations a set), so this is the one place that costs per partition: callers pass
-- every set they need in one call (one plan).
create or replace function queues.history_set_bytes(_lower_bounds bigint[])
  returns table (lower_bound bigint, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select l.lower_bound,
         coalesce(sum(pg_relation_size(c.oid) + coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0)), 0)::bigint,
         coalesce(sum((select sum(pg_relation_size(i.indexrelid)) from pg_index i where i.indrelid = c.oid)), 0)::bigint
    from unnest(_lower_bounds) l(lower_bound)
   cross join unnest(queues.history_tables()) t(name)
    left join pg_class c on c.relnamespace = 'queues'::regnamespace
                        and c.relname = case when l.lower_bound is null then t.name || '_default'
                                             else queues.history_partition_name(t.name, l.lower_bound) end
   group by l.lower_bound
$$;

-- queues.history_sets() with each set's bytes (queues.history_set_bytes), every set sized
-- on each call: the History page reads queues.history_set_measured for the sets that are
-- done instead (admin.history_status_at).
create or replace function queues.history_partition_sizes()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (select * from queues.history_sets())
  select s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default,
         b.table_bytes, b.index_bytes
    from s
    join queues.history_set_bytes(array(select s.lower_bound from s)) b
      on b.lower_bound is not distinct from s.lower_bound
   order by s.is_default, s.lower_bound
$$;

-- Measures the sets that are done into queues.history_set_measured: every set whose range
-- lies below the last task id and that holds no pending task, with its bytes
-- (queues.history_set_bytes) and its oldest and newest task. Such a set's tables change
-- only by a rare late fact (a redrive, a revocation or start mark that arrives after the
-- completion) until it is dropped, so a reader that answers often (the History page, every
-- dashboard's poll and /metrics) takes its figures from here and sizes only the sets still
-- filling. A row is written only when a figure changed; rows of sets no longer there are
-- deleted. Maintenance calls it at the end of each run (queues.maintain_history_step_at).
-- Returns the number of sets whose figures were written. Owner only.
create or replace function queues.measure_history_sets(_now timestamptz)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _last_id bigint := queues.last_task_id();
  _written integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  delete from queues.history_set_measured m
   where not exists (select 1 from queues.history_sets() s
                      where s.lower_bound = m.lower_bound and s.upper_bound = m.upper_bound);
  with done as (
    select s.lower_bound, s.upper_bound
      from queues.history_sets() s
     where not s.is_default and s.upper_bound <= _last_id
       and not exists (select 1 from queues.task_pending tp
                        where tp.task_id >= s.lower_bound and tp.task_id < s.upper_bound)
  ),
  measured as (
    select d.lower_bound, d.upper_bound, f.task_id as first_task_id, f.enqueued_at as first_enqueued_at,
           n.task_id as last_task_id, b.table_bytes, b.index_bytes
      from done d
      join queues.history_set_bytes(array(select d.lower_bound from done d)) b on b.lower_bound = d.lower_bound
      left join lateral (select t.task_id, t.enqueued_at from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id limit 1) f on true
      left join lateral (select t.task_id from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id desc limit 1) n on true
  )
  insert into queues.history_set_measured as m
         (lower_bound, upper_bound, first_task_id, first_enqueued_at, last_task_id, table_bytes, index_bytes,
          measured_at)
  select x.lower_bound, x.upper_bound, x.first_task_id, x.first_enqueued_at, x.last_task_id, x.table_bytes,
         x.index_bytes, _now
    from measured x
  on conflict (lower_bound) do update
     set upper_bound = excluded.upper_bound, first_task_id = excluded.first_task_id,
         first_enqueued_at = excluded.first_enqueued_at, last_task_id = excluded.last_task_id,
         table_bytes = excluded.table_bytes, index_bytes = excluded.index_bytes, measured_at = excluded.measured_at
   where (m.upper_bound, m.first_task_id, m.first_enqueued_at, m.last_task_id, m.table_bytes, m.index_bytes)
         is distinct from (excluded.upper_bound, excluded.first_task_id, excluded.first_enqueued_at,
                           excluded.last_task_id, excluded.table_bytes, excluded.index_bytes);
  get diagnostics _written = row_count;
  return _written;
end;
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last. Sizes are summed over
-- every history table (tables, TOAST and indexes); tasks is the planner's estimate.
create or replace function queues.history_partitions()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, total_bytes bigint, is_default boolean)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.lower_bound, p.upper_bound, p.partition_name, p.estimated_tasks,
         p.table_bytes + p.index_bytes, p.is_default
    from queues.history_partition_sizes() p
   order by p.is_default, p.lower_bound
$$;

-- The last task id handed out (0 before the first task).
create or replace function queues.last_task_id() returns bigint
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(pg_sequence_last_value(pg_get_serial_sequence('queues.task', 'task_id')::regclass), 0)
$$;

-- One step of partition maintenance at _now: the first of these that has work to do,
-- locking one table only (see "Locks" above), its locks taken between the queue's
-- transactions within lock_timeout_ms (queues.lock_history_tables):
-- 1. Sets ahead of need, one table per step: first a set left half made (some table has
--    its partition, task not yet; task's is made last), then a new set above every range
--    there is or was and above any task in the default partition, of partition_size task
--    ids, while the sets above the last task id handed out cover less than
--    partitions_ahead * partition_size ids. A set less than partition_size ids above the
--    last id (maintenance fell behind) is made whole in one step instead, above the last id.
-- 1b. Tasks in the default partition (ids handed out while no set covered them) are made
--    a set with their facts, at most 2,000 tasks per step: a half made set they fell into
--    is finished so, or a range of the gap they lie in (queues.adopt_history_range).
-- 2. A table detached from a dropped set is dropped (truncated first if it has rows and
--    a foreign key).
-- 3. A fact table's partition of a dropped set is detached.
-- 4. The oldest set that may go is dropped, starting with its task partition, which is
--    detached (the set's tasks are gone from then on; steps 3 and 2 take its facts and the
--    detached tables away): a set goes when its whole range lies below the last task id
--    (no new task can land in it), it holds no pending task (queues.task_pending, then
--    every task checked against its completion), and its newest completion is older than
--    the retention window. A set with one pending task is kept, however old.
-- 5. With nothing else to do: the sets that are done are measured for the History page
--    (queues.measure_history_sets).
-- Drops are recorded in queues.history_partition_dropped. A step that cannot get its lock
-- in time (or finds a task fell into the default partition in the range it makes) is
-- rolled back, recorded in queues.history_step_skipped and reported skipped; the run goes
-- on ("more") until 5 steps have been skipped within a minute. Returns
--   {"action": "attached" | "set_created" | "set_adopted" | "dropped_table" | "truncated" | "detached" |
--              "set_dropped" | "none" | "skipped" | "busy",
--    "table", "lower_bound", "upper_bound", "tasks", "reason", "late": as they apply,
--    "measured": with "none", the sets whose figures step 5 wrote,
--    "kept": sets below the last task id kept so far, "more": whether to call again}
-- "busy": another maintenance step is in flight (one maintainer at a time). Owner only.
create or replace function queues.maintain_history_step_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  -- A bound for any other lock a statement here might wait for (its own are taken
  -- first, without waiting); restored when the function returns.
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint;
  _doing text;
  _table text;
  _name text;
  _lower bigint;
  _upper bigint;
  _truncate boolean;
  _kept integer := 0;
  _set record;
  _tasks bigint;
  _last_completed timestamptz;
  _measured integer;
  _spilled bigint;
  _gap_lower bigint;
  _gap_upper bigint;
  -- The locks that keep every writer of history out (a late set, a move out of the
  -- default partitions): SHARE on each parent, ACCESS EXCLUSIVE on its default.
  _writers_out text[] := array(select x from unnest(queues.history_tables()) t(name),
                                 lateral (values (t.name), (t.name || '_default')) v(x));
  _writers_out_modes text[] := array(select m from unnest(queues.history_tables()) t(name),
                                       lateral (values ('share'), ('access exclusive')) v(m));
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if not pg_try_advisory_xact_lock(20252, 1) then
    return jsonb_build_object('action', 'busy', 'more', false);
  end if;
  select * into _setting from queues.history_setting;
  _last_id := queues.last_task_id();

  begin
    -- 1. Ahead of need: a half made set, unless a task fell into the default partition in
    --    its range (maintenance fell behind while it was half made): then task's
    --    partition cannot be attached, new sets start above it, and step 1b finishes it
    --    by moving those tasks into it.
    with b as (select * from queues.history_partition_bounds())
    select h.lower_bound, h.upper_bound into _lower, _upper
      from (select distinct b.lower_bound, b.upper_bound from b) h
     where not exists (select 1 from b x where x.table_name = 'task' and x.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.task_default t where t.task_id >= h.lower_bound and t.task_id < h.upper_bound)
     order by h.lower_bound
     limit 1;
    if _lower is null then
      -- A new set. Ranges are never reused: above every partition there is or was, and
      -- above any task in the default partition (a new set cannot overlap rows there).
      select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                      coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                      coalesce((select max(t.task_id) + 1 from queues.task_default t), 0))
        into _lower;
      if _lower < _last_id + 1 + _setting.partitions_ahead::bigint * _setting.partition_size then
        _upper := _lower + _setting.partition_size;
      else
        _lower := null;
      end if;
    end if;
    if _lower is not null and _lower <= _last_id + _setting.partition_size then
      -- Late: less than one set's width of ids is left before the ids handed out reach
      -- the set (maintenance fell behind). Made table by table, it could be outrun: a
      -- task given an id in its range before task's partition exists falls into the
      -- default partition, its facts into theirs, and the next table's attach fails on
      -- them, run after run. So the whole set is made in this one step, under locks
      -- that keep every writer of history out (SHARE on each parent, ACCESS EXCLUSIVE on
      -- each default), starting above the last id read under them: no task of its range
      -- exists, and none can be written until it commits. The ids handed out before it
      -- fall into the default partitions (queues.history_summary_at counts them).
      _doing := format('make the set from %s at once (late)', _lower);
      perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
      _last_id := queues.last_task_id();
      if exists (select 1 from queues.history_partition_bounds() b where b.lower_bound = _lower)
         and not exists (select 1 from queues.task_default t where t.task_id >= _lower and t.task_id < _upper) then
        null; -- a half made set that no task has reached: finished as it is
      else
        select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                        coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                        coalesce((select max(t.task_id) + 1 from queues.task_default t), 0),
                        _last_id + 1)
          into _lower;
        _upper := _lower + _setting.partition_size;
      end if;
      perform queues.create_history_partition(_lower, _upper);
      return jsonb_build_object('action', 'set_created', 'table', queues.history_partition_name('task', _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'late', true, 'more', true);
    end if;
    if _lower is not null then
      select t.name into _table
        from unnest(queues.history_tables()) with ordinality t(name, n)
       where to_regclass(format('queues.%I', queues.history_partition_name(t.name, _lower))) is null
       order by t.name = 'task', t.n
       limit 1;
      _doing := format('attach queues.%I', queues.history_partition_name(_table, _lower));
      perform queues.attach_history_partition(_table, _lower, _upper);
      if _table = 'task' then
        insert into queues.history_partition_created (lower_bound, upper_bound)
        values (_lower, _upper) on conflict (lower_bound) do nothing;
      end if;
      return jsonb_build_object('action', case when _table = 'task' then 'set_created' else 'attached' end,
                                'table', queues.history_partition_name(_table, _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'more', true);
    end if;

    -- 1b. Tasks in the default partition (ids handed out while no set covered them): the
    --    range around the lowest is made a set, its rows moved out of the default
    --    partitions (queues.adopt_history_range), so that retention drops them with it
    --    and pending ones stay claimable. The range: a half made set's own (finished so),
    --    or the gap between the ranges there are or were, below the lowest range above
    --    the task and cut after its 2,000th task (a step moves at most that many tasks,
    --    with their facts, under its locks). Not while no range lies above the task: the
    --    ids may still be handed out, and step 1 makes the set above them first.
    select t.task_id into _spilled from queues.task_default t order by t.task_id limit 1;
    if _spilled is not null then
      with r as (
        select b.lower_bound, b.upper_bound from queues.history_partition_bounds() b
        union all
        select d.lower_bound, d.upper_bound from queues.history_partition_dropped d
      )
      select (select min(r.lower_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             (select max(r.upper_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             coalesce((select max(r.upper_bound) from r where r.upper_bound <= _spilled), 0),
             (select min(r.lower_bound) from r where r.lower_bound > _spilled)
        into _lower, _upper, _gap_lower, _gap_upper;
      if _lower is null and _gap_upper is not null then
        -- The gap, cut after its 2,000th task.
        _lower := _gap_lower;
        _upper := least(_gap_upper,
                        coalesce((select t.task_id from queues.task_default t
                                   where t.task_id >= _spilled and t.task_id < _gap_upper
                                   order by t.task_id offset 2000 limit 1), _gap_upper));
      end if;
      if _upper is not null and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = _lower) then
        _doing := format('adopt the default partitions'' tasks in [%s, %s)', _lower, _upper);
        perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
        _tasks := queues.adopt_history_range(_lower, _upper);
        return jsonb_build_object('action', 'set_adopted', 'table', queues.history_partition_name('task', _lower),
                                  'lower_bound', _lower, 'upper_bound', _upper, 'tasks', _tasks, 'more', true);
      end if;
    end if;

    -- 2. A table detached from a dropped set (named as a partition, no longer one). Its
    --    drop locks only itself, so its files are unlinked under no lock the queue waits
    --    for; but dropping a foreign key takes ACCESS EXCLUSIVE on the table it
    --    references, so a table with one (none has today) is truncated first (under its
    --    own lock) and that drop is a catalog change only.
    select c.relname,
           pg_relation_size(c.oid) > 0 and exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'f')
      into _name, _truncate
      from pg_class c
      join unnest(queues.history_tables()) t(name)
        on c.relname = queues.history_partition_name(t.name, substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     where c.relnamespace = 'queues'::regnamespace and c.relkind = 'r' and not c.relispartition
       and exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     order by c.relname
     limit 1;
    if _name is not null then
      if _truncate then
        _doing := format('truncate queues.%I', _name);
        execute format('truncate queues.%I', _name);
        return jsonb_build_object('action', 'truncated', 'table', _name, 'more', true);
      end if;
      _doing := format('drop queues.%I', _name);
      execute format('drop table queues.%I', _name);
      return jsonb_build_object('action', 'dropped_table', 'table', _name, 'more', true);
    end if;

    -- 3. A fact table's partition of a dropped set: detached, a catalog change.
    select b.table_name, b.partition_name, b.lower_bound, b.upper_bound into _table, _name, _lower, _upper
      from queues.history_partition_bounds() b
     where exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = b.lower_bound and d.upper_bound = b.upper_bound)
     order by b.lower_bound, b.table_name
     limit 1;
    if _name is not null then
      _doing := format('detach queues.%I', _name);
      perform queues.lock_history_tables(array[_table, _name, _table || '_default'],
                                         array['access exclusive', 'access exclusive', 'access exclusive'],
                                         _setting.lock_timeout_ms);
      execute format('alter table queues.%I detach partition queues.%I', _table, _name);
      return jsonb_build_object('action', 'detached', 'table', _name, 'lower_bound', _lower, 'upper_bound', _upper,
                                'more', true);
    end if;

    -- 4. Expired sets, oldest first.
    for _set in
      select p.lower_bound, p.upper_bound from queues.history_sets() p
       where not p.is_default and p.upper_bound <= _last_id
       order by p.lower_bound
    loop
      -- Cheap checks first, without strong locks: a pending task, or a recent completion.
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      select max(c.completed_at) into _last_completed from queues.task_completed c
       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound;
      if _last_completed > _now - _setting.retention then
        _kept := _kept + 1;
        continue;
      end if;
      -- Every task completed, from the facts (one scan of the set's two partitions).
      select count(*) into _tasks from queues.task t
       where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound;
      if exists (select 1 from queues.task t
                  where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound
                    and not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)) then
        _kept := _kept + 1;
        continue;
      end if;

      _name := queues.history_partition_name('task', _set.lower_bound);
      _doing := format('detach queues.%I', _name);
      begin
        -- Detaching holds ACCESS EXCLUSIVE on queues.task and the partition, so no
        -- transaction that wrote to the set or read it to complete a task is still open:
        -- check again what could have changed (a task enqueued with an id handed out
        -- before the checks, and its completion).
        perform queues.lock_history_tables(array['task', _name, 'task_default'],
                                           array['access exclusive', 'access exclusive', 'access exclusive'],
                                           _setting.lock_timeout_ms);
        execute format('alter table queues.task detach partition queues.%I', _name);
        if exists (select 1 from queues.task_pending tp
                    where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_completed c
                       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                         and c.completed_at > _now - _setting.retention) then
          -- Roll the block back, which attaches the partition again.
          raise exception 'set [%, %) changed since it was checked', _set.lower_bound, _set.upper_bound
            using errcode = 'QH001';
        end if;
        insert into queues.history_partition_dropped (lower_bound, upper_bound, tasks, last_completed_at, dropped_at)
        values (_set.lower_bound, _set.upper_bound, _tasks, _last_completed, _now);
        return jsonb_build_object('action', 'set_dropped', 'table', _name, 'lower_bound', _set.lower_bound,
                                  'upper_bound', _set.upper_bound, 'tasks', _tasks, 'kept', _kept, 'more', true);
      exception
        when sqlstate 'QH001' then
          _kept := _kept + 1;
      end;
    end loop;

    -- 5. Nothing left to change: the sets that are done are measured for the readers.
    _measured := queues.measure_history_sets(_now);
    delete from queues.history_step_skipped k where k.skipped_at < _now - interval '1 day';
  exception
    -- check_violation: a task landed in a default partition, in the range being made,
    -- since it was read above; the next step starts above it. The skip is recorded, and
    -- the run goes on (a later try may find its moment) until 5 steps have been skipped
    -- within a minute.
    when lock_not_available or deadlock_detected or check_violation then
      insert into queues.history_step_skipped (step, reason) values (coalesce(_doing, 'a step'), sqlerrm);
      return jsonb_build_object('action', 'skipped', 'step', _doing, 'reason', sqlerrm, 'kept', _kept,
                                'more', (select count(*) from queues.history_step_skipped k
                                          where k.skipped_at > clock_timestamp() - interval '1 minute') < 5);
  end;
  return jsonb_build_object('action', 'none', 'kept', _kept, 'measured', _measured, 'more', false);
end;
$$;

-- Partition maintenance at _now, every step of queues.maintain_history_step_at in one
-- transaction, until none is left or one is skipped: its locks are held until that
-- transaction ends, so this is for tests and for running it by hand; the schedule runs
-- each step in a transaction of its own (queues.maintain_history_step). Returns
--   {"created": [[lo, hi], ...], "dropped": [[lo, hi], ...], "skipped": [{...}], "kept": n}
create or replace function queues.maintain_history_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _created jsonb := '[]';
  _dropped jsonb := '[]';
  _skipped jsonb := '[]';
  _adopted jsonb := '[]';
  _kept integer := 0;
  _step jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  -- Each step changes the catalog or ends the run (skips end it after 5 within a minute);
  -- the bound only guards against a bug.
  for _i in 1 .. 100000 loop
    _step := queues.maintain_history_step_at(_now);
    case _step ->> 'action'
      when 'set_created' then
        _created := _created || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_dropped' then
        _dropped := _dropped || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_adopted' then
        _adopted := _adopted || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'skipped', 'busy' then
        _skipped := _skipped || jsonb_build_array(_step);
      else
        null;
    end case;
    _kept := coalesce((_step ->> 'kept')::integer, _kept);
    exit when not (_step ->> 'more')::boolean;
  end loop;
  return jsonb_build_object('created', _created, 'dropped', _dropped, 'adopted', _adopted, 'skipped', _skipped,
                            'kept', _kept);
end;
$$;

-- A db_function step: maintain_history_at(now()), every step in the caller's transaction
-- (for a one-off run; the schedule runs queues.maintain_history_step).
create or replace function queues.maintain_history(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_at(now()))
$$;

-- The schedule's step: one step of maintenance (maintain_history_step_at(now())), its
-- report as the payload of a success envelope. The schedule's payload asks the worker to
-- call it again while the report says "more" ("repeat": true, see the worker's
-- db_function processor), each call a transaction of its own, so that no step's lock is
-- held while another step runs.
create or replace function queues.maintain_history_step(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_step_at(now()))
$$;

-- What operators watch, without the list of sets: the settings, the oldest retained task,
-- and the next drop (the lowest set below the last task id with its newest completion: it
-- can go at last_completed_at + retention, unless it holds pending tasks). Each read of
-- a partitioned table is pruned at plan time to the set it needs (EXECUTE with the set's
-- bounds as values), so the cost does not grow with the number of sets beyond the catalog
-- read of their bounds.
create or replace function queues.history_summary_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _set record;
  _next record;
  _next_json jsonb;
  _oldest_id bigint;
  _oldest_at timestamptz;
  _default_id bigint;
  _default_at timestamptz;
  _last_completed timestamptz;
  _pending bigint;
begin
  select * into _setting from queues.history_setting;
  -- The oldest task: in the lowest set that holds one (or in the default partition).
  for _set in
    select s.lower_bound, s.upper_bound from queues.history_sets() s
     where not s.is_default and s.lower_bound <= _last_id
     order by s.lower_bound
  loop
    execute 'select t.task_id, t.enqueued_at from queues.task t
              where t.task_id >= $1 and t.task_id < $2 order by t.task_id limit 1'
      into _oldest_id, _oldest_at using _set.lower_bound, _set.upper_bound;
    exit when _oldest_id is not null;
  end loop;
  select t.task_id, t.enqueued_at into _default_id, _default_at from queues.task_default t order by t.task_id limit 1;
  if _default_id < _oldest_id or _oldest_id is null then
    _oldest_id := _default_id;
    _oldest_at := _default_at;
  end if;

  select s.lower_bound, s.upper_bound into _next
    from queues.history_sets() s
   where not s.is_default and s.upper_bound <= _last_id
   order by s.lower_bound
   limit 1;
  if found then
    execute 'select max(c.completed_at) from queues.task_completed c where c.task_id >= $1 and c.task_id < $2'
      into _last_completed using _next.lower_bound, _next.upper_bound;
    _pending := (select count(*) from queues.task_pending tp
                  where tp.task_id >= _next.lower_bound and tp.task_id < _next.upper_bound);
    _next_json := jsonb_build_object(
      'lower_bound', _next.lower_bound, 'upper_bound', _next.upper_bound,
      'pending_tasks', _pending,
      'last_completed_at', _last_completed,
      'drop_after', case when _pending = 0 then coalesce(_last_completed + _setting.retention, _now) end);
  end if;
  return jsonb_build_object(
    'retention_seconds', extract(epoch from _setting.retention)::bigint,
    'partition_size', _setting.partition_size,
    'partitions_ahead', _setting.partitions_ahead,
    'last_task_id', _last_id,
    'oldest_task_id', _oldest_id,
    'oldest_enqueued_at', _oldest_at,
    'default_partition_tasks', (select count(*) from queues.task_default),
    'next_drop', _next_json,
    'dropped_sets', (select count(*) from queues.history_partition_dropped),
    'skipped_steps_last_hour', (select count(*) from queues.history_step_skipped k where k.skipped_at > _now - interval '1 hour'),
    'last_skipped_step', (select jsonb_build_object('skipped_at', k.skipped_at, 'step', k.step, 'reason', k.reason)
                            from queues.history_step_skipped k order by k.skipped_at desc limit 1),
    'last_dropped_at', (select max(d.dropped_at) from queues.history_partition_dropped d));
end;
$$;

-- queues.history_summary_at(_now) and the sets with their sizes (queues.history_partitions()).
create or replace function queues.history_status_at(_now timestamptz)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.history_summary_at(_now) || jsonb_build_object(
    'partitions', coalesce((select jsonb_agg(jsonb_build_object(
        'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'name', p.partition_name,
        'estimated_tasks', p.estimated_tasks, 'total_bytes', p.total_bytes, 'is_default', p.is_default)
        order by p.is_default, p.lower_bound)
      from queues.history_partitions() p), '[]'))
$$;

-- The worker runs maintenance as the db_function task of its schedule; operators read the
-- status through admin.history_status(). Everything else here is owner only. Granted
-- here, beside the functions, so that a migration including sql/queues/privileges.sql
-- before this file does not name a function that does not exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.maintain_history_step_at(timestamptz),
  queues.history_status_at(timestamptz), queues.history_summary_at(timestamptz), queues.history_partitions(),
  queues.history_partition_bounds(), queues.history_sets(), queues.history_partition_sizes(),
  queues.history_set_bytes(bigint[]), queues.measure_history_sets(timestamptz),
  queues.history_walk(bigint), queues.create_history_partition(bigint, bigint),
  queues.attach_history_partition(text, bigint, bigint), queues.lock_history_tables(text[], text[], integer),
  queues.adopt_history_range(bigint, bigint), queues.create_history_table(text, text),
  queues.cancel_autovacuum(text[])
  from public;
grant execute on function queues.maintain_history(jsonb), queues.maintain_history_step(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
select internal.register_runnable_function('queues.maintain_history_step(jsonb)');
--! EndIncluded queues/partitions.sql

--! split: 560-next-claim.sql
-- A worker whose claim came back short asks when the next scheduled task of its types is
-- due (queues.next_claim_in_ms) and looks again then, instead of at its next poll; an
-- enqueue of a task due within a minute wakes the workers, so that they ask.
set local lock_timeout = '5s';

--! Included queues/enqueue.sql
-- queues.enqueue / queues.enqueue_many: add tasks. Apps call them through
-- @org/queue-client; they refuse internal task types (sql/queues/enqueue_permission.sql).
-- The owner's SQL (supervisors, handlers, kickoffs, schedules) calls the grant-less
-- queues.enqueue_internal. The worker never enqueues.
--
-- What one enqueue costs (BENCHMARKS.md, "where a task's time goes"): for an app, one
-- probe of queues.internal_task_type; its fields checked as plain expressions; one
-- statement that reads the task type and inserts the task and its claim-index row; one
-- pg_notify. A batch is one insert statement whatever its size: the rows are checked
-- inside it (the first bad one, in input order, raises and the statement writes
-- nothing), the task types read once per call. queues.task has no foreign key to queues.task_type: it
-- locked the type's row (FOR KEY SHARE, a MultiXact once callers overlap) for every task;
-- queues.guard_task_type_in_use (triggers.sql) refuses deleting or renaming a type in use.
--
-- Wake-ups: an enqueue that adds a task due within a minute (ready now, or scheduled a
-- moment ahead, like a supervisor's next run) sends NOTIFY queues_task_ready, and
-- PostgreSQL folds identical notifications of one transaction into one at commit. A
-- worker that finds nothing ready asks when the next task is due
-- (queues.next_claim_in_ms) and looks again then; a task due later is found by a
-- worker's poll, which asks the same. A
-- notifying commit holds a database-wide lock from just before its commit record until
-- it ends, so notifying transactions commit one at a time, each waiting for its own WAL
-- flush. queues.enqueue_and_commit (for callers outside a transaction block: the
-- client's enqueue on a pool) commits the task first, without the lock, and notifies in
-- a second transaction that writes no data and so does not wait for a flush.

-- Payloads are limited so one bad caller cannot fill the table or the worker's memory.
create or replace function queues.max_payload_bytes() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 1048576 $$;

-- And so is their nesting: a payload nested deeper than queues.max_payload_depth()
-- containers (objects and arrays) is refused, since parsers that recurse (the worker's
-- among them) would run out of stack. The test is jsonb_path_exists(payload,
-- 'strict $.**{65}'), written out where it is used (65 = max_payload_depth() + 1: a
-- jsonpath level must be a literal).
create or replace function queues.max_payload_depth() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 64 $$;

-- The core of the single enqueue (no grants): validates one task and inserts it and its
-- claim-index row in one statement; returns its task_id. _public: called for an app or
-- the API (queues.enqueue), so internal task types are refused (42501) unless the
-- session is the owner's. _notify: send the wake-up (false: the caller sends it after
-- its commit, see queues.enqueue_and_commit). NULL arguments take the defaults (now, 0,
-- no resource key, one attempt).
--
-- Checks, in order: for _public, a worker-only task type (refused before anything else
-- is read, as queues.assert_may_enqueue words it); task_type NULL; the payload (NULL, not
-- an object, over the size limit, nested too deep), priority, resource key, max
-- attempts, scheduled time (plain expressions, no statement); then the insert, which
-- reads the type in its own statement: when it inserts nothing, the type is unknown
-- (22023). The insert's snapshot is taken once it holds its
-- lock on queues.task, so a type deleted meanwhile is not used (the delete waits for
-- that lock, see queues.guard_task_type_in_use). Under REPEATABLE READ or SERIALIZABLE
-- the snapshot is the transaction's, older than the lock: the type's row is locked FOR
-- KEY SHARE first, as the foreign key did, so that a type deleted since is a
-- serialization failure rather than a task of a type that is gone.
create or replace function queues.enqueue_task(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz,
  _priority     integer,
  _resource_key text,
  _max_attempts integer,
  _public       boolean default false,
  _notify       boolean default true
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  if _public and exists (select 1 from queues.internal_task_type i where i.task_type = _task_type) then
    perform queues.assert_may_enqueue(_task_type);
  end if;
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if _payload is null then
    raise exception 'payload must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_payload) <> 'object' then
    raise exception 'payload must be a JSON object, got %', jsonb_typeof(_payload) using errcode = '22023';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    raise exception 'payload is % bytes, over the limit of % bytes', pg_column_size(_payload), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  if jsonb_path_exists(_payload, 'strict $.**{65}') then
    raise exception 'payload is nested deeper than % levels', queues.max_payload_depth() using errcode = '54000';
  end if;
  if _priority not between -1000 and 1000 then
    raise exception 'priority must be between -1000 and 1000, got %', _priority using errcode = '22023';
  end if;
  if length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _max_attempts not between 1 and 100 then
    raise exception 'max_attempts must be between 1 and 100, got %', _max_attempts using errcode = '22023';
  end if;
  if not isfinite(_scheduled_at) then
    raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
  end if;
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t where t.task_type = _task_type for key share;
  end if;

  with inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
    select t.task_type, _payload, coalesce(_priority, 0), _resource_key,
           coalesce(_max_attempts, 1), coalesce(_scheduled_at, now())
      from queues.task_type t
     where t.task_type = _task_type
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts
  )
  insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts)
  select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts
    from inserted i
  returning task_id into _task_id;

  if _task_id is null then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
  -- A task due more than a minute ahead wakes nobody now: workers poll for it.
  if _notify and (_scheduled_at is null or _scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _task_id;
end;
$$;

-- Enqueue one task for an app or the API; returns its task_id. NULL arguments take the
-- defaults (now, 0, no resource key, one attempt), since generated clients send undefined
-- as NULL. Refuses internal task types (42501). _notify => false leaves the wake-up to
-- the caller (queues.enqueue_and_commit sends it after the commit).
create or replace function queues.enqueue(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  _notify       boolean default true
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts,
                             true, coalesce(_notify, true));
end;
$$;

-- queues.enqueue, then COMMIT, then the wake-up in a transaction of its own; returns the
-- task_id in _task_id. For callers outside a transaction block (CALL inside one fails
-- with 2D000, invalid transaction termination): the client's enqueue on a pool. The
-- task's commit takes no notification lock, so concurrent callers share WAL flushes; the
-- wake-up's transaction writes no data and does not wait for a flush (see the top of
-- this file). Crash between the two: the task is committed and found by the workers'
-- poll instead.
-- Not security definer and no SET clause: PostgreSQL allows COMMIT in a procedure only
-- without them. It runs with the caller's rights and search_path, names every object
-- with its schema, and does nothing a caller could not do itself.
create or replace procedure queues.enqueue_and_commit(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  inout _task_id bigint default null
)
  language plpgsql
as $$
begin
  _task_id := queues.enqueue(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, false);
  commit;
  if _scheduled_at is null
     or _scheduled_at operator(pg_catalog.<=) (pg_catalog.now() operator(pg_catalog.+) interval '1 minute') then
    perform pg_catalog.pg_notify('queues_task_ready', '');
  end if;
end;
$$;

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, one attempt), since generated clients send undefined as NULL.
-- Owner only (no grant): the owner's SQL enqueues any task type through it. A thin alias
-- of the core queues.enqueue_task, with the defaults of queues.enqueue.
create or replace function queues.enqueue_internal(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts);
end;
$$;

-- Raises the problem found in element _idx of a batch (queues.enqueue_tasks):
-- _problem is '<SQLSTATE> <message>'. Returns nothing; typed jsonb so it can stand in a
-- select list for the payload it refuses.
create or replace function queues.raise_enqueue_problem(_idx bigint, _problem text) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _problem like '22023 unknown task_type%' then
    raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = '22023',
      hint = 'Known task types are listed in queues.task_type.';
  end if;
  raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = left(_problem, 5);
end;
$$;

-- Enqueue many tasks in one statement. _tasks is a JSON array of objects:
--   {"task_type": "...", "payload": {...}, "scheduled_at"?: "...", "priority"?: 0,
--    "resource_key"?: "...", "max_attempts"?: 1}
-- Returns the task_ids in input order. All or nothing: the first bad element, in input
-- order, raises an error naming it (tasks[i]: ...) and nothing is written. _public as in
-- queues.enqueue_task: a worker-only task type anywhere in the batch is refused (42501)
-- first, unless the session is the owner's. The core of queues.enqueue_many (no grants).
--
-- One statement inserts the batch: each element is checked as it is inserted (a CASE
-- that calls queues.raise_enqueue_problem only for a bad element), its task type against
-- queues.task_type read once per call (a hashed subplan), then the tasks' claim-index
-- rows; then one wake-up if any task is ready now. For _public, one statement before it
-- looks for worker-only types (queues.internal_task_type, also read once).
create or replace function queues.enqueue_tasks(_tasks jsonb, _public boolean default false)
  returns table (task_id bigint)
  language plpgsql volatile
  -- Planned once per connection, not per call: the plan is the same for any batch (the
  -- elements in order, hashed lookups of the task types), and planning the insert took
  -- a few milliseconds of each of a connection's first five batches.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _ids bigint[];
  _ready boolean;
  _refused record;
begin
  if _tasks is null then
    raise exception 'tasks must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_tasks) <> 'array' then
    raise exception 'tasks must be a JSON array, got %', jsonb_typeof(_tasks) using errcode = '22023';
  end if;
  if jsonb_array_length(_tasks) > 10000 then
    raise exception 'at most 10000 tasks per call, got %', jsonb_array_length(_tasks)
      using errcode = '54000';
  end if;
  -- A worker-only task type anywhere refuses the batch before any element is read
  -- further (the first such element is named), unless the session is the owner's.
  if _public and not queues.is_owner_session() then
    select e.ordinality - 1 as idx, e.value ->> 'task_type' as task_type into _refused
      from jsonb_array_elements(_tasks) with ordinality e
     where e.value ->> 'task_type' in (select i.task_type from queues.internal_task_type i)
     order by e.ordinality
     limit 1;
    if found then
      perform queues.assert_may_enqueue(_refused.task_type, format('tasks[%s]: ', _refused.idx));
    end if;
  end if;
  -- Under REPEATABLE READ or SERIALIZABLE, lock the types FOR KEY SHARE (see
  -- queues.enqueue_task).
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t
     where t.task_type in (select e.value ->> 'task_type' from jsonb_array_elements(_tasks) e)
       for key share;
  end if;

  with input as (
    select e.ordinality - 1 as idx, e.value as element,
           e.value ->> 'task_type' as task_type,
           e.value -> 'payload' as payload,
           (e.value ->> 'scheduled_at')::timestamptz as scheduled_at,
           (e.value ->> 'priority')::integer as priority,
           e.value ->> 'resource_key' as resource_key,
           (e.value ->> 'max_attempts')::integer as max_attempts
      from jsonb_array_elements(_tasks) with ordinality e
  ),
  checked as (
    -- The problem of each element as '<SQLSTATE> <message>', NULL when it has none: its
    -- shape (an object of known fields), then the checks of queues.enqueue_task.
    select c.*,
           case
             when jsonb_typeof(c.element) <> 'object' then
               '22023 must be a JSON object, got ' || jsonb_typeof(c.element)
             when c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts}'::text[] <> '{}' then
               '22023 unknown field(s) ' || left((select string_agg(k, ', ') from jsonb_object_keys(
                 c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts}'::text[]) k), 200)
             when c.task_type is null then '22004 task_type must not be null'
             when c.task_type not in (select t.task_type from queues.task_type t) then
               '22023 unknown task_type ' || quote_literal(left(c.task_type, 100))
             when c.payload is null then '22004 payload must not be null'
             when jsonb_typeof(c.payload) <> 'object' then
               '22023 payload must be a JSON object, got ' || jsonb_typeof(c.payload)
             when pg_column_size(c.payload) > queues.max_payload_bytes() then
               format('54000 payload is %s bytes, over the limit of %s bytes', pg_column_size(c.payload), queues.max_payload_bytes())
             -- Nesting deeper than 64 levels takes over 512 bytes (an uncompressed value,
             -- as c.payload is: just taken out of the batch), so smaller ones are not walked.
             when pg_column_size(c.payload) > 512 and jsonb_path_exists(c.payload, 'strict $.**{65}') then
               format('54000 payload is nested deeper than %s levels', queues.max_payload_depth())
             when c.priority not between -1000 and 1000 then
               '22023 priority must be between -1000 and 1000, got ' || c.priority
             when length(c.resource_key) not between 1 and 200 then '22023 resource_key must be 1 to 200 characters'
             when c.max_attempts not between 1 and 100 then
               '22023 max_attempts must be between 1 and 100, got ' || c.max_attempts
             when not isfinite(c.scheduled_at) then
               '22023 scheduled_at must be a finite time, got ' || c.scheduled_at
           end as problem
      from input c
  ),
  inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
    select c.task_type,
           case when c.problem is null then c.payload else queues.raise_enqueue_problem(c.idx, c.problem) end,
           coalesce(c.priority, 0), c.resource_key, coalesce(c.max_attempts, 1), coalesce(c.scheduled_at, now())
      from checked c
     order by c.idx
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts
  ),
  pending as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts)
    select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts
      from inserted i
  )
  select array_agg(i.task_id order by i.task_id), bool_or(i.scheduled_at <= now() + interval '1 minute')
    into _ids, _ready
    from inserted i;

  if _ready then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select u.id from unnest(_ids) u(id);
end;
$$;

-- Enqueue many tasks (see queues.enqueue_tasks), for an app or the API: refuses internal
-- task types (42501), as queues.enqueue.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_id from queues.enqueue_tasks(_tasks, true) t
$$;
--! EndIncluded queues/enqueue.sql
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
    -- migrations/current/520-hot-path-plans.sql): only expired leases are read.
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

--! split: 580-process-ends-on-success.sql
-- A channel process (email, SMS, file deletion) ends as soon as its attempt succeeds:
-- the success handler enqueues a supervisor run due at once, instead of leaving the end to
-- the run its backoff scheduled (5 s or more later).
set local lock_timeout = '5s';

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
-- planning these two statements was about 90% of the database's CPU per email process.)
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
--! EndIncluded internal/channel_process.sql

--! split: 600-history-measured.sql
-- The History page sizes only the sets still filling: maintenance measures the sets that
-- are done (every task completed, the range below the last task id) at the end of each
-- run, and the page reads their bytes and oldest and newest task from here instead of
-- opening their partitions on each poll (queues.measure_history_sets,
-- sql/queues/partitions.sql; admin.history_status_at, sql/admin/history.sql).
set local lock_timeout = '5s';

create table if not exists queues.history_set_measured (
  lower_bound       bigint primary key,
  upper_bound       bigint not null check (upper_bound > lower_bound),
  first_task_id     bigint,
  first_enqueued_at timestamptz,
  last_task_id      bigint,
  table_bytes       bigint not null,
  index_bytes       bigint not null,
  measured_at       timestamptz not null
);
comment on table queues.history_set_measured is
  'Derived: bytes and oldest and newest task of the partition sets that are done, measured by maintenance (queues.measure_history_sets).';

--! Included queues/partitions.sql
-- History partitions: queues.task and every fact table keyed by task are range-partitioned
-- by task_id, all on the same bounds (a "partition set"). Old history leaves by dropping a
-- whole set, never by row-by-row DELETE. Settings: queues.history_setting; what was
-- dropped: queues.history_partition_dropped (both in migrations/committed/000004); when
-- each set was created: queues.history_partition_created.
--
-- Why task_id and not time: every fact carries task_id, so a row is routed without an
-- extra column; a task and all its facts sit in the same set, so a set can be dropped
-- alone; every lookup of the hot path is by task_id, so it is pruned to one partition;
-- and ids only grow, so a set whose range lies below the id sequence receives no new
-- task. docs/operations.md ("Retention and partitions") has the full reasoning.
--
--   queues.history_tables()                    the partitioned tables, parent first
--   queues.lock_history_tables(t, m, ms)       a step's locks, between transactions; owner only
--   queues.cancel_autovacuum(t)                cancels autovacuum of tables a step must lock; owner only
--   queues.create_history_table(t, name)       a standalone table like t, to attach; owner only
--   queues.attach_history_partition(t, lo, hi) one table's partition of a set, owner only
--   queues.create_history_partition(lo, hi)    one set [lo, hi), owner only
--   queues.adopt_history_range(lo, hi)         a set [lo, hi) of rows in the default
--                                              partitions, moved out of them; owner only
--   queues.history_partition_bounds()          every table's partitions and their bounds
--   queues.history_sets()                      the sets' bounds, from the catalog only
--   queues.history_walk(_before)               the id ranges a newest-first read walks
--   queues.history_set_bytes(lower_bounds)     the table and index bytes of the sets given
--   queues.history_partition_sizes()           the sets with table and index bytes
--   queues.measure_history_sets(_now)          the sets that are done, measured for readers
--                                              (queues.history_set_measured); owner only
--   queues.history_partitions()                the sets with their total bytes
--   queues.maintain_history_step_at(_now)      one short step of maintenance; owner only
--   queues.maintain_history_step(payload)      the same at now(), a runnable db_function
--                                              (the schedule's: one transaction per step)
--   queues.maintain_history_at(_now)           every step in one transaction; owner only
--   queues.maintain_history(payload)           the same at now(), a runnable db_function
--   queues.history_summary_at(_now)            settings, oldest task, what the next drop waits for
--   queues.history_status_at(_now)             the same with the sets and their sizes
--
-- Locks. The claim and the completion read queues.task, task_lease_started and
-- task_completed through generic plans, which lock every partition of those tables,
-- default included, and every writer takes ROW EXCLUSIVE on the parents. So each step
-- locks one table (its parent, the partition, the default) in the order the hot path
-- takes its own (parent, then partition, then default), without waiting in a lock queue
-- (queues.lock_history_tables: asked for without waiting, again every few ms, for up to
-- lock_timeout_ms, then one last try that waits at most 50 ms), and holds the locks only
-- for a catalog change, in a transaction of its own when run by the schedule
-- (queues.maintain_history_step with "repeat"): a claim waits behind maintenance at most
-- 50 ms plus that change. Measured locks (PostgreSQL 18):
--   create table .. partition of     ACCESS EXCLUSIVE on the parent and its default: not used
--   create table (like ..) + attach  SHARE UPDATE EXCLUSIVE on the parent (no conflict with
--                                    DML), ACCESS EXCLUSIVE on the default partition (a
--                                    conflict only for task, task_lease_started and
--                                    task_completed, whose defaults the hot path's plans lock)
--                                    and, for a set made late (its range within reach of the
--                                    ids handed out), SHARE on the parent first: writers of
--                                    that table wait for the attach (a writer that routed its
--                                    row before the attach commits would fail on the
--                                    default's new constraint; see attach_history_partition)
--   detach partition                 ACCESS EXCLUSIVE on the parent, default and partition;
--                                    catalog only (no scan); detach concurrently is refused
--                                    while a default partition exists, and in a function
--   drop table (attached partition)  the same plus unlinking its files under those locks:
--                                    not used; a detached table is dropped instead, which
--                                    locks only itself, except a table with a foreign key
--                                    (none today), whose drop takes ACCESS EXCLUSIVE on
--                                    the table it references: it is truncated first (under
--                                    its own lock only), so that drop is a catalog change

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now']
$$;

-- The partition of _table holding [_lower, _upper) is named <table>_p<lower>.
-- No SET clause: a function with one is never inlined, and the status pages name every
-- partition of every set with it (196 calls at 14 sets). It names no object, so the
-- search path cannot change what it does (like admin.pending_state).
create or replace function queues.history_partition_name(_table text, _lower bigint) returns text
  language sql immutable parallel safe
as $$
  select _table || '_p' || _lower::text
$$;

-- Cancels the autovacuum workers that hold a lock on one of _tables (names in schema
-- queues) in this database, as PostgreSQL itself does for a lock request that has waited
-- deadlock_timeout (1 s): a maintenance step never waits that long (claims would queue
-- behind it), so without this a long autovacuum of a default partition or of a set kept
-- every step that must lock that table skipping until it ended. Autovacuum comes back
-- later. An autovacuum that prevents wraparound (the table's age past
-- autovacuum_freeze_max_age or autovacuum_multixact_freeze_max_age) is left alone, as
-- PostgreSQL leaves it. Needs membership in pg_signal_autovacuum_worker (PostgreSQL 18;
-- the owner gets it when the database users are provisioned, docs/operations.md);
-- without it, nothing is cancelled. Returns how many were cancelled. Owner only.
create or replace function queues.cancel_autovacuum(_tables text[])
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pid integer;
  _cancelled integer := 0;
begin
  for _pid in
    select distinct l.pid
      from pg_locks l
      join pg_stat_activity a on a.pid = l.pid
      join pg_class c on c.oid = l.relation
     where l.locktype = 'relation' and l.granted
       and l.database = (select d.oid from pg_database d where d.datname = current_database())
       -- An autovacuum worker runs as no role: its usesysid is null, and a role without
       -- pg_read_all_stats sees its backend_type as null too (it is shown to those with it).
       and a.usesysid is null and coalesce(a.backend_type, 'autovacuum worker') = 'autovacuum worker'
       and c.relnamespace = 'queues'::regnamespace and c.relname = any (_tables)
       and age(c.relfrozenxid) < current_setting('autovacuum_freeze_max_age')::bigint
       and mxid_age(c.relminmxid) < current_setting('autovacuum_multixact_freeze_max_age')::bigint
  loop
    begin
      if pg_cancel_backend(_pid) then
        _cancelled := _cancelled + 1;
      end if;
    exception
      when insufficient_privilege then
        return _cancelled;
    end;
  end loop;
  return _cancelled;
end;
$$;

-- Takes the locks of one maintenance step, _modes[i] on queues._tables[i] (only the table
-- named: a partitioned parent's partitions are not locked with it), in order, without
-- waiting in a lock queue until its last try: each try asks for every lock with NOWAIT,
-- and a try that meets a holder gives back what it took and tries again 1 to 4 ms later,
-- until the locks are had or _within_ms has passed; then one last try waits in the queue
-- for at most 50 ms, and failing that, lock_not_available (55P03, naming the tables and
-- the tries). Why not wait: a lock request that waits holds every later request behind
-- it, so a claim would queue behind maintenance for as long as the longest transaction in
-- flight keeps maintenance waiting (a batch of server-side steps holds task's partitions
-- for tens of milliseconds; under a steady load one is always in flight, so a waiting
-- request rarely got its lock within a short lock_timeout). Asking without waiting takes
-- the moments between transactions and leaves the queue's own order alone (but see the
-- two 50 ms below). Modes: 'share update exclusive', 'share', 'access exclusive'. Returns
-- the tries it took. Owner only.
create or replace function queues.lock_history_tables(_tables text[], _modes text[], _within_ms integer)
  returns integer
  language plpgsql volatile
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _deadline timestamptz;
  _tries integer := 0;
  _last boolean;
  _last_until timestamptz;
  _autovacuum_cancelled boolean := false;
begin
  if _tables is null or _modes is null or cardinality(_tables) = 0 or cardinality(_tables) <> cardinality(_modes) then
    raise exception 'tables and modes must be non-empty arrays of the same length' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m is null or m not in ('share update exclusive', 'share', 'access exclusive')) then
    raise exception 'a lock mode must be share update exclusive, share or access exclusive, got %', _modes
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_tables) t where t is null or to_regclass(format('queues.%I', t)) is null) then
    raise exception 'every table must name a table in schema queues, got %', _tables using errcode = '22023';
  end if;
  if _within_ms is null or _within_ms < 0 then
    raise exception 'within_ms must be 0 or more, got %', _within_ms using errcode = '22023';
  end if;
  -- A transaction that already holds a lock of this kind (steps run together, as in
  -- queues.maintain_history_at, or a partition made earlier in it) keeps the queue
  -- waiting while it tries, and a holder in its way may be waiting for it: it tries for
  -- at most 50 ms then.
  if exists (select 1 from pg_locks l
              where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.granted
                and l.mode in ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                               'ExclusiveLock', 'AccessExclusiveLock')) then
    _within_ms := least(_within_ms, 50);
  end if;
  _deadline := clock_timestamp() + make_interval(secs => _within_ms / 1000.0);
  loop
    _tries := _tries + 1;
    -- The last try, once the window has passed, waits in the queue for at most 50 ms
    -- (restored on return): transactions that follow one another without a moment
    -- between (one connection's statements back to back) are waited for, and whatever
    -- queues behind this try waits no longer.
    -- The 50 ms are for the whole try, however many tables it locks (each lock waits
    -- only for what is left of them).
    _last := clock_timestamp() >= _deadline;
    _last_until := clock_timestamp() + make_interval(secs => greatest(least(_within_ms, 50), 1) / 1000.0);
    begin
      for _i in 1 .. cardinality(_tables) loop
        if _last then
          perform set_config('lock_timeout',
            greatest(ceil(extract(epoch from _last_until - clock_timestamp()) * 1000), 1)::integer || 'ms', true);
        end if;
        -- The mode is one of the three above (checked), the table quoted as an identifier.
        execute format('lock table only queues.%I in %s mode%s', _tables[_i], _modes[_i],
                       case when _last then '' else ' nowait' end);
      end loop;
      return _tries;
    exception
      when lock_not_available then
        -- The block's locks are given back with it. An autovacuum in the way is cancelled
        -- (once per call); the next try, a few ms later, finds the table free.
        if not _autovacuum_cancelled then
          _autovacuum_cancelled := true;
          perform queues.cancel_autovacuum(_tables);
        end if;
    end;
    exit when _last;
    perform pg_sleep((1 + random() * 3) / 1000.0);
  end loop;
  raise exception 'could not lock % in % tries over % ms: other transactions held them throughout',
    array_to_string(_tables, ', '), _tries, _within_ms
    using errcode = '55P03';
end;
$$;

-- Creates queues._name, a standalone table like the history table _table (columns,
-- defaults, constraints, indexes) with the trigger that refuses updates (a statement
-- trigger on the parent does not fire for a statement that names the partition), to be
-- attached as its partition. Owner only.
create or replace function queues.create_history_table(_table text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('create table queues.%I (like queues.%I including defaults including constraints including indexes including storage)',
                 _name, _table);
  execute format('create trigger forbid_update before update on queues.%I
                    for each statement execute function queues.forbid_fact_update()', _name);
end;
$$;

-- Makes the partition [_lower, _upper) of the history table _table unless it exists: a
-- standalone table like its parent (columns, defaults, constraints, indexes) with the
-- trigger that refuses updates (a statement trigger on the parent does not fire for a
-- statement that names the partition), then attached to the parent. Attaching takes
-- SHARE UPDATE EXCLUSIVE on the parent where `create table .. partition of` takes ACCESS
-- EXCLUSIVE, and the new table is empty, so nothing is scanned. Returns whether it made
-- the partition. Owner only.
create or replace function queues.attach_history_partition(_table text, _lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
begin
  if _table is null or _table <> all (queues.history_tables()) then
    raise exception 'table must name a history table (queues.history_tables()), got %',
      coalesce(quote_literal(left(_table, 100)), 'null') using errcode = '22023';
  end if;
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  _name := queues.history_partition_name(_table, _lower);
  if to_regclass(format('queues.%I', _name)) is not null then
    return false;
  end if;
  -- A range within reach of the task ids handed out (within one set's width, or the
  -- 10,000 tasks a statement may enqueue, above the last one) may receive rows while it
  -- is attached: a writer that routed its row before the attach committed would send it
  -- to the default partition, wait there for the attach's lock, and then fail the
  -- default's new constraint ("new row for relation .._default violates partition
  -- constraint"). For such a range (a set made late), SHARE on the parent: taken when no
  -- writer is in flight, it holds new ones at the parent until commit; they then route
  -- with the new partition. A set made ahead of need, as maintenance makes them, is out
  -- of reach and needs no lock that writers wait for (under a steady load of writers, a
  -- moment without one is rare).
  -- Its locks first (queues.lock_history_tables: taken between transactions, never
  -- queued for): the parent, SHARE UPDATE EXCLUSIVE (what attaching takes; SHARE for a
  -- set made late), then the default partition, ACCESS EXCLUSIVE (attaching checks it
  -- holds no row of the range).
  perform queues.lock_history_tables(
    array[_table, _table || '_default'],
    array[case when _lower <= queues.last_task_id() + greatest(_upper - _lower, 10000) then 'share'
               else 'share update exclusive' end,
          'access exclusive'],
    (select s.lock_timeout_ms from queues.history_setting s));
  perform queues.create_history_table(_table, _name);
  execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                 _table, _name, _lower, _upper);
  return true;
end;
$$;

-- Creates the partition set [_lower, _upper) of every history table (those that exist
-- already are kept), task's last: a set is in use once task has its partition. One
-- transaction; maintenance makes a set one table per step instead. Records when in
-- queues.history_partition_created. Returns whether anything was created. Owner only.
create or replace function queues.create_history_partition(_lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _created boolean := false;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _created := queues.attach_history_partition(_table, _lower, _upper) or _created;
  end loop;
  if _created then
    insert into queues.history_partition_created (lower_bound, upper_bound)
    values (_lower, _upper) on conflict (lower_bound) do nothing;
  end if;
  return _created;
end;
$$;

-- Makes [_lower, _upper) a set from rows that fell into the default partitions (tasks
-- given ids while no set covered them, and their facts): for each history table without
-- a partition of that range, a standalone table like its parent, the range's rows moved
-- into it from the table's default partition (deleted there and inserted here, in this
-- transaction), then attached. Nothing is lost or seen twice: readers of the parent see
-- each row in the default until this commits and in the new partition after. The caller
-- holds every history table's parent (SHARE) and default (ACCESS EXCLUSIVE), so no row of
-- the range is written meanwhile. Records the set in queues.history_partition_created.
-- Returns the tasks moved. Owner only.
create or replace function queues.adopt_history_range(_lower bigint, _upper bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _name text;
  _columns text;
  _moved bigint;
  _tasks bigint := 0;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'range bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _name := queues.history_partition_name(_table, _lower);
    continue when to_regclass(format('queues.%I', _name)) is not null;
    perform queues.create_history_table(_table, _name);
    -- The parent's columns by name (each quoted as an identifier), in its order.
    select string_agg(format('%I', a.attname), ', ' order by a.attnum) into _columns
      from pg_attribute a
     where a.attrelid = format('queues.%I', _table)::regclass and a.attnum > 0 and not a.attisdropped;
    execute format('with moved as (delete from queues.%I where task_id >= $1 and task_id < $2 returning %s)
                    insert into queues.%I (%s) select %s from moved',
                   _table || '_default', _columns, _name, _columns, _columns)
      using _lower, _upper;
    get diagnostics _moved = row_count;
    if _table = 'task' then
      _tasks := _moved;
    end if;
    execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                   _table, _name, _lower, _upper);
  end loop;
  insert into queues.history_partition_created (lower_bound, upper_bound)
  values (_lower, _upper) on conflict (lower_bound) do nothing;
  return _tasks;
end;
$$;

-- Every partition of every history table but the defaults, with its bounds. Owner only.
create or replace function queues.history_partition_bounds()
  returns table (table_name text, partition_name text, lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.name, c.relname::text, m.b[1]::bigint, m.b[2]::bigint
    from unnest(queues.history_tables()) t(name)
    join pg_inherits i on i.inhparent = to_regclass(format('queues.%I', t.name))
    join pg_class c on c.oid = i.inhrelid
   cross join lateral regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?\d+)''?\) TO \(''?(-?\d+)''?\)') as m(b)
   where m.b is not null
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last: bounds and the planner's
-- estimate of their tasks only, from the catalog (no relation is opened). What the list
-- endpoints walk and maintenance reads; queues.history_partitions() adds sizes.
create or replace function queues.history_sets()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  -- A bound reads FOR VALUES FROM ('<lower>') TO ('<upper>'), or DEFAULT. It holds no
  -- column, so it is deparsed without opening the partition (relation 0), and its two
  -- quoted values are the 2nd and 4th fields between quotes (a regular expression took
  -- 10 us a row).
  select nullif(split_part(b.bound, '''', 2), '')::bigint, nullif(split_part(b.bound, '''', 4), '')::bigint,
         b.relname::text, greatest(b.reltuples, 0)::bigint, b.bound = 'DEFAULT'
    from (select c.relname, c.reltuples, pg_get_expr(c.relpartbound, 0) as bound
            from pg_inherits i
            join pg_class c on c.oid = i.inhrelid
           where i.inhparent = 'queues.task'::regclass) b
   order by b.bound = 'DEFAULT', 1
$$;

-- The task id ranges [lower_bound, upper_bound) that a newest-first read of history
-- walks, newest first: the sets that can hold a task below _before (null: any) and not
-- above the last task id handed out (sets above it hold none), upper bounds capped at
-- _before. Each range is one set, except the first, which spans the two newest: the set
-- being filled may have begun a moment ago, and two partitions per table cost the planner
-- little more than one, so a page usually takes one statement. A reader that gives each
-- range's bounds to its statement as values gets a plan of these partitions only.
-- While the default partition holds a task (outside every set; normally none), one range
-- instead, (null, _before): everything below _before, in one statement.
create or replace function queues.history_walk(_before bigint)
  returns table (lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (
    select s.lower_bound, least(s.upper_bound, _before) as upper_bound,
           row_number() over (order by s.lower_bound desc) as n
      from queues.history_sets() s
     where not s.is_default
       -- once, not once per set (a call reads the sequence's catalog entry)
       and s.lower_bound <= (select queues.last_task_id())
       and (_before is null or s.lower_bound < _before)
  ),
  walk as (
    select coalesce((select b.lower_bound from s b where b.n = 2), a.lower_bound) as lower_bound, a.upper_bound
      from s a where a.n = 1
    union all
    select s.lower_bound, s.upper_bound from s where s.n > 2
  ),
  spill as (select exists (select 1 from queues.task_default) as any)
  select w.lower_bound, w.upper_bound from walk w, spill where not spill.any
  union all
  select null, _before from spill where spill.any
  order by 1 desc nulls first
$$;

-- The bytes of the sets whose lower bounds are given (a null element: the default
-- partitions), summed over every history table: the data of tables with their TOAST, and
-- of their indexes (each relation's main fork: its free space and visibility maps, a
-- fraction of a percent, are left out, which halves the files looked at). Each partition
-- is looked up by name (queues.history_partition_name) through the catalog's name index;
-- sizing opens each partition and its indexes (a lock and a file size each, about 50
-- relations a set), so this is the one place that costs per partition: callers pass
-- every set they need in one call (one plan).
create or replace function queues.history_set_bytes(_lower_bounds bigint[])
  returns table (lower_bound bigint, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select l.lower_bound,
         coalesce(sum(pg_relation_size(c.oid) + coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0)), 0)::bigint,
         coalesce(sum((select sum(pg_relation_size(i.indexrelid)) from pg_index i where i.indrelid = c.oid)), 0)::bigint
    from unnest(_lower_bounds) l(lower_bound)
   cross join unnest(queues.history_tables()) t(name)
    left join pg_class c on c.relnamespace = 'queues'::regnamespace
                        and c.relname = case when l.lower_bound is null then t.name || '_default'
                                             else queues.history_partition_name(t.name, l.lower_bound) end
   group by l.lower_bound
$$;

-- queues.history_sets() with each set's bytes (queues.history_set_bytes), every set sized
-- on each call: the History page reads queues.history_set_measured for the sets that are
-- done instead (admin.history_status_at).
create or replace function queues.history_partition_sizes()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (select * from queues.history_sets())
  select s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default,
         b.table_bytes, b.index_bytes
    from s
    join queues.history_set_bytes(array(select s.lower_bound from s)) b
      on b.lower_bound is not distinct from s.lower_bound
   order by s.is_default, s.lower_bound
$$;

-- Measures the sets that are done into queues.history_set_measured: every set whose range
-- lies below the last task id and that holds no pending task, with its bytes
-- (queues.history_set_bytes) and its oldest and newest task. Such a set's tables change
-- only by a rare late fact (a redrive, a revocation or start mark that arrives after the
-- completion) until it is dropped, so a reader that answers often (the History page, every
-- dashboard's poll and /metrics) takes its figures from here and sizes only the sets still
-- filling. A row is written only when a figure changed; rows of sets no longer there are
-- deleted. Maintenance calls it at the end of each run (queues.maintain_history_step_at).
-- Returns the number of sets whose figures were written. Owner only.
create or replace function queues.measure_history_sets(_now timestamptz)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _last_id bigint := queues.last_task_id();
  _written integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  delete from queues.history_set_measured m
   where not exists (select 1 from queues.history_sets() s
                      where s.lower_bound = m.lower_bound and s.upper_bound = m.upper_bound);
  with done as (
    select s.lower_bound, s.upper_bound
      from queues.history_sets() s
     where not s.is_default and s.upper_bound <= _last_id
       and not exists (select 1 from queues.task_pending tp
                        where tp.task_id >= s.lower_bound and tp.task_id < s.upper_bound)
  ),
  measured as (
    select d.lower_bound, d.upper_bound, f.task_id as first_task_id, f.enqueued_at as first_enqueued_at,
           n.task_id as last_task_id, b.table_bytes, b.index_bytes
      from done d
      join queues.history_set_bytes(array(select d.lower_bound from done d)) b on b.lower_bound = d.lower_bound
      left join lateral (select t.task_id, t.enqueued_at from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id limit 1) f on true
      left join lateral (select t.task_id from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id desc limit 1) n on true
  )
  insert into queues.history_set_measured as m
         (lower_bound, upper_bound, first_task_id, first_enqueued_at, last_task_id, table_bytes, index_bytes,
          measured_at)
  select x.lower_bound, x.upper_bound, x.first_task_id, x.first_enqueued_at, x.last_task_id, x.table_bytes,
         x.index_bytes, _now
    from measured x
  on conflict (lower_bound) do update
     set upper_bound = excluded.upper_bound, first_task_id = excluded.first_task_id,
         first_enqueued_at = excluded.first_enqueued_at, last_task_id = excluded.last_task_id,
         table_bytes = excluded.table_bytes, index_bytes = excluded.index_bytes, measured_at = excluded.measured_at
   where (m.upper_bound, m.first_task_id, m.first_enqueued_at, m.last_task_id, m.table_bytes, m.index_bytes)
         is distinct from (excluded.upper_bound, excluded.first_task_id, excluded.first_enqueued_at,
                           excluded.last_task_id, excluded.table_bytes, excluded.index_bytes);
  get diagnostics _written = row_count;
  return _written;
end;
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last. Sizes are summed over
-- every history table (tables, TOAST and indexes); tasks is the planner's estimate.
create or replace function queues.history_partitions()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, total_bytes bigint, is_default boolean)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.lower_bound, p.upper_bound, p.partition_name, p.estimated_tasks,
         p.table_bytes + p.index_bytes, p.is_default
    from queues.history_partition_sizes() p
   order by p.is_default, p.lower_bound
$$;

-- The last task id handed out (0 before the first task).
create or replace function queues.last_task_id() returns bigint
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(pg_sequence_last_value(pg_get_serial_sequence('queues.task', 'task_id')::regclass), 0)
$$;

-- One step of partition maintenance at _now: the first of these that has work to do,
-- locking one table only (see "Locks" above), its locks taken between the queue's
-- transactions within lock_timeout_ms (queues.lock_history_tables):
-- 1. Sets ahead of need, one table per step: first a set left half made (some table has
--    its partition, task not yet; task's is made last), then a new set above every range
--    there is or was and above any task in the default partition, of partition_size task
--    ids, while the sets above the last task id handed out cover less than
--    partitions_ahead * partition_size ids. A set less than partition_size ids above the
--    last id (maintenance fell behind) is made whole in one step instead, above the last id.
-- 1b. Tasks in the default partition (ids handed out while no set covered them) are made
--    a set with their facts, at most 2,000 tasks per step: a half made set they fell into
--    is finished so, or a range of the gap they lie in (queues.adopt_history_range).
-- 2. A table detached from a dropped set is dropped (truncated first if it has rows and
--    a foreign key).
-- 3. A fact table's partition of a dropped set is detached.
-- 4. The oldest set that may go is dropped, starting with its task partition, which is
--    detached (the set's tasks are gone from then on; steps 3 and 2 take its facts and the
--    detached tables away): a set goes when its whole range lies below the last task id
--    (no new task can land in it), it holds no pending task (queues.task_pending, then
--    every task checked against its completion), and its newest completion is older than
--    the retention window. A set with one pending task is kept, however old.
-- 5. With nothing else to do: the sets that are done are measured for the History page
--    (queues.measure_history_sets).
-- Drops are recorded in queues.history_partition_dropped. A step that cannot get its lock
-- in time (or finds a task fell into the default partition in the range it makes) is
-- rolled back, recorded in queues.history_step_skipped and reported skipped; the run goes
-- on ("more") until 5 steps have been skipped within a minute. Returns
--   {"action": "attached" | "set_created" | "set_adopted" | "dropped_table" | "truncated" | "detached" |
--              "set_dropped" | "none" | "skipped" | "busy",
--    "table", "lower_bound", "upper_bound", "tasks", "reason", "late": as they apply,
--    "measured": with "none", the sets whose figures step 5 wrote,
--    "kept": sets below the last task id kept so far, "more": whether to call again}
-- "busy": another maintenance step is in flight (one maintainer at a time). Owner only.
create or replace function queues.maintain_history_step_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  -- A bound for any other lock a statement here might wait for (its own are taken
  -- first, without waiting); restored when the function returns.
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint;
  _doing text;
  _table text;
  _name text;
  _lower bigint;
  _upper bigint;
  _truncate boolean;
  _kept integer := 0;
  _set record;
  _tasks bigint;
  _last_completed timestamptz;
  _measured integer;
  _spilled bigint;
  _gap_lower bigint;
  _gap_upper bigint;
  -- The locks that keep every writer of history out (a late set, a move out of the
  -- default partitions): SHARE on each parent, ACCESS EXCLUSIVE on its default.
  _writers_out text[] := array(select x from unnest(queues.history_tables()) t(name),
                                 lateral (values (t.name), (t.name || '_default')) v(x));
  _writers_out_modes text[] := array(select m from unnest(queues.history_tables()) t(name),
                                       lateral (values ('share'), ('access exclusive')) v(m));
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if not pg_try_advisory_xact_lock(20252, 1) then
    return jsonb_build_object('action', 'busy', 'more', false);
  end if;
  select * into _setting from queues.history_setting;
  _last_id := queues.last_task_id();

  begin
    -- 1. Ahead of need: a half made set, unless a task fell into the default partition in
    --    its range (maintenance fell behind while it was half made): then task's
    --    partition cannot be attached, new sets start above it, and step 1b finishes it
    --    by moving those tasks into it.
    with b as (select * from queues.history_partition_bounds())
    select h.lower_bound, h.upper_bound into _lower, _upper
      from (select distinct b.lower_bound, b.upper_bound from b) h
     where not exists (select 1 from b x where x.table_name = 'task' and x.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.task_default t where t.task_id >= h.lower_bound and t.task_id < h.upper_bound)
     order by h.lower_bound
     limit 1;
    if _lower is null then
      -- A new set. Ranges are never reused: above every partition there is or was, and
      -- above any task in the default partition (a new set cannot overlap rows there).
      select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                      coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                      coalesce((select max(t.task_id) + 1 from queues.task_default t), 0))
        into _lower;
      if _lower < _last_id + 1 + _setting.partitions_ahead::bigint * _setting.partition_size then
        _upper := _lower + _setting.partition_size;
      else
        _lower := null;
      end if;
    end if;
    if _lower is not null and _lower <= _last_id + _setting.partition_size then
      -- Late: less than one set's width of ids is left before the ids handed out reach
      -- the set (maintenance fell behind). Made table by table, it could be outrun: a
      -- task given an id in its range before task's partition exists falls into the
      -- default partition, its facts into theirs, and the next table's attach fails on
      -- them, run after run. So the whole set is made in this one step, under locks
      -- that keep every writer of history out (SHARE on each parent, ACCESS EXCLUSIVE on
      -- each default), starting above the last id read under them: no task of its range
      -- exists, and none can be written until it commits. The ids handed out before it
      -- fall into the default partitions (queues.history_summary_at counts them).
      _doing := format('make the set from %s at once (late)', _lower);
      perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
      _last_id := queues.last_task_id();
      if exists (select 1 from queues.history_partition_bounds() b where b.lower_bound = _lower)
         and not exists (select 1 from queues.task_default t where t.task_id >= _lower and t.task_id < _upper) then
        null; -- a half made set that no task has reached: finished as it is
      else
        select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                        coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                        coalesce((select max(t.task_id) + 1 from queues.task_default t), 0),
                        _last_id + 1)
          into _lower;
        _upper := _lower + _setting.partition_size;
      end if;
      perform queues.create_history_partition(_lower, _upper);
      return jsonb_build_object('action', 'set_created', 'table', queues.history_partition_name('task', _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'late', true, 'more', true);
    end if;
    if _lower is not null then
      select t.name into _table
        from unnest(queues.history_tables()) with ordinality t(name, n)
       where to_regclass(format('queues.%I', queues.history_partition_name(t.name, _lower))) is null
       order by t.name = 'task', t.n
       limit 1;
      _doing := format('attach queues.%I', queues.history_partition_name(_table, _lower));
      perform queues.attach_history_partition(_table, _lower, _upper);
      if _table = 'task' then
        insert into queues.history_partition_created (lower_bound, upper_bound)
        values (_lower, _upper) on conflict (lower_bound) do nothing;
      end if;
      return jsonb_build_object('action', case when _table = 'task' then 'set_created' else 'attached' end,
                                'table', queues.history_partition_name(_table, _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'more', true);
    end if;

    -- 1b. Tasks in the default partition (ids handed out while no set covered them): the
    --    range around the lowest is made a set, its rows moved out of the default
    --    partitions (queues.adopt_history_range), so that retention drops them with it
    --    and pending ones stay claimable. The range: a half made set's own (finished so),
    --    or the gap between the ranges there are or were, below the lowest range above
    --    the task and cut after its 2,000th task (a step moves at most that many tasks,
    --    with their facts, under its locks). Not while no range lies above the task: the
    --    ids may still be handed out, and step 1 makes the set above them first.
    select t.task_id into _spilled from queues.task_default t order by t.task_id limit 1;
    if _spilled is not null then
      with r as (
        select b.lower_bound, b.upper_bound from queues.history_partition_bounds() b
        union all
        select d.lower_bound, d.upper_bound from queues.history_partition_dropped d
      )
      select (select min(r.lower_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             (select max(r.upper_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             coalesce((select max(r.upper_bound) from r where r.upper_bound <= _spilled), 0),
             (select min(r.lower_bound) from r where r.lower_bound > _spilled)
        into _lower, _upper, _gap_lower, _gap_upper;
      if _lower is null and _gap_upper is not null then
        -- The gap, cut after its 2,000th task.
        _lower := _gap_lower;
        _upper := least(_gap_upper,
                        coalesce((select t.task_id from queues.task_default t
                                   where t.task_id >= _spilled and t.task_id < _gap_upper
                                   order by t.task_id offset 2000 limit 1), _gap_upper));
      end if;
      if _upper is not null and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = _lower) then
        _doing := format('adopt the default partitions'' tasks in [%s, %s)', _lower, _upper);
        perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
        _tasks := queues.adopt_history_range(_lower, _upper);
        return jsonb_build_object('action', 'set_adopted', 'table', queues.history_partition_name('task', _lower),
                                  'lower_bound', _lower, 'upper_bound', _upper, 'tasks', _tasks, 'more', true);
      end if;
    end if;

    -- 2. A table detached from a dropped set (named as a partition, no longer one). Its
    --    drop locks only itself, so its files are unlinked under no lock the queue waits
    --    for; but dropping a foreign key takes ACCESS EXCLUSIVE on the table it
    --    references, so a table with one (none has today) is truncated first (under its
    --    own lock) and that drop is a catalog change only.
    select c.relname,
           pg_relation_size(c.oid) > 0 and exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'f')
      into _name, _truncate
      from pg_class c
      join unnest(queues.history_tables()) t(name)
        on c.relname = queues.history_partition_name(t.name, substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     where c.relnamespace = 'queues'::regnamespace and c.relkind = 'r' and not c.relispartition
       and exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     order by c.relname
     limit 1;
    if _name is not null then
      if _truncate then
        _doing := format('truncate queues.%I', _name);
        execute format('truncate queues.%I', _name);
        return jsonb_build_object('action', 'truncated', 'table', _name, 'more', true);
      end if;
      _doing := format('drop queues.%I', _name);
      execute format('drop table queues.%I', _name);
      return jsonb_build_object('action', 'dropped_table', 'table', _name, 'more', true);
    end if;

    -- 3. A fact table's partition of a dropped set: detached, a catalog change.
    select b.table_name, b.partition_name, b.lower_bound, b.upper_bound into _table, _name, _lower, _upper
      from queues.history_partition_bounds() b
     where exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = b.lower_bound and d.upper_bound = b.upper_bound)
     order by b.lower_bound, b.table_name
     limit 1;
    if _name is not null then
      _doing := format('detach queues.%I', _name);
      perform queues.lock_history_tables(array[_table, _name, _table || '_default'],
                                         array['access exclusive', 'access exclusive', 'access exclusive'],
                                         _setting.lock_timeout_ms);
      execute format('alter table queues.%I detach partition queues.%I', _table, _name);
      return jsonb_build_object('action', 'detached', 'table', _name, 'lower_bound', _lower, 'upper_bound', _upper,
                                'more', true);
    end if;

    -- 4. Expired sets, oldest first.
    for _set in
      select p.lower_bound, p.upper_bound from queues.history_sets() p
       where not p.is_default and p.upper_bound <= _last_id
       order by p.lower_bound
    loop
      -- Cheap checks first, without strong locks: a pending task, or a recent completion.
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      select max(c.completed_at) into _last_completed from queues.task_completed c
       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound;
      if _last_completed > _now - _setting.retention then
        _kept := _kept + 1;
        continue;
      end if;
      -- Every task completed, from the facts (one scan of the set's two partitions).
      select count(*) into _tasks from queues.task t
       where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound;
      if exists (select 1 from queues.task t
                  where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound
                    and not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)) then
        _kept := _kept + 1;
        continue;
      end if;

      _name := queues.history_partition_name('task', _set.lower_bound);
      _doing := format('detach queues.%I', _name);
      begin
        -- Detaching holds ACCESS EXCLUSIVE on queues.task and the partition, so no
        -- transaction that wrote to the set or read it to complete a task is still open:
        -- check again what could have changed (a task enqueued with an id handed out
        -- before the checks, and its completion).
        perform queues.lock_history_tables(array['task', _name, 'task_default'],
                                           array['access exclusive', 'access exclusive', 'access exclusive'],
                                           _setting.lock_timeout_ms);
        execute format('alter table queues.task detach partition queues.%I', _name);
        if exists (select 1 from queues.task_pending tp
                    where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_completed c
                       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                         and c.completed_at > _now - _setting.retention) then
          -- Roll the block back, which attaches the partition again.
          raise exception 'set [%, %) changed since it was checked', _set.lower_bound, _set.upper_bound
            using errcode = 'QH001';
        end if;
        insert into queues.history_partition_dropped (lower_bound, upper_bound, tasks, last_completed_at, dropped_at)
        values (_set.lower_bound, _set.upper_bound, _tasks, _last_completed, _now);
        return jsonb_build_object('action', 'set_dropped', 'table', _name, 'lower_bound', _set.lower_bound,
                                  'upper_bound', _set.upper_bound, 'tasks', _tasks, 'kept', _kept, 'more', true);
      exception
        when sqlstate 'QH001' then
          _kept := _kept + 1;
      end;
    end loop;

    -- 5. Nothing left to change: the sets that are done are measured for the readers.
    _measured := queues.measure_history_sets(_now);
    delete from queues.history_step_skipped k where k.skipped_at < _now - interval '1 day';
  exception
    -- check_violation: a task landed in a default partition, in the range being made,
    -- since it was read above; the next step starts above it. The skip is recorded, and
    -- the run goes on (a later try may find its moment) until 5 steps have been skipped
    -- within a minute.
    when lock_not_available or deadlock_detected or check_violation then
      insert into queues.history_step_skipped (step, reason) values (coalesce(_doing, 'a step'), sqlerrm);
      return jsonb_build_object('action', 'skipped', 'step', _doing, 'reason', sqlerrm, 'kept', _kept,
                                'more', (select count(*) from queues.history_step_skipped k
                                          where k.skipped_at > clock_timestamp() - interval '1 minute') < 5);
  end;
  return jsonb_build_object('action', 'none', 'kept', _kept, 'measured', _measured, 'more', false);
end;
$$;

-- Partition maintenance at _now, every step of queues.maintain_history_step_at in one
-- transaction, until none is left or one is skipped: its locks are held until that
-- transaction ends, so this is for tests and for running it by hand; the schedule runs
-- each step in a transaction of its own (queues.maintain_history_step). Returns
--   {"created": [[lo, hi], ...], "dropped": [[lo, hi], ...], "skipped": [{...}], "kept": n}
create or replace function queues.maintain_history_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _created jsonb := '[]';
  _dropped jsonb := '[]';
  _skipped jsonb := '[]';
  _adopted jsonb := '[]';
  _kept integer := 0;
  _step jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  -- Each step changes the catalog or ends the run (skips end it after 5 within a minute);
  -- the bound only guards against a bug.
  for _i in 1 .. 100000 loop
    _step := queues.maintain_history_step_at(_now);
    case _step ->> 'action'
      when 'set_created' then
        _created := _created || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_dropped' then
        _dropped := _dropped || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_adopted' then
        _adopted := _adopted || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'skipped', 'busy' then
        _skipped := _skipped || jsonb_build_array(_step);
      else
        null;
    end case;
    _kept := coalesce((_step ->> 'kept')::integer, _kept);
    exit when not (_step ->> 'more')::boolean;
  end loop;
  return jsonb_build_object('created', _created, 'dropped', _dropped, 'adopted', _adopted, 'skipped', _skipped,
                            'kept', _kept);
end;
$$;

-- A db_function step: maintain_history_at(now()), every step in the caller's transaction
-- (for a one-off run; the schedule runs queues.maintain_history_step).
create or replace function queues.maintain_history(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_at(now()))
$$;

-- The schedule's step: one step of maintenance (maintain_history_step_at(now())), its
-- report as the payload of a success envelope. The schedule's payload asks the worker to
-- call it again while the report says "more" ("repeat": true, see the worker's
-- db_function processor), each call a transaction of its own, so that no step's lock is
-- held while another step runs.
create or replace function queues.maintain_history_step(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_step_at(now()))
$$;

-- What operators watch, without the list of sets: the settings, the oldest retained task,
-- and the next drop (the lowest set below the last task id with its newest completion: it
-- can go at last_completed_at + retention, unless it holds pending tasks). Each read of
-- a partitioned table is pruned at plan time to the set it needs (EXECUTE with the set's
-- bounds as values), so the cost does not grow with the number of sets beyond the catalog
-- read of their bounds.
create or replace function queues.history_summary_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _set record;
  _next record;
  _next_json jsonb;
  _oldest_id bigint;
  _oldest_at timestamptz;
  _default_id bigint;
  _default_at timestamptz;
  _last_completed timestamptz;
  _pending bigint;
begin
  select * into _setting from queues.history_setting;
  -- The oldest task: in the lowest set that holds one (or in the default partition).
  for _set in
    select s.lower_bound, s.upper_bound from queues.history_sets() s
     where not s.is_default and s.lower_bound <= _last_id
     order by s.lower_bound
  loop
    execute 'select t.task_id, t.enqueued_at from queues.task t
              where t.task_id >= $1 and t.task_id < $2 order by t.task_id limit 1'
      into _oldest_id, _oldest_at using _set.lower_bound, _set.upper_bound;
    exit when _oldest_id is not null;
  end loop;
  select t.task_id, t.enqueued_at into _default_id, _default_at from queues.task_default t order by t.task_id limit 1;
  if _default_id < _oldest_id or _oldest_id is null then
    _oldest_id := _default_id;
    _oldest_at := _default_at;
  end if;

  select s.lower_bound, s.upper_bound into _next
    from queues.history_sets() s
   where not s.is_default and s.upper_bound <= _last_id
   order by s.lower_bound
   limit 1;
  if found then
    execute 'select max(c.completed_at) from queues.task_completed c where c.task_id >= $1 and c.task_id < $2'
      into _last_completed using _next.lower_bound, _next.upper_bound;
    _pending := (select count(*) from queues.task_pending tp
                  where tp.task_id >= _next.lower_bound and tp.task_id < _next.upper_bound);
    _next_json := jsonb_build_object(
      'lower_bound', _next.lower_bound, 'upper_bound', _next.upper_bound,
      'pending_tasks', _pending,
      'last_completed_at', _last_completed,
      'drop_after', case when _pending = 0 then coalesce(_last_completed + _setting.retention, _now) end);
  end if;
  return jsonb_build_object(
    'retention_seconds', extract(epoch from _setting.retention)::bigint,
    'partition_size', _setting.partition_size,
    'partitions_ahead', _setting.partitions_ahead,
    'last_task_id', _last_id,
    'oldest_task_id', _oldest_id,
    'oldest_enqueued_at', _oldest_at,
    'default_partition_tasks', (select count(*) from queues.task_default),
    'next_drop', _next_json,
    'dropped_sets', (select count(*) from queues.history_partition_dropped),
    'skipped_steps_last_hour', (select count(*) from queues.history_step_skipped k where k.skipped_at > _now - interval '1 hour'),
    'last_skipped_step', (select jsonb_build_object('skipped_at', k.skipped_at, 'step', k.step, 'reason', k.reason)
                            from queues.history_step_skipped k order by k.skipped_at desc limit 1),
    'last_dropped_at', (select max(d.dropped_at) from queues.history_partition_dropped d));
end;
$$;

-- queues.history_summary_at(_now) and the sets with their sizes (queues.history_partitions()).
create or replace function queues.history_status_at(_now timestamptz)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.history_summary_at(_now) || jsonb_build_object(
    'partitions', coalesce((select jsonb_agg(jsonb_build_object(
        'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'name', p.partition_name,
        'estimated_tasks', p.estimated_tasks, 'total_bytes', p.total_bytes, 'is_default', p.is_default)
        order by p.is_default, p.lower_bound)
      from queues.history_partitions() p), '[]'))
$$;

-- The worker runs maintenance as the db_function task of its schedule; operators read the
-- status through admin.history_status(). Everything else here is owner only. Granted
-- here, beside the functions, so that a migration including sql/queues/privileges.sql
-- before this file does not name a function that does not exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.maintain_history_step_at(timestamptz),
  queues.history_status_at(timestamptz), queues.history_summary_at(timestamptz), queues.history_partitions(),
  queues.history_partition_bounds(), queues.history_sets(), queues.history_partition_sizes(),
  queues.history_set_bytes(bigint[]), queues.measure_history_sets(timestamptz),
  queues.history_walk(bigint), queues.create_history_partition(bigint, bigint),
  queues.attach_history_partition(text, bigint, bigint), queues.lock_history_tables(text[], text[], integer),
  queues.adopt_history_range(bigint, bigint), queues.create_history_table(text, text),
  queues.cancel_autovacuum(text[])
  from public;
grant execute on function queues.maintain_history(jsonb), queues.maintain_history_step(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
select internal.register_runnable_function('queues.maintain_history_step(jsonb)');
--! EndIncluded queues/partitions.sql
--! Included admin/history.sql
-- History and retention, for operators (the dashboard's History page, GET /api/history,
-- the queue_history_* gauges of /metrics): the settings and the maintenance schedule,
-- every partition set of the queue's history with its state and sizes, the oldest
-- retained task, the next set retention will drop (queues.history_status_at,
-- sql/queues/partitions.sql) and the recent drops.
--
-- Cost: catalog reads, and per partition set a range count of its pending tasks in
-- queues.task_pending (the claim index: its cost follows pending work, never history) and
-- a row of queues.history_set_measured for a set that is done (every task completed, its
-- range below the last task id: maintenance measured it), or else its sizes (each of its
-- partitions opened) and three primary-key reads (its oldest and newest task) planned for
-- its partition alone. Only the sets still filling (normally the current one and those
-- ahead) are opened on each read. No scan of history.

-- The status at _now: queues.history_status_at(_now) with these keys added or extended:
--   now                  _now
--   lock_timeout_ms      how long a maintenance step keeps asking for its locks
--   partitions[]         each set, lowest first, the default partition last:
--     lower_bound, upper_bound, name, is_default, estimated_tasks (planner), total_bytes,
--     table_bytes, index_bytes  tables with TOAST / indexes, summed over every history table
--     tasks                     task ids handed out in the set, from its oldest to its
--                               newest task (ids only grow and no task is ever deleted
--                               alone, so this is the number of tasks unless an enqueue
--                               rolled back); the default partition: its exact count
--     first_task_id, first_enqueued_at, last_task_id   the set's oldest and newest task
--     pending_tasks             tasks in it not completed (queues.task_pending)
--     measured_at               when maintenance measured the set's bytes and tasks
--                               (queues.history_set_measured: a set below the last task
--                               id with no pending task); null: measured for this answer
--     created_at                when maintenance created it (queues.history_partition_created);
--                               null for sets made before creations were recorded
--     state                     ahead (above the last task id), current (holds the last
--                               task id), next_drop (the set next_drop names), retained
--                               (below the last task id, kept), default
--   totals               sets (not counting the default partition), tasks, table_bytes,
--                        index_bytes, total_bytes
--   recent_drops[]       the 10 newest rows of queues.history_partition_dropped
--   maintenance          the queue_history_maintenance schedule (cron, enabled, next and
--                        last fire) and its last run (task, state, and the run's report
--                        {created, dropped, skipped, kept} once it completed); null
--                        without the schedule
-- Owner only (it takes the clock); the API calls admin.history_status().
create or replace function admin.history_status_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _status jsonb;
  _last_id bigint;
  _next_lower bigint;
  _default record;
  _sets jsonb;
  _set record;
  _first record;
  _probes jsonb := '{}';
  _parts jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  _status := queues.history_summary_at(_now);
  _last_id := (_status ->> 'last_task_id')::bigint;
  _next_lower := (_status -> 'next_drop' ->> 'lower_bound')::bigint;

  -- The default partition, read by itself (normally empty).
  select (select t.task_id from queues.task_default t order by t.task_id limit 1) as first_task_id,
         (select t.enqueued_at from queues.task_default t order by t.task_id limit 1) as first_enqueued_at,
         (select max(t.task_id) from queues.task_default t) as last_task_id,
         (select count(*) from queues.task_default t) as tasks,
         (select count(*) from queues.task_default t
           where not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)) as pending_tasks
    into _default;

  -- Every set once, with its pending count (a range count of queues.task_pending) and its
  -- row of queues.history_set_measured if it is done (its range below the last task id,
  -- no pending task) and maintenance measured it.
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'partition_name', p.partition_name,
           'estimated_tasks', p.estimated_tasks, 'is_default', p.is_default, 'created_at', c.created_at,
           'pending', pe.pending, 'measured', m.lower_bound is not null, 'first_task_id', m.first_task_id,
           'first_enqueued_at', m.first_enqueued_at, 'last_task_id', m.last_task_id,
           'table_bytes', m.table_bytes, 'index_bytes', m.index_bytes, 'measured_at', m.measured_at)), '[]')
    into _sets
    from queues.history_sets() p
    left join queues.history_partition_created c on c.lower_bound = p.lower_bound and not p.is_default
   cross join lateral (select count(*) as pending from queues.task_pending tp
                        where not p.is_default and tp.task_id >= p.lower_bound and tp.task_id < p.upper_bound) pe
    left join queues.history_set_measured m
      on m.lower_bound = p.lower_bound and m.upper_bound = p.upper_bound
     and not p.is_default and p.upper_bound <= _last_id and pe.pending = 0;

  -- The oldest and newest task of each set that is not measured and may hold one (not
  -- above the last task id), by primary key, each read given its set's bounds as values
  -- so that it is planned for that set's partition only.
  for _set in
    select x.lower_bound, x.upper_bound
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, is_default boolean, measured boolean)
     where not x.is_default and not x.measured and x.lower_bound <= _last_id
  loop
    execute 'select (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_task_id,
                    (select t.enqueued_at from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_enqueued_at,
                    (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id desc limit 1) as last_task_id'
      into _first using _set.lower_bound, _set.upper_bound;
    _probes := _probes || jsonb_build_object(_set.lower_bound::text, to_jsonb(_first));
  end loop;

  -- The answer: sizes from the measurement, or from one queues.history_set_bytes call for
  -- every set that is not measured.
  with s as (
    select x.*, coalesce(x.first_task_id, (_probes -> x.lower_bound::text ->> 'first_task_id')::bigint) as first_id,
           coalesce(x.first_enqueued_at, (_probes -> x.lower_bound::text ->> 'first_enqueued_at')::timestamptz) as first_at,
           coalesce(x.last_task_id, (_probes -> x.lower_bound::text ->> 'last_task_id')::bigint) as last_id
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, partition_name text,
                                       estimated_tasks bigint, is_default boolean, created_at timestamptz,
                                       pending bigint, measured boolean, first_task_id bigint,
                                       first_enqueued_at timestamptz, last_task_id bigint, table_bytes bigint,
                                       index_bytes bigint, measured_at timestamptz)
  ),
  sized as (
    select * from queues.history_set_bytes(array(select s.lower_bound from s where not s.measured))
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', s.lower_bound, 'upper_bound', s.upper_bound, 'name', s.partition_name,
           'is_default', s.is_default, 'estimated_tasks', s.estimated_tasks,
           'total_bytes', coalesce(s.table_bytes, b.table_bytes) + coalesce(s.index_bytes, b.index_bytes),
           'table_bytes', coalesce(s.table_bytes, b.table_bytes),
           'index_bytes', coalesce(s.index_bytes, b.index_bytes),
           'tasks', case when s.is_default then _default.tasks else coalesce(s.last_id - s.first_id + 1, 0) end,
           'first_task_id', case when s.is_default then _default.first_task_id else s.first_id end,
           'first_enqueued_at', case when s.is_default then _default.first_enqueued_at else s.first_at end,
           'last_task_id', case when s.is_default then _default.last_task_id else s.last_id end,
           'pending_tasks', case when s.is_default then _default.pending_tasks else s.pending end,
           'measured_at', s.measured_at,
           'created_at', s.created_at,
           'state', case when s.is_default then 'default'
                         when s.lower_bound > _last_id then 'ahead'
                         when s.upper_bound > _last_id then 'current'
                         when s.lower_bound = _next_lower then 'next_drop'
                         else 'retained' end)
           order by s.is_default, s.lower_bound), '[]')
    into _parts
    from s
    left join sized b on not s.measured and b.lower_bound is not distinct from s.lower_bound;

  return _status || jsonb_build_object(
    'now', _now,
    'lock_timeout_ms', (select s.lock_timeout_ms from queues.history_setting s),
    'partitions', _parts,
    'totals', (select jsonb_build_object(
                 'sets', count(*) filter (where not (x ->> 'is_default')::boolean),
                 'tasks', coalesce(sum((x ->> 'tasks')::bigint), 0),
                 'table_bytes', coalesce(sum((x ->> 'table_bytes')::bigint), 0),
                 'index_bytes', coalesce(sum((x ->> 'index_bytes')::bigint), 0),
                 'total_bytes', coalesce(sum((x ->> 'total_bytes')::bigint), 0))
                 from jsonb_array_elements(_parts) x),
    'recent_drops', coalesce((
      select jsonb_agg(jsonb_build_object(
               'lower_bound', d.lower_bound, 'upper_bound', d.upper_bound, 'tasks', d.tasks,
               'last_completed_at', d.last_completed_at, 'dropped_at', d.dropped_at)
             order by d.history_partition_dropped_id desc)
        from (select * from queues.history_partition_dropped x
               order by x.history_partition_dropped_id desc limit 10) d), '[]'),
    'maintenance', (
      select jsonb_build_object(
               'schedule', s.name, 'cron', s.cron, 'enabled', s.enabled,
               'next_fire_at', s.next_fire_at, 'last_fire_at', s.last_fire_at,
               'last_run', (
                 select jsonb_build_object(
                          'fire_at', r.fire_at, 'outcome', r.outcome, 'task_id', r.task_id,
                          'task_state', coalesce(
                            (select c.outcome from queues.task_completed c where c.task_id = r.task_id),
                            (select admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)
                               from queues.task_pending p where p.task_id = r.task_id)),
                          'report', (select x.result -> 'payload' from queues.task_result x
                                      where x.task_id = r.task_id order by x.task_lease_id desc limit 1))
                   from schedules.schedule_run r
                  where r.schedule_id = s.schedule_id
                  order by r.fire_at desc limit 1))
        from schedules.list_schedules() s
       where s.name = 'queue_history_maintenance'));
end;
$$;

create or replace function admin.history_status()
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.history_status_at(now())
$$;

-- Granted here, beside the function (see sql/queues/partitions.sql for why); the clock
-- variant stays owner only.
revoke execute on function admin.history_status_at(timestamptz) from public;
grant execute on function admin.history_status() to :DATABASE_API;
--! EndIncluded admin/history.sql

--! split: 620-settle-with-handler.sql
-- A handler task's completion and its handler (success or error handler) in one statement
-- (queues.settle_with_handler, sql/queues/settle.sql): the worker no longer holds a
-- transaction open across the handler's round trip, the completion's and the commit's.
set local lock_timeout = '5s';

--! Included queues/settle.sql
-- The worker's completer: one call per round trip that marks tasks started and completes
-- others, with their error rows (queues.settle_tasks, owner-run: security definer like
-- every queue writer); and a completion with its handler in one statement
-- (queues.settle_with_handler, run as the worker).

-- Marks leases started (see queues.task_lease_started) and completes tasks (see
-- queues.complete_tasks: fenced by lease, retries, results), recording each error message
-- against its task in the same transaction, only if this call completed the task or
-- scheduled its retry (a refused completion records nothing).
--   _started_task_ids, _started_lease_ids   parallel: leases whose tasks are about to run
--   _task_ids, _task_lease_ids, _outcomes, _retries   parallel: as queues.complete_tasks
--   _error_task_ids, _error_messages        parallel: errors, any number per completed task
-- Returns one row per start (kind 'start', result 'started' or 'lease_lost': the lease is
-- no longer the task's current one, and the task must not run) and one per completion
-- (kind 'complete', result as queues.complete_tasks), starts first, each in input order.
create or replace function queues.settle_tasks(
  _started_task_ids  bigint[],
  _started_lease_ids bigint[],
  _task_ids          bigint[],
  _task_lease_ids    bigint[] default null,
  _outcomes          text[] default null,
  _retries           boolean[] default null,
  _error_task_ids    bigint[] default null,
  _error_messages    text[] default null
) returns table (task_id bigint, kind text, result text)
  language plpgsql volatile
  security definer
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _started bigint[] := coalesce(_started_task_ids, '{}');
  _started_leases bigint[] := coalesce(_started_lease_ids, '{}');
  _errors bigint[] := coalesce(_error_task_ids, '{}');
  _messages text[] := coalesce(_error_messages, '{}');
begin
  perform queues.assert_lease_pairs(_started, _started_leases);
  if cardinality(_errors) <> cardinality(_messages) then
    raise exception 'error_task_ids and error_messages must have the same length (% and %)',
      cardinality(_errors), cardinality(_messages) using errcode = '22023';
  end if;
  if array_position(_errors, null) is not null then
    raise exception 'error_task_ids must not contain null' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_messages) m where m is null or btrim(m) = '') then
    raise exception 'error_messages must not be empty' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_errors) e where e <> all (coalesce(_task_ids, '{}'))) then
    raise exception 'error_task_ids must name tasks completed in the same call' using errcode = '22023';
  end if;

  -- Starts: a lease that is still its task's current lease.
  return query
  with input as (
    select i.task_id, i.task_lease_id, i.ord
      from unnest(_started, _started_leases) with ordinality as i(task_id, task_lease_id, ord)
  ),
  held as (
    select p.task_id, p.current_lease_id
      from queues.task_pending p
     where p.task_id = any (_started)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id)
    select i.task_id, i.task_lease_id
      from input i join held h on h.task_id = i.task_id and h.current_lease_id = i.task_lease_id
    on conflict do nothing
  )
  select i.task_id, 'start'::text,
         case when h.task_id is not null then 'started' else 'lease_lost' end
    from input i
    left join held h on h.task_id = i.task_id and h.current_lease_id = i.task_lease_id
   order by i.ord;

  if cardinality(coalesce(_task_ids, '{}')) = 0 then
    return;
  end if;

  return query
  with done as (
    select c.task_id, c.result, row_number() over () as ord
      from queues.complete_tasks(_task_ids, _task_lease_ids, _outcomes, _retries) c
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
  select d.task_id, 'complete'::text, d.result from done d order by d.ord;
end;
$$;

-- A completion and its handler in one statement: the worker's completion of a handler task
-- (a success handler after the provider's call, an error handler after its failure), with
-- no transaction left open between round trips. Runs internal.run_function(_handler,
-- _body) in a subtransaction, reads its envelope (queues.parse_envelope), and records the
-- completion fenced by the lease (queues.settle_tasks):
--   _mode 'success' (_outcome 'succeeded'): a handler failure (an error, a validation
--     failure, a status or a malformed envelope) fails the task with that failure as its
--     error, the handler's writes kept; a handler that raises fails the task with
--     _raised_prefix followed by the message, its writes rolled back;
--   _mode 'error' (_outcome 'failed', _errors the task's errors, _retry false for a
--     failure no retry can mend): a handler failure, or _raised_prefix and the message of
--     a raise (its writes rolled back), is one more error row.
-- If the completion is refused (the lease was lost), nothing of it commits, the handler's
-- writes included. A serialization failure or deadlock is raised: nothing is recorded and
-- the task runs again. Returns the completion's result (as queues.complete_tasks) with
-- the outcome and the errors recorded (or refused). Messages are cut at 8,000 characters
-- (as the worker's). Runs as the caller (security invoker): the handler has the worker's
-- privileges, not the owner's.
create or replace function queues.settle_with_handler(
  _task_id bigint, _task_lease_id bigint, _outcome text, _errors text[], _retry boolean,
  _handler text, _body jsonb, _mode text, _raised_prefix text,
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
  if _outcome is distinct from (case _mode when 'success' then 'succeeded' else 'failed' end) then
    raise exception 'a % handler completes % tasks, not %', _mode,
      (case _mode when 'success' then 'succeeded' else 'failed' end), coalesce(_outcome, 'null')
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
      from queues.settle_tasks('{}', '{}', array[_task_id], array[_task_lease_id], array[outcome], array[_retry],
                               array_fill(_task_id, array[cardinality(errors)]), errors) s;
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
  queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text) from public;
grant execute on function
  queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text) to :DATABASE_WORKER;
--! EndIncluded queues/settle.sql

--! split: 640-history-late-sets.sql
-- Maintenance that falls behind catches up: a set within reach of the task ids handed out
-- is made whole in one step, above the last id, so ids cannot outrun it table by table;
-- and a step skipped for want of a free moment is recorded here, and the run goes on
-- (queues.maintain_history_step_at, sql/queues/partitions.sql).
set local lock_timeout = '5s';

create table if not exists queues.history_step_skipped (
  skipped_at timestamptz not null default clock_timestamp(),
  step       text not null,
  reason     text not null
);
create index if not exists history_step_skipped_skipped_at on queues.history_step_skipped (skipped_at);
comment on table queues.history_step_skipped is
  'Maintenance steps that were skipped (no free moment for their locks within lock_timeout_ms), with the reason; rows older than a day are deleted by maintenance.';

--! Included queues/partitions.sql
-- History partitions: queues.task and every fact table keyed by task are range-partitioned
-- by task_id, all on the same bounds (a "partition set"). Old history leaves by dropping a
-- whole set, never by row-by-row DELETE. Settings: queues.history_setting; what was
-- dropped: queues.history_partition_dropped (both in migrations/committed/000004); when
-- each set was created: queues.history_partition_created.
--
-- Why task_id and not time: every fact carries task_id, so a row is routed without an
-- extra column; a task and all its facts sit in the same set, so a set can be dropped
-- alone; every lookup of the hot path is by task_id, so it is pruned to one partition;
-- and ids only grow, so a set whose range lies below the id sequence receives no new
-- task. docs/operations.md ("Retention and partitions") has the full reasoning.
--
--   queues.history_tables()                    the partitioned tables, parent first
--   queues.lock_history_tables(t, m, ms)       a step's locks, between transactions; owner only
--   queues.cancel_autovacuum(t)                cancels autovacuum of tables a step must lock; owner only
--   queues.create_history_table(t, name)       a standalone table like t, to attach; owner only
--   queues.attach_history_partition(t, lo, hi) one table's partition of a set, owner only
--   queues.create_history_partition(lo, hi)    one set [lo, hi), owner only
--   queues.adopt_history_range(lo, hi)         a set [lo, hi) of rows in the default
--                                              partitions, moved out of them; owner only
--   queues.history_partition_bounds()          every table's partitions and their bounds
--   queues.history_sets()                      the sets' bounds, from the catalog only
--   queues.history_walk(_before)               the id ranges a newest-first read walks
--   queues.history_set_bytes(lower_bounds)     the table and index bytes of the sets given
--   queues.history_partition_sizes()           the sets with table and index bytes
--   queues.measure_history_sets(_now)          the sets that are done, measured for readers
--                                              (queues.history_set_measured); owner only
--   queues.history_partitions()                the sets with their total bytes
--   queues.maintain_history_step_at(_now)      one short step of maintenance; owner only
--   queues.maintain_history_step(payload)      the same at now(), a runnable db_function
--                                              (the schedule's: one transaction per step)
--   queues.maintain_history_at(_now)           every step in one transaction; owner only
--   queues.maintain_history(payload)           the same at now(), a runnable db_function
--   queues.history_summary_at(_now)            settings, oldest task, what the next drop waits for
--   queues.history_status_at(_now)             the same with the sets and their sizes
--
-- Locks. The claim and the completion read queues.task, task_lease_started and
-- task_completed through generic plans, which lock every partition of those tables,
-- default included, and every writer takes ROW EXCLUSIVE on the parents. So each step
-- locks one table (its parent, the partition, the default) in the order the hot path
-- takes its own (parent, then partition, then default), without waiting in a lock queue
-- (queues.lock_history_tables: asked for without waiting, again every few ms, for up to
-- lock_timeout_ms, then one last try that waits at most 50 ms), and holds the locks only
-- for a catalog change, in a transaction of its own when run by the schedule
-- (queues.maintain_history_step with "repeat"): a claim waits behind maintenance at most
-- 50 ms plus that change. Measured locks (PostgreSQL 18):
--   create table .. partition of     ACCESS EXCLUSIVE on the parent and its default: not used
--   create table (like ..) + attach  SHARE UPDATE EXCLUSIVE on the parent (no conflict with
--                                    DML), ACCESS EXCLUSIVE on the default partition (a
--                                    conflict only for task, task_lease_started and
--                                    task_completed, whose defaults the hot path's plans lock)
--                                    and, for a set made late (its range within reach of the
--                                    ids handed out), SHARE on the parent first: writers of
--                                    that table wait for the attach (a writer that routed its
--                                    row before the attach commits would fail on the
--                                    default's new constraint; see attach_history_partition)
--   detach partition                 ACCESS EXCLUSIVE on the parent, default and partition;
--                                    catalog only (no scan); detach concurrently is refused
--                                    while a default partition exists, and in a function
--   drop table (attached partition)  the same plus unlinking its files under those locks:
--                                    not used; a detached table is dropped instead, which
--                                    locks only itself, except a table with a foreign key
--                                    (none today), whose drop takes ACCESS EXCLUSIVE on
--                                    the table it references: it is truncated first (under
--                                    its own lock only), so that drop is a catalog change

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now']
$$;

-- The partition of _table holding [_lower, _upper) is named <table>_p<lower>.
-- No SET clause: a function with one is never inlined, and the status pages name every
-- partition of every set with it (196 calls at 14 sets). It names no object, so the
-- search path cannot change what it does (like admin.pending_state).
create or replace function queues.history_partition_name(_table text, _lower bigint) returns text
  language sql immutable parallel safe
as $$
  select _table || '_p' || _lower::text
$$;

-- Cancels the autovacuum workers that hold a lock on one of _tables (names in schema
-- queues) in this database, as PostgreSQL itself does for a lock request that has waited
-- deadlock_timeout (1 s): a maintenance step never waits that long (claims would queue
-- behind it), so without this a long autovacuum of a default partition or of a set kept
-- every step that must lock that table skipping until it ended. Autovacuum comes back
-- later. An autovacuum that prevents wraparound (the table's age past
-- autovacuum_freeze_max_age or autovacuum_multixact_freeze_max_age) is left alone, as
-- PostgreSQL leaves it. Needs membership in pg_signal_autovacuum_worker (PostgreSQL 18;
-- the owner gets it when the database users are provisioned, docs/operations.md);
-- without it, nothing is cancelled. Returns how many were cancelled. Owner only.
create or replace function queues.cancel_autovacuum(_tables text[])
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pid integer;
  _cancelled integer := 0;
begin
  for _pid in
    select distinct l.pid
      from pg_locks l
      join pg_stat_activity a on a.pid = l.pid
      join pg_class c on c.oid = l.relation
     where l.locktype = 'relation' and l.granted
       and l.database = (select d.oid from pg_database d where d.datname = current_database())
       -- An autovacuum worker runs as no role: its usesysid is null, and a role without
       -- pg_read_all_stats sees its backend_type as null too (it is shown to those with it).
       and a.usesysid is null and coalesce(a.backend_type, 'autovacuum worker') = 'autovacuum worker'
       and c.relnamespace = 'queues'::regnamespace and c.relname = any (_tables)
       and age(c.relfrozenxid) < current_setting('autovacuum_freeze_max_age')::bigint
       and mxid_age(c.relminmxid) < current_setting('autovacuum_multixact_freeze_max_age')::bigint
  loop
    begin
      if pg_cancel_backend(_pid) then
        _cancelled := _cancelled + 1;
      end if;
    exception
      when insufficient_privilege then
        return _cancelled;
    end;
  end loop;
  return _cancelled;
end;
$$;

-- Takes the locks of one maintenance step, _modes[i] on queues._tables[i] (only the table
-- named: a partitioned parent's partitions are not locked with it), in order, without
-- waiting in a lock queue until its last try: each try asks for every lock with NOWAIT,
-- and a try that meets a holder gives back what it took and tries again 1 to 4 ms later,
-- until the locks are had or _within_ms has passed; then one last try waits in the queue
-- for at most 50 ms, and failing that, lock_not_available (55P03, naming the tables and
-- the tries). Why not wait: a lock request that waits holds every later request behind
-- it, so a claim would queue behind maintenance for as long as the longest transaction in
-- flight keeps maintenance waiting (a batch of server-side steps holds task's partitions
-- for tens of milliseconds; under a steady load one is always in flight, so a waiting
-- request rarely got its lock within a short lock_timeout). Asking without waiting takes
-- the moments between transactions and leaves the queue's own order alone (but see the
-- two 50 ms below). Modes: 'share update exclusive', 'share', 'access exclusive'. Returns
-- the tries it took. Owner only.
create or replace function queues.lock_history_tables(_tables text[], _modes text[], _within_ms integer)
  returns integer
  language plpgsql volatile
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _deadline timestamptz;
  _tries integer := 0;
  _last boolean;
  _last_until timestamptz;
  _autovacuum_cancelled boolean := false;
begin
  if _tables is null or _modes is null or cardinality(_tables) = 0 or cardinality(_tables) <> cardinality(_modes) then
    raise exception 'tables and modes must be non-empty arrays of the same length' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m is null or m not in ('share update exclusive', 'share', 'access exclusive')) then
    raise exception 'a lock mode must be share update exclusive, share or access exclusive, got %', _modes
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_tables) t where t is null or to_regclass(format('queues.%I', t)) is null) then
    raise exception 'every table must name a table in schema queues, got %', _tables using errcode = '22023';
  end if;
  if _within_ms is null or _within_ms < 0 then
    raise exception 'within_ms must be 0 or more, got %', _within_ms using errcode = '22023';
  end if;
  -- A transaction that already holds a lock of this kind (steps run together, as in
  -- queues.maintain_history_at, or a partition made earlier in it) keeps the queue
  -- waiting while it tries, and a holder in its way may be waiting for it: it tries for
  -- at most 50 ms then.
  if exists (select 1 from pg_locks l
              where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.granted
                and l.mode in ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                               'ExclusiveLock', 'AccessExclusiveLock')) then
    _within_ms := least(_within_ms, 50);
  end if;
  _deadline := clock_timestamp() + make_interval(secs => _within_ms / 1000.0);
  loop
    _tries := _tries + 1;
    -- The last try, once the window has passed, waits in the queue for at most 50 ms
    -- (restored on return): transactions that follow one another without a moment
    -- between (one connection's statements back to back) are waited for, and whatever
    -- queues behind this try waits no longer.
    -- The 50 ms are for the whole try, however many tables it locks (each lock waits
    -- only for what is left of them).
    _last := clock_timestamp() >= _deadline;
    _last_until := clock_timestamp() + make_interval(secs => greatest(least(_within_ms, 50), 1) / 1000.0);
    begin
      for _i in 1 .. cardinality(_tables) loop
        if _last then
          perform set_config('lock_timeout',
            greatest(ceil(extract(epoch from _last_until - clock_timestamp()) * 1000), 1)::integer || 'ms', true);
        end if;
        -- The mode is one of the three above (checked), the table quoted as an identifier.
        execute format('lock table only queues.%I in %s mode%s', _tables[_i], _modes[_i],
                       case when _last then '' else ' nowait' end);
      end loop;
      return _tries;
    exception
      when lock_not_available then
        -- The block's locks are given back with it. An autovacuum in the way is cancelled
        -- (once per call); the next try, a few ms later, finds the table free.
        if not _autovacuum_cancelled then
          _autovacuum_cancelled := true;
          perform queues.cancel_autovacuum(_tables);
        end if;
    end;
    exit when _last;
    perform pg_sleep((1 + random() * 3) / 1000.0);
  end loop;
  raise exception 'could not lock % in % tries over % ms: other transactions held them throughout',
    array_to_string(_tables, ', '), _tries, _within_ms
    using errcode = '55P03';
end;
$$;

-- Creates queues._name, a standalone table like the history table _table (columns,
-- defaults, constraints, indexes) with the trigger that refuses updates (a statement
-- trigger on the parent does not fire for a statement that names the partition), to be
-- attached as its partition. Owner only.
create or replace function queues.create_history_table(_table text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('create table queues.%I (like queues.%I including defaults including constraints including indexes including storage)',
                 _name, _table);
  execute format('create trigger forbid_update before update on queues.%I
                    for each statement execute function queues.forbid_fact_update()', _name);
end;
$$;

-- Makes the partition [_lower, _upper) of the history table _table unless it exists: a
-- standalone table like its parent (columns, defaults, constraints, indexes) with the
-- trigger that refuses updates (a statement trigger on the parent does not fire for a
-- statement that names the partition), then attached to the parent. Attaching takes
-- SHARE UPDATE EXCLUSIVE on the parent where `create table .. partition of` takes ACCESS
-- EXCLUSIVE, and the new table is empty, so nothing is scanned. Returns whether it made
-- the partition. Owner only.
create or replace function queues.attach_history_partition(_table text, _lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
begin
  if _table is null or _table <> all (queues.history_tables()) then
    raise exception 'table must name a history table (queues.history_tables()), got %',
      coalesce(quote_literal(left(_table, 100)), 'null') using errcode = '22023';
  end if;
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  _name := queues.history_partition_name(_table, _lower);
  if to_regclass(format('queues.%I', _name)) is not null then
    return false;
  end if;
  -- A range within reach of the task ids handed out (within one set's width, or the
  -- 10,000 tasks a statement may enqueue, above the last one) may receive rows while it
  -- is attached: a writer that routed its row before the attach committed would send it
  -- to the default partition, wait there for the attach's lock, and then fail the
  -- default's new constraint ("new row for relation .._default violates partition
  -- constraint"). For such a range (a set made late), SHARE on the parent: taken when no
  -- writer is in flight, it holds new ones at the parent until commit; they then route
  -- with the new partition. A set made ahead of need, as maintenance makes them, is out
  -- of reach and needs no lock that writers wait for (under a steady load of writers, a
  -- moment without one is rare).
  -- Its locks first (queues.lock_history_tables: taken between transactions, never
  -- queued for): the parent, SHARE UPDATE EXCLUSIVE (what attaching takes; SHARE for a
  -- set made late), then the default partition, ACCESS EXCLUSIVE (attaching checks it
  -- holds no row of the range).
  perform queues.lock_history_tables(
    array[_table, _table || '_default'],
    array[case when _lower <= queues.last_task_id() + greatest(_upper - _lower, 10000) then 'share'
               else 'share update exclusive' end,
          'access exclusive'],
    (select s.lock_timeout_ms from queues.history_setting s));
  perform queues.create_history_table(_table, _name);
  execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                 _table, _name, _lower, _upper);
  return true;
end;
$$;

-- Creates the partition set [_lower, _upper) of every history table (those that exist
-- already are kept), task's last: a set is in use once task has its partition. One
-- transaction; maintenance makes a set one table per step instead. Records when in
-- queues.history_partition_created. Returns whether anything was created. Owner only.
create or replace function queues.create_history_partition(_lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _created boolean := false;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _created := queues.attach_history_partition(_table, _lower, _upper) or _created;
  end loop;
  if _created then
    insert into queues.history_partition_created (lower_bound, upper_bound)
    values (_lower, _upper) on conflict (lower_bound) do nothing;
  end if;
  return _created;
end;
$$;

-- Makes [_lower, _upper) a set from rows that fell into the default partitions (tasks
-- given ids while no set covered them, and their facts): for each history table without
-- a partition of that range, a standalone table like its parent, the range's rows moved
-- into it from the table's default partition (deleted there and inserted here, in this
-- transaction), then attached. Nothing is lost or seen twice: readers of the parent see
-- each row in the default until this commits and in the new partition after. The caller
-- holds every history table's parent (SHARE) and default (ACCESS EXCLUSIVE), so no row of
-- the range is written meanwhile. Records the set in queues.history_partition_created.
-- Returns the tasks moved. Owner only.
create or replace function queues.adopt_history_range(_lower bigint, _upper bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _name text;
  _columns text;
  _moved bigint;
  _tasks bigint := 0;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'range bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _name := queues.history_partition_name(_table, _lower);
    continue when to_regclass(format('queues.%I', _name)) is not null;
    perform queues.create_history_table(_table, _name);
    -- The parent's columns by name (each quoted as an identifier), in its order.
    select string_agg(format('%I', a.attname), ', ' order by a.attnum) into _columns
      from pg_attribute a
     where a.attrelid = format('queues.%I', _table)::regclass and a.attnum > 0 and not a.attisdropped;
    execute format('with moved as (delete from queues.%I where task_id >= $1 and task_id < $2 returning %s)
                    insert into queues.%I (%s) select %s from moved',
                   _table || '_default', _columns, _name, _columns, _columns)
      using _lower, _upper;
    get diagnostics _moved = row_count;
    if _table = 'task' then
      _tasks := _moved;
    end if;
    execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                   _table, _name, _lower, _upper);
  end loop;
  insert into queues.history_partition_created (lower_bound, upper_bound)
  values (_lower, _upper) on conflict (lower_bound) do nothing;
  return _tasks;
end;
$$;

-- Every partition of every history table but the defaults, with its bounds. Owner only.
create or replace function queues.history_partition_bounds()
  returns table (table_name text, partition_name text, lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.name, c.relname::text, m.b[1]::bigint, m.b[2]::bigint
    from unnest(queues.history_tables()) t(name)
    join pg_inherits i on i.inhparent = to_regclass(format('queues.%I', t.name))
    join pg_class c on c.oid = i.inhrelid
   cross join lateral regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?\d+)''?\) TO \(''?(-?\d+)''?\)') as m(b)
   where m.b is not null
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last: bounds and the planner's
-- estimate of their tasks only, from the catalog (no relation is opened). What the list
-- endpoints walk and maintenance reads; queues.history_partitions() adds sizes.
create or replace function queues.history_sets()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  -- A bound reads FOR VALUES FROM ('<lower>') TO ('<upper>'), or DEFAULT. It holds no
  -- column, so it is deparsed without opening the partition (relation 0), and its two
  -- quoted values are the 2nd and 4th fields between quotes (a regular expression took
  -- 10 us a row).
  select nullif(split_part(b.bound, '''', 2), '')::bigint, nullif(split_part(b.bound, '''', 4), '')::bigint,
         b.relname::text, greatest(b.reltuples, 0)::bigint, b.bound = 'DEFAULT'
    from (select c.relname, c.reltuples, pg_get_expr(c.relpartbound, 0) as bound
            from pg_inherits i
            join pg_class c on c.oid = i.inhrelid
           where i.inhparent = 'queues.task'::regclass) b
   order by b.bound = 'DEFAULT', 1
$$;

-- The task id ranges [lower_bound, upper_bound) that a newest-first read of history
-- walks, newest first: the sets that can hold a task below _before (null: any) and not
-- above the last task id handed out (sets above it hold none), upper bounds capped at
-- _before. Each range is one set, except the first, which spans the two newest: the set
-- being filled may have begun a moment ago, and two partitions per table cost the planner
-- little more than one, so a page usually takes one statement. A reader that gives each
-- range's bounds to its statement as values gets a plan of these partitions only.
-- While the default partition holds a task (outside every set; normally none), one range
-- instead, (null, _before): everything below _before, in one statement.
create or replace function queues.history_walk(_before bigint)
  returns table (lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (
    select s.lower_bound, least(s.upper_bound, _before) as upper_bound,
           row_number() over (order by s.lower_bound desc) as n
      from queues.history_sets() s
     where not s.is_default
       -- once, not once per set (a call reads the sequence's catalog entry)
       and s.lower_bound <= (select queues.last_task_id())
       and (_before is null or s.lower_bound < _before)
  ),
  walk as (
    select coalesce((select b.lower_bound from s b where b.n = 2), a.lower_bound) as lower_bound, a.upper_bound
      from s a where a.n = 1
    union all
    select s.lower_bound, s.upper_bound from s where s.n > 2
  ),
  spill as (select exists (select 1 from queues.task_default) as any)
  select w.lower_bound, w.upper_bound from walk w, spill where not spill.any
  union all
  select null, _before from spill where spill.any
  order by 1 desc nulls first
$$;

-- The bytes of the sets whose lower bounds are given (a null element: the default
-- partitions), summed over every history table: the data of tables with their TOAST, and
-- of their indexes (each relation's main fork: its free space and visibility maps, a
-- fraction of a percent, are left out, which halves the files looked at). Each partition
-- is looked up by name (queues.history_partition_name) through the catalog's name index;
-- sizing opens each partition and its indexes (a lock and a file size each, about 50
-- relations a set), so this is the one place that costs per partition: callers pass
-- every set they need in one call (one plan).
create or replace function queues.history_set_bytes(_lower_bounds bigint[])
  returns table (lower_bound bigint, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select l.lower_bound,
         coalesce(sum(pg_relation_size(c.oid) + coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0)), 0)::bigint,
         coalesce(sum((select sum(pg_relation_size(i.indexrelid)) from pg_index i where i.indrelid = c.oid)), 0)::bigint
    from unnest(_lower_bounds) l(lower_bound)
   cross join unnest(queues.history_tables()) t(name)
    left join pg_class c on c.relnamespace = 'queues'::regnamespace
                        and c.relname = case when l.lower_bound is null then t.name || '_default'
                                             else queues.history_partition_name(t.name, l.lower_bound) end
   group by l.lower_bound
$$;

-- queues.history_sets() with each set's bytes (queues.history_set_bytes), every set sized
-- on each call: the History page reads queues.history_set_measured for the sets that are
-- done instead (admin.history_status_at).
create or replace function queues.history_partition_sizes()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (select * from queues.history_sets())
  select s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default,
         b.table_bytes, b.index_bytes
    from s
    join queues.history_set_bytes(array(select s.lower_bound from s)) b
      on b.lower_bound is not distinct from s.lower_bound
   order by s.is_default, s.lower_bound
$$;

-- Measures the sets that are done into queues.history_set_measured: every set whose range
-- lies below the last task id and that holds no pending task, with its bytes
-- (queues.history_set_bytes) and its oldest and newest task. Such a set's tables change
-- only by a rare late fact (a redrive, a revocation or start mark that arrives after the
-- completion) until it is dropped, so a reader that answers often (the History page, every
-- dashboard's poll and /metrics) takes its figures from here and sizes only the sets still
-- filling. A row is written only when a figure changed; rows of sets no longer there are
-- deleted. Maintenance calls it at the end of each run (queues.maintain_history_step_at).
-- Returns the number of sets whose figures were written. Owner only.
create or replace function queues.measure_history_sets(_now timestamptz)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _last_id bigint := queues.last_task_id();
  _written integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  delete from queues.history_set_measured m
   where not exists (select 1 from queues.history_sets() s
                      where s.lower_bound = m.lower_bound and s.upper_bound = m.upper_bound);
  with done as (
    select s.lower_bound, s.upper_bound
      from queues.history_sets() s
     where not s.is_default and s.upper_bound <= _last_id
       and not exists (select 1 from queues.task_pending tp
                        where tp.task_id >= s.lower_bound and tp.task_id < s.upper_bound)
  ),
  measured as (
    select d.lower_bound, d.upper_bound, f.task_id as first_task_id, f.enqueued_at as first_enqueued_at,
           n.task_id as last_task_id, b.table_bytes, b.index_bytes
      from done d
      join queues.history_set_bytes(array(select d.lower_bound from done d)) b on b.lower_bound = d.lower_bound
      left join lateral (select t.task_id, t.enqueued_at from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id limit 1) f on true
      left join lateral (select t.task_id from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id desc limit 1) n on true
  )
  insert into queues.history_set_measured as m
         (lower_bound, upper_bound, first_task_id, first_enqueued_at, last_task_id, table_bytes, index_bytes,
          measured_at)
  select x.lower_bound, x.upper_bound, x.first_task_id, x.first_enqueued_at, x.last_task_id, x.table_bytes,
         x.index_bytes, _now
    from measured x
  on conflict (lower_bound) do update
     set upper_bound = excluded.upper_bound, first_task_id = excluded.first_task_id,
         first_enqueued_at = excluded.first_enqueued_at, last_task_id = excluded.last_task_id,
         table_bytes = excluded.table_bytes, index_bytes = excluded.index_bytes, measured_at = excluded.measured_at
   where (m.upper_bound, m.first_task_id, m.first_enqueued_at, m.last_task_id, m.table_bytes, m.index_bytes)
         is distinct from (excluded.upper_bound, excluded.first_task_id, excluded.first_enqueued_at,
                           excluded.last_task_id, excluded.table_bytes, excluded.index_bytes);
  get diagnostics _written = row_count;
  return _written;
end;
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last. Sizes are summed over
-- every history table (tables, TOAST and indexes); tasks is the planner's estimate.
create or replace function queues.history_partitions()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, total_bytes bigint, is_default boolean)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.lower_bound, p.upper_bound, p.partition_name, p.estimated_tasks,
         p.table_bytes + p.index_bytes, p.is_default
    from queues.history_partition_sizes() p
   order by p.is_default, p.lower_bound
$$;

-- The last task id handed out (0 before the first task).
create or replace function queues.last_task_id() returns bigint
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(pg_sequence_last_value(pg_get_serial_sequence('queues.task', 'task_id')::regclass), 0)
$$;

-- One step of partition maintenance at _now: the first of these that has work to do,
-- locking one table only (see "Locks" above), its locks taken between the queue's
-- transactions within lock_timeout_ms (queues.lock_history_tables):
-- 1. Sets ahead of need, one table per step: first a set left half made (some table has
--    its partition, task not yet; task's is made last), then a new set above every range
--    there is or was and above any task in the default partition, of partition_size task
--    ids, while the sets above the last task id handed out cover less than
--    partitions_ahead * partition_size ids. A set less than partition_size ids above the
--    last id (maintenance fell behind) is made whole in one step instead, above the last id.
-- 1b. Tasks in the default partition (ids handed out while no set covered them) are made
--    a set with their facts, at most 2,000 tasks per step: a half made set they fell into
--    is finished so, or a range of the gap they lie in (queues.adopt_history_range).
-- 2. A table detached from a dropped set is dropped (truncated first if it has rows and
--    a foreign key).
-- 3. A fact table's partition of a dropped set is detached.
-- 4. The oldest set that may go is dropped, starting with its task partition, which is
--    detached (the set's tasks are gone from then on; steps 3 and 2 take its facts and the
--    detached tables away): a set goes when its whole range lies below the last task id
--    (no new task can land in it), it holds no pending task (queues.task_pending, then
--    every task checked against its completion), and its newest completion is older than
--    the retention window. A set with one pending task is kept, however old.
-- 5. With nothing else to do: the sets that are done are measured for the History page
--    (queues.measure_history_sets).
-- Drops are recorded in queues.history_partition_dropped. A step that cannot get its lock
-- in time (or finds a task fell into the default partition in the range it makes) is
-- rolled back, recorded in queues.history_step_skipped and reported skipped; the run goes
-- on ("more") until 5 steps have been skipped within a minute. Returns
--   {"action": "attached" | "set_created" | "set_adopted" | "dropped_table" | "truncated" | "detached" |
--              "set_dropped" | "none" | "skipped" | "busy",
--    "table", "lower_bound", "upper_bound", "tasks", "reason", "late": as they apply,
--    "measured": with "none", the sets whose figures step 5 wrote,
--    "kept": sets below the last task id kept so far, "more": whether to call again}
-- "busy": another maintenance step is in flight (one maintainer at a time). Owner only.
create or replace function queues.maintain_history_step_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  -- A bound for any other lock a statement here might wait for (its own are taken
  -- first, without waiting); restored when the function returns.
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint;
  _doing text;
  _table text;
  _name text;
  _lower bigint;
  _upper bigint;
  _truncate boolean;
  _kept integer := 0;
  _set record;
  _tasks bigint;
  _last_completed timestamptz;
  _measured integer;
  _spilled bigint;
  _gap_lower bigint;
  _gap_upper bigint;
  -- The locks that keep every writer of history out (a late set, a move out of the
  -- default partitions): SHARE on each parent, ACCESS EXCLUSIVE on its default.
  _writers_out text[] := array(select x from unnest(queues.history_tables()) t(name),
                                 lateral (values (t.name), (t.name || '_default')) v(x));
  _writers_out_modes text[] := array(select m from unnest(queues.history_tables()) t(name),
                                       lateral (values ('share'), ('access exclusive')) v(m));
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if not pg_try_advisory_xact_lock(20252, 1) then
    return jsonb_build_object('action', 'busy', 'more', false);
  end if;
  select * into _setting from queues.history_setting;
  _last_id := queues.last_task_id();

  begin
    -- 1. Ahead of need: a half made set, unless a task fell into the default partition in
    --    its range (maintenance fell behind while it was half made): then task's
    --    partition cannot be attached, new sets start above it, and step 1b finishes it
    --    by moving those tasks into it.
    with b as (select * from queues.history_partition_bounds())
    select h.lower_bound, h.upper_bound into _lower, _upper
      from (select distinct b.lower_bound, b.upper_bound from b) h
     where not exists (select 1 from b x where x.table_name = 'task' and x.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.task_default t where t.task_id >= h.lower_bound and t.task_id < h.upper_bound)
     order by h.lower_bound
     limit 1;
    if _lower is null then
      -- A new set. Ranges are never reused: above every partition there is or was, and
      -- above any task in the default partition (a new set cannot overlap rows there).
      select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                      coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                      coalesce((select max(t.task_id) + 1 from queues.task_default t), 0))
        into _lower;
      if _lower < _last_id + 1 + _setting.partitions_ahead::bigint * _setting.partition_size then
        _upper := _lower + _setting.partition_size;
      else
        _lower := null;
      end if;
    end if;
    if _lower is not null and _lower <= _last_id + _setting.partition_size then
      -- Late: less than one set's width of ids is left before the ids handed out reach
      -- the set (maintenance fell behind). Made table by table, it could be outrun: a
      -- task given an id in its range before task's partition exists falls into the
      -- default partition, its facts into theirs, and the next table's attach fails on
      -- them, run after run. So the whole set is made in this one step, under locks
      -- that keep every writer of history out (SHARE on each parent, ACCESS EXCLUSIVE on
      -- each default), starting above the last id read under them: no task of its range
      -- exists, and none can be written until it commits. The ids handed out before it
      -- fall into the default partitions (queues.history_summary_at counts them).
      _doing := format('make the set from %s at once (late)', _lower);
      perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
      _last_id := queues.last_task_id();
      if exists (select 1 from queues.history_partition_bounds() b where b.lower_bound = _lower)
         and not exists (select 1 from queues.task_default t where t.task_id >= _lower and t.task_id < _upper) then
        null; -- a half made set that no task has reached: finished as it is
      else
        select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                        coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                        coalesce((select max(t.task_id) + 1 from queues.task_default t), 0),
                        _last_id + 1)
          into _lower;
        _upper := _lower + _setting.partition_size;
      end if;
      perform queues.create_history_partition(_lower, _upper);
      return jsonb_build_object('action', 'set_created', 'table', queues.history_partition_name('task', _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'late', true, 'more', true);
    end if;
    if _lower is not null then
      select t.name into _table
        from unnest(queues.history_tables()) with ordinality t(name, n)
       where to_regclass(format('queues.%I', queues.history_partition_name(t.name, _lower))) is null
       order by t.name = 'task', t.n
       limit 1;
      _doing := format('attach queues.%I', queues.history_partition_name(_table, _lower));
      perform queues.attach_history_partition(_table, _lower, _upper);
      if _table = 'task' then
        insert into queues.history_partition_created (lower_bound, upper_bound)
        values (_lower, _upper) on conflict (lower_bound) do nothing;
      end if;
      return jsonb_build_object('action', case when _table = 'task' then 'set_created' else 'attached' end,
                                'table', queues.history_partition_name(_table, _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'more', true);
    end if;

    -- 1b. Tasks in the default partition (ids handed out while no set covered them): the
    --    range around the lowest is made a set, its rows moved out of the default
    --    partitions (queues.adopt_history_range), so that retention drops them with it
    --    and pending ones stay claimable. The range: a half made set's own (finished so),
    --    or the gap between the ranges there are or were, below the lowest range above
    --    the task and cut after its 2,000th task (a step moves at most that many tasks,
    --    with their facts, under its locks). Not while no range lies above the task: the
    --    ids may still be handed out, and step 1 makes the set above them first.
    select t.task_id into _spilled from queues.task_default t order by t.task_id limit 1;
    if _spilled is not null then
      with r as (
        select b.lower_bound, b.upper_bound from queues.history_partition_bounds() b
        union all
        select d.lower_bound, d.upper_bound from queues.history_partition_dropped d
      )
      select (select min(r.lower_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             (select max(r.upper_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             coalesce((select max(r.upper_bound) from r where r.upper_bound <= _spilled), 0),
             (select min(r.lower_bound) from r where r.lower_bound > _spilled)
        into _lower, _upper, _gap_lower, _gap_upper;
      if _lower is null and _gap_upper is not null then
        -- The gap, cut after its 2,000th task.
        _lower := _gap_lower;
        _upper := least(_gap_upper,
                        coalesce((select t.task_id from queues.task_default t
                                   where t.task_id >= _spilled and t.task_id < _gap_upper
                                   order by t.task_id offset 2000 limit 1), _gap_upper));
      end if;
      if _upper is not null and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = _lower) then
        _doing := format('adopt the default partitions'' tasks in [%s, %s)', _lower, _upper);
        perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
        _tasks := queues.adopt_history_range(_lower, _upper);
        return jsonb_build_object('action', 'set_adopted', 'table', queues.history_partition_name('task', _lower),
                                  'lower_bound', _lower, 'upper_bound', _upper, 'tasks', _tasks, 'more', true);
      end if;
    end if;

    -- 2. A table detached from a dropped set (named as a partition, no longer one). Its
    --    drop locks only itself, so its files are unlinked under no lock the queue waits
    --    for; but dropping a foreign key takes ACCESS EXCLUSIVE on the table it
    --    references, so a table with one (none has today) is truncated first (under its
    --    own lock) and that drop is a catalog change only.
    select c.relname,
           pg_relation_size(c.oid) > 0 and exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'f')
      into _name, _truncate
      from pg_class c
      join unnest(queues.history_tables()) t(name)
        on c.relname = queues.history_partition_name(t.name, substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     where c.relnamespace = 'queues'::regnamespace and c.relkind = 'r' and not c.relispartition
       and exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     order by c.relname
     limit 1;
    if _name is not null then
      if _truncate then
        _doing := format('truncate queues.%I', _name);
        execute format('truncate queues.%I', _name);
        return jsonb_build_object('action', 'truncated', 'table', _name, 'more', true);
      end if;
      _doing := format('drop queues.%I', _name);
      execute format('drop table queues.%I', _name);
      return jsonb_build_object('action', 'dropped_table', 'table', _name, 'more', true);
    end if;

    -- 3. A fact table's partition of a dropped set: detached, a catalog change.
    select b.table_name, b.partition_name, b.lower_bound, b.upper_bound into _table, _name, _lower, _upper
      from queues.history_partition_bounds() b
     where exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = b.lower_bound and d.upper_bound = b.upper_bound)
     order by b.lower_bound, b.table_name
     limit 1;
    if _name is not null then
      _doing := format('detach queues.%I', _name);
      perform queues.lock_history_tables(array[_table, _name, _table || '_default'],
                                         array['access exclusive', 'access exclusive', 'access exclusive'],
                                         _setting.lock_timeout_ms);
      execute format('alter table queues.%I detach partition queues.%I', _table, _name);
      return jsonb_build_object('action', 'detached', 'table', _name, 'lower_bound', _lower, 'upper_bound', _upper,
                                'more', true);
    end if;

    -- 4. Expired sets, oldest first.
    for _set in
      select p.lower_bound, p.upper_bound from queues.history_sets() p
       where not p.is_default and p.upper_bound <= _last_id
       order by p.lower_bound
    loop
      -- Cheap checks first, without strong locks: a pending task, or a recent completion.
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      select max(c.completed_at) into _last_completed from queues.task_completed c
       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound;
      if _last_completed > _now - _setting.retention then
        _kept := _kept + 1;
        continue;
      end if;
      -- Every task completed, from the facts (one scan of the set's two partitions).
      select count(*) into _tasks from queues.task t
       where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound;
      if exists (select 1 from queues.task t
                  where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound
                    and not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)) then
        _kept := _kept + 1;
        continue;
      end if;

      _name := queues.history_partition_name('task', _set.lower_bound);
      _doing := format('detach queues.%I', _name);
      begin
        -- Detaching holds ACCESS EXCLUSIVE on queues.task and the partition, so no
        -- transaction that wrote to the set or read it to complete a task is still open:
        -- check again what could have changed (a task enqueued with an id handed out
        -- before the checks, and its completion).
        perform queues.lock_history_tables(array['task', _name, 'task_default'],
                                           array['access exclusive', 'access exclusive', 'access exclusive'],
                                           _setting.lock_timeout_ms);
        execute format('alter table queues.task detach partition queues.%I', _name);
        if exists (select 1 from queues.task_pending tp
                    where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_completed c
                       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                         and c.completed_at > _now - _setting.retention) then
          -- Roll the block back, which attaches the partition again.
          raise exception 'set [%, %) changed since it was checked', _set.lower_bound, _set.upper_bound
            using errcode = 'QH001';
        end if;
        insert into queues.history_partition_dropped (lower_bound, upper_bound, tasks, last_completed_at, dropped_at)
        values (_set.lower_bound, _set.upper_bound, _tasks, _last_completed, _now);
        return jsonb_build_object('action', 'set_dropped', 'table', _name, 'lower_bound', _set.lower_bound,
                                  'upper_bound', _set.upper_bound, 'tasks', _tasks, 'kept', _kept, 'more', true);
      exception
        when sqlstate 'QH001' then
          _kept := _kept + 1;
      end;
    end loop;

    -- 5. Nothing left to change: the sets that are done are measured for the readers.
    _measured := queues.measure_history_sets(_now);
    delete from queues.history_step_skipped k where k.skipped_at < _now - interval '1 day';
  exception
    -- check_violation: a task landed in a default partition, in the range being made,
    -- since it was read above; the next step starts above it. The skip is recorded, and
    -- the run goes on (a later try may find its moment) until 5 steps have been skipped
    -- within a minute.
    when lock_not_available or deadlock_detected or check_violation then
      insert into queues.history_step_skipped (step, reason) values (coalesce(_doing, 'a step'), sqlerrm);
      return jsonb_build_object('action', 'skipped', 'step', _doing, 'reason', sqlerrm, 'kept', _kept,
                                'more', (select count(*) from queues.history_step_skipped k
                                          where k.skipped_at > clock_timestamp() - interval '1 minute') < 5);
  end;
  return jsonb_build_object('action', 'none', 'kept', _kept, 'measured', _measured, 'more', false);
end;
$$;

-- Partition maintenance at _now, every step of queues.maintain_history_step_at in one
-- transaction, until none is left or one is skipped: its locks are held until that
-- transaction ends, so this is for tests and for running it by hand; the schedule runs
-- each step in a transaction of its own (queues.maintain_history_step). Returns
--   {"created": [[lo, hi], ...], "dropped": [[lo, hi], ...], "skipped": [{...}], "kept": n}
create or replace function queues.maintain_history_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _created jsonb := '[]';
  _dropped jsonb := '[]';
  _skipped jsonb := '[]';
  _adopted jsonb := '[]';
  _kept integer := 0;
  _step jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  -- Each step changes the catalog or ends the run (skips end it after 5 within a minute);
  -- the bound only guards against a bug.
  for _i in 1 .. 100000 loop
    _step := queues.maintain_history_step_at(_now);
    case _step ->> 'action'
      when 'set_created' then
        _created := _created || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_dropped' then
        _dropped := _dropped || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_adopted' then
        _adopted := _adopted || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'skipped', 'busy' then
        _skipped := _skipped || jsonb_build_array(_step);
      else
        null;
    end case;
    _kept := coalesce((_step ->> 'kept')::integer, _kept);
    exit when not (_step ->> 'more')::boolean;
  end loop;
  return jsonb_build_object('created', _created, 'dropped', _dropped, 'adopted', _adopted, 'skipped', _skipped,
                            'kept', _kept);
end;
$$;

-- A db_function step: maintain_history_at(now()), every step in the caller's transaction
-- (for a one-off run; the schedule runs queues.maintain_history_step).
create or replace function queues.maintain_history(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_at(now()))
$$;

-- The schedule's step: one step of maintenance (maintain_history_step_at(now())), its
-- report as the payload of a success envelope. The schedule's payload asks the worker to
-- call it again while the report says "more" ("repeat": true, see the worker's
-- db_function processor), each call a transaction of its own, so that no step's lock is
-- held while another step runs.
create or replace function queues.maintain_history_step(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_step_at(now()))
$$;

-- What operators watch, without the list of sets: the settings, the oldest retained task,
-- and the next drop (the lowest set below the last task id with its newest completion: it
-- can go at last_completed_at + retention, unless it holds pending tasks). Each read of
-- a partitioned table is pruned at plan time to the set it needs (EXECUTE with the set's
-- bounds as values), so the cost does not grow with the number of sets beyond the catalog
-- read of their bounds.
create or replace function queues.history_summary_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _set record;
  _next record;
  _next_json jsonb;
  _oldest_id bigint;
  _oldest_at timestamptz;
  _default_id bigint;
  _default_at timestamptz;
  _last_completed timestamptz;
  _pending bigint;
begin
  select * into _setting from queues.history_setting;
  -- The oldest task: in the lowest set that holds one (or in the default partition).
  for _set in
    select s.lower_bound, s.upper_bound from queues.history_sets() s
     where not s.is_default and s.lower_bound <= _last_id
     order by s.lower_bound
  loop
    execute 'select t.task_id, t.enqueued_at from queues.task t
              where t.task_id >= $1 and t.task_id < $2 order by t.task_id limit 1'
      into _oldest_id, _oldest_at using _set.lower_bound, _set.upper_bound;
    exit when _oldest_id is not null;
  end loop;
  select t.task_id, t.enqueued_at into _default_id, _default_at from queues.task_default t order by t.task_id limit 1;
  if _default_id < _oldest_id or _oldest_id is null then
    _oldest_id := _default_id;
    _oldest_at := _default_at;
  end if;

  select s.lower_bound, s.upper_bound into _next
    from queues.history_sets() s
   where not s.is_default and s.upper_bound <= _last_id
   order by s.lower_bound
   limit 1;
  if found then
    execute 'select max(c.completed_at) from queues.task_completed c where c.task_id >= $1 and c.task_id < $2'
      into _last_completed using _next.lower_bound, _next.upper_bound;
    _pending := (select count(*) from queues.task_pending tp
                  where tp.task_id >= _next.lower_bound and tp.task_id < _next.upper_bound);
    _next_json := jsonb_build_object(
      'lower_bound', _next.lower_bound, 'upper_bound', _next.upper_bound,
      'pending_tasks', _pending,
      'last_completed_at', _last_completed,
      'drop_after', case when _pending = 0 then coalesce(_last_completed + _setting.retention, _now) end);
  end if;
  return jsonb_build_object(
    'retention_seconds', extract(epoch from _setting.retention)::bigint,
    'partition_size', _setting.partition_size,
    'partitions_ahead', _setting.partitions_ahead,
    'last_task_id', _last_id,
    'oldest_task_id', _oldest_id,
    'oldest_enqueued_at', _oldest_at,
    'default_partition_tasks', (select count(*) from queues.task_default),
    'next_drop', _next_json,
    'dropped_sets', (select count(*) from queues.history_partition_dropped),
    'skipped_steps_last_hour', (select count(*) from queues.history_step_skipped k where k.skipped_at > _now - interval '1 hour'),
    'last_skipped_step', (select jsonb_build_object('skipped_at', k.skipped_at, 'step', k.step, 'reason', k.reason)
                            from queues.history_step_skipped k order by k.skipped_at desc limit 1),
    'last_dropped_at', (select max(d.dropped_at) from queues.history_partition_dropped d));
end;
$$;

-- queues.history_summary_at(_now) and the sets with their sizes (queues.history_partitions()).
create or replace function queues.history_status_at(_now timestamptz)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.history_summary_at(_now) || jsonb_build_object(
    'partitions', coalesce((select jsonb_agg(jsonb_build_object(
        'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'name', p.partition_name,
        'estimated_tasks', p.estimated_tasks, 'total_bytes', p.total_bytes, 'is_default', p.is_default)
        order by p.is_default, p.lower_bound)
      from queues.history_partitions() p), '[]'))
$$;

-- The worker runs maintenance as the db_function task of its schedule; operators read the
-- status through admin.history_status(). Everything else here is owner only. Granted
-- here, beside the functions, so that a migration including sql/queues/privileges.sql
-- before this file does not name a function that does not exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.maintain_history_step_at(timestamptz),
  queues.history_status_at(timestamptz), queues.history_summary_at(timestamptz), queues.history_partitions(),
  queues.history_partition_bounds(), queues.history_sets(), queues.history_partition_sizes(),
  queues.history_set_bytes(bigint[]), queues.measure_history_sets(timestamptz),
  queues.history_walk(bigint), queues.create_history_partition(bigint, bigint),
  queues.attach_history_partition(text, bigint, bigint), queues.lock_history_tables(text[], text[], integer),
  queues.adopt_history_range(bigint, bigint), queues.create_history_table(text, text),
  queues.cancel_autovacuum(text[])
  from public;
grant execute on function queues.maintain_history(jsonb), queues.maintain_history_step(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
select internal.register_runnable_function('queues.maintain_history_step(jsonb)');
--! EndIncluded queues/partitions.sql

--! split: 660-start-mark-probes.sql
-- queues.mark_started probes each lease by primary key (scalar subqueries): its EXISTS
-- probes could be planned as hashed subplans that read the whole table once per call
-- (task_completed when a completion committed before the mark of its start).
set local lock_timeout = '5s';

--! Included queues/start.sql
-- Marks tasks started (queues.task_lease_started): the worker's start recorder calls it
-- for every task it runs, in the instant the task starts, so the queue knows which of a
-- dead worker's leases were started (those count towards abandonment and make their task
-- a suspect; the leases of tasks that only waited in its local queue count for nothing).
-- A lease that is still its task's current lease is marked, and so is one that its own
-- settlement already ended (completed, failed an attempt, interrupted): the completion
-- of a fast task, or a step that ran in the database, may commit before the mark of its
-- start, and that task did start. Returns the task ids whose lease was neither: taken
-- over by another worker (revoked, expired) or released.
-- Set-based and lean (one statement for the leases still held, the usual case; no per-row
-- work): it runs once per group of tasks starting together, so its cost is paid per task.
create or replace function queues.mark_started(_task_ids bigint[], _task_lease_ids bigint[])
  returns setof bigint
  language plpgsql volatile
  rows 1
  security definer
  set plan_cache_mode = force_generic_plan
  -- Every row it reads is found by key. Its plans are made once per connection, and a
  -- table that was small then (a fresh set of history partitions) would be scanned whole
  -- for each lease once it has grown.
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _not_held bigint[];
  _not_held_leases bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  -- One pass over the input, each pair probed by primary key (a subquery, so no join of
  -- the input to task_pending is planned from its statistics; a statement of 500 starts
  -- stays linear). Marks the held leases; collects the others. Each probe is a scalar
  -- subquery, not EXISTS: the planner may turn an EXISTS into a hashed subplan, which reads
  -- the whole table once per call, and this plan is made once per connection, from
  -- whatever the statistics said then (a small table at the time).
  with input as (
    select i.task_id, i.task_lease_id,
           coalesce((select true from queues.task_pending p
                      where p.task_id = i.task_id and p.current_lease_id = i.task_lease_id), false) as held
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id)
    select i.task_id, i.task_lease_id from input i where i.held
    on conflict do nothing
  )
  select array_agg(i.task_id), array_agg(i.task_lease_id) into _not_held, _not_held_leases
    from input i where not i.held;
  if _not_held is null then
    return;
  end if;
  -- The few that are not held (normally none): a lease that its own settlement already
  -- ended is marked too. A statement of its own, run only then: its plan locks every
  -- partition of three history tables, which the attach of a new partition must wait for.
  return query
  with ended as (
    select i.task_id, i.task_lease_id,
           -- Probes by primary key (scalar subqueries, as above: as an EXISTS, this read
           -- the whole of task_completed, 3.4 ms a call at 20,000 completed tasks).
           coalesce((select true from queues.task_completed c
                      where c.task_id = i.task_id and c.task_lease_id = i.task_lease_id), false)
           or coalesce((select true from queues.task_attempt_failed f
                         where f.task_id = i.task_id and f.task_lease_id = i.task_lease_id limit 1), false)
           or coalesce((select true from queues.task_interruption x
                         where x.task_id = i.task_id and x.task_lease_id = i.task_lease_id limit 1), false) as started
      from unnest(_not_held, _not_held_leases) as i(task_id, task_lease_id)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id)
    select e.task_id, e.task_lease_id from ended e where e.started
    on conflict do nothing
  )
  select e.task_id from ended e where not e.started;
end;
$$;
--! EndIncluded queues/start.sql

--! split: 680-maintenance-cancels-autovacuum.sql
-- A maintenance step blocked by an autovacuum of a table it must lock cancels it
-- (queues.cancel_autovacuum, sql/queues/partitions.sql), as PostgreSQL does for a lock
-- that waited deadlock_timeout, which a step never waits.
set local lock_timeout = '5s';

--! Included queues/partitions.sql
-- History partitions: queues.task and every fact table keyed by task are range-partitioned
-- by task_id, all on the same bounds (a "partition set"). Old history leaves by dropping a
-- whole set, never by row-by-row DELETE. Settings: queues.history_setting; what was
-- dropped: queues.history_partition_dropped (both in migrations/committed/000004); when
-- each set was created: queues.history_partition_created.
--
-- Why task_id and not time: every fact carries task_id, so a row is routed without an
-- extra column; a task and all its facts sit in the same set, so a set can be dropped
-- alone; every lookup of the hot path is by task_id, so it is pruned to one partition;
-- and ids only grow, so a set whose range lies below the id sequence receives no new
-- task. docs/operations.md ("Retention and partitions") has the full reasoning.
--
--   queues.history_tables()                    the partitioned tables, parent first
--   queues.lock_history_tables(t, m, ms)       a step's locks, between transactions; owner only
--   queues.cancel_autovacuum(t)                cancels autovacuum of tables a step must lock; owner only
--   queues.create_history_table(t, name)       a standalone table like t, to attach; owner only
--   queues.attach_history_partition(t, lo, hi) one table's partition of a set, owner only
--   queues.create_history_partition(lo, hi)    one set [lo, hi), owner only
--   queues.adopt_history_range(lo, hi)         a set [lo, hi) of rows in the default
--                                              partitions, moved out of them; owner only
--   queues.history_partition_bounds()          every table's partitions and their bounds
--   queues.history_sets()                      the sets' bounds, from the catalog only
--   queues.history_walk(_before)               the id ranges a newest-first read walks
--   queues.history_set_bytes(lower_bounds)     the table and index bytes of the sets given
--   queues.history_partition_sizes()           the sets with table and index bytes
--   queues.measure_history_sets(_now)          the sets that are done, measured for readers
--                                              (queues.history_set_measured); owner only
--   queues.history_partitions()                the sets with their total bytes
--   queues.maintain_history_step_at(_now)      one short step of maintenance; owner only
--   queues.maintain_history_step(payload)      the same at now(), a runnable db_function
--                                              (the schedule's: one transaction per step)
--   queues.maintain_history_at(_now)           every step in one transaction; owner only
--   queues.maintain_history(payload)           the same at now(), a runnable db_function
--   queues.history_summary_at(_now)            settings, oldest task, what the next drop waits for
--   queues.history_status_at(_now)             the same with the sets and their sizes
--
-- Locks. The claim and the completion read queues.task, task_lease_started and
-- task_completed through generic plans, which lock every partition of those tables,
-- default included, and every writer takes ROW EXCLUSIVE on the parents. So each step
-- locks one table (its parent, the partition, the default) in the order the hot path
-- takes its own (parent, then partition, then default), without waiting in a lock queue
-- (queues.lock_history_tables: asked for without waiting, again every few ms, for up to
-- lock_timeout_ms, then one last try that waits at most 50 ms), and holds the locks only
-- for a catalog change, in a transaction of its own when run by the schedule
-- (queues.maintain_history_step with "repeat"): a claim waits behind maintenance at most
-- 50 ms plus that change. Measured locks (PostgreSQL 18):
--   create table .. partition of     ACCESS EXCLUSIVE on the parent and its default: not used
--   create table (like ..) + attach  SHARE UPDATE EXCLUSIVE on the parent (no conflict with
--                                    DML), ACCESS EXCLUSIVE on the default partition (a
--                                    conflict only for task, task_lease_started and
--                                    task_completed, whose defaults the hot path's plans lock)
--                                    and, for a set made late (its range within reach of the
--                                    ids handed out), SHARE on the parent first: writers of
--                                    that table wait for the attach (a writer that routed its
--                                    row before the attach commits would fail on the
--                                    default's new constraint; see attach_history_partition)
--   detach partition                 ACCESS EXCLUSIVE on the parent, default and partition;
--                                    catalog only (no scan); detach concurrently is refused
--                                    while a default partition exists, and in a function
--   drop table (attached partition)  the same plus unlinking its files under those locks:
--                                    not used; a detached table is dropped instead, which
--                                    locks only itself, except a table with a foreign key
--                                    (none today), whose drop takes ACCESS EXCLUSIVE on
--                                    the table it references: it is truncated first (under
--                                    its own lock only), so that drop is a catalog change

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now']
$$;

-- The partition of _table holding [_lower, _upper) is named <table>_p<lower>.
-- No SET clause: a function with one is never inlined, and the status pages name every
-- partition of every set with it (196 calls at 14 sets). It names no object, so the
-- search path cannot change what it does (like admin.pending_state).
create or replace function queues.history_partition_name(_table text, _lower bigint) returns text
  language sql immutable parallel safe
as $$
  select _table || '_p' || _lower::text
$$;

-- Cancels the autovacuum workers that hold a lock on one of _tables (names in schema
-- queues) in this database, as PostgreSQL itself does for a lock request that has waited
-- deadlock_timeout (1 s): a maintenance step never waits that long (claims would queue
-- behind it), so without this a long autovacuum of a default partition or of a set kept
-- every step that must lock that table skipping until it ended. Autovacuum comes back
-- later. An autovacuum that prevents wraparound (the table's age past
-- autovacuum_freeze_max_age or autovacuum_multixact_freeze_max_age) is left alone, as
-- PostgreSQL leaves it. Needs membership in pg_signal_autovacuum_worker (PostgreSQL 18;
-- the owner gets it when the database users are provisioned, docs/operations.md);
-- without it, nothing is cancelled. Returns how many were cancelled. Owner only.
create or replace function queues.cancel_autovacuum(_tables text[])
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pid integer;
  _cancelled integer := 0;
begin
  for _pid in
    select distinct l.pid
      from pg_locks l
      join pg_stat_activity a on a.pid = l.pid
      join pg_class c on c.oid = l.relation
     where l.locktype = 'relation' and l.granted
       and l.database = (select d.oid from pg_database d where d.datname = current_database())
       -- An autovacuum worker runs as no role: its usesysid is null, and a role without
       -- pg_read_all_stats sees its backend_type as null too (it is shown to those with it).
       and a.usesysid is null and coalesce(a.backend_type, 'autovacuum worker') = 'autovacuum worker'
       and c.relnamespace = 'queues'::regnamespace and c.relname = any (_tables)
       and age(c.relfrozenxid) < current_setting('autovacuum_freeze_max_age')::bigint
       and mxid_age(c.relminmxid) < current_setting('autovacuum_multixact_freeze_max_age')::bigint
  loop
    begin
      if pg_cancel_backend(_pid) then
        _cancelled := _cancelled + 1;
      end if;
    exception
      when insufficient_privilege then
        return _cancelled;
    end;
  end loop;
  return _cancelled;
end;
$$;

-- Takes the locks of one maintenance step, _modes[i] on queues._tables[i] (only the table
-- named: a partitioned parent's partitions are not locked with it), in order, without
-- waiting in a lock queue until its last try: each try asks for every lock with NOWAIT,
-- and a try that meets a holder gives back what it took and tries again 1 to 4 ms later,
-- until the locks are had or _within_ms has passed; then one last try waits in the queue
-- for at most 50 ms, and failing that, lock_not_available (55P03, naming the tables and
-- the tries). Why not wait: a lock request that waits holds every later request behind
-- it, so a claim would queue behind maintenance for as long as the longest transaction in
-- flight keeps maintenance waiting (a batch of server-side steps holds task's partitions
-- for tens of milliseconds; under a steady load one is always in flight, so a waiting
-- request rarely got its lock within a short lock_timeout). Asking without waiting takes
-- the moments between transactions and leaves the queue's own order alone (but see the
-- two 50 ms below). Modes: 'share update exclusive', 'share', 'access exclusive'. Returns
-- the tries it took. Owner only.
create or replace function queues.lock_history_tables(_tables text[], _modes text[], _within_ms integer)
  returns integer
  language plpgsql volatile
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _deadline timestamptz;
  _tries integer := 0;
  _last boolean;
  _last_until timestamptz;
  _autovacuum_cancelled boolean := false;
begin
  if _tables is null or _modes is null or cardinality(_tables) = 0 or cardinality(_tables) <> cardinality(_modes) then
    raise exception 'tables and modes must be non-empty arrays of the same length' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m is null or m not in ('share update exclusive', 'share', 'access exclusive')) then
    raise exception 'a lock mode must be share update exclusive, share or access exclusive, got %', _modes
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_tables) t where t is null or to_regclass(format('queues.%I', t)) is null) then
    raise exception 'every table must name a table in schema queues, got %', _tables using errcode = '22023';
  end if;
  if _within_ms is null or _within_ms < 0 then
    raise exception 'within_ms must be 0 or more, got %', _within_ms using errcode = '22023';
  end if;
  -- A transaction that already holds a lock of this kind (steps run together, as in
  -- queues.maintain_history_at, or a partition made earlier in it) keeps the queue
  -- waiting while it tries, and a holder in its way may be waiting for it: it tries for
  -- at most 50 ms then.
  if exists (select 1 from pg_locks l
              where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.granted
                and l.mode in ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                               'ExclusiveLock', 'AccessExclusiveLock')) then
    _within_ms := least(_within_ms, 50);
  end if;
  _deadline := clock_timestamp() + make_interval(secs => _within_ms / 1000.0);
  loop
    _tries := _tries + 1;
    -- The last try, once the window has passed, waits in the queue for at most 50 ms
    -- (restored on return): transactions that follow one another without a moment
    -- between (one connection's statements back to back) are waited for, and whatever
    -- queues behind this try waits no longer.
    -- The 50 ms are for the whole try, however many tables it locks (each lock waits
    -- only for what is left of them).
    _last := clock_timestamp() >= _deadline;
    _last_until := clock_timestamp() + make_interval(secs => greatest(least(_within_ms, 50), 1) / 1000.0);
    begin
      for _i in 1 .. cardinality(_tables) loop
        if _last then
          perform set_config('lock_timeout',
            greatest(ceil(extract(epoch from _last_until - clock_timestamp()) * 1000), 1)::integer || 'ms', true);
        end if;
        -- The mode is one of the three above (checked), the table quoted as an identifier.
        execute format('lock table only queues.%I in %s mode%s', _tables[_i], _modes[_i],
                       case when _last then '' else ' nowait' end);
      end loop;
      return _tries;
    exception
      when lock_not_available then
        -- The block's locks are given back with it. An autovacuum in the way is cancelled
        -- (once per call); the next try, a few ms later, finds the table free.
        if not _autovacuum_cancelled then
          _autovacuum_cancelled := true;
          perform queues.cancel_autovacuum(_tables);
        end if;
    end;
    exit when _last;
    perform pg_sleep((1 + random() * 3) / 1000.0);
  end loop;
  raise exception 'could not lock % in % tries over % ms: other transactions held them throughout',
    array_to_string(_tables, ', '), _tries, _within_ms
    using errcode = '55P03';
end;
$$;

-- Creates queues._name, a standalone table like the history table _table (columns,
-- defaults, constraints, indexes) with the trigger that refuses updates (a statement
-- trigger on the parent does not fire for a statement that names the partition), to be
-- attached as its partition. Owner only.
create or replace function queues.create_history_table(_table text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('create table queues.%I (like queues.%I including defaults including constraints including indexes including storage)',
                 _name, _table);
  execute format('create trigger forbid_update before update on queues.%I
                    for each statement execute function queues.forbid_fact_update()', _name);
end;
$$;

-- Makes the partition [_lower, _upper) of the history table _table unless it exists: a
-- standalone table like its parent (columns, defaults, constraints, indexes) with the
-- trigger that refuses updates (a statement trigger on the parent does not fire for a
-- statement that names the partition), then attached to the parent. Attaching takes
-- SHARE UPDATE EXCLUSIVE on the parent where `create table .. partition of` takes ACCESS
-- EXCLUSIVE, and the new table is empty, so nothing is scanned. Returns whether it made
-- the partition. Owner only.
create or replace function queues.attach_history_partition(_table text, _lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
begin
  if _table is null or _table <> all (queues.history_tables()) then
    raise exception 'table must name a history table (queues.history_tables()), got %',
      coalesce(quote_literal(left(_table, 100)), 'null') using errcode = '22023';
  end if;
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  _name := queues.history_partition_name(_table, _lower);
  if to_regclass(format('queues.%I', _name)) is not null then
    return false;
  end if;
  -- A range within reach of the task ids handed out (within one set's width, or the
  -- 10,000 tasks a statement may enqueue, above the last one) may receive rows while it
  -- is attached: a writer that routed its row before the attach committed would send it
  -- to the default partition, wait there for the attach's lock, and then fail the
  -- default's new constraint ("new row for relation .._default violates partition
  -- constraint"). For such a range (a set made late), SHARE on the parent: taken when no
  -- writer is in flight, it holds new ones at the parent until commit; they then route
  -- with the new partition. A set made ahead of need, as maintenance makes them, is out
  -- of reach and needs no lock that writers wait for (under a steady load of writers, a
  -- moment without one is rare).
  -- Its locks first (queues.lock_history_tables: taken between transactions, never
  -- queued for): the parent, SHARE UPDATE EXCLUSIVE (what attaching takes; SHARE for a
  -- set made late), then the default partition, ACCESS EXCLUSIVE (attaching checks it
  -- holds no row of the range).
  perform queues.lock_history_tables(
    array[_table, _table || '_default'],
    array[case when _lower <= queues.last_task_id() + greatest(_upper - _lower, 10000) then 'share'
               else 'share update exclusive' end,
          'access exclusive'],
    (select s.lock_timeout_ms from queues.history_setting s));
  perform queues.create_history_table(_table, _name);
  execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                 _table, _name, _lower, _upper);
  return true;
end;
$$;

-- Creates the partition set [_lower, _upper) of every history table (those that exist
-- already are kept), task's last: a set is in use once task has its partition. One
-- transaction; maintenance makes a set one table per step instead. Records when in
-- queues.history_partition_created. Returns whether anything was created. Owner only.
create or replace function queues.create_history_partition(_lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _created boolean := false;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _created := queues.attach_history_partition(_table, _lower, _upper) or _created;
  end loop;
  if _created then
    insert into queues.history_partition_created (lower_bound, upper_bound)
    values (_lower, _upper) on conflict (lower_bound) do nothing;
  end if;
  return _created;
end;
$$;

-- Makes [_lower, _upper) a set from rows that fell into the default partitions (tasks
-- given ids while no set covered them, and their facts): for each history table without
-- a partition of that range, a standalone table like its parent, the range's rows moved
-- into it from the table's default partition (deleted there and inserted here, in this
-- transaction), then attached. Nothing is lost or seen twice: readers of the parent see
-- each row in the default until this commits and in the new partition after. The caller
-- holds every history table's parent (SHARE) and default (ACCESS EXCLUSIVE), so no row of
-- the range is written meanwhile. Records the set in queues.history_partition_created.
-- Returns the tasks moved. Owner only.
create or replace function queues.adopt_history_range(_lower bigint, _upper bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _name text;
  _columns text;
  _moved bigint;
  _tasks bigint := 0;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'range bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _name := queues.history_partition_name(_table, _lower);
    continue when to_regclass(format('queues.%I', _name)) is not null;
    perform queues.create_history_table(_table, _name);
    -- The parent's columns by name (each quoted as an identifier), in its order.
    select string_agg(format('%I', a.attname), ', ' order by a.attnum) into _columns
      from pg_attribute a
     where a.attrelid = format('queues.%I', _table)::regclass and a.attnum > 0 and not a.attisdropped;
    execute format('with moved as (delete from queues.%I where task_id >= $1 and task_id < $2 returning %s)
                    insert into queues.%I (%s) select %s from moved',
                   _table || '_default', _columns, _name, _columns, _columns)
      using _lower, _upper;
    get diagnostics _moved = row_count;
    if _table = 'task' then
      _tasks := _moved;
    end if;
    execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                   _table, _name, _lower, _upper);
  end loop;
  insert into queues.history_partition_created (lower_bound, upper_bound)
  values (_lower, _upper) on conflict (lower_bound) do nothing;
  return _tasks;
end;
$$;

-- Every partition of every history table but the defaults, with its bounds. Owner only.
create or replace function queues.history_partition_bounds()
  returns table (table_name text, partition_name text, lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.name, c.relname::text, m.b[1]::bigint, m.b[2]::bigint
    from unnest(queues.history_tables()) t(name)
    join pg_inherits i on i.inhparent = to_regclass(format('queues.%I', t.name))
    join pg_class c on c.oid = i.inhrelid
   cross join lateral regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?\d+)''?\) TO \(''?(-?\d+)''?\)') as m(b)
   where m.b is not null
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last: bounds and the planner's
-- estimate of their tasks only, from the catalog (no relation is opened). What the list
-- endpoints walk and maintenance reads; queues.history_partitions() adds sizes.
create or replace function queues.history_sets()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  -- A bound reads FOR VALUES FROM ('<lower>') TO ('<upper>'), or DEFAULT. It holds no
  -- column, so it is deparsed without opening the partition (relation 0), and its two
  -- quoted values are the 2nd and 4th fields between quotes (a regular expression took
  -- 10 us a row).
  select nullif(split_part(b.bound, '''', 2), '')::bigint, nullif(split_part(b.bound, '''', 4), '')::bigint,
         b.relname::text, greatest(b.reltuples, 0)::bigint, b.bound = 'DEFAULT'
    from (select c.relname, c.reltuples, pg_get_expr(c.relpartbound, 0) as bound
            from pg_inherits i
            join pg_class c on c.oid = i.inhrelid
           where i.inhparent = 'queues.task'::regclass) b
   order by b.bound = 'DEFAULT', 1
$$;

-- The task id ranges [lower_bound, upper_bound) that a newest-first read of history
-- walks, newest first: the sets that can hold a task below _before (null: any) and not
-- above the last task id handed out (sets above it hold none), upper bounds capped at
-- _before. Each range is one set, except the first, which spans the two newest: the set
-- being filled may have begun a moment ago, and two partitions per table cost the planner
-- little more than one, so a page usually takes one statement. A reader that gives each
-- range's bounds to its statement as values gets a plan of these partitions only.
-- While the default partition holds a task (outside every set; normally none), one range
-- instead, (null, _before): everything below _before, in one statement.
create or replace function queues.history_walk(_before bigint)
  returns table (lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (
    select s.lower_bound, least(s.upper_bound, _before) as upper_bound,
           row_number() over (order by s.lower_bound desc) as n
      from queues.history_sets() s
     where not s.is_default
       -- once, not once per set (a call reads the sequence's catalog entry)
       and s.lower_bound <= (select queues.last_task_id())
       and (_before is null or s.lower_bound < _before)
  ),
  walk as (
    select coalesce((select b.lower_bound from s b where b.n = 2), a.lower_bound) as lower_bound, a.upper_bound
      from s a where a.n = 1
    union all
    select s.lower_bound, s.upper_bound from s where s.n > 2
  ),
  spill as (select exists (select 1 from queues.task_default) as any)
  select w.lower_bound, w.upper_bound from walk w, spill where not spill.any
  union all
  select null, _before from spill where spill.any
  order by 1 desc nulls first
$$;

-- The bytes of the sets whose lower bounds are given (a null element: the default
-- partitions), summed over every history table: the data of tables with their TOAST, and
-- of their indexes (each relation's main fork: its free space and visibility maps, a
-- fraction of a percent, are left out, which halves the files looked at). Each partition
-- is looked up by name (queues.history_partition_name) through the catalog's name index;
-- sizing opens each partition and its indexes (a lock and a file size each, about 50
-- relations a set), so this is the one place that costs per partition: callers pass
-- every set they need in one call (one plan).
create or replace function queues.history_set_bytes(_lower_bounds bigint[])
  returns table (lower_bound bigint, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select l.lower_bound,
         coalesce(sum(pg_relation_size(c.oid) + coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0)), 0)::bigint,
         coalesce(sum((select sum(pg_relation_size(i.indexrelid)) from pg_index i where i.indrelid = c.oid)), 0)::bigint
    from unnest(_lower_bounds) l(lower_bound)
   cross join unnest(queues.history_tables()) t(name)
    left join pg_class c on c.relnamespace = 'queues'::regnamespace
                        and c.relname = case when l.lower_bound is null then t.name || '_default'
                                             else queues.history_partition_name(t.name, l.lower_bound) end
   group by l.lower_bound
$$;

-- queues.history_sets() with each set's bytes (queues.history_set_bytes), every set sized
-- on each call: the History page reads queues.history_set_measured for the sets that are
-- done instead (admin.history_status_at).
create or replace function queues.history_partition_sizes()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (select * from queues.history_sets())
  select s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default,
         b.table_bytes, b.index_bytes
    from s
    join queues.history_set_bytes(array(select s.lower_bound from s)) b
      on b.lower_bound is not distinct from s.lower_bound
   order by s.is_default, s.lower_bound
$$;

-- Measures the sets that are done into queues.history_set_measured: every set whose range
-- lies below the last task id and that holds no pending task, with its bytes
-- (queues.history_set_bytes) and its oldest and newest task. Such a set's tables change
-- only by a rare late fact (a redrive, a revocation or start mark that arrives after the
-- completion) until it is dropped, so a reader that answers often (the History page, every
-- dashboard's poll and /metrics) takes its figures from here and sizes only the sets still
-- filling. A row is written only when a figure changed; rows of sets no longer there are
-- deleted. Maintenance calls it at the end of each run (queues.maintain_history_step_at).
-- Returns the number of sets whose figures were written. Owner only.
create or replace function queues.measure_history_sets(_now timestamptz)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _last_id bigint := queues.last_task_id();
  _written integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  delete from queues.history_set_measured m
   where not exists (select 1 from queues.history_sets() s
                      where s.lower_bound = m.lower_bound and s.upper_bound = m.upper_bound);
  with done as (
    select s.lower_bound, s.upper_bound
      from queues.history_sets() s
     where not s.is_default and s.upper_bound <= _last_id
       and not exists (select 1 from queues.task_pending tp
                        where tp.task_id >= s.lower_bound and tp.task_id < s.upper_bound)
  ),
  measured as (
    select d.lower_bound, d.upper_bound, f.task_id as first_task_id, f.enqueued_at as first_enqueued_at,
           n.task_id as last_task_id, b.table_bytes, b.index_bytes
      from done d
      join queues.history_set_bytes(array(select d.lower_bound from done d)) b on b.lower_bound = d.lower_bound
      left join lateral (select t.task_id, t.enqueued_at from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id limit 1) f on true
      left join lateral (select t.task_id from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id desc limit 1) n on true
  )
  insert into queues.history_set_measured as m
         (lower_bound, upper_bound, first_task_id, first_enqueued_at, last_task_id, table_bytes, index_bytes,
          measured_at)
  select x.lower_bound, x.upper_bound, x.first_task_id, x.first_enqueued_at, x.last_task_id, x.table_bytes,
         x.index_bytes, _now
    from measured x
  on conflict (lower_bound) do update
     set upper_bound = excluded.upper_bound, first_task_id = excluded.first_task_id,
         first_enqueued_at = excluded.first_enqueued_at, last_task_id = excluded.last_task_id,
         table_bytes = excluded.table_bytes, index_bytes = excluded.index_bytes, measured_at = excluded.measured_at
   where (m.upper_bound, m.first_task_id, m.first_enqueued_at, m.last_task_id, m.table_bytes, m.index_bytes)
         is distinct from (excluded.upper_bound, excluded.first_task_id, excluded.first_enqueued_at,
                           excluded.last_task_id, excluded.table_bytes, excluded.index_bytes);
  get diagnostics _written = row_count;
  return _written;
end;
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last. Sizes are summed over
-- every history table (tables, TOAST and indexes); tasks is the planner's estimate.
create or replace function queues.history_partitions()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, total_bytes bigint, is_default boolean)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.lower_bound, p.upper_bound, p.partition_name, p.estimated_tasks,
         p.table_bytes + p.index_bytes, p.is_default
    from queues.history_partition_sizes() p
   order by p.is_default, p.lower_bound
$$;

-- The last task id handed out (0 before the first task).
create or replace function queues.last_task_id() returns bigint
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(pg_sequence_last_value(pg_get_serial_sequence('queues.task', 'task_id')::regclass), 0)
$$;

-- One step of partition maintenance at _now: the first of these that has work to do,
-- locking one table only (see "Locks" above), its locks taken between the queue's
-- transactions within lock_timeout_ms (queues.lock_history_tables):
-- 1. Sets ahead of need, one table per step: first a set left half made (some table has
--    its partition, task not yet; task's is made last), then a new set above every range
--    there is or was and above any task in the default partition, of partition_size task
--    ids, while the sets above the last task id handed out cover less than
--    partitions_ahead * partition_size ids. A set less than partition_size ids above the
--    last id (maintenance fell behind) is made whole in one step instead, above the last id.
-- 1b. Tasks in the default partition (ids handed out while no set covered them) are made
--    a set with their facts, at most 2,000 tasks per step: a half made set they fell into
--    is finished so, or a range of the gap they lie in (queues.adopt_history_range).
-- 2. A table detached from a dropped set is dropped (truncated first if it has rows and
--    a foreign key).
-- 3. A fact table's partition of a dropped set is detached.
-- 4. The oldest set that may go is dropped, starting with its task partition, which is
--    detached (the set's tasks are gone from then on; steps 3 and 2 take its facts and the
--    detached tables away): a set goes when its whole range lies below the last task id
--    (no new task can land in it), it holds no pending task (queues.task_pending, then
--    every task checked against its completion), and its newest completion is older than
--    the retention window. A set with one pending task is kept, however old.
-- 5. With nothing else to do: the sets that are done are measured for the History page
--    (queues.measure_history_sets).
-- Drops are recorded in queues.history_partition_dropped. A step that cannot get its lock
-- in time (or finds a task fell into the default partition in the range it makes) is
-- rolled back, recorded in queues.history_step_skipped and reported skipped; the run goes
-- on ("more") until 5 steps have been skipped within a minute. Returns
--   {"action": "attached" | "set_created" | "set_adopted" | "dropped_table" | "truncated" | "detached" |
--              "set_dropped" | "none" | "skipped" | "busy",
--    "table", "lower_bound", "upper_bound", "tasks", "reason", "late": as they apply,
--    "measured": with "none", the sets whose figures step 5 wrote,
--    "kept": sets below the last task id kept so far, "more": whether to call again}
-- "busy": another maintenance step is in flight (one maintainer at a time). Owner only.
create or replace function queues.maintain_history_step_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  -- A bound for any other lock a statement here might wait for (its own are taken
  -- first, without waiting); restored when the function returns.
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint;
  _doing text;
  _table text;
  _name text;
  _lower bigint;
  _upper bigint;
  _truncate boolean;
  _kept integer := 0;
  _set record;
  _tasks bigint;
  _last_completed timestamptz;
  _measured integer;
  _spilled bigint;
  _gap_lower bigint;
  _gap_upper bigint;
  -- The locks that keep every writer of history out (a late set, a move out of the
  -- default partitions): SHARE on each parent, ACCESS EXCLUSIVE on its default.
  _writers_out text[] := array(select x from unnest(queues.history_tables()) t(name),
                                 lateral (values (t.name), (t.name || '_default')) v(x));
  _writers_out_modes text[] := array(select m from unnest(queues.history_tables()) t(name),
                                       lateral (values ('share'), ('access exclusive')) v(m));
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if not pg_try_advisory_xact_lock(20252, 1) then
    return jsonb_build_object('action', 'busy', 'more', false);
  end if;
  select * into _setting from queues.history_setting;
  _last_id := queues.last_task_id();

  begin
    -- 1. Ahead of need: a half made set, unless a task fell into the default partition in
    --    its range (maintenance fell behind while it was half made): then task's
    --    partition cannot be attached, new sets start above it, and step 1b finishes it
    --    by moving those tasks into it.
    with b as (select * from queues.history_partition_bounds())
    select h.lower_bound, h.upper_bound into _lower, _upper
      from (select distinct b.lower_bound, b.upper_bound from b) h
     where not exists (select 1 from b x where x.table_name = 'task' and x.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.task_default t where t.task_id >= h.lower_bound and t.task_id < h.upper_bound)
     order by h.lower_bound
     limit 1;
    if _lower is null then
      -- A new set. Ranges are never reused: above every partition there is or was, and
      -- above any task in the default partition (a new set cannot overlap rows there).
      select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                      coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                      coalesce((select max(t.task_id) + 1 from queues.task_default t), 0))
        into _lower;
      if _lower < _last_id + 1 + _setting.partitions_ahead::bigint * _setting.partition_size then
        _upper := _lower + _setting.partition_size;
      else
        _lower := null;
      end if;
    end if;
    if _lower is not null and _lower <= _last_id + _setting.partition_size then
      -- Late: less than one set's width of ids is left before the ids handed out reach
      -- the set (maintenance fell behind). Made table by table, it could be outrun: a
      -- task given an id in its range before task's partition exists falls into the
      -- default partition, its facts into theirs, and the next table's attach fails on
      -- them, run after run. So the whole set is made in this one step, under locks
      -- that keep every writer of history out (SHARE on each parent, ACCESS EXCLUSIVE on
      -- each default), starting above the last id read under them: no task of its range
      -- exists, and none can be written until it commits. The ids handed out before it
      -- fall into the default partitions (queues.history_summary_at counts them).
      _doing := format('make the set from %s at once (late)', _lower);
      perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
      _last_id := queues.last_task_id();
      if exists (select 1 from queues.history_partition_bounds() b where b.lower_bound = _lower)
         and not exists (select 1 from queues.task_default t where t.task_id >= _lower and t.task_id < _upper) then
        null; -- a half made set that no task has reached: finished as it is
      else
        select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                        coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                        coalesce((select max(t.task_id) + 1 from queues.task_default t), 0),
                        _last_id + 1)
          into _lower;
        _upper := _lower + _setting.partition_size;
      end if;
      perform queues.create_history_partition(_lower, _upper);
      return jsonb_build_object('action', 'set_created', 'table', queues.history_partition_name('task', _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'late', true, 'more', true);
    end if;
    if _lower is not null then
      select t.name into _table
        from unnest(queues.history_tables()) with ordinality t(name, n)
       where to_regclass(format('queues.%I', queues.history_partition_name(t.name, _lower))) is null
       order by t.name = 'task', t.n
       limit 1;
      _doing := format('attach queues.%I', queues.history_partition_name(_table, _lower));
      perform queues.attach_history_partition(_table, _lower, _upper);
      if _table = 'task' then
        insert into queues.history_partition_created (lower_bound, upper_bound)
        values (_lower, _upper) on conflict (lower_bound) do nothing;
      end if;
      return jsonb_build_object('action', case when _table = 'task' then 'set_created' else 'attached' end,
                                'table', queues.history_partition_name(_table, _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'more', true);
    end if;

    -- 1b. Tasks in the default partition (ids handed out while no set covered them): the
    --    range around the lowest is made a set, its rows moved out of the default
    --    partitions (queues.adopt_history_range), so that retention drops them with it
    --    and pending ones stay claimable. The range: a half made set's own (finished so),
    --    or the gap between the ranges there are or were, below the lowest range above
    --    the task and cut after its 2,000th task (a step moves at most that many tasks,
    --    with their facts, under its locks). Not while no range lies above the task: the
    --    ids may still be handed out, and step 1 makes the set above them first.
    select t.task_id into _spilled from queues.task_default t order by t.task_id limit 1;
    if _spilled is not null then
      with r as (
        select b.lower_bound, b.upper_bound from queues.history_partition_bounds() b
        union all
        select d.lower_bound, d.upper_bound from queues.history_partition_dropped d
      )
      select (select min(r.lower_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             (select max(r.upper_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             coalesce((select max(r.upper_bound) from r where r.upper_bound <= _spilled), 0),
             (select min(r.lower_bound) from r where r.lower_bound > _spilled)
        into _lower, _upper, _gap_lower, _gap_upper;
      if _lower is null and _gap_upper is not null then
        -- The gap, cut after its 2,000th task.
        _lower := _gap_lower;
        _upper := least(_gap_upper,
                        coalesce((select t.task_id from queues.task_default t
                                   where t.task_id >= _spilled and t.task_id < _gap_upper
                                   order by t.task_id offset 2000 limit 1), _gap_upper));
      end if;
      if _upper is not null and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = _lower) then
        _doing := format('adopt the default partitions'' tasks in [%s, %s)', _lower, _upper);
        perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
        _tasks := queues.adopt_history_range(_lower, _upper);
        return jsonb_build_object('action', 'set_adopted', 'table', queues.history_partition_name('task', _lower),
                                  'lower_bound', _lower, 'upper_bound', _upper, 'tasks', _tasks, 'more', true);
      end if;
    end if;

    -- 2. A table detached from a dropped set (named as a partition, no longer one). Its
    --    drop locks only itself, so its files are unlinked under no lock the queue waits
    --    for; but dropping a foreign key takes ACCESS EXCLUSIVE on the table it
    --    references, so a table with one (none has today) is truncated first (under its
    --    own lock) and that drop is a catalog change only.
    select c.relname,
           pg_relation_size(c.oid) > 0 and exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'f')
      into _name, _truncate
      from pg_class c
      join unnest(queues.history_tables()) t(name)
        on c.relname = queues.history_partition_name(t.name, substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     where c.relnamespace = 'queues'::regnamespace and c.relkind = 'r' and not c.relispartition
       and exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     order by c.relname
     limit 1;
    if _name is not null then
      if _truncate then
        _doing := format('truncate queues.%I', _name);
        execute format('truncate queues.%I', _name);
        return jsonb_build_object('action', 'truncated', 'table', _name, 'more', true);
      end if;
      _doing := format('drop queues.%I', _name);
      execute format('drop table queues.%I', _name);
      return jsonb_build_object('action', 'dropped_table', 'table', _name, 'more', true);
    end if;

    -- 3. A fact table's partition of a dropped set: detached, a catalog change.
    select b.table_name, b.partition_name, b.lower_bound, b.upper_bound into _table, _name, _lower, _upper
      from queues.history_partition_bounds() b
     where exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = b.lower_bound and d.upper_bound = b.upper_bound)
     order by b.lower_bound, b.table_name
     limit 1;
    if _name is not null then
      _doing := format('detach queues.%I', _name);
      perform queues.lock_history_tables(array[_table, _name, _table || '_default'],
                                         array['access exclusive', 'access exclusive', 'access exclusive'],
                                         _setting.lock_timeout_ms);
      execute format('alter table queues.%I detach partition queues.%I', _table, _name);
      return jsonb_build_object('action', 'detached', 'table', _name, 'lower_bound', _lower, 'upper_bound', _upper,
                                'more', true);
    end if;

    -- 4. Expired sets, oldest first.
    for _set in
      select p.lower_bound, p.upper_bound from queues.history_sets() p
       where not p.is_default and p.upper_bound <= _last_id
       order by p.lower_bound
    loop
      -- Cheap checks first, without strong locks: a pending task, or a recent completion.
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      select max(c.completed_at) into _last_completed from queues.task_completed c
       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound;
      if _last_completed > _now - _setting.retention then
        _kept := _kept + 1;
        continue;
      end if;
      -- Every task completed, from the facts (one scan of the set's two partitions).
      select count(*) into _tasks from queues.task t
       where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound;
      if exists (select 1 from queues.task t
                  where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound
                    and not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)) then
        _kept := _kept + 1;
        continue;
      end if;

      _name := queues.history_partition_name('task', _set.lower_bound);
      _doing := format('detach queues.%I', _name);
      begin
        -- Detaching holds ACCESS EXCLUSIVE on queues.task and the partition, so no
        -- transaction that wrote to the set or read it to complete a task is still open:
        -- check again what could have changed (a task enqueued with an id handed out
        -- before the checks, and its completion).
        perform queues.lock_history_tables(array['task', _name, 'task_default'],
                                           array['access exclusive', 'access exclusive', 'access exclusive'],
                                           _setting.lock_timeout_ms);
        execute format('alter table queues.task detach partition queues.%I', _name);
        if exists (select 1 from queues.task_pending tp
                    where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_completed c
                       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                         and c.completed_at > _now - _setting.retention) then
          -- Roll the block back, which attaches the partition again.
          raise exception 'set [%, %) changed since it was checked', _set.lower_bound, _set.upper_bound
            using errcode = 'QH001';
        end if;
        insert into queues.history_partition_dropped (lower_bound, upper_bound, tasks, last_completed_at, dropped_at)
        values (_set.lower_bound, _set.upper_bound, _tasks, _last_completed, _now);
        return jsonb_build_object('action', 'set_dropped', 'table', _name, 'lower_bound', _set.lower_bound,
                                  'upper_bound', _set.upper_bound, 'tasks', _tasks, 'kept', _kept, 'more', true);
      exception
        when sqlstate 'QH001' then
          _kept := _kept + 1;
      end;
    end loop;

    -- 5. Nothing left to change: the sets that are done are measured for the readers.
    _measured := queues.measure_history_sets(_now);
    delete from queues.history_step_skipped k where k.skipped_at < _now - interval '1 day';
  exception
    -- check_violation: a task landed in a default partition, in the range being made,
    -- since it was read above; the next step starts above it. The skip is recorded, and
    -- the run goes on (a later try may find its moment) until 5 steps have been skipped
    -- within a minute.
    when lock_not_available or deadlock_detected or check_violation then
      insert into queues.history_step_skipped (step, reason) values (coalesce(_doing, 'a step'), sqlerrm);
      return jsonb_build_object('action', 'skipped', 'step', _doing, 'reason', sqlerrm, 'kept', _kept,
                                'more', (select count(*) from queues.history_step_skipped k
                                          where k.skipped_at > clock_timestamp() - interval '1 minute') < 5);
  end;
  return jsonb_build_object('action', 'none', 'kept', _kept, 'measured', _measured, 'more', false);
end;
$$;

-- Partition maintenance at _now, every step of queues.maintain_history_step_at in one
-- transaction, until none is left or one is skipped: its locks are held until that
-- transaction ends, so this is for tests and for running it by hand; the schedule runs
-- each step in a transaction of its own (queues.maintain_history_step). Returns
--   {"created": [[lo, hi], ...], "dropped": [[lo, hi], ...], "skipped": [{...}], "kept": n}
create or replace function queues.maintain_history_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _created jsonb := '[]';
  _dropped jsonb := '[]';
  _skipped jsonb := '[]';
  _adopted jsonb := '[]';
  _kept integer := 0;
  _step jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  -- Each step changes the catalog or ends the run (skips end it after 5 within a minute);
  -- the bound only guards against a bug.
  for _i in 1 .. 100000 loop
    _step := queues.maintain_history_step_at(_now);
    case _step ->> 'action'
      when 'set_created' then
        _created := _created || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_dropped' then
        _dropped := _dropped || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_adopted' then
        _adopted := _adopted || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'skipped', 'busy' then
        _skipped := _skipped || jsonb_build_array(_step);
      else
        null;
    end case;
    _kept := coalesce((_step ->> 'kept')::integer, _kept);
    exit when not (_step ->> 'more')::boolean;
  end loop;
  return jsonb_build_object('created', _created, 'dropped', _dropped, 'adopted', _adopted, 'skipped', _skipped,
                            'kept', _kept);
end;
$$;

-- A db_function step: maintain_history_at(now()), every step in the caller's transaction
-- (for a one-off run; the schedule runs queues.maintain_history_step).
create or replace function queues.maintain_history(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_at(now()))
$$;

-- The schedule's step: one step of maintenance (maintain_history_step_at(now())), its
-- report as the payload of a success envelope. The schedule's payload asks the worker to
-- call it again while the report says "more" ("repeat": true, see the worker's
-- db_function processor), each call a transaction of its own, so that no step's lock is
-- held while another step runs.
create or replace function queues.maintain_history_step(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_step_at(now()))
$$;

-- What operators watch, without the list of sets: the settings, the oldest retained task,
-- and the next drop (the lowest set below the last task id with its newest completion: it
-- can go at last_completed_at + retention, unless it holds pending tasks). Each read of
-- a partitioned table is pruned at plan time to the set it needs (EXECUTE with the set's
-- bounds as values), so the cost does not grow with the number of sets beyond the catalog
-- read of their bounds.
create or replace function queues.history_summary_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _set record;
  _next record;
  _next_json jsonb;
  _oldest_id bigint;
  _oldest_at timestamptz;
  _default_id bigint;
  _default_at timestamptz;
  _last_completed timestamptz;
  _pending bigint;
begin
  select * into _setting from queues.history_setting;
  -- The oldest task: in the lowest set that holds one (or in the default partition).
  for _set in
    select s.lower_bound, s.upper_bound from queues.history_sets() s
     where not s.is_default and s.lower_bound <= _last_id
     order by s.lower_bound
  loop
    execute 'select t.task_id, t.enqueued_at from queues.task t
              where t.task_id >= $1 and t.task_id < $2 order by t.task_id limit 1'
      into _oldest_id, _oldest_at using _set.lower_bound, _set.upper_bound;
    exit when _oldest_id is not null;
  end loop;
  select t.task_id, t.enqueued_at into _default_id, _default_at from queues.task_default t order by t.task_id limit 1;
  if _default_id < _oldest_id or _oldest_id is null then
    _oldest_id := _default_id;
    _oldest_at := _default_at;
  end if;

  select s.lower_bound, s.upper_bound into _next
    from queues.history_sets() s
   where not s.is_default and s.upper_bound <= _last_id
   order by s.lower_bound
   limit 1;
  if found then
    execute 'select max(c.completed_at) from queues.task_completed c where c.task_id >= $1 and c.task_id < $2'
      into _last_completed using _next.lower_bound, _next.upper_bound;
    _pending := (select count(*) from queues.task_pending tp
                  where tp.task_id >= _next.lower_bound and tp.task_id < _next.upper_bound);
    _next_json := jsonb_build_object(
      'lower_bound', _next.lower_bound, 'upper_bound', _next.upper_bound,
      'pending_tasks', _pending,
      'last_completed_at', _last_completed,
      'drop_after', case when _pending = 0 then coalesce(_last_completed + _setting.retention, _now) end);
  end if;
  return jsonb_build_object(
    'retention_seconds', extract(epoch from _setting.retention)::bigint,
    'partition_size', _setting.partition_size,
    'partitions_ahead', _setting.partitions_ahead,
    'last_task_id', _last_id,
    'oldest_task_id', _oldest_id,
    'oldest_enqueued_at', _oldest_at,
    'default_partition_tasks', (select count(*) from queues.task_default),
    'next_drop', _next_json,
    'dropped_sets', (select count(*) from queues.history_partition_dropped),
    'skipped_steps_last_hour', (select count(*) from queues.history_step_skipped k where k.skipped_at > _now - interval '1 hour'),
    'last_skipped_step', (select jsonb_build_object('skipped_at', k.skipped_at, 'step', k.step, 'reason', k.reason)
                            from queues.history_step_skipped k order by k.skipped_at desc limit 1),
    'last_dropped_at', (select max(d.dropped_at) from queues.history_partition_dropped d));
end;
$$;

-- queues.history_summary_at(_now) and the sets with their sizes (queues.history_partitions()).
create or replace function queues.history_status_at(_now timestamptz)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.history_summary_at(_now) || jsonb_build_object(
    'partitions', coalesce((select jsonb_agg(jsonb_build_object(
        'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'name', p.partition_name,
        'estimated_tasks', p.estimated_tasks, 'total_bytes', p.total_bytes, 'is_default', p.is_default)
        order by p.is_default, p.lower_bound)
      from queues.history_partitions() p), '[]'))
$$;

-- The worker runs maintenance as the db_function task of its schedule; operators read the
-- status through admin.history_status(). Everything else here is owner only. Granted
-- here, beside the functions, so that a migration including sql/queues/privileges.sql
-- before this file does not name a function that does not exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.maintain_history_step_at(timestamptz),
  queues.history_status_at(timestamptz), queues.history_summary_at(timestamptz), queues.history_partitions(),
  queues.history_partition_bounds(), queues.history_sets(), queues.history_partition_sizes(),
  queues.history_set_bytes(bigint[]), queues.measure_history_sets(timestamptz),
  queues.history_walk(bigint), queues.create_history_partition(bigint, bigint),
  queues.attach_history_partition(text, bigint, bigint), queues.lock_history_tables(text[], text[], integer),
  queues.adopt_history_range(bigint, bigint), queues.create_history_table(text, text),
  queues.cancel_autovacuum(text[])
  from public;
grant execute on function queues.maintain_history(jsonb), queues.maintain_history_step(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
select internal.register_runnable_function('queues.maintain_history_step(jsonb)');
--! EndIncluded queues/partitions.sql

--! split: 700-heartbeat-skips-held-rows.sql
-- A heartbeat never waits for a task's row: a lease whose row another transaction holds
-- (its completion in flight) is left as it is and returned as still held
-- (queues.extend_leases_at, sql/queues/lease.sql).
set local lock_timeout = '5s';

--! Included queues/lease.sql
-- Heartbeats and releases of leases. Both act only on a task's current lease: a worker
-- whose lease was taken over learns it from the missing row and must stop.

-- Validates parallel arrays of task ids and lease ids.
create or replace function queues.assert_lease_pairs(_task_ids bigint[], _task_lease_ids bigint[])
  returns void
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_ids is null or _task_lease_ids is null then
    raise exception 'task_ids and task_lease_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) <> cardinality(_task_lease_ids) then
    raise exception 'task_ids and task_lease_ids must have the same length (% and %)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 leases per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null then
    raise exception 'task_ids and task_lease_ids must not contain null' using errcode = '22004';
  end if;
end;
$$;

-- Resource-key locks. Everything that changes queues.resource_lease holds the key's
-- transaction-scoped advisory lock (class 20251, hashtext(key)) while it does: the claim
-- takes it with pg_try_advisory_xact_lock and skips a key it cannot get, so a claim
-- never waits on a key; the others (completion, heartbeat, release, revocation) take
-- theirs in one global order with this function, so they cannot deadlock each other.
create or replace function queues.lock_resource_keys(_task_ids bigint[])
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text;
begin
  for _key in
    select distinct p.resource_key
      from queues.task_pending p
     where p.task_id = any (_task_ids) and p.resource_key is not null
     order by 1
  loop
    perform pg_advisory_xact_lock(20251, hashtext(_key));
  end loop;
end;
$$;

-- Extends each given lease that is still its task's current lease to _now + _lease_seconds
-- and appends a queues.task_lease_extension fact. Parallel arrays of task and lease ids.
-- Never waits for a task's row: a lease whose row another transaction holds (a completion
-- of that task in flight, usually) is left as it is, its expiry unchanged, and returned
-- as still held; the next heartbeat extends it if it still is. Returns the leases still
-- held, extended or left; a lease missing from the result was lost (the task was
-- re-claimed after an expiry, or completed, or its resource key went to another task).
create or replace function queues.extend_leases_at(
  _now            timestamptz,
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _lease_seconds  integer
) returns table (task_id bigint, task_lease_id bigint, expires_at timestamptz)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _locked bigint[];
  _other bigint[] := '{}';
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;
  -- The rows first (a primary-key probe of `= any`), skipping those another transaction
  -- holds. A heartbeat that waited for a row held the rows it had already locked
  -- meanwhile, so a completion batch in flight made it wait, and the completions of its
  -- other tasks waited for it in turn (up to 3 s in a soak: RELIABILITY.md, scenario 10).
  _locked := array(select p.task_id from queues.task_pending p
                    where p.task_id = any (_task_ids) order by p.task_id for no key update skip locked);
  -- The others: rows held elsewhere, and tasks no longer pending (normally none).
  if cardinality(_locked) < cardinality(_task_ids) then
    _other := array(select i.id from unnest(_task_ids) i(id) except select l.id from unnest(_locked) l(id));
  end if;

  -- The rows by primary key from the array of ids, each row's lease looked up in a map of
  -- the input: no join of the input to task_pending, whose plan would follow
  -- task_pending's statistics (see queues.claim_tasks_at's moved).
  return query
  with m as (
    select jsonb_object_agg(i.task_id::text, i.task_lease_id) as leases
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
  ),
  extended as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds)
      from m
     where p.task_id = any (_locked)
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
       -- A keyed task extends only while it holds its key: once an expired lease's key
       -- went to another task (which may hold it still, or have completed), the lease
       -- is lost and must not come back to life beside the other task's.
       and (p.resource_key is null
            or exists (select 1 from queues.resource_lease r
                        where r.resource_key = p.resource_key and r.task_id = p.task_id))
    returning p.task_id, p.current_lease_id, p.available_at, p.resource_key
  ),
  -- The rows another transaction holds, as last committed: a lease still current there
  -- (with its key, for a keyed task) is still held.
  left_as_is as (
    select p.task_id, p.current_lease_id, p.available_at
      from queues.task_pending p, m
     where p.task_id = any (_other)
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
       and (p.resource_key is null
            or exists (select 1 from queues.resource_lease r
                        where r.resource_key = p.resource_key and r.task_id = p.task_id))
  ),
  recorded as (
    insert into queues.task_lease_extension (task_id, task_lease_id, extended_at, expires_at)
    select e.task_id, e.current_lease_id, _now, e.available_at from extended e
  ),
  key_extended as (
    update queues.resource_lease r
       set expires_at = e.available_at
      from extended e
     where e.resource_key is not null and r.resource_key = e.resource_key and r.task_id = e.task_id
  )
  select e.task_id, e.current_lease_id, e.available_at from extended e
  union all
  select l.task_id, l.current_lease_id, l.available_at from left_as_is l;
end;
$$;

create or replace function queues.extend_leases(
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _lease_seconds  integer default null
) returns table (task_id bigint, task_lease_id bigint, expires_at timestamptz)
  language sql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.extend_leases_at(now(), _task_ids, _task_lease_ids, coalesce(_lease_seconds, 300))
$$;

-- Gives leases back before they expire (graceful shutdown): each task whose current lease
-- is given becomes claimable at once, and the release is not counted towards abandoning
-- it. The lease ends there: completing, failing or extending with it is refused.
-- Returns the task ids released; wakes listening workers.
create or replace function queues.release_leases(
  _task_ids       bigint[],
  _task_lease_ids bigint[]
) returns table (task_id bigint)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _released bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);

  -- The rows by primary key from the array of ids, each row's lease looked up in a map of
  -- the input (see queues.extend_leases_at).
  with released as (
    update queues.task_pending p
       set available_at = now(),
           -- A released lease is no longer held: its worker can neither extend it nor
           -- complete or record against it.
           current_lease_id = null,
           released_count = p.released_count + 1
      from (select jsonb_object_agg(i.task_id::text, i.task_lease_id) as leases
              from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)) m
     where p.task_id = any (_task_ids)
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
    returning p.task_id, (m.leases ->> p.task_id::text)::bigint as task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_release (task_id, task_lease_id)
    select r.task_id, r.task_lease_id from released r
    on conflict do nothing
  ),
  key_freed as (
    delete from queues.resource_lease k
     using released r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select array_agg(r.task_id order by r.task_id) into _released from released r;

  if _released is not null then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select unnest(coalesce(_released, '{}'));
end;
$$;
--! EndIncluded queues/lease.sql

--! split: 720-channel-process-functions.sql
-- A channel process's facts and the closing of attempts the queue gave up on are static
-- SQL in functions of the process's own (<name>_process_facts,
-- <name>_close_given_up_attempts), made at registration: a connection plans them once,
-- where the dynamic SQL before was planned on every supervisor run
-- (internal.create_channel_process_functions, sql/internal/channel_process.sql).
set local lock_timeout = '5s';

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
-- planning these two statements was about 90% of the database's CPU per email process.)
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
--! EndIncluded internal/channel_process.sql

select internal.create_channel_process_functions(p.process_schema, p.process_name)
  from internal.channel_process p;
