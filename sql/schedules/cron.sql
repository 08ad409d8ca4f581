-- Cron expressions, evaluated in UTC or in an IANA time zone.
--
-- Five fields: minute (0-59) hour (0-23) day-of-month (1-31) month (1-12)
-- day-of-week (0-7; 0 and 7 are Sunday). Each field is a comma list of items:
--   *      every value              a      one value
--   a-b    a range (a <= b)         */n    every n-th value from the field's minimum
--   a-b/n  every n-th value of a-b  a/n    every n-th value from a to the field's maximum
-- Names (JAN, MON), L, W, # and ? are not supported.
--
-- Day rule (Vixie/ISC cron, as cronie and Debian cron): when both day-of-month and
-- day-of-week are restricted, a day matches if EITHER matches; when either field
-- begins with '*' (so '*' or '*/n'), a day matches only if BOTH match.
--
--   schedules.parse_cron(cron)                the parsed fields; raises 22023/22004
--   schedules.next_fire_time(cron, after)     first fire time strictly after `after`
--   schedules.prev_fire_time(cron, before)    last fire time strictly before `before`
--   schedules.cron_error(cron)                the parse error message, or null
--   schedules.next_fire_time(cron, after, time_zone), prev_fire_time(cron, before, time_zone)
--                                             the same in a time zone (below)
--
-- In a time zone the fields match the local wall clock, and daylight-saving changes follow
-- cronie's rule, by whether the job runs every hour (its hour field allows all 24 hours,
-- '*' or '*/1') or at fixed hours:
--   clocks go forward (a wall time that does not exist, 02:30 in Berlin on 2026-03-29):
--     a fixed-hour job fires once, at the first valid time after the gap (03:00 local,
--     the moment of the change); an every-hour job skips the missing times (it fires in
--     every real hour anyway)
--   clocks go back (a wall time that occurs twice, 02:30 in Berlin on 2026-10-25):
--     a fixed-hour job fires once, at the first occurrence; an every-hour job fires at
--     both, so it fires in every real hour
-- Zone offsets are read from PostgreSQL's time zone data; a change of a zone's offset by
-- more than 3 hours at once (Pacific/Apia skipping 2011-12-30) is not searched across.

-- One field: a sorted array of the values it allows. _name names the field in errors.
create or replace function schedules.parse_cron_field(
  _field text, _name text, _min integer, _max integer
) returns integer[]
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _item text;
  _parts text[];
  _lo integer;
  _hi integer;
  _step integer;
  _values integer[] := '{}';
begin
  foreach _item in array string_to_array(_field, ',') loop
    -- (range)(/step)?, range: * | a | a-b
    _parts := regexp_match(_item, '^(\*|([0-9]{1,4})(?:-([0-9]{1,4}))?)(?:/([0-9]{1,4}))?$');
    if _parts is null then
      raise exception 'cron % field: % is not a number, a range a-b, * or a step x/n',
        _name, quote_literal(left(_item, 50))
        using errcode = '22023',
              hint = 'Fields are: minute hour day-of-month month day-of-week, e.g. ''*/15 0-6 * * 1-5''.';
    end if;
    if _parts[1] = '*' then
      _lo := _min;
      _hi := _max;
    else
      _lo := _parts[2]::integer;
      _hi := coalesce(_parts[3]::integer, case when _parts[4] is null then _lo else _max end);
      if _lo not between _min and _max then
        raise exception 'cron % field: % is out of range %-%', _name, _lo, _min, _max using errcode = '22023';
      end if;
      if _hi not between _min and _max then
        raise exception 'cron % field: % is out of range %-%', _name, _hi, _min, _max using errcode = '22023';
      end if;
      if _hi < _lo then
        raise exception 'cron % field: range %-% goes backwards', _name, _lo, _hi using errcode = '22023';
      end if;
    end if;
    _step := coalesce(_parts[4]::integer, 1);
    if _step < 1 then
      raise exception 'cron % field: step must be at least 1, got %', _name, _step using errcode = '22023';
    end if;
    _values := _values || array(select generate_series(_lo, _hi, _step));
  end loop;
  return array(select distinct v from unnest(_values) v order by v);
end;
$$;

