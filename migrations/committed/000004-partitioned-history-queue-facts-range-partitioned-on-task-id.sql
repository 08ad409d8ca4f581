--! Previous: sha1:c876c1a931405827456e9a742557638ad568884e
--! Hash: sha1:439c0fb2292221326e62cc5039b6553dfc6a2e91
--! Message: Partitioned history: queue facts range-partitioned on task id, retention by dropping whole partition sets

--! split: 330-history.sql
-- History: queues.task and every fact table keyed by task become range-partitioned by
-- task_id, so that old history leaves by dropping whole partition sets (retention), never
-- by row-by-row DELETE. Functions: sql/queues/partitions.sql; reasons and operations:
-- docs/operations.md, "Retention and partitions".
--
-- Locks: converting a table into a partitioned one cannot be done in place; it needs a
-- new table, a copy of every row and a swap of names, so the conversion below takes
-- ACCESS EXCLUSIVE on queues.task, task_lease, task_completed, error,
-- task_lease_extension, task_lease_release, task_lease_revocation, task_attempt_failed,
-- task_redriven, task_lease_started, task_interruption, task_cancelled, task_result,
-- task_run_now, task_pending and resource_lease until the migration commits: claims,
-- completions and enqueues wait for the copy (about 10 s per million tasks of history).
-- Foreign keys from other tables to these (the domains' attempts, the provider calls of
-- internal) are dropped: a referenced partition could not be dropped.
-- Once converted, running this file again changes nothing.
set local lock_timeout = '5s';
-- lock: access exclusive on queues.task: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_lease: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_completed: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.error: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_lease_extension: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_lease_release: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_lease_revocation: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_attempt_failed: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_redriven: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_lease_started: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_interruption: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_cancelled: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_result: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_run_now: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_type: dropping the old tables drops their foreign keys to it, once
-- lock: access exclusive on queues.task_pending: held while its task's tables are converted, so no claim sees half a swap; its foreign key to task is dropped
-- lock: access exclusive on queues.resource_lease: held while its task's tables are converted, so no claim sees half a swap; its foreign key to task is dropped

-- Retention and partition sizing (one row; owner only). See docs/operations.md.
create table if not exists queues.history_setting (
  singleton        boolean primary key default true check (singleton),
  -- Task ids per partition set. Aim for about a day of tasks at the observed rate.
  partition_size   bigint not null default 1000000 check (partition_size between 1 and 1000000000000),
  -- Sets kept ready above the last task id handed out.
  partitions_ahead integer not null default 2 check (partitions_ahead between 1 and 1000),
  -- A set is dropped once its newest completion is older than this (and nothing in it
  -- is pending).
  retention        interval not null default '7 days' check (retention >= interval '0'),
  -- Maintenance waits at most this long for a lock, then skips the step until next run.
  lock_timeout_ms  integer not null default 100 check (lock_timeout_ms between 1 and 60000),
  updated_at       timestamptz not null default now()
);
comment on table queues.history_setting is
  'Retention window and partition sizing of the queue''s history (one row). See sql/queues/partitions.sql.';
insert into queues.history_setting default values on conflict do nothing;

-- What retention removed: one row per dropped partition set.
create table if not exists queues.history_partition_dropped (
  history_partition_dropped_id bigint generated always as identity primary key,
  lower_bound       bigint not null,
  upper_bound       bigint not null check (upper_bound > lower_bound),
  tasks             bigint not null,
  last_completed_at timestamptz,
  dropped_at        timestamptz not null default now()
);
comment on table queues.history_partition_dropped is
  'Append-only: partition sets of queue history dropped by retention (task ids [lower_bound, upper_bound)).';
drop trigger if exists forbid_update on queues.history_partition_dropped;
create trigger forbid_update before update on queues.history_partition_dropped
  for each statement execute function queues.forbid_fact_update();

-- Retention of business processes' own facts, off by default: a row per process turns it
-- on (sql/internal/retention.sql).
create table if not exists internal.process_retention (
  process    text primary key
             check (process in ('send_email', 'send_sms', 'file_deletion', 'account_deletion', 'account_anonymization')),
  retention  interval not null check (retention > interval '0'),
  updated_at timestamptz not null default now()
);
comment on table internal.process_retention is
  'Retention window of finished business processes, per process; no row: kept forever (the default).';

-- What domain retention removed: one row per process per run that pruned roots.
create table if not exists internal.process_pruned (
  process_pruned_id bigint generated always as identity primary key,
  process         text not null,
  first_root_id   bigint not null,
  last_root_id    bigint not null check (last_root_id >= first_root_id),
  roots           integer not null check (roots > 0),
  finished_before timestamptz not null,
  pruned_at       timestamptz not null default now()
);
create index if not exists process_pruned_process_idx on internal.process_pruned (process, last_root_id);
comment on table internal.process_pruned is
  'Append-only: finished process roots pruned by domain retention (ids first_root_id..last_root_id, not every id in between).';
drop trigger if exists forbid_update on internal.process_pruned;
create trigger forbid_update before update on internal.process_pruned
  for each statement execute function queues.forbid_fact_update();

--! Included queues/partitions.sql
-- History partitions: queues.task and every fact table keyed by task are range-partitioned
-- by task_id, all on the same bounds (a "partition set"). Old history leaves by dropping a
-- whole set, never by row-by-row DELETE. Settings: queues.history_setting; what was
-- dropped: queues.history_partition_dropped (both in migrations/current/330-history.sql).
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
-- on the parent does not fire for a statement that names the partition. Returns whether
-- anything was created. Owner only.
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
--! EndIncluded queues/partitions.sql
--! Included internal/retention.sql
-- Retention of business processes' own facts, off by default. Each domain has a
-- prune_finished_processes function (sql/comms/retention.sql, sql/files/retention.sql,
-- sql/accounts/retention.sql) that deletes, for each of its processes with a row in
-- internal.process_retention, the roots finished (a X_task_succeeded or X_task_failed
-- fact) longer ago than the window, with every fact of theirs (foreign keys cascade from
-- the root). Each run is recorded in internal.process_pruned, which the process timeline
-- reads to say that a root was pruned. Queue history has its own retention
-- (sql/queues/partitions.sql); the domains do not reference queue tables.

-- Deletes up to _limit roots of process _process (schema _schema) finished before
-- _now - its retention; none when the process has no retention row. Returns the deleted
-- roots as JSON (the callers delete domain data they point at). Owner only.
create or replace function internal.prune_finished_roots(
  _schema text, _process text, _now timestamptz, _limit integer
) returns table (root_id bigint, root jsonb)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _retention interval;
  _key text := _process || '_task_id';
  _deleted jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _limit is null or _limit not between 1 and 100000 then
    raise exception 'limit must be between 1 and 100000, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  select r.retention into _retention from internal.process_retention r where r.process = _process;
  if _retention is null then
    return;
  end if;
  -- Table names from the catalog, quoted with %I; values through `using`.
  if to_regclass(format('%I.%I', _schema, _process || '_task')) is null
     or to_regclass(format('%I.%I', _schema, _process || '_task_succeeded')) is null
     or to_regclass(format('%I.%I', _schema, _process || '_task_failed')) is null then
    raise exception 'no process %.%', _schema, _process using errcode = '22023';
  end if;
  execute format(
    'with done as (
       select r.%1$I as id from %2$I.%3$I r
        where exists (select 1 from %2$I.%4$I s where s.%1$I = r.%1$I and s.created_at < $1)
           or exists (select 1 from %2$I.%5$I f where f.%1$I = r.%1$I and f.created_at < $1)
        order by r.%1$I
        limit $2
     ),
     gone as (
       delete from %2$I.%3$I r using done d where r.%1$I = d.id returning r.*
     )
     select coalesce(jsonb_agg(to_jsonb(g) order by g.%1$I), ''[]'') from gone g',
    _key, _schema, _process || '_task', _process || '_task_succeeded', _process || '_task_failed')
    into _deleted using _now - _retention, _limit;
  if jsonb_array_length(_deleted) > 0 then
    insert into internal.process_pruned (process, first_root_id, last_root_id, roots, finished_before, pruned_at)
    values (_process, (_deleted -> 0 ->> _key)::bigint, (_deleted -> -1 ->> _key)::bigint,
            jsonb_array_length(_deleted), _now - _retention, _now);
  end if;
  return query select (d ->> _key)::bigint, d from jsonb_array_elements(_deleted) d;
