-- Hot path: lean claim and completion, started marks, server-side steps.
set local lock_timeout = '5s';
-- lock: access exclusive on queues.task: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_pending: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_lease: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_completed: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_lease_extension: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_lease_release: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_lease_revocation: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_attempt_failed: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.error: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change

-- Foreign keys from the hot facts to queues.task and queues.task_lease are dropped: each
-- one made every fact insert probe and FOR KEY SHARE-lock its parent row (a tuple write on
-- an immutable row) and cost about 20 µs per task on the drain (BENCHMARKS.md, "where a
-- task's time goes"). The security-definer functions of sql/queues are the only writers of
-- these tables (the worker, app and api roles have no table privileges) and write a fact
-- only for a task or lease they have just read or locked; sql/queues/relations.test.ts
-- checks that no orphan fact exists after a concurrent workload. Keys are still task_id
-- first, so a task_id range partitioning of the facts keeps them local.
-- Locks: dropping a foreign key takes ACCESS EXCLUSIVE on the referencing table and
-- SHARE ROW EXCLUSIVE on the referenced one, briefly (lock_timeout above).
-- lock: access exclusive on queues.task: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_lease: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_completed: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_pending: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_lease_extension: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_lease_release: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.error: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_lease_revocation: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_attempt_failed: dropping its foreign keys (or one pointing at it), briefly
alter table queues.task_lease drop constraint if exists task_lease_task_id_fkey;
alter table queues.task_completed drop constraint if exists task_completed_task_id_fkey;
alter table queues.task_completed drop constraint if exists task_completed_task_lease_id_fkey;
alter table queues.task_pending drop constraint if exists task_pending_task_id_fkey;
alter table queues.task_lease_extension drop constraint if exists task_lease_extension_task_lease_id_fkey;
alter table queues.task_lease_release drop constraint if exists task_lease_release_task_lease_id_fkey;
-- Cold facts keep their keys to queues.task; their keys to queues.task_lease go too, so
-- that queues.task_lease can be truncated with the other hot facts (below).
alter table queues.error drop constraint if exists error_task_lease_id_fkey;
alter table queues.task_lease_revocation drop constraint if exists task_lease_revocation_task_lease_id_fkey;
alter table queues.task_attempt_failed drop constraint if exists task_attempt_failed_task_lease_id_fkey;
-- (A table that refers to a lease keeps task_id with a key to queues.task and no key to
-- queues.task_lease, so that the trigger below can truncate queues.task_lease.)
alter table queues.task_interruption drop constraint if exists task_interruption_task_lease_id_fkey;

-- Without the foreign keys, TRUNCATE queues.task ... CASCADE would leave these facts
-- behind: truncating queues.task truncates them too (retention tooling and tests rely on it).
create or replace function queues.truncate_task_facts() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  truncate queues.task_pending, queues.task_lease, queues.task_completed, queues.task_lease_extension,
           queues.task_lease_release, queues.task_lease_revocation, queues.task_lease_started;
  return null;
end;
$$;
drop trigger if exists truncate_task_facts on queues.task;
create trigger truncate_task_facts after truncate on queues.task
  for each statement execute function queues.truncate_task_facts();

-- A lease whose task the worker started (a processor ran, or a step began). Written by
-- the worker's completer before the task runs, in the same round trip as completions.
-- Only a started lease that expires counts towards abandoning the task and makes it a
-- suspect: tasks that waited in a crashed worker's local queue come back as ordinary
-- ready tasks. Append-only.
create table if not exists queues.task_lease_started (
  task_id       bigint not null,
  task_lease_id bigint not null,
  started_at    timestamptz not null default now(),
  primary key (task_id, task_lease_id)
);
comment on table queues.task_lease_started is 'Append-only: a lease whose task its worker started.';
drop trigger if exists forbid_update on queues.task_lease_started;
create trigger forbid_update before update on queues.task_lease_started
  for each statement execute function queues.forbid_fact_update();

-- Leases that ended without their task being started (expired or revoked while queued
-- in a worker's local queue): they count neither as expired leases nor as suspects.
alter table queues.task_pending add column if not exists unstarted_count integer not null default 0;

-- The claim reads ready rows of the caller's task types only: unleased rows by type in
-- claim order (rows holding a lease are not in this index, so a claim does not re-read
-- the tasks running everywhere), and leased rows by expiry (a claim reads only those
-- whose lease has expired).
create index if not exists task_pending_ready_idx
  on queues.task_pending (task_type, priority desc, scheduled_at, task_id)
  where current_lease_id is null;
create index if not exists task_pending_leased_idx
  on queues.task_pending (available_at)
  where current_lease_id is not null;
drop index if exists queues.task_pending_claim_idx;

drop function if exists queues.settle_tasks(bigint[], bigint[], bigint[], bigint[], text[], bigint[], text[]);
--!include queues/enqueue.sql
--!include queues/claim.sql
--!include queues/complete.sql
--!include queues/settle.sql
--!include queues/start.sql
--!include queues/steps.sql
--!include queues/workers.sql
--!include queues/maintenance.sql
--!include queues/privileges.sql
--!include queues/privileges-hot-path.sql
