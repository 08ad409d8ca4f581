-- A dead worker process's started tasks (suspects) wait for their leases' expiry after
-- a revocation; its queued tasks are claimable at once (queues.revoke_worker_leases).
set local lock_timeout = '5s';

--!include queues/workers.sql
