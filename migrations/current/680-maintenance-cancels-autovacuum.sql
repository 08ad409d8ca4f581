-- A maintenance step blocked by an autovacuum of a table it must lock cancels it
-- (queues.cancel_autovacuum, sql/queues/partitions.sql), as PostgreSQL does for a lock
-- that waited deadlock_timeout, which a step never waits.
set local lock_timeout = '5s';

--!include queues/partitions.sql
