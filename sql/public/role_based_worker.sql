-- The role-based worker system's SQL names (the specification's
-- role-based-worker-system.md), in schema public so that they resolve unqualified on the
-- default search_path ("$user", public) of every database user, as the specification
-- writes them. Each is a thin face over the queue's own objects; nothing here keeps
-- state. Who may use what: sql/public/privileges.sql.
--
--   v_worker_capacity                          view: capacity per role (admin.capacity)
--   worker_tasks                               view: every task in the specification's
--                                              columns and statuses (read only)
--   recover_stale_tasks(threshold_minutes)     revokes the leases of workers silent for
--                                              that long (admin.recover_stale_leases)
--   generate_resync_tasks(batches, date)       menus.generate_resync_tasks

-- Capacity per role, in the specification's columns, then the queue's own figures. The
-- view calls admin.capacity(), so its reader needs EXECUTE on that function (the api
-- database user has it). See sql/admin/capacity.sql for how each figure is measured:
-- tasks_per_worker_hour is completions per busy worker-hour (capacity, not the arrival
-- rate) and estimated_hours_to_drain counts the tasks ready now.
create or replace view public.v_worker_capacity as
select c.task_type                as role,
       c.pending                  as pending_tasks,
       c.ready                    as ready_tasks,
       c.running                  as running_tasks,
       c.active_workers,
       c.tasks_per_worker_hour,
       c.estimated_hours_to_drain,
       c.workers_needed_1h,
       c.workers_needed_4h,
       c.workers_needed_8h,
       c.completed_in_window,
       c.window_workers,
       c.window_seconds
  from admin.capacity() c;
comment on view public.v_worker_capacity is
  'The role-based specification''s capacity view: admin.capacity() per role (task type), in its column names.';

