set local lock_timeout = '5s';
-- The grants of 600-cancel-running, 601-run-timeouts and 700-process-statements, after
-- every file defining them.
--!include queues/privileges.sql
--!include admin/privileges.sql
--!include internal/privileges.sql
