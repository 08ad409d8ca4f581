/*
  Task dependencies (sql/queues/dependencies.sql): the tasks a task waits for, with how
  each ended and its newest result.
*/

/* @name TaskDependencyList */
select d.task_id      as "taskId!",
       d.task_type    as "taskType!",
       d.outcome      as "outcome",
       d.completed_at as "completedAt",
       d.result       as "result"
  from queues.list_task_dependencies(:taskId!::bigint) d;
