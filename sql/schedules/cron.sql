-- Cron expressions, evaluated in UTC.
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
