--! Previous: sha1:f63a779363a633e3949eac34509323f16d5154ad
--! Hash: sha1:2bb77cb53ffe80c9e01447be0fb363fb948369e8
--! Message: settle_with_handlers takes at most 50 completions; a unique enqueue may depend on the running task of its key

--! split: 100-handler-statements.sql
set local lock_timeout = '5s';

-- queues.settle_with_handlers takes at most 50 completions per call (a subtransaction each);
-- a unique enqueue may depend on the running task of its key, which it does not replace.
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
  if array_position(_errors, null) is not null then
    raise exception 'error_task_ids must not contain null' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_messages) m where m is null or btrim(m) = '') then
    raise exception 'error_messages must not be empty' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_errors) e where e <> all (coalesce(_task_ids, '{}'))) then
    raise exception 'error_task_ids must name tasks completed in the same call' using errcode = '22023';
  end if;
  if _started_us is not null and cardinality(_started_us) <> cardinality(coalesce(_task_ids, '{}')) then
    raise exception 'started_us must have one element per task (% tasks, % start times)',
      cardinality(coalesce(_task_ids, '{}')), cardinality(_started_us) using errcode = '22023';
  end if;

  if cardinality(coalesce(_task_ids, '{}')) = 0 then
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
--! Included queues/unique.sql
-- Unique tasks: an enqueue that names a unique key, and what it does when a task with
-- that key is still pending (not completed; scheduled, ready, retrying or running).
--
--   policy     a task with the key is pending, no live lease     ... under a live lease
--   skip       nothing written; answers that task's id            the same
--   replace    a new task (payload, time, priority, ... as given)  a new task; the running
--              replaces it: the old one is completed 'cancelled'  one runs on (its worker
--              with the reason 'replaced by task N'                completes it)
--   debounce   as replace, the new task due at                     as replace
--              coalesce(scheduled_at, now) + period
--
-- With no pending task of the key, each policy enqueues a new task ('inserted'); debounce
-- schedules it at coalesce(scheduled_at, now) + period, so a burst of enqueues within the
-- period leaves one task, due one period after the last, with the last payload. Under a
-- live lease replace and debounce enqueue a new task rather than skip: the running task
-- started with the old payload, and the newest payload must still be processed.
--
-- The rest of the enqueue (timeout_ms, group_key, depends_on, as queues.enqueue takes
-- them) belongs to the task it describes. skip keeps the pending task as it is (its own
-- payload, schedule, timeout, group key and dependencies): nothing given is written, but
-- all of it is checked. replace and debounce enqueue the new task with exactly what is
-- given, nothing carried over from the task it replaces: its payload, schedule, timeout,
-- group key and dependencies (none given: none; a dependency on the task being replaced
-- is refused, 22023, as it would fail the moment the replaced task ends). A pending task
-- that other tasks wait for (depends_on) is not replaced: the enqueue is refused (55000,
-- nothing written), since its dependents would fail when it ends cancelled.
--
-- Facts and structures: the fact queues.task_unique says which task was enqueued with
-- which key (one row per unique task, written with the task); a replaced task ends with
-- the facts a cancel writes (queues.task_completed 'cancelled', queues.task_cancelled with
-- the reason). The derived
-- queues.task_unique_key holds, per key, the newest task enqueued with it; its row is
-- what concurrent enqueuers of one key lock (FOR UPDATE), one after another, so 16 at
-- once leave one task. A row whose task is no longer pending counts as no row; such rows
-- (and the facts of tasks whose history partitions were dropped) are removed by
-- queues.prune_task_unique_keys, which the owner runs (it is not scheduled: until it
-- runs, the table keeps one row per key ever used), and the whole table is rebuilt from
-- the facts by queues.rebuild_task_unique_key. An enqueue without a key never reads it: the
-- plain queues.enqueue is unchanged.
--
-- Under REPEATABLE READ or SERIALIZABLE, an enqueuer whose snapshot misses another's
-- task of the same key gets a serialization failure (40001): retry the transaction.

