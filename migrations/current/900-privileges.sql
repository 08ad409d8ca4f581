set local lock_timeout = '5s';

--!include queues/privileges.sql
--!include queues/privileges-hot-path.sql
--!include internal/privileges.sql