end;
$$;

-- The prune run that removed root _root_id of _process, if any (the newest).
create or replace function internal.process_root_pruned(_process text, _root_id bigint)
  returns internal.process_pruned
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select p.* from internal.process_pruned p
   where p.process = _process and _root_id between p.first_root_id and p.last_root_id
   order by p.process_pruned_id desc
   limit 1
$$;
--! EndIncluded internal/retention.sql
--! Included comms/retention.sql
-- Retention of finished send processes, off by default (internal.process_retention has
-- no row for send_email or send_sms until an operator adds one). Deletes each root that
-- finished (succeeded or failed) longer ago than its process's window, with its facts,
-- and the message it sent (content included). See sql/internal/retention.sql.

-- Owner only: prunes at _now, at most _limit roots per process. Returns the counts.
create or replace function comms.prune_finished_processes_at(_now timestamptz, _limit integer)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _email bigint[];
  _sms bigint[];
begin
  select coalesce(array_agg((p.root ->> 'message_id')::bigint), '{}') into _email
    from internal.prune_finished_roots('comms', 'send_email', _now, _limit) p;
  select coalesce(array_agg((p.root ->> 'message_id')::bigint), '{}') into _sms
    from internal.prune_finished_roots('comms', 'send_sms', _now, _limit) p;
  -- Their messages go with them (email_message and sms_message cascade).
  delete from comms.message m where m.message_id = any (_email || _sms);
  return jsonb_build_object('send_email', cardinality(_email), 'send_sms', cardinality(_sms));
end;
$$;

