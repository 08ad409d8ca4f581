-- The worker registry and stale recovery. Workers report in on every heartbeat tick;
-- a worker not seen for a while is presumed dead, and the live leases it holds can be
-- revoked at once instead of waiting for them to expire.

-- Called by each worker on start and on every heartbeat tick, with the interval of its
-- heartbeats (null: the default, 30 s), from which stale recovery derives how long the
-- worker may be silent. At most 1000 task types, each a task type name.
create or replace function queues.record_worker_heartbeat(
  _worker_id             text,
  _task_types            text[],
  _heartbeat_interval_ms integer default null
) returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _task_types is null or cardinality(_task_types) = 0 or array_position(_task_types, null) is not null then
    raise exception 'task_types must name at least one task type' using errcode = '22023';
  end if;
  if cardinality(_task_types) > 1000 then
    raise exception 'task_types names % types, over the limit of 1000', cardinality(_task_types)
      using errcode = '54000';
  end if;
  if exists (select 1 from unnest(_task_types) t where t !~ '^[a-z][a-z0-9_]{0,62}$') then
    raise exception 'task_types must be task type names (a-z, 0-9, _, at most 63 characters)'
      using errcode = '22023';
  end if;
  if _heartbeat_interval_ms is not null and _heartbeat_interval_ms not between 1 and 86400000 then
    raise exception 'heartbeat_interval_ms must be between 1 and 86400000, got %', _heartbeat_interval_ms
      using errcode = '22023';
  end if;
  insert into queues.worker as w (worker_id, task_types, heartbeat_interval_ms)
  values (_worker_id, _task_types, _heartbeat_interval_ms)
  on conflict (worker_id) do update
     set task_types = excluded.task_types, last_seen_at = now(), stopped_at = null,
         heartbeat_interval_ms = excluded.heartbeat_interval_ms;
end;
$$;

-- How long a worker may be silent before it is taken for dead, whatever shorter bound a
-- caller asks for: three of its heartbeat intervals (30 s when it did not say).
create or replace function queues.worker_silence_bound(_heartbeat_interval_ms integer)
  returns interval
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select make_interval(secs => 3 * coalesce(_heartbeat_interval_ms, 30000) / 1000.0) $$;

-- Called by a worker that stops cleanly.
create or replace function queues.record_worker_stopped(_worker_id text)
  returns void
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  update queues.worker set stopped_at = now(), last_seen_at = now() where worker_id = _worker_id
$$;

-- Live leases held by workers not seen for _dead_after_seconds (and not stopped), at _now.
-- A bound shorter than the worker's own (queues.worker_silence_bound: three heartbeat
-- intervals) is raised to it: a worker between two heartbeats is never stale.
create or replace function queues.stale_leases_at(_now timestamptz, _dead_after_seconds integer)
  returns table (task_id bigint, task_lease_id bigint, worker_id text, last_seen_at timestamptz, expires_at timestamptz)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.task_id, p.current_lease_id, w.worker_id, w.last_seen_at, p.available_at
    from queues.task_pending p
    cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    left join queues.worker_name n on n.worker_key = l.worker_key
    join queues.worker w on w.worker_id = coalesce(l.worker_id, n.worker_id)
   where p.available_at > _now
     and w.stopped_at is null
     and w.last_seen_at < _now - greatest(make_interval(secs => _dead_after_seconds),
                                          queues.worker_silence_bound(w.heartbeat_interval_ms))
  union all
  -- The tasks held by a live claim lease without a row (the ready set:
  -- docs/design/hot-path.md).
  select h.task_id, h.task_lease_id, w.worker_id, w.last_seen_at, h.expires_at
    from queues.lease_held_tasks h
    join queues.worker_name n on n.worker_key = h.worker_key
    join queues.worker w on w.worker_id = n.worker_id
   where h.expires_at > _now
     and w.stopped_at is null
     and w.last_seen_at < _now - greatest(make_interval(secs => _dead_after_seconds),
                                          queues.worker_silence_bound(w.heartbeat_interval_ms))
$$;

-- The stale leases now, for workers presumed dead after 10 minutes of silence.
create or replace view queues.stale_lease as
select * from queues.stale_leases_at(now(), 600);
comment on view queues.stale_lease is 'Live leases held by workers not seen for 10 minutes.';

