set local lock_timeout = '5s';
-- The specification's own SQL surface: its capacity view, worker_tasks, stale recovery and
-- resync generation under the names it uses (schema public); capacity measured per busy
-- worker-hour; envelopes that only report an error; fail_task then complete_task keeps
-- the failure; a validation failure is an outcome of its own (validation_failed), final
-- and not a dead letter.

-- lock: access exclusive on queues.task_completed: its outcome check gains 'validation_failed' (NOT VALID, so no partition is scanned: every outcome written before is among the new ones; the check holds for every row written from now on)
alter table queues.task_completed drop constraint if exists task_completed_outcome_check;
alter table queues.task_completed add constraint task_completed_outcome_check
  check (outcome in ('succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed')) not valid;

--!include admin/common.sql
--!include admin/capacity.sql
--!include admin/tasks.sql
--!include queues/steps.sql
--!include queues/complete.sql
--!include queues/settle.sql
--!include public/role_based_worker.sql
