--! Previous: sha1:8a77730d48ec8e4010c205de3dd21c9deec3ec5d
--! Hash: sha1:c686e8acbe38944077e3fab6a25e357dd4262b11
--! Message: Limits count tasks running before them; the task list walks ready batches one at a time

--! split: 400-limits-and-pending-list.sql
set local lock_timeout = '5s';

-- A limit set while tasks of its type run counts them: queues.set_task_limit gives the
-- type's lease-held tasks (claimed while no limit was in force) their claim-index rows
-- back, where the claim's count of live leases reads them.
--! Included queues/limits.sql
-- Flow limits per task type and group key (docs/flow-control.md, "Concurrency and rate
-- limits"), honoured by every claim on every worker (queues.claim_tasks_at):
--
--   concurrency: at most max_running tasks of the scope hold a live lease at once (a lease
--                whose expiry passed, or that was released, revoked or ended, holds none);
--   rate:        at most max_starts tasks of the scope are claimed in each window of
--                interval_ms, windows aligned to the epoch (a minute's limit counts from
--                :00 to :59); a task claimed again (its lease expired, it was released)
--                counts again.
--
-- A scope is a task type as a whole ('type'), each group key of it ('each_group': every
-- group key value separately; tasks without a group key are not limited by it), or one
-- named group key ('group': in place of the type's each_group limit for that key). A
-- task is claimed only when every scope it falls in has room.
--
-- Limits are set as facts (queues.task_limit_set, the latest per key in force); a clear
-- writes a fact with neither limit. Owner only: the REST API calls admin.set_task_limit.

-- The limits in force: one row per (task type, scope, group key). Read once per claim
-- (a tiny table; none set: an empty one).
create or replace function queues.task_limits()
  returns table (
    task_type   text,
    scope       text,
    group_key   text,
    max_running integer,
    max_starts  integer,
    interval_ms integer,
    set_at      timestamptz
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select l.task_type, l.scope, l.group_key, l.max_running, l.max_starts, l.interval_ms, l.set_at
    from (select distinct on (s.task_type, s.scope, s.group_key) s.*
            from queues.task_limit_set s
           order by s.task_type, s.scope, s.group_key, s.task_limit_set_id desc) l
   where l.max_running is not null or l.max_starts is not null
   order by l.task_type, l.scope, l.group_key
$$;

-- Checks a limit's key; raises 22004/22023/23503 naming the field. Helper (no grants).
create or replace function queues.check_task_limit_key(_task_type text, _scope text, _group_key text)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if _scope is null then
    raise exception 'scope must not be null' using errcode = '22004';
  end if;
  if _scope not in ('type', 'each_group', 'group') then
    raise exception 'scope must be type, each_group or group, got %', quote_literal(left(_scope, 100))
      using errcode = '22023';
  end if;
  if _scope = 'group' and (_group_key is null or length(_group_key) not between 1 and 200) then
    raise exception 'group_key must be 1 to 200 characters for scope group' using errcode = '22023';
  end if;
  if _scope <> 'group' and _group_key is not null then
    raise exception 'group_key must be null for scope %', _scope using errcode = '22023';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task type %', quote_literal(left(_task_type, 100)) using errcode = '23503';
  end if;
end;
$$;

-- Sets the limits of a scope: _max_running (1 to 1,000,000 tasks leased at once) and/or
-- _max_starts per _per (1 to 1,000,000 claims per window of 1 millisecond to 1 day, in
-- whole milliseconds); a NULL limit is none. Replaces what the scope had. Bad input
-- (an unknown type 23503; a scope, a group key, a limit of zero or below, a start limit
-- without its interval, an interval out of range or with months 22023; neither limit
-- 22004) writes nothing. Takes effect at the next claim of every worker; tasks running
-- over a lowered limit run on, and no more start until they are under it.
create or replace function queues.set_task_limit(
  _task_type   text,
  _scope       text,
  _group_key   text,
  _max_running integer,
  _max_starts  integer default null,
  _per         interval default null
) returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _ms numeric;
begin
  perform queues.check_task_limit_key(_task_type, _scope, _group_key);
  if _max_running is null and _max_starts is null then
    raise exception 'set max_running, or max_starts with per (queues.clear_task_limit clears)' using errcode = '22004';
  end if;
  if _max_running is not null and _max_running not between 1 and 1000000 then
    raise exception 'max_running must be between 1 and 1000000, got %', _max_running using errcode = '22023';
  end if;
  if _max_starts is not null and _max_starts not between 1 and 1000000 then
    raise exception 'max_starts must be between 1 and 1000000, got %', _max_starts using errcode = '22023';
  end if;
  if (_max_starts is null) <> (_per is null) then
    raise exception 'max_starts and per go together: got max_starts %, per %',
      coalesce(_max_starts::text, 'null'), coalesce(_per::text, 'null') using errcode = '22023';
  end if;
  if _per is not null then
    _ms := extract(epoch from _per) * 1000;
    if extract(month from _per) <> 0 or extract(year from _per) <> 0
       or _ms not between 1 and 86400000 or _ms <> trunc(_ms) then
      raise exception 'per must be a whole number of milliseconds from 1 millisecond to 1 day, got %', _per
        using errcode = '22023';
    end if;
  end if;
  insert into queues.task_limit_set (task_type, scope, group_key, max_running, max_starts, interval_ms)
  values (_task_type, _scope, _group_key, _max_running, _max_starts, _ms::integer);
  -- A limited type's tasks are claimed on their rows, where the limits count them: its
  -- tasks in ready batches get theirs (sql/queues/ready_batch.sql). A batch an enqueue
  -- commits after this (it read no limit) gets its rows at the first claim of the type.
  perform queues.unbatch_task_type(_task_type);
  -- Its tasks running now, taken by claims that read no limit, are held by their claim
  -- lease without a row (sql/queues/lease_held.sql), where the claim's count of live leases
  -- does not look: they get their rows back, leased as their claim left them, so they
  -- count against the new limit until they end. (A claim in flight as this commits, which
  -- read the limits before it, still takes its tasks without rows: those are not counted,
  -- at most one claim's tasks per worker process, until they end.)
  perform queues.hold_rows_of(array(select h.task_id
                                      from queues.lease_held_tasks h
                                      join queues.task t on t.task_id = h.task_id
                                     where t.task_type = _task_type));
end;
$$;

-- Clears the limits of a scope; true when it had one. Bad input as queues.set_task_limit.
create or replace function queues.clear_task_limit(_task_type text, _scope text, _group_key text default null)
  returns boolean
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform queues.check_task_limit_key(_task_type, _scope, _group_key);
  if not exists (select 1 from queues.task_limits() l
                  where l.task_type = _task_type and l.scope = _scope
                    and l.group_key is not distinct from _group_key) then
    return false;
  end if;
  insert into queues.task_limit_set (task_type, scope, group_key) values (_task_type, _scope, _group_key);
  return true;
end;
$$;

-- The start of the rate window holding _now, for windows of _interval_ms aligned to the
-- epoch. Helper (no grants).
create or replace function queues.limit_window_start(_now timestamptz, _interval_ms integer)
  returns timestamptz
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select to_timestamp(floor(extract(epoch from _now) * 1000 / _interval_ms) * _interval_ms / 1000.0)
$$;

-- Each limit in force with how full it is now: tasks of its scope holding a live lease
-- (running), claimed in the current window (starts, rate limits only), and ready now but
-- held back because the scope is full (held_back: for an each_group limit, summed over
-- its full group keys). For the dashboard, the REST API and /metrics: reads the live
-- leases and ready tasks of limited types only (the claim index's ready index per type).
create or replace function queues.task_limit_status_at(_now timestamptz)
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
  with rule as (
    select l.* from queues.task_limits() l
  ),
  live as (
    -- The claim index's leased rows, and the lease-held tasks (sql/queues/lease_held.sql):
    -- a limited type's tasks are leased on their rows, but tasks claimed before their type
    -- was limited may still be held by their claim lease without one. Read only when a
    -- limit is in force.
    select p.task_type, p.group_key, count(*) as n
      from queues.task_pending_or_held p
     where p.current_lease_id > 0 and p.available_at > _now
       and p.task_type = any (array(select distinct r.task_type from rule r))
       and exists (select 1 from rule)
     group by 1, 2
  ),
  ready as (
    select p.task_type, p.group_key, count(*) as n
      from queues.task_pending p
     where p.current_lease_id is null and p.scheduled_at <= _now and p.available_at <= _now
       and p.task_type = any (array(select distinct r.task_type from rule r))
     group by 1, 2
  ),
  -- Per rule and group key it covers ('' for the type as a whole): used and ready.
  per_key as (
    select r.*, k.group_key as key,
           coalesce((select sum(lv.n) from live lv
                      where lv.task_type = r.task_type
                        and (k.group_key = '' or lv.group_key = k.group_key)), 0) as running_now,
           coalesce((select w.starts from queues.task_limit_window w
                      where w.task_type = r.task_type and w.group_key = k.group_key
                        and r.interval_ms is not null
                        and w.window_start >= queues.limit_window_start(_now, r.interval_ms)), 0) as starts_now,
           coalesce((select sum(rd.n) from ready rd
                      where rd.task_type = r.task_type
                        and (k.group_key = '' or rd.group_key = k.group_key)), 0) as ready_now
      from rule r
     cross join lateral (
       select '' as group_key where r.scope = 'type'
       union all select r.group_key where r.scope = 'group'
       -- an each_group limit is listed (with zeros) when no group key of it has tasks
       union all select null where r.scope = 'each_group'
       -- each group key with tasks live or ready and no named limit of its own
       union all
       select g.group_key from (select lv.group_key from live lv where lv.task_type = r.task_type
                                union select rd.group_key from ready rd where rd.task_type = r.task_type) g
        where r.scope = 'each_group' and g.group_key is not null
          and not exists (select 1 from rule n where n.task_type = r.task_type and n.scope = 'group'
                                                 and n.group_key = g.group_key)
     ) k
  )
  select pk.task_type, pk.scope, pk.group_key, pk.max_running, pk.max_starts, pk.interval_ms, pk.set_at,
         sum(pk.running_now)::bigint, sum(pk.starts_now)::bigint,
         sum(case when pk.running_now >= pk.max_running or pk.starts_now >= pk.max_starts then pk.ready_now else 0 end)::bigint
    from per_key pk
   group by pk.task_type, pk.scope, pk.group_key, pk.max_running, pk.max_starts, pk.interval_ms, pk.set_at
   order by 1, 2, 3
$$;
--! EndIncluded queues/limits.sql

-- The task list's pending walk reads ready batches one at a time, newest first, until no
-- batch left can hold a task of the page (admin.list_tasks_at): the claim index and the
-- lease-held tasks are read without the batches (task_pending_or_held's batched column).
--! Included queues/lease_held.sql
-- Lease-held tasks: the ready set's tasks out of the claim index (docs/design/hot-path.md).
-- A claim takes an unkeyed task of an unlimited type out of the claim index on its first
-- lease (queues.claim_tasks_at deletes its queues.task_pending row); its claim lease
-- (queues.claim_lease) then holds it. A task with neither a claim-index row nor an end
-- (queues.task_end_of) is leased by its newest claim lease: the claim index loses a task
-- once (a task leased before is claimed on its row), so that lease is the only one that
-- can hold it. Readers that ask "which tasks are leased" never read task_pending alone;
-- they read one of these:
--   queues.lease_held_tasks                     a view: every lease-held task with its
--                                               claim lease (task, lease, worker, leased
--                                               and expiry times, suspect)
--   queues.lease_held_of(task_id)               one task's, if it is lease-held
--   queues.task_pending_or_held                 a view in task_pending's shape: the claim
--                                               index's rows, a row per lease-held task as
--                                               its claim lease gives it (leased by that
--                                               lease, available at its expiry, its first
--                                               lease), lease_held true, and a row per task
--                                               in a ready batch (sql/queues/ready_batch.sql)
--                                               as its claim-index row would be
--   queues.task_pending_or_held_of(task_id)     one task's row, either kind
--   queues.lease_held_counts                    a view: per claim lease and task type,
--                                               how many tasks it holds
--   queues.task_pending_or_held_counts          a view in task_pending_or_held's shape,
--                                               counted (tasks per row): for counts by
--                                               type and state, no probe per held task
-- The set is bounded by the rescuer's table of due leases: a claim that takes a task out
-- of the claim index writes its lease into queues.claim_lease_due, and the pass that
-- rescues the lease (its unended tasks get their rows back, queues.rescue_due_leases_at)
-- deletes it; only the claim leases still there are read, by their ids, and of those
-- only the ones with fewer ends under them than tasks are unnested.
-- The functions are inlined into their callers (SQL, stable, no SET clause, not a security
-- definer), so that a caller's task id reaches the probes; every object they name is
-- schema-qualified. Called from definer functions with a pinned search path: no grants. (A
-- view read by another role cannot call them: public.worker_tasks writes the probe out.)

-- Each claim lease not yet rescued once that may still hold a task: its tasks, less those
-- ended in a completion round of its task range (each round in the range unnested once
-- per lease, not probed per task: a round's array, read by `= any` per task, is
-- decompressed per task), less those with a claim-index row or a task_completed row
-- (probes by key). A lease whose tasks all ended under it is not unnested: the ends it
-- fenced are counted per round without unnesting (array_positions of the lease's id in
-- the round's task_lease_ids, in C) and in task_completed over its task range, and when
-- they reach the number of its tasks it holds none (a completion under a claim lease is
-- of a task it names, and a task ends once: the completion of a lease-held task runs
-- under its lease's lock and reads its ends). A lease with a task ended otherwise (under
-- a later lease, or none), or given a row, is unnested as before. The rounds of a range
-- with none are not read twice (the count says so).
create or replace view queues.lease_held_tasks as
select u.task_id, c.task_lease_id, c.worker_key, c.leased_at, c.expires_at,
       coalesce(c.suspect_task_id = u.task_id, false) as suspect
  from queues.claim_lease_due d
 -- each due lease by its id (a probe per lease, never a scan of claim_lease)
 cross join lateral (select c.* from queues.claim_lease c
                      where c.task_lease_id = d.task_lease_id and c.task_id = d.task_id limit 1) c
 -- the completion rounds of its range: how many, and the ends under the lease they hold
 cross join lateral (select count(*) as rounds,
                            coalesce(sum(cardinality(array_positions(r.task_lease_ids, c.task_lease_id))), 0) as ended
                       from queues.completion_round r
                      where r.task_range && c.task_range and r.task_id >= lower(c.task_range)) g
 cross join lateral (
   select x.task_id from unnest(c.task_ids) x(task_id)
   except
   select e.task_id
     from queues.completion_round r
    cross join lateral unnest(r.task_ids) e(task_id)
    where g.rounds > 0 and r.task_range && c.task_range and r.task_id >= lower(c.task_range)
 ) u
 -- (the lease may still hold a task: fewer ends under it than tasks)
 where cardinality(c.task_ids) > g.ended
   and cardinality(c.task_ids)
       > g.ended + (select count(*) from queues.task_completed x
                     where x.task_id >= lower(c.task_range) and x.task_id < upper(c.task_range)
                       and x.task_lease_id = c.task_lease_id)
   and not exists (select 1 from queues.task_pending p where p.task_id = u.task_id)
   and not exists (select 1 from queues.task_completed x where x.task_id = u.task_id);
comment on view queues.lease_held_tasks is
  'Tasks held by their claim lease without a claim-index row (the ready set), with that lease: tasks of the claim leases not yet rescued (queues.claim_lease_due) with neither a queues.task_pending row nor an end. A task''s own: queues.lease_held_of(task_id). See sql/queues/lease_held.sql.';

create or replace function queues.lease_held_of(_task_id bigint)
  returns table (task_id bigint, task_lease_id bigint, worker_key integer, leased_at timestamptz,
                 expires_at timestamptz, suspect boolean)
  language sql stable
as $$
  -- The newest claim lease naming the task (claim_lease's GiST index, in the partitions
  -- that can hold it), when the task has no row and no end.
  select _task_id, c.task_lease_id, c.worker_key, c.leased_at, c.expires_at,
         coalesce(c.suspect_task_id = _task_id, false)
    from queues.claim_lease c
   where c.task_range @> _task_id
     and c.task_id >= _task_id
     and _task_id = any (c.task_ids)
     and not exists (select 1 from queues.task_pending p where p.task_id = _task_id)
     and not exists (select 1 from queues.task_end_of(_task_id) e)
   order by c.task_lease_id desc
   limit 1
$$;

-- A lease-held task's row as the claim would have left it on the row: leased by its claim
-- lease (current_lease_id), available at the lease's expiry, its first lease (lease_count
-- 1: a task leased before keeps its row), nothing released, failed or interrupted; its
-- scheduled time as the claim index gives it (a run-now request counts). A task in a ready
-- batch: ready, never leased, batched true (a walk that filters on not batched reads no
-- batch: admin.list_tasks_at walks the batches one at a time).
create or replace view queues.task_pending_or_held as
select p.task_id, p.task_type, p.priority, p.scheduled_at, p.resource_key, p.available_at, p.current_lease_id,
       p.lease_count, p.released_count, p.max_attempts, p.failed_attempts, p.interrupted_count,
       p.uncounted_count, p.suspect_lease, p.group_key, false as lease_held, false as batched
  from queues.task_pending p
union all
select h.task_id, t.task_type, t.priority, least(t.scheduled_at, rn.requested_at), t.resource_key, h.expires_at,
       h.task_lease_id, 1, 0, t.max_attempts, 0, 0, 0, h.suspect, t.group_key, true, false
  from queues.lease_held_tasks h
 cross join lateral (select x.* from queues.task x where x.task_id = h.task_id limit 1) t
  left join queues.task_run_now rn on rn.task_id = h.task_id
union all
-- A task in a ready batch (sql/queues/ready_batch.sql): ready, never leased.
select b.task_id, b.task_type, b.priority, b.scheduled_at, null::text, b.scheduled_at, null::bigint,
       0, 0, b.max_attempts, 0, 0, 0, false, null::text, false, true
  from queues.task_batched b;
comment on view queues.task_pending_or_held is
  'Every task not ended, in queues.task_pending''s shape: the claim index''s rows, each lease-held task (queues.lease_held_tasks) leased by its claim lease (lease_held), and each task in a ready batch (queues.task_batched) as its row would be (batched; a reader that filters on not batched reads no batch). A task''s own: queues.task_pending_or_held_of(task_id). See sql/queues/lease_held.sql.';

-- Per claim lease holding tasks, per task type: how many it holds (the lease-held part
-- of the counts readers take: admin.list_queues, task_counts, queue_depth, capacity).
-- The same tasks as queues.lease_held_tasks; their types read once per lease, by one
-- index scan of queues.task over the lease's held ids (`= any` of the array, within its
-- first and last id: sorted, read leaf page by leaf page), not a probe per task.
create or replace view queues.lease_held_counts as
select h.task_lease_id, h.worker_key, h.expires_at, t.task_type, count(*)::integer as tasks
  from (select h.task_lease_id, h.worker_key, h.expires_at, array_agg(h.task_id) as task_ids,
               min(h.task_id) as first_id, max(h.task_id) as last_id
          from queues.lease_held_tasks h
         group by h.task_lease_id, h.worker_key, h.expires_at) h
 cross join lateral (select x.task_type from queues.task x
                      where x.task_id = any (h.task_ids) and x.task_id >= h.first_id and x.task_id <= h.last_id) t
 group by h.task_lease_id, h.worker_key, h.expires_at, t.task_type;
comment on view queues.lease_held_counts is
  'Per claim lease and task type, the tasks the lease holds (queues.lease_held_tasks, counted): the lease-held part of a count. See sql/queues/lease_held.sql.';

-- Every task not ended, counted in task_pending's shape (what a count by type and state
-- reads): a row per claim-index row (tasks 1), and per claim lease and task type the
-- tasks it holds (queues.lease_held_counts: available at its expiry, leased by it, their
-- first lease), lease_held true. count(*) over queues.task_pending_or_held is
-- sum(tasks) here, with the same available_at, current_lease_id and lease_count.
create or replace view queues.task_pending_or_held_counts as
select p.task_type, p.available_at, p.current_lease_id, p.lease_count, false as lease_held, 1 as tasks
  from queues.task_pending p
union all
select h.task_type, h.expires_at, h.task_lease_id, 1, true, h.tasks
  from queues.lease_held_counts h
union all
-- per ready batch, its tasks not taken (ready, never leased)
select b.task_type, b.scheduled_at, null::bigint, 0, false, cardinality(b.task_ids) - b.taken
  from queues.task_ready_batch b;
comment on view queues.task_pending_or_held_counts is
  'Every task not ended, counted: the claim index''s rows (tasks 1), the lease-held tasks per claim lease and type (queues.lease_held_counts) and the tasks of each ready batch (queues.task_ready_batch), in queues.task_pending_or_held''s shape; sum(tasks) is its count(*). See sql/queues/lease_held.sql.';

create or replace function queues.task_pending_or_held_of(_task_id bigint)
  returns table (task_id bigint, task_type text, priority integer, scheduled_at timestamptz,
                 resource_key text, available_at timestamptz, current_lease_id bigint,
                 lease_count integer, released_count integer, max_attempts integer,
                 failed_attempts integer, interrupted_count integer, uncounted_count integer,
                 suspect_lease boolean, group_key text, lease_held boolean)
  language sql stable
as $$
  select p.task_id, p.task_type, p.priority, p.scheduled_at, p.resource_key, p.available_at, p.current_lease_id,
         p.lease_count, p.released_count, p.max_attempts, p.failed_attempts, p.interrupted_count,
         p.uncounted_count, p.suspect_lease, p.group_key, false
    from queues.task_pending p
   where p.task_id = _task_id
  union all
  select h.task_id, t.task_type, t.priority, least(t.scheduled_at, rn.requested_at), t.resource_key, h.expires_at,
         h.task_lease_id, 1, 0, t.max_attempts, 0, 0, 0, h.suspect, t.group_key, true
    from queues.lease_held_of(_task_id) h
   cross join lateral (select x.* from queues.task x where x.task_id = h.task_id limit 1) t
    left join queues.task_run_now rn on rn.task_id = h.task_id
  union all
  select b.task_id, b.task_type, b.priority, b.scheduled_at, null::text, b.scheduled_at, null::bigint,
         0, 0, b.max_attempts, 0, 0, 0, false, null::text, false
    from queues.batched_of(_task_id) b
$$;
--! EndIncluded queues/lease_held.sql
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
  select c.task_type, c.outcome, count(*)
    from admin.completions_between(_now - make_interval(secs => _window), _now) c
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
