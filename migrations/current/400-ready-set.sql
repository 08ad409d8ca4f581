set local lock_timeout = '5s';
-- The ready set (docs/design/hot-path.md): a claim takes an unkeyed task of an unlimited
-- type out of the claim index on its first lease, and its claim lease holds it. The
-- rescuer reads the claim leases due from a table of its own (queues.claim_lease_due: one
-- row per claim that took a task out of the claim index, deleted by the pass that rescues
-- it), not from claim_lease's partitions: a claim locks no partition of claim_lease unless
-- a lease is due, and a lease committed after its expiry is still found. Leases written
-- before this migration are per row (their tasks keep their claim-index rows): none is due.
create table if not exists queues.claim_lease_due (
  task_lease_id bigint primary key,
  task_id       bigint not null,
  expires_at    timestamptz not null
);
create index if not exists claim_lease_due_expires_at_idx on queues.claim_lease_due (expires_at);
comment on table queues.claim_lease_due is
  'The claim leases the rescuer has still to read, by expiry (queues.rescue_due_leases_at): one row per claim that took a task out of the claim index, deleted when rescued. A read structure, not a fact.';
--!include queues/maintenance.sql
--!include queues/claim.sql
--!include queues/complete.sql
--!include queues/lease.sql
revoke execute on function queues.pending_rows_of(bigint[]) from public;
revoke execute on function queues.rescue_leases_at(timestamptz) from public;
revoke execute on function queues.rescue_lease_at(bigint, bigint[], timestamptz) from public;
revoke execute on function queues.rescue_due_leases_at(timestamptz) from public;
