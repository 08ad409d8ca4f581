-- Managing schedules: create or update, enable, disable, list. Apps and the REST API call
-- the public functions; each has an owner-only *_at(_now, ...) variant for tests. Bad
-- business input returns a validation_failure_message instead of raising.
--
-- A schedule's definition is append-only (schedule_version); the newest row is in force.
-- fires_after (fire times at or before it are never due) moves to now when a schedule is
-- created, re-enabled, or its cron changes; other changes keep it, so an edit of the
-- payload neither skips nor repeats a fire time.

-- Null when the definition is valid; else what is wrong with it (the first problem).
-- _time_zone NULL means UTC.
create or replace function schedules.schedule_definition_error(
  _name text, _cron text, _task_type text, _payload jsonb, _priority integer, _missed_run_policy text,
  _time_zone text default null
) returns text
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _error text;
begin
  if _name is null or _name !~ '^[a-z][a-z0-9_.-]{0,99}$' then
    return 'name is required: 1 to 100 characters, lowercase letters, digits, _ . or -, starting with a letter';
  end if;
  _error := schedules.cron_error(_cron);
  if _error is not null then
    return _error;
  end if;
  if _time_zone is not null then
    _error := schedules.time_zone_error(_time_zone);
    if _error is not null then
      return _error;
    end if;
  end if;
  if _task_type is null then
    return 'task_type is required';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    return format('unknown task_type %s', quote_literal(left(_task_type, 100)));
  end if;
  if _payload is null or jsonb_typeof(_payload) <> 'object' then
    return 'payload is required and must be a JSON object';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    return format('payload is %s bytes, over the limit of %s bytes', pg_column_size(_payload), queues.max_payload_bytes());
  end if;
  if _task_type = 'db_function' then
    begin
      perform internal.resolve_runnable_function(_payload ->> 'db_function');
    exception when others then
      return format('payload.db_function must name a runnable function: %s', sqlerrm);
    end;
  end if;
  if _priority is not null and _priority not between -1000 and 1000 then
    return format('priority must be between -1000 and 1000, got %s', _priority);
  end if;
  if _missed_run_policy is not null and _missed_run_policy not in ('skip', 'catch_up_once') then
    return format('missed_run_policy must be ''skip'' or ''catch_up_once'', got %s',
                  quote_literal(left(_missed_run_policy, 50)));
  end if;
  return null;
end;
$$;

