--! Previous: sha1:4cf1f01360c1366296ee2c961298dc7234478aeb
--! Hash: sha1:209e877d29787adaccf25e467d87720f10ea59e9
--! Message: Named suspects and starts carried by completions; traces stored per task; email and sms share one channel definition

--! split: 100-hot-path-named-suspects.sql
set local lock_timeout = '5s';

-- Suspects are named by their lease, and a task's start travels with its completion: a
-- claim names at most one suspect (task_lease.suspect, mirrored on the pending row as
-- suspect_lease), an expiry counts towards abandonment only for the lease's named
-- suspect (the others are uncounted_count, formerly unstarted_count), and nothing is
-- written when a task starts (task_completed.started_at, task_attempt_failed.started_at).
-- lock: access exclusive on queues.task_pending: adding a column with a constant default and renaming one change the catalog only (no rewrite); held for milliseconds
-- lock: access exclusive on queues.task_lease: adding a nullable column changes the catalog only
-- lock: access exclusive on queues.task_completed: adding a nullable column changes the catalog only
-- lock: access exclusive on queues.task_attempt_failed: adding a nullable column changes the catalog only
alter table queues.task_pending add column if not exists suspect_lease boolean not null default false;
do $$
begin
  if exists (select 1 from information_schema.columns
              where table_schema = 'queues' and table_name = 'task_pending' and column_name = 'unstarted_count') then
    alter table queues.task_pending rename column unstarted_count to uncounted_count;
  end if;
end;
$$;
alter table queues.task_lease add column if not exists suspect boolean;
alter table queues.task_completed add column if not exists started_at timestamptz;
alter table queues.task_attempt_failed add column if not exists started_at timestamptz;
comment on column queues.task_pending.suspect_lease is
  'The current lease named this task its suspect (queues.claim_tasks_at); its expiry counts towards abandonment.';
comment on column queues.task_pending.uncounted_count is
  'Leases that ended without an end and without counting towards abandonment: not the named suspect of their lease.';
comment on column queues.task_lease.suspect is
  'The claim took this task as its one suspect (a lease of it had ended without an end); null on leases written before claims named one.';
comment on column queues.task_completed.started_at is
  'When the run that ended here started, as its worker reported it; null when not reported.';
comment on column queues.task_attempt_failed.started_at is
  'When the failed run started, as its worker reported it; null when not reported.';

drop function if exists queues.settle_tasks(bigint[], bigint[], bigint[], bigint[], text[], boolean[], bigint[], text[]);
drop function if exists queues.complete_tasks(bigint[], bigint[], text[], boolean[]);
drop function if exists queues.mark_started(bigint[], bigint[]);
drop function if exists queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text);
drop function if exists admin.completions_between(timestamptz, timestamptz);

--! Included queues/task_lease_effective.sql
-- Each lease with the expiry in force: released, else revoked, else the newest
-- extension's, else as claimed; and its worker's id (a lease names its worker by key in
-- queues.worker_name, or, written before that, by id). Lease facts are joined on
-- (task_id, task_lease_id), their primary keys, so a task's leases are read from its own
-- partition set. suspect: the claim named the task its suspect (null on leases written
-- before claims named one).
create or replace view queues.task_lease_effective as
select l.task_lease_id, l.task_id,
       coalesce(l.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = l.worker_key)) as worker_id,
       l.leased_at,
       coalesce(r.released_at, v.revoked_at, e.expires_at, l.expires_at) as expires_at,
       r.released_at,
       coalesce(e.extensions, 0) as extensions,
       v.revoked_at,
       l.suspect
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
--! Included queues/complete.sql
-- Completion: queues.complete_task (one) and queues.complete_tasks (a batch).
--
-- Fencing: a caller that passes the lease it holds can only complete while that lease
-- is the task's newest one. A worker whose lease expired and was re-claimed by another
-- worker gets 'lease_lost' and changes nothing.

-- Completes a batch. Parallel arrays: _task_lease_ids, _outcomes, _retries and
-- _started_at may be null (no fencing, outcome by default, retries allowed, start not
-- known) or have one element per task (elements may be null). _started_at: when the run
-- that ends here started, kept with the completion (or the failed attempt): the worker
-- knows it, and reports no start separately.
-- The default outcome (a null element) keeps a failure reported with queues.fail_task:
-- 'failed' when an error was recorded against the task during its current run (under
-- its current lease, or without a lease since that lease was taken; since it was
-- enqueued when it holds none), else 'succeeded'. So the specification's worker contract,
-- fail_task and then complete_task, completes the task failed.
-- A 'failed' outcome for a task with max_attempts > 1 and attempts left is not terminal
-- unless its _retries element is false (a failure no retry can mend, such as a
-- validation failure): the attempt is recorded (queues.task_attempt_failed) and the task
-- runs again after an exponential backoff (internal.backoff).
-- 'validation_failed' (a validation_failure_message: a business outcome no retry can
-- mend) is final too, and, unlike 'failed', never a dead letter.
-- A keyed task's lease completes only while the task holds its resource key.
-- Returns one row per input task, in input order: result is
--   'completed'          this call completed it
--   'retry_scheduled'    a failed attempt of a task that runs again
--   'already_completed'  it was completed before by a caller passing the same lease, or
--                        this call passes none (idempotent; nothing changed)
--   'lease_lost'         _task_lease_id is not the task's current lease, its resource key
--                        went to another task, or the task was completed by anyone not
--                        passing this lease: another worker, an unfenced caller, or the
--                        queue abandoning it (nothing changed)
--   'unknown_task'       no such task
create or replace function queues.complete_tasks(
  _task_ids       bigint[],
  _task_lease_ids bigint[] default null,
  _outcomes       text[] default null,
  _retries        boolean[] default null,
  _started_at     timestamptz[] default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  -- Planned once, not per call: the statements below have one good plan whatever the
  -- arguments (index order with a LIMIT; primary-key probes), and planning was about
  -- 40% of the call's cost.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _bad text;
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 tasks per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain null' using errcode = '22004';
  end if;
  if _task_lease_ids is not null and cardinality(_task_lease_ids) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids must have one element per task (% tasks, % lease ids)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if _outcomes is not null and cardinality(_outcomes) <> cardinality(_task_ids) then
    raise exception 'outcomes must have one element per task (% tasks, % outcomes)',
      cardinality(_task_ids), cardinality(_outcomes) using errcode = '22023';
  end if;
  select o into _bad from unnest(_outcomes) o
   where o is not null and o not in ('succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed') limit 1;
  if found then
    raise exception 'unknown outcome %; expected succeeded, failed, abandoned, cancelled or validation_failed',
      quote_literal(left(_bad, 100)) using errcode = '22023';
  end if;
  if _retries is not null and cardinality(_retries) <> cardinality(_task_ids) then
    raise exception 'retries must have one element per task (% tasks, % retries)',
      cardinality(_task_ids), cardinality(_retries) using errcode = '22023';
  end if;
  if _started_at is not null and cardinality(_started_at) <> cardinality(_task_ids) then
    raise exception 'started_at must have one element per task (% tasks, % start times)',
      cardinality(_task_ids), cardinality(_started_at) using errcode = '22023';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;

  perform queues.lock_resource_keys(_task_ids);

  return query
  with input as (
    select i.task_id, i.task_lease_id, i.outcome,
           coalesce(i.retry, true) as may_retry, i.started_at, i.ord
      from unnest(_task_ids,
                  coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])),
                  coalesce(_outcomes, array_fill(null::text, array[cardinality(_task_ids)])),
                  coalesce(_retries, array_fill(null::boolean, array[cardinality(_task_ids)])),
                  coalesce(_started_at, array_fill(null::timestamptz, array[cardinality(_task_ids)])))
           with ordinality as i(task_id, task_lease_id, outcome, retry, started_at, ord)
  ),
  -- The pending rows this call may act on, locked: a concurrent claim skips them, a
  -- concurrent completion waits and then finds nothing.
  held as (
    select h.task_id, h.task_type, h.current_lease_id, h.resource_key, h.task_lease_id, h.outcome,
           h.outcome = 'failed' and h.may_retry and h.failed_attempts + 1 < h.max_attempts as retry,
           h.failed_attempts, h.started_at
      from (
    select p.task_id, p.task_type, p.current_lease_id, p.resource_key, i.task_lease_id, i.may_retry,
           p.failed_attempts, p.max_attempts, i.started_at,
           case
             when i.outcome is not null then i.outcome
             -- The default: an error of the current run makes it a failure (evaluated only
             -- for a null outcome; the worker always names its outcome).
             when exists (select 1 from queues.error e
                           where e.task_id = p.task_id
                             and (e.task_lease_id = p.current_lease_id
                                  or (e.task_lease_id is null
                                      and e.created_at >= coalesce(
                                            (select l.leased_at from queues.task_lease l
                                              where l.task_id = p.task_id and l.task_lease_id = p.current_lease_id),
                                            (select t.enqueued_at from queues.task t where t.task_id = p.task_id)))))
               then 'failed'
             else 'succeeded'
           end as outcome
      from queues.task_pending p
      join input i on i.task_id = p.task_id
     -- A primary-key probe per task, whatever the planner estimates for the input.
     where p.task_id = any (_task_ids)
       and (i.task_lease_id is null
            or (p.current_lease_id = i.task_lease_id
                -- A keyed task completes under its lease only while it holds its key.
                and (p.resource_key is null
                     or exists (select 1 from queues.resource_lease r
                                 where r.resource_key = p.resource_key and r.task_id = p.task_id))))
       for update of p
      ) h
  ),
  -- Simple retries: a failed attempt with attempts left runs again after a backoff.
  retry_facts as (
    insert into queues.task_attempt_failed (task_id, task_lease_id, failed_at, retry_at, started_at)
    select h.task_id, h.current_lease_id, now(), now() + internal.backoff(h.failed_attempts, 3600), h.started_at
      from held h where h.retry
    returning task_id, retry_at
  ),
  retried as (
    update queues.task_pending p
       set available_at = r.retry_at,
           current_lease_id = null,
           failed_attempts = p.failed_attempts + 1
      from retry_facts r
     where p.task_id = r.task_id
       and p.task_id = any (array(select r2.task_id from retry_facts r2))
    returning p.task_id
  ),
  removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select h.task_id from held h where not h.retry))
    returning p.task_id
  ),
  completed as (
    insert into queues.task_completed (task_id, task_lease_id, outcome, task_type, started_at)
    -- The lease the caller held; null when it passed none. A fenced caller is told
    -- 'already_completed' only for a completion made under its own lease.
    select h.task_id, h.task_lease_id, h.outcome, h.task_type, h.started_at
      from held h where not h.retry
    on conflict do nothing
    returning task_completed.task_id
  ),
  -- The task's resource key (if any) is free again, whether it completed or waits to retry.
  unlocked as (
    delete from queues.resource_lease r
     using held h
     where h.resource_key is not null and r.resource_key = h.resource_key and r.task_id = h.task_id
  )
  select i.task_id,
         case
           when c.task_id is not null then 'completed'
           when rt.task_id is not null then 'retry_scheduled'
           -- Completed under another lease: the caller's lease was taken over, and its
           -- transaction must not commit as if it had completed the task.
           when exists (select 1 from queues.task_completed tc
                         where tc.task_id = i.task_id
                           and i.task_lease_id is not null
                           and tc.task_lease_id is distinct from i.task_lease_id)
             then 'lease_lost'
           when exists (select 1 from queues.task_completed tc where tc.task_id = i.task_id)
             then 'already_completed'
           when not exists (select 1 from queues.task t where t.task_id = i.task_id)
             then 'unknown_task'
           else 'lease_lost'
         end
    from input i
    left join completed c on c.task_id = i.task_id
    left join retried rt on rt.task_id = i.task_id
   order by i.ord;
