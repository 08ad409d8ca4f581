set local lock_timeout = '5s';
-- The specification's own SQL surface: its capacity view, worker_tasks, stale recovery and
-- resync generation under the names it uses (schema public); capacity measured per busy
-- worker-hour; envelopes that only report an error; fail_task then complete_task keeps
-- the failure.
--!include admin/capacity.sql
--!include queues/steps.sql
--!include queues/complete.sql
--!include public/role_based_worker.sql
--!include public/privileges.sql
