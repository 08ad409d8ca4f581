-- Reading tasks for the operations API: a keyset-paginated list, one task with its facts,
-- and counts by type and state. The *_at functions take the clock (owner only, for
-- tests); the API calls the wrappers, which pass now().

-- Tasks newest first (by task_id), _limit per page (default 50, at most 500), older than
-- _before_task_id (the last id of the previous page: keyset pagination, so a page costs
-- the same at any depth). Filters, each optional and combined with AND:
--   _task_type            a registered type
--   _state                one of admin.task_states(), or a status of the role-based
--                         specification (its worker_tasks table; public.worker_tasks):
--                         pending    scheduled, ready or retrying (no live lease)
--                         claimed    running, its run not seen to start (no start mark:
--                                    a heartbeat marks a run still going), its worker
--                                    not silent
--                         completed  succeeded
--                         stale      held by a lease that expired uncompleted, or whose
--                                    worker is silent for longer than three of its
--                                    heartbeat intervals (public.recover_stale_tasks)
--                         Rows carry the queue's own state.
--   _worker_id            tasks leased at least once by this worker
--   _resource_key         tasks with this resource key
--   _enqueued_from/_to    enqueued_at in [from, to)
--   _payload_path/_value  payload #> path = value (a JSON value)
-- Which table drives the walk: pending states walk queues.task_pending_or_held (the claim
-- index and the lease-held tasks, sql/queues/lease_held.sql: bounded by pending work),
-- then, when the states and filters can match a batched task, the ready batches
-- (sql/queues/ready_batch.sql) one at a time by their greatest id, newest first, until no
-- batch left can hold a task newer than the page's last: a page reads the batches whose
-- ids it shows, not every batched task; unsuccessful outcomes walk queues.task_completed by key (failed and
-- abandoned ones by task_completed_unsuccessful_task_idx, which holds only those); a
-- state that includes succeeded walks queues.task with each task's end
-- (queues.task_end_of: successes are mostly in completion rounds); a resource key walks
-- task_resource_key_idx; otherwise queues.task by its primary key, newest first. Every
-- walk stops after _limit matches, so its cost is the rows it has to pass over to find
-- them: a filter that matches only old or rare tasks (a payload value, a worker gone for
-- a week, a time range far back) reads the newer tasks in between. The statement is
-- built from constant fragments; every value is a parameter.
-- History is partitioned by task id (sql/queues/partitions.sql), so the newest tasks sit
-- in the newest partition set. Every walk but the pending states' runs the statement once
-- per range of queues.history_walk (a set, or the two newest), newest first, until the
-- page is full: each run has the range's bounds as values ($12, $13), so the planner reads
-- the range's partitions of task, task_completed and task_lease instead of planning,
-- opening and locking all of them and merging every set for the newest 50. Null bounds
-- (the pending states; a task in the default partition) read every partition at once.
create or replace function admin.list_tasks_at(
  _now            timestamptz,
  _task_type      text,
  _state          text,
  _limit          integer,
  _before_task_id bigint,
  _worker_id      text,
  _resource_key   text,
  _enqueued_from  timestamptz,
  _enqueued_to    timestamptz,
  _payload_path   text[],
  _payload_value  jsonb
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
  -- Every read is an index walk or a probe by key: a task's end is probed in each shape
  -- (queues.task_end_of), and a set's small partition, scanned, would read every row of
  -- it once per task of the page.
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _filters text := '';
  _sql text;
  _worker_key integer;
  _lower bigint;
  _upper bigint;
  _found bigint;
  _remaining integer;
  -- The pending walk's page as task ids, newest first, and the batches' part of it.
  _ids bigint[];
  _more bigint[];
  _cut bigint;
  _batch bigint;
  _last bigint;
  _batch_sql text;
  -- The states _state stands for, and the branch that walks them.
  _states text[] := case _state
                      when 'pending' then array['scheduled', 'ready', 'retrying']
                      when 'claimed' then array['running']
                      when 'completed' then array['succeeded']
                      when 'stale' then array['ready', 'running']
                      else array[_state] end;
  _pending_walk boolean := _states <@ array['waiting', 'scheduled', 'ready', 'running', 'retrying'];
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  if _state is not null and not (_state = any (admin.task_states() || array['pending', 'claimed', 'completed', 'stale'])) then
    raise exception 'unknown state %; expected one of %, or pending, claimed, completed or stale', quote_literal(left(_state, 100)),
      array_to_string(admin.task_states(), ', ') using errcode = '22023';
  end if;
  if _before_task_id is not null and _before_task_id < 1 then
    raise exception 'before_task_id must be a positive task id, got %', _before_task_id
      using errcode = '22023';
  end if;
  if _worker_id is not null and length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _resource_key is not null and length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _enqueued_from is not null and _enqueued_to is not null and _enqueued_from >= _enqueued_to then
    raise exception 'enqueued_from (%) must be before enqueued_to (%)', _enqueued_from, _enqueued_to
      using errcode = '22023';
  end if;
  if (_payload_path is null) <> (_payload_value is null) then
    raise exception 'payload_path and payload_value go together: give both or neither' using errcode = '22023';
  end if;
  if _payload_path is not null and (cardinality(_payload_path) not between 1 and 10
      or exists (select 1 from unnest(_payload_path) e where e is null or length(e) not between 1 and 100)) then
    raise exception 'payload_path must have 1 to 10 keys of 1 to 100 characters each' using errcode = '22023';
  end if;

  if _task_type is not null then _filters := _filters || ' and t.task_type = $2'; end if;
  if _worker_id is not null then
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
    _filters := _filters || ' and exists (select 1 from queues.task_leases_of(t.task_id) l
                                            where (l.worker_key = $14 or l.worker_id = $6)
                                              and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))';
  end if;
  if _resource_key is not null then _filters := _filters || ' and t.resource_key = $7'; end if;
  if _enqueued_from is not null then _filters := _filters || ' and t.enqueued_at >= $8'; end if;
  if _enqueued_to is not null then _filters := _filters || ' and t.enqueued_at < $9'; end if;
  if _payload_path is not null then _filters := _filters || ' and t.payload #> $10 = $11'; end if;

  if _state in ('stale', 'claimed') then
    -- stale: a lease is held (current_lease_id) and either expired or its worker is
    -- silent. claimed: a live lease of a worker that is not silent, whose run has not
    -- started (public.worker_tasks says the same).
    _filters := _filters || case _state when 'stale' then ' and p.current_lease_id is not null and (p.available_at <= $1 or '
                                        else ' and not exists (select 1 from queues.task_lease_started st
                                                                where st.task_id = p.task_id and st.task_lease_id = p.current_lease_id)
                                               and not (' end
                         || 'exists (select 1 from queues.task_lease_at(p.task_id, p.current_lease_id) l
                                       left join queues.worker_name n on n.worker_key = l.worker_key
                                       join queues.worker w on w.worker_id = coalesce(l.worker_id, n.worker_id)
                                      where w.stopped_at is null
                                        and w.last_seen_at < $1 - queues.worker_silence_bound(w.heartbeat_interval_ms)))';
  end if;
  if _pending_walk then
    _sql := 'select p.task_id, p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1),
                    p.priority, t.resource_key, t.max_attempts, p.lease_count,
                    t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
               -- the claim index and the lease-held tasks (sql/queues/lease_held.sql)
               from queues.task_pending_or_held p
              -- lateral + limit 1: one primary-key probe per pending task passed over
              cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
              where not p.batched
                and admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1) = any ($15)
                and ($4::bigint is null or p.task_id < $4)' || _filters || '
              order by p.task_id desc
              limit $5';
    -- One batch's tasks not taken, newer than $17 (the page's last so far), that match.
    _batch_sql := 'select array(
                     select x.task_id
                       from queues.task_ready_batch b
                      cross join lateral unnest(b.task_ids[b.taken + 1:]) x(task_id)
                      cross join lateral (select * from queues.task y where y.task_id = x.task_id limit 1) t
                      where b.task_id = $16
                        and ($4::bigint is null or x.task_id < $4)
                        and ($17::bigint is null or x.task_id > $17)' || _filters || '
                      order by x.task_id desc
                      limit $5)';
  elsif 'succeeded' = any (_states) then
    -- Successes are mostly in completion rounds, which no index lists per task in task id
    -- order: walk queues.task by its primary key, newest first, with each task's end
    -- (queues.task_end_of: a probe of each shape). Most ended tasks succeeded, so the walk
    -- passes over few others.
    _sql := 'select t.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
                    (select count(*)::integer from queues.task_leases_of(t.task_id) l
                        where ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13)),
                    t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
               from queues.task t
              cross join lateral (select e.outcome, e.completed_at from queues.task_end_of(t.task_id) e
                                    where ($12::bigint is null or e.task_id >= $12) and ($13::bigint is null or e.task_id < $13)
                                    limit 1) c
              where c.outcome = any ($15)
                and ($4::bigint is null or t.task_id < $4)
                and ($12::bigint is null or t.task_id >= $12) and ($13::bigint is null or t.task_id < $13)' || _filters || '
              order by t.task_id desc
              limit $5';
  elsif _state is not null then
    _sql := 'select c.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
                    (select count(*)::integer from queues.task_leases_of(c.task_id) l
                        where ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13)),
                    t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
               from queues.task_completed c
              cross join lateral (select * from queues.task x where x.task_id = c.task_id
                                     and ($12::bigint is null or x.task_id >= $12) and ($13::bigint is null or x.task_id < $13)
                                   limit 1) t
              where c.outcome = any ($15)
                and ($4::bigint is null or c.task_id < $4)
                and ($12::bigint is null or c.task_id >= $12) and ($13::bigint is null or c.task_id < $13)' || _filters || '
              order by c.task_id desc
              limit $5';
  else
    _sql := 'select t.task_id, t.task_type,
                    coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1)),
                    t.priority, t.resource_key, t.max_attempts,
                    coalesce(p.lease_count,
                             (select count(*)::integer from queues.task_leases_of(t.task_id) l
                        where ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))),
                    t.enqueued_at, t.scheduled_at, p.available_at, c.completed_at
               from queues.task t
               -- its claim-index row or ready batch, else the claim lease that holds it (a lease-held task:
               -- queues.lease_held_of written out, its probe of the end given the range''s
               -- bounds, so that it reads the range''s partitions only)
               left join lateral (select x.available_at, x.current_lease_id, x.lease_count
                                    from queues.task_pending x where x.task_id = t.task_id
                                  union all
                                  -- (a task in a ready batch: sql/queues/ready_batch.sql)
                                  select b.scheduled_at, null::bigint, 0
                                    from queues.batched_of(t.task_id) b
                                  union all
                                  (select h.expires_at, h.task_lease_id, 1
                                     from queues.claim_lease h
                                    where h.task_range @> t.task_id and h.task_id >= t.task_id
                                      and t.task_id = any (h.task_ids)
                                      and not exists (select 1 from queues.task_end_of(t.task_id) e
                                                       where ($12::bigint is null or e.task_id >= $12)
                                                         and ($13::bigint is null or e.task_id < $13))
                                    order by h.task_lease_id desc
                                    limit 1)
                                  limit 1) p on true
               left join lateral (select e.outcome, e.completed_at from queues.task_end_of(t.task_id) e
                                   where ($12::bigint is null or e.task_id >= $12) and ($13::bigint is null or e.task_id < $13)
                                   limit 1) c on true
              where ($4::bigint is null or t.task_id < $4)
                and ($12::bigint is null or t.task_id >= $12) and ($13::bigint is null or t.task_id < $13)' || _filters || '
              order by t.task_id desc
              limit $5';
  end if;

  if _pending_walk then
    -- A batched task is ready (or scheduled), never leased, with no resource key: other
    -- states and those filters walk the rows alone, as does a queue with no batch.
    if not (_states && array['ready', 'scheduled']) or _state in ('stale', 'claimed')
       or _resource_key is not null or _worker_id is not null
       or not exists (select 1 from queues.task_ready_batch) then
      return query execute _sql
        using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
              _enqueued_from, _enqueued_to, _payload_path, _payload_value, null::bigint, null::bigint, _worker_key,
              _states;
      return;
    end if;
    execute 'select array(select s.task_id from (' || _sql || ') s order by s.task_id desc)' into _ids
      using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, null::bigint, null::bigint, _worker_key,
            _states;
    _cut := case when cardinality(_ids) >= _page then _ids[_page] end;
    -- The batches by their greatest id, newest first (their arrays are read only for the
    -- batches the page reaches); a batch whose greatest id is older than the page's last
    -- task, when the page is full, holds none of the page, nor does any after it.
    for _batch, _last in
      select b.task_id, upper(b.task_range) - 1
        from queues.task_ready_batch b
       where (_before_task_id is null or b.task_id < _before_task_id)
         and (_task_type is null or b.task_type = _task_type)
         and admin.pending_state(b.scheduled_at, null, 0, _now) = any (_states)
       order by upper(b.task_range) desc
    loop
      exit when _cut is not null and _last <= _cut;
      execute _batch_sql into _more
        using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
              _enqueued_from, _enqueued_to, _payload_path, _payload_value, null::bigint, null::bigint, _worker_key,
              _states, _batch, _cut;
      if cardinality(_more) > 0 then
        _ids := array(select x from unnest(_ids || _more) x order by x desc limit _page);
        _cut := case when cardinality(_ids) >= _page then _ids[_page] end;
      end if;
    end loop;
    -- The page's rows, each task's read by its id (a claim since may have taken one: the
    -- states are asked again).
    return query
      select p.task_id, p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now),
             p.priority, t.resource_key, t.max_attempts, p.lease_count,
             t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
        from unnest(_ids) i(task_id)
       cross join lateral queues.task_pending_or_held_of(i.task_id) p
       cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
       where admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) = any (_states)
       order by p.task_id desc;
    return;
  end if;
  _remaining := _page;
  for _lower, _upper in
    select w.lower_bound, w.upper_bound from queues.history_walk(_before_task_id) w
     order by w.lower_bound desc nulls first
  loop
    return query execute _sql
      using _now, _task_type, _state, _before_task_id, _remaining, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, _lower, _upper, _worker_key, _states;
    get diagnostics _found = row_count;
    _remaining := _remaining - _found;
    exit when _remaining <= 0;
  end loop;
