set local lock_timeout = '5s';

-- The before handlers of a group of channel tasks in one statement
-- (internal.run_before_provider_calls), granted to the worker.
--!include internal/delivery.sql
--!include internal/privileges.sql