-- A runnable db_function (schedule it to apply the retention): prunes at now(), up to
-- 10,000 roots per process per run.
create or replace function comms.prune_finished_processes(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', comms.prune_finished_processes_at(now(), 10000))
$$;

-- The worker runs it (from a schedule) through internal.run_function. Granted here, beside
-- the function, so that a migration including sql/comms/privileges.sql before this file
-- does not name a function that does not exist yet.
grant execute on function comms.prune_finished_processes(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('comms.prune_finished_processes(jsonb)');
--! EndIncluded comms/retention.sql
--! Included files/retention.sql
-- Retention of finished file deletions, off by default (internal.process_retention has no
-- row for file_deletion until an operator adds one). Deletes each root that finished
-- longer ago than the window, with its facts; the file row (the record of the stored
-- object) stays. See sql/internal/retention.sql.

-- Owner only: prunes at _now, at most _limit roots. Returns the count.
create or replace function files.prune_finished_processes_at(_now timestamptz, _limit integer)
  returns jsonb
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('file_deletion',
    (select count(*) from internal.prune_finished_roots('files', 'file_deletion', _now, _limit)))
$$;

-- A runnable db_function: prunes at now(), up to 10,000 roots per run.
create or replace function files.prune_finished_processes(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', files.prune_finished_processes_at(now(), 10000))
$$;

-- The worker runs it (from a schedule) through internal.run_function. Granted here, beside
-- the function, so that a migration including sql/files/privileges.sql before this file
-- does not name a function that does not exist yet.
grant execute on function files.prune_finished_processes(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('files.prune_finished_processes(jsonb)');
--! EndIncluded files/retention.sql
--! Included accounts/retention.sql
-- Retention of finished account deletions and anonymizations, off by default
-- (internal.process_retention has no row for account_deletion or account_anonymization
-- until an operator adds one). Deletes each root that finished longer ago than its
-- process's window, with its facts; the account row (anonymized) and its flags stay.
-- See sql/internal/retention.sql.

-- Owner only: prunes at _now, at most _limit roots per process. Returns the counts.
create or replace function accounts.prune_finished_processes_at(_now timestamptz, _limit integer)
  returns jsonb
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object(
    'account_deletion',
    (select count(*) from internal.prune_finished_roots('accounts', 'account_deletion', _now, _limit)),
    'account_anonymization',
    (select count(*) from internal.prune_finished_roots('accounts', 'account_anonymization', _now, _limit)))
$$;

-- A runnable db_function: prunes at now(), up to 10,000 roots per process per run.
create or replace function accounts.prune_finished_processes(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', accounts.prune_finished_processes_at(now(), 10000))
$$;

-- The worker runs it (from a schedule) through internal.run_function. Granted here, beside
-- the function, so that a migration including sql/accounts/privileges.sql before this file
-- does not name a function that does not exist yet.
grant execute on function accounts.prune_finished_processes(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('accounts.prune_finished_processes(jsonb)');
--! EndIncluded accounts/retention.sql

-- The conversion. Tables are converted as they are (columns, defaults, checks and
-- identity are copied with LIKE), so columns added by earlier files are kept.
-- Keys lead with task_id (the partition key must be part of every unique key).
-- Foreign keys between queue facts, and from task_pending and resource_lease to task, are
-- not recreated: a partition of a referenced table cannot be dropped while a foreign key
-- points at it, and each fact insert would lock its parent row. The security-definer
-- functions are the only writers; sql/queues/partitions.test.ts checks the relations.
do $convert$
declare
  _tables text[] := queues.history_tables();
  _derived text[] := array['task_pending', 'resource_lease'];
  _table text;
  _index record;
  _seq text;
  _acl record;
  _size bigint;
  _max bigint;
  _lower bigint;
  _constraint record;
begin
  if (select c.relkind from pg_class c where c.oid = 'queues.task'::regclass) = 'p' then
    return;
  end if;

  execute 'lock table ' || (select string_agg(format('queues.%I', t), ', ') from unnest(_tables || _derived) t)
          || ' in access exclusive mode';

  -- Objects bound to the old tables, recreated by the includes below.
  drop view if exists queues.dead_letter;
  drop view if exists queues.task_lease_effective;
  drop function if exists queues.dequeue_next_available_task(text, integer);

  -- Foreign keys from the derived tables to the facts.
  for _constraint in
    select c.conname, c.conrelid::regclass as rel from pg_constraint c
     where c.contype = 'f' and c.confrelid = any (array(select format('queues.%I', t)::regclass from unnest(_tables) t))
       and c.conrelid <> all (array(select format('queues.%I', t)::regclass from unnest(_tables) t))
  loop
    execute format('alter table %s drop constraint %I', _constraint.rel, _constraint.conname);
  end loop;

  -- Old tables, their indexes and identity sequences move aside under *_unpartitioned names.
  foreach _table in array _tables loop
    for _index in
      select ic.relname from pg_index i join pg_class ic on ic.oid = i.indexrelid
       where i.indrelid = format('queues.%I', _table)::regclass
    loop
      execute format('alter index queues.%I rename to %I', _index.relname, _index.relname || '_unpartitioned');
    end loop;
    for _seq in
      select s.relname from pg_depend d join pg_class s on s.oid = d.objid and s.relkind = 'S'
       where d.refobjid = format('queues.%I', _table)::regclass and d.deptype in ('a', 'i')
    loop
      execute format('alter sequence queues.%I rename to %I', _seq, _seq || '_unpartitioned');
    end loop;
    execute format('alter table queues.%I rename to %I', _table, _table || '_unpartitioned');
  end loop;

  -- New partitioned tables.
  foreach _table in array _tables loop
    execute format(
      'create table queues.%I (like queues.%I including defaults including identity including constraints
                                            including generated including comments including storage%s)
         partition by range (task_id)',
      _table, _table || '_unpartitioned',
      case when not exists (select 1 from pg_attribute a
                             where a.attrelid = format('queues.%I', _table || '_unpartitioned')::regclass
                               and a.attname = 'task_id' and not a.attisdropped)
           then ', task_id bigint not null' else '' end);
    execute format('alter table queues.%I alter column task_id set not null', _table);
    execute format('comment on table queues.%I is %L', _table,
                   obj_description(format('queues.%I', _table || '_unpartitioned')::regclass, 'pg_class'));
  end loop;

  alter table queues.task add constraint task_pkey primary key (task_id);
  alter table queues.task add constraint task_task_type_fkey
    foreign key (task_type) references queues.task_type on delete restrict;
  alter table queues.task_lease add constraint task_lease_pkey primary key (task_id, task_lease_id);
  alter table queues.task_completed add constraint task_completed_pkey primary key (task_id);
  create index task_completed_unsuccessful_idx
    on queues.task_completed (completed_at desc) where outcome <> 'succeeded';
  create index task_completed_completed_at_idx on queues.task_completed (completed_at);
  -- Dead letters and the task list filtered by a failed outcome, newest first: a page
  -- costs its own rows, however rare failures are and however long the history.
  create index task_completed_unsuccessful_task_idx on queues.task_completed (task_id) where outcome <> 'succeeded';
  alter table queues.error add constraint error_pkey primary key (task_id, error_id);
  alter table queues.task_lease_extension add constraint task_lease_extension_pkey
    primary key (task_id, task_lease_id, task_lease_extension_id);
  alter table queues.task_lease_release add constraint task_lease_release_pkey primary key (task_id, task_lease_id);
  alter table queues.task_lease_revocation add constraint task_lease_revocation_pkey primary key (task_id, task_lease_id);
  alter table queues.task_attempt_failed add constraint task_attempt_failed_pkey
    primary key (task_id, task_attempt_failed_id);
  alter table queues.task_redriven add constraint task_redriven_pkey primary key (task_id);
  alter table queues.task_lease_started add constraint task_lease_started_pkey primary key (task_id, task_lease_id);
  alter table queues.task_interruption add constraint task_interruption_pkey primary key (task_id, task_lease_id);
  alter table queues.task_cancelled add constraint task_cancelled_pkey primary key (task_id);
  alter table queues.task_result add constraint task_result_pkey primary key (task_id, task_lease_id);
  alter table queues.task_run_now add constraint task_run_now_pkey primary key (task_id);
  create index task_resource_key_idx on queues.task (resource_key, task_id) where resource_key is not null;

  -- Partition sets for the rows there are, plus the sets ahead, plus a default
  -- partition per table so that an enqueue never fails if maintenance fell behind.
  select s.partition_size, s.partition_size * s.partitions_ahead into _size, _max from queues.history_setting s;
  _max := coalesce((select max(t.task_id) from queues.task_unpartitioned t), 0) + 1 + _max;
  _lower := coalesce((select min(t.task_id) from queues.task_unpartitioned t), 1) / _size * _size;
  while _lower < _max loop
    perform queues.create_history_partition(_lower, _lower + _size);
    _lower := _lower + _size;
  end loop;
  foreach _table in array _tables loop
    execute format('create table queues.%I partition of queues.%I default', _table || '_default', _table);
    execute format('create trigger forbid_update before update on queues.%I
                      for each statement execute function queues.forbid_fact_update()', _table || '_default');
  end loop;

  -- The rows, identity values as they were.
  foreach _table in array _tables loop
    if not exists (select 1 from pg_attribute a
                    where a.attrelid = format('queues.%I', _table || '_unpartitioned')::regclass
                      and a.attname = 'task_id' and not a.attisdropped) then
      -- task_id is new (appended last): filled from the lease.
      execute format('insert into queues.%I overriding system value
                        select o.*, l.task_id from queues.%I o
                          join queues.task_lease_unpartitioned l on l.task_lease_id = o.task_lease_id',
                     _table, _table || '_unpartitioned');
    elsif _table <> 'task_lease' and exists (
            select 1 from pg_attribute a
             where a.attrelid = format('queues.%I', _table || '_unpartitioned')::regclass
               and a.attname = 'task_lease_id' and not a.attisdropped) then
      -- A lease fact that has task_id already: rows written before it was filled get it
      -- from their lease.
      execute format('insert into queues.%I (%s) overriding system value select %s from queues.%I o',
                     _table,
                     (select string_agg(quote_ident(a.attname), ', ' order by a.attnum) from pg_attribute a
                       where a.attrelid = format('queues.%I', _table || '_unpartitioned')::regclass
                         and a.attnum > 0 and not a.attisdropped),
                     (select string_agg(case when a.attname = 'task_id'
                                             then 'coalesce(o.task_id, (select l.task_id from queues.task_lease_unpartitioned l
                                                                        where l.task_lease_id = o.task_lease_id))'
                                             else 'o.' || quote_ident(a.attname) end, ', ' order by a.attnum)
                        from pg_attribute a
                       where a.attrelid = format('queues.%I', _table || '_unpartitioned')::regclass
                         and a.attnum > 0 and not a.attisdropped),
                     _table || '_unpartitioned');
    else
      execute format('insert into queues.%I overriding system value select * from queues.%I',
                     _table, _table || '_unpartitioned');
    end if;
  end loop;

  -- Identity sequences continue where the old ones stopped.
  foreach _table in array _tables loop
    for _seq in
      select a.attname from pg_attribute a
       where a.attrelid = format('queues.%I', _table)::regclass and a.attidentity <> '' and not a.attisdropped
    loop
      perform setval(pg_get_serial_sequence(format('queues.%I', _table), _seq),
                     s.last_value, s.is_called)
         from pg_sequences ps,
              lateral (select ps.last_value is not null as is_called,
                              coalesce(ps.last_value, ps.start_value) as last_value) s
        where ps.schemaname = 'queues'
          and ps.sequencename = (parse_ident(pg_get_serial_sequence(format('queues.%I', _table || '_unpartitioned'), _seq)))[2];
    end loop;
  end loop;

  -- Privileges as they were, and the statement trigger that refuses updates.
  foreach _table in array _tables loop
    for _acl in
      select a.grantee, a.privilege_type, a.is_grantable
        from pg_class c, aclexplode(c.relacl) a
       where c.oid = format('queues.%I', _table || '_unpartitioned')::regclass
         and a.grantee <> c.relowner
    loop
      execute format('grant %s on queues.%I to %s%s', _acl.privilege_type, _table,
                     case when _acl.grantee = 0 then 'public' else quote_ident(pg_get_userbyid(_acl.grantee)) end,
                     case when _acl.is_grantable then ' with grant option' else '' end);
    end loop;
    execute format('create trigger forbid_update before update on queues.%I
                      for each statement execute function queues.forbid_fact_update()', _table);
    -- Any other trigger of the old table (e.g. one run on TRUNCATE), as it was defined.
    for _index in
      select pg_get_triggerdef(t.oid) as relname from pg_trigger t
       where t.tgrelid = format('queues.%I', _table || '_unpartitioned')::regclass
         and not t.tgisinternal and t.tgname <> 'forbid_update'
    loop
      execute replace(_index.relname, format(' ON queues.%I ', _table || '_unpartitioned'),
                      format(' ON queues.%I ', _table));
    end loop;
  end loop;

  -- One statement: the old tables reference each other.
  execute 'drop table ' || (select string_agg(format('queues.%I', t || '_unpartitioned'), ', ') from unnest(_tables) t);
end;
$convert$;

-- TRUNCATE queues.task empties every history table: no foreign key is left for CASCADE
-- to follow (replaces the version of migrations/current/120-hotpath.sql, which left the
-- cold facts to their foreign keys).
create or replace function queues.truncate_task_facts() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  truncate queues.task_pending, queues.resource_lease, queues.task_lease, queues.task_completed,
           queues.error, queues.task_lease_extension, queues.task_lease_release,
           queues.task_lease_revocation, queues.task_attempt_failed, queues.task_redriven,
           queues.task_lease_started, queues.task_interruption, queues.task_cancelled,
           queues.task_result, queues.task_run_now;
  return null;
end;
$$;

-- Lease facts carry their task's id, so lookups by lease are pruned to one partition.
--! Included queues/task_lease_effective.sql
-- Each lease with the expiry in force: released, else revoked, else the newest
-- extension's, else as claimed. Lease facts are joined on (task_id, task_lease_id), their
-- primary keys, so a task's leases are read from its own partition set.
create or replace view queues.task_lease_effective as
select l.task_lease_id, l.task_id, l.worker_id, l.leased_at,
       coalesce(r.released_at, v.revoked_at, e.expires_at, l.expires_at) as expires_at,
       r.released_at,
       coalesce(e.extensions, 0) as extensions,
       v.revoked_at
  from queues.task_lease l
  left join queues.task_lease_release r on r.task_id = l.task_id and r.task_lease_id = l.task_lease_id
  left join queues.task_lease_revocation v on v.task_id = l.task_id and v.task_lease_id = l.task_lease_id
  left join lateral (
    select max(x.expires_at) as expires_at, count(*)::integer as extensions
      from queues.task_lease_extension x
     where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
  ) e on true;
comment on view queues.task_lease_effective is 'Leases with their effective expiry (releases and heartbeats applied).';
--! EndIncluded queues/task_lease_effective.sql
--! Included queues/dead_letter.sql
-- Dead letters: tasks that ended badly with nobody else to deal with it, and redrive.
--
-- A task is a dead letter when it completed 'abandoned', or 'failed' without an
-- error_handler in its payload (a task with an error handler hands its failures to a
-- supervisor, which retries on its own), and it has not been redriven.

-- task_id is the completion's, so that a page's bound and order (task_id < $n order by
-- task_id desc) walk task_completed_unsuccessful_task_idx from the bound down.
create or replace view queues.dead_letter as
select c.task_id, t.task_type, t.payload, c.outcome, c.completed_at,
       (select e.error_message from queues.error e where e.task_id = t.task_id
         order by e.error_id desc limit 1) as last_error,
       (select count(*)::integer from queues.task_lease l where l.task_id = t.task_id) as attempts
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
-- Poison tasks: a task that comes up for claiming after _max_leases leases expired
-- without completion (releases, reported failed attempts and leases of tasks never
-- started excepted, see queues.task_lease_started) is completed as 'abandoned' with an error
-- instead of being leased again, so a task that kills its worker cannot loop forever.

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
              from unnest(coalesce(_task_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
     cross join lateral (
       select p.task_id, p.current_lease_id, p.resource_key, p.priority, p.scheduled_at,
              p.lease_count - p.released_count - p.failed_attempts - p.unstarted_count as ended_leases
         from queues.task_pending p
        where p.task_type = ty.task_type
          and p.current_lease_id is null
          and p.scheduled_at <= _now
          and p.available_at <= _now
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
    -- task_pending_leased_idx: only expired leases are read.
    select x.*
      from (
        select p.task_id, p.current_lease_id, p.resource_key, p.priority, p.scheduled_at,
               p.lease_count - p.released_count - p.failed_attempts - p.unstarted_count as ended_leases
          from queues.task_pending p
         where p.current_lease_id is not null
           and p.available_at <= _now
           and (_task_types is null or p.task_type = any (_task_types))
           and (p.resource_key is null or not exists (
                 select 1 from queues.resource_lease r
                  where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
         order by p.available_at
         limit _limit
           for update skip locked
      ) x
  ),
  picked as (
    -- Of the candidates (locked until commit), the first _limit in claim order. An expired
    -- lease counts towards abandonment (and makes the task a suspect) only if its task
    -- was started: a task that waited in a dead worker's local queue is not suspect.
    select c.task_id, c.current_lease_id, c.resource_key, c.priority, c.scheduled_at,
           c.ended_leases - c.unstarted_expiry::integer >= _max_leases as poisoned,
           c.ended_leases - c.unstarted_expiry::integer as expired_leases
      from (
        select c.*,
               c.current_lease_id is not null and not exists (
                 select 1 from queues.task_lease_started s
                  where s.task_id = c.task_id and s.task_lease_id = c.current_lease_id) as unstarted_expiry
          from candidate c
         order by c.priority desc, c.scheduled_at, c.task_id
         limit _limit
      ) c
  ),
  -- Resource keys: one task per key in this batch, and only if no other task holds the
  -- key. The upsert decides on the newest committed row (not this statement's snapshot),
  -- so two claimers never both take a key.
  -- Suspects (tasks a started lease of which expired: their worker may have died of them)
  -- are leased one per claim, so the tasks a crashed worker was running, which all come
  -- back at the same moment, do not all land in one worker again beside the task that
  -- crashed it.
  allowed as (
    select pk.task_id, pk.resource_key, pk.priority, pk.scheduled_at
      from (select pk.*,
                   row_number() over (partition by pk.expired_leases > 0
                                      order by pk.priority desc, pk.scheduled_at, pk.task_id) as rank
              from picked pk
             where not pk.poisoned) pk
     where pk.expired_leases = 0 or pk.rank = 1
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
    select pk.task_id
      from allowed pk
     where pk.resource_key is null or pk.task_id in (select kt.task_id from key_taken kt)
  ),
  abandoned_error as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select pk.task_id, pk.current_lease_id,
           format('abandoned: %s leases expired without completion (max_leases %s)', pk.expired_leases, _max_leases)
      from picked pk where pk.poisoned
  ),
  abandoned as (
    -- No lease: the claimer abandoning the task does not hold one, so the last holder's
    -- fenced completion is refused as lease_lost.
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome)
    select pk.task_id, null, _now, 'abandoned' from picked pk where pk.poisoned
  ),
  abandoned_removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select pk.task_id from picked pk where pk.poisoned))
  ),
  leased as (
    insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
    select e.task_id, _worker_id, _now, _now + make_interval(secs => _lease_seconds)
      from eligible e
    returning *
  ),
  -- Set-based: each claimed row is probed by primary key once, for its new lease (the
  -- leases drive a nested loop; no CTE is joined to another CTE, whose row estimates
  -- would make that join quadratic). SET expressions read the row as it was: a lease
  -- still current here expired, and counts as unstarted if its task never started.
  moved as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds),
           current_lease_id = l.task_lease_id,
           lease_count = p.lease_count + 1,
           unstarted_count = p.unstarted_count + (p.current_lease_id is not null and not exists (
             select 1 from queues.task_lease_started s
              where s.task_id = p.task_id and s.task_lease_id = p.current_lease_id))::integer
      from leased l
     where p.task_id = l.task_id
    returning p.task_id, p.lease_count, l.task_lease_id, l.leased_at, l.expires_at
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
         c.enqueued_at, c.scheduled_at
    from queues.claim_tasks_at(now(), coalesce(_worker_id, session_user::text), 1,
                               queues.claimable_task_types(null), coalesce(_lease_seconds, 300), 5) c
$$;
--! EndIncluded queues/claim.sql
--! Included queues/lease.sql
-- Heartbeats and releases of leases. Both act only on a task's current lease: a worker
-- whose lease was taken over learns it from the missing row and must stop.

-- Validates parallel arrays of task ids and lease ids.
create or replace function queues.assert_lease_pairs(_task_ids bigint[], _task_lease_ids bigint[])
  returns void
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_ids is null or _task_lease_ids is null then
    raise exception 'task_ids and task_lease_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) <> cardinality(_task_lease_ids) then
    raise exception 'task_ids and task_lease_ids must have the same length (% and %)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 leases per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null then
    raise exception 'task_ids and task_lease_ids must not contain null' using errcode = '22004';
  end if;
end;
$$;

-- Resource-key locks. Everything that changes queues.resource_lease holds the key's
-- transaction-scoped advisory lock (class 20251, hashtext(key)) while it does: the claim
-- takes it with pg_try_advisory_xact_lock and skips a key it cannot get, so a claim
-- never waits on a key; the others (completion, heartbeat, release, revocation) take
-- theirs in one global order with this function, so they cannot deadlock each other.
create or replace function queues.lock_resource_keys(_task_ids bigint[])
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text;
begin
  for _key in
    select distinct p.resource_key
      from queues.task_pending p
     where p.task_id = any (_task_ids) and p.resource_key is not null
     order by 1
  loop
    perform pg_advisory_xact_lock(20251, hashtext(_key));
  end loop;
end;
$$;

-- Extends each given lease that is still its task's current lease to _now + _lease_seconds
-- and appends a queues.task_lease_extension fact. Parallel arrays of task and lease ids.
-- Returns the leases extended; a lease missing from the result was lost (the task was
-- re-claimed after an expiry, or completed, or its resource key went to another task).
create or replace function queues.extend_leases_at(
  _now            timestamptz,
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _lease_seconds  integer
) returns table (task_id bigint, task_lease_id bigint, expires_at timestamptz)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;
  -- The rows first, in task_id order, as complete_tasks locks them (a primary-key probe of
  -- `= any`): a heartbeat and a completion batch that share tasks then wait for each other
  -- instead of deadlocking.
  perform 1 from queues.task_pending p where p.task_id = any (_task_ids) order by p.task_id for no key update;

  return query
  with extended as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds)
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
     where p.task_id = i.task_id
       and p.current_lease_id = i.task_lease_id
       -- A keyed task extends only while it holds its key: once an expired lease's key
       -- went to another task (which may hold it still, or have completed), the lease
       -- is lost and must not come back to life beside the other task's.
       and (p.resource_key is null
            or exists (select 1 from queues.resource_lease r
                        where r.resource_key = p.resource_key and r.task_id = p.task_id))
    returning p.task_id, p.current_lease_id, p.available_at, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_extension (task_id, task_lease_id, extended_at, expires_at)
    select e.task_id, e.current_lease_id, _now, e.available_at from extended e
  ),
  key_extended as (
    update queues.resource_lease r
       set expires_at = e.available_at
      from extended e
     where e.resource_key is not null and r.resource_key = e.resource_key and r.task_id = e.task_id
  )
  select e.task_id, e.current_lease_id, e.available_at from extended e;
end;
$$;

create or replace function queues.extend_leases(
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _lease_seconds  integer default null
) returns table (task_id bigint, task_lease_id bigint, expires_at timestamptz)
  language sql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.extend_leases_at(now(), _task_ids, _task_lease_ids, coalesce(_lease_seconds, 300))
$$;

-- Gives leases back before they expire (graceful shutdown): each task whose current lease
-- is given becomes claimable at once, and the release is not counted towards abandoning
-- it. The lease ends there: completing, failing or extending with it is refused.
-- Returns the task ids released; wakes listening workers.
create or replace function queues.release_leases(
  _task_ids       bigint[],
  _task_lease_ids bigint[]
) returns table (task_id bigint)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _released bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);

  with released as (
    update queues.task_pending p
       set available_at = now(),
           -- A released lease is no longer held: its worker can neither extend it nor
           -- complete or record against it.
           current_lease_id = null,
           released_count = p.released_count + 1
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
     where p.task_id = i.task_id
       and p.current_lease_id = i.task_lease_id
    returning p.task_id, i.task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_release (task_id, task_lease_id)
    select r.task_id, r.task_lease_id from released r
    on conflict do nothing
  ),
  key_freed as (
    delete from queues.resource_lease k
     using released r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select array_agg(r.task_id order by r.task_id) into _released from released r;

  if _released is not null then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select unnest(coalesce(_released, '{}'));
end;
$$;
--! EndIncluded queues/lease.sql
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
  select p.task_id, p.current_lease_id, l.worker_id, w.last_seen_at, p.available_at
    from queues.task_pending p
    join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
    join queues.worker w on w.worker_id = l.worker_id
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
           -- A lease whose task never started does not count towards abandonment.
           unstarted_count = p.unstarted_count + (not exists (
             select 1 from queues.task_lease_started st
              where st.task_id = p.task_id and st.task_lease_id = s.task_lease_id))::integer
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
-- complete anything). Its tasks are claimable at once instead of when their leases expire
-- (a dead process's local queue is not left waiting); as with stale recovery, the
-- revocation of a started task counts as an expired lease (and makes it a suspect), that
-- of a task never started does not. Returns what was revoked; wakes listening workers.
create or replace function queues.revoke_worker_leases(_worker_id text)
  returns table (task_id bigint, task_lease_id bigint)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  perform queues.lock_resource_keys(array(
    select p.task_id from queues.task_pending p
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id is not null and l.worker_id = _worker_id));
  return query
  with held as (
    select p.task_id, p.current_lease_id as task_lease_id
      from queues.task_pending p
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id is not null and l.worker_id = _worker_id
  ),
  revoked as (
    update queues.task_pending p
       set available_at = now(), current_lease_id = null,
           unstarted_count = p.unstarted_count + (not exists (
             select 1 from queues.task_lease_started st
              where st.task_id = p.task_id and st.task_lease_id = h.task_lease_id))::integer
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
--! Included queues/maintenance.sql
-- Maintenance of the derived structures (task_pending, resource_lease). Owner only.

-- Rebuilds queues.task_pending and queues.resource_lease from the facts: every task
-- without a completion, available at its scheduled time, the retry time of its last
-- failed attempt, the retry time of its last transient interruption, or the effective
-- expiry of its newest lease (heartbeats, releases and revocations applied), whichever is
-- latest. Returns the number of pending tasks.
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
     lease_count, released_count, max_attempts, failed_attempts, unstarted_count, interrupted_count)
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
         -- Leases that ended unstarted: neither released, nor ended by a failed attempt,
         -- nor started, nor the lease still held (a claim counts that one when it expires).
         (select count(*)::integer
            from queues.task_lease_effective u
           where u.task_id = t.task_id
             and u.released_at is null
             and not exists (select 1 from queues.task_lease_started s
                              where s.task_id = u.task_id and s.task_lease_id = u.task_lease_id)
             and not exists (select 1 from queues.task_attempt_failed a where a.task_id = u.task_id and a.task_lease_id = u.task_lease_id)
             and not (u.task_lease_id = l.task_lease_id and l.revoked_at is null
                      and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id))),
         coalesce(i.interrupted_count, 0)
    from queues.task t
    left join lateral (
      select le.task_lease_id, le.expires_at, le.released_at, le.revoked_at,
             count(*) over () :: integer as lease_count,
             count(le.released_at) over () :: integer as released_count
        from queues.task_lease_effective le
       where le.task_id = t.task_id
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
   where not exists (select 1 from queues.task_completed c where c.task_id = t.task_id);
  get diagnostics _count = row_count;

  -- Each resource key held by a live lease, as the claim left it.
  insert into queues.resource_lease (resource_key, task_id, expires_at)
  select distinct on (p.resource_key) p.resource_key, p.task_id, p.available_at
    from queues.task_pending p
   where p.resource_key is not null and p.current_lease_id is not null
   order by p.resource_key, p.available_at desc;
  return _count;
end;
$$;
--! EndIncluded queues/maintenance.sql
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
    select l.worker_id, count(*) as n
      from queues.task_pending p
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
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
--! Included admin/tasks.sql
-- Reading tasks for the operations API: a keyset-paginated list, one task with its facts,
-- and counts by type and state. The *_at functions take the clock (owner only, for
-- tests); the API calls the wrappers, which pass now().

-- Tasks newest first (by task_id), _limit per page (default 50, at most 500), older than
-- _before_task_id (the last id of the previous page: keyset pagination, so a page costs
-- the same at any depth). Filters, each optional and combined with AND:
--   _task_type            a registered type
--   _state                one of admin.task_states()
--   _worker_id            tasks leased at least once by this worker
--   _resource_key         tasks with this resource key
--   _enqueued_from/_to    enqueued_at in [from, to)
--   _payload_path/_value  payload #> path = value (a JSON value)
-- Which table drives the walk: pending states walk queues.task_pending (bounded by
-- pending work); outcomes walk queues.task_completed by key (failed and abandoned ones
-- by task_completed_unsuccessful_task_idx, which holds only those); a resource key walks
-- task_resource_key_idx; otherwise queues.task by its primary key, newest first. Every
-- walk stops after _limit matches, so its cost is the rows it has to pass over to find
-- them: a filter that matches only old or rare tasks (a payload value, a worker gone for
-- a week, a time range far back) reads the newer tasks in between. The statement is
-- built from constant fragments; every value is a parameter.
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
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _filters text := '';
  _sql text;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  if _state is not null and not (_state = any (admin.task_states())) then
    raise exception 'unknown state %; expected one of %', quote_literal(left(_state, 100)),
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
    _filters := _filters || ' and exists (select 1 from queues.task_lease l where l.task_id = t.task_id and l.worker_id = $6)';
  end if;
  if _resource_key is not null then _filters := _filters || ' and t.resource_key = $7'; end if;
  if _enqueued_from is not null then _filters := _filters || ' and t.enqueued_at >= $8'; end if;
  if _enqueued_to is not null then _filters := _filters || ' and t.enqueued_at < $9'; end if;
  if _payload_path is not null then _filters := _filters || ' and t.payload #> $10 = $11'; end if;

  if _state in ('scheduled', 'ready', 'running', 'retrying') then
    _sql := 'select p.task_id, p.task_type, $3, p.priority, t.resource_key, t.max_attempts, p.lease_count,
                    t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
               from queues.task_pending p
              -- lateral + limit 1: one primary-key probe per pending task passed over
              cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
              where admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1) = $3
                and ($4::bigint is null or p.task_id < $4)' || _filters || '
              order by p.task_id desc
              limit $5';
  elsif _state is not null then
    _sql := 'select c.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
                    (select count(*)::integer from queues.task_lease l where l.task_id = c.task_id),
                    t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
               from queues.task_completed c
              cross join lateral (select * from queues.task x where x.task_id = c.task_id limit 1) t
              where c.outcome = $3
                and ($4::bigint is null or c.task_id < $4)' || _filters || '
              order by c.task_id desc
              limit $5';
  else
    _sql := 'select t.task_id, t.task_type,
                    coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1)),
                    t.priority, t.resource_key, t.max_attempts,
                    coalesce(p.lease_count,
                             (select count(*)::integer from queues.task_lease l where l.task_id = t.task_id)),
                    t.enqueued_at, t.scheduled_at, p.available_at, c.completed_at
               from queues.task t
               left join queues.task_pending p on p.task_id = t.task_id
               left join queues.task_completed c on c.task_id = t.task_id
              where ($4::bigint is null or t.task_id < $4)' || _filters || '
              order by t.task_id desc
              limit $5';
  end if;
  return query execute _sql
    using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
          _enqueued_from, _enqueued_to, _payload_path, _payload_value;
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
--    failed_attempts: [...], redriven_to: id | null, redriven_from: id | null}
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
               from queues.task_lease_effective l where l.task_id = t.task_id), '[]'::jsonb),
           'errors', coalesce((
             select jsonb_agg(to_jsonb(e) - 'task_id' order by e.error_id)
               from queues.error e where e.task_id = t.task_id), '[]'::jsonb),
           'completion', case when c.task_id is not null then to_jsonb(c) - 'task_id' end)
    into _result
    from queues.task t
    left join queues.task_pending p on p.task_id = t.task_id
    left join queues.task_completed c on c.task_id = t.task_id
   where t.task_id = _task_id;

  if _result is null then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  return _result || admin.task_retry_facts(_task_id) || admin.task_dashboard_facts(_task_id);
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
-- read through task_completed_completed_at_idx), so the cost never follows history.
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
  select t.task_type, c.outcome, count(*)
    from queues.task_completed c
   -- lateral + limit 1: a primary-key probe per completion in the window
   cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
   where c.completed_at > _now - make_interval(secs => _window)
     and c.completed_at <= _now
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
        from queues.task_lease l
        join queues.task_lease_extension x on x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
       where l.task_id = _task_id), '[]'));
