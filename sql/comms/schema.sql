-- comms: messages and the two send processes (email, sms).
--
-- Domain data (written once by the kickoff functions):
--   message, email_message, sms_message
-- Facts (append-only; a statement-level trigger refuses updates), per process X in
-- (send_email, send_sms):
--   X_task                the root: one per message, created by the kickoff
--   X_supervisor_run      one row per supervisor run that was not terminal (run cap)
--   X_attempt             one row per scheduled provider call
--   X_attempt_succeeded   the provider accepted the attempt (at most one per attempt)
--   X_attempt_failed      the provider refused it or the worker failed (at most one)
--   X_task_succeeded      terminal: the supervisor saw a succeeded attempt
--   X_task_failed         terminal: attempts or supervisor runs exhausted
--
-- Idempotent: re-included by later migrations.

create schema if not exists comms;
revoke all on schema comms from public;

create table if not exists comms.message (
  message_id      bigint generated always as identity primary key,
  channel         text not null check (channel in ('email', 'sms')),
  -- Set by apps that retry a send request: the same key returns the same message.
  idempotency_key text unique check (length(idempotency_key) between 1 and 200),
  created_at      timestamptz not null default now()
);
comment on table comms.message is 'One message to send, on one channel. Written once by a kickoff.';

create table if not exists comms.email_message (
  message_id   bigint primary key references comms.message on delete cascade,
  from_address text not null check (length(from_address) between 3 and 320),
  to_address   text not null check (length(to_address) between 3 and 320),
  subject      text not null check (length(subject) between 1 and 998),
  html         text not null check (length(html) <= 1000000),
  text_body    text check (length(text_body) <= 1000000),
  reply_to     text check (length(reply_to) between 3 and 320)
);

create table if not exists comms.sms_message (
  message_id  bigint primary key references comms.message on delete cascade,
  to_number   text not null check (to_number ~ '^\+[1-9][0-9]{6,14}$'),
  from_number text check (from_number ~ '^\+[1-9][0-9]{6,14}$'),
  body        text not null check (length(body) between 1 and 1600)
);

-- send_email ------------------------------------------------------------------------

create table if not exists comms.send_email_task (
  send_email_task_id bigint generated always as identity primary key,
  message_id         bigint not null unique references comms.email_message on delete restrict,
  scheduled_at       timestamptz not null default now(),
  created_at         timestamptz not null default now()
);

create table if not exists comms.send_email_supervisor_run (
  send_email_supervisor_run_id bigint generated always as identity primary key,
  send_email_task_id bigint not null references comms.send_email_task on delete cascade,
  created_at         timestamptz not null default now()
);
create index if not exists send_email_supervisor_run_task_idx
  on comms.send_email_supervisor_run (send_email_task_id);

create table if not exists comms.send_email_attempt (
  send_email_attempt_id bigint generated always as identity primary key,
  send_email_task_id    bigint not null references comms.send_email_task on delete cascade,
  created_at            timestamptz not null default now()
);
create index if not exists send_email_attempt_task_idx on comms.send_email_attempt (send_email_task_id);

create table if not exists comms.send_email_attempt_succeeded (
  send_email_attempt_id bigint primary key references comms.send_email_attempt on delete cascade,
  worker_payload        jsonb,
  created_at            timestamptz not null default now()
);

create table if not exists comms.send_email_attempt_failed (
  send_email_attempt_id bigint primary key references comms.send_email_attempt on delete cascade,
  error_message         text not null,
  created_at            timestamptz not null default now()
);

create table if not exists comms.send_email_task_succeeded (
  send_email_task_id bigint primary key references comms.send_email_task on delete cascade,
  created_at         timestamptz not null default now()
);

create table if not exists comms.send_email_task_failed (
  send_email_task_id bigint primary key references comms.send_email_task on delete cascade,
  reason             text not null,
  created_at         timestamptz not null default now()
);

-- send_sms --------------------------------------------------------------------------

create table if not exists comms.send_sms_task (
  send_sms_task_id bigint generated always as identity primary key,
  message_id       bigint not null unique references comms.sms_message on delete restrict,
  scheduled_at     timestamptz not null default now(),
  created_at       timestamptz not null default now()
);

create table if not exists comms.send_sms_supervisor_run (
  send_sms_supervisor_run_id bigint generated always as identity primary key,
  send_sms_task_id bigint not null references comms.send_sms_task on delete cascade,
  created_at       timestamptz not null default now()
);
create index if not exists send_sms_supervisor_run_task_idx
  on comms.send_sms_supervisor_run (send_sms_task_id);

create table if not exists comms.send_sms_attempt (
  send_sms_attempt_id bigint generated always as identity primary key,
  send_sms_task_id    bigint not null references comms.send_sms_task on delete cascade,
  created_at          timestamptz not null default now()
);
create index if not exists send_sms_attempt_task_idx on comms.send_sms_attempt (send_sms_task_id);

create table if not exists comms.send_sms_attempt_succeeded (
  send_sms_attempt_id bigint primary key references comms.send_sms_attempt on delete cascade,
  worker_payload      jsonb,
  created_at          timestamptz not null default now()
);

create table if not exists comms.send_sms_attempt_failed (
  send_sms_attempt_id bigint primary key references comms.send_sms_attempt on delete cascade,
  error_message       text not null,
  created_at          timestamptz not null default now()
);

create table if not exists comms.send_sms_task_succeeded (
  send_sms_task_id bigint primary key references comms.send_sms_task on delete cascade,
  created_at       timestamptz not null default now()
);

create table if not exists comms.send_sms_task_failed (
  send_sms_task_id bigint primary key references comms.send_sms_task on delete cascade,
  reason           text not null,
  created_at       timestamptz not null default now()
);

-- Every table here is append-only.
do $$
declare
  _table text;
begin
  foreach _table in array array[
    'message', 'email_message', 'sms_message',
    'send_email_task', 'send_email_supervisor_run', 'send_email_attempt',
    'send_email_attempt_succeeded', 'send_email_attempt_failed',
    'send_email_task_succeeded', 'send_email_task_failed',
    'send_sms_task', 'send_sms_supervisor_run', 'send_sms_attempt',
    'send_sms_attempt_succeeded', 'send_sms_attempt_failed',
    'send_sms_task_succeeded', 'send_sms_task_failed'
  ] loop
    if not exists (select 1 from pg_trigger
                    where tgrelid = to_regclass(format('comms.%I', _table)) and tgname = 'forbid_update') then
      execute format('create trigger forbid_update before update on comms.%I
                        for each statement execute function queues.forbid_fact_update()', _table);
    end if;
  end loop;
end;
$$;

