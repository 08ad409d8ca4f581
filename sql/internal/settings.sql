-- Operational settings, owner-managed (the table internal.setting): a knob an operator
-- (or a test) turns.
--   backoff_scale  multiplies every supervisor backoff (default 1). 0.01 turns the
--                  5 s first retry into 50 ms, for tests and the demo.

-- The wait before a supervisor's next check: 5 s * 2^_exponent, at most _cap_seconds,
-- times backoff_scale.
create or replace function internal.backoff(_exponent integer, _cap_seconds integer)
  returns interval
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select make_interval(secs =>
    least(_cap_seconds, 5 * power(2, greatest(coalesce(_exponent, 0), 0)))
    * coalesce((select s.value::numeric from internal.setting s where s.name = 'backoff_scale'), 1))
$$;
