-- History and retention, for operators (the dashboard's History page, GET /api/history,
-- the queue_history_* gauges of /metrics): the settings and the maintenance schedule,
-- every partition set of the queue's history with its state and sizes, the oldest
-- retained task, the next set retention will drop (queues.history_status_at,
-- sql/queues/partitions.sql) and the recent drops.
--
-- Cost: catalog reads, and per partition set a range count of its pending tasks in
-- queues.task_pending (the claim index: its cost follows pending work, never history) and
-- a row of queues.history_set_measured for a set that is done (every task completed, its
-- range below the last task id: maintenance measured it), or else its sizes (each of its
-- partitions opened) and three primary-key reads (its oldest and newest task) planned for
-- its partition alone. Only the sets still filling (normally the current one and those
-- ahead) are opened on each read. No scan of history.

-- The status at _now: queues.history_status_at(_now) with these keys added or extended:
--   now                  _now
--   lock_timeout_ms      how long a maintenance step keeps asking for its locks
--   partitions[]         each set, lowest first, the default partition last:
--     lower_bound, upper_bound, name, is_default, estimated_tasks (planner), total_bytes,
--     table_bytes, index_bytes  tables with TOAST / indexes, summed over every history table
--     tasks                     task ids handed out in the set, from its oldest to its
--                               newest task (ids only grow and no task is ever deleted
--                               alone, so this is the number of tasks unless an enqueue
--                               rolled back); the default partition: its exact count
--     first_task_id, first_enqueued_at, last_task_id   the set's oldest and newest task
--     pending_tasks             tasks in it not completed (queues.task_pending)
--     measured_at               when maintenance measured the set's bytes and tasks
--                               (queues.history_set_measured: a set below the last task
--                               id with no pending task); null: measured for this answer
--     created_at                when maintenance created it (queues.history_partition_created);
--                               null for sets made before creations were recorded
--     state                     ahead (above the last task id), current (holds the last
--                               task id), next_drop (the set next_drop names), retained
--                               (below the last task id, kept), default
--   totals               sets (not counting the default partition), tasks, table_bytes,
--                        index_bytes, total_bytes
--   recent_drops[]       the 10 newest rows of queues.history_partition_dropped
--   maintenance          the queue_history_maintenance schedule (cron, enabled, next and
--                        last fire) and its last run (task, state, and the run's report
--                        {created, dropped, skipped, kept} once it completed); null
--                        without the schedule
-- Owner only (it takes the clock); the API calls admin.history_status().
create or replace function admin.history_status_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _status jsonb;
  _last_id bigint;
  _next_lower bigint;
  _default record;
  _sets jsonb;
  _set record;
  _first record;
  _probes jsonb := '{}';
  _parts jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  _status := queues.history_summary_at(_now);
  _last_id := (_status ->> 'last_task_id')::bigint;
  _next_lower := (_status -> 'next_drop' ->> 'lower_bound')::bigint;

  -- The default partition, read by itself (normally empty).
  select (select t.task_id from queues.task_default t order by t.task_id limit 1) as first_task_id,
         (select t.enqueued_at from queues.task_default t order by t.task_id limit 1) as first_enqueued_at,
         (select max(t.task_id) from queues.task_default t) as last_task_id,
         (select count(*) from queues.task_default t) as tasks,
         (select count(*) from queues.task_default t
           where not exists (select 1 from queues.task_end_of(t.task_id) c)) as pending_tasks
    into _default;

  -- Every set once, with its pending count (a range count of queues.task_pending, and its
  -- lease-held tasks) and its
  -- row of queues.history_set_measured if it is done (its range below the last task id,
  -- no pending task) and maintenance measured it.
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'partition_name', p.partition_name,
           'estimated_tasks', p.estimated_tasks, 'is_default', p.is_default, 'created_at', c.created_at,
           'pending', pe.pending, 'measured', m.lower_bound is not null, 'first_task_id', m.first_task_id,
           'first_enqueued_at', m.first_enqueued_at, 'last_task_id', m.last_task_id,
           'table_bytes', m.table_bytes, 'index_bytes', m.index_bytes, 'measured_at', m.measured_at)), '[]')
    into _sets
    from queues.history_sets() p
    left join queues.history_partition_created c on c.lower_bound = p.lower_bound and not p.is_default
   cross join lateral (select (select count(*) from queues.task_pending tp
                                where not p.is_default and tp.task_id >= p.lower_bound and tp.task_id < p.upper_bound)
                              -- and the lease-held tasks (no claim-index row, sql/queues/lease_held.sql)
                              + (select count(*) from queues.lease_held_tasks h
                                  where not p.is_default and h.task_id >= p.lower_bound and h.task_id < p.upper_bound)
                              -- and the tasks in ready batches (sql/queues/ready_batch.sql)
                              + case when p.is_default then 0
                                     else queues.batched_count_between(p.lower_bound, p.upper_bound) end
                                as pending) pe
    left join queues.history_set_measured m
      on m.lower_bound = p.lower_bound and m.upper_bound = p.upper_bound
     and not p.is_default and p.upper_bound <= _last_id and pe.pending = 0;

  -- The oldest and newest task of each set that is not measured and may hold one (not
  -- above the last task id), by primary key, each read given its set's bounds as values
  -- so that it is planned for that set's partition only.
  for _set in
    select x.lower_bound, x.upper_bound
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, is_default boolean, measured boolean)
     where not x.is_default and not x.measured and x.lower_bound <= _last_id
  loop
    execute 'select (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_task_id,
                    (select t.enqueued_at from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_enqueued_at,
                    (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id desc limit 1) as last_task_id'
      into _first using _set.lower_bound, _set.upper_bound;
    _probes := _probes || jsonb_build_object(_set.lower_bound::text, to_jsonb(_first));
  end loop;

  -- The answer: sizes from the measurement, or from one queues.history_set_bytes call for
  -- every set that is not measured.
  with s as (
    select x.*, coalesce(x.first_task_id, (_probes -> x.lower_bound::text ->> 'first_task_id')::bigint) as first_id,
           coalesce(x.first_enqueued_at, (_probes -> x.lower_bound::text ->> 'first_enqueued_at')::timestamptz) as first_at,
           coalesce(x.last_task_id, (_probes -> x.lower_bound::text ->> 'last_task_id')::bigint) as last_id
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, partition_name text,
                                       estimated_tasks bigint, is_default boolean, created_at timestamptz,
                                       pending bigint, measured boolean, first_task_id bigint,
                                       first_enqueued_at timestamptz, last_task_id bigint, table_bytes bigint,
                                       index_bytes bigint, measured_at timestamptz)
  ),
  sized as (
    select * from queues.history_set_bytes(array(select s.lower_bound from s where not s.measured))
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', s.lower_bound, 'upper_bound', s.upper_bound, 'name', s.partition_name,
           'is_default', s.is_default, 'estimated_tasks', s.estimated_tasks,
           'total_bytes', coalesce(s.table_bytes, b.table_bytes) + coalesce(s.index_bytes, b.index_bytes),
           'table_bytes', coalesce(s.table_bytes, b.table_bytes),
           'index_bytes', coalesce(s.index_bytes, b.index_bytes),
           'tasks', case when s.is_default then _default.tasks else coalesce(s.last_id - s.first_id + 1, 0) end,
           'first_task_id', case when s.is_default then _default.first_task_id else s.first_id end,
           'first_enqueued_at', case when s.is_default then _default.first_enqueued_at else s.first_at end,
           'last_task_id', case when s.is_default then _default.last_task_id else s.last_id end,
           'pending_tasks', case when s.is_default then _default.pending_tasks else s.pending end,
           'measured_at', s.measured_at,
           'created_at', s.created_at,
           'state', case when s.is_default then 'default'
                         when s.lower_bound > _last_id then 'ahead'
                         when s.upper_bound > _last_id then 'current'
                         when s.lower_bound = _next_lower then 'next_drop'
                         else 'retained' end)
           order by s.is_default, s.lower_bound), '[]')
    into _parts
    from s
    left join sized b on not s.measured and b.lower_bound is not distinct from s.lower_bound;

  return _status || jsonb_build_object(
    'now', _now,
    'lock_timeout_ms', (select s.lock_timeout_ms from queues.history_setting s),
    'partitions', _parts,
    'totals', (select jsonb_build_object(
                 'sets', count(*) filter (where not (x ->> 'is_default')::boolean),
                 'tasks', coalesce(sum((x ->> 'tasks')::bigint), 0),
                 'table_bytes', coalesce(sum((x ->> 'table_bytes')::bigint), 0),
                 'index_bytes', coalesce(sum((x ->> 'index_bytes')::bigint), 0),
                 'total_bytes', coalesce(sum((x ->> 'total_bytes')::bigint), 0))
                 from jsonb_array_elements(_parts) x),
    'recent_drops', coalesce((
      select jsonb_agg(jsonb_build_object(
               'lower_bound', d.lower_bound, 'upper_bound', d.upper_bound, 'tasks', d.tasks,
               'last_completed_at', d.last_completed_at, 'dropped_at', d.dropped_at)
             order by d.history_partition_dropped_id desc)
        from (select * from queues.history_partition_dropped x
               order by x.history_partition_dropped_id desc limit 10) d), '[]'),
    'maintenance', (
      select jsonb_build_object(
               'schedule', s.name, 'cron', s.cron, 'enabled', s.enabled,
               'next_fire_at', s.next_fire_at, 'last_fire_at', s.last_fire_at,
               'last_run', (
                 select jsonb_build_object(
                          'fire_at', r.fire_at, 'outcome', r.outcome, 'task_id', r.task_id,
                          'task_state', coalesce(
                            (select c.outcome from queues.task_end_of(r.task_id) c limit 1),
                            (select admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)
                               from queues.task_pending_or_held_of(r.task_id) p limit 1)),
                          'report', (select x.result -> 'payload' from queues.task_result x
                                      where x.task_id = r.task_id order by x.task_lease_id desc limit 1))
                   from schedules.schedule_run r
                  where r.schedule_id = s.schedule_id
                  order by r.fire_at desc limit 1))
        from schedules.list_schedules() s
       where s.name = 'queue_history_maintenance'));
end;
$$;

create or replace function admin.history_status()
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.history_status_at(now())
$$;

-- Granted here, beside the function (see sql/queues/partitions_maintain.sql for why); the clock
-- variant stays owner only.
revoke execute on function admin.history_status_at(timestamptz) from public;
grant execute on function admin.history_status() to :DATABASE_API;
