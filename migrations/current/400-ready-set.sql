set local lock_timeout = '5s';
--!include queues/maintenance.sql
--!include queues/claim.sql
--!include queues/complete.sql
revoke execute on function queues.pending_rows_of(bigint[]) from public;
revoke execute on function queues.rescue_leases_at(timestamptz) from public;
