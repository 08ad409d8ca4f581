-- A claim that abandons a poison task names its type from the claim index row it already
-- read (queues.task_pending), not from queues.task: the claim's plan no longer reads a
-- partitioned table it does not otherwise need.
set local lock_timeout = '5s';

--!include queues/claim.sql