-- Appends a version to a locked schedule unless it would change nothing; returns the
-- version in force. _time_zone NULL keeps the version's zone (UTC for a new schedule).
create or replace function schedules.append_schedule_version(
  _now timestamptz, _schedule_id bigint, _cron text, _task_type text, _payload jsonb,
  _priority integer, _missed_run_policy text, _enabled boolean, _time_zone text default null
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _current schedules.schedule_version := schedules.current_version(_schedule_id);
  _zone text := coalesce(_time_zone, _current.time_zone, 'UTC');
  _id bigint;
begin
  if _current.schedule_version_id is not null
     and (_current.cron, _current.task_type, _current.payload, _current.priority,
          _current.missed_run_policy, _current.enabled, _current.time_zone)
         is not distinct from (_cron, _task_type, _payload, _priority, _missed_run_policy, _enabled, _zone) then
    return _current.schedule_version_id;
  end if;
  insert into schedules.schedule_version
    (schedule_id, cron, task_type, payload, priority, missed_run_policy, enabled, fires_after, created_at, time_zone)
  values (_schedule_id, _cron, _task_type, _payload, _priority, _missed_run_policy, _enabled,
          case when _current.schedule_version_id is null or (_enabled and not _current.enabled)
                    or _current.cron <> _cron or _current.time_zone <> _zone
               then _now else _current.fires_after end,
          _now, _zone)
  returning schedule_version_id into _id;
  return _id;
end;
$$;

-- Owner only. Creates the schedule _name (enabled), or updates its definition (keeping
-- whether it is enabled). NULL priority means 0, NULL missed_run_policy 'skip' and NULL
-- time_zone 'UTC' (an IANA name, schedules.time_zone_error; the cron is read on its wall
-- clock, sql/schedules/cron.sql). Changing the cron or the time zone counts from now.
-- Kicks off the supervisor. Idempotent: the same definition again appends nothing.
create or replace function schedules.upsert_schedule_at(
  _now               timestamptz,
  _name              text,
  _cron              text,
  _task_type         text,
  _payload           jsonb,
  _priority          integer default null,
  _missed_run_policy text default null,
  _time_zone         text default null,
  out schedule_id                bigint,
  out schedule_version_id        bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _enabled boolean;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  validation_failure_message := schedules.schedule_definition_error(
    _name, _cron, _task_type, _payload, _priority, _missed_run_policy, _time_zone);
  if validation_failure_message is not null then
    return;
  end if;

  -- The supervisor's lock first, then the schedule row: the supervisor takes them in
  -- this order too, so an edit and a supervisor run never deadlock.
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());
  insert into schedules.schedule (name, created_at) values (_name, _now) on conflict (name) do nothing;
  select s.schedule_id into schedule_id from schedules.schedule s where s.name = _name for no key update;
  _enabled := coalesce((schedules.current_version(schedule_id)).enabled, true);
  schedule_version_id := schedules.append_schedule_version(
    _now, schedule_id, btrim(_cron), _task_type, _payload, coalesce(_priority, 0),
    coalesce(_missed_run_policy, 'skip'), _enabled, coalesce(_time_zone, 'UTC'));
  perform schedules.ensure_schedule_supervisor_at(_now);
end;
$$;

create or replace function schedules.upsert_schedule(
  _name              text,
  _cron              text,
  _task_type         text,
  _payload           jsonb,
  _priority          integer default null,
  _missed_run_policy text default null,
  _time_zone         text default null,
  out schedule_id                bigint,
  out schedule_version_id        bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  -- Apps and the REST API schedule only what they could enqueue themselves: a schedule
  -- of an internal task type (a channel task, a db_function step) is the owner's to
  -- install, with schedules.upsert_schedule_at in a migration.
  perform queues.assert_may_enqueue(_task_type);
  select * into schedule_id, schedule_version_id, validation_failure_message
    from schedules.upsert_schedule_at(now(), _name, _cron, _task_type, _payload, _priority, _missed_run_policy,
                                      _time_zone);
end;
$$;

-- Owner only. Enables or disables the schedule _name; unchanged when it already is.
-- Re-enabling counts from now: fire times missed while disabled are never run.
create or replace function schedules.set_schedule_enabled_at(
  _now timestamptz, _name text, _enabled boolean,
  out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _v schedules.schedule_version;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _enabled is null then
    raise exception 'enabled must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key()); -- before the row lock, as above
  select s.schedule_id into schedule_id from schedules.schedule s where s.name = _name for no key update;
  if schedule_id is null then
    validation_failure_message := format('no schedule named %s', coalesce(quote_literal(left(_name, 100)), 'null'));
    return;
  end if;
  _v := schedules.current_version(schedule_id);
  schedule_version_id := schedules.append_schedule_version(
    _now, schedule_id, _v.cron, _v.task_type, _v.payload, _v.priority, _v.missed_run_policy, _enabled,
    _v.time_zone);
  if _enabled then
    perform schedules.ensure_schedule_supervisor_at(_now);
  end if;
end;
$$;

create or replace function schedules.enable_schedule(
  _name text, out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from schedules.set_schedule_enabled_at(now(), _name, true)
$$;

create or replace function schedules.disable_schedule(
  _name text, out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from schedules.set_schedule_enabled_at(now(), _name, false)
$$;

-- Every schedule with its definition in force, the last fire time handled and the next
-- one due (in the past when the supervisor is behind; null when disabled).
create or replace function schedules.list_schedules()
  returns table (
    schedule_id bigint, name text, cron text, task_type text, payload jsonb, priority integer,
    missed_run_policy text, enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz,
    created_at timestamptz, updated_at timestamptz, time_zone text
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select s.schedule_id, s.name, v.cron, v.task_type, v.payload, v.priority, v.missed_run_policy,
         v.enabled, schedules.last_fire_at(s.schedule_id), schedules.next_due_fire_at(s.schedule_id),
         s.created_at, v.created_at, v.time_zone
    from schedules.schedule s
   cross join lateral schedules.current_version(s.schedule_id) v
   order by s.name
$$;
