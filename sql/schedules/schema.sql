-- schedules: recurring schedules (cron, UTC) driven by a SQL supervisor, and the
-- facts that say which fire times were enqueued or skipped.
--
-- Facts (never updated):
--   schedule          one row per schedule name: its identity
--   schedule_version  every definition a schedule has had (cron, task, enabled, ...);
--                     the newest row is in force
--   schedule_run      one row per fire time handled: enqueued (with its task) or skipped
--   supervisor_task   every schedule_supervisor task enqueued, to find the pending one
--
-- Idempotent: re-included by later migrations.

create schema if not exists schedules;
revoke all on schema schedules from public;

-- The seed's worker roles (docs/seeds role-based-worker-system.md). Workers claim them by
-- task type; the schedules below (and the staggered batches) enqueue them.
insert into queues.task_type (task_type, description) values
  ('store_discovery',       'Find new stores (seed role; weekly schedule).'),
  ('entry_point_discovery', 'Resolve a new store''s platform id (seed role; chained from store_discovery).'),
  ('product_discovery',     'Initial product crawl of a new store (seed role; chained from entry_point_discovery).'),
  ('product_resync',        'Regular price and stock update of one store (seed role; every 4 hours, staggered).'),
  ('analytics_refresh',     'Refresh analytics views (seed role; daily schedule).')
on conflict (task_type) do nothing;

create table if not exists schedules.schedule (
  schedule_id bigint generated always as identity primary key,
  name        text not null unique check (name ~ '^[a-z][a-z0-9_.-]{0,99}$'),
  created_at  timestamptz not null default now()
);
comment on table schedules.schedule is 'A named recurring schedule. Its definition lives in schedule_version.';

create table if not exists schedules.schedule_version (
  schedule_version_id bigint generated always as identity primary key,
  schedule_id         bigint not null references schedules.schedule on delete cascade,
  -- 5-field cron, evaluated in UTC (see schedules.parse_cron).
  cron                text not null check (length(cron) between 1 and 200),
  task_type           text not null references queues.task_type on delete restrict,
  payload             jsonb not null check (jsonb_typeof(payload) = 'object'),
  priority            integer not null check (priority between -1000 and 1000),
  missed_run_policy   text not null check (missed_run_policy in ('skip', 'catch_up_once')),
  enabled             boolean not null,
  -- Fire times at or before this instant are never due under this definition: the
  -- creation time of the schedule, of its last enabling, or of its last cron change.
  fires_after         timestamptz not null,
  created_at          timestamptz not null default now()
);
create index if not exists schedule_version_schedule_idx
  on schedules.schedule_version (schedule_id, schedule_version_id desc);
comment on table schedules.schedule_version is
  'Append-only: each definition of a schedule. The newest row per schedule is in force.';

create table if not exists schedules.schedule_run (
  schedule_run_id     bigint generated always as identity primary key,
  schedule_id         bigint not null references schedules.schedule on delete cascade,
  schedule_version_id bigint not null references schedules.schedule_version on delete cascade,
  -- The (latest) fire time handled. Unique: a fire time is enqueued at most once.
  fire_at             timestamptz not null,
  -- The earliest fire time this row covers (= fire_at unless runs were missed).
  first_fire_at       timestamptz not null,
  outcome             text not null check (outcome in ('enqueued', 'skipped')),
  -- The task enqueued (null when skipped). Not a foreign key: queue retention may delete
  -- old tasks, and this fact must stay, or the fire time would be due again.
  task_id             bigint,
  enqueued_at         timestamptz not null default now(),
  unique (schedule_id, fire_at),
  check (first_fire_at <= fire_at),
  check ((outcome = 'enqueued') = (task_id is not null))
);
comment on table schedules.schedule_run is
  'Append-only: fire times handled by the supervisor, enqueued (with the task) or skipped.';

create table if not exists schedules.supervisor_task (
  task_id      bigint primary key,
  scheduled_at timestamptz not null,
  enqueued_at  timestamptz not null default now()
);
comment on table schedules.supervisor_task is
  'Append-only: schedule_supervisor tasks enqueued; the pending one is found through queues.task_pending.';

do $$
declare
  _table text;
begin
  foreach _table in array array['schedule', 'schedule_version', 'schedule_run', 'supervisor_task'] loop
    if not exists (
      select 1 from pg_trigger
       where tgrelid = to_regclass(format('schedules.%I', _table))
         and tgname = 'forbid_update'
    ) then
      execute format(
        'create trigger forbid_update before update on schedules.%I
           for each statement execute function queues.forbid_fact_update()', _table);
    end if;
  end loop;
end;
$$;
