set local lock_timeout = '5s';
-- The drain's completion (docs/design/hot-path.md, "The drain on the ready set,
-- profiled"): a round of plain successes runs no error check and no outcome or retry
-- query in queues.settle_tasks and queues.complete_tasks (whose file
-- 400-ready-set.sql includes), and deletes claim-index rows only for the tasks that had one.
--!include queues/settle.sql
