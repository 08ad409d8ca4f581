--! Previous: -
--! Hash: sha1:b41f4115a13c780a3eeaef7d47f8796a79bdf9ba
--! Message: Baseline

-- Baseline: the schema as it stood when the first five migrations (queue foundation,
-- worker support and the business processes, retries and dead letters, faster hot paths,
-- claim-index vacuum settings) were squashed into this one. It builds the same catalog as
-- they did (tools/db/test/baseline.test.ts proves it); databases migrated with them are
-- moved onto this history by tools/db/src/legacy.ts.
--
-- Tables, indexes and triggers are written here, each table in one `create table`; later
-- changes to them go into new migrations. Functions and views come from their files in
-- sql/ (included), which hold their current definitions.

set local lock_timeout = '5s';

-- Functions are created without EXECUTE for PUBLIC: only explicit grants count.
-- (Only the global form works; a per-schema revoke of a default grant does nothing.)
alter default privileges revoke execute on routines from public;

--------------------------------------------------------------------------------------
-- queues: the generic task queue.
--
-- Facts (never updated; deletions only by retention tooling run as the owner):
--   task                   one row per unit of work, immutable
--   task_lease             one row per claim
--   task_lease_extension   a heartbeat that extended a lease
--   task_lease_release     a lease given back before expiry
--   task_lease_revocation  a lease taken from a worker that stopped heartbeating
--   task_attempt_failed    a failed attempt that will be retried
--   task_completed         terminal fact, at most one per task
--   task_redriven          a dead letter sent round again as a new task
--   error                  operational errors reported against a task
-- Derived (mutable, rebuildable from the facts by queues.rebuild_task_pending()):
--   task_pending           one row per task that is not completed; the claim index
--   resource_lease         which task holds each resource key, until when
-- Registry (mutable): task_type, worker.

create schema queues;
revoke all on schema queues from public;

-- The trigger functions the tables below use (forbid_fact_update, notify_task_ready).
--! Included queues/triggers.sql
-- Trigger functions of the queue's tables, also used by every domain's fact tables.

-- Facts are never updated: a statement-level `before update` trigger on every fact table
-- (queues, comms, files, accounts, schedules) calls this.
create or replace function queues.forbid_fact_update() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception '%.% is append-only: rows are never updated', tg_table_schema, tg_table_name
    using errcode = '55000';
end;
$$;

-- Wake listening workers: one notification per statement that adds ready work, not
-- one per row (NOTIFY takes a global lock at commit).
create or replace function queues.notify_task_ready() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform pg_notify('queues_task_ready', '');
  return null;
end;
$$;
--! EndIncluded queues/triggers.sql

create table queues.task_type (
  task_type     text primary key
                check (task_type ~ '^[a-z][a-z0-9_]{0,62}$'),
  description   text not null default '',
  registered_at timestamptz not null default now()
);
comment on table queues.task_type is
  'Task types a worker may be asked to process; queues.enqueue rejects any other.';

insert into queues.task_type (task_type, description) values
  ('db_function', 'A pure database step: internal.run_function(payload.db_function, payload).'),
  ('email',       'Send an email through the email provider, with before/success/error handlers.'),
  ('sms',         'Send an SMS through the SMS provider, with before/success/error handlers.'),
  ('file_delete', 'Delete a stored object through the files service, with handlers.');

create table queues.task (
  task_id       bigint generated always as identity primary key,
  task_type     text not null references queues.task_type on delete restrict,
  payload       jsonb not null check (jsonb_typeof(payload) = 'object'),
  -- Higher runs first. Same priority: scheduled_at, then task_id.
  priority      integer not null default 0 check (priority between -1000 and 1000),
  -- At most one task per resource key is leased at a time (null: no such limit).
  resource_key  text check (length(resource_key) between 1 and 200),
  -- Simple retries for tasks no supervisor drives: total runs allowed.
  max_attempts  integer not null default 1 check (max_attempts between 1 and 100),
  enqueued_at   timestamptz not null default now(),
  scheduled_at  timestamptz not null default now()
);
create trigger forbid_update before update on queues.task
  for each statement execute function queues.forbid_fact_update();
comment on table queues.task is 'A unit of work. Immutable: state lives in task_lease, task_completed and error.';

create table queues.task_lease (
  task_lease_id bigint generated always as identity primary key,
  task_id       bigint not null references queues.task on delete cascade,
  worker_id     text not null check (length(worker_id) between 1 and 200),
  leased_at     timestamptz not null default now(),
  expires_at    timestamptz not null,
  check (expires_at > leased_at)
);
create index task_lease_task_id_idx on queues.task_lease (task_id);
create trigger forbid_update before update on queues.task_lease
  for each statement execute function queues.forbid_fact_update();
comment on table queues.task_lease is 'Append-only: one row per claim of a task.';

create table queues.task_completed (
  task_id       bigint primary key references queues.task on delete cascade,
  -- The lease the completing worker held (null: completed without a lease).
  task_lease_id bigint references queues.task_lease on delete cascade,
  completed_at  timestamptz not null default now(),
  outcome       text not null
                check (outcome in ('succeeded', 'failed', 'abandoned', 'cancelled'))
);
create index task_completed_lease_idx on queues.task_completed (task_lease_id);
-- Dead letters are read newest first; only unsuccessful completions are indexed.
create index task_completed_unsuccessful_idx
  on queues.task_completed (completed_at desc) where outcome <> 'succeeded';
-- Throughput and durations over a recent window (sql/admin) read completions by time.
create index task_completed_completed_at_idx on queues.task_completed (completed_at);
create trigger forbid_update before update on queues.task_completed
  for each statement execute function queues.forbid_fact_update();
comment on table queues.task_completed is 'Terminal fact: a completed task is never claimed again.';

create table queues.error (
  error_id      bigint generated always as identity primary key,
  task_id       bigint not null references queues.task on delete cascade,
  task_lease_id bigint references queues.task_lease on delete cascade,
  error_message text not null,
  created_at    timestamptz not null default now()
);
create index error_task_id_idx on queues.error (task_id);
create index error_task_lease_id_idx on queues.error (task_lease_id);
create trigger forbid_update before update on queues.error
  for each statement execute function queues.forbid_fact_update();
comment on table queues.error is 'Append-only operational errors reported against a task.';

-- The claim index. Not a fact: one row per task that is not completed, deleted on
-- completion, so the cost of a claim depends on pending work only, never on history.
-- Claiming updates the row (available_at moves to the lease expiry); that update is
-- what makes claims exclusive under READ COMMITTED, because a concurrent claimer that
-- reaches the row after the update re-evaluates `available_at <= now()` on the new
-- version and skips it. None of the updated columns is indexed, so the update is HOT.
--
-- Every task leaves a dead row here when it completes, at the front of the claim index,
-- where every claim starts reading. Vacuum it on a fixed number of dead rows (not a
-- fraction of a table that is small by design), unthrottled: it is a few MB at most.
-- With the default autovacuum_naptime (60 s) a busy queue still gathers a minute of dead
-- rows between vacuums; docs/operations.md recommends 10 s.
create table queues.task_pending (
  task_id          bigint primary key references queues.task on delete cascade,
  task_type        text not null,
  priority         integer not null,
  scheduled_at     timestamptz not null,
  resource_key     text,
  -- scheduled_at until the first claim, then the expiry of the current lease.
  available_at     timestamptz not null,
  current_lease_id bigint,
  lease_count      integer not null default 0,
  -- Leases released by their workers do not count towards abandoning a task.
  released_count   integer not null default 0,
  max_attempts     integer not null default 1,
  failed_attempts  integer not null default 0
) with (
  fillfactor = 80,
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_cost_delay = 0
);
create index task_pending_claim_idx
  on queues.task_pending (priority desc, scheduled_at, task_id);
create trigger notify_task_ready after insert on queues.task_pending
  for each statement execute function queues.notify_task_ready();
comment on table queues.task_pending is
  'Derived claim index: tasks not yet completed. Rebuild with queues.rebuild_task_pending().';

-- Heartbeats: each extension of a live lease, appended. A lease's expiry is the newest
-- extension's expires_at, or its own.
create table queues.task_lease_extension (
  task_lease_extension_id bigint generated always as identity primary key,
  task_lease_id bigint not null references queues.task_lease on delete cascade,
  extended_at   timestamptz not null default now(),
  expires_at    timestamptz not null,
  check (expires_at > extended_at)
);
create index task_lease_extension_lease_idx on queues.task_lease_extension (task_lease_id);
create trigger forbid_update before update on queues.task_lease_extension
  for each statement execute function queues.forbid_fact_update();
comment on table queues.task_lease_extension is 'Append-only: a lease extended by its worker''s heartbeat.';

-- A lease given back before it expired (graceful shutdown): the task is claimable at once,
-- and the release does not count towards abandoning the task.
create table queues.task_lease_release (
  task_lease_id bigint primary key references queues.task_lease on delete cascade,
  released_at   timestamptz not null default now()
);
create trigger forbid_update before update on queues.task_lease_release
  for each statement execute function queues.forbid_fact_update();
comment on table queues.task_lease_release is 'Append-only: a lease released by its worker before expiry.';

-- A live lease taken away from a worker that stopped heartbeating (stale recovery).
-- Unlike a release it counts as an expired lease towards abandoning the task.
create table queues.task_lease_revocation (
  task_lease_id bigint primary key references queues.task_lease on delete cascade,
  revoked_at    timestamptz not null default now(),
  reason        text not null
);
create trigger forbid_update before update on queues.task_lease_revocation
  for each statement execute function queues.forbid_fact_update();
comment on table queues.task_lease_revocation is 'Append-only: a lease revoked because its worker stopped heartbeating.';

-- Simple retries: a failed run of a task with max_attempts > 1 and attempts left, and
-- when it runs again. The task completes 'failed' after its last attempt.
create table queues.task_attempt_failed (
  task_attempt_failed_id bigint generated always as identity primary key,
  task_id       bigint not null references queues.task on delete cascade,
  task_lease_id bigint references queues.task_lease on delete cascade,
  failed_at     timestamptz not null default now(),
  retry_at      timestamptz not null
);
create index task_attempt_failed_task_idx on queues.task_attempt_failed (task_id);
create trigger forbid_update before update on queues.task_attempt_failed
  for each statement execute function queues.forbid_fact_update();
comment on table queues.task_attempt_failed is 'Append-only: a failed attempt of a task that will be retried.';

-- A dead letter sent round again: the new task copies the old one.
create table queues.task_redriven (
  task_id     bigint primary key references queues.task on delete cascade,
  new_task_id bigint not null references queues.task on delete cascade,
  redriven_at timestamptz not null default now()
);
create trigger forbid_update before update on queues.task_redriven
  for each statement execute function queues.forbid_fact_update();
comment on table queues.task_redriven is 'Append-only: a dead-lettered task redriven as new_task_id.';

-- Derived (like task_pending): which task holds each resource key, until when. At most
-- one task per resource key is leased at a time; the claim takes the key with an
-- upsert that waits for a concurrent claimer's decision, so two claimers cannot both
-- take it. Rebuilt from the leases by queues.rebuild_task_pending().
create table queues.resource_lease (
  resource_key text primary key,
  task_id      bigint not null references queues.task on delete cascade,
  expires_at   timestamptz not null
);
comment on table queues.resource_lease is 'Derived: the task holding each resource key and until when.';

-- Workers, as last seen by their heartbeats. Observability, not facts: kept current by
-- queues.record_worker_heartbeat and queues.record_worker_stopped.
create table queues.worker (
  worker_id    text primary key check (length(worker_id) between 1 and 200),
  task_types   text[] not null,
  started_at   timestamptz not null default now(),
  last_seen_at timestamptz not null default now(),
  stopped_at   timestamptz
);
comment on table queues.worker is 'Workers and their last heartbeat (mutable registry).';

--------------------------------------------------------------------------------------
-- internal: the function runner and its allowlist; operational settings.

create schema internal;
revoke all on schema internal from public;

-- Functions internal.run_function may call. One row per schema.function taking exactly
-- one jsonb argument and returning jsonb; add rows with internal.register_runnable_function.
create table internal.runnable_function (
  function_schema text not null,
  function_name   text not null,
  registered_at   timestamptz not null default now(),
  primary key (function_schema, function_name)
);
comment on table internal.runnable_function is
  'Allowlist of internal.run_function. Register with internal.register_runnable_function(regprocedure).';

-- Operational settings, owner-managed. Not facts: a knob an operator (or a test) turns.
--   backoff_scale  multiplies every supervisor backoff (default 1). 0.01 turns the
--                  5 s first retry into 50 ms, for tests and the demo.
create table internal.setting (
  name       text primary key check (name in ('backoff_scale')),
  value      text not null,
  updated_at timestamptz not null default now()
);
comment on table internal.setting is 'Operational settings (owner only). See sql/internal/settings.sql.';

--------------------------------------------------------------------------------------
-- comms: messages and the two send processes (email, sms).
--
-- Domain data (written once by the kickoff functions):
--   message, email_message, sms_message
-- Facts (append-only; a statement-level trigger refuses updates), per process X in
-- (send_email, send_sms):
--   X_task                the root: one per message, created by the kickoff
--   X_supervisor_run      one row per supervisor run that was not terminal (run cap)
--   X_attempt             one row per scheduled provider call
--   X_attempt_succeeded   the provider accepted the attempt (at most one per attempt)
--   X_attempt_failed      the provider refused it or the worker failed (at most one)
--   X_task_succeeded      terminal: the supervisor saw a succeeded attempt
--   X_task_failed         terminal: attempts or supervisor runs exhausted

create schema comms;
revoke all on schema comms from public;

create table comms.message (
  message_id      bigint generated always as identity primary key,
  channel         text not null check (channel in ('email', 'sms')),
  -- Set by apps that retry a send request: the same key returns the same message.
  idempotency_key text unique check (length(idempotency_key) between 1 and 200),
  created_at      timestamptz not null default now()
);
create trigger forbid_update before update on comms.message
  for each statement execute function queues.forbid_fact_update();
comment on table comms.message is 'One message to send, on one channel. Written once by a kickoff.';

create table comms.email_message (
  message_id   bigint primary key references comms.message on delete cascade,
  from_address text not null check (length(from_address) between 3 and 320),
  to_address   text not null check (length(to_address) between 3 and 320),
  subject      text not null check (length(subject) between 1 and 998),
  html         text not null check (length(html) <= 1000000),
  text_body    text check (length(text_body) <= 1000000),
  reply_to     text check (length(reply_to) between 3 and 320)
);
create trigger forbid_update before update on comms.email_message
  for each statement execute function queues.forbid_fact_update();

create table comms.sms_message (
  message_id  bigint primary key references comms.message on delete cascade,
  to_number   text not null check (to_number ~ '^\+[1-9][0-9]{6,14}$'),
  from_number text check (from_number ~ '^\+[1-9][0-9]{6,14}$'),
  body        text not null check (length(body) between 1 and 1600)
);
create trigger forbid_update before update on comms.sms_message
  for each statement execute function queues.forbid_fact_update();

-- send_email ------------------------------------------------------------------------

create table comms.send_email_task (
  send_email_task_id bigint generated always as identity primary key,
  message_id         bigint not null unique references comms.email_message on delete restrict,
  scheduled_at       timestamptz not null default now(),
  created_at         timestamptz not null default now()
);
create trigger forbid_update before update on comms.send_email_task
  for each statement execute function queues.forbid_fact_update();

create table comms.send_email_supervisor_run (
  send_email_supervisor_run_id bigint generated always as identity primary key,
  send_email_task_id bigint not null references comms.send_email_task on delete cascade,
  created_at         timestamptz not null default now()
);
create index send_email_supervisor_run_task_idx
  on comms.send_email_supervisor_run (send_email_task_id);
create trigger forbid_update before update on comms.send_email_supervisor_run
  for each statement execute function queues.forbid_fact_update();

create table comms.send_email_attempt (
  send_email_attempt_id bigint generated always as identity primary key,
  send_email_task_id    bigint not null references comms.send_email_task on delete cascade,
  created_at            timestamptz not null default now()
);
create index send_email_attempt_task_idx on comms.send_email_attempt (send_email_task_id);
create trigger forbid_update before update on comms.send_email_attempt
  for each statement execute function queues.forbid_fact_update();

create table comms.send_email_attempt_succeeded (
  send_email_attempt_id bigint primary key references comms.send_email_attempt on delete cascade,
  worker_payload        jsonb,
  created_at            timestamptz not null default now()
);
create trigger forbid_update before update on comms.send_email_attempt_succeeded
  for each statement execute function queues.forbid_fact_update();

create table comms.send_email_attempt_failed (
  send_email_attempt_id bigint primary key references comms.send_email_attempt on delete cascade,
  error_message         text not null,
  created_at            timestamptz not null default now()
);
create trigger forbid_update before update on comms.send_email_attempt_failed
  for each statement execute function queues.forbid_fact_update();

create table comms.send_email_task_succeeded (
  send_email_task_id bigint primary key references comms.send_email_task on delete cascade,
  created_at         timestamptz not null default now()
);
create trigger forbid_update before update on comms.send_email_task_succeeded
  for each statement execute function queues.forbid_fact_update();

create table comms.send_email_task_failed (
  send_email_task_id bigint primary key references comms.send_email_task on delete cascade,
  reason             text not null,
  created_at         timestamptz not null default now()
);
create trigger forbid_update before update on comms.send_email_task_failed
  for each statement execute function queues.forbid_fact_update();

-- send_sms --------------------------------------------------------------------------

create table comms.send_sms_task (
  send_sms_task_id bigint generated always as identity primary key,
  message_id       bigint not null unique references comms.sms_message on delete restrict,
  scheduled_at     timestamptz not null default now(),
  created_at       timestamptz not null default now()
);
create trigger forbid_update before update on comms.send_sms_task
  for each statement execute function queues.forbid_fact_update();

create table comms.send_sms_supervisor_run (
  send_sms_supervisor_run_id bigint generated always as identity primary key,
  send_sms_task_id bigint not null references comms.send_sms_task on delete cascade,
  created_at       timestamptz not null default now()
);
create index send_sms_supervisor_run_task_idx
  on comms.send_sms_supervisor_run (send_sms_task_id);
create trigger forbid_update before update on comms.send_sms_supervisor_run
  for each statement execute function queues.forbid_fact_update();

create table comms.send_sms_attempt (
  send_sms_attempt_id bigint generated always as identity primary key,
  send_sms_task_id    bigint not null references comms.send_sms_task on delete cascade,
  created_at          timestamptz not null default now()
);
create index send_sms_attempt_task_idx on comms.send_sms_attempt (send_sms_task_id);
create trigger forbid_update before update on comms.send_sms_attempt
  for each statement execute function queues.forbid_fact_update();

create table comms.send_sms_attempt_succeeded (
  send_sms_attempt_id bigint primary key references comms.send_sms_attempt on delete cascade,
  worker_payload      jsonb,
  created_at          timestamptz not null default now()
);
create trigger forbid_update before update on comms.send_sms_attempt_succeeded
  for each statement execute function queues.forbid_fact_update();

create table comms.send_sms_attempt_failed (
  send_sms_attempt_id bigint primary key references comms.send_sms_attempt on delete cascade,
  error_message       text not null,
  created_at          timestamptz not null default now()
);
create trigger forbid_update before update on comms.send_sms_attempt_failed
  for each statement execute function queues.forbid_fact_update();

create table comms.send_sms_task_succeeded (
  send_sms_task_id bigint primary key references comms.send_sms_task on delete cascade,
  created_at       timestamptz not null default now()
);
create trigger forbid_update before update on comms.send_sms_task_succeeded
  for each statement execute function queues.forbid_fact_update();

create table comms.send_sms_task_failed (
  send_sms_task_id bigint primary key references comms.send_sms_task on delete cascade,
  reason           text not null,
  created_at       timestamptz not null default now()
);
create trigger forbid_update before update on comms.send_sms_task_failed
  for each statement execute function queues.forbid_fact_update();

--------------------------------------------------------------------------------------
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

create schema accounts;
revoke all on schema accounts from public;

create table accounts.account (
  account_id   bigint generated always as identity primary key,
  email        text check (length(email) <= 320),
  display_name text check (length(display_name) <= 200),
  created_at   timestamptz not null default now()
);
comment on table accounts.account is
  'Domain data, not a fact table: accounts.anonymize_account overwrites the personal fields.';

create table accounts.account_flag (
  account_id bigint not null references accounts.account on delete cascade,
  flag       text not null check (flag in ('deleted', 'anonymized')),
  created_at timestamptz not null default now(),
  primary key (account_id, flag)
);
create trigger forbid_update before update on accounts.account_flag
  for each statement execute function queues.forbid_fact_update();

-- Makes accounts.anonymize_account fail for one account, with error_message. A test
-- hook for the "anonymization stuck" path: only the owner can write it (no role has
-- table privileges), so neither a worker nor an app can set it.
create table accounts.anonymization_failure_injection (
  account_id    bigint primary key references accounts.account on delete cascade,
  error_message text not null
);

create table accounts.account_deletion_task (
  account_deletion_task_id bigint generated always as identity primary key,
  account_id               bigint not null unique references accounts.account on delete restrict,
  created_at               timestamptz not null default now()
);
create trigger forbid_update before update on accounts.account_deletion_task
  for each statement execute function queues.forbid_fact_update();

create table accounts.account_deletion_supervisor_run (
  account_deletion_supervisor_run_id bigint generated always as identity primary key,
  account_deletion_task_id bigint not null references accounts.account_deletion_task on delete cascade,
  created_at               timestamptz not null default now()
);
create index account_deletion_supervisor_run_task_idx
  on accounts.account_deletion_supervisor_run (account_deletion_task_id);
create trigger forbid_update before update on accounts.account_deletion_supervisor_run
  for each statement execute function queues.forbid_fact_update();

create table accounts.account_deletion_task_succeeded (
  account_deletion_task_id bigint primary key references accounts.account_deletion_task on delete cascade,
  created_at               timestamptz not null default now()
);
create trigger forbid_update before update on accounts.account_deletion_task_succeeded
  for each statement execute function queues.forbid_fact_update();

create table accounts.account_deletion_task_failed (
  account_deletion_task_id bigint primary key references accounts.account_deletion_task on delete cascade,
  reason                   text not null,
  created_at               timestamptz not null default now()
);
create trigger forbid_update before update on accounts.account_deletion_task_failed
  for each statement execute function queues.forbid_fact_update();

create table accounts.account_anonymization_task (
  account_anonymization_task_id bigint generated always as identity primary key,
  account_id                    bigint not null unique references accounts.account on delete restrict,
  created_at                    timestamptz not null default now()
);
create trigger forbid_update before update on accounts.account_anonymization_task
  for each statement execute function queues.forbid_fact_update();

create table accounts.account_anonymization_attempt (
  account_anonymization_attempt_id bigint generated always as identity primary key,
  account_anonymization_task_id    bigint not null references accounts.account_anonymization_task on delete cascade,
  created_at                       timestamptz not null default now()
);
create index account_anonymization_attempt_task_idx
  on accounts.account_anonymization_attempt (account_anonymization_task_id);
create trigger forbid_update before update on accounts.account_anonymization_attempt
  for each statement execute function queues.forbid_fact_update();

create table accounts.account_anonymization_attempt_succeeded (
  account_anonymization_attempt_id bigint primary key references accounts.account_anonymization_attempt on delete cascade,
  created_at                       timestamptz not null default now()
);
create trigger forbid_update before update on accounts.account_anonymization_attempt_succeeded
  for each statement execute function queues.forbid_fact_update();

create table accounts.account_anonymization_attempt_failed (
  account_anonymization_attempt_id bigint primary key references accounts.account_anonymization_attempt on delete cascade,
  error_message                    text not null,
  created_at                       timestamptz not null default now()
);
create trigger forbid_update before update on accounts.account_anonymization_attempt_failed
  for each statement execute function queues.forbid_fact_update();

create table accounts.account_anonymization_task_succeeded (
  account_anonymization_task_id bigint primary key references accounts.account_anonymization_task on delete cascade,
  created_at                    timestamptz not null default now()
);
create trigger forbid_update before update on accounts.account_anonymization_task_succeeded
  for each statement execute function queues.forbid_fact_update();

create table accounts.account_anonymization_task_failed (
  account_anonymization_task_id bigint primary key references accounts.account_anonymization_task on delete cascade,
  reason                        text not null,
  created_at                    timestamptz not null default now()
);
create trigger forbid_update before update on accounts.account_anonymization_task_failed
  for each statement execute function queues.forbid_fact_update();

