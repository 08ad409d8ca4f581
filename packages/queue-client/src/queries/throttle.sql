/* @name ThrottleRecord */
select r.result as "result!", r.throttled_until as "throttledUntil!", r.released_waiting as "releasedWaiting!"
  from queues.record_throttle(:keyKind!::text, :key::text, :until::timestamptz, :retryAfterSeconds::numeric,
                              :reason!::text, :recordedBy!::text, :taskId::bigint, :taskLeaseId::bigint,
                              :waitingTaskIds::bigint[], :waitingLeaseIds::bigint[]) r;

/* @name ThrottleListActive */
select t.key_kind as "keyKind!", t.key as "key!", t.throttled_until as "throttledUntil!", t.reason as "reason!",
       t.recorded_at as "recordedAt!", t.recorded_by as "recordedBy!", t.reports as "reports!"
  from queues.active_throttles() t;
