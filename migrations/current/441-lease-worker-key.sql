-- Bytes per task: a lease names its worker by an integer key instead of repeating the
-- worker id's text on every lease (RELIABILITY.md, "Bytes per task"). Each worker id is
-- kept once, in queues.worker_name; queues.claim_tasks_at looks its key up (adding it on
-- a worker id's first claim) and writes it to queues.task_lease.worker_key. Leases written
-- before keep their worker_id text (no rewrite of the history; retention drops them in
-- time); every reader takes the id from either (queues.task_lease_effective,
-- queues.stale_leases_at, admin.list_workers, admin.list_tasks, admin.capacity).
-- Partitions made from now on get the column from their parent
-- (queues.attach_history_partition copies the parent's columns and constraints).
set local lock_timeout = '5s';

-- Append-only and small (one row per worker process that ever claimed); claims read it
-- on every call, by the unique index on worker_id.
create table if not exists queues.worker_name (
  worker_key integer generated always as identity primary key,
  worker_id  text not null unique check (length(worker_id) between 1 and 200)
);
comment on table queues.worker_name is
  'Append-only: each worker id that took a lease, once, with the key its leases name it by (queues.task_lease.worker_key).';
create or replace trigger forbid_update before update on queues.worker_name
  for each statement execute function queues.forbid_fact_update();

-- lock: access exclusive on queues.task_lease: adds the nullable column worker_key, drops worker_id's not null and adds a check not valid: catalog changes only (no rewrite, no scan), once; no lock when already done
do $$
begin
  if not exists (select 1 from pg_attribute
                  where attrelid = 'queues.task_lease'::regclass and attname = 'worker_key' and not attisdropped) then
    alter table queues.task_lease add column worker_key integer;
    alter table queues.task_lease alter column worker_id drop not null;
    -- Every lease names its worker one way or the other. Not valid: rows written before
    -- all have worker_id, and validating would scan the whole history under the lock.
    alter table queues.task_lease add constraint task_lease_worker_named
      check (worker_key is not null or worker_id is not null) not valid;
  end if;
end;
$$;
comment on column queues.task_lease.worker_key is
  'The worker that took the lease (queues.worker_name); null on leases written before, which have worker_id.';
comment on column queues.task_lease.worker_id is
  'The worker that took the lease, on leases written before worker_key; null since.';

--!include queues/task_lease_effective.sql
--!include queues/claim.sql
--!include queues/workers.sql
--!include admin/workers.sql
--!include admin/capacity.sql
--!include admin/tasks.sql