--------------------------------------------------------------------------------------
-- files: stored objects and the file deletion process.
--
-- Domain data: file (one stored object, owned by an account). A completed upload is a
-- file row; upload intents are out of scope here.
-- Facts (append-only; a statement-level trigger refuses updates):
--   file_metadata                    metadata documents; the latest row is current
--   file_deletion_task               root: one per file
--   file_deletion_supervisor_run     one row per non-terminal supervisor run (run cap)
--   file_deletion_attempt            one row per scheduled file_delete channel task
--   file_deletion_attempt_succeeded / _failed
--   file_deletion_task_succeeded / _failed   terminal

create schema files;
revoke all on schema files from public;

create table files.file (
  file_id    bigint generated always as identity primary key,
  account_id bigint not null references accounts.account on delete restrict,
  -- The provider schema's bucket rule (@org/handler-types fileDeletePayload).
  bucket     text not null check (bucket ~ '^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$'),
  object_key text not null check (length(object_key) between 1 and 1024),
  created_at timestamptz not null default now()
);
create index file_account_idx on files.file (account_id);

create table files.file_metadata (
  file_metadata_id bigint generated always as identity primary key,
  file_id          bigint not null references files.file on delete cascade,
  metadata         jsonb not null check (jsonb_typeof(metadata) = 'object'),
  created_at       timestamptz not null default now()
);
create index file_metadata_file_idx on files.file_metadata (file_id, file_metadata_id desc);
create trigger forbid_update before update on files.file_metadata
  for each statement execute function queues.forbid_fact_update();
comment on table files.file_metadata is
  'Append-only metadata documents per file; the row with the highest id is current (files.current_file_metadata).';

create table files.file_deletion_task (
  file_deletion_task_id bigint generated always as identity primary key,
  file_id               bigint not null unique references files.file on delete restrict,
  created_at            timestamptz not null default now()
);
create trigger forbid_update before update on files.file_deletion_task
  for each statement execute function queues.forbid_fact_update();

create table files.file_deletion_supervisor_run (
  file_deletion_supervisor_run_id bigint generated always as identity primary key,
  file_deletion_task_id bigint not null references files.file_deletion_task on delete cascade,
  created_at            timestamptz not null default now()
);
create index file_deletion_supervisor_run_task_idx
  on files.file_deletion_supervisor_run (file_deletion_task_id);
create trigger forbid_update before update on files.file_deletion_supervisor_run
  for each statement execute function queues.forbid_fact_update();

create table files.file_deletion_attempt (
  file_deletion_attempt_id bigint generated always as identity primary key,
  file_deletion_task_id    bigint not null references files.file_deletion_task on delete cascade,
  created_at               timestamptz not null default now()
);
create index file_deletion_attempt_task_idx on files.file_deletion_attempt (file_deletion_task_id);
create trigger forbid_update before update on files.file_deletion_attempt
  for each statement execute function queues.forbid_fact_update();

create table files.file_deletion_attempt_succeeded (
  file_deletion_attempt_id bigint primary key references files.file_deletion_attempt on delete cascade,
  worker_payload           jsonb,
  created_at               timestamptz not null default now()
);
create trigger forbid_update before update on files.file_deletion_attempt_succeeded
  for each statement execute function queues.forbid_fact_update();

create table files.file_deletion_attempt_failed (
  file_deletion_attempt_id bigint primary key references files.file_deletion_attempt on delete cascade,
  error_message            text not null,
  created_at               timestamptz not null default now()
);
create trigger forbid_update before update on files.file_deletion_attempt_failed
  for each statement execute function queues.forbid_fact_update();

create table files.file_deletion_task_succeeded (
  file_deletion_task_id bigint primary key references files.file_deletion_task on delete cascade,
  created_at            timestamptz not null default now()
);
create trigger forbid_update before update on files.file_deletion_task_succeeded
  for each statement execute function queues.forbid_fact_update();

create table files.file_deletion_task_failed (
  file_deletion_task_id bigint primary key references files.file_deletion_task on delete cascade,
  reason                text not null,
  created_at            timestamptz not null default now()
);
create trigger forbid_update before update on files.file_deletion_task_failed
  for each statement execute function queues.forbid_fact_update();

--------------------------------------------------------------------------------------
-- learning: the account data the account deletion checklist touches. A profile belongs
-- to an account; a recording is a profile's answer to a cue, stored as a file.
-- Domain data (anonymization overwrites profile.display_name).

create schema learning;
revoke all on schema learning from public;

create table learning.profile (
  profile_id   bigint generated always as identity primary key,
  account_id   bigint not null references accounts.account on delete restrict,
  display_name text check (length(display_name) <= 200),
  created_at   timestamptz not null default now()
);
create index profile_account_idx on learning.profile (account_id);

create table learning.cue (
  cue_id     bigint generated always as identity primary key,
  prompt     text not null check (length(prompt) between 1 and 2000),
  created_at timestamptz not null default now()
);

create table learning.profile_cue_recording (
  profile_cue_recording_id bigint generated always as identity primary key,
  profile_id               bigint not null references learning.profile on delete restrict,
  cue_id                   bigint not null references learning.cue on delete restrict,
  file_id                  bigint not null references files.file on delete restrict,
  created_at               timestamptz not null default now()
);
create index profile_cue_recording_profile_idx on learning.profile_cue_recording (profile_id);
create index profile_cue_recording_file_idx on learning.profile_cue_recording (file_id);

--------------------------------------------------------------------------------------
-- api: the functions applications call for requests that span domains. Each is a
-- security definer wrapper over a domain's kickoff; apps get usage on this schema only.

create schema api;
revoke all on schema api from public;

--------------------------------------------------------------------------------------
-- admin: what the operations API (packages/api) reads and calls. Every function here is
-- a security definer over the queue's and the domains' tables: the API role
-- (:DATABASE_API) has no table privileges, only EXECUTE on the functions listed in
-- sql/admin/privileges.sql.
--
-- Cost rule for everything here: proportional to pending work, to a recent window of
-- completions, or to one task's facts; never to the whole history.

create schema admin;
revoke all on schema admin from public;

--------------------------------------------------------------------------------------
-- schedules: recurring schedules (cron, UTC) driven by a SQL supervisor, and the
-- facts that say which fire times were enqueued or skipped.
--
-- Facts (never updated):
--   schedule          one row per schedule name: its identity
--   schedule_version  every definition a schedule has had (cron, task, enabled, ...);
--                     the newest row is in force
--   schedule_run      one row per fire time handled: enqueued (with its task) or skipped
--   supervisor_task   every schedule_supervisor task enqueued, to find the pending one

create schema schedules;
revoke all on schema schedules from public;

-- The seed's worker roles (docs/seeds role-based-worker-system.md). Workers claim them by
-- task type; the schedules below (and the staggered batches) enqueue them.
insert into queues.task_type (task_type, description) values
  ('store_discovery',       'Find new stores (seed role; weekly schedule).'),
  ('entry_point_discovery', 'Resolve a new store''s platform id (seed role; chained from store_discovery).'),
  ('product_discovery',     'Initial product crawl of a new store (seed role; chained from entry_point_discovery).'),
  ('product_resync',        'Regular price and stock update of one store (seed role; every 4 hours, staggered).'),
  ('analytics_refresh',     'Refresh analytics views (seed role; daily schedule).');

create table schedules.schedule (
  schedule_id bigint generated always as identity primary key,
  name        text not null unique check (name ~ '^[a-z][a-z0-9_.-]{0,99}$'),
  created_at  timestamptz not null default now()
);
create trigger forbid_update before update on schedules.schedule
  for each statement execute function queues.forbid_fact_update();
comment on table schedules.schedule is 'A named recurring schedule. Its definition lives in schedule_version.';

create table schedules.schedule_version (
  schedule_version_id bigint generated always as identity primary key,
  schedule_id         bigint not null references schedules.schedule on delete cascade,
  -- 5-field cron, evaluated in UTC (see schedules.parse_cron).
  cron                text not null check (length(cron) between 1 and 200),
  task_type           text not null references queues.task_type on delete restrict,
  payload             jsonb not null check (jsonb_typeof(payload) = 'object'),
  priority            integer not null check (priority between -1000 and 1000),
  missed_run_policy   text not null check (missed_run_policy in ('skip', 'catch_up_once')),
  enabled             boolean not null,
  -- Fire times at or before this instant are never due under this definition: the
  -- creation time of the schedule, of its last enabling, or of its last cron change.
  fires_after         timestamptz not null,
  created_at          timestamptz not null default now()
);
create index schedule_version_schedule_idx
  on schedules.schedule_version (schedule_id, schedule_version_id desc);
create trigger forbid_update before update on schedules.schedule_version
  for each statement execute function queues.forbid_fact_update();
comment on table schedules.schedule_version is
  'Append-only: each definition of a schedule. The newest row per schedule is in force.';

create table schedules.schedule_run (
  schedule_run_id     bigint generated always as identity primary key,
  schedule_id         bigint not null references schedules.schedule on delete cascade,
  schedule_version_id bigint not null references schedules.schedule_version on delete cascade,
  -- The (latest) fire time handled. Unique: a fire time is enqueued at most once.
  fire_at             timestamptz not null,
  -- The earliest fire time this row covers (= fire_at unless runs were missed).
  first_fire_at       timestamptz not null,
  outcome             text not null check (outcome in ('enqueued', 'skipped')),
  -- The task enqueued (null when skipped). Not a foreign key: queue retention may delete
  -- old tasks, and this fact must stay, or the fire time would be due again.
  task_id             bigint,
  enqueued_at         timestamptz not null default now(),
  unique (schedule_id, fire_at),
  check (first_fire_at <= fire_at),
  check ((outcome = 'enqueued') = (task_id is not null))
);
create trigger forbid_update before update on schedules.schedule_run
  for each statement execute function queues.forbid_fact_update();
comment on table schedules.schedule_run is
  'Append-only: fire times handled by the supervisor, enqueued (with the task) or skipped.';

create table schedules.supervisor_task (
  task_id      bigint primary key,
  scheduled_at timestamptz not null,
  enqueued_at  timestamptz not null default now()
);
create trigger forbid_update before update on schedules.supervisor_task
  for each statement execute function queues.forbid_fact_update();
comment on table schedules.supervisor_task is
  'Append-only: schedule_supervisor tasks enqueued; the pending one is found through queues.task_pending.';

--------------------------------------------------------------------------------------
-- Views and functions: their current definitions live in sql/, one concern per file.
-- Order matters: SQL-language bodies are checked when created, so a function comes after
-- the functions and views it calls; each schema's privileges.sql comes last.

--! Included queues/task_lease_effective.sql
-- Each lease with the expiry in force: released, else extended, else as claimed.
create or replace view queues.task_lease_effective as
select l.task_lease_id, l.task_id, l.worker_id, l.leased_at,
       coalesce(r.released_at, v.revoked_at, e.expires_at, l.expires_at) as expires_at,
       r.released_at,
       coalesce(e.extensions, 0) as extensions,
       v.revoked_at
  from queues.task_lease l
  left join queues.task_lease_release r on r.task_lease_id = l.task_lease_id
  left join queues.task_lease_revocation v on v.task_lease_id = l.task_lease_id
  left join lateral (
    select max(x.expires_at) as expires_at, count(*)::integer as extensions
      from queues.task_lease_extension x
     where x.task_lease_id = l.task_lease_id
  ) e on true;
comment on view queues.task_lease_effective is 'Leases with their effective expiry (releases and heartbeats applied).';
--! EndIncluded queues/task_lease_effective.sql
--! Included queues/enqueue.sql
-- queues.enqueue / queues.enqueue_many: add tasks. Used by SQL (supervisors, kickoff
-- functions) and by apps through @org/queue-client; the worker never enqueues.

-- Payloads are limited so one bad caller cannot fill the table or the worker's memory.
create or replace function queues.max_payload_bytes() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 1048576 $$;

-- Validates one task's fields; raises a clear error naming the offending field.
-- _where prefixes messages ('' for a single task, 'tasks[3]: ' in a batch).
create or replace function queues.assert_valid_task(
  _task_type text, _payload jsonb, _priority integer, _resource_key text,
  _max_attempts integer, _where text default ''
) returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_type is null then
    raise exception '%task_type must not be null', _where using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception '%unknown task_type %', _where, quote_literal(left(_task_type, 100))
      using errcode = '22023',
            hint = 'Known task types are listed in queues.task_type.';
  end if;
  if _payload is null then
    raise exception '%payload must not be null', _where using errcode = '22004';
  end if;
  if jsonb_typeof(_payload) <> 'object' then
    raise exception '%payload must be a JSON object, got %', _where, jsonb_typeof(_payload)
      using errcode = '22023';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    raise exception '%payload is % bytes, over the limit of % bytes',
      _where, pg_column_size(_payload), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  if _priority is not null and _priority not between -1000 and 1000 then
    raise exception '%priority must be between -1000 and 1000, got %', _where, _priority
      using errcode = '22023';
  end if;
  if _resource_key is not null and length(_resource_key) not between 1 and 200 then
    raise exception '%resource_key must be 1 to 200 characters', _where using errcode = '22023';
  end if;
  if _max_attempts is not null and _max_attempts not between 1 and 100 then
    raise exception '%max_attempts must be between 1 and 100, got %', _where, _max_attempts
      using errcode = '22023';
  end if;
end;
$$;

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, one attempt), since generated clients send undefined as NULL.
create or replace function queues.enqueue(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task queues.task;
begin
  perform queues.assert_valid_task(_task_type, _payload, _priority, _resource_key, _max_attempts);

  insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
  values (_task_type, _payload, coalesce(_priority, 0), _resource_key,
          coalesce(_max_attempts, 1), coalesce(_scheduled_at, now()))
  returning * into _task;

  insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts)
  values (_task.task_id, _task.task_type, _task.priority, _task.scheduled_at,
          _task.resource_key, _task.scheduled_at, _task.max_attempts);

  return _task.task_id;
end;
$$;

-- Enqueue many tasks in one statement. _tasks is a JSON array of objects:
--   {"task_type": "...", "payload": {...}, "scheduled_at"?: "...", "priority"?: 0,
--    "resource_key"?: "...", "max_attempts"?: 1}
-- Returns the task_ids in input order. All or nothing: one bad element rejects the batch.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _problem record;
begin
  if _tasks is null then
    raise exception 'tasks must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_tasks) <> 'array' then
    raise exception 'tasks must be a JSON array, got %', jsonb_typeof(_tasks) using errcode = '22023';
  end if;
  if jsonb_array_length(_tasks) > 10000 then
    raise exception 'at most 10000 tasks per call, got %', jsonb_array_length(_tasks)
      using errcode = '54000';
  end if;

  -- Every element checked in one set-based pass (as queues.assert_valid_task checks a
  -- single task); the first problem, in input order, is raised.
  select p.idx, p.code, p.message into _problem
    from (
      select e.ordinality - 1 as idx, c.code, c.message
        from jsonb_array_elements(_tasks) with ordinality e
        cross join lateral (
          select case
            when jsonb_typeof(e.value) <> 'object' then '22023'
            when u.keys is not null then '22023'
            when e.value ->> 'task_type' is null then '22004'
            when t.task_type is null then '22023'
            when e.value -> 'payload' is null then '22004'
            when jsonb_typeof(e.value -> 'payload') <> 'object' then '22023'
            when pg_column_size(e.value -> 'payload') > queues.max_payload_bytes() then '54000'
            when (e.value ->> 'priority')::integer not between -1000 and 1000 then '22023'
            when length(e.value ->> 'resource_key') not between 1 and 200 then '22023'
            when (e.value ->> 'max_attempts')::integer not between 1 and 100 then '22023'
          end as code,
          case
            when jsonb_typeof(e.value) <> 'object' then format('must be a JSON object, got %s', jsonb_typeof(e.value))
            when u.keys is not null then format('unknown field(s) %s', left(u.keys, 200))
            when e.value ->> 'task_type' is null then 'task_type must not be null'
            when t.task_type is null then format('unknown task_type %s', quote_literal(left(e.value ->> 'task_type', 100)))
            when e.value -> 'payload' is null then 'payload must not be null'
            when jsonb_typeof(e.value -> 'payload') <> 'object' then format('payload must be a JSON object, got %s', jsonb_typeof(e.value -> 'payload'))
            when pg_column_size(e.value -> 'payload') > queues.max_payload_bytes() then
              format('payload is %s bytes, over the limit of %s bytes', pg_column_size(e.value -> 'payload'), queues.max_payload_bytes())
            when (e.value ->> 'priority')::integer not between -1000 and 1000 then
              format('priority must be between -1000 and 1000, got %s', e.value ->> 'priority')
            when length(e.value ->> 'resource_key') not between 1 and 200 then 'resource_key must be 1 to 200 characters'
            when (e.value ->> 'max_attempts')::integer not between 1 and 100 then
              format('max_attempts must be between 1 and 100, got %s', e.value ->> 'max_attempts')
          end as message
          from (select 1) one
          left join lateral (
            select string_agg(k, ', ') as keys
              from jsonb_object_keys(case when jsonb_typeof(e.value) = 'object' then e.value else '{}' end) k
             where k not in ('task_type', 'payload', 'scheduled_at', 'priority', 'resource_key', 'max_attempts')
          ) u on true
          left join queues.task_type t
            on jsonb_typeof(e.value) = 'object' and t.task_type = e.value ->> 'task_type'
        ) c
    ) p
   where p.code is not null
   order by p.idx
   limit 1;
  if found and _problem.message like 'unknown task_type%' then
    raise exception 'tasks[%]: %', _problem.idx, _problem.message using errcode = _problem.code,
      hint = 'Known task types are listed in queues.task_type.';
  elsif found then
    raise exception 'tasks[%]: %', _problem.idx, _problem.message using errcode = _problem.code;
  end if;

  return query
  with input as (
    select e.ordinality - 1 as idx, r.*
      from jsonb_array_elements(_tasks) with ordinality e,
           jsonb_to_record(e.value) as r(task_type text, payload jsonb, scheduled_at timestamptz,
                                         priority integer, resource_key text, max_attempts integer)
  ),
  inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
    select c.task_type, c.payload, coalesce(c.priority, 0), c.resource_key,
           coalesce(c.max_attempts, 1), coalesce(c.scheduled_at, now())
      from input c
     order by c.idx
    returning *
  ),
  pending as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts)
    select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts
      from inserted i
  )
  select i.task_id from inserted i order by i.task_id;
end;
$$;
--! EndIncluded queues/enqueue.sql
--! Included queues/claim.sql
-- Claiming: queues.claim_tasks (batch), queues.dequeue_next_available_task (the seeds'
-- single claim), both on top of queues.claim_tasks_at, which takes the clock as an
-- argument so tests can move time forward. Only the owner may call claim_tasks_at:
-- a worker that chose its own clock could take live leases.
--
-- Resource keys: at most one task per resource_key is leased at a time; the others wait
-- (they are skipped, not failed) until the holder completes, releases or lets its lease
-- expire. A long queue of tasks blocked on one key is re-read by each claim.
--
-- Poison tasks: a task that comes up for claiming after _max_leases leases expired
-- without completion (releases and reported failed attempts excepted) is completed as
-- 'abandoned' with an error
-- instead of being leased again, so a task that kills its worker cannot loop forever.

create or replace function queues.claim_tasks_at(
  _now           timestamptz,
  _worker_id     text,
  _limit         integer,
  _task_types    text[],
  _lease_seconds integer,
  _max_leases    integer
) returns table (
  task_id       bigint,
  task_type     text,
  payload       jsonb,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  task_lease_id bigint,
  leased_at     timestamptz,
  expires_at    timestamptz,
  lease_count   integer
)
  language plpgsql volatile
  rows 10
  security definer
  -- Planned once, not per call: the statements below have one good plan whatever the
  -- arguments (index order with a LIMIT; primary-key probes), and planning was about
  -- 40% of the call's cost.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _limit is null or _limit not between 1 and 1000 then
    raise exception 'limit must be between 1 and 1000, got %', coalesce(_limit::text, 'null')
      using errcode = '22023';
  end if;
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;
  if _max_leases is null or _max_leases not between 1 and 100 then
    raise exception 'max_leases must be between 1 and 100, got %', coalesce(_max_leases::text, 'null')
      using errcode = '22023';
  end if;
  if _task_types is not null and cardinality(_task_types) = 0 then
    raise exception 'task_types must be null (any type) or name at least one type'
      using errcode = '22023';
  end if;

  return query
  with picked as (
    -- SKIP LOCKED skips rows another claimer holds; the update below makes any claimer
    -- that arrives after our commit re-check available_at on the new row version.
    select p.task_id, p.current_lease_id, p.resource_key, p.priority, p.scheduled_at,
           -- Leases that ended neither by a release nor by a reported failed attempt:
           -- they expired (or were revoked) while a worker held them.
           p.lease_count - p.released_count - p.failed_attempts >= _max_leases as poisoned,
           p.lease_count - p.released_count - p.failed_attempts as expired_leases
      from queues.task_pending p
     where p.available_at <= _now
       and (_task_types is null or p.task_type = any (_task_types))
       -- Tasks whose resource key another task holds wait (the upsert below decides).
       and (p.resource_key is null or not exists (
             select 1 from queues.resource_lease r
              where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
     order by p.priority desc, p.scheduled_at, p.task_id
     limit _limit
       for update skip locked
  ),
  -- Resource keys: one task per key in this batch, and only if no other task holds the
  -- key. The upsert decides on the newest committed row (not this statement's snapshot),
  -- so two claimers never both take a key.
  -- Suspects (tasks whose last lease expired: their worker may have died of them) are
  -- leased one per claim, so the tasks a crashed worker held, which all come back at the
  -- same moment, do not all land in one worker again beside the task that crashed it.
  allowed as (
    select pk.task_id, pk.resource_key, pk.priority, pk.scheduled_at
      from (select pk.*,
                   row_number() over (partition by pk.expired_leases > 0
                                      order by pk.priority desc, pk.scheduled_at, pk.task_id) as rank
              from picked pk
             where not pk.poisoned) pk
     where pk.expired_leases = 0 or pk.rank = 1
  ),
  keyed as (
    select k.task_id, k.resource_key
      from (select distinct on (pk.resource_key) pk.task_id, pk.resource_key
              from allowed pk
             where pk.resource_key is not null
             order by pk.resource_key, pk.priority desc, pk.scheduled_at, pk.task_id) k
     -- Skip a key another transaction is working on (see queues.lock_resource_keys):
     -- a claim never waits, so it cannot be part of a deadlock.
     where pg_try_advisory_xact_lock(20251, hashtext(k.resource_key))
  ),
  key_taken as (
    insert into queues.resource_lease as r (resource_key, task_id, expires_at)
    select k.resource_key, k.task_id, _now + make_interval(secs => _lease_seconds) from keyed k
    on conflict (resource_key) do update
       set task_id = excluded.task_id, expires_at = excluded.expires_at
     where r.expires_at <= _now or r.task_id = excluded.task_id
    returning r.task_id
  ),
  eligible as (
    select pk.task_id
      from allowed pk
     where pk.resource_key is null or pk.task_id in (select kt.task_id from key_taken kt)
  ),
  abandoned_error as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select pk.task_id, pk.current_lease_id,
           format('abandoned: %s leases expired without completion (max_leases %s)', pk.expired_leases, _max_leases)
      from picked pk where pk.poisoned
  ),
  abandoned as (
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome)
    select pk.task_id, pk.current_lease_id, _now, 'abandoned' from picked pk where pk.poisoned
  ),
  abandoned_removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select pk.task_id from picked pk where pk.poisoned))
  ),
  leased as (
    insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
    select e.task_id, _worker_id, _now, _now + make_interval(secs => _lease_seconds)
      from eligible e
    returning *
  ),
  -- Plan shapes below are chosen so that cost follows the claimed rows only, whatever
  -- the planner estimates for _limit: `= any(array(...))` probes the primary key, and
  -- the lateral `limit 1` keeps the task lookup a nested loop over the claimed ids.
  moved as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds),
           current_lease_id = (select l.task_lease_id from leased l where l.task_id = p.task_id),
           lease_count = p.lease_count + 1
     where p.task_id = any (array(select l.task_id from leased l))
    returning p.task_id, p.lease_count
  )
  select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
         t.enqueued_at, t.scheduled_at, l.task_lease_id, l.leased_at, l.expires_at, m.lease_count
    from leased l
    join moved m on m.task_id = l.task_id
   cross join lateral (
     select * from queues.task t where t.task_id = l.task_id limit 1
   ) t
   order by t.priority desc, t.scheduled_at, t.task_id;
end;
$$;

-- Claim up to _limit ready tasks (optionally only of _task_types) for _worker_id, each
-- with a new lease of _lease_seconds (default 300). Ready: not completed, scheduled_at
-- reached, no live lease. Order: priority desc, scheduled_at, task_id. Tasks that had
-- _max_leases (default 5) leases expire are abandoned instead (see above).
create or replace function queues.claim_tasks(
  _worker_id     text,
  _limit         integer default null,
  _task_types    text[] default null,
  _lease_seconds integer default null,
  _max_leases    integer default null
) returns table (
  task_id       bigint,
  task_type     text,
  payload       jsonb,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  task_lease_id bigint,
  leased_at     timestamptz,
  expires_at    timestamptz,
  lease_count   integer
)
  language sql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.claim_tasks_at(now(), _worker_id, coalesce(_limit, 1), _task_types,
                                      coalesce(_lease_seconds, 300), coalesce(_max_leases, 5))
