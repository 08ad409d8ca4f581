set local lock_timeout = '5s';

-- queues.register_task_types: the owner registers the task types an app's task
-- definitions (@org/tasks) declare.
--!include queues/task_type.sql
