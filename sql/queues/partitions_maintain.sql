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
--    (no new task can land in it), it holds no unfinished task (queues.task_pending and
--    the ready batches, queues.task_ready_batch, then
--    every task checked against its end: a task_completed row or a completion round; a
--    task its claim lease holds has neither a row nor an end, and keeps the set), its
--    newest end is older than the retention window, no unfinished task of a newer set
--    depends on one of its tasks, and no completion round or claim lease in it names a
--    task of an older set still kept (a round lives in the set of the largest task id it
--    names). A set with one unfinished task is kept, however old. Under the detach's lock
--    what may have changed since is checked again: a claim-index row or ready batch, a
--    recent end, and
--    the tasks claimed since the checks (a task committed after them and claimed at once
--    has no row).
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
  _lease_mark bigint;
  _claimed_since bigint[];
  -- Every partition and its bounds (queues.history_partition_bounds, a few ms with many
  -- sets), read once per step into these four arrays, one element a partition: the step
  -- changes no partition before it returns, except after taking its locks in the late
  -- path, which reads them again.
  _bound_tables text[];
  _bound_names text[];
  _bound_lowers bigint[];
  _bound_uppers bigint[];
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
    select coalesce(array_agg(b.table_name), '{}'), coalesce(array_agg(b.partition_name), '{}'),
           coalesce(array_agg(b.lower_bound), '{}'), coalesce(array_agg(b.upper_bound), '{}')
      into _bound_tables, _bound_names, _bound_lowers, _bound_uppers
      from queues.history_partition_bounds() b;
    -- 1. Ahead of need: a half made set, unless a task fell into the default partition in
    --    its range (maintenance fell behind while it was half made): then task's
    --    partition cannot be attached, new sets start above it, and step 1b finishes it
    --    by moving those tasks into it.
    with b as (select * from unnest(_bound_tables, _bound_lowers, _bound_uppers) b(table_name, lower_bound, upper_bound))
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
      select greatest(coalesce((select max(b.upper_bound) from unnest(_bound_uppers) b(upper_bound)), 0),
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
      -- Under these locks no partition can be attached or detached.
      select coalesce(array_agg(b.table_name), '{}'), coalesce(array_agg(b.partition_name), '{}'),
             coalesce(array_agg(b.lower_bound), '{}'), coalesce(array_agg(b.upper_bound), '{}')
        into _bound_tables, _bound_names, _bound_lowers, _bound_uppers
        from queues.history_partition_bounds() b;
      if exists (select 1 from unnest(_bound_lowers) b(lower_bound) where b.lower_bound = _lower)
         and not exists (select 1 from queues.task_default t where t.task_id >= _lower and t.task_id < _upper) then
        null; -- a half made set that no task has reached: finished as it is
      else
        select greatest(coalesce((select max(b.upper_bound) from unnest(_bound_uppers) b(upper_bound)), 0),
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
        select b.lower_bound, b.upper_bound from unnest(_bound_lowers, _bound_uppers) b(lower_bound, upper_bound)
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
      from unnest(_bound_tables, _bound_names, _bound_lowers, _bound_uppers)
           b(table_name, partition_name, lower_bound, upper_bound)
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
      -- The last lease id handed out before this set's checks: a claim lease with a
      -- larger id was written after them (one statement reads the claim index and takes
      -- its lease id), so the check under the detach's lock reads only those.
      _lease_mark := pg_sequence_last_value('queues.task_lease_task_lease_id_seq'::regclass);
      -- Cheap checks first, without strong locks: a pending task, or a recent completion.
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
         -- (or a ready batch's task: sql/queues/ready_batch.sql)
         or exists (select 1 from queues.task_ready_batch b
                     cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
                     where b.task_range && int8range(_set.lower_bound, _set.upper_bound)
                       and u.task_id >= _set.lower_bound and u.task_id < _set.upper_bound) then
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
      -- An unfinished task of a newer set that depends on a task of this one (it reads
      -- their results when it runs; sql/queues/flow_retention.sql). After the window's
      -- check: a dependent without a claim-index row is looked up by its end.
      if queues.history_set_has_waiting_dependents(_set.lower_bound, _set.upper_bound) then
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
        -- The tasks claims took since the checks. A task of the set committed after them
        -- (an id handed out before, its transaction open across the checks) and claimed
        -- since is held by its claim lease with no claim-index row (the ready set,
        -- docs/design/hot-path.md): named here, it keeps the set, as does an unfinished
        -- dependent of the set claimed since.
        _claimed_since := array(select u.task_id from queues.claim_lease r
                                 cross join lateral unnest(r.task_ids) u(task_id)
                                 where r.task_lease_id > coalesce(_lease_mark, 0));
        if exists (select 1 from queues.task_pending tp
                    where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_ready_batch b
                       cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
                       where b.task_range && int8range(_set.lower_bound, _set.upper_bound)
                         and u.task_id >= _set.lower_bound and u.task_id < _set.upper_bound)
           or exists (select 1 from unnest(_claimed_since) u(task_id)
                       where u.task_id >= _set.lower_bound and u.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_dependency d
                       where d.depends_on_task_id >= _set.lower_bound and d.depends_on_task_id < _set.upper_bound
                         and d.task_id >= _set.upper_bound
                         and (exists (select 1 from queues.task_pending p where p.task_id = d.task_id)
                              or d.task_id in (select u.task_id from unnest(_claimed_since) u(task_id))))
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
