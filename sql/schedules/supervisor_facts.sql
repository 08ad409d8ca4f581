-- What the schedule supervisor (sql/schedules/supervisor.sql) reads: the definition in
-- force, the fire times handled and due, when to wake, and its own pending task. Owner
-- only (no grants).

-- The definition in force for a schedule (its newest version).
create or replace function schedules.current_version(_schedule_id bigint)
  returns schedules.schedule_version
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select v.* from schedules.schedule_version v
   where v.schedule_id = _schedule_id
   order by v.schedule_version_id desc
   limit 1
$$;

-- The latest fire time handled (enqueued or skipped), or null. A backward scan of the
-- unique (schedule_id, fire_at) index, limit 1: cost does not grow with history.
create or replace function schedules.last_fire_at(_schedule_id bigint)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select r.fire_at from schedules.schedule_run r
   where r.schedule_id = _schedule_id
   order by r.fire_at desc
   limit 1
$$;

-- The next fire time not yet handled (it may be in the past: then it is due), or null for
-- a disabled schedule.
create or replace function schedules.next_due_fire_at(_schedule_id bigint)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select case when v.enabled
              then schedules.next_fire_time(v.cron, greatest(v.fires_after, schedules.last_fire_at(_schedule_id)),
                                            v.time_zone)
         end
    from schedules.current_version(_schedule_id) v
$$;

-- When the supervisor should next run: the earliest next due fire time (now if one is
-- overdue), at most max_supervisor_sleep() from now; null when no schedule is enabled.
create or replace function schedules.supervisor_wake_at(_now timestamptz)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select least(greatest(min(n.fire_at), _now), _now + schedules.max_supervisor_sleep())
    from schedules.schedule s
   cross join lateral (select schedules.next_due_fire_at(s.schedule_id) as fire_at) n
  having count(n.fire_at) > 0
$$;

-- The pending supervisor task that will run next, among those no worker holds a live
-- lease on (the running supervisor itself is leased, so it never counts): task_id and
-- when it becomes claimable. Only the newest 100 supervisor tasks are probed, by primary
-- key (`= any(array(...))`), so the cost does not grow with history; every older
-- supervisor task is completed in practice, and one that is not only costs a spare run.
create or replace function schedules.pending_supervisor_task(
  _now timestamptz, out task_id bigint, out available_at timestamptz
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select p.task_id, p.available_at
    from (select p.task_id, p.available_at, p.current_lease_id
            from queues.task_pending p
           where p.task_id = any (array(select s.task_id from schedules.supervisor_task s
                                         order by s.task_id desc limit 100))
          union all
          -- A lease-held supervisor task (no claim-index row, sql/queues/lease_held.sql)
          -- whose claim lease expired: claimable once the claims rescue it. Only the
          -- claim leases expired since the rescue cursor are read (usually none).
          select h.task_id, h.expires_at, h.task_lease_id
            from queues.lease_held_tasks h
           where h.expires_at <= _now
             and h.task_id = any (array(select s.task_id from schedules.supervisor_task s
                                         order by s.task_id desc limit 100))) p
   where (p.current_lease_id is null or p.available_at <= _now)
   order by p.available_at, p.task_id
   limit 1
$$;
