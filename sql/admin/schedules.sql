-- Recurring schedules for the dashboard: each schedule in force (schedules.list_schedules)
-- with its last runs and how their tasks ended.

-- Every schedule with cron, its time zone, next and last fire times, enabled, and its last _runs (1 to
-- 20, default 5) runs newest first as JSON: [{fire_at, outcome (enqueued/skipped),
-- task_id, task_state}], task_state being the task's outcome or pending state.
create or replace function admin.list_schedules_at(_now timestamptz, _runs integer)
  returns table (
    name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text,
    enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz, updated_at timestamptz, last_runs jsonb,
    time_zone text
  )
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n integer := coalesce(_runs, 5);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _n not between 1 and 20 then
    raise exception 'runs must be between 1 and 20, got %', _n using errcode = '22023';
  end if;
  return query
  select s.name, s.cron, s.task_type, s.payload, s.priority, s.missed_run_policy, s.enabled,
         s.last_fire_at, s.next_fire_at, s.updated_at,
         coalesce((
           select jsonb_agg(jsonb_build_object(
                    'fire_at', r.fire_at, 'outcome', r.outcome, 'task_id', r.task_id,
                    'task_state', coalesce(c.outcome,
                      (select admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)
                         from queues.task_pending_or_held_of(r.task_id) p limit 1)))
                    order by r.fire_at desc)
             from (select * from schedules.schedule_run x
                    where x.schedule_id = s.schedule_id
                    order by x.fire_at desc limit _n) r
             left join lateral (select e.outcome from queues.task_end_of(r.task_id) e limit 1) c on true), '[]'),
         s.time_zone
    from schedules.list_schedules() s;
end;
$$;

create or replace function admin.list_schedules(_runs integer default null)
  returns table (
    name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text,
    enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz, updated_at timestamptz, last_runs jsonb,
    time_zone text
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_schedules_at(now(), _runs)
$$;
