-- Functions are created without EXECUTE for PUBLIC: only explicit grants count.
-- (Only the global form works; a per-schema revoke of a default grant does nothing.)
alter default privileges revoke execute on routines from public;

--!include queues/schema.sql
--!include queues/enqueue.sql
--!include queues/claim.sql
--!include queues/complete.sql
--!include queues/fail.sql
--!include queues/maintenance.sql
--!include queues/privileges.sql
--!include internal/schema.sql
--!include internal/run_function.sql
--!include internal/privileges.sql
