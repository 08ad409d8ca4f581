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
