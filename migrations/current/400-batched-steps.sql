set local lock_timeout = '5s';

-- Server-side steps in batches: queues.run_steps runs consecutive steps of one function in
-- one statement and completes them in one statement (queues.complete_steps), falling back
-- to one step at a time (queues.run_step) when a step raises or a completion is refused.
--!include queues/steps.sql
--!include queues/privileges-hot-path.sql
