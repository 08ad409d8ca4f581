--! Previous: sha1:dc25d3f8fceb6bfe846d9bb57237f6dd9ad15274
--! Hash: sha1:a414ea949bb49d0efda96bf0cccc08e77579daba
--! Message: Vacuum queues.task_pending on 1,000 dead rows, unthrottled

--! split: 100-queues.sql
-- Queue core changes (sql/queues, sql/internal). Include changed files here.
--! Included queues/schema.sql
-- queues: the generic task queue.
--
-- Facts (never updated; deletions only by retention tooling run as the owner):
--   task            one row per unit of work, immutable
--   task_lease      one row per claim
--   task_completed  terminal fact, at most one per task
--   error           operational errors reported against a task
-- Derived (mutable, rebuildable from the facts by queues.rebuild_task_pending()):
--   task_pending    one row per task that is not completed; the claim index
--
-- This file is idempotent: it is re-included by later migrations when a table gains
-- a column (add `alter table ... add column if not exists` here, never edit history).

create schema if not exists queues;
revoke all on schema queues from public;

create table if not exists queues.task_type (
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
  ('file_delete', 'Delete a stored object through the files service, with handlers.')
on conflict (task_type) do nothing;

create table if not exists queues.task (
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
comment on table queues.task is 'A unit of work. Immutable: state lives in task_lease, task_completed and error.';

create table if not exists queues.task_lease (
  task_lease_id bigint generated always as identity primary key,
  task_id       bigint not null references queues.task on delete cascade,
  worker_id     text not null check (length(worker_id) between 1 and 200),
  leased_at     timestamptz not null default now(),
  expires_at    timestamptz not null,
  check (expires_at > leased_at)
);
create index if not exists task_lease_task_id_idx on queues.task_lease (task_id);
comment on table queues.task_lease is 'Append-only: one row per claim of a task.';

create table if not exists queues.task_completed (
  task_id       bigint primary key references queues.task on delete cascade,
  -- The lease the completing worker held (null: completed without a lease).
  task_lease_id bigint references queues.task_lease on delete cascade,
  completed_at  timestamptz not null default now(),
  outcome       text not null
                check (outcome in ('succeeded', 'failed', 'abandoned', 'cancelled'))
);
create index if not exists task_completed_lease_idx on queues.task_completed (task_lease_id);
comment on table queues.task_completed is 'Terminal fact: a completed task is never claimed again.';

create table if not exists queues.error (
  error_id      bigint generated always as identity primary key,
  task_id       bigint not null references queues.task on delete cascade,
  task_lease_id bigint references queues.task_lease on delete cascade,
  error_message text not null,
  created_at    timestamptz not null default now()
);
create index if not exists error_task_id_idx on queues.error (task_id);
create index if not exists error_task_lease_id_idx on queues.error (task_lease_id);
comment on table queues.error is 'Append-only operational errors reported against a task.';

-- The claim index. Not a fact: one row per task that is not completed, deleted on
-- completion, so the cost of a claim depends on pending work only, never on history.
-- Claiming updates the row (available_at moves to the lease expiry); that update is
-- what makes claims exclusive under READ COMMITTED, because a concurrent claimer that
-- reaches the row after the update re-evaluates `available_at <= now()` on the new
-- version and skips it. None of the updated columns is indexed, so the update is HOT.
create table if not exists queues.task_pending (
  task_id          bigint primary key references queues.task on delete cascade,
  task_type        text not null,
  priority         integer not null,
  scheduled_at     timestamptz not null,
  resource_key     text,
  -- scheduled_at until the first claim, then the expiry of the current lease.
  available_at     timestamptz not null,
  current_lease_id bigint,
  lease_count      integer not null default 0
) with (fillfactor = 80);
create index if not exists task_pending_claim_idx
  on queues.task_pending (priority desc, scheduled_at, task_id);
comment on table queues.task_pending is
  'Derived claim index: tasks not yet completed. Rebuild with queues.rebuild_task_pending().';
-- Every task leaves a dead row here when it completes, at the front of the claim index,
-- where every claim starts reading. Vacuum it on a fixed number of dead rows (not a
-- fraction of a table that is small by design), unthrottled: it is a few MB at most.
-- With the default autovacuum_naptime (60 s) a busy queue still gathers a minute of dead
-- rows between vacuums; docs/operations.md recommends 10 s.
alter table queues.task_pending set (
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_cost_delay = 0
);

-- Heartbeats: each extension of a live lease, appended. A lease's expiry is the newest
-- extension's expires_at, or its own.
create table if not exists queues.task_lease_extension (
  task_lease_extension_id bigint generated always as identity primary key,
  task_lease_id bigint not null references queues.task_lease on delete cascade,
  extended_at   timestamptz not null default now(),
  expires_at    timestamptz not null,
  check (expires_at > extended_at)
);
create index if not exists task_lease_extension_lease_idx on queues.task_lease_extension (task_lease_id);
comment on table queues.task_lease_extension is 'Append-only: a lease extended by its worker''s heartbeat.';

-- A lease given back before it expired (graceful shutdown): the task is claimable at once,
-- and the release does not count towards abandoning the task.
create table if not exists queues.task_lease_release (
  task_lease_id bigint primary key references queues.task_lease on delete cascade,
  released_at   timestamptz not null default now()
);
comment on table queues.task_lease_release is 'Append-only: a lease released by its worker before expiry.';

-- Leases released by their workers do not count towards abandoning a task.
alter table queues.task_pending add column if not exists released_count integer not null default 0;

-- A live lease taken away from a worker that stopped heartbeating (stale recovery).
-- Unlike a release it counts as an expired lease towards abandoning the task.
create table if not exists queues.task_lease_revocation (
  task_lease_id bigint primary key references queues.task_lease on delete cascade,
  revoked_at    timestamptz not null default now(),
  reason        text not null
);
comment on table queues.task_lease_revocation is 'Append-only: a lease revoked because its worker stopped heartbeating.';

-- Simple retries: a failed run of a task with max_attempts > 1 and attempts left, and
-- when it runs again. The task completes 'failed' after its last attempt.
create table if not exists queues.task_attempt_failed (
  task_attempt_failed_id bigint generated always as identity primary key,
  task_id       bigint not null references queues.task on delete cascade,
  task_lease_id bigint references queues.task_lease on delete cascade,
  failed_at     timestamptz not null default now(),
  retry_at      timestamptz not null
);
create index if not exists task_attempt_failed_task_idx on queues.task_attempt_failed (task_id);
comment on table queues.task_attempt_failed is 'Append-only: a failed attempt of a task that will be retried.';

-- A dead letter sent round again: the new task copies the old one.
create table if not exists queues.task_redriven (
  task_id     bigint primary key references queues.task on delete cascade,
  new_task_id bigint not null references queues.task on delete cascade,
  redriven_at timestamptz not null default now()
);
comment on table queues.task_redriven is 'Append-only: a dead-lettered task redriven as new_task_id.';

-- Dead letters are read newest first; only unsuccessful completions are indexed.
create index if not exists task_completed_unsuccessful_idx
  on queues.task_completed (completed_at desc) where outcome <> 'succeeded';

-- Derived (like task_pending): which task holds each resource key, until when. At most
-- one task per resource key is leased at a time; the claim takes the key with an
-- upsert that waits for a concurrent claimer's decision, so two claimers cannot both
-- take it. Rebuilt from the leases by queues.rebuild_task_pending().
create table if not exists queues.resource_lease (
  resource_key text primary key,
  task_id      bigint not null references queues.task on delete cascade,
  expires_at   timestamptz not null
);
comment on table queues.resource_lease is 'Derived: the task holding each resource key and until when.';

-- Workers, as last seen by their heartbeats. Observability, not facts: kept current by
-- queues.record_worker_heartbeat and queues.record_worker_stopped.
create table if not exists queues.worker (
  worker_id    text primary key check (length(worker_id) between 1 and 200),
  task_types   text[] not null,
  started_at   timestamptz not null default now(),
  last_seen_at timestamptz not null default now(),
  stopped_at   timestamptz
);
comment on table queues.worker is 'Workers and their last heartbeat (mutable registry).';

alter table queues.task_pending add column if not exists max_attempts integer not null default 1;
alter table queues.task_pending add column if not exists failed_attempts integer not null default 0;

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

-- Facts are never updated.
create or replace function queues.forbid_fact_update() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception '%.% is append-only: rows are never updated', tg_table_schema, tg_table_name
    using errcode = '55000';
end;
$$;

do $$
declare
  _table text;
begin
  foreach _table in array array['task', 'task_lease', 'task_completed', 'error',
                                'task_lease_extension', 'task_lease_release', 'task_lease_revocation',
                                'task_attempt_failed', 'task_redriven'] loop
    if not exists (
      select 1 from pg_trigger
       where tgrelid = to_regclass(format('queues.%I', _table))
         and tgname = 'forbid_update'
    ) then
      execute format(
        'create trigger forbid_update before update on queues.%I
           for each statement execute function queues.forbid_fact_update()', _table);
    end if;
  end loop;
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

drop trigger if exists notify_task_ready on queues.task_pending;
create trigger notify_task_ready after insert on queues.task_pending
  for each statement execute function queues.notify_task_ready();
--! EndIncluded queues/schema.sql

--! split: 200-domains.sql
-- Business domains (sql/comms, sql/files, sql/accounts, sql/api). Include changed files here.

--! split: 300-operations.sql
-- Operations: admin functions for the REST API (sql/admin), schedules (sql/schedules).
