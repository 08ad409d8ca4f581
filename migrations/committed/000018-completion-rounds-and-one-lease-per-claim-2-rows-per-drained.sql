--! Previous: sha1:a3b44b56dedd2c85eb27f54bc93dd32f11d151e7
--! Hash: sha1:e06de196bbf8bb8264d8408c16db8684287cb35d
--! Message: Completion rounds and one lease per claim (2 rows per drained task); flow limits, group keys, provider throttles, task dependencies; flow facts bounded by retention

--! split: 100-completion-rounds.sql
-- Completion rounds (docs/design/hot-path.md, stage 2): the completer's plain successes
-- are written as one append-only fact per completion call and task type,
-- queues.completion_round, naming its tasks (task_ids, sorted), the lease each was
-- completed under and when each started (microseconds since the epoch), instead of one
-- queues.task_completed row per task. Every other end stays a task_completed row. A
-- task's end, in either shape, is read through queues.task_end (a view) and
-- queues.task_end_of(task_id) (an inlinable function: an index probe of each shape).
-- The table is a history table, range-partitioned by the largest task id a round names
-- (its task_id column), on the sets' bounds; retention keeps a set while a round in it
-- names a task of an older set still kept (sql/queues/partitions_maintain.sql).
-- Locks: the new table and its partitions only (SHARE or SHARE UPDATE EXCLUSIVE on
-- queues.completion_round, ACCESS EXCLUSIVE on its empty default while a set's partition
-- is attached); no other hot table.
set local lock_timeout = '5s';

create table if not exists queues.completion_round (
  -- The largest task id the round names (task_ids' last element): the partition key, as
  -- every history table's task_id, so that the round lives in the set of its newest task.
  task_id        bigint not null,
  completed_at   timestamptz not null default now(),
  task_type      text not null,
  -- The tasks that succeeded, ascending, each once.
  task_ids       bigint[] not null,
  -- Parallel to task_ids: the lease the completing caller held (null: it passed none).
  task_lease_ids bigint[] not null,
  -- Parallel to task_ids: when each run started, in microseconds since the epoch (null:
  -- not reported).
  started_us     bigint[] not null,
  -- [first task id, last task id]: what the GiST index finds a task's rounds by.
  task_range     int8range not null,
  constraint completion_round_shape check (
    cardinality(task_ids) between 1 and 1000
    and array_ndims(task_ids) = 1
    and task_id = task_ids[cardinality(task_ids)]
    and task_range = int8range(task_ids[1], task_id, '[]')
    and cardinality(task_lease_ids) = cardinality(task_ids)
    and cardinality(started_us) = cardinality(task_ids))
) partition by range (task_id);
comment on table queues.completion_round is
  'Append-only: a completion round, the plain successes one completion call recorded for one task type (task_ids with their leases and start times). Read a task''s end through queues.task_end / queues.task_end_of. See sql/queues/complete.sql.';
create index if not exists completion_round_task_range_idx on queues.completion_round using gist (task_range);
create index if not exists completion_round_completed_at_idx on queues.completion_round (completed_at);
drop trigger if exists forbid_update on queues.completion_round;
create trigger forbid_update before update on queues.completion_round
  for each statement execute function queues.forbid_fact_update();
create table if not exists queues.completion_round_default partition of queues.completion_round default;
drop trigger if exists forbid_update on queues.completion_round_default;
create trigger forbid_update before update on queues.completion_round_default
  for each statement execute function queues.forbid_fact_update();

-- (queues/partitions.sql, which makes completion_round a history table, and the
-- partitions of completion_round for the sets there are: migration 500.)

--! Included queues/task_end.sql
-- A task's end, in both of its shapes: a row of queues.task_completed (every end but a
-- plain success, and every completion written before completion rounds), or its place in
-- a queues.completion_round (a plain success: the round names the task among its
-- task_ids, with its lease and start time at the same position). Readers never read the
-- two tables for a task's end; they read one of these:
--   queues.task_end              a view: every end, one row per task (time windows read
--                                admin.completions_between, which reaches each table's
--                                completed_at index)
--   queues.task_end_of(task_id)  one task's end, an index probe of each shape: the
--                                primary key of task_completed, and the GiST index on
--                                completion_round.task_range in the partitions that can
--                                hold the task's round (task_id >= the task's: a round
--                                lives in the set of the largest task id it names)
-- started_at: when the run that ended here started, as its worker reported it (null when
-- not reported; a round keeps it as integer microseconds since the epoch, read back
-- exactly as timestamptz 'epoch' + started_us * interval '1 microsecond'). task_type: the type the completion names; null on completions written
-- before task_completed.task_type existed (read it from queues.task).

-- One task's end (none while it has not ended). Inlined into its callers (SQL, stable,
-- no SET clause, not a security definer), so that a caller's task id reaches both
-- probes; every object it names is schema-qualified. Called from definer functions with a
-- pinned search path: no grants.
create or replace function queues.task_end_of(_task_id bigint)
  returns table (task_id bigint, task_lease_id bigint, completed_at timestamptz, outcome text,
                 task_type text, started_at timestamptz)
  language sql stable
as $$
  select c.task_id, c.task_lease_id, c.completed_at, c.outcome, c.task_type, c.started_at
    from queues.task_completed c
   where c.task_id = _task_id
  union all
  select _task_id, r.task_lease_ids[x.i], r.completed_at, 'succeeded', r.task_type,
         timestamptz 'epoch' + r.started_us[x.i] * interval '1 microsecond'
    from queues.completion_round r
   cross join lateral (select array_position(r.task_ids, _task_id) as i) x
   where r.task_range @> _task_id
     and r.task_id >= _task_id
     and _task_id = any (r.task_ids)
$$;

-- Every task's end, one row per task that ended: task_completed's rows and each round's
-- tasks (unnested). For a task's end use queues.task_end_of (a probe); for a time window,
-- admin.completions_between.
create or replace view queues.task_end as
select c.task_id, c.task_lease_id, c.completed_at, c.outcome, c.task_type, c.started_at
  from queues.task_completed c
union all
select u.task_id, u.task_lease_id, r.completed_at, 'succeeded', r.task_type,
       timestamptz 'epoch' + u.started_us * interval '1 microsecond'
  from queues.completion_round r
 cross join lateral unnest(r.task_ids, r.task_lease_ids, r.started_us) as u(task_id, task_lease_id, started_us);
comment on view queues.task_end is
  'Every task''s end, one row per ended task: queues.task_completed and the tasks of each queues.completion_round (succeeded). A task''s own: queues.task_end_of(task_id).';

revoke execute on function queues.task_end_of(bigint) from public;
--! EndIncluded queues/task_end.sql
--! Included queues/partitions_status.sql
-- What operators read of the history partitions: the settings, the oldest task, the next
-- drop, the sets and their sizes; admin.history_status() serves it to the dashboard.
-- Owner only.

-- What operators watch, without the list of sets: the settings, the oldest retained task,
-- and the next drop (the lowest set below the last task id with its newest completion: it
-- can go at last_completed_at + retention, unless it holds pending tasks). Each read of
-- a partitioned table is pruned at plan time to the set it needs (EXECUTE with the set's
-- bounds as values), so the cost does not grow with the number of sets beyond the catalog
-- read of their bounds.
create or replace function queues.history_summary_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _set record;
  _next record;
  _next_json jsonb;
  _oldest_id bigint;
  _oldest_at timestamptz;
  _default_id bigint;
  _default_at timestamptz;
  _last_completed timestamptz;
  _pending bigint;
begin
  select * into _setting from queues.history_setting;
  -- The oldest task: in the lowest set that holds one (or in the default partition).
  for _set in
    select s.lower_bound, s.upper_bound from queues.history_sets() s
     where not s.is_default and s.lower_bound <= _last_id
     order by s.lower_bound
  loop
    execute 'select t.task_id, t.enqueued_at from queues.task t
              where t.task_id >= $1 and t.task_id < $2 order by t.task_id limit 1'
      into _oldest_id, _oldest_at using _set.lower_bound, _set.upper_bound;
    exit when _oldest_id is not null;
  end loop;
  select t.task_id, t.enqueued_at into _default_id, _default_at from queues.task_default t order by t.task_id limit 1;
  if _default_id < _oldest_id or _oldest_id is null then
    _oldest_id := _default_id;
    _oldest_at := _default_at;
  end if;

  select s.lower_bound, s.upper_bound into _next
    from queues.history_sets() s
   where not s.is_default and s.upper_bound <= _last_id
   order by s.lower_bound
   limit 1;
  if found then
    -- Its newest end, in either shape (as queues.maintain_history_step_at reads it).
    execute 'select greatest(
               (select max(c.completed_at) from queues.task_completed c where c.task_id >= $1 and c.task_id < $2),
               (select max(r.completed_at) from queues.completion_round r
                 where r.task_range && int8range($1, $2) and r.task_id >= $1))'
      into _last_completed using _next.lower_bound, _next.upper_bound;
    _pending := (select count(*) from queues.task_pending tp
                  where tp.task_id >= _next.lower_bound and tp.task_id < _next.upper_bound);
    _next_json := jsonb_build_object(
      'lower_bound', _next.lower_bound, 'upper_bound', _next.upper_bound,
      'pending_tasks', _pending,
      'last_completed_at', _last_completed,
      'drop_after', case when _pending = 0 then coalesce(_last_completed + _setting.retention, _now) end);
  end if;
  return jsonb_build_object(
    'retention_seconds', extract(epoch from _setting.retention)::bigint,
    'partition_size', _setting.partition_size,
    'partitions_ahead', _setting.partitions_ahead,
    'last_task_id', _last_id,
    'oldest_task_id', _oldest_id,
    'oldest_enqueued_at', _oldest_at,
    'default_partition_tasks', (select count(*) from queues.task_default),
    'next_drop', _next_json,
    'dropped_sets', (select count(*) from queues.history_partition_dropped),
    'skipped_steps_last_hour', (select count(*) from queues.history_step_skipped k where k.skipped_at > _now - interval '1 hour'),
    'last_skipped_step', (select jsonb_build_object('skipped_at', k.skipped_at, 'step', k.step, 'reason', k.reason)
                            from queues.history_step_skipped k order by k.skipped_at desc limit 1),
    'last_dropped_at', (select max(d.dropped_at) from queues.history_partition_dropped d));
end;
$$;

-- queues.history_summary_at(_now) and the sets with their sizes (queues.history_partitions()).
create or replace function queues.history_status_at(_now timestamptz)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.history_summary_at(_now) || jsonb_build_object(
    'partitions', coalesce((select jsonb_agg(jsonb_build_object(
        'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'name', p.partition_name,
        'estimated_tasks', p.estimated_tasks, 'total_bytes', p.total_bytes, 'is_default', p.is_default)
        order by p.is_default, p.lower_bound)
      from queues.history_partitions() p), '[]'))
$$;

revoke execute on function queues.history_status_at(timestamptz), queues.history_summary_at(timestamptz) from public;
--! EndIncluded queues/partitions_status.sql
--! Included queues/cancel.sql
-- Cancelling tasks, pending or running. A cancel is one transaction that ends the task:
-- queues.task_completed with outcome 'cancelled' (no lease: nobody's run completed it),
-- queues.task_cancelled with the reason, the claim-index row deleted and the resource key
-- freed; a task under a live lease also gets a queues.task_lease_revocation fact
-- ('cancelled: <reason>') for that lease.
--
-- The worker running a cancelled task learns it at its next heartbeat: the lease is
-- missing from queues.extend_leases' answer (the task is no longer pending), the worker
-- asks queues.cancelled_tasks why, aborts the processor's signal with the reason, and
-- records nothing (its completion would be refused: lease_lost). A completion and a
-- cancel of one task take turns on its claim-index row: whichever commits first wins, and
-- the other finds the task completed ('already_completed', or lease_lost).
--
-- A cancelled channel task is, to its process's supervisor, a task the queue gave up on
-- (internal.queue_gave_up_message: "... (cancelled): <reason>"), as an abandoned one.

-- Validates a list of task ids for a change made to each (cancel, run now, redrive):
-- 1 to 1000 ids, none null (22004), none repeated (22023).
create or replace function queues.assert_task_ids(_task_ids bigint[])
  returns void
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) not between 1 and 1000 then
    raise exception 'task_ids must name 1 to 1000 tasks, got %', cardinality(_task_ids) using errcode = '22023';
  end if;
  if array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain null' using errcode = '22004';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;
end;
$$;

-- Cancels the given tasks at _now. Rows in input order, one per task:
--   cancelled          it was pending (scheduled, ready, retrying, or leased: running)
--   already_completed  it had ended before (or a completion committed first)
--   unknown_task       no such task
-- `was_running` is true for a task cancelled under a live lease (its worker is told at its
-- next heartbeat). Owner only: owner SQL (a supervisor, a migration) calls it directly;
-- apps call queues.cancel_tasks, the REST API admin.cancel_tasks.
--
-- The answers for the tasks it did not lock are read by a statement of their own after the
-- locks (see admin.cancel_tasks_at): a completion this call waited for is seen.
create or replace function queues.cancel_tasks_at(_now timestamptz, _task_ids bigint[], _reason text)
  returns table (task_id bigint, result text, was_running boolean)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _cancelled bigint[];
  _running bigint[];
  _try integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform queues.assert_task_ids(_task_ids);
  if _reason is not null and length(_reason) > 500 then
    raise exception 'reason must be at most 500 characters, got %', length(_reason) using errcode = '22023';
  end if;
  -- Same lock order as the claim, the heartbeat and the completion (resource keys first),
  -- then the pending rows by primary key. A completion in flight holds its row: the cancel
  -- waits for it, then finds the task gone (already_completed). A completion batch locks
  -- its rows in its own order, so a cancel of several tasks can deadlock with one: the
  -- cancel's part is then rolled back (a subtransaction) and tried again, up to five times.
  perform queues.lock_resource_keys(_task_ids);
  for _try in 1..5 loop
  begin
  with locked as (
    select p.task_id, p.task_type, p.current_lease_id,
           (p.current_lease_id is not null and p.available_at > _now) as held
      from queues.task_pending p
     where p.task_id = any (_task_ids)
     order by p.task_id
       for update
  ),
  completed as (
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
    select l.task_id, null, _now, 'cancelled', l.task_type from locked l
    returning task_id
  ),
  reasons as (
    insert into queues.task_cancelled (task_id, reason, cancelled_at)
    select l.task_id, coalesce(_reason, ''), _now from locked l
  ),
  revoked as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select l.task_id, l.current_lease_id, _now, left('cancelled: ' || coalesce(nullif(_reason, ''), 'no reason given'), 520)
      from locked l where l.held
    on conflict do nothing
  ),
  removed as (
    delete from queues.task_pending p where p.task_id = any (array(select l.task_id from locked l))
  ),
  key_freed as (
    delete from queues.resource_lease k where k.task_id = any (array(select l.task_id from locked l))
  )
  select coalesce((select array_agg(c.task_id) from completed c), '{}'),
         coalesce(array_agg(l.task_id) filter (where l.held), '{}')
    into _cancelled, _running
    from locked l;
  exit;
  exception when deadlock_detected then
    if _try = 5 then
      raise;
    end if;
  end;
  end loop;

  return query
  select i.task_id,
         case when c.task_id is not null then 'cancelled'
              when coalesce((select true from queues.task_end_of(i.task_id) x limit 1), false) then 'already_completed'
              else 'unknown_task' end,
         r.task_id is not null
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join unnest(_cancelled) as c(task_id) on c.task_id = i.task_id
    left join unnest(_running) as r(task_id) on r.task_id = i.task_id
   order by i.n;
end;
$$;

-- Cancels tasks for an app (and owner SQL): queues.cancel_tasks_at at now(). Refuses, with
-- 42501 and nothing written, a worker-only task type (queues.internal_task_type: channel
-- tasks and steps belong to their processes) unless the session is the owner's, as
-- queues.enqueue does.
create or replace function queues.cancel_tasks(_task_ids bigint[], _reason text default null)
  returns table (task_id bigint, result text, was_running boolean)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _internal bigint;
begin
  if not queues.is_owner_session() then
    select t.task_id into _internal
      from queues.task t
     where t.task_id = any (_task_ids) and queues.is_internal_task_type(t.task_type)
     order by t.task_id limit 1;
    if found then
      raise exception 'task % is of a worker-only task type; only its process may cancel it', _internal
        using errcode = '42501';
    end if;
  end if;
  return query select * from queues.cancel_tasks_at(now(), _task_ids, _reason);
end;
$$;

-- For a worker whose heartbeat found leases lost: which of these tasks were cancelled,
-- and why (queues.task_cancelled). At most 1000 ids; a task not cancelled is left out.
create or replace function queues.cancelled_tasks(_task_ids bigint[])
  returns table (task_id bigint, reason text, cancelled_at timestamptz)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 task ids per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  -- A primary-key probe per id (= any of an array).
  return query
  select c.task_id, c.reason, c.cancelled_at
    from queues.task_cancelled c
   where c.task_id = any (_task_ids)
   order by c.task_id;
end;
$$;
--! EndIncluded queues/cancel.sql
--! Included admin/history.sql
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

  -- Every set once, with its pending count (a range count of queues.task_pending) and its
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
   cross join lateral (select count(*) as pending from queues.task_pending tp
                        where not p.is_default and tp.task_id >= p.lower_bound and tp.task_id < p.upper_bound) pe
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
                               from queues.task_pending p where p.task_id = r.task_id)),
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
--! EndIncluded admin/history.sql
--! Included admin/schedules.sql
-- Recurring schedules for the dashboard: each schedule in force (schedules.list_schedules)
-- with its last runs and how their tasks ended.

-- Every schedule with cron, its time zone, next and last fire times, enabled, and its last _runs (1 to
-- 20, default 5) runs newest first as JSON: [{fire_at, outcome (enqueued/skipped),
-- task_id, task_state}], task_state being the task's outcome or pending state.
create or replace function admin.list_schedules_at(_now timestamptz, _runs integer)
  returns table (
    name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text,
    enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz, updated_at timestamptz, last_runs jsonb,
    time_zone text
  )
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n integer := coalesce(_runs, 5);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _n not between 1 and 20 then
    raise exception 'runs must be between 1 and 20, got %', _n using errcode = '22023';
  end if;
  return query
  select s.name, s.cron, s.task_type, s.payload, s.priority, s.missed_run_policy, s.enabled,
         s.last_fire_at, s.next_fire_at, s.updated_at,
         coalesce((
           select jsonb_agg(jsonb_build_object(
                    'fire_at', r.fire_at, 'outcome', r.outcome, 'task_id', r.task_id,
                    'task_state', coalesce(c.outcome,
                      (select admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)
                         from queues.task_pending p where p.task_id = r.task_id)))
                    order by r.fire_at desc)
             from (select * from schedules.schedule_run x
                    where x.schedule_id = s.schedule_id
                    order by x.fire_at desc limit _n) r
             left join lateral (select e.outcome from queues.task_end_of(r.task_id) e limit 1) c on true), '[]'),
         s.time_zone
    from schedules.list_schedules() s;
end;
$$;