end;
$$;

create or replace function admin.list_tasks(
  _task_type      text default null,
  _state          text default null,
  _limit          integer default null,
  _before_task_id bigint default null,
  _worker_id      text default null,
  _resource_key   text default null,
  _enqueued_from  timestamptz default null,
  _enqueued_to    timestamptz default null,
  _payload_path   text[] default null,
  _payload_value  jsonb default null
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
  select * from admin.list_tasks_at(now(), _task_type, _state, _limit, _before_task_id, _worker_id,
                                    _resource_key, _enqueued_from, _enqueued_to, _payload_path, _payload_value)
$$;

-- One task with everything recorded about it, as a JSON object:
--   {task: {..., state, type_timeout_ms}, leases: [...], errors: [...], completion: {...} | null,
--    failed_attempts: [...], redriven_to: id | null, redriven_from: id | null,
--    progress: {done, total, note, reported_at, task_lease_id, reports} | null,
--    dependencies: [{task_id, task_type, outcome, completed_at}],
--    dependents: [{task_id, task_type, state}]}  (sql/queues/dependencies.sql)
-- task.timeout_ms is the task's own run timeout (NULL: none), type_timeout_ms its type's
-- (NULL: none); the task's own is the one in force (sql/queues/timeouts.sql).
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
             'current_lease_id', p.current_lease_id,
             'type_timeout_ms', (select x.timeout_ms from queues.task_type_timeouts() x
                                  where x.task_type = t.task_type)),
           'leases', coalesce((
             select jsonb_agg(jsonb_build_object(
                      'task_lease_id', l.task_lease_id, 'worker_id', l.worker_id,
                      'leased_at', l.leased_at, 'expires_at', l.expires_at,
                      'released_at', l.released_at, 'revoked_at', l.revoked_at, 'extensions', l.extensions,
                      'live', coalesce(l.task_lease_id = p.current_lease_id and p.available_at > _now, false))
                      order by l.task_lease_id)
               from queues.task_lease_effective_of(t.task_id) l), '[]'::jsonb),
           'errors', coalesce((
             select jsonb_agg(to_jsonb(e) - 'task_id' order by e.error_id)
               from queues.error e where e.task_id = t.task_id), '[]'::jsonb),
           -- task_type is the task's own, given above.
           'completion', case when c.task_id is not null then to_jsonb(c) - 'task_id' - 'task_type' end)
    into _result
    from queues.task t
    -- its claim-index row, or the row its claim lease gives a lease-held task
    left join lateral (select x.* from queues.task_pending_or_held_of(t.task_id) x limit 1) p on true
    left join lateral (select e.* from queues.task_end_of(t.task_id) e limit 1) c on true
   where t.task_id = _task_id;

  if _result is null then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  return _result || admin.task_retry_facts(_task_id) || admin.task_dashboard_facts(_task_id)
         || queues.task_progress_facts(_task_id) || queues.task_dependency_facts(_task_id, _now);
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

