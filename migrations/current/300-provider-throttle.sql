set local lock_timeout = '5s';
-- Provider back-pressure as a fact (sql/queues/throttle.sql): "throttled until T" per
-- channel (task type), honoured by every claim, read by supervisors and the REST API.
create table if not exists queues.throttle (
  throttle_id     bigint generated always as identity primary key,
  -- 'task_type': key is a task type (a channel such as 'email'); 'group': key is a group
  -- key (tasks' group_key: a tenant, a provider account).
  key_kind        text not null check (key_kind in ('task_type', 'group')),
  key             text not null check (length(key) between 1 and 200),
  throttled_until timestamptz not null,
  reason          text not null check (length(reason) between 1 and 500),
  recorded_at     timestamptz not null default now(),
  recorded_by     text not null check (length(recorded_by) between 1 and 200),
  -- The run whose provider call was refused, when a worker reported it (no foreign keys:
  -- task and lease history is dropped by partition, and a report outlives neither).
  task_id         bigint,
  task_lease_id   bigint,
  check (throttled_until > recorded_at),
  check ((task_id is null) = (task_lease_id is null))
);
comment on table queues.throttle is
  'Append-only: a provider refused work of key (a task type) until throttled_until (a 429, a Retry-After, a quota error). Claims leave the key''s tasks while one of its reports not cleared is in force (queues.throttled_task_types_at).';
drop trigger if exists forbid_update on queues.throttle;
create trigger forbid_update before update on queues.throttle
  for each statement execute function queues.forbid_fact_update();
-- The one read of the reports (the claim's probe, a key's end, the active list): those not
-- ended yet, from _now on; ended ones are never read again.
create index if not exists throttle_until_idx on queues.throttle (throttled_until) include (key_kind, key, throttle_id);
-- internal.provider_call_start: was this lease's started call refused?
create index if not exists throttle_lease_idx on queues.throttle (task_lease_id) where task_lease_id is not null;

create table if not exists queues.throttle_cleared (
  throttle_cleared_id bigint generated always as identity primary key,
  key_kind            text not null,
  key                 text not null,
  -- The key's reports up to this one are cleared; a later report throttles it again.
  last_throttle_id    bigint not null references queues.throttle (throttle_id) on delete cascade,
  cleared_at          timestamptz not null default now(),
  cleared_by          text not null check (length(cleared_by) between 1 and 200)
);
comment on table queues.throttle_cleared is
  'Append-only: an operator cleared the throttles of key recorded up to last_throttle_id (queues.clear_throttle).';
drop trigger if exists forbid_update on queues.throttle_cleared;
create trigger forbid_update before update on queues.throttle_cleared
  for each statement execute function queues.forbid_fact_update();
create index if not exists throttle_cleared_key_idx on queues.throttle_cleared (key_kind, key, last_throttle_id);

--!include queues/throttle.sql
--!include admin/throttles.sql

-- Supervisors read the throttle of their channel: each message channel's facts
-- (comms.send_<c>_supervisor_facts) gain throttled_until, a new out column, so they are
-- dropped and made again by the channel's registration, with the settings it has; every
-- channel process's own functions are made again from the template (its supervisor
-- schedules its next check no earlier than the throttle's end).
do $$
declare
  _p record;
begin
  for _p in select p.process_name from internal.channel_process p
             where p.process_schema = 'comms' and p.process_name like 'send\_%' loop
    execute format('drop function if exists %I.%I(bigint)', 'comms', _p.process_name || '_supervisor_facts');
  end loop;
end;
$$;
--!include internal/channel_process.sql
--!include comms/channel.sql
select comms.register_message_channel(substr(p.process_name, 6), p.max_attempts, p.max_supervisor_runs,
                                      p.backoff_cap_seconds)
  from internal.channel_process p
 where p.process_schema = 'comms' and p.process_name like 'send\_%'
 order by p.process_name;
select internal.create_channel_process_functions(p.process_schema, p.process_name)
  from internal.channel_process p
 where not (p.process_schema = 'comms' and p.process_name like 'send\_%')
 order by p.process_schema, p.process_name;

-- (Grants: queues/privileges.sql and admin/privileges.sql, included once by 900-privileges.sql.)
