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
                  where tp.task_id >= _next.lower_bound and tp.task_id < _next.upper_bound)
                -- and the lease-held tasks (no claim-index row, sql/queues/lease_held.sql)
                + (select count(*) from queues.lease_held_tasks h
                    where h.task_id >= _next.lower_bound and h.task_id < _next.upper_bound)
                -- and the tasks in ready batches (sql/queues/ready_batch.sql)
                + queues.batched_count_between(_next.lower_bound, _next.upper_bound);
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