end;
$$;
--! EndIncluded admin/tasks.sql
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
    if not exists (select 1 from queues.task_lease l
                    where l.task_lease_id = _task_lease_id and l.task_id = _task_id) then
      raise exception 'lease % does not belong to task %', _task_lease_id, _task_id
        using errcode = '22023';
    end if;
    if exists (select 1 from queues.task_lease l
                where l.task_id = _task_id and l.task_lease_id > _task_lease_id)
       or exists (select 1 from queues.task_lease_release r
                   where r.task_id = _task_id and r.task_lease_id = _task_lease_id)
       or exists (select 1 from queues.task_lease_revocation v
                   where v.task_id = _task_id and v.task_lease_id = _task_lease_id)
       -- Completed by anyone not passing this lease (another worker, an unfenced call,
       -- the queue abandoning it): the holder's run is over.
       or exists (select 1 from queues.task_completed c
                   where c.task_id = _task_id and c.task_lease_id is distinct from _task_lease_id) then
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
--! Included queues/interrupt.sql
-- queues.interrupt_task: a task's run was cut short by a transient error (a deadlock,
-- a serialization failure, a lost connection): nothing of the run was recorded, and
-- the task should run again. Unlike a release, an interruption counts: it is recorded
-- with its message (queues.task_interruption, not a task error), the task runs again
-- after a backoff (1 s, 2 s, 4 s, ... times internal.backoff's backoff_scale), and the
-- task whose runs keep being interrupted is abandoned with the last message as its error
-- after _max_interruptions (default 5), so a step that always deadlocks ends as a dead
-- letter instead of looping forever.
--
-- Fenced: only the task's current lease, while it holds the task's resource key, may
-- interrupt. Returns
--   'retry_scheduled'  the lease ended; the task runs again at the retry time
--   'abandoned'        this was interruption number _max_interruptions: completed 'abandoned'
--   'lease_lost'       the lease is no longer current (nothing changed)
--   'unknown_task'     no such task

create or replace function queues.interrupt_task_at(
  _now                timestamptz,
  _task_id            bigint,
  _task_lease_id      bigint,
  _error_message      text,
  _max_interruptions  integer
) returns text
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending queues.task_pending;
  _message text := _error_message;
  _retry_at timestamptz;
begin
  if _now is null or _task_id is null or _task_lease_id is null then
    raise exception 'now, task_id and task_lease_id must not be null' using errcode = '22004';
  end if;
  if _message is null or btrim(_message) = '' then
    raise exception 'error_message must not be empty' using errcode = '22004';
  end if;
  if _max_interruptions is null or _max_interruptions not between 1 and 100 then
    raise exception 'max_interruptions must be between 1 and 100, got %', coalesce(_max_interruptions::text, 'null')
      using errcode = '22023';
  end if;
  if length(_message) > queues.max_error_message_length() then
    _message := left(_message, queues.max_error_message_length()) || ' [truncated]';
  end if;

  perform queues.lock_resource_keys(array[_task_id]);
  select p.* into _pending
    from queues.task_pending p
   where p.task_id = _task_id
     and p.current_lease_id = _task_lease_id
     and (p.resource_key is null
          or exists (select 1 from queues.resource_lease r
                      where r.resource_key = p.resource_key and r.task_id = p.task_id))
     for update;
  if not found then
    if not exists (select 1 from queues.task t where t.task_id = _task_id) then
      return 'unknown_task';
    end if;
    return 'lease_lost';
  end if;

  delete from queues.resource_lease r
   where _pending.resource_key is not null and r.resource_key = _pending.resource_key and r.task_id = _task_id;

  if _pending.interrupted_count + 1 >= _max_interruptions then
    insert into queues.error (task_id, task_lease_id, error_message)
    values (_task_id, _task_lease_id,
            format('abandoned: %s transient errors (max %s); the last: %s',
                   _pending.interrupted_count + 1, _max_interruptions, _message));
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome)
    values (_task_id, _task_lease_id, _now, 'abandoned');
    delete from queues.task_pending p where p.task_id = _task_id;
    return 'abandoned';
  end if;

  _retry_at := _now + internal.backoff(_pending.interrupted_count, 300) / 5;
  insert into queues.task_lease_release (task_id, task_lease_id, released_at) values (_task_id, _task_lease_id, _now)
  on conflict do nothing;
  insert into queues.task_interruption (task_lease_id, task_id, interrupted_at, retry_at, error_message)
  values (_task_lease_id, _task_id, _now, _retry_at, _message);
  -- Counted as a release (it is not an expired lease) and as an interruption.
  update queues.task_pending p
     set available_at = _retry_at,
         current_lease_id = null,
         released_count = p.released_count + 1,
         interrupted_count = p.interrupted_count + 1
   where p.task_id = _task_id;
  return 'retry_scheduled';