$$;

-- The seeds' single claim: one ready task with a new lease, or no row.
create or replace function queues.dequeue_next_available_task(
  _worker_id     text default null,
  _lease_seconds integer default null
) returns setof queues.task
  language sql volatile
  rows 1
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  -- The columns of queues.task, in table order.
  select c.task_id, c.task_type, c.payload, c.priority, c.resource_key, c.max_attempts,
         c.enqueued_at, c.scheduled_at
    from queues.claim_tasks_at(now(), coalesce(_worker_id, session_user::text), 1, null,
                               coalesce(_lease_seconds, 300), 5) c
$$;
--! EndIncluded queues/claim.sql
--! Included queues/complete.sql
-- Completion: queues.complete_task (one) and queues.complete_tasks (a batch).
--
-- Fencing: a caller that passes the lease it holds can only complete while that lease
-- is the task's newest one. A worker whose lease expired and was re-claimed by another
-- worker gets 'lease_lost' and changes nothing.

-- Completes a batch. Parallel arrays: _task_lease_ids and _outcomes may be null (no
-- fencing, outcome 'succeeded') or have one element per task (elements may be null).
-- A 'failed' outcome for a task with max_attempts > 1 and attempts left is not terminal:
-- the attempt is recorded (queues.task_attempt_failed) and the task runs again after an
-- exponential backoff (internal.backoff).
-- Returns one row per input task, in input order: result is
--   'completed'          this call completed it
--   'retry_scheduled'    a failed attempt of a task that runs again
--   'already_completed'  it was completed before, under the same lease or without one
--                        (idempotent; nothing changed)
--   'lease_lost'         _task_lease_id is not the task's current lease, or the task was
--                        completed under another lease (nothing changed)
--   'unknown_task'       no such task
create or replace function queues.complete_tasks(
  _task_ids       bigint[],
  _task_lease_ids bigint[] default null,
  _outcomes       text[] default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  -- Planned once, not per call: the statements below have one good plan whatever the
  -- arguments (index order with a LIMIT; primary-key probes), and planning was about
  -- 40% of the call's cost.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _bad text;
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 tasks per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain null' using errcode = '22004';
  end if;
  if _task_lease_ids is not null and cardinality(_task_lease_ids) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids must have one element per task (% tasks, % lease ids)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if _outcomes is not null and cardinality(_outcomes) <> cardinality(_task_ids) then
    raise exception 'outcomes must have one element per task (% tasks, % outcomes)',
      cardinality(_task_ids), cardinality(_outcomes) using errcode = '22023';
  end if;
  select o into _bad from unnest(_outcomes) o
   where o is not null and o not in ('succeeded', 'failed', 'abandoned', 'cancelled') limit 1;
  if found then
    raise exception 'unknown outcome %; expected succeeded, failed, abandoned or cancelled',
      quote_literal(left(_bad, 100)) using errcode = '22023';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;

  perform queues.lock_resource_keys(_task_ids);

  return query
  with input as (
    select i.task_id, i.task_lease_id, coalesce(i.outcome, 'succeeded') as outcome, i.ord
      from unnest(_task_ids,
                  coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])),
                  coalesce(_outcomes, array_fill(null::text, array[cardinality(_task_ids)])))
           with ordinality as i(task_id, task_lease_id, outcome, ord)
  ),
  -- The pending rows this call may act on, locked: a concurrent claim skips them, a
  -- concurrent completion waits and then finds nothing.
  held as (
    select p.task_id, p.current_lease_id, p.resource_key, i.task_lease_id, i.outcome,
           i.outcome = 'failed' and p.failed_attempts + 1 < p.max_attempts as retry,
           p.failed_attempts
      from queues.task_pending p
      join input i on i.task_id = p.task_id
     where i.task_lease_id is null or p.current_lease_id = i.task_lease_id
       for update of p
  ),
  -- Simple retries: a failed attempt with attempts left runs again after a backoff.
  retry_facts as (
    insert into queues.task_attempt_failed (task_id, task_lease_id, failed_at, retry_at)
    select h.task_id, h.current_lease_id, now(), now() + internal.backoff(h.failed_attempts, 3600)
      from held h where h.retry
    returning task_id, retry_at
  ),
  retried as (
    update queues.task_pending p
       set available_at = (select r.retry_at from retry_facts r where r.task_id = p.task_id),
           current_lease_id = null,
           failed_attempts = p.failed_attempts + 1
     where p.task_id = any (array(select r.task_id from retry_facts r))
    returning p.task_id
  ),
  removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select h.task_id from held h where not h.retry))
    returning p.task_id
  ),
  completed as (
    insert into queues.task_completed (task_id, task_lease_id, outcome)
    select h.task_id, coalesce(h.task_lease_id, h.current_lease_id), h.outcome
      from held h where not h.retry
    on conflict do nothing
    returning task_completed.task_id
  ),
  -- The task's resource key (if any) is free again, whether it completed or waits to retry.
  unlocked as (
    delete from queues.resource_lease r
     using held h
     where h.resource_key is not null and r.resource_key = h.resource_key and r.task_id = h.task_id
  )
  select i.task_id,
         case
           when c.task_id is not null then 'completed'
           when rt.task_id is not null then 'retry_scheduled'
           -- Completed under another lease: the caller's lease was taken over, and its
           -- transaction must not commit as if it had completed the task.
           when exists (select 1 from queues.task_completed tc
                         where tc.task_id = i.task_id
                           and i.task_lease_id is not null
                           and tc.task_lease_id is distinct from i.task_lease_id)
             then 'lease_lost'
           when exists (select 1 from queues.task_completed tc where tc.task_id = i.task_id)
             then 'already_completed'
           when not exists (select 1 from queues.task t where t.task_id = i.task_id)
             then 'unknown_task'
           else 'lease_lost'
         end
    from input i
    left join completed c on c.task_id = i.task_id
    left join retried rt on rt.task_id = i.task_id
   order by i.ord;
end;
$$;

-- The seeds' completion, extended: idempotent (true when this call completed the task or
-- scheduled its retry, false when it was already completed); fenced when _task_lease_id
-- is given (raises when that lease is no longer current); raises for an unknown task.
create or replace function queues.complete_task(
  _task_id       bigint,
  _task_lease_id bigint default null,
  _outcome       text default null
) returns boolean
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result text;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  select c.result into _result
    from queues.complete_tasks(array[_task_id], array[_task_lease_id], array[_outcome]) c;
  if _result = 'unknown_task' then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  elsif _result = 'lease_lost' then
    raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', hint = 'Another worker claimed the task after this lease expired.';
  end if;
  return _result in ('completed', 'retry_scheduled');
end;
$$;
--! EndIncluded queues/complete.sql
--! Included queues/lease.sql
-- Heartbeats and releases of leases. Both act only on a task's current lease: a worker
-- whose lease was taken over learns it from the missing row and must stop.

-- Validates parallel arrays of task ids and lease ids.
create or replace function queues.assert_lease_pairs(_task_ids bigint[], _task_lease_ids bigint[])
  returns void
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_ids is null or _task_lease_ids is null then
    raise exception 'task_ids and task_lease_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) <> cardinality(_task_lease_ids) then
    raise exception 'task_ids and task_lease_ids must have the same length (% and %)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 leases per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null then
    raise exception 'task_ids and task_lease_ids must not contain null' using errcode = '22004';
  end if;
end;
$$;

-- Resource-key locks. Everything that changes queues.resource_lease holds the key's
-- transaction-scoped advisory lock (class 20251, hashtext(key)) while it does: the claim
-- takes it with pg_try_advisory_xact_lock and skips a key it cannot get, so a claim
-- never waits on a key; the others (completion, heartbeat, release, revocation) take
-- theirs in one global order with this function, so they cannot deadlock each other.
create or replace function queues.lock_resource_keys(_task_ids bigint[])
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text;
begin
  for _key in
    select distinct p.resource_key
      from queues.task_pending p
     where p.task_id = any (_task_ids) and p.resource_key is not null
     order by 1
  loop
    perform pg_advisory_xact_lock(20251, hashtext(_key));
  end loop;
end;
$$;

-- Extends each given lease that is still its task's current lease to _now + _lease_seconds
-- and appends a queues.task_lease_extension fact. Parallel arrays of task and lease ids.
-- Returns the leases extended; a lease missing from the result was lost (the task was
-- re-claimed after an expiry, or completed).
create or replace function queues.extend_leases_at(
  _now            timestamptz,
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _lease_seconds  integer
) returns table (task_id bigint, task_lease_id bigint, expires_at timestamptz)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;

  return query
  with extended as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds)
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
     where p.task_id = i.task_id
       and p.current_lease_id = i.task_lease_id
    returning p.task_id, p.current_lease_id, p.available_at, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_extension (task_lease_id, extended_at, expires_at)
    select e.current_lease_id, _now, e.available_at from extended e
  ),
  key_extended as (
    update queues.resource_lease r
       set expires_at = e.available_at
      from extended e
     where e.resource_key is not null and r.resource_key = e.resource_key and r.task_id = e.task_id
  )
  select e.task_id, e.current_lease_id, e.available_at from extended e;
end;
$$;

create or replace function queues.extend_leases(
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _lease_seconds  integer default null
) returns table (task_id bigint, task_lease_id bigint, expires_at timestamptz)
  language sql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.extend_leases_at(now(), _task_ids, _task_lease_ids, coalesce(_lease_seconds, 300))
$$;

