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
--   queues.history_tables()                 the partitioned tables, parent first
--   queues.create_history_partition(lo, hi) one set [lo, hi), owner only
--   queues.history_partitions()             the sets, bounds, sizes, oldest/newest task
--   queues.maintain_history_at(_now)        create ahead, drop expired; owner only
--   queues.maintain_history(payload)        the same at now(), a runnable db_function
--   queues.history_status()                 settings and what the next drop waits for

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now']
$$;

-- The partition of _table holding [_lower, _upper) is named <table>_p<lower>.
create or replace function queues.history_partition_name(_table text, _lower bigint) returns text
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select _table || '_p' || _lower::text
$$;

-- Creates the partition set [_lower, _upper) of every history table (those that exist
-- already are kept). Each partition refuses updates like its parent: a statement trigger
-- on the parent does not fire for a statement that names the partition. Records when in
-- queues.history_partition_created. Returns whether anything was created. Owner only.
create or replace function queues.create_history_partition(_lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _name text;
  _created boolean := false;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  foreach _table in array queues.history_tables() loop
    _name := queues.history_partition_name(_table, _lower);
    if to_regclass(format('queues.%I', _name)) is null then
      execute format('create table queues.%I partition of queues.%I for values from (%s) to (%s)',
                     _name, _table, _lower, _upper);
      execute format('create trigger forbid_update before update on queues.%I
                        for each statement execute function queues.forbid_fact_update()', _name);
      _created := true;
    end if;
  end loop;
  if _created then
    insert into queues.history_partition_created (lower_bound, upper_bound)
    values (_lower, _upper) on conflict (lower_bound) do nothing;
  end if;
  return _created;
end;
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last. Sizes are summed over
-- every history table (tables, TOAST and indexes); tasks is the planner's estimate.
create or replace function queues.history_partitions()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, total_bytes bigint, is_default boolean)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  with parts as (
    select c.relname, pg_get_expr(c.relpartbound, c.oid) as bound, c.reltuples
      from pg_inherits i
      join pg_class c on c.oid = i.inhrelid
     where i.inhparent = 'queues.task'::regclass
  ),
  bounds as (
    select p.relname, p.reltuples,
           (regexp_match(p.bound, 'FROM \(''?(-?\d+)''?\) TO \(''?(-?\d+)''?\)')) as b,
           p.bound = 'DEFAULT' as is_default
      from parts p
  )
  select b.b[1]::bigint, b.b[2]::bigint, b.relname,
         greatest(b.reltuples, 0)::bigint,
         (select coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
            from unnest(queues.history_tables()) t(name)
            join pg_class c on c.relnamespace = 'queues'::regnamespace
                           and c.relname = case when b.is_default then t.name || '_default'
                                                else queues.history_partition_name(t.name, b.b[1]::bigint) end),
         b.is_default
    from bounds b
   order by b.is_default, b.b[1]::bigint
$$;

-- The last task id handed out (0 before the first task).
create or replace function queues.last_task_id() returns bigint
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(pg_sequence_last_value(pg_get_serial_sequence('queues.task', 'task_id')::regclass), 0)
$$;

-- Partition maintenance at _now, with short locks only:
-- 1. Creates partition sets ahead of need, of partition_size task ids each, until the
--    sets above the last task id handed out cover partitions_ahead * partition_size ids.
-- 2. Drops each set whose whole range lies below the last task id (no new task can land
--    in it), that holds no pending task (queues.task_pending, then every task checked
--    against its completion), and whose newest completion is older than the retention
--    window. A set with one pending task is kept, however old.
-- Each step runs with lock_timeout = lock_timeout_ms; a step that cannot get its locks
-- in time is skipped and tried again by the next run. Drops are recorded in
-- queues.history_partition_dropped. Returns what it did:
--   {"created": [[lo, hi], ...], "dropped": [[lo, hi], ...], "skipped": [{...}], "kept": n}
create or replace function queues.maintain_history_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  -- Restored when the function returns: the caller's transaction keeps its own timeout.
  set lock_timeout = '100ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _highest bigint;
  _lower bigint;
  _created jsonb := '[]';
  _dropped jsonb := '[]';
  _skipped jsonb := '[]';
  _kept integer := 0;
  _set record;
  _names text[];
  _tasks bigint;
  _last_completed timestamptz;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  select * into _setting from queues.history_setting;
  perform set_config('lock_timeout', _setting.lock_timeout_ms || 'ms', true);

  -- 1. Ahead of need.
  -- Ranges are never reused: above every set there is or was, and above any task in the
  -- default partition (a new set cannot overlap rows there).
  select greatest(coalesce(max(p.upper_bound), 0),
                  coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                  coalesce((select max(t.task_id) + 1 from queues.task_default t), 0))
    into _highest
    from queues.history_partitions() p where not p.is_default;
  while _highest < _last_id + 1 + _setting.partitions_ahead::bigint * _setting.partition_size loop
    _lower := _highest;
    begin
      perform queues.create_history_partition(_lower, _lower + _setting.partition_size);
      _created := _created || jsonb_build_array(jsonb_build_array(_lower, _lower + _setting.partition_size));
    -- check_violation: a task landed in the default partition, in this range, since it
    -- was read above; the next run starts above it.
    exception when lock_not_available or deadlock_detected or check_violation then
      _skipped := _skipped || jsonb_build_object('create', jsonb_build_array(_lower, _lower + _setting.partition_size),
                                                 'reason', sqlerrm);
      exit;
    end;
    _highest := _lower + _setting.partition_size;
  end loop;

  -- 2. Expired sets, oldest first.
  for _set in
    select p.lower_bound, p.upper_bound from queues.history_partitions() p
     where not p.is_default and p.upper_bound <= _last_id
     order by p.lower_bound
  loop
    -- Cheap checks first, without strong locks: a pending task, or a recent completion.
    if exists (select 1 from queues.task_pending tp
                where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound) then
      _kept := _kept + 1;
      continue;
    end if;
    select max(c.completed_at) into _last_completed from queues.task_completed c
     where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound;
    if _last_completed > _now - _setting.retention then
      _kept := _kept + 1;
      continue;
    end if;
    -- Every task completed, from the facts (one scan of the set's two partitions).
    select count(*) into _tasks from queues.task t
     where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound;
    if exists (select 1 from queues.task t
                where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound
                  and not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)) then
      _kept := _kept + 1;
      continue;
    end if;

    _names := array(select format('queues.%I', queues.history_partition_name(t.name, _set.lower_bound))
                      from unnest(queues.history_tables()) t(name));
    begin
      -- Under the lock, no transaction that wrote to the set is still open: check again
      -- what could have changed (a task enqueued with an id handed out before the check).
      execute 'lock table ' || array_to_string(_names, ', ') || ' in access exclusive mode';
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
         or exists (select 1 from queues.task_completed c
                     where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                       and c.completed_at > _now - _setting.retention) then
        -- Roll the block back, which gives the locks back at once.
        raise exception 'set [%, %) changed since it was checked', _set.lower_bound, _set.upper_bound
          using errcode = 'QH001';
      end if;
      execute 'drop table ' || array_to_string(_names, ', ');
      insert into queues.history_partition_dropped (lower_bound, upper_bound, tasks, last_completed_at, dropped_at)
      values (_set.lower_bound, _set.upper_bound, _tasks, _last_completed, _now);
      _dropped := _dropped || jsonb_build_array(jsonb_build_array(_set.lower_bound, _set.upper_bound));
    exception
      when sqlstate 'QH001' then
        _kept := _kept + 1;
      when lock_not_available or deadlock_detected then
      _skipped := _skipped || jsonb_build_object('drop', jsonb_build_array(_set.lower_bound, _set.upper_bound),
                                                 'reason', sqlerrm);
    end;
  end loop;

  return jsonb_build_object('created', _created, 'dropped', _dropped, 'skipped', _skipped, 'kept', _kept);
end;
$$;

-- The schedule's step (a db_function task): maintain_history_at(now()), its report as the
-- payload of a success envelope (what the worker's steps read).
create or replace function queues.maintain_history(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_at(now()))
$$;

-- What operators watch: the settings, the sets, the oldest retained task, and the next
-- drop (the lowest set below the last task id with its newest completion: it can go at
-- last_completed_at + retention, unless it holds pending tasks).
create or replace function queues.history_status_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _next record;
  _next_json jsonb;
begin
  select * into _setting from queues.history_setting;
  select p.lower_bound, p.upper_bound,
         (select max(c.completed_at) from queues.task_completed c
           where c.task_id >= p.lower_bound and c.task_id < p.upper_bound) as last_completed_at,
         (select count(*) from queues.task_pending tp
           where tp.task_id >= p.lower_bound and tp.task_id < p.upper_bound) as pending
    into _next
    from queues.history_partitions() p
   where not p.is_default and p.upper_bound <= _last_id
   order by p.lower_bound
   limit 1;
  if found then
    _next_json := jsonb_build_object(
      'lower_bound', _next.lower_bound, 'upper_bound', _next.upper_bound,
      'pending_tasks', _next.pending,
      'last_completed_at', _next.last_completed_at,
      'drop_after', case when _next.pending = 0 then coalesce(_next.last_completed_at + _setting.retention, _now) end);
  end if;
  return jsonb_build_object(
    'retention_seconds', extract(epoch from _setting.retention)::bigint,
    'partition_size', _setting.partition_size,
    'partitions_ahead', _setting.partitions_ahead,
    'last_task_id', _last_id,
    'oldest_task_id', (select min(t.task_id) from queues.task t),
    'oldest_enqueued_at', (select t.enqueued_at from queues.task t order by t.task_id limit 1),
    'default_partition_tasks', (select count(*) from queues.task_default),
    'next_drop', _next_json,
    'dropped_sets', (select count(*) from queues.history_partition_dropped),
    'last_dropped_at', (select max(d.dropped_at) from queues.history_partition_dropped d),
    'partitions', coalesce((select jsonb_agg(jsonb_build_object(
        'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'name', p.partition_name,
        'estimated_tasks', p.estimated_tasks, 'total_bytes', p.total_bytes, 'is_default', p.is_default))
      from queues.history_partitions() p), '[]'));
end;
$$;

-- The worker runs maintenance as the db_function task of its schedule; operators read the
-- status through admin.history_status(). Everything else here is owner only. Granted
-- here, beside the functions, so that a migration including sql/queues/privileges.sql
-- before this file does not name a function that does not exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.history_status_at(timestamptz),
  queues.history_partitions(), queues.create_history_partition(bigint, bigint) from public;
grant execute on function queues.maintain_history(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
