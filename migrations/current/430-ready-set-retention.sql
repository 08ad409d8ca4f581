set local lock_timeout = '5s';
-- Retention and the ready set: a task its claim lease holds has no claim-index row. A set
-- holding one is kept (its tasks are checked against their ends), a dependent held so keeps
-- its dependencies' set, and the check under the detach's lock reads the tasks claimed
-- since the set's checks.
--!include queues/flow_retention.sql
--!include queues/partitions_maintain.sql
--!include queues/partitions_sets.sql
--!include queues/partitions_status.sql
