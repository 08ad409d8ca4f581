set local lock_timeout = '5s';
-- Progress reports of running tasks (sql/queues/progress.sql).
create table if not exists queues.task_progress (
  task_progress_id bigint generated always as identity primary key,
  task_id bigint not null,
  task_lease_id bigint not null,
  reported_at timestamptz not null default now(),
  done bigint not null check (done >= 0),
  total bigint check (total >= done),
  note text not null default '' check (length(note) <= 500)
);
comment on table queues.task_progress is
  'Append-only: a progress report of a running task (done out of total, a note), at most one per task per second from the worker (queues.record_progress).';
drop trigger if exists forbid_update on queues.task_progress;
create trigger forbid_update before update on queues.task_progress
  for each statement execute function queues.forbid_fact_update();
create index if not exists task_progress_task on queues.task_progress (task_id, task_progress_id);
--!include queues/progress.sql
--!include admin/tasks.sql
