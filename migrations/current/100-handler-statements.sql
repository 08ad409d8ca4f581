set local lock_timeout = '5s';

-- queues.settle_with_handlers takes at most 50 completions per call (a subtransaction each).
--!include queues/settle.sql
