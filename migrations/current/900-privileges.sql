set local lock_timeout = '5s';

-- Grants last: every function the current files create exists by now.
--!include queues/privileges.sql
--!include admin/privileges.sql