end;
$$;

create or replace function queues.interrupt_task(
  _task_id           bigint,
  _task_lease_id     bigint,
  _error_message     text,
  _max_interruptions integer default null
) returns text
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.interrupt_task_at(now(), _task_id, _task_lease_id, _error_message, coalesce(_max_interruptions, 5))
$$;
--! EndIncluded queues/interrupt.sql
--! Included admin/capacity.sql
-- Capacity planning per role (= task_type): how much work is waiting, how fast workers
-- get through it, and how many workers would drain it in 1, 4 or 8 hours.
--
-- Cost: pending/ready/running count queues.task_pending (bounded by pending work);
-- throughput reads only the completions of the last _window_seconds, through
-- task_completed_completed_at_idx, with primary-key probes into task and task_lease for
-- each of them; active workers read queues.worker. Nothing scans history.
--
-- Figures:
--   pending               tasks not completed (scheduled, ready, running, retrying)
--   ready                 claimable now
--   running               held by a live lease
--   active_workers        registered workers of this type seen within _dead_after_seconds
--                         and not stopped
--   completed_in_window   completions (any outcome) in the window
--   window_workers        distinct workers whose leases completed those tasks
--   tasks_per_worker_hour completed_in_window / (window_workers * window hours); null
--                         without completions in the window
--   estimated_hours_to_drain  pending / (tasks_per_worker_hour * active_workers); 0 when
--                         nothing is pending; null without a rate or without workers
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
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 3600);
  _dead_after integer := coalesce(_dead_after_seconds, 600);
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
  recent as (
    -- Completions in the window by completed_at (index range scan); each is joined to its
    -- task and lease by primary key (lateral + limit 1 keeps these nested loops).
    select t.task_type, count(*) as completed, count(distinct l.worker_id) as workers
      from queues.task_completed c
     cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
      left join lateral (select y.worker_id from queues.task_lease y
                          where y.task_id = c.task_id and y.task_lease_id = c.task_lease_id limit 1) l on true
     where c.completed_at > _now - make_interval(secs => _window)
       and c.completed_at <= _now
       and (_task_type is null or t.task_type = _task_type)
     group by t.task_type
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
           case when coalesce(r.completed, 0) > 0 and r.workers > 0
                then r.completed::double precision / (r.workers * (_window / 3600.0))
           end as rate
      from types ty
      left join queue q on q.task_type = ty.task_type
      left join recent r on r.task_type = ty.task_type
      left join workers w on w.task_type = ty.task_type
  )
  select f.task_type, f.pending, f.ready, f.running, f.active, f.completed, f.workers, _window,
         f.rate,
         case when f.pending = 0 then 0
              when f.rate is null or f.active = 0 then null
              else f.pending / (f.rate * f.active) end,
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
-- and the API's /metrics. Both read completions through task_completed_completed_at_idx
-- (cost follows the window, not history) and probe task and task_lease by primary key.

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
  select _start + make_interval(secs => _bucket * floor(extract(epoch from c.completed_at - _start) / _bucket)),
         t.task_type, c.outcome, count(*)
    from queues.task_completed c
   cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
   where c.completed_at > _start and c.completed_at <= _now
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
    select t.task_type, c.outcome, extract(epoch from c.completed_at - l.leased_at)::double precision as seconds
      from queues.task_completed c
     cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
      left join lateral (select y.leased_at from queues.task_lease y
                          where y.task_id = c.task_id and y.task_lease_id = c.task_lease_id limit 1) l on true
     where c.completed_at > _now - make_interval(secs => _window) and c.completed_at <= _now
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
--! Included admin/history.sql
-- History and retention, for operators: the partition sets of the queue's history with
-- their sizes, the oldest retained task, and the next set retention will drop
-- (queues.history_status_at, sql/queues/partitions.sql). Cost: catalog reads and index
-- probes per partition set, never a scan of history.
create or replace function admin.history_status()
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.history_status_at(now())
$$;

