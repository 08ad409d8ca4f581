set local lock_timeout = '5s';
-- The ready set's rescuer run by the claims: the claim leases by expiry, and a cursor.
create index if not exists claim_lease_expires_at_idx on queues.claim_lease (expires_at);
create table if not exists queues.claim_lease_rescue_cursor (
  singleton       boolean primary key default true check (singleton),
  rescued_through timestamptz not null
);
comment on table queues.claim_lease_rescue_cursor is
  'The claim leases expired by rescued_through were rescued (queues.rescue_due_leases_at). One row; a read structure, not a fact.';
-- Leases before this migration are per-row (their tasks keep their claim-index rows).
insert into queues.claim_lease_rescue_cursor (rescued_through) values (now()) on conflict do nothing;
--!include queues/maintenance.sql
--!include queues/claim.sql
--!include queues/complete.sql
--!include queues/lease.sql
revoke execute on function queues.pending_rows_of(bigint[]) from public;
revoke execute on function queues.rescue_leases_at(timestamptz) from public;
revoke execute on function queues.rescue_lease_at(bigint, bigint[], timestamptz) from public;
revoke execute on function queues.rescue_due_leases_at(timestamptz) from public;