-- Revokes the stale leases (see stale_leases_at): their tasks are claimable at once. A
-- revocation counts towards abandoning its task when the lease named the task its suspect
-- or the task was marked started under it (queues.task_lease_started: a heartbeat marked
-- the run, see queues.mark_started), and the revoked worker can no longer complete or
-- record against it. Returns what was revoked.
create or replace function queues.recover_stale_leases_at(_now timestamptz, _dead_after_seconds integer)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _dead_after_seconds is null or _dead_after_seconds not between 1 and 604800 then
    raise exception 'dead_after_seconds must be between 1 and 604800, got %', coalesce(_dead_after_seconds::text, 'null')
      using errcode = '22023';
  end if;
  perform queues.lock_resource_keys(array(select s.task_id from queues.stale_leases_at(_now, _dead_after_seconds) s));
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(array(select s.task_id from queues.stale_leases_at(_now, _dead_after_seconds) s));
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id from queues.stale_leases_at(_now, _dead_after_seconds) s
  ),
  -- Locked in task id order, as every call that locks several claim-index rows.
  locked as (
    select p.task_id from queues.task_pending p
     where p.task_id = any (array(select s.task_id from stale s))
     order by p.task_id
       for no key update
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null,
           -- Its task is a suspect from now on (see queues.claim_tasks_at); the lease counts
           -- towards abandonment only if it named the task its suspect or it ran.
           uncounted_count = p.uncounted_count
                             + (not (p.suspect_lease
                                     or exists (select 1 from queues.task_lease_started m
                                                 where m.task_id = p.task_id and m.task_lease_id = s.task_lease_id)))::integer
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
       and p.task_id = any (array(select l.task_id from locked l))
    returning p.task_id, s.task_lease_id, s.worker_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, _now, format('worker %s not seen for %s s', r.worker_id, _dead_after_seconds) from revoked r
  ),
  key_freed as (
    delete from queues.resource_lease k
     using revoked r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select r.task_id, r.task_lease_id, r.worker_id from revoked r;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$$;

create or replace function queues.recover_stale_leases(_dead_after_seconds integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.recover_stale_leases_at(now(), coalesce(_dead_after_seconds, 600))
$$;

-- Revokes every lease a worker still holds, at once: called by the worker's process
-- supervisor when one of its processes died (its worker id is known and it can no longer
-- complete anything). Every task it held becomes a suspect (any of them may have killed
-- the process). _started (with _started_us, when each started, in microseconds since the
-- epoch): the tasks the process told its supervisor it was starting before it started
-- them, the only ones that can have killed it; null when the supervisor does not know.
-- Each of those it still held is marked started under its lease (queues.task_lease_started,
-- a fact like a heartbeat's mark). The revocation counts towards abandonment for a task
-- the lease named its suspect or that was marked started under it (see
-- queues.claim_tasks_at): a poison task is blamed at its first death when its supervisor
-- knew it ran, and becomes a repeat suspect at once (a pool's quarantine runs it next,
-- see packages/worker/src/process-pool.ts). The tasks are claimable at once instead of
-- when their leases expire; the named suspect stays unclaimable until its lease would
-- have expired, as without a supervisor, so a poison task's crash loop is paced by its
-- lease and the supervisor's spares keep up with the deaths instead of all dying in a
-- second.
-- Returns what was revoked; wakes listening workers.
create or replace function queues.revoke_worker_leases(
  _worker_id  text,
  _started    bigint[] default null,
  _started_us bigint[] default null
)
  returns table (task_id bigint, task_lease_id bigint)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _worker_key integer;
begin
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if cardinality(_started) is distinct from cardinality(_started_us) then
    raise exception 'started and started_us must both be null or have one element each per task (% and %)',
      coalesce(cardinality(_started)::text, 'null'), coalesce(cardinality(_started_us)::text, 'null')
      using errcode = '22023';
  end if;
  -- A lease names its worker by key (queues.worker_name), or by id if written before.
  select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
  perform queues.lock_resource_keys(array(
    select p.task_id from queues.task_pending p
     cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)));
  -- Its lease-held tasks (no row: the ready set) get their row back first.
  perform queues.hold_rows_of(array(select h.task_id from queues.lease_held_tasks h where h.worker_key = _worker_key));
  return query
  with held as (
    -- Locked in task id order, as every call that locks several claim-index rows.
    select p.task_id, p.current_lease_id as task_lease_id, p.suspect_lease as suspect,
           s.started_us,
           exists (select 1 from queues.task_lease_started m
                    where m.task_id = p.task_id and m.task_lease_id = p.current_lease_id) as marked
      from queues.task_pending p
      left join (select distinct on (u.task_id) u.task_id, u.started_us
                   from unnest(_started, _started_us) as u(task_id, started_us)
                  where u.started_us is not null
                  order by u.task_id, u.started_us) s on s.task_id = p.task_id
     cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)
     order by p.task_id
       for no key update of p
  ),
  revoked as (
    -- available_at of a leased row is its lease's expiry (heartbeats included).
    update queues.task_pending p
       set available_at = case when h.suspect then p.available_at else now() end,
           current_lease_id = null,
           uncounted_count = p.uncounted_count + (not (h.suspect or h.marked or h.started_us is not null))::integer
      from held h
     where p.task_id = h.task_id and p.current_lease_id = h.task_lease_id
    returning p.task_id, h.task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, now(), format('worker %s died', _worker_id) from revoked r
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id, started_at)
    select h.task_id, h.task_lease_id, to_timestamp(h.started_us / 1000000.0)
      from held h
     where h.started_us is not null and not h.marked
       and h.task_id in (select r.task_id from revoked r)
  ),
  key_freed as (
    delete from queues.resource_lease k
     using revoked r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select r.task_id, r.task_lease_id from revoked r;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$$;
