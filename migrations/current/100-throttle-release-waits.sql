set local lock_timeout = '5s';

-- The tasks a throttle gives back wait for its end; a clear makes them available at once.
--!include queues/throttle.sql
