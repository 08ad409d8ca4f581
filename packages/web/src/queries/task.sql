/*
  The operations API's queries on tasks, through the admin functions (sql/admin). Names
  are Entity+Verb; "name!" marks columns that are never null.
*/

/* @name TaskList */
select t.task_id      as "taskId!",
       t.task_type    as "taskType!",
       t.state        as "state!",
       t.priority     as "priority!",
       t.resource_key as "resourceKey",
       t.max_attempts as "maxAttempts!",
       t.lease_count  as "leaseCount!",
       t.enqueued_at  as "enqueuedAt!",
       t.scheduled_at as "scheduledAt!",
       t.available_at as "availableAt",
       t.completed_at as "completedAt"
  from admin.list_tasks(:taskType::text, :state::text, :limit::integer, :beforeTaskId::bigint,
                        :workerId::text, :resourceKey::text, :enqueuedFrom::timestamptz, :enqueuedTo::timestamptz,
                        :payloadPath::text[], :payloadValue::jsonb) t;

/* @name TaskGet */
select admin.get_task(:taskId!::bigint) as "task!";

/* @name TaskCountList */
select c.task_type as "taskType!", c.state as "state!", c.count as "count!"
  from admin.task_counts(:windowSeconds::integer) c;

/* @name TaskTypeList */
select t.task_type as "taskType!", t.description as "description!"
  from admin.list_task_types() t;

/* @name TaskRedrive */
select admin.redrive_task(:taskId!::bigint) as "newTaskId!";

/* @name TaskCancel */
select r.task_id as "taskId!", r.result as "result!"
  from admin.cancel_tasks(:taskIds!::bigint[], :reason::text) r;

/* @name TaskCancelMatching */
select r.task_id as "taskId!", r.result as "result!"
  from admin.cancel_tasks_matching(:taskType::text, :state::text, :limit!::integer, :reason::text) r;

/* @name TaskRunNow */
select r.task_id as "taskId!", r.result as "result!"
  from admin.run_tasks_now(:taskIds!::bigint[]) r;

/* @name TaskRedriveMany */
select r.task_id as "taskId!", r.result as "result!", r.new_task_id as "newTaskId"
  from admin.redrive_tasks(:taskIds!::bigint[]) r;

/* @name TaskRedriveMatching */
select r.task_id as "taskId!", r.result as "result!", r.new_task_id as "newTaskId"
  from admin.redrive_tasks_matching(:taskType::text, :limit!::integer) r;

/* @name TaskDepthList */
select d.bucket_end as "bucketEnd!", d.task_type as "taskType!", d.depth as "depth!"
  from admin.queue_depth(:windowSeconds::integer, :bucketSeconds::integer) d;
