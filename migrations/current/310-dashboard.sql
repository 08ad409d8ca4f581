set local lock_timeout = '5s';
-- Dashboard: queue controls (pause/resume per task type), cancel and run-now facts, and
-- the admin functions behind the dashboard's pages.
--
-- The 'cancelled' outcome needs no DDL: the check constraint on queues.task_completed
-- has allowed it since the first migration (and complete_tasks accepts it), so this file
-- never rewrites or revalidates a constraint on that hot table.

-- "Run now" of a scheduled task: the task stays immutable; this fact moves it forward.
-- queues.rebuild_task_pending() applies it.
create table if not exists queues.task_run_now (
  task_id      bigint primary key references queues.task on delete cascade,
  requested_at timestamptz not null default now()
);
comment on table queues.task_run_now is 'Append-only: a scheduled task asked to run at requested_at instead of its scheduled time.';

-- Cancelled tasks say who asked and why (the completion itself is the task_completed row
-- with outcome cancelled).
create table if not exists queues.task_cancelled (
  task_id      bigint primary key references queues.task_completed on delete cascade,
  reason       text not null default '' check (length(reason) <= 500),
  cancelled_at timestamptz not null default now()
);
comment on table queues.task_cancelled is 'Append-only: why a task was completed as cancelled.';

do $$
declare
  _table text;
begin
  foreach _table in array array['task_run_now', 'task_cancelled'] loop
    if not exists (
      select 1 from pg_trigger
       where tgrelid = to_regclass(format('queues.%I', _table)) and tgname = 'forbid_update'
    ) then
      execute format(
        'create trigger forbid_update before update on queues.%I
           for each statement execute function queues.forbid_fact_update()', _table);
    end if;
  end loop;
end;
$$;

-- The tasks list filters on a resource key; only keyed tasks are indexed, so enqueues
-- without a key pay nothing.
create index if not exists task_resource_key_idx on queues.task (resource_key, task_id) where resource_key is not null;

-- admin.list_tasks gained filters (worker, resource key, time range, payload field).
drop function if exists admin.list_tasks_at(timestamptz, text, text, integer, bigint);
drop function if exists admin.list_tasks(text, text, integer, bigint);

--!include queues/claim.sql
--!include queues/maintenance.sql
--!include admin/common.sql
--!include admin/tasks.sql
--!include admin/task_actions.sql
--!include admin/overview.sql
--!include admin/queue_controls.sql
--!include admin/workers.sql
--!include admin/schedules.sql
--!include admin/process_tree.sql
--!include admin/privileges.sql
