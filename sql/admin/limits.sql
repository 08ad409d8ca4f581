-- The REST API's face of flow limits per task type and group key (sql/queues/limits.sql).

-- Each limit in force with how full it is now (queues.task_limit_status_at): for the
-- dashboard's Queues page, GET /api/limits and /metrics.
create or replace function admin.task_limits()
  returns table (
    task_type   text,
    scope       text,
    group_key   text,
    max_running integer,
    max_starts  integer,
    interval_ms integer,
    set_at      timestamptz,
    running     bigint,
    starts      bigint,
    held_back   bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.task_limit_status_at(now())
$$;

-- Sets the limits of a scope (queues.set_task_limit, which checks the input), the rate's
-- interval in milliseconds.
create or replace function admin.set_task_limit(
  _task_type   text,
  _scope       text,
  _group_key   text,
  _max_running integer,
  _max_starts  integer,
  _interval_ms integer
) returns void
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.set_task_limit(_task_type, _scope, _group_key, _max_running, _max_starts,
                               make_interval(secs => _interval_ms / 1000.0))
$$;

-- Clears the limits of a scope; true when it had one (queues.clear_task_limit).
create or replace function admin.clear_task_limit(_task_type text, _scope text, _group_key text)
  returns boolean
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.clear_task_limit(_task_type, _scope, _group_key)
$$;
