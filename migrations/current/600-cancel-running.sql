set local lock_timeout = '5s';
-- Cancelling running tasks (sql/queues/cancel.sql): admin.cancel_tasks now ends tasks
-- under a live lease too; the worker learns it at its next heartbeat.
--!include queues/cancel.sql
--!include admin/task_actions.sql
--!include internal/process_support.sql
