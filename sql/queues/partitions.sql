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
--
-- Locks. The claim and the completion read queues.task, task_lease_started and
-- task_completed through generic plans, which lock every partition of those tables,
-- default included, and every writer takes ROW EXCLUSIVE on the parents. So each step
-- locks one table (its parent, the partition, the default) in the order the hot path
-- takes its own (parent, then partition, then default), without waiting in a lock queue
-- (queues.lock_history_tables: asked for without waiting, again every few ms, for up to
-- lock_timeout_ms, then one last try that waits at most 50 ms), and holds the locks only
-- for a catalog change, in a transaction of its own when run by the schedule
-- (queues.maintain_history_step with "repeat"): a claim waits behind maintenance at most
-- 50 ms plus that change. Measured locks (PostgreSQL 18):
--   create table .. partition of     ACCESS EXCLUSIVE on the parent and its default: not used
--   create table (like ..) + attach  SHARE UPDATE EXCLUSIVE on the parent (no conflict with
--                                    DML), ACCESS EXCLUSIVE on the default partition (a
--                                    conflict only for task, task_lease_started and
--                                    task_completed, whose defaults the hot path's plans lock)
--                                    and, for a set made late (its range within reach of the
--                                    ids handed out), SHARE on the parent first: writers of
--                                    that table wait for the attach (a writer that routed its
--                                    row before the attach commits would fail on the
--                                    default's new constraint; see attach_history_partition)
--   detach partition                 ACCESS EXCLUSIVE on the parent, default and partition;
--                                    catalog only (no scan); detach concurrently is refused
--                                    while a default partition exists, and in a function
--   drop table (attached partition)  the same plus unlinking its files under those locks:
--                                    not used; a detached table is dropped instead, which
--                                    locks only itself, except a table with a foreign key
--                                    (none today), whose drop takes ACCESS EXCLUSIVE on
--                                    the table it references: it is truncated first (under
--                                    its own lock only), so that drop is a catalog change

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now',
               'task_trace']
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

-- Cancels the autovacuum workers that hold a lock on one of _tables (names in schema
-- queues) in this database, as PostgreSQL itself does for a lock request that has waited
-- deadlock_timeout (1 s): a maintenance step never waits that long (claims would queue
-- behind it), so without this a long autovacuum of a default partition or of a set kept
-- every step that must lock that table skipping until it ended. Autovacuum comes back
-- later. An autovacuum that prevents wraparound (the table's age past
-- autovacuum_freeze_max_age or autovacuum_multixact_freeze_max_age) is left alone, as
-- PostgreSQL leaves it. Needs membership in pg_signal_autovacuum_worker (PostgreSQL 18;
-- the owner gets it when the database users are provisioned, docs/operations.md);
-- without it, nothing is cancelled. Returns how many were cancelled. Owner only.
create or replace function queues.cancel_autovacuum(_tables text[])
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pid integer;
  _cancelled integer := 0;
begin
  for _pid in
    select distinct l.pid
      from pg_locks l
      join pg_stat_activity a on a.pid = l.pid
      join pg_class c on c.oid = l.relation
     where l.locktype = 'relation' and l.granted
       and l.database = (select d.oid from pg_database d where d.datname = current_database())
       -- An autovacuum worker runs as no role: its usesysid is null, and a role without
       -- pg_read_all_stats sees its backend_type as null too (it is shown to those with it).
       and a.usesysid is null and coalesce(a.backend_type, 'autovacuum worker') = 'autovacuum worker'
       and c.relnamespace = 'queues'::regnamespace and c.relname = any (_tables)
       and age(c.relfrozenxid) < current_setting('autovacuum_freeze_max_age')::bigint
       and mxid_age(c.relminmxid) < current_setting('autovacuum_multixact_freeze_max_age')::bigint
  loop
    begin
      if pg_cancel_backend(_pid) then
        _cancelled := _cancelled + 1;
      end if;
    exception
      when insufficient_privilege then
        return _cancelled;
    end;
  end loop;
  return _cancelled;
end;
$$;

-- Takes the locks of one maintenance step, _modes[i] on queues._tables[i] (only the table
-- named: a partitioned parent's partitions are not locked with it), in order, without
-- waiting in a lock queue until its last try: each try asks for every lock with NOWAIT,
-- and a try that meets a holder gives back what it took and tries again 1 to 4 ms later,
-- until the locks are had or _within_ms has passed; then one last try waits in the queue
-- for at most 50 ms, and failing that, lock_not_available (55P03, naming the tables and
-- the tries). Why not wait: a lock request that waits holds every later request behind
-- it, so a claim would queue behind maintenance for as long as the longest transaction in
-- flight keeps maintenance waiting (a batch of server-side steps holds task's partitions
-- for tens of milliseconds; under a steady load one is always in flight, so a waiting
-- request rarely got its lock within a short lock_timeout). Asking without waiting takes
-- the moments between transactions and leaves the queue's own order alone (but see the
-- two 50 ms below). Modes: 'share update exclusive', 'share', 'access exclusive'. Returns
-- the tries it took. Owner only.
create or replace function queues.lock_history_tables(_tables text[], _modes text[], _within_ms integer)
  returns integer
  language plpgsql volatile
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _deadline timestamptz;
  _tries integer := 0;
  _last boolean;
  _last_until timestamptz;
  _autovacuum_cancelled boolean := false;
begin
  if _tables is null or _modes is null or cardinality(_tables) = 0 or cardinality(_tables) <> cardinality(_modes) then
    raise exception 'tables and modes must be non-empty arrays of the same length' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m is null or m not in ('share update exclusive', 'share', 'access exclusive')) then
    raise exception 'a lock mode must be share update exclusive, share or access exclusive, got %', _modes
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_tables) t where t is null or to_regclass(format('queues.%I', t)) is null) then
    raise exception 'every table must name a table in schema queues, got %', _tables using errcode = '22023';
  end if;
  if _within_ms is null or _within_ms < 0 then
    raise exception 'within_ms must be 0 or more, got %', _within_ms using errcode = '22023';
  end if;
  -- A transaction that already holds a lock of this kind (steps run together, as in
  -- queues.maintain_history_at, or a partition made earlier in it) keeps the queue
  -- waiting while it tries, and a holder in its way may be waiting for it: it tries for
  -- at most 50 ms then.
  if exists (select 1 from pg_locks l
              where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.granted
                and l.mode in ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                               'ExclusiveLock', 'AccessExclusiveLock')) then
    _within_ms := least(_within_ms, 50);
  end if;
  _deadline := clock_timestamp() + make_interval(secs => _within_ms / 1000.0);
  loop
    _tries := _tries + 1;
    -- The last try, once the window has passed, waits in the queue for at most 50 ms
    -- (restored on return): transactions that follow one another without a moment
    -- between (one connection's statements back to back) are waited for, and whatever
    -- queues behind this try waits no longer.
    -- The 50 ms are for the whole try, however many tables it locks (each lock waits
    -- only for what is left of them).
    _last := clock_timestamp() >= _deadline;
    _last_until := clock_timestamp() + make_interval(secs => greatest(least(_within_ms, 50), 1) / 1000.0);
    begin
      for _i in 1 .. cardinality(_tables) loop
        if _last then
          perform set_config('lock_timeout',
            greatest(ceil(extract(epoch from _last_until - clock_timestamp()) * 1000), 1)::integer || 'ms', true);
        end if;
        -- The mode is one of the three above (checked), the table quoted as an identifier.
        execute format('lock table only queues.%I in %s mode%s', _tables[_i], _modes[_i],
                       case when _last then '' else ' nowait' end);
      end loop;
      return _tries;
    exception
      when lock_not_available then
        -- The block's locks are given back with it. An autovacuum in the way is cancelled
        -- (once per call); the next try, a few ms later, finds the table free.
        if not _autovacuum_cancelled then
          _autovacuum_cancelled := true;
          perform queues.cancel_autovacuum(_tables);
        end if;
    end;
    exit when _last;
    perform pg_sleep((1 + random() * 3) / 1000.0);
  end loop;
  raise exception 'could not lock % in % tries over % ms: other transactions held them throughout',
    array_to_string(_tables, ', '), _tries, _within_ms
    using errcode = '55P03';
end;
$$;

-- Creates queues._name, a standalone table like the history table _table (columns,
-- defaults, constraints, indexes) with the trigger that refuses updates (a statement
-- trigger on the parent does not fire for a statement that names the partition), to be
-- attached as its partition. Owner only.
create or replace function queues.create_history_table(_table text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('create table queues.%I (like queues.%I including defaults including constraints including indexes including storage)',
                 _name, _table);
  execute format('create trigger forbid_update before update on queues.%I
                    for each statement execute function queues.forbid_fact_update()', _name);
end;
$$;

-- Makes the partition [_lower, _upper) of the history table _table unless it exists: a
-- standalone table like its parent (columns, defaults, constraints, indexes) with the
-- trigger that refuses updates (a statement trigger on the parent does not fire for a
-- statement that names the partition), then attached to the parent. Attaching takes
-- SHARE UPDATE EXCLUSIVE on the parent where `create table .. partition of` takes ACCESS
-- EXCLUSIVE, and the new table is empty, so nothing is scanned. Returns whether it made
-- the partition. Owner only.
create or replace function queues.attach_history_partition(_table text, _lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
begin
  if _table is null or _table <> all (queues.history_tables()) then
    raise exception 'table must name a history table (queues.history_tables()), got %',
      coalesce(quote_literal(left(_table, 100)), 'null') using errcode = '22023';
  end if;
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  _name := queues.history_partition_name(_table, _lower);
  if to_regclass(format('queues.%I', _name)) is not null then
    return false;
  end if;
  -- A range within reach of the task ids handed out (within one set's width, or the
  -- 10,000 tasks a statement may enqueue, above the last one) may receive rows while it
  -- is attached: a writer that routed its row before the attach committed would send it
  -- to the default partition, wait there for the attach's lock, and then fail the
  -- default's new constraint ("new row for relation .._default violates partition
  -- constraint"). For such a range (a set made late), SHARE on the parent: taken when no
  -- writer is in flight, it holds new ones at the parent until commit; they then route
  -- with the new partition. A set made ahead of need, as maintenance makes them, is out
  -- of reach and needs no lock that writers wait for (under a steady load of writers, a
  -- moment without one is rare).
  -- Its locks first (queues.lock_history_tables: taken between transactions, never
  -- queued for): the parent, SHARE UPDATE EXCLUSIVE (what attaching takes; SHARE for a
  -- set made late), then the default partition, ACCESS EXCLUSIVE (attaching checks it
  -- holds no row of the range).
  perform queues.lock_history_tables(
    array[_table, _table || '_default'],
    array[case when _lower <= queues.last_task_id() + greatest(_upper - _lower, 10000) then 'share'
               else 'share update exclusive' end,
          'access exclusive'],
    (select s.lock_timeout_ms from queues.history_setting s));
  perform queues.create_history_table(_table, _name);
  execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                 _table, _name, _lower, _upper);
  return true;
end;
$$;

-- Creates the partition set [_lower, _upper) of every history table (those that exist
-- already are kept), task's last: a set is in use once task has its partition. One
-- transaction; maintenance makes a set one table per step instead. Records when in
-- queues.history_partition_created. Returns whether anything was created. Owner only.
create or replace function queues.create_history_partition(_lower bigint, _upper bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _created boolean := false;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _created := queues.attach_history_partition(_table, _lower, _upper) or _created;
  end loop;
  if _created then
    insert into queues.history_partition_created (lower_bound, upper_bound)
    values (_lower, _upper) on conflict (lower_bound) do nothing;
  end if;
  return _created;
end;
$$;

-- Makes [_lower, _upper) a set from rows that fell into the default partitions (tasks
-- given ids while no set covered them, and their facts): for each history table without
-- a partition of that range, a standalone table like its parent, the range's rows moved
-- into it from the table's default partition (deleted there and inserted here, in this
-- transaction), then attached. Nothing is lost or seen twice: readers of the parent see
-- each row in the default until this commits and in the new partition after. The caller
-- holds every history table's parent (SHARE) and default (ACCESS EXCLUSIVE), so no row of
-- the range is written meanwhile. Records the set in queues.history_partition_created.
-- Returns the tasks moved. Owner only.
create or replace function queues.adopt_history_range(_lower bigint, _upper bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _table text;
  _name text;
  _columns text;
  _moved bigint;
  _tasks bigint := 0;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'range bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _name := queues.history_partition_name(_table, _lower);
    continue when to_regclass(format('queues.%I', _name)) is not null;
    perform queues.create_history_table(_table, _name);
    -- The parent's columns by name (each quoted as an identifier), in its order.
    select string_agg(format('%I', a.attname), ', ' order by a.attnum) into _columns
      from pg_attribute a
     where a.attrelid = format('queues.%I', _table)::regclass and a.attnum > 0 and not a.attisdropped;
    execute format('with moved as (delete from queues.%I where task_id >= $1 and task_id < $2 returning %s)
                    insert into queues.%I (%s) select %s from moved',
                   _table || '_default', _columns, _name, _columns, _columns)
      using _lower, _upper;
    get diagnostics _moved = row_count;
    if _table = 'task' then
      _tasks := _moved;
    end if;
    execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                   _table, _name, _lower, _upper);
  end loop;
  insert into queues.history_partition_created (lower_bound, upper_bound)
  values (_lower, _upper) on conflict (lower_bound) do nothing;
  return _tasks;
end;
$$;

-- Every partition of every history table but the defaults, with its bounds. Owner only.
create or replace function queues.history_partition_bounds()
  returns table (table_name text, partition_name text, lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.name, c.relname::text, m.b[1]::bigint, m.b[2]::bigint
    from unnest(queues.history_tables()) t(name)
    join pg_inherits i on i.inhparent = to_regclass(format('queues.%I', t.name))
    join pg_class c on c.oid = i.inhrelid
   cross join lateral regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?\d+)''?\) TO \(''?(-?\d+)''?\)') as m(b)
   where m.b is not null
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

-- The bytes of the sets whose lower bounds are given (a null element: the default
-- partitions), summed over every history table: the data of tables with their TOAST, and
-- of their indexes (each relation's main fork: its free space and visibility maps, a
-- fraction of a percent, are left out, which halves the files looked at). Each partition
-- is looked up by name (queues.history_partition_name) through the catalog's name index;
-- sizing opens each partition and its indexes (a lock and a file size each, about 50
-- relations a set), so this is the one place that costs per partition: callers pass
-- every set they need in one call (one plan).
create or replace function queues.history_set_bytes(_lower_bounds bigint[])
  returns table (lower_bound bigint, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select l.lower_bound,
         coalesce(sum(pg_relation_size(c.oid) + coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0)), 0)::bigint,
         coalesce(sum((select sum(pg_relation_size(i.indexrelid)) from pg_index i where i.indrelid = c.oid)), 0)::bigint
    from unnest(_lower_bounds) l(lower_bound)
   cross join unnest(queues.history_tables()) t(name)
    left join pg_class c on c.relnamespace = 'queues'::regnamespace
                        and c.relname = case when l.lower_bound is null then t.name || '_default'
                                             else queues.history_partition_name(t.name, l.lower_bound) end
   group by l.lower_bound
$$;

-- queues.history_sets() with each set's bytes (queues.history_set_bytes), every set sized
-- on each call: the History page reads queues.history_set_measured for the sets that are
-- done instead (admin.history_status_at).
create or replace function queues.history_partition_sizes()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (select * from queues.history_sets())
  select s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default,
         b.table_bytes, b.index_bytes
    from s
    join queues.history_set_bytes(array(select s.lower_bound from s)) b
      on b.lower_bound is not distinct from s.lower_bound
   order by s.is_default, s.lower_bound
$$;

-- Measures the sets that are done into queues.history_set_measured: every set whose range
-- lies below the last task id and that holds no pending task, with its bytes
-- (queues.history_set_bytes) and its oldest and newest task. Such a set's tables change
-- only by a rare late fact (a redrive, a revocation or start mark that arrives after the
-- completion) until it is dropped, so a reader that answers often (the History page, every
-- dashboard's poll and /metrics) takes its figures from here and sizes only the sets still
-- filling. A row is written only when a figure changed; rows of sets no longer there are
-- deleted. Maintenance calls it at the end of each run (queues.maintain_history_step_at).
-- Returns the number of sets whose figures were written. Owner only.
create or replace function queues.measure_history_sets(_now timestamptz)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _last_id bigint := queues.last_task_id();
  _written integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  delete from queues.history_set_measured m
   where not exists (select 1 from queues.history_sets() s
                      where s.lower_bound = m.lower_bound and s.upper_bound = m.upper_bound);
  with done as (
    select s.lower_bound, s.upper_bound
      from queues.history_sets() s
     where not s.is_default and s.upper_bound <= _last_id
       and not exists (select 1 from queues.task_pending tp
                        where tp.task_id >= s.lower_bound and tp.task_id < s.upper_bound)
  ),
  measured as (
    select d.lower_bound, d.upper_bound, f.task_id as first_task_id, f.enqueued_at as first_enqueued_at,
           n.task_id as last_task_id, b.table_bytes, b.index_bytes
      from done d
      join queues.history_set_bytes(array(select d.lower_bound from done d)) b on b.lower_bound = d.lower_bound
      left join lateral (select t.task_id, t.enqueued_at from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id limit 1) f on true
      left join lateral (select t.task_id from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id desc limit 1) n on true
  )
  insert into queues.history_set_measured as m
         (lower_bound, upper_bound, first_task_id, first_enqueued_at, last_task_id, table_bytes, index_bytes,
          measured_at)
  select x.lower_bound, x.upper_bound, x.first_task_id, x.first_enqueued_at, x.last_task_id, x.table_bytes,
         x.index_bytes, _now
    from measured x
  on conflict (lower_bound) do update
     set upper_bound = excluded.upper_bound, first_task_id = excluded.first_task_id,
         first_enqueued_at = excluded.first_enqueued_at, last_task_id = excluded.last_task_id,
         table_bytes = excluded.table_bytes, index_bytes = excluded.index_bytes, measured_at = excluded.measured_at
   where (m.upper_bound, m.first_task_id, m.first_enqueued_at, m.last_task_id, m.table_bytes, m.index_bytes)
         is distinct from (excluded.upper_bound, excluded.first_task_id, excluded.first_enqueued_at,
                           excluded.last_task_id, excluded.table_bytes, excluded.index_bytes);
  get diagnostics _written = row_count;
  return _written;
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

-- One step of partition maintenance at _now: the first of these that has work to do,
-- locking one table only (see "Locks" above), its locks taken between the queue's
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
--    every task checked against its completion), and its newest completion is older than
--    the retention window. A set with one pending task is kept, however old.
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
           or exists (select 1 from queues.task_completed c
                       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                         and c.completed_at > _now - _setting.retention) then
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

-- The worker runs maintenance as the db_function task of its schedule; operators read the
-- status through admin.history_status(). Everything else here is owner only. Granted
-- here, beside the functions, so that a migration including sql/queues/privileges.sql
-- before this file does not name a function that does not exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.maintain_history_step_at(timestamptz),
  queues.history_status_at(timestamptz), queues.history_summary_at(timestamptz), queues.history_partitions(),
  queues.history_partition_bounds(), queues.history_sets(), queues.history_partition_sizes(),
  queues.history_set_bytes(bigint[]), queues.measure_history_sets(timestamptz),
  queues.history_walk(bigint), queues.create_history_partition(bigint, bigint),
  queues.attach_history_partition(text, bigint, bigint), queues.lock_history_tables(text[], text[], integer),
  queues.adopt_history_range(bigint, bigint), queues.create_history_table(text, text),
  queues.cancel_autovacuum(text[])
  from public;
grant execute on function queues.maintain_history(jsonb), queues.maintain_history_step(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
select internal.register_runnable_function('queues.maintain_history_step(jsonb)');
