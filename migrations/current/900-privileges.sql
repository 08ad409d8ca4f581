set local lock_timeout = '5s';
-- The grants of 600-cancel-running and 601-run-timeouts, after every file defining them.
--!include queues/privileges.sql
--!include admin/privileges.sql
