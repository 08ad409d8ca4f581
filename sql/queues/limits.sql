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
  -- The limits' lock (queues.claim_tasks_at takes it shared): claims in flight, which
  -- read no limit, commit first, and claims that start now wait for this transaction, so
  -- they read the new limit.
  perform pg_advisory_xact_lock(20254, 0);
  insert into queues.task_limit_set (task_type, scope, group_key, max_running, max_starts, interval_ms)
  values (_task_type, _scope, _group_key, _max_running, _max_starts, _ms::integer);
  -- A limited type's tasks are claimed on their rows, where the limits count them: its
  -- tasks in ready batches get theirs (sql/queues/ready_batch.sql). A batch an enqueue
  -- commits after this (it read no limit) gets its rows at the first claim of the type.
  perform queues.unbatch_task_type(_task_type);
  -- Its tasks running now, taken by claims that read no limit, are held by their claim
  -- lease without a row (sql/queues/lease_held.sql), where the claim's count of live leases
  -- does not look: they get their rows back, leased as their claim left them, so they
  -- count against the new limit until they end (the claims in flight committed first).
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