create or replace function admin.list_schedules(_runs integer default null)
  returns table (
    name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text,
    enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz, updated_at timestamptz, last_runs jsonb,
    time_zone text
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_schedules_at(now(), _runs)
$$;
--! EndIncluded admin/schedules.sql
--! Included internal/process_support.sql
-- Helpers shared by every business process (comms, files, accounts, schedules):
-- reading ids from payloads, the validation-failure envelope, and the isolation guard
-- of supervisors. Called only from security definer functions: no grants.

-- A positive bigint id read from a jsonb object, or NULL when the key is missing, not
-- an integer, or out of range. Supervisors and handlers validate with this instead of
-- casting, so a malformed payload is a validation failure, not an exception.
create or replace function internal.id_from_payload(_payload jsonb, _key text)
  returns bigint
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select case
    when jsonb_typeof(_payload) = 'object'
     and jsonb_typeof(_payload -> _key) in ('number', 'string')
     and (_payload ->> _key) ~ '^[1-9][0-9]{0,17}$'
    then (_payload ->> _key)::bigint
  end
$$;

-- The envelope for input a function cannot act on: non-retriable, nothing written.
create or replace function internal.validation_failure(_message text)
  returns jsonb
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', false, 'validation_failure_message', _message)
$$;

-- Refuses to run a supervisor outside READ COMMITTED. A supervisor serialises on its
-- root row, then reads facts. Under READ COMMITTED every statement after the lock wait
-- takes a fresh snapshot and sees what the previous holder committed; under REPEATABLE
-- READ (or SERIALIZABLE) the snapshot is from before the wait, so two runs would both
-- see "no outstanding attempt" and schedule two.
create or replace function internal.assert_read_committed(_function_name text)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception '% must run under READ COMMITTED, not %', _function_name,
      upper(current_setting('transaction_isolation'))
      using errcode = '25000',
            detail = 'Under REPEATABLE READ or SERIALIZABLE the lock on the root row does not stop double scheduling: facts read after the lock wait come from a snapshot taken before it.',
            hint = 'Call supervisors in a READ COMMITTED transaction (the default).';
  end if;
end;
$$;

-- Why the queue gave up on a channel task, or NULL while it has not: the task is
-- completed (abandoned after its leases expired, dead-lettered, cancelled while pending or
-- running, failed because its success or error handler raised) although its attempt has
-- no outcome. Supervisors record this as the attempt's failure at their next run. The
-- message ends with the task's last error or, for a cancelled task, the cancel's reason.
--
-- A task that is no longer in queues.task was given up on too: history retention drops a
-- task only with its whole partition set, and only once every task in the set has a
-- completion (queues.maintain_history_at), so a task that is gone was completed, at
-- least the retention window ago, and its attempt got no outcome from it. A supervisor
-- silent for that long (db_function paused) still sees its attempt end.
--
-- When an at-most-once provider call was started for the task
-- (internal.provider_call_started, which retention keeps), the call may have happened:
-- the message then starts with internal.unknown_outcome_prefix(), so the supervisor ends
-- the process delivery_outcome_unknown instead of calling again.
create or replace function internal.queue_gave_up_message(_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select left(coalesce((select format('%slease %s started the provider call at %s and no outcome was recorded; ',
                                      internal.unknown_outcome_prefix(), s.task_lease_id, s.started_at)
                          from internal.provider_call_started s
                         where s.task_id = k.task_id
                         order by s.task_lease_id limit 1), '')
              || case when t.task_id is null
                      then format('the queue gave up on task %s: its history was dropped by retention before its attempt had an outcome',
                                  k.task_id)
                      else format('the queue gave up on %s task %s (%s)%s', t.task_type, t.task_id, c.outcome,
                                  coalesce(': ' || (select e.error_message from queues.error e
                                                     where e.task_id = t.task_id order by e.error_id desc limit 1),
                                           ': ' || (select nullif(x.reason, '') from queues.task_cancelled x
                                                     where x.task_id = t.task_id and c.outcome = 'cancelled'), ''))
                 end, 2000)
    from (select _task_id as task_id) k
    left join queues.task t on t.task_id = k.task_id
    left join lateral (select e.task_id, e.outcome from queues.task_end_of(t.task_id) e limit 1) c on true
   where k.task_id is not null and (t.task_id is null or c.task_id is not null)
$$;

-- True when an attempt's error is the worker's "unknown outcome" failure of an
-- at-most-once channel (internal.start_provider_call): the call may have happened, so a
-- supervisor must not make another attempt.
create or replace function internal.is_unknown_outcome(_error_message text)
  returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select starts_with(coalesce(_error_message, ''), 'unknown outcome: ')
$$;

-- The namespace of provider idempotency keys: this database's cluster (its system
-- identifier) and name, so two databases sending through one provider account never
-- share a key. Stable for the life of the database.
create or replace function internal.idempotency_namespace()
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select format('%s:%s', (select s.system_identifier from pg_control_system() s), current_database())
$$;
--! EndIncluded internal/process_support.sql

--! split: 200-flow-limits.sql
set local lock_timeout = '5s';
-- Flow limits (docs/flow-control.md, "Concurrency and rate limits"; sql/queues/limits.sql).

-- A task's group key (a tenant, a provider account), set at enqueue and carried on the
-- claim index, which the claim counts by. Nullable columns without a default: a catalog
-- change, no rewrite of either table. Its length (1 to 200) is checked by the enqueue.
-- lock: access exclusive on queues.task: adds the nullable column group_key (catalog only, no rewrite)
alter table queues.task add column if not exists group_key text;
comment on column queues.task.group_key is
  'What the task''s flow limits count it by within its type (a tenant, a provider account); NULL: none.';
-- lock: access exclusive on queues.task_pending: adds the nullable column group_key (catalog only, no rewrite)
alter table queues.task_pending add column if not exists group_key text;

-- Limits set as facts: the latest per (task type, scope, group key) is in force; a row
-- with neither limit clears it.
create table if not exists queues.task_limit_set (
  task_limit_set_id bigint generated always as identity primary key,
  task_type text not null references queues.task_type (task_type) on delete cascade,
  scope text not null check (scope in ('type', 'each_group', 'group')),
  group_key text check ((scope = 'group') = (group_key is not null) and length(group_key) between 1 and 200),
  max_running integer check (max_running between 1 and 1000000),
  max_starts integer check (max_starts between 1 and 1000000),
  interval_ms integer check (interval_ms between 1 and 86400000),
  check ((max_starts is null) = (interval_ms is null)),
  set_at timestamptz not null default now(),
  set_by text not null default session_user
);
comment on table queues.task_limit_set is
  'Append-only: a concurrency and/or rate limit set (both NULL: cleared) for a task type, each group key of it, or one group key; the latest per (task_type, scope, group_key) is in force (queues.task_limits).';
drop trigger if exists forbid_update on queues.task_limit_set;
create trigger forbid_update before update on queues.task_limit_set
  for each statement execute function queues.forbid_fact_update();
create index if not exists task_limit_set_key on queues.task_limit_set (task_type, scope, group_key, task_limit_set_id);

-- Starts counted in the current window of each rate limit: a derived counter row per
-- (task type, group key; '' for the type as a whole), written once per claim that takes
-- tasks under a rate limit, under the type's claim lock (queues.claim_tasks_at).
create table if not exists queues.task_limit_window (
  task_type text not null,
  group_key text not null,
  window_start timestamptz not null,
  starts integer not null,
  primary key (task_type, group_key)
);
comment on table queues.task_limit_window is
  'Derived: tasks claimed in the current window of a rate limit, per task type and group key ('''' = the type as a whole). Losing it forgets at most one window''s starts.';

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
    select p.task_type, p.group_key, count(*) as n
      from queues.task_pending p
     where p.current_lease_id > 0 and p.available_at > _now
       and p.task_type = any (array(select distinct r.task_type from rule r))
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
--! Included admin/limits.sql
-- The REST API's face of flow limits per task type and group key (sql/queues/limits.sql).

-- Each limit in force with how full it is now (queues.task_limit_status_at): for the
-- dashboard's Queues page, GET /api/limits and /metrics.
create or replace function admin.task_limits()
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
  select * from queues.task_limit_status_at(now())
$$;

-- Sets the limits of a scope (queues.set_task_limit), the rate's interval in milliseconds.
create or replace function admin.set_task_limit(
  _task_type   text,
  _scope       text,
  _group_key   text,
  _max_running integer,
  _max_starts  integer,
  _interval_ms integer
) returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _interval_ms is not null and _interval_ms not between 1 and 86400000 then
    raise exception 'interval_ms must be between 1 and 86400000 (1 day), got %', _interval_ms using errcode = '22023';
  end if;
  perform queues.set_task_limit(_task_type, _scope, _group_key, _max_running, _max_starts,
                                make_interval(secs => _interval_ms / 1000.0));
end;
$$;

-- Clears the limits of a scope; true when it had one (queues.clear_task_limit).
create or replace function admin.clear_task_limit(_task_type text, _scope text, _group_key text)
  returns boolean
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.clear_task_limit(_task_type, _scope, _group_key)
$$;
--! EndIncluded admin/limits.sql
-- The enqueues take a trailing group key: queues/enqueue.sql (included by
-- 400-task-dependencies.sql, which drops the older signatures of the functions); the
-- procedure's older signature is dropped here. queues/claim.sql (the limits in the claim)
-- and queues/maintenance.sql are included by 500-lease-per-claim.sql: after this file,
-- which creates the columns and tables they use and queues/limits.sql.
drop procedure if exists queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint);

--! split: 300-provider-throttle.sql
set local lock_timeout = '5s';
-- Provider back-pressure as a fact (sql/queues/throttle.sql): "throttled until T" per
-- channel (task type), honoured by every claim, read by supervisors and the REST API.
create table if not exists queues.throttle (
  throttle_id     bigint generated always as identity primary key,
  -- 'task_type': key is a task type (a channel such as 'email'); 'group': key is a group
  -- key (tasks' group_key: a tenant, a provider account).
  key_kind        text not null check (key_kind in ('task_type', 'group')),
  key             text not null check (length(key) between 1 and 200),
  throttled_until timestamptz not null,
  reason          text not null check (length(reason) between 1 and 500),
  recorded_at     timestamptz not null default now(),
  recorded_by     text not null check (length(recorded_by) between 1 and 200),
  -- The run whose provider call was refused, when a worker reported it (no foreign keys:
  -- task and lease history is dropped by partition, and a report outlives neither).
  task_id         bigint,
  task_lease_id   bigint,
  check (throttled_until > recorded_at),
  check ((task_id is null) = (task_lease_id is null))
);
comment on table queues.throttle is
  'Append-only: a provider refused work of key (a task type) until throttled_until (a 429, a Retry-After, a quota error). Claims leave the key''s tasks while one of its reports not cleared is in force (queues.throttled_task_types_at).';
drop trigger if exists forbid_update on queues.throttle;
create trigger forbid_update before update on queues.throttle
  for each statement execute function queues.forbid_fact_update();
-- The one read of the reports (the claim's probe, a key's end, the active list): those not
-- ended yet, from _now on; ended ones are never read again.
create index if not exists throttle_until_idx on queues.throttle (throttled_until) include (key_kind, key, throttle_id);
-- internal.provider_call_start: was this lease's started call refused?
create index if not exists throttle_lease_idx on queues.throttle (task_lease_id) where task_lease_id is not null;

create table if not exists queues.throttle_cleared (
  throttle_cleared_id bigint generated always as identity primary key,
  key_kind            text not null,
  key                 text not null,
  -- The key's reports up to this one are cleared; a later report throttles it again.
  last_throttle_id    bigint not null references queues.throttle (throttle_id) on delete cascade,
  cleared_at          timestamptz not null default now(),
  cleared_by          text not null check (length(cleared_by) between 1 and 200)
);
comment on table queues.throttle_cleared is
  'Append-only: an operator cleared the throttles of key recorded up to last_throttle_id (queues.clear_throttle).';
drop trigger if exists forbid_update on queues.throttle_cleared;
create trigger forbid_update before update on queues.throttle_cleared
  for each statement execute function queues.forbid_fact_update();
create index if not exists throttle_cleared_key_idx on queues.throttle_cleared (key_kind, key, last_throttle_id);

--! Included queues/throttle.sql
-- Provider back-pressure as a fact: "throttled until T". A processor whose provider
-- answered 429, a Retry-After or a quota error throws a ThrottledError; its worker records
-- it here (queues.record_throttle) and gives the task back uncounted. Every claim leaves
-- out the task types and the group keys throttled at its clock (queues.throttled_keys_at,
-- one probe of throttle_until_idx per claim, nothing per row while no group key is
-- throttled), so that channel's, or that tenant's or provider account's, tasks wait on
-- every worker until T; supervisors read queues.throttled_until (a channel process's facts
-- expose it); an operator reads and clears throttles through admin.list_throttles and
-- admin.clear_throttle.
--
-- Facts (migration 300-provider-throttle.sql): queues.throttle, one row per report
-- (key_kind, key, throttled_until, reason, who, the lease whose call was refused), and
-- queues.throttle_cleared, an operator's clear of a key's throttles recorded so far. A
-- key's throttle is active while one of its reports not cleared has throttled_until
-- after now; the latest such T is the key's. key_kind 'task_type': a channel, such as
-- 'email' (its tasks wait). key_kind 'group': a group key (queues.task.group_key, a tenant
-- or a provider account; the key of flow limits): the tasks of every type that carry it
-- wait.

-- The longest a throttle may last: a provider asking for longer is held to this, and the
-- worker reports again when it still refuses.
create or replace function queues.max_throttle_seconds()
  returns integer
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$ select 86400 $$;

-- Records that _key (a task type, key_kind 'task_type'; or a group key, key_kind 'group')
-- is throttled until _until, or for _retry_after_seconds from _now (exactly one of the
-- two), with _reason (1 to 500 characters) and who reported it (_recorded_by: a worker
-- id, 1 to 200 characters). A group key is 1 to 200 characters, not blank; with
-- key_kind 'group', a NULL _key and a task (_task_id), the key is that task's group key.
-- With _task_id and _task_lease_id (the run whose provider call was refused), that lease
-- is released in the same transaction, as queues.release_leases does: the task is
-- claimable again at once (the claim holds it back while the throttle lasts), and
-- neither the release nor the refused run counts as a failed attempt, an interruption or
-- an expiry; an at-most-once provider call started under that lease does not count as
-- started (internal.provider_call_start: the provider refused it).
-- Returns the result ('recorded' without a task, 'released', 'lease_lost' when the lease
-- is no longer current: the throttle is recorded anyway) and the throttle's end.
-- Bad input writes nothing: NULLs 22004; an unknown task type, or a group throttle of the
-- task's group key for a task that is not known, 23503; a kind other than 'task_type' or
-- 'group', a group key blank or out of bounds, a task without a group key asked to
-- throttle its group, both or neither of _until and _retry_after_seconds, a T not after
-- _now or more than queues.max_throttle_seconds() after it, a reason or name out of
-- bounds, one of the task ids without the other: 22023.
create or replace function queues.record_throttle_at(
  _now                 timestamptz,
  _key_kind            text,
  _key                 text,
  _until               timestamptz,
  _retry_after_seconds numeric,
  _reason              text,
  _recorded_by         text,
  _task_id             bigint,
  _task_lease_id       bigint
) returns table (result text, throttled_until timestamptz)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _end timestamptz;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _key_kind is null or (_key is null and not (_key_kind = 'group' and _task_id is not null)) then
    raise exception 'key_kind and key must not be null' using errcode = '22004';
  end if;
  if _key_kind not in ('task_type', 'group') then
    raise exception 'key_kind must be ''task_type'' or ''group'', got %', quote_literal(left(_key_kind, 100))
      using errcode = '22023';
  end if;
  if _key_kind = 'task_type' then
    if not exists (select 1 from queues.task_type t where t.task_type = _key) then
      raise exception 'unknown task type %', quote_literal(left(_key, 100)) using errcode = '23503';
    end if;
  else
    if _key is null then
      -- The group key of the run's task.
      select t.group_key into _key from queues.task t where t.task_id = _task_id limit 1;
      if not found then
        raise exception 'unknown task %', _task_id using errcode = '23503';
      end if;
      if _key is null then
        raise exception 'task % has no group key to throttle', _task_id using errcode = '22023';
      end if;
    end if;
    if btrim(_key) = '' or length(_key) > 200 then
      raise exception 'group key must be 1 to 200 characters, not blank' using errcode = '22023';
    end if;
  end if;
  if (_until is null) = (_retry_after_seconds is null) then
    raise exception 'give exactly one of until and retry_after_seconds' using errcode = '22023';
  end if;
  if _retry_after_seconds is not null then
    if _retry_after_seconds <= 0 or _retry_after_seconds > queues.max_throttle_seconds() then
      raise exception 'retry_after_seconds must be more than 0 and at most %, got %',
        queues.max_throttle_seconds(), _retry_after_seconds using errcode = '22023';
    end if;
    _end := _now + make_interval(secs => _retry_after_seconds::double precision);
  else
    if _until <= _now or _until > _now + make_interval(secs => queues.max_throttle_seconds()) then
      raise exception 'until must be after now and at most % seconds ahead, got % (now %)',
        queues.max_throttle_seconds(), _until, _now using errcode = '22023';
    end if;
    _end := _until;
  end if;
  if _reason is null or btrim(_reason) = '' or length(_reason) > 500 then
    raise exception 'reason must be 1 to 500 characters' using errcode = '22023';
  end if;
  if _recorded_by is null or length(_recorded_by) not between 1 and 200 then
    raise exception 'recorded_by must be 1 to 200 characters' using errcode = '22023';
  end if;
  if (_task_id is null) <> (_task_lease_id is null) then
    raise exception 'give both task_id and task_lease_id, or neither' using errcode = '22023';
  end if;

  insert into queues.throttle (key_kind, key, throttled_until, reason, recorded_at, recorded_by, task_id, task_lease_id)
  values (_key_kind, _key, _end, _reason, _now, _recorded_by, _task_id, _task_lease_id);

  if _task_id is null then
    return query select 'recorded'::text, _end;
    return;
  end if;
  if exists (select 1 from queues.release_leases(array[_task_id], array[_task_lease_id])) then
    return query select 'released'::text, _end;
  else
    return query select 'lease_lost'::text, _end;
  end if;
end;
$$;

-- queues.record_throttle_at at now(): what the worker calls (see above).
create or replace function queues.record_throttle(
  _key_kind            text,
  _key                 text,
  _until               timestamptz,
  _retry_after_seconds numeric,
  _reason              text,
  _recorded_by         text,
  _task_id             bigint default null,
  _task_lease_id       bigint default null
) returns table (result text, throttled_until timestamptz)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.record_throttle_at(now(), _key_kind, _key, _until, _retry_after_seconds, _reason,
                                          _recorded_by, _task_id, _task_lease_id)
$$;

-- The active throttles at _now: per key, the latest end among its reports not cleared
-- that end after _now, with that report's reason, time and reporter, and how many such
-- reports there are. Reads throttle_until_idx from _now on (only reports not yet ended),
-- each probed against the key's clears.
create or replace function queues.active_throttles_at(_now timestamptz)
  returns table (
    key_kind        text,
    key             text,
    throttled_until timestamptz,
    reason          text,
    recorded_at     timestamptz,
    recorded_by     text,
    reports         integer
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
as $$
  select distinct on (a.key_kind, a.key)
         a.key_kind, a.key, a.throttled_until, a.reason, a.recorded_at, a.recorded_by,
         (count(*) over (partition by a.key_kind, a.key))::integer
    from queues.throttle a
   where a.throttled_until > _now
     and (select true from queues.throttle_cleared c
           where c.key_kind = a.key_kind and c.key = a.key and c.last_throttle_id >= a.throttle_id
           limit 1) is null
   order by a.key_kind, a.key, a.throttled_until desc, a.throttle_id desc
$$;

-- The active throttles now (queues.active_throttles_at).
create or replace function queues.active_throttles()
  returns table (
    key_kind        text,
    key             text,
    throttled_until timestamptz,
    reason          text,
    recorded_at     timestamptz,
    recorded_by     text,
    reports         integer
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.active_throttles_at(now())
$$;

-- The task types and the group keys throttled at _now, for the claim's prelude
-- (queues.claim_tasks_at): one probe of throttle_until_idx, which reads no row while no
-- throttle is active (the common case: '{}' and '{}'). Planned once per connection with
-- no sequential scan, so that a plan made while the table was empty never reads the
-- whole table later.
create or replace function queues.throttled_keys_at(_now timestamptz)
  returns table (task_types text[], group_keys text[])
  language sql stable
  rows 1
  set search_path = pg_catalog, pg_temp
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
as $$
  select coalesce(array_agg(distinct a.key) filter (where a.key_kind = 'task_type'), '{}'),
         coalesce(array_agg(distinct a.key) filter (where a.key_kind = 'group'), '{}')
    from queues.throttle a
   where a.throttled_until > _now
     and (select true from queues.throttle_cleared c
           where c.key_kind = a.key_kind and c.key = a.key and c.last_throttle_id >= a.throttle_id
           limit 1) is null
$$;

-- Until when _key (of _key_kind: 'task_type' for a channel, 'group' for a group key) is
-- throttled now, or NULL when it is not: what a supervisor reads to decide (send by
-- another channel, wait, stop retrying). A channel process's facts carry it for its
-- channel.
create or replace function queues.throttled_until(_key_kind text, _key text)
  returns timestamptz
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
  set enable_seqscan = off
as $$
  select max(a.throttled_until)
    from queues.throttle a
   where a.throttled_until > now()
     and a.key_kind = _key_kind and a.key = _key
     and (select true from queues.throttle_cleared c
           where c.key_kind = a.key_kind and c.key = a.key and c.last_throttle_id >= a.throttle_id
           limit 1) is null
$$;

-- Clears the throttles of _key recorded so far (an operator who knows the provider is
-- back), as a fact: claims take the key's tasks again at once; a report after the clear
-- throttles it again. Returns whether a throttle was active. Owner only; the REST API
-- calls admin.clear_throttle. Bad input (NULLs 22004, a kind other than 'task_type' or
-- 'group', a group key blank or out of bounds, a name out of bounds 22023) writes
-- nothing; nothing is written when no throttle is active.
create or replace function queues.clear_throttle(_key_kind text, _key text, _cleared_by text)
  returns boolean
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _last bigint;
begin
  if _key_kind is null or _key is null or _cleared_by is null then
    raise exception 'key_kind, key and cleared_by must not be null' using errcode = '22004';
  end if;
  if _key_kind not in ('task_type', 'group') then
    raise exception 'key_kind must be ''task_type'' or ''group'', got %', quote_literal(left(_key_kind, 100))
      using errcode = '22023';
  end if;
  if _key_kind = 'group' and (btrim(_key) = '' or length(_key) > 200) then
    raise exception 'group key must be 1 to 200 characters, not blank' using errcode = '22023';
  end if;
  if length(_cleared_by) not between 1 and 200 then
    raise exception 'cleared_by must be 1 to 200 characters' using errcode = '22023';
  end if;
  select max(a.throttle_id) into _last
    from queues.throttle a
   where a.key_kind = _key_kind and a.key = _key and a.throttled_until > now();
  if _last is null or queues.throttled_until(_key_kind, _key) is null then
    return false;
  end if;
  insert into queues.throttle_cleared (key_kind, key, last_throttle_id, cleared_by)
  values (_key_kind, _key, _last, _cleared_by);
  -- The key's tasks are claimable again: wake the workers.
  perform pg_notify('queues_task_ready', '');
  return true;
end;
$$;
--! EndIncluded queues/throttle.sql
--! Included admin/throttles.sql
-- The REST API's face of provider back-pressure (sql/queues/throttle.sql): the active
-- throttles, and an operator's clear of one.

-- The throttles in force now, one row per key (queues.active_throttles_at): until when,
-- the latest report's reason, time and reporter, and how many reports are in force.
create or replace function admin.list_throttles()
  returns table (
    key_kind        text,
    key             text,
    throttled_until timestamptz,
    reason          text,
    recorded_at     timestamptz,
    recorded_by     text,
    reports         integer
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.active_throttles_at(now())
$$;

-- Clears the throttle of a key now (queues.clear_throttle), as the REST API: its tasks are
-- claimed again at once. Returns whether one was in force (a group key no throttle names:
-- false). An unknown task type is 23503, a kind other than 'task_type' or 'group' or a
-- group key blank or longer than 200 characters 22023, a NULL 22004; nothing is written
-- then.
create or replace function admin.clear_throttle(_key_kind text, _key text)
  returns boolean
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _key_kind is null or _key is null then
    raise exception 'key_kind and key must not be null' using errcode = '22004';
  end if;
  if _key_kind = 'task_type' and not exists (select 1 from queues.task_type t where t.task_type = _key) then
    raise exception 'unknown task type %', quote_literal(left(_key, 100)) using errcode = '23503';
  end if;
  return queues.clear_throttle(_key_kind, _key, 'api');
end;
$$;
--! EndIncluded admin/throttles.sql

-- Supervisors read the throttle of their channel: each message channel's facts
-- (comms.send_<c>_supervisor_facts) gain throttled_until, a new out column, so they are
-- dropped and made again by the channel's registration, with the settings it has; every
-- channel process's own functions are made again from the template (its supervisor
-- schedules its next check no earlier than the throttle's end).
do $$
declare
  _p record;
begin
  for _p in select p.process_name from internal.channel_process p
             where p.process_schema = 'comms' and p.process_name like 'send\_%' loop
    execute format('drop function if exists %I.%I(bigint)', 'comms', _p.process_name || '_supervisor_facts');
  end loop;
end;
$$;
--! Included internal/channel_process.sql
-- The skeleton of a channel process (a supervisor that schedules provider calls through
-- a channel task), written once. A process registers its names and limits in
-- internal.channel_process; its own file keeps only its decisions (what the kickoff
-- accepts, what the provider is sent) and thin named wrappers over these blocks.
--
-- The supervisor is built from the blocks of sql/internal/process_supervisor.sql.
--
-- A channel process <schema>.<name> has these tables (internal.create_channel_process_tables
-- makes all but the root):
--   <name>_task               the root, created by the process (its domain columns)
--   <name>_supervisor_run     one row per non-terminal supervisor run (run cap), with the
--                             queue task of the run it scheduled (next_task_id)
--   <name>_attempt            one row per scheduled channel task (task_id: its queue task)
--   <name>_attempt_succeeded  <name>_attempt_failed   at most one each per attempt
--   <name>_task_succeeded     <name>_task_failed      terminal facts
-- Keys: <name>_task_id, <name>_attempt_id. Table names reach dynamic SQL only through
-- format('%I.%I') from a registered row whose tables were found in the catalog.
-- Registration also makes the process's own functions, static SQL over those tables
-- (internal.create_channel_process_functions): the supervisor, its facts, and the
-- handlers' bookkeeping. The generic functions at the end of this file call them.

-- Registers (or updates) a channel process, and (re)makes its functions
-- (internal.create_channel_process_functions). Raises 22023 naming a missing table.
-- _attempt_payload: optional function (root id bigint) returning jsonb fields added to
-- each channel task's payload (file deletion adds the file_id).
create or replace function internal.register_channel_process(
  _schema text, _name text, _task_type text,
  _supervisor text, _before_handler text, _success_handler text, _error_handler text,
  _max_attempts integer, _max_supervisor_runs integer, _backoff_cap_seconds integer default 3600,
  _attempt_payload regprocedure default null
) returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _suffix text;
begin
  foreach _suffix in array array['_task', '_supervisor_run', '_attempt', '_attempt_succeeded', '_attempt_failed',
                                 '_task_succeeded', '_task_failed'] loop
    if to_regclass(format('%I.%I', _schema, _name || _suffix)) is null then
      raise exception 'channel process %.%: table %.% does not exist', _schema, _name, _schema, _name || _suffix
        using errcode = '22023';
    end if;
  end loop;
  if not exists (select 1 from pg_attribute a
                  where a.attrelid = to_regclass(format('%I.%I', _schema, _name || '_supervisor_run'))
                    and a.attname = 'next_task_id' and not a.attisdropped) then
    raise exception 'channel process %.%: table %.% has no column next_task_id (internal.create_channel_process_tables adds it)',
      _schema, _name, _schema, _name || '_supervisor_run' using errcode = '22023';
  end if;
  insert into internal.channel_process as p
    (process_schema, process_name, task_type, supervisor, before_handler, success_handler, error_handler,
     max_attempts, max_supervisor_runs, backoff_cap_seconds, attempt_payload)
  values (_schema, _name, _task_type, _supervisor, _before_handler, _success_handler, _error_handler,
          _max_attempts, _max_supervisor_runs, _backoff_cap_seconds, _attempt_payload)
  on conflict (process_schema, process_name) do update
     set task_type = excluded.task_type, supervisor = excluded.supervisor,
         before_handler = excluded.before_handler, success_handler = excluded.success_handler,
         error_handler = excluded.error_handler, max_attempts = excluded.max_attempts,
         max_supervisor_runs = excluded.max_supervisor_runs, backoff_cap_seconds = excluded.backoff_cap_seconds,
         attempt_payload = excluded.attempt_payload;
  perform internal.create_channel_process_functions(_schema, _name);
end;
$$;

-- Creates the fact tables of a channel process beside its root <schema>.<name>_task
-- (which must exist, with a bigint identity key <name>_task_id), with the append-only
-- trigger on each. Idempotent. Owner only: migrations call it.
create or replace function internal.create_channel_process_tables(_schema text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _root text := format('%I.%I', _schema, _name || '_task');
  _attempt text := format('%I.%I', _schema, _name || '_attempt');
  _rk text := _name || '_task_id';
  _ak text := _name || '_attempt_id';
  _table text;
begin
  if to_regclass(_root) is null then
    raise exception 'channel process %.%: create its root table %.% first', _schema, _name, _schema, _name || '_task'
      using errcode = '22023';
  end if;
  execute format('create table if not exists %I.%I (%I bigint generated always as identity primary key,
                    %I bigint not null references %s on delete cascade, created_at timestamptz not null default now())',
                 _schema, _name || '_supervisor_run', _name || '_supervisor_run_id', _rk, _root);
  -- next_task_id: the queue task of the run this run scheduled. Queue tasks are named
  -- without foreign keys (here and in <name>_attempt.task_id): history retention drops
  -- whole partitions of queues.task.
  execute format('alter table %I.%I add column if not exists next_task_id bigint', _schema, _name || '_supervisor_run');
  execute format('create index if not exists %I on %I.%I (%I)', _name || '_supervisor_run_task_idx', _schema, _name || '_supervisor_run', _rk);
  execute format('create table if not exists %s (%I bigint generated always as identity primary key,
                    %I bigint not null references %s on delete cascade,
                    task_id bigint,
                    created_at timestamptz not null default now())', _attempt, _ak, _rk, _root);
  execute format('create index if not exists %I on %s (%I)', _name || '_attempt_task_idx', _attempt, _rk);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    worker_payload jsonb, created_at timestamptz not null default now())',
                 _schema, _name || '_attempt_succeeded', _ak, _attempt);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    error_message text not null, created_at timestamptz not null default now())',
                 _schema, _name || '_attempt_failed', _ak, _attempt);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    created_at timestamptz not null default now())', _schema, _name || '_task_succeeded', _rk, _root);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    reason text not null, created_at timestamptz not null default now())', _schema, _name || '_task_failed', _rk, _root);
  foreach _table in array array['_task', '_supervisor_run', '_attempt', '_attempt_succeeded', '_attempt_failed',
                                '_task_succeeded', '_task_failed'] loop
    if not exists (select 1 from pg_trigger
                    where tgrelid = to_regclass(format('%I.%I', _schema, _name || _table)) and tgname = 'forbid_update') then
      execute format('create trigger forbid_update before update on %I.%I
                        for each statement execute function queues.forbid_fact_update()', _schema, _name || _table);
    end if;
  end loop;
end;
$$;

-- The functions of a channel process, made from its table names once (at registration)
-- instead of on every call: their SQL is static, so a connection plans it once and keeps
-- the plan. (Built per call with format() and EXECUTE, planning took most of the
-- database's time per email process: BENCHMARKS.md, "where a task's time goes".)
-- Identifiers reach the text only through format('%I'), literals through format('%L').
-- Owner only, like the tables; the generic functions below call them.
--   <name>_process_facts(root_id)             the facts (internal.channel_process_facts)
--   <name>_close_given_up_attempts(root_id)   records a failure for every outstanding attempt
--                                             whose channel task the queue gave up on
--                                             (internal.queue_gave_up_message); how many
--   <name>_supervise(payload)                 the supervisor (internal.run_channel_supervisor)
--   <name>_attempt_refusal(attempt_id, verb)  internal.channel_attempt_refusal
--   <name>_record_attempt_success(payload)    internal.record_channel_attempt_success
--   <name>_record_attempt_failure(payload)    internal.record_channel_attempt_failure
create or replace function internal.create_channel_process_functions(_schema text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p internal.channel_process := internal.get_channel_process(_schema, _name);
  _suffixes text[] := array['_process_facts', '_close_given_up_attempts', '_supervise', '_attempt_refusal',
                            '_record_attempt_success', '_record_attempt_failure'];
  -- The names (and the settings) every template below refers to, by position.
  _names text[] := array[
    _schema,                                      -- 1
    _name || '_task',                             -- 2  the root
    _name || '_supervisor_run',                   -- 3
    _name || '_attempt',                          -- 4
    _name || '_attempt_succeeded',                -- 5
    _name || '_attempt_failed',                   -- 6
    _name || '_task_succeeded',                   -- 7
    _name || '_task_failed',                      -- 8
    _name || '_task_id',                          -- 9  the root's key
    _name || '_attempt_id',                       -- 10 the attempt's key
    _name,                                        -- 11
    _name || _suffixes[1], _name || _suffixes[2], _name || _suffixes[3],    -- 12, 13, 14
    _name || _suffixes[4], _name || _suffixes[5], _name || _suffixes[6],    -- 15, 16, 17
    -- 18: the fields the process adds to each channel task's payload (its attempt_payload)
    coalesce((select format('%I.%I(_task_id)', n.nspname, f.proname)
                from pg_proc f join pg_namespace n on n.oid = f.pronamespace
               where f.oid = _p.attempt_payload), '''{}''::jsonb'),
    format('%I.%I', _schema, _name || '_attempt'),  -- 19 the attempt table, for its sequence
    -- 20: the settings of every function. Every row is read by key, and a plan is made
    -- once per connection, perhaps while the tables were small (see sql/CONVENTIONS.md).
    'set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off'
  ];
  _suffix text;
begin
  execute format($f$
    create or replace function %1$I.%12$I(
      _root_id bigint,
      out has_task_succeeded  boolean,
      out task_failure        text,
      out has_success         boolean,
      out num_attempts        integer,
      out num_failures        integer,
      out num_outstanding     integer,
      out num_runs            integer,
      out has_unknown_outcome boolean
    )
      language plpgsql stable
      %20$s
    as $body$
    begin
      -- One pass over the root's attempts (its index), each attempt's outcomes probed by
      -- primary key (scalar subqueries: no join order for the planner to get wrong), once
      -- (materialized: each probe is used by several aggregates).
      with attempt as materialized (
        select (select true from %1$I.%5$I s where s.%10$I = a.%10$I) as succeeded,
               (select f.error_message from %1$I.%6$I f where f.%10$I = a.%10$I) as failure
          from %1$I.%4$I a
         where a.%9$I = _root_id
      )
      select (select true from %1$I.%7$I x where x.%9$I = _root_id) is not null,
             (select x.reason from %1$I.%8$I x where x.%9$I = _root_id),
             coalesce(bool_or(a.succeeded), false),
             count(*)::integer,
             (count(*) filter (where a.succeeded is null and a.failure is not null))::integer,
             (count(*) filter (where a.succeeded is null and a.failure is null))::integer,
             (select count(*)::integer from %1$I.%3$I r where r.%9$I = _root_id),
             coalesce(bool_or(a.succeeded is null and a.failure is not null
                              and internal.is_unknown_outcome(a.failure)), false)
        into has_task_succeeded, task_failure, has_success, num_attempts, num_failures, num_outstanding,
             num_runs, has_unknown_outcome
        from attempt a;
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%13$I(_root_id bigint)
      returns integer
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _closed integer;
    begin
      with closed as (
        insert into %1$I.%6$I (%10$I, error_message)
        select a.%10$I, internal.queue_gave_up_message(a.task_id)
          from %1$I.%4$I a
         where a.%9$I = _root_id
           and (select true from %1$I.%5$I s where s.%10$I = a.%10$I) is null
           and (select true from %1$I.%6$I f where f.%10$I = a.%10$I) is null
           and internal.queue_gave_up_message(a.task_id) is not null
        on conflict do nothing
        returning 1)
      select count(*)::integer into _closed from closed;
      return _closed;
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%14$I(payload jsonb)
      returns jsonb
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _p internal.channel_process := internal.get_channel_process(%1$L, %11$L);
      _task_id bigint := internal.id_from_payload(payload, %9$L);
      _facts record;
      _attempt_id bigint;
      _queue_task_id bigint;
      _next_at timestamptz;
      _next_task_id bigint;
    begin
      if _task_id is null then
        return internal.validation_failure(%9$L || ' must be a positive integer');
      end if;
      -- The check's statement only when it raises (the setting is read in an expression).
      if current_setting('transaction_isolation') <> 'read committed' then
        perform internal.assert_read_committed(_p.supervisor);
      end if;
      -- Lock, then read: facts read after the lock wait include what the last holder
      -- committed. FOR NO KEY UPDATE: inserting a fact that references the root takes FOR
      -- KEY SHARE, which does not wait on it.
      perform 1 from %1$I.%2$I t where t.%9$I = _task_id for no key update;
      if not found then
        return internal.validation_failure(%2$L || ' ' || _task_id || ' not found');
      end if;
      _facts := %1$I.%12$I(_task_id);
      -- An attempt the queue gave up on is among the outstanding ones: closed with a
      -- failure, then the facts read again.
      if _facts.num_outstanding > 0 and %1$I.%13$I(_task_id) > 0 then
        _facts := %1$I.%12$I(_task_id);
      end if;

      if _facts.has_task_succeeded then
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.task_failure is not null then
        return jsonb_build_object('status', _facts.task_failure);
      end if;
      if _facts.has_success then
        insert into %1$I.%7$I (%9$I) values (_task_id) on conflict do nothing;
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.has_unknown_outcome then
        insert into %1$I.%8$I (%9$I, reason) values (_task_id, 'delivery_outcome_unknown') on conflict do nothing;
        return jsonb_build_object('status', 'delivery_outcome_unknown');
      end if;
      if _facts.num_failures >= _p.max_attempts then
        insert into %1$I.%8$I (%9$I, reason) values (_task_id, 'max_attempts_reached') on conflict do nothing;
        return jsonb_build_object('status', 'max_attempts_reached',
                                  'payload', jsonb_build_object('num_failures', _facts.num_failures));
      end if;
      if _facts.num_runs >= _p.max_supervisor_runs then
        insert into %1$I.%8$I (%9$I, reason) values (_task_id, 'run_limit_reached') on conflict do nothing;
        return jsonb_build_object('status', 'run_limit_reached',
                                  'payload', jsonb_build_object('num_runs', _facts.num_runs));
      end if;

      if _facts.num_outstanding = 0 then
        -- The attempt's id is drawn first (the task's payload names it), its row written
        -- after the enqueue (it names the queue task).
        _attempt_id := nextval(pg_get_serial_sequence(%19$L, %10$L));
        _queue_task_id := queues.enqueue_internal(_p.task_type, coalesce(%18$s, '{}') || jsonb_build_object(
          'task_type', _p.task_type,
          %9$L, _task_id,
          %10$L, _attempt_id,
          'before_handler', _p.before_handler,
          'success_handler', _p.success_handler,
          'error_handler', _p.error_handler),
          -- One run: the process retries through a new attempt, never a task retry
          -- (a retried send would call the provider again outside the process's count).
          _max_attempts => 1);
        insert into %1$I.%4$I (%10$I, %9$I, task_id) overriding system value
        values (_attempt_id, _task_id, _queue_task_id);
      end if;
      -- While its provider throttles the channel (queues.throttled_until,
      -- sql/queues/throttle.sql), the channel task waits for the claim: the next check is
      -- not before the throttle ends, so a long throttle (a daily quota) does not use up
      -- the process's runs.
      _next_at := greatest(now() + internal.backoff(_facts.num_runs, _p.backoff_cap_seconds),
                           queues.throttled_until('task_type', _p.task_type));
      _next_task_id := internal.enqueue_supervisor_run(_p.supervisor, %9$L, _task_id, _next_at);
      -- The run, with the run it scheduled: the success handler wakes that one.
      insert into %1$I.%3$I (%9$I, next_task_id) values (_task_id, _next_task_id);
      return internal.supervisor_progress(
        case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
        jsonb_build_object(%10$L, _attempt_id, 'next_check_at', _next_at));
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%15$I(_attempt_id bigint, _verb text)
      returns text
      language plpgsql stable
      %20$s
    as $body$
    declare
      _root_id bigint;
      _has_outcome boolean;
      _facts record;
    begin
      select a.%9$I,
             (select true from %1$I.%5$I s where s.%10$I = a.%10$I) is not null
             or (select true from %1$I.%6$I f where f.%10$I = a.%10$I) is not null
        into _root_id, _has_outcome
        from %1$I.%4$I a where a.%10$I = _attempt_id;
      if _root_id is null then
        return %4$L || ' ' || _attempt_id || ' not found';
      end if;
      if _has_outcome then
        return %4$L || ' ' || _attempt_id || ' already has an outcome; not ' || _verb || ' it again';
      end if;
      _facts := %1$I.%12$I(_root_id);
      if _facts.has_task_succeeded or _facts.task_failure is not null then
        return %2$L || ' ' || _root_id || ' already ended (' || coalesce(_facts.task_failure, 'succeeded')
               || '); not ' || _verb || ' attempt ' || _attempt_id;
      end if;
      return null;
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%16$I(payload jsonb)
      returns jsonb
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', %10$L);
      _root_id bigint;
      _next_task_id bigint;
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || %10$L || ' must be a positive integer');
      end if;
      select a.%9$I into _root_id from %1$I.%4$I a where a.%10$I = _attempt_id;
      if _root_id is null then
        return internal.validation_failure(%4$L || ' ' || _attempt_id || ' not found');
      end if;
      insert into %1$I.%5$I (%10$I, worker_payload) values (_attempt_id, payload -> 'worker_payload')
      on conflict do nothing;
      if found then
        -- Wake the supervisor, so the process ends now rather than at its backoff. With
        -- the root's lock (never waited for: a run under way holds it), no run is under
        -- way, and any run that starts waits for this transaction to commit, then sees the
        -- success. So the run the last run scheduled (runs hold the lock one after the
        -- other, so its task has the highest id) will see it: made due now when no worker
        -- has taken it yet, left to its worker when one has. A new run due now is enqueued
        -- when a run holds the lock (it may have read the facts already) or that task is
        -- no longer pending (it ended without scheduling another).
        perform 1 from %1$I.%2$I t where t.%9$I = _root_id for no key update skip locked;
        if found then
          select max(r.next_task_id) into _next_task_id from %1$I.%3$I r where r.%9$I = _root_id;
        end if;
        if _next_task_id is null or queues.run_task_now(_next_task_id) = 'not_pending' then
          perform internal.enqueue_channel_supervisor(internal.get_channel_process(%1$L, %11$L), _root_id, null);
        end if;
      end if;
      return jsonb_build_object('success', true);
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%17$I(payload jsonb)
      returns jsonb
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', %10$L);
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || %10$L || ' must be a positive integer');
      end if;
      perform 1 from %1$I.%4$I a where a.%10$I = _attempt_id;
      if not found then
        return internal.validation_failure(%4$L || ' ' || _attempt_id || ' not found');
      end if;
      insert into %1$I.%6$I (%10$I, error_message)
      select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
       where (select true from %1$I.%5$I s where s.%10$I = _attempt_id) is null
      on conflict do nothing;
      return jsonb_build_object('success', true);
    end;
    $body$
    $f$, variadic _names);

  foreach _suffix in array _suffixes loop
    execute format('revoke execute on function %s from public',
                   (select p.oid::regprocedure from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                     where n.nspname = _schema and p.proname = _name || _suffix));
  end loop;