end;
$$;

-- The seeds' completion, extended: idempotent (true when this call completed the task or
-- scheduled its retry, false when it was already completed); fenced when _task_lease_id
-- is given (raises when that lease is no longer current); raises for an unknown task.
create or replace function queues.complete_task(
  _task_id       bigint,
  _task_lease_id bigint default null,
  _outcome       text default null
) returns boolean
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result text;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  select c.result into _result
    from queues.complete_tasks(array[_task_id], array[_task_lease_id], array[_outcome]) c;
  if _result = 'unknown_task' then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  elsif _result = 'lease_lost' then
    -- The queue's lease-loss marker: SQLSTATE 55000 with schema queues and constraint
    -- task_lease_current (clients read lease loss from it, not from 55000 alone).
    raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', schema = 'queues', constraint = 'task_lease_current',
            hint = 'Another worker claimed the task after this lease expired, or it was completed without this lease.';
  end if;
  return _result in ('completed', 'retry_scheduled');
end;
$$;
--! EndIncluded queues/complete.sql
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
                                   array(select to_timestamp(u / 1000000.0) from unnest(_started_us) u) end) c
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

-- A completion and its handler in one statement: the worker's completion of a handler task
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
--! EndIncluded queues/settle.sql
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
-- task_lease.expires_at is only the first). The completions are fenced by the same row
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
                                       where p.task_id = i.task_id) = i.task_lease_id, false)
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
-- (the transaction's counts, pg_stat_get_xact_tuples_updated and _deleted; every step is
-- watched when track_counts is off): after a step that made any, each step runs only if
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
  _changes_at_start := pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending);

  begin
    for _i in 1 .. _n loop
      if not _held[_i] then
        -- Not run.
        _result[_i] := 'lease_lost';
        continue;
      end if;
      -- A step before it changed pending rows: is this lease still current?
      if (not _counted
          or pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending) <> _changes_at_start)
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

      _changes := pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending);
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
           or pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending) <> _changes then
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
                      where p.task_id = i.task_id and p.current_lease_id = i.task_lease_id), false) as held
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
-- Suspects and poison tasks: a task a lease of which ended without an end (it expired, or
-- was revoked: its worker died or went silent) is a suspect, whichever of the worker's
-- tasks killed it. A claim takes at most one suspect and names it in its lease
-- (queues.task_lease.suspect, task_pending.suspect_lease). An expiry counts towards
-- abandonment only when the task was the named suspect of that lease: the first expiry
-- of a task never counts (it may have waited in a dead worker's local queue, or run
-- beside the task that killed it), and from then on the task runs only as a named
-- suspect, so each death it causes counts. A task whose counted expiries reach
-- _max_leases (reported interruptions count too; releases and failed attempts do not) is
-- completed as 'abandoned' with an error instead of being leased again: a task that kills
-- its worker, or PostgreSQL, is abandoned after _max_leases + 1 leases. Nothing in this
-- accounting depends on the worker reporting a start: the lease naming its suspect
-- commits before the task runs.

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
       select p.task_id, p.task_type, p.current_lease_id, p.resource_key, p.priority, p.scheduled_at,
              p.lease_count - p.released_count - p.failed_attempts as ended_leases,
              p.uncounted_count, p.suspect_lease
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
        select p.task_id, p.task_type, p.current_lease_id, p.resource_key, p.priority, p.scheduled_at,
               p.lease_count - p.released_count - p.failed_attempts as ended_leases,
               p.uncounted_count, p.suspect_lease
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
    -- Of the candidates (locked until commit), the first _limit in claim order. A task
    -- whose leases ended without an end (ended_leases, the expired current one included)
    -- is a suspect; the expiries counted towards abandonment leave out those of leases
    -- that did not name it as their suspect (uncounted_count, and the current one if so).
    select c.task_id, c.task_type, c.current_lease_id, c.resource_key, c.priority, c.scheduled_at,
           c.counted >= _max_leases as poisoned,
           c.ended_leases > 0 as suspect,
           c.counted as counted_leases
      from (
        select c.*,
               c.ended_leases - c.uncounted_count
                 - (c.current_lease_id is not null and not c.suspect_lease)::integer as counted
          from candidate c
         order by c.priority desc, c.scheduled_at, c.task_id
         limit _limit
      ) c
  ),
  -- Resource keys: one task per key in this batch, and only if no other task holds the
  -- key. The upsert decides on the newest committed row (not this statement's snapshot),
  -- so two claimers never both take a key.
  -- Suspects (their worker may have died of them) are leased one per claim, as the
  -- lease's named suspect, so the tasks a crashed worker was running, which all come
  -- back at the same moment, do not all land in one worker again beside the task that
  -- crashed it.
  allowed as (
    select pk.task_id, pk.resource_key, pk.priority, pk.scheduled_at, pk.suspect
      from (select pk.*,
                   row_number() over (partition by pk.suspect
                                      order by pk.priority desc, pk.scheduled_at, pk.task_id) as rank
              from picked pk
             where not pk.poisoned) pk
     where not pk.suspect or pk.rank = 1
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
    select pk.task_id, pk.suspect
      from allowed pk
     where pk.resource_key is null or pk.task_id in (select kt.task_id from key_taken kt)
  ),
  abandoned_error as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select pk.task_id, pk.current_lease_id,
           format('abandoned: %s leases expired without completion (max_leases %s)', pk.counted_leases, _max_leases)
      from picked pk where pk.poisoned
  ),
  abandoned as (
    -- No lease: the claimer abandoning the task does not hold one, so the last holder's
    -- fenced completion is refused as lease_lost.
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
    select pk.task_id, null, _now, 'abandoned', pk.task_type from picked pk where pk.poisoned
  ),
  abandoned_removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select pk.task_id from picked pk where pk.poisoned))
  ),
  leased as (
    insert into queues.task_lease (task_id, worker_key, leased_at, expires_at, suspect)
    select e.task_id, _worker_key, _now, _now + make_interval(secs => _lease_seconds), e.suspect
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
  -- still current here expired, and is left uncounted unless it named the task its suspect.
  lease_map as (
    select jsonb_object_agg(l.task_id::text, l.task_lease_id) as leases from leased l
  ),
  moved as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds),
           current_lease_id = (m.leases ->> p.task_id::text)::bigint,
           lease_count = p.lease_count + 1,
           uncounted_count = p.uncounted_count + (p.current_lease_id is not null and not p.suspect_lease)::integer,
           -- The new lease names the task its suspect when a lease of it ended without an
           -- end (as picked decided: at most one per claim).
           suspect_lease = p.lease_count - p.released_count - p.failed_attempts > 0
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
           -- Its task is a suspect from now on (see queues.claim_tasks_at); the lease counts
           -- towards abandonment only if it named the task its suspect.
           uncounted_count = p.uncounted_count + (not p.suspect_lease)::integer
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
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)));
  return query
  with held as (
    select p.task_id, p.current_lease_id as task_lease_id, p.suspect_lease as suspect
      from queues.task_pending p
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)
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
     lease_count, released_count, max_attempts, failed_attempts, uncounted_count, interrupted_count,
     suspect_lease)
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
         -- Leases that ended without counting towards abandonment: neither released, nor
         -- ended by a failed attempt, nor the lease still held (a claim counts that one
         -- when it expires), and not naming the task their suspect (a lease written before
         -- suspects were named: not started).
         (select count(*)::integer
            from queues.task_lease_effective u
           where u.task_id = t.task_id
             and u.released_at is null
             and not coalesce(u.suspect, exists (select 1 from queues.task_lease_started s
                                                  where s.task_id = u.task_id and s.task_lease_id = u.task_lease_id))
             and not exists (select 1 from queues.task_attempt_failed a where a.task_id = u.task_id and a.task_lease_id = u.task_lease_id)
             and not (u.task_lease_id = l.task_lease_id and l.revoked_at is null
                      and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id))),
         coalesce(i.interrupted_count, 0),
         coalesce(l.suspect, false)
    from queues.task t
    left join lateral (
      select le.task_lease_id, le.expires_at, le.released_at, le.revoked_at, le.suspect,
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
--! Included admin/common.sql
-- Helpers shared by the admin functions: task states, page sizes, task type filters.
-- Called only from definer functions: no grants.

-- The state of a task that is not completed, from its claim-index row at _now:
--   ready      claimable now (scheduled time reached; no live lease)
--   running    a live lease holds it
--   retrying   leased before, waiting for its retry time (no live lease)
--   scheduled  never leased, scheduled in the future
-- No SET clause: a function with one is never inlined, and the dashboard's counts call
-- this once per pending task (20,000 calls took 140 ms with it, a few ms inlined). It
-- names no object, so the search path cannot change what it does; it is not a security
-- definer.
create or replace function admin.pending_state(
  _available_at timestamptz, _current_lease_id bigint, _lease_count integer, _now timestamptz
) returns text
  language sql immutable parallel safe
as $$
  select case
           when _available_at <= _now then 'ready'
           when _current_lease_id is not null then 'running'
           when _lease_count > 0 then 'retrying'
           else 'scheduled'
         end
$$;

-- Every state a task can be in: the pending ones above, then the completion outcomes.
create or replace function admin.task_states() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['scheduled', 'ready', 'running', 'retrying',
               'succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed']
$$;

-- Validates a page size: NULL means _default; else 1 to 500.
create or replace function admin.page_limit(_limit integer, _default integer default 50)
  returns integer
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _limit is null then
    return _default;
  end if;
  if _limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500, got %', _limit using errcode = '22023';
  end if;
  return _limit;
end;
$$;

-- Validates an optional task type filter: NULL, or a registered type (22023 otherwise).
create or replace function admin.assert_task_type(_task_type text)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_type is not null
     and not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
end;
$$;

-- Completions in (_from, _to] with their task's type and their run's start (null when the
-- completion did not say: a completion without a lease, or written before it could): the type the completion names, or,
-- for a completion written before task_completed.task_type existed, its task's (a
-- primary-key probe of queues.task, made only for those). Inlined into its callers (SQL,
-- stable, no SET clause), so their filters on the window reach task_completed's
-- completed_at index. Every object it names is schema-qualified and it is not a security
-- definer; called only from definer functions with a pinned search path: no grants.
create or replace function admin.completions_between(_from timestamptz, _to timestamptz)
  returns table (task_id bigint, task_lease_id bigint, completed_at timestamptz, outcome text, task_type text,
                 started_at timestamptz)
  language sql stable