-- The core (no grants). Checks its own arguments (22004 for a NULL key, 22023 for an
-- empty or long key, an unknown policy, a period with a policy other than debounce, a
-- negative or infinite period) and then every check of queues.enqueue_task (of the
-- timeout, group key and dependencies too), before it reads or writes anything, so bad
-- input is refused even when the policy would skip.
-- Returns the task id (the new task's, or the pending one's for 'skipped'), the outcome
-- ('inserted', 'skipped', 'replaced') and the id of the task replaced.
create or replace function queues.enqueue_unique_task(
  _task_type     text,
  _payload       jsonb,
  _unique_key    text,
  _unique_policy text,
  _unique_period interval,
  _scheduled_at  timestamptz,
  _priority      integer,
  _resource_key  text,
  _max_attempts  integer,
  _public        boolean default false,
  _notify        boolean default true,
  _depends_on    bigint[] default null,
  _group_key     text default null,
  _timeout_ms    integer default null,
  out task_id          bigint,
  out outcome          text,
  out replaced_task_id bigint
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  _policy text := coalesce(_unique_policy, 'skip');
  _at timestamptz := _scheduled_at;
  _old bigint;
  _held boolean;
begin
  if _public and queues.is_internal_task_type(_task_type) then
    perform queues.assert_may_enqueue(_task_type);
  end if;
  if _unique_key is null then
    raise exception 'unique_key must not be null' using errcode = '22004';
  end if;
  if length(_unique_key) not between 1 and 200 then
    raise exception 'unique_key must be 1 to 200 characters, got %', length(_unique_key) using errcode = '22023';
  end if;
  if _policy not in ('skip', 'replace', 'debounce') then
    raise exception 'unique_policy must be ''skip'', ''replace'' or ''debounce'', got %', quote_literal(left(_policy, 50))
      using errcode = '22023';
  end if;
  if _policy = 'debounce' then
    if _unique_period is null then
      raise exception 'unique_period must not be null with the debounce policy' using errcode = '22004';
    end if;
    if not isfinite(_unique_period) or _unique_period < interval '0' then
      raise exception 'unique_period must be a finite, non-negative interval, got %', _unique_period
        using errcode = '22023';
    end if;
    if not isfinite(_scheduled_at) then
      raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
    end if;
    _at := coalesce(_scheduled_at, now()) + _unique_period;
  elsif _unique_period is not null then
    raise exception 'unique_period applies only to the debounce policy, not %', quote_literal(_policy)
      using errcode = '22023';
  end if;
  -- Every check of a plain enqueue (the dependencies' too), writing nothing.
  perform queues.enqueue_task(_task_type, _payload, _at, _priority, _resource_key, _max_attempts,
                              _public, false, true, _depends_on, _group_key, _timeout_ms);

  -- The key's row, locked: a concurrent enqueuer of the key waits here until this
  -- transaction ends, then sees its task. The insert of a new key waits for a concurrent
  -- insert of the same key to commit and then does nothing; the loop then locks that row.
  loop
    select k.task_id into _old from queues.task_unique_key k where k.unique_key = _unique_key for update;
    exit when found;
    insert into queues.task_unique_key (unique_key, task_id) values (_unique_key, null) on conflict do nothing;
    exit when found;
  end loop;
  if _old is not null then
    select (p.current_lease_id is not null and p.available_at > now()) into _held
      from queues.task_pending p where p.task_id = _old;
    if not found then
      _old := null;
    end if;
  end if;

  if _old is not null and _policy = 'skip' then
    task_id := _old;
    outcome := 'skipped';
    return;
  end if;
  -- (A running task is not replaced: the new task waits for it, as any other would.)
  if _old is not null and not _held and _old = any (_depends_on) then
    raise exception 'depends_on names task %, which this enqueue replaces (unique key %)', _old, quote_literal(_unique_key)
      using errcode = '22023';
  end if;

  task_id := queues.enqueue_task(_task_type, _payload, _at, _priority, _resource_key, _max_attempts,
                                 _public, _notify, false, _depends_on, _group_key, _timeout_ms);
  insert into queues.task_unique (task_id, unique_key) values (task_id, _unique_key);
  update queues.task_unique_key k set task_id = enqueue_unique_task.task_id where k.unique_key = _unique_key;
  outcome := 'inserted';
  if _old is not null and not _held
     and queues.supersede_task(_old, format('replaced by task %s (unique key %s)', task_id, quote_literal(_unique_key))) then
    outcome := 'replaced';
    replaced_task_id := _old;
  end if;
end;
$$;

-- Completes a pending task no worker holds as 'cancelled' with _reason (as
-- admin.cancel_tasks does: queues.task_completed, queues.task_cancelled, out of the claim
-- index, its resource key freed); true when it did. False when a live lease holds it
-- (its worker completes it) or it is no longer pending. Refuses (55000) a task that a
-- pending task depends on. Takes the claim's lock order
-- (resource key, then the pending row), so a claim that took the row first wins.
create or replace function queues.supersede_task(_task_id bigint, _reason text)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p record;
  _dependent bigint;
begin
  perform queues.lock_resource_keys(array[_task_id]);
  select p.task_type, (p.current_lease_id is not null and p.available_at > now()) as held into _p
    from queues.task_pending p where p.task_id = _task_id for update;
  if not found or _p.held then
    return false;
  end if;
  -- Replacing a task that others wait for would fail them (a dependency that ended
  -- cancelled): refused, before this transaction's writes commit (its enqueue rolls back).
  -- A dependent enqueued concurrently holds the row FOR KEY SHARE until it commits, so
  -- the lock above waited for it and this statement sees its edge.
  select d.task_id into _dependent
    from queues.task_dependency d
    join queues.task_pending w on w.task_id = d.task_id
   where d.depends_on_task_id = _task_id and d.task_id > _task_id
   order by d.task_id limit 1;
  if found then
    raise exception 'task % cannot be replaced: task % waits for it', _task_id, _dependent
      using errcode = '55000',
            hint = 'Use the skip policy, or cancel the waiting tasks first.';
  end if;
  insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
  values (_task_id, null, now(), 'cancelled', _p.task_type);
  insert into queues.task_cancelled (task_id, reason, cancelled_at) values (_task_id, left(_reason, 500), now());
  delete from queues.task_pending p where p.task_id = _task_id;
  delete from queues.resource_lease k where k.task_id = _task_id;
  return true;
end;
$$;

-- Enqueue a unique task for an app or the API: queues.enqueue's arguments plus the key,
-- the policy (NULL: 'skip') and the debounce period; _depends_on, _group_key and
-- _timeout_ms as in queues.enqueue (see the top of the file for what each policy does
-- with them). One row: task_id, outcome
-- ('inserted', 'skipped', 'replaced'), replaced_task_id. Refuses internal task types
-- (42501), as queues.enqueue. Sends the wake-up in its own transaction (a caller on a
-- pool calls it as a statement of its own).
create or replace function queues.enqueue_unique(
  _task_type     text,
  _payload       jsonb,
  _unique_key    text,
  _unique_policy text default null,
  _unique_period interval default null,
  _scheduled_at  timestamptz default null,
  _priority      integer default null,
  _resource_key  text default null,
  _max_attempts  integer default null,
  _depends_on    bigint[] default null,
  _group_key     text default null,
  _timeout_ms    integer default null
) returns table (task_id bigint, outcome text, replaced_task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select u.task_id, u.outcome, u.replaced_task_id
    from queues.enqueue_unique_task(_task_type, _payload, _unique_key, _unique_policy, _unique_period,
                                    _scheduled_at, _priority, _resource_key, _max_attempts, true, true,
                                    _depends_on, _group_key, _timeout_ms) u
$$;

-- The owner's SQL's unique enqueue (no grant), as queues.enqueue_internal: any task type.
create or replace function queues.enqueue_unique_internal(
  _task_type     text,
  _payload       jsonb,
  _unique_key    text,
  _unique_policy text default null,
  _unique_period interval default null,
  _scheduled_at  timestamptz default null,
  _priority      integer default null,
  _resource_key  text default null,
  _max_attempts  integer default null,
  _depends_on    bigint[] default null,
  _group_key     text default null,
  _timeout_ms    integer default null
) returns table (task_id bigint, outcome text, replaced_task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select u.task_id, u.outcome, u.replaced_task_id
    from queues.enqueue_unique_task(_task_type, _payload, _unique_key, _unique_policy, _unique_period,
                                    _scheduled_at, _priority, _resource_key, _max_attempts, false, true,
                                    _depends_on, _group_key, _timeout_ms) u
$$;

-- A batch of queues.enqueue_tasks in which some element names a unique key (or a policy
-- or period), enqueued element by element in input order, so that a key met twice in one
-- batch sees its first task. Returns the task ids in input order (the pending task's for
-- a skipped element). All or nothing; the first bad element raises, named tasks[i], with
-- its own SQLSTATE (one exception block around the loop, not one per element: a
-- subtransaction per element would overflow the backend's cache of 64 past a batch of
-- 64). One wake-up at the end if any of the tasks is due within a minute.
create or replace function queues.enqueue_tasks_one_by_one(_tasks jsonb, _public boolean)
  returns table (task_id bigint)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _idx bigint := -1;
  _e jsonb;
  _id bigint;
  _ids bigint[] := '{}';
  _state text;
  _message text;
  _hint text;
  _fields constant text[] :=
    '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,unique_key,unique_policy,unique_period,depends_on,group_key,timeout_ms}';
  _deps bigint[];
begin
  begin
    for _e in select x.value from jsonb_array_elements(_tasks) x loop
      _idx := _idx + 1;
      if jsonb_typeof(_e) <> 'object' then
        raise exception 'must be a JSON object, got %', jsonb_typeof(_e) using errcode = '22023';
      end if;
      if _e - _fields <> '{}' then
        raise exception 'unknown field(s) %',
          left((select string_agg(k, ', ') from jsonb_object_keys(_e - _fields) k), 200) using errcode = '22023';
      end if;
      if jsonb_typeof(_e -> 'depends_on') not in ('array', 'null')
         or jsonb_path_exists(_e -> 'depends_on',
              'lax $[*] ? (!((@.type() == "number" && @ == @.floor()) || (@.type() == "string" && @ like_regex "^[0-9]{1,18}$")))') then
        raise exception 'depends_on must be an array of task ids' using errcode = '22023';
      end if;
      _deps := case when jsonb_typeof(_e -> 'depends_on') = 'array'
                    then array(select (d #>> '{}')::bigint from jsonb_array_elements(_e -> 'depends_on') d) end;
      if _deps && _ids then
        raise exception 'depends_on names task %, enqueued by the same call',
          (select min(d) from unnest(_deps) d where d = any (_ids))
          using errcode = '22023',
                hint = 'A task can depend only on tasks that exist before its enqueue, so dependencies never form a cycle.';
      end if;
      if _e ->> 'unique_key' is null then
        if _e ->> 'unique_policy' is not null or _e ->> 'unique_period' is not null then
          raise exception 'unique_key must not be null when unique_policy or unique_period is given'
            using errcode = '22004';
        end if;
        _id := queues.enqueue_task(_e ->> 'task_type', _e -> 'payload', (_e ->> 'scheduled_at')::timestamptz,
                                   (_e ->> 'priority')::integer, _e ->> 'resource_key',
                                   (_e ->> 'max_attempts')::integer, _public, false, false, _deps,
                                   _e ->> 'group_key', (_e ->> 'timeout_ms')::integer);
      else
        select u.task_id into _id
          from queues.enqueue_unique_task(_e ->> 'task_type', _e -> 'payload', _e ->> 'unique_key',
                                          _e ->> 'unique_policy', (_e ->> 'unique_period')::interval,
                                          (_e ->> 'scheduled_at')::timestamptz, (_e ->> 'priority')::integer,
                                          _e ->> 'resource_key', (_e ->> 'max_attempts')::integer,
                                          _public, false, _deps, _e ->> 'group_key', (_e ->> 'timeout_ms')::integer) u;
      end if;
      _ids := _ids || _id;
    end loop;
  exception when others then
    get stacked diagnostics _state = returned_sqlstate, _message = message_text, _hint = pg_exception_hint;
    raise exception 'tasks[%]: %', _idx, _message using errcode = _state, hint = _hint;
  end;
  if exists (select 1 from queues.task_pending p
              where p.task_id = any (_ids) and p.scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select u.id from unnest(_ids) with ordinality u(id, n) order by u.n;
end;
$$;

-- Removes up to _limit rows of queues.task_unique_key whose task is no longer pending
-- (rows an enqueuer holds are passed over), and the facts queues.task_unique of tasks
-- older than the oldest task kept (their history partitions were dropped); returns how
-- many key rows it removed. Owner only. Such key rows change nothing (a key whose task
-- completed is free), so this only keeps the table to about one row per pending unique
-- task.
create or replace function queues.prune_task_unique_keys(_limit integer default 10000)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n integer;
begin
  delete from queues.task_unique u
   where u.task_id < coalesce((select min(t.task_id) from queues.task t), 9223372036854775807);
  with stale as (
    select k.unique_key from queues.task_unique_key k
     where k.task_id is not null
       and not exists (select 1 from queues.task_pending p where p.task_id = k.task_id)
     limit coalesce(_limit, 10000)
       for update skip locked
  )
  delete from queues.task_unique_key k using stale s where k.unique_key = s.unique_key;
  get diagnostics _n = row_count;
  return _n;
end;
$$;

-- Rebuilds queues.task_unique_key from the facts: per key, the newest pending task
-- enqueued with it. Returns the number of rows. Owner only; locks out unique enqueues
-- while it runs.
create or replace function queues.rebuild_task_unique_key() returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n bigint;
begin
  lock table queues.task_unique_key in exclusive mode;
  delete from queues.task_unique_key;
  insert into queues.task_unique_key (unique_key, task_id)
  select distinct on (u.unique_key) u.unique_key, u.task_id
    from queues.task_pending p
    join queues.task_unique u on u.task_id = p.task_id
   order by u.unique_key, u.task_id desc;
  get diagnostics _n = row_count;
  return _n;
end;
$$;
--! EndIncluded queues/unique.sql
