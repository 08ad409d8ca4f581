set local lock_timeout = '5s';
-- The worker's grants of the hot path, after every function of this migration exists.
--!include queues/privileges-hot-path.sql
