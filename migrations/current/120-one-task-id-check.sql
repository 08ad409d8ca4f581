set local lock_timeout = '5s';

-- One check of a list of task ids (queues.assert_task_ids), called by the queue's cancel
-- and the API's actions alike; the start times of a settlement read in input order.
--!include queues/cancel.sql
--!include queues/settle.sql
--!include admin/task_actions.sql
drop function if exists admin.assert_task_ids(bigint[]);
