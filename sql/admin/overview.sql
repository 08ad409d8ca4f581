-- The overview's queue depth over a recent window, derived from the facts: the depth
-- of a type at instant e is the number of its tasks pending now, plus those completed
-- after e, minus those enqueued after e. Cost follows the window's enqueues and
-- completions, never the history.

-- The first task id enqueued after _ts: a binary search over the primary key (about 30
-- probes at any table size). Identity values follow enqueued_at (default now(), the
-- enqueuing transaction's start) to within one transaction's length, so around _ts the
-- bound may be off by the tasks of transactions open across it; good for a chart.
create or replace function admin.first_task_id_after(_ts timestamptz)
  returns bigint
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _lo bigint;
  _hi bigint;
  _mid bigint;
  _at timestamptz;
begin
  select t.task_id into _lo from queues.task t order by t.task_id limit 1;
  select t.task_id + 1 into _hi from queues.task t order by t.task_id desc limit 1;
  if _lo is null then
    return 1;
  end if;
  while _lo < _hi loop
    _mid := _lo + (_hi - _lo) / 2;
    select t.enqueued_at into _at from queues.task t where t.task_id >= _mid order by t.task_id limit 1;
    if _at > _ts then
      _hi := _mid;
    else
      _lo := _mid + 1;
    end if;
  end loop;
  return _lo;
end;
$$;

-- Pending tasks (not completed, whatever their schedule) per type at the end of each
-- _bucket_seconds bucket of the last _window_seconds (defaults 3600 and 60), oldest first.
-- Every registered type appears in every bucket.
create or replace function admin.queue_depth_at(_now timestamptz, _window_seconds integer, _bucket_seconds integer)
  returns table (bucket_end timestamptz, task_type text, depth bigint)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _window integer := coalesce(_window_seconds, 3600);
  _bucket integer := coalesce(_bucket_seconds, 60);
  _from timestamptz;
  _first_id bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 86400 then
    raise exception 'window_seconds must be between 60 and 86400, got %', _window using errcode = '22023';
  end if;
  if _bucket not between 10 and _window or _window / _bucket > 500 then
    raise exception 'bucket_seconds must be between 10 and window_seconds, with at most 500 buckets, got %', _bucket
      using errcode = '22023';
  end if;
  _from := _now - make_interval(secs => _window);
  _first_id := admin.first_task_id_after(_from);
  return query
  -- Materialized: the per-bucket sums below read it once per bucket and type.
  with events as materialized (
    select e.task_type, e.k, sum(e.d) as d
      -- date_part (double precision), not extract (numeric): cheaper per row.
      from (select t.task_type, ceil(date_part('epoch', t.enqueued_at - _from) / _bucket)::integer as k, -1 as d
              from queues.task t
             where t.task_id >= _first_id and t.enqueued_at > _from and t.enqueued_at <= _now
            union all
            -- a round's tasks in one row (admin.completion_counts_between)
            select c.task_type, ceil(date_part('epoch', c.completed_at - _from) / _bucket)::integer, c.completions::integer
              from admin.completion_counts_between(_from, _now) c) e
     group by 1, 2
  ),
  pending as (
    -- the claim index and the lease-held tasks, counted per claim lease (sql/queues/lease_held.sql)
    select p.task_type, sum(p.tasks) as n from queues.task_pending_or_held_counts p group by 1
  )
  select _from + make_interval(secs => i * _bucket), ty.task_type,
         coalesce(pe.n, 0) + coalesce((select sum(ev.d) from events ev where ev.task_type = ty.task_type and ev.k > i), 0)::bigint
    from generate_series(1, ceil(_window::numeric / _bucket)::integer) i
   cross join queues.task_type ty
    left join pending pe on pe.task_type = ty.task_type
   order by 1, 2;
end;
$$;

create or replace function admin.queue_depth(_window_seconds integer default null, _bucket_seconds integer default null)
  returns table (bucket_end timestamptz, task_type text, depth bigint)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.queue_depth_at(now(), _window_seconds, _bucket_seconds)
$$;
