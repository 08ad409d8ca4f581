-- The schedule supervisor: a db_function task that enqueues due schedule runs, records
-- them as facts, and re-enqueues itself at the next fire time among all schedules (at
-- most schedules.max_supervisor_sleep() later).
--
--   schedules.schedule_supervisor(payload)            worker: run through internal.run_function
--   schedules.schedule_supervisor_at(_now, payload)   owner only: the same with a chosen clock
--   schedules.ensure_schedule_supervisor()            app/api: idempotent kickoff
--   schedules.ensure_schedule_supervisor_at(_now)     owner only
--
-- Missed-run policies, for the fire times due (after the last handled one, up to now):
--   skip           fire times older than schedules.skip_grace_period() are not run: one
--                  'skipped' fact covers them all; each fire time within the grace window
--                  is enqueued as its own task.
--   catch_up_once  one task covers all of them: it is recorded under the latest due fire
--                  time, with first_fire_at the earliest.
-- Tasks are enqueued with scheduled_at = their fire time and the stored payload as is.
--
-- At most once per fire time: supervisors serialise on a transaction advisory lock, and
-- unique (schedule_id, fire_at) on schedule_run rejects any second enqueue of a fire time.
--
-- What it reads (the facts of schedules and of its own tasks) is in
-- sql/schedules/supervisor_facts.sql.

-- Fire times at most this old still run under the 'skip' policy.
create or replace function schedules.skip_grace_period() returns interval
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select interval '10 minutes' $$;

-- The supervisor wakes at least this often while any schedule is enabled, so a schedule
-- created without a kickoff (or a lost supervisor chain after ensure) is never far off.
create or replace function schedules.max_supervisor_sleep() returns interval
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select interval '1 hour' $$;

-- The advisory lock key that serialises supervisors and kickoffs.
create or replace function schedules.supervisor_lock_key() returns bigint
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 7305871629419384611::bigint $$;

-- Effects -----------------------------------------------------------------------------