-- Every task as a row of the specification's worker_tasks table, derived from the facts
-- (nothing is stored; it cannot be written). Columns:
--   id                 queues.task.task_id
--   role               task_type
--   dispensary_id      payload.store_id when it is a whole number (menus.store), else null
--   platform           payload.platform, else null
--   status             pending    not completed and not held: scheduled, ready, or waiting
--                                 for a retry
--                      claimed    held by a live lease whose run has not been seen to
--                                 start (a run reports its start with its worker's next
--                                 heartbeat, or with its completion)
--                      running    held by a live lease whose run was seen to start
--                      (held: by its claim-index row's lease, or, with no row and no end,
--                      by its newest lease, a claim lease: the ready set, sql/queues/lease_held.sql)
--                      stale      held by a lease that expired uncompleted, or whose
--                                 worker is silent for longer than three of its heartbeat
--                                 intervals (its worker died: recover_stale_tasks)
--                      completed  completed 'succeeded'
--                      failed     completed 'failed', 'abandoned' or 'validation_failed'
--                      cancelled  completed 'cancelled'
--   priority, scheduled_for (scheduled_at), created_at (enqueued_at)
--   worker_id          the newest lease's worker
--   claimed_at         the newest lease's leased_at
--   started_at         the newest lease's run start: its completion's, else its start
--                      mark (queues.task_lease_started, written by a heartbeat)
--   completed_at       its end's (queues.task_completed, or the completion_round naming it)
--   last_heartbeat_at  the newest lease's last sign of life: its worker's last heartbeat
--                      while it holds the task, else the lease's newest extension, start
--                      or claim
--   result             the newest result recorded (queues.task_result)
--   error_message      the newest error (queues.error)
--   retry_count        failed attempts that were retried (queues.task_attempt_failed)
--   max_retries        max_attempts - 1
--   updated_at         the newest of the times above
--   outcome            the completion's own outcome (null while pending), beside status
-- Reading it reads every task (a row costs a few primary-key probes): it is for ad-hoc
-- checks such as the specification's health-check queries. The REST API and the admin
-- functions answer the same questions from bounded reads.
create or replace view public.worker_tasks as
select t.task_id                                      as id,
       t.task_type                                    as role,
       case when t.payload ->> 'store_id' ~ '^[0-9]{1,18}$' then (t.payload ->> 'store_id')::bigint end
                                                      as dispensary_id,
       case when jsonb_typeof(t.payload -> 'platform') = 'string' then left(t.payload ->> 'platform', 100) end
                                                      as platform,
       case
         when c.outcome = 'succeeded' then 'completed'
         when c.outcome in ('failed', 'abandoned', 'validation_failed') then 'failed'
         when c.outcome is not null then c.outcome
         when coalesce(p.current_lease_id, h.task_lease_id) is null then 'pending'
         when coalesce(p.available_at, h.expires_at) <= now() then 'stale'
         when w.last_seen_at < now() - make_interval(secs => 3 * coalesce(w.heartbeat_interval_ms, 30000) / 1000.0)
              and w.stopped_at is null then 'stale'
         when st.started_at is null then 'claimed'
         else 'running'
       end                                            as status,
       t.priority,
       t.scheduled_at                                 as scheduled_for,
       l.worker_id,
       l.leased_at                                    as claimed_at,
       st.started_at,
       c.completed_at,
       case when c.task_id is null and coalesce(p.current_lease_id, h.task_lease_id) = l.task_lease_id
                 and w.last_seen_at is not null
            then w.last_seen_at
            else greatest(l.leased_at, st.started_at,
                          (select max(x.extended_at) from queues.task_lease_extension x
                            where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id))
       end                                            as last_heartbeat_at,
       (select r.result from queues.task_result r where r.task_id = t.task_id
         order by r.task_lease_id desc limit 1)      as result,
       (select e.error_message from queues.error e where e.task_id = t.task_id
         order by e.error_id desc limit 1)           as error_message,
       coalesce(p.failed_attempts,
                (select count(*)::integer from queues.task_attempt_failed f where f.task_id = t.task_id))
                                                      as retry_count,
       t.max_attempts - 1                             as max_retries,
       t.enqueued_at                                  as created_at,
       greatest(t.enqueued_at, l.leased_at, st.started_at, c.completed_at)
                                                      as updated_at,
       c.outcome
  from queues.task t
  left join queues.task_pending p on p.task_id = t.task_id
  -- The task's end in either shape, probed as queues.task_end_of does (written out: the
  -- API reads this view, and may call no queue function).
  left join lateral (
    select x.task_id, x.task_lease_id, x.completed_at, x.outcome, x.started_at
      from queues.task_completed x
     where x.task_id = t.task_id
    union all
    select t.task_id, r.task_lease_ids[array_position(r.task_ids, t.task_id)], r.completed_at, 'succeeded',
           timestamptz 'epoch' + r.started_us[array_position(r.task_ids, t.task_id)] * interval '1 microsecond'
      from queues.completion_round r
     where r.task_range @> t.task_id and r.task_id >= t.task_id and t.task_id = any (r.task_ids)
    limit 1
  ) c on true
  -- The newest lease, with its worker's id (a lease names its worker by key in
  -- queues.worker_name, or, written before that, by id), in both shapes: a per-task
  -- task_lease row, or a claim_lease naming the task (queues.task_leases_of's probe,
  -- written out: this view's readers cannot call that function).
  left join lateral (
    select y.task_id, y.task_lease_id, y.leased_at, y.expires_at, y.claim,
           coalesce(y.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = y.worker_key))
             as worker_id
      from (select x.task_id, x.task_lease_id, x.leased_at, x.expires_at, x.worker_id, x.worker_key, false as claim
              from queues.task_lease x
             where x.task_id = t.task_id
            union all
            select t.task_id, x.task_lease_id, x.leased_at, x.expires_at, null::text, x.worker_key, true
              from queues.claim_lease x
             where x.task_range @> t.task_id and x.task_id >= t.task_id and t.task_id = any (x.task_ids)) y
     order by y.task_lease_id desc
     limit 1
  ) l on true
  -- A task with neither a claim-index row nor an end is held by its newest lease, a claim
  -- lease (the ready set: queues.lease_held_of, written out).
  left join lateral (
    select l.task_lease_id, l.expires_at
     where p.task_id is null and c.task_id is null and l.claim
  ) h on true
  left join lateral (
    select coalesce(case when c.task_lease_id = l.task_lease_id then c.started_at end,
                    (select m.started_at from queues.task_lease_started m
                      where m.task_id = l.task_id and m.task_lease_id = l.task_lease_id)) as started_at
  ) st on true
  left join queues.worker w on w.worker_id = l.worker_id;
comment on view public.worker_tasks is
  'The role-based specification''s worker_tasks table as a read-only view over the queue''s facts, with its statuses.';

-- The specification's stale recovery: the live leases of workers not seen for
-- threshold_minutes (null: 10, as in the specification; 1 to 1440) are revoked, and their
-- tasks are claimable at once (pending again). A task whose revoked leases reach
-- MAX_LEASES is abandoned at its next claim, where the specification stops at
-- max_retries. A worker is never taken for dead sooner than three of its own heartbeat
-- intervals. Returns the leases revoked. The argument keeps the specification's name
-- (threshold_minutes), so `recover_stale_tasks(threshold_minutes => 5)` works too.
create or replace function public.recover_stale_tasks(threshold_minutes integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _minutes integer := coalesce(threshold_minutes, 10);
begin
  if _minutes not between 1 and 1440 then
    raise exception 'threshold_minutes must be between 1 and 1440, got %', _minutes using errcode = '22023';
  end if;
  return query select r.task_id, r.task_lease_id, r.worker_id from admin.recover_stale_leases(_minutes * 60) r;
end;
$$;

-- The specification's daily resync generation, unqualified: menus.generate_resync_tasks
-- (sql/menus/generate.sql), run as the caller (who needs EXECUTE on it too).
create or replace function public.generate_resync_tasks(_batches integer, _date date)
  returns table (batch integer, scheduled_at timestamptz, task_count integer)
  language sql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
  select * from menus.generate_resync_tasks(_batches, _date)
$$;
