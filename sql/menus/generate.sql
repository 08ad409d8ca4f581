-- Generating work: the seed's daily generate_resync_tasks and store discovery on demand.
--
--   menus.generate_resync_tasks(batches, date)     app, api: every active store (product
--                                                  discovery done) gets one product_resync
--                                                  task, spread over the UTC day in
--                                                  `batches` batches (6: every 4 hours)
--   menus.generate_store_discovery(scheduled_at)   app, api: one store_discovery task
--   menus.generate_todays_resync(payload)          worker (db_function, daily schedule):
--                                                  generate_resync_tasks(6, today in UTC)

-- Batch b (1-based) is scheduled at _date 00:00 UTC + (b - 1) * 24 h / _batches; stores in
-- store_id order, store j (0-based, of N) in batch floor(j * K / N) + 1, so batch sizes
-- differ by at most one (8 stores in 6 batches: 2, 1, 1, 2, 1, 1).
-- 300 stores in 6 batches: stores 1-50 at 00:00, 51-100 at 04:00, ... 251-300 at 20:00.
-- A date is generated at most once (23505 for a second call: nothing is written); a
-- call that finds no active store writes nothing and does not use up the date.
-- Returns one row per batch, empty ones included.
create or replace function menus.generate_resync_tasks(_batches integer, _date date)
  returns table (batch integer, scheduled_at timestamptz, task_count integer)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _start timestamptz;
  _n integer;
begin
  if _batches is null then
    raise exception 'batches must not be null' using errcode = '22004';
  end if;
  if _batches not between 1 and 24 then
    raise exception 'batches must be between 1 and 24, got %', _batches using errcode = '22023';
  end if;
  if _date is null then
    raise exception 'date must not be null' using errcode = '22004';
  end if;
  if _date not between date '2000-01-01' and date '2999-12-31' then
    raise exception 'date must be between 2000-01-01 and 2999-12-31, got %', _date using errcode = '22023';
  end if;
  _start := _date::timestamp at time zone 'UTC';

  select count(*) into _n
    from menus.store_products_discovered d join menus.store_platform_id e on e.store_id = d.store_id;
  if exists (select 1 from menus.resync_generated g where g.resync_date = _date) then
    raise exception 'resync tasks for % were generated already', _date using errcode = '23505',
      hint = 'One generation per date; the next date starts at 00:00 UTC.';
  end if;
  if _n > 0 then
    begin
      insert into menus.resync_generated (resync_date, batches, stores) values (_date, _batches, _n);
    exception when unique_violation then
      raise exception 'resync tasks for % were generated already', _date using errcode = '23505';
    end;
  end if;

  -- Store j (0-based, of N) goes to batch floor(j * K / N) + 1: batch sizes differ by at
  -- most one.
  perform queues.enqueue_many(coalesce((
    select jsonb_agg(jsonb_build_object(
             'task_type', 'product_resync',
             'payload', jsonb_build_object('store_id', a.store_id, 'platform_dispensary_id', a.platform_dispensary_id),
             'scheduled_at', _start + (a.b - 1) * (interval '24 hours' / _batches),
             'resource_key', menus.store_resource_key(a.store_id),
             'max_attempts', menus.platform_max_attempts()) order by a.j)
      from (select s.store_id, e.platform_dispensary_id, s.j, (s.j * _batches / _n) + 1 as b
              from (select d.store_id, (row_number() over (order by d.store_id) - 1)::integer as j
                      from menus.store_products_discovered d) s
              join menus.store_platform_id e on e.store_id = s.store_id) a), '[]'));

  return query
  select i, _start + (i - 1) * (interval '24 hours' / _batches),
         (select count(*)::integer from generate_series(0, _n - 1) j where (j * _batches / _n) + 1 = i)
    from generate_series(1, _batches) i
   order by i;
end;
$$;

-- Enqueues one store_discovery task at _scheduled_at (null: now; at most a year ahead);
-- returns its task_id.
create or replace function menus.generate_store_discovery(_scheduled_at timestamptz)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _scheduled_at is not null and _scheduled_at > now() + interval '366 days' then
    raise exception 'scheduled_at must be at most a year ahead, got %', _scheduled_at using errcode = '22023';
  end if;
  return queues.enqueue('store_discovery', '{}'::jsonb, _scheduled_at, 20, null, menus.platform_max_attempts());
end;
$$;

-- The daily schedule's step: today's resync (UTC), 6 batches. A second run on the same
-- day returns status 'already_generated' and enqueues nothing.
create or replace function menus.generate_todays_resync(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _today date := (now() at time zone 'UTC')::date;
  _batches jsonb;
begin
  if exists (select 1 from menus.resync_generated g where g.resync_date = _today) then
    return jsonb_build_object('status', 'already_generated', 'payload', jsonb_build_object('date', _today));
  end if;
  select jsonb_agg(to_jsonb(b) order by b.batch) into _batches from menus.generate_resync_tasks(6, _today) b;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object('date', _today, 'batches', _batches));
end;
$$;
