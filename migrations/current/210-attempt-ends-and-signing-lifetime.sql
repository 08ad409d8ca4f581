set local lock_timeout = '5s';

--!include internal/process_support.sql
--!include files/signing.sql
