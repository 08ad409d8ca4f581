/* @name TaskCancel */
select c.task_id as "taskId!", c.result as "result!", c.was_running as "wasRunning!"
  from queues.cancel_tasks(:taskIds!::bigint[], :reason::text) c;

/* @name TaskCancelledReasons */
select c.task_id as "taskId!", c.reason as "reason!", c.cancelled_at as "cancelledAt!"
  from queues.cancelled_tasks(:taskIds!::bigint[]) c;
