-- A worker whose claim came back short asks when the next scheduled task of its types is
-- due (queues.next_claim_in_ms) and looks again then, instead of at its next poll; an
-- enqueue of a task due within a minute wakes the workers, so that they ask.
set local lock_timeout = '5s';

--!include queues/enqueue.sql
--!include queues/claim.sql
--!include queues/privileges.sql