end;
$$;

-- The registered process; raises 22023 when there is none.
create or replace function internal.get_channel_process(_schema text, _name text)
  returns internal.channel_process
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p internal.channel_process;
begin
  select * into _p from internal.channel_process p where p.process_schema = _schema and p.process_name = _name;
  if not found then
    raise exception 'no channel process %.% is registered', _schema, _name using errcode = '22023';
  end if;
  return _p;
end;
$$;

-- The generic entry points: each calls the process's own function
-- (internal.create_channel_process_functions). Their contracts are documented here.

-- Facts ---------------------------------------------------------------------------------

-- Everything a supervisor decides on, for one root. An attempt with both outcomes counts
-- as succeeded; an outstanding attempt has neither.
create or replace function internal.channel_process_facts(
  _schema text, _name text, _root_id bigint,
  out has_task_succeeded  boolean,
  out task_failure        text,
  out has_success         boolean,
  out num_attempts        integer,
  out num_failures        integer,
  out num_outstanding     integer,
  out num_runs            integer,
  out has_unknown_outcome boolean
)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('select * from %I.%I($1)', _schema, _name || '_process_facts')
  into has_task_succeeded, task_failure, has_success, num_attempts, num_failures, num_outstanding,
       num_runs, has_unknown_outcome
  using _root_id;
end;
$$;

-- Effects -------------------------------------------------------------------------------

-- Enqueues a supervisor run of the root at _at (NULL: now).
create or replace function internal.enqueue_channel_supervisor(_p internal.channel_process, _root_id bigint, _at timestamptz)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform internal.enqueue_supervisor_run(_p.supervisor, _p.process_name || '_task_id', _root_id, _at);
end;
$$;

-- Supervisor ----------------------------------------------------------------------------

-- The supervisor of a registered channel process, in the fixed order: validate, READ
-- COMMITTED, lock the root, facts (after closing the outstanding attempts the queue gave
-- up on, when there are outstanding attempts), terminal checks
-- (ended; a succeeded attempt; an unknown outcome; failures at max_attempts; runs at
-- max_supervisor_runs), then schedule an attempt when none is in flight, enqueue the next
-- run after 5 s · 2^(runs − 1), capped at backoff_cap_seconds, and record the run with
-- the id of that next run's task (the success handler wakes it).
-- Returns the envelopes documented in docs/adding-a-business-process.md.
create or replace function internal.run_channel_supervisor(_schema text, _name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb;
begin
  execute format('select %I.%I($1)', _schema, _name || '_supervise') into _result using payload;
  return _result;
end;
$$;

-- Handlers ------------------------------------------------------------------------------

-- Why a before_handler must not act on attempt _attempt_id, or NULL when it may: the
-- attempt already has an outcome (a redelivery), or its process ended. _verb names the
-- side effect in messages ('sending', 'deleting').
create or replace function internal.channel_attempt_refusal(_schema text, _name text, _attempt_id bigint, _verb text default 'sending')
  returns text
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _refusal text;
begin
  execute format('select %I.%I($1, $2)', _schema, _name || '_attempt_refusal') into _refusal using _attempt_id, _verb;
  return _refusal;
end;
$$;

-- The success handler: body {original_payload, worker_payload}; records the attempt's
-- success and wakes the supervisor, so the process ends now rather than at its next
-- backoff (5 s or more later): the run the last run scheduled is made due now
-- (queues.run_task_now, recorded in queues.task_run_now) while no worker has taken it, or
-- left to the worker that has; a new run due now is enqueued only when a run holds the
-- root at that moment or the scheduled run is no longer pending. A second delivery
-- changes nothing. A failure wakes nobody: the backoff is the pause before the next
-- attempt.
create or replace function internal.record_channel_attempt_success(_schema text, _name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb;
begin
  execute format('select %I.%I($1)', _schema, _name || '_record_attempt_success') into _result using payload;
  return _result;
end;
$$;

-- The error handler: body {original_payload, error}; records the attempt's failure unless
-- it succeeded. A second delivery changes nothing.
create or replace function internal.record_channel_attempt_failure(_schema text, _name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb;
begin
  execute format('select %I.%I($1)', _schema, _name || '_record_attempt_failure') into _result using payload;
  return _result;
end;
$$;
--! EndIncluded internal/channel_process.sql
--! Included comms/channel.sql
-- What the send processes of the message channels (email.sql, sms.sql) share beyond the
-- channel-process skeleton of sql/internal/channel_process.sql: their registration with
-- the named entry points the worker and apps call, checking an attempt before the
-- provider call, creating a message under an idempotency key, and the kickoff. Each
-- channel's file keeps what differs: its limits, its message's fields and their checks,
-- and the provider payload.
--
-- A channel <c> (comms.message.channel: 'email', 'sms') has its message table
-- comms.<c>_message (message_id, then its fields) and the channel process comms.send_<c>
-- (registered in internal.channel_process; root comms.send_<c>_task, keyed by
-- send_<c>_task_id, one per message_id). Table and column names reach SQL only through
-- format('%I'), from a registered process and tables found in the catalog. The
-- statements below are dynamic, so planned on each call: they run once per message (an
-- app's send, a kickoff) or once per provider call, never in a loop over tasks; the
-- entry points comms.register_message_channel makes are static SQL. Owner only: they run
-- inside the channels' definer functions, or in migrations.

-- Registers the send process of _channel (internal.register_channel_process, with the
-- limits given) and makes its entry points, static SQL over its tables, each a thin
-- wrapper over the generic block named (the last three call the process's own function
-- that block runs, comms.send_<c>_supervise, ..._record_attempt_success,
-- ..._record_attempt_failure, directly):
--   comms.send_<c>_supervisor_facts(_send_<c>_task_id)  what the supervisor decides on,
--                                     with the root's scheduled_at and until when the
--                                     channel's provider throttles it (throttled_until,
--                                     NULL when it does not: sql/queues/throttle.sql)
--                                     (select * from ...(123))
--   comms.send_<c>_supervisor(payload)  db_function: internal.run_channel_supervisor
--   comms.record_<c>_success(payload)   success_handler: internal.record_channel_attempt_success
--   comms.record_<c>_failure(payload)   error_handler: internal.record_channel_attempt_failure
--   comms.kickoff_send_<c>(_message_id, _scheduled_at)  comms.kickoff_channel_send
-- The before_handler, comms.get_<c>_payload, is the channel's own (its file writes it).
-- Their grants are in sql/comms/privileges.sql. Raises 22023 naming a missing table.
create or replace function comms.register_message_channel(
  _channel text, _max_attempts integer, _max_supervisor_runs integer, _backoff_cap_seconds integer
) returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _process text := 'send_' || _channel;
  -- The names every template below refers to, by position.
  _names text[] := array[
    'comms',                                      -- 1
    _process || '_task',                          -- 2  the root
    _process || '_task_id',                       -- 3  its key
    '_' || _process || '_task_id',                -- 4  the facts' argument
    _process,                                     -- 5  the process, as a literal
    _process || '_supervisor_facts',              -- 6
    _process || '_supervisor',                    -- 7
    'record_' || _channel || '_success',          -- 8
    'record_' || _channel || '_failure',          -- 9
    'kickoff_' || _process,                       -- 10
    _channel,                                     -- 11 the channel, as a literal
    -- 12 to 14: the process's own functions (internal.create_channel_process_functions),
    -- which the entry points call directly rather than through the generic blocks'
    -- dynamic SQL (a statement and a plan fewer per call)
    _process || '_supervise',                     -- 12
    _process || '_record_attempt_success',        -- 13
    _process || '_record_attempt_failure'         -- 14
  ];
  _table text;
begin
  foreach _table in array array[_channel || '_message', _process || '_task'] loop
    if to_regclass(format('%I.%I', 'comms', _table)) is null then
      raise exception 'channel %: table comms.% does not exist', _channel, _table using errcode = '22023';
    end if;
  end loop;

  perform internal.register_channel_process('comms', _process, _channel,
    _supervisor => format('%I.%I', 'comms', _names[7]),
    _before_handler => format('%I.%I', 'comms', 'get_' || _channel || '_payload'),
    _success_handler => format('%I.%I', 'comms', _names[8]),
    _error_handler => format('%I.%I', 'comms', _names[9]),
    _max_attempts => _max_attempts, _max_supervisor_runs => _max_supervisor_runs,
    _backoff_cap_seconds => _backoff_cap_seconds);

  execute format($f$
create or replace function %1$I.%6$I(
  %4$I bigint,
  out has_task_succeeded  boolean,
  out task_failure        text,
  out has_success         boolean,
  out num_attempts        integer,
  out num_failures        integer,
  out num_outstanding     integer,
  out num_runs            integer,
  out scheduled_at        timestamptz,
  out has_unknown_outcome boolean,
  out throttled_until     timestamptz
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $body$
  select f.has_task_succeeded, f.task_failure, f.has_success, f.num_attempts, f.num_failures,
         f.num_outstanding, f.num_runs, t.scheduled_at, f.has_unknown_outcome,
         queues.throttled_until('task_type', %11$L)
    from %1$I.%2$I t
   cross join lateral internal.channel_process_facts(%1$L, %5$L, t.%3$I) f
   where t.%3$I = %4$I
$body$;

create or replace function %1$I.%7$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select %1$I.%12$I(payload) $body$;

create or replace function %1$I.%8$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select %1$I.%13$I(payload) $body$;

create or replace function %1$I.%9$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select %1$I.%14$I(payload) $body$;

create or replace function %1$I.%10$I(
  _message_id bigint,
  _scheduled_at timestamptz default null,
  out %3$I bigint,
  out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select k.task_id, k.validation_failure_message from comms.kickoff_channel_send(%11$L, _message_id, _scheduled_at) k $body$;
$f$, variadic _names);

  execute format('revoke execute on function %1$I.%2$I(bigint), %1$I.%3$I(jsonb), %1$I.%4$I(jsonb), %1$I.%5$I(jsonb),
                  %1$I.%6$I(bigint, timestamptz) from public',
                 'comms', _names[6], _names[7], _names[8], _names[9], _names[10]);
end;
$$;

-- The channel process of _channel and its message table, checked: raises 22023 for a
-- channel without one.
create or replace function comms.channel_send_process(_channel text, out process internal.channel_process,
                                                      out message_table text)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if to_regclass(format('%I.%I', 'comms', _channel || '_message')) is null then
    raise exception 'channel %: table comms.%_message does not exist', _channel, _channel using errcode = '22023';
  end if;
  process := internal.get_channel_process('comms', 'send_' || _channel);
  message_table := _channel || '_message';
end;
$$;

-- For a before_handler: the attempt its payload names ({send_<c>_attempt_id, ...}), or
-- the validation failure to return instead: the id missing or not a positive integer, or
-- the attempt refused (internal.channel_attempt_refusal: it has an outcome already, or
-- its process ended). Exactly one of the two is set.
create or replace function comms.channel_attempt(_channel text, payload jsonb,
                                                 out attempt_id bigint, out refusal jsonb)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _process text := 'send_' || _channel;
  _refusal text;
begin
  attempt_id := internal.id_from_payload(payload, _process || '_attempt_id');
  if attempt_id is null then
    refusal := internal.validation_failure(_process || '_attempt_id must be a positive integer');
    return;
  end if;
  _refusal := internal.channel_attempt_refusal('comms', _process, attempt_id);
  if _refusal is not null then
    attempt_id := null;
    refusal := internal.validation_failure(_refusal);
  end if;
end;
$$;

-- For an app's send: a new comms.message of _channel under _idempotency_key (NULL: none).
-- created: message_id is new, and the caller stores its comms.<c>_message row and kicks
-- it off. Otherwise the key was used before: message_id and task_id are the first
-- request's, or, when that was a message on another channel, both NULL with a
-- validation_failure_message; the caller returns them and writes nothing more.
create or replace function comms.create_channel_message(
  _channel text,
  _idempotency_key text,
  out created boolean,
  out message_id bigint,
  out task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _root text := ((comms.channel_send_process(_channel)).process).process_name || '_task';
begin
  insert into comms.message (channel, idempotency_key) values (_channel, _idempotency_key)
  on conflict (idempotency_key) do nothing
  returning message.message_id into message_id;
  created := message_id is not null;
  if created then
    return;
  end if;

  -- A repeated request: what the first one created.
  execute format('select m.message_id, t.%3$I from comms.message m left join %1$I.%2$I t on t.message_id = m.message_id
                   where m.idempotency_key = $1',
                 'comms', _root, _root || '_id')
    into message_id, task_id using _idempotency_key;
  if task_id is null then
    message_id := null;
    validation_failure_message := 'idempotency_key was already used for a message on another channel';
  end if;
end;
$$;

-- Starts the send process of the existing _channel message _message_id: the root task and
-- the first supervisor run, at _scheduled_at (NULL: now). A second call for the same
-- message returns the existing task and enqueues nothing. Bad input: a
-- validation_failure_message and nothing written.
create or replace function comms.kickoff_channel_send(
  _channel text,
  _message_id bigint,
  _scheduled_at timestamptz,
  out task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p record;
  _at timestamptz := coalesce(_scheduled_at, now());
  _root text;
  _found boolean;
begin
  select * into _p from comms.channel_send_process(_channel);
  _root := (_p.process).process_name || '_task';
  if _message_id is null then
    validation_failure_message := 'message_id is required';
    return;
  end if;
  execute format('select exists (select 1 from %I.%I m where m.message_id = $1)', 'comms', _p.message_table)
    into _found using _message_id;
  if not _found then
    validation_failure_message := format('%s message %s not found', _channel, _message_id);
    return;
  end if;

  execute format('insert into %1$I.%2$I (message_id, scheduled_at) values ($1, $2)
                  on conflict (message_id) do nothing returning %3$I', 'comms', _root, _root || '_id')
    into task_id using _message_id, _at;

  if task_id is null then
    -- Already kicked off: its supervisor is running. No-op.
    execute format('select t.%3$I from %1$I.%2$I t where t.message_id = $1', 'comms', _root, _root || '_id')
      into task_id using _message_id;
    return;
  end if;

  perform internal.enqueue_channel_supervisor(_p.process, task_id, _at);
end;
$$;
--! EndIncluded comms/channel.sql
select comms.register_message_channel(substr(p.process_name, 6), p.max_attempts, p.max_supervisor_runs,
                                      p.backoff_cap_seconds)
  from internal.channel_process p
 where p.process_schema = 'comms' and p.process_name like 'send\_%'
 order by p.process_name;
select internal.create_channel_process_functions(p.process_schema, p.process_name)
  from internal.channel_process p
 where not (p.process_schema = 'comms' and p.process_name like 'send\_%')
 order by p.process_schema, p.process_name;

-- (Grants: queues/privileges.sql and admin/privileges.sql, included once by 900-privileges.sql.)

--! split: 400-task-dependencies.sql
set local lock_timeout = '5s';

-- Task dependencies (fan-in): a task enqueued with depends_on waits until every task it
-- names has ended; it runs when all succeeded, and fails when one did not
-- (sql/queues/dependencies.sql). The fact: one row per (dependent, dependency), written
-- with the dependent in its enqueue.
create table if not exists queues.task_dependency (
  task_id bigint not null,
  depends_on_task_id bigint not null,
  created_at timestamptz not null default now(),
  primary key (task_id, depends_on_task_id),
  check (task_id <> depends_on_task_id)
);
comment on table queues.task_dependency is
  'Append-only: task task_id was enqueued to wait for task depends_on_task_id (an older task). Written by the enqueue; read by queues.release_dependents when a dependency ends.';
drop trigger if exists forbid_update on queues.task_dependency;
create trigger forbid_update before update on queues.task_dependency
  for each statement execute function queues.forbid_fact_update();
-- The dependents of a task that ends: probed once per completed task.
create index if not exists task_dependency_depends_on on queues.task_dependency (depends_on_task_id, task_id);

--! Included queues/dependencies.sql
-- Task dependencies (fan-in). A task enqueued with depends_on (queues.enqueue's
-- _depends_on, a "depends_on" field of queues.enqueue_many's elements) waits until every
-- task it names has ended:
--
--   every dependency succeeded            the task becomes ready (it runs at its scheduled time)
--   a dependency failed, was cancelled,   the task is completed 'failed' with an error naming
--   abandoned or validation_failed        that dependency and its outcome; its own dependents
--                                         fail in turn
--
-- Dependencies must be tasks that exist when the enqueue runs (23503 otherwise, nothing
-- written), and not the task itself nor a task of the same call (22023): every edge points
-- from a new task to an older one, so no cycle can be formed. A dependency that has already
-- ended counts at once: succeeded is done; any other outcome fails the new task in its
-- enqueue (the enqueue answers its id; the task reads 'failed' with the error).
--
-- Facts and structures: queues.task_dependency holds the edges (append-only, written with
-- the dependent; a history table partitioned by the dependent's id, so an edge is kept
-- while its dependent is, and leaves with the dependent's set). A waiting task's claim-index row has scheduled_at and available_at
-- 'infinity' and no lease: the claim never takes it (scheduled_at <= now fails in the
-- ready index, past the ready rows of its priority), nothing in the claim changes, and
-- admin.pending_state calls it 'waiting'. It can be cancelled like any pending task.
--
-- Release, without polling: the row-level triggers release_dependents on
-- queues.task_completed (every end but a plain success: a failure, a cancel, abandonment
-- in the claim or an interruption, replacement of a unique task; one task per row) and on
-- queues.completion_round (the plain successes, many tasks to a row, set-based) pass the
-- ended tasks and their outcomes to queues.release_dependents, which readies or fails the
-- dependents whose dependencies have all ended. An end whose tasks have no dependents
-- pays one scan of the dependency index (of each partition above its oldest task), and
-- nothing when no dependency was ever recorded (one read of each empty partition); a
-- statement that writes no end fires nothing.
--
-- Races. An enqueue locks its dependencies' claim-index rows FOR KEY SHARE (in task id
-- order) before it reads whether they ended, in a later statement: every way a task ends
-- locks that row FOR UPDATE or deletes it in the transaction that writes its completion,
-- so the two take turns. If the ending commits first, the enqueue then sees its
-- completion; if the enqueue does, the ending's trigger (whose statements take their
-- snapshots after the row lock was granted) sees the new edge. Two dependencies of one
-- task ending at once take turns on the dependent's row (locked FOR NO KEY UPDATE, which
-- an enqueue's KEY SHARE does not conflict with), and the second reads the first's
-- completion. A claim skips a dependency row an enqueue holds until that enqueue's
-- transaction ends, as it skips any locked row; a heartbeat does not wait for it. An
-- enqueue in a long transaction holds up its dependencies' completions until it commits.

-- Records the dependencies of tasks just inserted in this transaction, and decides for each
-- whether it waits, is ready (no change) or fails at once. Parallel arrays, one element
-- per edge: the dependent, the dependency and a label that prefixes the dependent's
-- errors ('' for a single enqueue, 'tasks[i]: ' for a batch). _new_task_ids: every task
-- the calling enqueue inserted (a dependency on one of them is refused). Raises, before
-- anything of its own is written (the caller's inserts roll back with it): a null
-- dependency (22004), the task itself or a task of the same call (22023), more than 100
-- dependencies of one task (54000), a task that does not exist (23503).
-- No grants: called by the enqueue functions.
create or replace function queues.add_task_dependencies(
  _task_ids     bigint[],
  _depends_on   bigint[],
  _labels       text[],
  _new_task_ids bigint[]
) returns void
  language plpgsql volatile
  -- Every read is by key: planned once per connection, never as a scan of a table that
  -- was small then (sql/CONVENTIONS.md).
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _bad record;
  _deps bigint[];
begin
  select e.label into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   where e.dep is null limit 1;
  if found then
    raise exception '%depends_on must not contain null', _bad.label using errcode = '22004';
  end if;
  select e.label, e.task_id, e.dep into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   where e.dep = e.task_id limit 1;
  if found then
    raise exception '%a task cannot depend on itself (task %)', _bad.label, _bad.task_id using errcode = '22023';
  end if;
  select e.label, e.dep into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   where e.dep = any (_new_task_ids) limit 1;
  if found then
    raise exception '%depends_on names task %, enqueued by the same call', _bad.label, _bad.dep
      using errcode = '22023',
            hint = 'A task can depend only on tasks that exist before its enqueue, so dependencies never form a cycle.';
  end if;
  select e.label, count(distinct e.dep) as n into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   group by e.task_id, e.label having count(distinct e.dep) > 100 limit 1;
  if found then
    raise exception '%depends_on names % tasks, over the limit of 100', _bad.label, _bad.n using errcode = '54000';
  end if;
  -- Each dependency exists: a primary-key probe of queues.task per distinct id.
  _deps := array(select distinct d from unnest(_depends_on) d order by d);
  select e.label, e.dep into _bad
    from unnest(_task_ids, _depends_on, _labels) with ordinality e(task_id, dep, label, n)
   where e.dep = any (_deps)
     and not coalesce((select true from queues.task t where t.task_id = e.dep), false)
   order by e.n limit 1;
  if found then
    raise exception '%depends_on names task %, which does not exist', _bad.label, _bad.dep using errcode = '23503';
  end if;

  -- The lock that orders this enqueue with the dependencies' endings (see the top of the
  -- file): a pending dependency's claim-index row, FOR KEY SHARE, in task id order.
  perform from queues.task_pending p
    where p.task_id = any (_deps)
    order by p.task_id
      for key share;

  insert into queues.task_dependency (task_id, depends_on_task_id)
  select distinct e.task_id, e.dep from unnest(_task_ids, _depends_on) e(task_id, dep)
  on conflict do nothing;

  -- A statement after the lock: a dependency that ended meanwhile is seen ended.
  perform queues.settle_new_dependents(array(select distinct t from unnest(_task_ids) t));
end;
$$;

-- For tasks just enqueued with dependencies (their claim-index rows inserted by this
-- transaction): fails at once those with a dependency that ended other than succeeded;
-- makes those with a dependency still pending wait; the rest ready at their scheduled time.
-- (queues.enqueue_task inserts the row waiting already; a batch inserts it ready and moves
-- it here: until a claim's scan passes it, the entry it leaves in the ready index costs
-- that scan a heap visit.) No grants.
create or replace function queues.settle_new_dependents(_task_ids bigint[])
  returns void
  language plpgsql volatile
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _failed record;
  _fail_ids bigint[];
  _messages text[];
  _waiting bigint[];
  _ready bigint[];
begin
  select coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is not null), '{}'),
         coalesce(array_agg(format('dependency task %s ended %s', v.failed_dep, v.failed_outcome) order by v.task_id)
                    filter (where v.failed_dep is not null), '{}'),
         coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is null and v.pending), '{}'),
         coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is null and not v.pending), '{}')
    into _fail_ids, _messages, _waiting, _ready
    from queues.dependency_verdicts(_task_ids, '{}', '{}') v;

  if cardinality(_waiting) > 0 then
    update queues.task_pending p
       set scheduled_at = 'infinity', available_at = 'infinity'
     where p.task_id = any (_waiting) and p.available_at <> 'infinity';
  end if;
  if cardinality(_ready) > 0 then
    update queues.task_pending p
       set scheduled_at = t.scheduled_at, available_at = t.scheduled_at
      from queues.task t
     where p.task_id = any (_ready) and p.available_at = 'infinity' and t.task_id = p.task_id;
  end if;
  if cardinality(_fail_ids) > 0 then
    perform queues.fail_dependents(_fail_ids, _messages);
  end if;
end;
$$;

-- Per task of _task_ids, from its dependencies: the first (lowest id) that ended other than
-- succeeded and its outcome, and whether any is still pending. A dependency in _ended_ids
-- ended with the outcome at the same position of _ended_outcomes (what a completion
-- passes); any other counts as ended unsuccessfully when queues.task_completed says so
-- (task_completed_unsuccessful_task_idx), as pending while it has a claim-index row, and
-- as succeeded otherwise (so a success recorded elsewhere than queues.task_completed counts
-- too). No grants.
create or replace function queues.dependency_verdicts(_task_ids bigint[], _ended_ids bigint[], _ended_outcomes text[])
  returns table (task_id bigint, failed_dep bigint, failed_outcome text, pending boolean)
  language sql stable
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
  select x.task_id,
         (array_agg(x.depends_on_task_id order by x.depends_on_task_id) filter (where x.outcome <> 'succeeded'))[1],
         (array_agg(x.outcome order by x.depends_on_task_id) filter (where x.outcome <> 'succeeded'))[1],
         coalesce(bool_or(x.outcome is null), false)
    from (
      select d.task_id, d.depends_on_task_id,
             coalesce(
               (select e.outcome from unnest(_ended_ids, _ended_outcomes) e(task_id, outcome)
                 where e.task_id = d.depends_on_task_id and e.outcome is not null limit 1),
               (select c.outcome from queues.task_completed c
                 where c.task_id = d.depends_on_task_id and c.outcome <> 'succeeded'),
               case when (select true from queues.task_pending p where p.task_id = d.depends_on_task_id) then null
                    else 'succeeded' end) as outcome
        from queues.task_dependency d
       -- A primary-key range per dependent.
       where d.task_id = any (_task_ids)
    ) x
   group by x.task_id
$$;

-- Completes pending tasks 'failed' because of a dependency, each with its error message
-- (queues.error). Their claim-index rows are deleted first, in task id order, and the
-- completions written after: the delete waits for an enqueue that holds one of them FOR
-- KEY SHARE (a task depending on this one), so that the completion's trigger sees that
-- enqueue's edge. The completions' trigger fails their own dependents in turn. No grants.
create or replace function queues.fail_dependents(_task_ids bigint[], _messages text[])
  returns void
  language plpgsql volatile
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _gone bigint[];
begin
  with removed as (
    delete from queues.task_pending p
     where p.task_id = any (_task_ids)
    returning p.task_id, p.task_type
  ),
  errors as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select r.task_id, null, m.message
      from removed r
      join unnest(_task_ids, _messages) m(task_id, message) on m.task_id = r.task_id
  )
  select array_agg(r.task_id) into _gone from removed r;
  insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
  select p.task_id, null, now(), 'failed', t.task_type
    from unnest(_gone) p(task_id)
    join queues.task t on t.task_id = p.task_id
  order by p.task_id;
end;
$$;

-- Releases the tasks that wait for _task_ids, which have just ended with _outcomes (one per
-- task: succeeded, failed, abandoned, cancelled, validation_failed). Of their waiting
-- dependents (claim-index rows locked FOR NO KEY UPDATE, in task id order), those whose
-- dependencies have all succeeded become ready at their scheduled time (and wake the
-- workers when due within a minute); those with a dependency that ended otherwise are
-- completed 'failed' with the error 'dependency task N ended <outcome>'; the rest wait on.
-- Returns how many it released or failed. Called by the trigger on queues.task_completed
-- (and by any other record of tasks ending); owner only.
create or replace function queues.release_dependents(_task_ids bigint[], _outcomes text[])
  returns integer
  language plpgsql volatile
  security definer
  -- Every read is by key (one scan of the dependency index for all of _task_ids, then
  -- primary keys): planned once per connection, never as a scan of a table that was small
  -- then (sql/CONVENTIONS.md).
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _waiting bigint[];
  _ready bigint[];
  _fail_ids bigint[];
  _messages text[];
  _due boolean;
  _oldest bigint;
begin
  if _task_ids is null or cardinality(_task_ids) = 0 then
    return 0;
  end if;
  _oldest := (select min(x) from unnest(_task_ids) x);
  if _outcomes is null or cardinality(_outcomes) <> cardinality(_task_ids) then
    raise exception 'outcomes must have one element per task (% tasks, % outcomes)',
      cardinality(_task_ids), coalesce(cardinality(_outcomes), 0) using errcode = '22023';
  end if;
  -- The waiting dependents, locked: a concurrent release of the same dependent waits here,
  -- and the next statement (a new snapshot) then sees the other dependency's completion.
  _waiting := array(
    select p.task_id
      from queues.task_pending p
     where p.task_id = any (array(select d.task_id from queues.task_dependency d
                                   where d.depends_on_task_id = any (_task_ids)
                                     -- A dependent is newer than its dependency, and the
                                     -- edge lives in the dependent's history set: the
                                     -- older sets' partitions are pruned at run time.
                                     and d.task_id > _oldest))
       and p.available_at = 'infinity' and p.current_lease_id is null
     order by p.task_id
       for no key update of p);
  if cardinality(_waiting) = 0 then
    return 0;
  end if;

  select coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is null and not v.pending), '{}'),
         coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is not null), '{}'),
         coalesce(array_agg(format('dependency task %s ended %s', v.failed_dep, v.failed_outcome) order by v.task_id)
                    filter (where v.failed_dep is not null), '{}')
    into _ready, _fail_ids, _messages
    from queues.dependency_verdicts(_waiting, _task_ids, _outcomes) v;

  if cardinality(_ready) > 0 then
    with released as (
      update queues.task_pending p
         set scheduled_at = t.scheduled_at, available_at = t.scheduled_at
        from queues.task t
       where p.task_id = any (_ready) and t.task_id = p.task_id
      returning p.scheduled_at
    )
    select bool_or(r.scheduled_at <= now() + interval '1 minute') into _due from released r;
    if _due then
      perform pg_notify('queues_task_ready', '');
    end if;
  end if;
  if cardinality(_fail_ids) > 0 then
    perform queues.fail_dependents(_fail_ids, _messages);
  end if;
  return cardinality(_ready) + cardinality(_fail_ids);
