set local lock_timeout = '5s';

--!include queues/privileges.sql
--!include admin/privileges.sql
