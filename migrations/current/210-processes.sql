-- Business processes (sql/comms, sql/files, sql/accounts, sql/api, sql/internal process
-- support): who may enqueue what, attempts the queue gave up on, terminal roots,
-- delivery modes per channel, and the shared process building blocks.
set local lock_timeout = '5s';

-- Task types only the owner's SQL may enqueue (queues.enqueue refuses them to apps).
create table if not exists queues.internal_task_type (
  task_type text primary key references queues.task_type on delete cascade,
  reason    text not null
);
comment on table queues.internal_task_type is
  'Task types only the owner''s SQL may enqueue (queues.enqueue_internal); queues.enqueue and enqueue_many refuse them to other roles with 42501.';
insert into queues.internal_task_type (task_type, reason) values
  ('db_function', 'runs a registered function as the worker'),
  ('email',       'sends an email with the provider''s credentials'),
  ('sms',         'sends an SMS with the provider''s credentials'),
  ('file_delete', 'deletes a stored object')
on conflict (task_type) do nothing;

-- The queue task of each channel attempt, so a supervisor can see the queue give up on
-- it (abandoned, dead-lettered, a handler that raised). NULL for attempts made before.
alter table comms.send_email_attempt add column if not exists task_id bigint references queues.task on delete set null;
alter table comms.send_sms_attempt add column if not exists task_id bigint references queues.task on delete set null;
alter table files.file_deletion_attempt add column if not exists task_id bigint references queues.task on delete set null;
create index if not exists send_email_attempt_queue_task_idx on comms.send_email_attempt (task_id);
create index if not exists send_sms_attempt_queue_task_idx on comms.send_sms_attempt (task_id);
create index if not exists file_deletion_attempt_queue_task_idx on files.file_deletion_attempt (task_id);

-- Delivery mode of each channel task type (sql/internal/delivery.sql).
create table if not exists internal.channel_delivery_mode (
  task_type     text primary key references queues.task_type on delete cascade,
  delivery_mode text not null check (delivery_mode in ('at_least_once', 'at_most_once')),
  reason        text not null default ''
);
comment on table internal.channel_delivery_mode is
  'Delivery mode per channel task type: at_least_once (the provider deduplicates) or at_most_once (the worker records the call before making it and never repeats a started call). Types not listed are at_least_once.';
insert into internal.channel_delivery_mode (task_type, delivery_mode, reason) values
  ('email',       'at_least_once', 'Resend deduplicates on the Idempotency-Key'),
  ('sms',         'at_most_once',  'Twilio has no idempotency key: a repeated call sends a second SMS'),
  ('file_delete', 'at_least_once', 'deleting twice is harmless')
on conflict (task_type) do nothing;

create table if not exists internal.provider_call_started (
  task_id       bigint not null references queues.task on delete cascade,
  task_lease_id bigint not null references queues.task_lease on delete cascade,
  started_at    timestamptz not null default now(),
  primary key (task_id, task_lease_id)
);
comment on table internal.provider_call_started is
  'Fact: an at-most-once provider call was started under this lease (committed before the call).';
drop trigger if exists forbid_update on internal.provider_call_started;
create trigger forbid_update before update on internal.provider_call_started
  for each statement execute function queues.forbid_fact_update();
create index if not exists file_bucket_object_key_idx on files.file (bucket, object_key);

-- Channel processes written on the shared skeleton (sql/internal/channel_process.sql).
create table if not exists internal.channel_process (
  process_schema      text not null,
  process_name        text not null,
  task_type           text not null references queues.task_type on delete restrict,
  supervisor          text not null,
  before_handler      text not null,
  success_handler     text not null,
  error_handler       text not null,
  max_attempts        integer not null check (max_attempts between 1 and 100),
  max_supervisor_runs integer not null check (max_supervisor_runs between 1 and 10000),
  backoff_cap_seconds integer not null check (backoff_cap_seconds between 1 and 86400),
  -- Optional: (root id bigint) → jsonb fields added to each channel task's payload.
  attempt_payload     regprocedure,
  primary key (process_schema, process_name)
);
comment on table internal.channel_process is
  'Channel processes run by internal.run_channel_supervisor: names (tables <schema>.<name>_task, _attempt, ...) and limits. Configuration, not a fact table.';
