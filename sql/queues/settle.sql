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
                                   array(select to_timestamp(u.us / 1000000.0)
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