-- Granted here, beside the function (see sql/queues/partitions.sql for why).
grant execute on function admin.history_status() to :DATABASE_API;
--! EndIncluded admin/history.sql
--! Included admin/processes.sql
-- The process view: the fact timeline of one business process's root, for the
-- send_email / send_sms (comms), file_deletion (files), account_deletion and
-- account_anonymization (accounts) processes.
--
-- Generic over the domains' naming convention (sql/CONVENTIONS.md, "facts are named for
-- the event"): a process X in schema S has a root S.X_task (key X_task_id) and, when they
-- exist, the facts S.X_supervisor_run, S.X_attempt (key X_attempt_id),
-- S.X_attempt_succeeded, S.X_attempt_failed, S.X_task_succeeded and S.X_task_failed.
-- Table names are read from the catalog and quoted with format('%I.%I'); ids go through
-- `using`. Every read is by the root's key (each fact table is indexed on it).

-- The processes the view knows, with their schemas.
create or replace function admin.processes()
  returns table (process text, schema_name text)
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  values ('send_email', 'comms'), ('send_sms', 'comms'), ('file_deletion', 'files'),
         ('account_deletion', 'accounts'), ('account_anonymization', 'accounts')
$$;

-- The schema-qualified, quoted name of a process's table S.X<suffix>, read from the
-- catalog; null when there is no such table.
create or replace function admin.process_table(_process text, _suffix text)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select format('%I.%I', n.nspname, c.relname)
    from admin.processes() p
    join pg_namespace n on n.nspname = p.schema_name
    join pg_class c on c.relnamespace = n.oid and c.relname = p.process || _suffix and c.relkind = 'r'
   where p.process = _process
