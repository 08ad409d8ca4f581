-- The hot path's plans stop depending on task_pending's statistics, and a start mark that
-- arrives after its lease's own completion is recorded (queues.mark_started).
--
-- Autovacuum takes task_pending's statistics when a busy queue has just drained: many
-- pages, nearly no live row. Every plan made with them thought each of its indexes held
-- one row, so a full scan of task_pending_leased_idx cost as little as a primary-key probe,
-- and the planner chose it for probes by (task_id, current_lease_id): each probe then read
-- every leased row, dead index entries included (millions a second in a soak). Its
-- successor, task_pending_lease_expiry_idx, covers current_lease_id > 0 (lease ids are
-- positive): a probe's current_lease_id = <parameter> does not imply that, so only the
-- primary key serves it; the claim's expired leases and a worker's revocation name the
-- predicate themselves. The build holds writes of task_pending while it runs (the
-- pending tasks only, not the history).
set local lock_timeout = '5s';

create index if not exists task_pending_lease_expiry_idx
  on queues.task_pending (available_at) where current_lease_id > 0;
-- lock: access exclusive on queues.task_pending: dropping the old index is a catalog change (milliseconds), its successor is built first
drop index if exists queues.task_pending_leased_idx;

--!include queues/start.sql
--!include queues/claim.sql
--!include queues/workers.sql
--!include queues/lease.sql
