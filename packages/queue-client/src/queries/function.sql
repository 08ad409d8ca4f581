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
