/* @name StaggeredGenerate */
select b.batch as "batch!", b.scheduled_at as "scheduledAt!", b.task_count as "taskCount!"
  from schedules.generate_staggered_tasks(
    :taskType!::text, :payloads!::jsonb, :startAt!::timestamptz,
    make_interval(secs => :periodSeconds!::integer), :batches!::integer, :priority::integer
  ) b;
