set local lock_timeout = '5s';

--!include queues/complete.sql
