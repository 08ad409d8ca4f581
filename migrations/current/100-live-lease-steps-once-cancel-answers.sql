set local lock_timeout = '5s';
-- A provider call judges its lease as the queue does (heartbeats applied); each step body
-- runs once per attempt; cancel, run-now and redrive answer from a fresh read after a wait.

-- Registered functions are called through internal.call_runnable, built from the
-- registry (and rebuilt by each registration from now on).
--!include internal/run_function.sql
select internal.build_call_runnable();
--!include queues/steps.sql
--!include internal/delivery.sql
--!include admin/task_actions.sql
