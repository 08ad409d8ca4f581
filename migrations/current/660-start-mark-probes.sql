-- queues.mark_started probes each lease by primary key (scalar subqueries): its EXISTS
-- probes could be planned as hashed subplans that read the whole table once per call
-- (task_completed when a completion committed before the mark of its start).
set local lock_timeout = '5s';

--!include queues/start.sql
