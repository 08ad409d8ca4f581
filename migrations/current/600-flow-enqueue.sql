-- Unique tasks (sql/queues/unique.sql), a default of 25 attempts for tasks enqueued
-- without max_attempts (queues.default_max_attempts), with the business processes'
-- channel tasks and supervisor runs enqueued with one attempt as before, and schedules
-- in a time zone (schedules.schedule_version.time_zone, sql/schedules/cron.sql).
set local lock_timeout = '5s';

create table if not exists queues.task_unique (
  task_id bigint primary key,
  unique_key text not null check (length(unique_key) between 1 and 200),
  enqueued_at timestamptz not null default now()
);
comment on table queues.task_unique is
  'Append-only: the unique key a task was enqueued with (queues.enqueue_unique). Rows of tasks whose history was dropped are removed by queues.prune_task_unique_keys().';
drop trigger if exists forbid_update on queues.task_unique;
create trigger forbid_update before update on queues.task_unique
  for each statement execute function queues.forbid_fact_update();

create table if not exists queues.task_unique_key (
  unique_key text primary key,
  task_id bigint
) with (autovacuum_vacuum_cost_delay = 0, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        fillfactor = 80);
comment on table queues.task_unique_key is
  'Derived: per unique key, the newest task enqueued with it; the key is free once that task is no longer pending. Rebuild with queues.rebuild_task_unique_key().';

drop function if exists queues.enqueue_task(text, jsonb, timestamptz, integer, text, integer, boolean, boolean);

--!include queues/enqueue.sql
--!include queues/unique.sql
--!include internal/process_supervisor.sql
--!include internal/channel_process.sql

-- The channel processes' functions again, from the template that passes one attempt.
select internal.create_channel_process_functions(p.process_schema, p.process_name)
  from internal.channel_process p
 order by p.process_schema, p.process_name;

-- Schedules in a time zone. schedule_version is not a hot table (schedules are written
-- by people and read by the schedule supervisor).
alter table schedules.schedule_version add column if not exists time_zone text not null default 'UTC';
comment on column schedules.schedule_version.time_zone is
  'IANA time zone whose wall clock the cron is read on (schedules.next_fire_time(cron, after, time_zone)).';

drop function if exists schedules.schedule_definition_error(text, text, text, jsonb, integer, text);
drop function if exists schedules.append_schedule_version(timestamptz, bigint, text, text, jsonb, integer, text, boolean);
drop function if exists schedules.upsert_schedule_at(timestamptz, text, text, text, jsonb, integer, text);
drop function if exists schedules.upsert_schedule(text, text, text, jsonb, integer, text);
drop function if exists admin.list_schedules(integer);
drop function if exists admin.list_schedules_at(timestamptz, integer);
drop function if exists schedules.list_schedules();

--!include schedules/cron.sql
--!include schedules/schedule.sql
--!include schedules/supervisor.sql
--!include admin/schedules.sql