-- Counts by task type and state: pending states over queues.task_pending_or_held_counts
-- (the claim index, and the lease-held tasks per claim lease and type: bounded by pending
-- work), completion outcomes over the last _window_seconds only (default 86400;
-- read through the completed_at indexes of task_completed and completion_round), so the
-- cost never follows history.
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
         sum(p.tasks)
    -- the claim index and the lease-held tasks, counted per claim lease
    from queues.task_pending_or_held_counts p
   group by 1, 2
  union all
  -- a round's tasks counted in one row (admin.completion_counts_between)
  select c.task_type, c.outcome, sum(c.completions)::bigint
    from admin.completion_counts_between(_now - make_interval(secs => _window), _now) c
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

-- Facts of one task the dashboard adds to admin.get_task's answer:
--   {results: [{task_lease_id, result, recorded_at}], cancellation: {reason, cancelled_at} | null,
--    run_now_at: timestamptz | null, type_paused: boolean, process: {process, root_id} | null,
--    heartbeats: [{task_lease_id, extended_at, expires_at}]}
-- Results come from queues.task_result when that table exists (read through the catalog,
-- so this works with and without it).
create or replace function admin.task_dashboard_facts(_task_id bigint)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _results jsonb := '[]';
begin
  if to_regclass('queues.task_result') is not null then
    execute 'select coalesce(jsonb_agg(jsonb_build_object(''task_lease_id'', r.task_lease_id, ''result'', r.result,
                                                         ''recorded_at'', r.recorded_at) order by r.task_lease_id), ''[]'')
               from queues.task_result r where r.task_id = $1'
      into _results using _task_id;
  end if;
  return jsonb_build_object(
    'results', _results,
    'cancellation', (select jsonb_build_object('reason', c.reason, 'cancelled_at', c.cancelled_at)
                       from queues.task_cancelled c where c.task_id = _task_id),
    'run_now_at', (select r.requested_at from queues.task_run_now r where r.task_id = _task_id),
    'type_paused', (select t.task_type = any (queues.paused_task_types()) from queues.task t where t.task_id = _task_id),
    -- The business process the task works for: its payload names the root (X_task_id).
    'process', (select jsonb_build_object('process', p.process, 'root_id', (t.payload ->> (p.process || '_task_id'))::bigint)
                  from queues.task t cross join admin.processes() p
                 where t.task_id = _task_id and t.payload ->> (p.process || '_task_id') ~ '^[0-9]{1,18}$'
                 limit 1),
    'heartbeats', coalesce((
      select jsonb_agg(jsonb_build_object('task_lease_id', x.task_lease_id, 'extended_at', x.extended_at,
                                          'expires_at', x.expires_at) order by x.task_lease_extension_id)
        from queues.task_leases_of(_task_id) l
        join queues.task_lease_extension x on x.task_id = l.task_id and x.task_lease_id = l.task_lease_id), '[]'));
end;
$$;
