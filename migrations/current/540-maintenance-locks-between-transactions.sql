-- History maintenance takes its locks between the queue's transactions instead of
-- queueing for them (queues.lock_history_tables, sql/queues/partitions.sql): a lock
-- request that waits holds every later request behind it, so each claim queued behind
-- maintenance, and under a steady load (a batch of server-side steps always in flight,
-- holding task's partitions for tens of milliseconds) a request that waits at most 50 ms
-- was refused run after run. A step now asks without waiting, again every few ms, for up
-- to lock_timeout_ms: no claim waits for it meanwhile, so the window can be long. A
-- database still at the old default moves to the new one.
set local lock_timeout = '5s';

alter table queues.history_setting alter column lock_timeout_ms set default 2000;
update queues.history_setting set lock_timeout_ms = 2000, updated_at = now() where lock_timeout_ms = 50;

--!include queues/partitions.sql