as $$
  select c.task_id, c.task_lease_id, c.completed_at, c.outcome,
         coalesce(c.task_type, (select x.task_type from queues.task x where x.task_id = c.task_id)),
         c.started_at
    from queues.task_completed c
   where c.completed_at > _from and c.completed_at <= _to
$$;
--! EndIncluded admin/common.sql
--! Included admin/capacity.sql
-- Capacity planning per role (= task_type): how much work is waiting, how fast a worker
-- gets through it while it works, and how many workers would drain it in 1, 4 or 8 hours.
-- The role-based specification's view of it is public.v_worker_capacity
-- (sql/public/role_based_worker.sql).
--
-- Cost: pending/ready/running count queues.task_pending (bounded by pending work);
-- throughput reads only the completions of the last _window_seconds, through
-- task_completed_completed_at_idx, and the leases of the tasks enqueued in that window
-- (a range of task_lease's primary key; a primary-key probe for a completion of an older
-- task), with a primary-key probe of task_lease_started per completion that does not say
-- when its run started (written before completions carried it); active workers
-- read queues.worker. Nothing scans history.
--
-- Figures:
--   pending               tasks not completed (scheduled, ready, running, retrying)
--   ready                 claimable now
--   running               held by a live lease
--   active_workers        registered workers of this type seen within _dead_after_seconds
--                         and not stopped
--   completed_in_window   completions (any outcome) in the window
--   window_workers        distinct workers whose leases completed those tasks
--   tasks_per_worker_hour capacity: the window's completions that ran under a lease,
--                         divided by the hours their workers were busy with this type
--                         (per worker, the union of its runs, each from its start, or its
--                         lease when no start was recorded, to its completion, within the
--                         window). A worker that waits for work is not busy, so this is
--                         what a worker gets through while it works, not the arrival rate;
--                         a worker running tasks side by side counts each hour once. Null
--                         without such completions in the window
--   estimated_hours_to_drain  ready / (tasks_per_worker_hour * active_workers): the
--                         backlog claimable now; tasks scheduled later are not backlog (they
--                         cannot run sooner). 0 when nothing is ready; null without a rate
--                         or without workers
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
  -- The window's completions meet the leases of the window's tasks in one hash join: a
  -- nested loop would probe task_lease once per completion (the CTE's row estimate is a
  -- guess). The lateral probes of older completions stay nested loops, the only plan
  -- they have.
  set enable_nestloop = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 3600);
  _dead_after integer := coalesce(_dead_after_seconds, 600);
  _first bigint;
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

  _first := admin.first_task_id_after(_now - make_interval(secs => _window));
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
  -- Completions in the window by completed_at (index range scan), with their type
  -- (admin.completions_between).
  completion as materialized (
    select c.task_id, c.task_lease_id, c.task_type, c.completed_at, c.started_at
      from admin.completions_between(_now - make_interval(secs => _window), _now) c
     where _task_type is null or c.task_type = _task_type
  ),
  -- The run of each completing lease: its worker, its start (the completion's, else a
  -- start mark, else the lease) and its end. The leases of tasks enqueued in the window (ids from _first on)
  -- are one range of task_lease's primary key, joined at once; a completion of an older
  -- task probes its lease by primary key; each start mark is a primary-key probe (a scalar
  -- subquery). A lease names its worker by key (queues.worker_name), or by id if written
  -- before that key existed: a worker counts once per way it is named (twice, for one
  -- window, if it ran across that migration). A completion without a lease (cancelled,
  -- abandoned) names none and ran nowhere.
  completion_run as (
    select x.task_type, x.worker_key, x.worker_id,
           greatest(x.run_from, _now - make_interval(secs => _window)) as run_from, x.run_to
      from (select c.task_type, l.worker_key, l.worker_id, c.completed_at as run_to,
                   coalesce(c.started_at,
                            (select st.started_at from queues.task_lease_started st
                              where st.task_id = c.task_id and st.task_lease_id = c.task_lease_id),
                            l.leased_at) as run_from
              from completion c
              join queues.task_lease l on l.task_id = c.task_id and l.task_lease_id = c.task_lease_id
             where c.task_id >= _first and l.task_id >= _first
            union all
            select c.task_type, l.worker_key, l.worker_id, c.completed_at,
                   coalesce(c.started_at,
                            (select st.started_at from queues.task_lease_started st
                              where st.task_id = c.task_id and st.task_lease_id = c.task_lease_id),
                            l.leased_at)
              from completion c
             cross join lateral (select y.worker_key, y.worker_id, y.leased_at from queues.task_lease y
                                  where y.task_id = c.task_id and y.task_lease_id = c.task_lease_id limit 1) l
             where c.task_id < _first) x
  ),
  -- Busy time per type and worker: the union of its runs (gaps and islands: a run that
  -- starts after every earlier run of the worker ended opens a new island).
  run_marked as (
    select r.*,
           max(r.run_to) over (partition by r.task_type, r.worker_key, r.worker_id
                               order by r.run_from, r.run_to
                               rows between unbounded preceding and 1 preceding) as before_to
      from completion_run r
  ),
  run_island as (
    select m.*,
           count(*) filter (where m.before_to is null or m.run_from > m.before_to)
             over (partition by m.task_type, m.worker_key, m.worker_id order by m.run_from, m.run_to
                   rows between unbounded preceding and current row) as island
      from run_marked m
  ),
  busy as (
    select i.task_type,
           count(distinct (i.worker_key, i.worker_id)) as workers,
           sum(i.runs) as runs,
           sum(extract(epoch from i.island_to - i.island_from)) as seconds
      from (select r.task_type, r.worker_key, r.worker_id, count(*) as runs,
                   min(r.run_from) as island_from, max(r.run_to) as island_to
              from run_island r
             group by r.task_type, r.worker_key, r.worker_id, r.island) i
     group by i.task_type
  ),
  recent as (
    select c.task_type, count(*) as completed,
           coalesce((select b.workers from busy b where b.task_type = c.task_type), 0) as workers,
           (select b.runs from busy b where b.task_type = c.task_type) as runs,
           (select b.seconds from busy b where b.task_type = c.task_type) as busy_seconds
      from completion c
     group by c.task_type
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
           case when r.runs > 0 and r.busy_seconds > 0
                then r.runs::double precision / (r.busy_seconds::double precision / 3600.0)
           end as rate
      from types ty
      left join queue q on q.task_type = ty.task_type
      left join recent r on r.task_type = ty.task_type
      left join workers w on w.task_type = ty.task_type
  )
  select f.task_type, f.pending, f.ready, f.running, f.active, f.completed, f.workers, _window,
         f.rate,
         case when f.ready = 0 then 0
              when f.rate is null or f.active = 0 then null
              else f.ready / (f.rate * f.active) end,
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
--! Included public/role_based_worker.sql
-- The role-based worker system's SQL names (the specification's
-- role-based-worker-system.md), in schema public so that they resolve unqualified on the
-- default search_path ("$user", public) of every database user, as the specification
-- writes them. Each is a thin face over the queue's own objects; nothing here keeps
-- state. Who may use what: sql/public/privileges.sql.
--
--   v_worker_capacity                          view: capacity per role (admin.capacity)
--   worker_tasks                               view: every task in the specification's
--                                              columns and statuses (read only)
--   recover_stale_tasks(threshold_minutes)     revokes the leases of workers silent for
--                                              that long (admin.recover_stale_leases)
--   generate_resync_tasks(batches, date)       menus.generate_resync_tasks