-- The parsed fields of a 5-field cron expression; raises 22004 (null) or 22023 (malformed)
-- with a message naming the field. dows holds 0-6 (7 becomes 0). dom_restricted and
-- dow_restricted say whether the day fields are restricted for the day rule above.
create or replace function schedules.parse_cron(
  _cron text,
  out minutes integer[], out hours integer[], out doms integer[], out months integer[],
  out dows integer[], out dom_restricted boolean, out dow_restricted boolean
)
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _fields text[];
begin
  if _cron is null then
    raise exception 'cron must not be null' using errcode = '22004';
  end if;
  _fields := regexp_split_to_array(btrim(_cron, E' \t\n\r'), E'[ \t]+');
  if btrim(_cron, E' \t\n\r') = '' or cardinality(_fields) <> 5 then
    raise exception 'cron must have 5 fields (minute hour day-of-month month day-of-week), got % in %',
      case when btrim(_cron, E' \t\n\r') = '' then 0 else cardinality(_fields) end,
      quote_literal(left(_cron, 100))
      using errcode = '22023';
  end if;
  minutes := schedules.parse_cron_field(_fields[1], 'minute', 0, 59);
  hours   := schedules.parse_cron_field(_fields[2], 'hour', 0, 23);
  doms    := schedules.parse_cron_field(_fields[3], 'day-of-month', 1, 31);
  months  := schedules.parse_cron_field(_fields[4], 'month', 1, 12);
  dows    := array(select distinct case when d = 7 then 0 else d end
                     from unnest(case when _fields[5] ~ '^\*'
                                      then schedules.parse_cron_field(_fields[5], 'day-of-week', 0, 6)
                                      else schedules.parse_cron_field(_fields[5], 'day-of-week', 0, 7) end) d
                    order by 1);
  dom_restricted := _fields[3] !~ '^\*';
  dow_restricted := _fields[5] !~ '^\*';
end;
$$;

-- Whether a (UTC) day matches the day fields, by the day rule above.
create or replace function schedules.cron_day_matches(
  _day timestamp, _doms integer[], _dows integer[], _dom_restricted boolean, _dow_restricted boolean
) returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select case when _dom_restricted and _dow_restricted
              then extract(day from _day)::integer = any (_doms) or extract(dow from _day)::integer = any (_dows)
              else extract(day from _day)::integer = any (_doms) and extract(dow from _day)::integer = any (_dows)
         end
$$;

-- How far next_fire_time and prev_fire_time search before answering null: the rarest
-- possible cron ('0 0 29 2 *') fires at least every 8 years.
create or replace function schedules.cron_search_horizon() returns interval
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select interval '30 years' $$;

-- The first fire time strictly after _after (UTC, whole minutes), or null when the cron
-- never fires (e.g. '0 0 30 2 *'). Walks month → day → hour → minute, jumping over
-- non-matching months, days and hours, so a call costs tens of steps, not minutes.
create or replace function schedules.next_fire_time(_cron text, _after timestamptz)
  returns timestamptz
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _c record := schedules.parse_cron(_cron);
  _t timestamp;
  _limit timestamp;
  _h integer;
  _m integer;
begin
  if _after is null then
    raise exception 'after must not be null' using errcode = '22004';
  end if;
  _t := date_trunc('minute', _after at time zone 'UTC') + interval '1 minute';
  _limit := _t + schedules.cron_search_horizon();
  loop
    if _t > _limit then
      return null;
    end if;
    if not extract(month from _t)::integer = any (_c.months) then
      _t := date_trunc('month', _t) + interval '1 month';
      continue;
    end if;
    if not schedules.cron_day_matches(_t, _c.doms, _c.dows, _c.dom_restricted, _c.dow_restricted) then
      _t := date_trunc('day', _t) + interval '1 day';
      continue;
    end if;
    if not extract(hour from _t)::integer = any (_c.hours) then
      select min(h) into _h from unnest(_c.hours) h where h > extract(hour from _t)::integer;
      _t := case when _h is null then date_trunc('day', _t) + interval '1 day'
                 else date_trunc('day', _t) + make_interval(hours => _h) end;
      continue;
    end if;
    select min(m) into _m from unnest(_c.minutes) m where m >= extract(minute from _t)::integer;
    if _m is null then
      _t := date_trunc('hour', _t) + interval '1 hour';
      continue;
    end if;
    return (date_trunc('hour', _t) + make_interval(mins => _m)) at time zone 'UTC';
  end loop;
end;
$$;

-- The last fire time strictly before _before (UTC, whole minutes), or null when there is
-- none within the search horizon. The mirror image of next_fire_time.
create or replace function schedules.prev_fire_time(_cron text, _before timestamptz)
  returns timestamptz
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _c record := schedules.parse_cron(_cron);
  _b timestamp;
  _t timestamp;
  _limit timestamp;
  _h integer;
  _m integer;
