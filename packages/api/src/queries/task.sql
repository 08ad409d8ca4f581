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
  from admin.list_tasks(:taskType::text, :state::text, :limit::integer, :beforeTaskId::bigint) t;

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
