-- accounts: accounts, their flags, and the two processes of account deletion.
--
-- Domain data: account (mutable: anonymization overwrites its personal fields).
-- Facts (append-only; a statement-level trigger refuses updates):
--   account_flag                         'deleted' (deletion requested), 'anonymized'
--   account_deletion_task                root: one per account, from api.request_account_deletion
--   account_deletion_supervisor_run      one row per non-terminal supervisor run (run cap)
--   account_deletion_task_succeeded      terminal: files deleted and account anonymized
--   account_deletion_task_failed         terminal: a child is stuck, or runs exhausted
--   account_anonymization_task           root: one per account, started by the deletion
--   account_anonymization_attempt        one row per anonymization run (pure SQL, in-line)
--   account_anonymization_attempt_succeeded / _failed
--   account_anonymization_task_succeeded / _failed   terminal
-- Test hook (owner only, not a fact): anonymization_failure_injection.

create schema if not exists accounts;
revoke all on schema accounts from public;

create table if not exists accounts.account (
  account_id   bigint generated always as identity primary key,
  email        text check (length(email) <= 320),
  display_name text check (length(display_name) <= 200),
  created_at   timestamptz not null default now()
);
comment on table accounts.account is
  'Domain data, not a fact table: accounts.anonymize_account overwrites the personal fields.';

create table if not exists accounts.account_flag (
  account_id bigint not null references accounts.account on delete cascade,
  flag       text not null check (flag in ('deleted', 'anonymized')),
  created_at timestamptz not null default now(),
  primary key (account_id, flag)
);

-- Makes accounts.anonymize_account fail for one account, with error_message. A test
-- hook for the "anonymization stuck" path: only the owner can write it (no role has
-- table privileges), so neither a worker nor an app can set it.
create table if not exists accounts.anonymization_failure_injection (
  account_id    bigint primary key references accounts.account on delete cascade,
  error_message text not null
);

create table if not exists accounts.account_deletion_task (
  account_deletion_task_id bigint generated always as identity primary key,
  account_id               bigint not null unique references accounts.account on delete restrict,
  created_at               timestamptz not null default now()
);

create table if not exists accounts.account_deletion_supervisor_run (
  account_deletion_supervisor_run_id bigint generated always as identity primary key,
  account_deletion_task_id bigint not null references accounts.account_deletion_task on delete cascade,
  created_at               timestamptz not null default now()
);
create index if not exists account_deletion_supervisor_run_task_idx
  on accounts.account_deletion_supervisor_run (account_deletion_task_id);

create table if not exists accounts.account_deletion_task_succeeded (
  account_deletion_task_id bigint primary key references accounts.account_deletion_task on delete cascade,
  created_at               timestamptz not null default now()
);

create table if not exists accounts.account_deletion_task_failed (
  account_deletion_task_id bigint primary key references accounts.account_deletion_task on delete cascade,
  reason                   text not null,
  created_at               timestamptz not null default now()
);

create table if not exists accounts.account_anonymization_task (
  account_anonymization_task_id bigint generated always as identity primary key,
  account_id                    bigint not null unique references accounts.account on delete restrict,
  created_at                    timestamptz not null default now()
);

create table if not exists accounts.account_anonymization_attempt (
  account_anonymization_attempt_id bigint generated always as identity primary key,
  account_anonymization_task_id    bigint not null references accounts.account_anonymization_task on delete cascade,
  created_at                       timestamptz not null default now()
);
create index if not exists account_anonymization_attempt_task_idx
  on accounts.account_anonymization_attempt (account_anonymization_task_id);

create table if not exists accounts.account_anonymization_attempt_succeeded (
  account_anonymization_attempt_id bigint primary key references accounts.account_anonymization_attempt on delete cascade,
  created_at                       timestamptz not null default now()
);

create table if not exists accounts.account_anonymization_attempt_failed (
  account_anonymization_attempt_id bigint primary key references accounts.account_anonymization_attempt on delete cascade,
  error_message                    text not null,
  created_at                       timestamptz not null default now()
);

create table if not exists accounts.account_anonymization_task_succeeded (
  account_anonymization_task_id bigint primary key references accounts.account_anonymization_task on delete cascade,
  created_at                    timestamptz not null default now()
);

create table if not exists accounts.account_anonymization_task_failed (
  account_anonymization_task_id bigint primary key references accounts.account_anonymization_task on delete cascade,
  reason                        text not null,
  created_at                    timestamptz not null default now()
);

do $$
declare
  _table text;
begin
  foreach _table in array array[
    'account_flag', 'account_deletion_task', 'account_deletion_supervisor_run',
    'account_deletion_task_succeeded', 'account_deletion_task_failed',
    'account_anonymization_task', 'account_anonymization_attempt',
    'account_anonymization_attempt_succeeded', 'account_anonymization_attempt_failed',
    'account_anonymization_task_succeeded', 'account_anonymization_task_failed'
  ] loop
    if not exists (select 1 from pg_trigger
                    where tgrelid = to_regclass(format('accounts.%I', _table)) and tgname = 'forbid_update') then
      execute format('create trigger forbid_update before update on accounts.%I
                        for each statement execute function queues.forbid_fact_update()', _table);
    end if;
  end loop;
end;
$$;
