set local lock_timeout = '5s';
-- Retention and the ready set: a task its claim lease holds has no claim-index row. A set
-- holding one is kept (its tasks are checked against their ends), a dependent held so keeps
-- its dependencies' set, and the check under the detach's lock reads the tasks claimed
-- since the set's checks.
-- The ready set's rescuer reads the claim leases due from a table of its own
-- (queues.claim_lease_due: one row per claim that took a task out of the claim index,
-- deleted by the pass that rescues it), not from claim_lease's partitions and a cursor:
-- a claim locks no partition of claim_lease unless a lease is due, and a lease committed
-- after its expiry is still found.
create table if not exists queues.claim_lease_due (
  task_lease_id bigint primary key,
  task_id       bigint not null,
  expires_at    timestamptz not null
);
create index if not exists claim_lease_due_expires_at_idx on queues.claim_lease_due (expires_at);
comment on table queues.claim_lease_due is
  'The claim leases the rescuer has still to read, by expiry (queues.rescue_due_leases_at): one row per claim that took a task out of the claim index, deleted when rescued. A read structure, not a fact.';
-- Claim leases the cursor (migrations/current/400) has not read yet and that hold a task
-- out of the claim index (no row, no end) are due. Leases per row (written before the
-- ready set) hold their tasks on their rows: none is due.
insert into queues.claim_lease_due (task_lease_id, task_id, expires_at)
select c.task_lease_id, c.task_id, c.expires_at
  from queues.claim_lease c
 where to_regclass('queues.claim_lease_rescue_cursor') is not null
   and c.expires_at > (select r.rescued_through from queues.claim_lease_rescue_cursor r)
   and exists (select 1 from unnest(c.task_ids) u(task_id)
                where not exists (select 1 from queues.task_pending p where p.task_id = u.task_id)
                  and not exists (select 1 from queues.task_end_of(u.task_id) e))
on conflict do nothing;
drop table if exists queues.claim_lease_rescue_cursor;
--!include queues/maintenance.sql
--!include queues/claim.sql
--!include queues/flow_retention.sql
--!include queues/partitions_maintain.sql
