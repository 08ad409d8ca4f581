-- Workers for the dashboard: the registry (queues.worker) with heartbeat age and tasks in
-- flight, and stale recovery for one worker.

-- Every registered worker, live ones first: status live (seen within _dead_after_seconds,
-- default 600), stale (not seen since, not stopped: its leases can be recovered) or
-- stopped; its task types; the seconds since its last heartbeat; the live leases it holds.
create or replace function admin.list_workers_at(_now timestamptz, _dead_after_seconds integer)
  returns table (
    worker_id text, task_types text[], status text, started_at timestamptz, last_seen_at timestamptz,
    stopped_at timestamptz, heartbeat_age_seconds double precision, tasks_in_flight bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  with in_flight as (
    -- live leases (bounded by pending work): the pending rows under a lease that has not
    -- expired, and the lease-held tasks of claim leases that have not (no claim-index row:
    -- their claim lease names the worker, sql/queues/lease_held.sql)
    select coalesce(l.worker_id, n.worker_id) as worker_id, count(*) as n
      from (select y.worker_key, y.worker_id
              from queues.task_pending p
             cross join lateral (select y.worker_key, y.worker_id
                                   from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) y
             where p.available_at > _now
            union all
            select h.worker_key, null::text from queues.lease_held_tasks h where h.expires_at > _now) l
      -- a lease names its worker by key (queues.worker_name), or by id if written before
      left join queues.worker_name n on n.worker_key = l.worker_key
     group by 1
  )
  select w.worker_id, w.task_types,
         case when w.stopped_at is not null then 'stopped'
              when w.last_seen_at < _now - make_interval(secs => coalesce(_dead_after_seconds, 600)) then 'stale'
              else 'live' end,
         w.started_at, w.last_seen_at, w.stopped_at,
         extract(epoch from _now - w.last_seen_at)::double precision,
         coalesce(f.n, 0)
    from queues.worker w
    left join in_flight f on f.worker_id = w.worker_id
   order by (w.stopped_at is not null), w.last_seen_at desc, w.worker_id
   limit 1000
$$;

create or replace function admin.list_workers()
  returns table (
    worker_id text, task_types text[], status text, started_at timestamptz, last_seen_at timestamptz,
    stopped_at timestamptz, heartbeat_age_seconds double precision, tasks_in_flight bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_workers_at(now(), 600)
$$;

-- Revokes the live leases of one worker that has not been seen for _dead_after_seconds
-- (10 to 86400, default 600), like queues.recover_stale_leases does for all of them.
-- 23503 for an unknown worker; 55000 when the worker is live or stopped (nothing to
-- recover from a worker that is still heartbeating). Returns what was revoked.
create or replace function admin.recover_worker_leases_at(_now timestamptz, _worker_id text, _dead_after_seconds integer)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _dead integer := coalesce(_dead_after_seconds, 600);
  _w queues.worker;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _worker_id is null then
    raise exception 'worker_id must not be null' using errcode = '22004';
  end if;
  if _dead not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead using errcode = '22023';
  end if;
  select * into _w from queues.worker w where w.worker_id = _worker_id;
  if not found then
    raise exception 'worker % is not registered', quote_literal(left(_worker_id, 200)) using errcode = '23503';
  end if;
  if _w.stopped_at is not null then
    raise exception 'worker % stopped at %; it holds no leases to recover', _worker_id, _w.stopped_at using errcode = '55000';
  end if;
  if _w.last_seen_at >= _now - make_interval(secs => _dead) then
    raise exception 'worker % was seen % s ago, within % s: it is not stale', _worker_id,
      round(extract(epoch from _now - _w.last_seen_at)), _dead using errcode = '55000';
  end if;
  perform queues.lock_resource_keys(array(
    select s.task_id from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id));
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of,
  -- as queues.recover_stale_leases_at does).
  perform queues.hold_rows_of(array(
    select s.task_id from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id));
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id
      from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id
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
       set available_at = _now, current_lease_id = null
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
       and p.task_id = any (array(select l.task_id from locked l))
    returning p.task_id, s.task_lease_id, s.worker_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, _now, format('worker %s not seen for %s s (recovered from the dashboard)', r.worker_id, _dead)
      from revoked r
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

create or replace function admin.recover_worker_leases(_worker_id text, _dead_after_seconds integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.recover_worker_leases_at(now(), _worker_id, _dead_after_seconds)
$$;
