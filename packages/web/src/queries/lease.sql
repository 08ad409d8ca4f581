/* @name LeaseRecoverStale */
select r.task_id as "taskId!", r.task_lease_id as "taskLeaseId!", r.worker_id as "workerId!"
  from admin.recover_stale_leases(:deadAfterSeconds::integer) r;

/* @name LeaseStaleList */
select s.task_id      as "taskId!",
       s.task_lease_id as "taskLeaseId!",
       s.worker_id    as "workerId!",
       s.last_seen_at as "lastSeenAt!",
       s.expires_at   as "expiresAt!"
  from admin.list_stale_leases() s;