-- Capacity per role, in the specification's columns, then the queue's own figures. The
-- view calls admin.capacity(), so its reader needs EXECUTE on that function (the api
-- database user has it). See sql/admin/capacity.sql for how each figure is measured:
-- tasks_per_worker_hour is completions per busy worker-hour (capacity, not the arrival
-- rate) and estimated_hours_to_drain counts the tasks ready now.
create or replace view public.v_worker_capacity as
select c.task_type                as role,
       c.pending                  as pending_tasks,
       c.ready                    as ready_tasks,
       c.running                  as running_tasks,
       c.active_workers,
       c.tasks_per_worker_hour,
       c.estimated_hours_to_drain,
       c.workers_needed_1h,
       c.workers_needed_4h,
       c.workers_needed_8h,
       c.completed_in_window,
       c.window_workers,
       c.window_seconds
  from admin.capacity() c;
comment on view public.v_worker_capacity is
  'The role-based specification''s capacity view: admin.capacity() per role (task type), in its column names.';

-- Every task as a row of the specification's worker_tasks table, derived from the facts
-- (nothing is stored; it cannot be written). Columns:
--   id                 queues.task.task_id
--   role               task_type
--   dispensary_id      payload.store_id when it is a whole number (menus.store), else null
--   platform           payload.platform, else null
--   status             pending    not completed and not held: scheduled, ready, or waiting
--                                 for a retry
--                      claimed    held by a live lease whose run has not been seen to
--                                 start (a run reports its start with its worker's next
--                                 heartbeat, or with its completion)
--                      running    held by a live lease whose run was seen to start
--                      stale      held by a lease that expired uncompleted, or whose
--                                 worker is silent for longer than three of its heartbeat
--                                 intervals (its worker died: recover_stale_tasks)
--                      completed  completed 'succeeded'
--                      failed     completed 'failed', 'abandoned' or 'validation_failed'
--                      cancelled  completed 'cancelled'
--   priority, scheduled_for (scheduled_at), created_at (enqueued_at)
--   worker_id          the newest lease's worker
--   claimed_at         the newest lease's leased_at
--   started_at         the newest lease's run start: its completion's, else its start
--                      mark (queues.task_lease_started, written by a heartbeat)
--   completed_at       queues.task_completed.completed_at
--   last_heartbeat_at  the newest lease's last sign of life: its worker's last heartbeat
--                      while it holds the task, else the lease's newest extension, start
--                      or claim
--   result             the newest result recorded (queues.task_result)
--   error_message      the newest error (queues.error)
--   retry_count        failed attempts that were retried (queues.task_attempt_failed)
--   max_retries        max_attempts - 1
--   updated_at         the newest of the times above
--   outcome            the completion's own outcome (null while pending), beside status
-- Reading it reads every task (a row costs a few primary-key probes): it is for ad-hoc
-- checks such as the specification's health-check queries. The REST API and the admin
-- functions answer the same questions from bounded reads.
create or replace view public.worker_tasks as
select t.task_id                                      as id,
       t.task_type                                    as role,
       case when t.payload ->> 'store_id' ~ '^[0-9]{1,18}$' then (t.payload ->> 'store_id')::bigint end
                                                      as dispensary_id,
       case when jsonb_typeof(t.payload -> 'platform') = 'string' then left(t.payload ->> 'platform', 100) end
                                                      as platform,
       case
         when c.outcome = 'succeeded' then 'completed'
         when c.outcome in ('failed', 'abandoned', 'validation_failed') then 'failed'
         when c.outcome is not null then c.outcome
         when p.current_lease_id is null then 'pending'
         when p.available_at <= now() then 'stale'
         when w.last_seen_at < now() - make_interval(secs => 3 * coalesce(w.heartbeat_interval_ms, 30000) / 1000.0)
              and w.stopped_at is null then 'stale'
         when st.started_at is null then 'claimed'
         else 'running'
       end                                            as status,
       t.priority,
       t.scheduled_at                                 as scheduled_for,
       l.worker_id,
       l.leased_at                                    as claimed_at,
       st.started_at,
       c.completed_at,
       case when c.task_id is null and p.current_lease_id = l.task_lease_id and w.last_seen_at is not null
            then w.last_seen_at
            else greatest(l.leased_at, st.started_at,
                          (select max(x.extended_at) from queues.task_lease_extension x
                            where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id))
       end                                            as last_heartbeat_at,
       (select r.result from queues.task_result r where r.task_id = t.task_id
         order by r.task_lease_id desc limit 1)      as result,
       (select e.error_message from queues.error e where e.task_id = t.task_id
         order by e.error_id desc limit 1)           as error_message,
       coalesce(p.failed_attempts,
                (select count(*)::integer from queues.task_attempt_failed f where f.task_id = t.task_id))
                                                      as retry_count,
       t.max_attempts - 1                             as max_retries,
       t.enqueued_at                                  as created_at,
       greatest(t.enqueued_at, l.leased_at, st.started_at, c.completed_at)
                                                      as updated_at,
       c.outcome
  from queues.task t
  left join queues.task_pending p on p.task_id = t.task_id
  left join queues.task_completed c on c.task_id = t.task_id
  -- The newest lease, with its worker's id (a lease names its worker by key in
  -- queues.worker_name, or, written before that, by id).
  left join lateral (
    select y.task_id, y.task_lease_id, y.leased_at,
           coalesce(y.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = y.worker_key))
             as worker_id
      from queues.task_lease y
     where y.task_id = t.task_id
     order by y.task_lease_id desc
     limit 1
  ) l on true
  left join lateral (
    select coalesce(case when c.task_lease_id = l.task_lease_id then c.started_at end,
                    (select m.started_at from queues.task_lease_started m
                      where m.task_id = l.task_id and m.task_lease_id = l.task_lease_id)) as started_at
  ) st on true
  left join queues.worker w on w.worker_id = l.worker_id;
