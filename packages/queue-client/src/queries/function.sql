/* Queries on the function runner (internal.run_function). */

/* @name FunctionRun */
select internal.run_function(:functionName!::text, :payload::jsonb) as "result";
