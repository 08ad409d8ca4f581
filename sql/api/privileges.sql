-- Apps call the api functions; nothing else here.

revoke all on all tables in schema api from public;
revoke execute on all functions in schema api from public;

grant usage on schema api to :DATABASE_APP;

grant execute on function api.request_account_deletion(bigint) to :DATABASE_APP;
