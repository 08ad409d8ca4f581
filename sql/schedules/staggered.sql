-- Staggered batch generation (the seed's generate_resync_tasks): spread N tasks over a
-- period in K batches, so a daily resync of every store does not arrive all at once.

-- Enqueues one _task_type task per element of _payloads (a JSON array of objects) in
-- _batches batches: batch i (1-based) is scheduled at _start + (i - 1) * _period / _batches.
-- Tasks keep input order and are split as evenly as possible: every batch gets
-- floor(N / K) tasks and the first N mod K batches one more (so with N < K the last
-- batches are empty). Returns one row per batch, empty ones included. All or nothing;
-- bad input raises 22004/22023/54000 naming the argument. NULL _priority means 0.
create or replace function schedules.generate_staggered_tasks(
  _task_type text,
  _payloads  jsonb,
  _start     timestamptz,
  _period    interval,
  _batches   integer,
  _priority  integer default null
) returns table (batch integer, scheduled_at timestamptz, task_count integer)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n integer;
  _bad record;
begin
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100)) using errcode = '22023';
  end if;
  if _payloads is null then
    raise exception 'payloads must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_payloads) <> 'array' then
    raise exception 'payloads must be a JSON array, got %', jsonb_typeof(_payloads) using errcode = '22023';
  end if;
  _n := jsonb_array_length(_payloads);
  if _n > 10000 then
    raise exception 'at most 10000 payloads per call, got %', _n using errcode = '54000';
  end if;
  select e.ordinality - 1 as idx, jsonb_typeof(e.value) as kind into _bad
    from jsonb_array_elements(_payloads) with ordinality e
   where jsonb_typeof(e.value) <> 'object'
   order by e.ordinality limit 1;
  if found then
    raise exception 'payloads[%] must be a JSON object, got %', _bad.idx, _bad.kind using errcode = '22023';
  end if;
  if _start is null then
    raise exception 'start must not be null' using errcode = '22004';
  end if;
  if _period is null then
    raise exception 'period must not be null' using errcode = '22004';
  end if;
  if extract(year from _period) <> 0 or extract(month from _period) <> 0 then
    raise exception 'period must be given in days, hours, minutes or seconds, not months or years (their length varies), got %', _period
      using errcode = '22023';
  end if;
  if _period <= interval '0' or _period > interval '366 days' then
    raise exception 'period must be more than 0 and at most 366 days, got %', _period using errcode = '22023';
  end if;
  if _batches is null then
    raise exception 'batches must not be null' using errcode = '22004';
  end if;
  if _batches not between 1 and 1000 then
    raise exception 'batches must be between 1 and 1000, got %', _batches using errcode = '22023';
  end if;
  if _priority is not null and _priority not between -1000 and 1000 then
    raise exception 'priority must be between -1000 and 1000, got %', _priority using errcode = '22023';
  end if;

  -- Element j (0-based) goes to batch b(j): the first r = N mod K batches hold q + 1 =
  -- ceil(N / K) elements, the rest q = floor(N / K).
  perform queues.enqueue_many(coalesce((
    select jsonb_agg(jsonb_build_object(
             'task_type', _task_type, 'payload', a.value, 'priority', coalesce(_priority, 0),
             'scheduled_at', _start + (a.b - 1) * (_period / _batches))
           order by a.j)
      from (
        select e.ordinality - 1 as j, e.value,
               case when e.ordinality - 1 < (_n % _batches) * (_n / _batches + 1)
                    then (e.ordinality - 1) / (_n / _batches + 1) + 1
                    else (_n % _batches) + (e.ordinality - 1 - (_n % _batches) * (_n / _batches + 1))
                                           / nullif(_n / _batches, 0) + 1
               end::integer as b
          from jsonb_array_elements(_payloads) with ordinality e
      ) a), '[]'::jsonb));

  return query
  select i, _start + (i - 1) * (_period / _batches),
         (_n / _batches + case when i <= _n % _batches then 1 else 0 end)::integer
    from generate_series(1, _batches) i
   order by i;
end;
$$;
