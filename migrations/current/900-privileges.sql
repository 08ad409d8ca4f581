set local lock_timeout = '5s';

-- The grants of every schema whose functions the changes above added or replaced, after
-- all of them: a privileges file grants by full signature, so each function it names must
-- exist by then.
--!include internal/privileges.sql
--!include queues/privileges.sql
--!include queues/privileges-hot-path.sql
--!include files/privileges.sql
--!include admin/privileges.sql
--!include schedules/privileges.sql
--!include public/privileges.sql
