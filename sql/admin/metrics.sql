-- Throughput and completion statistics over a recent window, for the dashboard's chart
-- and the API's /metrics. Both read completions through the completed_at indexes of
-- task_completed and completion_round (cost follows the window, not history): the
-- throughput counts a completion round in one row (admin.completion_counts_between), the
-- statistics read each completion (admin.completions_between) and probe its lease
-- (queues.task_lease_at: task_lease's primary key, claim_lease's lease id index).

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
  -- A round's tasks share its instant: counted in one row (admin.completion_counts_between).
  select date_bin(make_interval(secs => _bucket), c.completed_at, _start),
         c.task_type, c.outcome, sum(c.completions)::bigint
    from admin.completion_counts_between(_start, _now) c
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
