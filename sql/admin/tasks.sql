-- Reading tasks for the operations API: a keyset-paginated list, one task with its facts,
-- and counts by type and state. The *_at functions take the clock (owner only, for
-- tests); the API calls the wrappers, which pass now().

-- Tasks newest first, optionally of one _task_type and in one _state (admin.task_states()),
-- _limit per page (default 50, at most 500), older than _before_task_id (the last id of
-- the previous page). Pending states read queues.task_pending (bounded by pending work);
-- outcomes walk queues.task_completed by key, newest first; no filter walks queues.task.
create or replace function admin.list_tasks_at(
  _now            timestamptz,
  _task_type      text,
  _state          text,
  _limit          integer,
  _before_task_id bigint
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

  if _state in ('scheduled', 'ready', 'running', 'retrying') then
    return query
    select p.task_id, p.task_type, _state, p.priority, t.resource_key, t.max_attempts, p.lease_count,
           t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
      from queues.task_pending p
     -- lateral + limit 1: one primary-key probe per listed task
     cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
     where (_task_type is null or p.task_type = _task_type)
       and (_before_task_id is null or p.task_id < _before_task_id)
       and admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) = _state
     order by p.task_id desc
     limit _page;
  elsif _state is not null then
    return query
    select c.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
           (select count(*)::integer from queues.task_lease l where l.task_id = c.task_id),
           t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
      from queues.task_completed c
     cross join lateral (select * from queues.task x where x.task_id = c.task_id limit 1) t
     where c.outcome = _state
       and (_task_type is null or t.task_type = _task_type)
       and (_before_task_id is null or c.task_id < _before_task_id)
     order by c.task_id desc
     limit _page;
  else
    return query
    select t.task_id, t.task_type,
           coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)),
           t.priority, t.resource_key, t.max_attempts,
           coalesce(p.lease_count,
                    (select count(*)::integer from queues.task_lease l where l.task_id = t.task_id)),
           t.enqueued_at, t.scheduled_at, p.available_at, c.completed_at
      from queues.task t
      left join queues.task_pending p on p.task_id = t.task_id
      left join queues.task_completed c on c.task_id = t.task_id
     where (_task_type is null or t.task_type = _task_type)
       and (_before_task_id is null or t.task_id < _before_task_id)
     order by t.task_id desc
     limit _page;
  end if;
end;
$$;

create or replace function admin.list_tasks(
  _task_type      text default null,
  _state          text default null,
  _limit          integer default null,
  _before_task_id bigint default null
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
  select * from admin.list_tasks_at(now(), _task_type, _state, _limit, _before_task_id)
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
  return _result || admin.task_retry_facts(_task_id);
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
