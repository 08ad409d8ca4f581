/* Queries on the function runner (internal.run_function). */

/* @name FunctionRun */
select internal.run_function(:functionName!::text, :payload::jsonb) as "result";

/*
  The same with a trace context (sql/queues/trace.sql): set for the statement's
  transaction before the call, cleared after it, so the tasks the function enqueues record
  it (each step reads the row of the one before it, so they run in this order).
*/
/* @name FunctionRunTraced */
with context as materialized (
  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent
),
ran as materialized (
  select internal.run_function(:functionName!::text, :payload::jsonb) as result from context
),
cleared as materialized (
  select set_config('queue.traceparent', '', true) from ran
)
select r.result as "result" from ran r, cleared;

/*
  A channel task's before_handler and its provider-call check in one statement
  (internal.run_before_provider_call, sql/internal/delivery.sql).
*/
/* @name FunctionRunBeforeProviderCall */
select b.before_result as "beforeResult", b.start_result as "startResult", b.start_error as "startError"
  from internal.run_before_provider_call(:beforeHandler!::text, :payload::jsonb, :taskId!::bigint,
                                         :taskLeaseId!::bigint) b;

/* The same with a trace context, as FunctionRunTraced. */
/* @name FunctionRunBeforeProviderCallTraced */
with context as materialized (
  select set_config('queue.traceparent', :traceparent!::text, true) as traceparent
),
ran as materialized (
  select b.before_result, b.start_result, b.start_error
    from context c
   cross join lateral internal.run_before_provider_call(
    -- c.traceparent (never null) ties the call to the setting's row: it runs after it.
    case when c.traceparent is not null then :beforeHandler!::text end, :payload::jsonb, :taskId!::bigint,
    :taskLeaseId!::bigint) b
),
cleared as materialized (
  select set_config('queue.traceparent', '', true) from (select count(*) from ran) n
)
select r.before_result as "beforeResult", r.start_result as "startResult", r.start_error as "startError"
  from ran r, cleared;

/*
  The before_handlers of a batch of channel tasks and their provider-call checks in one
  statement (internal.run_before_provider_calls, sql/internal/delivery.sql): a row per call.
*/
/* @name FunctionRunBeforeProviderCalls */
select b.ord as "ord!", b.before_result as "beforeResult", b.start_result as "startResult",
       b.start_error as "startError", b.before_error as "beforeError", b.before_sqlstate as "beforeSqlstate"
  from internal.run_before_provider_calls(:calls!::jsonb) b;
