-- A heartbeat never waits for a task's row: a lease whose row another transaction holds
-- (its completion in flight) is left as it is and returned as still held
-- (queues.extend_leases_at, sql/queues/lease.sql).
set local lock_timeout = '5s';

--!include queues/lease.sql
