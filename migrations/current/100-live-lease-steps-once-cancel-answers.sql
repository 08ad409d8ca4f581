set local lock_timeout = '5s';
-- A provider call judges its lease as the queue does (heartbeats applied); each step body
-- runs once per attempt; cancel, run-now and redrive answer from a fresh read after a wait.

--!include queues/steps.sql
--!include internal/delivery.sql
--!include queues/privileges-hot-path.sql
--!include admin/task_actions.sql
