-- Enqueue: one statement per batch, one lookup of the task type per call, the wake-up
-- sent by the enqueue functions (after the commit for queues.enqueue_and_commit), no
-- foreign key from queues.task to queues.task_type (sql/queues/enqueue.sql says why).
set local lock_timeout = '5s';

-- The key locked the type's row for every task inserted. Dropping it takes ACCESS
-- EXCLUSIVE on queues.task and on queues.task_type (their triggers of the key go):
-- catalog only, no scan, for the instant of the change.
-- lock: access exclusive on queues.task: dropping its foreign key to queues.task_type; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_type: dropping the foreign key from queues.task (its triggers on task_type); catalog only, held for the instant of the change
alter table queues.task drop constraint if exists task_task_type_fkey;

-- The wake-up moves from the statement trigger into the functions, so that
-- queues.enqueue_and_commit can send it after its commit.
-- lock: access exclusive on queues.task_pending: dropping the notify_task_ready trigger; catalog only, held for the instant of the change
drop trigger if exists notify_task_ready on queues.task_pending;
drop function if exists queues.notify_task_ready();

-- Replaced: enqueue gains _notify, the cores gain _public (and _notify); the per-task
-- validation and the batch permission check are folded into them.
drop function if exists queues.enqueue(text, jsonb, timestamptz, integer, text, integer);
drop function if exists queues.enqueue_task(text, jsonb, timestamptz, integer, text, integer);
drop function if exists queues.enqueue_tasks(jsonb);
drop function if exists queues.assert_valid_task(text, jsonb, integer, text, integer, text);
drop function if exists queues.assert_may_enqueue_many(jsonb);
drop function if exists queues.is_payload_too_deep(jsonb);

--!include queues/triggers.sql
--!include queues/enqueue_permission.sql
--!include queues/enqueue.sql
--!include queues/maintenance.sql
--!include queues/privileges.sql
--!include admin/privileges.sql

-- A task type that tasks name cannot be deleted, renamed or truncated away (what the
-- foreign key's ON DELETE RESTRICT did). CREATE OR REPLACE TRIGGER takes SHARE ROW
-- EXCLUSIVE on queues.task_type, not ACCESS EXCLUSIVE.
create or replace trigger guard_task_type_in_use
  before delete or update of task_type on queues.task_type
  for each row execute function queues.guard_task_type_in_use();
create or replace trigger guard_task_type_in_use_truncate
  before truncate on queues.task_type
  for each statement execute function queues.guard_task_type_in_use();
