/* Queries on the worker registry (queues.worker). */

/* @name WorkerHeartbeat */
select queues.record_worker_heartbeat(:workerId!::text, :taskTypes!::text[], :heartbeatIntervalMs::integer) as "recorded";

/* @name WorkerStopped */
select queues.record_worker_stopped(:workerId!::text) as "recorded";

/* @name WorkerRevokeLeases */
select r.task_id as "taskId!", r.task_lease_id as "taskLeaseId!"
  from queues.revoke_worker_leases(:workerId!::text, :started::bigint[], :startedUs::bigint[]) r;
