-- The REST API's face of provider back-pressure (sql/queues/throttle.sql): the active
-- throttles, and an operator's clear of one.

-- The throttles in force now, one row per key (queues.active_throttles_at): until when,
-- the latest report's reason, time and reporter, and how many reports are in force.
create or replace function admin.list_throttles()
  returns table (
    key_kind        text,
    key             text,
    throttled_until timestamptz,
    reason          text,
    recorded_at     timestamptz,
    recorded_by     text,
    reports         integer
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.active_throttles_at(now())
$$;

-- Clears the throttle of a key now (queues.clear_throttle, which checks the input), as
-- the REST API: its tasks are claimed again at once. Returns whether one was in force (a
-- group key no throttle names: false). An unknown task type is 23503, a kind other than
-- 'task_type' or 'group' or a group key blank or longer than 200 characters 22023, a NULL
-- 22004; nothing is written then.
create or replace function admin.clear_throttle(_key_kind text, _key text)
  returns boolean
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.clear_throttle(_key_kind, _key, 'api')
$$;
