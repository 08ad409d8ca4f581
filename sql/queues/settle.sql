-- The worker's completer: one call per round trip that marks tasks started and completes
-- others, with their error rows. Owner-run (security definer) like every queue writer.

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
