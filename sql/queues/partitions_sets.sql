-- The history partition sets as they stand: bounds, the ranges a newest-first read walks,
-- sizes, and the last task id handed out (sql/queues/partitions.sql describes the sets).

-- Every partition of every history table but the defaults, with its bounds. Owner only.
-- The bounds are read as queues.history_sets reads them: deparsed without opening the
-- partition (relation 0; naming the partition opened each one, 40 ms a call in a new
-- session with 24 sets against 9), their two values the 2nd and 4th fields between quotes.
-- The subquery is kept whole (offset 0), so that each bound is deparsed once, not once for
-- each of the three expressions that read it (5.6 to 3.8 ms with 247 partitions).
create or replace function queues.history_partition_bounds()
  returns table (table_name text, partition_name text, lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select b.name, b.relname::text, split_part(b.bound, '''', 2)::bigint, split_part(b.bound, '''', 4)::bigint
    from (select t.name, c.relname, pg_get_expr(c.relpartbound, 0) as bound
            from unnest(queues.history_tables()) t(name)
            join pg_inherits i on i.inhparent = to_regclass(format('queues.%I', t.name))
            join pg_class c on c.oid = i.inhrelid
          offset 0) b
   where b.bound like 'FOR VALUES FROM (%'
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
       -- nor a lease-held task (no claim-index row, sql/queues/lease_held.sql)
       and not exists (select 1 from queues.lease_held_tasks h
                        where h.task_id >= s.lower_bound and h.task_id < s.upper_bound)
       -- nor a ready batch's (sql/queues/ready_batch.sql)
       and not exists (select 1 from queues.task_ready_batch b
                        cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
                        where b.task_range && int8range(s.lower_bound, s.upper_bound)
                          and u.task_id >= s.lower_bound and u.task_id < s.upper_bound)
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

revoke execute on function queues.history_partition_bounds(), queues.history_sets(), queues.history_walk(bigint),
  queues.history_set_bytes(bigint[]), queues.history_partition_sizes(), queues.measure_history_sets(timestamptz),
  queues.history_partitions(), queues.last_task_id()
  from public;