$$;

-- Validates a process name and root id: 22004 for nulls, 22023 for an unknown process,
-- 23503 for an unknown root.
create or replace function admin.assert_process_root(_process text, _root_id bigint)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _found boolean;
begin
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _root_id is null then
    raise exception 'root_id must not be null' using errcode = '22004';
  end if;
  execute format('select exists (select 1 from %s r where r.%I = $1)',
                 admin.process_table(_process, '_task'), _process || '_task_id')
    into _found using _root_id;
  if not _found then
    raise exception '% % does not exist', _process, _root_id using errcode = '23503';
  end if;
end;
$$;

-- Every fact of one root, oldest first: started, supervisor_run, attempt,
-- attempt_succeeded, attempt_failed, succeeded, failed; for a root that domain retention
-- pruned (internal.process_pruned), one 'pruned' row instead. `detail` is the fact row as JSON
-- without its keys and timestamp. An account deletion also shows its children: the
-- account's anonymization and the deletions of the account's files (their `process` and
-- `root_id` say which).
create or replace function admin.process_timeline(_process text, _root_id bigint)
  returns table (at timestamptz, process text, root_id bigint, fact text, attempt_id bigint, detail jsonb)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text := _process || '_task_id';
  _attempt_key text := _process || '_attempt_id';
  _attempt text;
  _parts text[] := '{}';
  _table text;
  _child record;
  _pruned internal.process_pruned;
