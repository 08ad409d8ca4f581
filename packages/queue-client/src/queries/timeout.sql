/* @name TaskTypeTimeouts */
select t.task_type as "taskType!", t.timeout_ms as "timeoutMs!"
  from queues.task_type_timeouts() t;
