set local lock_timeout = '5s';

-- queues.settle_with_handlers takes at most 50 completions per call (a subtransaction each);
-- a unique enqueue may depend on the running task of its key, which it does not replace.
--!include queues/settle.sql
--!include queues/unique.sql