revoke all on internal.channel_process from public;

-- The supervisors' facts gained a column (has_unknown_outcome).
drop function if exists comms.send_email_supervisor_facts(bigint);
drop function if exists comms.send_sms_supervisor_facts(bigint);
-- The comms processes' own skeleton functions, replaced by the shared channel process.
do $$
declare
  _fn text;
begin
  foreach _fn in array array[
    'max_attempts()', 'max_supervisor_runs()', 'has_%s_succeeded_attempt(bigint)', 'count_%s_attempts(bigint)',
    'count_%s_failed_attempts(bigint)', 'count_%s_outstanding_attempts(bigint)', 'count_%s_supervisor_runs(bigint)',
    'has_%s_task_succeeded(bigint)', 'get_%s_task_failure(bigint)', 'has_%s_unknown_outcome(bigint)',
    'lock_%s_task(bigint)', 'record_%s_supervisor_run(bigint)', 'record_%s_task_succeeded(bigint)',
    'record_%s_task_failed(bigint,text)', 'schedule_%s_recheck(bigint,integer)'
  ] loop
    execute format('drop function if exists comms.%s', case when _fn like 'max%' then 'send_email_' || _fn else format(_fn, 'send_email') end);
    execute format('drop function if exists comms.%s', case when _fn like 'max%' then 'send_sms_' || _fn else format(_fn, 'send_sms') end);
  end loop;
end;
$$;
drop function if exists files.file_deletion_max_attempts();
drop function if exists files.file_deletion_max_supervisor_runs();
drop function if exists files.has_file_deletion_succeeded_attempt(bigint);
drop function if exists files.count_file_deletion_attempts(bigint);
drop function if exists files.count_file_deletion_failed_attempts(bigint);
drop function if exists files.count_file_deletion_outstanding_attempts(bigint);
drop function if exists files.count_file_deletion_supervisor_runs(bigint);
drop function if exists files.has_file_deletion_task_succeeded(bigint);
drop function if exists files.get_file_deletion_task_failure(bigint);
drop function if exists files.lock_file_deletion_task(bigint);
drop function if exists files.record_file_deletion_supervisor_run(bigint);
drop function if exists files.record_file_deletion_task_succeeded(bigint);
drop function if exists files.record_file_deletion_task_failed(bigint, text);
drop function if exists files.schedule_file_deletion_attempt(bigint, bigint);
drop function if exists files.schedule_file_deletion_recheck(bigint, integer);
drop function if exists files.close_given_up_file_deletion_attempts(bigint);
drop function if exists files.file_deletion_supervisor_facts(bigint);
drop function if exists comms.schedule_email_attempt(bigint);
drop function if exists comms.schedule_sms_attempt(bigint);
drop function if exists comms.close_given_up_email_attempts(bigint);
drop function if exists comms.close_given_up_sms_attempts(bigint);

revoke all on internal.channel_delivery_mode, internal.provider_call_started, queues.internal_task_type from public;

--!include queues/enqueue_permission.sql
--!include queues/enqueue.sql
--!include queues/dead_letter.sql
--!include internal/process_support.sql
--!include internal/delivery.sql
--!include internal/channel_process.sql
--!include comms/email.sql
--!include comms/sms.sql
--!include files/file_deletion.sql
--!include files/signing.sql
--!include accounts/anonymization.sql
--!include accounts/account_deletion.sql
--!include schedules/schedule.sql
--!include schedules/supervisor.sql
--!include internal/privileges.sql
--!include files/privileges.sql
