-- A start mark that arrives after its lease's own completion (a fast task, or a step run
-- in the database) is recorded: that task did start (queues.mark_started).
set local lock_timeout = '5s';

--!include queues/start.sql
