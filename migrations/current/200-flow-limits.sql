set local lock_timeout = '5s';
-- Flow limits (docs/flow-control.md, "Concurrency and rate limits"; sql/queues/limits.sql).

-- A task's group key (a tenant, a provider account), set at enqueue and carried on the
-- claim index, which the claim counts by. Nullable columns without a default: a catalog
-- change, no rewrite of either table. Its length (1 to 200) is checked by the enqueue.
-- lock: access exclusive on queues.task: adds the nullable column group_key (catalog only, no rewrite)
alter table queues.task add column if not exists group_key text;
comment on column queues.task.group_key is
  'What the task''s flow limits count it by within its type (a tenant, a provider account); NULL: none.';
-- lock: access exclusive on queues.task_pending: adds the nullable column group_key (catalog only, no rewrite)
alter table queues.task_pending add column if not exists group_key text;

-- Limits set as facts: the latest per (task type, scope, group key) is in force; a row
-- with neither limit clears it.
create table if not exists queues.task_limit_set (
  task_limit_set_id bigint generated always as identity primary key,
  task_type text not null references queues.task_type (task_type) on delete cascade,
  scope text not null check (scope in ('type', 'each_group', 'group')),
  group_key text check ((scope = 'group') = (group_key is not null) and length(group_key) between 1 and 200),
  max_running integer check (max_running between 1 and 1000000),
  max_starts integer check (max_starts between 1 and 1000000),
  interval_ms integer check (interval_ms between 1 and 86400000),
  check ((max_starts is null) = (interval_ms is null)),
  set_at timestamptz not null default now(),
  set_by text not null default session_user
);
comment on table queues.task_limit_set is
  'Append-only: a concurrency and/or rate limit set (both NULL: cleared) for a task type, each group key of it, or one group key; the latest per (task_type, scope, group_key) is in force (queues.task_limits).';
drop trigger if exists forbid_update on queues.task_limit_set;
create trigger forbid_update before update on queues.task_limit_set
  for each statement execute function queues.forbid_fact_update();
create index if not exists task_limit_set_key on queues.task_limit_set (task_type, scope, group_key, task_limit_set_id);

-- Starts counted in the current window of each rate limit: a derived counter row per
-- (task type, group key; '' for the type as a whole), written once per claim that takes
-- tasks under a rate limit, under the type's claim lock (queues.claim_tasks_at).
create table if not exists queues.task_limit_window (
  task_type text not null,
  group_key text not null,
  window_start timestamptz not null,
  starts integer not null,
  primary key (task_type, group_key)
);
comment on table queues.task_limit_window is
  'Derived: tasks claimed in the current window of a rate limit, per task type and group key ('''' = the type as a whole). Losing it forgets at most one window''s starts.';

--!include queues/limits.sql
--!include admin/limits.sql
-- The enqueues take a trailing group key: queues/enqueue.sql (included by
-- 400-task-dependencies.sql, which drops the older signatures of the functions); the
-- procedure's older signature is dropped here. queues/claim.sql (the limits in the claim)
-- and queues/maintenance.sql are included by 500-lease-per-claim.sql: after this file,
-- which creates the columns and tables they use and queues/limits.sql.
drop procedure if exists queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint);
