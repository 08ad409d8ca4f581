/*
  Queries on queues.task and its facts. Names are Entity+Verb so they sort together.
  Columns are aliased with "name!" where the value is never null: pgtyped types every
  column of a function call as nullable, and the alias also gives camelCase keys.
*/

/* @name TaskEnqueue */
select queues.enqueue(
  :taskType!::text, :payload!::jsonb, :scheduledAt::timestamptz, :priority::integer,
  :resourceKey::text, :maxAttempts::integer, _depends_on => :dependsOn::bigint[],
  _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer
) as "taskId!";

/* @name TaskEnqueueAndCommit */
call queues.enqueue_and_commit(
  :taskType!::text, :payload!::jsonb, :scheduledAt::timestamptz, :priority::integer,
  :resourceKey::text, :maxAttempts::integer, _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer,
  _depends_on => :dependsOn::bigint[]
);

/* @name TaskEnqueueUnique */
select u.task_id as "taskId!", u.outcome as "outcome!", u.replaced_task_id as "replacedTaskId"
  from queues.enqueue_unique(
    :taskType!::text, :payload!::jsonb, :uniqueKey!::text, :uniquePolicy::text, :uniquePeriod::interval,
    :scheduledAt::timestamptz, :priority::integer, :resourceKey::text, :maxAttempts::integer,
    _depends_on => :dependsOn::bigint[], _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer
  ) u;

/* @name TaskEnqueueMany */
select coalesce(array_agg(e.task_id order by e.n), '{}') as "taskIds!"
  from queues.enqueue_many(:tasks!::jsonb) with ordinality e(task_id, n);

/*
  The enqueues above with the caller's trace context (sql/queues/trace.sql): one statement
  sets queue.traceparent and queue.tracestate for its transaction, enqueues (each step
  reads the row of the one before it, so they run in this order), and clears them again,
  so a later enqueue of the same transaction does not inherit the context.
*/

/* @name TaskEnqueueTraced */
with context as materialized (
  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent,
         set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as tracestate
),
enqueued as materialized (
  select queues.enqueue(
    :taskType!::text, :payload!::jsonb, :scheduledAt::timestamptz, :priority::integer,
    :resourceKey::text, :maxAttempts::integer, _depends_on => :dependsOn::bigint[],
    _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer
  ) as task_id
    from context
),
cleared as materialized (
  select set_config('queue.traceparent', '', true), set_config('queue.tracestate', '', true) from enqueued
)
select e.task_id as "taskId!" from enqueued e, cleared;

/* @name TaskEnqueueUniqueTraced */
with context as materialized (
  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent,
         set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as tracestate
),
enqueued as materialized (
  select u.task_id, u.outcome, u.replaced_task_id
    from context c
   cross join lateral queues.enqueue_unique(
    -- c.traceparent (never null) ties the call to the settings' row: it runs after them.
    case when c.traceparent is not null then :taskType!::text end, :payload!::jsonb, :uniqueKey!::text,
    :uniquePolicy::text, :uniquePeriod::interval,
    :scheduledAt::timestamptz, :priority::integer, :resourceKey::text, :maxAttempts::integer,
    _depends_on => :dependsOn::bigint[], _group_key => :groupKey::text, _timeout_ms => :timeoutMs::integer
  ) u
),
cleared as materialized (
  select set_config('queue.traceparent', '', true), set_config('queue.tracestate', '', true)
    from (select count(*) from enqueued) n
)
select e.task_id as "taskId!", e.outcome as "outcome!", e.replaced_task_id as "replacedTaskId"
  from enqueued e, cleared;

/* @name TaskEnqueueManyTraced */
with context as materialized (
  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent,
         set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as tracestate
),
enqueued as materialized (
  select coalesce(array_agg(e.task_id order by e.n), '{}') as task_ids
    from context c
   -- c.traceparent (never null) ties the call to the settings' row: it runs after them.
   cross join lateral queues.enqueue_many(case when c.traceparent is not null then :tasks!::jsonb end)
         with ordinality e(task_id, n)
),
cleared as materialized (
  select set_config('queue.traceparent', '', true), set_config('queue.tracestate', '', true) from enqueued
)
select e.task_ids as "taskIds!" from enqueued e, cleared;

/* @name TaskTraceContextSet */
select set_config('queue.traceparent', :traceparent!::text, true) as "traceparent!",
       set_config('queue.tracestate', coalesce(:tracestate::text, ''), true) as "tracestate!";

/* @name TaskTraces */
select t.task_id as "taskId!", t.traceparent as "traceparent!", t.tracestate
  from queues.task_traces(:taskIds!::bigint[]) t;

