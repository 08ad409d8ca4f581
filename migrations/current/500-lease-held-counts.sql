set local lock_timeout = '5s';
-- The readers of lease-held tasks: a claim lease whose tasks all ended under it is not
-- unnested; counts read the lease-held tasks per claim lease and type.
--!include queues/lease_held.sql
--!include admin/queue_controls.sql
--!include admin/tasks.sql
--!include admin/overview.sql
--!include admin/capacity.sql
