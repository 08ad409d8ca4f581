/*
  Queue controls, flow limits and workers, through the admin functions (sql/admin/queue_controls.sql, sql/admin/limits.sql,
  sql/admin/workers.sql).
*/

/* @name QueueList */
select q.task_type as "taskType!", q.description as "description!", q.paused as "paused!",
       q.paused_at as "pausedAt", q.pause_reason as "pauseReason", q.scheduled as "scheduled!",
       q.ready as "ready!", q.running as "running!", q.retrying as "retrying!", q.workers as "workers!"
  from admin.list_queues() q;

/* @name QueuePause */
select admin.pause_task_type(:taskType!::text, :reason::text) as "pauseId!";

/* @name QueueSetTimeout */
select admin.set_task_type_timeout(:taskType!::text, :timeoutSeconds::numeric) as "ok";

/* @name QueueResume */
select admin.resume_task_type(:taskType!::text) as "resumed!";

/* @name WorkerList */
select w.worker_id as "workerId!", w.task_types as "taskTypes!", w.status as "status!",
       w.started_at as "startedAt!", w.last_seen_at as "lastSeenAt!", w.stopped_at as "stoppedAt",
       w.heartbeat_age_seconds as "heartbeatAgeSeconds!", w.tasks_in_flight as "tasksInFlight!"
  from admin.list_workers() w;

/* @name WorkerRecover */
select r.task_id as "taskId!", r.task_lease_id as "taskLeaseId!", r.worker_id as "workerId!"
  from admin.recover_worker_leases(:workerId!::text, :deadAfterSeconds::integer) r;

/* @name QueueThrottleList */
select t.key_kind as "keyKind!", t.key as "key!", t.throttled_until as "throttledUntil!", t.reason as "reason!",
       t.recorded_at as "recordedAt!", t.recorded_by as "recordedBy!", t.reports as "reports!"
  from admin.list_throttles() t;

/* @name QueueThrottleClear */
select admin.clear_throttle(:keyKind!::text, :key!::text) as "cleared!";

/* @name LimitList */
select l.task_type as "taskType!", l.scope as "scope!", l.group_key as "groupKey", l.max_running as "maxRunning",
       l.max_starts as "maxStarts", l.interval_ms as "intervalMs", l.set_at as "setAt!", l.running as "running!",
       l.starts as "starts!", l.held_back as "heldBack!"
  from admin.task_limits() l;

/* @name LimitSet */
select admin.set_task_limit(:taskType!::text, :scope!::text, :groupKey::text, :maxRunning::integer,
                            :maxStarts::integer, :intervalMs::integer) as "ok";

/* @name LimitClear */
select admin.clear_task_limit(:taskType!::text, :scope!::text, :groupKey::text) as "cleared!";
