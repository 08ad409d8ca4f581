/*
  Task results (queues.task_result): what a run produced, one per lease, recorded in the
  transaction that completes the task.
*/

/* @name TaskResultRecord */
select queues.record_task_result(:taskId!::bigint, :taskLeaseId!::bigint, :result!::jsonb) as "recorded";

/* @name TaskResultList */
select r.task_lease_id as "taskLeaseId!",
       r.result        as "result!",
       r.recorded_at   as "recordedAt!"
  from queues.list_task_results(:taskId!::bigint) r;
