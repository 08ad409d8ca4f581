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