begin
  if _before is null then
    raise exception 'before must not be null' using errcode = '22004';
  end if;
  _b := _before at time zone 'UTC';
  _t := date_trunc('minute', _b);
  if _t = _b then
    _t := _t - interval '1 minute';
  end if;
  _limit := _t - schedules.cron_search_horizon();
  loop
    if _t < _limit then
      return null;
    end if;
    if not extract(month from _t)::integer = any (_c.months) then
      _t := date_trunc('month', _t) - interval '1 minute';
      continue;
    end if;
    if not schedules.cron_day_matches(_t, _c.doms, _c.dows, _c.dom_restricted, _c.dow_restricted) then
      _t := date_trunc('day', _t) - interval '1 minute';
      continue;
    end if;
    if not extract(hour from _t)::integer = any (_c.hours) then
      select max(h) into _h from unnest(_c.hours) h where h < extract(hour from _t)::integer;
      _t := case when _h is null then date_trunc('day', _t) - interval '1 minute'
                 else date_trunc('day', _t) + make_interval(hours => _h, mins => 59) end;
      continue;
    end if;
    select max(m) into _m from unnest(_c.minutes) m where m <= extract(minute from _t)::integer;
    if _m is null then
      _t := date_trunc('hour', _t) - interval '1 minute';
      continue;
    end if;
    return (date_trunc('hour', _t) + make_interval(mins => _m)) at time zone 'UTC';
  end loop;
end;
$$;

-- Null when _cron is a valid cron that fires; else the message of what is wrong with it.
create or replace function schedules.cron_error(_cron text) returns text
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _cron is null then
    return 'cron is required';
  end if;
  perform schedules.parse_cron(_cron);
  if schedules.next_fire_time(_cron, '2000-01-01 00:00:00+00') is null then
    return format('cron %s never fires (no month has such a day)', quote_literal(left(_cron, 100)));
  end if;
  return null;
exception
  when sqlstate '22023' or sqlstate '22004' then
    return sqlerrm;
end;
$$;

-- The zone's offset from UTC at _at (local wall time minus UTC).
create or replace function schedules.zone_offset(_at timestamptz, _time_zone text) returns interval
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select (_at at time zone _time_zone) - (_at at time zone 'UTC')
$$;

-- The instants at which the local wall time _wall fires in _time_zone, by the rules at
-- the top: one instant; none or the end of the gap when the clocks went forward over it;
-- the first or both occurrences when they went back over it. _every_hour: the cron's
-- hour field allows all 24 hours. Offsets a day before and after are the candidates: a
-- zone's offset changes at most once within two days.
create or replace function schedules.wall_fire_instants(_wall timestamp, _time_zone text, _every_hour boolean)
  returns timestamptz[]
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _u timestamptz := _wall at time zone 'UTC';
  _o_pre interval := schedules.zone_offset(_u - interval '1 day', _time_zone);
  _o_post interval := schedules.zone_offset(_u + interval '1 day', _time_zone);
  _valid timestamptz[] := '{}';
  _lo bigint;
  _hi bigint;
  _mid bigint;
begin
  if schedules.zone_offset(_u - _o_pre, _time_zone) = _o_pre then
    _valid := _valid || (_u - _o_pre);
  end if;
  if _o_post <> _o_pre and schedules.zone_offset(_u - _o_post, _time_zone) = _o_post then
    _valid := _valid || (_u - _o_post);
  end if;
  if cardinality(_valid) = 2 then
    _valid := array(select v from unnest(_valid) v order by v);
    return case when _every_hour then _valid else _valid[1:1] end;
  elsif cardinality(_valid) = 1 then
    return _valid;
  elsif _every_hour or _o_pre = _o_post then
    return '{}';
  end if;
  -- In the gap: the change happened between _u - _o_post (still _o_pre) and _u - _o_pre
  -- (already _o_post); find its second.
  _lo := extract(epoch from _u - _o_post)::bigint;
  _hi := extract(epoch from _u - _o_pre)::bigint;
  while _hi - _lo > 1 loop
    _mid := (_lo + _hi) / 2;
    if schedules.zone_offset(to_timestamp(_mid), _time_zone) = _o_pre then
      _lo := _mid;
    else
      _hi := _mid;
    end if;
  end loop;
  return array[to_timestamp(_hi)];
end;
$$;