begin
  begin
    perform admin.assert_process_root(_process, _root_id);
  exception when foreign_key_violation then
    -- A root that domain retention removed: one 'pruned' row says when and why.
    _pruned := internal.process_root_pruned(_process, _root_id);
    if _pruned.process_pruned_id is null then
      raise;
    end if;
    return query select _pruned.pruned_at, _process, _root_id, 'pruned'::text, null::bigint,
                        jsonb_build_object('finished_before', _pruned.finished_before,
                                           'pruned_at', _pruned.pruned_at);
    return;
  end;
  _attempt := admin.process_table(_process, '_attempt');

  _parts := _parts || format(
    'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint, to_jsonb(f) - %L - ''created_at''
       from %s f where f.%I = $1',
    _process, _root_id, 'started', _key, admin.process_table(_process, '_task'), _key);
  foreach _table in array array['_supervisor_run', '_task_succeeded', '_task_failed'] loop
    if admin.process_table(_process, _table) is not null then
      _parts := _parts || format(
        'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint,
                to_jsonb(f) - %L - %L - ''created_at''
           from %s f where f.%I = $1',
        _process, _root_id,
        case _table when '_supervisor_run' then 'supervisor_run'
                    when '_task_succeeded' then 'succeeded' else 'failed' end,
        _key, _process || _table || '_id', admin.process_table(_process, _table), _key);
    end if;
  end loop;
  if _attempt is not null then
    _parts := _parts || format(
      'select f.created_at, %L::text, %s::bigint, ''attempt''::text, f.%I, to_jsonb(f) - %L - %L - ''created_at''
         from %s f where f.%I = $1',
      _process, _root_id, _attempt_key, _key, _attempt_key, _attempt, _key);
    foreach _table in array array['_attempt_succeeded', '_attempt_failed'] loop
      if admin.process_table(_process, _table) is not null then
        _parts := _parts || format(
          'select f.created_at, %L::text, %s::bigint, %L::text, f.%I, to_jsonb(f) - %L - ''created_at''
             from %s f join %s a on a.%I = f.%I where a.%I = $1',
          _process, _root_id, substr(_table, 2), _attempt_key, _attempt_key,
          admin.process_table(_process, _table), _attempt, _attempt_key, _attempt_key, _key);
      end if;
    end loop;
  end if;

  return query execute
    'select * from (' || array_to_string(_parts, ' union all ') || ') t order by 1, 4'
    using _root_id;

  -- An account deletion's children, by account.
  if _process = 'account_deletion' then
    for _child in
      select 'account_anonymization' as process, x.account_anonymization_task_id as root_id
        from accounts.account_deletion_task d
        join accounts.account_anonymization_task x on x.account_id = d.account_id
       where d.account_deletion_task_id = _root_id
      union all
      select 'file_deletion', fd.file_deletion_task_id
        from accounts.account_deletion_task d
        join files.file f on f.account_id = d.account_id
        join files.file_deletion_task fd on fd.file_id = f.file_id
       where d.account_deletion_task_id = _root_id
    loop
      return query select * from admin.process_timeline(_child.process, _child.root_id);
    end loop;
  end if;
end;
$$;

-- Roots of one process newest first, _limit per page (default 50, at most 500), older
-- than _before_root_id, with their status (succeeded, failed or running) and the root
-- row's other columns as `subject`.
create or replace function admin.list_process_roots(
  _process        text,
  _limit          integer default null,
  _before_root_id bigint default null
) returns table (root_id bigint, created_at timestamptz, status text, subject jsonb)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _key text := _process || '_task_id';
begin
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _before_root_id is not null and _before_root_id < 1 then
    raise exception 'before_root_id must be a positive id, got %', _before_root_id using errcode = '22023';
  end if;
  return query execute format(
    'select r.%1$I, r.created_at,
            case when exists (select 1 from %3$s s where s.%1$I = r.%1$I) then ''succeeded''
                 when exists (select 1 from %4$s x where x.%1$I = r.%1$I) then ''failed''
                 else ''running'' end,
            to_jsonb(r) - %1$L - ''created_at''
       from %2$s r
      where $1 is null or r.%1$I < $1
      order by r.%1$I desc
      limit $2',
    _key, admin.process_table(_process, '_task'),
    admin.process_table(_process, '_task_succeeded'), admin.process_table(_process, '_task_failed'))
  using _before_root_id, _page;
end;
$$;

-- The process names the view knows (for the API's list).
create or replace function admin.list_processes()
  returns table (process text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.process from admin.processes() p order by 1
$$;
--! EndIncluded admin/processes.sql
-- Grants again what the conversion dropped and recreated (dequeue_next_available_task).
--! Included queues/privileges.sql
-- Who may call what in queues. Roles come from placeholders (see .gmrc):
--   :DATABASE_WORKER  the worker: claim, extend and release leases, complete, fail,
--                     interrupt (a transient error).
--                     No table privileges.
--   :DATABASE_APP     applications: enqueue.
-- Every function starts with EXECUTE revoked from PUBLIC; grants are explicit.

revoke all on all tables in schema queues from public;
revoke all on all sequences in schema queues from public;
revoke execute on all functions in schema queues from public;

grant usage on schema queues to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  queues.claim_tasks(text, integer, text[], integer, integer),
  queues.extend_leases(bigint[], bigint[], integer),
  queues.release_leases(bigint[], bigint[]),
  queues.dequeue_next_available_task(text, integer),
  queues.complete_task(bigint, bigint, text),
  queues.complete_tasks(bigint[], bigint[], text[], boolean[]),
  queues.fail_task(bigint, text, bigint),
  queues.interrupt_task(bigint, bigint, text, integer),
  queues.record_worker_heartbeat(text, text[], integer),
  queues.record_worker_stopped(text)
to :DATABASE_WORKER;

grant execute on function
  queues.enqueue(text, jsonb, timestamptz, integer, text, integer),
  queues.enqueue_many(jsonb)
to :DATABASE_APP;
--! EndIncluded queues/privileges.sql

-- Partition maintenance every 10 minutes, run by our own schedules supervisor as a
-- db_function task (sql/schedules): installed enabled, once (an operator's later
-- changes, such as disabling it, are kept when this file runs again). Like every
-- schedule it runs once a supervisor task is pending: deploys call
-- schedules.ensure_schedule_supervisor() after migrating (`npm start` does), and any
-- schedule change starts it. Nothing is enqueued here, so a fresh database holds no task.
do $$
declare
  _message text := schedules.schedule_definition_error(
    'queue_history_maintenance', '*/10 * * * *', 'db_function',
    '{"db_function": "queues.maintain_history"}', 100, 'skip');
  _schedule_id bigint;
begin
  if _message is not null then
    raise exception 'schedule queue_history_maintenance: %', _message;
  end if;
  if exists (select 1 from schedules.schedule s where s.name = 'queue_history_maintenance') then
    return;
  end if;
  insert into schedules.schedule (name) values ('queue_history_maintenance') returning schedule_id into _schedule_id;
  perform schedules.append_schedule_version(
    now(), _schedule_id, '*/10 * * * *', 'db_function', '{"db_function": "queues.maintain_history"}', 100, 'skip', true);
end;
$$;
