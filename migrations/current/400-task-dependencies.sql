set local lock_timeout = '5s';

-- Task dependencies (fan-in): a task enqueued with depends_on waits until every task it
-- names has ended; it runs when all succeeded, and fails when one did not
-- (sql/queues/dependencies.sql). The fact: one row per (dependent, dependency), written
-- with the dependent in its enqueue.
create table if not exists queues.task_dependency (
  task_id bigint not null,
  depends_on_task_id bigint not null,
  created_at timestamptz not null default now(),
  primary key (task_id, depends_on_task_id),
  check (task_id <> depends_on_task_id)
);
comment on table queues.task_dependency is
  'Append-only: task task_id was enqueued to wait for task depends_on_task_id (an older task). Written by the enqueue; read by queues.release_dependents when a dependency ends.';
drop trigger if exists forbid_update on queues.task_dependency;
create trigger forbid_update before update on queues.task_dependency
  for each statement execute function queues.forbid_fact_update();
-- The dependents of a task that ends: probed once per completed task.
create index if not exists task_dependency_depends_on on queues.task_dependency (depends_on_task_id, task_id);

--!include queues/dependencies.sql

-- Every completion releases (or fails) the tasks that wait for the task it completes: a
-- statement-level trigger with the statement's new rows, on the partitioned parent
-- (PostgreSQL allows transition tables there for statement-level triggers).
-- (create or replace trigger takes SHARE ROW EXCLUSIVE, not ACCESS EXCLUSIVE.)
create or replace trigger release_dependents after insert on queues.task_completed
  referencing new table as completed_rows
  for each statement execute function queues.task_completed_release_dependents();
-- Plain successes are completion rounds (one row naming many tasks): their twin.
create or replace trigger release_dependents after insert on queues.completion_round
  referencing new table as completed_rounds
  for each statement execute function queues.completion_round_release_dependents();

-- Enqueues take _depends_on (a trailing argument).
drop function if exists queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean);
drop function if exists queues.enqueue_internal(text, jsonb, timestamptz, integer, text, integer);
drop function if exists queues.enqueue_task(text, jsonb, timestamptz, integer, text, integer, boolean, boolean, boolean);
--!include queues/enqueue.sql
--!include queues/run_now.sql
--!include admin/common.sql
--!include admin/task_actions.sql
