-- A handler task's completion and its handler (success or error handler) in one statement
-- (queues.settle_with_handler, sql/queues/settle.sql): the worker no longer holds a
-- transaction open across the handler's round trip, the completion's and the commit's.
set local lock_timeout = '5s';

--!include queues/settle.sql
