/* Queries on the worker registry (queues.worker). */

/* @name WorkerHeartbeat */
select queues.record_worker_heartbeat(:workerId!::text, :taskTypes!::text[], :heartbeatIntervalMs::integer) as "recorded";

/* @name WorkerStopped */
select queues.record_worker_stopped(:workerId!::text) as "recorded";
