-- Who may call what in accounts: the worker runs the two supervisors (granted and
-- registered). Apps start a deletion through api.request_account_deletion; nothing in
-- accounts is granted to them.

revoke all on all tables in schema accounts from public;
revoke all on all sequences in schema accounts from public;
revoke execute on all functions in schema accounts from public;

grant usage on schema accounts to :DATABASE_WORKER;

grant execute on function
  accounts.account_deletion_supervisor(jsonb),
  accounts.account_anonymization_supervisor(jsonb)
to :DATABASE_WORKER;

select internal.register_runnable_function('accounts.account_deletion_supervisor(jsonb)');
select internal.register_runnable_function('accounts.account_anonymization_supervisor(jsonb)');