/* @name TaskClaim */
select c.task_id       as "taskId!",
       c.task_type     as "taskType!",
       c.payload       as "payload!",
       c.priority      as "priority!",
       c.resource_key  as "resourceKey",
       c.max_attempts  as "maxAttempts!",
       round(date_part('epoch', date_trunc('milliseconds', c.enqueued_at)) * 1000) as "enqueuedAtMs!",
       round(date_part('epoch', date_trunc('milliseconds', c.scheduled_at)) * 1000) as "scheduledAtMs!",
       c.task_lease_id as "taskLeaseId!",
       round(date_part('epoch', date_trunc('milliseconds', c.leased_at)) * 1000) as "leasedAtMs!",
       round(date_part('epoch', date_trunc('milliseconds', c.expires_at)) * 1000) as "expiresAtMs!",
       c.lease_count   as "leaseCount!",
       c.timeout_ms    as "timeoutMs"
  from queues.claim_tasks(:workerId!::text, :limit::integer, :taskTypes::text[], :leaseSeconds::integer, :maxLeases::integer, :suspects::text) c;

/* @name TaskNextClaimIn */
select queues.next_claim_in_ms(:taskTypes::text[], :missedMs::integer) as "ms";

/* @name TaskDequeueNextAvailable */
select t.task_id      as "taskId!",
       t.task_type    as "taskType!",
       t.payload      as "payload!",
       t.priority     as "priority!",
       t.resource_key as "resourceKey",
       t.max_attempts as "maxAttempts!",
       t.enqueued_at  as "enqueuedAt!",
       t.scheduled_at as "scheduledAt!"
  from queues.dequeue_next_available_task(:workerId::text, :leaseSeconds::integer) t;

/* @name TaskComplete */
select queues.complete_task(:taskId!::bigint, :taskLeaseId::bigint, :outcome::text) as "completed!";

/* @name TaskCompleteMany */
select c.task_id as "taskId!", c.result as "result!"
  from queues.complete_tasks(:taskIds!::bigint[], :taskLeaseIds::bigint[], :outcomes::text[], :retries::boolean[],
                             :startedAt::timestamptz[]) c;

/* @name TaskSettle */
select s.task_id as "taskId!", s.result as "result!"
  from queues.settle_tasks(:taskIds!::bigint[], :taskLeaseIds::bigint[], :outcomes::text[], :retries::boolean[],
                           :errorTaskIds::bigint[], :errorMessages::text[], :startedUs::bigint[]) s;

/* @name TaskSettleWithHandler */
select s.result as "result!", s.outcome as "outcome!", s.errors as "errors!"
  from queues.settle_with_handler(:taskId!::bigint, :taskLeaseId!::bigint, :outcome!::text, :errors!::text[],
                                  :retry::boolean, :handler!::text, :body!::jsonb, :mode!::text,
                                  :raisedPrefix!::text, :startedAt::timestamptz) s;

/* @name TaskSettleWithHandlerTraced */
with context as materialized (
  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent
),
settled as materialized (
  select s.result, s.outcome, s.errors
    from context c
   cross join lateral queues.settle_with_handler(
    -- c.traceparent (never null) ties the call to the setting's row: it runs after it.
    case when c.traceparent is not null then :taskId!::bigint end, :taskLeaseId!::bigint, :outcome!::text,
    :errors!::text[], :retry::boolean, :handler!::text, :body!::jsonb, :mode!::text, :raisedPrefix!::text,
    :startedAt::timestamptz) s
),
cleared as materialized (
  select set_config('queue.traceparent', '', true) from (select count(*) from settled) n
)
select s.result as "result!", s.outcome as "outcome!", s.errors as "errors!" from settled s, cleared;

/* @name TaskMarkStarted */
select s as "taskId!" from queues.mark_started(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :startedUs::bigint[]) s;

/* @name TaskRunSteps */
select s.task_id as "taskId!", s.result as "result!", s.outcome, s.error, s.note
  from queues.run_steps(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :functionNames!::text[], :payloads!::jsonb[],
                        :traceparents::text[]) s;

/* @name TaskFail */
select queues.fail_task(:taskId!::bigint, :errorMessage!::text, :taskLeaseId::bigint) as "errorId!";

/* @name TaskInterrupt */
select queues.interrupt_task(:taskId!::bigint, :taskLeaseId!::bigint, :errorMessage!::text, :maxInterruptions::integer) as "result!";

/* @name TaskExtendLeases */
select e.task_id as "taskId!", e.task_lease_id as "taskLeaseId!", e.expires_at as "expiresAt!"
  from queues.extend_leases(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :leaseSeconds::integer) e;

/* @name TaskReleaseLeases */
select r.task_id as "taskId!"
  from queues.release_leases(:taskIds!::bigint[], :taskLeaseIds!::bigint[]) r;

/* @name TaskSettleWithHandlers */
select s.task_id as "taskId!", s.result as "result!", s.outcome, s.errors as "errors!"
  from queues.settle_with_handlers(:taskIds!::bigint[], :taskLeaseIds!::bigint[], :outcomes!::text[],
                                   :retries::boolean[], :errorTaskIds::bigint[], :errorMessages::text[],
                                   :handlers!::text[], :bodies!::jsonb[], :modes!::text[], :raisedPrefixes!::text[],
                                   :startedUs::bigint[], :traceparents::text[]) s;
