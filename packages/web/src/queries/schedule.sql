/* @name StaggeredGenerate */
select b.batch as "batch!", b.scheduled_at as "scheduledAt!", b.task_count as "taskCount!"
  from schedules.generate_staggered_tasks(
    :taskType!::text, :payloads!::jsonb, :startAt!::timestamptz,
    make_interval(secs => :periodSeconds!::integer), :batches!::integer, :priority::integer
  ) b;

/* @name ScheduleList */
select s.name as "name!", s.cron as "cron!", s.task_type as "taskType!", s.payload as "payload!",
       s.priority as "priority!", s.missed_run_policy as "missedRunPolicy!", s.enabled as "enabled!",
       s.last_fire_at as "lastFireAt", s.next_fire_at as "nextFireAt", s.updated_at as "updatedAt!",
       s.last_runs as "lastRuns!", s.time_zone as "timeZone!"
  from admin.list_schedules(:runs::integer) s;

/* @name ScheduleUpsert */
select s.schedule_id as "scheduleId", s.validation_failure_message as "validationFailureMessage"
  from schedules.upsert_schedule(
    :name!::text, :cron!::text, :taskType!::text, :payload!::jsonb, :priority::integer,
    :missedRunPolicy::text, :timeZone::text
  ) s;

/* @name ScheduleEnable */
select s.schedule_id as "scheduleId", s.validation_failure_message as "validationFailureMessage"
  from schedules.enable_schedule(:name!::text) s;

/* @name ScheduleDisable */
select s.schedule_id as "scheduleId", s.validation_failure_message as "validationFailureMessage"
  from schedules.disable_schedule(:name!::text) s;
