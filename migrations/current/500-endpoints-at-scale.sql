-- The operations endpoints cost the same with a long history: the task and dead letter
-- lists walk the partition sets newest first (each read pruned to one set at plan time),
-- and the history status sizes each partition once and reads its sets in one statement.
set local lock_timeout = '5s';

--!include queues/partitions.sql
--!include admin/history.sql
--!include admin/tasks.sql
--!include admin/dead_letters.sql
