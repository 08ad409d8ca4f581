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
           (select count(*)::integer from queues.task_leases_of(c.task_id))
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
