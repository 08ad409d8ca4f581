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
--   queues.history_sets()                   the sets' bounds, from the catalog only
--   queues.history_walk(_before)            the id ranges a newest-first read walks
--   queues.history_partition_sizes()        the sets with table and index bytes
--   queues.history_partitions()             the sets with their total bytes
--   queues.maintain_history_at(_now)        create ahead, drop expired; owner only
--   queues.maintain_history(payload)        the same at now(), a runnable db_function
--   queues.history_summary_at(_now)         settings, oldest task, what the next drop waits for
--   queues.history_status_at(_now)          the same with the sets and their sizes

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now']
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
-- first, with the default partition (lower and upper null) last: bounds and the planner's
-- estimate of their tasks only, from the catalog (no relation is opened). What the list
-- endpoints walk and maintenance reads; queues.history_partitions() adds sizes.
create or replace function queues.history_sets()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  -- A bound reads FOR VALUES FROM ('<lower>') TO ('<upper>'), or DEFAULT. It holds no
  -- column, so it is deparsed without opening the partition (relation 0), and its two
  -- quoted values are the 2nd and 4th fields between quotes (a regular expression took
  -- 10 us a row).
  select nullif(split_part(b.bound, '''', 2), '')::bigint, nullif(split_part(b.bound, '''', 4), '')::bigint,
         b.relname::text, greatest(b.reltuples, 0)::bigint, b.bound = 'DEFAULT'
    from (select c.relname, c.reltuples, pg_get_expr(c.relpartbound, 0) as bound
            from pg_inherits i
            join pg_class c on c.oid = i.inhrelid
           where i.inhparent = 'queues.task'::regclass) b
   order by b.bound = 'DEFAULT', 1
$$;

-- The task id ranges [lower_bound, upper_bound) that a newest-first read of history
-- walks, newest first: the sets that can hold a task below _before (null: any) and not
-- above the last task id handed out (sets above it hold none), upper bounds capped at
-- _before. Each range is one set, except the first, which spans the two newest: the set
-- being filled may have begun a moment ago, and two partitions per table cost the planner
-- little more than one, so a page usually takes one statement. A reader that gives each
-- range's bounds to its statement as values gets a plan of these partitions only.
-- While the default partition holds a task (outside every set; normally none), one range
-- instead, (null, _before): everything below _before, in one statement.
create or replace function queues.history_walk(_before bigint)
  returns table (lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (
    select s.lower_bound, least(s.upper_bound, _before) as upper_bound,
           row_number() over (order by s.lower_bound desc) as n
      from queues.history_sets() s
     where not s.is_default
       -- once, not once per set (a call reads the sequence's catalog entry)
       and s.lower_bound <= (select queues.last_task_id())
       and (_before is null or s.lower_bound < _before)
  ),
  walk as (
    select coalesce((select b.lower_bound from s b where b.n = 2), a.lower_bound) as lower_bound, a.upper_bound
      from s a where a.n = 1
    union all
    select s.lower_bound, s.upper_bound from s where s.n > 2
  ),
  spill as (select exists (select 1 from queues.task_default) as any)
  select w.lower_bound, w.upper_bound from walk w, spill where not spill.any
  union all
  select null, _before from spill where spill.any
  order by 1 desc nulls first
$$;

-- queues.history_sets() with each set's bytes summed over every history table: tables
-- with their TOAST (pg_table_size) and indexes (pg_indexes_size). Each partition is sized
-- once, looked up by name (queues.history_partition_name) through the catalog's name
-- index; sizing opens each partition and its indexes, so this is the one place that
-- costs per partition: callers read it once per answer.
create or replace function queues.history_partition_sizes()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default,
         coalesce(sum(pg_table_size(c.oid)), 0)::bigint,
         coalesce(sum(pg_indexes_size(c.oid)), 0)::bigint
    from queues.history_sets() s
   cross join unnest(queues.history_tables()) t(name)
    left join pg_class c on c.relnamespace = 'queues'::regnamespace
                        and c.relname = case when s.is_default then t.name || '_default'
                                             else queues.history_partition_name(t.name, s.lower_bound) end
   group by s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default
   order by s.is_default, s.lower_bound
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
  select p.lower_bound, p.upper_bound, p.partition_name, p.estimated_tasks,
         p.table_bytes + p.index_bytes, p.is_default
    from queues.history_partition_sizes() p
   order by p.is_default, p.lower_bound
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
    from queues.history_sets() p where not p.is_default;
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
    execute 'select max(c.completed_at) from queues.task_completed c where c.task_id >= $1 and c.task_id < $2'
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

-- The worker runs maintenance as the db_function task of its schedule; operators read the
-- status through admin.history_status(). Everything else here is owner only. Granted
-- here, beside the functions, so that a migration including sql/queues/privileges.sql
-- before this file does not name a function that does not exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.history_status_at(timestamptz),
  queues.history_summary_at(timestamptz), queues.history_partitions(), queues.history_sets(),
  queues.history_partition_sizes(), queues.history_walk(bigint), queues.create_history_partition(bigint, bigint)
  from public;
grant execute on function queues.maintain_history(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