-- Gives leases back before they expire (graceful shutdown): each task whose current lease
-- is given becomes claimable at once, and the release is not counted towards abandoning
-- it. The lease ends there: completing, failing or extending with it is refused.
-- Returns the task ids released; wakes listening workers.
create or replace function queues.release_leases(
  _task_ids       bigint[],
  _task_lease_ids bigint[]
) returns table (task_id bigint)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _released bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);

  with released as (
    update queues.task_pending p
       set available_at = now(),
           -- A released lease is no longer held: its worker can neither extend it nor
           -- complete or record against it.
           current_lease_id = null,
           released_count = p.released_count + 1
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
     where p.task_id = i.task_id
       and p.current_lease_id = i.task_lease_id
    returning p.task_id, i.task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_release (task_lease_id)
    select r.task_lease_id from released r
    on conflict do nothing
  ),
  key_freed as (
    delete from queues.resource_lease k
     using released r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select array_agg(r.task_id order by r.task_id) into _released from released r;

  if _released is not null then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select unnest(coalesce(_released, '{}'));
end;
$$;
--! EndIncluded queues/lease.sql
--! Included queues/fail.sql
-- queues.fail_task: record an operational error against a task. Append-only and not
-- terminal: the worker completes the task afterwards (supervisors decide on retries).
-- Fenced like completion: with _task_lease_id, only the task's newest lease, neither
-- released nor revoked, may record.

create or replace function queues.max_error_message_length() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 10000 $$;

create or replace function queues.fail_task(
  _task_id       bigint,
  _error_message text,
  _task_lease_id bigint default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _error_id bigint;
  _message text := _error_message;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  if _message is null or btrim(_message) = '' then
    raise exception 'error_message must not be empty' using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task t where t.task_id = _task_id) then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  if _task_lease_id is not null then
    if not exists (select 1 from queues.task_lease l
                    where l.task_lease_id = _task_lease_id and l.task_id = _task_id) then
      raise exception 'lease % does not belong to task %', _task_lease_id, _task_id
        using errcode = '22023';
    end if;
    if exists (select 1 from queues.task_lease l
                where l.task_id = _task_id and l.task_lease_id > _task_lease_id)
       or exists (select 1 from queues.task_lease_release r where r.task_lease_id = _task_lease_id)
       or exists (select 1 from queues.task_lease_revocation v where v.task_lease_id = _task_lease_id) then
      raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
        using errcode = '55000', hint = 'Another worker claimed the task after this lease expired.';
    end if;
  end if;
  if length(_message) > queues.max_error_message_length() then
    _message := left(_message, queues.max_error_message_length()) || ' [truncated]';
  end if;

  insert into queues.error (task_id, task_lease_id, error_message)
  values (_task_id, _task_lease_id, _message)
  returning error_id into _error_id;
  return _error_id;
end;
$$;
--! EndIncluded queues/fail.sql
--! Included queues/workers.sql
-- The worker registry and stale recovery. Workers report in on every heartbeat tick;
-- a worker not seen for a while is presumed dead, and the live leases it holds can be
-- revoked at once instead of waiting for them to expire.

-- Called by each worker on start and on every heartbeat tick.
create or replace function queues.record_worker_heartbeat(_worker_id text, _task_types text[])
  returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _task_types is null or cardinality(_task_types) = 0 or array_position(_task_types, null) is not null then
    raise exception 'task_types must name at least one task type' using errcode = '22023';
  end if;
  insert into queues.worker as w (worker_id, task_types)
  values (_worker_id, _task_types)
  on conflict (worker_id) do update
     set task_types = excluded.task_types, last_seen_at = now(), stopped_at = null;
end;
$$;

-- Called by a worker that stops cleanly.
create or replace function queues.record_worker_stopped(_worker_id text)
  returns void
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  update queues.worker set stopped_at = now(), last_seen_at = now() where worker_id = _worker_id
$$;

-- Live leases held by workers not seen for _dead_after_seconds (and not stopped), at _now.
create or replace function queues.stale_leases_at(_now timestamptz, _dead_after_seconds integer)
  returns table (task_id bigint, task_lease_id bigint, worker_id text, last_seen_at timestamptz, expires_at timestamptz)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.task_id, p.current_lease_id, l.worker_id, w.last_seen_at, p.available_at
    from queues.task_pending p
    join queues.task_lease l on l.task_lease_id = p.current_lease_id
    join queues.worker w on w.worker_id = l.worker_id
   where p.available_at > _now
     and w.stopped_at is null
     and w.last_seen_at < _now - make_interval(secs => _dead_after_seconds)
$$;

-- The stale leases now, for workers presumed dead after 10 minutes of silence.
create or replace view queues.stale_lease as
select * from queues.stale_leases_at(now(), 600);
comment on view queues.stale_lease is 'Live leases held by workers not seen for 10 minutes.';

-- Revokes the stale leases (see stale_leases_at): their tasks are claimable at once. A
-- revocation counts as an expired lease towards abandoning the task, and the revoked
-- worker can no longer complete or record against it. Returns what was revoked.
create or replace function queues.recover_stale_leases_at(_now timestamptz, _dead_after_seconds integer)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _dead_after_seconds is null or _dead_after_seconds not between 1 and 604800 then
    raise exception 'dead_after_seconds must be between 1 and 604800, got %', coalesce(_dead_after_seconds::text, 'null')
      using errcode = '22023';
  end if;
  perform queues.lock_resource_keys(array(select s.task_id from queues.stale_leases_at(_now, _dead_after_seconds) s));
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id from queues.stale_leases_at(_now, _dead_after_seconds) s
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
    returning p.task_id, s.task_lease_id, s.worker_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_lease_id, revoked_at, reason)
    select r.task_lease_id, _now, format('worker %s not seen for %s s', r.worker_id, _dead_after_seconds) from revoked r
  ),
  key_freed as (
    delete from queues.resource_lease k
     using revoked r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select r.task_id, r.task_lease_id, r.worker_id from revoked r;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$$;

create or replace function queues.recover_stale_leases(_dead_after_seconds integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.recover_stale_leases_at(now(), coalesce(_dead_after_seconds, 600))
$$;
--! EndIncluded queues/workers.sql
--! Included queues/dead_letter.sql
-- Dead letters: tasks that ended badly with nobody else to deal with it, and redrive.
--
-- A task is a dead letter when it completed 'abandoned', or 'failed' without an
-- error_handler in its payload (a task with an error handler hands its failures to a
-- supervisor, which retries on its own), and it has not been redriven.

create or replace view queues.dead_letter as
select t.task_id, t.task_type, t.payload, c.outcome, c.completed_at,
       (select e.error_message from queues.error e where e.task_id = t.task_id
         order by e.error_id desc limit 1) as last_error,
       (select count(*)::integer from queues.task_lease l where l.task_id = t.task_id) as attempts
  from queues.task_completed c
  join queues.task t on t.task_id = c.task_id
 where c.outcome <> 'succeeded'
   and (c.outcome = 'abandoned' or (c.outcome = 'failed' and not t.payload ? 'error_handler'))
   and not exists (select 1 from queues.task_redriven r where r.task_id = t.task_id);
comment on view queues.dead_letter is 'Tasks that ended failed or abandoned with no handler to deal with it, not yet redriven.';

-- Sends a dead letter round again: a new task with the same type, payload, priority,
-- resource key and max_attempts, runnable now. Returns the new task id.
create or replace function queues.redrive_task(_task_id bigint)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task queues.task;
  _new_task_id bigint;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  select * into _task from queues.task t where t.task_id = _task_id;
  if not found then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  -- Serialise redrives of one task on its completion row.
  perform 1 from queues.task_completed c where c.task_id = _task_id for update;
  if exists (select 1 from queues.task_redriven r where r.task_id = _task_id) then
    raise exception 'task % was already redriven', _task_id using errcode = '22023';
  end if;
  if not exists (select 1 from queues.dead_letter d where d.task_id = _task_id) then
    raise exception 'task % is not a dead letter', _task_id using errcode = '22023',
      hint = 'Only tasks that completed failed (without an error handler) or abandoned can be redriven.';
  end if;
  _new_task_id := queues.enqueue(_task.task_type, _task.payload, now(), _task.priority,
                                 _task.resource_key, _task.max_attempts);
  insert into queues.task_redriven (task_id, new_task_id) values (_task_id, _new_task_id);
  return _new_task_id;
end;
$$;
--! EndIncluded queues/dead_letter.sql
--! Included queues/maintenance.sql
-- Maintenance of the derived structures (task_pending, resource_lease). Owner only.

-- Rebuilds queues.task_pending and queues.resource_lease from the facts: every task
-- without a completion, available at its scheduled time, the retry time of its last
-- failed attempt, or the effective expiry of its newest lease (heartbeats, releases and
-- revocations applied), whichever is latest. Returns the number of pending tasks.
create or replace function queues.rebuild_task_pending() returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _count bigint;
begin
  lock table queues.task_pending, queues.resource_lease in exclusive mode;
  delete from queues.task_pending;
  delete from queues.resource_lease;
  insert into queues.task_pending
    (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
     lease_count, released_count, max_attempts, failed_attempts)
  select t.task_id, t.task_type, t.priority, t.scheduled_at, t.resource_key,
         greatest(t.scheduled_at,
                  -- a lease ended by a failed attempt gives way to the attempt's retry time
                  case when f.task_lease_id is null or f.task_lease_id < l.task_lease_id then l.expires_at end,
                  f.retry_at),
         -- A lease ended by a release, a revocation or a later failed attempt is not held.
         case when l.released_at is null and l.revoked_at is null
                   and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id)
              then l.task_lease_id end,
         coalesce(l.lease_count, 0), coalesce(l.released_count, 0),
         t.max_attempts, coalesce(f.failed_attempts, 0)
    from queues.task t
    left join lateral (
      select le.task_lease_id, le.expires_at, le.released_at, le.revoked_at,
             count(*) over () :: integer as lease_count,
             count(le.released_at) over () :: integer as released_count
        from queues.task_lease_effective le
       where le.task_id = t.task_id
       order by le.task_lease_id desc
       limit 1
    ) l on true
    left join lateral (
      select a.retry_at, a.task_lease_id, count(*) over () :: integer as failed_attempts
        from queues.task_attempt_failed a
       where a.task_id = t.task_id
       order by a.task_attempt_failed_id desc
       limit 1
    ) f on true
   where not exists (select 1 from queues.task_completed c where c.task_id = t.task_id);
  get diagnostics _count = row_count;

  -- Each resource key held by a live lease, as the claim left it.
  insert into queues.resource_lease (resource_key, task_id, expires_at)
  select distinct on (p.resource_key) p.resource_key, p.task_id, p.available_at
    from queues.task_pending p
   where p.resource_key is not null and p.current_lease_id is not null
   order by p.resource_key, p.available_at desc;
  return _count;
end;
$$;
--! EndIncluded queues/maintenance.sql
--! Included queues/privileges.sql
-- Who may call what in queues. Roles come from placeholders (see .gmrc):
--   :DATABASE_WORKER  the worker: claim, extend and release leases, complete, fail.
--                     No table privileges.
--   :DATABASE_APP     applications: enqueue.
-- Every function starts with EXECUTE revoked from PUBLIC; grants are explicit.

revoke all on all tables in schema queues from public;
revoke all on all sequences in schema queues from public;
revoke execute on all functions in schema queues from public;

grant usage on schema queues to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  queues.claim_tasks(text, integer, text[], integer, integer),
  queues.extend_leases(bigint[], bigint[], integer),
  queues.release_leases(bigint[], bigint[]),
  queues.dequeue_next_available_task(text, integer),
  queues.complete_task(bigint, bigint, text),
  queues.complete_tasks(bigint[], bigint[], text[]),
  queues.fail_task(bigint, text, bigint),
  queues.record_worker_heartbeat(text, text[]),
  queues.record_worker_stopped(text)
to :DATABASE_WORKER;

grant execute on function
  queues.enqueue(text, jsonb, timestamptz, integer, text, integer),
  queues.enqueue_many(jsonb)
to :DATABASE_APP;
--! EndIncluded queues/privileges.sql

--! Included internal/run_function.sql
-- internal.run_function(function_name, payload): the worker's way into business SQL.
--
-- The name is checked against a strict pattern, resolved to exactly one function
-- schema.name(jsonb) returning jsonb, checked against the allowlist and the caller's
-- EXECUTE privilege, and called through format('%I.%I'), never by pasting the name.
-- pg_catalog, information_schema and temporary schemas are never runnable.

-- Registers a function as runnable. Owner only; called from migrations.
create or replace function internal.register_runnable_function(_function regprocedure)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _proc record;
begin
  if _function is null then
    raise exception 'function must not be null' using errcode = '22004';
  end if;
  select n.nspname, p.proname, p.prorettype, p.pronargs, p.proargtypes[0] as argtype, p.prokind
    into _proc
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where p.oid = _function;
  if _proc.nspname in ('pg_catalog', 'information_schema') or _proc.nspname like 'pg\_%' then
    raise exception 'functions in % cannot be runnable', _proc.nspname using errcode = '42501';
  end if;
  if _proc.prokind <> 'f' or _proc.pronargs <> 1 or _proc.argtype <> 'jsonb'::regtype
     or _proc.prorettype <> 'jsonb'::regtype then
    raise exception '% must be a function taking one jsonb argument and returning jsonb', _function
      using errcode = '22023';
  end if;
  if _proc.nspname !~ '^[a-z_][a-z0-9_]*$' or _proc.proname !~ '^[a-z_][a-z0-9_]*$' then
    raise exception '% must have a lowercase schema.name made of a-z, 0-9 and _', _function
      using errcode = '22023';
  end if;
  insert into internal.runnable_function (function_schema, function_name)
  values (_proc.nspname, _proc.proname)
  on conflict do nothing;
end;
$$;

-- Resolves a runnable function name to its OID, or raises a clear error. Security
-- definer so that callers need no privilege on the allowlist table.
create or replace function internal.resolve_runnable_function(_function_name text)
  returns regprocedure
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _parts text[];
  _oid regprocedure;
begin
  if _function_name is null then
    raise exception 'function_name must not be null' using errcode = '22004';
  end if;
  _parts := regexp_match(_function_name, '^([a-z_][a-z0-9_]{0,62})\.([a-z_][a-z0-9_]{0,62})$');
  if _parts is null then
    raise exception 'invalid function_name %: expected schema.function in lowercase letters, digits and _, with no argument list',
      quote_literal(left(_function_name, 100)) using errcode = '22023';
  end if;
  if _parts[1] in ('pg_catalog', 'information_schema') or _parts[1] like 'pg\_%' then
    raise exception 'function % is in a system or temporary schema and is never runnable',
      _function_name using errcode = '42501';
  end if;
  _oid := to_regprocedure(format('%I.%I(jsonb)', _parts[1], _parts[2]));
  if _oid is null then
    raise exception 'function %(jsonb) does not exist', _function_name using errcode = '42883';
  end if;
  if not exists (select 1 from internal.runnable_function r
                  where r.function_schema = _parts[1] and r.function_name = _parts[2]) then
    raise exception 'function % is not registered as runnable', _function_name
      using errcode = '42501',
            hint = 'Register it in a migration: select internal.register_runnable_function(''schema.name(jsonb)'');';
  end if;
  if (select p.prorettype from pg_proc p where p.oid = _oid) <> 'jsonb'::regtype then
    raise exception 'function % does not return jsonb', _function_name using errcode = '42804';
  end if;
  return _oid;
end;
$$;

-- Runs a registered function with the payload and returns its jsonb. Security invoker:
-- the caller needs EXECUTE on the target itself.
create or replace function internal.run_function(function_name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _oid regprocedure := internal.resolve_runnable_function(function_name);
  _schema name;
  _name name;
  _result jsonb;
begin
  if not has_function_privilege(_oid, 'execute') then
    raise exception 'permission denied: % may not execute %', current_user, function_name
      using errcode = '42501';
  end if;
  select n.nspname, p.proname into _schema, _name
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where p.oid = _oid;
  execute format('select %I.%I($1::jsonb)', _schema, _name) into _result using payload;
  return _result;
end;
$$;

-- A runnable no-op: returns the success envelope. Used by benchmarks and smoke tests.
create or replace function internal.noop(payload jsonb) returns jsonb
  language sql immutable
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select jsonb_build_object('success', true) $$;
--! EndIncluded internal/run_function.sql
--! Included internal/settings.sql
-- Operational settings, owner-managed (the table internal.setting): a knob an operator
-- (or a test) turns.
--   backoff_scale  multiplies every supervisor backoff (default 1). 0.01 turns the
--                  5 s first retry into 50 ms, for tests and the demo.

-- The wait before a supervisor's next check: 5 s * 2^_exponent, at most _cap_seconds,
-- times backoff_scale.
create or replace function internal.backoff(_exponent integer, _cap_seconds integer)
  returns interval
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select make_interval(secs =>
    least(_cap_seconds, 5 * power(2, greatest(coalesce(_exponent, 0), 0)))
    * coalesce((select s.value::numeric from internal.setting s where s.name = 'backoff_scale'), 1))
$$;
--! EndIncluded internal/settings.sql
--! Included internal/process_support.sql
-- Helpers shared by every business process (comms, files, accounts, schedules):
-- reading ids from payloads, the validation-failure envelope, and the isolation guard
-- of supervisors. Called only from security definer functions: no grants.

-- A positive bigint id read from a jsonb object, or NULL when the key is missing, not
-- an integer, or out of range. Supervisors and handlers validate with this instead of
-- casting, so a malformed payload is a validation failure, not an exception.
create or replace function internal.id_from_payload(_payload jsonb, _key text)
  returns bigint
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select case
    when jsonb_typeof(_payload) = 'object'
     and jsonb_typeof(_payload -> _key) in ('number', 'string')
     and (_payload ->> _key) ~ '^[1-9][0-9]{0,17}$'
    then (_payload ->> _key)::bigint
  end
$$;

-- The envelope for input a function cannot act on: non-retriable, nothing written.
create or replace function internal.validation_failure(_message text)
  returns jsonb
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', false, 'validation_failure_message', _message)
$$;

-- Refuses to run a supervisor outside READ COMMITTED. A supervisor serialises on its
-- root row, then reads facts. Under READ COMMITTED every statement after the lock wait
-- takes a fresh snapshot and sees what the previous holder committed; under REPEATABLE
-- READ (or SERIALIZABLE) the snapshot is from before the wait, so two runs would both
-- see "no outstanding attempt" and schedule two.
create or replace function internal.assert_read_committed(_function_name text)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception '% must run under READ COMMITTED, not %', _function_name,
      upper(current_setting('transaction_isolation'))
      using errcode = '25000',
            detail = 'Under REPEATABLE READ or SERIALIZABLE the lock on the root row does not stop double scheduling: facts read after the lock wait come from a snapshot taken before it.',
            hint = 'Call supervisors in a READ COMMITTED transaction (the default).';
  end if;
end;
$$;
--! EndIncluded internal/process_support.sql
--! Included internal/privileges.sql
-- Who may call what in internal. The worker runs registered functions through
-- internal.run_function; it also needs EXECUTE on each target (granted beside it).

revoke all on all tables in schema internal from public;
revoke execute on all functions in schema internal from public;

grant usage on schema internal to :DATABASE_WORKER;

grant execute on function
  internal.run_function(text, jsonb),
  internal.resolve_runnable_function(text),
  internal.noop(jsonb)
to :DATABASE_WORKER;

select internal.register_runnable_function('internal.noop(jsonb)');
--! EndIncluded internal/privileges.sql

--! Included comms/util.sql
-- Small helpers shared by the comms processes. Called only from definer functions:
-- no grants.

-- The email address check of the provider schema (@org/handler-types emailPayload uses
-- zod's z.email()): kickoffs refuse what the worker would refuse later.
create or replace function comms.is_email_address(_address text)
  returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select _address is not null and length(_address) <= 320
     and _address ~ '^(?!\.)(?!.*\.\.)([A-Za-z0-9_''+\-\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\-]*\.)+[A-Za-z]{2,}$'
$$;

-- An E.164 phone number, as the provider schema (smsPayload) requires.
create or replace function comms.is_e164_number(_number text)
  returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select _number is not null and _number ~ '^\+[1-9][0-9]{6,14}$'
$$;
--! EndIncluded comms/util.sql
--! Included comms/email.sql
-- The send-email process: facts → logic → effects, then the handlers the worker calls
-- around the provider, then the kickoffs.
--
--   comms.send_email(...)             app: create the message and kick off (idempotent)
--   comms.kickoff_send_email(id)      root task + first supervisor task (idempotent)
--   comms.send_email_supervisor       db_function: decides, schedules, re-enqueues itself
--   comms.get_email_payload           before_handler: the provider payload
--   comms.record_email_success        success_handler: attempt succeeded fact
--   comms.record_email_failure        error_handler: attempt failed fact

-- Limits ------------------------------------------------------------------------------

-- Provider calls per message: the first and two retries.
create or replace function comms.send_email_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 3 $$;

-- Non-terminal supervisor runs per message. A loop bug (or a flood of duplicate
-- supervisor tasks) ends in send_email_task_failed('run_limit_reached') instead of
-- running forever. With the backoff below, 30 runs span about 21 hours.
create or replace function comms.send_email_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 30 $$;

-- Facts -------------------------------------------------------------------------------

create or replace function comms.has_send_email_succeeded_attempt(_send_email_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from comms.send_email_attempt a
      join comms.send_email_attempt_succeeded s using (send_email_attempt_id)
     where a.send_email_task_id = _send_email_task_id)
$$;

create or replace function comms.count_send_email_attempts(_send_email_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_email_attempt a
   where a.send_email_task_id = _send_email_task_id
$$;

-- Failed attempts. An attempt with both outcomes (a redelivered task whose success
-- arrived after a failure) counts as succeeded, not failed.
create or replace function comms.count_send_email_failed_attempts(_send_email_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_email_attempt a
    join comms.send_email_attempt_failed f using (send_email_attempt_id)
   where a.send_email_task_id = _send_email_task_id
     and not exists (select 1 from comms.send_email_attempt_succeeded s
                      where s.send_email_attempt_id = a.send_email_attempt_id)
$$;

-- Attempts with no outcome yet: the provider call is queued or in flight.
create or replace function comms.count_send_email_outstanding_attempts(_send_email_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_email_attempt a
   where a.send_email_task_id = _send_email_task_id
     and not exists (select 1 from comms.send_email_attempt_succeeded s
                      where s.send_email_attempt_id = a.send_email_attempt_id)
     and not exists (select 1 from comms.send_email_attempt_failed f
                      where f.send_email_attempt_id = a.send_email_attempt_id)
$$;

create or replace function comms.count_send_email_supervisor_runs(_send_email_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_email_supervisor_run r
   where r.send_email_task_id = _send_email_task_id
$$;

create or replace function comms.has_send_email_task_succeeded(_send_email_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from comms.send_email_task_succeeded t
                  where t.send_email_task_id = _send_email_task_id)
$$;

-- The terminal failure reason, or NULL while the process has not failed.
create or replace function comms.get_send_email_task_failure(_send_email_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from comms.send_email_task_failed t
   where t.send_email_task_id = _send_email_task_id
$$;

-- Everything the supervisor decides on, in one record: call it by hand to see what
-- the supervisor saw (select * from comms.send_email_supervisor_facts(123)).
create or replace function comms.send_email_supervisor_facts(
  _send_email_task_id bigint,
  out has_task_succeeded boolean,
  out task_failure       text,
  out has_success        boolean,
  out num_attempts       integer,
  out num_failures       integer,
  out num_outstanding    integer,
  out num_runs           integer,
  out scheduled_at       timestamptz
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select comms.has_send_email_task_succeeded(t.send_email_task_id),
         comms.get_send_email_task_failure(t.send_email_task_id),
         comms.has_send_email_succeeded_attempt(t.send_email_task_id),
         comms.count_send_email_attempts(t.send_email_task_id),
         comms.count_send_email_failed_attempts(t.send_email_task_id),
         comms.count_send_email_outstanding_attempts(t.send_email_task_id),
         comms.count_send_email_supervisor_runs(t.send_email_task_id),
         t.scheduled_at
    from comms.send_email_task t
   where t.send_email_task_id = _send_email_task_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row for the rest of the transaction; false when there is no such row.
-- FOR NO KEY UPDATE, not FOR UPDATE: it serialises supervisors exactly as well (the two
-- modes conflict with themselves), but it does not conflict with the FOR KEY SHARE lock
-- that inserting a referencing row takes, so handlers and other writers of facts that
-- reference the root never wait on a running supervisor.
create or replace function comms.lock_send_email_task(_send_email_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from comms.send_email_task t
   where t.send_email_task_id = _send_email_task_id
     for no key update;
  return found;
end;
$$;

create or replace function comms.record_send_email_supervisor_run(_send_email_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_email_supervisor_run (send_email_task_id) values (_send_email_task_id)
$$;

create or replace function comms.record_send_email_task_succeeded(_send_email_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_email_task_succeeded (send_email_task_id) values (_send_email_task_id)
  on conflict do nothing
$$;

create or replace function comms.record_send_email_task_failed(_send_email_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_email_task_failed (send_email_task_id, reason) values (_send_email_task_id, _reason)
  on conflict do nothing
$$;

-- Records an attempt and enqueues the email channel task for it; returns the attempt id.
create or replace function comms.schedule_email_attempt(_send_email_task_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint;
begin
  insert into comms.send_email_attempt (send_email_task_id) values (_send_email_task_id)
  returning send_email_attempt_id into _attempt_id;

  perform queues.enqueue('email', jsonb_build_object(
    'task_type', 'email',
    'send_email_task_id', _send_email_task_id,
    'send_email_attempt_id', _attempt_id,
    'before_handler', 'comms.get_email_payload',
    'success_handler', 'comms.record_email_success',
    'error_handler', 'comms.record_email_failure'));
  return _attempt_id;
end;
$$;

-- Enqueues the next supervisor run and returns its time: after an exponential backoff
-- on the runs so far, 5 s · 2^(runs − 1), capped at an hour. Every failure costs a run, so retries back off exponentially; and waiting on
-- a slow attempt backs off too, instead of burning the run cap in minutes.
create or replace function comms.schedule_send_email_recheck(
  _send_email_task_id bigint, _num_runs integer
) returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz :=
    now() + internal.backoff(_num_runs - 1, 3600);
begin
  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'comms.send_email_supervisor',
    'send_email_task_id', _send_email_task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Drives one send_email_task to a terminal fact. Payload: {send_email_task_id}.
-- Returns {success: true, payload: {status, ...}} while running or on success,
-- {status: 'max_attempts_reached' | 'run_limit_reached', payload} when the process
-- failed, {success: false, validation_failure_message} for a bad payload. Raises 25000
-- outside READ COMMITTED.
create or replace function comms.send_email_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'send_email_task_id');
  _facts record;
  _attempt_id bigint;
  _next_check_at timestamptz;
begin
  -- 1. Validation.
  if _task_id is null then
    return internal.validation_failure('send_email_task_id must be a positive integer');
  end if;
  perform internal.assert_read_committed('comms.send_email_supervisor');

  -- 2. Lock the root, then read facts (in this order: facts read after the lock wait
  --    include everything the previous holder committed).
  if not comms.lock_send_email_task(_task_id) then
    return internal.validation_failure(format('send_email_task %s not found', _task_id));
  end if;

  -- 3. Facts.
  _facts := comms.send_email_supervisor_facts(_task_id);

  -- 4. Logic and effects. Terminal states first.
  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform comms.record_send_email_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures >= comms.send_email_max_attempts() then
    perform comms.record_send_email_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached',
                              'payload', jsonb_build_object('num_failures', _facts.num_failures));
  end if;
  if _facts.num_runs >= comms.send_email_max_supervisor_runs() then
    perform comms.record_send_email_task_failed(_task_id, 'run_limit_reached');
    return jsonb_build_object('status', 'run_limit_reached',
                              'payload', jsonb_build_object('num_runs', _facts.num_runs));
  end if;

  perform comms.record_send_email_supervisor_run(_task_id);

  -- At most one attempt in flight.
  if _facts.num_outstanding = 0 then
    _attempt_id := comms.schedule_email_attempt(_task_id);
  end if;

  _next_check_at := comms.schedule_send_email_recheck(_task_id, _facts.num_runs + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
    'send_email_attempt_id', _attempt_id,
    'next_check_at', _next_check_at));
end;
$$;

-- Handlers ----------------------------------------------------------------------------

-- before_handler. Payload: the email task's ({send_email_attempt_id, ...}). Returns the
-- provider payload of @org/handler-types emailPayload, with idempotency_key = the
-- attempt id, so a redelivered attempt is deduplicated by the provider. An attempt that
-- already has an outcome is not sent again (validation failure).
create or replace function comms.get_email_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload, 'send_email_attempt_id');
  _provider_payload jsonb;
begin
  if _attempt_id is null then
    return internal.validation_failure('send_email_attempt_id must be a positive integer');
  end if;
  if exists (select 1 from comms.send_email_attempt_succeeded s where s.send_email_attempt_id = _attempt_id)
     or exists (select 1 from comms.send_email_attempt_failed f where f.send_email_attempt_id = _attempt_id) then
    return internal.validation_failure(format('send_email_attempt %s already has an outcome; not sending it again', _attempt_id));
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
           'message_id', m.message_id,
           'idempotency_key', a.send_email_attempt_id::text,
           'from_address', m.from_address,
           'to_address', m.to_address,
           'subject', m.subject,
           'html', m.html,
           'text', m.text_body,
           'reply_to', m.reply_to))
    into _provider_payload
    from comms.send_email_attempt a
    join comms.send_email_task t using (send_email_task_id)
    join comms.email_message m using (message_id)
   where a.send_email_attempt_id = _attempt_id;

  if _provider_payload is null then
    return internal.validation_failure(format('send_email_attempt %s not found', _attempt_id));
  end if;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- success_handler. Body: {original_payload, worker_payload}. Records the attempt's
-- success; a second delivery changes nothing.
create or replace function comms.record_email_success(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'send_email_attempt_id');
begin
  if _attempt_id is null then
    return internal.validation_failure('original_payload.send_email_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from comms.send_email_attempt a where a.send_email_attempt_id = _attempt_id) then
    return internal.validation_failure(format('send_email_attempt %s not found', _attempt_id));
  end if;
  insert into comms.send_email_attempt_succeeded (send_email_attempt_id, worker_payload)
  values (_attempt_id, payload -> 'worker_payload')
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

-- error_handler. Body: {original_payload, error}. Records the attempt's failure unless
-- it already succeeded; a second delivery changes nothing.
create or replace function comms.record_email_failure(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'send_email_attempt_id');
begin
  if _attempt_id is null then
    return internal.validation_failure('original_payload.send_email_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from comms.send_email_attempt a where a.send_email_attempt_id = _attempt_id) then
    return internal.validation_failure(format('send_email_attempt %s not found', _attempt_id));
  end if;
  insert into comms.send_email_attempt_failed (send_email_attempt_id, error_message)
  select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
   where not exists (select 1 from comms.send_email_attempt_succeeded s
                      where s.send_email_attempt_id = _attempt_id)
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

-- Kickoff -----------------------------------------------------------------------------

-- Starts the send process for an existing email message: the root task and the first
-- supervisor run, at _scheduled_at (NULL: now). A second call for the same message
-- returns the existing task and enqueues nothing. Bad input: a validation_failure_message
-- and nothing written.
create or replace function comms.kickoff_send_email(
  _message_id bigint,
  _scheduled_at timestamptz default null,
  out send_email_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _at timestamptz := coalesce(_scheduled_at, now());
begin
  if _message_id is null then
    validation_failure_message := 'message_id is required';
    return;
  end if;
  if not exists (select 1 from comms.email_message m where m.message_id = _message_id) then
    validation_failure_message := format('email message %s not found', _message_id);
    return;
  end if;

  insert into comms.send_email_task (message_id, scheduled_at) values (_message_id, _at)
  on conflict (message_id) do nothing
  returning send_email_task.send_email_task_id into send_email_task_id;

  if send_email_task_id is null then
    -- Already kicked off: its supervisor is running. No-op.
    select t.send_email_task_id into send_email_task_id
      from comms.send_email_task t where t.message_id = _message_id;
    return;
  end if;

  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'comms.send_email_supervisor',
    'send_email_task_id', send_email_task_id), _at);
end;
$$;

-- For apps: stores the message and starts sending it at _scheduled_at (NULL: now).
-- With an _idempotency_key, a repeated request returns the first request's message and
-- task and writes nothing. Bad input: a validation_failure_message naming the field,
-- and nothing written.
create or replace function comms.send_email(
  _from_address    text,
  _to_address      text,
  _subject         text,
  _html            text,
  _text            text default null,
  _reply_to        text default null,
  _scheduled_at    timestamptz default null,
  _idempotency_key text default null,
  out message_id                 bigint,
  out send_email_task_id         bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _kickoff record;
begin
  validation_failure_message := case
    when _from_address is null or length(_from_address) not between 3 and 320
      then 'from_address is required (3 to 320 characters)'
    when not comms.is_email_address(_to_address)
      then 'to_address must be an email address'
    when _subject is null or length(_subject) not between 1 and 998
      then 'subject is required (1 to 998 characters)'
    when _html is null or length(_html) > 1000000
      then 'html is required (at most 1000000 characters)'
    when length(_text) > 1000000
      then 'text must be at most 1000000 characters'
    when _reply_to is not null and not comms.is_email_address(_reply_to)
      then 'reply_to must be an email address'
    when _idempotency_key is not null and length(_idempotency_key) not between 1 and 200
      then 'idempotency_key must be 1 to 200 characters'
  end;
  if validation_failure_message is not null then
    return;
  end if;

  insert into comms.message (channel, idempotency_key) values ('email', _idempotency_key)
  on conflict (idempotency_key) do nothing
  returning message.message_id into message_id;

  if message_id is null then
    -- A repeated request: return what the first one created.
    select m.message_id, t.send_email_task_id into message_id, send_email_task_id
      from comms.message m
      left join comms.send_email_task t on t.message_id = m.message_id
     where m.idempotency_key = _idempotency_key;
    if send_email_task_id is null then
      message_id := null;
      validation_failure_message := 'idempotency_key was already used for a message on another channel';
    end if;
    return;
  end if;

  insert into comms.email_message (message_id, from_address, to_address, subject, html, text_body, reply_to)
  values (message_id, _from_address, _to_address, _subject, _html, _text, _reply_to);

  _kickoff := comms.kickoff_send_email(message_id, _scheduled_at);
  send_email_task_id := _kickoff.send_email_task_id;
end;
$$;
--! EndIncluded comms/email.sql
--! Included comms/sms.sql
-- The send-SMS process: facts → logic → effects, then the handlers the worker calls
-- around the provider, then the kickoffs.
--
--   comms.send_sms(...)             app: create the message and kick off (idempotent)
--   comms.kickoff_send_sms(id)      root task + first supervisor task (idempotent)
--   comms.send_sms_supervisor       db_function: decides, schedules, re-enqueues itself
--   comms.get_sms_payload           before_handler: the provider payload
--   comms.record_sms_success        success_handler: attempt succeeded fact
--   comms.record_sms_failure        error_handler: attempt failed fact

-- Limits ------------------------------------------------------------------------------

-- Provider calls per message: the first and two retries.
create or replace function comms.send_sms_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 3 $$;

-- Non-terminal supervisor runs per message. A loop bug (or a flood of duplicate
-- supervisor tasks) ends in send_sms_task_failed('run_limit_reached') instead of
-- running forever. With the backoff below, 30 runs span about 21 hours.
create or replace function comms.send_sms_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 30 $$;

-- Facts -------------------------------------------------------------------------------

create or replace function comms.has_send_sms_succeeded_attempt(_send_sms_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from comms.send_sms_attempt a
      join comms.send_sms_attempt_succeeded s using (send_sms_attempt_id)
     where a.send_sms_task_id = _send_sms_task_id)
$$;

create or replace function comms.count_send_sms_attempts(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_attempt a
   where a.send_sms_task_id = _send_sms_task_id
$$;

-- Failed attempts. An attempt with both outcomes (a redelivered task whose success
-- arrived after a failure) counts as succeeded, not failed.
create or replace function comms.count_send_sms_failed_attempts(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_attempt a
    join comms.send_sms_attempt_failed f using (send_sms_attempt_id)
   where a.send_sms_task_id = _send_sms_task_id
     and not exists (select 1 from comms.send_sms_attempt_succeeded s
                      where s.send_sms_attempt_id = a.send_sms_attempt_id)
$$;

-- Attempts with no outcome yet: the provider call is queued or in flight.
create or replace function comms.count_send_sms_outstanding_attempts(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_attempt a
   where a.send_sms_task_id = _send_sms_task_id
     and not exists (select 1 from comms.send_sms_attempt_succeeded s
                      where s.send_sms_attempt_id = a.send_sms_attempt_id)
     and not exists (select 1 from comms.send_sms_attempt_failed f
                      where f.send_sms_attempt_id = a.send_sms_attempt_id)
$$;

create or replace function comms.count_send_sms_supervisor_runs(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_supervisor_run r
   where r.send_sms_task_id = _send_sms_task_id
$$;

create or replace function comms.has_send_sms_task_succeeded(_send_sms_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from comms.send_sms_task_succeeded t
                  where t.send_sms_task_id = _send_sms_task_id)
$$;

-- The terminal failure reason, or NULL while the process has not failed.
create or replace function comms.get_send_sms_task_failure(_send_sms_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from comms.send_sms_task_failed t
   where t.send_sms_task_id = _send_sms_task_id
$$;

-- Everything the supervisor decides on, in one record: call it by hand to see what
-- the supervisor saw (select * from comms.send_sms_supervisor_facts(123)).
create or replace function comms.send_sms_supervisor_facts(
  _send_sms_task_id bigint,
  out has_task_succeeded boolean,
  out task_failure       text,
  out has_success        boolean,
  out num_attempts       integer,
  out num_failures       integer,
  out num_outstanding    integer,
  out num_runs           integer,
  out scheduled_at       timestamptz
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select comms.has_send_sms_task_succeeded(t.send_sms_task_id),
         comms.get_send_sms_task_failure(t.send_sms_task_id),
         comms.has_send_sms_succeeded_attempt(t.send_sms_task_id),
         comms.count_send_sms_attempts(t.send_sms_task_id),
         comms.count_send_sms_failed_attempts(t.send_sms_task_id),
         comms.count_send_sms_outstanding_attempts(t.send_sms_task_id),
         comms.count_send_sms_supervisor_runs(t.send_sms_task_id),
         t.scheduled_at
    from comms.send_sms_task t
   where t.send_sms_task_id = _send_sms_task_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row for the rest of the transaction; false when there is no such row.
-- FOR NO KEY UPDATE, not FOR UPDATE: it serialises supervisors exactly as well (the two
-- modes conflict with themselves), but it does not conflict with the FOR KEY SHARE lock
-- that inserting a referencing row takes, so handlers and other writers of facts that
-- reference the root never wait on a running supervisor.
create or replace function comms.lock_send_sms_task(_send_sms_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from comms.send_sms_task t
   where t.send_sms_task_id = _send_sms_task_id
     for no key update;
  return found;
end;
$$;

create or replace function comms.record_send_sms_supervisor_run(_send_sms_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_sms_supervisor_run (send_sms_task_id) values (_send_sms_task_id)
$$;

create or replace function comms.record_send_sms_task_succeeded(_send_sms_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_sms_task_succeeded (send_sms_task_id) values (_send_sms_task_id)
  on conflict do nothing
$$;

create or replace function comms.record_send_sms_task_failed(_send_sms_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_sms_task_failed (send_sms_task_id, reason) values (_send_sms_task_id, _reason)
  on conflict do nothing
$$;

-- Records an attempt and enqueues the sms channel task for it; returns the attempt id.
create or replace function comms.schedule_sms_attempt(_send_sms_task_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint;
begin
  insert into comms.send_sms_attempt (send_sms_task_id) values (_send_sms_task_id)
  returning send_sms_attempt_id into _attempt_id;

  perform queues.enqueue('sms', jsonb_build_object(
    'task_type', 'sms',
    'send_sms_task_id', _send_sms_task_id,
    'send_sms_attempt_id', _attempt_id,
    'before_handler', 'comms.get_sms_payload',
    'success_handler', 'comms.record_sms_success',
    'error_handler', 'comms.record_sms_failure'));
  return _attempt_id;
end;
$$;

-- Enqueues the next supervisor run and returns its time: after an exponential backoff
-- on the runs so far, 5 s · 2^(runs − 1), capped at an hour. Every failure costs a run, so retries back off exponentially; and waiting on
-- a slow attempt backs off too, instead of burning the run cap in minutes.
create or replace function comms.schedule_send_sms_recheck(
  _send_sms_task_id bigint, _num_runs integer
) returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz :=
    now() + internal.backoff(_num_runs - 1, 3600);
begin
  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'comms.send_sms_supervisor',
    'send_sms_task_id', _send_sms_task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Drives one send_sms_task to a terminal fact. Payload: {send_sms_task_id}.
-- Returns {success: true, payload: {status, ...}} while running or on success,
-- {status: 'max_attempts_reached' | 'run_limit_reached', payload} when the process
-- failed, {success: false, validation_failure_message} for a bad payload. Raises 25000
-- outside READ COMMITTED.
create or replace function comms.send_sms_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'send_sms_task_id');
  _facts record;
  _attempt_id bigint;
  _next_check_at timestamptz;
begin
  -- 1. Validation.
  if _task_id is null then
    return internal.validation_failure('send_sms_task_id must be a positive integer');
  end if;
  perform internal.assert_read_committed('comms.send_sms_supervisor');

  -- 2. Lock the root, then read facts (in this order: facts read after the lock wait
  --    include everything the previous holder committed).
  if not comms.lock_send_sms_task(_task_id) then
    return internal.validation_failure(format('send_sms_task %s not found', _task_id));
  end if;

  -- 3. Facts.
  _facts := comms.send_sms_supervisor_facts(_task_id);

  -- 4. Logic and effects. Terminal states first.
  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform comms.record_send_sms_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures >= comms.send_sms_max_attempts() then
    perform comms.record_send_sms_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached',
                              'payload', jsonb_build_object('num_failures', _facts.num_failures));
  end if;
  if _facts.num_runs >= comms.send_sms_max_supervisor_runs() then
    perform comms.record_send_sms_task_failed(_task_id, 'run_limit_reached');
    return jsonb_build_object('status', 'run_limit_reached',
                              'payload', jsonb_build_object('num_runs', _facts.num_runs));
  end if;

  perform comms.record_send_sms_supervisor_run(_task_id);

  -- At most one attempt in flight.
  if _facts.num_outstanding = 0 then
    _attempt_id := comms.schedule_sms_attempt(_task_id);
  end if;

  _next_check_at := comms.schedule_send_sms_recheck(_task_id, _facts.num_runs + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
    'send_sms_attempt_id', _attempt_id,
    'next_check_at', _next_check_at));
end;
$$;

-- Handlers ----------------------------------------------------------------------------

-- before_handler. Payload: the sms task's ({send_sms_attempt_id, ...}). Returns the
-- provider payload of @org/handler-types smsPayload, with idempotency_key = the
-- attempt id, so a redelivered attempt is deduplicated by the provider. An attempt that
-- already has an outcome is not sent again (validation failure).
create or replace function comms.get_sms_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload, 'send_sms_attempt_id');
  _provider_payload jsonb;
begin
  if _attempt_id is null then
    return internal.validation_failure('send_sms_attempt_id must be a positive integer');
  end if;
  if exists (select 1 from comms.send_sms_attempt_succeeded s where s.send_sms_attempt_id = _attempt_id)
     or exists (select 1 from comms.send_sms_attempt_failed f where f.send_sms_attempt_id = _attempt_id) then
    return internal.validation_failure(format('send_sms_attempt %s already has an outcome; not sending it again', _attempt_id));
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
           'message_id', m.message_id,
           'idempotency_key', a.send_sms_attempt_id::text,
           'to_number', m.to_number,
           'from_number', m.from_number,
           'body', m.body))
    into _provider_payload
    from comms.send_sms_attempt a
    join comms.send_sms_task t using (send_sms_task_id)
    join comms.sms_message m using (message_id)
   where a.send_sms_attempt_id = _attempt_id;

  if _provider_payload is null then
    return internal.validation_failure(format('send_sms_attempt %s not found', _attempt_id));
  end if;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- success_handler. Body: {original_payload, worker_payload}. Records the attempt's
-- success; a second delivery changes nothing.
create or replace function comms.record_sms_success(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'send_sms_attempt_id');
begin
  if _attempt_id is null then
    return internal.validation_failure('original_payload.send_sms_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from comms.send_sms_attempt a where a.send_sms_attempt_id = _attempt_id) then
    return internal.validation_failure(format('send_sms_attempt %s not found', _attempt_id));
  end if;
  insert into comms.send_sms_attempt_succeeded (send_sms_attempt_id, worker_payload)
  values (_attempt_id, payload -> 'worker_payload')
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

-- error_handler. Body: {original_payload, error}. Records the attempt's failure unless
-- it already succeeded; a second delivery changes nothing.
create or replace function comms.record_sms_failure(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'send_sms_attempt_id');
begin
  if _attempt_id is null then
    return internal.validation_failure('original_payload.send_sms_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from comms.send_sms_attempt a where a.send_sms_attempt_id = _attempt_id) then
    return internal.validation_failure(format('send_sms_attempt %s not found', _attempt_id));
  end if;
  insert into comms.send_sms_attempt_failed (send_sms_attempt_id, error_message)
  select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
   where not exists (select 1 from comms.send_sms_attempt_succeeded s
                      where s.send_sms_attempt_id = _attempt_id)
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

-- Kickoff -----------------------------------------------------------------------------

-- Starts the send process for an existing sms message: the root task and the first
-- supervisor run, at _scheduled_at (NULL: now). A second call for the same message
-- returns the existing task and enqueues nothing. Bad input: a validation_failure_message
-- and nothing written.
create or replace function comms.kickoff_send_sms(
  _message_id bigint,
  _scheduled_at timestamptz default null,
  out send_sms_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _at timestamptz := coalesce(_scheduled_at, now());
begin
  if _message_id is null then
    validation_failure_message := 'message_id is required';
    return;
  end if;
  if not exists (select 1 from comms.sms_message m where m.message_id = _message_id) then
    validation_failure_message := format('sms message %s not found', _message_id);
    return;
  end if;

  insert into comms.send_sms_task (message_id, scheduled_at) values (_message_id, _at)
  on conflict (message_id) do nothing
  returning send_sms_task.send_sms_task_id into send_sms_task_id;

  if send_sms_task_id is null then
    -- Already kicked off: its supervisor is running. No-op.
    select t.send_sms_task_id into send_sms_task_id
      from comms.send_sms_task t where t.message_id = _message_id;
    return;
  end if;

  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'comms.send_sms_supervisor',
    'send_sms_task_id', send_sms_task_id), _at);
end;
$$;

-- For apps: stores the message and starts sending it at _scheduled_at (NULL: now).
-- With an _idempotency_key, a repeated request returns the first request's message and
-- task and writes nothing. Bad input: a validation_failure_message naming the field,
-- and nothing written.
create or replace function comms.send_sms(
  _to_number       text,
  _body            text,
  _from_number     text default null,
  _scheduled_at    timestamptz default null,
  _idempotency_key text default null,
  out message_id                 bigint,
  out send_sms_task_id           bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _kickoff record;
begin
  validation_failure_message := case
    when not comms.is_e164_number(_to_number)
      then 'to_number must be an E.164 number such as +14155550100'
    when _body is null or length(_body) not between 1 and 1600
      then 'body is required (1 to 1600 characters)'
    when _from_number is not null and not comms.is_e164_number(_from_number)
      then 'from_number must be an E.164 number such as +14155550100'
    when _idempotency_key is not null and length(_idempotency_key) not between 1 and 200
      then 'idempotency_key must be 1 to 200 characters'
  end;
  if validation_failure_message is not null then
    return;
  end if;

  insert into comms.message (channel, idempotency_key) values ('sms', _idempotency_key)
  on conflict (idempotency_key) do nothing
  returning message.message_id into message_id;

  if message_id is null then
    -- A repeated request: return what the first one created.
    select m.message_id, t.send_sms_task_id into message_id, send_sms_task_id
      from comms.message m
      left join comms.send_sms_task t on t.message_id = m.message_id
     where m.idempotency_key = _idempotency_key;
    if send_sms_task_id is null then
      message_id := null;
      validation_failure_message := 'idempotency_key was already used for a message on another channel';
    end if;
    return;
  end if;

  insert into comms.sms_message (message_id, to_number, from_number, body)
  values (message_id, _to_number, _from_number, _body);

  _kickoff := comms.kickoff_send_sms(message_id, _scheduled_at);
  send_sms_task_id := _kickoff.send_sms_task_id;
end;
$$;
--! EndIncluded comms/sms.sql
--! Included comms/privileges.sql
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
--! EndIncluded comms/privileges.sql

--! Included files/metadata.sql
-- File metadata: append-only documents, the latest is current.

-- The current metadata document of a file ({} when it has none).
create or replace function files.current_file_metadata(_file_id bigint)
  returns jsonb
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(
    (select m.metadata from files.file_metadata m
      where m.file_id = _file_id order by m.file_metadata_id desc limit 1),
    '{}'::jsonb)
$$;

create or replace function files.is_file_deleted(_file_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((files.current_file_metadata(_file_id) ->> 'deleted')::boolean, false)
$$;

-- Marks a file logically deleted: appends the current document with "deleted": true and
-- "deleted_at". Idempotent: a file already marked is left as it is. Locks the file row
-- (FOR NO KEY UPDATE) so two concurrent calls append one row, not two.
create or replace function files.mark_file_deleted(_file_id bigint)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from files.file f where f.file_id = _file_id for no key update;
  if not found then
    raise exception 'file % not found', _file_id using errcode = '23503';
  end if;
  if not files.is_file_deleted(_file_id) then
    insert into files.file_metadata (file_id, metadata)
    values (_file_id, files.current_file_metadata(_file_id)
                      || jsonb_build_object('deleted', true, 'deleted_at', now()));
  end if;
end;
$$;
--! EndIncluded files/metadata.sql
--! Included files/file_deletion.sql
-- The file deletion process: facts → logic → effects, the handlers the worker calls
-- around the files service, and the kickoff.
--
--   files.kickoff_file_deletion(file_id)   root task + first supervisor task (idempotent)
--   files.file_deletion_supervisor         db_function: decides, schedules, re-enqueues
--   files.get_file_delete_payload          before_handler: {file_id, idempotency_key, bucket, object_key}
--   files.record_file_delete_success       success_handler: attempt succeeded, file marked deleted
--   files.record_file_delete_failure       error_handler: attempt failed
--   files.is_file_deletion_stuck(file_id)  for parents: the deletion has given up

-- Limits ------------------------------------------------------------------------------

-- Storage deletions per file before the process gives up (and is "stuck").
create or replace function files.file_deletion_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 5 $$;

-- Non-terminal supervisor runs per file (see comms.send_email_max_supervisor_runs).
create or replace function files.file_deletion_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 40 $$;

-- Facts -------------------------------------------------------------------------------

create or replace function files.has_file_deletion_succeeded_attempt(_file_deletion_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from files.file_deletion_attempt a
      join files.file_deletion_attempt_succeeded s using (file_deletion_attempt_id)
     where a.file_deletion_task_id = _file_deletion_task_id)
$$;

create or replace function files.count_file_deletion_attempts(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_attempt a
   where a.file_deletion_task_id = _file_deletion_task_id
$$;

-- Failed attempts (an attempt with both outcomes counts as succeeded).
create or replace function files.count_file_deletion_failed_attempts(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_attempt a
    join files.file_deletion_attempt_failed f using (file_deletion_attempt_id)
   where a.file_deletion_task_id = _file_deletion_task_id
     and not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
$$;

create or replace function files.count_file_deletion_outstanding_attempts(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_attempt a
   where a.file_deletion_task_id = _file_deletion_task_id
     and not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
     and not exists (select 1 from files.file_deletion_attempt_failed f
                      where f.file_deletion_attempt_id = a.file_deletion_attempt_id)
$$;

create or replace function files.count_file_deletion_supervisor_runs(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_supervisor_run r
   where r.file_deletion_task_id = _file_deletion_task_id
$$;

create or replace function files.has_file_deletion_task_succeeded(_file_deletion_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from files.file_deletion_task_succeeded t
                  where t.file_deletion_task_id = _file_deletion_task_id)
$$;

create or replace function files.get_file_deletion_task_failure(_file_deletion_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from files.file_deletion_task_failed t
   where t.file_deletion_task_id = _file_deletion_task_id
$$;

-- True when the file's deletion has given up: a terminal failure is recorded, or its
-- failed attempts reached the maximum (before the supervisor's next run records it).
create or replace function files.is_file_deletion_stuck(_file_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((
    select files.get_file_deletion_task_failure(t.file_deletion_task_id) is not null
           or files.count_file_deletion_failed_attempts(t.file_deletion_task_id) >= files.file_deletion_max_attempts()
      from files.file_deletion_task t
     where t.file_id = _file_id), false)
$$;

create or replace function files.file_deletion_supervisor_facts(
  _file_deletion_task_id bigint,
  out file_id            bigint,
  out has_task_succeeded boolean,
  out task_failure       text,
  out has_success        boolean,
  out num_attempts       integer,
  out num_failures       integer,
  out num_outstanding    integer,
  out num_runs           integer
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.file_id,
         files.has_file_deletion_task_succeeded(t.file_deletion_task_id),
         files.get_file_deletion_task_failure(t.file_deletion_task_id),
         files.has_file_deletion_succeeded_attempt(t.file_deletion_task_id),
         files.count_file_deletion_attempts(t.file_deletion_task_id),
         files.count_file_deletion_failed_attempts(t.file_deletion_task_id),
         files.count_file_deletion_outstanding_attempts(t.file_deletion_task_id),
         files.count_file_deletion_supervisor_runs(t.file_deletion_task_id)
    from files.file_deletion_task t
   where t.file_deletion_task_id = _file_deletion_task_id
$$;

-- Facts about an account's files, for the account deletion supervisor. Children are
-- found from current state (files.file.account_id), never from a payload.
create or replace function files.account_file_deletion_facts(
  _account_id bigint,
  out num_files              integer,
  out num_files_without_task integer,
  out num_files_deleted      integer,
  out stuck_file_ids         bigint[]
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer,
         count(*) filter (where t.file_deletion_task_id is null)::integer,
         count(*) filter (where files.has_file_deletion_task_succeeded(t.file_deletion_task_id))::integer,
         coalesce(array_agg(f.file_id order by f.file_id)
                    filter (where t.file_deletion_task_id is not null and files.is_file_deletion_stuck(f.file_id)),
                  '{}')
    from files.file f
    left join files.file_deletion_task t on t.file_id = f.file_id
   where f.account_id = _account_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row (FOR NO KEY UPDATE: see comms.lock_send_email_task for why).
create or replace function files.lock_file_deletion_task(_file_deletion_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from files.file_deletion_task t
   where t.file_deletion_task_id = _file_deletion_task_id
     for no key update;
  return found;
end;
$$;

create or replace function files.record_file_deletion_supervisor_run(_file_deletion_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into files.file_deletion_supervisor_run (file_deletion_task_id) values (_file_deletion_task_id)
$$;

create or replace function files.record_file_deletion_task_succeeded(_file_deletion_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into files.file_deletion_task_succeeded (file_deletion_task_id) values (_file_deletion_task_id)
  on conflict do nothing
$$;

create or replace function files.record_file_deletion_task_failed(_file_deletion_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into files.file_deletion_task_failed (file_deletion_task_id, reason) values (_file_deletion_task_id, _reason)
  on conflict do nothing
$$;

-- Records an attempt and enqueues the file_delete channel task for it.
create or replace function files.schedule_file_deletion_attempt(_file_deletion_task_id bigint, _file_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint;
begin
  insert into files.file_deletion_attempt (file_deletion_task_id) values (_file_deletion_task_id)
  returning file_deletion_attempt_id into _attempt_id;

  perform queues.enqueue('file_delete', jsonb_build_object(
    'task_type', 'file_delete',
    'file_deletion_task_id', _file_deletion_task_id,
    'file_deletion_attempt_id', _attempt_id,
    'file_id', _file_id,
    'before_handler', 'files.get_file_delete_payload',
    'success_handler', 'files.record_file_delete_success',
    'error_handler', 'files.record_file_delete_failure'));
  return _attempt_id;
end;
$$;

-- Next supervisor run: 5 s · 2^(runs − 1), capped at an hour (as comms).
create or replace function files.schedule_file_deletion_recheck(_file_deletion_task_id bigint, _num_runs integer)
  returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz :=
    now() + internal.backoff(_num_runs - 1, 3600);
begin
  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'files.file_deletion_supervisor',
    'file_deletion_task_id', _file_deletion_task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Drives one file_deletion_task to a terminal fact. Payload: {file_deletion_task_id}.
-- Envelopes as comms.send_email_supervisor. Raises 25000 outside READ COMMITTED.
create or replace function files.file_deletion_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'file_deletion_task_id');
  _facts record;
  _attempt_id bigint;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return internal.validation_failure('file_deletion_task_id must be a positive integer');
  end if;
  perform internal.assert_read_committed('files.file_deletion_supervisor');
  if not files.lock_file_deletion_task(_task_id) then
    return internal.validation_failure(format('file_deletion_task %s not found', _task_id));
  end if;

  _facts := files.file_deletion_supervisor_facts(_task_id);

  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform files.record_file_deletion_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures >= files.file_deletion_max_attempts() then
    perform files.record_file_deletion_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached',
                              'payload', jsonb_build_object('num_failures', _facts.num_failures));
  end if;
  if _facts.num_runs >= files.file_deletion_max_supervisor_runs() then
    perform files.record_file_deletion_task_failed(_task_id, 'run_limit_reached');
    return jsonb_build_object('status', 'run_limit_reached',
                              'payload', jsonb_build_object('num_runs', _facts.num_runs));
  end if;

  perform files.record_file_deletion_supervisor_run(_task_id);
  if _facts.num_outstanding = 0 then
    _attempt_id := files.schedule_file_deletion_attempt(_task_id, _facts.file_id);
  end if;
  _next_check_at := files.schedule_file_deletion_recheck(_task_id, _facts.num_runs + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
    'file_deletion_attempt_id', _attempt_id,
    'next_check_at', _next_check_at));
end;
$$;

-- Handlers ----------------------------------------------------------------------------

-- before_handler: the provider payload of @org/handler-types fileDeletePayload, with
-- idempotency_key = the attempt id. An attempt with an outcome is not run again.
create or replace function files.get_file_delete_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload, 'file_deletion_attempt_id');
  _provider_payload jsonb;
begin
  if _attempt_id is null then
    return internal.validation_failure('file_deletion_attempt_id must be a positive integer');
  end if;
  if exists (select 1 from files.file_deletion_attempt_succeeded s where s.file_deletion_attempt_id = _attempt_id)
     or exists (select 1 from files.file_deletion_attempt_failed f where f.file_deletion_attempt_id = _attempt_id) then
    return internal.validation_failure(format('file_deletion_attempt %s already has an outcome; not deleting again', _attempt_id));
  end if;
  select jsonb_build_object(
           'file_id', f.file_id,
           'idempotency_key', a.file_deletion_attempt_id::text,
           'bucket', f.bucket,
           'object_key', f.object_key)
    into _provider_payload
    from files.file_deletion_attempt a
    join files.file_deletion_task t using (file_deletion_task_id)
    join files.file f on f.file_id = t.file_id
   where a.file_deletion_attempt_id = _attempt_id;
  if _provider_payload is null then
    return internal.validation_failure(format('file_deletion_attempt %s not found', _attempt_id));
  end if;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- success_handler: records the attempt's success and marks the file deleted.
-- Idempotent.
create or replace function files.record_file_delete_success(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'file_deletion_attempt_id');
  _file_id bigint;
begin
  if _attempt_id is null then
    return internal.validation_failure('original_payload.file_deletion_attempt_id must be a positive integer');
  end if;
  select t.file_id into _file_id
    from files.file_deletion_attempt a join files.file_deletion_task t using (file_deletion_task_id)
   where a.file_deletion_attempt_id = _attempt_id;
  if _file_id is null then
    return internal.validation_failure(format('file_deletion_attempt %s not found', _attempt_id));
  end if;
  insert into files.file_deletion_attempt_succeeded (file_deletion_attempt_id, worker_payload)
  values (_attempt_id, payload -> 'worker_payload')
  on conflict do nothing;
  perform files.mark_file_deleted(_file_id);
  return jsonb_build_object('success', true);
end;
$$;

-- error_handler: records the attempt's failure unless it succeeded. Idempotent.
create or replace function files.record_file_delete_failure(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'file_deletion_attempt_id');
begin
  if _attempt_id is null then
    return internal.validation_failure('original_payload.file_deletion_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from files.file_deletion_attempt a where a.file_deletion_attempt_id = _attempt_id) then
    return internal.validation_failure(format('file_deletion_attempt %s not found', _attempt_id));
  end if;
  insert into files.file_deletion_attempt_failed (file_deletion_attempt_id, error_message)
  select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
   where not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = _attempt_id)
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

-- Kickoff -----------------------------------------------------------------------------

-- Starts deleting a file at _scheduled_at (NULL: now). Idempotent per file; bad input
-- returns a validation_failure_message and writes nothing.
create or replace function files.kickoff_file_deletion(
  _file_id bigint,
  _scheduled_at timestamptz default null,
  out file_deletion_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _file_id is null then
    validation_failure_message := 'file_id is required';
    return;
  end if;
  if not exists (select 1 from files.file f where f.file_id = _file_id) then
    validation_failure_message := format('file %s not found', _file_id);
    return;
  end if;

  insert into files.file_deletion_task (file_id) values (_file_id)
  on conflict (file_id) do nothing
  returning file_deletion_task.file_deletion_task_id into file_deletion_task_id;

  if file_deletion_task_id is null then
    select t.file_deletion_task_id into file_deletion_task_id
      from files.file_deletion_task t where t.file_id = _file_id;
    return;
  end if;

  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'files.file_deletion_supervisor',
    'file_deletion_task_id', file_deletion_task_id), coalesce(_scheduled_at, now()));
end;
$$;
--! EndIncluded files/file_deletion.sql
--! Included files/privileges.sql
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

select internal.register_runnable_function('files.file_deletion_supervisor(jsonb)');
select internal.register_runnable_function('files.get_file_delete_payload(jsonb)');
select internal.register_runnable_function('files.record_file_delete_success(jsonb)');
select internal.register_runnable_function('files.record_file_delete_failure(jsonb)');

grant execute on function files.kickoff_file_deletion(bigint, timestamptz) to :DATABASE_APP;
--! EndIncluded files/privileges.sql

--! Included accounts/anonymization.sql
-- Account anonymization: pure SQL, so no channel task. Each supervisor run that is not
-- terminal is one attempt: it runs accounts.anonymize_account in a subtransaction and
-- records the outcome. Attempts are bounded by the maximum, so they double as the run cap.
--
--   accounts.kickoff_account_anonymization(account_id)   root + first run (idempotent)
--   accounts.account_anonymization_supervisor            db_function
--   accounts.anonymize_account(account_id)                the work
--   accounts.is_account_anonymization_stuck(account_id)   for the parent

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

-- Facts -------------------------------------------------------------------------------

create or replace function accounts.has_account_anonymization_succeeded_attempt(_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from accounts.account_anonymization_attempt a
      join accounts.account_anonymization_attempt_succeeded s using (account_anonymization_attempt_id)
     where a.account_anonymization_task_id = _task_id)
$$;

create or replace function accounts.count_account_anonymization_attempts(_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from accounts.account_anonymization_attempt a
   where a.account_anonymization_task_id = _task_id
$$;

create or replace function accounts.count_account_anonymization_failed_attempts(_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from accounts.account_anonymization_attempt a
    join accounts.account_anonymization_attempt_failed f using (account_anonymization_attempt_id)
   where a.account_anonymization_task_id = _task_id
$$;

create or replace function accounts.has_account_anonymization_task_succeeded(_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_anonymization_task_succeeded t
                  where t.account_anonymization_task_id = _task_id)
$$;

create or replace function accounts.get_account_anonymization_task_failure(_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from accounts.account_anonymization_task_failed t
   where t.account_anonymization_task_id = _task_id
$$;

-- True when the account's anonymization has given up (terminal failure, or failed
-- attempts at the maximum).
create or replace function accounts.is_account_anonymization_stuck(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((
    select accounts.get_account_anonymization_task_failure(t.account_anonymization_task_id) is not null
           or accounts.count_account_anonymization_failed_attempts(t.account_anonymization_task_id)
                >= accounts.account_anonymization_max_attempts()
      from accounts.account_anonymization_task t
     where t.account_id = _account_id), false)
$$;

create or replace function accounts.account_anonymization_supervisor_facts(
  _task_id bigint,
  out account_id         bigint,
  out has_task_succeeded boolean,
  out task_failure       text,
  out has_success        boolean,
  out num_attempts       integer,
  out num_failures       integer
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.account_id,
         accounts.has_account_anonymization_task_succeeded(t.account_anonymization_task_id),
         accounts.get_account_anonymization_task_failure(t.account_anonymization_task_id),
         accounts.has_account_anonymization_succeeded_attempt(t.account_anonymization_task_id),
         accounts.count_account_anonymization_attempts(t.account_anonymization_task_id),
         accounts.count_account_anonymization_failed_attempts(t.account_anonymization_task_id)
    from accounts.account_anonymization_task t
   where t.account_anonymization_task_id = _task_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row (FOR NO KEY UPDATE: see comms.lock_send_email_task for why).
create or replace function accounts.lock_account_anonymization_task(_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from accounts.account_anonymization_task t
   where t.account_anonymization_task_id = _task_id
     for no key update;
  return found;
end;
$$;

-- One attempt: records it, runs anonymize_account in a subtransaction, records the
-- outcome. Returns NULL on success, else the error message (the work is rolled back).
create or replace function accounts.run_account_anonymization_attempt(_task_id bigint, _account_id bigint)
  returns text
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint;
  _error text;
begin
  insert into accounts.account_anonymization_attempt (account_anonymization_task_id) values (_task_id)
  returning account_anonymization_attempt_id into _attempt_id;
  begin
    perform accounts.anonymize_account(_account_id);
  exception when others then
    _error := left(sqlerrm, 2000);
  end;
  if _error is null then
    insert into accounts.account_anonymization_attempt_succeeded (account_anonymization_attempt_id) values (_attempt_id);
  else
    insert into accounts.account_anonymization_attempt_failed (account_anonymization_attempt_id, error_message)
    values (_attempt_id, _error);
  end if;
  return _error;
end;
$$;

create or replace function accounts.record_account_anonymization_task_succeeded(_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_anonymization_task_succeeded (account_anonymization_task_id) values (_task_id)
  on conflict do nothing
$$;

create or replace function accounts.record_account_anonymization_task_failed(_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_anonymization_task_failed (account_anonymization_task_id, reason) values (_task_id, _reason)
  on conflict do nothing
$$;

-- Next run after a failure: 5 s · 2^failures, capped at an hour.
create or replace function accounts.schedule_account_anonymization_recheck(_task_id bigint, _num_failures integer)
  returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz := now() + internal.backoff(_num_failures, 3600);
begin
  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_anonymization_supervisor',
    'account_anonymization_task_id', _task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Payload: {account_anonymization_task_id}. Raises 25000 outside READ COMMITTED.
create or replace function accounts.account_anonymization_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'account_anonymization_task_id');
  _facts record;
  _error text;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return internal.validation_failure('account_anonymization_task_id must be a positive integer');
  end if;
  perform internal.assert_read_committed('accounts.account_anonymization_supervisor');
  if not accounts.lock_account_anonymization_task(_task_id) then
    return internal.validation_failure(format('account_anonymization_task %s not found', _task_id));
  end if;

  _facts := accounts.account_anonymization_supervisor_facts(_task_id);

  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform accounts.record_account_anonymization_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures >= accounts.account_anonymization_max_attempts() then
    perform accounts.record_account_anonymization_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached');
  end if;

  _error := accounts.run_account_anonymization_attempt(_task_id, _facts.account_id);
  if _error is null then
    perform accounts.record_account_anonymization_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures + 1 >= accounts.account_anonymization_max_attempts() then
    perform accounts.record_account_anonymization_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached', 'payload', jsonb_build_object('error', _error));
  end if;
  _next_check_at := accounts.schedule_account_anonymization_recheck(_task_id, _facts.num_failures + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', 'attempt_failed', 'error', _error, 'next_check_at', _next_check_at));
end;
$$;

-- Kickoff (called by the account deletion supervisor) ---------------------------------

create or replace function accounts.kickoff_account_anonymization(_account_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  insert into accounts.account_anonymization_task (account_id) values (_account_id)
  on conflict (account_id) do nothing
  returning account_anonymization_task_id into _task_id;
  if _task_id is null then
    return (select t.account_anonymization_task_id from accounts.account_anonymization_task t
             where t.account_id = _account_id);
  end if;
  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_anonymization_supervisor',
    'account_anonymization_task_id', _task_id));
  return _task_id;
end;
$$;
--! EndIncluded accounts/anonymization.sql
--! Included accounts/account_deletion.sql
-- Account deletion: a supervision tree. The root supervisor finds its children from
-- current state (the account's files, its anonymization task), never from a payload:
--   1. start one file deletion per file of the account (files.kickoff_file_deletion);
--   2. when every file is deleted, start the account anonymization;
--   3. when anonymized, record account_deletion_task_succeeded.
-- A stuck child (files.is_file_deletion_stuck, accounts.is_account_anonymization_stuck)
-- ends the process in account_deletion_task_failed with a message naming it.
--
--   api.request_account_deletion(account_id)      app entry point (sql/api)
--   accounts.kickoff_account_deletion(account_id) flag 'deleted', root, first run
--   accounts.account_deletion_supervisor          db_function

-- Non-terminal runs per account before giving up. The parent waits on children whose
-- own retries take hours at most; with the backoff below (capped at 10 minutes) 100 runs
-- span about 16 hours.
create or replace function accounts.account_deletion_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 100 $$;

-- Facts -------------------------------------------------------------------------------

create or replace function accounts.count_account_deletion_supervisor_runs(_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from accounts.account_deletion_supervisor_run r
   where r.account_deletion_task_id = _task_id
$$;

create or replace function accounts.has_account_deletion_task_succeeded(_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_deletion_task_succeeded t where t.account_deletion_task_id = _task_id)
$$;

create or replace function accounts.get_account_deletion_task_failure(_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from accounts.account_deletion_task_failed t where t.account_deletion_task_id = _task_id
$$;

create or replace function accounts.has_account_anonymization_task(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_anonymization_task t where t.account_id = _account_id)
$$;

create or replace function accounts.is_account_anonymized(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_anonymization_task t
                  where t.account_id = _account_id
                    and accounts.has_account_anonymization_task_succeeded(t.account_anonymization_task_id))
$$;

create or replace function accounts.account_deletion_supervisor_facts(
  _task_id bigint,
  out account_id               bigint,
  out has_task_succeeded       boolean,
  out task_failure             text,
  out num_runs                 integer,
  out num_files                integer,
  out num_files_without_task   integer,
  out num_files_deleted        integer,
  out stuck_file_ids           bigint[],
  out has_anonymization_task   boolean,
  out is_anonymized            boolean,
  out is_anonymization_stuck   boolean
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.account_id,
         accounts.has_account_deletion_task_succeeded(t.account_deletion_task_id),
         accounts.get_account_deletion_task_failure(t.account_deletion_task_id),
         accounts.count_account_deletion_supervisor_runs(t.account_deletion_task_id),
         ff.num_files, ff.num_files_without_task, ff.num_files_deleted, ff.stuck_file_ids,
         accounts.has_account_anonymization_task(t.account_id),
         accounts.is_account_anonymized(t.account_id),
         accounts.is_account_anonymization_stuck(t.account_id)
    from accounts.account_deletion_task t
    cross join lateral files.account_file_deletion_facts(t.account_id) ff
   where t.account_deletion_task_id = _task_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row (FOR NO KEY UPDATE: see comms.lock_send_email_task for why).
create or replace function accounts.lock_account_deletion_task(_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from accounts.account_deletion_task t where t.account_deletion_task_id = _task_id
     for no key update;
  return found;
end;
$$;

create or replace function accounts.record_account_deletion_supervisor_run(_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_deletion_supervisor_run (account_deletion_task_id) values (_task_id)
$$;

create or replace function accounts.record_account_deletion_task_succeeded(_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_deletion_task_succeeded (account_deletion_task_id) values (_task_id)
  on conflict do nothing
$$;

create or replace function accounts.record_account_deletion_task_failed(_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_deletion_task_failed (account_deletion_task_id, reason) values (_task_id, _reason)
  on conflict do nothing
$$;

-- Starts a deletion for every file of the account that has none; returns how many.
create or replace function accounts.start_account_file_deletions(_account_id bigint)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _file_id bigint;
  _started integer := 0;
begin
  for _file_id in
    select f.file_id from files.file f
     where f.account_id = _account_id
       and not exists (select 1 from files.file_deletion_task t where t.file_id = f.file_id)
     order by f.file_id
  loop
    perform files.kickoff_file_deletion(_file_id);
    _started := _started + 1;
  end loop;
  return _started;
end;
$$;

-- Next run: 5 s · 2^(runs − 1), capped at 10 minutes (the parent polls its children).
create or replace function accounts.schedule_account_deletion_recheck(_task_id bigint, _num_runs integer)
  returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz :=
    now() + internal.backoff(_num_runs - 1, 600);
begin
  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_deletion_supervisor',
    'account_deletion_task_id', _task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Payload: {account_deletion_task_id}. Raises 25000 outside READ COMMITTED.
create or replace function accounts.account_deletion_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'account_deletion_task_id');
  _facts record;
  _status text;
  _reason text;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return internal.validation_failure('account_deletion_task_id must be a positive integer');
  end if;
  perform internal.assert_read_committed('accounts.account_deletion_supervisor');
  if not accounts.lock_account_deletion_task(_task_id) then
    return internal.validation_failure(format('account_deletion_task %s not found', _task_id));
  end if;

  _facts := accounts.account_deletion_supervisor_facts(_task_id);

  -- Terminal states.
  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _facts.task_failure));
  end if;
  if _facts.num_files_deleted = _facts.num_files and _facts.is_anonymized then
    perform accounts.record_account_deletion_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  _reason := case
    when cardinality(_facts.stuck_file_ids) > 0
      then format('file deletion stuck for file_id %s', array_to_string(_facts.stuck_file_ids, ', '))
    when _facts.is_anonymization_stuck
      then format('account anonymization stuck for account_id %s', _facts.account_id)
    when _facts.num_runs >= accounts.account_deletion_max_supervisor_runs()
      then format('run_limit_reached after %s runs', _facts.num_runs)
  end;
  if _reason is not null then
    perform accounts.record_account_deletion_task_failed(_task_id, _reason);
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _reason));
  end if;

  -- Progress: files first, then anonymization.
  perform accounts.record_account_deletion_supervisor_run(_task_id);
  if _facts.num_files_without_task > 0 then
    perform accounts.start_account_file_deletions(_facts.account_id);
    _status := 'file_deletions_started';
  elsif _facts.num_files_deleted < _facts.num_files then
    _status := 'waiting_for_file_deletions';
  elsif not _facts.has_anonymization_task then
    perform accounts.kickoff_account_anonymization(_facts.account_id);
    _status := 'anonymization_started';
  else
    _status := 'waiting_for_anonymization';
  end if;
  _next_check_at := accounts.schedule_account_deletion_recheck(_task_id, _facts.num_runs + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', _status, 'next_check_at', _next_check_at));
end;
$$;

-- Kickoff -----------------------------------------------------------------------------

-- Flags the account 'deleted', creates the root task and enqueues the first supervisor
-- run. A second call for the same account returns the existing task and writes nothing.
-- Bad input: a validation_failure_message and nothing written.
create or replace function accounts.kickoff_account_deletion(
  _account_id bigint,
  out account_deletion_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _account_id is null then
    validation_failure_message := 'account_id is required';
    return;
  end if;
  if not exists (select 1 from accounts.account a where a.account_id = _account_id) then
    validation_failure_message := format('account %s not found', _account_id);
    return;
  end if;

  insert into accounts.account_deletion_task (account_id) values (_account_id)
  on conflict (account_id) do nothing
  returning account_deletion_task.account_deletion_task_id into account_deletion_task_id;
  if account_deletion_task_id is null then
    select t.account_deletion_task_id into account_deletion_task_id
      from accounts.account_deletion_task t where t.account_id = _account_id;
    return;
  end if;

  insert into accounts.account_flag (account_id, flag) values (_account_id, 'deleted')
  on conflict do nothing;
  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_deletion_supervisor',
    'account_deletion_task_id', account_deletion_task_id));
end;
$$;
--! EndIncluded accounts/account_deletion.sql
--! Included accounts/privileges.sql
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
--! EndIncluded accounts/privileges.sql

--! Included api/account_deletion.sql
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
--! EndIncluded api/account_deletion.sql
--! Included api/privileges.sql
-- Apps call the api functions; nothing else here.

revoke all on all tables in schema api from public;
revoke execute on all functions in schema api from public;

grant usage on schema api to :DATABASE_APP;

grant execute on function api.request_account_deletion(bigint) to :DATABASE_APP;
--! EndIncluded api/privileges.sql

--! Included admin/common.sql
-- Helpers shared by the admin functions: task states, page sizes, task type filters.
-- Called only from definer functions: no grants.

-- The state of a task that is not completed, from its claim-index row at _now:
--   ready      claimable now (scheduled time reached; no live lease)
--   running    a live lease holds it
--   retrying   leased before, waiting for its retry time (no live lease)
--   scheduled  never leased, scheduled in the future
create or replace function admin.pending_state(
  _available_at timestamptz, _current_lease_id bigint, _lease_count integer, _now timestamptz
) returns text
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select case
           when _available_at <= _now then 'ready'
           when _current_lease_id is not null then 'running'
           when _lease_count > 0 then 'retrying'
           else 'scheduled'
         end
$$;

-- Every state a task can be in: the pending ones above, then the completion outcomes.
create or replace function admin.task_states() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['scheduled', 'ready', 'running', 'retrying',
               'succeeded', 'failed', 'abandoned', 'cancelled']
$$;

-- Validates a page size: NULL means _default; else 1 to 500.
create or replace function admin.page_limit(_limit integer, _default integer default 50)
  returns integer
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _limit is null then
    return _default;
  end if;
  if _limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500, got %', _limit using errcode = '22023';
  end if;
  return _limit;
end;
$$;

-- Validates an optional task type filter: NULL, or a registered type (22023 otherwise).
create or replace function admin.assert_task_type(_task_type text)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_type is not null
     and not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
end;
$$;
--! EndIncluded admin/common.sql
--! Included admin/tasks.sql
-- Reading tasks for the operations API: a keyset-paginated list, one task with its facts,
-- and counts by type and state. The *_at functions take the clock (owner only, for
-- tests); the API calls the wrappers, which pass now().

-- Tasks newest first, optionally of one _task_type and in one _state (admin.task_states()),
-- _limit per page (default 50, at most 500), older than _before_task_id (the last id of
-- the previous page). Pending states read queues.task_pending (bounded by pending work);
-- outcomes walk queues.task_completed by key, newest first; no filter walks queues.task.
create or replace function admin.list_tasks_at(
  _now            timestamptz,
  _task_type      text,
  _state          text,
  _limit          integer,
  _before_task_id bigint
) returns table (
  task_id       bigint,
  task_type     text,
  state         text,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  lease_count   integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  available_at  timestamptz,
  completed_at  timestamptz
)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  if _state is not null and not (_state = any (admin.task_states())) then
    raise exception 'unknown state %; expected one of %', quote_literal(left(_state, 100)),
      array_to_string(admin.task_states(), ', ') using errcode = '22023';
  end if;
  if _before_task_id is not null and _before_task_id < 1 then
    raise exception 'before_task_id must be a positive task id, got %', _before_task_id
      using errcode = '22023';
  end if;

  if _state in ('scheduled', 'ready', 'running', 'retrying') then
    return query
    select p.task_id, p.task_type, _state, p.priority, t.resource_key, t.max_attempts, p.lease_count,
           t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
      from queues.task_pending p
     -- lateral + limit 1: one primary-key probe per listed task
     cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
     where (_task_type is null or p.task_type = _task_type)
       and (_before_task_id is null or p.task_id < _before_task_id)
       and admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) = _state
     order by p.task_id desc
     limit _page;
  elsif _state is not null then
    return query
    select c.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
           (select count(*)::integer from queues.task_lease l where l.task_id = c.task_id),
           t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
      from queues.task_completed c
     cross join lateral (select * from queues.task x where x.task_id = c.task_id limit 1) t
     where c.outcome = _state
       and (_task_type is null or t.task_type = _task_type)
       and (_before_task_id is null or c.task_id < _before_task_id)
     order by c.task_id desc
     limit _page;
  else
    return query
    select t.task_id, t.task_type,
           coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)),
           t.priority, t.resource_key, t.max_attempts,
           coalesce(p.lease_count,
                    (select count(*)::integer from queues.task_lease l where l.task_id = t.task_id)),
           t.enqueued_at, t.scheduled_at, p.available_at, c.completed_at
      from queues.task t
      left join queues.task_pending p on p.task_id = t.task_id
      left join queues.task_completed c on c.task_id = t.task_id
     where (_task_type is null or t.task_type = _task_type)
       and (_before_task_id is null or t.task_id < _before_task_id)
     order by t.task_id desc
     limit _page;
  end if;
end;
$$;

create or replace function admin.list_tasks(
  _task_type      text default null,
  _state          text default null,
  _limit          integer default null,
  _before_task_id bigint default null
) returns table (
  task_id       bigint,
  task_type     text,
  state         text,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  lease_count   integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  available_at  timestamptz,
  completed_at  timestamptz
)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_tasks_at(now(), _task_type, _state, _limit, _before_task_id)
$$;

-- One task with everything recorded about it, as a JSON object:
--   {task: {..., state}, leases: [...], errors: [...], completion: {...} | null,
--    failed_attempts: [...], redriven_to: id | null, redriven_from: id | null}
-- Raises 23503 when there is no such task.
create or replace function admin.get_task_at(_now timestamptz, _task_id bigint)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;

  select jsonb_build_object(
           'task', to_jsonb(t) || jsonb_build_object(
             'state', coalesce(c.outcome,
                               admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)),
             'available_at', p.available_at,
             'current_lease_id', p.current_lease_id),
           'leases', coalesce((
             select jsonb_agg(jsonb_build_object(
                      'task_lease_id', l.task_lease_id, 'worker_id', l.worker_id,
                      'leased_at', l.leased_at, 'expires_at', l.expires_at,
                      'released_at', l.released_at, 'revoked_at', l.revoked_at, 'extensions', l.extensions,
                      'live', coalesce(l.task_lease_id = p.current_lease_id and p.available_at > _now, false))
                      order by l.task_lease_id)
               from queues.task_lease_effective l where l.task_id = t.task_id), '[]'::jsonb),
           'errors', coalesce((
             select jsonb_agg(to_jsonb(e) - 'task_id' order by e.error_id)
               from queues.error e where e.task_id = t.task_id), '[]'::jsonb),
           'completion', case when c.task_id is not null then to_jsonb(c) - 'task_id' end)
    into _result
    from queues.task t
    left join queues.task_pending p on p.task_id = t.task_id
    left join queues.task_completed c on c.task_id = t.task_id
   where t.task_id = _task_id;

  if _result is null then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  return _result || admin.task_retry_facts(_task_id);
end;
$$;

create or replace function admin.get_task(_task_id bigint)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.get_task_at(now(), _task_id)
$$;

-- Counts by task type and state: pending states over queues.task_pending (bounded by
-- pending work), completion outcomes over the last _window_seconds only (default 86400;
-- read through task_completed_completed_at_idx), so the cost never follows history.
-- Every registered type appears, with zero rows left out.
create or replace function admin.task_counts_at(_now timestamptz, _window_seconds integer)
  returns table (task_type text, state text, count bigint)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 86400);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 2592000 then
    raise exception 'window_seconds must be between 60 and 2592000 (30 days), got %', _window
      using errcode = '22023';
  end if;
  return query
  select p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state,
         count(*)
    from queues.task_pending p
   group by 1, 2
  union all
  select t.task_type, c.outcome, count(*)
    from queues.task_completed c
   -- lateral + limit 1: a primary-key probe per completion in the window
   cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
   where c.completed_at > _now - make_interval(secs => _window)
     and c.completed_at <= _now
   group by 1, 2
   order by 1, 2;
end;
$$;

create or replace function admin.task_counts(_window_seconds integer default null)
  returns table (task_type text, state text, count bigint)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.task_counts_at(now(), _window_seconds)
$$;

-- The registered task types (roles), for filters and forms.
create or replace function admin.list_task_types()
  returns table (task_type text, description text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_type, t.description from queues.task_type t order by t.task_type
$$;
--! EndIncluded admin/tasks.sql
--! Included admin/capacity.sql
-- Capacity planning per role (= task_type): how much work is waiting, how fast workers
-- get through it, and how many workers would drain it in 1, 4 or 8 hours.
--
-- Cost: pending/ready/running count queues.task_pending (bounded by pending work);
-- throughput reads only the completions of the last _window_seconds, through
-- task_completed_completed_at_idx, with primary-key probes into task and task_lease for
-- each of them; active workers read queues.worker. Nothing scans history.
--
-- Figures:
--   pending               tasks not completed (scheduled, ready, running, retrying)
--   ready                 claimable now
--   running               held by a live lease
--   active_workers        registered workers of this type seen within _dead_after_seconds
--                         and not stopped
--   completed_in_window   completions (any outcome) in the window
--   window_workers        distinct workers whose leases completed those tasks
--   tasks_per_worker_hour completed_in_window / (window_workers * window hours); null
--                         without completions in the window
--   estimated_hours_to_drain  pending / (tasks_per_worker_hour * active_workers); 0 when
--                         nothing is pending; null without a rate or without workers
--   workers_needed_1h/4h/8h   ceil(pending / (tasks_per_worker_hour * hours)); 0 when
--                         nothing is pending; null without a rate

create or replace function admin.capacity_at(
  _now                timestamptz,
  _task_type          text,
  _window_seconds     integer,
  _dead_after_seconds integer
) returns table (
  task_type                text,
  pending                  bigint,
  ready                    bigint,
  running                  bigint,
  active_workers           bigint,
  completed_in_window      bigint,
  window_workers           bigint,
  window_seconds           integer,
  tasks_per_worker_hour    double precision,
  estimated_hours_to_drain double precision,
  workers_needed_1h        bigint,
  workers_needed_4h        bigint,
  workers_needed_8h        bigint
)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 3600);
  _dead_after integer := coalesce(_dead_after_seconds, 600);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_type is not null
     and not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '23503', hint = 'Known task types are listed in queues.task_type.';
  end if;
  if _window not between 60 and 604800 then
    raise exception 'window_seconds must be between 60 and 604800 (7 days), got %', _window
      using errcode = '22023';
  end if;
  if _dead_after not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead_after
      using errcode = '22023';
  end if;

  return query
  with types as (
    select t.task_type from queues.task_type t
     where _task_type is null or t.task_type = _task_type
  ),
  queue as (
    select p.task_type,
           count(*) as pending,
           count(*) filter (where p.available_at <= _now) as ready,
           count(*) filter (where p.available_at > _now and p.current_lease_id is not null) as running
      from queues.task_pending p
     where _task_type is null or p.task_type = _task_type
     group by p.task_type
  ),
  recent as (
    -- Completions in the window by completed_at (index range scan); each is joined to its
    -- task and lease by primary key (lateral + limit 1 keeps these nested loops).
    select t.task_type, count(*) as completed, count(distinct l.worker_id) as workers
      from queues.task_completed c
     cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
      left join lateral (select y.worker_id from queues.task_lease y
                          where y.task_lease_id = c.task_lease_id limit 1) l on true
     where c.completed_at > _now - make_interval(secs => _window)
       and c.completed_at <= _now
       and (_task_type is null or t.task_type = _task_type)
     group by t.task_type
  ),
  workers as (
    select r.task_type, count(*) as active
      from queues.worker w
     cross join lateral unnest(w.task_types) as r(task_type)
     where w.stopped_at is null
       and w.last_seen_at > _now - make_interval(secs => _dead_after)
     group by r.task_type
  ),
  figures as (
    select ty.task_type,
           coalesce(q.pending, 0) as pending,
           coalesce(q.ready, 0) as ready,
           coalesce(q.running, 0) as running,
           coalesce(w.active, 0) as active,
           coalesce(r.completed, 0) as completed,
           coalesce(r.workers, 0) as workers,
           case when coalesce(r.completed, 0) > 0 and r.workers > 0
                then r.completed::double precision / (r.workers * (_window / 3600.0))
           end as rate
      from types ty
      left join queue q on q.task_type = ty.task_type
      left join recent r on r.task_type = ty.task_type
      left join workers w on w.task_type = ty.task_type
  )
  select f.task_type, f.pending, f.ready, f.running, f.active, f.completed, f.workers, _window,
         f.rate,
         case when f.pending = 0 then 0
              when f.rate is null or f.active = 0 then null
              else f.pending / (f.rate * f.active) end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 1))::bigint end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 4))::bigint end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 8))::bigint end
    from figures f
   order by f.task_type;
end;
$$;

-- Capacity of every role (_task_type null) or of one (23503 if unknown), over the last
-- hour of completions, counting workers seen within 10 minutes.
create or replace function admin.capacity(_task_type text default null)
  returns table (
    task_type                text,
    pending                  bigint,
    ready                    bigint,
    running                  bigint,
    active_workers           bigint,
    completed_in_window      bigint,
    window_workers           bigint,
    window_seconds           integer,
    tasks_per_worker_hour    double precision,
    estimated_hours_to_drain double precision,
    workers_needed_1h        bigint,
    workers_needed_4h        bigint,
    workers_needed_8h        bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.capacity_at(now(), _task_type, 3600, 600)
$$;
--! EndIncluded admin/capacity.sql
--! Included admin/dead_letters.sql
-- Dead letters, redrive and stale-lease recovery for the operations API. The queue owns
-- the semantics (queues.dead_letter, queues.redrive_task, queues.recover_stale_leases);
-- these wrappers add paging and validation, so the API role needs EXECUTE on admin
-- functions only.

-- Dead letters newest first, optionally of one _task_type, _limit per page (default 50,
-- at most 500), older than _before_task_id.
create or replace function admin.list_dead_letters(
  _task_type      text default null,
  _limit          integer default null,
  _before_task_id bigint default null
) returns table (
  task_id      bigint,
  task_type    text,
  payload      jsonb,
  outcome      text,
  completed_at timestamptz,
  last_error   text,
  attempts     integer
)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
begin
  perform admin.assert_task_type(_task_type);
  if _before_task_id is not null and _before_task_id < 1 then
    raise exception 'before_task_id must be a positive task id, got %', _before_task_id
      using errcode = '22023';
  end if;
  return query
  select d.task_id, d.task_type, d.payload, d.outcome, d.completed_at, d.last_error, d.attempts::integer
    from queues.dead_letter d
   where (_task_type is null or d.task_type = _task_type)
     and (_before_task_id is null or d.task_id < _before_task_id)
   order by d.task_id desc
   limit _page;
end;
$$;

-- Redrives one dead letter: a new task with the same type, payload, priority, resource key
-- and max_attempts. Returns the new task id. 22004 for null, 23503 for an unknown task,
-- 22023 when the task is not a dead letter (queues.redrive_task decides).
create or replace function admin.redrive_task(_task_id bigint)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  return queues.redrive_task(_task_id);
end;
$$;

-- Releases at once the live leases of workers not seen for _dead_after_seconds (default
-- 600, between 10 and 86400). Returns the leases released.
create or replace function admin.recover_stale_leases(_dead_after_seconds integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _dead_after integer := coalesce(_dead_after_seconds, 600);
begin
  if _dead_after not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead_after
      using errcode = '22023';
  end if;
  return query
  select r.task_id, r.task_lease_id, r.worker_id from queues.recover_stale_leases(_dead_after) r;
end;
$$;

-- Leases that recover_stale_leases would release now.
create or replace function admin.list_stale_leases()
  returns table (task_id bigint, task_lease_id bigint, worker_id text,
                 last_seen_at timestamptz, expires_at timestamptz)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return query
  select s.task_id, s.task_lease_id, s.worker_id, s.last_seen_at, s.expires_at
    from queues.stale_lease s
   order by s.task_id
   limit 1000;
end;
$$;

-- Retry and redrive facts of one task, merged into admin.get_task's answer:
--   {failed_attempts: [{task_lease_id, failed_at, retry_at}], redriven_to, redriven_from}
create or replace function admin.task_retry_facts(_task_id bigint)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  return jsonb_build_object(
    'failed_attempts', coalesce((
      select jsonb_agg(jsonb_build_object('task_lease_id', f.task_lease_id, 'failed_at', f.failed_at,
                                          'retry_at', f.retry_at) order by f.failed_at)
        from queues.task_attempt_failed f where f.task_id = _task_id), '[]'::jsonb),
    'redriven_to', (select r.new_task_id from queues.task_redriven r where r.task_id = _task_id limit 1),
    'redriven_from', (select r.task_id from queues.task_redriven r where r.new_task_id = _task_id limit 1));
end;
$$;
--! EndIncluded admin/dead_letters.sql
--! Included admin/metrics.sql
-- Throughput and completion statistics over a recent window, for the dashboard's chart
-- and the API's /metrics. Both read completions through task_completed_completed_at_idx
-- (cost follows the window, not history) and probe task and task_lease by primary key.

-- Completions per _bucket_seconds bucket over the last _window_seconds (defaults: one
-- hour in one-minute buckets; at most 1440 buckets), by task type and outcome. Buckets
-- without completions are left out.
create or replace function admin.throughput_at(_now timestamptz, _window_seconds integer, _bucket_seconds integer)
  returns table (bucket_start timestamptz, task_type text, outcome text, completed bigint)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 3600);
  _bucket integer := coalesce(_bucket_seconds, 60);
  _start timestamptz;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 604800 then
    raise exception 'window_seconds must be between 60 and 604800 (7 days), got %', _window
      using errcode = '22023';
  end if;
  if _bucket not between 10 and _window then
    raise exception 'bucket_seconds must be between 10 and window_seconds (%), got %', _window, _bucket
      using errcode = '22023';
  end if;
  if _window / _bucket > 1440 then
    raise exception 'at most 1440 buckets, got %', _window / _bucket using errcode = '54000';
  end if;
  _start := _now - make_interval(secs => _window);
  return query
  select _start + make_interval(secs => _bucket * floor(extract(epoch from c.completed_at - _start) / _bucket)),
         t.task_type, c.outcome, count(*)
    from queues.task_completed c
   cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
   where c.completed_at > _start and c.completed_at <= _now
   group by 1, 2, 3
   order by 1, 2, 3;
end;
$$;

create or replace function admin.throughput(_window_seconds integer default null, _bucket_seconds integer default null)
  returns table (bucket_start timestamptz, task_type text, outcome text, completed bigint)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.throughput_at(now(), _window_seconds, _bucket_seconds)
$$;

-- Upper bounds (seconds) of the duration histogram buckets; +Inf is implied.
create or replace function admin.duration_buckets() returns double precision[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select array[0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]::double precision[] $$;

-- Completions in the last _window_seconds (default 3600) by task type and outcome, with
-- the durations of leased completions (completed_at - leased_at of the completing lease):
-- their count, sum, and cumulative counts per admin.duration_buckets() bound.
create or replace function admin.completion_stats_at(_now timestamptz, _window_seconds integer)
  returns table (
    task_type        text,
    outcome          text,
    completed        bigint,
    timed            bigint,
    duration_sum     double precision,
    duration_buckets bigint[]
  )
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 3600);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 604800 then
    raise exception 'window_seconds must be between 60 and 604800 (7 days), got %', _window
      using errcode = '22023';
  end if;
  return query
  with recent as (
    select t.task_type, c.outcome, extract(epoch from c.completed_at - l.leased_at)::double precision as seconds
      from queues.task_completed c
     cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
      left join lateral (select y.leased_at from queues.task_lease y
                          where y.task_lease_id = c.task_lease_id limit 1) l on true
     where c.completed_at > _now - make_interval(secs => _window) and c.completed_at <= _now
  ),
  totals as (
    select r.task_type, r.outcome, count(*) as completed, count(r.seconds) as timed,
           coalesce(sum(r.seconds), 0) as duration_sum
      from recent r
     group by r.task_type, r.outcome
  ),
  buckets as (
    select b.task_type, b.outcome, array_agg(b.n order by b.i) as counts
      from (select r.task_type, r.outcome, u.i, count(*) filter (where r.seconds <= u.b) as n
              from recent r
             cross join unnest(admin.duration_buckets()) with ordinality as u(b, i)
             group by 1, 2, 3) b
     group by b.task_type, b.outcome
  )
  select t.task_type, t.outcome, t.completed, t.timed, t.duration_sum, b.counts
    from totals t
    join buckets b on b.task_type = t.task_type and b.outcome = t.outcome
   order by 1, 2;
end;
$$;

create or replace function admin.completion_stats(_window_seconds integer default null)
  returns table (
    task_type        text,
    outcome          text,
    completed        bigint,
    timed            bigint,
    duration_sum     double precision,
    duration_buckets bigint[]
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.completion_stats_at(now(), _window_seconds)
$$;
--! EndIncluded admin/metrics.sql
--! Included admin/processes.sql
-- The process view: the fact timeline of one business process's root, for the
-- send_email / send_sms (comms), file_deletion (files), account_deletion and
-- account_anonymization (accounts) processes.
--
-- Generic over the domains' naming convention (sql/CONVENTIONS.md, "facts are named for
-- the event"): a process X in schema S has a root S.X_task (key X_task_id) and, when they
-- exist, the facts S.X_supervisor_run, S.X_attempt (key X_attempt_id),
-- S.X_attempt_succeeded, S.X_attempt_failed, S.X_task_succeeded and S.X_task_failed.
-- Table names are read from the catalog and quoted with format('%I.%I'); ids go through
-- `using`. Every read is by the root's key (each fact table is indexed on it).

-- The processes the view knows, with their schemas.
create or replace function admin.processes()
  returns table (process text, schema_name text)
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  values ('send_email', 'comms'), ('send_sms', 'comms'), ('file_deletion', 'files'),
         ('account_deletion', 'accounts'), ('account_anonymization', 'accounts')
$$;

-- The schema-qualified, quoted name of a process's table S.X<suffix>, read from the
-- catalog; null when there is no such table.
create or replace function admin.process_table(_process text, _suffix text)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select format('%I.%I', n.nspname, c.relname)
    from admin.processes() p
    join pg_namespace n on n.nspname = p.schema_name
    join pg_class c on c.relnamespace = n.oid and c.relname = p.process || _suffix and c.relkind = 'r'
   where p.process = _process
$$;

-- Validates a process name and root id: 22004 for nulls, 22023 for an unknown process,
-- 23503 for an unknown root.
create or replace function admin.assert_process_root(_process text, _root_id bigint)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _found boolean;
begin
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _root_id is null then
    raise exception 'root_id must not be null' using errcode = '22004';
  end if;
  execute format('select exists (select 1 from %s r where r.%I = $1)',
                 admin.process_table(_process, '_task'), _process || '_task_id')
    into _found using _root_id;
  if not _found then
    raise exception '% % does not exist', _process, _root_id using errcode = '23503';
  end if;
end;
$$;

-- Every fact of one root, oldest first: started, supervisor_run, attempt,
-- attempt_succeeded, attempt_failed, succeeded, failed. `detail` is the fact row as JSON
-- without its keys and timestamp. An account deletion also shows its children: the
-- account's anonymization and the deletions of the account's files (their `process` and
-- `root_id` say which).
create or replace function admin.process_timeline(_process text, _root_id bigint)
  returns table (at timestamptz, process text, root_id bigint, fact text, attempt_id bigint, detail jsonb)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text := _process || '_task_id';
  _attempt_key text := _process || '_attempt_id';
  _attempt text;
  _parts text[] := '{}';
  _table text;
  _child record;
begin
  perform admin.assert_process_root(_process, _root_id);
  _attempt := admin.process_table(_process, '_attempt');

  _parts := _parts || format(
    'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint, to_jsonb(f) - %L - ''created_at''
       from %s f where f.%I = $1',
    _process, _root_id, 'started', _key, admin.process_table(_process, '_task'), _key);
  foreach _table in array array['_supervisor_run', '_task_succeeded', '_task_failed'] loop
    if admin.process_table(_process, _table) is not null then
      _parts := _parts || format(
        'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint,
                to_jsonb(f) - %L - %L - ''created_at''
           from %s f where f.%I = $1',
        _process, _root_id,
        case _table when '_supervisor_run' then 'supervisor_run'
                    when '_task_succeeded' then 'succeeded' else 'failed' end,
        _key, _process || _table || '_id', admin.process_table(_process, _table), _key);
    end if;
  end loop;
  if _attempt is not null then
    _parts := _parts || format(
      'select f.created_at, %L::text, %s::bigint, ''attempt''::text, f.%I, to_jsonb(f) - %L - %L - ''created_at''
         from %s f where f.%I = $1',
      _process, _root_id, _attempt_key, _key, _attempt_key, _attempt, _key);
    foreach _table in array array['_attempt_succeeded', '_attempt_failed'] loop
      if admin.process_table(_process, _table) is not null then
        _parts := _parts || format(
          'select f.created_at, %L::text, %s::bigint, %L::text, f.%I, to_jsonb(f) - %L - ''created_at''
             from %s f join %s a on a.%I = f.%I where a.%I = $1',
          _process, _root_id, substr(_table, 2), _attempt_key, _attempt_key,
          admin.process_table(_process, _table), _attempt, _attempt_key, _attempt_key, _key);
      end if;
    end loop;
  end if;

  return query execute
    'select * from (' || array_to_string(_parts, ' union all ') || ') t order by 1, 4'
    using _root_id;

  -- An account deletion's children, by account.
  if _process = 'account_deletion' then
    for _child in
      select 'account_anonymization' as process, x.account_anonymization_task_id as root_id
        from accounts.account_deletion_task d
        join accounts.account_anonymization_task x on x.account_id = d.account_id
       where d.account_deletion_task_id = _root_id
      union all
      select 'file_deletion', fd.file_deletion_task_id
        from accounts.account_deletion_task d
        join files.file f on f.account_id = d.account_id
        join files.file_deletion_task fd on fd.file_id = f.file_id
       where d.account_deletion_task_id = _root_id
    loop
      return query select * from admin.process_timeline(_child.process, _child.root_id);
    end loop;
  end if;
end;
$$;

-- Roots of one process newest first, _limit per page (default 50, at most 500), older
-- than _before_root_id, with their status (succeeded, failed or running) and the root
-- row's other columns as `subject`.
create or replace function admin.list_process_roots(
  _process        text,
  _limit          integer default null,
  _before_root_id bigint default null
) returns table (root_id bigint, created_at timestamptz, status text, subject jsonb)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _key text := _process || '_task_id';
begin
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _before_root_id is not null and _before_root_id < 1 then
    raise exception 'before_root_id must be a positive id, got %', _before_root_id using errcode = '22023';
  end if;
  return query execute format(
    'select r.%1$I, r.created_at,
            case when exists (select 1 from %3$s s where s.%1$I = r.%1$I) then ''succeeded''
                 when exists (select 1 from %4$s x where x.%1$I = r.%1$I) then ''failed''
                 else ''running'' end,
            to_jsonb(r) - %1$L - ''created_at''
       from %2$s r
      where $1 is null or r.%1$I < $1
      order by r.%1$I desc
      limit $2',
    _key, admin.process_table(_process, '_task'),
    admin.process_table(_process, '_task_succeeded'), admin.process_table(_process, '_task_failed'))
  using _before_root_id, _page;
end;
$$;

-- The process names the view knows (for the API's list).
create or replace function admin.list_processes()
  returns table (process text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.process from admin.processes() p order by 1
$$;
--! EndIncluded admin/processes.sql
--! Included admin/privileges.sql
-- Who may call what in admin. The operations API (:DATABASE_API) has no table or view
-- privileges: it reads and acts through the security definer functions below, plus
-- queues.enqueue to create tasks. Every grant is listed in sql/role-allowlist.json ("api").
-- The *_at functions take the clock and stay owner only.

revoke all on all tables in schema admin from public;
revoke execute on all functions in schema admin from public;

grant usage on schema admin to :DATABASE_API;
grant usage on schema queues to :DATABASE_API;

grant execute on function
  admin.list_tasks(text, text, integer, bigint),
  admin.get_task(bigint),
  admin.task_counts(integer),
  admin.list_task_types(),
  admin.capacity(text),
  admin.throughput(integer, integer),
  admin.completion_stats(integer),
  admin.list_dead_letters(text, integer, bigint),
  admin.redrive_task(bigint),
  admin.recover_stale_leases(integer),
  admin.list_stale_leases(),
  admin.process_timeline(text, bigint),
  admin.list_process_roots(text, integer, bigint),
  admin.list_processes()
to :DATABASE_API;

grant execute on function queues.enqueue(text, jsonb, timestamptz, integer, text, integer) to :DATABASE_API;
--! EndIncluded admin/privileges.sql

--! Included schedules/cron.sql
-- Cron expressions, evaluated in UTC.
--
-- Five fields: minute (0-59) hour (0-23) day-of-month (1-31) month (1-12)
-- day-of-week (0-7; 0 and 7 are Sunday). Each field is a comma list of items:
--   *      every value              a      one value
--   a-b    a range (a <= b)         */n    every n-th value from the field's minimum
--   a-b/n  every n-th value of a-b  a/n    every n-th value from a to the field's maximum
-- Names (JAN, MON), L, W, # and ? are not supported.
--
-- Day rule (Vixie/ISC cron, as cronie and Debian cron): when both day-of-month and
-- day-of-week are restricted, a day matches if EITHER matches; when either field
-- begins with '*' (so '*' or '*/n'), a day matches only if BOTH match.
--
--   schedules.parse_cron(cron)                the parsed fields; raises 22023/22004
--   schedules.next_fire_time(cron, after)     first fire time strictly after `after`
--   schedules.prev_fire_time(cron, before)    last fire time strictly before `before`
--   schedules.cron_error(cron)                the parse error message, or null

-- One field: a sorted array of the values it allows. _name names the field in errors.
create or replace function schedules.parse_cron_field(
  _field text, _name text, _min integer, _max integer
) returns integer[]
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _item text;
  _parts text[];
  _lo integer;
  _hi integer;
  _step integer;
  _values integer[] := '{}';
begin
  foreach _item in array string_to_array(_field, ',') loop
    -- (range)(/step)?, range: * | a | a-b
    _parts := regexp_match(_item, '^(\*|([0-9]{1,4})(?:-([0-9]{1,4}))?)(?:/([0-9]{1,4}))?$');
    if _parts is null then
      raise exception 'cron % field: % is not a number, a range a-b, * or a step x/n',
        _name, quote_literal(left(_item, 50))
        using errcode = '22023',
              hint = 'Fields are: minute hour day-of-month month day-of-week, e.g. ''*/15 0-6 * * 1-5''.';
    end if;
    if _parts[1] = '*' then
      _lo := _min;
      _hi := _max;
    else
      _lo := _parts[2]::integer;
      _hi := coalesce(_parts[3]::integer, case when _parts[4] is null then _lo else _max end);
      if _lo not between _min and _max then
        raise exception 'cron % field: % is out of range %-%', _name, _lo, _min, _max using errcode = '22023';
      end if;
      if _hi not between _min and _max then
        raise exception 'cron % field: % is out of range %-%', _name, _hi, _min, _max using errcode = '22023';
      end if;
      if _hi < _lo then
        raise exception 'cron % field: range %-% goes backwards', _name, _lo, _hi using errcode = '22023';
      end if;
    end if;
    _step := coalesce(_parts[4]::integer, 1);
    if _step < 1 then
      raise exception 'cron % field: step must be at least 1, got %', _name, _step using errcode = '22023';
    end if;
    _values := _values || array(select generate_series(_lo, _hi, _step));
  end loop;
  return array(select distinct v from unnest(_values) v order by v);
end;
$$;

-- The parsed fields of a 5-field cron expression; raises 22004 (null) or 22023 (malformed)
-- with a message naming the field. dows holds 0-6 (7 becomes 0). dom_restricted and
-- dow_restricted say whether the day fields are restricted for the day rule above.
create or replace function schedules.parse_cron(
  _cron text,
  out minutes integer[], out hours integer[], out doms integer[], out months integer[],
  out dows integer[], out dom_restricted boolean, out dow_restricted boolean
)
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _fields text[];
begin
  if _cron is null then
    raise exception 'cron must not be null' using errcode = '22004';
  end if;
  _fields := regexp_split_to_array(btrim(_cron, E' \t\n\r'), E'[ \t]+');
  if btrim(_cron, E' \t\n\r') = '' or cardinality(_fields) <> 5 then
    raise exception 'cron must have 5 fields (minute hour day-of-month month day-of-week), got % in %',
      case when btrim(_cron, E' \t\n\r') = '' then 0 else cardinality(_fields) end,
      quote_literal(left(_cron, 100))
      using errcode = '22023';
  end if;
  minutes := schedules.parse_cron_field(_fields[1], 'minute', 0, 59);
  hours   := schedules.parse_cron_field(_fields[2], 'hour', 0, 23);
  doms    := schedules.parse_cron_field(_fields[3], 'day-of-month', 1, 31);
  months  := schedules.parse_cron_field(_fields[4], 'month', 1, 12);
  dows    := array(select distinct case when d = 7 then 0 else d end
                     from unnest(case when _fields[5] ~ '^\*'
                                      then schedules.parse_cron_field(_fields[5], 'day-of-week', 0, 6)
                                      else schedules.parse_cron_field(_fields[5], 'day-of-week', 0, 7) end) d
                    order by 1);
  dom_restricted := _fields[3] !~ '^\*';
  dow_restricted := _fields[5] !~ '^\*';
end;
$$;

-- Whether a (UTC) day matches the day fields, by the day rule above.
create or replace function schedules.cron_day_matches(
  _day timestamp, _doms integer[], _dows integer[], _dom_restricted boolean, _dow_restricted boolean
) returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select case when _dom_restricted and _dow_restricted
              then extract(day from _day)::integer = any (_doms) or extract(dow from _day)::integer = any (_dows)
              else extract(day from _day)::integer = any (_doms) and extract(dow from _day)::integer = any (_dows)
         end
$$;

-- How far next_fire_time and prev_fire_time search before answering null: the rarest
-- possible cron ('0 0 29 2 *') fires at least every 8 years.
create or replace function schedules.cron_search_horizon() returns interval
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select interval '30 years' $$;

-- The first fire time strictly after _after (UTC, whole minutes), or null when the cron
-- never fires (e.g. '0 0 30 2 *'). Walks month → day → hour → minute, jumping over
-- non-matching months, days and hours, so a call costs tens of steps, not minutes.
create or replace function schedules.next_fire_time(_cron text, _after timestamptz)
  returns timestamptz
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _c record := schedules.parse_cron(_cron);
  _t timestamp;
  _limit timestamp;
  _h integer;
  _m integer;
begin
  if _after is null then
    raise exception 'after must not be null' using errcode = '22004';
  end if;
  _t := date_trunc('minute', _after at time zone 'UTC') + interval '1 minute';
  _limit := _t + schedules.cron_search_horizon();
  loop
    if _t > _limit then
      return null;
    end if;
    if not extract(month from _t)::integer = any (_c.months) then
      _t := date_trunc('month', _t) + interval '1 month';
      continue;
    end if;
    if not schedules.cron_day_matches(_t, _c.doms, _c.dows, _c.dom_restricted, _c.dow_restricted) then
      _t := date_trunc('day', _t) + interval '1 day';
      continue;
    end if;
    if not extract(hour from _t)::integer = any (_c.hours) then
      select min(h) into _h from unnest(_c.hours) h where h > extract(hour from _t)::integer;
      _t := case when _h is null then date_trunc('day', _t) + interval '1 day'
                 else date_trunc('day', _t) + make_interval(hours => _h) end;
      continue;
    end if;
    select min(m) into _m from unnest(_c.minutes) m where m >= extract(minute from _t)::integer;
    if _m is null then
      _t := date_trunc('hour', _t) + interval '1 hour';
      continue;
    end if;
    return (date_trunc('hour', _t) + make_interval(mins => _m)) at time zone 'UTC';
  end loop;
end;
$$;

-- The last fire time strictly before _before (UTC, whole minutes), or null when there is
-- none within the search horizon. The mirror image of next_fire_time.
create or replace function schedules.prev_fire_time(_cron text, _before timestamptz)
  returns timestamptz
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _c record := schedules.parse_cron(_cron);
  _b timestamp;
  _t timestamp;
  _limit timestamp;
  _h integer;
  _m integer;
begin
  if _before is null then
    raise exception 'before must not be null' using errcode = '22004';
  end if;
  _b := _before at time zone 'UTC';
  _t := date_trunc('minute', _b);
  if _t = _b then
    _t := _t - interval '1 minute';
  end if;
  _limit := _t - schedules.cron_search_horizon();
  loop
    if _t < _limit then
      return null;
    end if;
    if not extract(month from _t)::integer = any (_c.months) then
      _t := date_trunc('month', _t) - interval '1 minute';
      continue;
    end if;
    if not schedules.cron_day_matches(_t, _c.doms, _c.dows, _c.dom_restricted, _c.dow_restricted) then
      _t := date_trunc('day', _t) - interval '1 minute';
      continue;
    end if;
    if not extract(hour from _t)::integer = any (_c.hours) then
      select max(h) into _h from unnest(_c.hours) h where h < extract(hour from _t)::integer;
      _t := case when _h is null then date_trunc('day', _t) - interval '1 minute'
                 else date_trunc('day', _t) + make_interval(hours => _h, mins => 59) end;
      continue;
    end if;
    select max(m) into _m from unnest(_c.minutes) m where m <= extract(minute from _t)::integer;
    if _m is null then
      _t := date_trunc('hour', _t) - interval '1 minute';
      continue;
    end if;
    return (date_trunc('hour', _t) + make_interval(mins => _m)) at time zone 'UTC';
  end loop;
end;
$$;

-- Null when _cron is a valid cron that fires; else the message of what is wrong with it.
create or replace function schedules.cron_error(_cron text) returns text
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _cron is null then
    return 'cron is required';
  end if;
  perform schedules.parse_cron(_cron);
  if schedules.next_fire_time(_cron, '2000-01-01 00:00:00+00') is null then
    return format('cron %s never fires (no month has such a day)', quote_literal(left(_cron, 100)));
  end if;
  return null;
exception
  when sqlstate '22023' or sqlstate '22004' then
    return sqlerrm;
end;
$$;
--! EndIncluded schedules/cron.sql
--! Included schedules/supervisor.sql
-- The schedule supervisor: a db_function task that enqueues due schedule runs, records
-- them as facts, and re-enqueues itself at the next fire time among all schedules (at
-- most schedules.max_supervisor_sleep() later).
--
--   schedules.schedule_supervisor(payload)            worker: run through internal.run_function
--   schedules.schedule_supervisor_at(_now, payload)   owner only: the same with a chosen clock
--   schedules.ensure_schedule_supervisor()            app/api: idempotent kickoff
--   schedules.ensure_schedule_supervisor_at(_now)     owner only
--
-- Missed-run policies, for the fire times due (after the last handled one, up to now):
--   skip           fire times older than schedules.skip_grace_period() are not run: one
--                  'skipped' fact covers them all; each fire time within the grace window
--                  is enqueued as its own task.
--   catch_up_once  one task covers all of them: it is recorded under the latest due fire
--                  time, with first_fire_at the earliest.
-- Tasks are enqueued with scheduled_at = their fire time and the stored payload as is.
--
-- At most once per fire time: supervisors serialise on a transaction advisory lock, and
-- unique (schedule_id, fire_at) on schedule_run rejects any second enqueue of a fire time.

-- Fire times at most this old still run under the 'skip' policy.
create or replace function schedules.skip_grace_period() returns interval
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select interval '10 minutes' $$;

-- The supervisor wakes at least this often while any schedule is enabled, so a schedule
-- created without a kickoff (or a lost supervisor chain after ensure) is never far off.
create or replace function schedules.max_supervisor_sleep() returns interval
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select interval '1 hour' $$;

-- The advisory lock key that serialises supervisors and kickoffs.
create or replace function schedules.supervisor_lock_key() returns bigint
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 7305871629419384611::bigint $$;

-- Facts -------------------------------------------------------------------------------

-- The definition in force for a schedule (its newest version).
create or replace function schedules.current_version(_schedule_id bigint)
  returns schedules.schedule_version
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select v.* from schedules.schedule_version v
   where v.schedule_id = _schedule_id
   order by v.schedule_version_id desc
   limit 1
$$;

-- The latest fire time handled (enqueued or skipped), or null. A backward scan of the
-- unique (schedule_id, fire_at) index, limit 1: cost does not grow with history.
create or replace function schedules.last_fire_at(_schedule_id bigint)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select r.fire_at from schedules.schedule_run r
   where r.schedule_id = _schedule_id
   order by r.fire_at desc
   limit 1
$$;

-- The next fire time not yet handled (it may be in the past: then it is due), or null for
-- a disabled schedule.
create or replace function schedules.next_due_fire_at(_schedule_id bigint)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select case when v.enabled
              then schedules.next_fire_time(v.cron, greatest(v.fires_after, schedules.last_fire_at(_schedule_id)))
         end
    from schedules.current_version(_schedule_id) v
$$;

-- When the supervisor should next run: the earliest next due fire time (now if one is
-- overdue), at most max_supervisor_sleep() from now; null when no schedule is enabled.
create or replace function schedules.supervisor_wake_at(_now timestamptz)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select least(greatest(min(n.fire_at), _now), _now + schedules.max_supervisor_sleep())
    from schedules.schedule s
   cross join lateral (select schedules.next_due_fire_at(s.schedule_id) as fire_at) n
  having count(n.fire_at) > 0
$$;

-- The pending supervisor task that will run next, among those no worker holds a live
-- lease on (the running supervisor itself is leased, so it never counts): task_id and
-- when it becomes claimable. Only the newest 100 supervisor tasks are probed, by primary
-- key (`= any(array(...))`), so the cost does not grow with history; every older
-- supervisor task is completed in practice, and one that is not only costs a spare run.
create or replace function schedules.pending_supervisor_task(
  _now timestamptz, out task_id bigint, out available_at timestamptz
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select p.task_id, p.available_at
    from queues.task_pending p
   where p.task_id = any (array(select s.task_id from schedules.supervisor_task s
                                 order by s.task_id desc limit 100))
     and (p.current_lease_id is null or p.available_at <= _now)
   order by p.available_at, p.task_id
   limit 1
$$;

-- Effects -----------------------------------------------------------------------------

-- Enqueues the schedule's task for a fire time and records the run; returns the task_id.
create or replace function schedules.enqueue_schedule_run(
  _version schedules.schedule_version, _fire_at timestamptz, _first_fire_at timestamptz, _now timestamptz
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  _task_id := queues.enqueue(_version.task_type, _version.payload, _fire_at, _version.priority);
  insert into schedules.schedule_run
    (schedule_id, schedule_version_id, fire_at, first_fire_at, outcome, task_id, enqueued_at)
  values (_version.schedule_id, _version.schedule_version_id, _fire_at, _first_fire_at,
          'enqueued', _task_id, _now);
  return _task_id;
end;
$$;

-- Handles one schedule's due fire times at _now by its missed-run policy. Returns
-- {name, enqueued: [{fire_at, first_fire_at, task_id}], skipped: {first_fire_at, fire_at}}
-- or null when nothing was due. Locks the schedule row (FOR NO KEY UPDATE) first.
create or replace function schedules.run_schedule_at(_now timestamptz, _schedule_id bigint)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
  _v schedules.schedule_version;
  _first timestamptz;
  _last timestamptz;
  _from timestamptz;
  _fire timestamptz;
  _enqueued jsonb := '[]';
  _skipped jsonb;
  _task_id bigint;
begin
  select s.name into _name from schedules.schedule s where s.schedule_id = _schedule_id for no key update;
  _v := schedules.current_version(_schedule_id);
  if _name is null or not coalesce(_v.enabled, false) then
    return null;
  end if;
  _from := greatest(_v.fires_after, schedules.last_fire_at(_schedule_id));
  _first := schedules.next_fire_time(_v.cron, _from);
  if _first is null or _first > _now then
    return null;
  end if;

  if _v.missed_run_policy = 'catch_up_once' then
    -- The latest fire time at or before now (at least _first).
    _last := schedules.prev_fire_time(_v.cron, _now + interval '1 microsecond');
    _task_id := schedules.enqueue_schedule_run(_v, _last, _first, _now);
    _enqueued := jsonb_build_array(jsonb_build_object(
      'fire_at', _last, 'first_fire_at', _first, 'task_id', _task_id));
  else
    if _first < _now - schedules.skip_grace_period() then
      _last := schedules.prev_fire_time(_v.cron, _now - schedules.skip_grace_period());
      insert into schedules.schedule_run
        (schedule_id, schedule_version_id, fire_at, first_fire_at, outcome, task_id, enqueued_at)
      values (_schedule_id, _v.schedule_version_id, _last, _first, 'skipped', null, _now);
      _skipped := jsonb_build_object('first_fire_at', _first, 'fire_at', _last);
      _from := _last;
    end if;
    -- Within the grace window: each fire time is its own run (at most grace / 1 minute).
    loop
      _fire := schedules.next_fire_time(_v.cron, _from);
      exit when _fire is null or _fire > _now;
      _task_id := schedules.enqueue_schedule_run(_v, _fire, _fire, _now);
      _enqueued := _enqueued || jsonb_build_object('fire_at', _fire, 'first_fire_at', _fire, 'task_id', _task_id);
      _from := _fire;
    end loop;
  end if;
  return jsonb_build_object('name', _name, 'enqueued', _enqueued, 'skipped', _skipped);
end;
$$;

-- Enqueues the next supervisor run at _wake unless a pending supervisor task (not held
-- by a live lease) already becomes claimable by then; returns the task that will run.
-- Caller holds the supervisor advisory lock.
create or replace function schedules.plan_supervisor_at(_now timestamptz, _wake timestamptz)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending record;
  _task_id bigint;
begin
  select * into _pending from schedules.pending_supervisor_task(_now);
  if _wake is null then
    return _pending.task_id;
  end if;
  if _pending.task_id is not null and _pending.available_at <= _wake then
    return _pending.task_id;
  end if;
  _task_id := queues.enqueue('db_function',
    jsonb_build_object('task_type', 'db_function', 'db_function', 'schedules.schedule_supervisor'),
    _wake, 100, null, 3);
  insert into schedules.supervisor_task (task_id, scheduled_at, enqueued_at) values (_task_id, _wake, _now);
  return _task_id;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Owner only (tests move the clock). Handles every enabled schedule's due fire times,
-- then plans the next run. Returns {success: true, payload: {runs, enqueued, skipped,
-- next_supervisor_task_id, next_run_at}}; when a schedule raised, its effects are rolled
-- back, the others stand, and the envelope is {success: false, error, payload}.
create or replace function schedules.schedule_supervisor_at(_now timestamptz, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _schedule record;
  _run jsonb;
  _runs jsonb := '[]';
  _errors jsonb := '[]';
  _enqueued integer := 0;
  _skipped integer := 0;
  _wake timestamptz;
  _next_task_id bigint;
  _result jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());

  for _schedule in select s.schedule_id, s.name from schedules.schedule s order by s.schedule_id loop
    begin
      _run := schedules.run_schedule_at(_now, _schedule.schedule_id);
      if _run is not null then
        _runs := _runs || _run;
        _enqueued := _enqueued + jsonb_array_length(_run -> 'enqueued');
        _skipped := _skipped + case when _run -> 'skipped' = 'null' then 0 else 1 end;
      end if;
    exception when others then
      _errors := _errors || jsonb_build_object('name', _schedule.name, 'error', sqlerrm, 'sqlstate', sqlstate);
    end;
  end loop;

  _wake := schedules.supervisor_wake_at(_now);
  _next_task_id := schedules.plan_supervisor_at(_now, _wake);
  _result := jsonb_build_object(
    'status', 'ok', 'runs', _runs, 'enqueued', _enqueued, 'skipped', _skipped,
    'next_supervisor_task_id', _next_task_id, 'next_run_at', _wake);
  if jsonb_array_length(_errors) > 0 then
    return jsonb_build_object('success', false,
      'error', format('%s schedule(s) failed: %s', jsonb_array_length(_errors), _errors::text),
      'payload', _result || jsonb_build_object('errors', _errors));
  end if;
  return jsonb_build_object('success', true, 'payload', _result);
end;
$$;

-- The db_function the worker runs. Payload: {db_function: 'schedules.schedule_supervisor'}
-- (no other fields are read). See schedule_supervisor_at.
create or replace function schedules.schedule_supervisor(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select schedules.schedule_supervisor_at(now(), payload)
$$;

-- Kickoff --------------------------------------------------------------------------------

-- Owner only. Makes sure a supervisor task will run by the next due fire time (or within
-- max_supervisor_sleep()); enqueues one only when no pending supervisor task does.
-- Returns that task's id; null when no schedule is enabled and none is pending.
create or replace function schedules.ensure_schedule_supervisor_at(_now timestamptz)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());
  return schedules.plan_supervisor_at(_now, schedules.supervisor_wake_at(_now));
end;
$$;

-- Idempotent kickoff for apps and deploy scripts; see ensure_schedule_supervisor_at.
create or replace function schedules.ensure_schedule_supervisor()
  returns bigint
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select schedules.ensure_schedule_supervisor_at(now())
$$;
--! EndIncluded schedules/supervisor.sql
--! Included schedules/schedule.sql
-- Managing schedules: create or update, enable, disable, list. Apps and the REST API call
-- the public functions; each has an owner-only *_at(_now, ...) variant for tests. Bad
-- business input returns a validation_failure_message instead of raising.
--
-- A schedule's definition is append-only (schedule_version); the newest row is in force.
-- fires_after (fire times at or before it are never due) moves to now when a schedule is
-- created, re-enabled, or its cron changes; other changes keep it, so an edit of the
-- payload neither skips nor repeats a fire time.

-- Null when the definition is valid; else what is wrong with it (the first problem).
create or replace function schedules.schedule_definition_error(
  _name text, _cron text, _task_type text, _payload jsonb, _priority integer, _missed_run_policy text
) returns text
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _error text;
begin
  if _name is null or _name !~ '^[a-z][a-z0-9_.-]{0,99}$' then
    return 'name is required: 1 to 100 characters, lowercase letters, digits, _ . or -, starting with a letter';
  end if;
  _error := schedules.cron_error(_cron);
  if _error is not null then
    return _error;
  end if;
  if _task_type is null then
    return 'task_type is required';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    return format('unknown task_type %s', quote_literal(left(_task_type, 100)));
  end if;
  if _payload is null or jsonb_typeof(_payload) <> 'object' then
    return 'payload is required and must be a JSON object';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    return format('payload is %s bytes, over the limit of %s bytes', pg_column_size(_payload), queues.max_payload_bytes());
  end if;
  if _task_type = 'db_function' then
    begin
      perform internal.resolve_runnable_function(_payload ->> 'db_function');
    exception when others then
      return format('payload.db_function must name a runnable function: %s', sqlerrm);
    end;
  end if;
  if _priority is not null and _priority not between -1000 and 1000 then
    return format('priority must be between -1000 and 1000, got %s', _priority);
  end if;
  if _missed_run_policy is not null and _missed_run_policy not in ('skip', 'catch_up_once') then
    return format('missed_run_policy must be ''skip'' or ''catch_up_once'', got %s',
                  quote_literal(left(_missed_run_policy, 50)));
  end if;
  return null;
end;
$$;

-- Appends a version to a locked schedule unless it would change nothing; returns the
-- version in force.
create or replace function schedules.append_schedule_version(
  _now timestamptz, _schedule_id bigint, _cron text, _task_type text, _payload jsonb,
  _priority integer, _missed_run_policy text, _enabled boolean
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _current schedules.schedule_version := schedules.current_version(_schedule_id);
  _id bigint;
begin
  if _current.schedule_version_id is not null
     and (_current.cron, _current.task_type, _current.payload, _current.priority,
          _current.missed_run_policy, _current.enabled)
         is not distinct from (_cron, _task_type, _payload, _priority, _missed_run_policy, _enabled) then
    return _current.schedule_version_id;
  end if;
  insert into schedules.schedule_version
    (schedule_id, cron, task_type, payload, priority, missed_run_policy, enabled, fires_after, created_at)
  values (_schedule_id, _cron, _task_type, _payload, _priority, _missed_run_policy, _enabled,
          case when _current.schedule_version_id is null or (_enabled and not _current.enabled)
                    or _current.cron <> _cron
               then _now else _current.fires_after end,
          _now)
  returning schedule_version_id into _id;
  return _id;
end;
$$;

-- Owner only. Creates the schedule _name (enabled), or updates its definition (keeping
-- whether it is enabled). NULL priority means 0 and NULL missed_run_policy 'skip'. Kicks
-- off the supervisor. Idempotent: the same definition again appends nothing.
create or replace function schedules.upsert_schedule_at(
  _now               timestamptz,
  _name              text,
  _cron              text,
  _task_type         text,
  _payload           jsonb,
  _priority          integer default null,
  _missed_run_policy text default null,
  out schedule_id                bigint,
  out schedule_version_id        bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _enabled boolean;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  validation_failure_message := schedules.schedule_definition_error(
    _name, _cron, _task_type, _payload, _priority, _missed_run_policy);
  if validation_failure_message is not null then
    return;
  end if;

  -- The supervisor's lock first, then the schedule row: the supervisor takes them in
  -- this order too, so an edit and a supervisor run never deadlock.
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());
  insert into schedules.schedule (name, created_at) values (_name, _now) on conflict (name) do nothing;
  select s.schedule_id into schedule_id from schedules.schedule s where s.name = _name for no key update;
  _enabled := coalesce((schedules.current_version(schedule_id)).enabled, true);
  schedule_version_id := schedules.append_schedule_version(
    _now, schedule_id, btrim(_cron), _task_type, _payload, coalesce(_priority, 0),
    coalesce(_missed_run_policy, 'skip'), _enabled);
  perform schedules.ensure_schedule_supervisor_at(_now);
end;
$$;

create or replace function schedules.upsert_schedule(
  _name              text,
  _cron              text,
  _task_type         text,
  _payload           jsonb,
  _priority          integer default null,
  _missed_run_policy text default null,
  out schedule_id                bigint,
  out schedule_version_id        bigint,
  out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from schedules.upsert_schedule_at(now(), _name, _cron, _task_type, _payload, _priority, _missed_run_policy)
$$;

-- Owner only. Enables or disables the schedule _name; unchanged when it already is.
-- Re-enabling counts from now: fire times missed while disabled are never run.
create or replace function schedules.set_schedule_enabled_at(
  _now timestamptz, _name text, _enabled boolean,
  out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _v schedules.schedule_version;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _enabled is null then
    raise exception 'enabled must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key()); -- before the row lock, as above
  select s.schedule_id into schedule_id from schedules.schedule s where s.name = _name for no key update;
  if schedule_id is null then
    validation_failure_message := format('no schedule named %s', coalesce(quote_literal(left(_name, 100)), 'null'));
    return;
  end if;
  _v := schedules.current_version(schedule_id);
  schedule_version_id := schedules.append_schedule_version(
    _now, schedule_id, _v.cron, _v.task_type, _v.payload, _v.priority, _v.missed_run_policy, _enabled);
  if _enabled then
    perform schedules.ensure_schedule_supervisor_at(_now);
  end if;
end;
$$;

create or replace function schedules.enable_schedule(
  _name text, out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from schedules.set_schedule_enabled_at(now(), _name, true)
$$;

create or replace function schedules.disable_schedule(
  _name text, out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from schedules.set_schedule_enabled_at(now(), _name, false)
$$;

-- Every schedule with its definition in force, the last fire time handled and the next
-- one due (in the past when the supervisor is behind; null when disabled).
create or replace function schedules.list_schedules()
  returns table (
    schedule_id bigint, name text, cron text, task_type text, payload jsonb, priority integer,
    missed_run_policy text, enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz,
    created_at timestamptz, updated_at timestamptz
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select s.schedule_id, s.name, v.cron, v.task_type, v.payload, v.priority, v.missed_run_policy,
         v.enabled, schedules.last_fire_at(s.schedule_id), schedules.next_due_fire_at(s.schedule_id),
         s.created_at, v.created_at
    from schedules.schedule s
   cross join lateral schedules.current_version(s.schedule_id) v
   order by s.name
$$;
--! EndIncluded schedules/schedule.sql
--! Included schedules/staggered.sql
-- Staggered batch generation (the seed's generate_resync_tasks): spread N tasks over a
-- period in K batches, so a daily resync of every store does not arrive all at once.

-- Enqueues one _task_type task per element of _payloads (a JSON array of objects) in
-- _batches batches: batch i (1-based) is scheduled at _start + (i - 1) * _period / _batches.
-- Tasks keep input order and are split as evenly as possible: every batch gets
-- floor(N / K) tasks and the first N mod K batches one more (so with N < K the last
-- batches are empty). Returns one row per batch, empty ones included. All or nothing;
-- bad input raises 22004/22023/54000 naming the argument. NULL _priority means 0.
create or replace function schedules.generate_staggered_tasks(
  _task_type text,
  _payloads  jsonb,
  _start     timestamptz,
  _period    interval,
  _batches   integer,
  _priority  integer default null
) returns table (batch integer, scheduled_at timestamptz, task_count integer)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n integer;
  _bad record;
begin
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100)) using errcode = '22023';
  end if;
  if _payloads is null then
    raise exception 'payloads must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_payloads) <> 'array' then
    raise exception 'payloads must be a JSON array, got %', jsonb_typeof(_payloads) using errcode = '22023';
  end if;
  _n := jsonb_array_length(_payloads);
  if _n > 10000 then
    raise exception 'at most 10000 payloads per call, got %', _n using errcode = '54000';
  end if;
  select e.ordinality - 1 as idx, jsonb_typeof(e.value) as kind into _bad
    from jsonb_array_elements(_payloads) with ordinality e
   where jsonb_typeof(e.value) <> 'object'
   order by e.ordinality limit 1;
  if found then
    raise exception 'payloads[%] must be a JSON object, got %', _bad.idx, _bad.kind using errcode = '22023';
  end if;
  if _start is null then
    raise exception 'start must not be null' using errcode = '22004';
  end if;
  if _period is null then
    raise exception 'period must not be null' using errcode = '22004';
  end if;
  if extract(year from _period) <> 0 or extract(month from _period) <> 0 then
    raise exception 'period must be given in days, hours, minutes or seconds, not months or years (their length varies), got %', _period
      using errcode = '22023';
  end if;
  if _period <= interval '0' or _period > interval '366 days' then
    raise exception 'period must be more than 0 and at most 366 days, got %', _period using errcode = '22023';
  end if;
  if _batches is null then
    raise exception 'batches must not be null' using errcode = '22004';
  end if;
  if _batches not between 1 and 1000 then
    raise exception 'batches must be between 1 and 1000, got %', _batches using errcode = '22023';
  end if;
  if _priority is not null and _priority not between -1000 and 1000 then
    raise exception 'priority must be between -1000 and 1000, got %', _priority using errcode = '22023';
  end if;

  -- Element j (0-based) goes to batch b(j): the first r = N mod K batches hold q + 1 =
  -- ceil(N / K) elements, the rest q = floor(N / K).
  perform queues.enqueue_many(coalesce((
    select jsonb_agg(jsonb_build_object(
             'task_type', _task_type, 'payload', a.value, 'priority', coalesce(_priority, 0),
             'scheduled_at', _start + (a.b - 1) * (_period / _batches))
           order by a.j)
      from (
        select e.ordinality - 1 as j, e.value,
               case when e.ordinality - 1 < (_n % _batches) * (_n / _batches + 1)
                    then (e.ordinality - 1) / (_n / _batches + 1) + 1
                    else (_n % _batches) + (e.ordinality - 1 - (_n % _batches) * (_n / _batches + 1))
                                           / nullif(_n / _batches, 0) + 1
               end::integer as b
          from jsonb_array_elements(_payloads) with ordinality e
      ) a), '[]'::jsonb));

  return query
  select i, _start + (i - 1) * (_period / _batches),
         (_n / _batches + case when i <= _n % _batches then 1 else 0 end)::integer
    from generate_series(1, _batches) i
   order by i;
end;
$$;
--! EndIncluded schedules/staggered.sql
--! Included schedules/privileges.sql
-- Who may call what in schedules. The worker runs the supervisor through
-- internal.run_function; apps and the REST API manage schedules and generate staggered
-- batches. The *_at(_now, ...) variants, facts and effects are owner only.

revoke all on all tables in schema schedules from public;
revoke all on all sequences in schema schedules from public;
revoke execute on all functions in schema schedules from public;

grant usage on schema schedules to :DATABASE_WORKER, :DATABASE_APP, :DATABASE_API;

grant execute on function schedules.schedule_supervisor(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('schedules.schedule_supervisor(jsonb)');

grant execute on function
  schedules.upsert_schedule(text, text, text, jsonb, integer, text),
  schedules.enable_schedule(text),
  schedules.disable_schedule(text),
  schedules.list_schedules(),
  schedules.ensure_schedule_supervisor(),
  schedules.generate_staggered_tasks(text, jsonb, timestamptz, interval, integer, integer)
to :DATABASE_APP, :DATABASE_API;
--! EndIncluded schedules/privileges.sql
