/*
  The audit trail of changes made through the API (sql/admin/api_changes.sql).
*/

/* @name ApiChangeRecord */
select admin.record_api_change(
  :userName!::text, :userLevel!::text, :requestId!::text, :method!::text, :route!::text, :action!::text,
  :taskIds::bigint[], :taskType::text, :scheduleName::text, :workerId::text, :input::jsonb, :answer!::jsonb
) as "apiChangeId!";

/* @name ApiChangeList */
select c.api_change_id as "apiChangeId!", c.changed_at as "changedAt!", c.user_name as "userName!",
       c.user_level as "userLevel!", c.request_id as "requestId!", c.method as "method!", c.route as "route!",
       c.action as "action!", c.task_ids as "taskIds!", c.task_type as "taskType", c.schedule_name as "scheduleName",
       c.worker_id as "workerId", c.input as "input!", c.answer as "answer!"
  from admin.list_api_changes(:taskId::bigint, :limit::integer, :beforeId::bigint) c;
