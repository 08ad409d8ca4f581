-- Making history partition sets (sql/queues/partitions.sql describes them; the locks
-- each step takes: sql/queues/partitions_locks.sql). Owner only.

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

revoke execute on function queues.create_history_table(text, text),
  queues.attach_history_partition(text, bigint, bigint), queues.create_history_partition(bigint, bigint),
  queues.adopt_history_range(bigint, bigint)
  from public;
