-- Account anonymization, a pure SQL process on the shared skeleton
-- (sql/internal/sql_process.sql): each supervisor run that is not terminal runs
-- accounts.anonymize_account once, in a subtransaction, and records the attempt's outcome.
-- What is particular to it: the work, its limits, and what its parent asks.
--
--   accounts.kickoff_account_anonymization(account_id)   root + first run (idempotent)
--   accounts.account_anonymization_supervisor            db_function: internal.run_sql_process_supervisor
--   accounts.anonymize_account(account_id)                the work
--   accounts.is_account_anonymization_stuck(account_id)   for the parent

-- Attempts before the process gives up (and is "stuck").
create or replace function accounts.account_anonymization_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 3 $$;

-- The work: overwrite the account's personal data, flag it 'anonymized'. Idempotent.
-- Raises when accounts.anonymization_failure_injection has a row for the account (the
-- owner-only test hook for the stuck path).
create or replace function accounts.anonymize_account(_account_id bigint)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _injected text;
begin
  select i.error_message into _injected
    from accounts.anonymization_failure_injection i where i.account_id = _account_id;
  if _injected is not null then
    raise exception 'anonymization of account % failed: %', _account_id, _injected using errcode = 'P0001';
  end if;
  update accounts.account a set email = null, display_name = null
   where a.account_id = _account_id;
  update learning.profile p set display_name = null
   where p.account_id = _account_id;
  insert into accounts.account_flag (account_id, flag) values (_account_id, 'anonymized')
  on conflict do nothing;
end;
$$;

-- True when the account's anonymization has given up (terminal failure, or failed
-- attempts at the maximum).
create or replace function accounts.is_account_anonymization_stuck(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((
    select (internal.process_terminal_facts('accounts', 'account_anonymization', t.account_anonymization_task_id)).task_failure is not null
           or (internal.sql_attempt_facts('accounts', 'account_anonymization', t.account_anonymization_task_id)).num_failures
                >= accounts.account_anonymization_max_attempts()
      from accounts.account_anonymization_task t
     where t.account_id = _account_id), false)
$$;

-- Payload: {account_anonymization_task_id}. Raises 25000 outside READ COMMITTED. The
-- envelopes and the order of its checks: internal.run_sql_process_supervisor. A failed
-- attempt is retried after 5 s · 2^failures, capped at an hour.
create or replace function accounts.account_anonymization_supervisor(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select internal.run_sql_process_supervisor('accounts', 'account_anonymization', 'accounts.account_anonymization_supervisor',
    payload, _work => 'accounts.anonymize_account(bigint)', _work_column => 'account_id',
    _max_attempts => accounts.account_anonymization_max_attempts(), _backoff_cap_seconds => 3600)
$$;

-- Kickoff (called by the account deletion supervisor): the root for the account and its
-- first run; a second call returns the existing root and enqueues nothing.
create or replace function accounts.kickoff_account_anonymization(_account_id bigint)
  returns bigint
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  select (internal.start_process('accounts', 'account_anonymization', 'accounts.account_anonymization_supervisor',
                                 'account_id', _account_id)).root_id
$$;