-- Enqueues the schedule's task for a fire time and records the run; returns the task_id.
create or replace function schedules.enqueue_schedule_run(
  _version schedules.schedule_version, _fire_at timestamptz, _first_fire_at timestamptz, _now timestamptz
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  _task_id := queues.enqueue_internal(_version.task_type, _version.payload, _fire_at, _version.priority);
  insert into schedules.schedule_run
    (schedule_id, schedule_version_id, fire_at, first_fire_at, outcome, task_id, enqueued_at)
  values (_version.schedule_id, _version.schedule_version_id, _fire_at, _first_fire_at,
          'enqueued', _task_id, _now);
  return _task_id;
end;
$$;

-- Handles one schedule's due fire times at _now by its missed-run policy. Returns
-- {name, enqueued: [{fire_at, first_fire_at, task_id}], skipped: {first_fire_at, fire_at}}
-- or null when nothing was due. Locks the schedule row (FOR NO KEY UPDATE) first.
create or replace function schedules.run_schedule_at(_now timestamptz, _schedule_id bigint)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
  _v schedules.schedule_version;
  _first timestamptz;
  _last timestamptz;
  _from timestamptz;
  _fire timestamptz;
  _enqueued jsonb := '[]';
  _skipped jsonb;
  _task_id bigint;
begin
  select s.name into _name from schedules.schedule s where s.schedule_id = _schedule_id for no key update;
  _v := schedules.current_version(_schedule_id);
  if _name is null or not coalesce(_v.enabled, false) then
    return null;
  end if;
  _from := greatest(_v.fires_after, schedules.last_fire_at(_schedule_id));
  _first := schedules.next_fire_time(_v.cron, _from, _v.time_zone);
  if _first is null or _first > _now then
    return null;
  end if;

  if _v.missed_run_policy = 'catch_up_once' then
    -- The latest fire time at or before now (at least _first).
    _last := schedules.prev_fire_time(_v.cron, _now + interval '1 microsecond', _v.time_zone);
    _task_id := schedules.enqueue_schedule_run(_v, _last, _first, _now);
    _enqueued := jsonb_build_array(jsonb_build_object(
      'fire_at', _last, 'first_fire_at', _first, 'task_id', _task_id));
  else
    if _first < _now - schedules.skip_grace_period() then
      _last := schedules.prev_fire_time(_v.cron, _now - schedules.skip_grace_period(), _v.time_zone);
      insert into schedules.schedule_run
        (schedule_id, schedule_version_id, fire_at, first_fire_at, outcome, task_id, enqueued_at)
      values (_schedule_id, _v.schedule_version_id, _last, _first, 'skipped', null, _now);
      _skipped := jsonb_build_object('first_fire_at', _first, 'fire_at', _last);
      _from := _last;
    end if;
    -- Within the grace window: each fire time is its own run (at most grace / 1 minute).
    loop
      _fire := schedules.next_fire_time(_v.cron, _from, _v.time_zone);
      exit when _fire is null or _fire > _now;
      _task_id := schedules.enqueue_schedule_run(_v, _fire, _fire, _now);
      _enqueued := _enqueued || jsonb_build_object('fire_at', _fire, 'first_fire_at', _fire, 'task_id', _task_id);
      _from := _fire;
    end loop;
  end if;
  return jsonb_build_object('name', _name, 'enqueued', _enqueued, 'skipped', _skipped);
end;
$$;

-- Enqueues the next supervisor run at _wake unless a pending supervisor task (not held
-- by a live lease) already becomes claimable by then; returns the task that will run.
-- Caller holds the supervisor advisory lock.
create or replace function schedules.plan_supervisor_at(_now timestamptz, _wake timestamptz)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending record;
  _task_id bigint;
begin
  select * into _pending from schedules.pending_supervisor_task(_now);
  if _wake is null then
    return _pending.task_id;
  end if;
  if _pending.task_id is not null and _pending.available_at <= _wake then
    return _pending.task_id;
  end if;
  _task_id := queues.enqueue_internal('db_function',
    jsonb_build_object('task_type', 'db_function', 'db_function', 'schedules.schedule_supervisor'),
    _wake, 100, null, 3);
  insert into schedules.supervisor_task (task_id, scheduled_at, enqueued_at) values (_task_id, _wake, _now);
  return _task_id;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Owner only (tests move the clock). Handles every enabled schedule's due fire times,
-- then plans the next run. Returns {success: true, payload: {runs, enqueued, skipped,
-- next_supervisor_task_id, next_run_at}}; when a schedule raised, its effects are rolled
-- back, the others stand, and the envelope is {success: false, error, payload}.
create or replace function schedules.schedule_supervisor_at(_now timestamptz, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _schedule record;
  _run jsonb;
  _runs jsonb := '[]';
  _errors jsonb := '[]';
  _enqueued integer := 0;
  _skipped integer := 0;
  _wake timestamptz;
  _next_task_id bigint;
  _result jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());

  for _schedule in select s.schedule_id, s.name from schedules.schedule s order by s.schedule_id loop
    begin
      _run := schedules.run_schedule_at(_now, _schedule.schedule_id);
      if _run is not null then
        _runs := _runs || _run;
        _enqueued := _enqueued + jsonb_array_length(_run -> 'enqueued');
        _skipped := _skipped + case when _run -> 'skipped' = 'null' then 0 else 1 end;
      end if;
    exception when others then
      _errors := _errors || jsonb_build_object('name', _schedule.name, 'error', sqlerrm, 'sqlstate', sqlstate);
    end;
  end loop;

  _wake := schedules.supervisor_wake_at(_now);
  _next_task_id := schedules.plan_supervisor_at(_now, _wake);
  _result := jsonb_build_object(
    'status', 'ok', 'runs', _runs, 'enqueued', _enqueued, 'skipped', _skipped,
    'next_supervisor_task_id', _next_task_id, 'next_run_at', _wake);
  if jsonb_array_length(_errors) > 0 then
    return jsonb_build_object('success', false,
      'error', format('%s schedule(s) failed: %s', jsonb_array_length(_errors), _errors::text),
      'payload', _result || jsonb_build_object('errors', _errors));
  end if;
  return jsonb_build_object('success', true, 'payload', _result);
end;
$$;

-- The db_function the worker runs. Payload: {db_function: 'schedules.schedule_supervisor'}
-- (no other fields are read). See schedule_supervisor_at.
create or replace function schedules.schedule_supervisor(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select schedules.schedule_supervisor_at(now(), payload)
$$;

-- Kickoff --------------------------------------------------------------------------------

-- Owner only. Makes sure a supervisor task will run by the next due fire time (or within
-- max_supervisor_sleep()); enqueues one only when no pending supervisor task does.
-- Returns that task's id; null when no schedule is enabled and none is pending.
create or replace function schedules.ensure_schedule_supervisor_at(_now timestamptz)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());
  return schedules.plan_supervisor_at(_now, schedules.supervisor_wake_at(_now));
end;
$$;

-- Idempotent kickoff for apps and deploy scripts; see ensure_schedule_supervisor_at.
create or replace function schedules.ensure_schedule_supervisor()
  returns bigint
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select schedules.ensure_schedule_supervisor_at(now())
$$;
