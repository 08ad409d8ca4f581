--! Previous: sha1:18dc209c0bbc45d16edc195120a418708fb733e5
--! Hash: sha1:470395ca6940bbc0be1592b1a4a37ab8fae44d47
--! Message: The overview's windows read a completion round as one row: capacity's busy time per round, the counts per round

--! split: 400-dashboard-cost.sql
set local lock_timeout = '5s';

-- admin.capacity reads the window's completions as runs that end together (a completion
-- round's tasks under one lease make one row, with their earliest start and their
-- number: admin.completion_runs_between), so its busy time sorts a row per round instead
-- of a row per task. admin.throughput, admin.task_counts and admin.queue_depth count a
-- completion round in one row (admin.completion_counts_between) instead of unnesting it.
-- Same figures.
--! Included admin/common.sql
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
--! EndIncluded admin/common.sql
--! Included admin/capacity.sql
-- Capacity planning per role (= task_type): how much work is waiting, how fast a worker
-- gets through it while it works, and how many workers would drain it in 1, 4 or 8 hours.
-- The role-based specification's view of it is public.v_worker_capacity
-- (sql/public/role_based_worker.sql).
--
-- Cost: pending/ready/running count queues.task_pending_or_held_counts (the claim index,
-- and the lease-held tasks per claim lease and type, sql/queues/lease_held.sql: bounded by
-- pending work);
-- throughput reads only the completions of the last _window_seconds, through the
-- completed_at indexes of task_completed and completion_round, as one row per lease and
-- instant (a completion round of one lease is one row, its arrays read once: the busy
-- time's sort and windows follow the rounds, not their tasks), and the leases of the
-- tasks enqueued in that window
-- (a range of task_lease's primary key and of claim_lease's, whose claims name their
-- tasks; a probe of queues.task_lease_at for a completion of an older task), with a primary-key probe of task_lease_started per completion that does not say
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

-- The window's completions for busy time (admin.capacity_at): the completions in
-- (_from, _to] of one type under one lease at one instant (a completion round's tasks, a
-- call's outcomes) are runs with one worker and one end, and the union of runs that end
-- together is the longest of them; so they make one row, with their earliest start and
-- their number (completions), and the union of a worker's runs and the number of runs
-- are what they were, read from one row instead of hundreds. A completion whose start is
-- unknown (its start mark is probed by the caller) or after its end (a worker's clock
-- ahead of the database's) keeps a row of its own, and so its task id; those without a
-- lease ran nowhere and make one row whatever their start. task_id is one of the row's
-- tasks, to find their lease by.
-- A completion round's arrays are read in one pass (its starts and leases: the earliest
-- and latest of each, counted) and in the common case (one lease, every start known and
-- none after the end) are not unnested again; its type is the round's.
-- Inlined into its caller (SQL, stable, no SET clause), so the caller's window reaches the
-- completed_at index of task_completed and of completion_round, as in
-- admin.completions_between, whose completions these are. Every object it names is
-- schema-qualified and it is not a security definer; called only from definer functions
-- with a pinned search path: no grants.
create or replace function admin.completion_runs_between(_from timestamptz, _to timestamptz)
  returns table (task_type text, task_lease_id bigint, completed_at timestamptz, task_id bigint,
                 started_at timestamptz, completions bigint)
  language sql stable
as $$
  select c.task_type, c.task_lease_id, c.completed_at, max(c.task_id), min(c.started_at), count(*)
    from (select c.task_id, c.task_lease_id, c.completed_at, c.started_at,
                 coalesce(c.task_type, (select x.task_type from queues.task x where x.task_id = c.task_id)) as task_type
            from queues.task_completed c
           where c.completed_at > _from and c.completed_at <= _to) c
   group by c.task_type, c.task_lease_id, c.completed_at,
            case when c.task_lease_id is not null and (c.started_at is null or c.started_at > c.completed_at)
                 then c.task_id end
  union all
  select r.task_type, g.task_lease_id, r.completed_at, g.task_id,
         timestamptz 'epoch' + g.started_us * interval '1 microsecond', g.completions
    from queues.completion_round r
   cross join lateral (select min(u.us) as first_us, max(u.us) as last_us, count(u.us) as known,
                              min(u.lease) as lease, max(u.lease) as last_lease, count(u.lease) as leased,
                              count(*) as completions
                         from unnest(r.started_us, r.task_lease_ids) as u(us, lease)) s
   cross join lateral (select s.known = s.completions and s.leased = s.completions and s.lease = s.last_lease
                              and timestamptz 'epoch' + s.last_us * interval '1 microsecond' <= r.completed_at
                                as common) k
   cross join lateral (
     select s.lease as task_lease_id, r.task_id, s.first_us as started_us, s.completions
      where k.common
     union all
     select u.task_lease_id, max(u.task_id), min(u.started_us), count(*)
       from unnest(r.task_ids, r.task_lease_ids, r.started_us) as u(task_id, task_lease_id, started_us)
      where not k.common
      group by u.task_lease_id,
               case when u.task_lease_id is not null
                         and (u.started_us is null
                              or timestamptz 'epoch' + u.started_us * interval '1 microsecond' > r.completed_at)
                    then u.task_id end) g
   where r.completed_at > _from and r.completed_at <= _to
$$;

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
  _queued_types text[];
  _pending bigint[];
  _ready bigint[];
  _running bigint[];
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
  -- The queue's counts per type, a statement of their own: it reads the lease-held
  -- tasks' facts (partitioned) by correlated probes, which no argument of this call
  -- prunes, so after its first calls in a session PL/pgSQL keeps its generic plan instead
  -- of planning it over every partition at each call (inside the statement below, planned
  -- for each call to prune by _first, it was about 2 ms of planning with 10,000,000 tasks
  -- in history).
  select coalesce(array_agg(q.task_type), '{}'), coalesce(array_agg(q.pending), '{}'),
         coalesce(array_agg(q.ready), '{}'), coalesce(array_agg(q.running), '{}')
    into _queued_types, _pending, _ready, _running
    from (select p.task_type,
                 sum(p.tasks) as pending,
                 coalesce(sum(p.tasks) filter (where p.available_at <= _now), 0) as ready,
                 coalesce(sum(p.tasks) filter (where p.available_at > _now and p.current_lease_id is not null), 0) as running
            from queues.task_pending_or_held_counts p
           where _task_type is null or p.task_type = _task_type
           group by p.task_type) q;
  return query
  with types as (
    select t.task_type from queues.task_type t
     where _task_type is null or t.task_type = _task_type
  ),
  -- (the counts above)
  queue as (
    select * from unnest(_queued_types, _pending, _ready, _running) as q(task_type, pending, ready, running)
  ),
  -- Completions in the window by completed_at (index range scan), with their type, as
  -- runs that end together (admin.completion_runs_between): n completions each.
  completion as materialized (
    select c.task_type, c.task_lease_id, c.completed_at, c.task_id, c.started_at, c.completions as n
      from admin.completion_runs_between(_now - make_interval(secs => _window), _now) c
     where _task_type is null or c.task_type = _task_type
  ),
  -- The run of each completing lease: its worker, its start (the completion's, else a
  -- start mark, else the lease) and its end. The leases of tasks enqueued in the window (ids from _first on)
  -- are one range of task_lease's primary key and of claim_lease's (a claim lease lives
  -- in the set of its largest task id, so one naming a task from _first on is in that
  -- range), joined at once (a claim lease by its id: one row per claim, not one per task
  -- it names); a completion of an older task probes its lease
  -- (queues.task_lease_at); each start mark is a primary-key probe (a scalar
  -- subquery, written once after the three ways of finding the lease: each reference to a
  -- partitioned table is planned over all its partitions, at each call, and the three
  -- copies were about a fifth of the call with 10,000,000 tasks in history). A lease names
  -- its worker by key (queues.worker_name), or by id if written
  -- before that key existed: a worker counts once per way it is named (twice, for one
  -- window, if it ran across that migration). A completion without a lease (cancelled,
  -- abandoned) names none and ran nowhere.
  completion_run as (
    select x.task_type, x.worker_key, x.worker_id,
           greatest(coalesce(x.started_at,
                             (select st.started_at from queues.task_lease_started st
                               where st.task_id = x.task_id and st.task_lease_id = x.task_lease_id),
                             x.leased_at),
                    _now - make_interval(secs => _window)) as run_from,
           x.run_to, x.n
      from (select c.task_type, l.worker_key, l.worker_id, c.completed_at as run_to,
                   c.task_id, c.task_lease_id, c.started_at, l.leased_at, c.n
              from completion c
              join (select y.task_id, y.task_lease_id, y.worker_key, y.worker_id, y.leased_at
                      from queues.task_lease y
                     where y.task_id >= _first) l
                on l.task_id = c.task_id and l.task_lease_id = c.task_lease_id
             where c.task_id >= _first
            union all
            -- a claim lease by its id alone (one row per claim, its array not unnested: a
            -- completion under a claim lease is of a task it names)
            select c.task_type, l.worker_key, null, c.completed_at, c.task_id, c.task_lease_id, c.started_at,
                   l.leased_at, c.n
              from completion c
              join (select y.task_lease_id, y.worker_key, y.leased_at
                      from queues.claim_lease y
                     where y.task_id >= _first) l
                on l.task_lease_id = c.task_lease_id
             where c.task_id >= _first
            union all
            select c.task_type, l.worker_key, l.worker_id, c.completed_at, c.task_id, c.task_lease_id, c.started_at,
                   l.leased_at, c.n
              from completion c
             cross join lateral (select y.worker_key, y.worker_id, y.leased_at
                                   from queues.task_lease_at(c.task_id, c.task_lease_id) y limit 1) l
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
      from (select r.task_type, r.worker_key, r.worker_id, sum(r.n) as runs,
                   min(r.run_from) as island_from, max(r.run_to) as island_to
              from run_island r
             group by r.task_type, r.worker_key, r.worker_id, r.island) i
     group by i.task_type
  ),
  recent as (
    select c.task_type, sum(c.n)::bigint as completed,
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
--! Included admin/metrics.sql
-- Throughput and completion statistics over a recent window, for the dashboard's chart
-- and the API's /metrics. Both read completions through the completed_at indexes of
-- task_completed and completion_round (cost follows the window, not history): the
-- throughput counts a completion round in one row (admin.completion_counts_between), the
-- statistics read each completion (admin.completions_between) and probe its lease
-- (queues.task_lease_at: task_lease's primary key, claim_lease's lease id index).

-- Completions per _bucket_seconds bucket over the last _window_seconds (defaults: one
-- hour in one-minute buckets; at most 1440 buckets), by task type and outcome. Buckets
-- without completions are left out.
create or replace function admin.throughput_at(_now timestamptz, _window_seconds integer, _bucket_seconds integer)
  returns table (bucket_start timestamptz, task_type text, outcome text, completed bigint)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 3600);
  _bucket integer := coalesce(_bucket_seconds, 60);
  _start timestamptz;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 604800 then
    raise exception 'window_seconds must be between 60 and 604800 (7 days), got %', _window
      using errcode = '22023';
  end if;
  if _bucket not between 10 and _window then
    raise exception 'bucket_seconds must be between 10 and window_seconds (%), got %', _window, _bucket
      using errcode = '22023';
  end if;
  if _window / _bucket > 1440 then
    raise exception 'at most 1440 buckets, got %', _window / _bucket using errcode = '54000';
  end if;
  _start := _now - make_interval(secs => _window);
  return query
  -- date_bin: the start of the bucket (counted from _start) holding completed_at; the
  -- numeric arithmetic of extract(epoch ...) cost more than reading the row.
  -- A round's tasks share its instant: counted in one row (admin.completion_counts_between).
  select date_bin(make_interval(secs => _bucket), c.completed_at, _start),
         c.task_type, c.outcome, sum(c.completions)::bigint
    from admin.completion_counts_between(_start, _now) c
   group by 1, 2, 3
   order by 1, 2, 3;
end;
$$;

create or replace function admin.throughput(_window_seconds integer default null, _bucket_seconds integer default null)
  returns table (bucket_start timestamptz, task_type text, outcome text, completed bigint)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.throughput_at(now(), _window_seconds, _bucket_seconds)
$$;

-- Upper bounds (seconds) of the duration histogram buckets; +Inf is implied.
create or replace function admin.duration_buckets() returns double precision[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select array[0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]::double precision[] $$;

-- Completions in the last _window_seconds (default 3600) by task type and outcome, with
-- the durations of leased completions (completed_at - leased_at of the completing lease):
-- their count, sum, and cumulative counts per admin.duration_buckets() bound.
create or replace function admin.completion_stats_at(_now timestamptz, _window_seconds integer)
  returns table (
    task_type        text,
    outcome          text,
    completed        bigint,
    timed            bigint,
    duration_sum     double precision,
    duration_buckets bigint[]
  )
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 3600);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 604800 then
    raise exception 'window_seconds must be between 60 and 604800 (7 days), got %', _window
      using errcode = '22023';
  end if;
  return query
  with recent as (
    select c.task_type, c.outcome, date_part('epoch', c.completed_at - l.leased_at) as seconds
      from admin.completions_between(_now - make_interval(secs => _window), _now) c
      left join lateral (select y.leased_at from queues.task_lease_at(c.task_id, c.task_lease_id) y limit 1) l on true
  ),
  totals as (
    select r.task_type, r.outcome, count(*) as completed, count(r.seconds) as timed,
           coalesce(sum(r.seconds), 0) as duration_sum
      from recent r
     group by r.task_type, r.outcome
  ),
  buckets as (
    select b.task_type, b.outcome, array_agg(b.n order by b.i) as counts
      from (select r.task_type, r.outcome, u.i, count(*) filter (where r.seconds <= u.b) as n
              from recent r
             cross join unnest(admin.duration_buckets()) with ordinality as u(b, i)
             group by 1, 2, 3) b
     group by b.task_type, b.outcome
  )
  select t.task_type, t.outcome, t.completed, t.timed, t.duration_sum, b.counts
    from totals t
    join buckets b on b.task_type = t.task_type and b.outcome = t.outcome
   order by 1, 2;
end;
$$;

create or replace function admin.completion_stats(_window_seconds integer default null)
  returns table (
    task_type        text,
    outcome          text,
    completed        bigint,
    timed            bigint,
    duration_sum     double precision,
    duration_buckets bigint[]
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.completion_stats_at(now(), _window_seconds)
$$;
--! EndIncluded admin/metrics.sql
--! Included admin/tasks.sql
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
--! EndIncluded admin/tasks.sql
--! Included admin/overview.sql
-- The overview's queue depth over a recent window, derived from the facts: the depth
-- of a type at instant e is the number of its tasks pending now, plus those completed
-- after e, minus those enqueued after e. Cost follows the window's enqueues and
-- completions, never the history.

-- The first task id enqueued after _ts: a binary search over the primary key (about 30
-- probes at any table size). Identity values follow enqueued_at (default now(), the
-- enqueuing transaction's start) to within one transaction's length, so around _ts the
-- bound may be off by the tasks of transactions open across it; good for a chart.
create or replace function admin.first_task_id_after(_ts timestamptz)
  returns bigint
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _lo bigint;
  _hi bigint;
  _mid bigint;
  _at timestamptz;
begin
  select t.task_id into _lo from queues.task t order by t.task_id limit 1;
  select t.task_id + 1 into _hi from queues.task t order by t.task_id desc limit 1;
  if _lo is null then
    return 1;
  end if;
  while _lo < _hi loop
    _mid := _lo + (_hi - _lo) / 2;
    select t.enqueued_at into _at from queues.task t where t.task_id >= _mid order by t.task_id limit 1;
    if _at > _ts then
      _hi := _mid;
    else
      _lo := _mid + 1;
    end if;
  end loop;
  return _lo;
end;
$$;

-- Pending tasks (not completed, whatever their schedule) per type at the end of each
-- _bucket_seconds bucket of the last _window_seconds (defaults 3600 and 60), oldest first.
-- Every registered type appears in every bucket.
create or replace function admin.queue_depth_at(_now timestamptz, _window_seconds integer, _bucket_seconds integer)
  returns table (bucket_end timestamptz, task_type text, depth bigint)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _window integer := coalesce(_window_seconds, 3600);
  _bucket integer := coalesce(_bucket_seconds, 60);
  _from timestamptz;
  _first_id bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 86400 then
    raise exception 'window_seconds must be between 60 and 86400, got %', _window using errcode = '22023';
  end if;
  if _bucket not between 10 and _window or _window / _bucket > 500 then
    raise exception 'bucket_seconds must be between 10 and window_seconds, with at most 500 buckets, got %', _bucket
      using errcode = '22023';
  end if;
  _from := _now - make_interval(secs => _window);
  _first_id := admin.first_task_id_after(_from);
  return query
  -- Materialized: the per-bucket sums below read it once per bucket and type.
  with events as materialized (
    select e.task_type, e.k, sum(e.d) as d
      -- date_part (double precision), not extract (numeric): cheaper per row.
      from (select t.task_type, ceil(date_part('epoch', t.enqueued_at - _from) / _bucket)::integer as k, -1 as d
              from queues.task t
             where t.task_id >= _first_id and t.enqueued_at > _from and t.enqueued_at <= _now
            union all
            -- a round's tasks in one row (admin.completion_counts_between)
            select c.task_type, ceil(date_part('epoch', c.completed_at - _from) / _bucket)::integer, c.completions::integer
              from admin.completion_counts_between(_from, _now) c) e
     group by 1, 2
  ),
  pending as (
    -- the claim index and the lease-held tasks, counted per claim lease (sql/queues/lease_held.sql)
    select p.task_type, sum(p.tasks) as n from queues.task_pending_or_held_counts p group by 1
  )
  select _from + make_interval(secs => i * _bucket), ty.task_type,
         coalesce(pe.n, 0) + coalesce((select sum(ev.d) from events ev where ev.task_type = ty.task_type and ev.k > i), 0)::bigint
    from generate_series(1, ceil(_window::numeric / _bucket)::integer) i
   cross join queues.task_type ty
    left join pending pe on pe.task_type = ty.task_type
   order by 1, 2;
end;
$$;

create or replace function admin.queue_depth(_window_seconds integer default null, _bucket_seconds integer default null)
  returns table (bucket_end timestamptz, task_type text, depth bigint)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.queue_depth_at(now(), _window_seconds, _bucket_seconds)
$$;
--! EndIncluded admin/overview.sql
