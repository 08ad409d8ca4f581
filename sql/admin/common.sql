-- Helpers shared by the admin functions: task states, page sizes, task type filters.
-- Called only from definer functions: no grants.

-- The state of a task that is not completed, from its claim-index row at _now:
--   ready      claimable now (scheduled time reached; no live lease)
--   running    a live lease holds it
--   retrying   leased before, waiting for its retry time (no live lease)
--   scheduled  never leased, scheduled in the future
--   waiting    waits for its dependencies (claim-index row at 'infinity' without a lease,
--              sql/queues/dependencies.sql)
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
           when _available_at = 'infinity' and _current_lease_id is null then 'waiting'
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
  select array['waiting', 'scheduled', 'ready', 'running', 'retrying',
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

-- Completions in (_from, _to], in both shapes (queues.task_end: task_completed rows and
-- the tasks of completion rounds), with their task's type and their run's start (null when
-- the completion did not say: a completion without a lease, or written before it could):
-- the type the completion names, or, for a completion written before
-- task_completed.task_type existed, its task's (a primary-key probe of queues.task, made
-- only for those). Inlined into its callers (SQL, stable, no SET clause), so their filters
-- on the window reach the completed_at index of task_completed and of completion_round.
-- Every object it names is schema-qualified and it is not a security definer; called only
-- from definer functions with a pinned search path: no grants.
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
  union all
  -- Plain successes, from the completion rounds in the window (completion_round's
  -- completed_at index), one row per task they name.
  select u.task_id, u.task_lease_id, r.completed_at, 'succeeded', r.task_type,
         timestamptz 'epoch' + u.started_us * interval '1 microsecond'
    from queues.completion_round r
   cross join lateral unnest(r.task_ids, r.task_lease_ids, r.started_us) as u(task_id, task_lease_id, started_us)
   where r.completed_at > _from and r.completed_at <= _to
$$;

-- The number of completions in (_from, _to] per completion time, type and outcome, as
-- admin.completions_between gives them, without a row per task: a task_completed row
-- counts 1, a completion round (plain successes of one type at one instant) counts its
-- tasks in one row. For the windows that only count (admin.throughput_at,
-- admin.task_counts_at, admin.queue_depth_at): a drain's 20,000 completions are about 40
-- rounds. Inlined like admin.completions_between (SQL, stable, no SET clause); no grants.
create or replace function admin.completion_counts_between(_from timestamptz, _to timestamptz)
  returns table (completed_at timestamptz, outcome text, task_type text, completions bigint)
  language sql stable
as $$
  select c.completed_at, c.outcome,
         coalesce(c.task_type, (select x.task_type from queues.task x where x.task_id = c.task_id)), 1::bigint
    from queues.task_completed c
   where c.completed_at > _from and c.completed_at <= _to
  union all
  select r.completed_at, 'succeeded', r.task_type, cardinality(r.task_ids)::bigint
    from queues.completion_round r
   where r.completed_at > _from and r.completed_at <= _to
$$;
