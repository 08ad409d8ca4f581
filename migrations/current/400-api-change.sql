set local lock_timeout = '5s';

-- Changes made through the operations API, one fact per change: who (the API user and
-- level), when, the request (method, route, request id), what it targeted and the
-- function's answer. Written by admin.record_api_change in the transaction of the change
-- itself, so a change and its fact commit together or not at all. Append-only.
create table if not exists admin.api_change (
  api_change_id bigint generated always as identity primary key,
  changed_at    timestamptz not null default now(),
  user_name     text not null check (length(user_name) between 1 and 100),
  user_level    text not null check (user_level in ('read', 'operator')),
  request_id    text not null check (length(request_id) between 1 and 200),
  method        text not null check (method in ('POST', 'PUT', 'PATCH', 'DELETE', 'CLI')),
  route         text not null check (length(route) between 1 and 200),
  action        text not null check (action ~ '^[a-z][a-z0-9_]{0,62}$'),
  task_ids      bigint[] not null default '{}',
  task_type     text,
  schedule_name text,
  worker_id     text,
  input         jsonb not null default '{}'::jsonb check (jsonb_typeof(input) = 'object'),
  answer        jsonb not null
);

comment on table admin.api_change is
  'Facts: one row per change made through the operations API (admin.record_api_change), in the change''s own transaction. Read with admin.list_api_changes.';

-- The task page asks for the changes that named one task.
create index if not exists api_change_task_ids on admin.api_change using gin (task_ids);

create or replace trigger forbid_update
  before update on admin.api_change
  for each statement execute function queues.forbid_fact_update();

--!include admin/api_changes.sql
