-- Who may call what in internal. The worker runs registered functions through
-- internal.run_function; it also needs EXECUTE on each target (granted beside it).

revoke all on all tables in schema internal from public;
revoke execute on all functions in schema internal from public;

grant usage on schema internal to :DATABASE_WORKER;

grant execute on function
  internal.run_function(text, jsonb),
  internal.resolve_runnable_function(text),
  internal.noop(jsonb),
  internal.start_provider_call(jsonb),
  internal.check_at_least_once_provider_call(jsonb),
  internal.run_before_provider_call(text, jsonb, bigint, bigint),
  internal.run_before_provider_calls(jsonb),
  internal.call_runnable(text, jsonb)
to :DATABASE_WORKER;

select internal.register_runnable_function('internal.noop(jsonb)');
select internal.register_runnable_function('internal.start_provider_call(jsonb)');
