/* Queries on task types (queues.task_type). */

/* @name TaskTypeRegister */
select r.task_type as "taskType!", r.created as "created!"
  from queues.register_task_types(:taskTypes!::jsonb) r;
