set local lock_timeout = '5s';
-- The readers of leased tasks see the ready set's lease-held tasks (no claim-index row, no
-- end: held by their claim lease), through queues.lease_held_tasks and
-- queues.task_pending_or_held (sql/queues/lease_held.sql).
--!include queues/lease_held.sql
--!include queues/dependencies.sql
--!include admin/tasks.sql
--!include admin/workers.sql
--!include admin/capacity.sql
--!include admin/history.sql
--!include admin/overview.sql
--!include admin/queue_controls.sql
--!include admin/schedules.sql
--!include admin/task_actions.sql
--!include public/role_based_worker.sql
--!include schedules/supervisor_facts.sql
--!include queues/limits.sql
revoke execute on function queues.lease_held_of(bigint) from public;
revoke execute on function queues.task_pending_or_held_of(bigint) from public;