end;
$$;

-- The triggers on a task's end. Row level, so that a statement that ends no task in a
-- table (every completion call writes to both, most of them nothing to one) runs nothing:
-- on queues.task_completed (every end but a plain success) one call per task ended; on
-- queues.completion_round one per round (a round names many tasks, all succeeded). With
-- no dependency ever recorded each opens the empty partitions and returns. No SET
-- clause but the search path: they run for every end.
create or replace function queues.task_completed_release_dependents() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform from queues.task_dependency limit 1;
  if found then
    perform queues.release_dependents(array[new.task_id], array[new.outcome]);
  end if;
  return null;
end;
$$;

create or replace function queues.completion_round_release_dependents() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform from queues.task_dependency limit 1;
  if found then
    perform queues.release_dependents(new.task_ids,
                                      array_fill('succeeded'::text, array[cardinality(new.task_ids)]));
  end if;
  return null;
end;
$$;

-- The dependencies of a task, in task id order, with how each ended and the result it
-- recorded (queues.task_result, the newest): outcome is null while it is pending, and
-- 'succeeded' for a task that ended without an unsuccessful completion. For the worker
-- (ctx.dependencies() in a processor), apps and the API. An unknown task has none.
create or replace function queues.list_task_dependencies(_task_id bigint)
  returns table (task_id bigint, task_type text, outcome text, completed_at timestamptz, result jsonb)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select d.depends_on_task_id, t.task_type,
         case when (select true from queues.task_pending p where p.task_id = d.depends_on_task_id) then null
              else coalesce(c.outcome, 'succeeded') end,
         c.completed_at,
         (select r.result from queues.task_result r
           where r.task_id = d.depends_on_task_id order by r.task_lease_id desc limit 1)
    from queues.task_dependency d
    join queues.task t on t.task_id = d.depends_on_task_id
    left join lateral queues.task_end_of(d.depends_on_task_id) c on true
   where d.task_id = _task_id
   order by d.depends_on_task_id
$$;

-- For admin.get_task: {dependencies: [{task_id, task_type, outcome}], dependents:
-- [{task_id, task_type, state}]} (at most 100 dependents, oldest first). No grants.
create or replace function queues.task_dependency_facts(_task_id bigint, _now timestamptz)
  returns jsonb
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object(
    'dependencies', coalesce((
      select jsonb_agg(jsonb_build_object('task_id', l.task_id, 'task_type', l.task_type, 'outcome', l.outcome,
                                          'completed_at', l.completed_at) order by l.task_id)
        from queues.list_task_dependencies(_task_id) l), '[]'::jsonb),
    'dependents', coalesce((
      select jsonb_agg(jsonb_build_object('task_id', x.task_id, 'task_type', x.task_type, 'state', x.state)
                       order by x.task_id)
        from (
          select d.task_id, t.task_type,
                 coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now),
                          'succeeded') as state
            from queues.task_dependency d
            join queues.task t on t.task_id = d.task_id
            left join queues.task_pending p on p.task_id = d.task_id
            left join lateral queues.task_end_of(d.task_id) c on true
           where d.depends_on_task_id = _task_id
           order by d.task_id
           limit 100
        ) x), '[]'::jsonb))
$$;
--! EndIncluded queues/dependencies.sql

-- Every end of a task releases (or fails) the tasks that wait for it: a row-level
-- trigger on each table a task's end is written to (a statement that writes no row there
-- fires nothing). On the partitioned parents, so every partition has it.
-- (create or replace trigger takes SHARE ROW EXCLUSIVE, not ACCESS EXCLUSIVE.)
create or replace trigger release_dependents after insert on queues.task_completed
  for each row execute function queues.task_completed_release_dependents();
create or replace trigger release_dependents after insert on queues.completion_round
  for each row execute function queues.completion_round_release_dependents();

-- Enqueues take _depends_on (a trailing argument).
drop function if exists queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean);
drop function if exists queues.enqueue_internal(text, jsonb, timestamptz, integer, text, integer);
drop function if exists queues.enqueue_task(text, jsonb, timestamptz, integer, text, integer, boolean, boolean, boolean);
--! Included queues/enqueue.sql
-- queues.enqueue / queues.enqueue_many: add tasks. Apps call them through
-- @org/queue-client; they refuse internal task types (sql/queues/enqueue_permission.sql).
-- The owner's SQL (supervisors, handlers, kickoffs, schedules) calls the grant-less
-- queues.enqueue_internal. The worker never enqueues.
--
-- What one enqueue costs (BENCHMARKS.md, "where a task's time goes"): for an app, one
-- probe of queues.internal_task_type; its fields checked as plain expressions; one
-- statement that reads the task type and inserts the task and its claim-index row; one
-- pg_notify; a read of the setting queue.traceparent, and only when the caller set one
-- (tracing on), a row of queues.task_trace per task (sql/queues/trace.sql). A batch is
-- one insert statement whatever its size: the rows are checked inside it (the first bad
-- one, in input order, raises and the statement writes nothing), the task types read
-- once per call. queues.task has no foreign key to queues.task_type: it
-- locked the type's row (FOR KEY SHARE, a MultiXact once callers overlap) for every task;
-- queues.guard_task_type_in_use (triggers.sql) refuses deleting or renaming a type in use.
--
-- Wake-ups: an enqueue that adds a task due within a minute (ready now, or scheduled a
-- moment ahead, like a supervisor's next run) sends NOTIFY queues_task_ready, and
-- PostgreSQL folds identical notifications of one transaction into one at commit. A
-- worker that finds nothing ready asks when the next task is due
-- (queues.next_claim_in_ms) and looks again then; a task due later is found by a
-- worker's poll, which asks the same. A
-- notifying commit holds a database-wide lock from just before its commit record until
-- it ends, so notifying transactions commit one at a time, each waiting for its own WAL
-- flush. queues.enqueue_and_commit (for callers outside a transaction block: the
-- client's enqueue on a pool) commits the task first, without the lock, and notifies in
-- a second transaction that writes no data and so does not wait for a flush.

-- Payloads are limited so one bad caller cannot fill the table or the worker's memory.
create or replace function queues.max_payload_bytes() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 1048576 $$;

-- And so is their nesting: a payload nested deeper than queues.max_payload_depth()
-- containers (objects and arrays) is refused, since parsers that recurse (the worker's
-- among them) would run out of stack. The test is jsonb_path_exists(payload,
-- 'strict $.**{65}'), written out where it is used (65 = max_payload_depth() + 1: a
-- jsonpath level must be a literal).
create or replace function queues.max_payload_depth() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 64 $$;

-- The attempts a task gets when its enqueue names none: 25, as graphile-worker and River,
-- with the queue's backoff between them (internal.backoff: 5 s, 10 s, 20 s, ... capped
-- at an hour, about 19 hours in all). The owner's SQL that enqueues the tasks of a
-- business process (channel tasks, supervisor runs) passes its own max_attempts (1): a
-- process retries through new attempts, never through task retries.
create or replace function queues.default_max_attempts() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 25 $$;

-- The core of the single enqueue (no grants): validates one task and inserts it and its
-- claim-index row in one statement; returns its task_id. _public: called for an app or
-- the API (queues.enqueue), so internal task types are refused (42501) unless the
-- session is the owner's. _notify: send the wake-up (false: the caller sends it after
-- its commit, see queues.enqueue_and_commit). NULL arguments take the defaults (now, 0,
-- no resource key, queues.default_max_attempts()).
-- _check_only: run every check (the task type's existence included) and return NULL
-- without writing (queues.enqueue_unique_task checks before it decides to skip).
--
-- The transaction's trace context (the setting queue.traceparent, sql/queues/trace.sql)
-- is recorded for the task when there is one.
--
-- Checks, in order: for _public, a worker-only task type (refused before anything else
-- is read, as queues.assert_may_enqueue words it); task_type NULL; the payload (NULL, not
-- an object, over the size limit, nested too deep), priority, resource key, max
-- attempts, scheduled time (plain expressions, no statement); then the insert, which
-- reads the type in its own statement: when it inserts nothing, the type is unknown
-- (22023). The insert's snapshot is taken once it holds its
-- lock on queues.task, so a type deleted meanwhile is not used (the delete waits for
-- that lock, see queues.guard_task_type_in_use). Under REPEATABLE READ or SERIALIZABLE
-- the snapshot is the transaction's, older than the lock: the type's row is locked FOR
-- KEY SHARE first, as the foreign key did, so that a type deleted since is a
-- serialization failure rather than a task of a type that is gone.
create or replace function queues.enqueue_task(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz,
  _priority     integer,
  _resource_key text,
  _max_attempts integer,
  _public       boolean default false,
  _notify       boolean default true,
  _check_only   boolean default false,
  _depends_on   bigint[] default null,
  _group_key    text default null
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  if _public and exists (select 1 from queues.internal_task_type i where i.task_type = _task_type) then
    perform queues.assert_may_enqueue(_task_type);
  end if;
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if _payload is null then
    raise exception 'payload must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_payload) <> 'object' then
    raise exception 'payload must be a JSON object, got %', jsonb_typeof(_payload) using errcode = '22023';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    raise exception 'payload is % bytes, over the limit of % bytes', pg_column_size(_payload), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  if jsonb_path_exists(_payload, 'strict $.**{65}') then
    raise exception 'payload is nested deeper than % levels', queues.max_payload_depth() using errcode = '54000';
  end if;
  if _priority not between -1000 and 1000 then
    raise exception 'priority must be between -1000 and 1000, got %', _priority using errcode = '22023';
  end if;
  if length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if length(_group_key) not between 1 and 200 then
    raise exception 'group_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _max_attempts not between 1 and 100 then
    raise exception 'max_attempts must be between 1 and 100, got %', _max_attempts using errcode = '22023';
  end if;
  if not isfinite(_scheduled_at) then
    raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
  end if;
  if _check_only then
    if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
      raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
        using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
    end if;
    return null;
  end if;
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t where t.task_type = _task_type for key share;
  end if;

  with inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at, group_key)
    select t.task_type, _payload, coalesce(_priority, 0), _resource_key,
           coalesce(_max_attempts, queues.default_max_attempts()), coalesce(_scheduled_at, now()), _group_key
      from queues.task_type t
     where t.task_type = _task_type
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts, group_key
  )
  -- A task with dependencies starts waiting (at 'infinity', sql/queues/dependencies.sql),
  -- so that no index entry of it is ever among the ready ones.
  insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts,
                                  group_key)
  select i.task_id, i.task_type, i.priority,
         case when cardinality(_depends_on) > 0 then 'infinity' else i.scheduled_at end, i.resource_key,
         case when cardinality(_depends_on) > 0 then 'infinity' else i.scheduled_at end, i.max_attempts,
         i.group_key
    from inserted i
  returning task_id into _task_id;

  if _task_id is null then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
  -- The caller's trace context, when the transaction has one (sql/queues/trace.sql).
  if current_setting('queue.traceparent', true) <> '' then
    perform queues.record_task_trace(array[_task_id]);
  end if;
  -- Dependencies (sql/queues/dependencies.sql): the task waits, or fails at once.
  if cardinality(_depends_on) > 0 then
    perform queues.add_task_dependencies(array_fill(_task_id, array[cardinality(_depends_on)]), _depends_on,
                                         array_fill(''::text, array[cardinality(_depends_on)]), array[_task_id]);
  end if;
  -- A task due more than a minute ahead wakes nobody now: workers poll for it.
  if _notify and (_scheduled_at is null or _scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _task_id;
end;
$$;

-- Enqueue one task for an app or the API; returns its task_id. NULL arguments take the
-- defaults (now, 0, no resource key, queues.default_max_attempts()), since generated
-- clients send undefined as NULL. A unique task: queues.enqueue_unique (unique.sql). Refuses internal task types (42501). _notify => false leaves the wake-up to
-- the caller (queues.enqueue_and_commit sends it after the commit). _depends_on: tasks
-- this one waits for (sql/queues/dependencies.sql); NULL or empty: none. _group_key: what
-- flow limits count the task by within its type (sql/queues/limits.sql); NULL: none.
create or replace function queues.enqueue(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  _notify       boolean default true,
  _depends_on   bigint[] default null,
  _group_key    text default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts,
                             true, coalesce(_notify, true), false, _depends_on, _group_key);
end;
$$;

-- queues.enqueue, then COMMIT, then the wake-up in a transaction of its own; returns the
-- task_id in _task_id. For callers outside a transaction block (CALL inside one fails
-- with 2D000, invalid transaction termination): the client's enqueue on a pool. The
-- task's commit takes no notification lock, so concurrent callers share WAL flushes; the
-- wake-up's transaction writes no data and does not wait for a flush (see the top of
-- this file). Crash between the two: the task is committed and found by the workers'
-- poll instead.
-- Not security definer and no SET clause: PostgreSQL allows COMMIT in a procedure only
-- without them. It runs with the caller's rights and search_path, names every object
-- with its schema, and does nothing a caller could not do itself.
create or replace procedure queues.enqueue_and_commit(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  inout _task_id bigint default null,
  _group_key    text default null
)
  language plpgsql
as $$
begin
  _task_id := queues.enqueue(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, false,
                             null, _group_key);
  commit;
  if _scheduled_at is null
     or _scheduled_at operator(pg_catalog.<=) (pg_catalog.now() operator(pg_catalog.+) interval '1 minute') then
    perform pg_catalog.pg_notify('queues_task_ready', '');
  end if;
end;
$$;

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, queues.default_max_attempts()), since generated clients send undefined as NULL.
-- Owner only (no grant): the owner's SQL enqueues any task type through it. A thin alias
-- of the core queues.enqueue_task, with the defaults of queues.enqueue (_depends_on too).
create or replace function queues.enqueue_internal(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  _depends_on   bigint[] default null,
  _group_key    text default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts,
                             false, true, false, _depends_on, _group_key);
end;
$$;

-- Raises the problem found in element _idx of a batch (queues.enqueue_tasks):
-- _problem is '<SQLSTATE> <message>'. Returns nothing; typed jsonb so it can stand in a
-- select list for the payload it refuses.
create or replace function queues.raise_enqueue_problem(_idx bigint, _problem text) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _problem like '22023 unknown task_type%' then
    raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = '22023',
      hint = 'Known task types are listed in queues.task_type.';
  end if;
  raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = left(_problem, 5);
end;
$$;

-- Enqueue many tasks in one statement. _tasks is a JSON array of objects:
--   {"task_type": "...", "payload": {...}, "scheduled_at"?: "...", "priority"?: 0,
--    "resource_key"?: "...", "max_attempts"?: 25,
--    "unique_key"?: "...", "unique_policy"?: "skip", "unique_period"?: "30 seconds",
--    "depends_on"?: [task ids], "group_key"?: "..."}
-- (the unique fields as in queues.enqueue_unique; a skipped element answers the pending
-- task's id; depends_on as queues.enqueue's _depends_on, not with a unique key, and
-- naming tasks that exist before the call)
-- Returns the task_ids in input order. All or nothing: the first bad element, in input
-- order, raises an error naming it (tasks[i]: ...) and nothing is written. _public as in
-- queues.enqueue_task: a worker-only task type anywhere in the batch is refused (42501)
-- first, unless the session is the owner's. The core of queues.enqueue_many (no grants).
--
-- One statement inserts the batch: each element is checked as it is inserted (a CASE
-- that calls queues.raise_enqueue_problem only for a bad element), its task type against
-- queues.task_type read once per call (a hashed subplan), then the tasks' claim-index
-- rows; then one wake-up if any task is ready now. For _public, one statement before it
-- looks for worker-only types (queues.internal_task_type, also read once).
create or replace function queues.enqueue_tasks(_tasks jsonb, _public boolean default false)
  returns table (task_id bigint)
  language plpgsql volatile
  -- Planned once per connection, not per call: the plan is the same for any batch (the
  -- elements in order, hashed lookups of the task types), and planning the insert took
  -- a few milliseconds of each of a connection's first five batches.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _ids bigint[];
  _ready boolean;
  _refused record;
  _dep_tasks bigint[];
  _dep_ids bigint[];
  _dep_labels text[];
