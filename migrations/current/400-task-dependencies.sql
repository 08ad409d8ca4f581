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

-- Every end of a task releases (or fails) the tasks that wait for it: a row-level
-- trigger on each table a task's end is written to (a statement that writes no row there
-- fires nothing). On the partitioned parents, so every partition has it.
-- (create or replace trigger takes SHARE ROW EXCLUSIVE, not ACCESS EXCLUSIVE.)
create or replace trigger release_dependents after insert on queues.task_completed
  for each row execute function queues.task_completed_release_dependents();
create or replace trigger release_dependents after insert on queues.completion_round
  for each row execute function queues.completion_round_release_dependents();

-- Enqueues take _depends_on (a trailing argument).
drop function if exists queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean);
drop function if exists queues.enqueue_internal(text, jsonb, timestamptz, integer, text, integer);
drop function if exists queues.enqueue_task(text, jsonb, timestamptz, integer, text, integer, boolean, boolean, boolean);
--!include queues/enqueue.sql
--!include queues/run_now.sql
--!include admin/common.sql
--!include admin/task_actions.sql
