set local lock_timeout = '5s';
-- Retention and the ready set: a task its claim lease holds has no claim-index row. A set
-- holding one is kept (its tasks are checked against their ends), a dependent held so keeps
-- its dependencies' set, and the check under the detach's lock reads the tasks claimed
-- since the set's checks.
-- The sweep behind the claims' rescue cursor (queues.sweep_claim_leases_step_at), run by
-- history maintenance: a claim lease committed after the cursor passed its expiry.
create table if not exists queues.claim_lease_sweep (
  singleton     boolean primary key default true check (singleton),
  swept_through timestamptz not null,
  sweep_to      timestamptz not null
);
comment on table queues.claim_lease_sweep is
  'History maintenance read the claim leases expired by swept_through again after their commit, and reads those up to sweep_to next (queues.sweep_claim_leases_step_at). One row; a read structure, not a fact.';
insert into queues.claim_lease_sweep (swept_through, sweep_to)
select c.rescued_through, c.rescued_through from queues.claim_lease_rescue_cursor c
on conflict do nothing;
--!include queues/maintenance.sql
--!include queues/flow_retention.sql
--!include queues/partitions_maintain.sql
revoke execute on function queues.sweep_claim_leases_step_at(timestamptz, integer) from public;