begin
  if _tasks is null then
    raise exception 'tasks must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_tasks) <> 'array' then
    raise exception 'tasks must be a JSON array, got %', jsonb_typeof(_tasks) using errcode = '22023';
  end if;
  if jsonb_array_length(_tasks) > 10000 then
    raise exception 'at most 10000 tasks per call, got %', jsonb_array_length(_tasks)
      using errcode = '54000';
  end if;
  -- A worker-only task type anywhere refuses the batch before any element is read
  -- further (the first such element is named), unless the session is the owner's.
  if _public and not queues.is_owner_session() then
    select e.ordinality - 1 as idx, e.value ->> 'task_type' as task_type into _refused
      from jsonb_array_elements(_tasks) with ordinality e
     where e.value ->> 'task_type' in (select i.task_type from queues.internal_task_type i)
     order by e.ordinality
     limit 1;
    if found then
      perform queues.assert_may_enqueue(_refused.task_type, format('tasks[%s]: ', _refused.idx));
    end if;
  end if;
  -- A batch naming a unique key goes element by element (sql/queues/unique.sql); a batch
  -- without one pays only this walk of its elements' keys.
  if jsonb_path_exists(_tasks, 'lax $[*] ? (exists(@.unique_key) || exists(@.unique_policy) || exists(@.unique_period))') then
    return query select u.task_id from queues.enqueue_tasks_one_by_one(_tasks, _public) u;
    return;
  end if;
  -- Under REPEATABLE READ or SERIALIZABLE, lock the types FOR KEY SHARE (see
  -- queues.enqueue_task).
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t
     where t.task_type in (select e.value ->> 'task_type' from jsonb_array_elements(_tasks) e)
       for key share;
  end if;

  with input as (
    select e.ordinality - 1 as idx, e.value as element,
           e.value ->> 'task_type' as task_type,
           e.value -> 'payload' as payload,
           (e.value ->> 'scheduled_at')::timestamptz as scheduled_at,
           (e.value ->> 'priority')::integer as priority,
           e.value ->> 'resource_key' as resource_key,
           (e.value ->> 'max_attempts')::integer as max_attempts,
           e.value ->> 'group_key' as group_key
      from jsonb_array_elements(_tasks) with ordinality e
  ),
  checked as (
    -- The problem of each element as '<SQLSTATE> <message>', NULL when it has none: its
    -- shape (an object of known fields), then the checks of queues.enqueue_task.
    select c.*,
           case
             when jsonb_typeof(c.element) <> 'object' then
               '22023 must be a JSON object, got ' || jsonb_typeof(c.element)
             when c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,depends_on,group_key}'::text[] <> '{}' then
               '22023 unknown field(s) ' || left((select string_agg(k, ', ') from jsonb_object_keys(
                 c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,depends_on,group_key}'::text[]) k), 200)
             -- depends_on: null, or an array of task ids (integers, or their decimal text).
             when jsonb_typeof(c.element -> 'depends_on') not in ('array', 'null')
                  or jsonb_path_exists(c.element -> 'depends_on',
                       'lax $[*] ? (!((@.type() == "number" && @ == @.floor()) || (@.type() == "string" && @ like_regex "^[0-9]{1,18}$")))') then
               '22023 depends_on must be an array of task ids'
             when c.task_type is null then '22004 task_type must not be null'
             when c.task_type not in (select t.task_type from queues.task_type t) then
               '22023 unknown task_type ' || quote_literal(left(c.task_type, 100))
             when c.payload is null then '22004 payload must not be null'
             when jsonb_typeof(c.payload) <> 'object' then
               '22023 payload must be a JSON object, got ' || jsonb_typeof(c.payload)
             when pg_column_size(c.payload) > queues.max_payload_bytes() then
               format('54000 payload is %s bytes, over the limit of %s bytes', pg_column_size(c.payload), queues.max_payload_bytes())
             -- Nesting deeper than 64 levels takes over 512 bytes (an uncompressed value,
             -- as c.payload is: just taken out of the batch), so smaller ones are not walked.
             when pg_column_size(c.payload) > 512 and jsonb_path_exists(c.payload, 'strict $.**{65}') then
               format('54000 payload is nested deeper than %s levels', queues.max_payload_depth())
             when c.priority not between -1000 and 1000 then
               '22023 priority must be between -1000 and 1000, got ' || c.priority
             when length(c.resource_key) not between 1 and 200 then '22023 resource_key must be 1 to 200 characters'
             when length(c.group_key) not between 1 and 200 then '22023 group_key must be 1 to 200 characters'
             when c.max_attempts not between 1 and 100 then
               '22023 max_attempts must be between 1 and 100, got ' || c.max_attempts
             when not isfinite(c.scheduled_at) then
               '22023 scheduled_at must be a finite time, got ' || c.scheduled_at
           end as problem
      from input c
  ),
  inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at, group_key)
    select c.task_type,
           case when c.problem is null then c.payload else queues.raise_enqueue_problem(c.idx, c.problem) end,
           coalesce(c.priority, 0), c.resource_key, coalesce(c.max_attempts, queues.default_max_attempts()), coalesce(c.scheduled_at, now()),
           c.group_key
      from checked c
     order by c.idx
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts, group_key
  ),
  pending as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts, group_key)
    select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts, i.group_key
      from inserted i
  )
  select array_agg(i.task_id order by i.task_id), bool_or(i.scheduled_at <= now() + interval '1 minute')
    into _ids, _ready
    from inserted i;
  -- The caller's trace context, when the transaction has one (sql/queues/trace.sql).
  if current_setting('queue.traceparent', true) <> '' then
    perform queues.record_task_trace(_ids);
  end if;
  -- Dependencies (sql/queues/dependencies.sql), one edge per element of a depends_on:
  -- _ids is in input order (the insert numbered the tasks in that order).
  if jsonb_path_exists(_tasks, 'lax $[*].depends_on[*]') then
    select array_agg(_ids[e.n] order by e.n, d.n), array_agg((d.value #>> '{}')::bigint order by e.n, d.n),
           array_agg(format('tasks[%s]: ', e.n - 1) order by e.n, d.n)
      into _dep_tasks, _dep_ids, _dep_labels
      from jsonb_array_elements(_tasks) with ordinality e(value, n)
     cross join lateral jsonb_array_elements(e.value -> 'depends_on') with ordinality d(value, n)
     where jsonb_typeof(e.value -> 'depends_on') = 'array';
    perform queues.add_task_dependencies(_dep_tasks, _dep_ids, _dep_labels, _ids);
  end if;

  if _ready then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select u.id from unnest(_ids) u(id);
end;
$$;

-- Enqueue many tasks (see queues.enqueue_tasks), for an app or the API: refuses internal
-- task types (42501), as queues.enqueue.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_id from queues.enqueue_tasks(_tasks, true) t
$$;
--! EndIncluded queues/enqueue.sql
--! Included queues/run_now.sql
-- Running scheduled tasks now. queues.run_scheduled_now writes it (the fact
-- queues.task_run_now, the claim-index row due now, the wake-up), for the dashboard's
-- "run now" (admin.run_tasks_now) and for queues.run_task_now, with which the owner's SQL
-- makes a task that no worker has taken yet due now (a channel process's success handler
-- wakes the supervisor run its backoff scheduled this way, rather than enqueue another
-- run beside it). Owner only (no grants).

-- Makes the scheduled tasks among _task_ids (never leased, not due at _now, not waiting for
-- dependencies) due at _now:
-- records queues.task_run_now, moves their claim-index rows, and sends the wake-up when
-- any moved. Their rows stay locked until the caller's transaction ends (a claim that
-- holds one commits first; the row is then read as it left it). Returns the ids moved.
create or replace function queues.run_scheduled_now(_now timestamptz, _task_ids bigint[])
  returns setof bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  return query
  with locked as (
    select p.task_id
      from queues.task_pending p
     where p.task_id = any (_task_ids)
       and p.available_at > _now and p.current_lease_id is null and p.lease_count = 0
       -- A task waiting for its dependencies is not scheduled: it runs when they end.
       and p.available_at <> 'infinity'
     order by p.task_id
       for update
  ),
  recorded as (
    insert into queues.task_run_now (task_id, requested_at)
    select l.task_id, _now from locked l
    on conflict (task_id) do nothing
    returning task_id
  ),
  moved as (
    update queues.task_pending p set available_at = _now, scheduled_at = _now
     where p.task_id = any (array(select r.task_id from recorded r))
    returning p.task_id
  )
  select m.task_id from moved m;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$$;

-- Makes task _task_id due now if no worker has ever taken it. Returns:
--   'due_now'      no lease so far: due now (queues.task_run_now recorded and the wake-up
--                  sent when it was not yet due). Its claim-index row stays locked until
--                  the caller's transaction ends, and claims skip locked rows, so the task
--                  runs after that transaction commits and sees what it wrote.
--   'taken'        a worker holds it, or it ran and waits for a retry: it runs (again) in
--                  its own time; left as it is.
--   'not_pending'  completed, or no such task.
-- A null id is refused (22004).
create or replace function queues.run_task_now(_task_id bigint)
  returns text
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending record;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  -- A claim that holds the row commits first; the row is then read as it left it.
  select p.available_at, p.current_lease_id is null and p.lease_count = 0 as untaken into _pending
    from queues.task_pending p
   where p.task_id = _task_id
     for update;
  if not found then
    return 'not_pending';
  end if;
  if not _pending.untaken then
    return 'taken';
  end if;
  -- Nothing to do when it is due already.
  perform queues.run_scheduled_now(now(), array[_task_id]);
  return 'due_now';
end;
$$;
--! EndIncluded queues/run_now.sql
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
--! EndIncluded admin/common.sql
--! Included admin/task_actions.sql
-- Bulk actions on tasks for the dashboard: cancel pending tasks, run scheduled tasks now,
-- redrive dead letters. Each takes a selection (task ids, at most 1000) and reports per
-- task what happened; the *_matching variants take a filter instead and act on up to
-- _limit tasks that match it. Owner-only *_at(_now, ...) variants take the clock.

-- Cancels tasks, pending or running (queues.cancel_tasks_at, sql/queues/cancel.sql): each
-- ends 'cancelled' at once (queues.task_completed, queues.task_cancelled with the reason),
-- in one transaction; the worker running one is told at its next heartbeat, aborts it and
-- records nothing. Rows, in input order:
--   cancelled | already_completed | unknown_task
create or replace function admin.cancel_tasks_at(_now timestamptz, _task_ids bigint[], _reason text)
  returns table (task_id bigint, result text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select c.task_id, c.result from queues.cancel_tasks_at(_now, _task_ids, _reason) c
$$;

create or replace function admin.cancel_tasks(_task_ids bigint[], _reason text default null)
  returns table (task_id bigint, result text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.cancel_tasks_at(now(), _task_ids, _reason)
$$;

-- Cancels up to _limit (1 to 1000) pending tasks of _task_type (null: any) in _state
-- (waiting, scheduled, ready or retrying; null: all four), oldest first.
create or replace function admin.cancel_tasks_matching(
  _task_type text, _state text, _limit integer, _reason text default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _ids bigint[];
begin
  perform admin.assert_task_type(_task_type);
  if _state is not null and _state not in ('waiting', 'scheduled', 'ready', 'retrying') then
    raise exception 'state must be waiting, scheduled, ready or retrying to cancel by filter, got %', quote_literal(left(_state, 100))
      using errcode = '22023';
  end if;
  if _limit is null or _limit not between 1 and 1000 then
    raise exception 'limit must be between 1 and 1000, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  _ids := array(
    select p.task_id from queues.task_pending p
     where (_task_type is null or p.task_type = _task_type)
       and admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, now())
           = any (case when _state is null then array['waiting', 'scheduled', 'ready', 'retrying'] else array[_state] end)
     order by p.task_id
     limit _limit);
  if cardinality(_ids) > 0 then
    return query select * from admin.cancel_tasks_at(now(), _ids, _reason);
  end if;
end;
$$;

-- Runs scheduled tasks (never leased, scheduled_at in the future) now
-- (queues.run_scheduled_now: records queues.task_run_now and makes the claim-index row
-- claimable at _now). Rows, in input order:
--   run_now | not_scheduled (ready, running, retrying) | already_completed | unknown_task
-- The answers for the tasks it did not lock are read after the locks, by a statement of
-- their own (as queues.cancel_tasks_at's).
create or replace function admin.run_tasks_now_at(_now timestamptz, _task_ids bigint[])
  returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _locked bigint[];
  _moved bigint[];
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform queues.assert_task_ids(_task_ids);
  with locked as (
    select p.task_id, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state
      from queues.task_pending p
     where p.task_id = any (_task_ids)
     order by p.task_id
       for update
  ),
  moved as (
    select m as task_id
      from queues.run_scheduled_now(_now, array(select l.task_id from locked l where l.state = 'scheduled')) m
  )
  select coalesce(array_agg(l.task_id), '{}'), coalesce((select array_agg(m.task_id) from moved m), '{}')
    into _locked, _moved
    from locked l;

  -- A statement after the locks (see queues.cancel_tasks_at).
  return query
  select i.task_id,
         case when m.task_id is not null then 'run_now'
              when l.task_id is not null then 'not_scheduled'
              when coalesce((select true from queues.task_end_of(i.task_id) x limit 1), false) then 'already_completed'
              else 'unknown_task' end
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join unnest(_locked) as l(task_id) on l.task_id = i.task_id
    left join unnest(_moved) as m(task_id) on m.task_id = i.task_id
   order by i.n;
end;
$$;

create or replace function admin.run_tasks_now(_task_ids bigint[])
  returns table (task_id bigint, result text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.run_tasks_now_at(now(), _task_ids)
$$;

-- Redrives dead letters (queues.redrive_task for each). Rows, in input order:
--   redriven (new_task_id set) | not_a_dead_letter | unknown_task
-- Each task is judged after its completion row is locked (as queues.redrive_task
-- serialises redrives), by statements that start after the lock: a redrive of the same
-- task that this one waited for is seen ('not_a_dead_letter'), not refused as an error.
create or replace function admin.redrive_tasks(_task_ids bigint[])
  returns table (task_id bigint, result text, new_task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _id bigint;
begin
  perform queues.assert_task_ids(_task_ids);
  foreach _id in array _task_ids loop
    task_id := _id;
    new_task_id := null;
    perform 1 from queues.task_completed c where c.task_id = _id for update;
    if not exists (select 1 from queues.task t where t.task_id = _id) then
      result := 'unknown_task';
    elsif not exists (select 1 from queues.dead_letter d where d.task_id = _id) then
      result := 'not_a_dead_letter';
    else
      new_task_id := queues.redrive_task(_id);
      result := 'redriven';
    end if;
    return next;
  end loop;
end;
$$;

-- Redrives up to _limit (1 to 500) dead letters of _task_type (null: any), newest first.
create or replace function admin.redrive_tasks_matching(_task_type text, _limit integer)
  returns table (task_id bigint, result text, new_task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _ids bigint[];
begin
  perform admin.assert_task_type(_task_type);
  if _limit is null or _limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  _ids := array(select d.task_id from admin.list_dead_letters(_task_type, _limit, null) d);
  if cardinality(_ids) > 0 then
    return query select * from admin.redrive_tasks(_ids);
  end if;
end;
$$;
--! EndIncluded admin/task_actions.sql

--! split: 500-lease-per-claim.sql
-- One lease per claim (docs/design/hot-path.md, "One lease per claim, as built"): a
-- claim writes one append-only queues.claim_lease naming the tasks it took (task_ids,
-- ascending), their shared lease id (from task_lease's sequence, so a claim's id never
-- equals a per-task lease's), its worker, expiry and named suspect, instead of one
-- queues.task_lease row per task. Leases written before stay task_lease rows. A task's
-- leases, in either shape, are read through queues.task_leases (a view),
-- queues.task_leases_of(task_id), queues.task_lease_at(task_id, lease) and
-- queues.task_lease_effective(_of) (sql/queues/task_lease_effective.sql). The table is a
-- history table, range-partitioned by the largest task id a claim names (its task_id
-- column), on the sets' bounds; retention keeps a set while a claim lease in it names a
-- task of an older set still kept (sql/queues/partitions_maintain.sql).
-- Locks: the new table and its partitions only (SHARE or SHARE UPDATE EXCLUSIVE on
-- queues.claim_lease, ACCESS EXCLUSIVE on its empty default while a set's partition is
-- attached); no other hot table.
set local lock_timeout = '5s';

create table if not exists queues.claim_lease (
  -- The claim's lease id, shared by every task it took.
  task_lease_id   bigint not null default nextval('queues.task_lease_task_lease_id_seq'),
  -- The largest task id the claim names (task_ids' last element): the partition key, as
  -- every history table's task_id, so that the lease lives in the set of its newest task.
  task_id         bigint not null,
  worker_key      integer not null,
  leased_at       timestamptz not null,
  -- As claimed; heartbeats extend each task's lease (queues.task_lease_extension).
  expires_at      timestamptz not null,
  -- The tasks the claim took, ascending, each once.
  task_ids        bigint[] not null,
  -- [first task id, last task id]: what the GiST index finds a task's leases by.
  task_range      int8range not null,
  -- The claim's one suspect (a task a lease of which had ended without an end), if any:
  -- its expiries count towards abandonment.
  suspect_task_id bigint,
  constraint claim_lease_pkey primary key (task_id, task_lease_id),
  constraint claim_lease_shape check (
    cardinality(task_ids) between 1 and 1000
    and array_ndims(task_ids) = 1
    and task_id = task_ids[cardinality(task_ids)]
    and task_range = int8range(task_ids[1], task_id, '[]')
    and (suspect_task_id is null or suspect_task_id = any (task_ids))
    and expires_at > leased_at)
) partition by range (task_id);
comment on table queues.claim_lease is
  'Append-only: one lease per claim, shared by the tasks it names (task_ids). Read a task''s leases through queues.task_leases / queues.task_leases_of / queues.task_lease_effective. See sql/queues/claim.sql.';
create index if not exists claim_lease_task_range_idx on queues.claim_lease using gist (task_range);
create index if not exists claim_lease_task_lease_id_idx on queues.claim_lease (task_lease_id);
drop trigger if exists forbid_update on queues.claim_lease;
create trigger forbid_update before update on queues.claim_lease
  for each statement execute function queues.forbid_fact_update();
create table if not exists queues.claim_lease_default partition of queues.claim_lease default;
drop trigger if exists forbid_update on queues.claim_lease_default;
create trigger forbid_update before update on queues.claim_lease_default
  for each statement execute function queues.forbid_fact_update();

--! Included queues/partitions.sql
-- History partitions: queues.task and every fact table keyed by task are range-partitioned
-- by task_id, all on the same bounds (a "partition set"). Old history leaves by dropping a
-- whole set, never by row-by-row DELETE. Settings: queues.history_setting; what was
-- dropped: queues.history_partition_dropped (both in migrations/committed/000004); when
-- each set was created: queues.history_partition_created.
--
-- Why task_id and not time: every fact carries task_id, so a row is routed without an
-- extra column; a task and all its facts sit in the same set, so a set can be dropped
-- alone; every lookup of the hot path is by task_id, so it is pruned to one partition;
-- and ids only grow, so a set whose range lies below the id sequence receives no new
-- task. docs/operations.md ("Retention and partitions") has the full reasoning.
--
-- The family, one concern a file (a migration includes only the file it changed):
--   partitions.sql           the tables and how their partitions are named
--   partitions_locks.sql     the locks a maintenance step takes, and how (read first)
--   partitions_create.sql    making a set, and adopting rows of the default partitions
--   partitions_sets.sql      the sets, their bounds and sizes, the last task id
--   partitions_maintain.sql  maintenance, one short step at a time
--   partitions_status.sql    what operators read
--
--   queues.history_tables()                    the partitioned tables, parent first
--   queues.lock_history_tables(t, m, ms)       a step's locks, between transactions; owner only
--   queues.cancel_autovacuum(t)                cancels autovacuum of tables a step must lock; owner only
--   queues.create_history_table(t, name)       a standalone table like t, to attach; owner only
--   queues.attach_history_partition(t, lo, hi) one table's partition of a set, owner only
--   queues.create_history_partition(lo, hi)    one set [lo, hi), owner only
--   queues.adopt_history_range(lo, hi)         a set [lo, hi) of rows in the default
--                                              partitions, moved out of them; owner only
--   queues.history_partition_bounds()          every table's partitions and their bounds
--   queues.history_sets()                      the sets' bounds, from the catalog only
--   queues.history_walk(_before)               the id ranges a newest-first read walks
--   queues.history_set_bytes(lower_bounds)     the table and index bytes of the sets given
--   queues.history_partition_sizes()           the sets with table and index bytes
--   queues.measure_history_sets(_now)          the sets that are done, measured for readers
--                                              (queues.history_set_measured); owner only
--   queues.history_partitions()                the sets with their total bytes
--   queues.maintain_history_step_at(_now)      one short step of maintenance; owner only
--   queues.maintain_history_step(payload)      the same at now(), a runnable db_function
--                                              (the schedule's: one transaction per step)
--   queues.maintain_history_at(_now)           every step in one transaction; owner only
--   queues.maintain_history(payload)           the same at now(), a runnable db_function
--   queues.history_summary_at(_now)            settings, oldest task, what the next drop waits for
--   queues.history_status_at(_now)             the same with the sets and their sizes

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now',
               'task_trace', 'completion_round', 'claim_lease',
               'task_progress',
               'task_dependency']
$$;

-- The partition of _table holding [_lower, _upper) is named <table>_p<lower>.
-- No SET clause: a function with one is never inlined, and the status pages name every
-- partition of every set with it (196 calls at 14 sets). It names no object, so the
-- search path cannot change what it does (like admin.pending_state).
create or replace function queues.history_partition_name(_table text, _lower bigint) returns text
  language sql immutable parallel safe
as $$
  select _table || '_p' || _lower::text
$$;

revoke execute on function queues.history_tables(), queues.history_partition_name(text, bigint) from public;
--! EndIncluded queues/partitions.sql

-- A partition of queues.completion_round (migration 100) and of queues.claim_lease for
-- every partition set there is (a set half made by maintenance gets its own when
-- maintenance finishes the set).
select queues.attach_history_partition(t.name, s.lower_bound, s.upper_bound)
  from queues.history_sets() s
 cross join unnest(array['completion_round', 'claim_lease']) t(name)
 where not s.is_default
 order by s.lower_bound, t.name;

--! Included queues/task_lease_effective.sql
-- A task's leases, in both of their shapes: a row of queues.task_lease (one lease per
-- task, every lease written before claims wrote one lease per claim), or its place in a
-- queues.claim_lease (one lease per claim: every task the claim took shares its
-- task_lease_id, and the claim names its one suspect, suspect_task_id). Readers never
-- read the two tables for a task's leases; they read one of these:
--   queues.task_leases                     a view: every lease of every task, a row per
--                                          (task, lease)
--   queues.task_leases_of(task_id)         one task's leases, an index probe of each
--                                          shape: task_lease's primary key, and the GiST
--                                          index on claim_lease.task_range in the
--                                          partitions that can hold the task's claims
--                                          (task_id >= the task's: a claim lease lives
--                                          in the set of the largest task id it names)
--   queues.task_lease_at(task_id, lease)   one lease of one task: task_lease's primary
--                                          key, and claim_lease's lease id index
--   queues.task_lease_effective            leases with their expiry in force (a view)
--   queues.task_lease_effective_of(task_id)  one task's, probed as task_leases_of
-- worker_id: the lease's worker (a lease names it by key in queues.worker_name, or, on
-- per-task leases written before that key existed, by id). suspect: the claim named the
-- task its suspect (null on per-task leases written before claims named one).
--
-- The functions are inlined into their callers (SQL, stable, no SET clause, not a
-- security definer), so that a caller's task id reaches the probes; every object they
-- name is schema-qualified. Called from definer functions with a pinned search path: no
-- grants. (A view read by another role cannot call them: public.worker_tasks writes the
-- probe out.)

create or replace function queues.task_leases_of(_task_id bigint)
  returns table (task_lease_id bigint, task_id bigint, worker_key integer, worker_id text,
                 leased_at timestamptz, expires_at timestamptz, suspect boolean)
  language sql stable
as $$
  select l.task_lease_id, l.task_id, l.worker_key, l.worker_id, l.leased_at, l.expires_at, l.suspect
    from queues.task_lease l
   where l.task_id = _task_id
  union all
  select c.task_lease_id, _task_id, c.worker_key, null::text, c.leased_at, c.expires_at,
         coalesce(c.suspect_task_id = _task_id, false)
    from queues.claim_lease c
   where c.task_range @> _task_id
     and c.task_id >= _task_id
     and _task_id = any (c.task_ids)
$$;

create or replace function queues.task_lease_at(_task_id bigint, _task_lease_id bigint)
  returns table (task_lease_id bigint, task_id bigint, worker_key integer, worker_id text,
                 leased_at timestamptz, expires_at timestamptz, suspect boolean)
  language sql stable
as $$
  select l.task_lease_id, l.task_id, l.worker_key, l.worker_id, l.leased_at, l.expires_at, l.suspect
    from queues.task_lease l
   where l.task_id = _task_id and l.task_lease_id = _task_lease_id
  union all
  select c.task_lease_id, _task_id, c.worker_key, null::text, c.leased_at, c.expires_at,
         coalesce(c.suspect_task_id = _task_id, false)
    from queues.claim_lease c
   where c.task_lease_id = _task_lease_id
     and c.task_id >= _task_id
     and _task_id = any (c.task_ids)
$$;

create or replace view queues.task_leases as
select l.task_lease_id, l.task_id, l.worker_key, l.worker_id, l.leased_at, l.expires_at, l.suspect
  from queues.task_lease l
union all
select c.task_lease_id, u.task_id, c.worker_key, null::text, c.leased_at, c.expires_at,
       coalesce(c.suspect_task_id = u.task_id, false)
  from queues.claim_lease c
 cross join lateral unnest(c.task_ids) as u(task_id);
comment on view queues.task_leases is
  'Every lease of every task, a row per (task, lease): queues.task_lease and the tasks of each queues.claim_lease. A task''s own: queues.task_leases_of(task_id).';

-- Each lease with the expiry in force: released, else revoked, else the newest
-- extension's, else as claimed; and its worker's id. Releases, revocations and
-- extensions name (task_id, task_lease_id) per task in both shapes, and are joined on
-- their primary keys, so a task's are read from its own partition set.
create or replace function queues.task_lease_effective_of(_task_id bigint)
  returns table (task_lease_id bigint, task_id bigint, worker_id text, leased_at timestamptz,
                 expires_at timestamptz, released_at timestamptz, extensions integer,
                 revoked_at timestamptz, suspect boolean)
  language sql stable
as $$
  select l.task_lease_id, l.task_id,
         coalesce(l.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = l.worker_key)),
         l.leased_at,
         coalesce(r.released_at, v.revoked_at, e.expires_at, l.expires_at),
         r.released_at,
         coalesce(e.extensions, 0),
         v.revoked_at,
         l.suspect
    from queues.task_leases_of(_task_id) l
    left join queues.task_lease_release r on r.task_id = l.task_id and r.task_lease_id = l.task_lease_id
    left join queues.task_lease_revocation v on v.task_id = l.task_id and v.task_lease_id = l.task_lease_id
    left join lateral (
      select max(x.expires_at) as expires_at, count(*)::integer as extensions
        from queues.task_lease_extension x
       where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
    ) e on true
$$;

create or replace view queues.task_lease_effective as
select l.task_lease_id, l.task_id,
       coalesce(l.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = l.worker_key)) as worker_id,
       l.leased_at,
       coalesce(r.released_at, v.revoked_at, e.expires_at, l.expires_at) as expires_at,
       r.released_at,
       coalesce(e.extensions, 0) as extensions,
       v.revoked_at,
       l.suspect
  from queues.task_leases l
  left join queues.task_lease_release r on r.task_id = l.task_id and r.task_lease_id = l.task_lease_id
  left join queues.task_lease_revocation v on v.task_id = l.task_id and v.task_lease_id = l.task_lease_id
  left join lateral (
    select max(x.expires_at) as expires_at, count(*)::integer as extensions
      from queues.task_lease_extension x
     where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
  ) e on true;
comment on view queues.task_lease_effective is 'Leases with their effective expiry (releases and heartbeats applied), both shapes (queues.task_leases). A task''s own: queues.task_lease_effective_of(task_id).';

revoke execute on function queues.task_leases_of(bigint) from public;
revoke execute on function queues.task_lease_at(bigint, bigint) from public;
revoke execute on function queues.task_lease_effective_of(bigint) from public;
--! EndIncluded queues/task_lease_effective.sql
--! Included queues/claim.sql
-- Claiming: queues.claim_tasks (batch), queues.dequeue_next_available_task (the seeds'
-- single claim), both on top of queues.claim_tasks_at, which takes the clock as an
-- argument so tests can move time forward. Only the owner may call claim_tasks_at:
-- a worker that chose its own clock could take live leases.
--
-- Resource keys: at most one task per resource_key is leased at a time; the others wait
-- (they are skipped, not failed) until the holder completes, releases or lets its lease
-- expire. A long queue of tasks blocked on one key is re-read by each claim.
--
-- Suspects and poison tasks: a task a lease of which ended without an end (it expired, or
-- was revoked: its worker died or went silent) is a suspect, whichever of the worker's
-- tasks killed it. A claim takes at most one suspect and names it in its lease
-- (queues.claim_lease.suspect_task_id, task_pending.suspect_lease). An expiry counts towards
-- abandonment only when the task was the named suspect of that lease: the first expiry
-- of a task never counts (it may have waited in a dead worker's local queue, or run
-- beside the task that killed it), and from then on the task runs only as a named
-- suspect, so each death it causes counts. A task whose counted expiries reach
-- _max_leases (reported interruptions count too; releases and failed attempts do not) is
-- completed as 'abandoned' with an error instead of being leased again: a task that kills
-- its worker, or PostgreSQL, is abandoned after _max_leases + 1 leases. Nothing in this
-- accounting depends on the worker reporting a start: the lease naming its suspect
-- commits before the task runs.
--
-- Flow limits (sql/queues/limits.sql): concurrency and rate limits per task type and
-- group key. A claim reads the limits in force once (a tiny table). When none applies to
-- the types it asks for, nothing else is read or written for them. Otherwise, for each
-- limited type with a task ready, it takes the type's claim lock (advisory, 20252; the
-- limited types in name order, before anything else of the claim is locked, so two
-- claims waiting for each other's types cannot deadlock: a claim waits here at most for
-- the other claims of those types, each a few milliseconds), and then, in the claim
-- statement (a snapshot taken after the lock, so it sees every lease of the type
-- committed before), counts the type's live leases by group key (the claim index's
-- leased rows, task_pending_lease_expiry_idx: a lease that expired, was released or
-- revoked, or whose task ended holds no slot) and the starts of the current rate windows
-- (queues.task_limit_window), takes no more tasks per scope than it has room for, and
-- adds what it took to the windows.

create or replace function queues.claim_tasks_at(
  _now           timestamptz,
  _worker_id     text,
  _limit         integer,
  _task_types    text[],
  _lease_seconds integer,
  _max_leases    integer
) returns table (
  task_id       bigint,
  task_type     text,
  payload       jsonb,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  task_lease_id bigint,
  leased_at     timestamptz,
  expires_at    timestamptz,
  lease_count   integer
)
  language plpgsql volatile
  rows 10
  security definer
  -- Planned once, not per call: the statements below have one good plan whatever the
  -- arguments (index order with a LIMIT; primary-key probes), and planning was about
  -- 40% of the call's cost.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _worker_key integer;
  _throttled text[];
  -- Provider back-pressure per group key: the group keys throttled at _now ('{}': none).
  _throttled_groups text[];
  -- Flow limits: the types asked for (NULL: any) and, of them, the limited types this
  -- claim holds the lock of, with their rules (sql/queues/limits.sql).
  _types      text[];
  _limited    text[] := '{}';
  _rules      jsonb := '[]';
  _full       text[] := '{}';
  _type       text;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _limit is null or _limit not between 1 and 1000 then
    raise exception 'limit must be between 1 and 1000, got %', coalesce(_limit::text, 'null')
      using errcode = '22023';
  end if;
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;
  if _max_leases is null or _max_leases not between 1 and 100 then
    raise exception 'max_leases must be between 1 and 100, got %', coalesce(_max_leases::text, 'null')
      using errcode = '22023';
  end if;
  if _task_types is not null and cardinality(_task_types) = 0 then
    raise exception 'task_types must be null (any type) or name at least one type'
      using errcode = '22023';
  end if;
  -- One statement reads what the claim needs before it scans: the worker's key, the
  -- throttles and the flow limits in force (with none configured, the claim costs no
  -- statement more than it did without them).
  -- A lease names its worker by key (queues.worker_name: each worker id kept once, an
  -- integer on every lease instead of the id's text). One probe of the id's unique index.
  -- Provider back-pressure (sql/queues/throttle.sql): the task types throttled at _now
  -- are left out of the types both branches below scan, and the tasks of the group keys
  -- throttled at _now (of any type) out of what they find. One probe of
  -- throttle_until_idx per claim (queues.throttled_keys_at), which reads no row while no
  -- throttle is active; nothing per task while no group key is throttled.
  -- Flow limits (sql/queues/limits.sql, the body of queues.task_limits): the rules in
  -- force for the types asked for and not throttled. None (the common case): the claim
  -- below runs with _limited empty, which its limit steps read as "nothing to do".
  select w.worker_key, th.task_types, th.group_keys,
         coalesce((select jsonb_agg(to_jsonb(l))
                     from (select l.task_type, l.scope, l.group_key, l.max_running, l.max_starts,
                                  l.interval_ms, l.set_at
                             from (select distinct on (s.task_type, s.scope, s.group_key) s.*
                                     from queues.task_limit_set s
                                    order by s.task_type, s.scope, s.group_key, s.task_limit_set_id desc) l
                            where (l.max_running is not null or l.max_starts is not null)
                              and (_task_types is null or l.task_type = any (_task_types))
                              and not (l.task_type = any (th.task_types))
                            order by l.task_type, l.scope, l.group_key) l), '[]')
    into _worker_key, _throttled, _throttled_groups, _rules
    from queues.throttled_keys_at(_now) th
    left join queues.worker_name w on w.worker_id = _worker_id;
  if _rules <> '[]'::jsonb then
    _limited := array(select distinct r ->> 'task_type' from jsonb_array_elements(_rules) r order by 1);
  end if;
  if cardinality(_throttled) > 0 then
    _task_types := array(select u.task_type
                           from unnest(coalesce(_task_types, array(select tt.task_type from queues.task_type tt)))
                                as u(task_type)
                          where not (u.task_type = any (_throttled)));
    if cardinality(_task_types) = 0 then
      return;
    end if;
  end if;
  -- The first claim of a worker id adds it (a concurrent first claim waits, then reads it).
  if _worker_key is null then
    insert into queues.worker_name (worker_id) values (_worker_id)
    on conflict (worker_id) do nothing
    returning worker_key into _worker_key;
    if _worker_key is null then
      select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
    end if;
  end if;

  _types := _task_types;
  if cardinality(_limited) > 0 then
    -- Of the limited types, those with a task ready (a lease-free task due, or an expired
    -- lease), in name order; the others are left out of this claim. Their claim locks are
    -- taken below and held to the commit, so no other claim takes tasks of them meanwhile.
    -- (A lock tried and skipped when taken left a window's starts to whichever claim held
    -- it, however few tasks it wanted: rate-limit.mjs measured windows of 20 starts under
    -- a limit of 500.)
    _limited := array(
      select t.task_type from unnest(_limited) t(task_type)
       -- Scalar subqueries, not EXISTS: a generic plan may make an EXISTS a hashed subplan
       -- that reads the whole claim index on every claim (sql/CONVENTIONS.md). The first
       -- follows task_pending_ready_idx's order: without it the generic plan read the
       -- whole claim index (a sequential scan "until the first match", of a type with none).
       where case when coalesce((select true from queues.task_pending p
                                  where p.task_type = t.task_type and p.current_lease_id is null
                                    and p.scheduled_at <= _now and p.available_at <= _now
                                  order by p.priority desc, p.scheduled_at, p.task_id
                                  limit 1), false)
                    or coalesce((select true from queues.task_pending p
                                  where p.current_lease_id > 0 and p.available_at <= _now
                                    and p.task_type = t.task_type
                                  limit 1), false)
                  then true else false end
       order by t.task_type);
    foreach _type in array _limited loop
      perform pg_advisory_xact_lock(20252, hashtext(_type));
    end loop;
    _types := array(select u.task_type
                      from unnest(coalesce(_task_types, array(select tt.task_type from queues.task_type tt))) u(task_type)
                     where not (u.task_type = any (array(select r ->> 'task_type' from jsonb_array_elements(_rules) r)))
                        or u.task_type = any (_limited));
    if cardinality(_types) = 0 then
      _types := array[null]::text[];
    end if;
    _rules := coalesce((select jsonb_agg(r) from jsonb_array_elements(_rules) r
                         where r ->> 'task_type' = any (_limited)), '[]');
    -- Group keys without room (live leases or this window's starts at their limit), as
    -- type || chr(31) || group key: left out of the candidate scan below, so that one full
    -- group's backlog does not hide the other groups' tasks behind it.
    if _rules @> '[{"scope": "each_group"}]' or _rules @> '[{"scope": "group"}]' then
      _full := array(
        select k.task_type || chr(31) || k.group_key
          from (select p.task_type, p.group_key, count(*) as live
                  from queues.task_pending p
                 where p.current_lease_id > 0 and p.available_at > _now
                   and p.task_type = any (_limited) and p.group_key is not null
                 group by p.task_type, p.group_key
                union all
                select w.task_type, w.group_key, null
                  from queues.task_limit_window w
                 where w.task_type = any (_limited) and w.group_key <> '') k
         cross join lateral (
           select r.* from jsonb_to_recordset(_rules)
             as r(task_type text, scope text, group_key text, max_running integer, max_starts integer, interval_ms integer)
            where r.task_type = k.task_type
              and (r.scope = 'each_group' or (r.scope = 'group' and r.group_key = k.group_key))
            order by r.scope = 'group' desc
            limit 1
         ) r
         where k.live >= r.max_running
            or (k.live is null and r.interval_ms is not null
                and (select w.starts from queues.task_limit_window w
                      where w.task_type = k.task_type and w.group_key = k.group_key
                        and w.window_start >= queues.limit_window_start(_now, r.interval_ms)) >= r.max_starts));
    end if;
  end if;

  return query
  with candidate as (
    -- Ready tasks without a lease, per task type, from task_pending_ready_idx in claim
    -- order: rows leased by anyone are not in that index, and scheduled_at <= _now lets
    -- the scan stop (or skip to the next priority) at the first future task. (For a row
    -- without a lease available_at >= scheduled_at, so the extra bound changes nothing.)
    -- SKIP LOCKED skips rows another claimer holds; the update below makes any claimer
    -- that arrives after our commit re-check current_lease_id on the new row version.
    select r.*
      from (select distinct u.task_type
              from unnest(coalesce(_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
     cross join lateral (
       select p.task_id, p.task_type, p.current_lease_id, p.resource_key, p.group_key, p.priority, p.scheduled_at,
              p.lease_count - p.released_count - p.failed_attempts as ended_leases,
              p.uncounted_count, p.suspect_lease
         from queues.task_pending p
        where p.task_type = ty.task_type
          and p.current_lease_id is null
          and p.scheduled_at <= _now
          and p.available_at <= _now
          -- Flow limits: group keys without room wait (_full, empty without limits).
          and (cardinality(_full) = 0 or p.group_key is null
               or not (p.task_type || chr(31) || p.group_key = any (_full)))
          -- Throttled group keys wait (_throttled_groups, empty while none is throttled).
          and (cardinality(_throttled_groups) = 0 or p.group_key is null
               or not (p.group_key = any (_throttled_groups)))
          -- Tasks whose resource key another task holds wait (the upsert below decides).
          and (p.resource_key is null or not exists (
                select 1 from queues.resource_lease r
                 where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
        order by p.priority desc, p.scheduled_at, p.task_id
        limit _limit
          for update skip locked
     ) r
    union all
    -- Tasks whose lease expired (their worker died or stopped heartbeating), from
    -- task_pending_lease_expiry_idx (its predicate is current_lease_id > 0, see
    -- migration 000005, section 520-hot-path-plans.sql): only expired leases are read.
    select x.*
      from (
        select p.task_id, p.task_type, p.current_lease_id, p.resource_key, p.group_key, p.priority, p.scheduled_at,
               p.lease_count - p.released_count - p.failed_attempts as ended_leases,
               p.uncounted_count, p.suspect_lease
          from queues.task_pending p
         where p.current_lease_id > 0
           and p.available_at <= _now
           and (_types is null or p.task_type = any (_types))
           -- Flow limits: group keys without room wait (_full, empty without limits).
           and (cardinality(_full) = 0 or p.group_key is null
                or not (p.task_type || chr(31) || p.group_key = any (_full)))
           -- Throttled group keys wait (_throttled_groups, empty while none is throttled).
           and (cardinality(_throttled_groups) = 0 or p.group_key is null
                or not (p.group_key = any (_throttled_groups)))
           and (p.resource_key is null or not exists (
                 select 1 from queues.resource_lease r
                  where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
         order by p.available_at
         limit _limit
           for update skip locked
      ) x
  ),
  -- Flow limits (sql/queues/limits.sql). Every step reads only limited types' rows: with
  -- _limited empty (no limit on the types asked for) each reads nothing.
  -- limit_rule: the rules of the limited types this claim holds the lock of.
  limit_rule as (
    select r.* from jsonb_to_recordset(_rules)
      as r(task_type text, scope text, group_key text, max_running integer, max_starts integer, interval_ms integer)
  ),
  -- limit_live: leases live now per type and group key (the claim index's leased rows),
  -- read once (materialized: inlined into limit_room it was read again per scope).
  limit_live as materialized (
    select p.task_type, p.group_key, count(*) as n
      from queues.task_pending p
     where cardinality(_limited) > 0
       and p.current_lease_id > 0 and p.available_at > _now
       and p.task_type = any (_limited)
     group by p.task_type, p.group_key
  ),
  -- limit_room: per scope a candidate falls in (group_key '' for its type as a whole), the
  -- tasks this claim may take: the least of max_running minus its live leases and
  -- max_starts minus its starts in the current window. A group key's rule is its named
  -- one, else its type's each_group one.
  limit_scope as (
    select distinct c.task_type, k.group_key
      from candidate c
     cross join lateral (select '' as group_key union all select c.group_key where c.group_key is not null) k
     where c.task_type = any (_limited)
  ),
  limit_room as (
    select s.task_type, s.group_key, r.interval_ms,
           case when r.interval_ms is not null then queues.limit_window_start(_now, r.interval_ms) end as window_start,
           greatest(least(r.max_running - coalesce((select sum(lv.n) from limit_live lv
                                                     where lv.task_type = s.task_type
                                                       and (s.group_key = '' or lv.group_key = s.group_key)), 0),
                          r.max_starts - coalesce((select w.starts from queues.task_limit_window w
                                                    where w.task_type = s.task_type and w.group_key = s.group_key
                                                      and w.window_start >= queues.limit_window_start(_now, r.interval_ms)), 0)),
                    0) as room
      from limit_scope s
     cross join lateral (
       select r.* from limit_rule r
        where r.task_type = s.task_type
          and case when s.group_key = '' then r.scope = 'type'
                   else r.scope = 'each_group' or (r.scope = 'group' and r.group_key = s.group_key) end
        order by r.scope = 'group' desc
        limit 1
     ) r
  ),
  -- The suspect this claim may lease (see allowed below: at most one per claim, the first
  -- in claim order that is not poisoned), found here for the limited types only.
  lead_suspect as (
    select c.task_id
      from candidate c
     where cardinality(_limited) > 0
       and c.ended_leases > 0
       and c.ended_leases - c.uncounted_count
             - (c.current_lease_id is not null and not c.suspect_lease)::integer < _max_leases
     order by c.priority desc, c.scheduled_at, c.task_id
     limit 1
  ),
  -- The candidates within every limit, in claim order, before the claim's _limit is
  -- taken of them (so that tasks a limit holds back never crowd out other types' tasks):
  -- unlimited types as they are; of a limited type, of the tasks that would take a slot
  -- (not suspects, and the suspect this claim may lease), the first `room` of each group
  -- key, then the first `room` of the type. Its other suspects are left for later claims,
  -- and its poisoned ones go on to be abandoned.
  within_limits as (
    select c.* from candidate c where not (c.task_type = any (_limited))
    union all
    select c.* from candidate c
     where c.task_type = any (_limited) and c.ended_leases > 0
       and c.ended_leases - c.uncounted_count
             - (c.current_lease_id is not null and not c.suspect_lease)::integer >= _max_leases
    union all
    select t.task_id, t.task_type, t.current_lease_id, t.resource_key, t.group_key, t.priority, t.scheduled_at,
           t.ended_leases, t.uncounted_count, t.suspect_lease
      from (select g.*,
                   row_number() over (partition by g.task_type
                                      order by g.priority desc, g.scheduled_at, g.task_id) as type_rank
              from (select c.*,
                           row_number() over (partition by c.task_type, c.group_key
                                              order by c.priority desc, c.scheduled_at, c.task_id) as group_rank
                      from candidate c
                     where c.task_type = any (_limited)
                       and (c.ended_leases = 0 or c.task_id in (select ls.task_id from lead_suspect ls))) g
              left join limit_room gr
                on gr.task_type = g.task_type and gr.group_key = g.group_key
             where gr.room is null or g.group_rank <= gr.room) t
      left join limit_room tr on tr.task_type = t.task_type and tr.group_key = ''
     where tr.room is null or t.type_rank <= tr.room
  ),
  picked as (
    -- Of the candidates (locked until commit), the first _limit in claim order. A task
    -- whose leases ended without an end (ended_leases, the expired current one included)
    -- is a suspect; the expiries counted towards abandonment leave out those of leases
    -- that did not name it as their suspect (uncounted_count, and the current one if so).
    select c.task_id, c.task_type, c.current_lease_id, c.resource_key, c.group_key, c.priority, c.scheduled_at,
           c.counted >= _max_leases as poisoned,
           c.ended_leases > 0 as suspect,
           c.counted as counted_leases
      from (
        select c.*,
               c.ended_leases - c.uncounted_count
                 - (c.current_lease_id is not null and not c.suspect_lease)::integer as counted
          from within_limits c
         order by c.priority desc, c.scheduled_at, c.task_id
         limit _limit
      ) c
  ),
  -- Resource keys: one task per key in this batch, and only if no other task holds the
  -- key. The upsert decides on the newest committed row (not this statement's snapshot),
  -- so two claimers never both take a key.
  -- Suspects (their worker may have died of them) are leased one per claim, as the
  -- lease's named suspect, so the tasks a crashed worker was running, which all come
  -- back at the same moment, do not all land in one worker again beside the task that
  -- crashed it.
  allowed as (
    select pk.task_id, pk.task_type, pk.group_key, pk.resource_key, pk.priority, pk.scheduled_at, pk.suspect
      from (select pk.*,
                   row_number() over (partition by pk.suspect
                                      order by pk.priority desc, pk.scheduled_at, pk.task_id) as rank
              from picked pk
             where not pk.poisoned) pk
     where not pk.suspect or pk.rank = 1
  ),
  keyed as (
    select k.task_id, k.resource_key
      from (select distinct on (pk.resource_key) pk.task_id, pk.resource_key
              from allowed pk
             where pk.resource_key is not null
             order by pk.resource_key, pk.priority desc, pk.scheduled_at, pk.task_id) k
     -- Skip a key another transaction is working on (see queues.lock_resource_keys):
     -- a claim never waits, so it cannot be part of a deadlock.
     where pg_try_advisory_xact_lock(20251, hashtext(k.resource_key))
  ),
  key_taken as (
    insert into queues.resource_lease as r (resource_key, task_id, expires_at)
    select k.resource_key, k.task_id, _now + make_interval(secs => _lease_seconds) from keyed k
    on conflict (resource_key) do update
       set task_id = excluded.task_id, expires_at = excluded.expires_at
     where r.expires_at <= _now or r.task_id = excluded.task_id
    returning r.task_id
  ),
  eligible as (
    select pk.task_id, pk.task_type, pk.group_key, pk.suspect
      from allowed pk
     where pk.resource_key is null or pk.task_id in (select kt.task_id from key_taken kt)
  ),
  -- Rate limits: the starts of this claim added to each scope's current window (one row
  -- per scope it took from; an older window is started again). A claim whose clock is
  -- behind the row's window (it began before another claim of the type committed) adds
  -- to the newer window.
  limit_counted as (
    insert into queues.task_limit_window as w (task_type, group_key, window_start, starts)
    select lr.task_type, lr.group_key, lr.window_start, count(*)
      from limit_room lr
      join eligible e on e.task_type = lr.task_type and (lr.group_key = '' or e.group_key = lr.group_key)
     where lr.window_start is not null
     group by lr.task_type, lr.group_key, lr.window_start
    on conflict (task_type, group_key) do update
       set starts = case when excluded.window_start <= w.window_start then w.starts + excluded.starts
                         else excluded.starts end,
           window_start = greatest(w.window_start, excluded.window_start)
  ),
  abandoned_error as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select pk.task_id, pk.current_lease_id,
           format('abandoned: %s leases expired without completion (max_leases %s)', pk.counted_leases, _max_leases)
      from picked pk where pk.poisoned
  ),
  abandoned as (
    -- No lease: the claimer abandoning the task does not hold one, so the last holder's
    -- fenced completion is refused as lease_lost.
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
    select pk.task_id, null, _now, 'abandoned', pk.task_type from picked pk where pk.poisoned
  ),
  abandoned_removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select pk.task_id from picked pk where pk.poisoned))
  ),
  -- One lease per claim (queues.claim_lease): every task the claim took shares its
  -- task_lease_id (from task_lease's sequence, so a claim's id never equals a per-task
  -- lease's), and the claim names its one suspect. No row is written when nothing is
  -- eligible.
  leased as (
    insert into queues.claim_lease (task_id, worker_key, leased_at, expires_at, task_ids, task_range, suspect_task_id)
    select max(e.task_id), _worker_key, _now, _now + make_interval(secs => _lease_seconds),
           array_agg(e.task_id order by e.task_id),
           int8range(min(e.task_id), max(e.task_id), '[]'),
           max(e.task_id) filter (where e.suspect)
      from eligible e
    having count(*) > 0
    returning task_lease_id, task_ids
  ),
  -- The claimed rows are found by primary key from the array of their ids (an index
  -- condition): a join of task_pending to the claim would be planned from task_pending's
  -- statistics, and statistics taken when a busy queue had just drained (many pages,
  -- nearly no live rows) made the planner scan the whole table (seconds per claim once
  -- the queue filled again). SET expressions read the row as it was: a lease still
  -- current here expired, and is left uncounted unless it named the task its suspect.
  moved as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds),
           current_lease_id = l.task_lease_id,
           lease_count = p.lease_count + 1,
           uncounted_count = p.uncounted_count + (p.current_lease_id is not null and not p.suspect_lease)::integer,
           -- The new lease names the task its suspect when a lease of it ended without an
           -- end (as picked decided: at most one per claim).
           suspect_lease = p.lease_count - p.released_count - p.failed_attempts > 0
      from leased l
     where p.task_id = any (array(select e.task_id from eligible e))
    returning p.task_id, p.lease_count, p.current_lease_id as task_lease_id, _now as leased_at,
              p.available_at as expires_at
  )
  select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
         t.enqueued_at, t.scheduled_at, m.task_lease_id, m.leased_at, m.expires_at, m.lease_count
    from moved m
   cross join lateral (
     select * from queues.task t where t.task_id = m.task_id limit 1
   ) t
   order by t.priority desc, t.scheduled_at, t.task_id;
end;
$$;

-- Claim up to _limit ready tasks (optionally only of _task_types) for _worker_id, each
-- with a new lease of _lease_seconds (default 300). Ready: not completed, scheduled_at
-- reached, no live lease. Order: priority desc, scheduled_at, task_id. Tasks that had
-- _max_leases (default 5) leases expire are abandoned instead (see above).
create or replace function queues.claim_tasks(
  _worker_id     text,
  _limit         integer default null,
  _task_types    text[] default null,
  _lease_seconds integer default null,
  _max_leases    integer default null
) returns table (
  task_id       bigint,
  task_type     text,
  payload       jsonb,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  task_lease_id bigint,
  leased_at     timestamptz,
  expires_at    timestamptz,
  lease_count   integer
)
  language sql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  -- Paused task types are left out (queues.claimable_task_types).
  select * from queues.claim_tasks_at(now(), _worker_id, coalesce(_limit, 1),
                                      queues.claimable_task_types(_task_types),
                                      coalesce(_lease_seconds, 300), coalesce(_max_leases, 5))
$$;

-- When a worker whose claim came back short should look again: the milliseconds until
-- the earliest task of _task_types (null: any type; paused types left out, as the claim
-- leaves them out) without a lease is scheduled, counted from the database's clock; null
-- when no such task is scheduled later than now (at most 2,147,483,647, about 24 days,
-- for a task further ahead). Workers sleep until then, or their poll interval,
-- whichever comes first, so a task scheduled a moment ahead (a supervisor's next run
-- after its backoff) starts when it is due, not at the next poll; its enqueue woke them
-- (queues.enqueue notifies for tasks due within a minute) so that they ask. Not seen: a
-- retry's backoff (available_at of a task scheduled in the past), which the next poll
-- finds. Cost: per task type, one probe of task_pending_ready_idx per priority in use (a
-- loose scan of the distinct priorities, then the earliest future task of each),
-- whatever the number of tasks scheduled.
-- Flow limits: a type under a rate limit that has a task ready now answers the start of
-- the limit's next window at the latest (its tasks may be held back until then); the
-- limits are read once (a tiny table), and a ready task probed only for a type with one.
create or replace function queues.next_claim_in_ms(_task_types text[] default null)
  returns integer
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  with recursive types as (
    select distinct u.task_type
      from unnest(coalesce(queues.claimable_task_types(_task_types),
                           array(select tt.task_type from queues.task_type tt))) as u(task_type)
     where u.task_type is not null
  ),
  priorities (task_type, priority) as (
    select ty.task_type,
           (select p.priority from queues.task_pending p
             where p.task_type = ty.task_type and p.current_lease_id is null
             order by p.priority desc limit 1)
      from types ty
    union all
    select pr.task_type,
           (select p.priority from queues.task_pending p
             where p.task_type = pr.task_type and p.current_lease_id is null and p.priority < pr.priority
             order by p.priority desc limit 1)
      from priorities pr
     where pr.priority is not null
  )
  ,
  next_scheduled as (
    -- (greatest would turn "none" into 0: it ignores nulls; beyond about 24 days, the
    -- integer's largest value)
    select case when min(n.scheduled_at) is not null
                then least(greatest(ceil(extract(epoch from min(n.scheduled_at) - clock_timestamp()) * 1000), 0),
                           2147483647)::integer end as ms
      from priorities pr
     cross join lateral (
       select p.scheduled_at from queues.task_pending p
        where p.task_type = pr.task_type and p.current_lease_id is null and p.priority = pr.priority
          and p.scheduled_at > clock_timestamp()
        order by p.scheduled_at
        limit 1
     ) n
     where pr.priority is not null
  ),
  next_window as (
    select min(greatest(ceil(extract(epoch from queues.limit_window_start(clock_timestamp(), l.interval_ms)
                                                 + make_interval(secs => l.interval_ms / 1000.0)
                                                 - clock_timestamp()) * 1000), 0))::integer as ms
      from queues.task_limits() l
     where l.interval_ms is not null
       and l.task_type in (select ty.task_type from types ty)
       and coalesce((select true from queues.task_pending p
                      where p.task_type = l.task_type and p.current_lease_id is null
                        and p.scheduled_at <= clock_timestamp() and p.available_at <= clock_timestamp()
                      order by p.priority desc, p.scheduled_at, p.task_id
                      limit 1), false)
  )
  select least(s.ms, w.ms) from next_scheduled s, next_window w
$$;

-- The seeds' single claim: one ready task with a new lease, or no row.
create or replace function queues.dequeue_next_available_task(
  _worker_id     text default null,
  _lease_seconds integer default null
) returns setof queues.task
  language sql volatile
  rows 1
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  -- The columns of queues.task, in table order.
  select c.task_id, c.task_type, c.payload, c.priority, c.resource_key, c.max_attempts,
         c.enqueued_at, c.scheduled_at,
         (select t.group_key from queues.task t where t.task_id = c.task_id)
    from queues.claim_tasks_at(now(), coalesce(_worker_id, session_user::text), 1,
                               queues.claimable_task_types(null), coalesce(_lease_seconds, 300), 5) c
$$;
--! EndIncluded queues/claim.sql
--! Included queues/complete.sql
-- Completion: queues.complete_task (one) and queues.complete_tasks (a batch).
--
-- Fencing: a caller that passes the lease it holds can only complete while that lease
-- is the task's newest one. A worker whose lease expired and was re-claimed by another
-- worker gets 'lease_lost' and changes nothing.
--
-- Where an end is written: the plain successes of a call are one completion round per
-- task type (queues.completion_round, naming its tasks with the lease and start of each);
-- every other end is a queues.task_completed row. Read a task's end through
-- queues.task_end / queues.task_end_of (sql/queues/task_end.sql), never the tables.

-- Completes a batch. Parallel arrays: _task_lease_ids, _outcomes, _retries and
-- _started_at may be null (no fencing, outcome by default, retries allowed, start not
-- known) or have one element per task (elements may be null). _started_at: when the run
-- that ends here started, kept with the completion (or the failed attempt): the worker
-- knows it, and reports no start separately.
-- The default outcome (a null element) keeps a failure reported with queues.fail_task:
-- 'failed' when an error was recorded against the task during its current run (under
-- its current lease, or without a lease since that lease was taken; since it was
-- enqueued when it holds none), else 'succeeded'. So the specification's worker contract,
-- fail_task and then complete_task, completes the task failed.
-- A 'failed' outcome for a task with max_attempts > 1 and attempts left is not terminal
-- unless its _retries element is false (a failure no retry can mend, such as a
-- validation failure): the attempt is recorded (queues.task_attempt_failed) and the task
-- runs again after an exponential backoff (internal.backoff).
-- 'validation_failed' (a validation_failure_message: a business outcome no retry can
-- mend) is final too, and, unlike 'failed', never a dead letter.
-- A keyed task's lease completes only while the task holds its resource key.
-- Returns one row per input task, in input order: result is
--   'completed'          this call completed it
--   'retry_scheduled'    a failed attempt of a task that runs again
--   'already_completed'  it was completed before by a caller passing the same lease, or
--                        this call passes none (idempotent; nothing changed)
--   'lease_lost'         _task_lease_id is not the task's current lease, its resource key
--                        went to another task, or the task was completed by anyone not
--                        passing this lease: another worker, an unfenced caller, or the
--                        queue abandoning it (nothing changed)
--   'unknown_task'       no such task
create or replace function queues.complete_tasks(
  _task_ids       bigint[],
  _task_lease_ids bigint[] default null,
  _outcomes       text[] default null,
  _retries        boolean[] default null,
  _started_at     timestamptz[] default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  -- Planned once, not per call: the statements below have one good plan whatever the
  -- arguments (index order with a LIMIT; primary-key probes), and planning was about
  -- 40% of the call's cost.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _bad text;
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 tasks per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain null' using errcode = '22004';
  end if;
  if _task_lease_ids is not null and cardinality(_task_lease_ids) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids must have one element per task (% tasks, % lease ids)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if _outcomes is not null and cardinality(_outcomes) <> cardinality(_task_ids) then
    raise exception 'outcomes must have one element per task (% tasks, % outcomes)',
      cardinality(_task_ids), cardinality(_outcomes) using errcode = '22023';
  end if;
  select o into _bad from unnest(_outcomes) o
   where o is not null and o not in ('succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed') limit 1;
  if found then
    raise exception 'unknown outcome %; expected succeeded, failed, abandoned, cancelled or validation_failed',
      quote_literal(left(_bad, 100)) using errcode = '22023';
  end if;
  if _retries is not null and cardinality(_retries) <> cardinality(_task_ids) then
    raise exception 'retries must have one element per task (% tasks, % retries)',
      cardinality(_task_ids), cardinality(_retries) using errcode = '22023';
  end if;
  if _started_at is not null and cardinality(_started_at) <> cardinality(_task_ids) then
    raise exception 'started_at must have one element per task (% tasks, % start times)',
      cardinality(_task_ids), cardinality(_started_at) using errcode = '22023';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;

  perform queues.lock_resource_keys(_task_ids);

  return query
  with input as (
    select i.task_id, i.task_lease_id, i.outcome,
           coalesce(i.retry, true) as may_retry, i.started_at, i.ord
      from unnest(_task_ids,
                  coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])),
                  coalesce(_outcomes, array_fill(null::text, array[cardinality(_task_ids)])),
                  coalesce(_retries, array_fill(null::boolean, array[cardinality(_task_ids)])),
                  coalesce(_started_at, array_fill(null::timestamptz, array[cardinality(_task_ids)])))
           with ordinality as i(task_id, task_lease_id, outcome, retry, started_at, ord)
  ),
  -- The pending rows this call may act on, locked: a concurrent claim skips them, a
  -- concurrent completion waits and then finds nothing.
  held as (
    select h.task_id, h.task_type, h.current_lease_id, h.resource_key, h.task_lease_id, h.outcome,
           h.outcome = 'failed' and h.may_retry and h.failed_attempts + 1 < h.max_attempts as retry,
           h.failed_attempts, h.started_at
      from (
    select p.task_id, p.task_type, p.current_lease_id, p.resource_key, i.task_lease_id, i.may_retry,
           p.failed_attempts, p.max_attempts, i.started_at,
           case
             when i.outcome is not null then i.outcome
             -- The default: an error of the current run makes it a failure (evaluated only
             -- for a null outcome; the worker always names its outcome).
             when exists (select 1 from queues.error e
                           where e.task_id = p.task_id
                             and (e.task_lease_id = p.current_lease_id
                                  or (e.task_lease_id is null
                                      and e.created_at >= coalesce(
                                            (select l.leased_at from queues.task_lease_at(p.task_id, p.current_lease_id) l),
                                            (select t.enqueued_at from queues.task t where t.task_id = p.task_id)))))
               then 'failed'
             else 'succeeded'
           end as outcome
      from queues.task_pending p
      join input i on i.task_id = p.task_id
     -- A primary-key probe per task, whatever the planner estimates for the input.
     where p.task_id = any (_task_ids)
       and (i.task_lease_id is null
            or (p.current_lease_id = i.task_lease_id
                -- A keyed task completes under its lease only while it holds its key.
                and (p.resource_key is null
                     or exists (select 1 from queues.resource_lease r
                                 where r.resource_key = p.resource_key and r.task_id = p.task_id))))
       for update of p
      ) h
  ),
  -- Simple retries: a failed attempt with attempts left runs again after a backoff.
  retry_facts as (
    insert into queues.task_attempt_failed (task_id, task_lease_id, failed_at, retry_at, started_at)
    select h.task_id, h.current_lease_id, now(), now() + internal.backoff(h.failed_attempts, 3600), h.started_at
      from held h where h.retry
    returning task_id, retry_at
  ),
  retried as (
    update queues.task_pending p
       set available_at = r.retry_at,
           current_lease_id = null,
           failed_attempts = p.failed_attempts + 1
      from retry_facts r
     where p.task_id = r.task_id
       and p.task_id = any (array(select r2.task_id from retry_facts r2))
    returning p.task_id
  ),
  removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select h.task_id from held h where not h.retry))
    returning p.task_id
  ),
  -- Every end but a plain success: a task_completed row per task. The lease the caller
  -- held; null when it passed none. A fenced caller is told 'already_completed' only for
  -- a completion made under its own lease.
  ended as (
    insert into queues.task_completed (task_id, task_lease_id, outcome, task_type, started_at)
    select h.task_id, h.task_lease_id, h.outcome, h.task_type, h.started_at
      from held h where not h.retry and h.outcome <> 'succeeded'
    on conflict do nothing
    returning task_completed.task_id
  ),
  -- Plain successes: one completion round per task type, naming its tasks in ascending
  -- order with the lease the caller held and the run's start (microseconds since the
  -- epoch) of each. No constraint keeps a task from two ends: the pending row, locked
  -- above and deleted here, does (every end deletes it in the transaction that records
  -- the end, so a task with a pending row has none, and a concurrent completer of the
  -- same task waits for the lock and then finds no row).
  rounds as (
    insert into queues.completion_round (task_id, task_type, task_ids, task_lease_ids, started_us, task_range)
    select max(h.task_id), h.task_type,
           array_agg(h.task_id order by h.task_id),
           array_agg(h.task_lease_id order by h.task_id),
           array_agg((extract(epoch from h.started_at) * 1000000)::bigint order by h.task_id),
           int8range(min(h.task_id), max(h.task_id), '[]')
      from held h where not h.retry and h.outcome = 'succeeded'
     group by h.task_type
    returning completion_round.task_ids
  ),
  completed as (
    select e.task_id from ended e
    union all
    select u.task_id from rounds r cross join lateral unnest(r.task_ids) as u(task_id)
  ),
  -- The task's resource key (if any) is free again, whether it completed or waits to retry.
  unlocked as (
    delete from queues.resource_lease r
     using held h
     where h.resource_key is not null and r.resource_key = h.resource_key and r.task_id = h.task_id
  )
  select i.task_id,
         case
           when c.task_id is not null then 'completed'
           when rt.task_id is not null then 'retry_scheduled'
           -- Completed under another lease: the caller's lease was taken over, and its
           -- transaction must not commit as if it had completed the task.
           -- (Its end in either shape: queues.task_end_of, an index probe of each; a
           -- scalar subquery, evaluated only for the tasks this call did not complete.)
           when i.task_lease_id is not null
                and coalesce((select true from queues.task_end_of(i.task_id) e
                               where e.task_lease_id is distinct from i.task_lease_id limit 1), false)
             then 'lease_lost'
           when coalesce((select true from queues.task_end_of(i.task_id) e limit 1), false)
             then 'already_completed'
           when not exists (select 1 from queues.task t where t.task_id = i.task_id)
             then 'unknown_task'
           else 'lease_lost'
         end
    from input i
    left join completed c on c.task_id = i.task_id
    left join retried rt on rt.task_id = i.task_id
   order by i.ord;
end;
$$;

-- The seeds' completion, extended: idempotent (true when this call completed the task or
-- scheduled its retry, false when it was already completed); fenced when _task_lease_id
-- is given (raises when that lease is no longer current); raises for an unknown task.
create or replace function queues.complete_task(
  _task_id       bigint,
  _task_lease_id bigint default null,
  _outcome       text default null
) returns boolean
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result text;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  select c.result into _result
    from queues.complete_tasks(array[_task_id], array[_task_lease_id], array[_outcome]) c;
  if _result = 'unknown_task' then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  elsif _result = 'lease_lost' then
    -- The queue's lease-loss marker: SQLSTATE 55000 with schema queues and constraint
    -- task_lease_current (clients read lease loss from it, not from 55000 alone).
    raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', schema = 'queues', constraint = 'task_lease_current',
            hint = 'Another worker claimed the task after this lease expired, or it was completed without this lease.';
  end if;
  return _result in ('completed', 'retry_scheduled');
end;
$$;
--! EndIncluded queues/complete.sql
--! Included queues/fail.sql
-- queues.fail_task: record an operational error against a task. Append-only and not
-- terminal: the worker completes the task afterwards (supervisors decide on retries).
-- Fenced like completion: with _task_lease_id, only the task's newest lease, neither
-- released nor revoked, of a task not completed by anyone else, may record.

create or replace function queues.max_error_message_length() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 10000 $$;

create or replace function queues.fail_task(
  _task_id       bigint,
  _error_message text,
  _task_lease_id bigint default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _error_id bigint;
  _message text := _error_message;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  if _message is null or btrim(_message) = '' then
    raise exception 'error_message must not be empty' using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task t where t.task_id = _task_id) then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  if _task_lease_id is not null then
    if not exists (select 1 from queues.task_lease_at(_task_id, _task_lease_id)) then
      raise exception 'lease % does not belong to task %', _task_lease_id, _task_id
        using errcode = '22023';
    end if;
    if exists (select 1 from queues.task_leases_of(_task_id) l
                where l.task_lease_id > _task_lease_id)
       or exists (select 1 from queues.task_lease_release r
                   where r.task_id = _task_id and r.task_lease_id = _task_lease_id)
       or exists (select 1 from queues.task_lease_revocation v
                   where v.task_id = _task_id and v.task_lease_id = _task_lease_id)
       -- Completed by anyone not passing this lease (another worker, an unfenced call,
       -- the queue abandoning it): the holder's run is over.
       or exists (select 1 from queues.task_end_of(_task_id) c
                   where c.task_lease_id is distinct from _task_lease_id) then
      raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
        using errcode = '55000', schema = 'queues', constraint = 'task_lease_current',
              hint = 'Another worker claimed the task after this lease expired.';
    end if;
  end if;
  if length(_message) > queues.max_error_message_length() then
    _message := left(_message, queues.max_error_message_length()) || ' [truncated]';
  end if;

  insert into queues.error (task_id, task_lease_id, error_message)
  values (_task_id, _task_lease_id, _message)
  returning error_id into _error_id;
  return _error_id;
end;
$$;
--! EndIncluded queues/fail.sql
--! Included queues/workers.sql
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
$$;

-- The stale leases now, for workers presumed dead after 10 minutes of silence.
create or replace view queues.stale_lease as
select * from queues.stale_leases_at(now(), 600);
comment on view queues.stale_lease is 'Live leases held by workers not seen for 10 minutes.';

-- Revokes the stale leases (see stale_leases_at): their tasks are claimable at once. A
-- revocation of a started task counts as an expired lease towards abandoning it, and the revoked
-- worker can no longer complete or record against it. Returns what was revoked.
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
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id from queues.stale_leases_at(_now, _dead_after_seconds) s
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null,
           -- Its task is a suspect from now on (see queues.claim_tasks_at); the lease counts
           -- towards abandonment only if it named the task its suspect.
           uncounted_count = p.uncounted_count + (not p.suspect_lease)::integer
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
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
-- the process), and the revocation counts towards abandonment only for the task a lease
-- named its suspect (see queues.claim_tasks_at). The others are claimable at once
-- instead of when their leases expire; the named suspect stays unclaimable until its
-- lease would have expired, as without a supervisor, so a poison task's crash loop is
-- paced by its lease and the supervisor's spares keep up with the deaths instead of all
-- dying in a second.
-- Returns what was revoked; wakes listening workers.
create or replace function queues.revoke_worker_leases(_worker_id text)
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
  -- A lease names its worker by key (queues.worker_name), or by id if written before.
  select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
  perform queues.lock_resource_keys(array(
    select p.task_id from queues.task_pending p
     cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)));
  return query
  with held as (
    select p.task_id, p.current_lease_id as task_lease_id, p.suspect_lease as suspect
      from queues.task_pending p
     cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)
  ),
  revoked as (
    -- available_at of a leased row is its lease's expiry (heartbeats included).
    update queues.task_pending p
       set available_at = case when h.suspect then p.available_at else now() end,
           current_lease_id = null,
           uncounted_count = p.uncounted_count + (not h.suspect)::integer
      from held h
     where p.task_id = h.task_id and p.current_lease_id = h.task_lease_id
    returning p.task_id, h.task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, now(), format('worker %s died', _worker_id) from revoked r
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
--! EndIncluded queues/workers.sql
--! Included queues/dead_letter.sql
-- Dead letters: tasks that ended badly with nobody else to deal with it, and redrive.
--
-- A task is a dead letter when it completed 'abandoned', or 'failed' without an
-- error_handler in its payload (a task with an error handler hands its failures to a
-- supervisor, which retries on its own), and it has not been redriven.

-- task_id is the completion's, so that a page's bound and order (task_id < $n order by
-- task_id desc) walk task_completed_unsuccessful_task_idx from the bound down.
-- admin.list_dead_letters (sql/admin/dead_letters.sql) repeats this definition with the
-- bounds of one partition set: change both together.
create or replace view queues.dead_letter as
select c.task_id, t.task_type, t.payload, c.outcome, c.completed_at,
       (select e.error_message from queues.error e where e.task_id = t.task_id
         order by e.error_id desc limit 1) as last_error,
       (select count(*)::integer from queues.task_leases_of(t.task_id)) as attempts
  from queues.task_completed c
  join queues.task t on t.task_id = c.task_id
 where c.outcome <> 'succeeded'
   and (c.outcome = 'abandoned' or (c.outcome = 'failed' and not t.payload ? 'error_handler'))
   and not exists (select 1 from queues.task_redriven r where r.task_id = t.task_id);
comment on view queues.dead_letter is 'Tasks that ended failed or abandoned with no handler to deal with it, not yet redriven.';

-- Sends a dead letter round again: a new task with the same type, payload, priority,
-- resource key and max_attempts, runnable now. Returns the new task id.
create or replace function queues.redrive_task(_task_id bigint)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task queues.task;
  _new_task_id bigint;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  select * into _task from queues.task t where t.task_id = _task_id;
  if not found then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  -- Serialise redrives of one task on its completion row.
  perform 1 from queues.task_completed c where c.task_id = _task_id for update;
  if exists (select 1 from queues.task_redriven r where r.task_id = _task_id) then
    raise exception 'task % was already redriven', _task_id using errcode = '22023';
  end if;
  if not exists (select 1 from queues.dead_letter d where d.task_id = _task_id) then
    raise exception 'task % is not a dead letter', _task_id using errcode = '22023',
      hint = 'Only tasks that completed failed (without an error handler) or abandoned can be redriven.';
  end if;
  _new_task_id := queues.enqueue_internal(_task.task_type, _task.payload, now(), _task.priority,
                                 _task.resource_key, _task.max_attempts);
  insert into queues.task_redriven (task_id, new_task_id) values (_task_id, _new_task_id);
  return _new_task_id;
end;
$$;
--! EndIncluded queues/dead_letter.sql
--! Included queues/maintenance.sql
-- Maintenance of the derived structures (task_pending, resource_lease). Owner only.

-- Rebuilds queues.task_pending and queues.resource_lease from the facts: every task
-- without a completion, available at its scheduled time, the retry time of its last
-- failed attempt, the retry time of its last transient interruption, or the effective
-- expiry of its newest lease (heartbeats, releases and revocations applied), whichever is
-- latest; a task waiting for its dependencies at 'infinity'. Returns the number of pending
-- tasks.
create or replace function queues.rebuild_task_pending() returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _count bigint;
begin
  lock table queues.task_pending, queues.resource_lease in exclusive mode;
  delete from queues.task_pending;
  delete from queues.resource_lease;
  insert into queues.task_pending
    (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
     lease_count, released_count, max_attempts, failed_attempts, uncounted_count, interrupted_count,
     suspect_lease, group_key)
  -- A scheduled task asked to run now (queues.task_run_now) counts from that request.
  select t.task_id, t.task_type, t.priority, least(t.scheduled_at, rn.requested_at), t.resource_key,
         greatest(least(t.scheduled_at, rn.requested_at),
                  -- a lease ended by a failed attempt gives way to the attempt's retry time
                  case when f.task_lease_id is null or f.task_lease_id < l.task_lease_id then l.expires_at end,
                  f.retry_at,
                  -- a lease ended by a transient interruption gives way to its retry time
                  i.retry_at),
         -- A lease ended by a release, a revocation or a later failed attempt is not held.
         case when l.released_at is null and l.revoked_at is null
                   and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id)
              then l.task_lease_id end,
         coalesce(l.lease_count, 0), coalesce(l.released_count, 0),
         t.max_attempts, coalesce(f.failed_attempts, 0),
         -- Leases that ended without counting towards abandonment: neither released, nor
         -- ended by a failed attempt, nor the lease still held (a claim counts that one
         -- when it expires), and not naming the task their suspect (a lease written before
         -- suspects were named: not started).
         (select count(*)::integer
            from queues.task_lease_effective_of(t.task_id) u
           where u.released_at is null
             and not coalesce(u.suspect, exists (select 1 from queues.task_lease_started s
                                                  where s.task_id = u.task_id and s.task_lease_id = u.task_lease_id))
             and not exists (select 1 from queues.task_attempt_failed a where a.task_id = u.task_id and a.task_lease_id = u.task_lease_id)
             and not (u.task_lease_id = l.task_lease_id and l.revoked_at is null
                      and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id))),
         coalesce(i.interrupted_count, 0),
         coalesce(l.suspect, false),
         t.group_key
    from queues.task t
    left join lateral (
      select le.task_lease_id, le.expires_at, le.released_at, le.revoked_at, le.suspect,
             count(*) over () :: integer as lease_count,
             count(le.released_at) over () :: integer as released_count
        from queues.task_lease_effective_of(t.task_id) le
       order by le.task_lease_id desc
       limit 1
    ) l on true
    left join lateral (
      select a.retry_at, a.task_lease_id, count(*) over () :: integer as failed_attempts
        from queues.task_attempt_failed a
       where a.task_id = t.task_id
       order by a.task_attempt_failed_id desc
       limit 1
    ) f on true
    left join lateral (
      select max(x.retry_at) as retry_at, count(*)::integer as interrupted_count
        from queues.task_interruption x
       where x.task_id = t.task_id
    ) i on true
    left join queues.task_run_now rn on rn.task_id = t.task_id
   where not exists (select 1 from queues.task_end_of(t.task_id) c);
  get diagnostics _count = row_count;

  -- A task never leased whose dependencies have not all succeeded waits for them
  -- (sql/queues/dependencies.sql).
  update queues.task_pending p
     set scheduled_at = 'infinity', available_at = 'infinity'
   where p.current_lease_id is null and p.lease_count = 0
     and p.task_id in (
       select d.task_id from queues.task_dependency d
        where exists (select 1 from queues.task_pending x where x.task_id = d.depends_on_task_id)
           or exists (select 1 from queues.task_completed c
                       where c.task_id = d.depends_on_task_id and c.outcome <> 'succeeded'));

  -- Each resource key held by a live lease, as the claim left it.
  insert into queues.resource_lease (resource_key, task_id, expires_at)
  select distinct on (p.resource_key) p.resource_key, p.task_id, p.available_at
    from queues.task_pending p
   where p.resource_key is not null and p.current_lease_id is not null
   order by p.resource_key, p.available_at desc;
  if _count > 0 then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _count;
