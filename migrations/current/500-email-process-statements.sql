set local lock_timeout = '5s';

--!include queues/settle.sql
--!include queues/pause.sql
