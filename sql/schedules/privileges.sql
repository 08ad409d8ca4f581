-- Who may call what in schedules. The worker runs the supervisor through
-- internal.run_function; apps and the REST API manage schedules and generate staggered
-- batches. The *_at(_now, ...) variants, facts and effects are owner only.

revoke all on all tables in schema schedules from public;
revoke all on all sequences in schema schedules from public;
revoke execute on all functions in schema schedules from public;

grant usage on schema schedules to :DATABASE_WORKER, :DATABASE_APP, :DATABASE_API;

grant execute on function schedules.schedule_supervisor(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('schedules.schedule_supervisor(jsonb)');

grant execute on function
  schedules.upsert_schedule(text, text, text, jsonb, integer, text, text),
  schedules.enable_schedule(text),
  schedules.disable_schedule(text),
  schedules.list_schedules(),
  schedules.ensure_schedule_supervisor(),
  schedules.generate_staggered_tasks(text, jsonb, timestamptz, interval, integer, integer)
to :DATABASE_APP, :DATABASE_API;
