-- Retention of finished account deletions and anonymizations, off by default
-- (internal.process_retention has no row for account_deletion or account_anonymization
-- until an operator adds one). Deletes each root that finished longer ago than its
-- process's window, with its facts; the account row (anonymized) and its flags stay.
-- See sql/internal/retention.sql.

-- Owner only: prunes at _now, at most _limit roots per process. Returns the counts.
create or replace function accounts.prune_finished_processes_at(_now timestamptz, _limit integer)
  returns jsonb
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object(
    'account_deletion',
    (select count(*) from internal.prune_finished_roots('accounts', 'account_deletion', _now, _limit)),
    'account_anonymization',
    (select count(*) from internal.prune_finished_roots('accounts', 'account_anonymization', _now, _limit)))
$$;

-- A runnable db_function: prunes at now(), up to 10,000 roots per process per run.
create or replace function accounts.prune_finished_processes(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', accounts.prune_finished_processes_at(now(), 10000))
$$;

-- The worker runs it (from a schedule) through internal.run_function. Granted here, beside
-- the function, so that a migration including sql/accounts/privileges.sql before this file
-- does not name a function that does not exist yet.
grant execute on function accounts.prune_finished_processes(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('accounts.prune_finished_processes(jsonb)');
