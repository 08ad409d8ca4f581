set local lock_timeout = '5s';
-- Fewer statements per channel process (BENCHMARKS.md, "business processes"): a channel
-- task's before_handler and its provider-call check in one statement
-- (internal.run_before_provider_call); internal.run_function calls its target through
-- internal.call_runnable (a kept plan) instead of a catalog look-up and an EXECUTE; a
-- supervisor run checks its isolation level in an expression, not a statement of its own;
-- the comms entry points call the process's own functions directly (comms/channel.sql,
-- made again by the registrations in email.sql and sms.sql). The grants: 900-privileges.sql.
--!include internal/run_function.sql
--!include internal/delivery.sql
--!include internal/channel_process.sql

-- Every registered channel process gets its functions again from the new templates.
select internal.create_channel_process_functions(p.process_schema, p.process_name)
  from internal.channel_process p
 order by p.process_schema, p.process_name;

--!include comms/channel.sql
-- The channels' entry points made again from the new templates, with the limits their
-- files register (sql/comms/email.sql, sms.sql; their own functions are unchanged, so
-- the files are not included).
select comms.register_message_channel('email', _max_attempts => 3, _max_supervisor_runs => 30, _backoff_cap_seconds => 3600);
select comms.register_message_channel('sms', _max_attempts => 3, _max_supervisor_runs => 30, _backoff_cap_seconds => 3600);
