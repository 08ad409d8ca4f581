-- Server-side steps: db_function tasks run in the database, many per call.

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

-- Runs db_function steps claimed by the caller, in order, each in a subtransaction of its
-- own with its completion: internal.run_function(payload.db_function, payload), then the
-- completion fenced by the lease (queues.settle_tasks), so a step's writes and its
-- completion commit together or not at all, exactly once. Outcomes as the worker's
-- db_function processor: success and status complete 'succeeded' (a status is returned
-- as note); error and validation failure keep the writes and complete 'failed' with an
-- error row; a malformed envelope or an exception rolls the step back, then completes
-- 'failed' with an error row. A step whose lease is no longer held is not run.
-- Runs as the caller (security invoker): steps have the worker's privileges, not the owner's.
-- Returns one row per step: result as queues.complete_tasks ('completed', 'retry_scheduled',
-- 'lease_lost', ...) or 'transient' (a serialization failure or deadlock rolled the step
-- back and recorded nothing: release the lease, it runs again), with outcome, error, note.
create or replace function queues.run_steps(_task_ids bigint[], _task_lease_ids bigint[], _function_names text[], _payloads jsonb[])
  returns table (task_id bigint, result text, outcome text, error text, note text)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _i integer;
  _id bigint;
  _lease bigint;
  _name text;
  _env record;
  _outcome text;
  _error text;
  _note text;
  _done text;
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
  for _i in 1 .. cardinality(_task_ids) loop
    _id := _task_ids[_i];
    _lease := _task_lease_ids[_i];
    _name := _function_names[_i];
    _outcome := null; _error := null; _note := null; _done := null;
    begin
      -- Recorded first: a lease no longer held is not run.
      select s.result into _done from queues.settle_tasks(array[_id], array[_lease], '{}') s;
      if _done = 'started' then
        select * into _env from queues.parse_envelope(internal.run_function(_name, _payloads[_i]));
        case _env.outcome
          when 'malformed' then
            raise exception '%: %', _name, _env.message using errcode = 'QSTEP';
          when 'succeeded' then _outcome := 'succeeded';
          when 'status' then _outcome := 'succeeded'; _note := 'status ' || _env.message;
          when 'invalid' then _outcome := 'failed'; _error := format('%s: validation failure: %s', _name, _env.message); _note := _env.message;
          else _outcome := 'failed'; _error := format('%s: %s', _name, _env.message);
        end case;
        select s.result into _done
          from queues.settle_tasks('{}', '{}', array[_id], array[_lease], array[_outcome],
                                   -- A validation failure is final: no retry.
                                   array[case when _env.outcome = 'invalid' then false end],
                                   case when _error is null then '{}'::bigint[] else array[_id] end,
                                   case when _error is null then '{}'::text[] else array[_error] end) s;
        if _done not in ('completed', 'retry_scheduled') then
          -- Refused (the lease was lost meanwhile): the step's writes must not commit.
          raise exception 'refused: %', _done using errcode = 'QREFU';
        end if;
      end if;
    exception
      when sqlstate 'QREFU' then
        _outcome := null; _error := null; _note := null;
      when serialization_failure or deadlock_detected then
        _done := 'transient'; _outcome := null; _error := sqlerrm; _note := null;
      when others then
        -- Rolled back; record why, in a subtransaction of its own.
        _outcome := 'failed';
        _error := case when sqlstate = 'QSTEP' then sqlerrm else format('%s raised: %s', _name, sqlerrm) end;
        _note := null;
        select s.result into _done
          from queues.settle_tasks('{}', '{}', array[_id], array[_lease], array['failed'], null, array[_id], array[_error]) s;
    end;
    if _done = 'started' then
      _done := 'lease_lost';
    end if;
    return query select _id, _done, _outcome, _error, _note;
  end loop;
end;
$$;
