-- Who may call what in comms. The worker runs the supervisors and handlers through
-- internal.run_function (granted and registered here); apps call the send functions.
-- Everything else (facts, effects, kickoff_send_*) runs only inside these definer
-- functions and has no grant.

revoke all on all tables in schema comms from public;
revoke all on all sequences in schema comms from public;
revoke execute on all functions in schema comms from public;

grant usage on schema comms to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  comms.send_email_supervisor(jsonb),
  comms.get_email_payload(jsonb),
  comms.record_email_success(jsonb),
  comms.record_email_failure(jsonb),
  comms.send_sms_supervisor(jsonb),
  comms.get_sms_payload(jsonb),
  comms.record_sms_success(jsonb),
  comms.record_sms_failure(jsonb)
to :DATABASE_WORKER;

select internal.register_runnable_function('comms.send_email_supervisor(jsonb)');
select internal.register_runnable_function('comms.get_email_payload(jsonb)');
select internal.register_runnable_function('comms.record_email_success(jsonb)');
select internal.register_runnable_function('comms.record_email_failure(jsonb)');
select internal.register_runnable_function('comms.send_sms_supervisor(jsonb)');
select internal.register_runnable_function('comms.get_sms_payload(jsonb)');
select internal.register_runnable_function('comms.record_sms_success(jsonb)');
select internal.register_runnable_function('comms.record_sms_failure(jsonb)');

grant execute on function
  comms.send_email(text, text, text, text, text, text, timestamptz, text),
  comms.send_sms(text, text, text, timestamptz, text)
to :DATABASE_APP;
