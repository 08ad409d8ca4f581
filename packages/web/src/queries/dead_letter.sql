/* @name DeadLetterList */
select d.task_id      as "taskId!",
       d.task_type    as "taskType!",
       d.payload      as "payload!",
       d.outcome      as "outcome!",
       d.completed_at as "completedAt!",
       d.last_error   as "lastError",
       d.attempts     as "attempts!"
  from admin.list_dead_letters(:taskType::text, :limit::integer, :beforeTaskId::bigint) d;
