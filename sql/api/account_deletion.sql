-- Requests the deletion of an account: flags it 'deleted' and starts the account
-- deletion supervisor (accounts.kickoff_account_deletion). Idempotent per account.
-- Unknown or missing ids return a validation_failure_message and write nothing.
create or replace function api.request_account_deletion(
  _account_id bigint,
  out account_deletion_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _kickoff record;
begin
  _kickoff := accounts.kickoff_account_deletion(_account_id);
  account_deletion_task_id := _kickoff.account_deletion_task_id;
  validation_failure_message := _kickoff.validation_failure_message;
end;
$$;
