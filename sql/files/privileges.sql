-- Who may call what in files: the worker runs the supervisor and handlers (granted and
-- registered); apps may start a file deletion. Everything else has no grant.

revoke all on all tables in schema files from public;
revoke all on all sequences in schema files from public;
revoke execute on all functions in schema files from public;

grant usage on schema files to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  files.file_deletion_supervisor(jsonb),
  files.get_file_delete_payload(jsonb),
  files.record_file_delete_success(jsonb),
  files.record_file_delete_failure(jsonb)
to :DATABASE_WORKER;

-- The files service asks before signing (sql/files/signing.sql), through
-- internal.run_function as the worker database user, which deletes files anyway.
grant execute on function files.check_file_delete_signing(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('files.check_file_delete_signing(jsonb)');

select internal.register_runnable_function('files.file_deletion_supervisor(jsonb)');
select internal.register_runnable_function('files.get_file_delete_payload(jsonb)');
select internal.register_runnable_function('files.record_file_delete_success(jsonb)');
select internal.register_runnable_function('files.record_file_delete_failure(jsonb)');

grant execute on function files.kickoff_file_deletion(bigint, timestamptz) to :DATABASE_APP;