comment on view public.worker_tasks is
  'The role-based specification''s worker_tasks table as a read-only view over the queue''s facts, with its statuses.';

-- The specification's stale recovery: the live leases of workers not seen for
-- threshold_minutes (null: 10, as in the specification; 1 to 1440) are revoked, and their
-- tasks are claimable at once (pending again). A task whose revoked leases reach
-- MAX_LEASES is abandoned at its next claim, where the specification stops at
-- max_retries. A worker is never taken for dead sooner than three of its own heartbeat
-- intervals. Returns the leases revoked. The argument keeps the specification's name
-- (threshold_minutes), so `recover_stale_tasks(threshold_minutes => 5)` works too.
create or replace function public.recover_stale_tasks(threshold_minutes integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _minutes integer := coalesce(threshold_minutes, 10);
begin
  if _minutes not between 1 and 1440 then
    raise exception 'threshold_minutes must be between 1 and 1440, got %', _minutes using errcode = '22023';
  end if;
  return query select r.task_id, r.task_lease_id, r.worker_id from admin.recover_stale_leases(_minutes * 60) r;
end;
$$;

-- The specification's daily resync generation, unqualified: menus.generate_resync_tasks
-- (sql/menus/generate.sql), run as the caller (who needs EXECUTE on it too).
create or replace function public.generate_resync_tasks(_batches integer, _date date)
  returns table (batch integer, scheduled_at timestamptz, task_count integer)
  language sql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
  select * from menus.generate_resync_tasks(_batches, _date)
$$;
--! EndIncluded public/role_based_worker.sql

--! split: 200-task-trace.sql
-- Traces from enqueue to completion: the W3C trace context an enqueue was made in is kept
-- per task as the fact queues.task_trace, a history table (partitioned by task id like
-- the others, so retention drops it with its tasks), written only when the caller set one
-- (sql/queues/trace.sql). queues.run_steps takes each step's traceparent, so the tasks a
-- step enqueues (a supervisor's child tasks) continue the step's trace.
-- Locks: the new table and its partitions only (SHARE or SHARE UPDATE EXCLUSIVE on
-- queues.task_trace, ACCESS EXCLUSIVE on its empty default while a set's partition is
-- attached); no hot table.
set local lock_timeout = '5s';

create table if not exists queues.task_trace (
  task_id     bigint not null,
  -- W3C traceparent: version-traceid-parentid-flags (queues.is_valid_traceparent).
  traceparent text not null check (length(traceparent) = 55),
  -- W3C tracestate, as given (queues.is_valid_tracestate).
  tracestate  text check (length(tracestate) <= 512),
  constraint task_trace_pkey primary key (task_id)
) partition by range (task_id);
comment on table queues.task_trace is
  'Append-only: the W3C trace context a task was enqueued in (tasks enqueued with one only). See sql/queues/trace.sql.';
drop trigger if exists forbid_update on queues.task_trace;
create trigger forbid_update before update on queues.task_trace
  for each statement execute function queues.forbid_fact_update();
create table if not exists queues.task_trace_default partition of queues.task_trace default;
drop trigger if exists forbid_update on queues.task_trace_default;
create trigger forbid_update before update on queues.task_trace_default
  for each statement execute function queues.forbid_fact_update();

-- TRUNCATE queues.task empties every history table, task_trace included.
create or replace function queues.truncate_task_facts() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  truncate queues.task_pending, queues.resource_lease, queues.task_lease, queues.task_completed,
           queues.error, queues.task_lease_extension, queues.task_lease_release,
           queues.task_lease_revocation, queues.task_attempt_failed, queues.task_redriven,
           queues.task_lease_started, queues.task_interruption, queues.task_cancelled,
           queues.task_result, queues.task_run_now, queues.task_trace;
  return null;
end;
$$;

-- queues.run_steps gains _traceparents (default null): the old signature goes.
drop function if exists queues.run_steps(bigint[], bigint[], text[], jsonb[]);

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
-- The family, one concern a file (a migration includes only the file it changed):
--   partitions.sql           the tables and how their partitions are named
--   partitions_locks.sql     the locks a maintenance step takes, and how (read first)
--   partitions_create.sql    making a set, and adopting rows of the default partitions
--   partitions_sets.sql      the sets, their bounds and sizes, the last task id
--   partitions_maintain.sql  maintenance, one short step at a time
--   partitions_status.sql    what operators read
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

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now',
               'task_trace']
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

revoke execute on function queues.history_tables(), queues.history_partition_name(text, bigint) from public;
--! EndIncluded queues/partitions.sql

-- A partition of queues.task_trace for every partition set there is (a set half made by
-- maintenance gets its own when maintenance finishes the set).
select queues.attach_history_partition('task_trace', s.lower_bound, s.upper_bound)
  from queues.history_sets() s
 where not s.is_default
 order by s.lower_bound;

--! Included queues/trace.sql
-- Trace context of tasks: the W3C Trace Context (traceparent, tracestate) an enqueue was
-- made in, kept as the fact queues.task_trace (one row per task enqueued with one; a
-- history table, partitioned by task id and dropped with its task by retention:
-- sql/queues/partitions.sql). docs/operations.md, "Traces", has the whole picture.
--
-- How the context reaches an enqueue without an argument of every enqueue function: the
-- transaction-local settings queue.traceparent and queue.tracestate
-- (set_config('queue.traceparent', '00-...', true)). Every enqueue path reads them
-- (queues.enqueue_task, which the single, unique and element-by-element batch enqueues
-- share, and the batch insert of queues.enqueue_tasks), so the owner's SQL that enqueues
-- (a supervisor's child tasks, a kickoff, a handler) needs no change: queues.run_steps sets
-- queue.traceparent to each step's span while it runs, the worker's statements that run a
-- handler set it to the handler's span, and an app that calls a kickoff in its
-- transaction sets it first (@org/queue-client's setTraceContext; its enqueue functions
-- set it themselves, in the same statement).
--
-- Cost: an enqueue without the setting (tracing off, the default) reads one setting and
-- writes nothing more; with it, one row per task.
--
-- A malformed value is ignored, never an error: a trace is an aid, and an enqueue (an
-- order, an email) must not fail for it. It is reported with a NOTICE (sent to the
-- client, not written to the server log at the default log_min_messages): a bad
-- traceparent means no row; a bad tracestate alone is dropped and the traceparent kept,
-- as the W3C recommendation says.

-- Whether _traceparent is a W3C traceparent the queue keeps: lowercase hex fields
-- version-traceid-parentid-flags; version 00 exactly 55 characters, a later version (not
-- ff) 55 or more with a dash after the 55th (only the first 55 are kept, as the W3C
-- recommendation asks of a parser that meets a later version); the trace id and parent id
-- not all zeros.
create or replace function queues.is_valid_traceparent(_traceparent text) returns boolean
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(
           _traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$'
           and left(_traceparent, 2) <> 'ff'
           and (length(_traceparent) = 55 or left(_traceparent, 2) <> '00')
           and substr(_traceparent, 4, 32) <> repeat('0', 32)
           and substr(_traceparent, 37, 16) <> repeat('0', 16),
         false)
$$;

-- Whether _tracestate is kept: at most 512 characters of printable ASCII (the W3C list
-- of key=value members; its members are not parsed).
create or replace function queues.is_valid_tracestate(_tracestate text) returns boolean
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(length(_tracestate) <= 512 and _tracestate ~ '^[ -~]*$', false)
$$;

-- Records the transaction's trace context (queue.traceparent, queue.tracestate) for the
-- tasks _task_ids, just enqueued; returns whether it wrote anything. Nothing when
-- queue.traceparent is unset or empty; a malformed one is ignored with a NOTICE (see the
-- top of this file). No grants: called by the enqueue functions, as the owner.
create or replace function queues.record_task_trace(_task_ids bigint[]) returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _traceparent text := current_setting('queue.traceparent', true);
  _tracestate text := nullif(current_setting('queue.tracestate', true), '');
begin
  if _traceparent is null or _traceparent = '' or _task_ids is null or cardinality(_task_ids) = 0 then
    return false;
  end if;
  if not queues.is_valid_traceparent(_traceparent) then
    raise notice 'queue.traceparent is not a W3C traceparent; the task is enqueued without a trace context: %',
      quote_literal(left(_traceparent, 100));
    return false;
  end if;
  if _tracestate is not null and not queues.is_valid_tracestate(_tracestate) then
    raise notice 'queue.tracestate is not a W3C tracestate of at most 512 characters; kept the traceparent only';
    _tracestate := null;
  end if;
  insert into queues.task_trace (task_id, traceparent, tracestate)
  select t.id, left(_traceparent, 55), _tracestate from unnest(_task_ids) t(id);
  return true;
end;
$$;

-- The trace contexts of the tasks _task_ids that have one (the worker reads those of a
-- claim's tasks in one call when tracing is on). One row per task found; tasks enqueued
-- without a context have none.
create or replace function queues.task_traces(_task_ids bigint[])
  returns table (task_id bigint, traceparent text, tracestate text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_id, t.traceparent, t.tracestate
    from queues.task_trace t
   where t.task_id = any (_task_ids)
$$;

-- Granted here, beside the functions (as in partitions.sql), so that a migration that
-- includes sql/queues/privileges.sql before this file names no function missing yet.
revoke execute on function queues.is_valid_traceparent(text), queues.is_valid_tracestate(text),
  queues.record_task_trace(bigint[]), queues.task_traces(bigint[])
  from public;
grant execute on function queues.task_traces(bigint[]) to :DATABASE_WORKER;
--! EndIncluded queues/trace.sql
--! Included queues/enqueue.sql
-- queues.enqueue / queues.enqueue_many: add tasks. Apps call them through
-- @org/queue-client; they refuse internal task types (sql/queues/enqueue_permission.sql).
-- The owner's SQL (supervisors, handlers, kickoffs, schedules) calls the grant-less
-- queues.enqueue_internal. The worker never enqueues.
--
-- What one enqueue costs (BENCHMARKS.md, "where a task's time goes"): for an app, one
-- probe of queues.internal_task_type; its fields checked as plain expressions; one
-- statement that reads the task type and inserts the task and its claim-index row; one
-- pg_notify; a read of the setting queue.traceparent, and only when the caller set one
-- (tracing on), a row of queues.task_trace per task (sql/queues/trace.sql). A batch is
-- one insert statement whatever its size: the rows are checked inside it (the first bad
-- one, in input order, raises and the statement writes nothing), the task types read
-- once per call. queues.task has no foreign key to queues.task_type: it
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

-- The attempts a task gets when its enqueue names none: 25, as graphile-worker and River,
-- with the queue's backoff between them (internal.backoff: 5 s, 10 s, 20 s, ... capped
-- at an hour, about 19 hours in all). The owner's SQL that enqueues the tasks of a
-- business process (channel tasks, supervisor runs) passes its own max_attempts (1): a
-- process retries through new attempts, never through task retries.
create or replace function queues.default_max_attempts() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 25 $$;

-- The core of the single enqueue (no grants): validates one task and inserts it and its
-- claim-index row in one statement; returns its task_id. _public: called for an app or
-- the API (queues.enqueue), so internal task types are refused (42501) unless the
-- session is the owner's. _notify: send the wake-up (false: the caller sends it after
-- its commit, see queues.enqueue_and_commit). NULL arguments take the defaults (now, 0,
-- no resource key, queues.default_max_attempts()).
-- _check_only: run every check (the task type's existence included) and return NULL
-- without writing (queues.enqueue_unique_task checks before it decides to skip).
--
-- The transaction's trace context (the setting queue.traceparent, sql/queues/trace.sql)
-- is recorded for the task when there is one.
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
  _notify       boolean default true,
  _check_only   boolean default false
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
  if _check_only then
    if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
      raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
        using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
    end if;
    return null;
  end if;
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t where t.task_type = _task_type for key share;
  end if;

  with inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
    select t.task_type, _payload, coalesce(_priority, 0), _resource_key,
           coalesce(_max_attempts, queues.default_max_attempts()), coalesce(_scheduled_at, now())
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
  -- The caller's trace context, when the transaction has one (sql/queues/trace.sql).
  if current_setting('queue.traceparent', true) <> '' then
    perform queues.record_task_trace(array[_task_id]);
  end if;
  -- A task due more than a minute ahead wakes nobody now: workers poll for it.
  if _notify and (_scheduled_at is null or _scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _task_id;
end;
$$;

-- Enqueue one task for an app or the API; returns its task_id. NULL arguments take the
-- defaults (now, 0, no resource key, queues.default_max_attempts()), since generated
-- clients send undefined as NULL. A unique task: queues.enqueue_unique (unique.sql). Refuses internal task types (42501). _notify => false leaves the wake-up to
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
-- no resource key, queues.default_max_attempts()), since generated clients send undefined as NULL.
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
--    "resource_key"?: "...", "max_attempts"?: 25,
--    "unique_key"?: "...", "unique_policy"?: "skip", "unique_period"?: "30 seconds"}
-- (the unique fields as in queues.enqueue_unique; a skipped element answers the pending
-- task's id)
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
  -- A batch naming a unique key goes element by element (sql/queues/unique.sql); a batch
  -- without one pays only this walk of its elements' keys.
  if jsonb_path_exists(_tasks, 'lax $[*] ? (exists(@.unique_key) || exists(@.unique_policy) || exists(@.unique_period))') then
    return query select u.task_id from queues.enqueue_tasks_one_by_one(_tasks, _public) u;
    return;
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
           coalesce(c.priority, 0), c.resource_key, coalesce(c.max_attempts, queues.default_max_attempts()), coalesce(c.scheduled_at, now())
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
  -- The caller's trace context, when the transaction has one (sql/queues/trace.sql).
  if current_setting('queue.traceparent', true) <> '' then
    perform queues.record_task_trace(_ids);
  end if;

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
-- queues/steps.sql (run_steps with _traceparents) is included by 100-hot-path-named-suspects.sql;
-- the grants by 900-privileges.sql.

--! split: 410-comms-channel-shared.sql
set local lock_timeout = '5s';
-- The email and SMS processes keep what differs; what they shared moves to comms/channel.sql.
--! Included comms/channel.sql
-- What the send processes of the message channels (email.sql, sms.sql) share beyond the
-- channel-process skeleton of sql/internal/channel_process.sql: their registration with
-- the named entry points the worker and apps call, checking an attempt before the
-- provider call, creating a message under an idempotency key, and the kickoff. Each
-- channel's file keeps what differs: its limits, its message's fields and their checks,
-- and the provider payload.
--
-- A channel <c> (comms.message.channel: 'email', 'sms') has its message table
-- comms.<c>_message (message_id, then its fields) and the channel process comms.send_<c>
-- (registered in internal.channel_process; root comms.send_<c>_task, keyed by
-- send_<c>_task_id, one per message_id). Table and column names reach SQL only through
-- format('%I'), from a registered process and tables found in the catalog. The
-- statements below are dynamic, so planned on each call: they run once per message (an
-- app's send, a kickoff) or once per provider call, never in a loop over tasks; the
-- entry points comms.register_message_channel makes are static SQL. Owner only: they run
-- inside the channels' definer functions, or in migrations.

-- Registers the send process of _channel (internal.register_channel_process, with the
-- limits given) and makes its entry points, static SQL over its tables, each a thin
-- wrapper over the generic block named:
--   comms.send_<c>_supervisor_facts(_send_<c>_task_id)  what the supervisor decides on,
--                                     with the root's scheduled_at (select * from ...(123))
--   comms.send_<c>_supervisor(payload)  db_function: internal.run_channel_supervisor
--   comms.record_<c>_success(payload)   success_handler: internal.record_channel_attempt_success
--   comms.record_<c>_failure(payload)   error_handler: internal.record_channel_attempt_failure
--   comms.kickoff_send_<c>(_message_id, _scheduled_at)  comms.kickoff_channel_send
-- The before_handler, comms.get_<c>_payload, is the channel's own (its file writes it).
-- Their grants are in sql/comms/privileges.sql. Raises 22023 naming a missing table.
create or replace function comms.register_message_channel(
  _channel text, _max_attempts integer, _max_supervisor_runs integer, _backoff_cap_seconds integer
) returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _process text := 'send_' || _channel;
  -- The names every template below refers to, by position.
  _names text[] := array[
    'comms',                                      -- 1
    _process || '_task',                          -- 2  the root
    _process || '_task_id',                       -- 3  its key
    '_' || _process || '_task_id',                -- 4  the facts' argument
    _process,                                     -- 5  the process, as a literal
    _process || '_supervisor_facts',              -- 6
    _process || '_supervisor',                    -- 7
    'record_' || _channel || '_success',          -- 8
    'record_' || _channel || '_failure',          -- 9
    'kickoff_' || _process,                       -- 10
    _channel                                      -- 11 the channel, as a literal
  ];
  _table text;
begin
  foreach _table in array array[_channel || '_message', _process || '_task'] loop
    if to_regclass(format('%I.%I', 'comms', _table)) is null then
      raise exception 'channel %: table comms.% does not exist', _channel, _table using errcode = '22023';
    end if;
  end loop;

  perform internal.register_channel_process('comms', _process, _channel,
    _supervisor => format('%I.%I', 'comms', _names[7]),
    _before_handler => format('%I.%I', 'comms', 'get_' || _channel || '_payload'),
    _success_handler => format('%I.%I', 'comms', _names[8]),
    _error_handler => format('%I.%I', 'comms', _names[9]),
    _max_attempts => _max_attempts, _max_supervisor_runs => _max_supervisor_runs,
    _backoff_cap_seconds => _backoff_cap_seconds);

  execute format($f$
create or replace function %1$I.%6$I(
  %4$I bigint,
  out has_task_succeeded  boolean,
  out task_failure        text,
  out has_success         boolean,
  out num_attempts        integer,
  out num_failures        integer,
  out num_outstanding     integer,
  out num_runs            integer,
  out scheduled_at        timestamptz,
  out has_unknown_outcome boolean
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $body$
  select f.has_task_succeeded, f.task_failure, f.has_success, f.num_attempts, f.num_failures,
         f.num_outstanding, f.num_runs, t.scheduled_at, f.has_unknown_outcome
    from %1$I.%2$I t
   cross join lateral internal.channel_process_facts(%1$L, %5$L, t.%3$I) f
   where t.%3$I = %4$I
$body$;

create or replace function %1$I.%7$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select internal.run_channel_supervisor(%1$L, %5$L, payload) $body$;

create or replace function %1$I.%8$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select internal.record_channel_attempt_success(%1$L, %5$L, payload) $body$;

create or replace function %1$I.%9$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select internal.record_channel_attempt_failure(%1$L, %5$L, payload) $body$;

create or replace function %1$I.%10$I(
  _message_id bigint,
  _scheduled_at timestamptz default null,
  out %3$I bigint,
  out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select k.task_id, k.validation_failure_message from comms.kickoff_channel_send(%11$L, _message_id, _scheduled_at) k $body$;
$f$, variadic _names);

  execute format('revoke execute on function %1$I.%2$I(bigint), %1$I.%3$I(jsonb), %1$I.%4$I(jsonb), %1$I.%5$I(jsonb),
                  %1$I.%6$I(bigint, timestamptz) from public',
                 'comms', _names[6], _names[7], _names[8], _names[9], _names[10]);
end;
$$;

-- The channel process of _channel and its message table, checked: raises 22023 for a
-- channel without one.
create or replace function comms.channel_send_process(_channel text, out process internal.channel_process,
                                                      out message_table text)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if to_regclass(format('%I.%I', 'comms', _channel || '_message')) is null then
    raise exception 'channel %: table comms.%_message does not exist', _channel, _channel using errcode = '22023';
  end if;
  process := internal.get_channel_process('comms', 'send_' || _channel);
  message_table := _channel || '_message';
end;
$$;

-- For a before_handler: the attempt its payload names ({send_<c>_attempt_id, ...}), or
-- the validation failure to return instead: the id missing or not a positive integer, or
-- the attempt refused (internal.channel_attempt_refusal: it has an outcome already, or
-- its process ended). Exactly one of the two is set.
create or replace function comms.channel_attempt(_channel text, payload jsonb,
                                                 out attempt_id bigint, out refusal jsonb)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _process text := 'send_' || _channel;
  _refusal text;
begin
  attempt_id := internal.id_from_payload(payload, _process || '_attempt_id');
  if attempt_id is null then
    refusal := internal.validation_failure(_process || '_attempt_id must be a positive integer');
    return;
  end if;
  _refusal := internal.channel_attempt_refusal('comms', _process, attempt_id);
  if _refusal is not null then
    attempt_id := null;
    refusal := internal.validation_failure(_refusal);
  end if;
end;
$$;

-- For an app's send: a new comms.message of _channel under _idempotency_key (NULL: none).
-- created: message_id is new, and the caller stores its comms.<c>_message row and kicks
-- it off. Otherwise the key was used before: message_id and task_id are the first
-- request's, or, when that was a message on another channel, both NULL with a
-- validation_failure_message; the caller returns them and writes nothing more.
create or replace function comms.create_channel_message(
  _channel text,
  _idempotency_key text,
  out created boolean,
  out message_id bigint,
  out task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _root text := ((comms.channel_send_process(_channel)).process).process_name || '_task';
begin
  insert into comms.message (channel, idempotency_key) values (_channel, _idempotency_key)
  on conflict (idempotency_key) do nothing
  returning message.message_id into message_id;
  created := message_id is not null;
  if created then
    return;
  end if;

  -- A repeated request: what the first one created.
  execute format('select m.message_id, t.%3$I from comms.message m left join %1$I.%2$I t on t.message_id = m.message_id
                   where m.idempotency_key = $1',
                 'comms', _root, _root || '_id')
    into message_id, task_id using _idempotency_key;
  if task_id is null then
    message_id := null;
    validation_failure_message := 'idempotency_key was already used for a message on another channel';
  end if;
end;
$$;

-- Starts the send process of the existing _channel message _message_id: the root task and
-- the first supervisor run, at _scheduled_at (NULL: now). A second call for the same
-- message returns the existing task and enqueues nothing. Bad input: a
-- validation_failure_message and nothing written.
create or replace function comms.kickoff_channel_send(
  _channel text,
  _message_id bigint,
  _scheduled_at timestamptz,
  out task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p record;
  _at timestamptz := coalesce(_scheduled_at, now());
  _root text;
  _found boolean;
begin
  select * into _p from comms.channel_send_process(_channel);
  _root := (_p.process).process_name || '_task';
  if _message_id is null then
    validation_failure_message := 'message_id is required';
    return;
  end if;
  execute format('select exists (select 1 from %I.%I m where m.message_id = $1)', 'comms', _p.message_table)
    into _found using _message_id;
  if not _found then
    validation_failure_message := format('%s message %s not found', _channel, _message_id);
    return;
  end if;

  execute format('insert into %1$I.%2$I (message_id, scheduled_at) values ($1, $2)
                  on conflict (message_id) do nothing returning %3$I', 'comms', _root, _root || '_id')
    into task_id using _message_id, _at;

  if task_id is null then
    -- Already kicked off: its supervisor is running. No-op.
    execute format('select t.%3$I from %1$I.%2$I t where t.message_id = $1', 'comms', _root, _root || '_id')
      into task_id using _message_id;
    return;
  end if;

  perform internal.enqueue_channel_supervisor(_p.process, task_id, _at);
end;
$$;
--! EndIncluded comms/channel.sql
--! Included comms/email.sql
-- The send-email process: what is particular to email. The skeleton (supervisor, facts,
-- attempts, handlers' bookkeeping) is the shared channel process of
-- sql/internal/channel_process.sql; what the message channels share beyond it (the named
-- entry points, checking an attempt, creating a message, the kickoff) is
-- sql/comms/channel.sql. Here: its limits, the provider payload, and its message's fields
-- and their checks.
--
--   comms.send_email(...)             app: create the message and kick off (idempotent); here
--   comms.get_email_payload           before_handler: the provider payload; here
--   comms.kickoff_send_email(id)      root task + first supervisor task (idempotent)
--   comms.send_email_supervisor       db_function: internal.run_channel_supervisor
--   comms.send_email_supervisor_facts(id)  what the supervisor decides on
--   comms.record_email_success        success_handler: attempt succeeded fact
--   comms.record_email_failure        error_handler: attempt failed fact
-- (the last five made by comms.register_message_channel).

-- Limits: 3 provider calls per message (the first and two retries); 30 non-terminal
-- supervisor runs (about 21 hours with the backoff, capped at an hour), after which a
-- loop bug ends in send_email_task_failed('run_limit_reached') instead of running forever.
select comms.register_message_channel('email', _max_attempts => 3, _max_supervisor_runs => 30, _backoff_cap_seconds => 3600);

-- before_handler. Payload: the email task's ({send_email_attempt_id, ...}). Returns the
-- provider payload of @org/handler-types emailPayload. Its idempotency_key is the attempt
-- id namespaced by the database (internal.idempotency_namespace), so a redelivered
-- attempt is deduplicated by the provider and two databases never share a key. Refused
-- (validation failure): an attempt with an outcome, or of a process that ended.
create or replace function comms.get_email_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt record;
  _provider_payload jsonb;
begin
  select * into _attempt from comms.channel_attempt('email', payload);
  if _attempt.refusal is not null then
    return _attempt.refusal;
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
           'message_id', m.message_id,
           'idempotency_key', format('%s:send_email_attempt:%s', internal.idempotency_namespace(), a.send_email_attempt_id),
           'from_address', m.from_address,
           'to_address', m.to_address,
           'subject', m.subject,
           'html', m.html,
           'text', m.text_body,
           'reply_to', m.reply_to))
    into _provider_payload
    from comms.send_email_attempt a
    join comms.send_email_task t using (send_email_task_id)
    join comms.email_message m using (message_id)
   where a.send_email_attempt_id = _attempt.attempt_id;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- For apps: stores the message and starts sending it at _scheduled_at (NULL: now).
-- With an _idempotency_key, a repeated request returns the first request's message and
-- task and writes nothing. Bad input: a validation_failure_message naming the field,
-- and nothing written.
create or replace function comms.send_email(
  _from_address    text,
  _to_address      text,
  _subject         text,
  _html            text,
  _text            text default null,
  _reply_to        text default null,
  _scheduled_at    timestamptz default null,
  _idempotency_key text default null,
  out message_id                 bigint,
  out send_email_task_id         bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _message record;
  _kickoff record;
begin
  validation_failure_message := case
    when _from_address is null or length(_from_address) not between 3 and 320
      then 'from_address is required (3 to 320 characters)'
    when not comms.is_email_address(_to_address)
      then 'to_address must be an email address'
    when _subject is null or length(_subject) not between 1 and 998
      then 'subject is required (1 to 998 characters)'
    when _html is null or length(_html) > 1000000
      then 'html is required (at most 1000000 characters)'
    when length(_text) > 1000000
      then 'text must be at most 1000000 characters'
    when _reply_to is not null and not comms.is_email_address(_reply_to)
      then 'reply_to must be an email address'
    when _idempotency_key is not null and length(_idempotency_key) not between 1 and 200
      then 'idempotency_key must be 1 to 200 characters'
  end;
  if validation_failure_message is not null then
    return;
  end if;

  select * into _message from comms.create_channel_message('email', _idempotency_key);
  message_id := _message.message_id;
  if not _message.created then
    -- A repeated request: what the first one created (or why the key cannot be reused).
    send_email_task_id := _message.task_id;
    validation_failure_message := _message.validation_failure_message;
    return;
  end if;

  insert into comms.email_message (message_id, from_address, to_address, subject, html, text_body, reply_to)
  values (message_id, _from_address, _to_address, _subject, _html, _text, _reply_to);

  _kickoff := comms.kickoff_send_email(message_id, _scheduled_at);
  send_email_task_id := _kickoff.send_email_task_id;
end;
$$;
--! EndIncluded comms/email.sql
--! Included comms/sms.sql
-- The send-SMS process: what is particular to SMS. The skeleton (supervisor, facts,
-- attempts, handlers' bookkeeping) is the shared channel process of
-- sql/internal/channel_process.sql; what the message channels share beyond it (the named
-- entry points, checking an attempt, creating a message, the kickoff) is
-- sql/comms/channel.sql. Here: its limits, the provider payload, and its message's fields
-- and their checks.
--
--   comms.send_sms(...)             app: create the message and kick off (idempotent); here
--   comms.get_sms_payload           before_handler: the provider payload; here
--   comms.kickoff_send_sms(id)      root task + first supervisor task (idempotent)
--   comms.send_sms_supervisor       db_function: internal.run_channel_supervisor
--   comms.send_sms_supervisor_facts(id)  what the supervisor decides on
--   comms.record_sms_success        success_handler: attempt succeeded fact
--   comms.record_sms_failure        error_handler: attempt failed fact
-- (the last five made by comms.register_message_channel).

-- Limits: 3 provider calls per message (the first and two retries); 30 non-terminal
-- supervisor runs (about 21 hours with the backoff, capped at an hour), after which a
-- loop bug ends in send_sms_task_failed('run_limit_reached') instead of running forever.
select comms.register_message_channel('sms', _max_attempts => 3, _max_supervisor_runs => 30, _backoff_cap_seconds => 3600);

-- before_handler. Payload: the SMS task's ({send_sms_attempt_id, ...}). Returns the
-- provider payload of @org/handler-types smsPayload. Its idempotency_key is the attempt
-- id namespaced by the database (internal.idempotency_namespace), so a redelivered
-- attempt is deduplicated by the provider and two databases never share a key. Refused
-- (validation failure): an attempt with an outcome, or of a process that ended.
create or replace function comms.get_sms_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt record;
  _provider_payload jsonb;
begin
  select * into _attempt from comms.channel_attempt('sms', payload);
  if _attempt.refusal is not null then
    return _attempt.refusal;
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
           'message_id', m.message_id,
           'idempotency_key', format('%s:send_sms_attempt:%s', internal.idempotency_namespace(), a.send_sms_attempt_id),
           'to_number', m.to_number,
           'from_number', m.from_number,
           'body', m.body))
    into _provider_payload
    from comms.send_sms_attempt a
    join comms.send_sms_task t using (send_sms_task_id)
    join comms.sms_message m using (message_id)
   where a.send_sms_attempt_id = _attempt.attempt_id;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- For apps: stores the message and starts sending it at _scheduled_at (NULL: now).
-- With an _idempotency_key, a repeated request returns the first request's message and
-- task and writes nothing. Bad input: a validation_failure_message naming the field,
-- and nothing written.
create or replace function comms.send_sms(
  _to_number       text,
  _body            text,
  _from_number     text default null,
  _scheduled_at    timestamptz default null,
  _idempotency_key text default null,
  out message_id                 bigint,
  out send_sms_task_id           bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _message record;
  _kickoff record;
begin
  validation_failure_message := case
    when not comms.is_e164_number(_to_number)
      then 'to_number must be an E.164 number such as +14155550100'
    when _body is null or length(_body) not between 1 and 1600
      then 'body is required (1 to 1600 characters)'
    when _from_number is not null and not comms.is_e164_number(_from_number)
      then 'from_number must be an E.164 number such as +14155550100'
    when _idempotency_key is not null and length(_idempotency_key) not between 1 and 200
      then 'idempotency_key must be 1 to 200 characters'
  end;
  if validation_failure_message is not null then
    return;
  end if;

  select * into _message from comms.create_channel_message('sms', _idempotency_key);
  message_id := _message.message_id;
  if not _message.created then
    -- A repeated request: what the first one created (or why the key cannot be reused).
    send_sms_task_id := _message.task_id;
    validation_failure_message := _message.validation_failure_message;
    return;
  end if;

  insert into comms.sms_message (message_id, to_number, from_number, body)
  values (message_id, _to_number, _from_number, _body);

  _kickoff := comms.kickoff_send_sms(message_id, _scheduled_at);
  send_sms_task_id := _kickoff.send_sms_task_id;
end;
$$;
--! EndIncluded comms/sms.sql

--! split: 900-privileges.sql
set local lock_timeout = '5s';

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
  queues.complete_tasks(bigint[], bigint[], text[], boolean[], timestamptz[]),
  queues.fail_task(bigint, text, bigint),
  queues.interrupt_task(bigint, bigint, text, integer),
  queues.record_worker_heartbeat(text, text[], integer),
  queues.record_worker_stopped(text)
to :DATABASE_WORKER;

grant execute on function
  queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean),
  queues.enqueue_many(jsonb),
  queues.enqueue_unique(text, jsonb, text, text, interval, timestamptz, integer, text, integer)
to :DATABASE_APP;
-- The client's enqueue on a pool (commit, then the wake-up; sql/queues/enqueue.sql).
revoke execute on all procedures in schema queues from public;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint)
  to :DATABASE_APP;
--! EndIncluded queues/privileges.sql
--! Included queues/privileges-hot-path.sql
-- Grants of the worker's hot-path functions (settle, steps, revocation of a dead
-- process's leases); included after the files that define them. queues/privileges.sql
-- revokes EXECUTE from PUBLIC on every queue function first.

revoke execute on all functions in schema queues from public;

grant execute on function
  queues.settle_tasks(bigint[], bigint[], text[], boolean[], bigint[], text[], bigint[]),
  queues.run_steps(bigint[], bigint[], text[], jsonb[], text[]),
  queues.run_step(bigint, bigint, text, jsonb),
  queues.complete_steps(bigint[], bigint[], text[], boolean[], bigint[], text[], jsonb[]),
  queues.current_leases(bigint[], bigint[]),
  queues.parse_envelope(jsonb),
  queues.is_current_lease(bigint, bigint),
  queues.max_payload_bytes(),
  queues.mark_started(bigint[], bigint[], bigint[]),
  queues.revoke_worker_leases(text)
to :DATABASE_WORKER;
--! EndIncluded queues/privileges-hot-path.sql