end;
$$;
--! EndIncluded queues/maintenance.sql
--! Included queues/partitions_maintain.sql
-- History maintenance: sets made ahead of need, old sets dropped, one short step at a time
-- (sql/queues/partitions.sql describes the sets; sql/queues/partitions_locks.sql the locks).

-- One step of partition maintenance at _now: the first of these that has work to do,
-- locking one table only (see "Locks" in
-- partitions_locks.sql), its locks taken between the queue's
-- transactions within lock_timeout_ms (queues.lock_history_tables):
-- 1. Sets ahead of need, one table per step: first a set left half made (some table has
--    its partition, task not yet; task's is made last), then a new set above every range
--    there is or was and above any task in the default partition, of partition_size task
--    ids, while the sets above the last task id handed out cover less than
--    partitions_ahead * partition_size ids. A set less than partition_size ids above the
--    last id (maintenance fell behind) is made whole in one step instead, above the last id.
-- 1b. Tasks in the default partition (ids handed out while no set covered them) are made
--    a set with their facts, at most 2,000 tasks per step: a half made set they fell into
--    is finished so, or a range of the gap they lie in (queues.adopt_history_range).
-- 2. A table detached from a dropped set is dropped (truncated first if it has rows and
--    a foreign key).
-- 3. A fact table's partition of a dropped set is detached.
-- 4. The oldest set that may go is dropped, starting with its task partition, which is
--    detached (the set's tasks are gone from then on; steps 3 and 2 take its facts and the
--    detached tables away): a set goes when its whole range lies below the last task id
--    (no new task can land in it), it holds no pending task (queues.task_pending, then
--    every task checked against its end: a task_completed row or a completion round), its
--    newest end is older than the retention window, and no completion round in it names
--    a task of an older set still kept (a round lives in the set of the largest task id
--    it names). A set with one pending task is kept, however old.
-- 5. With nothing else to do: the sets that are done are measured for the History page
--    (queues.measure_history_sets).
-- Drops are recorded in queues.history_partition_dropped. A step that cannot get its lock
-- in time (or finds a task fell into the default partition in the range it makes) is
-- rolled back, recorded in queues.history_step_skipped and reported skipped; the run goes
-- on ("more") until 5 steps have been skipped within a minute. Returns
--   {"action": "attached" | "set_created" | "set_adopted" | "dropped_table" | "truncated" | "detached" |
--              "set_dropped" | "none" | "skipped" | "busy",
--    "table", "lower_bound", "upper_bound", "tasks", "reason", "late": as they apply,
--    "measured": with "none", the sets whose figures step 5 wrote,
--    "kept": sets below the last task id kept so far, "more": whether to call again}
-- "busy": another maintenance step is in flight (one maintainer at a time). Owner only.
create or replace function queues.maintain_history_step_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  -- A bound for any other lock a statement here might wait for (its own are taken
  -- first, without waiting); restored when the function returns.
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint;
  _doing text;
  _table text;
  _name text;
  _lower bigint;
  _upper bigint;
  _truncate boolean;
  _kept integer := 0;
  _set record;
  _tasks bigint;
  _last_completed timestamptz;
  _measured integer;
  _spilled bigint;
  _gap_lower bigint;
  _gap_upper bigint;
  -- The locks that keep every writer of history out (a late set, a move out of the
  -- default partitions): SHARE on each parent, ACCESS EXCLUSIVE on its default.
  _writers_out text[] := array(select x from unnest(queues.history_tables()) t(name),
                                 lateral (values (t.name), (t.name || '_default')) v(x));
  _writers_out_modes text[] := array(select m from unnest(queues.history_tables()) t(name),
                                       lateral (values ('share'), ('access exclusive')) v(m));
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if not pg_try_advisory_xact_lock(20252, 1) then
    return jsonb_build_object('action', 'busy', 'more', false);
  end if;
  select * into _setting from queues.history_setting;
  _last_id := queues.last_task_id();

  begin
    -- 1. Ahead of need: a half made set, unless a task fell into the default partition in
    --    its range (maintenance fell behind while it was half made): then task's
    --    partition cannot be attached, new sets start above it, and step 1b finishes it
    --    by moving those tasks into it.
    with b as (select * from queues.history_partition_bounds())
    select h.lower_bound, h.upper_bound into _lower, _upper
      from (select distinct b.lower_bound, b.upper_bound from b) h
     where not exists (select 1 from b x where x.table_name = 'task' and x.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.task_default t where t.task_id >= h.lower_bound and t.task_id < h.upper_bound)
     order by h.lower_bound
     limit 1;
    if _lower is null then
      -- A new set. Ranges are never reused: above every partition there is or was, and
      -- above any task in the default partition (a new set cannot overlap rows there).
      select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                      coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                      coalesce((select max(t.task_id) + 1 from queues.task_default t), 0))
        into _lower;
      if _lower < _last_id + 1 + _setting.partitions_ahead::bigint * _setting.partition_size then
        _upper := _lower + _setting.partition_size;
      else
        _lower := null;
      end if;
    end if;
    if _lower is not null and _lower <= _last_id + _setting.partition_size then
      -- Late: less than one set's width of ids is left before the ids handed out reach
      -- the set (maintenance fell behind). Made table by table, it could be outrun: a
      -- task given an id in its range before task's partition exists falls into the
      -- default partition, its facts into theirs, and the next table's attach fails on
      -- them, run after run. So the whole set is made in this one step, under locks
      -- that keep every writer of history out (SHARE on each parent, ACCESS EXCLUSIVE on
      -- each default), starting above the last id read under them: no task of its range
      -- exists, and none can be written until it commits. The ids handed out before it
      -- fall into the default partitions (queues.history_summary_at counts them).
      _doing := format('make the set from %s at once (late)', _lower);
      perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
      _last_id := queues.last_task_id();
      if exists (select 1 from queues.history_partition_bounds() b where b.lower_bound = _lower)
         and not exists (select 1 from queues.task_default t where t.task_id >= _lower and t.task_id < _upper) then
        null; -- a half made set that no task has reached: finished as it is
      else
        select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                        coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                        coalesce((select max(t.task_id) + 1 from queues.task_default t), 0),
                        _last_id + 1)
          into _lower;
        _upper := _lower + _setting.partition_size;
      end if;
      perform queues.create_history_partition(_lower, _upper);
      return jsonb_build_object('action', 'set_created', 'table', queues.history_partition_name('task', _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'late', true, 'more', true);
    end if;
    if _lower is not null then
      select t.name into _table
        from unnest(queues.history_tables()) with ordinality t(name, n)
       where to_regclass(format('queues.%I', queues.history_partition_name(t.name, _lower))) is null
       order by t.name = 'task', t.n
       limit 1;
      _doing := format('attach queues.%I', queues.history_partition_name(_table, _lower));
      perform queues.attach_history_partition(_table, _lower, _upper);
      if _table = 'task' then
        insert into queues.history_partition_created (lower_bound, upper_bound)
        values (_lower, _upper) on conflict (lower_bound) do nothing;
      end if;
      return jsonb_build_object('action', case when _table = 'task' then 'set_created' else 'attached' end,
                                'table', queues.history_partition_name(_table, _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'more', true);
    end if;

    -- 1b. Tasks in the default partition (ids handed out while no set covered them): the
    --    range around the lowest is made a set, its rows moved out of the default
    --    partitions (queues.adopt_history_range), so that retention drops them with it
    --    and pending ones stay claimable. The range: a half made set's own (finished so),
    --    or the gap between the ranges there are or were, below the lowest range above
    --    the task and cut after its 2,000th task (a step moves at most that many tasks,
    --    with their facts, under its locks). Not while no range lies above the task: the
    --    ids may still be handed out, and step 1 makes the set above them first.
    select t.task_id into _spilled from queues.task_default t order by t.task_id limit 1;
    if _spilled is not null then
      with r as (
        select b.lower_bound, b.upper_bound from queues.history_partition_bounds() b
        union all
        select d.lower_bound, d.upper_bound from queues.history_partition_dropped d
      )
      select (select min(r.lower_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             (select max(r.upper_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             coalesce((select max(r.upper_bound) from r where r.upper_bound <= _spilled), 0),
             (select min(r.lower_bound) from r where r.lower_bound > _spilled)
        into _lower, _upper, _gap_lower, _gap_upper;
      if _lower is null and _gap_upper is not null then
        -- The gap, cut after its 2,000th task.
        _lower := _gap_lower;
        _upper := least(_gap_upper,
                        coalesce((select t.task_id from queues.task_default t
                                   where t.task_id >= _spilled and t.task_id < _gap_upper
                                   order by t.task_id offset 2000 limit 1), _gap_upper));
      end if;
      if _upper is not null and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = _lower) then
        _doing := format('adopt the default partitions'' tasks in [%s, %s)', _lower, _upper);
        perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
        _tasks := queues.adopt_history_range(_lower, _upper);
        return jsonb_build_object('action', 'set_adopted', 'table', queues.history_partition_name('task', _lower),
                                  'lower_bound', _lower, 'upper_bound', _upper, 'tasks', _tasks, 'more', true);
      end if;
    end if;

    -- 2. A table detached from a dropped set (named as a partition, no longer one). Its
    --    drop locks only itself, so its files are unlinked under no lock the queue waits
    --    for; but dropping a foreign key takes ACCESS EXCLUSIVE on the table it
    --    references, so a table with one (none has today) is truncated first (under its
    --    own lock) and that drop is a catalog change only.
    select c.relname,
           pg_relation_size(c.oid) > 0 and exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'f')
      into _name, _truncate
      from pg_class c
      join unnest(queues.history_tables()) t(name)
        on c.relname = queues.history_partition_name(t.name, substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     where c.relnamespace = 'queues'::regnamespace and c.relkind = 'r' and not c.relispartition
       and exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     order by c.relname
     limit 1;
    if _name is not null then
      if _truncate then
        _doing := format('truncate queues.%I', _name);
        execute format('truncate queues.%I', _name);
        return jsonb_build_object('action', 'truncated', 'table', _name, 'more', true);
      end if;
      _doing := format('drop queues.%I', _name);
      execute format('drop table queues.%I', _name);
      return jsonb_build_object('action', 'dropped_table', 'table', _name, 'more', true);
    end if;

    -- 3. A fact table's partition of a dropped set: detached, a catalog change.
    select b.table_name, b.partition_name, b.lower_bound, b.upper_bound into _table, _name, _lower, _upper
      from queues.history_partition_bounds() b
     where exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = b.lower_bound and d.upper_bound = b.upper_bound)
     order by b.lower_bound, b.table_name
     limit 1;
    if _name is not null then
      _doing := format('detach queues.%I', _name);
      perform queues.lock_history_tables(array[_table, _name, _table || '_default'],
                                         array['access exclusive', 'access exclusive', 'access exclusive'],
                                         _setting.lock_timeout_ms);
      execute format('alter table queues.%I detach partition queues.%I', _table, _name);
      return jsonb_build_object('action', 'detached', 'table', _name, 'lower_bound', _lower, 'upper_bound', _upper,
                                'more', true);
    end if;

    -- 4. Expired sets, oldest first.
    for _set in
      select p.lower_bound, p.upper_bound from queues.history_sets() p
       where not p.is_default and p.upper_bound <= _last_id
       order by p.lower_bound
    loop
      -- Cheap checks first, without strong locks: a pending task, or a recent completion.
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      -- A pending task of a newer set that depends on a task of this one (it reads their
      -- results when it runs; sql/queues/flow_retention.sql).
      if queues.history_set_has_waiting_dependents(_set.lower_bound, _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      -- Its newest end: task_completed's rows in the set, and the completion rounds that
      -- name a task in its range (GiST probes of completion_round.task_range in the
      -- partitions of this set and the newer ones, where such a round lives).
      select greatest(
               (select max(c.completed_at) from queues.task_completed c
                 where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound),
               (select max(r.completed_at) from queues.completion_round r
                 where r.task_range && int8range(_set.lower_bound, _set.upper_bound)
                   and r.task_id >= _set.lower_bound))
        into _last_completed;
      if _last_completed > _now - _setting.retention then
        _kept := _kept + 1;
        continue;
      end if;
      -- A completion round or a claim lease in this set that names a task of an older set
      -- still kept (a round, and a claim lease, lives in the set of the largest task id it
      -- names): dropping it would take that task's end, or a lease of it, away, so the
      -- set waits for the older one.
      if exists (select 1 from queues.completion_round r
                  where r.task_id >= _set.lower_bound and r.task_id < _set.upper_bound
                    and lower(r.task_range) < _set.lower_bound
                    and exists (select 1 from queues.task t
                                 where t.task_id = any (r.task_ids) and t.task_id < _set.lower_bound))
         or exists (select 1 from queues.claim_lease r
                     where r.task_id >= _set.lower_bound and r.task_id < _set.upper_bound
                       and lower(r.task_range) < _set.lower_bound
                       and exists (select 1 from queues.task t
                                    where t.task_id = any (r.task_ids) and t.task_id < _set.lower_bound)) then
        _kept := _kept + 1;
        continue;
      end if;
      -- Every task completed, from the facts (one scan of the set's two partitions).
      select count(*) into _tasks from queues.task t
       where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound;
      if exists (select 1 from queues.task t
                  where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound
                    and not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)
                    -- nor in a completion round (its rounds' task ids in the set, hashed)
                    and not exists (select 1 from queues.completion_round r
                                     cross join lateral unnest(r.task_ids) as x(task_id)
                                     where r.task_range && int8range(_set.lower_bound, _set.upper_bound)
                                       and r.task_id >= _set.lower_bound
                                       and x.task_id = t.task_id)) then
        _kept := _kept + 1;
        continue;
      end if;

      _name := queues.history_partition_name('task', _set.lower_bound);
      _doing := format('detach queues.%I', _name);
      begin
        -- Detaching holds ACCESS EXCLUSIVE on queues.task and the partition, so no
        -- transaction that wrote to the set or read it to complete a task is still open:
        -- check again what could have changed (a task enqueued with an id handed out
        -- before the checks, and its completion).
        perform queues.lock_history_tables(array['task', _name, 'task_default'],
                                           array['access exclusive', 'access exclusive', 'access exclusive'],
                                           _setting.lock_timeout_ms);
        execute format('alter table queues.task detach partition queues.%I', _name);
        if exists (select 1 from queues.task_pending tp
                    where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
           or queues.history_set_has_waiting_dependents(_set.lower_bound, _set.upper_bound)
           or exists (select 1 from queues.task_completed c
                       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                         and c.completed_at > _now - _setting.retention)
           or exists (select 1 from queues.completion_round r
                       where r.task_range && int8range(_set.lower_bound, _set.upper_bound)
                         and r.task_id >= _set.lower_bound
                         and r.completed_at > _now - _setting.retention) then
          -- Roll the block back, which attaches the partition again.
          raise exception 'set [%, %) changed since it was checked', _set.lower_bound, _set.upper_bound
            using errcode = 'QH001';
        end if;
        insert into queues.history_partition_dropped (lower_bound, upper_bound, tasks, last_completed_at, dropped_at)
        values (_set.lower_bound, _set.upper_bound, _tasks, _last_completed, _now);
        return jsonb_build_object('action', 'set_dropped', 'table', _name, 'lower_bound', _set.lower_bound,
                                  'upper_bound', _set.upper_bound, 'tasks', _tasks, 'kept', _kept, 'more', true);
      exception
        when sqlstate 'QH001' then
          _kept := _kept + 1;
      end;
    end loop;

    -- 5. Nothing left to change: the sets that are done are measured for the readers.
    _measured := queues.measure_history_sets(_now);
    delete from queues.history_step_skipped k where k.skipped_at < _now - interval '1 day';
    -- The flow-control facts kept per key, not per task (sql/queues/flow_retention.sql).
    perform queues.prune_flow_facts_at(_now);
  exception
    -- check_violation: a task landed in a default partition, in the range being made,
    -- since it was read above; the next step starts above it. The skip is recorded, and
    -- the run goes on (a later try may find its moment) until 5 steps have been skipped
    -- within a minute.
    when lock_not_available or deadlock_detected or check_violation then
      insert into queues.history_step_skipped (step, reason) values (coalesce(_doing, 'a step'), sqlerrm);
      return jsonb_build_object('action', 'skipped', 'step', _doing, 'reason', sqlerrm, 'kept', _kept,
                                'more', (select count(*) from queues.history_step_skipped k
                                          where k.skipped_at > clock_timestamp() - interval '1 minute') < 5);
  end;
  return jsonb_build_object('action', 'none', 'kept', _kept, 'measured', _measured, 'more', false);
end;
$$;

-- Partition maintenance at _now, every step of queues.maintain_history_step_at in one
-- transaction, until none is left or one is skipped: its locks are held until that
-- transaction ends, so this is for tests and for running it by hand; the schedule runs
-- each step in a transaction of its own (queues.maintain_history_step). Returns
--   {"created": [[lo, hi], ...], "dropped": [[lo, hi], ...], "skipped": [{...}], "kept": n}
create or replace function queues.maintain_history_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _created jsonb := '[]';
  _dropped jsonb := '[]';
  _skipped jsonb := '[]';
  _adopted jsonb := '[]';
  _kept integer := 0;
  _step jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  -- Each step changes the catalog or ends the run (skips end it after 5 within a minute);
  -- the bound only guards against a bug.
  for _i in 1 .. 100000 loop
    _step := queues.maintain_history_step_at(_now);
    case _step ->> 'action'
      when 'set_created' then
        _created := _created || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_dropped' then
        _dropped := _dropped || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_adopted' then
        _adopted := _adopted || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'skipped', 'busy' then
        _skipped := _skipped || jsonb_build_array(_step);
      else
        null;
    end case;
    _kept := coalesce((_step ->> 'kept')::integer, _kept);
    exit when not (_step ->> 'more')::boolean;
  end loop;
  return jsonb_build_object('created', _created, 'dropped', _dropped, 'adopted', _adopted, 'skipped', _skipped,
                            'kept', _kept);
end;
$$;

-- A db_function step: maintain_history_at(now()), every step in the caller's transaction
-- (for a one-off run; the schedule runs queues.maintain_history_step).
create or replace function queues.maintain_history(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_at(now()))
$$;

-- The schedule's step: one step of maintenance (maintain_history_step_at(now())), its
-- report as the payload of a success envelope. The schedule's payload asks the worker to
-- call it again while the report says "more" ("repeat": true, see the worker's
-- db_function processor), each call a transaction of its own, so that no step's lock is
-- held while another step runs.
create or replace function queues.maintain_history_step(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_step_at(now()))
$$;

-- The worker runs maintenance as the db_function task of its schedule. Everything else
-- here is owner only. Granted here, beside the functions, so that a migration including
-- sql/queues/privileges.sql before this file does not name a function that does not
-- exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.maintain_history_step_at(timestamptz)
  from public;
grant execute on function queues.maintain_history(jsonb), queues.maintain_history_step(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
select internal.register_runnable_function('queues.maintain_history_step(jsonb)');
--! EndIncluded queues/partitions_maintain.sql
--! Included admin/workers.sql
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
    -- live leases: the pending rows under a lease that has not expired (bounded by pending work)
    select coalesce(l.worker_id, n.worker_id) as worker_id, count(*) as n
      from queues.task_pending p
      cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
      -- a lease names its worker by key (queues.worker_name), or by id if written before
      left join queues.worker_name n on n.worker_key = l.worker_key
     where p.available_at > _now
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
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id
      from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
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
--! EndIncluded admin/workers.sql
--! Included admin/dead_letters.sql
-- Dead letters, redrive and stale-lease recovery for the operations API. The queue owns
-- the semantics (queues.dead_letter, queues.redrive_task, queues.recover_stale_leases);
-- these wrappers add paging and validation, so the API role needs EXECUTE on admin
-- functions only.

-- Dead letters newest first, optionally of one _task_type, _limit per page (default 50,
-- at most 500), older than _before_task_id.
-- The rows of queues.dead_letter (sql/queues/dead_letter.sql), read range by range of
-- queues.history_walk, newest first, until the page is full (as admin.list_tasks_at does,
-- for the same reason): the view's definition is repeated here with the range's bounds on
-- every partitioned table it reads, so each run opens the range's partitions only (pruned
-- when the plan starts). sql/admin/tasks_filters.test.ts checks that the pages give the
-- view's rows.
create or replace function admin.list_dead_letters(
  _task_type      text default null,
  _limit          integer default null,
  _before_task_id bigint default null
) returns table (
  task_id      bigint,
  task_type    text,
  payload      jsonb,
  outcome      text,
  completed_at timestamptz,
  last_error   text,
  attempts     integer
)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
  -- One plan per session, of a fixed shape: the newest unsuccessful completions of the
  -- range by index, each task and its facts probed by key, stopping at the page. Planned
  -- for each call's values, the planner took 1 ms a call; and its estimates (the view's two
  -- tests of outcome multiply into one row per set) made it sort every dead letter of the
  -- history first: 200 to 500 ms at 10,000,000 tasks, for the first five calls of every
  -- session, before the plan cache settled on a generic plan. Without these settings that
  -- generic plan may merge-join a whole set's tasks instead.
  set plan_cache_mode = force_generic_plan
  set enable_sort = off
  set enable_hashjoin = off
  set enable_mergejoin = off
as $$
declare
  _page integer := admin.page_limit(_limit);
  _lower bigint;
  _upper bigint;
  _found bigint;
  _remaining integer;
begin
  perform admin.assert_task_type(_task_type);
  if _before_task_id is not null and _before_task_id < 1 then
    raise exception 'before_task_id must be a positive task id, got %', _before_task_id
      using errcode = '22023';
  end if;
  _remaining := _page;
  for _lower, _upper in
    -- A range without bounds (a task in the default partition): every task id.
    select coalesce(w.lower_bound, -9223372036854775808), coalesce(w.upper_bound, 9223372036854775807)
      from queues.history_walk(_before_task_id) w
     order by w.lower_bound desc nulls first
  loop
    return query
    select c.task_id, t.task_type, t.payload, c.outcome, c.completed_at,
           (select e.error_message from queues.error e
             where e.task_id = c.task_id
               and e.task_id >= _lower and e.task_id < _upper
             order by e.error_id desc limit 1),
           (select count(*)::integer from queues.task_leases_of(c.task_id))
      from queues.task_completed c
     -- lateral + limit 1: the completions drive, each task probed by key
     cross join lateral (select x.task_type, x.payload from queues.task x
                          where x.task_id = c.task_id and x.task_id >= _lower and x.task_id < _upper
                          limit 1) t
     -- The view's outcome test, in a form the partial index's predicate follows from.
     where c.outcome in ('abandoned', 'failed')
       and (c.outcome = 'abandoned' or not t.payload ? 'error_handler')
       and not exists (select 1 from queues.task_redriven r
                        where r.task_id = c.task_id
                          and r.task_id >= _lower and r.task_id < _upper)
       and c.task_id >= _lower and c.task_id < _upper
       and (_task_type is null or t.task_type = _task_type)
     order by c.task_id desc
     limit _remaining;
    get diagnostics _found = row_count;
    _remaining := _remaining - _found;
    exit when _remaining <= 0;
  end loop;
end;
$$;

-- Redrives one dead letter: a new task with the same type, payload, priority, resource key
-- and max_attempts. Returns the new task id. 22004 for null, 23503 for an unknown task,
-- 22023 when the task is not a dead letter (queues.redrive_task decides).
create or replace function admin.redrive_task(_task_id bigint)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  return queues.redrive_task(_task_id);
end;
$$;

-- Releases at once the live leases of workers not seen for _dead_after_seconds (default
-- 600, between 10 and 86400). Returns the leases released.
create or replace function admin.recover_stale_leases(_dead_after_seconds integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _dead_after integer := coalesce(_dead_after_seconds, 600);
begin
  if _dead_after not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead_after
      using errcode = '22023';
  end if;
  return query
  select r.task_id, r.task_lease_id, r.worker_id from queues.recover_stale_leases(_dead_after) r;
end;
$$;

-- Leases that recover_stale_leases would release now.
create or replace function admin.list_stale_leases()
  returns table (task_id bigint, task_lease_id bigint, worker_id text,
                 last_seen_at timestamptz, expires_at timestamptz)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return query
  select s.task_id, s.task_lease_id, s.worker_id, s.last_seen_at, s.expires_at
    from queues.stale_lease s
   order by s.task_id
   limit 1000;
end;
$$;

-- Retry and redrive facts of one task, merged into admin.get_task's answer:
--   {failed_attempts: [{task_lease_id, failed_at, retry_at}], redriven_to, redriven_from}
create or replace function admin.task_retry_facts(_task_id bigint)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  return jsonb_build_object(
    'failed_attempts', coalesce((
      select jsonb_agg(jsonb_build_object('task_lease_id', f.task_lease_id, 'failed_at', f.failed_at,
                                          'retry_at', f.retry_at) order by f.failed_at)
        from queues.task_attempt_failed f where f.task_id = _task_id), '[]'::jsonb),
    'redriven_to', (select r.new_task_id from queues.task_redriven r where r.task_id = _task_id limit 1),
    'redriven_from', (select r.task_id from queues.task_redriven r where r.new_task_id = _task_id limit 1));
end;
$$;
--! EndIncluded admin/dead_letters.sql
--! Included admin/capacity.sql
-- Capacity planning per role (= task_type): how much work is waiting, how fast a worker
-- gets through it while it works, and how many workers would drain it in 1, 4 or 8 hours.
-- The role-based specification's view of it is public.v_worker_capacity
-- (sql/public/role_based_worker.sql).
--
-- Cost: pending/ready/running count queues.task_pending (bounded by pending work);
-- throughput reads only the completions of the last _window_seconds, through the
-- completed_at indexes of task_completed and completion_round, and the leases of the
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
  return query
  with types as (
    select t.task_type from queues.task_type t
     where _task_type is null or t.task_type = _task_type
  ),
  queue as (
    select p.task_type,
           count(*) as pending,
           count(*) filter (where p.available_at <= _now) as ready,
           count(*) filter (where p.available_at > _now and p.current_lease_id is not null) as running
      from queues.task_pending p
     where _task_type is null or p.task_type = _task_type
     group by p.task_type
  ),
  -- Completions in the window by completed_at (index range scan), with their type
  -- (admin.completions_between).
  completion as materialized (
    select c.task_id, c.task_lease_id, c.task_type, c.completed_at, c.started_at
      from admin.completions_between(_now - make_interval(secs => _window), _now) c
     where _task_type is null or c.task_type = _task_type
  ),
  -- The run of each completing lease: its worker, its start (the completion's, else a
  -- start mark, else the lease) and its end. The leases of tasks enqueued in the window (ids from _first on)
  -- are one range of task_lease's primary key and of claim_lease's (a claim lease lives
  -- in the set of its largest task id, so one naming a task from _first on is in that
  -- range), joined at once; a completion of an older task probes its lease
  -- (queues.task_lease_at); each start mark is a primary-key probe (a scalar
  -- subquery). A lease names its worker by key (queues.worker_name), or by id if written
  -- before that key existed: a worker counts once per way it is named (twice, for one
  -- window, if it ran across that migration). A completion without a lease (cancelled,
  -- abandoned) names none and ran nowhere.
  completion_run as (
    select x.task_type, x.worker_key, x.worker_id,
           greatest(x.run_from, _now - make_interval(secs => _window)) as run_from, x.run_to
      from (select c.task_type, l.worker_key, l.worker_id, c.completed_at as run_to,
                   coalesce(c.started_at,
                            (select st.started_at from queues.task_lease_started st
                              where st.task_id = c.task_id and st.task_lease_id = c.task_lease_id),
                            l.leased_at) as run_from
              from completion c
              join (select y.task_id, y.task_lease_id, y.worker_key, y.worker_id, y.leased_at
                      from queues.task_lease y
                     where y.task_id >= _first
                    union all
                    select u.task_id, y.task_lease_id, y.worker_key, null, y.leased_at
                      from queues.claim_lease y
                     cross join lateral unnest(y.task_ids) as u(task_id)
                     where y.task_id >= _first and u.task_id >= _first) l
                on l.task_id = c.task_id and l.task_lease_id = c.task_lease_id
             where c.task_id >= _first
            union all
            select c.task_type, l.worker_key, l.worker_id, c.completed_at,
                   coalesce(c.started_at,
                            (select st.started_at from queues.task_lease_started st
                              where st.task_id = c.task_id and st.task_lease_id = c.task_lease_id),
                            l.leased_at)
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
      from (select r.task_type, r.worker_key, r.worker_id, count(*) as runs,
                   min(r.run_from) as island_from, max(r.run_to) as island_to
              from run_island r
             group by r.task_type, r.worker_key, r.worker_id, r.island) i
     group by i.task_type
  ),
  recent as (
    select c.task_type, count(*) as completed,
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
-- task_completed and completion_round (admin.completions_between: cost follows the window,
-- not history) and probe task and each completion's lease (queues.task_lease_at: task_lease's
-- primary key, claim_lease's lease id index).

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
  select date_bin(make_interval(secs => _bucket), c.completed_at, _start),
         c.task_type, c.outcome, count(*)
    from admin.completions_between(_start, _now) c
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
-- Which table drives the walk: pending states walk queues.task_pending (bounded by
-- pending work); unsuccessful outcomes walk queues.task_completed by key (failed and
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
               from queues.task_pending p
              -- lateral + limit 1: one primary-key probe per pending task passed over
              cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
              where admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1) = any ($15)
                and ($4::bigint is null or p.task_id < $4)' || _filters || '
              order by p.task_id desc
              limit $5';
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
               left join queues.task_pending p on p.task_id = t.task_id
               left join lateral (select e.outcome, e.completed_at from queues.task_end_of(t.task_id) e
                                   where ($12::bigint is null or e.task_id >= $12) and ($13::bigint is null or e.task_id < $13)
                                   limit 1) c on true
              where ($4::bigint is null or t.task_id < $4)
                and ($12::bigint is null or t.task_id >= $12) and ($13::bigint is null or t.task_id < $13)' || _filters || '
              order by t.task_id desc
              limit $5';
  end if;

  if _pending_walk then
    return query execute _sql
      using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, null::bigint, null::bigint, _worker_key,
            _states;
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
--   {task: {..., state}, leases: [...], errors: [...], completion: {...} | null,
--    failed_attempts: [...], redriven_to: id | null, redriven_from: id | null,
--    progress: {done, total, note, reported_at, task_lease_id, reports} | null,
--    dependencies: [{task_id, task_type, outcome, completed_at}],
--    dependents: [{task_id, task_type, state}]}  (sql/queues/dependencies.sql)
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
             'current_lease_id', p.current_lease_id),
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
    left join queues.task_pending p on p.task_id = t.task_id
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

-- Counts by task type and state: pending states over queues.task_pending (bounded by
-- pending work), completion outcomes over the last _window_seconds only (default 86400;
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
         count(*)
    from queues.task_pending p
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
--! Included public/role_based_worker.sql
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
         when p.current_lease_id is null then 'pending'
         when p.available_at <= now() then 'stale'
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
       case when c.task_id is null and p.current_lease_id = l.task_lease_id and w.last_seen_at is not null
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
    select y.task_id, y.task_lease_id, y.leased_at,
           coalesce(y.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = y.worker_key))
             as worker_id
      from (select x.task_id, x.task_lease_id, x.leased_at, x.worker_id, x.worker_key
              from queues.task_lease x
             where x.task_id = t.task_id
            union all
            select t.task_id, x.task_lease_id, x.leased_at, null::text, x.worker_key
              from queues.claim_lease x
             where x.task_range @> t.task_id and x.task_id >= t.task_id and t.task_id = any (x.task_ids)) y
     order by y.task_lease_id desc
     limit 1
  ) l on true
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
--! EndIncluded public/role_based_worker.sql
--! Included files/signing.sql
-- What the files service may sign, and for how long. It issues a signed DELETE URL only
-- for an object whose deletion a worker is performing now: a file row with that bucket
-- and key whose deletion has an attempt without an outcome, in a process that has not
-- ended, whose account deletion (if any) has not failed, and whose file_delete task is
-- not completed and is held by a live lease (the newest lease, its expiry with heartbeats
-- and releases applied still ahead). The URL is signed for no longer than that lease has
-- left: storage checks nothing but the signature and its expiry, so a URL is bound to the
-- attempt by its lifetime. Once the lease is over (the attempt failed, expired, was
-- revoked; the process or the account deletion failed meanwhile) no URL signed for it
-- is valid any more. The files service asks through internal.run_function (its only
-- database privileges are those of the worker role).

-- The time left on the live lease of the attempt deleting (_bucket, _object_key), or NULL
-- when no attempt may delete it now (the longest, when several file rows name the
-- object). NULLs: NULL.
create or replace function files.file_delete_lease_left(_bucket text, _object_key text)
  returns interval
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select max(l.expires_at - now())
    from files.file f
    join files.file_deletion_task t on t.file_id = f.file_id
    join files.file_deletion_attempt a on a.file_deletion_task_id = t.file_deletion_task_id
    -- The task's newest lease with its effective expiry (a task has one live lease at most).
    cross join lateral (
      select e.expires_at from queues.task_lease_effective_of(a.task_id) e
       order by e.task_lease_id desc
       limit 1
    ) l
   where f.bucket = _bucket and f.object_key = _object_key
     and l.expires_at > now()
     and not exists (select 1 from queues.task_end_of(a.task_id) c)
     and not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
     and not exists (select 1 from files.file_deletion_attempt_failed x
                      where x.file_deletion_attempt_id = a.file_deletion_attempt_id)
     and not exists (select 1 from files.file_deletion_task_succeeded ts where ts.file_deletion_task_id = t.file_deletion_task_id)
     and not exists (select 1 from files.file_deletion_task_failed tf where tf.file_deletion_task_id = t.file_deletion_task_id)
     and not files.has_account_deletion_failed(f.account_id)
$$;

-- True when (_bucket, _object_key) may be deleted now (files.file_delete_lease_left).
-- NULLs: false.
create or replace function files.is_file_delete_scheduled(_bucket text, _object_key text)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select files.file_delete_lease_left(_bucket, _object_key) is not null
$$;

-- Runnable, for the files service. Payload: {bucket, object_key}. Returns
-- {success: true, payload: {scheduled, lease_seconds_left}}: lease_seconds_left is the
-- time left on the deleting attempt's lease, in seconds (null when not scheduled); the
-- service signs for no longer. A payload without both strings is a validation failure.
-- Reads only.
create or replace function files.check_file_delete_signing(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _left interval;
begin
  if jsonb_typeof(payload -> 'bucket') is distinct from 'string' or jsonb_typeof(payload -> 'object_key') is distinct from 'string' then
    return internal.validation_failure('bucket and object_key must be strings');
  end if;
  _left := files.file_delete_lease_left(payload ->> 'bucket', payload ->> 'object_key');
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'scheduled', _left is not null,
    'lease_seconds_left', extract(epoch from _left)));
end;
$$;
--! EndIncluded files/signing.sql
--! Included internal/delivery.sql
-- Delivery modes of channel tasks (internal.channel_delivery_mode):
--   at_least_once  the worker calls the provider on every lease until an outcome is
--                  recorded; a crash between the call and the success handler repeats
--                  the call, so the provider must deduplicate (Resend's Idempotency-Key).
--   at_most_once   the worker records the start of the call (internal.provider_call_started,
--                  committed) before making it; a later lease of the same task that finds a
--                  started call without an outcome does not call again: the task fails with
--                  an "unknown outcome" error, which the error handler records.

-- The delivery mode of a task type ('at_least_once' when not listed).
create or replace function internal.delivery_mode(_task_type text)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((select m.delivery_mode from internal.channel_delivery_mode m where m.task_type = _task_type),
                  'at_least_once')
$$;

-- The prefix of the error an at-most-once task fails with when a previous lease started
-- its provider call and never recorded an outcome. Supervisors recognise it.
create or replace function internal.unknown_outcome_prefix()
  returns text
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$ select 'unknown outcome: ' $$;

-- The body of internal.start_provider_call_at (_at_most_once true); with _at_most_once
-- false it answers only for an at-least-once task, and returns NULL for an at-most-once
-- one (nothing recorded): internal.check_at_least_once_provider_call.
create or replace function internal.provider_call_start(_now timestamptz, payload jsonb, _at_most_once boolean)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'task_id');
  _lease_id bigint := internal.id_from_payload(payload, 'task_lease_id');
  _task_type text;
  _mode text;
  _started record;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_id is null or _lease_id is null then
    return internal.validation_failure('task_id and task_lease_id must be positive integers');
  end if;
  select t.task_type into _task_type from queues.task t where t.task_id = _task_id;
  if _task_type is null then
    return internal.validation_failure(format('task %s not found', _task_id));
  end if;
  _mode := internal.delivery_mode(_task_type);
  if _mode <> 'at_least_once' and not _at_most_once then
    return null;
  end if;
  -- The live lease of an open task: its current lease (a completed task has none), not
  -- expired, heartbeats applied; judged as the completion that follows the call is fenced.
  if not coalesce(queues.current_lease_expiry(_task_id, _lease_id) > _now, false) then
    return internal.validation_failure(format('lease %s is not the live lease of task %s; not calling the provider', _lease_id, _task_id));
  end if;

  if _mode = 'at_least_once' then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('delivery_mode', _mode, 'proceed', true));
  end if;

  select s.task_lease_id, s.started_at into _started
    from internal.provider_call_started s
   where s.task_id = _task_id and s.task_lease_id <> _lease_id
     -- A call its provider refused (a throttle reported under that lease, with the lease's
     -- release: sql/queues/throttle.sql) was not made.
     -- (By task and lease: the tasks of one claim share its lease id.)
     and (select true from queues.throttle th
           where th.task_lease_id = s.task_lease_id and th.task_id = s.task_id limit 1) is null
   order by s.task_lease_id
   limit 1;
  if found then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object(
      'delivery_mode', _mode, 'proceed', false,
      'error', format('%slease %s started the %s provider call at %s and no outcome was recorded; at-most-once delivery: not calling again',
                      internal.unknown_outcome_prefix(), _started.task_lease_id, _task_type, _started.started_at)));
  end if;
  insert into internal.provider_call_started (task_id, task_lease_id) values (_task_id, _lease_id)
  on conflict do nothing;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object('delivery_mode', _mode, 'proceed', true));
end;
$$;

-- Runnable by the worker just before a provider call, in its own transaction.
-- Payload: {task_id, task_lease_id}. Returns {success: true, payload: {delivery_mode,
-- proceed}}: at_least_once → proceed, nothing recorded; at_most_once → records
-- provider_call_started for this lease and proceeds, unless an earlier lease of the task
-- started the call: then proceed is false and payload.error says why (the worker fails
-- the task with it instead of calling). A lease that is not the task's live lease (its
-- current lease, as queues.current_lease_expiry defines it, with heartbeats applied, not
-- expired at _now), or a completed task, is a validation failure (nothing recorded, no
-- call). Owner only, so tests can move the clock; the worker calls
-- internal.start_provider_call, which passes now().
create or replace function internal.start_provider_call_at(_now timestamptz, payload jsonb)
  returns jsonb
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  select internal.provider_call_start(_now, payload, true)
$$;

-- internal.start_provider_call_at at now(): what the worker runs before a provider call.
create or replace function internal.start_provider_call(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select internal.provider_call_start(now(), payload, true)
$$;

-- The provider-call check of an at-least-once task, made with its before_handler
-- (internal.run_before_provider_call): internal.start_provider_call's answer (which
-- records nothing for such a task), or NULL for an at-most-once task, whose start the
-- worker records by a call of its own once it has checked the provider payload (nothing
-- is recorded for a call the worker then does not make). Payload as
-- internal.start_provider_call's.
create or replace function internal.check_at_least_once_provider_call(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return internal.provider_call_start(now(), payload, false);
end;
$$;

-- A channel task's before_handler and its provider-call check in one statement, one
-- round trip for the worker: internal.run_function(_before_handler, _payload), as the
-- caller (security invoker: the worker's privileges, as when it calls the handler
-- itself), then, when the handler returned a success envelope, the check
-- (internal.check_at_least_once_provider_call) for _task_id under _task_lease_id.
--   before_result  what the handler returned (a raise of the handler raises: the
--                  statement fails, and nothing of it commits)
--   start_result   the check's envelope, as internal.start_provider_call returns it; NULL
--                  when no check was made (the handler did not succeed, or the task is
--                  at-most-once): the worker calls internal.start_provider_call itself
--   start_error    the message of a raise of the check (its error, not the handler's)
create or replace function internal.run_before_provider_call(
  _before_handler text, _payload jsonb, _task_id bigint, _task_lease_id bigint,
  out before_result jsonb, out start_result jsonb, out start_error text
)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
begin
  before_result := internal.run_function(_before_handler, _payload);
  if jsonb_typeof(before_result) = 'object' and before_result -> 'success' = 'true'::jsonb then
    begin
      start_result := internal.check_at_least_once_provider_call(
        jsonb_build_object('task_id', _task_id, 'task_lease_id', _task_lease_id));
    exception
      when serialization_failure or deadlock_detected then
        raise;
      when others then
        start_error := sqlerrm;
    end;
  end if;
end;
$$;
--! EndIncluded internal/delivery.sql

--! split: 600-group-throttle.sql
set local lock_timeout = '5s';
-- Provider back-pressure per group key (sql/queues/throttle.sql): queues.record_throttle
-- takes key_kind 'group' (a tenant's or provider account's group key, queues.task.group_key),
-- and every claim leaves the tasks of a throttled group key, of any type, until its end
-- (queues.throttled_keys_at read once per claim). The functions are made again by the
-- includes of 300-provider-throttle.sql, which inline their current files.
comment on table queues.throttle is
  'Append-only: a provider refused work of key (a task type, key_kind task_type; a group key, key_kind group) until throttled_until (a 429, a Retry-After, a quota error). Claims leave the key''s tasks while one of its reports not cleared is in force (queues.throttled_keys_at).';
comment on column queues.throttle.key_kind is
  '''task_type'': key is a task type (a channel such as email). ''group'': key is a group key (queues.task.group_key); the tasks of every type carrying it wait.';
-- Replaced by queues.throttled_keys_at (task types and group keys in one probe).
drop function if exists queues.throttled_task_types_at(timestamptz);

--! split: 650-bounded-flow-facts.sql
set local lock_timeout = '5s';
-- Nothing grows forever (docs/operations.md, "Retention and partitions"):
--   queues.task_progress and queues.task_dependency become history tables, range-partitioned
--   by task_id (a dependency edge by its dependent's) on the sets' bounds, and leave with
--   their task's set; their rows are moved into the new tables, nothing is lost.
--   queues.throttle, queues.throttle_cleared and queues.task_limit_window are pruned by
--   history maintenance (queues.prune_flow_facts_at, sql/queues/flow_retention.sql).
-- queues/partitions.sql (the list of history tables), queues/partitions_maintain.sql (the
-- call of the pruning) and queues/dependencies.sql are included by earlier current files,
-- which inline their current text.
-- Locks: ACCESS EXCLUSIVE on queues.task_progress and queues.task_dependency (copied
-- aside, dropped, made again; workers' progress reports and enqueues with dependencies wait for the
-- copy), neither a claim's nor a completion's table; SHARE UPDATE EXCLUSIVE or SHARE on the
-- new tables' parents while their partitions are attached.

-- The unpartitioned tables' rows are set aside (in temporary tables, dropped at commit)
-- and the tables dropped, so that the new ones take their names and their constraints'.
do $$
begin
  if (select c.relkind from pg_class c where c.oid = 'queues.task_progress'::regclass) = 'r' then
    create temporary table task_progress_moving on commit drop as
      select u.* from queues.task_progress u;
    create temporary table task_progress_last_id on commit drop as
      select s.last_value from queues.task_progress_task_progress_id_seq s;
    drop table queues.task_progress;
  end if;
  if (select c.relkind from pg_class c where c.oid = 'queues.task_dependency'::regclass) = 'r' then
    create temporary table task_dependency_moving on commit drop as
      select u.* from queues.task_dependency u;
    drop table queues.task_dependency;
  end if;
end;
$$;

create table if not exists queues.task_progress (
  task_progress_id bigint generated always as identity,
  task_id bigint not null,
  task_lease_id bigint not null,
  reported_at timestamptz not null default now(),
  done bigint not null check (done >= 0),
  total bigint check (total >= done),
  note text not null default '' check (length(note) <= 500),
  -- Leads with the partition key, as every history table's; also a task's reports in order.
  primary key (task_id, task_progress_id)
) partition by range (task_id);
comment on table queues.task_progress is
  'Append-only: a progress report of a running task (done out of total, a note), at most one per task per second from the worker (queues.record_progress). A history table: leaves with its task''s partition set.';
drop trigger if exists forbid_update on queues.task_progress;
create trigger forbid_update before update on queues.task_progress
  for each statement execute function queues.forbid_fact_update();
create table if not exists queues.task_progress_default partition of queues.task_progress default;
drop trigger if exists forbid_update on queues.task_progress_default;
create trigger forbid_update before update on queues.task_progress_default
  for each statement execute function queues.forbid_fact_update();

create table if not exists queues.task_dependency (
  -- The dependent (the newer task): the partition key, so an edge lives in its dependent's set.
  task_id bigint not null,
  depends_on_task_id bigint not null,
  created_at timestamptz not null default now(),
  primary key (task_id, depends_on_task_id),
  check (task_id <> depends_on_task_id)
) partition by range (task_id);
comment on table queues.task_dependency is
  'Append-only: task task_id was enqueued to wait for task depends_on_task_id (an older task). Written by the enqueue; read by queues.release_dependents when a dependency ends. A history table partitioned by the dependent: an edge leaves with its dependent''s set.';
drop trigger if exists forbid_update on queues.task_dependency;
create trigger forbid_update before update on queues.task_dependency
  for each statement execute function queues.forbid_fact_update();
-- The dependents of a task that ends: probed once per completed task.
create index if not exists task_dependency_depends_on on queues.task_dependency (depends_on_task_id, task_id);
create table if not exists queues.task_dependency_default partition of queues.task_dependency default;
drop trigger if exists forbid_update on queues.task_dependency_default;
create trigger forbid_update before update on queues.task_dependency_default
  for each statement execute function queues.forbid_fact_update();

-- A partition of each for every partition set there is (a set half made by maintenance
-- gets its own when maintenance finishes the set).
select queues.attach_history_partition(t.name, s.lower_bound, s.upper_bound)
  from queues.history_sets() s
 cross join unnest(array['task_progress', 'task_dependency']) t(name)
 where not s.is_default
 order by s.lower_bound, t.name;

-- The rows set aside, moved in; the new identity goes on from the old one.
do $$
begin
  if to_regclass('pg_temp.task_progress_moving') is not null then
    insert into queues.task_progress (task_progress_id, task_id, task_lease_id, reported_at, done, total, note)
    overriding system value
    select u.task_progress_id, u.task_id, u.task_lease_id, u.reported_at, u.done, u.total, u.note
      from pg_temp.task_progress_moving u
     order by u.task_id, u.task_progress_id;
    perform setval(pg_get_serial_sequence('queues.task_progress', 'task_progress_id'),
                   (select l.last_value from pg_temp.task_progress_last_id l) + 1, false);
    drop table pg_temp.task_progress_moving, pg_temp.task_progress_last_id;
  end if;
  if to_regclass('pg_temp.task_dependency_moving') is not null then
    insert into queues.task_dependency (task_id, depends_on_task_id, created_at)
    select u.task_id, u.depends_on_task_id, u.created_at
      from pg_temp.task_dependency_moving u
     order by u.task_id, u.depends_on_task_id;
    drop table pg_temp.task_dependency_moving;
  end if;
end;
$$;

-- TRUNCATE queues.task empties every history table (completion rounds, claim leases,
-- progress reports and dependency edges included).
create or replace function queues.truncate_task_facts() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  truncate queues.task_pending, queues.resource_lease, queues.task_lease, queues.task_completed,
           queues.error, queues.task_lease_extension, queues.task_lease_release,
           queues.task_lease_revocation, queues.task_attempt_failed, queues.task_redriven,
           queues.task_lease_started, queues.task_interruption, queues.task_cancelled,
           queues.task_result, queues.task_run_now, queues.task_trace, queues.completion_round,
           queues.claim_lease, queues.task_progress, queues.task_dependency;
  return null;
end;
$$;

--! Included queues/flow_retention.sql
-- Retention of the flow-control facts that are not history (docs/operations.md,
-- "Retention and partitions"). Per-task facts (progress reports, dependency edges) are
-- history tables and leave with their task's set; what is removed here are the facts kept
-- per key rather than per task. Owner only; run by every history maintenance run
-- (queues.maintain_history_step_at, when it has nothing else to change).
--
--   queues.throttle / queues.throttle_cleared  a throttle report ended longer ago than
--     the retention window (queues.history_setting.retention) is deleted, with the clears
--     that name it (on delete cascade), when
--       - a later report of its key exists (the key's latest report is kept, so the
--         operator still sees when the key was last throttled),
--       - every earlier report of its key ended before the window too (a clear covers the
--         reports up to the one it names: deleting it never brings back an earlier report
--         that is still in force),
--       - the task it names, if any, is gone from the history (internal.provider_call_start
--         reads the report of a lease while its task may still run).
--     A report in force (throttled_until after now) is never deleted.
--   queues.task_limit_window  a counter whose window started more than a day ago (a rate
--     limit's interval is at most a day, so that window is over; the next claim would
--     start a new one) is deleted: it only grows with the group keys that come and go.
--
-- Returns {"throttles": n, "throttle_clears": n, "limit_windows": n}: what it deleted.
-- (queues.history_set_has_waiting_dependents, below, is what history maintenance asks
-- before it drops a set.)
create or replace function queues.prune_flow_facts_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _cutoff timestamptz;
  _throttles bigint;
  _clears bigint;
  _windows bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  _cutoff := _now - (select s.retention from queues.history_setting s);
  _cutoff := least(_cutoff, _now);
  with gone as (
    delete from queues.throttle t
     where t.throttled_until < _cutoff
       and exists (select 1 from queues.throttle l
                    where l.key_kind = t.key_kind and l.key = t.key and l.throttle_id > t.throttle_id)
       and not exists (select 1 from queues.throttle e
                        where e.key_kind = t.key_kind and e.key = t.key and e.throttle_id < t.throttle_id
                          and e.throttled_until >= _cutoff)
       and (t.task_id is null or not exists (select 1 from queues.task x where x.task_id = t.task_id))
    returning t.throttle_id
  )
  select count(*), (select count(*) from queues.throttle_cleared c where c.last_throttle_id in (select g.throttle_id from gone g))
    into _throttles, _clears
    from gone;
  delete from queues.task_limit_window w
   where w.window_start < _now - interval '1 day';
  get diagnostics _windows = row_count;
  return jsonb_build_object('throttles', _throttles, 'throttle_clears', _clears, 'limit_windows', _windows);
end;
$$;

-- Whether a pending task of a newer set depends on a task of the set [_lower, _upper): the
-- set is then kept, however old, since the dependent reads its dependencies and their
-- results when it runs (queues.list_task_dependencies). Its edges live in its own set, so
-- they are kept with it. Reads the dependency index of the newer sets' partitions only.
-- Owner only.
create or replace function queues.history_set_has_waiting_dependents(_lower bigint, _upper bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from queues.task_dependency d
                  where d.depends_on_task_id >= _lower and d.depends_on_task_id < _upper
                    and d.task_id >= _upper
                    and exists (select 1 from queues.task_pending p where p.task_id = d.task_id))
$$;

revoke execute on function queues.prune_flow_facts_at(timestamptz),
  queues.history_set_has_waiting_dependents(bigint, bigint) from public;
--! EndIncluded queues/flow_retention.sql

--! split: 900-privileges.sql
set local lock_timeout = '5s';

--! Included queues/privileges.sql
-- Who may call what in queues. Database users come from placeholders (see .gmrc):
--   :DATABASE_WORKER  the worker: claim (and ask when the next scheduled task is due),
--                     extend and release leases, complete, fail, interrupt (a transient
--                     error).
--                     No table privileges.
--   :DATABASE_APP     applications: enqueue.
-- Every function starts with EXECUTE revoked from PUBLIC; grants are explicit.

revoke all on all tables in schema queues from public;
revoke all on all sequences in schema queues from public;
revoke execute on all functions in schema queues from public;

grant usage on schema queues to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  queues.claim_tasks(text, integer, text[], integer, integer),
  queues.next_claim_in_ms(text[]),
  queues.extend_leases(bigint[], bigint[], integer),
  queues.release_leases(bigint[], bigint[]),
  queues.dequeue_next_available_task(text, integer),
  queues.complete_task(bigint, bigint, text),
  queues.complete_tasks(bigint[], bigint[], text[], boolean[], timestamptz[]),
  queues.fail_task(bigint, text, bigint),
  queues.interrupt_task(bigint, bigint, text, integer),
  queues.record_worker_heartbeat(text, text[], integer),
  queues.record_worker_stopped(text),
  queues.cancelled_tasks(bigint[]),
  queues.task_type_timeouts(),
  queues.record_progress(bigint, bigint, bigint, bigint, text),
  queues.record_throttle(text, text, timestamptz, numeric, text, text, bigint, bigint),
  queues.active_throttles(),
  queues.list_task_dependencies(bigint)
to :DATABASE_WORKER;

grant execute on function
  queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean, bigint[], text),
  queues.enqueue_many(jsonb),
  queues.enqueue_unique(text, jsonb, text, text, interval, timestamptz, integer, text, integer),
  queues.cancel_tasks(bigint[], text),
  queues.list_task_dependencies(bigint)
to :DATABASE_APP;
-- The client's enqueue on a pool (commit, then the wake-up; sql/queues/enqueue.sql).
revoke execute on all procedures in schema queues from public;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint, text)
  to :DATABASE_APP;
--! EndIncluded queues/privileges.sql
--! Included admin/privileges.sql
-- Who may call what in admin. The operations API (:DATABASE_API) has no table or view
-- privileges: it reads and acts through the security definer functions below, plus
-- queues.enqueue to create tasks. Every grant is listed in sql/database-user-grants.json ("api").
-- The *_at functions take the clock and stay owner only.

revoke all on all tables in schema admin from public;
revoke execute on all functions in schema admin from public;

grant usage on schema admin to :DATABASE_API;
grant usage on schema queues to :DATABASE_API;

grant execute on function
  admin.list_tasks(text, text, integer, bigint, text, text, timestamptz, timestamptz, text[], jsonb),
  admin.get_task(bigint),
  admin.task_counts(integer),
  admin.list_task_types(),
  admin.capacity(text),
  admin.throughput(integer, integer),
  admin.completion_stats(integer),
  admin.list_dead_letters(text, integer, bigint),
  admin.redrive_task(bigint),
  admin.recover_stale_leases(integer),
  admin.list_stale_leases(),
  admin.process_timeline(text, bigint),
  admin.list_process_roots(text, integer, bigint),
  admin.list_processes(),
  admin.cancel_tasks(bigint[], text),
  admin.cancel_tasks_matching(text, text, integer, text),
  admin.run_tasks_now(bigint[]),
  admin.redrive_tasks(bigint[]),
  admin.redrive_tasks_matching(text, integer),
  admin.queue_depth(integer, integer),
  admin.pause_task_type(text, text),
  admin.resume_task_type(text),
  admin.list_queues(),
  admin.list_workers(),
  admin.recover_worker_leases(text, integer),
  admin.list_schedules(integer),
  admin.process_tree(text, bigint),
  admin.list_process_roots_ranked(text, integer, bigint),
  admin.record_api_change(text, text, text, text, text, text, bigint[], text, text, text, jsonb, jsonb),
  admin.list_api_changes(bigint, integer, bigint),
  admin.set_task_type_timeout(text, numeric),
  admin.list_throttles(),
  admin.clear_throttle(text, text),
  admin.task_limits(),
  admin.set_task_limit(text, text, text, integer, integer, integer),
  admin.clear_task_limit(text, text, text)
to :DATABASE_API;

grant execute on function queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean, bigint[], text) to :DATABASE_API;
grant execute on function queues.list_task_dependencies(bigint) to :DATABASE_API;
grant execute on function queues.enqueue_unique(text, jsonb, text, text, interval, timestamptz, integer, text, integer)
  to :DATABASE_API;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint, text)
  to :DATABASE_API;
--! EndIncluded admin/privileges.sql
