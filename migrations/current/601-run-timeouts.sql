set local lock_timeout = '5s';
-- Run timeouts per task type (sql/queues/timeouts.sql): settings as facts, the latest per
-- type wins.
create table if not exists queues.task_type_timeout_set (
  task_type_timeout_set_id bigint generated always as identity primary key,
  task_type text not null references queues.task_type (task_type) on delete cascade,
  timeout_ms integer check (timeout_ms between 1 and 86400000),
  set_at timestamptz not null default now()
);
comment on table queues.task_type_timeout_set is
  'Append-only: a run timeout set (or, NULL, cleared) for a task type; the latest per type is in force (queues.task_type_timeouts).';
drop trigger if exists forbid_update on queues.task_type_timeout_set;
create trigger forbid_update before update on queues.task_type_timeout_set
  for each statement execute function queues.forbid_fact_update();
create index if not exists task_type_timeout_set_type on queues.task_type_timeout_set (task_type, task_type_timeout_set_id);
--!include queues/timeouts.sql
--!include admin/timeouts.sql
