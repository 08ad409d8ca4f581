-- The seed's schedules, installed disabled. Local mode enables them: `npm start` without
-- DATABASE_URL (tools/db/src/cli/start.ts) and `npm run demo` call
-- schedules.enable_schedule for each; in production enable them once with the same call
-- (or through the schedules API). Re-running this file changes nothing that exists.
--
--   menus.store_discovery     Mondays 03:00 UTC   store_discovery
--   menus.resync              daily 00:00 UTC     db_function menus.generate_todays_resync
--                                                 (6 batches, 00:00 .. 20:00)
--   menus.analytics_refresh   daily 02:00 UTC     analytics_refresh

do $$
declare
  _s record;
  _id bigint;
begin
  for _s in
    select * from (values
      ('menus.store_discovery', '0 3 * * 1', 'store_discovery', '{}'::jsonb, 20),
      ('menus.resync', '0 0 * * *', 'db_function', '{"db_function": "menus.generate_todays_resync"}'::jsonb, 60),
      ('menus.analytics_refresh', '0 2 * * *', 'analytics_refresh', '{}'::jsonb, -10)
    ) v(name, cron, task_type, payload, priority)
  loop
    insert into schedules.schedule (name) values (_s.name) on conflict (name) do nothing returning schedule_id into _id;
    if _id is not null then
      insert into schedules.schedule_version
        (schedule_id, cron, task_type, payload, priority, missed_run_policy, enabled, fires_after)
      values (_id, _s.cron, _s.task_type, _s.payload, _s.priority, 'skip', false, now());
    end if;
  end loop;
end;
$$;