-- The first fire time strictly after _after of _cron read in _time_zone (NULL or 'UTC':
-- schedules.next_fire_time(_cron, _after)), or null when it never fires. Far from a
-- daylight-saving change it is the UTC walk on wall times, mapped back with the zone's
-- offset; within 3 hours of one (or more than a week ahead) it walks the wall times
-- from 3 hours before _after's and maps each by schedules.wall_fire_instants, keeping the
-- earliest instant after _after.
create or replace function schedules.next_fire_time(_cron text, _after timestamptz, _time_zone text)
  returns timestamptz
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _every_hour boolean;
  _o interval;
  _w timestamp;
  _i timestamptz;
  _best timestamptz;
begin
  if _time_zone is null or _time_zone = 'UTC' then
    return schedules.next_fire_time(_cron, _after);
  end if;
  if _after is null then
    raise exception 'after must not be null' using errcode = '22004';
  end if;
  _every_hour := cardinality((schedules.parse_cron(_cron)).hours) = 24;
  _o := schedules.zone_offset(_after, _time_zone);
  -- Wall times are walked as if they were UTC instants.
  _w := schedules.next_fire_time(_cron, (_after at time zone _time_zone) at time zone 'UTC') at time zone 'UTC';
  if _w is null then
    return null;
  end if;
  _i := (_w at time zone 'UTC') - _o;
  if _i - _after <= interval '7 days'
     and schedules.zone_offset(_i, _time_zone) = _o
     and schedules.zone_offset(_after - interval '3 hours', _time_zone) = _o then
    return _i;
  end if;
  _w := schedules.next_fire_time(_cron,
          ((_after at time zone _time_zone) - interval '3 hours 1 minute') at time zone 'UTC') at time zone 'UTC';
  while _w is not null and (_best is null or _w <= (_best at time zone _time_zone) + interval '3 hours') loop
    foreach _i in array schedules.wall_fire_instants(_w, _time_zone, _every_hour) loop
      if _i > _after and (_best is null or _i < _best) then
        _best := _i;
      end if;
    end loop;
    _w := schedules.next_fire_time(_cron, _w at time zone 'UTC') at time zone 'UTC';
  end loop;
  return _best;
end;
$$;

-- The last fire time strictly before _before of _cron read in _time_zone, or null; the
-- mirror image of the zone's next_fire_time.
create or replace function schedules.prev_fire_time(_cron text, _before timestamptz, _time_zone text)
  returns timestamptz
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _every_hour boolean;
  _o interval;
  _w timestamp;
  _i timestamptz;
  _best timestamptz;
begin
  if _time_zone is null or _time_zone = 'UTC' then
    return schedules.prev_fire_time(_cron, _before);
  end if;
  if _before is null then
    raise exception 'before must not be null' using errcode = '22004';
  end if;
  _every_hour := cardinality((schedules.parse_cron(_cron)).hours) = 24;
  _o := schedules.zone_offset(_before, _time_zone);
  _w := schedules.prev_fire_time(_cron, (_before at time zone _time_zone) at time zone 'UTC') at time zone 'UTC';
  if _w is null then
    return null;
  end if;
  _i := (_w at time zone 'UTC') - _o;
  if _before - _i <= interval '7 days'
     and schedules.zone_offset(_i, _time_zone) = _o
     and schedules.zone_offset(_i - interval '3 hours', _time_zone) = _o then
    return _i;
  end if;
  _w := schedules.prev_fire_time(_cron,
          ((_before at time zone _time_zone) + interval '3 hours 1 minute') at time zone 'UTC') at time zone 'UTC';
  while _w is not null and (_best is null or _w >= (_best at time zone _time_zone) - interval '3 hours') loop
    foreach _i in array schedules.wall_fire_instants(_w, _time_zone, _every_hour) loop
      if _i < _before and (_best is null or _i > _best) then
        _best := _i;
      end if;
    end loop;
    _w := schedules.prev_fire_time(_cron, _w at time zone 'UTC') at time zone 'UTC';
  end loop;
  return _best;
end;
$$;

-- Null when _time_zone names a time zone of PostgreSQL's IANA data (pg_timezone_names:
-- Europe/Berlin, America/New_York, UTC), spelt as there; else the message. Abbreviations
-- that are not zone names (PDT) and POSIX strings ('UTC+5') are refused: they have no
-- daylight-saving rules, or not the ones meant. Reads the zone directory (milliseconds):
-- called when a schedule is written, never per fire time.
create or replace function schedules.time_zone_error(_time_zone text) returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select case
           when _time_zone is null then 'time_zone must not be null'
           when not exists (select 1 from pg_catalog.pg_timezone_names z where z.name = _time_zone)
             then format('time_zone must be an IANA time zone name such as ''Europe/Berlin'' or ''UTC'', got %s',
                         quote_literal(left(_time_zone, 100)))
         end
$$;
