-- A channel process's supervisor and its handlers' bookkeeping are static SQL in
-- functions of the process's own, made at registration (<name>_supervise,
-- <name>_attempt_refusal, <name>_record_attempt_success, <name>_record_attempt_failure,
-- beside <name>_process_facts and <name>_close_given_up_attempts): a connection plans
-- them once, where the dynamic SQL before was planned on every call. A run records the
-- queue task of the run it scheduled (<name>_supervisor_run.next_task_id), and the
-- success handler makes that run due now (queues.hasten_task), or leaves it to the worker
-- that took it, instead of enqueuing a second one beside it.
set local lock_timeout = '5s';

-- Now returns the task id.
drop function if exists internal.enqueue_supervisor_run(text, text, bigint, timestamptz);
-- Now part of each process's <name>_supervise.
drop function if exists internal.schedule_channel_attempt(internal.channel_process, bigint);

-- New; dropped first so a re-run of this file may change its signature.
drop function if exists queues.hasten_task(bigint);
--!include queues/hasten.sql
--!include queues/privileges.sql
--!include internal/process_supervisor.sql
--!include internal/channel_process.sql

select internal.create_channel_process_tables(p.process_schema, p.process_name)
  from internal.channel_process p;
select internal.create_channel_process_functions(p.process_schema, p.process_name)
  from internal.channel_process p;
