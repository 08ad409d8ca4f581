-- The schema the migrations build (committed + current), generated from the catalog by
-- tools/db/src/schema-dump.ts (`npm run schema-dump`, also run by `npm run codegen` and
-- `npm run dev`). Never edit it by hand; a test fails when it is stale.

-- Schemas

create schema accounts;
  owner :DATABASE_OWNER
  grant CREATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_WORKER (by :DATABASE_OWNER)
create schema admin;
  owner :DATABASE_OWNER
  grant CREATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_API (by :DATABASE_OWNER)
create schema api;
  owner :DATABASE_OWNER
  grant CREATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_APP (by :DATABASE_OWNER)
create schema comms;
  owner :DATABASE_OWNER
  grant CREATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_APP (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_WORKER (by :DATABASE_OWNER)
create schema files;
  owner :DATABASE_OWNER
  grant CREATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_APP (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_WORKER (by :DATABASE_OWNER)
create schema internal;
  owner :DATABASE_OWNER
  grant CREATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_WORKER (by :DATABASE_OWNER)
create schema learning;
  owner :DATABASE_OWNER
  grant CREATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create schema menus;
  owner :DATABASE_OWNER
  grant CREATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_API (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_APP (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_WORKER (by :DATABASE_OWNER)
create schema public;
  owner pg_database_owner
  grant CREATE, USAGE to pg_database_owner (by pg_database_owner)
  grant USAGE to PUBLIC (by pg_database_owner)
comment on schema public is 'standard public schema';
create schema queues;
  owner :DATABASE_OWNER
  grant CREATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_API (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_APP (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_WORKER (by :DATABASE_OWNER)
create schema schedules;
  owner :DATABASE_OWNER
  grant CREATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_API (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_APP (by :DATABASE_OWNER)
  grant USAGE to :DATABASE_WORKER (by :DATABASE_OWNER)

-- Default privileges

default privileges for :DATABASE_OWNER on routines
  grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

-- Tables

create table accounts.account (
  account_id bigint generated always as identity not null,
  email text,
  display_name text,
  created_at timestamp with time zone default now() not null,
  constraint account_account_id_not_null NOT NULL account_id,
  constraint account_created_at_not_null NOT NULL created_at,
  constraint account_display_name_check CHECK ((length(display_name) <= 200)),
  constraint account_email_check CHECK ((length(email) <= 320)),
  constraint account_pkey PRIMARY KEY (account_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table accounts.account is 'Domain data, not a fact table: accounts.anonymize_account overwrites the personal fields.';
CREATE UNIQUE INDEX account_pkey ON accounts.account USING btree (account_id);

create table accounts.account_anonymization_attempt (
  account_anonymization_attempt_id bigint generated always as identity not null,
  account_anonymization_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint account_anonymization_attem_account_anonymization_atte_not_null NOT NULL account_anonymization_attempt_id,
  constraint account_anonymization_attem_account_anonymization_task_not_null NOT NULL account_anonymization_task_id,
  constraint account_anonymization_attempt_account_anonymization_task_i_fkey FOREIGN KEY (account_anonymization_task_id) REFERENCES accounts.account_anonymization_task(account_anonymization_task_id) ON DELETE CASCADE,
  constraint account_anonymization_attempt_created_at_not_null NOT NULL created_at,
  constraint account_anonymization_attempt_pkey PRIMARY KEY (account_anonymization_attempt_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX account_anonymization_attempt_pkey ON accounts.account_anonymization_attempt USING btree (account_anonymization_attempt_id);
CREATE INDEX account_anonymization_attempt_task_idx ON accounts.account_anonymization_attempt USING btree (account_anonymization_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON accounts.account_anonymization_attempt FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table accounts.account_anonymization_attempt_failed (
  account_anonymization_attempt_id bigint not null,
  error_message text not null,
  created_at timestamp with time zone default now() not null,
  constraint account_anonymization_atte_account_anonymization_atte_not_null2 NOT NULL account_anonymization_attempt_id,
  constraint account_anonymization_attemp_account_anonymization_attemp_fkey1 FOREIGN KEY (account_anonymization_attempt_id) REFERENCES accounts.account_anonymization_attempt(account_anonymization_attempt_id) ON DELETE CASCADE,
  constraint account_anonymization_attempt_failed_created_at_not_null NOT NULL created_at,
  constraint account_anonymization_attempt_failed_error_message_not_null NOT NULL error_message,
  constraint account_anonymization_attempt_failed_pkey PRIMARY KEY (account_anonymization_attempt_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX account_anonymization_attempt_failed_pkey ON accounts.account_anonymization_attempt_failed USING btree (account_anonymization_attempt_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON accounts.account_anonymization_attempt_failed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table accounts.account_anonymization_attempt_succeeded (
  account_anonymization_attempt_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint account_anonymization_atte_account_anonymization_atte_not_null1 NOT NULL account_anonymization_attempt_id,
  constraint account_anonymization_attempt_account_anonymization_attemp_fkey FOREIGN KEY (account_anonymization_attempt_id) REFERENCES accounts.account_anonymization_attempt(account_anonymization_attempt_id) ON DELETE CASCADE,
  constraint account_anonymization_attempt_succeeded_created_at_not_null NOT NULL created_at,
  constraint account_anonymization_attempt_succeeded_pkey PRIMARY KEY (account_anonymization_attempt_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX account_anonymization_attempt_succeeded_pkey ON accounts.account_anonymization_attempt_succeeded USING btree (account_anonymization_attempt_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON accounts.account_anonymization_attempt_succeeded FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table accounts.account_anonymization_task (
  account_anonymization_task_id bigint generated always as identity not null,
  account_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint account_anonymization_task_account_anonymization_task__not_null NOT NULL account_anonymization_task_id,
  constraint account_anonymization_task_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts.account(account_id) ON DELETE RESTRICT,
  constraint account_anonymization_task_account_id_key UNIQUE (account_id),
  constraint account_anonymization_task_account_id_not_null NOT NULL account_id,
  constraint account_anonymization_task_created_at_not_null NOT NULL created_at,
  constraint account_anonymization_task_pkey PRIMARY KEY (account_anonymization_task_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX account_anonymization_task_account_id_key ON accounts.account_anonymization_task USING btree (account_id);
CREATE UNIQUE INDEX account_anonymization_task_pkey ON accounts.account_anonymization_task USING btree (account_anonymization_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON accounts.account_anonymization_task FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table accounts.account_anonymization_task_failed (
  account_anonymization_task_id bigint not null,
  reason text not null,
  created_at timestamp with time zone default now() not null,
  constraint account_anonymization_task_account_anonymization_task_not_null1 NOT NULL account_anonymization_task_id,
  constraint account_anonymization_task_fa_account_anonymization_task_i_fkey FOREIGN KEY (account_anonymization_task_id) REFERENCES accounts.account_anonymization_task(account_anonymization_task_id) ON DELETE CASCADE,
  constraint account_anonymization_task_failed_created_at_not_null NOT NULL created_at,
  constraint account_anonymization_task_failed_pkey PRIMARY KEY (account_anonymization_task_id),
  constraint account_anonymization_task_failed_reason_not_null NOT NULL reason
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX account_anonymization_task_failed_pkey ON accounts.account_anonymization_task_failed USING btree (account_anonymization_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON accounts.account_anonymization_task_failed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table accounts.account_anonymization_task_succeeded (
  account_anonymization_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint account_anonymization_task__account_anonymization_task_not_null NOT NULL account_anonymization_task_id,
  constraint account_anonymization_task_su_account_anonymization_task_i_fkey FOREIGN KEY (account_anonymization_task_id) REFERENCES accounts.account_anonymization_task(account_anonymization_task_id) ON DELETE CASCADE,
  constraint account_anonymization_task_succeeded_created_at_not_null NOT NULL created_at,
  constraint account_anonymization_task_succeeded_pkey PRIMARY KEY (account_anonymization_task_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX account_anonymization_task_succeeded_pkey ON accounts.account_anonymization_task_succeeded USING btree (account_anonymization_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON accounts.account_anonymization_task_succeeded FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table accounts.account_deletion_supervisor_run (
  account_deletion_supervisor_run_id bigint generated always as identity not null,
  account_deletion_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint account_deletion_supervisor_account_deletion_superviso_not_null NOT NULL account_deletion_supervisor_run_id,
  constraint account_deletion_supervisor_r_account_deletion_task_id_not_null NOT NULL account_deletion_task_id,
  constraint account_deletion_supervisor_run_account_deletion_task_id_fkey FOREIGN KEY (account_deletion_task_id) REFERENCES accounts.account_deletion_task(account_deletion_task_id) ON DELETE CASCADE,
  constraint account_deletion_supervisor_run_created_at_not_null NOT NULL created_at,
  constraint account_deletion_supervisor_run_pkey PRIMARY KEY (account_deletion_supervisor_run_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX account_deletion_supervisor_run_pkey ON accounts.account_deletion_supervisor_run USING btree (account_deletion_supervisor_run_id);
CREATE INDEX account_deletion_supervisor_run_task_idx ON accounts.account_deletion_supervisor_run USING btree (account_deletion_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON accounts.account_deletion_supervisor_run FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table accounts.account_deletion_task (
  account_deletion_task_id bigint generated always as identity not null,
  account_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint account_deletion_task_account_deletion_task_id_not_null NOT NULL account_deletion_task_id,
  constraint account_deletion_task_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts.account(account_id) ON DELETE RESTRICT,
  constraint account_deletion_task_account_id_key UNIQUE (account_id),
  constraint account_deletion_task_account_id_not_null NOT NULL account_id,
  constraint account_deletion_task_created_at_not_null NOT NULL created_at,
  constraint account_deletion_task_pkey PRIMARY KEY (account_deletion_task_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX account_deletion_task_account_id_key ON accounts.account_deletion_task USING btree (account_id);
CREATE UNIQUE INDEX account_deletion_task_pkey ON accounts.account_deletion_task USING btree (account_deletion_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON accounts.account_deletion_task FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table accounts.account_deletion_task_failed (
  account_deletion_task_id bigint not null,
  reason text not null,
  created_at timestamp with time zone default now() not null,
  constraint account_deletion_task_failed_account_deletion_task_id_fkey FOREIGN KEY (account_deletion_task_id) REFERENCES accounts.account_deletion_task(account_deletion_task_id) ON DELETE CASCADE,
  constraint account_deletion_task_failed_account_deletion_task_id_not_null NOT NULL account_deletion_task_id,
  constraint account_deletion_task_failed_created_at_not_null NOT NULL created_at,
  constraint account_deletion_task_failed_pkey PRIMARY KEY (account_deletion_task_id),
  constraint account_deletion_task_failed_reason_not_null NOT NULL reason
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX account_deletion_task_failed_pkey ON accounts.account_deletion_task_failed USING btree (account_deletion_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON accounts.account_deletion_task_failed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table accounts.account_deletion_task_succeeded (
  account_deletion_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint account_deletion_task_succeed_account_deletion_task_id_not_null NOT NULL account_deletion_task_id,
  constraint account_deletion_task_succeeded_account_deletion_task_id_fkey FOREIGN KEY (account_deletion_task_id) REFERENCES accounts.account_deletion_task(account_deletion_task_id) ON DELETE CASCADE,
  constraint account_deletion_task_succeeded_created_at_not_null NOT NULL created_at,
  constraint account_deletion_task_succeeded_pkey PRIMARY KEY (account_deletion_task_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX account_deletion_task_succeeded_pkey ON accounts.account_deletion_task_succeeded USING btree (account_deletion_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON accounts.account_deletion_task_succeeded FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table accounts.account_flag (
  account_id bigint not null,
  flag text not null,
  created_at timestamp with time zone default now() not null,
  constraint account_flag_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts.account(account_id) ON DELETE CASCADE,
  constraint account_flag_account_id_not_null NOT NULL account_id,
  constraint account_flag_created_at_not_null NOT NULL created_at,
  constraint account_flag_flag_check CHECK ((flag = ANY (ARRAY['deleted'::text, 'anonymized'::text]))),
  constraint account_flag_flag_not_null NOT NULL flag,
  constraint account_flag_pkey PRIMARY KEY (account_id, flag)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX account_flag_pkey ON accounts.account_flag USING btree (account_id, flag);
CREATE TRIGGER forbid_update BEFORE UPDATE ON accounts.account_flag FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table accounts.anonymization_failure_injection (
  account_id bigint not null,
  error_message text not null,
  constraint anonymization_failure_injection_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts.account(account_id) ON DELETE CASCADE,
  constraint anonymization_failure_injection_account_id_not_null NOT NULL account_id,
  constraint anonymization_failure_injection_error_message_not_null NOT NULL error_message,
  constraint anonymization_failure_injection_pkey PRIMARY KEY (account_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX anonymization_failure_injection_pkey ON accounts.anonymization_failure_injection USING btree (account_id);

create table admin.api_change (
  api_change_id bigint generated always as identity not null,
  changed_at timestamp with time zone default now() not null,
  user_name text not null,
  user_level text not null,
  request_id text not null,
  method text not null,
  route text not null,
  action text not null,
  task_ids bigint[] default '{}'::bigint[] not null,
  task_type text,
  schedule_name text,
  worker_id text,
  input jsonb default '{}'::jsonb not null,
  answer jsonb not null,
  constraint api_change_action_check CHECK ((action ~ '^[a-z][a-z0-9_]{0,62}$'::text)),
  constraint api_change_action_not_null NOT NULL action,
  constraint api_change_answer_not_null NOT NULL answer,
  constraint api_change_api_change_id_not_null NOT NULL api_change_id,
  constraint api_change_changed_at_not_null NOT NULL changed_at,
  constraint api_change_input_check CHECK ((jsonb_typeof(input) = 'object'::text)),
  constraint api_change_input_not_null NOT NULL input,
  constraint api_change_method_check CHECK ((method = ANY (ARRAY['POST'::text, 'PUT'::text, 'PATCH'::text, 'DELETE'::text, 'CLI'::text]))),
  constraint api_change_method_not_null NOT NULL method,
  constraint api_change_pkey PRIMARY KEY (api_change_id),
  constraint api_change_request_id_check CHECK (((length(request_id) >= 1) AND (length(request_id) <= 200))),
  constraint api_change_request_id_not_null NOT NULL request_id,
  constraint api_change_route_check CHECK (((length(route) >= 1) AND (length(route) <= 200))),
  constraint api_change_route_not_null NOT NULL route,
  constraint api_change_task_ids_not_null NOT NULL task_ids,
  constraint api_change_user_level_check CHECK ((user_level = ANY (ARRAY['read'::text, 'operator'::text]))),
  constraint api_change_user_level_not_null NOT NULL user_level,
  constraint api_change_user_name_check CHECK (((length(user_name) >= 1) AND (length(user_name) <= 100))),
  constraint api_change_user_name_not_null NOT NULL user_name
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table admin.api_change is 'Facts: one row per change made through the operations API (admin.record_api_change), in the change''s own transaction. Read with admin.list_api_changes.';
CREATE UNIQUE INDEX api_change_pkey ON admin.api_change USING btree (api_change_id);
CREATE INDEX api_change_task_ids ON admin.api_change USING gin (task_ids);
CREATE TRIGGER forbid_update BEFORE UPDATE ON admin.api_change FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.email_message (
  message_id bigint not null,
  from_address text not null,
  to_address text not null,
  subject text not null,
  html text not null,
  text_body text,
  reply_to text,
  constraint email_message_from_address_check CHECK (((length(from_address) >= 3) AND (length(from_address) <= 320))),
  constraint email_message_from_address_not_null NOT NULL from_address,
  constraint email_message_html_check CHECK ((length(html) <= 1000000)),
  constraint email_message_html_not_null NOT NULL html,
  constraint email_message_message_id_fkey FOREIGN KEY (message_id) REFERENCES comms.message(message_id) ON DELETE CASCADE,
  constraint email_message_message_id_not_null NOT NULL message_id,
  constraint email_message_pkey PRIMARY KEY (message_id),
  constraint email_message_reply_to_check CHECK (((length(reply_to) >= 3) AND (length(reply_to) <= 320))),
  constraint email_message_subject_check CHECK (((length(subject) >= 1) AND (length(subject) <= 998))),
  constraint email_message_subject_not_null NOT NULL subject,
  constraint email_message_text_body_check CHECK ((length(text_body) <= 1000000)),
  constraint email_message_to_address_check CHECK (((length(to_address) >= 3) AND (length(to_address) <= 320))),
  constraint email_message_to_address_not_null NOT NULL to_address
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX email_message_pkey ON comms.email_message USING btree (message_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.email_message FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.message (
  message_id bigint generated always as identity not null,
  channel text not null,
  idempotency_key text,
  created_at timestamp with time zone default now() not null,
  constraint message_channel_check CHECK ((channel = ANY (ARRAY['email'::text, 'sms'::text]))),
  constraint message_channel_not_null NOT NULL channel,
  constraint message_created_at_not_null NOT NULL created_at,
  constraint message_idempotency_key_check CHECK (((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 200))),
  constraint message_idempotency_key_key UNIQUE (idempotency_key),
  constraint message_message_id_not_null NOT NULL message_id,
  constraint message_pkey PRIMARY KEY (message_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table comms.message is 'One message to send, on one channel. Written once by a kickoff.';
CREATE UNIQUE INDEX message_idempotency_key_key ON comms.message USING btree (idempotency_key);
CREATE UNIQUE INDEX message_pkey ON comms.message USING btree (message_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.message FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_email_attempt (
  send_email_attempt_id bigint generated always as identity not null,
  send_email_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  task_id bigint,
  constraint send_email_attempt_created_at_not_null NOT NULL created_at,
  constraint send_email_attempt_pkey PRIMARY KEY (send_email_attempt_id),
  constraint send_email_attempt_send_email_attempt_id_not_null NOT NULL send_email_attempt_id,
  constraint send_email_attempt_send_email_task_id_fkey FOREIGN KEY (send_email_task_id) REFERENCES comms.send_email_task(send_email_task_id) ON DELETE CASCADE,
  constraint send_email_attempt_send_email_task_id_not_null NOT NULL send_email_task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_email_attempt_pkey ON comms.send_email_attempt USING btree (send_email_attempt_id);
CREATE INDEX send_email_attempt_queue_task_idx ON comms.send_email_attempt USING btree (task_id);
CREATE INDEX send_email_attempt_task_idx ON comms.send_email_attempt USING btree (send_email_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_email_attempt FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_email_attempt_failed (
  send_email_attempt_id bigint not null,
  error_message text not null,
  created_at timestamp with time zone default now() not null,
  constraint send_email_attempt_failed_created_at_not_null NOT NULL created_at,
  constraint send_email_attempt_failed_error_message_not_null NOT NULL error_message,
  constraint send_email_attempt_failed_pkey PRIMARY KEY (send_email_attempt_id),
  constraint send_email_attempt_failed_send_email_attempt_id_fkey FOREIGN KEY (send_email_attempt_id) REFERENCES comms.send_email_attempt(send_email_attempt_id) ON DELETE CASCADE,
  constraint send_email_attempt_failed_send_email_attempt_id_not_null NOT NULL send_email_attempt_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_email_attempt_failed_pkey ON comms.send_email_attempt_failed USING btree (send_email_attempt_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_email_attempt_failed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_email_attempt_succeeded (
  send_email_attempt_id bigint not null,
  worker_payload jsonb,
  created_at timestamp with time zone default now() not null,
  constraint send_email_attempt_succeeded_created_at_not_null NOT NULL created_at,
  constraint send_email_attempt_succeeded_pkey PRIMARY KEY (send_email_attempt_id),
  constraint send_email_attempt_succeeded_send_email_attempt_id_fkey FOREIGN KEY (send_email_attempt_id) REFERENCES comms.send_email_attempt(send_email_attempt_id) ON DELETE CASCADE,
  constraint send_email_attempt_succeeded_send_email_attempt_id_not_null NOT NULL send_email_attempt_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_email_attempt_succeeded_pkey ON comms.send_email_attempt_succeeded USING btree (send_email_attempt_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_email_attempt_succeeded FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_email_supervisor_run (
  send_email_supervisor_run_id bigint generated always as identity not null,
  send_email_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  next_task_id bigint,
  constraint send_email_supervisor_run_created_at_not_null NOT NULL created_at,
  constraint send_email_supervisor_run_pkey PRIMARY KEY (send_email_supervisor_run_id),
  constraint send_email_supervisor_run_send_email_supervisor_run_id_not_null NOT NULL send_email_supervisor_run_id,
  constraint send_email_supervisor_run_send_email_task_id_fkey FOREIGN KEY (send_email_task_id) REFERENCES comms.send_email_task(send_email_task_id) ON DELETE CASCADE,
  constraint send_email_supervisor_run_send_email_task_id_not_null NOT NULL send_email_task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_email_supervisor_run_pkey ON comms.send_email_supervisor_run USING btree (send_email_supervisor_run_id);
CREATE INDEX send_email_supervisor_run_task_idx ON comms.send_email_supervisor_run USING btree (send_email_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_email_supervisor_run FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_email_task (
  send_email_task_id bigint generated always as identity not null,
  message_id bigint not null,
  scheduled_at timestamp with time zone default now() not null,
  created_at timestamp with time zone default now() not null,
  constraint send_email_task_created_at_not_null NOT NULL created_at,
  constraint send_email_task_message_id_fkey FOREIGN KEY (message_id) REFERENCES comms.email_message(message_id) ON DELETE RESTRICT,
  constraint send_email_task_message_id_key UNIQUE (message_id),
  constraint send_email_task_message_id_not_null NOT NULL message_id,
  constraint send_email_task_pkey PRIMARY KEY (send_email_task_id),
  constraint send_email_task_scheduled_at_not_null NOT NULL scheduled_at,
  constraint send_email_task_send_email_task_id_not_null NOT NULL send_email_task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_email_task_message_id_key ON comms.send_email_task USING btree (message_id);
CREATE UNIQUE INDEX send_email_task_pkey ON comms.send_email_task USING btree (send_email_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_email_task FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_email_task_failed (
  send_email_task_id bigint not null,
  reason text not null,
  created_at timestamp with time zone default now() not null,
  constraint send_email_task_failed_created_at_not_null NOT NULL created_at,
  constraint send_email_task_failed_pkey PRIMARY KEY (send_email_task_id),
  constraint send_email_task_failed_reason_not_null NOT NULL reason,
  constraint send_email_task_failed_send_email_task_id_fkey FOREIGN KEY (send_email_task_id) REFERENCES comms.send_email_task(send_email_task_id) ON DELETE CASCADE,
  constraint send_email_task_failed_send_email_task_id_not_null NOT NULL send_email_task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_email_task_failed_pkey ON comms.send_email_task_failed USING btree (send_email_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_email_task_failed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_email_task_succeeded (
  send_email_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint send_email_task_succeeded_created_at_not_null NOT NULL created_at,
  constraint send_email_task_succeeded_pkey PRIMARY KEY (send_email_task_id),
  constraint send_email_task_succeeded_send_email_task_id_fkey FOREIGN KEY (send_email_task_id) REFERENCES comms.send_email_task(send_email_task_id) ON DELETE CASCADE,
  constraint send_email_task_succeeded_send_email_task_id_not_null NOT NULL send_email_task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_email_task_succeeded_pkey ON comms.send_email_task_succeeded USING btree (send_email_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_email_task_succeeded FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_sms_attempt (
  send_sms_attempt_id bigint generated always as identity not null,
  send_sms_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  task_id bigint,
  constraint send_sms_attempt_created_at_not_null NOT NULL created_at,
  constraint send_sms_attempt_pkey PRIMARY KEY (send_sms_attempt_id),
  constraint send_sms_attempt_send_sms_attempt_id_not_null NOT NULL send_sms_attempt_id,
  constraint send_sms_attempt_send_sms_task_id_fkey FOREIGN KEY (send_sms_task_id) REFERENCES comms.send_sms_task(send_sms_task_id) ON DELETE CASCADE,
  constraint send_sms_attempt_send_sms_task_id_not_null NOT NULL send_sms_task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_sms_attempt_pkey ON comms.send_sms_attempt USING btree (send_sms_attempt_id);
CREATE INDEX send_sms_attempt_queue_task_idx ON comms.send_sms_attempt USING btree (task_id);
CREATE INDEX send_sms_attempt_task_idx ON comms.send_sms_attempt USING btree (send_sms_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_sms_attempt FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_sms_attempt_failed (
  send_sms_attempt_id bigint not null,
  error_message text not null,
  created_at timestamp with time zone default now() not null,
  constraint send_sms_attempt_failed_created_at_not_null NOT NULL created_at,
  constraint send_sms_attempt_failed_error_message_not_null NOT NULL error_message,
  constraint send_sms_attempt_failed_pkey PRIMARY KEY (send_sms_attempt_id),
  constraint send_sms_attempt_failed_send_sms_attempt_id_fkey FOREIGN KEY (send_sms_attempt_id) REFERENCES comms.send_sms_attempt(send_sms_attempt_id) ON DELETE CASCADE,
  constraint send_sms_attempt_failed_send_sms_attempt_id_not_null NOT NULL send_sms_attempt_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_sms_attempt_failed_pkey ON comms.send_sms_attempt_failed USING btree (send_sms_attempt_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_sms_attempt_failed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_sms_attempt_succeeded (
  send_sms_attempt_id bigint not null,
  worker_payload jsonb,
  created_at timestamp with time zone default now() not null,
  constraint send_sms_attempt_succeeded_created_at_not_null NOT NULL created_at,
  constraint send_sms_attempt_succeeded_pkey PRIMARY KEY (send_sms_attempt_id),
  constraint send_sms_attempt_succeeded_send_sms_attempt_id_fkey FOREIGN KEY (send_sms_attempt_id) REFERENCES comms.send_sms_attempt(send_sms_attempt_id) ON DELETE CASCADE,
  constraint send_sms_attempt_succeeded_send_sms_attempt_id_not_null NOT NULL send_sms_attempt_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_sms_attempt_succeeded_pkey ON comms.send_sms_attempt_succeeded USING btree (send_sms_attempt_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_sms_attempt_succeeded FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_sms_supervisor_run (
  send_sms_supervisor_run_id bigint generated always as identity not null,
  send_sms_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  next_task_id bigint,
  constraint send_sms_supervisor_run_created_at_not_null NOT NULL created_at,
  constraint send_sms_supervisor_run_pkey PRIMARY KEY (send_sms_supervisor_run_id),
  constraint send_sms_supervisor_run_send_sms_supervisor_run_id_not_null NOT NULL send_sms_supervisor_run_id,
  constraint send_sms_supervisor_run_send_sms_task_id_fkey FOREIGN KEY (send_sms_task_id) REFERENCES comms.send_sms_task(send_sms_task_id) ON DELETE CASCADE,
  constraint send_sms_supervisor_run_send_sms_task_id_not_null NOT NULL send_sms_task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_sms_supervisor_run_pkey ON comms.send_sms_supervisor_run USING btree (send_sms_supervisor_run_id);
CREATE INDEX send_sms_supervisor_run_task_idx ON comms.send_sms_supervisor_run USING btree (send_sms_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_sms_supervisor_run FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_sms_task (
  send_sms_task_id bigint generated always as identity not null,
  message_id bigint not null,
  scheduled_at timestamp with time zone default now() not null,
  created_at timestamp with time zone default now() not null,
  constraint send_sms_task_created_at_not_null NOT NULL created_at,
  constraint send_sms_task_message_id_fkey FOREIGN KEY (message_id) REFERENCES comms.sms_message(message_id) ON DELETE RESTRICT,
  constraint send_sms_task_message_id_key UNIQUE (message_id),
  constraint send_sms_task_message_id_not_null NOT NULL message_id,
  constraint send_sms_task_pkey PRIMARY KEY (send_sms_task_id),
  constraint send_sms_task_scheduled_at_not_null NOT NULL scheduled_at,
  constraint send_sms_task_send_sms_task_id_not_null NOT NULL send_sms_task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_sms_task_message_id_key ON comms.send_sms_task USING btree (message_id);
CREATE UNIQUE INDEX send_sms_task_pkey ON comms.send_sms_task USING btree (send_sms_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_sms_task FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_sms_task_failed (
  send_sms_task_id bigint not null,
  reason text not null,
  created_at timestamp with time zone default now() not null,
  constraint send_sms_task_failed_created_at_not_null NOT NULL created_at,
  constraint send_sms_task_failed_pkey PRIMARY KEY (send_sms_task_id),
  constraint send_sms_task_failed_reason_not_null NOT NULL reason,
  constraint send_sms_task_failed_send_sms_task_id_fkey FOREIGN KEY (send_sms_task_id) REFERENCES comms.send_sms_task(send_sms_task_id) ON DELETE CASCADE,
  constraint send_sms_task_failed_send_sms_task_id_not_null NOT NULL send_sms_task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_sms_task_failed_pkey ON comms.send_sms_task_failed USING btree (send_sms_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_sms_task_failed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.send_sms_task_succeeded (
  send_sms_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint send_sms_task_succeeded_created_at_not_null NOT NULL created_at,
  constraint send_sms_task_succeeded_pkey PRIMARY KEY (send_sms_task_id),
  constraint send_sms_task_succeeded_send_sms_task_id_fkey FOREIGN KEY (send_sms_task_id) REFERENCES comms.send_sms_task(send_sms_task_id) ON DELETE CASCADE,
  constraint send_sms_task_succeeded_send_sms_task_id_not_null NOT NULL send_sms_task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX send_sms_task_succeeded_pkey ON comms.send_sms_task_succeeded USING btree (send_sms_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.send_sms_task_succeeded FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table comms.sms_message (
  message_id bigint not null,
  to_number text not null,
  from_number text,
  body text not null,
  constraint sms_message_body_check CHECK (((length(body) >= 1) AND (length(body) <= 1600))),
  constraint sms_message_body_not_null NOT NULL body,
  constraint sms_message_from_number_check CHECK ((from_number ~ '^\+[1-9][0-9]{6,14}$'::text)),
  constraint sms_message_message_id_fkey FOREIGN KEY (message_id) REFERENCES comms.message(message_id) ON DELETE CASCADE,
  constraint sms_message_message_id_not_null NOT NULL message_id,
  constraint sms_message_pkey PRIMARY KEY (message_id),
  constraint sms_message_to_number_check CHECK ((to_number ~ '^\+[1-9][0-9]{6,14}$'::text)),
  constraint sms_message_to_number_not_null NOT NULL to_number
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX sms_message_pkey ON comms.sms_message USING btree (message_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON comms.sms_message FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table files.file (
  file_id bigint generated always as identity not null,
  account_id bigint not null,
  bucket text not null,
  object_key text not null,
  created_at timestamp with time zone default now() not null,
  constraint file_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts.account(account_id) ON DELETE RESTRICT,
  constraint file_account_id_not_null NOT NULL account_id,
  constraint file_bucket_check CHECK ((bucket ~ '^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$'::text)),
  constraint file_bucket_not_null NOT NULL bucket,
  constraint file_created_at_not_null NOT NULL created_at,
  constraint file_file_id_not_null NOT NULL file_id,
  constraint file_object_key_check CHECK (((length(object_key) >= 1) AND (length(object_key) <= 1024))),
  constraint file_object_key_not_null NOT NULL object_key,
  constraint file_pkey PRIMARY KEY (file_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX file_account_idx ON files.file USING btree (account_id);
CREATE INDEX file_bucket_object_key_idx ON files.file USING btree (bucket, object_key);
CREATE UNIQUE INDEX file_pkey ON files.file USING btree (file_id);

create table files.file_deletion_attempt (
  file_deletion_attempt_id bigint generated always as identity not null,
  file_deletion_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  task_id bigint,
  constraint file_deletion_attempt_created_at_not_null NOT NULL created_at,
  constraint file_deletion_attempt_file_deletion_attempt_id_not_null NOT NULL file_deletion_attempt_id,
  constraint file_deletion_attempt_file_deletion_task_id_fkey FOREIGN KEY (file_deletion_task_id) REFERENCES files.file_deletion_task(file_deletion_task_id) ON DELETE CASCADE,
  constraint file_deletion_attempt_file_deletion_task_id_not_null NOT NULL file_deletion_task_id,
  constraint file_deletion_attempt_pkey PRIMARY KEY (file_deletion_attempt_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX file_deletion_attempt_pkey ON files.file_deletion_attempt USING btree (file_deletion_attempt_id);
CREATE INDEX file_deletion_attempt_queue_task_idx ON files.file_deletion_attempt USING btree (task_id);
CREATE INDEX file_deletion_attempt_task_idx ON files.file_deletion_attempt USING btree (file_deletion_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON files.file_deletion_attempt FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table files.file_deletion_attempt_failed (
  file_deletion_attempt_id bigint not null,
  error_message text not null,
  created_at timestamp with time zone default now() not null,
  constraint file_deletion_attempt_failed_created_at_not_null NOT NULL created_at,
  constraint file_deletion_attempt_failed_error_message_not_null NOT NULL error_message,
  constraint file_deletion_attempt_failed_file_deletion_attempt_id_fkey FOREIGN KEY (file_deletion_attempt_id) REFERENCES files.file_deletion_attempt(file_deletion_attempt_id) ON DELETE CASCADE,
  constraint file_deletion_attempt_failed_file_deletion_attempt_id_not_null NOT NULL file_deletion_attempt_id,
  constraint file_deletion_attempt_failed_pkey PRIMARY KEY (file_deletion_attempt_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX file_deletion_attempt_failed_pkey ON files.file_deletion_attempt_failed USING btree (file_deletion_attempt_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON files.file_deletion_attempt_failed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table files.file_deletion_attempt_succeeded (
  file_deletion_attempt_id bigint not null,
  worker_payload jsonb,
  created_at timestamp with time zone default now() not null,
  constraint file_deletion_attempt_succeed_file_deletion_attempt_id_not_null NOT NULL file_deletion_attempt_id,
  constraint file_deletion_attempt_succeeded_created_at_not_null NOT NULL created_at,
  constraint file_deletion_attempt_succeeded_file_deletion_attempt_id_fkey FOREIGN KEY (file_deletion_attempt_id) REFERENCES files.file_deletion_attempt(file_deletion_attempt_id) ON DELETE CASCADE,
  constraint file_deletion_attempt_succeeded_pkey PRIMARY KEY (file_deletion_attempt_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX file_deletion_attempt_succeeded_pkey ON files.file_deletion_attempt_succeeded USING btree (file_deletion_attempt_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON files.file_deletion_attempt_succeeded FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table files.file_deletion_supervisor_run (
  file_deletion_supervisor_run_id bigint generated always as identity not null,
  file_deletion_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  next_task_id bigint,
  constraint file_deletion_supervisor_ru_file_deletion_supervisor_r_not_null NOT NULL file_deletion_supervisor_run_id,
  constraint file_deletion_supervisor_run_created_at_not_null NOT NULL created_at,
  constraint file_deletion_supervisor_run_file_deletion_task_id_fkey FOREIGN KEY (file_deletion_task_id) REFERENCES files.file_deletion_task(file_deletion_task_id) ON DELETE CASCADE,
  constraint file_deletion_supervisor_run_file_deletion_task_id_not_null NOT NULL file_deletion_task_id,
  constraint file_deletion_supervisor_run_pkey PRIMARY KEY (file_deletion_supervisor_run_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX file_deletion_supervisor_run_pkey ON files.file_deletion_supervisor_run USING btree (file_deletion_supervisor_run_id);
CREATE INDEX file_deletion_supervisor_run_task_idx ON files.file_deletion_supervisor_run USING btree (file_deletion_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON files.file_deletion_supervisor_run FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table files.file_deletion_task (
  file_deletion_task_id bigint generated always as identity not null,
  file_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint file_deletion_task_created_at_not_null NOT NULL created_at,
  constraint file_deletion_task_file_deletion_task_id_not_null NOT NULL file_deletion_task_id,
  constraint file_deletion_task_file_id_fkey FOREIGN KEY (file_id) REFERENCES files.file(file_id) ON DELETE RESTRICT,
  constraint file_deletion_task_file_id_key UNIQUE (file_id),
  constraint file_deletion_task_file_id_not_null NOT NULL file_id,
  constraint file_deletion_task_pkey PRIMARY KEY (file_deletion_task_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX file_deletion_task_file_id_key ON files.file_deletion_task USING btree (file_id);
CREATE UNIQUE INDEX file_deletion_task_pkey ON files.file_deletion_task USING btree (file_deletion_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON files.file_deletion_task FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table files.file_deletion_task_failed (
  file_deletion_task_id bigint not null,
  reason text not null,
  created_at timestamp with time zone default now() not null,
  constraint file_deletion_task_failed_created_at_not_null NOT NULL created_at,
  constraint file_deletion_task_failed_file_deletion_task_id_fkey FOREIGN KEY (file_deletion_task_id) REFERENCES files.file_deletion_task(file_deletion_task_id) ON DELETE CASCADE,
  constraint file_deletion_task_failed_file_deletion_task_id_not_null NOT NULL file_deletion_task_id,
  constraint file_deletion_task_failed_pkey PRIMARY KEY (file_deletion_task_id),
  constraint file_deletion_task_failed_reason_not_null NOT NULL reason
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX file_deletion_task_failed_pkey ON files.file_deletion_task_failed USING btree (file_deletion_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON files.file_deletion_task_failed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table files.file_deletion_task_succeeded (
  file_deletion_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint file_deletion_task_succeeded_created_at_not_null NOT NULL created_at,
  constraint file_deletion_task_succeeded_file_deletion_task_id_fkey FOREIGN KEY (file_deletion_task_id) REFERENCES files.file_deletion_task(file_deletion_task_id) ON DELETE CASCADE,
  constraint file_deletion_task_succeeded_file_deletion_task_id_not_null NOT NULL file_deletion_task_id,
  constraint file_deletion_task_succeeded_pkey PRIMARY KEY (file_deletion_task_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX file_deletion_task_succeeded_pkey ON files.file_deletion_task_succeeded USING btree (file_deletion_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON files.file_deletion_task_succeeded FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table files.file_metadata (
  file_metadata_id bigint generated always as identity not null,
  file_id bigint not null,
  metadata jsonb not null,
  created_at timestamp with time zone default now() not null,
  constraint file_metadata_created_at_not_null NOT NULL created_at,
  constraint file_metadata_file_id_fkey FOREIGN KEY (file_id) REFERENCES files.file(file_id) ON DELETE CASCADE,
  constraint file_metadata_file_id_not_null NOT NULL file_id,
  constraint file_metadata_file_metadata_id_not_null NOT NULL file_metadata_id,
  constraint file_metadata_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
  constraint file_metadata_metadata_not_null NOT NULL metadata,
  constraint file_metadata_pkey PRIMARY KEY (file_metadata_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table files.file_metadata is 'Append-only metadata documents per file; the row with the highest id is current (files.current_file_metadata).';
CREATE INDEX file_metadata_file_idx ON files.file_metadata USING btree (file_id, file_metadata_id DESC);
CREATE UNIQUE INDEX file_metadata_pkey ON files.file_metadata USING btree (file_metadata_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON files.file_metadata FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table internal.channel_delivery_mode (
  task_type text not null,
  delivery_mode text not null,
  reason text default ''::text not null,
  constraint channel_delivery_mode_delivery_mode_check CHECK ((delivery_mode = ANY (ARRAY['at_least_once'::text, 'at_most_once'::text]))),
  constraint channel_delivery_mode_delivery_mode_not_null NOT NULL delivery_mode,
  constraint channel_delivery_mode_pkey PRIMARY KEY (task_type),
  constraint channel_delivery_mode_reason_not_null NOT NULL reason,
  constraint channel_delivery_mode_task_type_fkey FOREIGN KEY (task_type) REFERENCES queues.task_type(task_type) ON DELETE CASCADE,
  constraint channel_delivery_mode_task_type_not_null NOT NULL task_type
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table internal.channel_delivery_mode is 'Delivery mode per channel task type: at_least_once (the provider deduplicates) or at_most_once (the worker records the call before making it and never repeats a started call). Types not listed are at_least_once.';
CREATE UNIQUE INDEX channel_delivery_mode_pkey ON internal.channel_delivery_mode USING btree (task_type);

create table internal.channel_process (
  process_schema text not null,
  process_name text not null,
  task_type text not null,
  supervisor text not null,
  before_handler text not null,
  success_handler text not null,
  error_handler text not null,
  max_attempts integer not null,
  max_supervisor_runs integer not null,
  backoff_cap_seconds integer not null,
  attempt_payload regprocedure,
  constraint channel_process_backoff_cap_seconds_check CHECK (((backoff_cap_seconds >= 1) AND (backoff_cap_seconds <= 86400))),
  constraint channel_process_backoff_cap_seconds_not_null NOT NULL backoff_cap_seconds,
  constraint channel_process_before_handler_not_null NOT NULL before_handler,
  constraint channel_process_error_handler_not_null NOT NULL error_handler,
  constraint channel_process_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 100))),
  constraint channel_process_max_attempts_not_null NOT NULL max_attempts,
  constraint channel_process_max_supervisor_runs_check CHECK (((max_supervisor_runs >= 1) AND (max_supervisor_runs <= 10000))),
  constraint channel_process_max_supervisor_runs_not_null NOT NULL max_supervisor_runs,
  constraint channel_process_pkey PRIMARY KEY (process_schema, process_name),
  constraint channel_process_process_name_not_null NOT NULL process_name,
  constraint channel_process_process_schema_not_null NOT NULL process_schema,
  constraint channel_process_success_handler_not_null NOT NULL success_handler,
  constraint channel_process_supervisor_not_null NOT NULL supervisor,
  constraint channel_process_task_type_fkey FOREIGN KEY (task_type) REFERENCES queues.task_type(task_type) ON DELETE RESTRICT,
  constraint channel_process_task_type_not_null NOT NULL task_type
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table internal.channel_process is 'Channel processes run by internal.run_channel_supervisor: names (tables <schema>.<name>_task, _attempt, ...) and limits. Configuration, not a fact table.';
CREATE UNIQUE INDEX channel_process_pkey ON internal.channel_process USING btree (process_schema, process_name);

create table internal.process_pruned (
  process_pruned_id bigint generated always as identity not null,
  process text not null,
  first_root_id bigint not null,
  last_root_id bigint not null,
  roots integer not null,
  finished_before timestamp with time zone not null,
  pruned_at timestamp with time zone default now() not null,
  constraint process_pruned_check CHECK ((last_root_id >= first_root_id)),
  constraint process_pruned_finished_before_not_null NOT NULL finished_before,
  constraint process_pruned_first_root_id_not_null NOT NULL first_root_id,
  constraint process_pruned_last_root_id_not_null NOT NULL last_root_id,
  constraint process_pruned_pkey PRIMARY KEY (process_pruned_id),
  constraint process_pruned_process_not_null NOT NULL process,
  constraint process_pruned_process_pruned_id_not_null NOT NULL process_pruned_id,
  constraint process_pruned_pruned_at_not_null NOT NULL pruned_at,
  constraint process_pruned_roots_check CHECK ((roots > 0)),
  constraint process_pruned_roots_not_null NOT NULL roots
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table internal.process_pruned is 'Append-only: finished process roots pruned by domain retention (ids first_root_id..last_root_id, not every id in between).';
CREATE UNIQUE INDEX process_pruned_pkey ON internal.process_pruned USING btree (process_pruned_id);
CREATE INDEX process_pruned_process_idx ON internal.process_pruned USING btree (process, last_root_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON internal.process_pruned FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table internal.process_retention (
  process text not null,
  retention interval not null,
  updated_at timestamp with time zone default now() not null,
  constraint process_retention_pkey PRIMARY KEY (process),
  constraint process_retention_process_check CHECK ((process = ANY (ARRAY['send_email'::text, 'send_sms'::text, 'file_deletion'::text, 'account_deletion'::text, 'account_anonymization'::text]))),
  constraint process_retention_process_not_null NOT NULL process,
  constraint process_retention_retention_check CHECK ((retention > '00:00:00'::interval)),
  constraint process_retention_retention_not_null NOT NULL retention,
  constraint process_retention_updated_at_not_null NOT NULL updated_at
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table internal.process_retention is 'Retention window of finished business processes, per process; no row: kept forever (the default).';
CREATE UNIQUE INDEX process_retention_pkey ON internal.process_retention USING btree (process);

create table internal.provider_call_started (
  task_id bigint not null,
  task_lease_id bigint not null,
  started_at timestamp with time zone default now() not null,
  constraint provider_call_started_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint provider_call_started_started_at_not_null NOT NULL started_at,
  constraint provider_call_started_task_id_not_null NOT NULL task_id,
  constraint provider_call_started_task_lease_id_not_null NOT NULL task_lease_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table internal.provider_call_started is 'Fact: an at-most-once provider call was started under this lease (committed before the call).';
CREATE UNIQUE INDEX provider_call_started_pkey ON internal.provider_call_started USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON internal.provider_call_started FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table internal.runnable_function (
  function_schema text not null,
  function_name text not null,
  registered_at timestamp with time zone default now() not null,
  constraint runnable_function_function_name_not_null NOT NULL function_name,
  constraint runnable_function_function_schema_not_null NOT NULL function_schema,
  constraint runnable_function_pkey PRIMARY KEY (function_schema, function_name),
  constraint runnable_function_registered_at_not_null NOT NULL registered_at
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table internal.runnable_function is 'Allowlist of internal.run_function. Register with internal.register_runnable_function(regprocedure).';
CREATE UNIQUE INDEX runnable_function_pkey ON internal.runnable_function USING btree (function_schema, function_name);

create table internal.setting (
  name text not null,
  value text not null,
  updated_at timestamp with time zone default now() not null,
  constraint setting_name_check CHECK ((name = 'backoff_scale'::text)),
  constraint setting_name_not_null NOT NULL name,
  constraint setting_pkey PRIMARY KEY (name),
  constraint setting_updated_at_not_null NOT NULL updated_at,
  constraint setting_value_not_null NOT NULL value
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table internal.setting is 'Operational settings (owner only). See sql/internal/settings.sql.';
CREATE UNIQUE INDEX setting_pkey ON internal.setting USING btree (name);

create table learning.cue (
  cue_id bigint generated always as identity not null,
  prompt text not null,
  created_at timestamp with time zone default now() not null,
  constraint cue_created_at_not_null NOT NULL created_at,
  constraint cue_cue_id_not_null NOT NULL cue_id,
  constraint cue_pkey PRIMARY KEY (cue_id),
  constraint cue_prompt_check CHECK (((length(prompt) >= 1) AND (length(prompt) <= 2000))),
  constraint cue_prompt_not_null NOT NULL prompt
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX cue_pkey ON learning.cue USING btree (cue_id);

create table learning.profile (
  profile_id bigint generated always as identity not null,
  account_id bigint not null,
  display_name text,
  created_at timestamp with time zone default now() not null,
  constraint profile_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts.account(account_id) ON DELETE RESTRICT,
  constraint profile_account_id_not_null NOT NULL account_id,
  constraint profile_created_at_not_null NOT NULL created_at,
  constraint profile_display_name_check CHECK ((length(display_name) <= 200)),
  constraint profile_pkey PRIMARY KEY (profile_id),
  constraint profile_profile_id_not_null NOT NULL profile_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX profile_account_idx ON learning.profile USING btree (account_id);
CREATE UNIQUE INDEX profile_pkey ON learning.profile USING btree (profile_id);

create table learning.profile_cue_recording (
  profile_cue_recording_id bigint generated always as identity not null,
  profile_id bigint not null,
  cue_id bigint not null,
  file_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint profile_cue_recording_created_at_not_null NOT NULL created_at,
  constraint profile_cue_recording_cue_id_fkey FOREIGN KEY (cue_id) REFERENCES learning.cue(cue_id) ON DELETE RESTRICT,
  constraint profile_cue_recording_cue_id_not_null NOT NULL cue_id,
  constraint profile_cue_recording_file_id_fkey FOREIGN KEY (file_id) REFERENCES files.file(file_id) ON DELETE RESTRICT,
  constraint profile_cue_recording_file_id_not_null NOT NULL file_id,
  constraint profile_cue_recording_pkey PRIMARY KEY (profile_cue_recording_id),
  constraint profile_cue_recording_profile_cue_recording_id_not_null NOT NULL profile_cue_recording_id,
  constraint profile_cue_recording_profile_id_fkey FOREIGN KEY (profile_id) REFERENCES learning.profile(profile_id) ON DELETE RESTRICT,
  constraint profile_cue_recording_profile_id_not_null NOT NULL profile_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX profile_cue_recording_file_idx ON learning.profile_cue_recording USING btree (file_id);
CREATE UNIQUE INDEX profile_cue_recording_pkey ON learning.profile_cue_recording USING btree (profile_cue_recording_id);
CREATE INDEX profile_cue_recording_profile_idx ON learning.profile_cue_recording USING btree (profile_id);

create table menus.product (
  product_id bigint generated always as identity not null,
  store_id bigint not null,
  platform_product_id text not null,
  name text not null,
  first_seen_at timestamp with time zone default now() not null,
  constraint product_first_seen_at_not_null NOT NULL first_seen_at,
  constraint product_name_check CHECK (((length(name) >= 1) AND (length(name) <= 300))),
  constraint product_name_not_null NOT NULL name,
  constraint product_pkey PRIMARY KEY (product_id),
  constraint product_platform_product_id_check CHECK (((length(platform_product_id) >= 1) AND (length(platform_product_id) <= 100))),
  constraint product_platform_product_id_not_null NOT NULL platform_product_id,
  constraint product_product_id_not_null NOT NULL product_id,
  constraint product_store_id_fkey FOREIGN KEY (store_id) REFERENCES menus.store(store_id) ON DELETE CASCADE,
  constraint product_store_id_not_null NOT NULL store_id,
  constraint product_store_id_platform_product_id_key UNIQUE (store_id, platform_product_id)
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX product_pkey ON menus.product USING btree (product_id);
CREATE UNIQUE INDEX product_store_id_platform_product_id_key ON menus.product USING btree (store_id, platform_product_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON menus.product FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table menus.product_snapshot (
  product_snapshot_id bigint generated always as identity not null,
  product_id bigint not null,
  task_id bigint not null,
  observed_at timestamp with time zone default now() not null,
  price_cents integer not null,
  in_stock boolean not null,
  stock_quantity integer not null,
  constraint product_snapshot_in_stock_not_null NOT NULL in_stock,
  constraint product_snapshot_observed_at_not_null NOT NULL observed_at,
  constraint product_snapshot_pkey PRIMARY KEY (product_snapshot_id),
  constraint product_snapshot_price_cents_check CHECK ((price_cents >= 0)),
  constraint product_snapshot_price_cents_not_null NOT NULL price_cents,
  constraint product_snapshot_product_id_fkey FOREIGN KEY (product_id) REFERENCES menus.product(product_id) ON DELETE CASCADE,
  constraint product_snapshot_product_id_not_null NOT NULL product_id,
  constraint product_snapshot_product_snapshot_id_not_null NOT NULL product_snapshot_id,
  constraint product_snapshot_stock_quantity_check CHECK ((stock_quantity >= 0)),
  constraint product_snapshot_stock_quantity_not_null NOT NULL stock_quantity,
  constraint product_snapshot_task_id_not_null NOT NULL task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX product_snapshot_pkey ON menus.product_snapshot USING btree (product_snapshot_id);
CREATE INDEX product_snapshot_product_idx ON menus.product_snapshot USING btree (product_id, observed_at DESC);
CREATE INDEX product_snapshot_task_idx ON menus.product_snapshot USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON menus.product_snapshot FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table menus.resync_generated (
  resync_date date not null,
  batches integer not null,
  stores integer not null,
  generated_at timestamp with time zone default now() not null,
  constraint resync_generated_batches_check CHECK (((batches >= 1) AND (batches <= 24))),
  constraint resync_generated_batches_not_null NOT NULL batches,
  constraint resync_generated_generated_at_not_null NOT NULL generated_at,
  constraint resync_generated_pkey PRIMARY KEY (resync_date),
  constraint resync_generated_resync_date_not_null NOT NULL resync_date,
  constraint resync_generated_stores_check CHECK ((stores >= 0)),
  constraint resync_generated_stores_not_null NOT NULL stores
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX resync_generated_pkey ON menus.resync_generated USING btree (resync_date);
CREATE TRIGGER forbid_update BEFORE UPDATE ON menus.resync_generated FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table menus.store (
  store_id bigint generated always as identity not null,
  slug text not null,
  name text not null,
  menu_url text not null,
  discovered_at timestamp with time zone default now() not null,
  task_id bigint,
  constraint store_discovered_at_not_null NOT NULL discovered_at,
  constraint store_menu_url_check CHECK (((length(menu_url) >= 1) AND (length(menu_url) <= 500))),
  constraint store_menu_url_not_null NOT NULL menu_url,
  constraint store_name_check CHECK (((length(name) >= 1) AND (length(name) <= 200))),
  constraint store_name_not_null NOT NULL name,
  constraint store_pkey PRIMARY KEY (store_id),
  constraint store_slug_check CHECK ((slug ~ '^[a-z0-9][a-z0-9-]{0,99}$'::text)),
  constraint store_slug_key UNIQUE (slug),
  constraint store_slug_not_null NOT NULL slug,
  constraint store_store_id_not_null NOT NULL store_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX store_pkey ON menus.store USING btree (store_id);
CREATE UNIQUE INDEX store_slug_key ON menus.store USING btree (slug);
CREATE TRIGGER forbid_update BEFORE UPDATE ON menus.store FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table menus.store_platform_id (
  store_id bigint not null,
  platform_dispensary_id text not null,
  resolved_at timestamp with time zone default now() not null,
  task_id bigint,
  constraint store_platform_id_pkey PRIMARY KEY (store_id),
  constraint store_platform_id_platform_dispensary_id_check CHECK (((length(platform_dispensary_id) >= 1) AND (length(platform_dispensary_id) <= 100))),
  constraint store_platform_id_platform_dispensary_id_key UNIQUE (platform_dispensary_id),
  constraint store_platform_id_platform_dispensary_id_not_null NOT NULL platform_dispensary_id,
  constraint store_platform_id_resolved_at_not_null NOT NULL resolved_at,
  constraint store_platform_id_store_id_fkey FOREIGN KEY (store_id) REFERENCES menus.store(store_id) ON DELETE CASCADE,
  constraint store_platform_id_store_id_not_null NOT NULL store_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX store_platform_id_pkey ON menus.store_platform_id USING btree (store_id);
CREATE UNIQUE INDEX store_platform_id_platform_dispensary_id_key ON menus.store_platform_id USING btree (platform_dispensary_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON menus.store_platform_id FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table menus.store_products_discovered (
  store_id bigint not null,
  product_count integer not null,
  discovered_at timestamp with time zone default now() not null,
  task_id bigint,
  constraint store_products_discovered_discovered_at_not_null NOT NULL discovered_at,
  constraint store_products_discovered_pkey PRIMARY KEY (store_id),
  constraint store_products_discovered_product_count_check CHECK ((product_count >= 0)),
  constraint store_products_discovered_product_count_not_null NOT NULL product_count,
  constraint store_products_discovered_store_id_fkey FOREIGN KEY (store_id) REFERENCES menus.store(store_id) ON DELETE CASCADE,
  constraint store_products_discovered_store_id_not_null NOT NULL store_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX store_products_discovered_pkey ON menus.store_products_discovered USING btree (store_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON menus.store_products_discovered FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.claim_lease (
  task_lease_id bigint default nextval('queues.task_lease_task_lease_id_seq'::regclass) not null,
  task_id bigint not null,
  worker_key integer not null,
  leased_at timestamp with time zone not null,
  expires_at timestamp with time zone not null,
  task_ids bigint[] not null,
  task_range int8range not null,
  suspect_task_id bigint,
  task_type text,
  constraint claim_lease_expires_at_not_null NOT NULL expires_at,
  constraint claim_lease_leased_at_not_null NOT NULL leased_at,
  constraint claim_lease_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint claim_lease_shape CHECK ((((cardinality(task_ids) >= 1) AND (cardinality(task_ids) <= 1000)) AND (array_ndims(task_ids) = 1) AND (task_id = task_ids[cardinality(task_ids)]) AND (task_range = int8range(task_ids[1], task_id, '[]'::text)) AND ((suspect_task_id IS NULL) OR (suspect_task_id = ANY (task_ids))) AND (expires_at > leased_at))),
  constraint claim_lease_task_id_not_null NOT NULL task_id,
  constraint claim_lease_task_ids_not_null NOT NULL task_ids,
  constraint claim_lease_task_lease_id_not_null NOT NULL task_lease_id,
  constraint claim_lease_task_range_not_null NOT NULL task_range,
  constraint claim_lease_worker_key_not_null NOT NULL worker_key
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on column queues.claim_lease.task_type is 'The one task type of the claim''s tasks; null when the claim took tasks of several types.';
comment on table queues.claim_lease is 'Append-only: one lease per claim, shared by the tasks it names (task_ids). Read a task''s leases through queues.task_leases / queues.task_leases_of / queues.task_lease_effective. See sql/queues/claim.sql.';
CREATE UNIQUE INDEX claim_lease_pkey ON ONLY queues.claim_lease USING btree (task_id, task_lease_id);
CREATE INDEX claim_lease_task_lease_id_idx ON ONLY queues.claim_lease USING btree (task_lease_id);
CREATE INDEX claim_lease_task_range_idx ON ONLY queues.claim_lease USING gist (task_range);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.claim_lease FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.claim_lease_default partition of queues.claim_lease (
  task_lease_id bigint default nextval('queues.task_lease_task_lease_id_seq'::regclass) not null,
  task_id bigint not null,
  worker_key integer not null,
  leased_at timestamp with time zone not null,
  expires_at timestamp with time zone not null,
  task_ids bigint[] not null,
  task_range int8range not null,
  suspect_task_id bigint,
  task_type text,
  constraint claim_lease_default_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint claim_lease_expires_at_not_null NOT NULL expires_at,
  constraint claim_lease_leased_at_not_null NOT NULL leased_at,
  constraint claim_lease_shape CHECK ((((cardinality(task_ids) >= 1) AND (cardinality(task_ids) <= 1000)) AND (array_ndims(task_ids) = 1) AND (task_id = task_ids[cardinality(task_ids)]) AND (task_range = int8range(task_ids[1], task_id, '[]'::text)) AND ((suspect_task_id IS NULL) OR (suspect_task_id = ANY (task_ids))) AND (expires_at > leased_at))),
  constraint claim_lease_task_id_not_null NOT NULL task_id,
  constraint claim_lease_task_ids_not_null NOT NULL task_ids,
  constraint claim_lease_task_lease_id_not_null NOT NULL task_lease_id,
  constraint claim_lease_task_range_not_null NOT NULL task_range,
  constraint claim_lease_worker_key_not_null NOT NULL worker_key
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX claim_lease_default_pkey ON queues.claim_lease_default USING btree (task_id, task_lease_id);
CREATE INDEX claim_lease_default_task_lease_id_idx ON queues.claim_lease_default USING btree (task_lease_id);
CREATE INDEX claim_lease_default_task_range_idx ON queues.claim_lease_default USING gist (task_range);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.claim_lease_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.claim_lease_due (
  task_lease_id bigint not null,
  task_id bigint not null,
  expires_at timestamp with time zone not null,
  constraint claim_lease_due_expires_at_not_null NOT NULL expires_at,
  constraint claim_lease_due_pkey PRIMARY KEY (task_lease_id),
  constraint claim_lease_due_task_id_not_null NOT NULL task_id,
  constraint claim_lease_due_task_lease_id_not_null NOT NULL task_lease_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.claim_lease_due is 'The claim leases the rescuer has still to read, by expiry (queues.rescue_due_leases_at): one row per claim that took a task out of the claim index, deleted when rescued. A read structure, not a fact.';
CREATE INDEX claim_lease_due_expires_at_idx ON queues.claim_lease_due USING btree (expires_at);
CREATE UNIQUE INDEX claim_lease_due_pkey ON queues.claim_lease_due USING btree (task_lease_id);

create table queues.claim_lease_p0 partition of queues.claim_lease (
  task_lease_id bigint default nextval('queues.task_lease_task_lease_id_seq'::regclass) not null,
  task_id bigint not null,
  worker_key integer not null,
  leased_at timestamp with time zone not null,
  expires_at timestamp with time zone not null,
  task_ids bigint[] not null,
  task_range int8range not null,
  suspect_task_id bigint,
  task_type text,
  constraint claim_lease_expires_at_not_null NOT NULL expires_at,
  constraint claim_lease_leased_at_not_null NOT NULL leased_at,
  constraint claim_lease_p0_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint claim_lease_shape CHECK ((((cardinality(task_ids) >= 1) AND (cardinality(task_ids) <= 1000)) AND (array_ndims(task_ids) = 1) AND (task_id = task_ids[cardinality(task_ids)]) AND (task_range = int8range(task_ids[1], task_id, '[]'::text)) AND ((suspect_task_id IS NULL) OR (suspect_task_id = ANY (task_ids))) AND (expires_at > leased_at))),
  constraint claim_lease_task_id_not_null NOT NULL task_id,
  constraint claim_lease_task_ids_not_null NOT NULL task_ids,
  constraint claim_lease_task_lease_id_not_null NOT NULL task_lease_id,
  constraint claim_lease_task_range_not_null NOT NULL task_range,
  constraint claim_lease_worker_key_not_null NOT NULL worker_key
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX claim_lease_p0_pkey ON queues.claim_lease_p0 USING btree (task_id, task_lease_id);
CREATE INDEX claim_lease_p0_task_lease_id_idx ON queues.claim_lease_p0 USING btree (task_lease_id);
CREATE INDEX claim_lease_p0_task_range_idx ON queues.claim_lease_p0 USING gist (task_range);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.claim_lease_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.claim_lease_p1000000 partition of queues.claim_lease (
  task_lease_id bigint default nextval('queues.task_lease_task_lease_id_seq'::regclass) not null,
  task_id bigint not null,
  worker_key integer not null,
  leased_at timestamp with time zone not null,
  expires_at timestamp with time zone not null,
  task_ids bigint[] not null,
  task_range int8range not null,
  suspect_task_id bigint,
  task_type text,
  constraint claim_lease_expires_at_not_null NOT NULL expires_at,
  constraint claim_lease_leased_at_not_null NOT NULL leased_at,
  constraint claim_lease_p1000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint claim_lease_shape CHECK ((((cardinality(task_ids) >= 1) AND (cardinality(task_ids) <= 1000)) AND (array_ndims(task_ids) = 1) AND (task_id = task_ids[cardinality(task_ids)]) AND (task_range = int8range(task_ids[1], task_id, '[]'::text)) AND ((suspect_task_id IS NULL) OR (suspect_task_id = ANY (task_ids))) AND (expires_at > leased_at))),
  constraint claim_lease_task_id_not_null NOT NULL task_id,
  constraint claim_lease_task_ids_not_null NOT NULL task_ids,
  constraint claim_lease_task_lease_id_not_null NOT NULL task_lease_id,
  constraint claim_lease_task_range_not_null NOT NULL task_range,
  constraint claim_lease_worker_key_not_null NOT NULL worker_key
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX claim_lease_p1000000_pkey ON queues.claim_lease_p1000000 USING btree (task_id, task_lease_id);
CREATE INDEX claim_lease_p1000000_task_lease_id_idx ON queues.claim_lease_p1000000 USING btree (task_lease_id);
CREATE INDEX claim_lease_p1000000_task_range_idx ON queues.claim_lease_p1000000 USING gist (task_range);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.claim_lease_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.claim_lease_p2000000 partition of queues.claim_lease (
  task_lease_id bigint default nextval('queues.task_lease_task_lease_id_seq'::regclass) not null,
  task_id bigint not null,
  worker_key integer not null,
  leased_at timestamp with time zone not null,
  expires_at timestamp with time zone not null,
  task_ids bigint[] not null,
  task_range int8range not null,
  suspect_task_id bigint,
  task_type text,
  constraint claim_lease_expires_at_not_null NOT NULL expires_at,
  constraint claim_lease_leased_at_not_null NOT NULL leased_at,
  constraint claim_lease_p2000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint claim_lease_shape CHECK ((((cardinality(task_ids) >= 1) AND (cardinality(task_ids) <= 1000)) AND (array_ndims(task_ids) = 1) AND (task_id = task_ids[cardinality(task_ids)]) AND (task_range = int8range(task_ids[1], task_id, '[]'::text)) AND ((suspect_task_id IS NULL) OR (suspect_task_id = ANY (task_ids))) AND (expires_at > leased_at))),
  constraint claim_lease_task_id_not_null NOT NULL task_id,
  constraint claim_lease_task_ids_not_null NOT NULL task_ids,
  constraint claim_lease_task_lease_id_not_null NOT NULL task_lease_id,
  constraint claim_lease_task_range_not_null NOT NULL task_range,
  constraint claim_lease_worker_key_not_null NOT NULL worker_key
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX claim_lease_p2000000_pkey ON queues.claim_lease_p2000000 USING btree (task_id, task_lease_id);
CREATE INDEX claim_lease_p2000000_task_lease_id_idx ON queues.claim_lease_p2000000 USING btree (task_lease_id);
CREATE INDEX claim_lease_p2000000_task_range_idx ON queues.claim_lease_p2000000 USING gist (task_range);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.claim_lease_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.completion_round (
  task_id bigint not null,
  completed_at timestamp with time zone default now() not null,
  task_type text not null,
  task_ids bigint[] not null,
  task_lease_ids bigint[] not null,
  started_us bigint[] not null,
  task_range int8range not null,
  constraint completion_round_completed_at_not_null NOT NULL completed_at,
  constraint completion_round_shape CHECK ((((cardinality(task_ids) >= 1) AND (cardinality(task_ids) <= 1000)) AND (array_ndims(task_ids) = 1) AND (task_id = task_ids[cardinality(task_ids)]) AND (task_range = int8range(task_ids[1], task_id, '[]'::text)) AND (cardinality(task_lease_ids) = cardinality(task_ids)) AND (cardinality(started_us) = cardinality(task_ids)))),
  constraint completion_round_started_us_not_null NOT NULL started_us,
  constraint completion_round_task_id_not_null NOT NULL task_id,
  constraint completion_round_task_ids_not_null NOT NULL task_ids,
  constraint completion_round_task_lease_ids_not_null NOT NULL task_lease_ids,
  constraint completion_round_task_range_not_null NOT NULL task_range,
  constraint completion_round_task_type_not_null NOT NULL task_type
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.completion_round is 'Append-only: a completion round, the plain successes one completion call recorded for one task type (task_ids with their leases and start times). Read a task''s end through queues.task_end / queues.task_end_of. See sql/queues/complete.sql.';
CREATE INDEX completion_round_completed_at_idx ON ONLY queues.completion_round USING btree (completed_at);
CREATE INDEX completion_round_task_range_idx ON ONLY queues.completion_round USING gist (task_range);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.completion_round FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();
CREATE TRIGGER release_dependents AFTER INSERT ON queues.completion_round FOR EACH ROW EXECUTE FUNCTION queues.completion_round_release_dependents();

create table queues.completion_round_default partition of queues.completion_round (
  task_id bigint not null,
  completed_at timestamp with time zone default now() not null,
  task_type text not null,
  task_ids bigint[] not null,
  task_lease_ids bigint[] not null,
  started_us bigint[] not null,
  task_range int8range not null,
  constraint completion_round_completed_at_not_null NOT NULL completed_at,
  constraint completion_round_shape CHECK ((((cardinality(task_ids) >= 1) AND (cardinality(task_ids) <= 1000)) AND (array_ndims(task_ids) = 1) AND (task_id = task_ids[cardinality(task_ids)]) AND (task_range = int8range(task_ids[1], task_id, '[]'::text)) AND (cardinality(task_lease_ids) = cardinality(task_ids)) AND (cardinality(started_us) = cardinality(task_ids)))),
  constraint completion_round_started_us_not_null NOT NULL started_us,
  constraint completion_round_task_id_not_null NOT NULL task_id,
  constraint completion_round_task_ids_not_null NOT NULL task_ids,
  constraint completion_round_task_lease_ids_not_null NOT NULL task_lease_ids,
  constraint completion_round_task_range_not_null NOT NULL task_range,
  constraint completion_round_task_type_not_null NOT NULL task_type
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX completion_round_default_completed_at_idx ON queues.completion_round_default USING btree (completed_at);
CREATE INDEX completion_round_default_task_range_idx ON queues.completion_round_default USING gist (task_range);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.completion_round_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();
CREATE TRIGGER release_dependents AFTER INSERT ON queues.completion_round_default FOR EACH ROW EXECUTE FUNCTION queues.completion_round_release_dependents();

create table queues.completion_round_p0 partition of queues.completion_round (
  task_id bigint not null,
  completed_at timestamp with time zone default now() not null,
  task_type text not null,
  task_ids bigint[] not null,
  task_lease_ids bigint[] not null,
  started_us bigint[] not null,
  task_range int8range not null,
  constraint completion_round_completed_at_not_null NOT NULL completed_at,
  constraint completion_round_shape CHECK ((((cardinality(task_ids) >= 1) AND (cardinality(task_ids) <= 1000)) AND (array_ndims(task_ids) = 1) AND (task_id = task_ids[cardinality(task_ids)]) AND (task_range = int8range(task_ids[1], task_id, '[]'::text)) AND (cardinality(task_lease_ids) = cardinality(task_ids)) AND (cardinality(started_us) = cardinality(task_ids)))),
  constraint completion_round_started_us_not_null NOT NULL started_us,
  constraint completion_round_task_id_not_null NOT NULL task_id,
  constraint completion_round_task_ids_not_null NOT NULL task_ids,
  constraint completion_round_task_lease_ids_not_null NOT NULL task_lease_ids,
  constraint completion_round_task_range_not_null NOT NULL task_range,
  constraint completion_round_task_type_not_null NOT NULL task_type
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX completion_round_p0_completed_at_idx ON queues.completion_round_p0 USING btree (completed_at);
CREATE INDEX completion_round_p0_task_range_idx ON queues.completion_round_p0 USING gist (task_range);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.completion_round_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();
CREATE TRIGGER release_dependents AFTER INSERT ON queues.completion_round_p0 FOR EACH ROW EXECUTE FUNCTION queues.completion_round_release_dependents();

create table queues.completion_round_p1000000 partition of queues.completion_round (
  task_id bigint not null,
  completed_at timestamp with time zone default now() not null,
  task_type text not null,
  task_ids bigint[] not null,
  task_lease_ids bigint[] not null,
  started_us bigint[] not null,
  task_range int8range not null,
  constraint completion_round_completed_at_not_null NOT NULL completed_at,
  constraint completion_round_shape CHECK ((((cardinality(task_ids) >= 1) AND (cardinality(task_ids) <= 1000)) AND (array_ndims(task_ids) = 1) AND (task_id = task_ids[cardinality(task_ids)]) AND (task_range = int8range(task_ids[1], task_id, '[]'::text)) AND (cardinality(task_lease_ids) = cardinality(task_ids)) AND (cardinality(started_us) = cardinality(task_ids)))),
  constraint completion_round_started_us_not_null NOT NULL started_us,
  constraint completion_round_task_id_not_null NOT NULL task_id,
  constraint completion_round_task_ids_not_null NOT NULL task_ids,
  constraint completion_round_task_lease_ids_not_null NOT NULL task_lease_ids,
  constraint completion_round_task_range_not_null NOT NULL task_range,
  constraint completion_round_task_type_not_null NOT NULL task_type
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX completion_round_p1000000_completed_at_idx ON queues.completion_round_p1000000 USING btree (completed_at);
CREATE INDEX completion_round_p1000000_task_range_idx ON queues.completion_round_p1000000 USING gist (task_range);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.completion_round_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();
CREATE TRIGGER release_dependents AFTER INSERT ON queues.completion_round_p1000000 FOR EACH ROW EXECUTE FUNCTION queues.completion_round_release_dependents();

create table queues.completion_round_p2000000 partition of queues.completion_round (
  task_id bigint not null,
  completed_at timestamp with time zone default now() not null,
  task_type text not null,
  task_ids bigint[] not null,
  task_lease_ids bigint[] not null,
  started_us bigint[] not null,
  task_range int8range not null,
  constraint completion_round_completed_at_not_null NOT NULL completed_at,
  constraint completion_round_shape CHECK ((((cardinality(task_ids) >= 1) AND (cardinality(task_ids) <= 1000)) AND (array_ndims(task_ids) = 1) AND (task_id = task_ids[cardinality(task_ids)]) AND (task_range = int8range(task_ids[1], task_id, '[]'::text)) AND (cardinality(task_lease_ids) = cardinality(task_ids)) AND (cardinality(started_us) = cardinality(task_ids)))),
  constraint completion_round_started_us_not_null NOT NULL started_us,
  constraint completion_round_task_id_not_null NOT NULL task_id,
  constraint completion_round_task_ids_not_null NOT NULL task_ids,
  constraint completion_round_task_lease_ids_not_null NOT NULL task_lease_ids,
  constraint completion_round_task_range_not_null NOT NULL task_range,
  constraint completion_round_task_type_not_null NOT NULL task_type
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX completion_round_p2000000_completed_at_idx ON queues.completion_round_p2000000 USING btree (completed_at);
CREATE INDEX completion_round_p2000000_task_range_idx ON queues.completion_round_p2000000 USING gist (task_range);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.completion_round_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();
CREATE TRIGGER release_dependents AFTER INSERT ON queues.completion_round_p2000000 FOR EACH ROW EXECUTE FUNCTION queues.completion_round_release_dependents();

create table queues.error (
  error_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint,
  error_message text not null,
  created_at timestamp with time zone default now() not null,
  constraint error_created_at_not_null NOT NULL created_at,
  constraint error_error_id_not_null NOT NULL error_id,
  constraint error_error_message_not_null NOT NULL error_message,
  constraint error_pkey PRIMARY KEY (task_id, error_id),
  constraint error_task_id_not_null NOT NULL task_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.error is 'Append-only operational errors reported against a task.';
CREATE UNIQUE INDEX error_pkey ON ONLY queues.error USING btree (task_id, error_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.error FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.error_default partition of queues.error (
  error_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint,
  error_message text not null,
  created_at timestamp with time zone default now() not null,
  constraint error_created_at_not_null NOT NULL created_at,
  constraint error_default_pkey PRIMARY KEY (task_id, error_id),
  constraint error_error_id_not_null NOT NULL error_id,
  constraint error_error_message_not_null NOT NULL error_message,
  constraint error_task_id_not_null NOT NULL task_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX error_default_pkey ON queues.error_default USING btree (task_id, error_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.error_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.error_p0 partition of queues.error (
  error_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint,
  error_message text not null,
  created_at timestamp with time zone default now() not null,
  constraint error_created_at_not_null NOT NULL created_at,
  constraint error_error_id_not_null NOT NULL error_id,
  constraint error_error_message_not_null NOT NULL error_message,
  constraint error_p0_pkey PRIMARY KEY (task_id, error_id),
  constraint error_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX error_p0_pkey ON queues.error_p0 USING btree (task_id, error_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.error_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.error_p1000000 partition of queues.error (
  error_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint,
  error_message text not null,
  created_at timestamp with time zone default now() not null,
  constraint error_created_at_not_null NOT NULL created_at,
  constraint error_error_id_not_null NOT NULL error_id,
  constraint error_error_message_not_null NOT NULL error_message,
  constraint error_p1000000_pkey PRIMARY KEY (task_id, error_id),
  constraint error_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX error_p1000000_pkey ON queues.error_p1000000 USING btree (task_id, error_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.error_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.error_p2000000 partition of queues.error (
  error_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint,
  error_message text not null,
  created_at timestamp with time zone default now() not null,
  constraint error_created_at_not_null NOT NULL created_at,
  constraint error_error_id_not_null NOT NULL error_id,
  constraint error_error_message_not_null NOT NULL error_message,
  constraint error_p2000000_pkey PRIMARY KEY (task_id, error_id),
  constraint error_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX error_p2000000_pkey ON queues.error_p2000000 USING btree (task_id, error_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.error_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.history_partition_created (
  lower_bound bigint not null,
  upper_bound bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint history_partition_created_check CHECK ((upper_bound > lower_bound)),
  constraint history_partition_created_created_at_not_null NOT NULL created_at,
  constraint history_partition_created_lower_bound_not_null NOT NULL lower_bound,
  constraint history_partition_created_pkey PRIMARY KEY (lower_bound),
  constraint history_partition_created_upper_bound_not_null NOT NULL upper_bound
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.history_partition_created is 'Append-only: partition sets of queue history created by maintenance (task ids [lower_bound, upper_bound)).';
CREATE UNIQUE INDEX history_partition_created_pkey ON queues.history_partition_created USING btree (lower_bound);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.history_partition_created FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.history_partition_dropped (
  history_partition_dropped_id bigint generated always as identity not null,
  lower_bound bigint not null,
  upper_bound bigint not null,
  tasks bigint not null,
  last_completed_at timestamp with time zone,
  dropped_at timestamp with time zone default now() not null,
  constraint history_partition_dropped_check CHECK ((upper_bound > lower_bound)),
  constraint history_partition_dropped_dropped_at_not_null NOT NULL dropped_at,
  constraint history_partition_dropped_history_partition_dropped_id_not_null NOT NULL history_partition_dropped_id,
  constraint history_partition_dropped_lower_bound_not_null NOT NULL lower_bound,
  constraint history_partition_dropped_pkey PRIMARY KEY (history_partition_dropped_id),
  constraint history_partition_dropped_tasks_not_null NOT NULL tasks,
  constraint history_partition_dropped_upper_bound_not_null NOT NULL upper_bound
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.history_partition_dropped is 'Append-only: partition sets of queue history dropped by retention (task ids [lower_bound, upper_bound)).';
CREATE UNIQUE INDEX history_partition_dropped_pkey ON queues.history_partition_dropped USING btree (history_partition_dropped_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.history_partition_dropped FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.history_set_measured (
  lower_bound bigint not null,
  upper_bound bigint not null,
  first_task_id bigint,
  first_enqueued_at timestamp with time zone,
  last_task_id bigint,
  table_bytes bigint not null,
  index_bytes bigint not null,
  measured_at timestamp with time zone not null,
  constraint history_set_measured_check CHECK ((upper_bound > lower_bound)),
  constraint history_set_measured_index_bytes_not_null NOT NULL index_bytes,
  constraint history_set_measured_lower_bound_not_null NOT NULL lower_bound,
  constraint history_set_measured_measured_at_not_null NOT NULL measured_at,
  constraint history_set_measured_pkey PRIMARY KEY (lower_bound),
  constraint history_set_measured_table_bytes_not_null NOT NULL table_bytes,
  constraint history_set_measured_upper_bound_not_null NOT NULL upper_bound
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.history_set_measured is 'Derived: bytes and oldest and newest task of the partition sets that are done, measured by maintenance (queues.measure_history_sets).';
CREATE UNIQUE INDEX history_set_measured_pkey ON queues.history_set_measured USING btree (lower_bound);

create table queues.history_setting (
  singleton boolean default true not null,
  partition_size bigint default 1000000 not null,
  partitions_ahead integer default 2 not null,
  retention interval default '7 days'::interval not null,
  lock_timeout_ms integer default 2000 not null,
  updated_at timestamp with time zone default now() not null,
  constraint history_setting_lock_timeout_ms_check CHECK (((lock_timeout_ms >= 1) AND (lock_timeout_ms <= 60000))),
  constraint history_setting_lock_timeout_ms_not_null NOT NULL lock_timeout_ms,
  constraint history_setting_partition_size_check CHECK (((partition_size >= 1) AND (partition_size <= '1000000000000'::bigint))),
  constraint history_setting_partition_size_not_null NOT NULL partition_size,
  constraint history_setting_partitions_ahead_check CHECK (((partitions_ahead >= 1) AND (partitions_ahead <= 1000))),
  constraint history_setting_partitions_ahead_not_null NOT NULL partitions_ahead,
  constraint history_setting_pkey PRIMARY KEY (singleton),
  constraint history_setting_retention_check CHECK ((retention >= '00:00:00'::interval)),
  constraint history_setting_retention_not_null NOT NULL retention,
  constraint history_setting_singleton_check CHECK (singleton),
  constraint history_setting_singleton_not_null NOT NULL singleton,
  constraint history_setting_updated_at_not_null NOT NULL updated_at
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.history_setting is 'Retention window and partition sizing of the queue''s history (one row). See sql/queues/partitions.sql.';
CREATE UNIQUE INDEX history_setting_pkey ON queues.history_setting USING btree (singleton);

create table queues.history_step_skipped (
  skipped_at timestamp with time zone default clock_timestamp() not null,
  step text not null,
  reason text not null,
  constraint history_step_skipped_reason_not_null NOT NULL reason,
  constraint history_step_skipped_skipped_at_not_null NOT NULL skipped_at,
  constraint history_step_skipped_step_not_null NOT NULL step
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.history_step_skipped is 'Maintenance steps that were skipped (no free moment for their locks within lock_timeout_ms), with the reason; rows older than a day are deleted by maintenance.';
CREATE INDEX history_step_skipped_skipped_at ON queues.history_step_skipped USING btree (skipped_at);

create table queues.internal_task_type (
  task_type text not null,
  reason text not null,
  constraint internal_task_type_pkey PRIMARY KEY (task_type),
  constraint internal_task_type_reason_not_null NOT NULL reason,
  constraint internal_task_type_task_type_fkey FOREIGN KEY (task_type) REFERENCES queues.task_type(task_type) ON DELETE CASCADE,
  constraint internal_task_type_task_type_not_null NOT NULL task_type
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.internal_task_type is 'Task types only the owner''s SQL may enqueue (queues.enqueue_internal); queues.enqueue and enqueue_many refuse them to other roles with 42501.';
CREATE UNIQUE INDEX internal_task_type_pkey ON queues.internal_task_type USING btree (task_type);

create table queues.resource_lease (
  resource_key text not null,
  task_id bigint not null,
  expires_at timestamp with time zone not null,
  constraint resource_lease_expires_at_not_null NOT NULL expires_at,
  constraint resource_lease_pkey PRIMARY KEY (resource_key),
  constraint resource_lease_resource_key_not_null NOT NULL resource_key,
  constraint resource_lease_task_id_not_null NOT NULL task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.resource_lease is 'Derived: the task holding each resource key and until when.';
CREATE UNIQUE INDEX resource_lease_pkey ON queues.resource_lease USING btree (resource_key);

create table queues.task (
  task_id bigint generated always as identity not null,
  task_type text not null,
  payload jsonb not null,
  priority integer default 0 not null,
  resource_key text,
  max_attempts integer default 1 not null,
  enqueued_at timestamp with time zone default now() not null,
  scheduled_at timestamp with time zone default now() not null,
  group_key text,
  timeout_ms integer,
  constraint task_enqueued_at_not_null NOT NULL enqueued_at,
  constraint task_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 100))),
  constraint task_max_attempts_not_null NOT NULL max_attempts,
  constraint task_payload_check CHECK ((jsonb_typeof(payload) = 'object'::text)),
  constraint task_payload_not_null NOT NULL payload,
  constraint task_pkey PRIMARY KEY (task_id),
  constraint task_priority_check CHECK (((priority >= '-1000'::integer) AND (priority <= 1000))),
  constraint task_priority_not_null NOT NULL priority,
  constraint task_resource_key_check CHECK (((length(resource_key) >= 1) AND (length(resource_key) <= 200))),
  constraint task_scheduled_at_not_null NOT NULL scheduled_at,
  constraint task_task_id_not_null NOT NULL task_id,
  constraint task_task_type_not_null NOT NULL task_type
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on column queues.task.group_key is 'What the task''s flow limits count it by within its type (a tenant, a provider account); NULL: none.';
comment on column queues.task.timeout_ms is 'The task''s run timeout in ms, in place of its type''s (queues.task_type_timeouts); NULL: the type''s.';
comment on table queues.task is 'A unit of work. Immutable: state lives in task_lease, task_completed and error.';
CREATE UNIQUE INDEX task_pkey ON ONLY queues.task USING btree (task_id);
CREATE INDEX task_resource_key_idx ON ONLY queues.task USING btree (resource_key, task_id) WHERE (resource_key IS NOT NULL);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();
CREATE TRIGGER truncate_task_facts AFTER TRUNCATE ON queues.task FOR EACH STATEMENT EXECUTE FUNCTION queues.truncate_task_facts();

create table queues.task_attempt_failed (
  task_attempt_failed_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint,
  failed_at timestamp with time zone default now() not null,
  retry_at timestamp with time zone not null,
  started_at timestamp with time zone,
  constraint task_attempt_failed_failed_at_not_null NOT NULL failed_at,
  constraint task_attempt_failed_pkey PRIMARY KEY (task_id, task_attempt_failed_id),
  constraint task_attempt_failed_retry_at_not_null NOT NULL retry_at,
  constraint task_attempt_failed_task_attempt_failed_id_not_null NOT NULL task_attempt_failed_id,
  constraint task_attempt_failed_task_id_not_null NOT NULL task_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on column queues.task_attempt_failed.started_at is 'When the failed run started, as its worker reported it; null when not reported.';
comment on table queues.task_attempt_failed is 'Append-only: a failed attempt of a task that will be retried.';
CREATE UNIQUE INDEX task_attempt_failed_pkey ON ONLY queues.task_attempt_failed USING btree (task_id, task_attempt_failed_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_attempt_failed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_attempt_failed_default partition of queues.task_attempt_failed (
  task_attempt_failed_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint,
  failed_at timestamp with time zone default now() not null,
  retry_at timestamp with time zone not null,
  started_at timestamp with time zone,
  constraint task_attempt_failed_default_pkey PRIMARY KEY (task_id, task_attempt_failed_id),
  constraint task_attempt_failed_failed_at_not_null NOT NULL failed_at,
  constraint task_attempt_failed_retry_at_not_null NOT NULL retry_at,
  constraint task_attempt_failed_task_attempt_failed_id_not_null NOT NULL task_attempt_failed_id,
  constraint task_attempt_failed_task_id_not_null NOT NULL task_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_attempt_failed_default_pkey ON queues.task_attempt_failed_default USING btree (task_id, task_attempt_failed_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_attempt_failed_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_attempt_failed_p0 partition of queues.task_attempt_failed (
  task_attempt_failed_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint,
  failed_at timestamp with time zone default now() not null,
  retry_at timestamp with time zone not null,
  started_at timestamp with time zone,
  constraint task_attempt_failed_failed_at_not_null NOT NULL failed_at,
  constraint task_attempt_failed_p0_pkey PRIMARY KEY (task_id, task_attempt_failed_id),
  constraint task_attempt_failed_retry_at_not_null NOT NULL retry_at,
  constraint task_attempt_failed_task_attempt_failed_id_not_null NOT NULL task_attempt_failed_id,
  constraint task_attempt_failed_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_attempt_failed_p0_pkey ON queues.task_attempt_failed_p0 USING btree (task_id, task_attempt_failed_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_attempt_failed_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_attempt_failed_p1000000 partition of queues.task_attempt_failed (
  task_attempt_failed_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint,
  failed_at timestamp with time zone default now() not null,
  retry_at timestamp with time zone not null,
  started_at timestamp with time zone,
  constraint task_attempt_failed_failed_at_not_null NOT NULL failed_at,
  constraint task_attempt_failed_p1000000_pkey PRIMARY KEY (task_id, task_attempt_failed_id),
  constraint task_attempt_failed_retry_at_not_null NOT NULL retry_at,
  constraint task_attempt_failed_task_attempt_failed_id_not_null NOT NULL task_attempt_failed_id,
  constraint task_attempt_failed_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_attempt_failed_p1000000_pkey ON queues.task_attempt_failed_p1000000 USING btree (task_id, task_attempt_failed_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_attempt_failed_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_attempt_failed_p2000000 partition of queues.task_attempt_failed (
  task_attempt_failed_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint,
  failed_at timestamp with time zone default now() not null,
  retry_at timestamp with time zone not null,
  started_at timestamp with time zone,
  constraint task_attempt_failed_failed_at_not_null NOT NULL failed_at,
  constraint task_attempt_failed_p2000000_pkey PRIMARY KEY (task_id, task_attempt_failed_id),
  constraint task_attempt_failed_retry_at_not_null NOT NULL retry_at,
  constraint task_attempt_failed_task_attempt_failed_id_not_null NOT NULL task_attempt_failed_id,
  constraint task_attempt_failed_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_attempt_failed_p2000000_pkey ON queues.task_attempt_failed_p2000000 USING btree (task_id, task_attempt_failed_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_attempt_failed_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_cancelled (
  task_id bigint not null,
  reason text default ''::text not null,
  cancelled_at timestamp with time zone default now() not null,
  constraint task_cancelled_cancelled_at_not_null NOT NULL cancelled_at,
  constraint task_cancelled_pkey PRIMARY KEY (task_id),
  constraint task_cancelled_reason_check CHECK ((length(reason) <= 500)),
  constraint task_cancelled_reason_not_null NOT NULL reason,
  constraint task_cancelled_task_id_not_null NOT NULL task_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_cancelled is 'Append-only: why a task was completed as cancelled.';
CREATE UNIQUE INDEX task_cancelled_pkey ON ONLY queues.task_cancelled USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_cancelled FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_cancelled_default partition of queues.task_cancelled (
  task_id bigint not null,
  reason text default ''::text not null,
  cancelled_at timestamp with time zone default now() not null,
  constraint task_cancelled_cancelled_at_not_null NOT NULL cancelled_at,
  constraint task_cancelled_default_pkey PRIMARY KEY (task_id),
  constraint task_cancelled_reason_check CHECK ((length(reason) <= 500)),
  constraint task_cancelled_reason_not_null NOT NULL reason,
  constraint task_cancelled_task_id_not_null NOT NULL task_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_cancelled_default_pkey ON queues.task_cancelled_default USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_cancelled_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_cancelled_p0 partition of queues.task_cancelled (
  task_id bigint not null,
  reason text default ''::text not null,
  cancelled_at timestamp with time zone default now() not null,
  constraint task_cancelled_cancelled_at_not_null NOT NULL cancelled_at,
  constraint task_cancelled_p0_pkey PRIMARY KEY (task_id),
  constraint task_cancelled_reason_check CHECK ((length(reason) <= 500)),
  constraint task_cancelled_reason_not_null NOT NULL reason,
  constraint task_cancelled_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_cancelled_p0_pkey ON queues.task_cancelled_p0 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_cancelled_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_cancelled_p1000000 partition of queues.task_cancelled (
  task_id bigint not null,
  reason text default ''::text not null,
  cancelled_at timestamp with time zone default now() not null,
  constraint task_cancelled_cancelled_at_not_null NOT NULL cancelled_at,
  constraint task_cancelled_p1000000_pkey PRIMARY KEY (task_id),
  constraint task_cancelled_reason_check CHECK ((length(reason) <= 500)),
  constraint task_cancelled_reason_not_null NOT NULL reason,
  constraint task_cancelled_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_cancelled_p1000000_pkey ON queues.task_cancelled_p1000000 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_cancelled_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_cancelled_p2000000 partition of queues.task_cancelled (
  task_id bigint not null,
  reason text default ''::text not null,
  cancelled_at timestamp with time zone default now() not null,
  constraint task_cancelled_cancelled_at_not_null NOT NULL cancelled_at,
  constraint task_cancelled_p2000000_pkey PRIMARY KEY (task_id),
  constraint task_cancelled_reason_check CHECK ((length(reason) <= 500)),
  constraint task_cancelled_reason_not_null NOT NULL reason,
  constraint task_cancelled_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_cancelled_p2000000_pkey ON queues.task_cancelled_p2000000 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_cancelled_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_completed (
  task_id bigint not null,
  task_lease_id bigint,
  completed_at timestamp with time zone default now() not null,
  outcome text not null,
  task_type text,
  started_at timestamp with time zone,
  constraint task_completed_completed_at_not_null NOT NULL completed_at,
  constraint task_completed_outcome_check CHECK ((outcome = ANY (ARRAY['succeeded'::text, 'failed'::text, 'abandoned'::text, 'cancelled'::text, 'validation_failed'::text]))) NOT VALID,
  constraint task_completed_outcome_not_null NOT NULL outcome,
  constraint task_completed_pkey PRIMARY KEY (task_id),
  constraint task_completed_task_id_not_null NOT NULL task_id,
  constraint task_completed_task_type_named CHECK ((task_type IS NOT NULL)) NOT VALID
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on column queues.task_completed.task_type is 'The task''s type (queues.task.task_type), copied when the completion is written; null on completions written before this column, whose type is read from queues.task.';
comment on column queues.task_completed.started_at is 'When the run that ended here started, as its worker reported it; null when not reported.';
comment on table queues.task_completed is 'Terminal fact: a completed task is never claimed again.';
CREATE INDEX task_completed_completed_at_idx ON ONLY queues.task_completed USING btree (completed_at);
CREATE UNIQUE INDEX task_completed_pkey ON ONLY queues.task_completed USING btree (task_id);
CREATE INDEX task_completed_unsuccessful_idx ON ONLY queues.task_completed USING btree (completed_at DESC) WHERE (outcome <> 'succeeded'::text);
CREATE INDEX task_completed_unsuccessful_task_idx ON ONLY queues.task_completed USING btree (task_id) WHERE (outcome <> 'succeeded'::text);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_completed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();
CREATE TRIGGER release_dependents AFTER INSERT ON queues.task_completed FOR EACH ROW EXECUTE FUNCTION queues.task_completed_release_dependents();

create table queues.task_completed_default partition of queues.task_completed (
  task_id bigint not null,
  task_lease_id bigint,
  completed_at timestamp with time zone default now() not null,
  outcome text not null,
  task_type text,
  started_at timestamp with time zone,
  constraint task_completed_completed_at_not_null NOT NULL completed_at,
  constraint task_completed_default_pkey PRIMARY KEY (task_id),
  constraint task_completed_outcome_check CHECK ((outcome = ANY (ARRAY['succeeded'::text, 'failed'::text, 'abandoned'::text, 'cancelled'::text, 'validation_failed'::text]))) NOT VALID,
  constraint task_completed_outcome_not_null NOT NULL outcome,
  constraint task_completed_task_id_not_null NOT NULL task_id,
  constraint task_completed_task_type_named CHECK ((task_type IS NOT NULL)) NOT VALID
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX task_completed_default_completed_at_idx ON queues.task_completed_default USING btree (completed_at DESC) WHERE (outcome <> 'succeeded'::text);
CREATE INDEX task_completed_default_completed_at_idx1 ON queues.task_completed_default USING btree (completed_at);
CREATE UNIQUE INDEX task_completed_default_pkey ON queues.task_completed_default USING btree (task_id);
CREATE INDEX task_completed_default_task_id_idx ON queues.task_completed_default USING btree (task_id) WHERE (outcome <> 'succeeded'::text);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_completed_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();
CREATE TRIGGER release_dependents AFTER INSERT ON queues.task_completed_default FOR EACH ROW EXECUTE FUNCTION queues.task_completed_release_dependents();

create table queues.task_completed_p0 partition of queues.task_completed (
  task_id bigint not null,
  task_lease_id bigint,
  completed_at timestamp with time zone default now() not null,
  outcome text not null,
  task_type text,
  started_at timestamp with time zone,
  constraint task_completed_completed_at_not_null NOT NULL completed_at,
  constraint task_completed_outcome_check CHECK ((outcome = ANY (ARRAY['succeeded'::text, 'failed'::text, 'abandoned'::text, 'cancelled'::text, 'validation_failed'::text]))) NOT VALID,
  constraint task_completed_outcome_not_null NOT NULL outcome,
  constraint task_completed_p0_pkey PRIMARY KEY (task_id),
  constraint task_completed_task_id_not_null NOT NULL task_id,
  constraint task_completed_task_type_named CHECK ((task_type IS NOT NULL)) NOT VALID
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX task_completed_p0_completed_at_idx ON queues.task_completed_p0 USING btree (completed_at DESC) WHERE (outcome <> 'succeeded'::text);
CREATE INDEX task_completed_p0_completed_at_idx1 ON queues.task_completed_p0 USING btree (completed_at);
CREATE UNIQUE INDEX task_completed_p0_pkey ON queues.task_completed_p0 USING btree (task_id);
CREATE INDEX task_completed_p0_task_id_idx ON queues.task_completed_p0 USING btree (task_id) WHERE (outcome <> 'succeeded'::text);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_completed_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();
CREATE TRIGGER release_dependents AFTER INSERT ON queues.task_completed_p0 FOR EACH ROW EXECUTE FUNCTION queues.task_completed_release_dependents();

create table queues.task_completed_p1000000 partition of queues.task_completed (
  task_id bigint not null,
  task_lease_id bigint,
  completed_at timestamp with time zone default now() not null,
  outcome text not null,
  task_type text,
  started_at timestamp with time zone,
  constraint task_completed_completed_at_not_null NOT NULL completed_at,
  constraint task_completed_outcome_check CHECK ((outcome = ANY (ARRAY['succeeded'::text, 'failed'::text, 'abandoned'::text, 'cancelled'::text, 'validation_failed'::text]))) NOT VALID,
  constraint task_completed_outcome_not_null NOT NULL outcome,
  constraint task_completed_p1000000_pkey PRIMARY KEY (task_id),
  constraint task_completed_task_id_not_null NOT NULL task_id,
  constraint task_completed_task_type_named CHECK ((task_type IS NOT NULL)) NOT VALID
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX task_completed_p1000000_completed_at_idx ON queues.task_completed_p1000000 USING btree (completed_at DESC) WHERE (outcome <> 'succeeded'::text);
CREATE INDEX task_completed_p1000000_completed_at_idx1 ON queues.task_completed_p1000000 USING btree (completed_at);
CREATE UNIQUE INDEX task_completed_p1000000_pkey ON queues.task_completed_p1000000 USING btree (task_id);
CREATE INDEX task_completed_p1000000_task_id_idx ON queues.task_completed_p1000000 USING btree (task_id) WHERE (outcome <> 'succeeded'::text);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_completed_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();
CREATE TRIGGER release_dependents AFTER INSERT ON queues.task_completed_p1000000 FOR EACH ROW EXECUTE FUNCTION queues.task_completed_release_dependents();

create table queues.task_completed_p2000000 partition of queues.task_completed (
  task_id bigint not null,
  task_lease_id bigint,
  completed_at timestamp with time zone default now() not null,
  outcome text not null,
  task_type text,
  started_at timestamp with time zone,
  constraint task_completed_completed_at_not_null NOT NULL completed_at,
  constraint task_completed_outcome_check CHECK ((outcome = ANY (ARRAY['succeeded'::text, 'failed'::text, 'abandoned'::text, 'cancelled'::text, 'validation_failed'::text]))) NOT VALID,
  constraint task_completed_outcome_not_null NOT NULL outcome,
  constraint task_completed_p2000000_pkey PRIMARY KEY (task_id),
  constraint task_completed_task_id_not_null NOT NULL task_id,
  constraint task_completed_task_type_named CHECK ((task_type IS NOT NULL)) NOT VALID
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX task_completed_p2000000_completed_at_idx ON queues.task_completed_p2000000 USING btree (completed_at DESC) WHERE (outcome <> 'succeeded'::text);
CREATE INDEX task_completed_p2000000_completed_at_idx1 ON queues.task_completed_p2000000 USING btree (completed_at);
CREATE UNIQUE INDEX task_completed_p2000000_pkey ON queues.task_completed_p2000000 USING btree (task_id);
CREATE INDEX task_completed_p2000000_task_id_idx ON queues.task_completed_p2000000 USING btree (task_id) WHERE (outcome <> 'succeeded'::text);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_completed_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();
CREATE TRIGGER release_dependents AFTER INSERT ON queues.task_completed_p2000000 FOR EACH ROW EXECUTE FUNCTION queues.task_completed_release_dependents();

create table queues.task_default partition of queues.task (
  task_id bigint generated always as identity not null,
  task_type text not null,
  payload jsonb not null,
  priority integer default 0 not null,
  resource_key text,
  max_attempts integer default 1 not null,
  enqueued_at timestamp with time zone default now() not null,
  scheduled_at timestamp with time zone default now() not null,
  group_key text,
  timeout_ms integer,
  constraint task_default_pkey PRIMARY KEY (task_id),
  constraint task_enqueued_at_not_null NOT NULL enqueued_at,
  constraint task_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 100))),
  constraint task_max_attempts_not_null NOT NULL max_attempts,
  constraint task_payload_check CHECK ((jsonb_typeof(payload) = 'object'::text)),
  constraint task_payload_not_null NOT NULL payload,
  constraint task_priority_check CHECK (((priority >= '-1000'::integer) AND (priority <= 1000))),
  constraint task_priority_not_null NOT NULL priority,
  constraint task_resource_key_check CHECK (((length(resource_key) >= 1) AND (length(resource_key) <= 200))),
  constraint task_scheduled_at_not_null NOT NULL scheduled_at,
  constraint task_task_id_not_null NOT NULL task_id,
  constraint task_task_type_not_null NOT NULL task_type
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_default_pkey ON queues.task_default USING btree (task_id);
CREATE INDEX task_default_resource_key_task_id_idx ON queues.task_default USING btree (resource_key, task_id) WHERE (resource_key IS NOT NULL);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_dependency (
  task_id bigint not null,
  depends_on_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint task_dependency_check CHECK ((task_id <> depends_on_task_id)),
  constraint task_dependency_created_at_not_null NOT NULL created_at,
  constraint task_dependency_depends_on_task_id_not_null NOT NULL depends_on_task_id,
  constraint task_dependency_pkey PRIMARY KEY (task_id, depends_on_task_id),
  constraint task_dependency_task_id_not_null NOT NULL task_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_dependency is 'Append-only: task task_id was enqueued to wait for task depends_on_task_id (an older task). Written by the enqueue; read by queues.release_dependents when a dependency ends. A history table partitioned by the dependent: an edge leaves with its dependent''s set.';
CREATE INDEX task_dependency_depends_on ON ONLY queues.task_dependency USING btree (depends_on_task_id, task_id);
CREATE UNIQUE INDEX task_dependency_pkey ON ONLY queues.task_dependency USING btree (task_id, depends_on_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_dependency FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_dependency_default partition of queues.task_dependency (
  task_id bigint not null,
  depends_on_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint task_dependency_check CHECK ((task_id <> depends_on_task_id)),
  constraint task_dependency_created_at_not_null NOT NULL created_at,
  constraint task_dependency_default_pkey PRIMARY KEY (task_id, depends_on_task_id),
  constraint task_dependency_depends_on_task_id_not_null NOT NULL depends_on_task_id,
  constraint task_dependency_task_id_not_null NOT NULL task_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX task_dependency_default_depends_on_task_id_task_id_idx ON queues.task_dependency_default USING btree (depends_on_task_id, task_id);
CREATE UNIQUE INDEX task_dependency_default_pkey ON queues.task_dependency_default USING btree (task_id, depends_on_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_dependency_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_dependency_p0 partition of queues.task_dependency (
  task_id bigint not null,
  depends_on_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint task_dependency_check CHECK ((task_id <> depends_on_task_id)),
  constraint task_dependency_created_at_not_null NOT NULL created_at,
  constraint task_dependency_depends_on_task_id_not_null NOT NULL depends_on_task_id,
  constraint task_dependency_p0_pkey PRIMARY KEY (task_id, depends_on_task_id),
  constraint task_dependency_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX task_dependency_p0_depends_on_task_id_task_id_idx ON queues.task_dependency_p0 USING btree (depends_on_task_id, task_id);
CREATE UNIQUE INDEX task_dependency_p0_pkey ON queues.task_dependency_p0 USING btree (task_id, depends_on_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_dependency_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_dependency_p1000000 partition of queues.task_dependency (
  task_id bigint not null,
  depends_on_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint task_dependency_check CHECK ((task_id <> depends_on_task_id)),
  constraint task_dependency_created_at_not_null NOT NULL created_at,
  constraint task_dependency_depends_on_task_id_not_null NOT NULL depends_on_task_id,
  constraint task_dependency_p1000000_pkey PRIMARY KEY (task_id, depends_on_task_id),
  constraint task_dependency_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX task_dependency_p1000000_depends_on_task_id_task_id_idx ON queues.task_dependency_p1000000 USING btree (depends_on_task_id, task_id);
CREATE UNIQUE INDEX task_dependency_p1000000_pkey ON queues.task_dependency_p1000000 USING btree (task_id, depends_on_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_dependency_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_dependency_p2000000 partition of queues.task_dependency (
  task_id bigint not null,
  depends_on_task_id bigint not null,
  created_at timestamp with time zone default now() not null,
  constraint task_dependency_check CHECK ((task_id <> depends_on_task_id)),
  constraint task_dependency_created_at_not_null NOT NULL created_at,
  constraint task_dependency_depends_on_task_id_not_null NOT NULL depends_on_task_id,
  constraint task_dependency_p2000000_pkey PRIMARY KEY (task_id, depends_on_task_id),
  constraint task_dependency_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE INDEX task_dependency_p2000000_depends_on_task_id_task_id_idx ON queues.task_dependency_p2000000 USING btree (depends_on_task_id, task_id);
CREATE UNIQUE INDEX task_dependency_p2000000_pkey ON queues.task_dependency_p2000000 USING btree (task_id, depends_on_task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_dependency_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_interruption (
  task_lease_id bigint not null,
  task_id bigint not null,
  interrupted_at timestamp with time zone default now() not null,
  retry_at timestamp with time zone not null,
  error_message text not null,
  constraint task_interruption_error_message_not_null NOT NULL error_message,
  constraint task_interruption_interrupted_at_not_null NOT NULL interrupted_at,
  constraint task_interruption_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_interruption_retry_at_not_null NOT NULL retry_at,
  constraint task_interruption_task_id_not_null NOT NULL task_id,
  constraint task_interruption_task_lease_id_not_null NOT NULL task_lease_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_interruption is 'Append-only: a lease ended by a transient error; the task runs again at retry_at.';
CREATE UNIQUE INDEX task_interruption_pkey ON ONLY queues.task_interruption USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_interruption FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_interruption_default partition of queues.task_interruption (
  task_lease_id bigint not null,
  task_id bigint not null,
  interrupted_at timestamp with time zone default now() not null,
  retry_at timestamp with time zone not null,
  error_message text not null,
  constraint task_interruption_default_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_interruption_error_message_not_null NOT NULL error_message,
  constraint task_interruption_interrupted_at_not_null NOT NULL interrupted_at,
  constraint task_interruption_retry_at_not_null NOT NULL retry_at,
  constraint task_interruption_task_id_not_null NOT NULL task_id,
  constraint task_interruption_task_lease_id_not_null NOT NULL task_lease_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_interruption_default_pkey ON queues.task_interruption_default USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_interruption_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_interruption_p0 partition of queues.task_interruption (
  task_lease_id bigint not null,
  task_id bigint not null,
  interrupted_at timestamp with time zone default now() not null,
  retry_at timestamp with time zone not null,
  error_message text not null,
  constraint task_interruption_error_message_not_null NOT NULL error_message,
  constraint task_interruption_interrupted_at_not_null NOT NULL interrupted_at,
  constraint task_interruption_p0_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_interruption_retry_at_not_null NOT NULL retry_at,
  constraint task_interruption_task_id_not_null NOT NULL task_id,
  constraint task_interruption_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_interruption_p0_pkey ON queues.task_interruption_p0 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_interruption_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_interruption_p1000000 partition of queues.task_interruption (
  task_lease_id bigint not null,
  task_id bigint not null,
  interrupted_at timestamp with time zone default now() not null,
  retry_at timestamp with time zone not null,
  error_message text not null,
  constraint task_interruption_error_message_not_null NOT NULL error_message,
  constraint task_interruption_interrupted_at_not_null NOT NULL interrupted_at,
  constraint task_interruption_p1000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_interruption_retry_at_not_null NOT NULL retry_at,
  constraint task_interruption_task_id_not_null NOT NULL task_id,
  constraint task_interruption_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_interruption_p1000000_pkey ON queues.task_interruption_p1000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_interruption_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_interruption_p2000000 partition of queues.task_interruption (
  task_lease_id bigint not null,
  task_id bigint not null,
  interrupted_at timestamp with time zone default now() not null,
  retry_at timestamp with time zone not null,
  error_message text not null,
  constraint task_interruption_error_message_not_null NOT NULL error_message,
  constraint task_interruption_interrupted_at_not_null NOT NULL interrupted_at,
  constraint task_interruption_p2000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_interruption_retry_at_not_null NOT NULL retry_at,
  constraint task_interruption_task_id_not_null NOT NULL task_id,
  constraint task_interruption_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_interruption_p2000000_pkey ON queues.task_interruption_p2000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_interruption_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease (
  task_lease_id bigint generated always as identity not null,
  task_id bigint not null,
  worker_id text,
  leased_at timestamp with time zone default now() not null,
  expires_at timestamp with time zone not null,
  worker_key integer,
  suspect boolean,
  constraint task_lease_check CHECK ((expires_at > leased_at)),
  constraint task_lease_expires_at_not_null NOT NULL expires_at,
  constraint task_lease_leased_at_not_null NOT NULL leased_at,
  constraint task_lease_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_task_id_not_null NOT NULL task_id,
  constraint task_lease_task_lease_id_not_null NOT NULL task_lease_id,
  constraint task_lease_worker_id_check CHECK (((length(worker_id) >= 1) AND (length(worker_id) <= 200))),
  constraint task_lease_worker_named CHECK (((worker_key IS NOT NULL) OR (worker_id IS NOT NULL))) NOT VALID
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on column queues.task_lease.worker_id is 'The worker that took the lease, on leases written before worker_key; null since.';
comment on column queues.task_lease.worker_key is 'The worker that took the lease (queues.worker_name); null on leases written before, which have worker_id.';
comment on column queues.task_lease.suspect is 'The claim took this task as its one suspect (a lease of it had ended without an end); null on leases written before claims named one.';
comment on table queues.task_lease is 'Append-only: one row per claim of a task.';
CREATE UNIQUE INDEX task_lease_pkey ON ONLY queues.task_lease USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_default partition of queues.task_lease (
  task_lease_id bigint generated always as identity not null,
  task_id bigint not null,
  worker_id text,
  leased_at timestamp with time zone default now() not null,
  expires_at timestamp with time zone not null,
  worker_key integer,
  suspect boolean,
  constraint task_lease_check CHECK ((expires_at > leased_at)),
  constraint task_lease_default_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_expires_at_not_null NOT NULL expires_at,
  constraint task_lease_leased_at_not_null NOT NULL leased_at,
  constraint task_lease_task_id_not_null NOT NULL task_id,
  constraint task_lease_task_lease_id_not_null NOT NULL task_lease_id,
  constraint task_lease_worker_id_check CHECK (((length(worker_id) >= 1) AND (length(worker_id) <= 200))),
  constraint task_lease_worker_named CHECK (((worker_key IS NOT NULL) OR (worker_id IS NOT NULL))) NOT VALID
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_default_pkey ON queues.task_lease_default USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_extension (
  task_lease_extension_id bigint generated always as identity not null,
  task_lease_id bigint not null,
  extended_at timestamp with time zone default now() not null,
  expires_at timestamp with time zone not null,
  task_id bigint not null,
  constraint task_lease_extension_check CHECK ((expires_at > extended_at)),
  constraint task_lease_extension_expires_at_not_null NOT NULL expires_at,
  constraint task_lease_extension_extended_at_not_null NOT NULL extended_at,
  constraint task_lease_extension_pkey PRIMARY KEY (task_id, task_lease_id, task_lease_extension_id),
  constraint task_lease_extension_task_id_not_null NOT NULL task_id,
  constraint task_lease_extension_task_lease_extension_id_not_null NOT NULL task_lease_extension_id,
  constraint task_lease_extension_task_lease_id_not_null NOT NULL task_lease_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_lease_extension is 'Append-only: a lease extended by its worker''s heartbeat.';
CREATE UNIQUE INDEX task_lease_extension_pkey ON ONLY queues.task_lease_extension USING btree (task_id, task_lease_id, task_lease_extension_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_extension FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_extension_default partition of queues.task_lease_extension (
  task_lease_extension_id bigint generated always as identity not null,
  task_lease_id bigint not null,
  extended_at timestamp with time zone default now() not null,
  expires_at timestamp with time zone not null,
  task_id bigint not null,
  constraint task_lease_extension_check CHECK ((expires_at > extended_at)),
  constraint task_lease_extension_default_pkey PRIMARY KEY (task_id, task_lease_id, task_lease_extension_id),
  constraint task_lease_extension_expires_at_not_null NOT NULL expires_at,
  constraint task_lease_extension_extended_at_not_null NOT NULL extended_at,
  constraint task_lease_extension_task_id_not_null NOT NULL task_id,
  constraint task_lease_extension_task_lease_extension_id_not_null NOT NULL task_lease_extension_id,
  constraint task_lease_extension_task_lease_id_not_null NOT NULL task_lease_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_extension_default_pkey ON queues.task_lease_extension_default USING btree (task_id, task_lease_id, task_lease_extension_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_extension_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_extension_p0 partition of queues.task_lease_extension (
  task_lease_extension_id bigint generated always as identity not null,
  task_lease_id bigint not null,
  extended_at timestamp with time zone default now() not null,
  expires_at timestamp with time zone not null,
  task_id bigint not null,
  constraint task_lease_extension_check CHECK ((expires_at > extended_at)),
  constraint task_lease_extension_expires_at_not_null NOT NULL expires_at,
  constraint task_lease_extension_extended_at_not_null NOT NULL extended_at,
  constraint task_lease_extension_p0_pkey PRIMARY KEY (task_id, task_lease_id, task_lease_extension_id),
  constraint task_lease_extension_task_id_not_null NOT NULL task_id,
  constraint task_lease_extension_task_lease_extension_id_not_null NOT NULL task_lease_extension_id,
  constraint task_lease_extension_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_extension_p0_pkey ON queues.task_lease_extension_p0 USING btree (task_id, task_lease_id, task_lease_extension_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_extension_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_extension_p1000000 partition of queues.task_lease_extension (
  task_lease_extension_id bigint generated always as identity not null,
  task_lease_id bigint not null,
  extended_at timestamp with time zone default now() not null,
  expires_at timestamp with time zone not null,
  task_id bigint not null,
  constraint task_lease_extension_check CHECK ((expires_at > extended_at)),
  constraint task_lease_extension_expires_at_not_null NOT NULL expires_at,
  constraint task_lease_extension_extended_at_not_null NOT NULL extended_at,
  constraint task_lease_extension_p1000000_pkey PRIMARY KEY (task_id, task_lease_id, task_lease_extension_id),
  constraint task_lease_extension_task_id_not_null NOT NULL task_id,
  constraint task_lease_extension_task_lease_extension_id_not_null NOT NULL task_lease_extension_id,
  constraint task_lease_extension_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_extension_p1000000_pkey ON queues.task_lease_extension_p1000000 USING btree (task_id, task_lease_id, task_lease_extension_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_extension_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_extension_p2000000 partition of queues.task_lease_extension (
  task_lease_extension_id bigint generated always as identity not null,
  task_lease_id bigint not null,
  extended_at timestamp with time zone default now() not null,
  expires_at timestamp with time zone not null,
  task_id bigint not null,
  constraint task_lease_extension_check CHECK ((expires_at > extended_at)),
  constraint task_lease_extension_expires_at_not_null NOT NULL expires_at,
  constraint task_lease_extension_extended_at_not_null NOT NULL extended_at,
  constraint task_lease_extension_p2000000_pkey PRIMARY KEY (task_id, task_lease_id, task_lease_extension_id),
  constraint task_lease_extension_task_id_not_null NOT NULL task_id,
  constraint task_lease_extension_task_lease_extension_id_not_null NOT NULL task_lease_extension_id,
  constraint task_lease_extension_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_extension_p2000000_pkey ON queues.task_lease_extension_p2000000 USING btree (task_id, task_lease_id, task_lease_extension_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_extension_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_p0 partition of queues.task_lease (
  task_lease_id bigint generated always as identity not null,
  task_id bigint not null,
  worker_id text,
  leased_at timestamp with time zone default now() not null,
  expires_at timestamp with time zone not null,
  worker_key integer,
  suspect boolean,
  constraint task_lease_check CHECK ((expires_at > leased_at)),
  constraint task_lease_expires_at_not_null NOT NULL expires_at,
  constraint task_lease_leased_at_not_null NOT NULL leased_at,
  constraint task_lease_p0_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_task_id_not_null NOT NULL task_id,
  constraint task_lease_task_lease_id_not_null NOT NULL task_lease_id,
  constraint task_lease_worker_id_check CHECK (((length(worker_id) >= 1) AND (length(worker_id) <= 200))),
  constraint task_lease_worker_named CHECK (((worker_key IS NOT NULL) OR (worker_id IS NOT NULL))) NOT VALID
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_p0_pkey ON queues.task_lease_p0 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_p1000000 partition of queues.task_lease (
  task_lease_id bigint generated always as identity not null,
  task_id bigint not null,
  worker_id text,
  leased_at timestamp with time zone default now() not null,
  expires_at timestamp with time zone not null,
  worker_key integer,
  suspect boolean,
  constraint task_lease_check CHECK ((expires_at > leased_at)),
  constraint task_lease_expires_at_not_null NOT NULL expires_at,
  constraint task_lease_leased_at_not_null NOT NULL leased_at,
  constraint task_lease_p1000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_task_id_not_null NOT NULL task_id,
  constraint task_lease_task_lease_id_not_null NOT NULL task_lease_id,
  constraint task_lease_worker_id_check CHECK (((length(worker_id) >= 1) AND (length(worker_id) <= 200))),
  constraint task_lease_worker_named CHECK (((worker_key IS NOT NULL) OR (worker_id IS NOT NULL))) NOT VALID
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_p1000000_pkey ON queues.task_lease_p1000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_p2000000 partition of queues.task_lease (
  task_lease_id bigint generated always as identity not null,
  task_id bigint not null,
  worker_id text,
  leased_at timestamp with time zone default now() not null,
  expires_at timestamp with time zone not null,
  worker_key integer,
  suspect boolean,
  constraint task_lease_check CHECK ((expires_at > leased_at)),
  constraint task_lease_expires_at_not_null NOT NULL expires_at,
  constraint task_lease_leased_at_not_null NOT NULL leased_at,
  constraint task_lease_p2000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_task_id_not_null NOT NULL task_id,
  constraint task_lease_task_lease_id_not_null NOT NULL task_lease_id,
  constraint task_lease_worker_id_check CHECK (((length(worker_id) >= 1) AND (length(worker_id) <= 200))),
  constraint task_lease_worker_named CHECK (((worker_key IS NOT NULL) OR (worker_id IS NOT NULL))) NOT VALID
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_p2000000_pkey ON queues.task_lease_p2000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_release (
  task_lease_id bigint not null,
  released_at timestamp with time zone default now() not null,
  task_id bigint not null,
  constraint task_lease_release_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_release_released_at_not_null NOT NULL released_at,
  constraint task_lease_release_task_id_not_null NOT NULL task_id,
  constraint task_lease_release_task_lease_id_not_null NOT NULL task_lease_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_lease_release is 'Append-only: a lease released by its worker before expiry.';
CREATE UNIQUE INDEX task_lease_release_pkey ON ONLY queues.task_lease_release USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_release FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_release_default partition of queues.task_lease_release (
  task_lease_id bigint not null,
  released_at timestamp with time zone default now() not null,
  task_id bigint not null,
  constraint task_lease_release_default_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_release_released_at_not_null NOT NULL released_at,
  constraint task_lease_release_task_id_not_null NOT NULL task_id,
  constraint task_lease_release_task_lease_id_not_null NOT NULL task_lease_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_release_default_pkey ON queues.task_lease_release_default USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_release_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_release_p0 partition of queues.task_lease_release (
  task_lease_id bigint not null,
  released_at timestamp with time zone default now() not null,
  task_id bigint not null,
  constraint task_lease_release_p0_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_release_released_at_not_null NOT NULL released_at,
  constraint task_lease_release_task_id_not_null NOT NULL task_id,
  constraint task_lease_release_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_release_p0_pkey ON queues.task_lease_release_p0 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_release_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_release_p1000000 partition of queues.task_lease_release (
  task_lease_id bigint not null,
  released_at timestamp with time zone default now() not null,
  task_id bigint not null,
  constraint task_lease_release_p1000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_release_released_at_not_null NOT NULL released_at,
  constraint task_lease_release_task_id_not_null NOT NULL task_id,
  constraint task_lease_release_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_release_p1000000_pkey ON queues.task_lease_release_p1000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_release_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_release_p2000000 partition of queues.task_lease_release (
  task_lease_id bigint not null,
  released_at timestamp with time zone default now() not null,
  task_id bigint not null,
  constraint task_lease_release_p2000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_release_released_at_not_null NOT NULL released_at,
  constraint task_lease_release_task_id_not_null NOT NULL task_id,
  constraint task_lease_release_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_release_p2000000_pkey ON queues.task_lease_release_p2000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_release_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_revocation (
  task_lease_id bigint not null,
  revoked_at timestamp with time zone default now() not null,
  reason text not null,
  task_id bigint not null,
  constraint task_lease_revocation_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_revocation_reason_not_null NOT NULL reason,
  constraint task_lease_revocation_revoked_at_not_null NOT NULL revoked_at,
  constraint task_lease_revocation_task_id_not_null NOT NULL task_id,
  constraint task_lease_revocation_task_lease_id_not_null NOT NULL task_lease_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_lease_revocation is 'Append-only: a lease revoked because its worker stopped heartbeating.';
CREATE UNIQUE INDEX task_lease_revocation_pkey ON ONLY queues.task_lease_revocation USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_revocation FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_revocation_default partition of queues.task_lease_revocation (
  task_lease_id bigint not null,
  revoked_at timestamp with time zone default now() not null,
  reason text not null,
  task_id bigint not null,
  constraint task_lease_revocation_default_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_revocation_reason_not_null NOT NULL reason,
  constraint task_lease_revocation_revoked_at_not_null NOT NULL revoked_at,
  constraint task_lease_revocation_task_id_not_null NOT NULL task_id,
  constraint task_lease_revocation_task_lease_id_not_null NOT NULL task_lease_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_revocation_default_pkey ON queues.task_lease_revocation_default USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_revocation_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_revocation_p0 partition of queues.task_lease_revocation (
  task_lease_id bigint not null,
  revoked_at timestamp with time zone default now() not null,
  reason text not null,
  task_id bigint not null,
  constraint task_lease_revocation_p0_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_revocation_reason_not_null NOT NULL reason,
  constraint task_lease_revocation_revoked_at_not_null NOT NULL revoked_at,
  constraint task_lease_revocation_task_id_not_null NOT NULL task_id,
  constraint task_lease_revocation_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_revocation_p0_pkey ON queues.task_lease_revocation_p0 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_revocation_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_revocation_p1000000 partition of queues.task_lease_revocation (
  task_lease_id bigint not null,
  revoked_at timestamp with time zone default now() not null,
  reason text not null,
  task_id bigint not null,
  constraint task_lease_revocation_p1000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_revocation_reason_not_null NOT NULL reason,
  constraint task_lease_revocation_revoked_at_not_null NOT NULL revoked_at,
  constraint task_lease_revocation_task_id_not_null NOT NULL task_id,
  constraint task_lease_revocation_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_revocation_p1000000_pkey ON queues.task_lease_revocation_p1000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_revocation_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_revocation_p2000000 partition of queues.task_lease_revocation (
  task_lease_id bigint not null,
  revoked_at timestamp with time zone default now() not null,
  reason text not null,
  task_id bigint not null,
  constraint task_lease_revocation_p2000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_revocation_reason_not_null NOT NULL reason,
  constraint task_lease_revocation_revoked_at_not_null NOT NULL revoked_at,
  constraint task_lease_revocation_task_id_not_null NOT NULL task_id,
  constraint task_lease_revocation_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_revocation_p2000000_pkey ON queues.task_lease_revocation_p2000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_revocation_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_started (
  task_id bigint not null,
  task_lease_id bigint not null,
  started_at timestamp with time zone default now() not null,
  constraint task_lease_started_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_started_started_at_not_null NOT NULL started_at,
  constraint task_lease_started_task_id_not_null NOT NULL task_id,
  constraint task_lease_started_task_lease_id_not_null NOT NULL task_lease_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_lease_started is 'Append-only: a lease whose task its worker started.';
CREATE UNIQUE INDEX task_lease_started_pkey ON ONLY queues.task_lease_started USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_started FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_started_default partition of queues.task_lease_started (
  task_id bigint not null,
  task_lease_id bigint not null,
  started_at timestamp with time zone default now() not null,
  constraint task_lease_started_default_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_started_started_at_not_null NOT NULL started_at,
  constraint task_lease_started_task_id_not_null NOT NULL task_id,
  constraint task_lease_started_task_lease_id_not_null NOT NULL task_lease_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_started_default_pkey ON queues.task_lease_started_default USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_started_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_started_p0 partition of queues.task_lease_started (
  task_id bigint not null,
  task_lease_id bigint not null,
  started_at timestamp with time zone default now() not null,
  constraint task_lease_started_p0_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_started_started_at_not_null NOT NULL started_at,
  constraint task_lease_started_task_id_not_null NOT NULL task_id,
  constraint task_lease_started_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_started_p0_pkey ON queues.task_lease_started_p0 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_started_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_started_p1000000 partition of queues.task_lease_started (
  task_id bigint not null,
  task_lease_id bigint not null,
  started_at timestamp with time zone default now() not null,
  constraint task_lease_started_p1000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_started_started_at_not_null NOT NULL started_at,
  constraint task_lease_started_task_id_not_null NOT NULL task_id,
  constraint task_lease_started_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_started_p1000000_pkey ON queues.task_lease_started_p1000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_started_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_lease_started_p2000000 partition of queues.task_lease_started (
  task_id bigint not null,
  task_lease_id bigint not null,
  started_at timestamp with time zone default now() not null,
  constraint task_lease_started_p2000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_lease_started_started_at_not_null NOT NULL started_at,
  constraint task_lease_started_task_id_not_null NOT NULL task_id,
  constraint task_lease_started_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_lease_started_p2000000_pkey ON queues.task_lease_started_p2000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_lease_started_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_limit_set (
  task_limit_set_id bigint generated always as identity not null,
  task_type text not null,
  scope text not null,
  group_key text,
  max_running integer,
  max_starts integer,
  interval_ms integer,
  set_at timestamp with time zone default now() not null,
  set_by text default SESSION_USER not null,
  constraint task_limit_set_check CHECK ((((scope = 'group'::text) = (group_key IS NOT NULL)) AND ((length(group_key) >= 1) AND (length(group_key) <= 200)))),
  constraint task_limit_set_check1 CHECK (((max_starts IS NULL) = (interval_ms IS NULL))),
  constraint task_limit_set_interval_ms_check CHECK (((interval_ms >= 1) AND (interval_ms <= 86400000))),
  constraint task_limit_set_max_running_check CHECK (((max_running >= 1) AND (max_running <= 1000000))),
  constraint task_limit_set_max_starts_check CHECK (((max_starts >= 1) AND (max_starts <= 1000000))),
  constraint task_limit_set_pkey PRIMARY KEY (task_limit_set_id),
  constraint task_limit_set_scope_check CHECK ((scope = ANY (ARRAY['type'::text, 'each_group'::text, 'group'::text]))),
  constraint task_limit_set_scope_not_null NOT NULL scope,
  constraint task_limit_set_set_at_not_null NOT NULL set_at,
  constraint task_limit_set_set_by_not_null NOT NULL set_by,
  constraint task_limit_set_task_limit_set_id_not_null NOT NULL task_limit_set_id,
  constraint task_limit_set_task_type_fkey FOREIGN KEY (task_type) REFERENCES queues.task_type(task_type) ON DELETE CASCADE,
  constraint task_limit_set_task_type_not_null NOT NULL task_type
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_limit_set is 'Append-only: a concurrency and/or rate limit set (both NULL: cleared) for a task type, each group key of it, or one group key; the latest per (task_type, scope, group_key) is in force (queues.task_limits).';
CREATE INDEX task_limit_set_key ON queues.task_limit_set USING btree (task_type, scope, group_key, task_limit_set_id);
CREATE UNIQUE INDEX task_limit_set_pkey ON queues.task_limit_set USING btree (task_limit_set_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_limit_set FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_limit_window (
  task_type text not null,
  group_key text not null,
  window_start timestamp with time zone not null,
  starts integer not null,
  constraint task_limit_window_group_key_not_null NOT NULL group_key,
  constraint task_limit_window_pkey PRIMARY KEY (task_type, group_key),
  constraint task_limit_window_starts_not_null NOT NULL starts,
  constraint task_limit_window_task_type_not_null NOT NULL task_type,
  constraint task_limit_window_window_start_not_null NOT NULL window_start
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_limit_window is 'Derived: tasks claimed in the current window of a rate limit, per task type and group key ('''' = the type as a whole). Losing it forgets at most one window''s starts.';
CREATE UNIQUE INDEX task_limit_window_pkey ON queues.task_limit_window USING btree (task_type, group_key);

create table queues.task_p0 partition of queues.task (
  task_id bigint generated always as identity not null,
  task_type text not null,
  payload jsonb not null,
  priority integer default 0 not null,
  resource_key text,
  max_attempts integer default 1 not null,
  enqueued_at timestamp with time zone default now() not null,
  scheduled_at timestamp with time zone default now() not null,
  group_key text,
  timeout_ms integer,
  constraint task_enqueued_at_not_null NOT NULL enqueued_at,
  constraint task_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 100))),
  constraint task_max_attempts_not_null NOT NULL max_attempts,
  constraint task_p0_pkey PRIMARY KEY (task_id),
  constraint task_payload_check CHECK ((jsonb_typeof(payload) = 'object'::text)),
  constraint task_payload_not_null NOT NULL payload,
  constraint task_priority_check CHECK (((priority >= '-1000'::integer) AND (priority <= 1000))),
  constraint task_priority_not_null NOT NULL priority,
  constraint task_resource_key_check CHECK (((length(resource_key) >= 1) AND (length(resource_key) <= 200))),
  constraint task_scheduled_at_not_null NOT NULL scheduled_at,
  constraint task_task_id_not_null NOT NULL task_id,
  constraint task_task_type_not_null NOT NULL task_type
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_p0_pkey ON queues.task_p0 USING btree (task_id);
CREATE INDEX task_p0_resource_key_task_id_idx ON queues.task_p0 USING btree (resource_key, task_id) WHERE (resource_key IS NOT NULL);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_p1000000 partition of queues.task (
  task_id bigint generated always as identity not null,
  task_type text not null,
  payload jsonb not null,
  priority integer default 0 not null,
  resource_key text,
  max_attempts integer default 1 not null,
  enqueued_at timestamp with time zone default now() not null,
  scheduled_at timestamp with time zone default now() not null,
  group_key text,
  timeout_ms integer,
  constraint task_enqueued_at_not_null NOT NULL enqueued_at,
  constraint task_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 100))),
  constraint task_max_attempts_not_null NOT NULL max_attempts,
  constraint task_p1000000_pkey PRIMARY KEY (task_id),
  constraint task_payload_check CHECK ((jsonb_typeof(payload) = 'object'::text)),
  constraint task_payload_not_null NOT NULL payload,
  constraint task_priority_check CHECK (((priority >= '-1000'::integer) AND (priority <= 1000))),
  constraint task_priority_not_null NOT NULL priority,
  constraint task_resource_key_check CHECK (((length(resource_key) >= 1) AND (length(resource_key) <= 200))),
  constraint task_scheduled_at_not_null NOT NULL scheduled_at,
  constraint task_task_id_not_null NOT NULL task_id,
  constraint task_task_type_not_null NOT NULL task_type
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_p1000000_pkey ON queues.task_p1000000 USING btree (task_id);
CREATE INDEX task_p1000000_resource_key_task_id_idx ON queues.task_p1000000 USING btree (resource_key, task_id) WHERE (resource_key IS NOT NULL);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_p2000000 partition of queues.task (
  task_id bigint generated always as identity not null,
  task_type text not null,
  payload jsonb not null,
  priority integer default 0 not null,
  resource_key text,
  max_attempts integer default 1 not null,
  enqueued_at timestamp with time zone default now() not null,
  scheduled_at timestamp with time zone default now() not null,
  group_key text,
  timeout_ms integer,
  constraint task_enqueued_at_not_null NOT NULL enqueued_at,
  constraint task_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 100))),
  constraint task_max_attempts_not_null NOT NULL max_attempts,
  constraint task_p2000000_pkey PRIMARY KEY (task_id),
  constraint task_payload_check CHECK ((jsonb_typeof(payload) = 'object'::text)),
  constraint task_payload_not_null NOT NULL payload,
  constraint task_priority_check CHECK (((priority >= '-1000'::integer) AND (priority <= 1000))),
  constraint task_priority_not_null NOT NULL priority,
  constraint task_resource_key_check CHECK (((length(resource_key) >= 1) AND (length(resource_key) <= 200))),
  constraint task_scheduled_at_not_null NOT NULL scheduled_at,
  constraint task_task_id_not_null NOT NULL task_id,
  constraint task_task_type_not_null NOT NULL task_type
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_p2000000_pkey ON queues.task_p2000000 USING btree (task_id);
CREATE INDEX task_p2000000_resource_key_task_id_idx ON queues.task_p2000000 USING btree (resource_key, task_id) WHERE (resource_key IS NOT NULL);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_pending (
  task_id bigint not null,
  task_type text not null,
  priority integer not null,
  scheduled_at timestamp with time zone not null,
  resource_key text,
  available_at timestamp with time zone not null,
  current_lease_id bigint,
  lease_count integer default 0 not null,
  released_count integer default 0 not null,
  max_attempts integer default 1 not null,
  failed_attempts integer default 0 not null,
  interrupted_count integer default 0 not null,
  uncounted_count integer default 0 not null,
  suspect_lease boolean default false not null,
  group_key text,
  constraint task_pending_available_at_not_null NOT NULL available_at,
  constraint task_pending_failed_attempts_not_null NOT NULL failed_attempts,
  constraint task_pending_interrupted_count_not_null NOT NULL interrupted_count,
  constraint task_pending_lease_count_not_null NOT NULL lease_count,
  constraint task_pending_max_attempts_not_null NOT NULL max_attempts,
  constraint task_pending_pkey PRIMARY KEY (task_id),
  constraint task_pending_priority_not_null NOT NULL priority,
  constraint task_pending_released_count_not_null NOT NULL released_count,
  constraint task_pending_scheduled_at_not_null NOT NULL scheduled_at,
  constraint task_pending_suspect_lease_not_null NOT NULL suspect_lease,
  constraint task_pending_task_id_not_null NOT NULL task_id,
  constraint task_pending_task_type_not_null NOT NULL task_type,
  constraint task_pending_unstarted_count_not_null NOT NULL uncounted_count
) with (autovacuum_vacuum_cost_delay=0, autovacuum_vacuum_scale_factor=0, autovacuum_vacuum_threshold=1000, fillfactor=80);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on column queues.task_pending.uncounted_count is 'Leases that ended without an end and without counting towards abandonment: not the named suspect of their lease.';
comment on column queues.task_pending.suspect_lease is 'The current lease named this task its suspect (queues.claim_tasks_at); its expiry counts towards abandonment.';
comment on table queues.task_pending is 'Derived claim index: tasks not yet completed. Rebuild with queues.rebuild_task_pending().';
CREATE INDEX task_pending_keyed_idx ON queues.task_pending USING btree (task_id) WHERE (resource_key IS NOT NULL);
CREATE INDEX task_pending_lease_expiry_idx ON queues.task_pending USING btree (available_at) WHERE (current_lease_id > 0);
CREATE UNIQUE INDEX task_pending_pkey ON queues.task_pending USING btree (task_id);
CREATE INDEX task_pending_ready_idx ON queues.task_pending USING btree (task_type, priority DESC, scheduled_at, task_id) WHERE (current_lease_id IS NULL);
CREATE INDEX task_pending_repeat_suspect_idx ON queues.task_pending USING btree (available_at) WHERE ((current_lease_id IS NULL) AND ((((lease_count - released_count) - failed_attempts) - uncounted_count) > 0));
CREATE INDEX task_pending_suspect_lease_idx ON queues.task_pending USING btree (available_at) WHERE (suspect_lease AND (current_lease_id > 0));
CREATE INDEX task_pending_waiting_idx ON queues.task_pending USING btree (task_id) WHERE (available_at = 'infinity'::timestamp with time zone);

create table queues.task_progress (
  task_progress_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint not null,
  reported_at timestamp with time zone default now() not null,
  done bigint not null,
  total bigint,
  note text default ''::text not null,
  constraint task_progress_check CHECK ((total >= done)),
  constraint task_progress_done_check CHECK ((done >= 0)),
  constraint task_progress_done_not_null NOT NULL done,
  constraint task_progress_note_check CHECK ((length(note) <= 500)),
  constraint task_progress_note_not_null NOT NULL note,
  constraint task_progress_pkey PRIMARY KEY (task_id, task_progress_id),
  constraint task_progress_reported_at_not_null NOT NULL reported_at,
  constraint task_progress_task_id_not_null NOT NULL task_id,
  constraint task_progress_task_lease_id_not_null NOT NULL task_lease_id,
  constraint task_progress_task_progress_id_not_null NOT NULL task_progress_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_progress is 'Append-only: a progress report of a running task (done out of total, a note), at most one per task per second from the worker (queues.record_progress). A history table: leaves with its task''s partition set.';
CREATE UNIQUE INDEX task_progress_pkey ON ONLY queues.task_progress USING btree (task_id, task_progress_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_progress FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_progress_default partition of queues.task_progress (
  task_progress_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint not null,
  reported_at timestamp with time zone default now() not null,
  done bigint not null,
  total bigint,
  note text default ''::text not null,
  constraint task_progress_check CHECK ((total >= done)),
  constraint task_progress_default_pkey PRIMARY KEY (task_id, task_progress_id),
  constraint task_progress_done_check CHECK ((done >= 0)),
  constraint task_progress_done_not_null NOT NULL done,
  constraint task_progress_note_check CHECK ((length(note) <= 500)),
  constraint task_progress_note_not_null NOT NULL note,
  constraint task_progress_reported_at_not_null NOT NULL reported_at,
  constraint task_progress_task_id_not_null NOT NULL task_id,
  constraint task_progress_task_lease_id_not_null NOT NULL task_lease_id,
  constraint task_progress_task_progress_id_not_null NOT NULL task_progress_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_progress_default_pkey ON queues.task_progress_default USING btree (task_id, task_progress_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_progress_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_progress_p0 partition of queues.task_progress (
  task_progress_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint not null,
  reported_at timestamp with time zone default now() not null,
  done bigint not null,
  total bigint,
  note text default ''::text not null,
  constraint task_progress_check CHECK ((total >= done)),
  constraint task_progress_done_check CHECK ((done >= 0)),
  constraint task_progress_done_not_null NOT NULL done,
  constraint task_progress_note_check CHECK ((length(note) <= 500)),
  constraint task_progress_note_not_null NOT NULL note,
  constraint task_progress_p0_pkey PRIMARY KEY (task_id, task_progress_id),
  constraint task_progress_reported_at_not_null NOT NULL reported_at,
  constraint task_progress_task_id_not_null NOT NULL task_id,
  constraint task_progress_task_lease_id_not_null NOT NULL task_lease_id,
  constraint task_progress_task_progress_id_not_null NOT NULL task_progress_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_progress_p0_pkey ON queues.task_progress_p0 USING btree (task_id, task_progress_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_progress_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_progress_p1000000 partition of queues.task_progress (
  task_progress_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint not null,
  reported_at timestamp with time zone default now() not null,
  done bigint not null,
  total bigint,
  note text default ''::text not null,
  constraint task_progress_check CHECK ((total >= done)),
  constraint task_progress_done_check CHECK ((done >= 0)),
  constraint task_progress_done_not_null NOT NULL done,
  constraint task_progress_note_check CHECK ((length(note) <= 500)),
  constraint task_progress_note_not_null NOT NULL note,
  constraint task_progress_p1000000_pkey PRIMARY KEY (task_id, task_progress_id),
  constraint task_progress_reported_at_not_null NOT NULL reported_at,
  constraint task_progress_task_id_not_null NOT NULL task_id,
  constraint task_progress_task_lease_id_not_null NOT NULL task_lease_id,
  constraint task_progress_task_progress_id_not_null NOT NULL task_progress_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_progress_p1000000_pkey ON queues.task_progress_p1000000 USING btree (task_id, task_progress_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_progress_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_progress_p2000000 partition of queues.task_progress (
  task_progress_id bigint generated always as identity not null,
  task_id bigint not null,
  task_lease_id bigint not null,
  reported_at timestamp with time zone default now() not null,
  done bigint not null,
  total bigint,
  note text default ''::text not null,
  constraint task_progress_check CHECK ((total >= done)),
  constraint task_progress_done_check CHECK ((done >= 0)),
  constraint task_progress_done_not_null NOT NULL done,
  constraint task_progress_note_check CHECK ((length(note) <= 500)),
  constraint task_progress_note_not_null NOT NULL note,
  constraint task_progress_p2000000_pkey PRIMARY KEY (task_id, task_progress_id),
  constraint task_progress_reported_at_not_null NOT NULL reported_at,
  constraint task_progress_task_id_not_null NOT NULL task_id,
  constraint task_progress_task_lease_id_not_null NOT NULL task_lease_id,
  constraint task_progress_task_progress_id_not_null NOT NULL task_progress_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_progress_p2000000_pkey ON queues.task_progress_p2000000 USING btree (task_id, task_progress_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_progress_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_ready_batch (
  task_id bigint not null,
  task_type text not null,
  priority integer not null,
  scheduled_at timestamp with time zone not null,
  max_attempts integer not null,
  task_ids bigint[] not null,
  taken integer default 0 not null,
  task_range int8range not null,
  constraint task_ready_batch_check CHECK (((taken >= 0) AND (taken < cardinality(task_ids)))),
  constraint task_ready_batch_max_attempts_not_null NOT NULL max_attempts,
  constraint task_ready_batch_pkey PRIMARY KEY (task_id),
  constraint task_ready_batch_priority_not_null NOT NULL priority,
  constraint task_ready_batch_scheduled_at_not_null NOT NULL scheduled_at,
  constraint task_ready_batch_taken_not_null NOT NULL taken,
  constraint task_ready_batch_task_id_not_null NOT NULL task_id,
  constraint task_ready_batch_task_ids_not_null NOT NULL task_ids,
  constraint task_ready_batch_task_range_not_null NOT NULL task_range,
  constraint task_ready_batch_task_type_not_null NOT NULL task_type
) with (autovacuum_vacuum_cost_delay=0, autovacuum_vacuum_scale_factor=0, autovacuum_vacuum_threshold=100, fillfactor=50);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_ready_batch is 'Ready batches: the plain tasks of one enqueue call, per type, priority and max_attempts, held in one row instead of a claim-index row each, until claims take them (taken) or a path gives one its row (queues.unbatch_tasks). Derived, not a fact: queues.rebuild_task_pending rebuilds it into claim-index rows. See sql/queues/ready_batch.sql.';
CREATE INDEX task_ready_batch_claim_idx ON queues.task_ready_batch USING btree (task_type, priority DESC, scheduled_at, task_id);
CREATE UNIQUE INDEX task_ready_batch_pkey ON queues.task_ready_batch USING btree (task_id);
CREATE INDEX task_ready_batch_range_idx ON queues.task_ready_batch USING gist (task_range);

create table queues.task_redriven (
  task_id bigint not null,
  new_task_id bigint not null,
  redriven_at timestamp with time zone default now() not null,
  constraint task_redriven_new_task_id_not_null NOT NULL new_task_id,
  constraint task_redriven_pkey PRIMARY KEY (task_id),
  constraint task_redriven_redriven_at_not_null NOT NULL redriven_at,
  constraint task_redriven_task_id_not_null NOT NULL task_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_redriven is 'Append-only: a dead-lettered task redriven as new_task_id.';
CREATE UNIQUE INDEX task_redriven_pkey ON ONLY queues.task_redriven USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_redriven FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_redriven_default partition of queues.task_redriven (
  task_id bigint not null,
  new_task_id bigint not null,
  redriven_at timestamp with time zone default now() not null,
  constraint task_redriven_default_pkey PRIMARY KEY (task_id),
  constraint task_redriven_new_task_id_not_null NOT NULL new_task_id,
  constraint task_redriven_redriven_at_not_null NOT NULL redriven_at,
  constraint task_redriven_task_id_not_null NOT NULL task_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_redriven_default_pkey ON queues.task_redriven_default USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_redriven_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_redriven_p0 partition of queues.task_redriven (
  task_id bigint not null,
  new_task_id bigint not null,
  redriven_at timestamp with time zone default now() not null,
  constraint task_redriven_new_task_id_not_null NOT NULL new_task_id,
  constraint task_redriven_p0_pkey PRIMARY KEY (task_id),
  constraint task_redriven_redriven_at_not_null NOT NULL redriven_at,
  constraint task_redriven_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_redriven_p0_pkey ON queues.task_redriven_p0 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_redriven_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_redriven_p1000000 partition of queues.task_redriven (
  task_id bigint not null,
  new_task_id bigint not null,
  redriven_at timestamp with time zone default now() not null,
  constraint task_redriven_new_task_id_not_null NOT NULL new_task_id,
  constraint task_redriven_p1000000_pkey PRIMARY KEY (task_id),
  constraint task_redriven_redriven_at_not_null NOT NULL redriven_at,
  constraint task_redriven_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_redriven_p1000000_pkey ON queues.task_redriven_p1000000 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_redriven_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_redriven_p2000000 partition of queues.task_redriven (
  task_id bigint not null,
  new_task_id bigint not null,
  redriven_at timestamp with time zone default now() not null,
  constraint task_redriven_new_task_id_not_null NOT NULL new_task_id,
  constraint task_redriven_p2000000_pkey PRIMARY KEY (task_id),
  constraint task_redriven_redriven_at_not_null NOT NULL redriven_at,
  constraint task_redriven_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_redriven_p2000000_pkey ON queues.task_redriven_p2000000 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_redriven_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_result (
  task_id bigint not null,
  task_lease_id bigint not null,
  result jsonb not null,
  recorded_at timestamp with time zone default now() not null,
  constraint task_result_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_result_recorded_at_not_null NOT NULL recorded_at,
  constraint task_result_result_not_null NOT NULL result,
  constraint task_result_task_id_not_null NOT NULL task_id,
  constraint task_result_task_lease_id_not_null NOT NULL task_lease_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_result is 'Append-only: the result a task''s run recorded, per lease.';
CREATE UNIQUE INDEX task_result_pkey ON ONLY queues.task_result USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_result FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_result_default partition of queues.task_result (
  task_id bigint not null,
  task_lease_id bigint not null,
  result jsonb not null,
  recorded_at timestamp with time zone default now() not null,
  constraint task_result_default_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_result_recorded_at_not_null NOT NULL recorded_at,
  constraint task_result_result_not_null NOT NULL result,
  constraint task_result_task_id_not_null NOT NULL task_id,
  constraint task_result_task_lease_id_not_null NOT NULL task_lease_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_result_default_pkey ON queues.task_result_default USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_result_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_result_p0 partition of queues.task_result (
  task_id bigint not null,
  task_lease_id bigint not null,
  result jsonb not null,
  recorded_at timestamp with time zone default now() not null,
  constraint task_result_p0_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_result_recorded_at_not_null NOT NULL recorded_at,
  constraint task_result_result_not_null NOT NULL result,
  constraint task_result_task_id_not_null NOT NULL task_id,
  constraint task_result_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_result_p0_pkey ON queues.task_result_p0 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_result_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_result_p1000000 partition of queues.task_result (
  task_id bigint not null,
  task_lease_id bigint not null,
  result jsonb not null,
  recorded_at timestamp with time zone default now() not null,
  constraint task_result_p1000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_result_recorded_at_not_null NOT NULL recorded_at,
  constraint task_result_result_not_null NOT NULL result,
  constraint task_result_task_id_not_null NOT NULL task_id,
  constraint task_result_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_result_p1000000_pkey ON queues.task_result_p1000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_result_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_result_p2000000 partition of queues.task_result (
  task_id bigint not null,
  task_lease_id bigint not null,
  result jsonb not null,
  recorded_at timestamp with time zone default now() not null,
  constraint task_result_p2000000_pkey PRIMARY KEY (task_id, task_lease_id),
  constraint task_result_recorded_at_not_null NOT NULL recorded_at,
  constraint task_result_result_not_null NOT NULL result,
  constraint task_result_task_id_not_null NOT NULL task_id,
  constraint task_result_task_lease_id_not_null NOT NULL task_lease_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_result_p2000000_pkey ON queues.task_result_p2000000 USING btree (task_id, task_lease_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_result_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_run_now (
  task_id bigint not null,
  requested_at timestamp with time zone default now() not null,
  constraint task_run_now_pkey PRIMARY KEY (task_id),
  constraint task_run_now_requested_at_not_null NOT NULL requested_at,
  constraint task_run_now_task_id_not_null NOT NULL task_id
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_run_now is 'Append-only: a scheduled task asked to run at requested_at instead of its scheduled time.';
CREATE UNIQUE INDEX task_run_now_pkey ON ONLY queues.task_run_now USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_run_now FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_run_now_default partition of queues.task_run_now (
  task_id bigint not null,
  requested_at timestamp with time zone default now() not null,
  constraint task_run_now_default_pkey PRIMARY KEY (task_id),
  constraint task_run_now_requested_at_not_null NOT NULL requested_at,
  constraint task_run_now_task_id_not_null NOT NULL task_id
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_run_now_default_pkey ON queues.task_run_now_default USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_run_now_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_run_now_p0 partition of queues.task_run_now (
  task_id bigint not null,
  requested_at timestamp with time zone default now() not null,
  constraint task_run_now_p0_pkey PRIMARY KEY (task_id),
  constraint task_run_now_requested_at_not_null NOT NULL requested_at,
  constraint task_run_now_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_run_now_p0_pkey ON queues.task_run_now_p0 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_run_now_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_run_now_p1000000 partition of queues.task_run_now (
  task_id bigint not null,
  requested_at timestamp with time zone default now() not null,
  constraint task_run_now_p1000000_pkey PRIMARY KEY (task_id),
  constraint task_run_now_requested_at_not_null NOT NULL requested_at,
  constraint task_run_now_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_run_now_p1000000_pkey ON queues.task_run_now_p1000000 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_run_now_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_run_now_p2000000 partition of queues.task_run_now (
  task_id bigint not null,
  requested_at timestamp with time zone default now() not null,
  constraint task_run_now_p2000000_pkey PRIMARY KEY (task_id),
  constraint task_run_now_requested_at_not_null NOT NULL requested_at,
  constraint task_run_now_task_id_not_null NOT NULL task_id
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_run_now_p2000000_pkey ON queues.task_run_now_p2000000 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_run_now_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_trace (
  task_id bigint not null,
  traceparent text not null,
  tracestate text,
  constraint task_trace_pkey PRIMARY KEY (task_id),
  constraint task_trace_task_id_not_null NOT NULL task_id,
  constraint task_trace_traceparent_check CHECK ((length(traceparent) = 55)),
  constraint task_trace_traceparent_not_null NOT NULL traceparent,
  constraint task_trace_tracestate_check CHECK ((length(tracestate) <= 512))
) partition by RANGE (task_id);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_trace is 'Append-only: the W3C trace context a task was enqueued in (tasks enqueued with one only). See sql/queues/trace.sql.';
CREATE UNIQUE INDEX task_trace_pkey ON ONLY queues.task_trace USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_trace FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_trace_default partition of queues.task_trace (
  task_id bigint not null,
  traceparent text not null,
  tracestate text,
  constraint task_trace_default_pkey PRIMARY KEY (task_id),
  constraint task_trace_task_id_not_null NOT NULL task_id,
  constraint task_trace_traceparent_check CHECK ((length(traceparent) = 55)),
  constraint task_trace_traceparent_not_null NOT NULL traceparent,
  constraint task_trace_tracestate_check CHECK ((length(tracestate) <= 512))
) DEFAULT;
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_trace_default_pkey ON queues.task_trace_default USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_trace_default FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_trace_p0 partition of queues.task_trace (
  task_id bigint not null,
  traceparent text not null,
  tracestate text,
  constraint task_trace_p0_pkey PRIMARY KEY (task_id),
  constraint task_trace_task_id_not_null NOT NULL task_id,
  constraint task_trace_traceparent_check CHECK ((length(traceparent) = 55)),
  constraint task_trace_traceparent_not_null NOT NULL traceparent,
  constraint task_trace_tracestate_check CHECK ((length(tracestate) <= 512))
) FOR VALUES FROM ('0') TO ('1000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_trace_p0_pkey ON queues.task_trace_p0 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_trace_p0 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_trace_p1000000 partition of queues.task_trace (
  task_id bigint not null,
  traceparent text not null,
  tracestate text,
  constraint task_trace_p1000000_pkey PRIMARY KEY (task_id),
  constraint task_trace_task_id_not_null NOT NULL task_id,
  constraint task_trace_traceparent_check CHECK ((length(traceparent) = 55)),
  constraint task_trace_traceparent_not_null NOT NULL traceparent,
  constraint task_trace_tracestate_check CHECK ((length(tracestate) <= 512))
) FOR VALUES FROM ('1000000') TO ('2000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_trace_p1000000_pkey ON queues.task_trace_p1000000 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_trace_p1000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_trace_p2000000 partition of queues.task_trace (
  task_id bigint not null,
  traceparent text not null,
  tracestate text,
  constraint task_trace_p2000000_pkey PRIMARY KEY (task_id),
  constraint task_trace_task_id_not_null NOT NULL task_id,
  constraint task_trace_traceparent_check CHECK ((length(traceparent) = 55)),
  constraint task_trace_traceparent_not_null NOT NULL traceparent,
  constraint task_trace_tracestate_check CHECK ((length(tracestate) <= 512))
) FOR VALUES FROM ('2000000') TO ('3000000');
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX task_trace_p2000000_pkey ON queues.task_trace_p2000000 USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_trace_p2000000 FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_type (
  task_type text not null,
  description text default ''::text not null,
  registered_at timestamp with time zone default now() not null,
  constraint task_type_description_not_null NOT NULL description,
  constraint task_type_pkey PRIMARY KEY (task_type),
  constraint task_type_registered_at_not_null NOT NULL registered_at,
  constraint task_type_task_type_check CHECK ((task_type ~ '^[a-z][a-z0-9_]{0,62}$'::text)),
  constraint task_type_task_type_not_null NOT NULL task_type
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_type is 'Task types a worker may be asked to process; queues.enqueue rejects any other.';
CREATE UNIQUE INDEX task_type_pkey ON queues.task_type USING btree (task_type);
CREATE TRIGGER guard_task_type_in_use BEFORE DELETE OR UPDATE OF task_type ON queues.task_type FOR EACH ROW EXECUTE FUNCTION queues.guard_task_type_in_use();
CREATE TRIGGER guard_task_type_in_use_truncate BEFORE TRUNCATE ON queues.task_type FOR EACH STATEMENT EXECUTE FUNCTION queues.guard_task_type_in_use();

create table queues.task_type_paused (
  task_type_paused_id bigint generated always as identity not null,
  task_type text not null,
  paused_at timestamp with time zone default now() not null,
  reason text default ''::text not null,
  constraint task_type_paused_paused_at_not_null NOT NULL paused_at,
  constraint task_type_paused_pkey PRIMARY KEY (task_type_paused_id),
  constraint task_type_paused_reason_check CHECK ((length(reason) <= 500)),
  constraint task_type_paused_reason_not_null NOT NULL reason,
  constraint task_type_paused_task_type_fkey FOREIGN KEY (task_type) REFERENCES queues.task_type(task_type) ON DELETE CASCADE,
  constraint task_type_paused_task_type_not_null NOT NULL task_type,
  constraint task_type_paused_task_type_paused_id_not_null NOT NULL task_type_paused_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_type_paused is 'Append-only: claiming of a task type paused (until a task_type_resumed row names it).';
CREATE UNIQUE INDEX task_type_paused_pkey ON queues.task_type_paused USING btree (task_type_paused_id);
CREATE INDEX task_type_paused_type_idx ON queues.task_type_paused USING btree (task_type, task_type_paused_id DESC);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_type_paused FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_type_resumed (
  task_type_paused_id bigint not null,
  resumed_at timestamp with time zone default now() not null,
  constraint task_type_resumed_pkey PRIMARY KEY (task_type_paused_id),
  constraint task_type_resumed_resumed_at_not_null NOT NULL resumed_at,
  constraint task_type_resumed_task_type_paused_id_fkey FOREIGN KEY (task_type_paused_id) REFERENCES queues.task_type_paused(task_type_paused_id) ON DELETE CASCADE,
  constraint task_type_resumed_task_type_paused_id_not_null NOT NULL task_type_paused_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_type_resumed is 'Append-only: the end of a pause.';
CREATE UNIQUE INDEX task_type_resumed_pkey ON queues.task_type_resumed USING btree (task_type_paused_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_type_resumed FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_type_timeout_set (
  task_type_timeout_set_id bigint generated always as identity not null,
  task_type text not null,
  timeout_ms integer,
  set_at timestamp with time zone default now() not null,
  constraint task_type_timeout_set_pkey PRIMARY KEY (task_type_timeout_set_id),
  constraint task_type_timeout_set_set_at_not_null NOT NULL set_at,
  constraint task_type_timeout_set_task_type_fkey FOREIGN KEY (task_type) REFERENCES queues.task_type(task_type) ON DELETE CASCADE,
  constraint task_type_timeout_set_task_type_not_null NOT NULL task_type,
  constraint task_type_timeout_set_task_type_timeout_set_id_not_null NOT NULL task_type_timeout_set_id,
  constraint task_type_timeout_set_timeout_ms_check CHECK (((timeout_ms >= 1) AND (timeout_ms <= 86400000)))
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_type_timeout_set is 'Append-only: a run timeout set (or, NULL, cleared) for a task type; the latest per type is in force (queues.task_type_timeouts).';
CREATE UNIQUE INDEX task_type_timeout_set_pkey ON queues.task_type_timeout_set USING btree (task_type_timeout_set_id);
CREATE INDEX task_type_timeout_set_type ON queues.task_type_timeout_set USING btree (task_type, task_type_timeout_set_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_type_timeout_set FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_unique (
  task_id bigint not null,
  unique_key text not null,
  enqueued_at timestamp with time zone default now() not null,
  constraint task_unique_enqueued_at_not_null NOT NULL enqueued_at,
  constraint task_unique_pkey PRIMARY KEY (task_id),
  constraint task_unique_task_id_not_null NOT NULL task_id,
  constraint task_unique_unique_key_check CHECK (((length(unique_key) >= 1) AND (length(unique_key) <= 200))),
  constraint task_unique_unique_key_not_null NOT NULL unique_key
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_unique is 'Append-only: the unique key a task was enqueued with (queues.enqueue_unique). Rows of tasks whose history was dropped are removed by queues.prune_task_unique_keys().';
CREATE UNIQUE INDEX task_unique_pkey ON queues.task_unique USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.task_unique FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.task_unique_key (
  unique_key text not null,
  task_id bigint,
  constraint task_unique_key_pkey PRIMARY KEY (unique_key),
  constraint task_unique_key_unique_key_not_null NOT NULL unique_key
) with (autovacuum_vacuum_cost_delay=0, autovacuum_vacuum_scale_factor=0, autovacuum_vacuum_threshold=1000, fillfactor=80);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.task_unique_key is 'Derived: per unique key, the newest task enqueued with it; the key is free once that task is no longer pending. Rebuild with queues.rebuild_task_unique_key().';
CREATE UNIQUE INDEX task_unique_key_pkey ON queues.task_unique_key USING btree (unique_key);

create table queues.throttle (
  throttle_id bigint generated always as identity not null,
  key_kind text not null,
  key text not null,
  throttled_until timestamp with time zone not null,
  reason text not null,
  recorded_at timestamp with time zone default now() not null,
  recorded_by text not null,
  task_id bigint,
  task_lease_id bigint,
  constraint throttle_check CHECK ((throttled_until > recorded_at)),
  constraint throttle_check1 CHECK (((task_id IS NULL) = (task_lease_id IS NULL))),
  constraint throttle_key_check CHECK (((length(key) >= 1) AND (length(key) <= 200))),
  constraint throttle_key_kind_check CHECK ((key_kind = ANY (ARRAY['task_type'::text, 'group'::text]))),
  constraint throttle_key_kind_not_null NOT NULL key_kind,
  constraint throttle_key_not_null NOT NULL key,
  constraint throttle_pkey PRIMARY KEY (throttle_id),
  constraint throttle_reason_check CHECK (((length(reason) >= 1) AND (length(reason) <= 500))),
  constraint throttle_reason_not_null NOT NULL reason,
  constraint throttle_recorded_at_not_null NOT NULL recorded_at,
  constraint throttle_recorded_by_check CHECK (((length(recorded_by) >= 1) AND (length(recorded_by) <= 200))),
  constraint throttle_recorded_by_not_null NOT NULL recorded_by,
  constraint throttle_throttle_id_not_null NOT NULL throttle_id,
  constraint throttle_throttled_until_not_null NOT NULL throttled_until
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on column queues.throttle.key_kind is '''task_type'': key is a task type (a channel such as email). ''group'': key is a group key (queues.task.group_key); the tasks of every type carrying it wait.';
comment on table queues.throttle is 'Append-only: a provider refused work of key (a task type, key_kind task_type; a group key, key_kind group) until throttled_until (a 429, a Retry-After, a quota error). Claims leave the key''s tasks while one of its reports not cleared is in force (queues.throttled_keys_at).';
CREATE INDEX throttle_lease_idx ON queues.throttle USING btree (task_lease_id) WHERE (task_lease_id IS NOT NULL);
CREATE UNIQUE INDEX throttle_pkey ON queues.throttle USING btree (throttle_id);
CREATE INDEX throttle_until_idx ON queues.throttle USING btree (throttled_until) INCLUDE (key_kind, key, throttle_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.throttle FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.throttle_cleared (
  throttle_cleared_id bigint generated always as identity not null,
  key_kind text not null,
  key text not null,
  last_throttle_id bigint not null,
  cleared_at timestamp with time zone default now() not null,
  cleared_by text not null,
  constraint throttle_cleared_cleared_at_not_null NOT NULL cleared_at,
  constraint throttle_cleared_cleared_by_check CHECK (((length(cleared_by) >= 1) AND (length(cleared_by) <= 200))),
  constraint throttle_cleared_cleared_by_not_null NOT NULL cleared_by,
  constraint throttle_cleared_key_kind_not_null NOT NULL key_kind,
  constraint throttle_cleared_key_not_null NOT NULL key,
  constraint throttle_cleared_last_throttle_id_fkey FOREIGN KEY (last_throttle_id) REFERENCES queues.throttle(throttle_id) ON DELETE CASCADE,
  constraint throttle_cleared_last_throttle_id_not_null NOT NULL last_throttle_id,
  constraint throttle_cleared_pkey PRIMARY KEY (throttle_cleared_id),
  constraint throttle_cleared_throttle_cleared_id_not_null NOT NULL throttle_cleared_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.throttle_cleared is 'Append-only: an operator cleared the throttles of key recorded up to last_throttle_id (queues.clear_throttle).';
CREATE INDEX throttle_cleared_key_idx ON queues.throttle_cleared USING btree (key_kind, key, last_throttle_id);
CREATE UNIQUE INDEX throttle_cleared_pkey ON queues.throttle_cleared USING btree (throttle_cleared_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.throttle_cleared FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table queues.worker (
  worker_id text not null,
  task_types text[] not null,
  started_at timestamp with time zone default now() not null,
  last_seen_at timestamp with time zone default now() not null,
  stopped_at timestamp with time zone,
  heartbeat_interval_ms integer,
  constraint worker_heartbeat_interval_ms_check CHECK (((heartbeat_interval_ms >= 1) AND (heartbeat_interval_ms <= 86400000))),
  constraint worker_last_seen_at_not_null NOT NULL last_seen_at,
  constraint worker_pkey PRIMARY KEY (worker_id),
  constraint worker_started_at_not_null NOT NULL started_at,
  constraint worker_task_types_not_null NOT NULL task_types,
  constraint worker_worker_id_check CHECK (((length(worker_id) >= 1) AND (length(worker_id) <= 200))),
  constraint worker_worker_id_not_null NOT NULL worker_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.worker is 'Workers and their last heartbeat (mutable registry).';
CREATE UNIQUE INDEX worker_pkey ON queues.worker USING btree (worker_id);

create table queues.worker_name (
  worker_key integer generated always as identity not null,
  worker_id text not null,
  constraint worker_name_pkey PRIMARY KEY (worker_key),
  constraint worker_name_worker_id_check CHECK (((length(worker_id) >= 1) AND (length(worker_id) <= 200))),
  constraint worker_name_worker_id_key UNIQUE (worker_id),
  constraint worker_name_worker_id_not_null NOT NULL worker_id,
  constraint worker_name_worker_key_not_null NOT NULL worker_key
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table queues.worker_name is 'Append-only: each worker id that took a lease, once, with the key its leases name it by (queues.task_lease.worker_key).';
CREATE UNIQUE INDEX worker_name_pkey ON queues.worker_name USING btree (worker_key);
CREATE UNIQUE INDEX worker_name_worker_id_key ON queues.worker_name USING btree (worker_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON queues.worker_name FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table schedules.schedule (
  schedule_id bigint generated always as identity not null,
  name text not null,
  created_at timestamp with time zone default now() not null,
  constraint schedule_created_at_not_null NOT NULL created_at,
  constraint schedule_name_check CHECK ((name ~ '^[a-z][a-z0-9_.-]{0,99}$'::text)),
  constraint schedule_name_key UNIQUE (name),
  constraint schedule_name_not_null NOT NULL name,
  constraint schedule_pkey PRIMARY KEY (schedule_id),
  constraint schedule_schedule_id_not_null NOT NULL schedule_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table schedules.schedule is 'A named recurring schedule. Its definition lives in schedule_version.';
CREATE UNIQUE INDEX schedule_name_key ON schedules.schedule USING btree (name);
CREATE UNIQUE INDEX schedule_pkey ON schedules.schedule USING btree (schedule_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON schedules.schedule FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table schedules.schedule_run (
  schedule_run_id bigint generated always as identity not null,
  schedule_id bigint not null,
  schedule_version_id bigint not null,
  fire_at timestamp with time zone not null,
  first_fire_at timestamp with time zone not null,
  outcome text not null,
  task_id bigint,
  enqueued_at timestamp with time zone default now() not null,
  constraint schedule_run_check CHECK ((first_fire_at <= fire_at)),
  constraint schedule_run_check1 CHECK (((outcome = 'enqueued'::text) = (task_id IS NOT NULL))),
  constraint schedule_run_enqueued_at_not_null NOT NULL enqueued_at,
  constraint schedule_run_fire_at_not_null NOT NULL fire_at,
  constraint schedule_run_first_fire_at_not_null NOT NULL first_fire_at,
  constraint schedule_run_outcome_check CHECK ((outcome = ANY (ARRAY['enqueued'::text, 'skipped'::text]))),
  constraint schedule_run_outcome_not_null NOT NULL outcome,
  constraint schedule_run_pkey PRIMARY KEY (schedule_run_id),
  constraint schedule_run_schedule_id_fire_at_key UNIQUE (schedule_id, fire_at),
  constraint schedule_run_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES schedules.schedule(schedule_id) ON DELETE CASCADE,
  constraint schedule_run_schedule_id_not_null NOT NULL schedule_id,
  constraint schedule_run_schedule_run_id_not_null NOT NULL schedule_run_id,
  constraint schedule_run_schedule_version_id_fkey FOREIGN KEY (schedule_version_id) REFERENCES schedules.schedule_version(schedule_version_id) ON DELETE CASCADE,
  constraint schedule_run_schedule_version_id_not_null NOT NULL schedule_version_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table schedules.schedule_run is 'Append-only: fire times handled by the supervisor, enqueued (with the task) or skipped.';
CREATE UNIQUE INDEX schedule_run_pkey ON schedules.schedule_run USING btree (schedule_run_id);
CREATE UNIQUE INDEX schedule_run_schedule_id_fire_at_key ON schedules.schedule_run USING btree (schedule_id, fire_at);
CREATE TRIGGER forbid_update BEFORE UPDATE ON schedules.schedule_run FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table schedules.schedule_version (
  schedule_version_id bigint generated always as identity not null,
  schedule_id bigint not null,
  cron text not null,
  task_type text not null,
  payload jsonb not null,
  priority integer not null,
  missed_run_policy text not null,
  enabled boolean not null,
  fires_after timestamp with time zone not null,
  created_at timestamp with time zone default now() not null,
  time_zone text default 'UTC'::text not null,
  constraint schedule_version_created_at_not_null NOT NULL created_at,
  constraint schedule_version_cron_check CHECK (((length(cron) >= 1) AND (length(cron) <= 200))),
  constraint schedule_version_cron_not_null NOT NULL cron,
  constraint schedule_version_enabled_not_null NOT NULL enabled,
  constraint schedule_version_fires_after_not_null NOT NULL fires_after,
  constraint schedule_version_missed_run_policy_check CHECK ((missed_run_policy = ANY (ARRAY['skip'::text, 'catch_up_once'::text]))),
  constraint schedule_version_missed_run_policy_not_null NOT NULL missed_run_policy,
  constraint schedule_version_payload_check CHECK ((jsonb_typeof(payload) = 'object'::text)),
  constraint schedule_version_payload_not_null NOT NULL payload,
  constraint schedule_version_pkey PRIMARY KEY (schedule_version_id),
  constraint schedule_version_priority_check CHECK (((priority >= '-1000'::integer) AND (priority <= 1000))),
  constraint schedule_version_priority_not_null NOT NULL priority,
  constraint schedule_version_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES schedules.schedule(schedule_id) ON DELETE CASCADE,
  constraint schedule_version_schedule_id_not_null NOT NULL schedule_id,
  constraint schedule_version_schedule_version_id_not_null NOT NULL schedule_version_id,
  constraint schedule_version_task_type_fkey FOREIGN KEY (task_type) REFERENCES queues.task_type(task_type) ON DELETE RESTRICT,
  constraint schedule_version_task_type_not_null NOT NULL task_type,
  constraint schedule_version_time_zone_not_null NOT NULL time_zone
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on column schedules.schedule_version.time_zone is 'IANA time zone whose wall clock the cron is read on (schedules.next_fire_time(cron, after, time_zone)).';
comment on table schedules.schedule_version is 'Append-only: each definition of a schedule. The newest row per schedule is in force.';
CREATE UNIQUE INDEX schedule_version_pkey ON schedules.schedule_version USING btree (schedule_version_id);
CREATE INDEX schedule_version_schedule_idx ON schedules.schedule_version USING btree (schedule_id, schedule_version_id DESC);
CREATE TRIGGER forbid_update BEFORE UPDATE ON schedules.schedule_version FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

create table schedules.supervisor_task (
  task_id bigint not null,
  scheduled_at timestamp with time zone not null,
  enqueued_at timestamp with time zone default now() not null,
  constraint supervisor_task_enqueued_at_not_null NOT NULL enqueued_at,
  constraint supervisor_task_pkey PRIMARY KEY (task_id),
  constraint supervisor_task_scheduled_at_not_null NOT NULL scheduled_at,
  constraint supervisor_task_task_id_not_null NOT NULL task_id
);
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on table schedules.supervisor_task is 'Append-only: schedule_supervisor tasks enqueued; the pending one is found through queues.task_pending.';
CREATE UNIQUE INDEX supervisor_task_pkey ON schedules.supervisor_task USING btree (task_id);
CREATE TRIGGER forbid_update BEFORE UPDATE ON schedules.supervisor_task FOR EACH STATEMENT EXECUTE FUNCTION queues.forbid_fact_update();

-- Views

create materialized view menus.store_analytics as
 SELECT s.store_id,
    s.slug,
    s.name,
    count(l.product_id)::integer AS products,
    count(l.product_id) FILTER (WHERE l.in_stock)::integer AS in_stock,
    round(avg(l.price_cents))::integer AS avg_price_cents,
    min(l.price_cents) AS min_price_cents,
    max(l.price_cents) AS max_price_cents,
    max(l.observed_at) AS last_observed_at
   FROM menus.store s
     LEFT JOIN menus.product p ON p.store_id = s.store_id
     LEFT JOIN LATERAL ( SELECT p.product_id,
            x.price_cents,
            x.in_stock,
            x.observed_at
           FROM menus.product_snapshot x
          WHERE x.product_id = p.product_id
          ORDER BY x.observed_at DESC, x.product_snapshot_id DESC
         LIMIT 1) l ON true
  GROUP BY s.store_id, s.slug, s.name;
  -- columns:
  --  store_id bigint
  --  slug text
  --  name text
  --  products integer
  --  in_stock integer
  --  avg_price_cents integer
  --  min_price_cents integer
  --  max_price_cents integer
  --  last_observed_at timestamp with time zone
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
CREATE UNIQUE INDEX store_analytics_store_idx ON menus.store_analytics USING btree (store_id);

create view public.v_worker_capacity as
 SELECT task_type AS role,
    pending AS pending_tasks,
    ready AS ready_tasks,
    running AS running_tasks,
    active_workers,
    tasks_per_worker_hour,
    estimated_hours_to_drain,
    workers_needed_1h,
    workers_needed_4h,
    workers_needed_8h,
    completed_in_window,
    window_workers,
    window_seconds
   FROM admin.capacity() c(task_type, pending, ready, running, active_workers, completed_in_window, window_workers, window_seconds, tasks_per_worker_hour, estimated_hours_to_drain, workers_needed_1h, workers_needed_4h, workers_needed_8h);
  -- columns:
  --  role text
  --  pending_tasks bigint
  --  ready_tasks bigint
  --  running_tasks bigint
  --  active_workers bigint
  --  tasks_per_worker_hour double precision
  --  estimated_hours_to_drain double precision
  --  workers_needed_1h bigint
  --  workers_needed_4h bigint
  --  workers_needed_8h bigint
  --  completed_in_window bigint
  --  window_workers bigint
  --  window_seconds integer
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
  grant SELECT to :DATABASE_API (by :DATABASE_OWNER)
comment on view public.v_worker_capacity is 'The role-based specification''s capacity view: admin.capacity() per role (task type), in its column names.';

create view public.worker_tasks as
 SELECT t.task_id AS id,
    t.task_type AS role,
        CASE
            WHEN (t.payload ->> 'store_id'::text) ~ '^[0-9]{1,18}$'::text THEN (t.payload ->> 'store_id'::text)::bigint
            ELSE NULL::bigint
        END AS dispensary_id,
        CASE
            WHEN jsonb_typeof(t.payload -> 'platform'::text) = 'string'::text THEN "left"(t.payload ->> 'platform'::text, 100)
            ELSE NULL::text
        END AS platform,
        CASE
            WHEN c.outcome = 'succeeded'::text THEN 'completed'::text
            WHEN c.outcome = ANY (ARRAY['failed'::text, 'abandoned'::text, 'validation_failed'::text]) THEN 'failed'::text
            WHEN c.outcome IS NOT NULL THEN c.outcome
            WHEN COALESCE(p.current_lease_id, h.task_lease_id) IS NULL THEN 'pending'::text
            WHEN COALESCE(p.available_at, h.expires_at) <= now() THEN 'stale'::text
            WHEN w.last_seen_at < (now() - make_interval(secs => ((3 * COALESCE(w.heartbeat_interval_ms, 30000))::numeric / 1000.0)::double precision)) AND w.stopped_at IS NULL THEN 'stale'::text
            WHEN st.started_at IS NULL THEN 'claimed'::text
            ELSE 'running'::text
        END AS status,
    t.priority,
    t.scheduled_at AS scheduled_for,
    l.worker_id,
    l.leased_at AS claimed_at,
    st.started_at,
    c.completed_at,
        CASE
            WHEN c.task_id IS NULL AND COALESCE(p.current_lease_id, h.task_lease_id) = l.task_lease_id AND w.last_seen_at IS NOT NULL THEN w.last_seen_at
            ELSE GREATEST(l.leased_at, st.started_at, ( SELECT max(x.extended_at) AS max
               FROM queues.task_lease_extension x
              WHERE x.task_id = l.task_id AND x.task_lease_id = l.task_lease_id))
        END AS last_heartbeat_at,
    ( SELECT r.result
           FROM queues.task_result r
          WHERE r.task_id = t.task_id
          ORDER BY r.task_lease_id DESC
         LIMIT 1) AS result,
    ( SELECT e.error_message
           FROM queues.error e
          WHERE e.task_id = t.task_id
          ORDER BY e.error_id DESC
         LIMIT 1) AS error_message,
    COALESCE(p.failed_attempts, ( SELECT count(*)::integer AS count
           FROM queues.task_attempt_failed f
          WHERE f.task_id = t.task_id)) AS retry_count,
    t.max_attempts - 1 AS max_retries,
    t.enqueued_at AS created_at,
    GREATEST(t.enqueued_at, l.leased_at, st.started_at, c.completed_at) AS updated_at,
    c.outcome
   FROM queues.task t
     LEFT JOIN queues.task_pending p ON p.task_id = t.task_id
     LEFT JOIN LATERAL ( SELECT x.task_id,
            x.task_lease_id,
            x.completed_at,
            x.outcome,
            x.started_at
           FROM queues.task_completed x
          WHERE x.task_id = t.task_id
        UNION ALL
         SELECT t.task_id,
            r.task_lease_ids[array_position(r.task_ids, t.task_id)] AS task_lease_ids,
            r.completed_at,
            'succeeded'::text,
            '1970-01-01 00:00:00+00'::timestamp with time zone + r.started_us[array_position(r.task_ids, t.task_id)]::double precision * '00:00:00.000001'::interval
           FROM queues.completion_round r
          WHERE r.task_range @> t.task_id AND r.task_id >= t.task_id AND (t.task_id = ANY (r.task_ids))
 LIMIT 1) c ON true
     LEFT JOIN LATERAL ( SELECT y.task_id,
            y.task_lease_id,
            y.leased_at,
            y.expires_at,
            y.claim,
            COALESCE(y.worker_id, ( SELECT n.worker_id
                   FROM queues.worker_name n
                  WHERE n.worker_key = y.worker_key)) AS worker_id
           FROM ( SELECT x.task_id,
                    x.task_lease_id,
                    x.leased_at,
                    x.expires_at,
                    x.worker_id,
                    x.worker_key,
                    false AS claim
                   FROM queues.task_lease x
                  WHERE x.task_id = t.task_id
                UNION ALL
                 SELECT t.task_id,
                    x.task_lease_id,
                    x.leased_at,
                    x.expires_at,
                    NULL::text AS text,
                    x.worker_key,
                    true
                   FROM queues.claim_lease x
                  WHERE x.task_range @> t.task_id AND x.task_id >= t.task_id AND (t.task_id = ANY (x.task_ids))) y
          ORDER BY y.task_lease_id DESC
         LIMIT 1) l ON true
     LEFT JOIN LATERAL ( SELECT l.task_lease_id,
            l.expires_at
          WHERE p.task_id IS NULL AND c.task_id IS NULL AND l.claim) h ON true
     LEFT JOIN LATERAL ( SELECT COALESCE(
                CASE
                    WHEN c.task_lease_id = l.task_lease_id THEN c.started_at
                    ELSE NULL::timestamp with time zone
                END, ( SELECT m.started_at
                   FROM queues.task_lease_started m
                  WHERE m.task_id = l.task_id AND m.task_lease_id = l.task_lease_id)) AS started_at) st ON true
     LEFT JOIN queues.worker w ON w.worker_id = l.worker_id;
  -- columns:
  --  id bigint
  --  role text
  --  dispensary_id bigint
  --  platform text
  --  status text
  --  priority integer
  --  scheduled_for timestamp with time zone
  --  worker_id text
  --  claimed_at timestamp with time zone
  --  started_at timestamp with time zone
  --  completed_at timestamp with time zone
  --  last_heartbeat_at timestamp with time zone
  --  result jsonb
  --  error_message text
  --  retry_count integer
  --  max_retries integer
  --  created_at timestamp with time zone
  --  updated_at timestamp with time zone
  --  outcome text
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
  grant SELECT to :DATABASE_API (by :DATABASE_OWNER)
comment on view public.worker_tasks is 'The role-based specification''s worker_tasks table as a read-only view over the queue''s facts, with its statuses.';

create view queues.dead_letter as
 SELECT c.task_id,
    t.task_type,
    t.payload,
    c.outcome,
    c.completed_at,
    ( SELECT e.error_message
           FROM queues.error e
          WHERE e.task_id = t.task_id
          ORDER BY e.error_id DESC
         LIMIT 1) AS last_error,
    ( SELECT count(*)::integer AS count
           FROM queues.task_leases_of(t.task_id) task_leases_of(task_lease_id, task_id, worker_key, worker_id, leased_at, expires_at, suspect)) AS attempts
   FROM queues.task_completed c
     JOIN queues.task t ON t.task_id = c.task_id
  WHERE c.outcome <> 'succeeded'::text AND (c.outcome = 'abandoned'::text OR c.outcome = 'failed'::text AND NOT t.payload ? 'error_handler'::text) AND NOT (EXISTS ( SELECT 1
           FROM queues.task_redriven r
          WHERE r.task_id = t.task_id));
  -- columns:
  --  task_id bigint
  --  task_type text
  --  payload jsonb
  --  outcome text
  --  completed_at timestamp with time zone
  --  last_error text
  --  attempts integer
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on view queues.dead_letter is 'Tasks that ended failed or abandoned with no handler to deal with it, not yet redriven.';

create view queues.lease_held_counts as
 SELECT h.task_lease_id,
    h.worker_key,
    h.expires_at,
    t.task_type,
    count(*)::integer AS tasks
   FROM ( SELECT h_1.task_lease_id,
            h_1.worker_key,
            h_1.expires_at,
            array_agg(h_1.task_id) AS task_ids,
            min(h_1.task_id) AS first_id,
            max(h_1.task_id) AS last_id
           FROM queues.lease_held_tasks h_1
          GROUP BY h_1.task_lease_id, h_1.worker_key, h_1.expires_at) h
     CROSS JOIN LATERAL ( SELECT x.task_type
           FROM queues.task x
          WHERE (x.task_id = ANY (h.task_ids)) AND x.task_id >= h.first_id AND x.task_id <= h.last_id) t
  GROUP BY h.task_lease_id, h.worker_key, h.expires_at, t.task_type;
  -- columns:
  --  task_lease_id bigint
  --  worker_key integer
  --  expires_at timestamp with time zone
  --  task_type text
  --  tasks integer
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on view queues.lease_held_counts is 'Per claim lease and task type, the tasks the lease holds (queues.lease_held_tasks, counted): the lease-held part of a count. See sql/queues/lease_held.sql.';

create view queues.lease_held_tasks as
 SELECT u.task_id,
    c.task_lease_id,
    c.worker_key,
    c.leased_at,
    c.expires_at,
    COALESCE(c.suspect_task_id = u.task_id, false) AS suspect
   FROM queues.claim_lease_due d
     CROSS JOIN LATERAL ( SELECT c_1.task_lease_id,
            c_1.task_id,
            c_1.worker_key,
            c_1.leased_at,
            c_1.expires_at,
            c_1.task_ids,
            c_1.task_range,
            c_1.suspect_task_id,
            c_1.task_type
           FROM queues.claim_lease c_1
          WHERE c_1.task_lease_id = d.task_lease_id AND c_1.task_id = d.task_id
         LIMIT 1) c
     CROSS JOIN LATERAL ( SELECT count(*) AS rounds,
            COALESCE(sum(cardinality(array_positions(r.task_lease_ids, c.task_lease_id))), 0::bigint) AS ended
           FROM queues.completion_round r
          WHERE r.task_range && c.task_range AND r.task_id >= lower(c.task_range)) g
     CROSS JOIN LATERAL ( SELECT x.task_id
           FROM unnest(c.task_ids) x(task_id)
        EXCEPT
         SELECT e.task_id
           FROM queues.completion_round r
             CROSS JOIN LATERAL unnest(r.task_ids) e(task_id)
          WHERE g.rounds > 0 AND r.task_range && c.task_range AND r.task_id >= lower(c.task_range)) u
  WHERE cardinality(c.task_ids) > g.ended AND cardinality(c.task_ids) > (g.ended + (( SELECT count(*) AS count
           FROM queues.task_completed x
          WHERE x.task_id >= lower(c.task_range) AND x.task_id < upper(c.task_range) AND x.task_lease_id = c.task_lease_id))) AND NOT (EXISTS ( SELECT 1
           FROM queues.task_pending p
          WHERE p.task_id = u.task_id)) AND NOT (EXISTS ( SELECT 1
           FROM queues.task_completed x
          WHERE x.task_id = u.task_id));
  -- columns:
  --  task_id bigint
  --  task_lease_id bigint
  --  worker_key integer
  --  leased_at timestamp with time zone
  --  expires_at timestamp with time zone
  --  suspect boolean
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on view queues.lease_held_tasks is 'Tasks held by their claim lease without a claim-index row (the ready set), with that lease: tasks of the claim leases not yet rescued (queues.claim_lease_due) with neither a queues.task_pending row nor an end. A task''s own: queues.lease_held_of(task_id). See sql/queues/lease_held.sql.';

create view queues.stale_lease as
 SELECT task_id,
    task_lease_id,
    worker_id,
    last_seen_at,
    expires_at
   FROM queues.stale_leases_at(now(), 600) stale_leases_at(task_id, task_lease_id, worker_id, last_seen_at, expires_at);
  -- columns:
  --  task_id bigint
  --  task_lease_id bigint
  --  worker_id text
  --  last_seen_at timestamp with time zone
  --  expires_at timestamp with time zone
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on view queues.stale_lease is 'Live leases held by workers not seen for 10 minutes.';

create view queues.task_batched as
 SELECT u.task_id,
    b.task_type,
    b.priority,
    b.scheduled_at,
    b.max_attempts,
    b.task_id AS batch_id
   FROM queues.task_ready_batch b
     CROSS JOIN LATERAL unnest(b.task_ids[b.taken + 1:]) u(task_id);
  -- columns:
  --  task_id bigint
  --  task_type text
  --  priority integer
  --  scheduled_at timestamp with time zone
  --  max_attempts integer
  --  batch_id bigint
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on view queues.task_batched is 'Every task held in a ready batch (queues.task_ready_batch) and not yet taken out of it, with its batch. A task''s own: queues.batched_of(task_id). See sql/queues/ready_batch.sql.';

create view queues.task_end as
 SELECT c.task_id,
    c.task_lease_id,
    c.completed_at,
    c.outcome,
    c.task_type,
    c.started_at
   FROM queues.task_completed c
UNION ALL
 SELECT u.task_id,
    u.task_lease_id,
    r.completed_at,
    'succeeded'::text AS outcome,
    r.task_type,
    '1970-01-01 00:00:00+00'::timestamp with time zone + u.started_us::double precision * '00:00:00.000001'::interval AS started_at
   FROM queues.completion_round r
     CROSS JOIN LATERAL UNNEST(r.task_ids, r.task_lease_ids, r.started_us) u(task_id, task_lease_id, started_us);
  -- columns:
  --  task_id bigint
  --  task_lease_id bigint
  --  completed_at timestamp with time zone
  --  outcome text
  --  task_type text
  --  started_at timestamp with time zone
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on view queues.task_end is 'Every task''s end, one row per ended task: queues.task_completed and the tasks of each queues.completion_round (succeeded). A task''s own: queues.task_end_of(task_id).';

create view queues.task_lease_effective as
 SELECT l.task_lease_id,
    l.task_id,
    COALESCE(l.worker_id, ( SELECT n.worker_id
           FROM queues.worker_name n
          WHERE n.worker_key = l.worker_key)) AS worker_id,
    l.leased_at,
    COALESCE(r.released_at, v.revoked_at, e.expires_at, l.expires_at) AS expires_at,
    r.released_at,
    COALESCE(e.extensions, 0) AS extensions,
    v.revoked_at,
    l.suspect
   FROM queues.task_leases l
     LEFT JOIN queues.task_lease_release r ON r.task_id = l.task_id AND r.task_lease_id = l.task_lease_id
     LEFT JOIN queues.task_lease_revocation v ON v.task_id = l.task_id AND v.task_lease_id = l.task_lease_id
     LEFT JOIN LATERAL ( SELECT max(x.expires_at) AS expires_at,
            count(*)::integer AS extensions
           FROM queues.task_lease_extension x
          WHERE x.task_id = l.task_id AND x.task_lease_id = l.task_lease_id) e ON true;
  -- columns:
  --  task_lease_id bigint
  --  task_id bigint
  --  worker_id text
  --  leased_at timestamp with time zone
  --  expires_at timestamp with time zone
  --  released_at timestamp with time zone
  --  extensions integer
  --  revoked_at timestamp with time zone
  --  suspect boolean
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on view queues.task_lease_effective is 'Leases with their effective expiry (releases and heartbeats applied), both shapes (queues.task_leases). A task''s own: queues.task_lease_effective_of(task_id).';

create view queues.task_leases as
 SELECT l.task_lease_id,
    l.task_id,
    l.worker_key,
    l.worker_id,
    l.leased_at,
    l.expires_at,
    l.suspect
   FROM queues.task_lease l
UNION ALL
 SELECT c.task_lease_id,
    u.task_id,
    c.worker_key,
    NULL::text AS worker_id,
    c.leased_at,
    c.expires_at,
    COALESCE(c.suspect_task_id = u.task_id, false) AS suspect
   FROM queues.claim_lease c
     CROSS JOIN LATERAL unnest(c.task_ids) u(task_id);
  -- columns:
  --  task_lease_id bigint
  --  task_id bigint
  --  worker_key integer
  --  worker_id text
  --  leased_at timestamp with time zone
  --  expires_at timestamp with time zone
  --  suspect boolean
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on view queues.task_leases is 'Every lease of every task, a row per (task, lease): queues.task_lease and the tasks of each queues.claim_lease. A task''s own: queues.task_leases_of(task_id).';

create view queues.task_pending_or_held as
 SELECT p.task_id,
    p.task_type,
    p.priority,
    p.scheduled_at,
    p.resource_key,
    p.available_at,
    p.current_lease_id,
    p.lease_count,
    p.released_count,
    p.max_attempts,
    p.failed_attempts,
    p.interrupted_count,
    p.uncounted_count,
    p.suspect_lease,
    p.group_key,
    false AS lease_held,
    false AS batched
   FROM queues.task_pending p
UNION ALL
 SELECT h.task_id,
    t.task_type,
    t.priority,
    LEAST(t.scheduled_at, rn.requested_at) AS scheduled_at,
    t.resource_key,
    h.expires_at AS available_at,
    h.task_lease_id AS current_lease_id,
    1 AS lease_count,
    0 AS released_count,
    t.max_attempts,
    0 AS failed_attempts,
    0 AS interrupted_count,
    0 AS uncounted_count,
    h.suspect AS suspect_lease,
    t.group_key,
    true AS lease_held,
    false AS batched
   FROM queues.lease_held_tasks h
     CROSS JOIN LATERAL ( SELECT x.task_id,
            x.task_type,
            x.payload,
            x.priority,
            x.resource_key,
            x.max_attempts,
            x.enqueued_at,
            x.scheduled_at,
            x.group_key,
            x.timeout_ms
           FROM queues.task x
          WHERE x.task_id = h.task_id
         LIMIT 1) t
     LEFT JOIN queues.task_run_now rn ON rn.task_id = h.task_id
UNION ALL
 SELECT b.task_id,
    b.task_type,
    b.priority,
    b.scheduled_at,
    NULL::text AS resource_key,
    b.scheduled_at AS available_at,
    NULL::bigint AS current_lease_id,
    0 AS lease_count,
    0 AS released_count,
    b.max_attempts,
    0 AS failed_attempts,
    0 AS interrupted_count,
    0 AS uncounted_count,
    false AS suspect_lease,
    NULL::text AS group_key,
    false AS lease_held,
    true AS batched
   FROM queues.task_batched b;
  -- columns:
  --  task_id bigint
  --  task_type text
  --  priority integer
  --  scheduled_at timestamp with time zone
  --  resource_key text
  --  available_at timestamp with time zone
  --  current_lease_id bigint
  --  lease_count integer
  --  released_count integer
  --  max_attempts integer
  --  failed_attempts integer
  --  interrupted_count integer
  --  uncounted_count integer
  --  suspect_lease boolean
  --  group_key text
  --  lease_held boolean
  --  batched boolean
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on view queues.task_pending_or_held is 'Every task not ended, in queues.task_pending''s shape: the claim index''s rows, each lease-held task (queues.lease_held_tasks) leased by its claim lease (lease_held), and each task in a ready batch (queues.task_batched) as its row would be (batched; a reader that filters on not batched reads no batch). A task''s own: queues.task_pending_or_held_of(task_id). See sql/queues/lease_held.sql.';

create view queues.task_pending_or_held_counts as
 SELECT p.task_type,
    p.available_at,
    p.current_lease_id,
    p.lease_count,
    false AS lease_held,
    1 AS tasks
   FROM queues.task_pending p
UNION ALL
 SELECT h.task_type,
    h.expires_at AS available_at,
    h.task_lease_id AS current_lease_id,
    1 AS lease_count,
    true AS lease_held,
    h.tasks
   FROM queues.lease_held_counts h
UNION ALL
 SELECT b.task_type,
    b.scheduled_at AS available_at,
    NULL::bigint AS current_lease_id,
    0 AS lease_count,
    false AS lease_held,
    cardinality(b.task_ids) - b.taken AS tasks
   FROM queues.task_ready_batch b;
  -- columns:
  --  task_type text
  --  available_at timestamp with time zone
  --  current_lease_id bigint
  --  lease_count integer
  --  lease_held boolean
  --  tasks integer
  owner :DATABASE_OWNER
  grant DELETE, INSERT, MAINTAIN, REFERENCES, SELECT, TRIGGER, TRUNCATE, UPDATE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on view queues.task_pending_or_held_counts is 'Every task not ended, counted: the claim index''s rows (tasks 1), the lease-held tasks per claim lease and type (queues.lease_held_counts) and the tasks of each ready batch (queues.task_ready_batch), in queues.task_pending_or_held''s shape; sum(tasks) is its count(*). See sql/queues/lease_held.sql.';

-- Sequences

create sequence accounts.account_account_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of accounts.account.account_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence accounts.account_anonymization_attempt_account_anonymization_attempt_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of accounts.account_anonymization_attempt.account_anonymization_attempt_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence accounts.account_anonymization_task_account_anonymization_task_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of accounts.account_anonymization_task.account_anonymization_task_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence accounts.account_deletion_supervisor_r_account_deletion_supervisor_r_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of accounts.account_deletion_supervisor_run.account_deletion_supervisor_run_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence accounts.account_deletion_task_account_deletion_task_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of accounts.account_deletion_task.account_deletion_task_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence admin.api_change_api_change_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of admin.api_change.api_change_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence comms.message_message_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of comms.message.message_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence comms.send_email_attempt_send_email_attempt_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of comms.send_email_attempt.send_email_attempt_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence comms.send_email_supervisor_run_send_email_supervisor_run_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of comms.send_email_supervisor_run.send_email_supervisor_run_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence comms.send_email_task_send_email_task_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of comms.send_email_task.send_email_task_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence comms.send_sms_attempt_send_sms_attempt_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of comms.send_sms_attempt.send_sms_attempt_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence comms.send_sms_supervisor_run_send_sms_supervisor_run_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of comms.send_sms_supervisor_run.send_sms_supervisor_run_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence comms.send_sms_task_send_sms_task_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of comms.send_sms_task.send_sms_task_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence files.file_deletion_attempt_file_deletion_attempt_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of files.file_deletion_attempt.file_deletion_attempt_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence files.file_deletion_supervisor_run_file_deletion_supervisor_run_i_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of files.file_deletion_supervisor_run.file_deletion_supervisor_run_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence files.file_deletion_task_file_deletion_task_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of files.file_deletion_task.file_deletion_task_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence files.file_file_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of files.file.file_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence files.file_metadata_file_metadata_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of files.file_metadata.file_metadata_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence internal.process_pruned_process_pruned_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of internal.process_pruned.process_pruned_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence learning.cue_cue_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of learning.cue.cue_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence learning.profile_cue_recording_profile_cue_recording_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of learning.profile_cue_recording.profile_cue_recording_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence learning.profile_profile_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of learning.profile.profile_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence menus.product_product_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of menus.product.product_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence menus.product_snapshot_product_snapshot_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of menus.product_snapshot.product_snapshot_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence menus.store_store_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of menus.store.store_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.error_error_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.error.error_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.history_partition_dropped_history_partition_dropped_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.history_partition_dropped.history_partition_dropped_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.task_attempt_failed_task_attempt_failed_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.task_attempt_failed.task_attempt_failed_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.task_lease_extension_task_lease_extension_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.task_lease_extension.task_lease_extension_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.task_lease_task_lease_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.task_lease.task_lease_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.task_limit_set_task_limit_set_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.task_limit_set.task_limit_set_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.task_progress_task_progress_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.task_progress.task_progress_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.task_task_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.task.task_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.task_type_paused_task_type_paused_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.task_type_paused.task_type_paused_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.task_type_timeout_set_task_type_timeout_set_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.task_type_timeout_set.task_type_timeout_set_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.throttle_cleared_throttle_cleared_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.throttle_cleared.throttle_cleared_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.throttle_throttle_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of queues.throttle.throttle_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence queues.worker_name_worker_key_seq as integer start 1 increment 1 minvalue 1 maxvalue 2147483647 cache 1;
  identity of queues.worker_name.worker_key
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence schedules.schedule_run_schedule_run_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of schedules.schedule_run.schedule_run_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence schedules.schedule_schedule_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of schedules.schedule.schedule_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)
create sequence schedules.schedule_version_schedule_version_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1;
  identity of schedules.schedule_version.schedule_version_id
  owner :DATABASE_OWNER
  grant SELECT, UPDATE, USAGE to :DATABASE_OWNER (by :DATABASE_OWNER)

-- Functions

CREATE OR REPLACE FUNCTION accounts.account_anonymization_max_attempts()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 3 $function$;
  -- accounts.account_anonymization_max_attempts(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.account_anonymization_supervisor(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select internal.run_sql_process_supervisor('accounts', 'account_anonymization', 'accounts.account_anonymization_supervisor',
    payload, _work => 'accounts.anonymize_account(bigint)', _work_column => 'account_id',
    _max_attempts => accounts.account_anonymization_max_attempts(), _backoff_cap_seconds => 3600)
$function$;
  -- accounts.account_anonymization_supervisor(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.account_deletion_children(_account_deletion_task_id bigint)
 RETURNS TABLE(process text, root_id bigint)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 'file_deletion', fd.file_deletion_task_id
    from accounts.account_deletion_task d
    join files.file f on f.account_id = d.account_id
    join files.file_deletion_task fd on fd.file_id = f.file_id
   where d.account_deletion_task_id = _account_deletion_task_id
  union all
  select 'account_anonymization', x.account_anonymization_task_id
    from accounts.account_deletion_task d
    join accounts.account_anonymization_task x on x.account_id = d.account_id
   where d.account_deletion_task_id = _account_deletion_task_id
$function$;
  -- accounts.account_deletion_children(_account_deletion_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.account_deletion_max_supervisor_runs()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 100 $function$;
  -- accounts.account_deletion_max_supervisor_runs(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.account_deletion_progress(_account_deletion_task_id bigint)
 RETURNS jsonb
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object(
           'done', ff.num_files_deleted,
           'total', ff.num_files,
           'note', case when ff.num_files_deleted = ff.num_files then 'files deleted'
                        when ff.num_files_without_task = ff.num_files then 'file deletions not started'
                        else format('deleting files (%s stuck)', cardinality(ff.stuck_file_ids)) end)
    from accounts.account_deletion_task t
   cross join lateral files.account_file_deletion_facts(t.account_id) ff
   where t.account_deletion_task_id = _account_deletion_task_id
$function$;
  -- accounts.account_deletion_progress(_account_deletion_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.account_deletion_supervisor(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _run record := internal.open_supervisor_run('accounts', 'account_deletion', 'accounts.account_deletion_supervisor', payload);
  _facts record;
  _reason text;
  _status text;
  _file_id bigint;
begin
  if _run.root_id is null then
    return _run.refusal;
  end if;
  _facts := accounts.account_deletion_supervisor_facts(_run.root_id);

  -- Terminal states: ended; every child done; a stuck child; the run cap.
  if _facts.has_task_succeeded then
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _facts.task_failure));
  end if;
  if _facts.num_files_deleted = _facts.num_files and _facts.is_anonymized then
    perform internal.record_process_outcome('accounts', 'account_deletion', _run.root_id, null);
    return internal.supervisor_progress('succeeded');
  end if;
  _reason := case
    when cardinality(_facts.stuck_file_ids) > 0
      then format('file deletion stuck for file_id %s', array_to_string(_facts.stuck_file_ids, ', '))
    when _facts.is_anonymization_stuck
      then format('account anonymization stuck for account_id %s', _facts.account_id)
    when _facts.num_runs >= accounts.account_deletion_max_supervisor_runs()
      then format('run_limit_reached after %s runs', _facts.num_runs)
  end;
  if _reason is not null then
    perform internal.record_process_outcome('accounts', 'account_deletion', _run.root_id, _reason);
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _reason));
  end if;

  -- Progress: files first, then anonymization.
  perform internal.record_supervisor_run('accounts', 'account_deletion', _run.root_id);
  if _facts.num_files_without_task > 0 then
    for _file_id in select f.file_id from files.file f
                     where f.account_id = _facts.account_id
                       and not exists (select 1 from files.file_deletion_task d where d.file_id = f.file_id)
                     order by f.file_id loop
      perform files.kickoff_file_deletion(_file_id);
    end loop;
    _status := 'file_deletions_started';
  elsif _facts.num_files_deleted < _facts.num_files then
    _status := 'waiting_for_file_deletions';
  elsif not _facts.has_anonymization_task then
    perform accounts.kickoff_account_anonymization(_facts.account_id);
    _status := 'anonymization_started';
  else
    _status := 'waiting_for_anonymization';
  end if;
  -- Next run after 5 s · 2^(runs − 1), capped at 10 minutes: the parent polls its children.
  return internal.supervisor_progress(_status, jsonb_build_object('next_check_at',
    internal.schedule_next_supervisor_run('accounts.account_deletion_supervisor', 'account_deletion_task_id',
                                          _run.root_id, _facts.num_runs, 600)));
end;
$function$;
  -- accounts.account_deletion_supervisor(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.account_deletion_supervisor_facts(_task_id bigint, OUT account_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT num_runs integer, OUT num_files integer, OUT num_files_without_task integer, OUT num_files_deleted integer, OUT stuck_file_ids bigint[], OUT has_anonymization_task boolean, OUT is_anonymized boolean, OUT is_anonymization_stuck boolean)
 RETURNS record
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select t.account_id, e.has_task_succeeded, e.task_failure,
         internal.count_supervisor_runs('accounts', 'account_deletion', t.account_deletion_task_id),
         ff.num_files, ff.num_files_without_task, ff.num_files_deleted, ff.stuck_file_ids,
         x.account_anonymization_task_id is not null,
         exists (select 1 from accounts.account_anonymization_task_succeeded s
                  where s.account_anonymization_task_id = x.account_anonymization_task_id),
         accounts.is_account_anonymization_stuck(t.account_id)
    from accounts.account_deletion_task t
   cross join lateral internal.process_terminal_facts('accounts', 'account_deletion', t.account_deletion_task_id) e
   cross join lateral files.account_file_deletion_facts(t.account_id) ff
    left join accounts.account_anonymization_task x on x.account_id = t.account_id
   where t.account_deletion_task_id = _task_id
$function$;
  -- accounts.account_deletion_supervisor_facts(_task_id bigint, OUT account_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT num_runs integer, OUT num_files integer, OUT num_files_without_task integer, OUT num_files_deleted integer, OUT stuck_file_ids bigint[], OUT has_anonymization_task boolean, OUT is_anonymized boolean, OUT is_anonymization_stuck boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.anonymize_account(_account_id bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _injected text;
begin
  select i.error_message into _injected
    from accounts.anonymization_failure_injection i where i.account_id = _account_id;
  if _injected is not null then
    raise exception 'anonymization of account % failed: %', _account_id, _injected using errcode = 'P0001';
  end if;
  update accounts.account a set email = null, display_name = null
   where a.account_id = _account_id;
  update learning.profile p set display_name = null
   where p.account_id = _account_id;
  insert into accounts.account_flag (account_id, flag) values (_account_id, 'anonymized')
  on conflict do nothing;
end;
$function$;
  -- accounts.anonymize_account(_account_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.is_account_anonymization_stuck(_account_id bigint)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select coalesce((
    select (internal.process_terminal_facts('accounts', 'account_anonymization', t.account_anonymization_task_id)).task_failure is not null
           or (internal.sql_attempt_facts('accounts', 'account_anonymization', t.account_anonymization_task_id)).num_failures
                >= accounts.account_anonymization_max_attempts()
      from accounts.account_anonymization_task t
     where t.account_id = _account_id), false)
$function$;
  -- accounts.is_account_anonymization_stuck(_account_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.kickoff_account_anonymization(_account_id bigint)
 RETURNS bigint
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select (internal.start_process('accounts', 'account_anonymization', 'accounts.account_anonymization_supervisor',
                                 'account_id', _account_id)).root_id
$function$;
  -- accounts.kickoff_account_anonymization(_account_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.kickoff_account_deletion(_account_id bigint, OUT account_deletion_task_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _root record;
begin
  if _account_id is null then
    validation_failure_message := 'account_id is required';
  elsif not exists (select 1 from accounts.account a where a.account_id = _account_id) then
    validation_failure_message := format('account %s not found', _account_id);
  else
    _root := internal.start_process('accounts', 'account_deletion', 'accounts.account_deletion_supervisor',
                                    'account_id', _account_id);
    account_deletion_task_id := _root.root_id;
    if _root.created then
      insert into accounts.account_flag (account_id, flag) values (_account_id, 'deleted') on conflict do nothing;
    end if;
  end if;
end;
$function$;
  -- accounts.kickoff_account_deletion(_account_id bigint, OUT account_deletion_task_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.prune_finished_processes(_payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object('success', true, 'payload', accounts.prune_finished_processes_at(now(), 10000))
$function$;
  -- accounts.prune_finished_processes(_payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION accounts.prune_finished_processes_at(_now timestamp with time zone, _limit integer)
 RETURNS jsonb
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object(
    'account_deletion',
    (select count(*) from internal.prune_finished_roots('accounts', 'account_deletion', _now, _limit)),
    'account_anonymization',
    (select count(*) from internal.prune_finished_roots('accounts', 'account_anonymization', _now, _limit)))
$function$;
  -- accounts.prune_finished_processes_at(_now timestamp with time zone, _limit integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.assert_process_root(_process text, _root_id bigint)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _found boolean;
begin
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _root_id is null then
    raise exception 'root_id must not be null' using errcode = '22004';
  end if;
  execute format('select exists (select 1 from %s r where r.%I = $1)',
                 admin.process_table(_process, '_task'), _process || '_task_id')
    into _found using _root_id;
  if not _found then
    raise exception '% % does not exist', _process, _root_id using errcode = '23503';
  end if;
end;
$function$;
  -- admin.assert_process_root(_process text, _root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.assert_task_type(_task_type text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _task_type is not null
     and not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
end;
$function$;
  -- admin.assert_task_type(_task_type text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.cancel_tasks(_task_ids bigint[], _reason text DEFAULT NULL::text)
 RETURNS TABLE(task_id bigint, result text)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.cancel_tasks_at(now(), _task_ids, _reason)
$function$;
  -- admin.cancel_tasks(_task_ids bigint[], _reason text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.cancel_tasks_at(_now timestamp with time zone, _task_ids bigint[], _reason text)
 RETURNS TABLE(task_id bigint, result text)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select c.task_id, c.result from queues.cancel_tasks_at(_now, _task_ids, _reason) c
$function$;
  -- admin.cancel_tasks_at(_now timestamp with time zone, _task_ids bigint[], _reason text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.cancel_tasks_matching(_task_type text, _state text, _limit integer, _reason text DEFAULT NULL::text)
 RETURNS TABLE(task_id bigint, result text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _ids bigint[];
begin
  perform admin.assert_task_type(_task_type);
  if _state is not null and _state not in ('waiting', 'scheduled', 'ready', 'retrying') then
    raise exception 'state must be waiting, scheduled, ready or retrying to cancel by filter, got %', quote_literal(left(_state, 100))
      using errcode = '22023';
  end if;
  if _limit is null or _limit not between 1 and 1000 then
    raise exception 'limit must be between 1 and 1000, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  _ids := array(
    -- the claim index and the lease-held tasks (sql/queues/lease_held.sql: one whose claim
    -- lease expired is ready)
    select p.task_id from queues.task_pending_or_held p
     where (_task_type is null or p.task_type = _task_type)
       and admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, now())
           = any (case when _state is null then array['waiting', 'scheduled', 'ready', 'retrying'] else array[_state] end)
     order by p.task_id
     limit _limit);
  if cardinality(_ids) > 0 then
    return query select * from admin.cancel_tasks_at(now(), _ids, _reason);
  end if;
end;
$function$;
  -- admin.cancel_tasks_matching(_task_type text, _state text, _limit integer, _reason text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.capacity(_task_type text DEFAULT NULL::text)
 RETURNS TABLE(task_type text, pending bigint, ready bigint, running bigint, active_workers bigint, completed_in_window bigint, window_workers bigint, window_seconds integer, tasks_per_worker_hour double precision, estimated_hours_to_drain double precision, workers_needed_1h bigint, workers_needed_4h bigint, workers_needed_8h bigint)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.capacity_at(now(), _task_type, 3600, 600)
$function$;
  -- admin.capacity(_task_type text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.capacity_at(_now timestamp with time zone, _task_type text, _window_seconds integer, _dead_after_seconds integer)
 RETURNS TABLE(task_type text, pending bigint, ready bigint, running bigint, active_workers bigint, completed_in_window bigint, window_workers bigint, window_seconds integer, tasks_per_worker_hour double precision, estimated_hours_to_drain double precision, workers_needed_1h bigint, workers_needed_4h bigint, workers_needed_8h bigint)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET enable_nestloop TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _window integer := coalesce(_window_seconds, 3600);
  _dead_after integer := coalesce(_dead_after_seconds, 600);
  _first bigint;
  _queued_types text[];
  _pending bigint[];
  _ready bigint[];
  _running bigint[];
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_type is not null
     and not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '23503', hint = 'Known task types are listed in queues.task_type.';
  end if;
  if _window not between 60 and 604800 then
    raise exception 'window_seconds must be between 60 and 604800 (7 days), got %', _window
      using errcode = '22023';
  end if;
  if _dead_after not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead_after
      using errcode = '22023';
  end if;

  _first := admin.first_task_id_after(_now - make_interval(secs => _window));
  -- The queue's counts per type, a statement of their own: it reads the lease-held
  -- tasks' facts (partitioned) by correlated probes, which no argument of this call
  -- prunes, so after its first calls in a session PL/pgSQL keeps its generic plan instead
  -- of planning it over every partition at each call (inside the statement below, planned
  -- for each call to prune by _first, it was about 2 ms of planning with 10,000,000 tasks
  -- in history).
  select coalesce(array_agg(q.task_type), '{}'), coalesce(array_agg(q.pending), '{}'),
         coalesce(array_agg(q.ready), '{}'), coalesce(array_agg(q.running), '{}')
    into _queued_types, _pending, _ready, _running
    from (select p.task_type,
                 sum(p.tasks) as pending,
                 coalesce(sum(p.tasks) filter (where p.available_at <= _now), 0) as ready,
                 coalesce(sum(p.tasks) filter (where p.available_at > _now and p.current_lease_id is not null), 0) as running
            from queues.task_pending_or_held_counts p
           where _task_type is null or p.task_type = _task_type
           group by p.task_type) q;
  return query
  with types as (
    select t.task_type from queues.task_type t
     where _task_type is null or t.task_type = _task_type
  ),
  -- (the counts above)
  queue as (
    select * from unnest(_queued_types, _pending, _ready, _running) as q(task_type, pending, ready, running)
  ),
  -- Completions in the window by completed_at (index range scan), with their type, as
  -- runs that end together (admin.completion_runs_between): n completions each.
  completion as materialized (
    select c.task_type, c.task_lease_id, c.completed_at, c.task_id, c.started_at, c.completions as n
      from admin.completion_runs_between(_now - make_interval(secs => _window), _now) c
     where _task_type is null or c.task_type = _task_type
  ),
  -- The run of each completing lease: its worker, its start (the completion's, else a
  -- start mark, else the lease) and its end. The leases of tasks enqueued in the window (ids from _first on)
  -- are one range of task_lease's primary key and of claim_lease's (a claim lease lives
  -- in the set of its largest task id, so one naming a task from _first on is in that
  -- range), joined at once (a claim lease by its id: one row per claim, not one per task
  -- it names); a completion of an older task probes its lease
  -- (queues.task_lease_at); each start mark is a primary-key probe (a scalar
  -- subquery, written once after the three ways of finding the lease: each reference to a
  -- partitioned table is planned over all its partitions, at each call, and the three
  -- copies were about a fifth of the call with 10,000,000 tasks in history). A lease names
  -- its worker by key (queues.worker_name), or by id if written
  -- before that key existed: a worker counts once per way it is named (twice, for one
  -- window, if it ran across that migration). A completion without a lease (cancelled,
  -- abandoned) names none and ran nowhere.
  completion_run as (
    select x.task_type, x.worker_key, x.worker_id,
           greatest(coalesce(x.started_at,
                             (select st.started_at from queues.task_lease_started st
                               where st.task_id = x.task_id and st.task_lease_id = x.task_lease_id),
                             x.leased_at),
                    _now - make_interval(secs => _window)) as run_from,
           x.run_to, x.n
      from (select c.task_type, l.worker_key, l.worker_id, c.completed_at as run_to,
                   c.task_id, c.task_lease_id, c.started_at, l.leased_at, c.n
              from completion c
              join (select y.task_id, y.task_lease_id, y.worker_key, y.worker_id, y.leased_at
                      from queues.task_lease y
                     where y.task_id >= _first) l
                on l.task_id = c.task_id and l.task_lease_id = c.task_lease_id
             where c.task_id >= _first
            union all
            -- a claim lease by its id alone (one row per claim, its array not unnested: a
            -- completion under a claim lease is of a task it names)
            select c.task_type, l.worker_key, null, c.completed_at, c.task_id, c.task_lease_id, c.started_at,
                   l.leased_at, c.n
              from completion c
              join (select y.task_lease_id, y.worker_key, y.leased_at
                      from queues.claim_lease y
                     where y.task_id >= _first) l
                on l.task_lease_id = c.task_lease_id
             where c.task_id >= _first
            union all
            select c.task_type, l.worker_key, l.worker_id, c.completed_at, c.task_id, c.task_lease_id, c.started_at,
                   l.leased_at, c.n
              from completion c
             cross join lateral (select y.worker_key, y.worker_id, y.leased_at
                                   from queues.task_lease_at(c.task_id, c.task_lease_id) y limit 1) l
             where c.task_id < _first) x
  ),
  -- Busy time per type and worker: the union of its runs (gaps and islands: a run that
  -- starts after every earlier run of the worker ended opens a new island).
  run_marked as (
    select r.*,
           max(r.run_to) over (partition by r.task_type, r.worker_key, r.worker_id
                               order by r.run_from, r.run_to
                               rows between unbounded preceding and 1 preceding) as before_to
      from completion_run r
  ),
  run_island as (
    select m.*,
           count(*) filter (where m.before_to is null or m.run_from > m.before_to)
             over (partition by m.task_type, m.worker_key, m.worker_id order by m.run_from, m.run_to
                   rows between unbounded preceding and current row) as island
      from run_marked m
  ),
  busy as (
    select i.task_type,
           count(distinct (i.worker_key, i.worker_id)) as workers,
           sum(i.runs) as runs,
           sum(extract(epoch from i.island_to - i.island_from)) as seconds
      from (select r.task_type, r.worker_key, r.worker_id, sum(r.n) as runs,
                   min(r.run_from) as island_from, max(r.run_to) as island_to
              from run_island r
             group by r.task_type, r.worker_key, r.worker_id, r.island) i
     group by i.task_type
  ),
  recent as (
    select c.task_type, sum(c.n)::bigint as completed,
           coalesce((select b.workers from busy b where b.task_type = c.task_type), 0) as workers,
           (select b.runs from busy b where b.task_type = c.task_type) as runs,
           (select b.seconds from busy b where b.task_type = c.task_type) as busy_seconds
      from completion c
     group by c.task_type
  ),
  workers as (
    select r.task_type, count(*) as active
      from queues.worker w
     cross join lateral unnest(w.task_types) as r(task_type)
     where w.stopped_at is null
       and w.last_seen_at > _now - make_interval(secs => _dead_after)
     group by r.task_type
  ),
  figures as (
    select ty.task_type,
           coalesce(q.pending, 0) as pending,
           coalesce(q.ready, 0) as ready,
           coalesce(q.running, 0) as running,
           coalesce(w.active, 0) as active,
           coalesce(r.completed, 0) as completed,
           coalesce(r.workers, 0) as workers,
           case when r.runs > 0 and r.busy_seconds > 0
                then r.runs::double precision / (r.busy_seconds::double precision / 3600.0)
           end as rate
      from types ty
      left join queue q on q.task_type = ty.task_type
      left join recent r on r.task_type = ty.task_type
      left join workers w on w.task_type = ty.task_type
  )
  select f.task_type, f.pending, f.ready, f.running, f.active, f.completed, f.workers, _window,
         f.rate,
         case when f.ready = 0 then 0
              when f.rate is null or f.active = 0 then null
              else f.ready / (f.rate * f.active) end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 1))::bigint end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 4))::bigint end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 8))::bigint end
    from figures f
   order by f.task_type;
end;
$function$;
  -- admin.capacity_at(_now timestamp with time zone, _task_type text, _window_seconds integer, _dead_after_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.clear_task_limit(_task_type text, _scope text, _group_key text)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select queues.clear_task_limit(_task_type, _scope, _group_key)
$function$;
  -- admin.clear_task_limit(_task_type text, _scope text, _group_key text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.clear_throttle(_key_kind text, _key text)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select queues.clear_throttle(_key_kind, _key, 'api')
$function$;
  -- admin.clear_throttle(_key_kind text, _key text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.completion_counts_between(_from timestamp with time zone, _to timestamp with time zone)
 RETURNS TABLE(completed_at timestamp with time zone, outcome text, task_type text, completions bigint)
 LANGUAGE sql
 STABLE
AS $function$
  select c.completed_at, c.outcome,
         coalesce(c.task_type, (select x.task_type from queues.task x where x.task_id = c.task_id)), 1::bigint
    from queues.task_completed c
   where c.completed_at > _from and c.completed_at <= _to
  union all
  select r.completed_at, 'succeeded', r.task_type, cardinality(r.task_ids)::bigint
    from queues.completion_round r
   where r.completed_at > _from and r.completed_at <= _to
$function$;
  -- admin.completion_counts_between(_from timestamp with time zone, _to timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.completion_runs_between(_from timestamp with time zone, _to timestamp with time zone)
 RETURNS TABLE(task_type text, task_lease_id bigint, completed_at timestamp with time zone, task_id bigint, started_at timestamp with time zone, completions bigint)
 LANGUAGE sql
 STABLE
AS $function$
  select c.task_type, c.task_lease_id, c.completed_at, max(c.task_id), min(c.started_at), count(*)
    from (select c.task_id, c.task_lease_id, c.completed_at, c.started_at,
                 coalesce(c.task_type, (select x.task_type from queues.task x where x.task_id = c.task_id)) as task_type
            from queues.task_completed c
           where c.completed_at > _from and c.completed_at <= _to) c
   group by c.task_type, c.task_lease_id, c.completed_at,
            case when c.task_lease_id is not null and (c.started_at is null or c.started_at > c.completed_at)
                 then c.task_id end
  union all
  select r.task_type, g.task_lease_id, r.completed_at, g.task_id,
         timestamptz 'epoch' + g.started_us * interval '1 microsecond', g.completions
    from queues.completion_round r
   cross join lateral (select min(u.us) as first_us, max(u.us) as last_us, count(u.us) as known,
                              min(u.lease) as lease, max(u.lease) as last_lease, count(u.lease) as leased,
                              count(*) as completions
                         from unnest(r.started_us, r.task_lease_ids) as u(us, lease)) s
   cross join lateral (select s.known = s.completions and s.leased = s.completions and s.lease = s.last_lease
                              and timestamptz 'epoch' + s.last_us * interval '1 microsecond' <= r.completed_at
                                as common) k
   cross join lateral (
     select s.lease as task_lease_id, r.task_id, s.first_us as started_us, s.completions
      where k.common
     union all
     select u.task_lease_id, max(u.task_id), min(u.started_us), count(*)
       from unnest(r.task_ids, r.task_lease_ids, r.started_us) as u(task_id, task_lease_id, started_us)
      where not k.common
      group by u.task_lease_id,
               case when u.task_lease_id is not null
                         and (u.started_us is null
                              or timestamptz 'epoch' + u.started_us * interval '1 microsecond' > r.completed_at)
                    then u.task_id end) g
   where r.completed_at > _from and r.completed_at <= _to
$function$;
  -- admin.completion_runs_between(_from timestamp with time zone, _to timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.completion_stats(_window_seconds integer DEFAULT NULL::integer)
 RETURNS TABLE(task_type text, outcome text, completed bigint, timed bigint, duration_sum double precision, duration_buckets bigint[])
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.completion_stats_at(now(), _window_seconds)
$function$;
  -- admin.completion_stats(_window_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.completion_stats_at(_now timestamp with time zone, _window_seconds integer)
 RETURNS TABLE(task_type text, outcome text, completed bigint, timed bigint, duration_sum double precision, duration_buckets bigint[])
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _window integer := coalesce(_window_seconds, 3600);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 604800 then
    raise exception 'window_seconds must be between 60 and 604800 (7 days), got %', _window
      using errcode = '22023';
  end if;
  return query
  with recent as (
    select c.task_type, c.outcome, date_part('epoch', c.completed_at - l.leased_at) as seconds
      from admin.completions_between(_now - make_interval(secs => _window), _now) c
      left join lateral (select y.leased_at from queues.task_lease_at(c.task_id, c.task_lease_id) y limit 1) l on true
  ),
  totals as (
    select r.task_type, r.outcome, count(*) as completed, count(r.seconds) as timed,
           coalesce(sum(r.seconds), 0) as duration_sum
      from recent r
     group by r.task_type, r.outcome
  ),
  buckets as (
    select b.task_type, b.outcome, array_agg(b.n order by b.i) as counts
      from (select r.task_type, r.outcome, u.i, count(*) filter (where r.seconds <= u.b) as n
              from recent r
             cross join unnest(admin.duration_buckets()) with ordinality as u(b, i)
             group by 1, 2, 3) b
     group by b.task_type, b.outcome
  )
  select t.task_type, t.outcome, t.completed, t.timed, t.duration_sum, b.counts
    from totals t
    join buckets b on b.task_type = t.task_type and b.outcome = t.outcome
   order by 1, 2;
end;
$function$;
  -- admin.completion_stats_at(_now timestamp with time zone, _window_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.completions_between(_from timestamp with time zone, _to timestamp with time zone)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, completed_at timestamp with time zone, outcome text, task_type text, started_at timestamp with time zone)
 LANGUAGE sql
 STABLE
AS $function$
  select c.task_id, c.task_lease_id, c.completed_at, c.outcome,
         coalesce(c.task_type, (select x.task_type from queues.task x where x.task_id = c.task_id)),
         c.started_at
    from queues.task_completed c
   where c.completed_at > _from and c.completed_at <= _to
  union all
  -- Plain successes, from the completion rounds in the window (completion_round's
  -- completed_at index), one row per task they name.
  select u.task_id, u.task_lease_id, r.completed_at, 'succeeded', r.task_type,
         timestamptz 'epoch' + u.started_us * interval '1 microsecond'
    from queues.completion_round r
   cross join lateral unnest(r.task_ids, r.task_lease_ids, r.started_us) as u(task_id, task_lease_id, started_us)
   where r.completed_at > _from and r.completed_at <= _to
$function$;
  -- admin.completions_between(_from timestamp with time zone, _to timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.duration_buckets()
 RETURNS double precision[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select array[0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]::double precision[] $function$;
  -- admin.duration_buckets(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.first_task_id_after(_ts timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _lo bigint;
  _hi bigint;
  _mid bigint;
  _at timestamptz;
begin
  select t.task_id into _lo from queues.task t order by t.task_id limit 1;
  select t.task_id + 1 into _hi from queues.task t order by t.task_id desc limit 1;
  if _lo is null then
    return 1;
  end if;
  while _lo < _hi loop
    _mid := _lo + (_hi - _lo) / 2;
    select t.enqueued_at into _at from queues.task t where t.task_id >= _mid order by t.task_id limit 1;
    if _at > _ts then
      _hi := _mid;
    else
      _lo := _mid + 1;
    end if;
  end loop;
  return _lo;
end;
$function$;
  -- admin.first_task_id_after(_ts timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.get_task(_task_id bigint)
 RETURNS jsonb
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select admin.get_task_at(now(), _task_id)
$function$;
  -- admin.get_task(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.get_task_at(_now timestamp with time zone, _task_id bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _result jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;

  select jsonb_build_object(
           'task', to_jsonb(t) || jsonb_build_object(
             'state', coalesce(c.outcome,
                               admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)),
             'available_at', p.available_at,
             'current_lease_id', p.current_lease_id,
             'type_timeout_ms', (select x.timeout_ms from queues.task_type_timeouts() x
                                  where x.task_type = t.task_type)),
           'leases', coalesce((
             select jsonb_agg(jsonb_build_object(
                      'task_lease_id', l.task_lease_id, 'worker_id', l.worker_id,
                      'leased_at', l.leased_at, 'expires_at', l.expires_at,
                      'released_at', l.released_at, 'revoked_at', l.revoked_at, 'extensions', l.extensions,
                      'live', coalesce(l.task_lease_id = p.current_lease_id and p.available_at > _now, false))
                      order by l.task_lease_id)
               from queues.task_lease_effective_of(t.task_id) l), '[]'::jsonb),
           'errors', coalesce((
             select jsonb_agg(to_jsonb(e) - 'task_id' order by e.error_id)
               from queues.error e where e.task_id = t.task_id), '[]'::jsonb),
           -- task_type is the task's own, given above.
           'completion', case when c.task_id is not null then to_jsonb(c) - 'task_id' - 'task_type' end)
    into _result
    from queues.task t
    -- its claim-index row, or the row its claim lease gives a lease-held task
    left join lateral (select x.* from queues.task_pending_or_held_of(t.task_id) x limit 1) p on true
    left join lateral (select e.* from queues.task_end_of(t.task_id) e limit 1) c on true
   where t.task_id = _task_id;

  if _result is null then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  return _result || admin.task_retry_facts(_task_id) || admin.task_dashboard_facts(_task_id)
         || queues.task_progress_facts(_task_id) || queues.task_dependency_facts(_task_id, _now);
end;
$function$;
  -- admin.get_task_at(_now timestamp with time zone, _task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.history_status()
 RETURNS jsonb
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select admin.history_status_at(now())
$function$;
  -- admin.history_status(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.history_status_at(_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _status jsonb;
  _last_id bigint;
  _next_lower bigint;
  _default record;
  _sets jsonb;
  _set record;
  _first record;
  _probes jsonb := '{}';
  _parts jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  _status := queues.history_summary_at(_now);
  _last_id := (_status ->> 'last_task_id')::bigint;
  _next_lower := (_status -> 'next_drop' ->> 'lower_bound')::bigint;

  -- The default partition, read by itself (normally empty).
  select (select t.task_id from queues.task_default t order by t.task_id limit 1) as first_task_id,
         (select t.enqueued_at from queues.task_default t order by t.task_id limit 1) as first_enqueued_at,
         (select max(t.task_id) from queues.task_default t) as last_task_id,
         (select count(*) from queues.task_default t) as tasks,
         (select count(*) from queues.task_default t
           where not exists (select 1 from queues.task_end_of(t.task_id) c)) as pending_tasks
    into _default;

  -- Every set once, with its pending count (a range count of queues.task_pending, and its
  -- lease-held tasks) and its
  -- row of queues.history_set_measured if it is done (its range below the last task id,
  -- no pending task) and maintenance measured it.
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'partition_name', p.partition_name,
           'estimated_tasks', p.estimated_tasks, 'is_default', p.is_default, 'created_at', c.created_at,
           'pending', pe.pending, 'measured', m.lower_bound is not null, 'first_task_id', m.first_task_id,
           'first_enqueued_at', m.first_enqueued_at, 'last_task_id', m.last_task_id,
           'table_bytes', m.table_bytes, 'index_bytes', m.index_bytes, 'measured_at', m.measured_at)), '[]')
    into _sets
    from queues.history_sets() p
    left join queues.history_partition_created c on c.lower_bound = p.lower_bound and not p.is_default
   cross join lateral (select (select count(*) from queues.task_pending tp
                                where not p.is_default and tp.task_id >= p.lower_bound and tp.task_id < p.upper_bound)
                              -- and the lease-held tasks (no claim-index row, sql/queues/lease_held.sql)
                              + (select count(*) from queues.lease_held_tasks h
                                  where not p.is_default and h.task_id >= p.lower_bound and h.task_id < p.upper_bound)
                              -- and the tasks in ready batches (sql/queues/ready_batch.sql)
                              + case when p.is_default then 0
                                     else queues.batched_count_between(p.lower_bound, p.upper_bound) end
                                as pending) pe
    left join queues.history_set_measured m
      on m.lower_bound = p.lower_bound and m.upper_bound = p.upper_bound
     and not p.is_default and p.upper_bound <= _last_id and pe.pending = 0;

  -- The oldest and newest task of each set that is not measured and may hold one (not
  -- above the last task id), by primary key, each read given its set's bounds as values
  -- so that it is planned for that set's partition only.
  for _set in
    select x.lower_bound, x.upper_bound
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, is_default boolean, measured boolean)
     where not x.is_default and not x.measured and x.lower_bound <= _last_id
  loop
    execute 'select (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_task_id,
                    (select t.enqueued_at from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_enqueued_at,
                    (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id desc limit 1) as last_task_id'
      into _first using _set.lower_bound, _set.upper_bound;
    _probes := _probes || jsonb_build_object(_set.lower_bound::text, to_jsonb(_first));
  end loop;

  -- The answer: sizes from the measurement, or from one queues.history_set_bytes call for
  -- every set that is not measured.
  with s as (
    select x.*, coalesce(x.first_task_id, (_probes -> x.lower_bound::text ->> 'first_task_id')::bigint) as first_id,
           coalesce(x.first_enqueued_at, (_probes -> x.lower_bound::text ->> 'first_enqueued_at')::timestamptz) as first_at,
           coalesce(x.last_task_id, (_probes -> x.lower_bound::text ->> 'last_task_id')::bigint) as last_id
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, partition_name text,
                                       estimated_tasks bigint, is_default boolean, created_at timestamptz,
                                       pending bigint, measured boolean, first_task_id bigint,
                                       first_enqueued_at timestamptz, last_task_id bigint, table_bytes bigint,
                                       index_bytes bigint, measured_at timestamptz)
  ),
  sized as (
    select * from queues.history_set_bytes(array(select s.lower_bound from s where not s.measured))
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', s.lower_bound, 'upper_bound', s.upper_bound, 'name', s.partition_name,
           'is_default', s.is_default, 'estimated_tasks', s.estimated_tasks,
           'total_bytes', coalesce(s.table_bytes, b.table_bytes) + coalesce(s.index_bytes, b.index_bytes),
           'table_bytes', coalesce(s.table_bytes, b.table_bytes),
           'index_bytes', coalesce(s.index_bytes, b.index_bytes),
           'tasks', case when s.is_default then _default.tasks else coalesce(s.last_id - s.first_id + 1, 0) end,
           'first_task_id', case when s.is_default then _default.first_task_id else s.first_id end,
           'first_enqueued_at', case when s.is_default then _default.first_enqueued_at else s.first_at end,
           'last_task_id', case when s.is_default then _default.last_task_id else s.last_id end,
           'pending_tasks', case when s.is_default then _default.pending_tasks else s.pending end,
           'measured_at', s.measured_at,
           'created_at', s.created_at,
           'state', case when s.is_default then 'default'
                         when s.lower_bound > _last_id then 'ahead'
                         when s.upper_bound > _last_id then 'current'
                         when s.lower_bound = _next_lower then 'next_drop'
                         else 'retained' end)
           order by s.is_default, s.lower_bound), '[]')
    into _parts
    from s
    left join sized b on not s.measured and b.lower_bound is not distinct from s.lower_bound;

  return _status || jsonb_build_object(
    'now', _now,
    'lock_timeout_ms', (select s.lock_timeout_ms from queues.history_setting s),
    'partitions', _parts,
    'totals', (select jsonb_build_object(
                 'sets', count(*) filter (where not (x ->> 'is_default')::boolean),
                 'tasks', coalesce(sum((x ->> 'tasks')::bigint), 0),
                 'table_bytes', coalesce(sum((x ->> 'table_bytes')::bigint), 0),
                 'index_bytes', coalesce(sum((x ->> 'index_bytes')::bigint), 0),
                 'total_bytes', coalesce(sum((x ->> 'total_bytes')::bigint), 0))
                 from jsonb_array_elements(_parts) x),
    'recent_drops', coalesce((
      select jsonb_agg(jsonb_build_object(
               'lower_bound', d.lower_bound, 'upper_bound', d.upper_bound, 'tasks', d.tasks,
               'last_completed_at', d.last_completed_at, 'dropped_at', d.dropped_at)
             order by d.history_partition_dropped_id desc)
        from (select * from queues.history_partition_dropped x
               order by x.history_partition_dropped_id desc limit 10) d), '[]'),
    'maintenance', (
      select jsonb_build_object(
               'schedule', s.name, 'cron', s.cron, 'enabled', s.enabled,
               'next_fire_at', s.next_fire_at, 'last_fire_at', s.last_fire_at,
               'last_run', (
                 select jsonb_build_object(
                          'fire_at', r.fire_at, 'outcome', r.outcome, 'task_id', r.task_id,
                          'task_state', coalesce(
                            (select c.outcome from queues.task_end_of(r.task_id) c limit 1),
                            (select admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)
                               from queues.task_pending_or_held_of(r.task_id) p limit 1)),
                          'report', (select x.result -> 'payload' from queues.task_result x
                                      where x.task_id = r.task_id order by x.task_lease_id desc limit 1))
                   from schedules.schedule_run r
                  where r.schedule_id = s.schedule_id
                  order by r.fire_at desc limit 1))
        from schedules.list_schedules() s
       where s.name = 'queue_history_maintenance'));
end;
$function$;
  -- admin.history_status_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_api_changes(_task_id bigint, _limit integer, _before_id bigint)
 RETURNS TABLE(api_change_id bigint, changed_at timestamp with time zone, user_name text, user_level text, request_id text, method text, route text, action text, task_ids bigint[], task_type text, schedule_name text, worker_id text, input jsonb, answer jsonb)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _n integer := coalesce(_limit, 50);
begin
  if _n < 1 or _n > 500 then
    raise exception 'limit must be between 1 and 500, got %', _n using errcode = '22023';
  end if;
  if _task_id is null then
    -- Newest first by the primary key, stopping after _n rows.
    return query
      select c.api_change_id, c.changed_at, c.user_name, c.user_level, c.request_id, c.method, c.route,
             c.action, c.task_ids, c.task_type, c.schedule_name, c.worker_id, c.input, c.answer
        from admin.api_change c
       where c.api_change_id < coalesce(_before_id, 9223372036854775807)
       order by c.api_change_id desc
       limit _n;
  else
    -- The GIN index on task_ids finds the changes that named the task.
    return query
      select c.api_change_id, c.changed_at, c.user_name, c.user_level, c.request_id, c.method, c.route,
             c.action, c.task_ids, c.task_type, c.schedule_name, c.worker_id, c.input, c.answer
        from admin.api_change c
       where c.task_ids @> array[_task_id]
         and c.api_change_id < coalesce(_before_id, 9223372036854775807)
       order by c.api_change_id desc
       limit _n;
  end if;
end;
$function$;
  -- admin.list_api_changes(_task_id bigint, _limit integer, _before_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_dead_letters(_task_type text DEFAULT NULL::text, _limit integer DEFAULT NULL::integer, _before_task_id bigint DEFAULT NULL::bigint)
 RETURNS TABLE(task_id bigint, task_type text, payload jsonb, outcome text, completed_at timestamp with time zone, last_error text, attempts integer)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_sort TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
declare
  _page integer := admin.page_limit(_limit);
  _lower bigint;
  _upper bigint;
  _found bigint;
  _remaining integer;
begin
  perform admin.assert_task_type(_task_type);
  if _before_task_id is not null and _before_task_id < 1 then
    raise exception 'before_task_id must be a positive task id, got %', _before_task_id
      using errcode = '22023';
  end if;
  _remaining := _page;
  for _lower, _upper in
    -- A range without bounds (a task in the default partition): every task id.
    select coalesce(w.lower_bound, -9223372036854775808), coalesce(w.upper_bound, 9223372036854775807)
      from queues.history_walk(_before_task_id) w
     order by w.lower_bound desc nulls first
  loop
    return query
    select c.task_id, t.task_type, t.payload, c.outcome, c.completed_at,
           (select e.error_message from queues.error e
             where e.task_id = c.task_id
               and e.task_id >= _lower and e.task_id < _upper
             order by e.error_id desc limit 1),
           (select count(*)::integer from queues.task_leases_of(c.task_id))
      from queues.task_completed c
     -- lateral + limit 1: the completions drive, each task probed by key
     cross join lateral (select x.task_type, x.payload from queues.task x
                          where x.task_id = c.task_id and x.task_id >= _lower and x.task_id < _upper
                          limit 1) t
     -- The view's outcome test, in a form the partial index's predicate follows from.
     where c.outcome in ('abandoned', 'failed')
       and (c.outcome = 'abandoned' or not t.payload ? 'error_handler')
       and not exists (select 1 from queues.task_redriven r
                        where r.task_id = c.task_id
                          and r.task_id >= _lower and r.task_id < _upper)
       and c.task_id >= _lower and c.task_id < _upper
       and (_task_type is null or t.task_type = _task_type)
     order by c.task_id desc
     limit _remaining;
    get diagnostics _found = row_count;
    _remaining := _remaining - _found;
    exit when _remaining <= 0;
  end loop;
end;
$function$;
  -- admin.list_dead_letters(_task_type text, _limit integer, _before_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_process_roots(_process text, _limit integer DEFAULT NULL::integer, _before_root_id bigint DEFAULT NULL::bigint)
 RETURNS TABLE(root_id bigint, created_at timestamp with time zone, status text, subject jsonb)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _page integer := admin.page_limit(_limit);
  _key text := _process || '_task_id';
begin
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _before_root_id is not null and _before_root_id < 1 then
    raise exception 'before_root_id must be a positive id, got %', _before_root_id using errcode = '22023';
  end if;
  return query execute format(
    'select r.%1$I, r.created_at,
            case when exists (select 1 from %3$s s where s.%1$I = r.%1$I) then ''succeeded''
                 when exists (select 1 from %4$s x where x.%1$I = r.%1$I) then ''failed''
                 else ''running'' end,
            to_jsonb(r) - %1$L - ''created_at''
       from %2$s r
      where $1 is null or r.%1$I < $1
      order by r.%1$I desc
      limit $2',
    _key, admin.process_table(_process, '_task'),
    admin.process_table(_process, '_task_succeeded'), admin.process_table(_process, '_task_failed'))
  using _before_root_id, _page;
end;
$function$;
  -- admin.list_process_roots(_process text, _limit integer, _before_root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_process_roots_at(_now timestamp with time zone, _process text, _limit integer, _before_root_id bigint)
 RETURNS TABLE(root_id bigint, created_at timestamp with time zone, status text, subject jsonb, attempts bigint, stuck_descendants integer, last_fact_at timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _page integer := admin.page_limit(_limit);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _before_root_id is not null and _before_root_id < 1 then
    raise exception 'before_root_id must be a positive id, got %', _before_root_id using errcode = '22023';
  end if;
  return query
  select (t ->> 'root_id')::bigint, (t ->> 'created_at')::timestamptz,
         case when (t ->> 'stuck_descendants')::integer > 0 and t ->> 'status' = 'running' then 'stuck' else t ->> 'status' end,
         t -> 'subject', (t ->> 'attempts')::bigint, (t ->> 'stuck_descendants')::integer, (t ->> 'last_fact_at')::timestamptz
    from (select admin.process_tree_at(_now, _process, r.root_id, null) as t
            from admin.list_process_roots(_process, _page, _before_root_id) r) x
   order by case when (t ->> 'stuck_descendants')::integer > 0 and t ->> 'status' = 'running' then 0
                 else array_position(array['stuck', 'failed', 'running', 'succeeded'], t ->> 'status') - 1 end,
            (t ->> 'root_id')::bigint desc;
end;
$function$;
  -- admin.list_process_roots_at(_now timestamp with time zone, _process text, _limit integer, _before_root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_process_roots_ranked(_process text, _limit integer DEFAULT NULL::integer, _before_root_id bigint DEFAULT NULL::bigint)
 RETURNS TABLE(root_id bigint, created_at timestamp with time zone, status text, subject jsonb, attempts bigint, stuck_descendants integer, last_fact_at timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.list_process_roots_at(now(), _process, _limit, _before_root_id)
$function$;
  -- admin.list_process_roots_ranked(_process text, _limit integer, _before_root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_processes()
 RETURNS TABLE(process text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select p.process from admin.processes() p order by 1
$function$;
  -- admin.list_processes(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_queues()
 RETURNS TABLE(task_type text, description text, paused boolean, paused_at timestamp with time zone, pause_reason text, scheduled bigint, ready bigint, running bigint, retrying bigint, workers text[])
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.list_queues_at(now())
$function$;
  -- admin.list_queues(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_queues_at(_now timestamp with time zone)
 RETURNS TABLE(task_type text, description text, paused boolean, paused_at timestamp with time zone, pause_reason text, scheduled bigint, ready bigint, running bigint, retrying bigint, workers text[])
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with pending as (
    select p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state,
           sum(p.tasks) as n
      -- the claim index and the lease-held tasks, counted per claim lease
      -- (sql/queues/lease_held.sql)
      from queues.task_pending_or_held_counts p
     group by 1, 2
  ),
  open_pause as (
    select distinct on (p.task_type) p.task_type, p.paused_at, p.reason
      from queues.task_type_paused p
     where not exists (select 1 from queues.task_type_resumed r where r.task_type_paused_id = p.task_type_paused_id)
     order by p.task_type, p.task_type_paused_id desc
  )
  select t.task_type, t.description, op.task_type is not null, op.paused_at, op.reason,
         coalesce((select n from pending x where x.task_type = t.task_type and x.state = 'scheduled'), 0),
         coalesce((select n from pending x where x.task_type = t.task_type and x.state = 'ready'), 0),
         coalesce((select n from pending x where x.task_type = t.task_type and x.state = 'running'), 0),
         coalesce((select n from pending x where x.task_type = t.task_type and x.state = 'retrying'), 0),
         coalesce((select array_agg(w.worker_id order by w.worker_id) from queues.worker w
                    where t.task_type = any (w.task_types) and w.stopped_at is null
                      and w.last_seen_at > _now - interval '10 minutes'), '{}')
    from queues.task_type t
    left join open_pause op on op.task_type = t.task_type
   order by t.task_type
$function$;
  -- admin.list_queues_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_schedules(_runs integer DEFAULT NULL::integer)
 RETURNS TABLE(name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text, enabled boolean, last_fire_at timestamp with time zone, next_fire_at timestamp with time zone, updated_at timestamp with time zone, last_runs jsonb, time_zone text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.list_schedules_at(now(), _runs)
$function$;
  -- admin.list_schedules(_runs integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_schedules_at(_now timestamp with time zone, _runs integer)
 RETURNS TABLE(name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text, enabled boolean, last_fire_at timestamp with time zone, next_fire_at timestamp with time zone, updated_at timestamp with time zone, last_runs jsonb, time_zone text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _n integer := coalesce(_runs, 5);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _n not between 1 and 20 then
    raise exception 'runs must be between 1 and 20, got %', _n using errcode = '22023';
  end if;
  return query
  select s.name, s.cron, s.task_type, s.payload, s.priority, s.missed_run_policy, s.enabled,
         s.last_fire_at, s.next_fire_at, s.updated_at,
         coalesce((
           select jsonb_agg(jsonb_build_object(
                    'fire_at', r.fire_at, 'outcome', r.outcome, 'task_id', r.task_id,
                    'task_state', coalesce(c.outcome,
                      (select admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)
                         from queues.task_pending_or_held_of(r.task_id) p limit 1)))
                    order by r.fire_at desc)
             from (select * from schedules.schedule_run x
                    where x.schedule_id = s.schedule_id
                    order by x.fire_at desc limit _n) r
             left join lateral (select e.outcome from queues.task_end_of(r.task_id) e limit 1) c on true), '[]'),
         s.time_zone
    from schedules.list_schedules() s;
end;
$function$;
  -- admin.list_schedules_at(_now timestamp with time zone, _runs integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_stale_leases()
 RETURNS TABLE(task_id bigint, task_lease_id bigint, worker_id text, last_seen_at timestamp with time zone, expires_at timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return query
  select s.task_id, s.task_lease_id, s.worker_id, s.last_seen_at, s.expires_at
    from queues.stale_lease s
   order by s.task_id
   limit 1000;
end;
$function$;
  -- admin.list_stale_leases(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_task_types()
 RETURNS TABLE(task_type text, description text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select t.task_type, t.description from queues.task_type t order by t.task_type
$function$;
  -- admin.list_task_types(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_tasks(_task_type text DEFAULT NULL::text, _state text DEFAULT NULL::text, _limit integer DEFAULT NULL::integer, _before_task_id bigint DEFAULT NULL::bigint, _worker_id text DEFAULT NULL::text, _resource_key text DEFAULT NULL::text, _enqueued_from timestamp with time zone DEFAULT NULL::timestamp with time zone, _enqueued_to timestamp with time zone DEFAULT NULL::timestamp with time zone, _payload_path text[] DEFAULT NULL::text[], _payload_value jsonb DEFAULT NULL::jsonb)
 RETURNS TABLE(task_id bigint, task_type text, state text, priority integer, resource_key text, max_attempts integer, lease_count integer, enqueued_at timestamp with time zone, scheduled_at timestamp with time zone, available_at timestamp with time zone, completed_at timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.list_tasks_at(now(), _task_type, _state, _limit, _before_task_id, _worker_id,
                                    _resource_key, _enqueued_from, _enqueued_to, _payload_path, _payload_value)
$function$;
  -- admin.list_tasks(_task_type text, _state text, _limit integer, _before_task_id bigint, _worker_id text, _resource_key text, _enqueued_from timestamp with time zone, _enqueued_to timestamp with time zone, _payload_path text[], _payload_value jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_tasks_at(_now timestamp with time zone, _task_type text, _state text, _limit integer, _before_task_id bigint, _worker_id text, _resource_key text, _enqueued_from timestamp with time zone, _enqueued_to timestamp with time zone, _payload_path text[], _payload_value jsonb)
 RETURNS TABLE(task_id bigint, task_type text, state text, priority integer, resource_key text, max_attempts integer, lease_count integer, enqueued_at timestamp with time zone, scheduled_at timestamp with time zone, available_at timestamp with time zone, completed_at timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _page integer := admin.page_limit(_limit);
  _filters text := '';
  _sql text;
  _worker_key integer;
  _lower bigint;
  _upper bigint;
  _found bigint;
  _remaining integer;
  -- The pending walk's page as task ids, newest first, and the batches' part of it.
  _ids bigint[];
  _more bigint[];
  _cut bigint;
  _batch bigint;
  _last bigint;
  _batch_sql text;
  -- The states _state stands for, and the branch that walks them.
  _states text[] := case _state
                      when 'pending' then array['scheduled', 'ready', 'retrying']
                      when 'claimed' then array['running']
                      when 'completed' then array['succeeded']
                      when 'stale' then array['ready', 'running']
                      else array[_state] end;
  _pending_walk boolean := _states <@ array['waiting', 'scheduled', 'ready', 'running', 'retrying'];
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  if _state is not null and not (_state = any (admin.task_states() || array['pending', 'claimed', 'completed', 'stale'])) then
    raise exception 'unknown state %; expected one of %, or pending, claimed, completed or stale', quote_literal(left(_state, 100)),
      array_to_string(admin.task_states(), ', ') using errcode = '22023';
  end if;
  if _before_task_id is not null and _before_task_id < 1 then
    raise exception 'before_task_id must be a positive task id, got %', _before_task_id
      using errcode = '22023';
  end if;
  if _worker_id is not null and length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _resource_key is not null and length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _enqueued_from is not null and _enqueued_to is not null and _enqueued_from >= _enqueued_to then
    raise exception 'enqueued_from (%) must be before enqueued_to (%)', _enqueued_from, _enqueued_to
      using errcode = '22023';
  end if;
  if (_payload_path is null) <> (_payload_value is null) then
    raise exception 'payload_path and payload_value go together: give both or neither' using errcode = '22023';
  end if;
  if _payload_path is not null and (cardinality(_payload_path) not between 1 and 10
      or exists (select 1 from unnest(_payload_path) e where e is null or length(e) not between 1 and 100)) then
    raise exception 'payload_path must have 1 to 10 keys of 1 to 100 characters each' using errcode = '22023';
  end if;

  if _task_type is not null then _filters := _filters || ' and t.task_type = $2'; end if;
  if _worker_id is not null then
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
    _filters := _filters || ' and exists (select 1 from queues.task_leases_of(t.task_id) l
                                            where (l.worker_key = $14 or l.worker_id = $6)
                                              and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))';
  end if;
  if _resource_key is not null then _filters := _filters || ' and t.resource_key = $7'; end if;
  if _enqueued_from is not null then _filters := _filters || ' and t.enqueued_at >= $8'; end if;
  if _enqueued_to is not null then _filters := _filters || ' and t.enqueued_at < $9'; end if;
  if _payload_path is not null then _filters := _filters || ' and t.payload #> $10 = $11'; end if;

  if _state in ('stale', 'claimed') then
    -- stale: a lease is held (current_lease_id) and either expired or its worker is
    -- silent. claimed: a live lease of a worker that is not silent, whose run has not
    -- started (public.worker_tasks says the same).
    _filters := _filters || case _state when 'stale' then ' and p.current_lease_id is not null and (p.available_at <= $1 or '
                                        else ' and not exists (select 1 from queues.task_lease_started st
                                                                where st.task_id = p.task_id and st.task_lease_id = p.current_lease_id)
                                               and not (' end
                         || 'exists (select 1 from queues.task_lease_at(p.task_id, p.current_lease_id) l
                                       left join queues.worker_name n on n.worker_key = l.worker_key
                                       join queues.worker w on w.worker_id = coalesce(l.worker_id, n.worker_id)
                                      where w.stopped_at is null
                                        and w.last_seen_at < $1 - queues.worker_silence_bound(w.heartbeat_interval_ms)))';
  end if;
  if _pending_walk then
    _sql := 'select p.task_id, p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1),
                    p.priority, t.resource_key, t.max_attempts, p.lease_count,
                    t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
               -- the claim index and the lease-held tasks (sql/queues/lease_held.sql)
               from queues.task_pending_or_held p
              -- lateral + limit 1: one primary-key probe per pending task passed over
              cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
              where not p.batched
                and admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1) = any ($15)
                and ($4::bigint is null or p.task_id < $4)' || _filters || '
              order by p.task_id desc
              limit $5';
    -- One batch's tasks not taken, newer than $17 (the page's last so far), that match.
    _batch_sql := 'select array(
                     select x.task_id
                       from queues.task_ready_batch b
                      cross join lateral unnest(b.task_ids[b.taken + 1:]) x(task_id)
                      cross join lateral (select * from queues.task y where y.task_id = x.task_id limit 1) t
                      where b.task_id = $16
                        and ($4::bigint is null or x.task_id < $4)
                        and ($17::bigint is null or x.task_id > $17)' || _filters || '
                      order by x.task_id desc
                      limit $5)';
  elsif 'succeeded' = any (_states) then
    -- Successes are mostly in completion rounds, which no index lists per task in task id
    -- order: walk queues.task by its primary key, newest first, with each task's end
    -- (queues.task_end_of: a probe of each shape). Most ended tasks succeeded, so the walk
    -- passes over few others.
    _sql := 'select t.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
                    (select count(*)::integer from queues.task_leases_of(t.task_id) l
                        where ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13)),
                    t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
               from queues.task t
              cross join lateral (select e.outcome, e.completed_at from queues.task_end_of(t.task_id) e
                                    where ($12::bigint is null or e.task_id >= $12) and ($13::bigint is null or e.task_id < $13)
                                    limit 1) c
              where c.outcome = any ($15)
                and ($4::bigint is null or t.task_id < $4)
                and ($12::bigint is null or t.task_id >= $12) and ($13::bigint is null or t.task_id < $13)' || _filters || '
              order by t.task_id desc
              limit $5';
  elsif _state is not null then
    _sql := 'select c.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
                    (select count(*)::integer from queues.task_leases_of(c.task_id) l
                        where ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13)),
                    t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
               from queues.task_completed c
              cross join lateral (select * from queues.task x where x.task_id = c.task_id
                                     and ($12::bigint is null or x.task_id >= $12) and ($13::bigint is null or x.task_id < $13)
                                   limit 1) t
              where c.outcome = any ($15)
                and ($4::bigint is null or c.task_id < $4)
                and ($12::bigint is null or c.task_id >= $12) and ($13::bigint is null or c.task_id < $13)' || _filters || '
              order by c.task_id desc
              limit $5';
  else
    _sql := 'select t.task_id, t.task_type,
                    coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1)),
                    t.priority, t.resource_key, t.max_attempts,
                    coalesce(p.lease_count,
                             (select count(*)::integer from queues.task_leases_of(t.task_id) l
                        where ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))),
                    t.enqueued_at, t.scheduled_at, p.available_at, c.completed_at
               from queues.task t
               -- its claim-index row or ready batch, else the claim lease that holds it (a lease-held task:
               -- queues.lease_held_of written out, its probe of the end given the range''s
               -- bounds, so that it reads the range''s partitions only)
               left join lateral (select x.available_at, x.current_lease_id, x.lease_count
                                    from queues.task_pending x where x.task_id = t.task_id
                                  union all
                                  -- (a task in a ready batch: sql/queues/ready_batch.sql)
                                  select b.scheduled_at, null::bigint, 0
                                    from queues.batched_of(t.task_id) b
                                  union all
                                  (select h.expires_at, h.task_lease_id, 1
                                     from queues.claim_lease h
                                    where h.task_range @> t.task_id and h.task_id >= t.task_id
                                      and t.task_id = any (h.task_ids)
                                      and not exists (select 1 from queues.task_end_of(t.task_id) e
                                                       where ($12::bigint is null or e.task_id >= $12)
                                                         and ($13::bigint is null or e.task_id < $13))
                                    order by h.task_lease_id desc
                                    limit 1)
                                  limit 1) p on true
               left join lateral (select e.outcome, e.completed_at from queues.task_end_of(t.task_id) e
                                   where ($12::bigint is null or e.task_id >= $12) and ($13::bigint is null or e.task_id < $13)
                                   limit 1) c on true
              where ($4::bigint is null or t.task_id < $4)
                and ($12::bigint is null or t.task_id >= $12) and ($13::bigint is null or t.task_id < $13)' || _filters || '
              order by t.task_id desc
              limit $5';
  end if;

  if _pending_walk then
    -- A batched task is ready (or scheduled), never leased, with no resource key: other
    -- states and those filters walk the rows alone, as does a queue with no batch.
    if not (_states && array['ready', 'scheduled']) or _state in ('stale', 'claimed')
       or _resource_key is not null or _worker_id is not null
       or not exists (select 1 from queues.task_ready_batch) then
      return query execute _sql
        using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
              _enqueued_from, _enqueued_to, _payload_path, _payload_value, null::bigint, null::bigint, _worker_key,
              _states;
      return;
    end if;
    execute 'select array(select s.task_id from (' || _sql || ') s order by s.task_id desc)' into _ids
      using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, null::bigint, null::bigint, _worker_key,
            _states;
    _cut := case when cardinality(_ids) >= _page then _ids[_page] end;
    -- The batches by their greatest id, newest first (their arrays are read only for the
    -- batches the page reaches); a batch whose greatest id is older than the page's last
    -- task, when the page is full, holds none of the page, nor does any after it.
    for _batch, _last in
      select b.task_id, upper(b.task_range) - 1
        from queues.task_ready_batch b
       where (_before_task_id is null or b.task_id < _before_task_id)
         and (_task_type is null or b.task_type = _task_type)
         and admin.pending_state(b.scheduled_at, null, 0, _now) = any (_states)
       order by upper(b.task_range) desc
    loop
      exit when _cut is not null and _last <= _cut;
      execute _batch_sql into _more
        using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
              _enqueued_from, _enqueued_to, _payload_path, _payload_value, null::bigint, null::bigint, _worker_key,
              _states, _batch, _cut;
      if cardinality(_more) > 0 then
        _ids := array(select x from unnest(_ids || _more) x order by x desc limit _page);
        _cut := case when cardinality(_ids) >= _page then _ids[_page] end;
      end if;
    end loop;
    -- The page's rows, each task's read by its id (a claim since may have taken one: the
    -- states are asked again).
    return query
      select p.task_id, p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now),
             p.priority, t.resource_key, t.max_attempts, p.lease_count,
             t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
        from unnest(_ids) i(task_id)
       cross join lateral queues.task_pending_or_held_of(i.task_id) p
       cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
       where admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) = any (_states)
       order by p.task_id desc;
    return;
  end if;
  _remaining := _page;
  for _lower, _upper in
    select w.lower_bound, w.upper_bound from queues.history_walk(_before_task_id) w
     order by w.lower_bound desc nulls first
  loop
    return query execute _sql
      using _now, _task_type, _state, _before_task_id, _remaining, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, _lower, _upper, _worker_key, _states;
    get diagnostics _found = row_count;
    _remaining := _remaining - _found;
    exit when _remaining <= 0;
  end loop;
end;
$function$;
  -- admin.list_tasks_at(_now timestamp with time zone, _task_type text, _state text, _limit integer, _before_task_id bigint, _worker_id text, _resource_key text, _enqueued_from timestamp with time zone, _enqueued_to timestamp with time zone, _payload_path text[], _payload_value jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_throttles()
 RETURNS TABLE(key_kind text, key text, throttled_until timestamp with time zone, reason text, recorded_at timestamp with time zone, recorded_by text, reports integer)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from queues.active_throttles_at(now())
$function$;
  -- admin.list_throttles(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_workers()
 RETURNS TABLE(worker_id text, task_types text[], status text, started_at timestamp with time zone, last_seen_at timestamp with time zone, stopped_at timestamp with time zone, heartbeat_age_seconds double precision, tasks_in_flight bigint)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.list_workers_at(now(), 600)
$function$;
  -- admin.list_workers(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.list_workers_at(_now timestamp with time zone, _dead_after_seconds integer)
 RETURNS TABLE(worker_id text, task_types text[], status text, started_at timestamp with time zone, last_seen_at timestamp with time zone, stopped_at timestamp with time zone, heartbeat_age_seconds double precision, tasks_in_flight bigint)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with in_flight as (
    -- live leases (bounded by pending work): the pending rows under a lease that has not
    -- expired, and the lease-held tasks of claim leases that have not (no claim-index row:
    -- their claim lease names the worker, sql/queues/lease_held.sql)
    select coalesce(l.worker_id, n.worker_id) as worker_id, count(*) as n
      from (select y.worker_key, y.worker_id
              from queues.task_pending p
             cross join lateral (select y.worker_key, y.worker_id
                                   from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) y
             where p.available_at > _now
            union all
            select h.worker_key, null::text from queues.lease_held_tasks h where h.expires_at > _now) l
      -- a lease names its worker by key (queues.worker_name), or by id if written before
      left join queues.worker_name n on n.worker_key = l.worker_key
     group by 1
  )
  select w.worker_id, w.task_types,
         case when w.stopped_at is not null then 'stopped'
              when w.last_seen_at < _now - make_interval(secs => coalesce(_dead_after_seconds, 600)) then 'stale'
              else 'live' end,
         w.started_at, w.last_seen_at, w.stopped_at,
         extract(epoch from _now - w.last_seen_at)::double precision,
         coalesce(f.n, 0)
    from queues.worker w
    left join in_flight f on f.worker_id = w.worker_id
   order by (w.stopped_at is not null), w.last_seen_at desc, w.worker_id
   limit 1000
$function$;
  -- admin.list_workers_at(_now timestamp with time zone, _dead_after_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.page_limit(_limit integer, _default integer DEFAULT 50)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _limit is null then
    return _default;
  end if;
  if _limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500, got %', _limit using errcode = '22023';
  end if;
  return _limit;
end;
$function$;
  -- admin.page_limit(_limit integer, _default integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.pause_task_type(_task_type text, _reason text DEFAULT NULL::text)
 RETURNS bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select admin.pause_task_type_at(now(), _task_type, _reason)
$function$;
  -- admin.pause_task_type(_task_type text, _reason text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.pause_task_type_at(_now timestamp with time zone, _task_type text, _reason text)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _id bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  if _reason is not null and length(_reason) > 500 then
    raise exception 'reason must be at most 500 characters' using errcode = '22023';
  end if;
  -- One pause or resume of a type at a time.
  perform 1 from queues.task_type t where t.task_type = _task_type for no key update;
  select p.task_type_paused_id into _id
    from queues.task_type_paused p
   where p.task_type = _task_type
     and not exists (select 1 from queues.task_type_resumed r where r.task_type_paused_id = p.task_type_paused_id);
  if _id is null then
    insert into queues.task_type_paused (task_type, paused_at, reason)
    values (_task_type, _now, coalesce(_reason, ''))
    returning task_type_paused_id into _id;
  end if;
  return _id;
end;
$function$;
  -- admin.pause_task_type_at(_now timestamp with time zone, _task_type text, _reason text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.pending_state(_available_at timestamp with time zone, _current_lease_id bigint, _lease_count integer, _now timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  select case
           when _available_at = 'infinity' and _current_lease_id is null then 'waiting'
           when _available_at <= _now then 'ready'
           when _current_lease_id is not null then 'running'
           when _lease_count > 0 then 'retrying'
           else 'scheduled'
         end
$function$;
  -- admin.pending_state(_available_at timestamp with time zone, _current_lease_id bigint, _lease_count integer, _now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.process_children(_process text, _root_id bigint)
 RETURNS TABLE(process text, root_id bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _function text;
begin
  select format('%I.%I', n.nspname, f.proname) into _function
    from admin.processes() p
    join pg_namespace n on n.nspname = p.schema_name
    join pg_proc f on f.pronamespace = n.oid and f.proname = p.process || '_children'
   where p.process = _process and f.pronargs = 1 and f.proargtypes[0] = 'bigint'::regtype
   limit 1;
  if _function is not null then
    return query execute format('select c.process, c.root_id from %s($1) c', _function) using _root_id;
  end if;
end;
$function$;
  -- admin.process_children(_process text, _root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.process_node_at(_now timestamp with time zone, _process text, _root_id bigint, _stuck_after_seconds integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _key text := _process || '_task_id';
  _akey text := _process || '_attempt_id';
  _attempt text := admin.process_table(_process, '_attempt');
  _sql text;
  _node jsonb;
  _status text;
begin
  _sql := format('select jsonb_build_object(
      ''process'', %L::text, ''root_id'', r.%I, ''created_at'', r.created_at,
      ''subject'', to_jsonb(r) - %L - ''created_at'',
      ''succeeded_at'', %s, ''failure'', %s, ''supervisor_runs'', %s,
      ''attempts'', %s, ''failed_attempts'', %s, ''recent_attempts_failed'', %s, ''last_fact_at'', greatest(r.created_at, %s, %s))
    from %s r where r.%I = $1',
    _process, _key, _key,
    case when admin.process_table(_process, '_task_succeeded') is null then 'null::timestamptz'
         else format('(select s.created_at from %s s where s.%I = r.%I)', admin.process_table(_process, '_task_succeeded'), _key, _key) end,
    case when admin.process_table(_process, '_task_failed') is null then 'null::jsonb'
         else format('(select to_jsonb(f) - %L from %s f where f.%I = r.%I)', _key, admin.process_table(_process, '_task_failed'), _key, _key) end,
    case when admin.process_table(_process, '_supervisor_run') is null then '0'
         else format('(select count(*) from %s s where s.%I = r.%I)', admin.process_table(_process, '_supervisor_run'), _key, _key) end,
    case when _attempt is null then '0' else format('(select count(*) from %s a where a.%I = r.%I)', _attempt, _key, _key) end,
    case when _attempt is null or admin.process_table(_process, '_attempt_failed') is null then '0'
         else format('(select count(*) from %s a join %s f on f.%I = a.%I where a.%I = r.%I)',
                     _attempt, admin.process_table(_process, '_attempt_failed'), _akey, _akey, _key, _key) end,
    -- the newest three attempts exist and all failed
    case when _attempt is null or admin.process_table(_process, '_attempt_failed') is null then 'false'
         else format('(select count(*) = 3 and bool_and(f.%I is not null) from (select a.%I from %s a where a.%I = r.%I order by a.%I desc limit 3) a left join %s f on f.%I = a.%I)',
                     _akey, _akey, _attempt, _key, _key, _akey, admin.process_table(_process, '_attempt_failed'), _akey, _akey) end,
    case when admin.process_table(_process, '_supervisor_run') is null then 'null::timestamptz'
         else format('(select max(s.created_at) from %s s where s.%I = r.%I)', admin.process_table(_process, '_supervisor_run'), _key, _key) end,
    case when _attempt is null then 'null::timestamptz' else format('(select max(a.created_at) from %s a where a.%I = r.%I)', _attempt, _key, _key) end,
    admin.process_table(_process, '_task'), _key);
  execute _sql into _node using _root_id;
  if _node is null then
    return null;
  end if;
  _status := case
    when _node ->> 'succeeded_at' is not null then 'succeeded'
    when _node -> 'failure' <> 'null'::jsonb then 'failed'
    when (_node ->> 'recent_attempts_failed')::boolean
      or (_node ->> 'last_fact_at')::timestamptz < _now - make_interval(secs => coalesce(_stuck_after_seconds, 600)) then 'stuck'
    else 'running' end;
  return _node || jsonb_build_object('status', _status, 'progress', admin.process_progress(_process, _root_id));
end;
$function$;
  -- admin.process_node_at(_now timestamp with time zone, _process text, _root_id bigint, _stuck_after_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.process_progress(_process text, _root_id bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _function text;
  _progress jsonb;
begin
  select format('%I.%I', n.nspname, f.proname) into _function
    from admin.processes() p
    join pg_namespace n on n.nspname = p.schema_name
    join pg_proc f on f.pronamespace = n.oid and f.proname = p.process || '_progress'
   where p.process = _process and f.pronargs = 1 and f.proargtypes[0] = 'bigint'::regtype
   limit 1;
  if _function is null then
    return null;
  end if;
  execute format('select %s($1)', _function) into _progress using _root_id;
  return _progress;
end;
$function$;
  -- admin.process_progress(_process text, _root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.process_table(_process text, _suffix text)
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select format('%I.%I', n.nspname, c.relname)
    from admin.processes() p
    join pg_namespace n on n.nspname = p.schema_name
    join pg_class c on c.relnamespace = n.oid and c.relname = p.process || _suffix and c.relkind = 'r'
   where p.process = _process
$function$;
  -- admin.process_table(_process text, _suffix text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.process_timeline(_process text, _root_id bigint)
 RETURNS TABLE(at timestamp with time zone, process text, root_id bigint, fact text, attempt_id bigint, detail jsonb)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _key text := _process || '_task_id';
  _attempt_key text := _process || '_attempt_id';
  _attempt text;
  _parts text[] := '{}';
  _table text;
  _child record;
  _pruned internal.process_pruned;
begin
  begin
    perform admin.assert_process_root(_process, _root_id);
  exception when foreign_key_violation then
    -- A root that domain retention removed: one 'pruned' row says when and why.
    _pruned := internal.process_root_pruned(_process, _root_id);
    if _pruned.process_pruned_id is null then
      raise;
    end if;
    return query select _pruned.pruned_at, _process, _root_id, 'pruned'::text, null::bigint,
                        jsonb_build_object('finished_before', _pruned.finished_before,
                                           'pruned_at', _pruned.pruned_at);
    return;
  end;
  _attempt := admin.process_table(_process, '_attempt');

  _parts := _parts || format(
    'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint, to_jsonb(f) - %L - ''created_at''
       from %s f where f.%I = $1',
    _process, _root_id, 'started', _key, admin.process_table(_process, '_task'), _key);
  foreach _table in array array['_supervisor_run', '_task_succeeded', '_task_failed'] loop
    if admin.process_table(_process, _table) is not null then
      _parts := _parts || format(
        'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint,
                to_jsonb(f) - %L - %L - ''created_at''
           from %s f where f.%I = $1',
        _process, _root_id,
        case _table when '_supervisor_run' then 'supervisor_run'
                    when '_task_succeeded' then 'succeeded' else 'failed' end,
        _key, _process || _table || '_id', admin.process_table(_process, _table), _key);
    end if;
  end loop;
  if _attempt is not null then
    _parts := _parts || format(
      'select f.created_at, %L::text, %s::bigint, ''attempt''::text, f.%I, to_jsonb(f) - %L - %L - ''created_at''
         from %s f where f.%I = $1',
      _process, _root_id, _attempt_key, _key, _attempt_key, _attempt, _key);
    foreach _table in array array['_attempt_succeeded', '_attempt_failed'] loop
      if admin.process_table(_process, _table) is not null then
        _parts := _parts || format(
          'select f.created_at, %L::text, %s::bigint, %L::text, f.%I, to_jsonb(f) - %L - ''created_at''
             from %s f join %s a on a.%I = f.%I where a.%I = $1',
          _process, _root_id, substr(_table, 2), _attempt_key, _attempt_key,
          admin.process_table(_process, _table), _attempt, _attempt_key, _attempt_key, _key);
      end if;
    end loop;
    if exists (select 1 from pg_attribute a
                where a.attrelid = _attempt::regclass and a.attname = 'task_id' and not a.attisdropped) then
      -- history_partition_dropped has a row per dropped set: a few hundred a year.
      _parts := _parts || format(
        'select d.dropped_at, %L::text, %s::bigint, ''queue_history_pruned''::text, null::bigint,
                jsonb_build_object(''task_ids'', jsonb_agg(a.task_id order by a.task_id),
                                   ''lower_bound'', d.lower_bound, ''upper_bound'', d.upper_bound,
                                   ''last_completed_at'', d.last_completed_at, ''dropped_at'', d.dropped_at)
           from %s a
           join queues.history_partition_dropped d on a.task_id >= d.lower_bound and a.task_id < d.upper_bound
          where a.%I = $1
          group by d.history_partition_dropped_id',
        _process, _root_id, _attempt, _key);
    end if;
  end if;

  return query execute
    'select * from (' || array_to_string(_parts, ' union all ') || ') t order by 1, 4'
    using _root_id;

  -- The root's children (admin.process_children), each with its own timeline.
  for _child in select * from admin.process_children(_process, _root_id) loop
    return query select * from admin.process_timeline(_child.process, _child.root_id);
  end loop;
end;
$function$;
  -- admin.process_timeline(_process text, _root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.process_tree(_process text, _root_id bigint)
 RETURNS jsonb
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select admin.process_tree_at(now(), _process, _root_id, null)
$function$;
  -- admin.process_tree(_process text, _root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.process_tree_at(_now timestamp with time zone, _process text, _root_id bigint, _stuck_after_seconds integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _node jsonb;
  _children jsonb := '[]';
  _child record;
  _sub jsonb;
  _bad integer := 0;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _stuck_after_seconds is not null and _stuck_after_seconds not between 1 and 604800 then
    raise exception 'stuck_after_seconds must be between 1 and 604800, got %', _stuck_after_seconds using errcode = '22023';
  end if;
  perform admin.assert_process_root(_process, _root_id);
  _node := admin.process_node_at(_now, _process, _root_id, _stuck_after_seconds);
  for _child in select * from admin.process_children(_process, _root_id) loop
    _sub := admin.process_tree_at(_now, _child.process, _child.root_id, _stuck_after_seconds);
    _bad := _bad + (_sub ->> 'stuck_descendants')::integer
            + case when _sub ->> 'status' in ('stuck', 'failed') then 1 else 0 end;
    _children := _children || jsonb_build_array(_sub);
  end loop;
  return _node || jsonb_build_object('children', _children, 'stuck_descendants', _bad);
end;
$function$;
  -- admin.process_tree_at(_now timestamp with time zone, _process text, _root_id bigint, _stuck_after_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.processes()
 RETURNS TABLE(process text, schema_name text)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select p.process, p.schema_name
    from (values ('send_email', 'comms'), ('send_sms', 'comms'), ('file_deletion', 'files'),
                 ('account_deletion', 'accounts'), ('account_anonymization', 'accounts')) p (process, schema_name)
   where to_regnamespace(p.schema_name) is not null
$function$;
  -- admin.processes(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.queue_depth(_window_seconds integer DEFAULT NULL::integer, _bucket_seconds integer DEFAULT NULL::integer)
 RETURNS TABLE(bucket_end timestamp with time zone, task_type text, depth bigint)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.queue_depth_at(now(), _window_seconds, _bucket_seconds)
$function$;
  -- admin.queue_depth(_window_seconds integer, _bucket_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.queue_depth_at(_now timestamp with time zone, _window_seconds integer, _bucket_seconds integer)
 RETURNS TABLE(bucket_end timestamp with time zone, task_type text, depth bigint)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _window integer := coalesce(_window_seconds, 3600);
  _bucket integer := coalesce(_bucket_seconds, 60);
  _from timestamptz;
  _first_id bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 86400 then
    raise exception 'window_seconds must be between 60 and 86400, got %', _window using errcode = '22023';
  end if;
  if _bucket not between 10 and _window or _window / _bucket > 500 then
    raise exception 'bucket_seconds must be between 10 and window_seconds, with at most 500 buckets, got %', _bucket
      using errcode = '22023';
  end if;
  _from := _now - make_interval(secs => _window);
  _first_id := admin.first_task_id_after(_from);
  return query
  -- Materialized: the per-bucket sums below read it once per bucket and type.
  with events as materialized (
    select e.task_type, e.k, sum(e.d) as d
      -- date_part (double precision), not extract (numeric): cheaper per row.
      from (select t.task_type, ceil(date_part('epoch', t.enqueued_at - _from) / _bucket)::integer as k, -1 as d
              from queues.task t
             where t.task_id >= _first_id and t.enqueued_at > _from and t.enqueued_at <= _now
            union all
            -- a round's tasks in one row (admin.completion_counts_between)
            select c.task_type, ceil(date_part('epoch', c.completed_at - _from) / _bucket)::integer, c.completions::integer
              from admin.completion_counts_between(_from, _now) c) e
     group by 1, 2
  ),
  pending as (
    -- the claim index and the lease-held tasks, counted per claim lease (sql/queues/lease_held.sql)
    select p.task_type, sum(p.tasks) as n from queues.task_pending_or_held_counts p group by 1
  )
  select _from + make_interval(secs => i * _bucket), ty.task_type,
         coalesce(pe.n, 0) + coalesce((select sum(ev.d) from events ev where ev.task_type = ty.task_type and ev.k > i), 0)::bigint
    from generate_series(1, ceil(_window::numeric / _bucket)::integer) i
   cross join queues.task_type ty
    left join pending pe on pe.task_type = ty.task_type
   order by 1, 2;
end;
$function$;
  -- admin.queue_depth_at(_now timestamp with time zone, _window_seconds integer, _bucket_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.record_api_change(_user_name text, _user_level text, _request_id text, _method text, _route text, _action text, _task_ids bigint[], _task_type text, _schedule_name text, _worker_id text, _input jsonb, _answer jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _id bigint;
begin
  if _user_name is null then
    raise exception 'user_name must not be null' using errcode = '22004';
  end if;
  if length(_user_name) not between 1 and 100 then
    raise exception 'user_name must be 1 to 100 characters' using errcode = '22023';
  end if;
  if _user_level is null then
    raise exception 'user_level must not be null' using errcode = '22004';
  end if;
  if _user_level not in ('read', 'operator') then
    raise exception 'user_level must be read or operator, got %', quote_literal(_user_level) using errcode = '22023';
  end if;
  if _request_id is null then
    raise exception 'request_id must not be null' using errcode = '22004';
  end if;
  if length(_request_id) not between 1 and 200 then
    raise exception 'request_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _method is null then
    raise exception 'method must not be null' using errcode = '22004';
  end if;
  -- CLI: a change made with the `queue` command line (route: the command, e.g. 'queue cancel').
  if _method not in ('POST', 'PUT', 'PATCH', 'DELETE', 'CLI') then
    raise exception 'method must be POST, PUT, PATCH, DELETE or CLI, got %', quote_literal(_method) using errcode = '22023';
  end if;
  if _route is null then
    raise exception 'route must not be null' using errcode = '22004';
  end if;
  if length(_route) not between 1 and 200 then
    raise exception 'route must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _action is null then
    raise exception 'action must not be null' using errcode = '22004';
  end if;
  if _action !~ '^[a-z][a-z0-9_]{0,62}$' then
    raise exception 'action must be a lowercase name such as cancel_tasks, got %', quote_literal(_action) using errcode = '22023';
  end if;
  if _input is not null and jsonb_typeof(_input) <> 'object' then
    raise exception 'input must be a JSON object, got %', jsonb_typeof(_input) using errcode = '22023';
  end if;
  if _answer is null then
    raise exception 'answer must not be null' using errcode = '22004';
  end if;
  if _task_ids is not null and array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain NULL' using errcode = '22004';
  end if;
  insert into admin.api_change
    (user_name, user_level, request_id, method, route, action, task_ids, task_type, schedule_name, worker_id, input, answer)
  values
    (_user_name, _user_level, _request_id, _method, _route, _action,
     coalesce((select array_agg(distinct t order by t) from unnest(_task_ids) t), '{}'),
     _task_type, _schedule_name, _worker_id, coalesce(_input, '{}'::jsonb), _answer)
  returning api_change_id into _id;
  return _id;
end;
$function$;
  -- admin.record_api_change(_user_name text, _user_level text, _request_id text, _method text, _route text, _action text, _task_ids bigint[], _task_type text, _schedule_name text, _worker_id text, _input jsonb, _answer jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.recover_stale_leases(_dead_after_seconds integer DEFAULT NULL::integer)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, worker_id text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _dead_after integer := coalesce(_dead_after_seconds, 600);
begin
  if _dead_after not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead_after
      using errcode = '22023';
  end if;
  return query
  select r.task_id, r.task_lease_id, r.worker_id from queues.recover_stale_leases(_dead_after) r;
end;
$function$;
  -- admin.recover_stale_leases(_dead_after_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.recover_worker_leases(_worker_id text, _dead_after_seconds integer DEFAULT NULL::integer)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, worker_id text)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.recover_worker_leases_at(now(), _worker_id, _dead_after_seconds)
$function$;
  -- admin.recover_worker_leases(_worker_id text, _dead_after_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.recover_worker_leases_at(_now timestamp with time zone, _worker_id text, _dead_after_seconds integer)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, worker_id text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _dead integer := coalesce(_dead_after_seconds, 600);
  _w queues.worker;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _worker_id is null then
    raise exception 'worker_id must not be null' using errcode = '22004';
  end if;
  if _dead not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead using errcode = '22023';
  end if;
  select * into _w from queues.worker w where w.worker_id = _worker_id;
  if not found then
    raise exception 'worker % is not registered', quote_literal(left(_worker_id, 200)) using errcode = '23503';
  end if;
  if _w.stopped_at is not null then
    raise exception 'worker % stopped at %; it holds no leases to recover', _worker_id, _w.stopped_at using errcode = '55000';
  end if;
  if _w.last_seen_at >= _now - make_interval(secs => _dead) then
    raise exception 'worker % was seen % s ago, within % s: it is not stale', _worker_id,
      round(extract(epoch from _now - _w.last_seen_at)), _dead using errcode = '55000';
  end if;
  perform queues.lock_resource_keys(array(
    select s.task_id from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id));
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of,
  -- as queues.recover_stale_leases_at does).
  perform queues.hold_rows_of(array(
    select s.task_id from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id));
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id
      from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id
  ),
  -- Locked in task id order, as every call that locks several claim-index rows.
  locked as (
    select p.task_id from queues.task_pending p
     where p.task_id = any (array(select s.task_id from stale s))
     order by p.task_id
       for no key update
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
       and p.task_id = any (array(select l.task_id from locked l))
    returning p.task_id, s.task_lease_id, s.worker_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, _now, format('worker %s not seen for %s s (recovered from the dashboard)', r.worker_id, _dead)
      from revoked r
  ),
  key_freed as (
    delete from queues.resource_lease k
     using revoked r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select r.task_id, r.task_lease_id, r.worker_id from revoked r;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$function$;
  -- admin.recover_worker_leases_at(_now timestamp with time zone, _worker_id text, _dead_after_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.redrive_task(_task_id bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  return queues.redrive_task(_task_id);
end;
$function$;
  -- admin.redrive_task(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.redrive_tasks(_task_ids bigint[])
 RETURNS TABLE(task_id bigint, result text, new_task_id bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _id bigint;
  _ids bigint[] := '{}';
  _results text[] := '{}';
  _new_ids bigint[] := '{}';
  _result text;
  _new bigint;
begin
  perform queues.assert_task_ids(_task_ids);
  for _id in select t from unnest(_task_ids) t order by t loop
    _new := null;
    perform 1 from queues.task_completed c where c.task_id = _id for update;
    if not exists (select 1 from queues.task t where t.task_id = _id) then
      _result := 'unknown_task';
    elsif not exists (select 1 from queues.dead_letter d where d.task_id = _id) then
      _result := 'not_a_dead_letter';
    elsif queues.redrive_blocker(_id) is not null then
      _result := 'dependency_not_redriven';
    else
      _new := queues.redrive_task(_id);
      _result := 'redriven';
    end if;
    _ids := _ids || _id;
    _results := _results || _result;
    _new_ids := _new_ids || _new;
  end loop;
  return query
  select i.id, r.result, r.new_id
    from unnest(_task_ids) with ordinality i(id, n)
    join unnest(_ids, _results, _new_ids) r(id, result, new_id) on r.id = i.id
   order by i.n;
end;
$function$;
  -- admin.redrive_tasks(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.redrive_tasks_matching(_task_type text, _limit integer)
 RETURNS TABLE(task_id bigint, result text, new_task_id bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _ids bigint[];
begin
  perform admin.assert_task_type(_task_type);
  if _limit is null or _limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  _ids := array(select d.task_id from admin.list_dead_letters(_task_type, _limit, null) d);
  if cardinality(_ids) > 0 then
    return query select * from admin.redrive_tasks(_ids);
  end if;
end;
$function$;
  -- admin.redrive_tasks_matching(_task_type text, _limit integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.resume_task_type(_task_type text)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select admin.resume_task_type_at(now(), _task_type)
$function$;
  -- admin.resume_task_type(_task_type text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.resume_task_type_at(_now timestamp with time zone, _task_type text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _count integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  perform 1 from queues.task_type t where t.task_type = _task_type for no key update;
  insert into queues.task_type_resumed (task_type_paused_id, resumed_at)
  select p.task_type_paused_id, _now
    from queues.task_type_paused p
   where p.task_type = _task_type
     and not exists (select 1 from queues.task_type_resumed r where r.task_type_paused_id = p.task_type_paused_id);
  get diagnostics _count = row_count;
  if _count > 0 then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _count > 0;
end;
$function$;
  -- admin.resume_task_type_at(_now timestamp with time zone, _task_type text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.run_tasks_now(_task_ids bigint[])
 RETURNS TABLE(task_id bigint, result text)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.run_tasks_now_at(now(), _task_ids)
$function$;
  -- admin.run_tasks_now(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.run_tasks_now_at(_now timestamp with time zone, _task_ids bigint[])
 RETURNS TABLE(task_id bigint, result text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _locked bigint[];
  _moved bigint[];
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform queues.assert_task_ids(_task_ids);
  with locked as (
    select p.task_id, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state
      from queues.task_pending p
     where p.task_id = any (_task_ids)
     order by p.task_id
       for update
  ),
  moved as (
    select m as task_id
      from queues.run_scheduled_now(_now, array(select l.task_id from locked l where l.state = 'scheduled')) m
  )
  select coalesce(array_agg(l.task_id), '{}'), coalesce((select array_agg(m.task_id) from moved m), '{}')
    into _locked, _moved
    from locked l;

  -- A statement after the locks (see queues.cancel_tasks_at).
  return query
  select i.task_id,
         case when m.task_id is not null then 'run_now'
              when l.task_id is not null then 'not_scheduled'
              when coalesce((select true from queues.task_end_of(i.task_id) x limit 1), false) then 'already_completed'
              -- no row and no end: held by the claim lease that took it out of the claim
              -- index (the ready set), so running
              when exists (select 1 from queues.task t where t.task_id = i.task_id) then 'not_scheduled'
              else 'unknown_task' end
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join unnest(_locked) as l(task_id) on l.task_id = i.task_id
    left join unnest(_moved) as m(task_id) on m.task_id = i.task_id
   order by i.n;
end;
$function$;
  -- admin.run_tasks_now_at(_now timestamp with time zone, _task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.set_task_limit(_task_type text, _scope text, _group_key text, _max_running integer, _max_starts integer, _interval_ms integer)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select queues.set_task_limit(_task_type, _scope, _group_key, _max_running, _max_starts,
                               make_interval(secs => _interval_ms / 1000.0))
$function$;
  -- admin.set_task_limit(_task_type text, _scope text, _group_key text, _max_running integer, _max_starts integer, _interval_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.set_task_type_timeout(_task_type text, _timeout_seconds numeric)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _timeout_seconds is not null and _timeout_seconds not between 0.001 and 86400 then
    raise exception 'timeout_seconds must be between 0.001 and 86400, got %', _timeout_seconds using errcode = '22023';
  end if;
  perform queues.set_task_type_timeout(_task_type, (_timeout_seconds * 1000)::integer);
end;
$function$;
  -- admin.set_task_type_timeout(_task_type text, _timeout_seconds numeric): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.task_counts(_window_seconds integer DEFAULT NULL::integer)
 RETURNS TABLE(task_type text, state text, count bigint)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.task_counts_at(now(), _window_seconds)
$function$;
  -- admin.task_counts(_window_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.task_counts_at(_now timestamp with time zone, _window_seconds integer)
 RETURNS TABLE(task_type text, state text, count bigint)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _window integer := coalesce(_window_seconds, 86400);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 2592000 then
    raise exception 'window_seconds must be between 60 and 2592000 (30 days), got %', _window
      using errcode = '22023';
  end if;
  return query
  select p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state,
         sum(p.tasks)
    -- the claim index and the lease-held tasks, counted per claim lease
    from queues.task_pending_or_held_counts p
   group by 1, 2
  union all
  -- a round's tasks counted in one row (admin.completion_counts_between)
  select c.task_type, c.outcome, sum(c.completions)::bigint
    from admin.completion_counts_between(_now - make_interval(secs => _window), _now) c
   group by 1, 2
   order by 1, 2;
end;
$function$;
  -- admin.task_counts_at(_now timestamp with time zone, _window_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.task_dashboard_facts(_task_id bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _results jsonb := '[]';
begin
  if to_regclass('queues.task_result') is not null then
    execute 'select coalesce(jsonb_agg(jsonb_build_object(''task_lease_id'', r.task_lease_id, ''result'', r.result,
                                                         ''recorded_at'', r.recorded_at) order by r.task_lease_id), ''[]'')
               from queues.task_result r where r.task_id = $1'
      into _results using _task_id;
  end if;
  return jsonb_build_object(
    'results', _results,
    'cancellation', (select jsonb_build_object('reason', c.reason, 'cancelled_at', c.cancelled_at)
                       from queues.task_cancelled c where c.task_id = _task_id),
    'run_now_at', (select r.requested_at from queues.task_run_now r where r.task_id = _task_id),
    'type_paused', (select t.task_type = any (queues.paused_task_types()) from queues.task t where t.task_id = _task_id),
    -- The business process the task works for: its payload names the root (X_task_id).
    'process', (select jsonb_build_object('process', p.process, 'root_id', (t.payload ->> (p.process || '_task_id'))::bigint)
                  from queues.task t cross join admin.processes() p
                 where t.task_id = _task_id and t.payload ->> (p.process || '_task_id') ~ '^[0-9]{1,18}$'
                 limit 1),
    'heartbeats', coalesce((
      select jsonb_agg(jsonb_build_object('task_lease_id', x.task_lease_id, 'extended_at', x.extended_at,
                                          'expires_at', x.expires_at) order by x.task_lease_extension_id)
        from queues.task_leases_of(_task_id) l
        join queues.task_lease_extension x on x.task_id = l.task_id and x.task_lease_id = l.task_lease_id), '[]'));
end;
$function$;
  -- admin.task_dashboard_facts(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.task_limits()
 RETURNS TABLE(task_type text, scope text, group_key text, max_running integer, max_starts integer, interval_ms integer, set_at timestamp with time zone, running bigint, starts bigint, held_back bigint)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from queues.task_limit_status_at(now())
$function$;
  -- admin.task_limits(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.task_retry_facts(_task_id bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return jsonb_build_object(
    'failed_attempts', coalesce((
      select jsonb_agg(jsonb_build_object('task_lease_id', f.task_lease_id, 'failed_at', f.failed_at,
                                          'retry_at', f.retry_at) order by f.failed_at)
        from queues.task_attempt_failed f where f.task_id = _task_id), '[]'::jsonb),
    'redriven_to', (select r.new_task_id from queues.task_redriven r where r.task_id = _task_id limit 1),
    'redriven_from', (select r.task_id from queues.task_redriven r where r.new_task_id = _task_id limit 1));
end;
$function$;
  -- admin.task_retry_facts(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.task_states()
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select array['waiting', 'scheduled', 'ready', 'running', 'retrying',
               'succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed']
$function$;
  -- admin.task_states(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.throughput(_window_seconds integer DEFAULT NULL::integer, _bucket_seconds integer DEFAULT NULL::integer)
 RETURNS TABLE(bucket_start timestamp with time zone, task_type text, outcome text, completed bigint)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from admin.throughput_at(now(), _window_seconds, _bucket_seconds)
$function$;
  -- admin.throughput(_window_seconds integer, _bucket_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION admin.throughput_at(_now timestamp with time zone, _window_seconds integer, _bucket_seconds integer)
 RETURNS TABLE(bucket_start timestamp with time zone, task_type text, outcome text, completed bigint)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _window integer := coalesce(_window_seconds, 3600);
  _bucket integer := coalesce(_bucket_seconds, 60);
  _start timestamptz;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 604800 then
    raise exception 'window_seconds must be between 60 and 604800 (7 days), got %', _window
      using errcode = '22023';
  end if;
  if _bucket not between 10 and _window then
    raise exception 'bucket_seconds must be between 10 and window_seconds (%), got %', _window, _bucket
      using errcode = '22023';
  end if;
  if _window / _bucket > 1440 then
    raise exception 'at most 1440 buckets, got %', _window / _bucket using errcode = '54000';
  end if;
  _start := _now - make_interval(secs => _window);
  return query
  -- date_bin: the start of the bucket (counted from _start) holding completed_at; the
  -- numeric arithmetic of extract(epoch ...) cost more than reading the row.
  -- A round's tasks share its instant: counted in one row (admin.completion_counts_between).
  select date_bin(make_interval(secs => _bucket), c.completed_at, _start),
         c.task_type, c.outcome, sum(c.completions)::bigint
    from admin.completion_counts_between(_start, _now) c
   group by 1, 2, 3
   order by 1, 2, 3;
end;
$function$;
  -- admin.throughput_at(_now timestamp with time zone, _window_seconds integer, _bucket_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION api.request_account_deletion(_account_id bigint, OUT account_deletion_task_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _kickoff record;
begin
  _kickoff := accounts.kickoff_account_deletion(_account_id);
  account_deletion_task_id := _kickoff.account_deletion_task_id;
  validation_failure_message := _kickoff.validation_failure_message;
end;
$function$;
  -- api.request_account_deletion(_account_id bigint, OUT account_deletion_task_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.channel_attempt(_channel text, payload jsonb, OUT attempt_id bigint, OUT refusal jsonb)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _process text := 'send_' || _channel;
  _refusal text;
begin
  attempt_id := internal.id_from_payload(payload, _process || '_attempt_id');
  if attempt_id is null then
    refusal := internal.validation_failure(_process || '_attempt_id must be a positive integer');
    return;
  end if;
  _refusal := internal.channel_attempt_refusal('comms', _process, attempt_id);
  if _refusal is not null then
    attempt_id := null;
    refusal := internal.validation_failure(_refusal);
  end if;
end;
$function$;
  -- comms.channel_attempt(_channel text, payload jsonb, OUT attempt_id bigint, OUT refusal jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.channel_send_process(_channel text, OUT process internal.channel_process, OUT message_table text)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if to_regclass(format('%I.%I', 'comms', _channel || '_message')) is null then
    raise exception 'channel %: table comms.%_message does not exist', _channel, _channel using errcode = '22023';
  end if;
  process := internal.get_channel_process('comms', 'send_' || _channel);
  message_table := _channel || '_message';
end;
$function$;
  -- comms.channel_send_process(_channel text, OUT process internal.channel_process, OUT message_table text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.create_channel_message(_channel text, _idempotency_key text, OUT created boolean, OUT message_id bigint, OUT task_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _root text := ((comms.channel_send_process(_channel)).process).process_name || '_task';
begin
  insert into comms.message (channel, idempotency_key) values (_channel, _idempotency_key)
  on conflict (idempotency_key) do nothing
  returning message.message_id into message_id;
  created := message_id is not null;
  if created then
    return;
  end if;

  -- A repeated request: what the first one created.
  execute format('select m.message_id, t.%3$I from comms.message m left join %1$I.%2$I t on t.message_id = m.message_id
                   where m.idempotency_key = $1',
                 'comms', _root, _root || '_id')
    into message_id, task_id using _idempotency_key;
  if task_id is null then
    message_id := null;
    validation_failure_message := 'idempotency_key was already used for a message on another channel';
  end if;
end;
$function$;
  -- comms.create_channel_message(_channel text, _idempotency_key text, OUT created boolean, OUT message_id bigint, OUT task_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.get_email_payload(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _attempt record;
  _provider_payload jsonb;
begin
  select * into _attempt from comms.channel_attempt('email', payload);
  if _attempt.refusal is not null then
    return _attempt.refusal;
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
           'message_id', m.message_id,
           'idempotency_key', format('%s:send_email_attempt:%s', internal.idempotency_namespace(), a.send_email_attempt_id),
           'from_address', m.from_address,
           'to_address', m.to_address,
           'subject', m.subject,
           'html', m.html,
           'text', m.text_body,
           'reply_to', m.reply_to))
    into _provider_payload
    from comms.send_email_attempt a
    join comms.send_email_task t using (send_email_task_id)
    join comms.email_message m using (message_id)
   where a.send_email_attempt_id = _attempt.attempt_id;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$function$;
  -- comms.get_email_payload(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.get_sms_payload(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _attempt record;
  _provider_payload jsonb;
begin
  select * into _attempt from comms.channel_attempt('sms', payload);
  if _attempt.refusal is not null then
    return _attempt.refusal;
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
           'message_id', m.message_id,
           'idempotency_key', format('%s:send_sms_attempt:%s', internal.idempotency_namespace(), a.send_sms_attempt_id),
           'to_number', m.to_number,
           'from_number', m.from_number,
           'body', m.body))
    into _provider_payload
    from comms.send_sms_attempt a
    join comms.send_sms_task t using (send_sms_task_id)
    join comms.sms_message m using (message_id)
   where a.send_sms_attempt_id = _attempt.attempt_id;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$function$;
  -- comms.get_sms_payload(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.is_e164_number(_number text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select _number is not null and _number ~ '^\+[1-9][0-9]{6,14}$'
$function$;
  -- comms.is_e164_number(_number text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.is_email_address(_address text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select _address is not null and length(_address) <= 320
     and _address ~ '^(?!\.)(?!.*\.\.)([A-Za-z0-9_''+\-\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\-]*\.)+[A-Za-z]{2,}$'
$function$;
  -- comms.is_email_address(_address text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.kickoff_channel_send(_channel text, _message_id bigint, _scheduled_at timestamp with time zone, OUT task_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _p record;
  _at timestamptz := coalesce(_scheduled_at, now());
  _root text;
  _found boolean;
begin
  select * into _p from comms.channel_send_process(_channel);
  _root := (_p.process).process_name || '_task';
  if _message_id is null then
    validation_failure_message := 'message_id is required';
    return;
  end if;
  execute format('select exists (select 1 from %I.%I m where m.message_id = $1)', 'comms', _p.message_table)
    into _found using _message_id;
  if not _found then
    validation_failure_message := format('%s message %s not found', _channel, _message_id);
    return;
  end if;

  execute format('insert into %1$I.%2$I (message_id, scheduled_at) values ($1, $2)
                  on conflict (message_id) do nothing returning %3$I', 'comms', _root, _root || '_id')
    into task_id using _message_id, _at;

  if task_id is null then
    -- Already kicked off: its supervisor is running. No-op.
    execute format('select t.%3$I from %1$I.%2$I t where t.message_id = $1', 'comms', _root, _root || '_id')
      into task_id using _message_id;
    return;
  end if;

  perform internal.enqueue_channel_supervisor(_p.process, task_id, _at);
end;
$function$;
  -- comms.kickoff_channel_send(_channel text, _message_id bigint, _scheduled_at timestamp with time zone, OUT task_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.kickoff_send_email(_message_id bigint, _scheduled_at timestamp with time zone DEFAULT NULL::timestamp with time zone, OUT send_email_task_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select k.task_id, k.validation_failure_message from comms.kickoff_channel_send('email', _message_id, _scheduled_at) k $function$;
  -- comms.kickoff_send_email(_message_id bigint, _scheduled_at timestamp with time zone, OUT send_email_task_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.kickoff_send_sms(_message_id bigint, _scheduled_at timestamp with time zone DEFAULT NULL::timestamp with time zone, OUT send_sms_task_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select k.task_id, k.validation_failure_message from comms.kickoff_channel_send('sms', _message_id, _scheduled_at) k $function$;
  -- comms.kickoff_send_sms(_message_id bigint, _scheduled_at timestamp with time zone, OUT send_sms_task_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.prune_finished_processes(_payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object('success', true, 'payload', comms.prune_finished_processes_at(now(), 10000))
$function$;
  -- comms.prune_finished_processes(_payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.prune_finished_processes_at(_now timestamp with time zone, _limit integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _email bigint[];
  _sms bigint[];
begin
  select coalesce(array_agg((p.root ->> 'message_id')::bigint), '{}') into _email
    from internal.prune_finished_roots('comms', 'send_email', _now, _limit) p;
  select coalesce(array_agg((p.root ->> 'message_id')::bigint), '{}') into _sms
    from internal.prune_finished_roots('comms', 'send_sms', _now, _limit) p;
  -- Their messages go with them (email_message and sms_message cascade).
  delete from comms.message m where m.message_id = any (_email || _sms);
  return jsonb_build_object('send_email', cardinality(_email), 'send_sms', cardinality(_sms));
end;
$function$;
  -- comms.prune_finished_processes_at(_now timestamp with time zone, _limit integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.record_email_failure(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select comms.send_email_record_attempt_failure(payload) $function$;
  -- comms.record_email_failure(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.record_email_success(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select comms.send_email_record_attempt_success(payload) $function$;
  -- comms.record_email_success(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.record_sms_failure(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select comms.send_sms_record_attempt_failure(payload) $function$;
  -- comms.record_sms_failure(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.record_sms_success(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select comms.send_sms_record_attempt_success(payload) $function$;
  -- comms.record_sms_success(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.register_message_channel(_channel text, _max_attempts integer, _max_supervisor_runs integer, _backoff_cap_seconds integer)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _process text := 'send_' || _channel;
  -- The names every template below refers to, by position.
  _names text[] := array[
    'comms',                                      -- 1
    _process || '_task',                          -- 2  the root
    _process || '_task_id',                       -- 3  its key
    '_' || _process || '_task_id',                -- 4  the facts' argument
    _process,                                     -- 5  the process, as a literal
    _process || '_supervisor_facts',              -- 6
    _process || '_supervisor',                    -- 7
    'record_' || _channel || '_success',          -- 8
    'record_' || _channel || '_failure',          -- 9
    'kickoff_' || _process,                       -- 10
    _channel,                                     -- 11 the channel, as a literal
    -- 12 to 14: the process's own functions (internal.create_channel_process_functions),
    -- which the entry points call directly rather than through the generic blocks'
    -- dynamic SQL (a statement and a plan fewer per call)
    _process || '_supervise',                     -- 12
    _process || '_record_attempt_success',        -- 13
    _process || '_record_attempt_failure'         -- 14
  ];
  _table text;
begin
  foreach _table in array array[_channel || '_message', _process || '_task'] loop
    if to_regclass(format('%I.%I', 'comms', _table)) is null then
      raise exception 'channel %: table comms.% does not exist', _channel, _table using errcode = '22023';
    end if;
  end loop;

  perform internal.register_channel_process('comms', _process, _channel,
    _supervisor => format('%I.%I', 'comms', _names[7]),
    _before_handler => format('%I.%I', 'comms', 'get_' || _channel || '_payload'),
    _success_handler => format('%I.%I', 'comms', _names[8]),
    _error_handler => format('%I.%I', 'comms', _names[9]),
    _max_attempts => _max_attempts, _max_supervisor_runs => _max_supervisor_runs,
    _backoff_cap_seconds => _backoff_cap_seconds);

  execute format($f$
create or replace function %1$I.%6$I(
  %4$I bigint,
  out has_task_succeeded  boolean,
  out task_failure        text,
  out has_success         boolean,
  out num_attempts        integer,
  out num_failures        integer,
  out num_outstanding     integer,
  out num_runs            integer,
  out scheduled_at        timestamptz,
  out has_unknown_outcome boolean,
  out throttled_until     timestamptz
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $body$
  select f.has_task_succeeded, f.task_failure, f.has_success, f.num_attempts, f.num_failures,
         f.num_outstanding, f.num_runs, t.scheduled_at, f.has_unknown_outcome,
         queues.throttled_until('task_type', %11$L)
    from %1$I.%2$I t
   cross join lateral internal.channel_process_facts(%1$L, %5$L, t.%3$I) f
   where t.%3$I = %4$I
$body$;

create or replace function %1$I.%7$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select %1$I.%12$I(payload) $body$;

create or replace function %1$I.%8$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select %1$I.%13$I(payload) $body$;

create or replace function %1$I.%9$I(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select %1$I.%14$I(payload) $body$;

create or replace function %1$I.%10$I(
  _message_id bigint,
  _scheduled_at timestamptz default null,
  out %3$I bigint,
  out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $body$ select k.task_id, k.validation_failure_message from comms.kickoff_channel_send(%11$L, _message_id, _scheduled_at) k $body$;
$f$, variadic _names);

  execute format('revoke execute on function %1$I.%2$I(bigint), %1$I.%3$I(jsonb), %1$I.%4$I(jsonb), %1$I.%5$I(jsonb),
                  %1$I.%6$I(bigint, timestamptz) from public',
                 'comms', _names[6], _names[7], _names[8], _names[9], _names[10]);
end;
$function$;
  -- comms.register_message_channel(_channel text, _max_attempts integer, _max_supervisor_runs integer, _backoff_cap_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_email(_from_address text, _to_address text, _subject text, _html text, _text text DEFAULT NULL::text, _reply_to text DEFAULT NULL::text, _scheduled_at timestamp with time zone DEFAULT NULL::timestamp with time zone, _idempotency_key text DEFAULT NULL::text, OUT message_id bigint, OUT send_email_task_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _message record;
  _kickoff record;
begin
  validation_failure_message := case
    when _from_address is null or length(_from_address) not between 3 and 320
      then 'from_address is required (3 to 320 characters)'
    when not comms.is_email_address(_to_address)
      then 'to_address must be an email address'
    when _subject is null or length(_subject) not between 1 and 998
      then 'subject is required (1 to 998 characters)'
    when _html is null or length(_html) > 1000000
      then 'html is required (at most 1000000 characters)'
    when length(_text) > 1000000
      then 'text must be at most 1000000 characters'
    when _reply_to is not null and not comms.is_email_address(_reply_to)
      then 'reply_to must be an email address'
    when _idempotency_key is not null and length(_idempotency_key) not between 1 and 200
      then 'idempotency_key must be 1 to 200 characters'
  end;
  if validation_failure_message is not null then
    return;
  end if;

  select * into _message from comms.create_channel_message('email', _idempotency_key);
  message_id := _message.message_id;
  if not _message.created then
    -- A repeated request: what the first one created (or why the key cannot be reused).
    send_email_task_id := _message.task_id;
    validation_failure_message := _message.validation_failure_message;
    return;
  end if;

  insert into comms.email_message (message_id, from_address, to_address, subject, html, text_body, reply_to)
  values (message_id, _from_address, _to_address, _subject, _html, _text, _reply_to);

  _kickoff := comms.kickoff_send_email(message_id, _scheduled_at);
  send_email_task_id := _kickoff.send_email_task_id;
end;
$function$;
  -- comms.send_email(_from_address text, _to_address text, _subject text, _html text, _text text, _reply_to text, _scheduled_at timestamp with time zone, _idempotency_key text, OUT message_id bigint, OUT send_email_task_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_email_attempt_refusal(_attempt_id bigint, _verb text)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _root_id bigint;
      _has_outcome boolean;
      _facts record;
    begin
      select a.send_email_task_id,
             (select true from comms.send_email_attempt_succeeded s where s.send_email_attempt_id = a.send_email_attempt_id) is not null
             or (select true from comms.send_email_attempt_failed f where f.send_email_attempt_id = a.send_email_attempt_id) is not null
        into _root_id, _has_outcome
        from comms.send_email_attempt a where a.send_email_attempt_id = _attempt_id;
      if _root_id is null then
        return 'send_email_attempt' || ' ' || _attempt_id || ' not found';
      end if;
      if _has_outcome then
        return 'send_email_attempt' || ' ' || _attempt_id || ' already has an outcome; not ' || _verb || ' it again';
      end if;
      _facts := comms.send_email_process_facts(_root_id);
      if _facts.has_task_succeeded or _facts.task_failure is not null then
        return 'send_email_task' || ' ' || _root_id || ' already ended (' || coalesce(_facts.task_failure, 'succeeded')
               || '); not ' || _verb || ' attempt ' || _attempt_id;
      end if;
      return null;
    end;
    $function$;
  -- comms.send_email_attempt_refusal(_attempt_id bigint, _verb text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_email_close_given_up_attempts(_root_id bigint)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _closed integer;
    begin
      with closed as (
        insert into comms.send_email_attempt_failed (send_email_attempt_id, error_message)
        select a.send_email_attempt_id, internal.queue_gave_up_message(a.task_id)
          from comms.send_email_attempt a
         where a.send_email_task_id = _root_id
           and (select true from comms.send_email_attempt_succeeded s where s.send_email_attempt_id = a.send_email_attempt_id) is null
           and (select true from comms.send_email_attempt_failed f where f.send_email_attempt_id = a.send_email_attempt_id) is null
           and internal.queue_gave_up_message(a.task_id) is not null
        on conflict do nothing
        returning 1)
      select count(*)::integer into _closed from closed;
      return _closed;
    end;
    $function$;
  -- comms.send_email_close_given_up_attempts(_root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_email_process_facts(_root_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT has_unknown_outcome boolean)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    begin
      -- One pass over the root's attempts (its index), each attempt's outcomes probed by
      -- primary key (scalar subqueries: no join order for the planner to get wrong), once
      -- (materialized: each probe is used by several aggregates).
      with attempt as materialized (
        select (select true from comms.send_email_attempt_succeeded s where s.send_email_attempt_id = a.send_email_attempt_id) as succeeded,
               (select f.error_message from comms.send_email_attempt_failed f where f.send_email_attempt_id = a.send_email_attempt_id) as failure
          from comms.send_email_attempt a
         where a.send_email_task_id = _root_id
      )
      select (select true from comms.send_email_task_succeeded x where x.send_email_task_id = _root_id) is not null,
             (select x.reason from comms.send_email_task_failed x where x.send_email_task_id = _root_id),
             coalesce(bool_or(a.succeeded), false),
             count(*)::integer,
             (count(*) filter (where a.succeeded is null and a.failure is not null))::integer,
             (count(*) filter (where a.succeeded is null and a.failure is null))::integer,
             (select count(*)::integer from comms.send_email_supervisor_run r where r.send_email_task_id = _root_id),
             coalesce(bool_or(a.succeeded is null and a.failure is not null
                              and internal.is_unknown_outcome(a.failure)), false)
        into has_task_succeeded, task_failure, has_success, num_attempts, num_failures, num_outstanding,
             num_runs, has_unknown_outcome
        from attempt a;
    end;
    $function$;
  -- comms.send_email_process_facts(_root_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT has_unknown_outcome boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_email_record_attempt_failure(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'send_email_attempt_id');
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || 'send_email_attempt_id' || ' must be a positive integer');
      end if;
      perform 1 from comms.send_email_attempt a where a.send_email_attempt_id = _attempt_id;
      if not found then
        return internal.validation_failure('send_email_attempt' || ' ' || _attempt_id || ' not found');
      end if;
      insert into comms.send_email_attempt_failed (send_email_attempt_id, error_message)
      select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
       where (select true from comms.send_email_attempt_succeeded s where s.send_email_attempt_id = _attempt_id) is null
      on conflict do nothing;
      return jsonb_build_object('success', true);
    end;
    $function$;
  -- comms.send_email_record_attempt_failure(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_email_record_attempt_success(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'send_email_attempt_id');
      _root_id bigint;
      _next_task_id bigint;
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || 'send_email_attempt_id' || ' must be a positive integer');
      end if;
      select a.send_email_task_id into _root_id from comms.send_email_attempt a where a.send_email_attempt_id = _attempt_id;
      if _root_id is null then
        return internal.validation_failure('send_email_attempt' || ' ' || _attempt_id || ' not found');
      end if;
      insert into comms.send_email_attempt_succeeded (send_email_attempt_id, worker_payload) values (_attempt_id, payload -> 'worker_payload')
      on conflict do nothing;
      if found then
        -- Wake the supervisor, so the process ends now rather than at its backoff. With
        -- the root's lock (never waited for: a run under way holds it), no run is under
        -- way, and any run that starts waits for this transaction to commit, then sees the
        -- success. So the run the last run scheduled (runs hold the lock one after the
        -- other, so its task has the highest id) will see it: made due now when no worker
        -- has taken it yet, left to its worker when one has. A new run due now is enqueued
        -- when a run holds the lock (it may have read the facts already) or that task is
        -- no longer pending (it ended without scheduling another).
        perform 1 from comms.send_email_task t where t.send_email_task_id = _root_id for no key update skip locked;
        if found then
          select max(r.next_task_id) into _next_task_id from comms.send_email_supervisor_run r where r.send_email_task_id = _root_id;
        end if;
        if _next_task_id is null or queues.run_task_now(_next_task_id) = 'not_pending' then
          perform internal.enqueue_channel_supervisor(internal.get_channel_process('comms', 'send_email'), _root_id, null);
        end if;
      end if;
      return jsonb_build_object('success', true);
    end;
    $function$;
  -- comms.send_email_record_attempt_success(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_email_supervise(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _p internal.channel_process := internal.get_channel_process('comms', 'send_email');
      _task_id bigint := internal.id_from_payload(payload, 'send_email_task_id');
      _facts record;
      _attempt_id bigint;
      _queue_task_id bigint;
      _next_at timestamptz;
      _next_task_id bigint;
    begin
      if _task_id is null then
        return internal.validation_failure('send_email_task_id' || ' must be a positive integer');
      end if;
      -- The check's statement only when it raises (the setting is read in an expression).
      if current_setting('transaction_isolation') <> 'read committed' then
        perform internal.assert_read_committed(_p.supervisor);
      end if;
      -- Lock, then read: facts read after the lock wait include what the last holder
      -- committed. FOR NO KEY UPDATE: inserting a fact that references the root takes FOR
      -- KEY SHARE, which does not wait on it.
      perform 1 from comms.send_email_task t where t.send_email_task_id = _task_id for no key update;
      if not found then
        return internal.validation_failure('send_email_task' || ' ' || _task_id || ' not found');
      end if;
      _facts := comms.send_email_process_facts(_task_id);
      -- An attempt the queue gave up on is among the outstanding ones: closed with a
      -- failure, then the facts read again.
      if _facts.num_outstanding > 0 and comms.send_email_close_given_up_attempts(_task_id) > 0 then
        _facts := comms.send_email_process_facts(_task_id);
      end if;

      if _facts.has_task_succeeded then
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.task_failure is not null then
        return jsonb_build_object('status', _facts.task_failure);
      end if;
      if _facts.has_success then
        insert into comms.send_email_task_succeeded (send_email_task_id) values (_task_id) on conflict do nothing;
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.has_unknown_outcome then
        insert into comms.send_email_task_failed (send_email_task_id, reason) values (_task_id, 'delivery_outcome_unknown') on conflict do nothing;
        return jsonb_build_object('status', 'delivery_outcome_unknown');
      end if;
      if _facts.num_failures >= _p.max_attempts then
        insert into comms.send_email_task_failed (send_email_task_id, reason) values (_task_id, 'max_attempts_reached') on conflict do nothing;
        return jsonb_build_object('status', 'max_attempts_reached',
                                  'payload', jsonb_build_object('num_failures', _facts.num_failures));
      end if;
      if _facts.num_runs >= _p.max_supervisor_runs then
        insert into comms.send_email_task_failed (send_email_task_id, reason) values (_task_id, 'run_limit_reached') on conflict do nothing;
        return jsonb_build_object('status', 'run_limit_reached',
                                  'payload', jsonb_build_object('num_runs', _facts.num_runs));
      end if;

      if _facts.num_outstanding = 0 then
        -- The attempt's id is drawn first (the task's payload names it), its row written
        -- after the enqueue (it names the queue task).
        _attempt_id := nextval(pg_get_serial_sequence('comms.send_email_attempt', 'send_email_attempt_id'));
        _queue_task_id := queues.enqueue_internal(_p.task_type, coalesce('{}'::jsonb, '{}') || jsonb_build_object(
          'task_type', _p.task_type,
          'send_email_task_id', _task_id,
          'send_email_attempt_id', _attempt_id,
          'before_handler', _p.before_handler,
          'success_handler', _p.success_handler,
          'error_handler', _p.error_handler),
          -- One run: the process retries through a new attempt, never a task retry
          -- (a retried send would call the provider again outside the process's count).
          _max_attempts => 1);
        insert into comms.send_email_attempt (send_email_attempt_id, send_email_task_id, task_id) overriding system value
        values (_attempt_id, _task_id, _queue_task_id);
      end if;
      -- While its provider throttles the channel (queues.throttled_until,
      -- sql/queues/throttle.sql), the channel task waits for the claim: the next check is
      -- not before the throttle ends, so a long throttle (a daily quota) does not use up
      -- the process's runs.
      _next_at := greatest(now() + internal.backoff(_facts.num_runs, _p.backoff_cap_seconds),
                           queues.throttled_until('task_type', _p.task_type));
      _next_task_id := internal.enqueue_supervisor_run(_p.supervisor, 'send_email_task_id', _task_id, _next_at);
      -- The run, with the run it scheduled: the success handler wakes that one.
      insert into comms.send_email_supervisor_run (send_email_task_id, next_task_id) values (_task_id, _next_task_id);
      return internal.supervisor_progress(
        case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
        jsonb_build_object('send_email_attempt_id', _attempt_id, 'next_check_at', _next_at));
    end;
    $function$;
  -- comms.send_email_supervise(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_email_supervisor(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select comms.send_email_supervise(payload) $function$;
  -- comms.send_email_supervisor(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_email_supervisor_facts(_send_email_task_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT scheduled_at timestamp with time zone, OUT has_unknown_outcome boolean, OUT throttled_until timestamp with time zone)
 RETURNS record
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select f.has_task_succeeded, f.task_failure, f.has_success, f.num_attempts, f.num_failures,
         f.num_outstanding, f.num_runs, t.scheduled_at, f.has_unknown_outcome,
         queues.throttled_until('task_type', 'email')
    from comms.send_email_task t
   cross join lateral internal.channel_process_facts('comms', 'send_email', t.send_email_task_id) f
   where t.send_email_task_id = _send_email_task_id
$function$;
  -- comms.send_email_supervisor_facts(_send_email_task_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT scheduled_at timestamp with time zone, OUT has_unknown_outcome boolean, OUT throttled_until timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_sms(_to_number text, _body text, _from_number text DEFAULT NULL::text, _scheduled_at timestamp with time zone DEFAULT NULL::timestamp with time zone, _idempotency_key text DEFAULT NULL::text, OUT message_id bigint, OUT send_sms_task_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _message record;
  _kickoff record;
begin
  validation_failure_message := case
    when not comms.is_e164_number(_to_number)
      then 'to_number must be an E.164 number such as +14155550100'
    when _body is null or length(_body) not between 1 and 1600
      then 'body is required (1 to 1600 characters)'
    when _from_number is not null and not comms.is_e164_number(_from_number)
      then 'from_number must be an E.164 number such as +14155550100'
    when _idempotency_key is not null and length(_idempotency_key) not between 1 and 200
      then 'idempotency_key must be 1 to 200 characters'
  end;
  if validation_failure_message is not null then
    return;
  end if;

  select * into _message from comms.create_channel_message('sms', _idempotency_key);
  message_id := _message.message_id;
  if not _message.created then
    -- A repeated request: what the first one created (or why the key cannot be reused).
    send_sms_task_id := _message.task_id;
    validation_failure_message := _message.validation_failure_message;
    return;
  end if;

  insert into comms.sms_message (message_id, to_number, from_number, body)
  values (message_id, _to_number, _from_number, _body);

  _kickoff := comms.kickoff_send_sms(message_id, _scheduled_at);
  send_sms_task_id := _kickoff.send_sms_task_id;
end;
$function$;
  -- comms.send_sms(_to_number text, _body text, _from_number text, _scheduled_at timestamp with time zone, _idempotency_key text, OUT message_id bigint, OUT send_sms_task_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_sms_attempt_refusal(_attempt_id bigint, _verb text)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _root_id bigint;
      _has_outcome boolean;
      _facts record;
    begin
      select a.send_sms_task_id,
             (select true from comms.send_sms_attempt_succeeded s where s.send_sms_attempt_id = a.send_sms_attempt_id) is not null
             or (select true from comms.send_sms_attempt_failed f where f.send_sms_attempt_id = a.send_sms_attempt_id) is not null
        into _root_id, _has_outcome
        from comms.send_sms_attempt a where a.send_sms_attempt_id = _attempt_id;
      if _root_id is null then
        return 'send_sms_attempt' || ' ' || _attempt_id || ' not found';
      end if;
      if _has_outcome then
        return 'send_sms_attempt' || ' ' || _attempt_id || ' already has an outcome; not ' || _verb || ' it again';
      end if;
      _facts := comms.send_sms_process_facts(_root_id);
      if _facts.has_task_succeeded or _facts.task_failure is not null then
        return 'send_sms_task' || ' ' || _root_id || ' already ended (' || coalesce(_facts.task_failure, 'succeeded')
               || '); not ' || _verb || ' attempt ' || _attempt_id;
      end if;
      return null;
    end;
    $function$;
  -- comms.send_sms_attempt_refusal(_attempt_id bigint, _verb text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_sms_close_given_up_attempts(_root_id bigint)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _closed integer;
    begin
      with closed as (
        insert into comms.send_sms_attempt_failed (send_sms_attempt_id, error_message)
        select a.send_sms_attempt_id, internal.queue_gave_up_message(a.task_id)
          from comms.send_sms_attempt a
         where a.send_sms_task_id = _root_id
           and (select true from comms.send_sms_attempt_succeeded s where s.send_sms_attempt_id = a.send_sms_attempt_id) is null
           and (select true from comms.send_sms_attempt_failed f where f.send_sms_attempt_id = a.send_sms_attempt_id) is null
           and internal.queue_gave_up_message(a.task_id) is not null
        on conflict do nothing
        returning 1)
      select count(*)::integer into _closed from closed;
      return _closed;
    end;
    $function$;
  -- comms.send_sms_close_given_up_attempts(_root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_sms_process_facts(_root_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT has_unknown_outcome boolean)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    begin
      -- One pass over the root's attempts (its index), each attempt's outcomes probed by
      -- primary key (scalar subqueries: no join order for the planner to get wrong), once
      -- (materialized: each probe is used by several aggregates).
      with attempt as materialized (
        select (select true from comms.send_sms_attempt_succeeded s where s.send_sms_attempt_id = a.send_sms_attempt_id) as succeeded,
               (select f.error_message from comms.send_sms_attempt_failed f where f.send_sms_attempt_id = a.send_sms_attempt_id) as failure
          from comms.send_sms_attempt a
         where a.send_sms_task_id = _root_id
      )
      select (select true from comms.send_sms_task_succeeded x where x.send_sms_task_id = _root_id) is not null,
             (select x.reason from comms.send_sms_task_failed x where x.send_sms_task_id = _root_id),
             coalesce(bool_or(a.succeeded), false),
             count(*)::integer,
             (count(*) filter (where a.succeeded is null and a.failure is not null))::integer,
             (count(*) filter (where a.succeeded is null and a.failure is null))::integer,
             (select count(*)::integer from comms.send_sms_supervisor_run r where r.send_sms_task_id = _root_id),
             coalesce(bool_or(a.succeeded is null and a.failure is not null
                              and internal.is_unknown_outcome(a.failure)), false)
        into has_task_succeeded, task_failure, has_success, num_attempts, num_failures, num_outstanding,
             num_runs, has_unknown_outcome
        from attempt a;
    end;
    $function$;
  -- comms.send_sms_process_facts(_root_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT has_unknown_outcome boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_sms_record_attempt_failure(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'send_sms_attempt_id');
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || 'send_sms_attempt_id' || ' must be a positive integer');
      end if;
      perform 1 from comms.send_sms_attempt a where a.send_sms_attempt_id = _attempt_id;
      if not found then
        return internal.validation_failure('send_sms_attempt' || ' ' || _attempt_id || ' not found');
      end if;
      insert into comms.send_sms_attempt_failed (send_sms_attempt_id, error_message)
      select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
       where (select true from comms.send_sms_attempt_succeeded s where s.send_sms_attempt_id = _attempt_id) is null
      on conflict do nothing;
      return jsonb_build_object('success', true);
    end;
    $function$;
  -- comms.send_sms_record_attempt_failure(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_sms_record_attempt_success(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'send_sms_attempt_id');
      _root_id bigint;
      _next_task_id bigint;
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || 'send_sms_attempt_id' || ' must be a positive integer');
      end if;
      select a.send_sms_task_id into _root_id from comms.send_sms_attempt a where a.send_sms_attempt_id = _attempt_id;
      if _root_id is null then
        return internal.validation_failure('send_sms_attempt' || ' ' || _attempt_id || ' not found');
      end if;
      insert into comms.send_sms_attempt_succeeded (send_sms_attempt_id, worker_payload) values (_attempt_id, payload -> 'worker_payload')
      on conflict do nothing;
      if found then
        -- Wake the supervisor, so the process ends now rather than at its backoff. With
        -- the root's lock (never waited for: a run under way holds it), no run is under
        -- way, and any run that starts waits for this transaction to commit, then sees the
        -- success. So the run the last run scheduled (runs hold the lock one after the
        -- other, so its task has the highest id) will see it: made due now when no worker
        -- has taken it yet, left to its worker when one has. A new run due now is enqueued
        -- when a run holds the lock (it may have read the facts already) or that task is
        -- no longer pending (it ended without scheduling another).
        perform 1 from comms.send_sms_task t where t.send_sms_task_id = _root_id for no key update skip locked;
        if found then
          select max(r.next_task_id) into _next_task_id from comms.send_sms_supervisor_run r where r.send_sms_task_id = _root_id;
        end if;
        if _next_task_id is null or queues.run_task_now(_next_task_id) = 'not_pending' then
          perform internal.enqueue_channel_supervisor(internal.get_channel_process('comms', 'send_sms'), _root_id, null);
        end if;
      end if;
      return jsonb_build_object('success', true);
    end;
    $function$;
  -- comms.send_sms_record_attempt_success(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_sms_supervise(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _p internal.channel_process := internal.get_channel_process('comms', 'send_sms');
      _task_id bigint := internal.id_from_payload(payload, 'send_sms_task_id');
      _facts record;
      _attempt_id bigint;
      _queue_task_id bigint;
      _next_at timestamptz;
      _next_task_id bigint;
    begin
      if _task_id is null then
        return internal.validation_failure('send_sms_task_id' || ' must be a positive integer');
      end if;
      -- The check's statement only when it raises (the setting is read in an expression).
      if current_setting('transaction_isolation') <> 'read committed' then
        perform internal.assert_read_committed(_p.supervisor);
      end if;
      -- Lock, then read: facts read after the lock wait include what the last holder
      -- committed. FOR NO KEY UPDATE: inserting a fact that references the root takes FOR
      -- KEY SHARE, which does not wait on it.
      perform 1 from comms.send_sms_task t where t.send_sms_task_id = _task_id for no key update;
      if not found then
        return internal.validation_failure('send_sms_task' || ' ' || _task_id || ' not found');
      end if;
      _facts := comms.send_sms_process_facts(_task_id);
      -- An attempt the queue gave up on is among the outstanding ones: closed with a
      -- failure, then the facts read again.
      if _facts.num_outstanding > 0 and comms.send_sms_close_given_up_attempts(_task_id) > 0 then
        _facts := comms.send_sms_process_facts(_task_id);
      end if;

      if _facts.has_task_succeeded then
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.task_failure is not null then
        return jsonb_build_object('status', _facts.task_failure);
      end if;
      if _facts.has_success then
        insert into comms.send_sms_task_succeeded (send_sms_task_id) values (_task_id) on conflict do nothing;
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.has_unknown_outcome then
        insert into comms.send_sms_task_failed (send_sms_task_id, reason) values (_task_id, 'delivery_outcome_unknown') on conflict do nothing;
        return jsonb_build_object('status', 'delivery_outcome_unknown');
      end if;
      if _facts.num_failures >= _p.max_attempts then
        insert into comms.send_sms_task_failed (send_sms_task_id, reason) values (_task_id, 'max_attempts_reached') on conflict do nothing;
        return jsonb_build_object('status', 'max_attempts_reached',
                                  'payload', jsonb_build_object('num_failures', _facts.num_failures));
      end if;
      if _facts.num_runs >= _p.max_supervisor_runs then
        insert into comms.send_sms_task_failed (send_sms_task_id, reason) values (_task_id, 'run_limit_reached') on conflict do nothing;
        return jsonb_build_object('status', 'run_limit_reached',
                                  'payload', jsonb_build_object('num_runs', _facts.num_runs));
      end if;

      if _facts.num_outstanding = 0 then
        -- The attempt's id is drawn first (the task's payload names it), its row written
        -- after the enqueue (it names the queue task).
        _attempt_id := nextval(pg_get_serial_sequence('comms.send_sms_attempt', 'send_sms_attempt_id'));
        _queue_task_id := queues.enqueue_internal(_p.task_type, coalesce('{}'::jsonb, '{}') || jsonb_build_object(
          'task_type', _p.task_type,
          'send_sms_task_id', _task_id,
          'send_sms_attempt_id', _attempt_id,
          'before_handler', _p.before_handler,
          'success_handler', _p.success_handler,
          'error_handler', _p.error_handler),
          -- One run: the process retries through a new attempt, never a task retry
          -- (a retried send would call the provider again outside the process's count).
          _max_attempts => 1);
        insert into comms.send_sms_attempt (send_sms_attempt_id, send_sms_task_id, task_id) overriding system value
        values (_attempt_id, _task_id, _queue_task_id);
      end if;
      -- While its provider throttles the channel (queues.throttled_until,
      -- sql/queues/throttle.sql), the channel task waits for the claim: the next check is
      -- not before the throttle ends, so a long throttle (a daily quota) does not use up
      -- the process's runs.
      _next_at := greatest(now() + internal.backoff(_facts.num_runs, _p.backoff_cap_seconds),
                           queues.throttled_until('task_type', _p.task_type));
      _next_task_id := internal.enqueue_supervisor_run(_p.supervisor, 'send_sms_task_id', _task_id, _next_at);
      -- The run, with the run it scheduled: the success handler wakes that one.
      insert into comms.send_sms_supervisor_run (send_sms_task_id, next_task_id) values (_task_id, _next_task_id);
      return internal.supervisor_progress(
        case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
        jsonb_build_object('send_sms_attempt_id', _attempt_id, 'next_check_at', _next_at));
    end;
    $function$;
  -- comms.send_sms_supervise(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_sms_supervisor(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select comms.send_sms_supervise(payload) $function$;
  -- comms.send_sms_supervisor(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION comms.send_sms_supervisor_facts(_send_sms_task_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT scheduled_at timestamp with time zone, OUT has_unknown_outcome boolean, OUT throttled_until timestamp with time zone)
 RETURNS record
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select f.has_task_succeeded, f.task_failure, f.has_success, f.num_attempts, f.num_failures,
         f.num_outstanding, f.num_runs, t.scheduled_at, f.has_unknown_outcome,
         queues.throttled_until('task_type', 'sms')
    from comms.send_sms_task t
   cross join lateral internal.channel_process_facts('comms', 'send_sms', t.send_sms_task_id) f
   where t.send_sms_task_id = _send_sms_task_id
$function$;
  -- comms.send_sms_supervisor_facts(_send_sms_task_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT scheduled_at timestamp with time zone, OUT has_unknown_outcome boolean, OUT throttled_until timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.account_file_deletion_facts(_account_id bigint, OUT num_files integer, OUT num_files_without_task integer, OUT num_files_deleted integer, OUT stuck_file_ids bigint[])
 RETURNS record
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select count(*)::integer,
         count(*) filter (where t.file_deletion_task_id is null)::integer,
         count(*) filter (where exists (select 1 from files.file_deletion_task_succeeded s
                                         where s.file_deletion_task_id = t.file_deletion_task_id))::integer,
         coalesce(array_agg(f.file_id order by f.file_id)
                    filter (where t.file_deletion_task_id is not null and files.is_file_deletion_stuck(f.file_id)),
                  '{}')
    from files.file f
    left join files.file_deletion_task t on t.file_id = f.file_id
   where f.account_id = _account_id
$function$;
  -- files.account_file_deletion_facts(_account_id bigint, OUT num_files integer, OUT num_files_without_task integer, OUT num_files_deleted integer, OUT stuck_file_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.check_file_delete_signing(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _left interval;
begin
  if jsonb_typeof(payload -> 'bucket') is distinct from 'string' or jsonb_typeof(payload -> 'object_key') is distinct from 'string' then
    return internal.validation_failure('bucket and object_key must be strings');
  end if;
  _left := files.file_delete_lease_left(payload ->> 'bucket', payload ->> 'object_key');
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'scheduled', _left is not null,
    'lease_seconds_left', extract(epoch from _left)));
end;
$function$;
  -- files.check_file_delete_signing(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.current_file_metadata(_file_id bigint)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select coalesce(
    (select m.metadata from files.file_metadata m
      where m.file_id = _file_id order by m.file_metadata_id desc limit 1),
    '{}'::jsonb)
$function$;
  -- files.current_file_metadata(_file_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.file_delete_attempt_payload(_file_deletion_task_id bigint)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object('file_id', t.file_id) from files.file_deletion_task t
   where t.file_deletion_task_id = _file_deletion_task_id
$function$;
  -- files.file_delete_attempt_payload(_file_deletion_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.file_delete_lease_left(_bucket text, _object_key text)
 RETURNS interval
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select max(l.expires_at - now())
    from files.file f
    join files.file_deletion_task t on t.file_id = f.file_id
    join files.file_deletion_attempt a on a.file_deletion_task_id = t.file_deletion_task_id
    -- The task's newest lease with its effective expiry (a task has one live lease at most).
    cross join lateral (
      select e.expires_at from queues.task_lease_effective_of(a.task_id) e
       order by e.task_lease_id desc
       limit 1
    ) l
   where f.bucket = _bucket and f.object_key = _object_key
     and l.expires_at > now()
     and not exists (select 1 from queues.task_end_of(a.task_id) c)
     and not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
     and not exists (select 1 from files.file_deletion_attempt_failed x
                      where x.file_deletion_attempt_id = a.file_deletion_attempt_id)
     and not exists (select 1 from files.file_deletion_task_succeeded ts where ts.file_deletion_task_id = t.file_deletion_task_id)
     and not exists (select 1 from files.file_deletion_task_failed tf where tf.file_deletion_task_id = t.file_deletion_task_id)
     and not files.has_account_deletion_failed(f.account_id)
$function$;
  -- files.file_delete_lease_left(_bucket text, _object_key text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.file_deletion_attempt_refusal(_attempt_id bigint, _verb text)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _root_id bigint;
      _has_outcome boolean;
      _facts record;
    begin
      select a.file_deletion_task_id,
             (select true from files.file_deletion_attempt_succeeded s where s.file_deletion_attempt_id = a.file_deletion_attempt_id) is not null
             or (select true from files.file_deletion_attempt_failed f where f.file_deletion_attempt_id = a.file_deletion_attempt_id) is not null
        into _root_id, _has_outcome
        from files.file_deletion_attempt a where a.file_deletion_attempt_id = _attempt_id;
      if _root_id is null then
        return 'file_deletion_attempt' || ' ' || _attempt_id || ' not found';
      end if;
      if _has_outcome then
        return 'file_deletion_attempt' || ' ' || _attempt_id || ' already has an outcome; not ' || _verb || ' it again';
      end if;
      _facts := files.file_deletion_process_facts(_root_id);
      if _facts.has_task_succeeded or _facts.task_failure is not null then
        return 'file_deletion_task' || ' ' || _root_id || ' already ended (' || coalesce(_facts.task_failure, 'succeeded')
               || '); not ' || _verb || ' attempt ' || _attempt_id;
      end if;
      return null;
    end;
    $function$;
  -- files.file_deletion_attempt_refusal(_attempt_id bigint, _verb text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.file_deletion_close_given_up_attempts(_root_id bigint)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _closed integer;
    begin
      with closed as (
        insert into files.file_deletion_attempt_failed (file_deletion_attempt_id, error_message)
        select a.file_deletion_attempt_id, internal.queue_gave_up_message(a.task_id)
          from files.file_deletion_attempt a
         where a.file_deletion_task_id = _root_id
           and (select true from files.file_deletion_attempt_succeeded s where s.file_deletion_attempt_id = a.file_deletion_attempt_id) is null
           and (select true from files.file_deletion_attempt_failed f where f.file_deletion_attempt_id = a.file_deletion_attempt_id) is null
           and internal.queue_gave_up_message(a.task_id) is not null
        on conflict do nothing
        returning 1)
      select count(*)::integer into _closed from closed;
      return _closed;
    end;
    $function$;
  -- files.file_deletion_close_given_up_attempts(_root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.file_deletion_process_facts(_root_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT has_unknown_outcome boolean)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    begin
      -- One pass over the root's attempts (its index), each attempt's outcomes probed by
      -- primary key (scalar subqueries: no join order for the planner to get wrong), once
      -- (materialized: each probe is used by several aggregates).
      with attempt as materialized (
        select (select true from files.file_deletion_attempt_succeeded s where s.file_deletion_attempt_id = a.file_deletion_attempt_id) as succeeded,
               (select f.error_message from files.file_deletion_attempt_failed f where f.file_deletion_attempt_id = a.file_deletion_attempt_id) as failure
          from files.file_deletion_attempt a
         where a.file_deletion_task_id = _root_id
      )
      select (select true from files.file_deletion_task_succeeded x where x.file_deletion_task_id = _root_id) is not null,
             (select x.reason from files.file_deletion_task_failed x where x.file_deletion_task_id = _root_id),
             coalesce(bool_or(a.succeeded), false),
             count(*)::integer,
             (count(*) filter (where a.succeeded is null and a.failure is not null))::integer,
             (count(*) filter (where a.succeeded is null and a.failure is null))::integer,
             (select count(*)::integer from files.file_deletion_supervisor_run r where r.file_deletion_task_id = _root_id),
             coalesce(bool_or(a.succeeded is null and a.failure is not null
                              and internal.is_unknown_outcome(a.failure)), false)
        into has_task_succeeded, task_failure, has_success, num_attempts, num_failures, num_outstanding,
             num_runs, has_unknown_outcome
        from attempt a;
    end;
    $function$;
  -- files.file_deletion_process_facts(_root_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT has_unknown_outcome boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.file_deletion_record_attempt_failure(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'file_deletion_attempt_id');
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || 'file_deletion_attempt_id' || ' must be a positive integer');
      end if;
      perform 1 from files.file_deletion_attempt a where a.file_deletion_attempt_id = _attempt_id;
      if not found then
        return internal.validation_failure('file_deletion_attempt' || ' ' || _attempt_id || ' not found');
      end if;
      insert into files.file_deletion_attempt_failed (file_deletion_attempt_id, error_message)
      select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
       where (select true from files.file_deletion_attempt_succeeded s where s.file_deletion_attempt_id = _attempt_id) is null
      on conflict do nothing;
      return jsonb_build_object('success', true);
    end;
    $function$;
  -- files.file_deletion_record_attempt_failure(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.file_deletion_record_attempt_success(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'file_deletion_attempt_id');
      _root_id bigint;
      _next_task_id bigint;
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || 'file_deletion_attempt_id' || ' must be a positive integer');
      end if;
      select a.file_deletion_task_id into _root_id from files.file_deletion_attempt a where a.file_deletion_attempt_id = _attempt_id;
      if _root_id is null then
        return internal.validation_failure('file_deletion_attempt' || ' ' || _attempt_id || ' not found');
      end if;
      insert into files.file_deletion_attempt_succeeded (file_deletion_attempt_id, worker_payload) values (_attempt_id, payload -> 'worker_payload')
      on conflict do nothing;
      if found then
        -- Wake the supervisor, so the process ends now rather than at its backoff. With
        -- the root's lock (never waited for: a run under way holds it), no run is under
        -- way, and any run that starts waits for this transaction to commit, then sees the
        -- success. So the run the last run scheduled (runs hold the lock one after the
        -- other, so its task has the highest id) will see it: made due now when no worker
        -- has taken it yet, left to its worker when one has. A new run due now is enqueued
        -- when a run holds the lock (it may have read the facts already) or that task is
        -- no longer pending (it ended without scheduling another).
        perform 1 from files.file_deletion_task t where t.file_deletion_task_id = _root_id for no key update skip locked;
        if found then
          select max(r.next_task_id) into _next_task_id from files.file_deletion_supervisor_run r where r.file_deletion_task_id = _root_id;
        end if;
        if _next_task_id is null or queues.run_task_now(_next_task_id) = 'not_pending' then
          perform internal.enqueue_channel_supervisor(internal.get_channel_process('files', 'file_deletion'), _root_id, null);
        end if;
      end if;
      return jsonb_build_object('success', true);
    end;
    $function$;
  -- files.file_deletion_record_attempt_success(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.file_deletion_supervise(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
    declare
      _p internal.channel_process := internal.get_channel_process('files', 'file_deletion');
      _task_id bigint := internal.id_from_payload(payload, 'file_deletion_task_id');
      _facts record;
      _attempt_id bigint;
      _queue_task_id bigint;
      _next_at timestamptz;
      _next_task_id bigint;
    begin
      if _task_id is null then
        return internal.validation_failure('file_deletion_task_id' || ' must be a positive integer');
      end if;
      -- The check's statement only when it raises (the setting is read in an expression).
      if current_setting('transaction_isolation') <> 'read committed' then
        perform internal.assert_read_committed(_p.supervisor);
      end if;
      -- Lock, then read: facts read after the lock wait include what the last holder
      -- committed. FOR NO KEY UPDATE: inserting a fact that references the root takes FOR
      -- KEY SHARE, which does not wait on it.
      perform 1 from files.file_deletion_task t where t.file_deletion_task_id = _task_id for no key update;
      if not found then
        return internal.validation_failure('file_deletion_task' || ' ' || _task_id || ' not found');
      end if;
      _facts := files.file_deletion_process_facts(_task_id);
      -- An attempt the queue gave up on is among the outstanding ones: closed with a
      -- failure, then the facts read again.
      if _facts.num_outstanding > 0 and files.file_deletion_close_given_up_attempts(_task_id) > 0 then
        _facts := files.file_deletion_process_facts(_task_id);
      end if;

      if _facts.has_task_succeeded then
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.task_failure is not null then
        return jsonb_build_object('status', _facts.task_failure);
      end if;
      if _facts.has_success then
        insert into files.file_deletion_task_succeeded (file_deletion_task_id) values (_task_id) on conflict do nothing;
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.has_unknown_outcome then
        insert into files.file_deletion_task_failed (file_deletion_task_id, reason) values (_task_id, 'delivery_outcome_unknown') on conflict do nothing;
        return jsonb_build_object('status', 'delivery_outcome_unknown');
      end if;
      if _facts.num_failures >= _p.max_attempts then
        insert into files.file_deletion_task_failed (file_deletion_task_id, reason) values (_task_id, 'max_attempts_reached') on conflict do nothing;
        return jsonb_build_object('status', 'max_attempts_reached',
                                  'payload', jsonb_build_object('num_failures', _facts.num_failures));
      end if;
      if _facts.num_runs >= _p.max_supervisor_runs then
        insert into files.file_deletion_task_failed (file_deletion_task_id, reason) values (_task_id, 'run_limit_reached') on conflict do nothing;
        return jsonb_build_object('status', 'run_limit_reached',
                                  'payload', jsonb_build_object('num_runs', _facts.num_runs));
      end if;

      if _facts.num_outstanding = 0 then
        -- The attempt's id is drawn first (the task's payload names it), its row written
        -- after the enqueue (it names the queue task).
        _attempt_id := nextval(pg_get_serial_sequence('files.file_deletion_attempt', 'file_deletion_attempt_id'));
        _queue_task_id := queues.enqueue_internal(_p.task_type, coalesce(files.file_delete_attempt_payload(_task_id), '{}') || jsonb_build_object(
          'task_type', _p.task_type,
          'file_deletion_task_id', _task_id,
          'file_deletion_attempt_id', _attempt_id,
          'before_handler', _p.before_handler,
          'success_handler', _p.success_handler,
          'error_handler', _p.error_handler),
          -- One run: the process retries through a new attempt, never a task retry
          -- (a retried send would call the provider again outside the process's count).
          _max_attempts => 1);
        insert into files.file_deletion_attempt (file_deletion_attempt_id, file_deletion_task_id, task_id) overriding system value
        values (_attempt_id, _task_id, _queue_task_id);
      end if;
      -- While its provider throttles the channel (queues.throttled_until,
      -- sql/queues/throttle.sql), the channel task waits for the claim: the next check is
      -- not before the throttle ends, so a long throttle (a daily quota) does not use up
      -- the process's runs.
      _next_at := greatest(now() + internal.backoff(_facts.num_runs, _p.backoff_cap_seconds),
                           queues.throttled_until('task_type', _p.task_type));
      _next_task_id := internal.enqueue_supervisor_run(_p.supervisor, 'file_deletion_task_id', _task_id, _next_at);
      -- The run, with the run it scheduled: the success handler wakes that one.
      insert into files.file_deletion_supervisor_run (file_deletion_task_id, next_task_id) values (_task_id, _next_task_id);
      return internal.supervisor_progress(
        case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
        jsonb_build_object('file_deletion_attempt_id', _attempt_id, 'next_check_at', _next_at));
    end;
    $function$;
  -- files.file_deletion_supervise(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.file_deletion_supervisor(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select internal.run_channel_supervisor('files', 'file_deletion', payload) $function$;
  -- files.file_deletion_supervisor(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.file_deletion_supervisor_facts(_file_deletion_task_id bigint, OUT file_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT has_unknown_outcome boolean)
 RETURNS record
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select t.file_id, f.*
    from files.file_deletion_task t
   cross join lateral internal.channel_process_facts('files', 'file_deletion', t.file_deletion_task_id) f
   where t.file_deletion_task_id = _file_deletion_task_id
$function$;
  -- files.file_deletion_supervisor_facts(_file_deletion_task_id bigint, OUT file_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT has_unknown_outcome boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.get_file_delete_payload(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _attempt_id bigint := internal.id_from_payload(payload, 'file_deletion_attempt_id');
  _refusal text;
  _file files.file;
begin
  if _attempt_id is null then
    return internal.validation_failure('file_deletion_attempt_id must be a positive integer');
  end if;
  _refusal := internal.channel_attempt_refusal('files', 'file_deletion', _attempt_id, 'deleting');
  if _refusal is not null then
    return internal.validation_failure(_refusal);
  end if;
  select f.* into _file
    from files.file_deletion_attempt a
    join files.file_deletion_task t using (file_deletion_task_id)
    join files.file f on f.file_id = t.file_id
   where a.file_deletion_attempt_id = _attempt_id;
  if files.has_account_deletion_failed(_file.account_id) then
    return internal.validation_failure(format('the deletion of account %s failed; not deleting file %s for attempt %s',
                                              _file.account_id, _file.file_id, _attempt_id));
  end if;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'file_id', _file.file_id,
    'idempotency_key', _attempt_id::text,
    'bucket', _file.bucket,
    'object_key', _file.object_key));
end;
$function$;
  -- files.get_file_delete_payload(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.has_account_deletion_failed(_account_id bigint)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select exists (select 1 from accounts.account_deletion_task d
                   join accounts.account_deletion_task_failed f using (account_deletion_task_id)
                  where d.account_id = _account_id)
$function$;
  -- files.has_account_deletion_failed(_account_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.is_file_delete_scheduled(_bucket text, _object_key text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select files.file_delete_lease_left(_bucket, _object_key) is not null
$function$;
  -- files.is_file_delete_scheduled(_bucket text, _object_key text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.is_file_deleted(_file_id bigint)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select coalesce((files.current_file_metadata(_file_id) ->> 'deleted')::boolean, false)
$function$;
  -- files.is_file_deleted(_file_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.is_file_deletion_stuck(_file_id bigint)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select coalesce((
    select f.task_failure is not null
           or f.num_failures >= (internal.get_channel_process('files', 'file_deletion')).max_attempts
      from files.file_deletion_task t
     cross join lateral internal.channel_process_facts('files', 'file_deletion', t.file_deletion_task_id) f
     where t.file_id = _file_id), false)
$function$;
  -- files.is_file_deletion_stuck(_file_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.kickoff_file_deletion(_file_id bigint, _scheduled_at timestamp with time zone DEFAULT NULL::timestamp with time zone, OUT file_deletion_task_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _file_id is null then
    validation_failure_message := 'file_id is required';
    return;
  end if;
  if not exists (select 1 from files.file f where f.file_id = _file_id) then
    validation_failure_message := format('file %s not found', _file_id);
    return;
  end if;

  insert into files.file_deletion_task (file_id) values (_file_id)
  on conflict (file_id) do nothing
  returning file_deletion_task.file_deletion_task_id into file_deletion_task_id;

  if file_deletion_task_id is null then
    select t.file_deletion_task_id into file_deletion_task_id
      from files.file_deletion_task t where t.file_id = _file_id;
    return;
  end if;

  perform internal.enqueue_channel_supervisor(internal.get_channel_process('files', 'file_deletion'), file_deletion_task_id, _scheduled_at);
end;
$function$;
  -- files.kickoff_file_deletion(_file_id bigint, _scheduled_at timestamp with time zone, OUT file_deletion_task_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.mark_file_deleted(_file_id bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform 1 from files.file f where f.file_id = _file_id for no key update;
  if not found then
    raise exception 'file % not found', _file_id using errcode = '23503';
  end if;
  if not files.is_file_deleted(_file_id) then
    insert into files.file_metadata (file_id, metadata)
    values (_file_id, files.current_file_metadata(_file_id)
                      || jsonb_build_object('deleted', true, 'deleted_at', now()));
  end if;
end;
$function$;
  -- files.mark_file_deleted(_file_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.prune_finished_processes(_payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object('success', true, 'payload', files.prune_finished_processes_at(now(), 10000))
$function$;
  -- files.prune_finished_processes(_payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.prune_finished_processes_at(_now timestamp with time zone, _limit integer)
 RETURNS jsonb
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object('file_deletion',
    (select count(*) from internal.prune_finished_roots('files', 'file_deletion', _now, _limit)))
$function$;
  -- files.prune_finished_processes_at(_now timestamp with time zone, _limit integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.record_file_delete_failure(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select internal.record_channel_attempt_failure('files', 'file_deletion', payload) $function$;
  -- files.record_file_delete_failure(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION files.record_file_delete_success(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _result jsonb := internal.record_channel_attempt_success('files', 'file_deletion', payload);
begin
  if (_result ->> 'success')::boolean then
    perform files.mark_file_deleted(t.file_id)
       from files.file_deletion_attempt a join files.file_deletion_task t using (file_deletion_task_id)
      where a.file_deletion_attempt_id = internal.id_from_payload(payload -> 'original_payload', 'file_deletion_attempt_id');
  end if;
  return _result;
end;
$function$;
  -- files.record_file_delete_success(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.assert_read_committed(_function_name text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception '% must run under READ COMMITTED, not %', _function_name,
      upper(current_setting('transaction_isolation'))
      using errcode = '25000',
            detail = 'Under REPEATABLE READ or SERIALIZABLE the lock on the root row does not stop double scheduling: facts read after the lock wait come from a snapshot taken before it.',
            hint = 'Call supervisors in a READ COMMITTED transaction (the default).';
  end if;
end;
$function$;
  -- internal.assert_read_committed(_function_name text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.backoff(_exponent integer, _cap_seconds integer)
 RETURNS interval
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select make_interval(secs =>
    least(_cap_seconds, 5 * power(2, greatest(coalesce(_exponent, 0), 0)))
    * coalesce((select s.value::numeric from internal.setting s where s.name = 'backoff_scale'), 1))
$function$;
  -- internal.backoff(_exponent integer, _cap_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.build_call_runnable()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _cases text;
begin
  select string_agg(format('    when %L then return %I.%I(payload);',
                           r.function_schema || '.' || r.function_name, r.function_schema, r.function_name),
                    e'\n' order by r.function_schema, r.function_name)
    into _cases
    from internal.runnable_function r;
  execute format($f$
create or replace function internal.call_runnable(function_name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $body$
begin
  case function_name
%s
    else
      raise exception 'function %% is not registered as runnable', function_name using errcode = '42883';
  end case;
end;
$body$
$f$, coalesce(_cases, '    when null then return null;'));
end;
$function$;
  -- internal.build_call_runnable(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.call_runnable(function_name text, payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  case function_name
    when 'accounts.account_anonymization_supervisor' then return accounts.account_anonymization_supervisor(payload);
    when 'accounts.account_deletion_supervisor' then return accounts.account_deletion_supervisor(payload);
    when 'accounts.prune_finished_processes' then return accounts.prune_finished_processes(payload);
    when 'comms.get_email_payload' then return comms.get_email_payload(payload);
    when 'comms.get_sms_payload' then return comms.get_sms_payload(payload);
    when 'comms.prune_finished_processes' then return comms.prune_finished_processes(payload);
    when 'comms.record_email_failure' then return comms.record_email_failure(payload);
    when 'comms.record_email_success' then return comms.record_email_success(payload);
    when 'comms.record_sms_failure' then return comms.record_sms_failure(payload);
    when 'comms.record_sms_success' then return comms.record_sms_success(payload);
    when 'comms.send_email_supervisor' then return comms.send_email_supervisor(payload);
    when 'comms.send_sms_supervisor' then return comms.send_sms_supervisor(payload);
    when 'files.check_file_delete_signing' then return files.check_file_delete_signing(payload);
    when 'files.file_deletion_supervisor' then return files.file_deletion_supervisor(payload);
    when 'files.get_file_delete_payload' then return files.get_file_delete_payload(payload);
    when 'files.prune_finished_processes' then return files.prune_finished_processes(payload);
    when 'files.record_file_delete_failure' then return files.record_file_delete_failure(payload);
    when 'files.record_file_delete_success' then return files.record_file_delete_success(payload);
    when 'internal.noop' then return internal.noop(payload);
    when 'internal.start_provider_call' then return internal.start_provider_call(payload);
    when 'menus.generate_todays_resync' then return menus.generate_todays_resync(payload);
    when 'queues.maintain_history' then return queues.maintain_history(payload);
    when 'queues.maintain_history_step' then return queues.maintain_history_step(payload);
    when 'schedules.schedule_supervisor' then return schedules.schedule_supervisor(payload);
    else
      raise exception 'function % is not registered as runnable', function_name using errcode = '42883';
  end case;
end;
$function$;
  -- internal.call_runnable(function_name text, payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.channel_attempt_refusal(_schema text, _name text, _attempt_id bigint, _verb text DEFAULT 'sending'::text)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _refusal text;
begin
  execute format('select %I.%I($1, $2)', _schema, _name || '_attempt_refusal') into _refusal using _attempt_id, _verb;
  return _refusal;
end;
$function$;
  -- internal.channel_attempt_refusal(_schema text, _name text, _attempt_id bigint, _verb text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.channel_process_facts(_schema text, _name text, _root_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT has_unknown_outcome boolean)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  execute format('select * from %I.%I($1)', _schema, _name || '_process_facts')
  into has_task_succeeded, task_failure, has_success, num_attempts, num_failures, num_outstanding,
       num_runs, has_unknown_outcome
  using _root_id;
end;
$function$;
  -- internal.channel_process_facts(_schema text, _name text, _root_id bigint, OUT has_task_succeeded boolean, OUT task_failure text, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer, OUT num_outstanding integer, OUT num_runs integer, OUT has_unknown_outcome boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.check_at_least_once_provider_call(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return internal.provider_call_start(now(), payload, false);
end;
$function$;
  -- internal.check_at_least_once_provider_call(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.count_supervisor_runs(_schema text, _name text, _root_id bigint)
 RETURNS integer
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _runs integer;
begin
  execute format('select count(*)::integer from %I.%I r where r.%I = $1', _schema, _name || '_supervisor_run', _name || '_task_id')
    into _runs using _root_id;
  return _runs;
end;
$function$;
  -- internal.count_supervisor_runs(_schema text, _name text, _root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.create_channel_process_functions(_schema text, _name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _p internal.channel_process := internal.get_channel_process(_schema, _name);
  _suffixes text[] := array['_process_facts', '_close_given_up_attempts', '_supervise', '_attempt_refusal',
                            '_record_attempt_success', '_record_attempt_failure'];
  -- The names (and the settings) every template below refers to, by position.
  _names text[] := array[
    _schema,                                      -- 1
    _name || '_task',                             -- 2  the root
    _name || '_supervisor_run',                   -- 3
    _name || '_attempt',                          -- 4
    _name || '_attempt_succeeded',                -- 5
    _name || '_attempt_failed',                   -- 6
    _name || '_task_succeeded',                   -- 7
    _name || '_task_failed',                      -- 8
    _name || '_task_id',                          -- 9  the root's key
    _name || '_attempt_id',                       -- 10 the attempt's key
    _name,                                        -- 11
    _name || _suffixes[1], _name || _suffixes[2], _name || _suffixes[3],    -- 12, 13, 14
    _name || _suffixes[4], _name || _suffixes[5], _name || _suffixes[6],    -- 15, 16, 17
    -- 18: the fields the process adds to each channel task's payload (its attempt_payload)
    coalesce((select format('%I.%I(_task_id)', n.nspname, f.proname)
                from pg_proc f join pg_namespace n on n.oid = f.pronamespace
               where f.oid = _p.attempt_payload), '''{}''::jsonb'),
    format('%I.%I', _schema, _name || '_attempt'),  -- 19 the attempt table, for its sequence
    -- 20: the settings of every function. Every row is read by key, and a plan is made
    -- once per connection, perhaps while the tables were small (see sql/CONVENTIONS.md).
    'set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off'
  ];
  _suffix text;
begin
  execute format($f$
    create or replace function %1$I.%12$I(
      _root_id bigint,
      out has_task_succeeded  boolean,
      out task_failure        text,
      out has_success         boolean,
      out num_attempts        integer,
      out num_failures        integer,
      out num_outstanding     integer,
      out num_runs            integer,
      out has_unknown_outcome boolean
    )
      language plpgsql stable
      %20$s
    as $body$
    begin
      -- One pass over the root's attempts (its index), each attempt's outcomes probed by
      -- primary key (scalar subqueries: no join order for the planner to get wrong), once
      -- (materialized: each probe is used by several aggregates).
      with attempt as materialized (
        select (select true from %1$I.%5$I s where s.%10$I = a.%10$I) as succeeded,
               (select f.error_message from %1$I.%6$I f where f.%10$I = a.%10$I) as failure
          from %1$I.%4$I a
         where a.%9$I = _root_id
      )
      select (select true from %1$I.%7$I x where x.%9$I = _root_id) is not null,
             (select x.reason from %1$I.%8$I x where x.%9$I = _root_id),
             coalesce(bool_or(a.succeeded), false),
             count(*)::integer,
             (count(*) filter (where a.succeeded is null and a.failure is not null))::integer,
             (count(*) filter (where a.succeeded is null and a.failure is null))::integer,
             (select count(*)::integer from %1$I.%3$I r where r.%9$I = _root_id),
             coalesce(bool_or(a.succeeded is null and a.failure is not null
                              and internal.is_unknown_outcome(a.failure)), false)
        into has_task_succeeded, task_failure, has_success, num_attempts, num_failures, num_outstanding,
             num_runs, has_unknown_outcome
        from attempt a;
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%13$I(_root_id bigint)
      returns integer
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _closed integer;
    begin
      with closed as (
        insert into %1$I.%6$I (%10$I, error_message)
        select a.%10$I, internal.queue_gave_up_message(a.task_id)
          from %1$I.%4$I a
         where a.%9$I = _root_id
           and (select true from %1$I.%5$I s where s.%10$I = a.%10$I) is null
           and (select true from %1$I.%6$I f where f.%10$I = a.%10$I) is null
           and internal.queue_gave_up_message(a.task_id) is not null
        on conflict do nothing
        returning 1)
      select count(*)::integer into _closed from closed;
      return _closed;
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%14$I(payload jsonb)
      returns jsonb
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _p internal.channel_process := internal.get_channel_process(%1$L, %11$L);
      _task_id bigint := internal.id_from_payload(payload, %9$L);
      _facts record;
      _attempt_id bigint;
      _queue_task_id bigint;
      _next_at timestamptz;
      _next_task_id bigint;
    begin
      if _task_id is null then
        return internal.validation_failure(%9$L || ' must be a positive integer');
      end if;
      -- The check's statement only when it raises (the setting is read in an expression).
      if current_setting('transaction_isolation') <> 'read committed' then
        perform internal.assert_read_committed(_p.supervisor);
      end if;
      -- Lock, then read: facts read after the lock wait include what the last holder
      -- committed. FOR NO KEY UPDATE: inserting a fact that references the root takes FOR
      -- KEY SHARE, which does not wait on it.
      perform 1 from %1$I.%2$I t where t.%9$I = _task_id for no key update;
      if not found then
        return internal.validation_failure(%2$L || ' ' || _task_id || ' not found');
      end if;
      _facts := %1$I.%12$I(_task_id);
      -- An attempt the queue gave up on is among the outstanding ones: closed with a
      -- failure, then the facts read again.
      if _facts.num_outstanding > 0 and %1$I.%13$I(_task_id) > 0 then
        _facts := %1$I.%12$I(_task_id);
      end if;

      if _facts.has_task_succeeded then
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.task_failure is not null then
        return jsonb_build_object('status', _facts.task_failure);
      end if;
      if _facts.has_success then
        insert into %1$I.%7$I (%9$I) values (_task_id) on conflict do nothing;
        return internal.supervisor_progress('succeeded');
      end if;
      if _facts.has_unknown_outcome then
        insert into %1$I.%8$I (%9$I, reason) values (_task_id, 'delivery_outcome_unknown') on conflict do nothing;
        return jsonb_build_object('status', 'delivery_outcome_unknown');
      end if;
      if _facts.num_failures >= _p.max_attempts then
        insert into %1$I.%8$I (%9$I, reason) values (_task_id, 'max_attempts_reached') on conflict do nothing;
        return jsonb_build_object('status', 'max_attempts_reached',
                                  'payload', jsonb_build_object('num_failures', _facts.num_failures));
      end if;
      if _facts.num_runs >= _p.max_supervisor_runs then
        insert into %1$I.%8$I (%9$I, reason) values (_task_id, 'run_limit_reached') on conflict do nothing;
        return jsonb_build_object('status', 'run_limit_reached',
                                  'payload', jsonb_build_object('num_runs', _facts.num_runs));
      end if;

      if _facts.num_outstanding = 0 then
        -- The attempt's id is drawn first (the task's payload names it), its row written
        -- after the enqueue (it names the queue task).
        _attempt_id := nextval(pg_get_serial_sequence(%19$L, %10$L));
        _queue_task_id := queues.enqueue_internal(_p.task_type, coalesce(%18$s, '{}') || jsonb_build_object(
          'task_type', _p.task_type,
          %9$L, _task_id,
          %10$L, _attempt_id,
          'before_handler', _p.before_handler,
          'success_handler', _p.success_handler,
          'error_handler', _p.error_handler),
          -- One run: the process retries through a new attempt, never a task retry
          -- (a retried send would call the provider again outside the process's count).
          _max_attempts => 1);
        insert into %1$I.%4$I (%10$I, %9$I, task_id) overriding system value
        values (_attempt_id, _task_id, _queue_task_id);
      end if;
      -- While its provider throttles the channel (queues.throttled_until,
      -- sql/queues/throttle.sql), the channel task waits for the claim: the next check is
      -- not before the throttle ends, so a long throttle (a daily quota) does not use up
      -- the process's runs.
      _next_at := greatest(now() + internal.backoff(_facts.num_runs, _p.backoff_cap_seconds),
                           queues.throttled_until('task_type', _p.task_type));
      _next_task_id := internal.enqueue_supervisor_run(_p.supervisor, %9$L, _task_id, _next_at);
      -- The run, with the run it scheduled: the success handler wakes that one.
      insert into %1$I.%3$I (%9$I, next_task_id) values (_task_id, _next_task_id);
      return internal.supervisor_progress(
        case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
        jsonb_build_object(%10$L, _attempt_id, 'next_check_at', _next_at));
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%15$I(_attempt_id bigint, _verb text)
      returns text
      language plpgsql stable
      %20$s
    as $body$
    declare
      _root_id bigint;
      _has_outcome boolean;
      _facts record;
    begin
      select a.%9$I,
             (select true from %1$I.%5$I s where s.%10$I = a.%10$I) is not null
             or (select true from %1$I.%6$I f where f.%10$I = a.%10$I) is not null
        into _root_id, _has_outcome
        from %1$I.%4$I a where a.%10$I = _attempt_id;
      if _root_id is null then
        return %4$L || ' ' || _attempt_id || ' not found';
      end if;
      if _has_outcome then
        return %4$L || ' ' || _attempt_id || ' already has an outcome; not ' || _verb || ' it again';
      end if;
      _facts := %1$I.%12$I(_root_id);
      if _facts.has_task_succeeded or _facts.task_failure is not null then
        return %2$L || ' ' || _root_id || ' already ended (' || coalesce(_facts.task_failure, 'succeeded')
               || '); not ' || _verb || ' attempt ' || _attempt_id;
      end if;
      return null;
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%16$I(payload jsonb)
      returns jsonb
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', %10$L);
      _root_id bigint;
      _next_task_id bigint;
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || %10$L || ' must be a positive integer');
      end if;
      select a.%9$I into _root_id from %1$I.%4$I a where a.%10$I = _attempt_id;
      if _root_id is null then
        return internal.validation_failure(%4$L || ' ' || _attempt_id || ' not found');
      end if;
      insert into %1$I.%5$I (%10$I, worker_payload) values (_attempt_id, payload -> 'worker_payload')
      on conflict do nothing;
      if found then
        -- Wake the supervisor, so the process ends now rather than at its backoff. With
        -- the root's lock (never waited for: a run under way holds it), no run is under
        -- way, and any run that starts waits for this transaction to commit, then sees the
        -- success. So the run the last run scheduled (runs hold the lock one after the
        -- other, so its task has the highest id) will see it: made due now when no worker
        -- has taken it yet, left to its worker when one has. A new run due now is enqueued
        -- when a run holds the lock (it may have read the facts already) or that task is
        -- no longer pending (it ended without scheduling another).
        perform 1 from %1$I.%2$I t where t.%9$I = _root_id for no key update skip locked;
        if found then
          select max(r.next_task_id) into _next_task_id from %1$I.%3$I r where r.%9$I = _root_id;
        end if;
        if _next_task_id is null or queues.run_task_now(_next_task_id) = 'not_pending' then
          perform internal.enqueue_channel_supervisor(internal.get_channel_process(%1$L, %11$L), _root_id, null);
        end if;
      end if;
      return jsonb_build_object('success', true);
    end;
    $body$
    $f$, variadic _names);

  execute format($f$
    create or replace function %1$I.%17$I(payload jsonb)
      returns jsonb
      language plpgsql volatile
      %20$s
    as $body$
    declare
      _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', %10$L);
    begin
      if _attempt_id is null then
        return internal.validation_failure('original_payload.' || %10$L || ' must be a positive integer');
      end if;
      perform 1 from %1$I.%4$I a where a.%10$I = _attempt_id;
      if not found then
        return internal.validation_failure(%4$L || ' ' || _attempt_id || ' not found');
      end if;
      insert into %1$I.%6$I (%10$I, error_message)
      select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
       where (select true from %1$I.%5$I s where s.%10$I = _attempt_id) is null
      on conflict do nothing;
      return jsonb_build_object('success', true);
    end;
    $body$
    $f$, variadic _names);

  foreach _suffix in array _suffixes loop
    execute format('revoke execute on function %s from public',
                   (select p.oid::regprocedure from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                     where n.nspname = _schema and p.proname = _name || _suffix));
  end loop;
end;
$function$;
  -- internal.create_channel_process_functions(_schema text, _name text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.create_channel_process_tables(_schema text, _name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _root text := format('%I.%I', _schema, _name || '_task');
  _attempt text := format('%I.%I', _schema, _name || '_attempt');
  _rk text := _name || '_task_id';
  _ak text := _name || '_attempt_id';
  _table text;
begin
  if to_regclass(_root) is null then
    raise exception 'channel process %.%: create its root table %.% first', _schema, _name, _schema, _name || '_task'
      using errcode = '22023';
  end if;
  execute format('create table if not exists %I.%I (%I bigint generated always as identity primary key,
                    %I bigint not null references %s on delete cascade, created_at timestamptz not null default now())',
                 _schema, _name || '_supervisor_run', _name || '_supervisor_run_id', _rk, _root);
  -- next_task_id: the queue task of the run this run scheduled. Queue tasks are named
  -- without foreign keys (here and in <name>_attempt.task_id): history retention drops
  -- whole partitions of queues.task.
  execute format('alter table %I.%I add column if not exists next_task_id bigint', _schema, _name || '_supervisor_run');
  execute format('create index if not exists %I on %I.%I (%I)', _name || '_supervisor_run_task_idx', _schema, _name || '_supervisor_run', _rk);
  execute format('create table if not exists %s (%I bigint generated always as identity primary key,
                    %I bigint not null references %s on delete cascade,
                    task_id bigint,
                    created_at timestamptz not null default now())', _attempt, _ak, _rk, _root);
  execute format('create index if not exists %I on %s (%I)', _name || '_attempt_task_idx', _attempt, _rk);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    worker_payload jsonb, created_at timestamptz not null default now())',
                 _schema, _name || '_attempt_succeeded', _ak, _attempt);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    error_message text not null, created_at timestamptz not null default now())',
                 _schema, _name || '_attempt_failed', _ak, _attempt);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    created_at timestamptz not null default now())', _schema, _name || '_task_succeeded', _rk, _root);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    reason text not null, created_at timestamptz not null default now())', _schema, _name || '_task_failed', _rk, _root);
  foreach _table in array array['_task', '_supervisor_run', '_attempt', '_attempt_succeeded', '_attempt_failed',
                                '_task_succeeded', '_task_failed'] loop
    if not exists (select 1 from pg_trigger
                    where tgrelid = to_regclass(format('%I.%I', _schema, _name || _table)) and tgname = 'forbid_update') then
      execute format('create trigger forbid_update before update on %I.%I
                        for each statement execute function queues.forbid_fact_update()', _schema, _name || _table);
    end if;
  end loop;
end;
$function$;
  -- internal.create_channel_process_tables(_schema text, _name text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.create_process_root(_schema text, _name text, _column text, _value bigint, OUT root_id bigint, OUT created boolean)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  execute format('insert into %1$I.%2$I as t (%3$I) values ($1) on conflict (%3$I) do nothing returning t.%4$I',
                 _schema, _name || '_task', _column, _name || '_task_id')
    into root_id using _value;
  created := root_id is not null;
  if not created then
    execute format('select t.%4$I from %1$I.%2$I t where t.%3$I = $1', _schema, _name || '_task', _column, _name || '_task_id')
      into root_id using _value;
  end if;
end;
$function$;
  -- internal.create_process_root(_schema text, _name text, _column text, _value bigint, OUT root_id bigint, OUT created boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.delivery_mode(_task_type text)
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select coalesce((select m.delivery_mode from internal.channel_delivery_mode m where m.task_type = _task_type),
                  'at_least_once')
$function$;
  -- internal.delivery_mode(_task_type text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.enqueue_channel_supervisor(_p internal.channel_process, _root_id bigint, _at timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform internal.enqueue_supervisor_run(_p.supervisor, _p.process_name || '_task_id', _root_id, _at);
end;
$function$;
  -- internal.enqueue_channel_supervisor(_p internal.channel_process, _root_id bigint, _at timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.enqueue_supervisor_run(_supervisor text, _root_key text, _root_id bigint, _at timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', _supervisor,
    _root_key, _root_id), coalesce(_at, now()), _max_attempts => 1);
end;
$function$;
  -- internal.enqueue_supervisor_run(_supervisor text, _root_key text, _root_id bigint, _at timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.get_channel_process(_schema text, _name text)
 RETURNS internal.channel_process
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _p internal.channel_process;
begin
  select * into _p from internal.channel_process p where p.process_schema = _schema and p.process_name = _name;
  if not found then
    raise exception 'no channel process %.% is registered', _schema, _name using errcode = '22023';
  end if;
  return _p;
end;
$function$;
  -- internal.get_channel_process(_schema text, _name text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.id_from_payload(_payload jsonb, _key text)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select case
    when jsonb_typeof(_payload) = 'object'
     and jsonb_typeof(_payload -> _key) in ('number', 'string')
     and (_payload ->> _key) ~ '^[1-9][0-9]{0,17}$'
    then (_payload ->> _key)::bigint
  end
$function$;
  -- internal.id_from_payload(_payload jsonb, _key text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.idempotency_namespace()
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select format('%s:%s', (select s.system_identifier from pg_control_system() s), current_database())
$function$;
  -- internal.idempotency_namespace(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.is_unknown_outcome(_error_message text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select starts_with(coalesce(_error_message, ''), 'unknown outcome: ')
$function$;
  -- internal.is_unknown_outcome(_error_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.lock_process_root(_schema text, _name text, _root_id bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _found integer;
begin
  execute format('select 1 from %I.%I t where t.%I = $1 for no key update', _schema, _name || '_task', _name || '_task_id')
    into _found using _root_id;
  return _found is not null;
end;
$function$;
  -- internal.lock_process_root(_schema text, _name text, _root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.noop(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select jsonb_build_object('success', true) $function$;
  -- internal.noop(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.open_supervisor_run(_schema text, _name text, _supervisor text, _payload jsonb, OUT root_id bigint, OUT refusal jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _key text := _name || '_task_id';
  _id bigint := internal.id_from_payload(_payload, _key);
begin
  if _id is null then
    refusal := internal.validation_failure(format('%s must be a positive integer', _key));
    return;
  end if;
  perform internal.assert_read_committed(_supervisor);
  -- Lock, then read: facts read after the lock wait include what the last holder committed.
  if not internal.lock_process_root(_schema, _name, _id) then
    refusal := internal.validation_failure(format('%s %s not found', _name || '_task', _id));
    return;
  end if;
  root_id := _id;
end;
$function$;
  -- internal.open_supervisor_run(_schema text, _name text, _supervisor text, _payload jsonb, OUT root_id bigint, OUT refusal jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.process_root_pruned(_process text, _root_id bigint)
 RETURNS internal.process_pruned
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select p.* from internal.process_pruned p
   where p.process = _process and _root_id between p.first_root_id and p.last_root_id
   order by p.process_pruned_id desc
   limit 1
$function$;
  -- internal.process_root_pruned(_process text, _root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.process_terminal_facts(_schema text, _name text, _root_id bigint, OUT has_task_succeeded boolean, OUT task_failure text)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  execute format('select exists (select 1 from %1$I.%2$I x where x.%4$I = $1),
                         (select x.reason from %1$I.%3$I x where x.%4$I = $1)',
                 _schema, _name || '_task_succeeded', _name || '_task_failed', _name || '_task_id')
    into has_task_succeeded, task_failure using _root_id;
end;
$function$;
  -- internal.process_terminal_facts(_schema text, _name text, _root_id bigint, OUT has_task_succeeded boolean, OUT task_failure text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.provider_call_start(_now timestamp with time zone, payload jsonb, _at_most_once boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _task_id bigint := internal.id_from_payload(payload, 'task_id');
  _lease_id bigint := internal.id_from_payload(payload, 'task_lease_id');
  _task_type text;
  _mode text;
  _started record;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_id is null or _lease_id is null then
    return internal.validation_failure('task_id and task_lease_id must be positive integers');
  end if;
  select t.task_type into _task_type from queues.task t where t.task_id = _task_id;
  if _task_type is null then
    return internal.validation_failure(format('task %s not found', _task_id));
  end if;
  _mode := internal.delivery_mode(_task_type);
  if _mode <> 'at_least_once' and not _at_most_once then
    return null;
  end if;
  -- The live lease of an open task: its current lease (a completed task has none), not
  -- expired, heartbeats applied; judged as the completion that follows the call is fenced.
  if not coalesce(queues.current_lease_expiry(_task_id, _lease_id) > _now, false) then
    return internal.validation_failure(format('lease %s is not the live lease of task %s; not calling the provider', _lease_id, _task_id));
  end if;

  if _mode = 'at_least_once' then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('delivery_mode', _mode, 'proceed', true));
  end if;

  select s.task_lease_id, s.started_at into _started
    from internal.provider_call_started s
   where s.task_id = _task_id and s.task_lease_id <> _lease_id
     -- A call its provider refused (a throttle reported under that lease, with the lease's
     -- release: sql/queues/throttle.sql) was not made.
     -- (By task and lease: the tasks of one claim share its lease id.)
     and (select true from queues.throttle th
           where th.task_lease_id = s.task_lease_id and th.task_id = s.task_id limit 1) is null
   order by s.task_lease_id
   limit 1;
  if found then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object(
      'delivery_mode', _mode, 'proceed', false,
      'error', format('%slease %s started the %s provider call at %s and no outcome was recorded; at-most-once delivery: not calling again',
                      internal.unknown_outcome_prefix(), _started.task_lease_id, _task_type, _started.started_at)));
  end if;
  insert into internal.provider_call_started (task_id, task_lease_id) values (_task_id, _lease_id)
  on conflict do nothing;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object('delivery_mode', _mode, 'proceed', true));
end;
$function$;
  -- internal.provider_call_start(_now timestamp with time zone, payload jsonb, _at_most_once boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.prune_finished_roots(_schema text, _process text, _now timestamp with time zone, _limit integer)
 RETURNS TABLE(root_id bigint, root jsonb)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _retention interval;
  _key text := _process || '_task_id';
  _deleted jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _limit is null or _limit not between 1 and 100000 then
    raise exception 'limit must be between 1 and 100000, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  select r.retention into _retention from internal.process_retention r where r.process = _process;
  if _retention is null then
    return;
  end if;
  -- Table names from the catalog, quoted with %I; values through `using`.
  if to_regclass(format('%I.%I', _schema, _process || '_task')) is null
     or to_regclass(format('%I.%I', _schema, _process || '_task_succeeded')) is null
     or to_regclass(format('%I.%I', _schema, _process || '_task_failed')) is null then
    raise exception 'no process %.%', _schema, _process using errcode = '22023';
  end if;
  execute format(
    'with done as (
       select r.%1$I as id from %2$I.%3$I r
        where exists (select 1 from %2$I.%4$I s where s.%1$I = r.%1$I and s.created_at < $1)
           or exists (select 1 from %2$I.%5$I f where f.%1$I = r.%1$I and f.created_at < $1)
        order by r.%1$I
        limit $2
     ),
     gone as (
       delete from %2$I.%3$I r using done d where r.%1$I = d.id returning r.*
     )
     select coalesce(jsonb_agg(to_jsonb(g) order by g.%1$I), ''[]'') from gone g',
    _key, _schema, _process || '_task', _process || '_task_succeeded', _process || '_task_failed')
    into _deleted using _now - _retention, _limit;
  if jsonb_array_length(_deleted) > 0 then
    insert into internal.process_pruned (process, first_root_id, last_root_id, roots, finished_before, pruned_at)
    values (_process, (_deleted -> 0 ->> _key)::bigint, (_deleted -> -1 ->> _key)::bigint,
            jsonb_array_length(_deleted), _now - _retention, _now);
  end if;
  return query select (d ->> _key)::bigint, d from jsonb_array_elements(_deleted) d;
end;
$function$;
  -- internal.prune_finished_roots(_schema text, _process text, _now timestamp with time zone, _limit integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.queue_gave_up_message(_task_id bigint)
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select left(coalesce((select format('%slease %s started the provider call at %s and no outcome was recorded; ',
                                      internal.unknown_outcome_prefix(), s.task_lease_id, s.started_at)
                          from internal.provider_call_started s
                         where s.task_id = k.task_id
                         order by s.task_lease_id limit 1), '')
              || case when t.task_id is null
                      then format('the queue gave up on task %s: its history was dropped by retention before its attempt had an outcome',
                                  k.task_id)
                      else format('the queue gave up on %s task %s (%s)%s', t.task_type, t.task_id, c.outcome,
                                  coalesce(': ' || (select e.error_message from queues.error e
                                                     where e.task_id = t.task_id order by e.error_id desc limit 1),
                                           ': ' || (select nullif(x.reason, '') from queues.task_cancelled x
                                                     where x.task_id = t.task_id and c.outcome = 'cancelled'), ''))
                 end, 2000)
    from (select _task_id as task_id) k
    left join queues.task t on t.task_id = k.task_id
    left join lateral (select e.task_id, e.outcome from queues.task_end_of(t.task_id) e limit 1) c on true
   where k.task_id is not null and (t.task_id is null or c.task_id is not null)
$function$;
  -- internal.queue_gave_up_message(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.record_channel_attempt_failure(_schema text, _name text, payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _result jsonb;
begin
  execute format('select %I.%I($1)', _schema, _name || '_record_attempt_failure') into _result using payload;
  return _result;
end;
$function$;
  -- internal.record_channel_attempt_failure(_schema text, _name text, payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.record_channel_attempt_success(_schema text, _name text, payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _result jsonb;
begin
  execute format('select %I.%I($1)', _schema, _name || '_record_attempt_success') into _result using payload;
  return _result;
end;
$function$;
  -- internal.record_channel_attempt_success(_schema text, _name text, payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.record_process_outcome(_schema text, _name text, _root_id bigint, _reason text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _reason is null then
    execute format('insert into %I.%I (%I) values ($1) on conflict do nothing', _schema, _name || '_task_succeeded', _name || '_task_id')
      using _root_id;
  else
    execute format('insert into %I.%I (%I, reason) values ($1, $2) on conflict do nothing', _schema, _name || '_task_failed', _name || '_task_id')
      using _root_id, _reason;
  end if;
end;
$function$;
  -- internal.record_process_outcome(_schema text, _name text, _root_id bigint, _reason text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.record_supervisor_run(_schema text, _name text, _root_id bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  execute format('insert into %I.%I (%I) values ($1)', _schema, _name || '_supervisor_run', _name || '_task_id') using _root_id;
end;
$function$;
  -- internal.record_supervisor_run(_schema text, _name text, _root_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.register_channel_process(_schema text, _name text, _task_type text, _supervisor text, _before_handler text, _success_handler text, _error_handler text, _max_attempts integer, _max_supervisor_runs integer, _backoff_cap_seconds integer DEFAULT 3600, _attempt_payload regprocedure DEFAULT NULL::regprocedure)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _suffix text;
begin
  foreach _suffix in array array['_task', '_supervisor_run', '_attempt', '_attempt_succeeded', '_attempt_failed',
                                 '_task_succeeded', '_task_failed'] loop
    if to_regclass(format('%I.%I', _schema, _name || _suffix)) is null then
      raise exception 'channel process %.%: table %.% does not exist', _schema, _name, _schema, _name || _suffix
        using errcode = '22023';
    end if;
  end loop;
  -- Tables made by an older create_channel_process_tables (a domain's migrations replayed
  -- onto a newer core, docs/design/migration-parts.md) get what the current one adds.
  if not exists (select 1 from pg_attribute a
                  where a.attrelid = to_regclass(format('%I.%I', _schema, _name || '_supervisor_run'))
                    and a.attname = 'next_task_id' and not a.attisdropped) then
    perform internal.create_channel_process_tables(_schema, _name);
  end if;
  insert into internal.channel_process as p
    (process_schema, process_name, task_type, supervisor, before_handler, success_handler, error_handler,
     max_attempts, max_supervisor_runs, backoff_cap_seconds, attempt_payload)
  values (_schema, _name, _task_type, _supervisor, _before_handler, _success_handler, _error_handler,
          _max_attempts, _max_supervisor_runs, _backoff_cap_seconds, _attempt_payload)
  on conflict (process_schema, process_name) do update
     set task_type = excluded.task_type, supervisor = excluded.supervisor,
         before_handler = excluded.before_handler, success_handler = excluded.success_handler,
         error_handler = excluded.error_handler, max_attempts = excluded.max_attempts,
         max_supervisor_runs = excluded.max_supervisor_runs, backoff_cap_seconds = excluded.backoff_cap_seconds,
         attempt_payload = excluded.attempt_payload;
  perform internal.create_channel_process_functions(_schema, _name);
end;
$function$;
  -- internal.register_channel_process(_schema text, _name text, _task_type text, _supervisor text, _before_handler text, _success_handler text, _error_handler text, _max_attempts integer, _max_supervisor_runs integer, _backoff_cap_seconds integer, _attempt_payload regprocedure): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.register_runnable_function(_function regprocedure)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _proc record;
begin
  if _function is null then
    raise exception 'function must not be null' using errcode = '22004';
  end if;
  select n.nspname, p.proname, p.prorettype, p.pronargs, p.proargtypes[0] as argtype, p.prokind
    into _proc
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where p.oid = _function;
  if _proc.nspname in ('pg_catalog', 'information_schema') or _proc.nspname like 'pg\_%' then
    raise exception 'functions in % cannot be runnable', _proc.nspname using errcode = '42501';
  end if;
  if _proc.prokind <> 'f' or _proc.pronargs <> 1 or _proc.argtype <> 'jsonb'::regtype
     or _proc.prorettype <> 'jsonb'::regtype then
    raise exception '% must be a function taking one jsonb argument and returning jsonb', _function
      using errcode = '22023';
  end if;
  if _proc.nspname !~ '^[a-z_][a-z0-9_]*$' or _proc.proname !~ '^[a-z_][a-z0-9_]*$' then
    raise exception '% must have a lowercase schema.name made of a-z, 0-9 and _', _function
      using errcode = '22023';
  end if;
  insert into internal.runnable_function (function_schema, function_name)
  values (_proc.nspname, _proc.proname)
  on conflict do nothing;
  if found then
    perform internal.build_call_runnable();
  end if;
end;
$function$;
  -- internal.register_runnable_function(_function regprocedure): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.resolve_runnable_function(_function_name text)
 RETURNS regprocedure
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _parts text[];
  _oid regprocedure;
begin
  if _function_name is null then
    raise exception 'function_name must not be null' using errcode = '22004';
  end if;
  -- Matched without capture groups, then split at its one dot: with the groups
  -- (regexp_match), the match took most of this function's CPU.
  if _function_name ~ '^[a-z_][a-z0-9_]{0,62}\.[a-z_][a-z0-9_]{0,62}$' then
    _parts := array[split_part(_function_name, '.', 1), split_part(_function_name, '.', 2)];
  end if;
  if _parts is null then
    raise exception 'invalid function_name %: expected schema.function in lowercase letters, digits and _, with no argument list',
      quote_literal(left(_function_name, 100)) using errcode = '22023';
  end if;
  if _parts[1] in ('pg_catalog', 'information_schema') or _parts[1] like 'pg\_%' then
    raise exception 'function % is in a system or temporary schema and is never runnable',
      _function_name using errcode = '42501';
  end if;
  _oid := to_regprocedure(format('%I.%I(jsonb)', _parts[1], _parts[2]));
  if _oid is null then
    raise exception 'function %(jsonb) does not exist', _function_name using errcode = '42883';
  end if;
  if not exists (select 1 from internal.runnable_function r
                  where r.function_schema = _parts[1] and r.function_name = _parts[2]) then
    raise exception 'function % is not registered as runnable', _function_name
      using errcode = '42501',
            hint = 'Register it in a migration: select internal.register_runnable_function(''schema.name(jsonb)'');';
  end if;
  if (select p.prorettype from pg_proc p where p.oid = _oid) <> 'jsonb'::regtype then
    raise exception 'function % does not return jsonb', _function_name using errcode = '42804';
  end if;
  return _oid;
end;
$function$;
  -- internal.resolve_runnable_function(_function_name text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.run_before_provider_call(_before_handler text, _payload jsonb, _task_id bigint, _task_lease_id bigint, OUT before_result jsonb, OUT start_result jsonb, OUT start_error text)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  before_result := internal.run_function(_before_handler, _payload);
  if jsonb_typeof(before_result) = 'object' and before_result -> 'success' = 'true'::jsonb then
    begin
      start_result := internal.check_at_least_once_provider_call(
        jsonb_build_object('task_id', _task_id, 'task_lease_id', _task_lease_id));
    exception
      when serialization_failure or deadlock_detected then
        raise;
      when others then
        start_error := sqlerrm;
    end;
  end if;
end;
$function$;
  -- internal.run_before_provider_call(_before_handler text, _payload jsonb, _task_id bigint, _task_lease_id bigint, OUT before_result jsonb, OUT start_result jsonb, OUT start_error text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.run_before_provider_calls(_calls jsonb)
 RETURNS TABLE(ord integer, before_result jsonb, start_result jsonb, start_error text, before_error text, before_sqlstate text)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _call jsonb;
  _n integer;
  _ran record;
begin
  if jsonb_typeof(_calls) is distinct from 'array' then
    raise exception 'calls must be a JSON array' using errcode = '22023';
  end if;
  _n := jsonb_array_length(_calls);
  if _n > 50 then
    raise exception 'at most 50 calls in one group, got %', _n using errcode = '22023';
  end if;
  for _i in 1 .. _n loop
    _call := _calls -> (_i - 1);
    ord := _i;
    before_result := null;
    start_result := null;
    start_error := null;
    before_error := null;
    before_sqlstate := null;
    if _call ->> 'traceparent' is not null then
      perform set_config('queue.traceparent', _call ->> 'traceparent', true);
    end if;
    begin
      -- An assignment, not a query: no statement of its own for each call.
      _ran := internal.run_before_provider_call(
        _call ->> 'before_handler', _call -> 'payload',
        (_call ->> 'task_id')::bigint, (_call ->> 'task_lease_id')::bigint);
      before_result := _ran.before_result;
      start_result := _ran.start_result;
      start_error := _ran.start_error;
    exception
      when others then
        before_error := sqlerrm;
        before_sqlstate := sqlstate;
    end;
    if _call ->> 'traceparent' is not null then
      perform set_config('queue.traceparent', '', true);
    end if;
    return next;
  end loop;
end;
$function$;
  -- internal.run_before_provider_calls(_calls jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.run_channel_supervisor(_schema text, _name text, payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _result jsonb;
begin
  execute format('select %I.%I($1)', _schema, _name || '_supervise') into _result using payload;
  return _result;
end;
$function$;
  -- internal.run_channel_supervisor(_schema text, _name text, payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.run_function(function_name text, payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _oid regprocedure := internal.resolve_runnable_function(function_name);
begin
  if not has_function_privilege(_oid, 'execute') then
    raise exception 'permission denied: % may not execute %', current_user, function_name
      using errcode = '42501';
  end if;
  return internal.call_runnable(function_name, payload);
end;
$function$;
  -- internal.run_function(function_name text, payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.run_sql_attempt(_schema text, _name text, _root_id bigint, _work regprocedure, _work_column text)
 RETURNS text
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _argument bigint;
  _attempt_id bigint;
  _error text;
begin
  execute format('select t.%I from %I.%I t where t.%I = $1', _work_column, _schema, _name || '_task', _name || '_task_id')
    into _argument using _root_id;
  execute format('insert into %I.%I (%I) values ($1) returning %I', _schema, _name || '_attempt', _name || '_task_id', _name || '_attempt_id')
    into _attempt_id using _root_id;
  begin
    -- regproc prints the function's name as the catalog spells it, quoted where needed.
    execute format('select %s($1)', _work::regproc) using _argument;
  exception when others then
    _error := left(sqlerrm, 2000);
  end;
  if _error is null then
    execute format('insert into %I.%I (%I) values ($1)', _schema, _name || '_attempt_succeeded', _name || '_attempt_id')
      using _attempt_id;
  else
    execute format('insert into %I.%I (%I, error_message) values ($1, $2)', _schema, _name || '_attempt_failed', _name || '_attempt_id')
      using _attempt_id, _error;
  end if;
  return _error;
end;
$function$;
  -- internal.run_sql_attempt(_schema text, _name text, _root_id bigint, _work regprocedure, _work_column text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.run_sql_process_supervisor(_schema text, _name text, _supervisor text, payload jsonb, _work regprocedure, _work_column text, _max_attempts integer, _backoff_cap_seconds integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _run record := internal.open_supervisor_run(_schema, _name, _supervisor, payload);
  _ended record;
  _facts record;
  _error text;
begin
  if _run.root_id is null then
    return _run.refusal;
  end if;
  _ended := internal.process_terminal_facts(_schema, _name, _run.root_id);
  if _ended.has_task_succeeded then
    return internal.supervisor_progress('succeeded');
  end if;
  if _ended.task_failure is not null then
    return jsonb_build_object('status', _ended.task_failure);
  end if;
  _facts := internal.sql_attempt_facts(_schema, _name, _run.root_id);
  if _facts.has_success then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, null);
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.num_failures >= _max_attempts then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached');
  end if;

  _error := internal.run_sql_attempt(_schema, _name, _run.root_id, _work, _work_column);
  if _error is null then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, null);
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.num_failures + 1 >= _max_attempts then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached', 'payload', jsonb_build_object('error', _error));
  end if;
  return internal.supervisor_progress('attempt_failed', jsonb_build_object('error', _error,
    'next_check_at', internal.schedule_next_supervisor_run(_supervisor, _name || '_task_id', _run.root_id,
                                                           _facts.num_failures + 1, _backoff_cap_seconds)));
end;
$function$;
  -- internal.run_sql_process_supervisor(_schema text, _name text, _supervisor text, payload jsonb, _work regprocedure, _work_column text, _max_attempts integer, _backoff_cap_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.schedule_next_supervisor_run(_supervisor text, _root_key text, _root_id bigint, _exponent integer, _cap_seconds integer)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _next_check_at timestamptz := now() + internal.backoff(_exponent, _cap_seconds);
begin
  perform internal.enqueue_supervisor_run(_supervisor, _root_key, _root_id, _next_check_at);
  return _next_check_at;
end;
$function$;
  -- internal.schedule_next_supervisor_run(_supervisor text, _root_key text, _root_id bigint, _exponent integer, _cap_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.sql_attempt_facts(_schema text, _name text, _root_id bigint, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  execute format($q$
    select exists (select 1 from %1$I.%2$I a join %1$I.%3$I s using (%6$I) where a.%5$I = $1),
           (select count(*)::integer from %1$I.%2$I a where a.%5$I = $1),
           (select count(*)::integer from %1$I.%2$I a join %1$I.%4$I f using (%6$I) where a.%5$I = $1)
    $q$, _schema, _name || '_attempt', _name || '_attempt_succeeded', _name || '_attempt_failed',
         _name || '_task_id', _name || '_attempt_id')
  into has_success, num_attempts, num_failures using _root_id;
end;
$function$;
  -- internal.sql_attempt_facts(_schema text, _name text, _root_id bigint, OUT has_success boolean, OUT num_attempts integer, OUT num_failures integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.start_process(_schema text, _name text, _supervisor text, _column text, _value bigint, _at timestamp with time zone DEFAULT NULL::timestamp with time zone, OUT root_id bigint, OUT created boolean)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  select r.root_id, r.created into root_id, created from internal.create_process_root(_schema, _name, _column, _value) r;
  if created then
    perform internal.enqueue_supervisor_run(_supervisor, _name || '_task_id', root_id, _at);
  end if;
end;
$function$;
  -- internal.start_process(_schema text, _name text, _supervisor text, _column text, _value bigint, _at timestamp with time zone, OUT root_id bigint, OUT created boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.start_provider_call(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select internal.provider_call_start(now(), payload, true)
$function$;
  -- internal.start_provider_call(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.start_provider_call_at(_now timestamp with time zone, payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select internal.provider_call_start(_now, payload, true)
$function$;
  -- internal.start_provider_call_at(_now timestamp with time zone, payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.supervisor_progress(_status text, _extra jsonb DEFAULT NULL::jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object('success', true, 'payload', jsonb_build_object('status', _status) || coalesce(_extra, '{}'))
$function$;
  -- internal.supervisor_progress(_status text, _extra jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.unknown_outcome_prefix()
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 'unknown outcome: ' $function$;
  -- internal.unknown_outcome_prefix(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION internal.validation_failure(_message text)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object('success', false, 'validation_failure_message', _message)
$function$;
  -- internal.validation_failure(_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.generate_resync_tasks(_batches integer, _date date)
 RETURNS TABLE(batch integer, scheduled_at timestamp with time zone, task_count integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _start timestamptz;
  _n integer;
begin
  if _batches is null then
    raise exception 'batches must not be null' using errcode = '22004';
  end if;
  if _batches not between 1 and 24 then
    raise exception 'batches must be between 1 and 24, got %', _batches using errcode = '22023';
  end if;
  if _date is null then
    raise exception 'date must not be null' using errcode = '22004';
  end if;
  if _date not between date '2000-01-01' and date '2999-12-31' then
    raise exception 'date must be between 2000-01-01 and 2999-12-31, got %', _date using errcode = '22023';
  end if;
  _start := _date::timestamp at time zone 'UTC';

  select count(*) into _n
    from menus.store_products_discovered d join menus.store_platform_id e on e.store_id = d.store_id;
  if exists (select 1 from menus.resync_generated g where g.resync_date = _date) then
    raise exception 'resync tasks for % were generated already', _date using errcode = '23505',
      hint = 'One generation per date; the next date starts at 00:00 UTC.';
  end if;
  if _n > 0 then
    begin
      insert into menus.resync_generated (resync_date, batches, stores) values (_date, _batches, _n);
    exception when unique_violation then
      raise exception 'resync tasks for % were generated already', _date using errcode = '23505';
    end;
  end if;

  -- Store j (0-based, of N) goes to batch floor(j * K / N) + 1: batch sizes differ by at
  -- most one.
  perform queues.enqueue_many(coalesce((
    select jsonb_agg(jsonb_build_object(
             'task_type', 'product_resync',
             'payload', jsonb_build_object('store_id', a.store_id, 'platform_dispensary_id', a.platform_dispensary_id),
             'scheduled_at', _start + (a.b - 1) * (interval '24 hours' / _batches),
             'resource_key', menus.store_resource_key(a.store_id),
             'max_attempts', menus.platform_max_attempts()) order by a.j)
      from (select s.store_id, e.platform_dispensary_id, s.j, (s.j * _batches / _n) + 1 as b
              from (select d.store_id, (row_number() over (order by d.store_id) - 1)::integer as j
                      from menus.store_products_discovered d) s
              join menus.store_platform_id e on e.store_id = s.store_id) a), '[]'));

  return query
  select i, _start + (i - 1) * (interval '24 hours' / _batches),
         (select count(*)::integer from generate_series(0, _n - 1) j where (j * _batches / _n) + 1 = i)
    from generate_series(1, _batches) i
   order by i;
end;
$function$;
  -- menus.generate_resync_tasks(_batches integer, _date date): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.generate_store_discovery(_scheduled_at timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _scheduled_at is not null and _scheduled_at > now() + interval '366 days' then
    raise exception 'scheduled_at must be at most a year ahead, got %', _scheduled_at using errcode = '22023';
  end if;
  return queues.enqueue('store_discovery', '{}'::jsonb, _scheduled_at, 20, null, menus.platform_max_attempts());
end;
$function$;
  -- menus.generate_store_discovery(_scheduled_at timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.generate_todays_resync(payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _today date := (now() at time zone 'UTC')::date;
  _batches jsonb;
begin
  if exists (select 1 from menus.resync_generated g where g.resync_date = _today) then
    return jsonb_build_object('status', 'already_generated', 'payload', jsonb_build_object('date', _today));
  end if;
  select jsonb_agg(to_jsonb(b) order by b.batch) into _batches from menus.generate_resync_tasks(6, _today) b;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object('date', _today, 'batches', _batches));
end;
$function$;
  -- menus.generate_todays_resync(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.new_store_priority()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 50 $function$;
  -- menus.new_store_priority(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.platform_max_attempts()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 3 $function$;
  -- menus.platform_max_attempts(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.record_entry_point(_task_id bigint, _payload jsonb, _observation jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _store_id bigint := menus.task_store(_payload);
  _platform_id text := _observation ->> 'platform_dispensary_id';
  _recorded boolean;
begin
  if jsonb_typeof(_observation -> 'platform_dispensary_id') is distinct from 'string'
     or length(_platform_id) not between 1 and 100 then
    raise exception 'observation.platform_dispensary_id must be 1 to 100 characters' using errcode = '22023';
  end if;
  insert into menus.store_platform_id (store_id, platform_dispensary_id, task_id)
  values (_store_id, _platform_id, _task_id)
  on conflict (store_id) do nothing;
  _recorded := found;
  if _recorded then
    perform queues.enqueue('product_discovery',
      jsonb_build_object('store_id', _store_id, 'platform_dispensary_id', _platform_id),
      null, menus.new_store_priority(), menus.store_resource_key(_store_id), menus.platform_max_attempts());
  end if;
  return jsonb_build_object('store_id', _store_id, 'platform_dispensary_id',
                            (select e.platform_dispensary_id from menus.store_platform_id e where e.store_id = _store_id),
                            'product_discovery_enqueued', _recorded);
end;
$function$;
  -- menus.record_entry_point(_task_id bigint, _payload jsonb, _observation jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.record_observation(_task_id bigint, _task_lease_id bigint, _observation jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _task queues.task;
begin
  if _observation is null then
    raise exception 'observation must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_observation) <> 'object' then
    raise exception 'observation must be a JSON object, got %', jsonb_typeof(_observation) using errcode = '22023';
  end if;
  perform queues.assert_current_lease(_task_id, _task_lease_id);
  select t.* into _task from queues.task t where t.task_id = _task_id;
  case _task.task_type
    when 'store_discovery' then
      return menus.record_store_discovery(_task_id, _observation);
    when 'entry_point_discovery' then
      return menus.record_entry_point(_task_id, _task.payload, _observation);
    when 'product_discovery' then
      return menus.record_products(_task_id, _task.payload, _observation, true);
    when 'product_resync' then
      return menus.record_products(_task_id, _task.payload, _observation, false);
    when 'analytics_refresh' then
      return menus.refresh_analytics();
    else
      raise exception 'task % is a % task, not a menus task', _task_id, _task.task_type using errcode = '22023';
  end case;
end;
$function$;
  -- menus.record_observation(_task_id bigint, _task_lease_id bigint, _observation jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.record_products(_task_id bigint, _payload jsonb, _observation jsonb, _initial boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _store_id bigint := menus.task_store(_payload);
  _bad record;
  _new integer;
  _changed integer;
  _count integer;
begin
  if jsonb_typeof(_observation -> 'products') is distinct from 'array' then
    raise exception 'observation.products must be an array' using errcode = '22023';
  end if;
  select e.ordinality - 1 as idx into _bad
    from jsonb_array_elements(_observation -> 'products') with ordinality e
   where jsonb_typeof(e.value) <> 'object'
      or jsonb_typeof(e.value -> 'id') is distinct from 'string'
      or length(e.value ->> 'id') not between 1 and 100
      or length(coalesce(e.value ->> 'name', '')) not between 1 and 300
      or jsonb_typeof(e.value -> 'price_cents') is distinct from 'number'
      or (e.value ->> 'price_cents')::numeric < 0 or (e.value ->> 'price_cents')::numeric % 1 <> 0
      or jsonb_typeof(e.value -> 'in_stock') is distinct from 'boolean'
      or jsonb_typeof(e.value -> 'quantity') is distinct from 'number'
      or (e.value ->> 'quantity')::numeric < 0 or (e.value ->> 'quantity')::numeric % 1 <> 0
   limit 1;
  if found then
    raise exception 'observation.products[%] must have id, name, price_cents (whole, >= 0), in_stock (boolean) and quantity (whole, >= 0)',
      _bad.idx using errcode = '22023';
  end if;
  _count := jsonb_array_length(_observation -> 'products');

  with observed as (
    select e.value ->> 'id' as platform_product_id, e.value ->> 'name' as name,
           (e.value ->> 'price_cents')::integer as price_cents, (e.value ->> 'in_stock')::boolean as in_stock,
           (e.value ->> 'quantity')::integer as quantity
      from jsonb_array_elements(_observation -> 'products') e
  ),
  added as (
    insert into menus.product (store_id, platform_product_id, name)
    select _store_id, o.platform_product_id, o.name from observed o
    on conflict (store_id, platform_product_id) do nothing
    returning product_id, platform_product_id
  )
  select count(*) into _new from added;

  -- The previous snapshot of each product (its newest), before this one is added.
  select count(*) into _changed
    from jsonb_array_elements(_observation -> 'products') e
    join menus.product p on p.store_id = _store_id and p.platform_product_id = e.value ->> 'id'
    cross join lateral (
      select x.price_cents from menus.product_snapshot x where x.product_id = p.product_id
       order by x.observed_at desc, x.product_snapshot_id desc limit 1
    ) last
   where last.price_cents <> (e.value ->> 'price_cents')::integer;

  insert into menus.product_snapshot (product_id, task_id, price_cents, in_stock, stock_quantity)
  select p.product_id, _task_id, (e.value ->> 'price_cents')::integer, (e.value ->> 'in_stock')::boolean,
         (e.value ->> 'quantity')::integer
    from jsonb_array_elements(_observation -> 'products') e
    join menus.product p on p.store_id = _store_id and p.platform_product_id = e.value ->> 'id';

  if _initial then
    insert into menus.store_products_discovered (store_id, product_count, task_id)
    values (_store_id, _count, _task_id)
    on conflict (store_id) do nothing;
  end if;
  return jsonb_build_object('store_id', _store_id, 'products', _count, 'new_products', _new,
                            'price_changes', _changed);
end;
$function$;
  -- menus.record_products(_task_id bigint, _payload jsonb, _observation jsonb, _initial boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.record_store_discovery(_task_id bigint, _observation jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _bad record;
  _new bigint[];
begin
  if jsonb_typeof(_observation -> 'stores') is distinct from 'array' then
    raise exception 'observation.stores must be an array' using errcode = '22023';
  end if;
  select e.ordinality - 1 as idx into _bad
    from jsonb_array_elements(_observation -> 'stores') with ordinality e
   where jsonb_typeof(e.value) <> 'object'
      or coalesce(e.value ->> 'slug', '') !~ '^[a-z0-9][a-z0-9-]{0,99}$'
      or length(coalesce(e.value ->> 'name', '')) not between 1 and 200
      or length(coalesce(e.value ->> 'menu_url', '')) not between 1 and 500
   limit 1;
  if found then
    raise exception 'observation.stores[%] must have a slug (a-z, 0-9, -), a name and a menu_url', _bad.idx
      using errcode = '22023';
  end if;
  with found as (
    insert into menus.store (slug, name, menu_url, task_id)
    select e.value ->> 'slug', e.value ->> 'name', e.value ->> 'menu_url', _task_id
      from jsonb_array_elements(_observation -> 'stores') with ordinality e
     order by e.ordinality
    on conflict (slug) do nothing
    returning store_id
  )
  select coalesce(array_agg(store_id order by store_id), '{}') into _new from found;
  perform queues.enqueue_many(coalesce((
    select jsonb_agg(jsonb_build_object(
             'task_type', 'entry_point_discovery',
             'payload', jsonb_build_object('store_id', s.store_id, 'menu_url', s.menu_url),
             'priority', menus.new_store_priority(),
             'resource_key', menus.store_resource_key(s.store_id),
             'max_attempts', menus.platform_max_attempts()) order by s.store_id)
      from menus.store s where s.store_id = any (_new)), '[]'));
  return jsonb_build_object('stores_seen', jsonb_array_length(_observation -> 'stores'),
                            'new_store_ids', to_jsonb(_new));
end;
$function$;
  -- menus.record_store_discovery(_task_id bigint, _observation jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.refresh_analytics()
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  -- CONCURRENTLY needs a populated view (and keeps it readable while it refreshes).
  if (select c.relispopulated from pg_class c where c.oid = 'menus.store_analytics'::regclass) then
    refresh materialized view concurrently menus.store_analytics;
  else
    refresh materialized view menus.store_analytics;
  end if;
  return (select jsonb_build_object('stores', count(*), 'products', coalesce(sum(a.products), 0),
                                    'in_stock', coalesce(sum(a.in_stock), 0))
            from menus.store_analytics a);
end;
$function$;
  -- menus.refresh_analytics(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.store_resource_key(_store_id bigint)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 'store:' || _store_id $function$;
  -- menus.store_resource_key(_store_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION menus.task_store(_payload jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _store_id bigint;
begin
  if jsonb_typeof(_payload -> 'store_id') is distinct from 'number' then
    raise exception 'payload.store_id must be a number' using errcode = '22023';
  end if;
  _store_id := (_payload ->> 'store_id')::bigint;
  if not exists (select 1 from menus.store s where s.store_id = _store_id) then
    raise exception 'payload.store_id %: no such store', _store_id using errcode = '22023';
  end if;
  return _store_id;
end;
$function$;
  -- menus.task_store(_payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION public.generate_resync_tasks(_batches integer, _date date)
 RETURNS TABLE(batch integer, scheduled_at timestamp with time zone, task_count integer)
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from menus.generate_resync_tasks(_batches, _date)
$function$;
  -- public.generate_resync_tasks(_batches integer, _date date): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION public.recover_stale_tasks(threshold_minutes integer DEFAULT NULL::integer)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, worker_id text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _minutes integer := coalesce(threshold_minutes, 10);
begin
  if _minutes not between 1 and 1440 then
    raise exception 'threshold_minutes must be between 1 and 1440, got %', _minutes using errcode = '22023';
  end if;
  return query select r.task_id, r.task_lease_id, r.worker_id from admin.recover_stale_leases(_minutes * 60) r;
end;
$function$;
  -- public.recover_stale_tasks(threshold_minutes integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.active_throttles()
 RETURNS TABLE(key_kind text, key text, throttled_until timestamp with time zone, reason text, recorded_at timestamp with time zone, recorded_by text, reports integer)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from queues.active_throttles_at(now())
$function$;
  -- queues.active_throttles(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.active_throttles_at(_now timestamp with time zone)
 RETURNS TABLE(key_kind text, key text, throttled_until timestamp with time zone, reason text, recorded_at timestamp with time zone, recorded_by text, reports integer)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
  select distinct on (a.key_kind, a.key)
         a.key_kind, a.key, a.throttled_until, a.reason, a.recorded_at, a.recorded_by,
         (count(*) over (partition by a.key_kind, a.key))::integer
    from queues.throttles_in_force_at(_now) a
   order by a.key_kind, a.key, a.throttled_until desc, a.throttle_id desc
$function$;
  -- queues.active_throttles_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.add_task_dependencies(_task_ids bigint[], _depends_on bigint[], _labels text[], _new_task_ids bigint[])
 RETURNS void
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _deps bigint[];
begin
  _deps := queues.check_task_dependencies(_task_ids, _depends_on, _labels, _new_task_ids);

  -- The lock that orders this enqueue with the dependencies' endings (see the top of the
  -- file): a pending dependency's claim-index row, FOR KEY SHARE, in task id order. A
  -- dependency its claim took out of the claim index gets its row back first
  -- (queues.hold_rows_of), so that its completion, too, waits for this lock.
  perform queues.hold_rows_of(_deps);
  perform from queues.task_pending p
    where p.task_id = any (_deps)
    order by p.task_id
      for key share;

  insert into queues.task_dependency (task_id, depends_on_task_id)
  select distinct e.task_id, e.dep from unnest(_task_ids, _depends_on) e(task_id, dep)
  on conflict do nothing;

  -- A statement after the lock: a dependency that ended meanwhile is seen ended.
  perform queues.settle_new_dependents(array(select distinct t from unnest(_task_ids) t));
end;
$function$;
  -- queues.add_task_dependencies(_task_ids bigint[], _depends_on bigint[], _labels text[], _new_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.adopt_history_range(_lower bigint, _upper bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _table text;
  _name text;
  _columns text;
  _moved bigint;
  _tasks bigint := 0;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'range bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _name := queues.history_partition_name(_table, _lower);
    continue when to_regclass(format('queues.%I', _name)) is not null;
    perform queues.create_history_table(_table, _name);
    -- The parent's columns by name (each quoted as an identifier), in its order.
    select string_agg(format('%I', a.attname), ', ' order by a.attnum) into _columns
      from pg_attribute a
     where a.attrelid = format('queues.%I', _table)::regclass and a.attnum > 0 and not a.attisdropped;
    execute format('with moved as (delete from queues.%I where task_id >= $1 and task_id < $2 returning %s)
                    insert into queues.%I (%s) select %s from moved',
                   _table || '_default', _columns, _name, _columns, _columns)
      using _lower, _upper;
    get diagnostics _moved = row_count;
    if _table = 'task' then
      _tasks := _moved;
    end if;
    execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                   _table, _name, _lower, _upper);
  end loop;
  insert into queues.history_partition_created (lower_bound, upper_bound)
  values (_lower, _upper) on conflict (lower_bound) do nothing;
  return _tasks;
end;
$function$;
  -- queues.adopt_history_range(_lower bigint, _upper bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.assert_current_lease(_task_id bigint, _task_lease_id bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  if _task_lease_id is null then
    raise exception 'task_lease_id must not be null' using errcode = '22004';
  end if;
  perform queues.lock_resource_keys(array[_task_id]);
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(array[_task_id]);
  perform 1 from queues.task_pending p
   where p.task_id = _task_id and p.current_lease_id = _task_lease_id
     for update;
  if not found then
    if not exists (select 1 from queues.task t where t.task_id = _task_id) then
      raise exception 'task % does not exist', _task_id using errcode = '23503';
    end if;
    raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', schema = 'queues', constraint = 'task_lease_current',
            hint = 'Another worker claimed the task after this lease expired.';
  end if;
end;
$function$;
  -- queues.assert_current_lease(_task_id bigint, _task_lease_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.assert_lease_pairs(_task_ids bigint[], _task_lease_ids bigint[])
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _task_ids is null or _task_lease_ids is null then
    raise exception 'task_ids and task_lease_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) <> cardinality(_task_lease_ids) then
    raise exception 'task_ids and task_lease_ids must have the same length (% and %)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 leases per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null then
    raise exception 'task_ids and task_lease_ids must not contain null' using errcode = '22004';
  end if;
end;
$function$;
  -- queues.assert_lease_pairs(_task_ids bigint[], _task_lease_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.assert_may_enqueue(_task_type text, _where text DEFAULT ''::text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if queues.is_internal_task_type(_task_type) and not queues.is_owner_session() then
    raise exception '%task_type % may be enqueued only by the database''s own processes, not by %',
      _where, quote_literal(_task_type), session_user
      using errcode = '42501',
            detail = 'Channel tasks (email, sms, file_delete) and db_function steps act with the owner''s authority.',
            hint = 'Start the business process through its kickoff function (comms.send_email, comms.send_sms, files.kickoff_file_deletion, api.request_account_deletion).';
  end if;
end;
$function$;
  -- queues.assert_may_enqueue(_task_type text, _where text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.assert_task_ids(_task_ids bigint[])
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) not between 1 and 1000 then
    raise exception 'task_ids must name 1 to 1000 tasks, got %', cardinality(_task_ids) using errcode = '22023';
  end if;
  if array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain null' using errcode = '22004';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;
end;
$function$;
  -- queues.assert_task_ids(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.attach_history_partition(_table text, _lower bigint, _upper bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _name text;
begin
  if _table is null or _table <> all (queues.history_tables()) then
    raise exception 'table must name a history table (queues.history_tables()), got %',
      coalesce(quote_literal(left(_table, 100)), 'null') using errcode = '22023';
  end if;
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  _name := queues.history_partition_name(_table, _lower);
  if to_regclass(format('queues.%I', _name)) is not null then
    return false;
  end if;
  -- A range within reach of the task ids handed out (within one set's width, or the
  -- 10,000 tasks a statement may enqueue, above the last one) may receive rows while it
  -- is attached: a writer that routed its row before the attach committed would send it
  -- to the default partition, wait there for the attach's lock, and then fail the
  -- default's new constraint ("new row for relation .._default violates partition
  -- constraint"). For such a range (a set made late), SHARE on the parent: taken when no
  -- writer is in flight, it holds new ones at the parent until commit; they then route
  -- with the new partition. A set made ahead of need, as maintenance makes them, is out
  -- of reach and needs no lock that writers wait for (under a steady load of writers, a
  -- moment without one is rare).
  -- Its locks first (queues.lock_history_tables: taken between transactions, never
  -- queued for): the parent, SHARE UPDATE EXCLUSIVE (what attaching takes; SHARE for a
  -- set made late), then the default partition, ACCESS EXCLUSIVE (attaching checks it
  -- holds no row of the range).
  perform queues.lock_history_tables(
    array[_table, _table || '_default'],
    array[case when _lower <= queues.last_task_id() + greatest(_upper - _lower, 10000) then 'share'
               else 'share update exclusive' end,
          'access exclusive'],
    (select s.lock_timeout_ms from queues.history_setting s));
  perform queues.create_history_table(_table, _name);
  execute format('alter table queues.%I attach partition queues.%I for values from (%s) to (%s)',
                 _table, _name, _lower, _upper);
  return true;
end;
$function$;
  -- queues.attach_history_partition(_table text, _lower bigint, _upper bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.batched_count_between(_lower bigint, _upper bigint)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
  select coalesce(sum(case when lower(b.task_range) >= _lower and upper(b.task_range) <= _upper
                           then cardinality(b.task_ids) - b.taken
                           else (select count(*) from unnest(b.task_ids[b.taken + 1:]) u(task_id)
                                  where u.task_id >= _lower and u.task_id < _upper) end), 0)::bigint
    from queues.task_ready_batch b
   where b.task_range && int8range(_lower, _upper)
$function$;
  -- queues.batched_count_between(_lower bigint, _upper bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.batched_of(_task_id bigint)
 RETURNS TABLE(task_id bigint, task_type text, priority integer, scheduled_at timestamp with time zone, max_attempts integer, batch_id bigint)
 LANGUAGE sql
 STABLE
AS $function$
  -- The batches whose range holds the id (GiST), then the id among the ids not taken.
  select _task_id, b.task_type, b.priority, b.scheduled_at, b.max_attempts, b.task_id
    from queues.task_ready_batch b
   where b.task_range @> _task_id
     and _task_id = any (b.task_ids[b.taken + 1:])
   limit 1
$function$;
  -- queues.batched_of(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.cancel_autovacuum(_tables text[])
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _pid integer;
  _cancelled integer := 0;
begin
  for _pid in
    select distinct l.pid
      from pg_locks l
      join pg_stat_activity a on a.pid = l.pid
      join pg_class c on c.oid = l.relation
     where l.locktype = 'relation' and l.granted
       and l.database = (select d.oid from pg_database d where d.datname = current_database())
       -- An autovacuum worker runs as no role: its usesysid is null, and a role without
       -- pg_read_all_stats sees its backend_type as null too (it is shown to those with it).
       and a.usesysid is null and coalesce(a.backend_type, 'autovacuum worker') = 'autovacuum worker'
       and c.relnamespace = 'queues'::regnamespace and c.relname = any (_tables)
       and age(c.relfrozenxid) < current_setting('autovacuum_freeze_max_age')::bigint
       and mxid_age(c.relminmxid) < current_setting('autovacuum_multixact_freeze_max_age')::bigint
  loop
    begin
      if pg_cancel_backend(_pid) then
        _cancelled := _cancelled + 1;
      end if;
    exception
      when insufficient_privilege then
        return _cancelled;
    end;
  end loop;
  return _cancelled;
end;
$function$;
  -- queues.cancel_autovacuum(_tables text[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.cancel_tasks(_task_ids bigint[], _reason text DEFAULT NULL::text)
 RETURNS TABLE(task_id bigint, result text, was_running boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _internal bigint;
begin
  if not queues.is_owner_session() then
    select t.task_id into _internal
      from queues.task t
     where t.task_id = any (_task_ids) and queues.is_internal_task_type(t.task_type)
     order by t.task_id limit 1;
    if found then
      raise exception 'task % is of a worker-only task type; only its process may cancel it', _internal
        using errcode = '42501';
    end if;
  end if;
  return query select * from queues.cancel_tasks_at(now(), _task_ids, _reason);
end;
$function$;
  -- queues.cancel_tasks(_task_ids bigint[], _reason text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.cancel_tasks_at(_now timestamp with time zone, _task_ids bigint[], _reason text)
 RETURNS TABLE(task_id bigint, result text, was_running boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _cancelled bigint[] := '{}';
  _running bigint[] := '{}';
  _todo bigint[] := _task_ids;
  _c bigint[];
  _r bigint[];
  _pass integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform queues.assert_task_ids(_task_ids);
  if _reason is not null and length(_reason) > 500 then
    raise exception 'reason must be at most 500 characters, got %', length(_reason) using errcode = '22023';
  end if;
  -- Same lock order as the claim, the heartbeat and the completion (resource keys first),
  -- then the pending rows in task id order, as a completion batch, a lease release and a
  -- revocation lock theirs: none of them can deadlock with a cancel. A completion in
  -- flight holds its row: the cancel waits for it, then finds the task gone
  -- (already_completed).
  perform queues.lock_resource_keys(_task_ids);
  -- A task its claim took out of the claim index gets its row back first
  -- (queues.hold_rows_of). A claim in flight that takes a task out holds its row: the
  -- cancel waits for it, finds no row, and gives the task its row back in a second pass.
  for _pass in 1 .. 2 loop
    perform queues.hold_rows_of(_todo);
    with locked as (
      select p.task_id, p.task_type, p.current_lease_id,
             (p.current_lease_id is not null and p.available_at > _now) as held
        from queues.task_pending p
       where p.task_id = any (_todo)
       order by p.task_id
         for update
    ),
    completed as (
      insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
      select l.task_id, null, _now, 'cancelled', l.task_type from locked l
      returning task_id
    ),
    reasons as (
      insert into queues.task_cancelled (task_id, reason, cancelled_at)
      select l.task_id, coalesce(_reason, ''), _now from locked l
    ),
    revoked as (
      insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
      select l.task_id, l.current_lease_id, _now, left('cancelled: ' || coalesce(nullif(_reason, ''), 'no reason given'), 520)
        from locked l where l.held
      on conflict do nothing
    ),
    removed as (
      delete from queues.task_pending p where p.task_id = any (array(select l.task_id from locked l))
    ),
    key_freed as (
      delete from queues.resource_lease k where k.task_id = any (array(select l.task_id from locked l))
    )
    select coalesce((select array_agg(c.task_id) from completed c), '{}'),
           coalesce(array_agg(l.task_id) filter (where l.held), '{}')
      into _c, _r
      from locked l;
    _cancelled := _cancelled || _c;
    _running := _running || _r;
    -- The tasks still without an end (a statement after the locks: what a claim that held
    -- a row committed is seen).
    _todo := array(select t.task_id from queues.task t
                    where t.task_id = any (_todo) and t.task_id <> all (_c)
                      and not exists (select 1 from queues.task_end_of(t.task_id) e));
    exit when cardinality(_todo) = 0;
  end loop;

  return query
  select i.task_id,
         case when c.task_id is not null then 'cancelled'
              when coalesce((select true from queues.task_end_of(i.task_id) x limit 1), false) then 'already_completed'
              else 'unknown_task' end,
         r.task_id is not null
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join unnest(_cancelled) as c(task_id) on c.task_id = i.task_id
    left join unnest(_running) as r(task_id) on r.task_id = i.task_id
   order by i.n;
end;
$function$;
  -- queues.cancel_tasks_at(_now timestamp with time zone, _task_ids bigint[], _reason text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.cancelled_tasks(_task_ids bigint[])
 RETURNS TABLE(task_id bigint, reason text, cancelled_at timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 task ids per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  -- A primary-key probe per id (= any of an array).
  return query
  select c.task_id, c.reason, c.cancelled_at
    from queues.task_cancelled c
   where c.task_id = any (_task_ids)
   order by c.task_id;
end;
$function$;
  -- queues.cancelled_tasks(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.check_task_dependencies(_task_ids bigint[], _depends_on bigint[], _labels text[], _new_task_ids bigint[])
 RETURNS bigint[]
 LANGUAGE plpgsql
 STABLE
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _bad record;
  _deps bigint[];
begin
  select e.label into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   where e.dep is null limit 1;
  if found then
    raise exception '%depends_on must not contain null', _bad.label using errcode = '22004';
  end if;
  select e.label, e.task_id, e.dep into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   where e.dep = e.task_id limit 1;
  if found then
    raise exception '%a task cannot depend on itself (task %)', _bad.label, _bad.task_id using errcode = '22023';
  end if;
  select e.label, e.dep into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   where e.dep = any (_new_task_ids) limit 1;
  if found then
    raise exception '%depends_on names task %, enqueued by the same call', _bad.label, _bad.dep
      using errcode = '22023',
            hint = 'A task can depend only on tasks that exist before its enqueue, so dependencies never form a cycle.';
  end if;
  select e.label, count(distinct e.dep) as n into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   group by e.task_id, e.label having count(distinct e.dep) > 100 limit 1;
  if found then
    raise exception '%depends_on names % tasks, over the limit of 100', _bad.label, _bad.n using errcode = '54000';
  end if;
  -- Each dependency exists: a primary-key probe of queues.task per distinct id.
  _deps := array(select distinct d from unnest(_depends_on) d order by d);
  select e.label, e.dep into _bad
    from unnest(_task_ids, _depends_on, _labels) with ordinality e(task_id, dep, label, n)
   where e.dep = any (_deps)
     and not coalesce((select true from queues.task t where t.task_id = e.dep), false)
   order by e.n limit 1;
  if found then
    raise exception '%depends_on names task %, which does not exist', _bad.label, _bad.dep using errcode = '23503';
  end if;
  return _deps;
end;
$function$;
  -- queues.check_task_dependencies(_task_ids bigint[], _depends_on bigint[], _labels text[], _new_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.check_task_limit_key(_task_type text, _scope text, _group_key text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if _scope is null then
    raise exception 'scope must not be null' using errcode = '22004';
  end if;
  if _scope not in ('type', 'each_group', 'group') then
    raise exception 'scope must be type, each_group or group, got %', quote_literal(left(_scope, 100))
      using errcode = '22023';
  end if;
  if _scope = 'group' and (_group_key is null or length(_group_key) not between 1 and 200) then
    raise exception 'group_key must be 1 to 200 characters for scope group' using errcode = '22023';
  end if;
  if _scope <> 'group' and _group_key is not null then
    raise exception 'group_key must be null for scope %', _scope using errcode = '22023';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task type %', quote_literal(left(_task_type, 100)) using errcode = '23503';
  end if;
end;
$function$;
  -- queues.check_task_limit_key(_task_type text, _scope text, _group_key text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.claim_tasks(_worker_id text, _limit integer DEFAULT NULL::integer, _task_types text[] DEFAULT NULL::text[], _lease_seconds integer DEFAULT NULL::integer, _max_leases integer DEFAULT NULL::integer, _suspects text DEFAULT NULL::text)
 RETURNS TABLE(task_id bigint, task_type text, payload jsonb, priority integer, resource_key text, max_attempts integer, enqueued_at timestamp with time zone, scheduled_at timestamp with time zone, task_lease_id bigint, leased_at timestamp with time zone, expires_at timestamp with time zone, lease_count integer, timeout_ms integer)
 LANGUAGE sql
 SECURITY DEFINER ROWS 10
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  -- Paused task types are left out (queues.claimable_task_types).
  select * from queues.claim_tasks_at(now(), _worker_id, coalesce(_limit, 1),
                                      queues.claimable_task_types(_task_types),
                                      coalesce(_lease_seconds, 300), coalesce(_max_leases, 5),
                                      coalesce(_suspects, 'any'))
$function$;
  -- queues.claim_tasks(_worker_id text, _limit integer, _task_types text[], _lease_seconds integer, _max_leases integer, _suspects text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.claim_tasks_at(_now timestamp with time zone, _worker_id text, _limit integer, _task_types text[], _lease_seconds integer, _max_leases integer, _suspects text DEFAULT 'any'::text)
 RETURNS TABLE(task_id bigint, task_type text, payload jsonb, priority integer, resource_key text, max_attempts integer, enqueued_at timestamp with time zone, scheduled_at timestamp with time zone, task_lease_id bigint, leased_at timestamp with time zone, expires_at timestamp with time zone, lease_count integer, timeout_ms integer)
 LANGUAGE plpgsql
 SECURITY DEFINER ROWS 10
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _worker_key integer;
  _throttled text[];
  -- Provider back-pressure per group key: the group keys throttled at _now ('{}': none).
  _throttled_groups text[];
  -- Flow limits: the types asked for (NULL: any) and, of them, the limited types this
  -- claim holds the lock of, with their rules (sql/queues/limits.sql).
  _types      text[];
  _limited    text[] := '{}';
  _rules      jsonb := '[]';
  _full       text[] := '{}';
  _type       text;
  -- The drain's claim (below): the ready tasks it picked, whether all are plain, their
  -- one type.
  _picked      bigint[];
  _plain       boolean;
  _picked_type text;
  -- Of the picked tasks from ready batches, each one's batch; whether any batch exists.
  _from_batches bigint[];
  _batched     boolean;
  -- Of the picked tasks, those on claim-index rows (the rows the claim deletes).
  _picked_rows bigint[];
  _expired     boolean;
  -- A claim lease is due: the rescuer runs.
  _due         boolean;
  -- The worker holds a live lease that names a repeat suspect (one whose death already
  -- counted): this claim takes no other repeat suspect.
  _holds_repeat boolean;
  -- Some flow limit was set (queues.task_limit_set has a row).
  _any_limit   boolean;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _limit is null or _limit not between 1 and 1000 then
    raise exception 'limit must be between 1 and 1000, got %', coalesce(_limit::text, 'null')
      using errcode = '22023';
  end if;
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;
  if _max_leases is null or _max_leases not between 1 and 100 then
    raise exception 'max_leases must be between 1 and 100, got %', coalesce(_max_leases::text, 'null')
      using errcode = '22023';
  end if;
  if _task_types is not null and cardinality(_task_types) = 0 then
    raise exception 'task_types must be null (any type) or name at least one type'
      using errcode = '22023';
  end if;
  if _suspects is null or _suspects not in ('any', 'no_repeat', 'repeat') then
    raise exception 'suspects must be any, no_repeat or repeat, got %', coalesce(_suspects, 'null')
      using errcode = '22023';
  end if;
  -- The quarantine's claim: nothing to do while no repeat suspect is ready (one probe of
  -- its index) and no lease expired (one probe of the expired leases' index). (Nested:
  -- one condition with the subqueries would start their plan on every claim.)
  if _suspects = 'repeat' then
    if (select true from queues.task_pending p
         where p.current_lease_id is null
           and p.lease_count - p.released_count - p.failed_attempts - p.uncounted_count > 0
           and p.available_at <= _now
         order by p.available_at limit 1) is null
       and (select true from queues.task_pending p
             where p.current_lease_id > 0 and p.available_at <= _now
             order by p.available_at limit 1) is null then
      return;
    end if;
  end if;
  -- A limit being set and a claim in flight wait for each other (the limits' lock, shared
  -- by claims, exclusive in queues.set_task_limit): a claim that read no limit has
  -- committed before the limit counts the type's running tasks. Taken before the
  -- statement below, which then reads the limits in a snapshot taken after it; tried
  -- first, as an expression (PL/pgSQL evaluates it without starting a statement), and
  -- waited for only while a limit is being set.
  if not pg_try_advisory_xact_lock_shared(20254, 0) then
    perform pg_advisory_xact_lock_shared(20254, 0);
  end if;
  -- One statement reads what the claim needs before it scans: whether a claim lease is
  -- due, the worker's key, the throttles and the flow limits in force (with none
  -- configured, the claim costs no statement more than it did without them).
  -- The ready set's rescuer runs only when a claim lease is due by _now (the earliest
  -- expiry in queues.claim_lease_due, one probe of its index whatever its size when the
  -- session planned it: the claim plans no sequential scan) and returns their unfinished
  -- tasks to the claim index, where this claim's statement sees them. Called on every
  -- claim, the rescuer's function and its empty delete were a fifth of an idle worker's
  -- one-task claim (tools/bench/probes/one-claim.mjs).
  -- A lease names its worker by key (queues.worker_name: each worker id kept once, an
  -- integer on every lease instead of the id's text). One probe of the id's unique index.
  -- Provider back-pressure (sql/queues/throttle.sql): the task types throttled at _now
  -- are left out of the types both branches below scan, and the tasks of the group keys
  -- throttled at _now (of any type) out of what they find. One probe of
  -- throttle_until_idx per claim (queues.throttled_keys_at, inlined here), which reads no
  -- row while no throttle is active; nothing per task while no group key is throttled.
  -- Flow limits (sql/queues/limits.sql, the body of queues.task_limits): whether any was
  -- ever set; then (below) the rules in force for the types asked for and not throttled.
  -- None (the common case): the claim runs with _limited empty, which its limit steps
  -- read as "nothing to do", and the rules' statement is not run.
  select (select d.expires_at from queues.claim_lease_due d order by d.expires_at limit 1) <= _now,
         w.worker_key, th.task_types, th.group_keys,
         exists (select 1 from queues.task_limit_set),
         -- whether any ready batch exists (sql/queues/ready_batch.sql)
         exists (select 1 from queues.task_ready_batch)
    into _due, _worker_key, _throttled, _throttled_groups, _any_limit, _batched
    from queues.throttled_keys_at(_now) th
    left join queues.worker_name w on w.worker_id = _worker_id;
  if _due then
    perform queues.rescue_due_leases_at(_now);
  end if;
  if _any_limit then
    _rules := coalesce((select jsonb_agg(to_jsonb(l))
                from (select l.task_type, l.scope, l.group_key, l.max_running, l.max_starts,
                             l.interval_ms, l.set_at
                        from (select distinct on (s.task_type, s.scope, s.group_key) s.*
                                from queues.task_limit_set s
                               order by s.task_type, s.scope, s.group_key, s.task_limit_set_id desc) l
                       where (l.max_running is not null or l.max_starts is not null)
                         and (_task_types is null or l.task_type = any (_task_types))
                         and not (l.task_type = any (_throttled))
                       order by l.task_type, l.scope, l.group_key) l), '[]');
  end if;
  if _rules <> '[]'::jsonb then
    _limited := array(select distinct r ->> 'task_type' from jsonb_array_elements(_rules) r order by 1);
  end if;
  if cardinality(_throttled) > 0 then
    _task_types := array(select u.task_type
                           from unnest(coalesce(_task_types, array(select tt.task_type from queues.task_type tt)))
                                as u(task_type)
                          where not (u.task_type = any (_throttled)));
    if cardinality(_task_types) = 0 then
      return;
    end if;
  end if;
  -- The first claim of a worker id adds it (a concurrent first claim waits, then reads it).
  if _worker_key is null then
    insert into queues.worker_name (worker_id) values (_worker_id)
    on conflict (worker_id) do nothing
    returning worker_key into _worker_key;
    if _worker_key is null then
      select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
    end if;
  end if;

  _types := _task_types;
  if cardinality(_limited) > 0 then
    -- Of the limited types, those with a task ready (a lease-free task due, or an expired
    -- lease), in name order; the others are left out of this claim. Their claim locks are
    -- taken below and held to the commit, so no other claim takes tasks of them meanwhile.
    -- (A lock tried and skipped when taken left a window's starts to whichever claim held
    -- it, however few tasks it wanted: rate-limit.mjs measured windows of 20 starts under
    -- a limit of 500.)
    _limited := array(
      select t.task_type from unnest(_limited) t(task_type)
       -- Scalar subqueries, not EXISTS: a generic plan may make an EXISTS a hashed subplan
       -- that reads the whole claim index on every claim (sql/CONVENTIONS.md). The first
       -- follows task_pending_ready_idx's order: without it the generic plan read the
       -- whole claim index (a sequential scan "until the first match", of a type with none).
       where case when coalesce((select true from queues.task_pending p
                                  where p.task_type = t.task_type and p.current_lease_id is null
                                    and p.scheduled_at <= _now and p.available_at <= _now
                                  order by p.priority desc, p.scheduled_at, p.task_id
                                  limit 1), false)
                    or coalesce((select true from queues.task_pending p
                                  where p.current_lease_id > 0 and p.available_at <= _now
                                    and p.task_type = t.task_type
                                  limit 1), false)
                    -- (a ready batch of a type limited after its enqueue: its tasks get
                    -- their rows below)
                    or coalesce((select true from queues.task_ready_batch b
                                  where b.task_type = t.task_type and b.scheduled_at <= _now
                                  order by b.priority desc, b.scheduled_at, b.task_id
                                  limit 1), false)
                  then true else false end
       order by t.task_type);
    foreach _type in array _limited loop
      perform pg_advisory_xact_lock(20252, hashtext(_type));
    end loop;
    _types := array(select u.task_type
                      from unnest(coalesce(_task_types, array(select tt.task_type from queues.task_type tt))) u(task_type)
                     where not (u.task_type = any (array(select r ->> 'task_type' from jsonb_array_elements(_rules) r)))
                        or u.task_type = any (_limited));
    if cardinality(_types) = 0 then
      _types := array[null]::text[];
    end if;
    _rules := coalesce((select jsonb_agg(r) from jsonb_array_elements(_rules) r
                         where r ->> 'task_type' = any (_limited)), '[]');
    -- Group keys without room (live leases or this window's starts at their limit), as
    -- type || chr(31) || group key: left out of the candidate scan below, so that one full
    -- group's backlog does not hide the other groups' tasks behind it.
    if _rules @> '[{"scope": "each_group"}]' or _rules @> '[{"scope": "group"}]' then
      _full := array(
        select k.task_type || chr(31) || k.group_key
          from (select p.task_type, p.group_key, count(*) as live
                  from queues.task_pending p
                 where p.current_lease_id > 0 and p.available_at > _now
                   and p.task_type = any (_limited) and p.group_key is not null
                 group by p.task_type, p.group_key
                union all
                select w.task_type, w.group_key, null
                  from queues.task_limit_window w
                 where w.task_type = any (_limited) and w.group_key <> '') k
         cross join lateral (
           select r.* from jsonb_to_recordset(_rules)
             as r(task_type text, scope text, group_key text, max_running integer, max_starts integer, interval_ms integer)
            where r.task_type = k.task_type
              and (r.scope = 'each_group' or (r.scope = 'group' and r.group_key = k.group_key))
            order by r.scope = 'group' desc
            limit 1
         ) r
         where k.live >= r.max_running
            or (k.live is null and r.interval_ms is not null
                and (select w.starts from queues.task_limit_window w
                      where w.task_type = k.task_type and w.group_key = k.group_key
                        and w.window_start >= queues.limit_window_start(_now, r.interval_ms)) >= r.max_starts));
    end if;
  end if;

  -- The drain's claim: no flow limit and no throttled group key for the types asked for,
  -- no expired lease among them, and the first _limit ready tasks in claim order all on
  -- their first lease and unkeyed (none a suspect, none to abandon, none leased on its
  -- row). Then, without the per-row stages below, one statement picks them and another
  -- leases them; when any of that does not hold, nothing is leased and the statement
  -- below claims as always (the rows the pick locked are this transaction's, so it finds
  -- them). The same ready tasks, in the same order, as that statement's candidates. With
  -- no ready task and no expired lease, the claim ends there, with nothing.
  if cardinality(_limited) = 0 and cardinality(_throttled_groups) = 0 and _suspects <> 'repeat' then
    -- The candidates, locked, in claim order (ids ascending here), and whether they are
    -- all plain.
    -- The ready batches' tasks are candidates beside the rows
    -- (queues.ready_batch_candidates_at).
    select array_agg(pk.task_id order by pk.task_id),
           coalesce(bool_and(pk.lease_count = 0 and pk.resource_key is null), false),
           case when min(pk.task_type) = max(pk.task_type) then min(pk.task_type) end,
           coalesce(array_agg(pk.batch_id) filter (where pk.batch_id is not null), '{}'),
           coalesce(array_agg(pk.task_id) filter (where pk.batch_id is null), '{}'),
           -- An expired lease among the types (a scalar subquery in the expired leases'
           -- index order, as below; evaluated once, in the pick's snapshot).
           (select true from queues.task_pending p
             where p.current_lease_id > 0 and p.available_at <= _now
               and (_types is null or p.task_type = any (_types))
             order by p.available_at limit 1) is not null
      into _picked, _plain, _picked_type, _from_batches, _picked_rows, _expired
      from (select r.*
              from (select distinct u.task_type
                      from unnest(coalesce(_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
             cross join lateral (
               select p.task_id, p.task_type, p.resource_key, p.priority, p.scheduled_at, p.lease_count,
                      null::bigint as batch_id
                 from queues.task_pending p
                where p.task_type = ty.task_type
                  and p.current_lease_id is null
                  and p.scheduled_at <= _now
                  and p.available_at <= _now
                  and (p.resource_key is null or not exists (
                        select 1 from queues.resource_lease r
                         where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
                order by p.priority desc, p.scheduled_at, p.task_id
                limit _limit
                  for update skip locked
             ) r
            union all
            -- The ready batches' tasks (sql/queues/ready_batch.sql), only while one exists.
            select bt.*
              from queues.ready_batch_candidates_at(_types, _now, _limit) bt
             where _batched
             order by priority desc, scheduled_at, task_id
             limit _limit) pk;
    -- Nothing ready and no expired lease: the statement below would find nothing either
    -- (an idle worker's poll).
    if _picked is null and not _expired then
      return;
    end if;
    if _plain and not _expired then
      return query
      with leased as (
        insert into queues.claim_lease (task_id, worker_key, leased_at, expires_at, task_ids, task_range, suspect_task_id,
                                        task_type)
        values (_picked[cardinality(_picked)], _worker_key, _now, _now + make_interval(secs => _lease_seconds), _picked,
                int8range(_picked[1], _picked[cardinality(_picked)], '[]'), null, _picked_type)
        returning task_lease_id, task_id, expires_at
      ),
      due as (
        insert into queues.claim_lease_due (task_lease_id, task_id, expires_at)
        select l.task_lease_id, l.task_id, l.expires_at from leased l
      ),
      taken as (
        delete from queues.task_pending p
         using leased l
         where p.task_id = any (_picked_rows)
      )
      select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
             t.enqueued_at, t.scheduled_at, m.task_lease_id, _now, _now + make_interval(secs => _lease_seconds),
             1, t.timeout_ms
       -- (one index scan of the claim's ids, bounded by its least and greatest, known when
       -- the plan starts: the history partitions none of them is in are left out, neither
       -- locked nor opened)
        from queues.task t
       cross join (select l.task_lease_id from leased l) m
       where t.task_id = any (_picked) and t.task_id between _picked[1] and _picked[cardinality(_picked)]
       order by t.priority desc, t.scheduled_at, t.task_id;
      -- The batches' ids taken off their front (the batch deleted with its last one).
      if cardinality(_from_batches) > 0 then
        perform queues.take_from_ready_batches(_from_batches);
      end if;
      return;
    end if;
  end if;

  -- A worker holds at most one named repeat suspect at a time: a task one of whose
  -- expiries already counted (a live per-row lease that names its task the suspect,
  -- queues.task_pending_suspect_lease_idx). A worker that died holding two named suspects
  -- counts a death for both; if both were repeat suspects, they came back together when
  -- their leases would have expired, and the same worker's back-to-back claims could take
  -- them together again, so a task that once waited beside a poison task was blamed with
  -- it, lease after lease, until abandoned. Now a task is blamed for another's death at
  -- most once: from then on it is a repeat suspect, and never shares a worker with the
  -- other. First-time suspects (a dead worker's other tasks) are not held back, so they
  -- return as fast as claims take them. A working process beside a quarantine
  -- ('no_repeat') takes none.
  _holds_repeat := _suspects = 'no_repeat' or exists (
    select 1
      from queues.task_pending p
     where p.suspect_lease and p.current_lease_id > 0 and p.available_at > _now
       and p.lease_count - p.released_count - p.failed_attempts - 1 - p.uncounted_count > 0
       and exists (select 1 from queues.claim_lease l
                    where l.task_lease_id = p.current_lease_id and l.task_id >= p.task_id
                      and l.suspect_task_id = p.task_id and l.worker_key = _worker_key));

  -- The per-row path reads rows: the first _limit batched tasks of the types get theirs
  -- (sql/queues/ready_batch.sql). The quarantine takes no batched task: none is a suspect.
  if _batched and _suspects <> 'repeat' then
    perform queues.unbatch_ready_at(_types, _now, _limit);
  end if;

  return query
  with candidate as (
    -- Ready tasks without a lease, per task type, from task_pending_ready_idx in claim
    -- order: rows leased by anyone are not in that index, and scheduled_at <= _now lets
    -- the scan stop (or skip to the next priority) at the first future task. (For a row
    -- without a lease available_at >= scheduled_at, so the extra bound changes nothing.)
    -- SKIP LOCKED skips rows another claimer holds; the update below makes any claimer
    -- that arrives after our commit re-check current_lease_id on the new row version.
    select r.*
      from (select distinct u.task_type
              from unnest(coalesce(_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
     cross join lateral (
       -- The suspects after the first one this claim may lease (see picked below) are
       -- passed over, not counted in _limit: a dead worker's tasks come back ahead of the
       -- rest in claim order, and a claim whose _limit they filled would lease one task.
       -- The running count reads the scan in its order, and the outer LIMIT stops it; the
       -- inner one (up to 1,000 suspects passed over) keeps the plan an index scan.
       select s.task_id, s.task_type, s.current_lease_id, s.resource_key, s.group_key, s.priority, s.scheduled_at,
              s.ended_leases, s.uncounted_count, s.suspect_lease, s.lease_count
         from (select q.*,
                      count(*) filter (where q.takeable)
                        over (order by q.priority desc, q.scheduled_at, q.task_id rows unbounded preceding) as suspects
                 from (select q.*,
                              -- eligible: a suspect not poisoned; takeable: one this claim may lease
                              q.ended_leases > 0 and q.ended_leases - q.uncounted_count < _max_leases as eligible,
                              q.ended_leases > 0 and q.ended_leases - q.uncounted_count < _max_leases
                                and not (_holds_repeat and q.ended_leases - q.uncounted_count > 0) as takeable
                 from (select p.task_id, p.task_type, p.current_lease_id, p.resource_key, p.group_key, p.priority,
                              p.scheduled_at, p.lease_count - p.released_count - p.failed_attempts as ended_leases,
                              p.uncounted_count, p.suspect_lease, p.lease_count
                         from queues.task_pending p
                        where _suspects <> 'repeat'
                          and p.task_type = ty.task_type
                          and p.current_lease_id is null
                          and p.scheduled_at <= _now
                          and p.available_at <= _now
                          -- Flow limits: group keys without room wait (_full, empty without limits).
                          and (cardinality(_full) = 0 or p.group_key is null
                               or not (p.task_type || chr(31) || p.group_key = any (_full)))
                          -- Throttled group keys wait (_throttled_groups, empty while none is throttled).
                          and (cardinality(_throttled_groups) = 0 or p.group_key is null
                               or not (p.group_key = any (_throttled_groups)))
                          -- Tasks whose resource key another task holds wait (the upsert below decides).
                          and (p.resource_key is null or not exists (
                                select 1 from queues.resource_lease r
                                 where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
                        order by p.priority desc, p.scheduled_at, p.task_id
                        limit _limit + 1000
                          for update skip locked) q) q) s
        where not s.eligible or (s.takeable and s.suspects = 1)
        limit _limit
     ) r
    union all
    -- Tasks whose lease expired (their worker died or stopped heartbeating), from
    -- task_pending_lease_expiry_idx (its predicate is current_lease_id > 0, see
    -- migration 000005, section 520-hot-path-plans.sql): only expired leases are read.
    select x.*
      from (
        select p.task_id, p.task_type, p.current_lease_id, p.resource_key, p.group_key, p.priority, p.scheduled_at,
               p.lease_count - p.released_count - p.failed_attempts as ended_leases,
               p.uncounted_count, p.suspect_lease, p.lease_count
          from queues.task_pending p
         where p.current_lease_id > 0
           and p.available_at <= _now
           and (_types is null or p.task_type = any (_types))
           -- The quarantine takes a repeat suspect (this expiry counts if the lease named it).
           and (_suspects <> 'repeat'
                or p.lease_count - p.released_count - p.failed_attempts - p.uncounted_count
                   - (not p.suspect_lease)::integer > 0)
           -- Flow limits: group keys without room wait (_full, empty without limits).
           and (cardinality(_full) = 0 or p.group_key is null
                or not (p.task_type || chr(31) || p.group_key = any (_full)))
           -- Throttled group keys wait (_throttled_groups, empty while none is throttled).
           and (cardinality(_throttled_groups) = 0 or p.group_key is null
                or not (p.group_key = any (_throttled_groups)))
           and (p.resource_key is null or not exists (
                 select 1 from queues.resource_lease r
                  where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
         order by p.available_at
         limit _limit
           for update skip locked
      ) x
    union all
    -- The quarantine's ('repeat') lease-free repeat suspects, from
    -- task_pending_repeat_suspect_idx (the first branch reads none for it).
    select y.*
      from (
        select p.task_id, p.task_type, p.current_lease_id, p.resource_key, p.group_key, p.priority, p.scheduled_at,
               p.lease_count - p.released_count - p.failed_attempts as ended_leases,
               p.uncounted_count, p.suspect_lease, p.lease_count
          from queues.task_pending p
         where _suspects = 'repeat'
           and p.current_lease_id is null
           and p.lease_count - p.released_count - p.failed_attempts - p.uncounted_count > 0
           and p.available_at <= _now
           and p.scheduled_at <= _now
           and (_types is null or p.task_type = any (_types))
           and (cardinality(_full) = 0 or p.group_key is null
                or not (p.task_type || chr(31) || p.group_key = any (_full)))
           and (cardinality(_throttled_groups) = 0 or p.group_key is null
                or not (p.group_key = any (_throttled_groups)))
           and (p.resource_key is null or not exists (
                 select 1 from queues.resource_lease r
                  where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
         order by p.available_at
         limit _limit
           for update skip locked
      ) y
  ),
  -- Flow limits (sql/queues/limits.sql). Every step reads only limited types' rows: with
  -- _limited empty (no limit on the types asked for) each reads nothing.
  -- limit_rule: the rules of the limited types this claim holds the lock of.
  limit_rule as (
    select r.* from jsonb_to_recordset(_rules)
      as r(task_type text, scope text, group_key text, max_running integer, max_starts integer, interval_ms integer)
  ),
  -- limit_live: leases live now per type and group key (the claim index's leased rows),
  -- read once (materialized: inlined into limit_room it was read again per scope).
  limit_live as materialized (
    select p.task_type, p.group_key, count(*) as n
      from queues.task_pending p
     where cardinality(_limited) > 0
       and p.current_lease_id > 0 and p.available_at > _now
       and p.task_type = any (_limited)
     group by p.task_type, p.group_key
  ),
  -- limit_room: per scope a candidate falls in (group_key '' for its type as a whole), the
  -- tasks this claim may take: the least of max_running minus its live leases and
  -- max_starts minus its starts in the current window. A group key's rule is its named
  -- one, else its type's each_group one.
  limit_scope as (
    select distinct c.task_type, k.group_key
      from candidate c
     cross join lateral (select '' as group_key union all select c.group_key where c.group_key is not null) k
     where c.task_type = any (_limited)
  ),
  limit_room as (
    select s.task_type, s.group_key, r.interval_ms,
           case when r.interval_ms is not null then queues.limit_window_start(_now, r.interval_ms) end as window_start,
           greatest(least(r.max_running - coalesce((select sum(lv.n) from limit_live lv
                                                     where lv.task_type = s.task_type
                                                       and (s.group_key = '' or lv.group_key = s.group_key)), 0),
                          r.max_starts - coalesce((select w.starts from queues.task_limit_window w
                                                    where w.task_type = s.task_type and w.group_key = s.group_key
                                                      and w.window_start >= queues.limit_window_start(_now, r.interval_ms)), 0)),
                    0) as room
      from limit_scope s
     cross join lateral (
       select r.* from limit_rule r
        where r.task_type = s.task_type
          and case when s.group_key = '' then r.scope = 'type'
                   else r.scope = 'each_group' or (r.scope = 'group' and r.group_key = s.group_key) end
        order by r.scope = 'group' desc
        limit 1
     ) r
  ),
  -- The suspect this claim may lease (see allowed below: at most one per claim, the first
  -- in claim order that is not poisoned), found here for the limited types only.
  lead_suspect as (
    select c.task_id
      from candidate c
     where cardinality(_limited) > 0
       and c.ended_leases > 0
       and c.ended_leases - c.uncounted_count
             - (c.current_lease_id is not null and not c.suspect_lease)::integer < _max_leases
       and not (_holds_repeat and c.ended_leases - c.uncounted_count
                                    - (c.current_lease_id is not null and not c.suspect_lease)::integer > 0)
     order by c.priority desc, c.scheduled_at, c.task_id
     limit 1
  ),
  -- The candidates within every limit, in claim order, before the claim's _limit is
  -- taken of them (so that tasks a limit holds back never crowd out other types' tasks):
  -- unlimited types as they are; of a limited type, of the tasks that would take a slot
  -- (not suspects, and the suspect this claim may lease), the first `room` of each group
  -- key, then the first `room` of the type. Its other suspects are left for later claims,
  -- and its poisoned ones go on to be abandoned.
  within_limits as (
    select c.* from candidate c where not (c.task_type = any (_limited))
    union all
    select c.* from candidate c
     where c.task_type = any (_limited) and c.ended_leases > 0
       and c.ended_leases - c.uncounted_count
             - (c.current_lease_id is not null and not c.suspect_lease)::integer >= _max_leases
    union all
    select t.task_id, t.task_type, t.current_lease_id, t.resource_key, t.group_key, t.priority, t.scheduled_at,
           t.ended_leases, t.uncounted_count, t.suspect_lease, t.lease_count
      from (select g.*,
                   row_number() over (partition by g.task_type
                                      order by g.priority desc, g.scheduled_at, g.task_id) as type_rank
              from (select c.*,
                           row_number() over (partition by c.task_type, c.group_key
                                              order by c.priority desc, c.scheduled_at, c.task_id) as group_rank
                      from candidate c
                     where c.task_type = any (_limited)
                       and (c.ended_leases = 0 or c.task_id in (select ls.task_id from lead_suspect ls))) g
              left join limit_room gr
                on gr.task_type = g.task_type and gr.group_key = g.group_key
             where gr.room is null or g.group_rank <= gr.room) t
      left join limit_room tr on tr.task_type = t.task_type and tr.group_key = ''
     where tr.room is null or t.type_rank <= tr.room
  ),
  picked as (
    -- Of the candidates (locked until commit), the first _limit in claim order. A task
    -- whose leases ended without an end (ended_leases, the expired current one included)
    -- is a suspect; the expiries counted towards abandonment leave out those of leases
    -- that did not name it as their suspect (uncounted_count, and the current one if so).
    select c.task_id, c.task_type, c.current_lease_id, c.resource_key, c.group_key, c.priority, c.scheduled_at,
           c.counted >= _max_leases as poisoned,
           c.ended_leases > 0 as suspect,
           c.counted as counted_leases,
           c.lease_count > 0 as leased_before
      from (
        -- Of the suspects not poisoned, only the first one in claim order that this
        -- claim may lease (see allowed below; not a repeat suspect while the worker holds
        -- one) is counted in _limit; the others wait for later claims, and the claim
        -- fills its _limit with other ready tasks.
        select c.*
          from (select c.*,
                       count(*) filter (where c.takeable)
                         over (order by c.priority desc, c.scheduled_at, c.task_id rows unbounded preceding) as suspects
                  from (select c.*,
                               c.ended_leases > 0 and c.counted < _max_leases as eligible,
                               c.ended_leases > 0 and c.counted < _max_leases
                                 and not (_holds_repeat and c.counted > 0) as takeable
                          from (select c.*,
                                       c.ended_leases - c.uncounted_count
                                         - (c.current_lease_id is not null and not c.suspect_lease)::integer as counted
                                  from within_limits c) c) c) c
         where not c.eligible or (c.takeable and c.suspects = 1)
         order by c.priority desc, c.scheduled_at, c.task_id
         limit _limit
      ) c
  ),
  -- Resource keys: one task per key in this batch, and only if no other task holds the
  -- key. The upsert decides on the newest committed row (not this statement's snapshot),
  -- so two claimers never both take a key.
  -- Suspects (their worker may have died of them) are leased one per claim, as the
  -- lease's named suspect, so the tasks a crashed worker was running, which all come
  -- back at the same moment, do not all land in one worker again beside the task that
  -- crashed it.
  allowed as (
    select pk.task_id, pk.task_type, pk.group_key, pk.resource_key, pk.priority, pk.scheduled_at, pk.suspect,
           pk.leased_before
      from (select pk.*,
                   row_number() over (partition by pk.suspect
                                      order by pk.priority desc, pk.scheduled_at, pk.task_id) as rank
              from picked pk
             where not pk.poisoned) pk
     where not pk.suspect or pk.rank = 1
  ),
  keyed as (
    select k.task_id, k.resource_key
      from (select distinct on (pk.resource_key) pk.task_id, pk.resource_key
              from allowed pk
             where pk.resource_key is not null
             order by pk.resource_key, pk.priority desc, pk.scheduled_at, pk.task_id) k
     -- Skip a key another transaction is working on (see queues.lock_resource_keys):
     -- a claim never waits, so it cannot be part of a deadlock.
     where pg_try_advisory_xact_lock(20251, hashtext(k.resource_key))
  ),
  key_taken as (
    insert into queues.resource_lease as r (resource_key, task_id, expires_at)
    select k.resource_key, k.task_id, _now + make_interval(secs => _lease_seconds) from keyed k
    on conflict (resource_key) do update
       set task_id = excluded.task_id, expires_at = excluded.expires_at
     where r.expires_at <= _now or r.task_id = excluded.task_id
    returning r.task_id
  ),
  eligible as (
    select pk.task_id, pk.task_type, pk.group_key, pk.suspect,
           -- The ready set (docs/design/hot-path.md): an unkeyed task of an unlimited type
           -- on its first lease leaves the claim index with its claim (a delete); a keyed
           -- task, or one of a limited type, keeps its row and is leased on it (the
           -- per-row path: resource keys and concurrency limits read leased rows), and so
           -- does a task leased before (rescued, retried, released or revoked back into
           -- the claim index): the claim index never loses a task twice, so a claim
           -- lease's completion needs no newer lease looked for (queues.complete_tasks).
           pk.resource_key is not null or pk.task_type = any (_limited) or pk.leased_before as per_row
      from allowed pk
     where pk.resource_key is null or pk.task_id in (select kt.task_id from key_taken kt)
  ),
  -- Rate limits: the starts of this claim added to each scope's current window (one row
  -- per scope it took from; an older window is started again). A claim whose clock is
  -- behind the row's window (it began before another claim of the type committed) adds
  -- to the newer window.
  limit_counted as (
    insert into queues.task_limit_window as w (task_type, group_key, window_start, starts)
    select lr.task_type, lr.group_key, lr.window_start, count(*)
      from limit_room lr
      join eligible e on e.task_type = lr.task_type and (lr.group_key = '' or e.group_key = lr.group_key)
     where lr.window_start is not null
     group by lr.task_type, lr.group_key, lr.window_start
    on conflict (task_type, group_key) do update
       set starts = case when excluded.window_start <= w.window_start then w.starts + excluded.starts
                         else excluded.starts end,
           window_start = greatest(w.window_start, excluded.window_start)
  ),
  abandoned_error as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select pk.task_id, pk.current_lease_id,
           format('abandoned: %s leases expired without completion (max_leases %s)', pk.counted_leases, _max_leases)
      from picked pk where pk.poisoned
  ),
  abandoned as (
    -- No lease: the claimer abandoning the task does not hold one, so the last holder's
    -- fenced completion is refused as lease_lost.
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
    select pk.task_id, null, _now, 'abandoned', pk.task_type from picked pk where pk.poisoned
  ),
  abandoned_removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select pk.task_id from picked pk where pk.poisoned))
  ),
  -- One lease per claim (queues.claim_lease): every task the claim took shares its
  -- task_lease_id (from task_lease's sequence, so a claim's id never equals a per-task
  -- lease's), and the claim names its one suspect. No row is written when nothing is
  -- eligible.
  leased as (
    insert into queues.claim_lease (task_id, worker_key, leased_at, expires_at, task_ids, task_range, suspect_task_id,
                                    task_type)
    select max(e.task_id), _worker_key, _now, _now + make_interval(secs => _lease_seconds),
           array_agg(e.task_id order by e.task_id),
           int8range(min(e.task_id), max(e.task_id), '[]'),
           max(e.task_id) filter (where e.suspect),
           -- The tasks' one type (null when the claim took several): their completion
           -- rounds need it, and read it here instead of from each task.
           case when min(e.task_type) = max(e.task_type) then min(e.task_type) end
      from eligible e
    having count(*) > 0
    returning task_lease_id, task_ids, task_id, expires_at
  ),
  -- The ready set's rescuer reads the claim leases due from here
  -- (queues.rescue_due_leases_at), not from claim_lease's partitions: one row per claim
  -- that took a task out of the claim index, deleted by the pass that rescues it.
  due as (
    insert into queues.claim_lease_due (task_lease_id, task_id, expires_at)
    select l.task_lease_id, l.task_id, l.expires_at from leased l
     where exists (select 1 from eligible e where not e.per_row)
  ),
  -- The claimed rows are found by primary key from the array of their ids (an index
  -- condition): a join of task_pending to the claim would be planned from task_pending's
  -- statistics, and statistics taken when a busy queue had just drained (many pages,
  -- nearly no live rows) made the planner scan the whole table (seconds per claim once
  -- the queue filled again). SET expressions read the row as it was: a lease still
  -- current here expired, and is left uncounted unless it named the task its suspect.
  moved as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds),
           current_lease_id = l.task_lease_id,
           lease_count = p.lease_count + 1,
           uncounted_count = p.uncounted_count + (p.current_lease_id is not null and not p.suspect_lease)::integer,
           -- The new lease names the task its suspect when a lease of it ended without an
           -- end (as picked decided: at most one per claim).
           suspect_lease = p.lease_count - p.released_count - p.failed_attempts > 0
      from leased l
     where p.task_id = any (array(select e.task_id from eligible e where e.per_row))
    returning p.task_id, p.lease_count, p.current_lease_id as task_lease_id, _now as leased_at,
              p.available_at as expires_at
  ),
  -- The ready set: the other claimed tasks leave the claim index (one row deleted per
  -- task, no new row version); their lease is the claim's lease fact, the fence of
  -- their completions (queues.complete_tasks), and an expired one's unfinished tasks come
  -- back through queues.rescue_leases_at.
  taken as (
    delete from queues.task_pending p
     using leased l
     where p.task_id = any (array(select e.task_id from eligible e where not e.per_row))
    returning p.task_id, p.lease_count + 1 as lease_count, l.task_lease_id, _now as leased_at,
              _now + make_interval(secs => _lease_seconds) as expires_at
  )
  select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
         t.enqueued_at, t.scheduled_at, m.task_lease_id, m.leased_at, m.expires_at, m.lease_count, t.timeout_ms
    from (select * from moved union all select * from taken) m
   cross join lateral (
     select * from queues.task t where t.task_id = m.task_id limit 1
   ) t
   order by t.priority desc, t.scheduled_at, t.task_id;
end;
$function$;
  -- queues.claim_tasks_at(_now timestamp with time zone, _worker_id text, _limit integer, _task_types text[], _lease_seconds integer, _max_leases integer, _suspects text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.claimable_task_types(_task_types text[])
 RETURNS text[]
 LANGUAGE sql
 STABLE
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select case
           when cardinality(x.paused) = 0 or cardinality(_task_types) = 0 then _task_types
           else coalesce(nullif(array(select t.task_type from queues.task_type t
                                       where (_task_types is null or t.task_type = any (_task_types))
                                         and not (t.task_type = any (x.paused))
                                       order by t.task_type), '{}'),
                         array[null]::text[])
         end
    -- OFFSET 0 keeps the subquery (not pulled up), so the pauses are read once per call,
    -- not once per reference to x.paused.
    from (select queues.paused_task_types() as paused offset 0) x
$function$;
  -- queues.claimable_task_types(_task_types text[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.clear_task_limit(_task_type text, _scope text, _group_key text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform queues.check_task_limit_key(_task_type, _scope, _group_key);
  if not exists (select 1 from queues.task_limits() l
                  where l.task_type = _task_type and l.scope = _scope
                    and l.group_key is not distinct from _group_key) then
    return false;
  end if;
  insert into queues.task_limit_set (task_type, scope, group_key) values (_task_type, _scope, _group_key);
  return true;
end;
$function$;
  -- queues.clear_task_limit(_task_type text, _scope text, _group_key text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.clear_throttle(_key_kind text, _key text, _cleared_by text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _last bigint;
begin
  if _key_kind is null or _key is null or _cleared_by is null then
    raise exception 'key_kind, key and cleared_by must not be null' using errcode = '22004';
  end if;
  if _key_kind not in ('task_type', 'group') then
    raise exception 'key_kind must be ''task_type'' or ''group'', got %', quote_literal(left(_key_kind, 100))
      using errcode = '22023';
  end if;
  if _key_kind = 'group' and (btrim(_key) = '' or length(_key) > 200) then
    raise exception 'group key must be 1 to 200 characters, not blank' using errcode = '22023';
  end if;
  if _key_kind = 'task_type' and not exists (select 1 from queues.task_type t where t.task_type = _key) then
    raise exception 'unknown task type %', quote_literal(left(_key, 100)) using errcode = '23503';
  end if;
  if length(_cleared_by) not between 1 and 200 then
    raise exception 'cleared_by must be 1 to 200 characters' using errcode = '22023';
  end if;
  select max(a.throttle_id) into _last
    from queues.throttle a
   where a.key_kind = _key_kind and a.key = _key and a.throttled_until > now();
  if _last is null or queues.throttled_until(_key_kind, _key) is null then
    return false;
  end if;
  insert into queues.throttle_cleared (key_kind, key, last_throttle_id, cleared_by)
  values (_key_kind, _key, _last, _cleared_by);
  -- The tasks a throttle of this key gave back wait for its end (queues.record_throttle_at):
  -- they are available now, locked in task id order.
  update queues.task_pending p
     set available_at = now()
   where p.task_id in (
           select w.task_id from queues.task_pending w
            where w.current_lease_id is null
              and case when _key_kind = 'task_type' then w.task_type = _key else w.group_key = _key end
              and w.available_at > now() and w.available_at <> 'infinity'
              and w.available_at in (select a.throttled_until from queues.throttle a
                                      where a.key_kind = _key_kind and a.key = _key and a.throttle_id <= _last)
            order by w.task_id
              for no key update);
  -- The key's tasks are claimable again: wake the workers.
  perform pg_notify('queues_task_ready', '');
  return true;
end;
$function$;
  -- queues.clear_throttle(_key_kind text, _key text, _cleared_by text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.complete_steps(_task_ids bigint[], _task_lease_ids bigint[], _outcomes text[], _retries boolean[], _error_task_ids bigint[], _error_messages text[], _results jsonb[])
 RETURNS TABLE(task_id bigint, result text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
begin
  if _task_ids is null or _task_lease_ids is null or _results is null then
    raise exception 'task_ids, task_lease_ids and results must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> cardinality(_task_ids) or cardinality(_results) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids and results must have one element per task (% tasks, % lease ids, % results)',
      cardinality(_task_ids), cardinality(_task_lease_ids), cardinality(_results) using errcode = '22023';
  end if;
  if array_position(_task_lease_ids, null) is not null then
    raise exception 'task_lease_ids must not contain null: a step completes under its lease' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_results) r where jsonb_typeof(r) <> 'object') then
    raise exception 'results must be JSON objects' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_results) r where pg_column_size(r) > queues.max_payload_bytes()) then
    raise exception 'a result is over the limit of % bytes', queues.max_payload_bytes() using errcode = '54000';
  end if;
  return query
  with done as (
    select s.task_id, s.result, row_number() over () as ord
      from queues.settle_tasks(_task_ids, _task_lease_ids, _outcomes, _retries,
                               _error_task_ids, _error_messages,
                               -- The steps started with their call's transaction.
                               array_fill((extract(epoch from now()) * 1000000)::bigint, array[cardinality(_task_ids)])) s
  ),
  kept as (
    insert into queues.task_result (task_id, task_lease_id, result)
    select r.task_id, r.task_lease_id, r.result
      from unnest(_task_ids, _task_lease_ids, _results) as r(task_id, task_lease_id, result)
      join done d on d.task_id = r.task_id and d.result in ('completed', 'retry_scheduled')
     where r.result is not null
  )
  select d.task_id, d.result from done d order by d.ord;
end;
$function$;
  -- queues.complete_steps(_task_ids bigint[], _task_lease_ids bigint[], _outcomes text[], _retries boolean[], _error_task_ids bigint[], _error_messages text[], _results jsonb[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.complete_task(_task_id bigint, _task_lease_id bigint DEFAULT NULL::bigint, _outcome text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _result text;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  select c.result into _result
    from queues.complete_tasks(array[_task_id], array[_task_lease_id], array[_outcome]) c;
  if _result = 'unknown_task' then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  elsif _result = 'lease_lost' then
    -- The queue's lease-loss marker: SQLSTATE 55000 with schema queues and constraint
    -- task_lease_current (clients read lease loss from it, not from 55000 alone).
    raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', schema = 'queues', constraint = 'task_lease_current',
            hint = 'Another worker claimed the task after this lease expired, or it was completed without this lease.';
  end if;
  return _result in ('completed', 'retry_scheduled');
end;
$function$;
  -- queues.complete_task(_task_id bigint, _task_lease_id bigint, _outcome text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.complete_tasks(_task_ids bigint[], _task_lease_ids bigint[] DEFAULT NULL::bigint[], _outcomes text[] DEFAULT NULL::text[], _retries boolean[] DEFAULT NULL::boolean[], _started_at timestamp with time zone[] DEFAULT NULL::timestamp with time zone[])
 RETURNS TABLE(task_id bigint, result text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _bad text;
  _retried bigint[];
  _all_succeeded boolean;
  _one_lease boolean;
  -- The call's least and greatest task ids: bounds that let a plan leave out, before it
  -- starts, the history partitions none of the call's tasks is in (a generic plan's
  -- variables are known when it starts; a partition left out is neither locked nor opened).
  _lo bigint;
  _hi bigint;
  _repeated boolean;
  _calls text;
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 tasks per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain null' using errcode = '22004';
  end if;
  if _task_lease_ids is not null and cardinality(_task_lease_ids) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids must have one element per task (% tasks, % lease ids)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if _outcomes is not null and cardinality(_outcomes) <> cardinality(_task_ids) then
    raise exception 'outcomes must have one element per task (% tasks, % outcomes)',
      cardinality(_task_ids), cardinality(_outcomes) using errcode = '22023';
  end if;
  -- (A round of plain successes, every outcome 'succeeded', is checked without a query.)
  _all_succeeded := coalesce('succeeded' = all (_outcomes), false);
  if not _all_succeeded then
    select o into _bad from unnest(_outcomes) o
     where o is not null and o not in ('succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed') limit 1;
    if found then
      raise exception 'unknown outcome %; expected succeeded, failed, abandoned, cancelled or validation_failed',
        quote_literal(left(_bad, 100)) using errcode = '22023';
    end if;
  end if;
  if _retries is not null and cardinality(_retries) <> cardinality(_task_ids) then
    raise exception 'retries must have one element per task (% tasks, % retries)',
      cardinality(_task_ids), cardinality(_retries) using errcode = '22023';
  end if;
  if _started_at is not null and cardinality(_started_at) <> cardinality(_task_ids) then
    raise exception 'started_at must have one element per task (% tasks, % start times)',
      cardinality(_task_ids), cardinality(_started_at) using errcode = '22023';
  end if;
  select count(distinct t) <> count(*), min(t), max(t) into _repeated, _lo, _hi from unnest(_task_ids) t;
  if _repeated then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;

  -- The drain's call: plain successes of tasks one claim lease took out of the claim
  -- index (held by that lease alone, docs/design/hot-path.md). One statement, under the
  -- lease's lock (below), decides them all and writes their rounds, or writes nothing when
  -- any task of the call is not such a task (it has a claim-index row, the lease does not
  -- name it, or it ended), and the general statement below decides the call.
  if _all_succeeded and cardinality(_task_ids) > 0 and _task_lease_ids[1] is not null
     and _task_lease_ids[1] = all (_task_lease_ids) then
    perform pg_advisory_xact_lock(20253, hashint8(_task_lease_ids[1]));
    with lease as (
      select c.task_ids || array[]::bigint[] as task_ids, c.task_range, c.task_type
        -- (a lease's row is in the partition of its greatest task, at or above the call's)
        from queues.claim_lease c where c.task_lease_id = _task_lease_ids[1] and c.task_id >= _hi limit 1
    ),
    -- Named by the lease, and not ended: not in a round of the lease's range, nor in a row
    -- of its own, nor given a claim-index row. Each set is read once for the call and
    -- hashed (the lease's ids, the rounds' ids, and while the call's range is narrow its
    -- range of task_completed and of the claim index), not probed per task.
    open as (
      select i.task_id, i.started_at
        from unnest(_task_ids, coalesce(_started_at, array_fill(null::timestamptz, array[cardinality(_task_ids)])))
             i(task_id, started_at)
       where i.task_id in (select m.task_id from lease l cross join lateral unnest(l.task_ids) m(task_id))
         and i.task_id not in (select g.task_id
                                 from lease l
                                 join queues.completion_round r
                                   on r.task_range && l.task_range and r.task_id >= lower(l.task_range) and r.task_id >= _lo
                                cross join lateral unnest(r.task_ids) g(task_id))
         -- (the call's range read whole while it is narrow, at most four ids per task: the
         -- drain's calls; a probe per task when it is wide, so that a call whose tasks lie
         -- far apart never reads the claim index or the failures between them)
         and case when _hi - _lo < 4 * cardinality(_task_ids)
                  then i.task_id not in (select c.task_id from queues.task_completed c where c.task_id between _lo and _hi)
                   and i.task_id not in (select p.task_id from queues.task_pending p where p.task_id between _lo and _hi)
                  else (select true from queues.task_completed c
                         where c.task_id = i.task_id and c.task_id between _lo and _hi) is null
                   and (select true from queues.task_pending p where p.task_id = i.task_id) is null
             end
    ),
    rounds as (
      insert into queues.completion_round (task_id, task_type, task_ids, task_lease_ids, started_us, task_range)
      select max(o.task_id), o.task_type, array_agg(o.task_id order by o.task_id),
             array_agg(_task_lease_ids[1] order by o.task_id),
             array_agg(round(date_part('epoch', o.started_at) * 1000000)::bigint order by o.task_id),
             int8range(min(o.task_id), max(o.task_id), '[]')
        -- The lease's one type, or each task's when the claim took several.
        from (select o.*, coalesce((select l.task_type from lease l),
                                   (select t.task_type from queues.task t
                                     where t.task_id = o.task_id and t.task_id between _lo and _hi limit 1)) as task_type
                from open o) o
       -- All of the call, or nothing.
       where (select count(*) from open) = cardinality(_task_ids)
       group by o.task_type
      returning cardinality(completion_round.task_ids) as n
    )
    select coalesce(sum(r.n), 0) = cardinality(_task_ids) into _one_lease from rounds r;
    if _one_lease then
      return query select i.task_id, 'completed'::text from unnest(_task_ids) i(task_id);
      _calls := set_config('queues.completions',
                           (coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint + 1)::text,
                           true);
      return;
    end if;
  end if;

  perform queues.lock_resource_keys(_task_ids);
  -- A task completed without a lease (an unfenced caller) that its claim took out of the
  -- claim index gets its row back first (queues.hold_rows_of), and ends on it.
  if _task_lease_ids is null or array_position(_task_lease_ids, null) is not null then
    perform queues.hold_rows_of(array(
      select i.id from unnest(_task_ids, coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])))
                       i(id, lease)
       where i.lease is null));
  end if;
  -- The ready set's fence (docs/design/hot-path.md): a task a claim took out of the claim
  -- index is held by its claim lease. The leases named here are locked (transaction-scoped
  -- advisory locks, class 20253, in lease id order), exclusively: the rescuer of an
  -- expired lease takes the same lock, so a completion and the rescue of its lease never
  -- decide at once, and two completions under one lease take turns. Nothing is written.
  perform pg_advisory_xact_lock(20253, hashint8(l.id))
     from (select distinct x.id from unnest(_task_lease_ids) x(id) where x.id is not null order by 1) l;

  return query
  with input as (
    select i.task_id, i.task_lease_id, i.outcome,
           coalesce(i.retry, true) as may_retry, i.started_at, i.ord
      from unnest(_task_ids,
                  coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])),
                  coalesce(_outcomes, array_fill(null::text, array[cardinality(_task_ids)])),
                  coalesce(_retries, array_fill(null::boolean, array[cardinality(_task_ids)])),
                  coalesce(_started_at, array_fill(null::timestamptz, array[cardinality(_task_ids)])))
           with ordinality as i(task_id, task_lease_id, outcome, retry, started_at, ord)
  ),
  -- The pending rows this call may act on, locked in task id order (as every call that
  -- locks several of them: a cancel of some of them cannot deadlock with this batch): a
  -- concurrent claim skips them, a concurrent completion waits and then finds nothing.
  held_row as (
    select p.task_id, p.task_type, p.current_lease_id, p.resource_key, i.task_lease_id, i.may_retry,
           p.failed_attempts, p.max_attempts, i.started_at, true as has_row,
           case
             when i.outcome is not null then i.outcome
             -- The default: an error of the current run makes it a failure (evaluated only
             -- for a null outcome; the worker always names its outcome).
             when exists (select 1 from queues.error e
                           where e.task_id = p.task_id
                             and (e.task_lease_id = p.current_lease_id
                                  or (e.task_lease_id is null
                                      and e.created_at >= coalesce(
                                            (select l.leased_at from queues.task_lease_at(p.task_id, p.current_lease_id) l),
                                            (select t.enqueued_at from queues.task t where t.task_id = p.task_id)))))
               then 'failed'
             else 'succeeded'
           end as outcome
      from queues.task_pending p
      join input i on i.task_id = p.task_id
     -- A primary-key probe per task, whatever the planner estimates for the input.
     where p.task_id = any (_task_ids)
       and (i.task_lease_id is null
            or (p.current_lease_id = i.task_lease_id
                -- A keyed task completes under its lease only while it holds its key.
                and (p.resource_key is null
                     or exists (select 1 from queues.resource_lease r
                                 where r.resource_key = p.resource_key and r.task_id = p.task_id))))
     order by p.task_id
       for update of p
  ),
  -- Tasks out of the claim index, held by the claim lease the caller names. Read per
  -- lease, not per task: the lease by its id (it names its tasks); among the call's
  -- tasks it names, those that ended (a round in its range, or a completion) are no
  -- longer its; nor is a task with a claim-index row (back in the index: rescued,
  -- released, revoked or retrying, held there by a newer lease, or by no one). No newer
  -- lease is looked for: a claim takes a task out of the claim index only on its first
  -- lease (queues.claim_tasks_at leases a task leased before on its row), so a task the
  -- lease named that came back to the index keeps a row until its end. Read in this
  -- statement, after the lease locks above: what the rescuer or another completion of
  -- the lease did is seen.
  lease_named as (
    select c.task_lease_id, c.task_range, c.task_ids
      from (select distinct i.task_lease_id from input i where i.task_lease_id is not null) li
     cross join lateral (
       -- The array decompressed once here (`|| '{}'` returns it detoasted): read as
       -- stored, each `= any` below decompressed the lease's 500 ids again, per task.
       select c.task_lease_id, c.task_ids || array[]::bigint[] as task_ids, c.task_range from queues.claim_lease c
        where c.task_lease_id = li.task_lease_id limit 1
     ) c
  ),
  -- The call's tasks each lease still holds: named by the lease (its array unnested), not
  -- ended (a completion round naming the task, found among the rounds whose range
  -- overlaps the lease's by task_range's GiST index, or a task_completed row), and
  -- without a claim-index row. The first two are decided by one sort of the call's
  -- tasks beside the lease's tasks and the rounds' tasks, each tagged with the lease it
  -- was read for (a window over task and lease), not per task: a nested loop over the
  -- lease's array or the rounds' tasks costs the call's tasks times theirs, and the
  -- generic plan cannot be trusted to hash them.
  lease_open as (
    select o.task_id, o.task_lease_id, o.outcome, o.may_retry, o.started_at, o.ord
      from (select u.*,
                   bool_or(u.src = 1) over w as named,
                   bool_or(u.src = 2) over w as ended
              from (select i.task_id, i.task_lease_id, i.outcome, i.may_retry, i.started_at, i.ord, 0 as src
                      from input i
                     where i.task_lease_id is not null
                    union all
                    select m.task_id, l.task_lease_id, null::text, null::boolean, null::timestamptz, null::bigint, 1
                      from lease_named l
                     cross join lateral unnest(l.task_ids) m(task_id)
                    union all
                    select g.task_id, l.task_lease_id, null::text, null::boolean, null::timestamptz, null::bigint, 2
                      from lease_named l
                      join queues.completion_round r
                        on r.task_range && l.task_range and r.task_id >= lower(l.task_range)
                     cross join lateral unnest(r.task_ids) g(task_id)) u
            window w as (partition by u.task_id, u.task_lease_id)) o
     where o.src = 0 and o.named and not o.ended
       -- (scalar subqueries: a primary-key probe per task, never an anti-join planned
       -- from the tables' statistics)
       and (select true from queues.task_completed c where c.task_id = o.task_id) is null
       and (select true from queues.task_pending p where p.task_id = o.task_id) is null
  ),
  held_lease as (
    select t.task_id, t.task_type, i.task_lease_id, t.resource_key, i.task_lease_id, i.may_retry,
           case when i.outcome is distinct from 'succeeded'
                then (select count(*)::integer from queues.task_attempt_failed a where a.task_id = t.task_id)
                else 0 end,
           t.max_attempts, i.started_at, false,
           case
             when i.outcome is not null then i.outcome
             when exists (select 1 from queues.error e
                           where e.task_id = t.task_id
                             and (e.task_lease_id = i.task_lease_id
                                  or (e.task_lease_id is null
                                      and e.created_at >= (select l.leased_at
                                                              from queues.task_lease_at(t.task_id, i.task_lease_id) l))))
               then 'failed'
             else 'succeeded'
           end as outcome
      from lease_open i
     cross join lateral (select * from queues.task t where t.task_id = i.task_id limit 1) t
  ),
  held as (
    select h.task_id, h.task_type, h.current_lease_id, h.resource_key, h.task_lease_id, h.outcome,
           h.outcome = 'failed' and h.may_retry and h.failed_attempts + 1 < h.max_attempts as retry,
           h.failed_attempts, h.started_at, h.has_row
      from (select * from held_row union all select * from held_lease) h
  ),
  -- Simple retries: a failed attempt with attempts left runs again after a backoff.
  retry_facts as (
    insert into queues.task_attempt_failed (task_id, task_lease_id, failed_at, retry_at, started_at)
    select h.task_id, h.current_lease_id, now(), now() + internal.backoff(h.failed_attempts, 3600), h.started_at
      from held h where h.retry
    returning task_id, retry_at
  ),
  retried as (
    update queues.task_pending p
       set available_at = r.retry_at,
           current_lease_id = null,
           failed_attempts = p.failed_attempts + 1
      from retry_facts r
     where p.task_id = r.task_id
       and p.task_id = any (array(select r2.task_id from retry_facts r2))
    returning p.task_id
  ),
  -- (A task held by its claim lease has no row: only the rows held are deleted.)
  removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select h.task_id from held h where not h.retry and h.has_row))
    returning p.task_id
  ),
  -- Every end but a plain success: a task_completed row per task. The lease the caller
  -- held; null when it passed none. A fenced caller is told 'already_completed' only for
  -- a completion made under its own lease.
  ended as (
    insert into queues.task_completed (task_id, task_lease_id, outcome, task_type, started_at)
    select h.task_id, h.task_lease_id, h.outcome, h.task_type, h.started_at
      from held h where not h.retry and h.outcome <> 'succeeded'
    on conflict do nothing
    returning task_completed.task_id
  ),
  -- Plain successes: one completion round per task type, naming its tasks in ascending
  -- order with the lease the caller held and the run's start (microseconds since the
  -- epoch) of each. No constraint keeps a task from two ends: the pending row, locked
  -- above and deleted here, does (every end deletes it in the transaction that records
  -- the end, so a task with a pending row has none, and a concurrent completer of the
  -- same task waits for the lock and then finds no row).
  rounds as (
    insert into queues.completion_round (task_id, task_type, task_ids, task_lease_ids, started_us, task_range)
    select max(h.task_id), h.task_type,
           array_agg(h.task_id order by h.task_id),
           array_agg(h.task_lease_id order by h.task_id),
           -- date_part's float8, not extract's numeric: rounded, exact to the microsecond
           -- for any time of this century (its error is under a quarter of one).
           array_agg(round(date_part('epoch', h.started_at) * 1000000)::bigint order by h.task_id),
           int8range(min(h.task_id), max(h.task_id), '[]')
      from held h where not h.retry and h.outcome = 'succeeded'
     group by h.task_type
    returning completion_round.task_ids
  ),
  completed as (
    select e.task_id from ended e
    union all
    select u.task_id from rounds r cross join lateral unnest(r.task_ids) as u(task_id)
  ),
  -- The task's resource key (if any) is free again, whether it completed or waits to retry.
  unlocked as (
    delete from queues.resource_lease r
     using held h
     where h.resource_key is not null and r.resource_key = h.resource_key and r.task_id = h.task_id
  )
  select i.task_id,
         case
           when c.task_id is not null then 'completed'
           when rt.task_id is not null then 'retry_scheduled'
           -- Completed under another lease: the caller's lease was taken over, and its
           -- transaction must not commit as if it had completed the task.
           -- (Its end in either shape: queues.task_end_of, an index probe of each; a
           -- scalar subquery, evaluated only for the tasks this call did not complete.)
           when i.task_lease_id is not null
                and coalesce((select true from queues.task_end_of(i.task_id) e
                               where e.task_lease_id is distinct from i.task_lease_id limit 1), false)
             then 'lease_lost'
           when coalesce((select true from queues.task_end_of(i.task_id) e limit 1), false)
             then 'already_completed'
           when not exists (select 1 from queues.task t where t.task_id = i.task_id)
             then 'unknown_task'
           else 'lease_lost'
         end
    from input i
    left join completed c on c.task_id = i.task_id
    -- (every retry recorded: a claim-index row moved, or a lease-held task's written after)
    left join retry_facts rt on rt.task_id = i.task_id
   order by i.ord;

  -- A failed attempt of a task held by its claim lease (no claim-index row) returns it to
  -- the claim index, at its retry time, as the facts now give it. (The attempts this
  -- transaction recorded: failed_at is the transaction's now(). A call whose outcomes all
  -- succeeded recorded none.)
  if _task_lease_ids is not null and not _all_succeeded then
    _retried := array(select a.task_id from queues.task_attempt_failed a
                       where a.task_id = any (_task_ids) and a.failed_at = now()
                         and not exists (select 1 from queues.task_pending p where p.task_id = a.task_id));
    if cardinality(_retried) > 0 then
      perform queues.write_pending_rows(_retried);
    end if;
  end if;
  -- The transaction's completion calls, counted (queues.run_steps watches them: a step
  -- that ends a task without a claim-index row touches no row). A simple expression: no
  -- statement of its own.
  _calls := set_config('queues.completions',
                       (coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint + 1)::text,
                       true);
end;
$function$;
  -- queues.complete_tasks(_task_ids bigint[], _task_lease_ids bigint[], _outcomes text[], _retries boolean[], _started_at timestamp with time zone[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.completion_round_release_dependents()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform from queues.task_pending p where p.available_at = 'infinity' limit 1;
  if found then
    perform queues.release_dependents(new.task_ids,
                                      array_fill('succeeded'::text, array[cardinality(new.task_ids)]));
  end if;
  return null;
end;
$function$;
  -- queues.completion_round_release_dependents(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.create_history_partition(_lower bigint, _upper bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _table text;
  _created boolean := false;
begin
  if _lower is null or _upper is null or _lower < 0 or _upper <= _lower then
    raise exception 'partition bounds must satisfy 0 <= lower < upper, got [%, %)', _lower, _upper
      using errcode = '22023';
  end if;
  for _table in
    select t.name from unnest(queues.history_tables()) with ordinality t(name, n) order by t.name = 'task', t.n
  loop
    _created := queues.attach_history_partition(_table, _lower, _upper) or _created;
  end loop;
  if _created then
    insert into queues.history_partition_created (lower_bound, upper_bound)
    values (_lower, _upper) on conflict (lower_bound) do nothing;
  end if;
  return _created;
end;
$function$;
  -- queues.create_history_partition(_lower bigint, _upper bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.create_history_table(_table text, _name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  execute format('create table queues.%I (like queues.%I including defaults including constraints including indexes including storage)',
                 _name, _table);
  execute format('create trigger forbid_update before update on queues.%I
                    for each statement execute function queues.forbid_fact_update()', _name);
end;
$function$;
  -- queues.create_history_table(_table text, _name text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.current_lease_expiry(_task_id bigint, _task_lease_id bigint)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select case when p.current_lease_id = _task_lease_id then p.available_at end
    from queues.task_pending p
   where p.task_id = _task_id
  union all
  -- The ready set (docs/design/hot-path.md): a task its claim took out of the claim index
  -- has no row; until it ends, the claim lease that names it holds it, until its expiry.
  select h.expires_at from queues.lease_held_of(_task_id) h where h.task_lease_id = _task_lease_id
  limit 1
$function$;
  -- queues.current_lease_expiry(_task_id bigint, _task_lease_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.current_leases(_task_ids bigint[], _task_lease_ids bigint[])
 RETURNS boolean[]
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select coalesce(array_agg(coalesce((select p.current_lease_id from queues.task_pending p
                                       where p.task_id = i.task_id) = i.task_lease_id,
                                      -- no row: held by its claim lease until it ends
                                      exists (select 1 from queues.lease_held_of(i.task_id) h
                                               where h.task_lease_id = i.task_lease_id))
                            order by i.ord), '{}')
    from unnest(_task_ids, _task_lease_ids) with ordinality as i(task_id, task_lease_id, ord)
$function$;
  -- queues.current_leases(_task_ids bigint[], _task_lease_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.default_max_attempts()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 25 $function$;
  -- queues.default_max_attempts(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.dependency_verdicts(_task_ids bigint[], _ended_ids bigint[], _ended_outcomes text[])
 RETURNS TABLE(task_id bigint, failed_dep bigint, failed_outcome text, pending boolean)
 LANGUAGE sql
 STABLE
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select x.task_id,
         (array_agg(x.depends_on_task_id order by x.depends_on_task_id) filter (where x.outcome <> 'succeeded'))[1],
         (array_agg(x.outcome order by x.depends_on_task_id) filter (where x.outcome <> 'succeeded'))[1],
         coalesce(bool_or(x.outcome is null), false)
    from (
      select d.task_id, d.depends_on_task_id,
             coalesce(
               (select e.outcome from unnest(_ended_ids, _ended_outcomes) e(task_id, outcome)
                 where e.task_id = d.depends_on_task_id and e.outcome is not null limit 1),
               (select c.outcome from queues.task_completed c
                 where c.task_id = d.depends_on_task_id and c.outcome <> 'succeeded'),
               -- pending: a claim-index row, or none and no end (held by its claim lease)
               case when (select true from queues.task_pending p where p.task_id = d.depends_on_task_id)
                         or not exists (select 1 from queues.task_end_of(d.depends_on_task_id) e) then null
                    else 'succeeded' end) as outcome
        from queues.task_dependency d
       -- A primary-key range per dependent.
       where d.task_id = any (_task_ids)
    ) x
   group by x.task_id
$function$;
  -- queues.dependency_verdicts(_task_ids bigint[], _ended_ids bigint[], _ended_outcomes text[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.dequeue_next_available_task(_worker_id text DEFAULT NULL::text, _lease_seconds integer DEFAULT NULL::integer)
 RETURNS SETOF queues.task
 LANGUAGE sql
 SECURITY DEFINER ROWS 1
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  -- The columns of queues.task, in table order.
  select c.task_id, c.task_type, c.payload, c.priority, c.resource_key, c.max_attempts,
         c.enqueued_at, c.scheduled_at,
         (select t.group_key from queues.task t where t.task_id = c.task_id), c.timeout_ms
    from queues.claim_tasks_at(now(), coalesce(_worker_id, session_user::text), 1,
                               queues.claimable_task_types(null), coalesce(_lease_seconds, 300), 5) c
$function$;
  -- queues.dequeue_next_available_task(_worker_id text, _lease_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.enqueue(_task_type text, _payload jsonb, _scheduled_at timestamp with time zone DEFAULT NULL::timestamp with time zone, _priority integer DEFAULT NULL::integer, _resource_key text DEFAULT NULL::text, _max_attempts integer DEFAULT NULL::integer, _notify boolean DEFAULT true, _depends_on bigint[] DEFAULT NULL::bigint[], _group_key text DEFAULT NULL::text, _timeout_ms integer DEFAULT NULL::integer)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts,
                             true, coalesce(_notify, true), false, _depends_on, _group_key, _timeout_ms);
end;
$function$;
  -- queues.enqueue(_task_type text, _payload jsonb, _scheduled_at timestamp with time zone, _priority integer, _resource_key text, _max_attempts integer, _notify boolean, _depends_on bigint[], _group_key text, _timeout_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE PROCEDURE queues.enqueue_and_commit(IN _task_type text, IN _payload jsonb, IN _scheduled_at timestamp with time zone DEFAULT NULL::timestamp with time zone, IN _priority integer DEFAULT NULL::integer, IN _resource_key text DEFAULT NULL::text, IN _max_attempts integer DEFAULT NULL::integer, INOUT _task_id bigint DEFAULT NULL::bigint, IN _group_key text DEFAULT NULL::text, IN _timeout_ms integer DEFAULT NULL::integer, IN _depends_on bigint[] DEFAULT NULL::bigint[])
 LANGUAGE plpgsql
AS $procedure$
begin
  _task_id := queues.enqueue(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, false,
                             _depends_on, _group_key, _timeout_ms);
  commit;
  if _scheduled_at is null
     or _scheduled_at operator(pg_catalog.<=) (pg_catalog.now() operator(pg_catalog.+) interval '1 minute') then
    perform pg_catalog.pg_notify('queues_task_ready', '');
  end if;
end;
$procedure$;
  -- queues.enqueue_and_commit(IN _task_type text, IN _payload jsonb, IN _scheduled_at timestamp with time zone, IN _priority integer, IN _resource_key text, IN _max_attempts integer, INOUT _task_id bigint, IN _group_key text, IN _timeout_ms integer, IN _depends_on bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.enqueue_internal(_task_type text, _payload jsonb, _scheduled_at timestamp with time zone DEFAULT NULL::timestamp with time zone, _priority integer DEFAULT NULL::integer, _resource_key text DEFAULT NULL::text, _max_attempts integer DEFAULT NULL::integer, _depends_on bigint[] DEFAULT NULL::bigint[], _group_key text DEFAULT NULL::text, _timeout_ms integer DEFAULT NULL::integer)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts,
                             false, true, false, _depends_on, _group_key, _timeout_ms);
end;
$function$;
  -- queues.enqueue_internal(_task_type text, _payload jsonb, _scheduled_at timestamp with time zone, _priority integer, _resource_key text, _max_attempts integer, _depends_on bigint[], _group_key text, _timeout_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.enqueue_many(_tasks jsonb)
 RETURNS TABLE(task_id bigint)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select t.task_id from queues.enqueue_tasks(_tasks, true) t
$function$;
  -- queues.enqueue_many(_tasks jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.enqueue_task(_task_type text, _payload jsonb, _scheduled_at timestamp with time zone, _priority integer, _resource_key text, _max_attempts integer, _public boolean DEFAULT false, _notify boolean DEFAULT true, _check_only boolean DEFAULT false, _depends_on bigint[] DEFAULT NULL::bigint[], _group_key text DEFAULT NULL::text, _timeout_ms integer DEFAULT NULL::integer)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _task_id bigint;
begin
  if _public and exists (select 1 from queues.internal_task_type i where i.task_type = _task_type) then
    perform queues.assert_may_enqueue(_task_type);
  end if;
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if _payload is null then
    raise exception 'payload must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_payload) <> 'object' then
    raise exception 'payload must be a JSON object, got %', jsonb_typeof(_payload) using errcode = '22023';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    raise exception 'payload is % bytes, over the limit of % bytes', pg_column_size(_payload), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  if jsonb_path_exists(_payload, 'strict $.**{65}') then
    raise exception 'payload is nested deeper than % levels', queues.max_payload_depth() using errcode = '54000';
  end if;
  if _priority not between -1000 and 1000 then
    raise exception 'priority must be between -1000 and 1000, got %', _priority using errcode = '22023';
  end if;
  if length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if length(_group_key) not between 1 and 200 then
    raise exception 'group_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _max_attempts not between 1 and 100 then
    raise exception 'max_attempts must be between 1 and 100, got %', _max_attempts using errcode = '22023';
  end if;
  if _timeout_ms not between 1 and 86400000 then
    raise exception 'timeout_ms must be between 1 and 86400000 (24 hours), got %', _timeout_ms using errcode = '22023';
  end if;
  if not isfinite(_scheduled_at) then
    raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
  end if;
  if _check_only then
    if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
      raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
        using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
    end if;
    if cardinality(_depends_on) > 0 then
      perform queues.check_task_dependencies(array_fill(0::bigint, array[cardinality(_depends_on)]), _depends_on,
                                             array_fill(''::text, array[cardinality(_depends_on)]), '{}');
    end if;
    return null;
  end if;
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t where t.task_type = _task_type for key share;
  end if;

  with inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at, group_key,
                             timeout_ms)
    select t.task_type, _payload, coalesce(_priority, 0), _resource_key,
           coalesce(_max_attempts, queues.default_max_attempts()), coalesce(_scheduled_at, now()), _group_key,
           _timeout_ms
      from queues.task_type t
     where t.task_type = _task_type
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts, group_key
  )
  -- A task with dependencies starts waiting (at 'infinity', sql/queues/dependencies.sql),
  -- so that no index entry of it is ever among the ready ones.
  insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts,
                                  group_key)
  select i.task_id, i.task_type, i.priority,
         case when cardinality(_depends_on) > 0 then 'infinity' else i.scheduled_at end, i.resource_key,
         case when cardinality(_depends_on) > 0 then 'infinity' else i.scheduled_at end, i.max_attempts,
         i.group_key
    from inserted i
  returning task_id into _task_id;

  if _task_id is null then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
  -- The caller's trace context, when the transaction has one (sql/queues/trace.sql).
  if current_setting('queue.traceparent', true) <> '' then
    perform queues.record_task_trace(array[_task_id]);
  end if;
  -- Dependencies (sql/queues/dependencies.sql): the task waits, or fails at once.
  if cardinality(_depends_on) > 0 then
    perform queues.add_task_dependencies(array_fill(_task_id, array[cardinality(_depends_on)]), _depends_on,
                                         array_fill(''::text, array[cardinality(_depends_on)]), array[_task_id]);
  end if;
  -- A task due more than a minute ahead wakes nobody now: workers poll for it.
  if _notify and (_scheduled_at is null or _scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _task_id;
end;
$function$;
  -- queues.enqueue_task(_task_type text, _payload jsonb, _scheduled_at timestamp with time zone, _priority integer, _resource_key text, _max_attempts integer, _public boolean, _notify boolean, _check_only boolean, _depends_on bigint[], _group_key text, _timeout_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.enqueue_tasks(_tasks jsonb, _public boolean DEFAULT false)
 RETURNS TABLE(task_id bigint)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _ids bigint[];
  _ready boolean;
  _refused record;
  _dep_tasks bigint[];
  _dep_ids bigint[];
  _dep_labels text[];
  _deps boolean;
  _limited text[];
begin
  if _tasks is null then
    raise exception 'tasks must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_tasks) <> 'array' then
    raise exception 'tasks must be a JSON array, got %', jsonb_typeof(_tasks) using errcode = '22023';
  end if;
  if jsonb_array_length(_tasks) > 10000 then
    raise exception 'at most 10000 tasks per call, got %', jsonb_array_length(_tasks)
      using errcode = '54000';
  end if;
  -- A worker-only task type anywhere refuses the batch before any element is read
  -- further (the first such element is named), unless the session is the owner's.
  if _public and not queues.is_owner_session() then
    select e.ordinality - 1 as idx, e.value ->> 'task_type' as task_type into _refused
      from jsonb_array_elements(_tasks) with ordinality e
     where e.value ->> 'task_type' in (select i.task_type from queues.internal_task_type i)
     order by e.ordinality
     limit 1;
    if found then
      perform queues.assert_may_enqueue(_refused.task_type, format('tasks[%s]: ', _refused.idx));
    end if;
  end if;
  -- A batch naming a unique key goes element by element (sql/queues/unique.sql); a batch
  -- without one pays only this walk of its elements' keys.
  if jsonb_path_exists(_tasks, 'lax $[*] ? (exists(@.unique_key) || exists(@.unique_policy) || exists(@.unique_period))') then
    return query select u.task_id from queues.enqueue_tasks_one_by_one(_tasks, _public) u;
    return;
  end if;
  -- What keeps a task out of a ready batch: dependencies anywhere in the call, a flow
  -- limit on its type (the limits in force, read once: a tiny table).
  _deps := jsonb_path_exists(_tasks, 'lax $[*].depends_on[*]');
  _limited := array(select distinct l.task_type from queues.task_limits() l);
  -- Under REPEATABLE READ or SERIALIZABLE, lock the types FOR KEY SHARE (see
  -- queues.enqueue_task).
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t
     where t.task_type in (select e.value ->> 'task_type' from jsonb_array_elements(_tasks) e)
       for key share;
  end if;

  with input as (
    select e.ordinality - 1 as idx, e.value as element,
           e.value ->> 'task_type' as task_type,
           e.value -> 'payload' as payload,
           (e.value ->> 'scheduled_at')::timestamptz as scheduled_at,
           (e.value ->> 'priority')::integer as priority,
           e.value ->> 'resource_key' as resource_key,
           (e.value ->> 'max_attempts')::integer as max_attempts,
           e.value ->> 'group_key' as group_key,
           (e.value ->> 'timeout_ms')::integer as timeout_ms
      from jsonb_array_elements(_tasks) with ordinality e
  ),
  checked as (
    -- The problem of each element as '<SQLSTATE> <message>', NULL when it has none: its
    -- shape (an object of known fields), then the checks of queues.enqueue_task.
    select c.*,
           case
             when jsonb_typeof(c.element) <> 'object' then
               '22023 must be a JSON object, got ' || jsonb_typeof(c.element)
             when c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,depends_on,group_key,timeout_ms}'::text[] <> '{}' then
               '22023 unknown field(s) ' || left((select string_agg(k, ', ') from jsonb_object_keys(
                 c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,depends_on,group_key,timeout_ms}'::text[]) k), 200)
             -- depends_on: null, or an array of task ids (integers, or their decimal text).
             when jsonb_typeof(c.element -> 'depends_on') not in ('array', 'null')
                  or jsonb_path_exists(c.element -> 'depends_on',
                       'lax $[*] ? (!((@.type() == "number" && @ == @.floor()) || (@.type() == "string" && @ like_regex "^[0-9]{1,18}$")))') then
               '22023 depends_on must be an array of task ids'
             when c.task_type is null then '22004 task_type must not be null'
             when c.task_type not in (select t.task_type from queues.task_type t) then
               '22023 unknown task_type ' || quote_literal(left(c.task_type, 100))
             when c.payload is null then '22004 payload must not be null'
             when jsonb_typeof(c.payload) <> 'object' then
               '22023 payload must be a JSON object, got ' || jsonb_typeof(c.payload)
             when pg_column_size(c.payload) > queues.max_payload_bytes() then
               format('54000 payload is %s bytes, over the limit of %s bytes', pg_column_size(c.payload), queues.max_payload_bytes())
             -- Nesting deeper than 64 levels takes over 512 bytes (an uncompressed value,
             -- as c.payload is: just taken out of the batch), so smaller ones are not walked.
             when pg_column_size(c.payload) > 512 and jsonb_path_exists(c.payload, 'strict $.**{65}') then
               format('54000 payload is nested deeper than %s levels', queues.max_payload_depth())
             when c.priority not between -1000 and 1000 then
               '22023 priority must be between -1000 and 1000, got ' || c.priority
             when length(c.resource_key) not between 1 and 200 then '22023 resource_key must be 1 to 200 characters'
             when length(c.group_key) not between 1 and 200 then '22023 group_key must be 1 to 200 characters'
             when c.max_attempts not between 1 and 100 then
               '22023 max_attempts must be between 1 and 100, got ' || c.max_attempts
             when c.timeout_ms not between 1 and 86400000 then
               '22023 timeout_ms must be between 1 and 86400000 (24 hours), got ' || c.timeout_ms
             when not isfinite(c.scheduled_at) then
               '22023 scheduled_at must be a finite time, got ' || c.scheduled_at
           end as problem
      from input c
  ),
  inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at, group_key, timeout_ms)
    select c.task_type,
           case when c.problem is null then c.payload else queues.raise_enqueue_problem(c.idx, c.problem) end,
           coalesce(c.priority, 0), c.resource_key, coalesce(c.max_attempts, queues.default_max_attempts()), coalesce(c.scheduled_at, now()),
           c.group_key, c.timeout_ms
      from checked c
     order by c.idx
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts, group_key
  ),
  -- Ready batches (sql/queues/ready_batch.sql): the plain tasks (no resource key, no group
  -- key, scheduled_at not given, a type without a flow limit, a call without dependencies),
  -- two or more of one type, priority and max_attempts, go into one batch row; the others
  -- each get a claim-index row.
  placed as (
    select i.*,
           i.plain and count(*) filter (where i.plain)
                         over (partition by i.task_type, i.priority, i.max_attempts, i.plain) >= 2 as batched
      from (select i.*,
                   not _deps and i.resource_key is null and i.group_key is null and i.scheduled_at = now()
                     and not (i.task_type = any (_limited)) as plain
              from inserted i) i
  ),
  pending as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts, group_key)
    select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts, i.group_key
      from placed i
     where not i.batched
  ),
  batches as (
    insert into queues.task_ready_batch (task_id, task_type, priority, scheduled_at, max_attempts, task_ids, task_range)
    select min(i.task_id), i.task_type, i.priority, min(i.scheduled_at), i.max_attempts,
           array_agg(i.task_id order by i.task_id), int8range(min(i.task_id), max(i.task_id), '[]')
      from placed i
     where i.batched
     group by i.task_type, i.priority, i.max_attempts
  )
  select array_agg(i.task_id order by i.task_id), bool_or(i.scheduled_at <= now() + interval '1 minute')
    into _ids, _ready
    from inserted i;
  -- The caller's trace context, when the transaction has one (sql/queues/trace.sql).
  if current_setting('queue.traceparent', true) <> '' then
    perform queues.record_task_trace(_ids);
  end if;
  -- Dependencies (sql/queues/dependencies.sql), one edge per element of a depends_on:
  -- _ids is in input order (the insert numbered the tasks in that order).
  if _deps then
    select array_agg(_ids[e.n] order by e.n, d.n), array_agg((d.value #>> '{}')::bigint order by e.n, d.n),
           array_agg(format('tasks[%s]: ', e.n - 1) order by e.n, d.n)
      into _dep_tasks, _dep_ids, _dep_labels
      from jsonb_array_elements(_tasks) with ordinality e(value, n)
     cross join lateral jsonb_array_elements(e.value -> 'depends_on') with ordinality d(value, n)
     where jsonb_typeof(e.value -> 'depends_on') = 'array';
    perform queues.add_task_dependencies(_dep_tasks, _dep_ids, _dep_labels, _ids);
  end if;

  if _ready then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select u.id from unnest(_ids) u(id);
end;
$function$;
  -- queues.enqueue_tasks(_tasks jsonb, _public boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.enqueue_tasks_one_by_one(_tasks jsonb, _public boolean)
 RETURNS TABLE(task_id bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _idx bigint := -1;
  _e jsonb;
  _id bigint;
  _ids bigint[] := '{}';
  _state text;
  _message text;
  _hint text;
  _fields constant text[] :=
    '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,unique_key,unique_policy,unique_period,depends_on,group_key,timeout_ms}';
  _deps bigint[];
begin
  begin
    for _e in select x.value from jsonb_array_elements(_tasks) x loop
      _idx := _idx + 1;
      if jsonb_typeof(_e) <> 'object' then
        raise exception 'must be a JSON object, got %', jsonb_typeof(_e) using errcode = '22023';
      end if;
      if _e - _fields <> '{}' then
        raise exception 'unknown field(s) %',
          left((select string_agg(k, ', ') from jsonb_object_keys(_e - _fields) k), 200) using errcode = '22023';
      end if;
      if jsonb_typeof(_e -> 'depends_on') not in ('array', 'null')
         or jsonb_path_exists(_e -> 'depends_on',
              'lax $[*] ? (!((@.type() == "number" && @ == @.floor()) || (@.type() == "string" && @ like_regex "^[0-9]{1,18}$")))') then
        raise exception 'depends_on must be an array of task ids' using errcode = '22023';
      end if;
      _deps := case when jsonb_typeof(_e -> 'depends_on') = 'array'
                    then array(select (d #>> '{}')::bigint from jsonb_array_elements(_e -> 'depends_on') d) end;
      if _deps && _ids then
        raise exception 'depends_on names task %, enqueued by the same call',
          (select min(d) from unnest(_deps) d where d = any (_ids))
          using errcode = '22023',
                hint = 'A task can depend only on tasks that exist before its enqueue, so dependencies never form a cycle.';
      end if;
      if _e ->> 'unique_key' is null then
        if _e ->> 'unique_policy' is not null or _e ->> 'unique_period' is not null then
          raise exception 'unique_key must not be null when unique_policy or unique_period is given'
            using errcode = '22004';
        end if;
        _id := queues.enqueue_task(_e ->> 'task_type', _e -> 'payload', (_e ->> 'scheduled_at')::timestamptz,
                                   (_e ->> 'priority')::integer, _e ->> 'resource_key',
                                   (_e ->> 'max_attempts')::integer, _public, false, false, _deps,
                                   _e ->> 'group_key', (_e ->> 'timeout_ms')::integer);
      else
        select u.task_id into _id
          from queues.enqueue_unique_task(_e ->> 'task_type', _e -> 'payload', _e ->> 'unique_key',
                                          _e ->> 'unique_policy', (_e ->> 'unique_period')::interval,
                                          (_e ->> 'scheduled_at')::timestamptz, (_e ->> 'priority')::integer,
                                          _e ->> 'resource_key', (_e ->> 'max_attempts')::integer,
                                          _public, false, _deps, _e ->> 'group_key', (_e ->> 'timeout_ms')::integer) u;
      end if;
      _ids := _ids || _id;
    end loop;
  exception when others then
    get stacked diagnostics _state = returned_sqlstate, _message = message_text, _hint = pg_exception_hint;
    raise exception 'tasks[%]: %', _idx, _message using errcode = _state, hint = _hint;
  end;
  if exists (select 1 from queues.task_pending p
              where p.task_id = any (_ids) and p.scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select u.id from unnest(_ids) with ordinality u(id, n) order by u.n;
end;
$function$;
  -- queues.enqueue_tasks_one_by_one(_tasks jsonb, _public boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.enqueue_unique(_task_type text, _payload jsonb, _unique_key text, _unique_policy text DEFAULT NULL::text, _unique_period interval DEFAULT NULL::interval, _scheduled_at timestamp with time zone DEFAULT NULL::timestamp with time zone, _priority integer DEFAULT NULL::integer, _resource_key text DEFAULT NULL::text, _max_attempts integer DEFAULT NULL::integer, _depends_on bigint[] DEFAULT NULL::bigint[], _group_key text DEFAULT NULL::text, _timeout_ms integer DEFAULT NULL::integer)
 RETURNS TABLE(task_id bigint, outcome text, replaced_task_id bigint)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select u.task_id, u.outcome, u.replaced_task_id
    from queues.enqueue_unique_task(_task_type, _payload, _unique_key, _unique_policy, _unique_period,
                                    _scheduled_at, _priority, _resource_key, _max_attempts, true, true,
                                    _depends_on, _group_key, _timeout_ms) u
$function$;
  -- queues.enqueue_unique(_task_type text, _payload jsonb, _unique_key text, _unique_policy text, _unique_period interval, _scheduled_at timestamp with time zone, _priority integer, _resource_key text, _max_attempts integer, _depends_on bigint[], _group_key text, _timeout_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.enqueue_unique_internal(_task_type text, _payload jsonb, _unique_key text, _unique_policy text DEFAULT NULL::text, _unique_period interval DEFAULT NULL::interval, _scheduled_at timestamp with time zone DEFAULT NULL::timestamp with time zone, _priority integer DEFAULT NULL::integer, _resource_key text DEFAULT NULL::text, _max_attempts integer DEFAULT NULL::integer, _depends_on bigint[] DEFAULT NULL::bigint[], _group_key text DEFAULT NULL::text, _timeout_ms integer DEFAULT NULL::integer)
 RETURNS TABLE(task_id bigint, outcome text, replaced_task_id bigint)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select u.task_id, u.outcome, u.replaced_task_id
    from queues.enqueue_unique_task(_task_type, _payload, _unique_key, _unique_policy, _unique_period,
                                    _scheduled_at, _priority, _resource_key, _max_attempts, false, true,
                                    _depends_on, _group_key, _timeout_ms) u
$function$;
  -- queues.enqueue_unique_internal(_task_type text, _payload jsonb, _unique_key text, _unique_policy text, _unique_period interval, _scheduled_at timestamp with time zone, _priority integer, _resource_key text, _max_attempts integer, _depends_on bigint[], _group_key text, _timeout_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.enqueue_unique_task(_task_type text, _payload jsonb, _unique_key text, _unique_policy text, _unique_period interval, _scheduled_at timestamp with time zone, _priority integer, _resource_key text, _max_attempts integer, _public boolean DEFAULT false, _notify boolean DEFAULT true, _depends_on bigint[] DEFAULT NULL::bigint[], _group_key text DEFAULT NULL::text, _timeout_ms integer DEFAULT NULL::integer, OUT task_id bigint, OUT outcome text, OUT replaced_task_id bigint)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_variable
declare
  _policy text := coalesce(_unique_policy, 'skip');
  _at timestamptz := _scheduled_at;
  _old bigint;
  _held boolean;
begin
  if _public and queues.is_internal_task_type(_task_type) then
    perform queues.assert_may_enqueue(_task_type);
  end if;
  if _unique_key is null then
    raise exception 'unique_key must not be null' using errcode = '22004';
  end if;
  if length(_unique_key) not between 1 and 200 then
    raise exception 'unique_key must be 1 to 200 characters, got %', length(_unique_key) using errcode = '22023';
  end if;
  if _policy not in ('skip', 'replace', 'debounce') then
    raise exception 'unique_policy must be ''skip'', ''replace'' or ''debounce'', got %', quote_literal(left(_policy, 50))
      using errcode = '22023';
  end if;
  if _policy = 'debounce' then
    if _unique_period is null then
      raise exception 'unique_period must not be null with the debounce policy' using errcode = '22004';
    end if;
    if not isfinite(_unique_period) or _unique_period < interval '0' then
      raise exception 'unique_period must be a finite, non-negative interval, got %', _unique_period
        using errcode = '22023';
    end if;
    if not isfinite(_scheduled_at) then
      raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
    end if;
    _at := coalesce(_scheduled_at, now()) + _unique_period;
  elsif _unique_period is not null then
    raise exception 'unique_period applies only to the debounce policy, not %', quote_literal(_policy)
      using errcode = '22023';
  end if;
  -- Every check of a plain enqueue (the dependencies' too), writing nothing.
  perform queues.enqueue_task(_task_type, _payload, _at, _priority, _resource_key, _max_attempts,
                              _public, false, true, _depends_on, _group_key, _timeout_ms);

  -- The key's row, locked: a concurrent enqueuer of the key waits here until this
  -- transaction ends, then sees its task. The insert of a new key waits for a concurrent
  -- insert of the same key to commit and then does nothing; the loop then locks that row.
  loop
    select k.task_id into _old from queues.task_unique_key k where k.unique_key = _unique_key for update;
    exit when found;
    insert into queues.task_unique_key (unique_key, task_id) values (_unique_key, null) on conflict do nothing;
    exit when found;
  end loop;
  if _old is not null then
    -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
    perform queues.hold_rows_of(array[_old]);
    select (p.current_lease_id is not null and p.available_at > now()) into _held
      from queues.task_pending p where p.task_id = _old;
    if not found then
      _old := null;
    end if;
  end if;

  if _old is not null and _policy = 'skip' then
    task_id := _old;
    outcome := 'skipped';
    return;
  end if;
  -- (A running task is not replaced: the new task waits for it, as any other would.)
  if _old is not null and not _held and _old = any (_depends_on) then
    raise exception 'depends_on names task %, which this enqueue replaces (unique key %)', _old, quote_literal(_unique_key)
      using errcode = '22023';
  end if;

  task_id := queues.enqueue_task(_task_type, _payload, _at, _priority, _resource_key, _max_attempts,
                                 _public, _notify, false, _depends_on, _group_key, _timeout_ms);
  insert into queues.task_unique (task_id, unique_key) values (task_id, _unique_key);
  update queues.task_unique_key k set task_id = enqueue_unique_task.task_id where k.unique_key = _unique_key;
  outcome := 'inserted';
  if _old is not null and not _held
     and queues.supersede_task(_old, format('replaced by task %s (unique key %s)', task_id, quote_literal(_unique_key))) then
    outcome := 'replaced';
    replaced_task_id := _old;
  end if;
end;
$function$;
  -- queues.enqueue_unique_task(_task_type text, _payload jsonb, _unique_key text, _unique_policy text, _unique_period interval, _scheduled_at timestamp with time zone, _priority integer, _resource_key text, _max_attempts integer, _public boolean, _notify boolean, _depends_on bigint[], _group_key text, _timeout_ms integer, OUT task_id bigint, OUT outcome text, OUT replaced_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.extend_leases(_task_ids bigint[], _task_lease_ids bigint[], _lease_seconds integer DEFAULT NULL::integer)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, expires_at timestamp with time zone)
 LANGUAGE sql
 SECURITY DEFINER ROWS 10
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from queues.extend_leases_at(now(), _task_ids, _task_lease_ids, coalesce(_lease_seconds, 300))
$function$;
  -- queues.extend_leases(_task_ids bigint[], _task_lease_ids bigint[], _lease_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.extend_leases_at(_now timestamp with time zone, _task_ids bigint[], _task_lease_ids bigint[], _lease_seconds integer)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, expires_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER ROWS 10
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _locked bigint[];
  _other bigint[] := '{}';
  _leases bigint[];
  _lease bigint;
  _free bigint[];
  _waited boolean := false;
  _timeout text;
  _held bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;
  -- The ready set (docs/design/hot-path.md): the claim leases of the tasks without a row,
  -- locked shared first, in lease id order, as a completion or a rescue of the lease
  -- takes the lock exclusively before any row: a completion of the lease in flight is
  -- waited for, up to the session's lock_timeout or 200 ms when it has none (then those
  -- tasks are left as they are, and the next heartbeat extends them). Without the wait, a long task among many short ones of one
  -- claim could find its lease's lock held by a completion round at every heartbeat.
  -- (A scalar subquery per task: a primary-key probe, never an anti-join planned from
  -- task_pending's statistics.)
  _leases := array(select distinct i.task_lease_id
                     from unnest(_task_ids, _task_lease_ids) i(task_id, task_lease_id)
                    where (select true from queues.task_pending p where p.task_id = i.task_id) is null
                    order by 1);
  if cardinality(_leases) > 0 then
    _timeout := current_setting('lock_timeout');
    _free := '{}';
    foreach _lease in array _leases loop
      if _waited then
        -- One wait per heartbeat: the other leases are only tried.
        if pg_try_advisory_xact_lock_shared(20253, hashint8(_lease)) then
          _free := _free || _lease;
        end if;
        continue;
      end if;
      begin
        perform set_config('lock_timeout', case when _timeout in ('0', '') then '200ms' else _timeout end, true);
        perform pg_advisory_xact_lock_shared(20253, hashint8(_lease));
        perform set_config('lock_timeout', _timeout, true);
        _free := _free || _lease;
      exception when lock_not_available then
        _waited := true;
      end;
    end loop;
    _leases := _free;
  end if;
  -- The rows first (a primary-key probe of `= any`), skipping those another transaction
  -- holds. A heartbeat that waited for a row held the rows it had already locked
  -- meanwhile, so a completion batch in flight made it wait, and the completions of its
  -- other tasks waited for it in turn (up to 3 s in a soak: RELIABILITY.md, scenario 10).
  _locked := array(select p.task_id from queues.task_pending p
                    where p.task_id = any (_task_ids) order by p.task_id for no key update skip locked);
  -- The others: rows held elsewhere, and tasks no longer pending (normally none).
  if cardinality(_locked) < cardinality(_task_ids) then
    _other := array(select i.id from unnest(_task_ids) i(id) except select l.id from unnest(_locked) l(id));
  end if;
  -- The ready set (docs/design/hot-path.md): a task its claim took out of the claim
  -- index has no row; its claim lease holds it. Heartbeated, it goes back onto a row,
  -- written from the facts (leased by that lease), and is extended there as any row is:
  -- from then on the per-row paths (the fence, the expired-lease claim, the suspect
  -- accounting) hold it, and the rescuer has nothing to do for it. Under the lease's lock
  -- taken shared above, then read in a new statement, after the lock: the lease names the
  -- task, it has no row and no end.
  if cardinality(_other) > 0 then
    if cardinality(_leases) > 0 then
      _held := array(
        select i.task_id
          from unnest(_task_ids, _task_lease_ids) i(task_id, task_lease_id)
         where i.task_id = any (_other) and i.task_lease_id = any (_leases)
           -- (Scalar subqueries: a probe by key per task, never a join planned from the
           -- tables' statistics, which a queue vacuumed nearly empty made a scan of the
           -- whole claim index per task.)
           and (select true from queues.task_pending p where p.task_id = i.task_id) is null
           and coalesce((select i.task_id = any (c.task_ids) from queues.claim_lease c
                          where c.task_lease_id = i.task_lease_id limit 1), false)
           and (select true from queues.task_end_of(i.task_id) e limit 1) is null
         order by i.task_id);
      if cardinality(_held) > 0 then
        perform queues.write_pending_rows(_held);
        _locked := _locked || _held;
        _other := array(select o.id from unnest(_other) o(id) where o.id <> all (_held));
      end if;
    end if;
  end if;

  -- The rows by primary key from the array of ids, each row's lease looked up in a map of
  -- the input: no join of the input to task_pending, whose plan would follow
  -- task_pending's statistics (see queues.claim_tasks_at's moved).
  return query
  with m as (
    select jsonb_object_agg(i.task_id::text, i.task_lease_id) as leases
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
  ),
  extended as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds)
      from m
     where p.task_id = any (_locked)
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
       -- A keyed task extends only while it holds its key: once an expired lease's key
       -- went to another task (which may hold it still, or have completed), the lease
       -- is lost and must not come back to life beside the other task's.
       and (p.resource_key is null
            or exists (select 1 from queues.resource_lease r
                        where r.resource_key = p.resource_key and r.task_id = p.task_id))
    returning p.task_id, p.current_lease_id, p.available_at, p.resource_key
  ),
  -- The rows another transaction holds, as last committed: a lease still current there
  -- (with its key, for a keyed task) is still held.
  left_as_is as (
    select p.task_id, p.current_lease_id, p.available_at
      from queues.task_pending p, m
     where p.task_id = any (_other)
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
       and (p.resource_key is null
            or exists (select 1 from queues.resource_lease r
                        where r.resource_key = p.resource_key and r.task_id = p.task_id))
  ),
  -- Tasks without a row whose claim lease a completion or rescue in flight holds (its
  -- lock was not taken above): as last committed, still held by that lease, until its
  -- expiry.
  left_in_lease as (
    select i.task_id, i.task_lease_id, c.expires_at
      from unnest(_task_ids, _task_lease_ids) i(task_id, task_lease_id)
     cross join lateral (select c.expires_at, c.task_ids || array[]::bigint[] as task_ids
                           from queues.claim_lease c where c.task_lease_id = i.task_lease_id limit 1) c
     where i.task_id = any (_other)
       and i.task_id = any (c.task_ids)
       and (select true from queues.task_pending p where p.task_id = i.task_id) is null
       and (select true from queues.task_end_of(i.task_id) e limit 1) is null
  ),
  recorded as (
    insert into queues.task_lease_extension (task_id, task_lease_id, extended_at, expires_at)
    select e.task_id, e.current_lease_id, _now, e.available_at from extended e
  ),
  key_extended as (
    update queues.resource_lease r
       set expires_at = e.available_at
      from extended e
     where e.resource_key is not null and r.resource_key = e.resource_key and r.task_id = e.task_id
  )
  select e.task_id, e.current_lease_id, e.available_at from extended e
  union all
  select l.task_id, l.current_lease_id, l.available_at from left_as_is l
  union all
  select l.task_id, l.task_lease_id, l.expires_at from left_in_lease l;
end;
$function$;
  -- queues.extend_leases_at(_now timestamp with time zone, _task_ids bigint[], _task_lease_ids bigint[], _lease_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.fail_dependents(_task_ids bigint[], _messages text[])
 RETURNS void
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _gone bigint[];
begin
  with removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select x.task_id from queues.task_pending x
                                   where x.task_id = any (_task_ids)
                                   order by x.task_id
                                     for update))
    returning p.task_id, p.task_type
  ),
  errors as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select r.task_id, null, m.message
      from removed r
      join unnest(_task_ids, _messages) m(task_id, message) on m.task_id = r.task_id
  )
  select array_agg(r.task_id) into _gone from removed r;
  insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
  select p.task_id, null, now(), 'failed', t.task_type
    from unnest(_gone) p(task_id)
    join queues.task t on t.task_id = p.task_id
  order by p.task_id;
end;
$function$;
  -- queues.fail_dependents(_task_ids bigint[], _messages text[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.fail_task(_task_id bigint, _error_message text, _task_lease_id bigint DEFAULT NULL::bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _error_id bigint;
  _message text := _error_message;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  if _message is null or btrim(_message) = '' then
    raise exception 'error_message must not be empty' using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task t where t.task_id = _task_id) then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  if _task_lease_id is not null then
    if not exists (select 1 from queues.task_lease_at(_task_id, _task_lease_id)) then
      raise exception 'lease % does not belong to task %', _task_lease_id, _task_id
        using errcode = '22023';
    end if;
    if exists (select 1 from queues.task_leases_of(_task_id) l
                where l.task_lease_id > _task_lease_id)
       or exists (select 1 from queues.task_lease_release r
                   where r.task_id = _task_id and r.task_lease_id = _task_lease_id)
       or exists (select 1 from queues.task_lease_revocation v
                   where v.task_id = _task_id and v.task_lease_id = _task_lease_id)
       -- Completed by anyone not passing this lease (another worker, an unfenced call,
       -- the queue abandoning it): the holder's run is over.
       or exists (select 1 from queues.task_end_of(_task_id) c
                   where c.task_lease_id is distinct from _task_lease_id) then
      raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
        using errcode = '55000', schema = 'queues', constraint = 'task_lease_current',
              hint = 'Another worker claimed the task after this lease expired.';
    end if;
  end if;
  if length(_message) > queues.max_error_message_length() then
    _message := left(_message, queues.max_error_message_length()) || ' [truncated]';
  end if;

  insert into queues.error (task_id, task_lease_id, error_message)
  values (_task_id, _task_lease_id, _message)
  returning error_id into _error_id;
  return _error_id;
end;
$function$;
  -- queues.fail_task(_task_id bigint, _error_message text, _task_lease_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.forbid_fact_update()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  raise exception '%.% is append-only: rows are never updated', tg_table_schema, tg_table_name
    using errcode = '55000';
end;
$function$;
  -- queues.forbid_fact_update(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.guard_task_type_in_use()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _type text;
begin
  if tg_op = 'UPDATE' and new.task_type = old.task_type then
    return new;
  end if;
  lock table queues.task in share mode;
  if tg_op = 'TRUNCATE' then
    select t.task_type into _type from queues.task t limit 1;
  else
    select t.task_type into _type from queues.task t where t.task_type = old.task_type limit 1;
  end if;
  if found then
    raise exception 'task_type % is named by tasks in queues.task', quote_literal(_type)
      using errcode = '23503', schema = 'queues', table = 'task_type';
  end if;
  return case tg_op when 'DELETE' then old when 'UPDATE' then new end;
end;
$function$;
  -- queues.guard_task_type_in_use(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.history_partition_bounds()
 RETURNS TABLE(table_name text, partition_name text, lower_bound bigint, upper_bound bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select b.name, b.relname::text, split_part(b.bound, '''', 2)::bigint, split_part(b.bound, '''', 4)::bigint
    from (select t.name, c.relname, pg_get_expr(c.relpartbound, 0) as bound
            from unnest(queues.history_tables()) t(name)
            join pg_inherits i on i.inhparent = to_regclass(format('queues.%I', t.name))
            join pg_class c on c.oid = i.inhrelid
          offset 0) b
   where b.bound like 'FOR VALUES FROM (%'
$function$;
  -- queues.history_partition_bounds(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.history_partition_name(_table text, _lower bigint)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  select _table || '_p' || _lower::text
$function$;
  -- queues.history_partition_name(_table text, _lower bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.history_partition_sizes()
 RETURNS TABLE(lower_bound bigint, upper_bound bigint, partition_name text, estimated_tasks bigint, is_default boolean, table_bytes bigint, index_bytes bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with s as (select * from queues.history_sets())
  select s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default,
         b.table_bytes, b.index_bytes
    from s
    join queues.history_set_bytes(array(select s.lower_bound from s)) b
      on b.lower_bound is not distinct from s.lower_bound
   order by s.is_default, s.lower_bound
$function$;
  -- queues.history_partition_sizes(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.history_partitions()
 RETURNS TABLE(lower_bound bigint, upper_bound bigint, partition_name text, estimated_tasks bigint, total_bytes bigint, is_default boolean)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select p.lower_bound, p.upper_bound, p.partition_name, p.estimated_tasks,
         p.table_bytes + p.index_bytes, p.is_default
    from queues.history_partition_sizes() p
   order by p.is_default, p.lower_bound
$function$;
  -- queues.history_partitions(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.history_set_bytes(_lower_bounds bigint[])
 RETURNS TABLE(lower_bound bigint, table_bytes bigint, index_bytes bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select l.lower_bound,
         coalesce(sum(pg_relation_size(c.oid) + coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0)), 0)::bigint,
         coalesce(sum((select sum(pg_relation_size(i.indexrelid)) from pg_index i where i.indrelid = c.oid)), 0)::bigint
    from unnest(_lower_bounds) l(lower_bound)
   cross join unnest(queues.history_tables()) t(name)
    left join pg_class c on c.relnamespace = 'queues'::regnamespace
                        and c.relname = case when l.lower_bound is null then t.name || '_default'
                                             else queues.history_partition_name(t.name, l.lower_bound) end
   group by l.lower_bound
$function$;
  -- queues.history_set_bytes(_lower_bounds bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.history_set_has_waiting_dependents(_lower bigint, _upper bigint)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select exists (select 1 from queues.task_dependency d
                  where d.depends_on_task_id >= _lower and d.depends_on_task_id < _upper
                    and d.task_id >= _upper
                    and (exists (select 1 from queues.task_pending p where p.task_id = d.task_id)
                         or not exists (select 1 from queues.task_end_of(d.task_id) e)))
$function$;
  -- queues.history_set_has_waiting_dependents(_lower bigint, _upper bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.history_sets()
 RETURNS TABLE(lower_bound bigint, upper_bound bigint, partition_name text, estimated_tasks bigint, is_default boolean)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  -- A bound reads FOR VALUES FROM ('<lower>') TO ('<upper>'), or DEFAULT. It holds no
  -- column, so it is deparsed without opening the partition (relation 0), and its two
  -- quoted values are the 2nd and 4th fields between quotes (a regular expression took
  -- 10 us a row).
  select nullif(split_part(b.bound, '''', 2), '')::bigint, nullif(split_part(b.bound, '''', 4), '')::bigint,
         b.relname::text, greatest(b.reltuples, 0)::bigint, b.bound = 'DEFAULT'
    from (select c.relname, c.reltuples, pg_get_expr(c.relpartbound, 0) as bound
            from pg_inherits i
            join pg_class c on c.oid = i.inhrelid
           where i.inhparent = 'queues.task'::regclass) b
   order by b.bound = 'DEFAULT', 1
$function$;
  -- queues.history_sets(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.history_status_at(_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select queues.history_summary_at(_now) || jsonb_build_object(
    'partitions', coalesce((select jsonb_agg(jsonb_build_object(
        'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'name', p.partition_name,
        'estimated_tasks', p.estimated_tasks, 'total_bytes', p.total_bytes, 'is_default', p.is_default)
        order by p.is_default, p.lower_bound)
      from queues.history_partitions() p), '[]'))
$function$;
  -- queues.history_status_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.history_summary_at(_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _set record;
  _next record;
  _next_json jsonb;
  _oldest_id bigint;
  _oldest_at timestamptz;
  _default_id bigint;
  _default_at timestamptz;
  _last_completed timestamptz;
  _pending bigint;
begin
  select * into _setting from queues.history_setting;
  -- The oldest task: in the lowest set that holds one (or in the default partition).
  for _set in
    select s.lower_bound, s.upper_bound from queues.history_sets() s
     where not s.is_default and s.lower_bound <= _last_id
     order by s.lower_bound
  loop
    execute 'select t.task_id, t.enqueued_at from queues.task t
              where t.task_id >= $1 and t.task_id < $2 order by t.task_id limit 1'
      into _oldest_id, _oldest_at using _set.lower_bound, _set.upper_bound;
    exit when _oldest_id is not null;
  end loop;
  select t.task_id, t.enqueued_at into _default_id, _default_at from queues.task_default t order by t.task_id limit 1;
  if _default_id < _oldest_id or _oldest_id is null then
    _oldest_id := _default_id;
    _oldest_at := _default_at;
  end if;

  select s.lower_bound, s.upper_bound into _next
    from queues.history_sets() s
   where not s.is_default and s.upper_bound <= _last_id
   order by s.lower_bound
   limit 1;
  if found then
    -- Its newest end, in either shape (as queues.maintain_history_step_at reads it).
    execute 'select greatest(
               (select max(c.completed_at) from queues.task_completed c where c.task_id >= $1 and c.task_id < $2),
               (select max(r.completed_at) from queues.completion_round r
                 where r.task_range && int8range($1, $2) and r.task_id >= $1))'
      into _last_completed using _next.lower_bound, _next.upper_bound;
    _pending := (select count(*) from queues.task_pending tp
                  where tp.task_id >= _next.lower_bound and tp.task_id < _next.upper_bound)
                -- and the lease-held tasks (no claim-index row, sql/queues/lease_held.sql)
                + (select count(*) from queues.lease_held_tasks h
                    where h.task_id >= _next.lower_bound and h.task_id < _next.upper_bound)
                -- and the tasks in ready batches (sql/queues/ready_batch.sql)
                + queues.batched_count_between(_next.lower_bound, _next.upper_bound);
    _next_json := jsonb_build_object(
      'lower_bound', _next.lower_bound, 'upper_bound', _next.upper_bound,
      'pending_tasks', _pending,
      'last_completed_at', _last_completed,
      'drop_after', case when _pending = 0 then coalesce(_last_completed + _setting.retention, _now) end);
  end if;
  return jsonb_build_object(
    'retention_seconds', extract(epoch from _setting.retention)::bigint,
    'partition_size', _setting.partition_size,
    'partitions_ahead', _setting.partitions_ahead,
    'last_task_id', _last_id,
    'oldest_task_id', _oldest_id,
    'oldest_enqueued_at', _oldest_at,
    'default_partition_tasks', (select count(*) from queues.task_default),
    'next_drop', _next_json,
    'dropped_sets', (select count(*) from queues.history_partition_dropped),
    'skipped_steps_last_hour', (select count(*) from queues.history_step_skipped k where k.skipped_at > _now - interval '1 hour'),
    'last_skipped_step', (select jsonb_build_object('skipped_at', k.skipped_at, 'step', k.step, 'reason', k.reason)
                            from queues.history_step_skipped k order by k.skipped_at desc limit 1),
    'last_dropped_at', (select max(d.dropped_at) from queues.history_partition_dropped d));
end;
$function$;
  -- queues.history_summary_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.history_tables()
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now',
               'task_trace', 'completion_round', 'claim_lease',
               'task_progress',
               'task_dependency']
$function$;
  -- queues.history_tables(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.history_walk(_before bigint)
 RETURNS TABLE(lower_bound bigint, upper_bound bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with s as (
    select s.lower_bound, least(s.upper_bound, _before) as upper_bound,
           row_number() over (order by s.lower_bound desc) as n
      from queues.history_sets() s
     where not s.is_default
       -- once, not once per set (a call reads the sequence's catalog entry)
       and s.lower_bound <= (select queues.last_task_id())
       and (_before is null or s.lower_bound < _before)
  ),
  walk as (
    select coalesce((select b.lower_bound from s b where b.n = 2), a.lower_bound) as lower_bound, a.upper_bound
      from s a where a.n = 1
    union all
    select s.lower_bound, s.upper_bound from s where s.n > 2
  ),
  spill as (select exists (select 1 from queues.task_default) as any)
  select w.lower_bound, w.upper_bound from walk w, spill where not spill.any
  union all
  select null, _before from spill where spill.any
  order by 1 desc nulls first
$function$;
  -- queues.history_walk(_before bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.hold_rows_of(_task_ids bigint[])
 RETURNS bigint[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _leases bigint[];
  _held bigint[];
  _unbatched bigint[] := '{}';
  _batched boolean;
begin
  -- The lease-held tasks' claim leases (queues.lease_held_of: a task with a row costs one
  -- primary-key probe), and whether any ready batch exists (one probe, in the same
  -- statement: no statement more while none does).
  select array(select distinct h.task_lease_id
                 from unnest(_task_ids) i(id) cross join lateral queues.lease_held_of(i.id) h
                order by 1),
         exists (select 1 from queues.task_ready_batch)
    into _leases, _batched;
  -- A task still in a ready batch gets its row first (sql/queues/ready_batch.sql: the
  -- batch locked and waited for, so a claim in flight that takes it commits first, and it
  -- is then lease-held: read again). A batch an enqueue commits later holds none of these
  -- tasks (they exist already).
  if _batched then
    _unbatched := queues.unbatch_tasks(_task_ids);
    _leases := array(select distinct h.task_lease_id
                       from unnest(_task_ids) i(id) cross join lateral queues.lease_held_of(i.id) h
                      order by 1);
  end if;
  if cardinality(_leases) = 0 then
    return _unbatched;
  end if;
  perform pg_advisory_xact_lock(20253, hashint8(l.id)) from unnest(_leases) l(id);
  -- A new statement, so a new snapshot: what a completion or a rescue that held a lock
  -- committed is seen.
  _held := array(select distinct h.task_id
                   from unnest(_task_ids) i(id) cross join lateral queues.lease_held_of(i.id) h
                  order by 1);
  if cardinality(_held) = 0 then
    return _unbatched;
  end if;
  perform queues.write_pending_rows(_held);
  return array(select x from unnest(_unbatched || _held) x order by x);
end;
$function$;
  -- queues.hold_rows_of(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.interrupt_task(_task_id bigint, _task_lease_id bigint, _error_message text, _max_interruptions integer DEFAULT NULL::integer)
 RETURNS text
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select queues.interrupt_task_at(now(), _task_id, _task_lease_id, _error_message, coalesce(_max_interruptions, 5))
$function$;
  -- queues.interrupt_task(_task_id bigint, _task_lease_id bigint, _error_message text, _max_interruptions integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.interrupt_task_at(_now timestamp with time zone, _task_id bigint, _task_lease_id bigint, _error_message text, _max_interruptions integer)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _pending queues.task_pending;
  _message text := _error_message;
  _retry_at timestamptz;
begin
  if _now is null or _task_id is null or _task_lease_id is null then
    raise exception 'now, task_id and task_lease_id must not be null' using errcode = '22004';
  end if;
  if _message is null or btrim(_message) = '' then
    raise exception 'error_message must not be empty' using errcode = '22004';
  end if;
  if _max_interruptions is null or _max_interruptions not between 1 and 100 then
    raise exception 'max_interruptions must be between 1 and 100, got %', coalesce(_max_interruptions::text, 'null')
      using errcode = '22023';
  end if;
  if length(_message) > queues.max_error_message_length() then
    _message := left(_message, queues.max_error_message_length()) || ' [truncated]';
  end if;

  perform queues.lock_resource_keys(array[_task_id]);
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(array[_task_id]);
  select p.* into _pending
    from queues.task_pending p
   where p.task_id = _task_id
     and p.current_lease_id = _task_lease_id
     and (p.resource_key is null
          or exists (select 1 from queues.resource_lease r
                      where r.resource_key = p.resource_key and r.task_id = p.task_id))
     for update;
  if not found then
    if not exists (select 1 from queues.task t where t.task_id = _task_id) then
      return 'unknown_task';
    end if;
    return 'lease_lost';
  end if;

  delete from queues.resource_lease r
   where _pending.resource_key is not null and r.resource_key = _pending.resource_key and r.task_id = _task_id;

  if _pending.interrupted_count + 1 >= _max_interruptions then
    insert into queues.error (task_id, task_lease_id, error_message)
    values (_task_id, _task_lease_id,
            format('abandoned: %s transient errors (max %s); the last: %s',
                   _pending.interrupted_count + 1, _max_interruptions, _message));
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
    values (_task_id, _task_lease_id, _now, 'abandoned', _pending.task_type);
    delete from queues.task_pending p where p.task_id = _task_id;
    return 'abandoned';
  end if;

  _retry_at := _now + internal.backoff(_pending.interrupted_count, 300) / 5;
  insert into queues.task_lease_release (task_id, task_lease_id, released_at) values (_task_id, _task_lease_id, _now)
  on conflict do nothing;
  insert into queues.task_interruption (task_lease_id, task_id, interrupted_at, retry_at, error_message)
  values (_task_lease_id, _task_id, _now, _retry_at, _message);
  -- Counted as a release (it is not an expired lease) and as an interruption.
  update queues.task_pending p
     set available_at = _retry_at,
         current_lease_id = null,
         released_count = p.released_count + 1,
         interrupted_count = p.interrupted_count + 1
   where p.task_id = _task_id;
  return 'retry_scheduled';
end;
$function$;
  -- queues.interrupt_task_at(_now timestamp with time zone, _task_id bigint, _task_lease_id bigint, _error_message text, _max_interruptions integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.is_current_lease(_task_id bigint, _task_lease_id bigint)
 RETURNS boolean
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select queues.current_lease_expiry(_task_id, _task_lease_id) is not null
$function$;
  -- queues.is_current_lease(_task_id bigint, _task_lease_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.is_internal_task_type(_task_type text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select exists (select 1 from queues.internal_task_type i where i.task_type = _task_type)
$function$;
  -- queues.is_internal_task_type(_task_type text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.is_owner_session()
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select pg_has_role(session_user, n.nspowner, 'member')
    from pg_namespace n where n.nspname = 'queues'
$function$;
  -- queues.is_owner_session(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.is_valid_traceparent(_traceparent text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select coalesce(
           _traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$'
           and left(_traceparent, 2) <> 'ff'
           and (length(_traceparent) = 55 or left(_traceparent, 2) <> '00')
           and substr(_traceparent, 4, 32) <> repeat('0', 32)
           and substr(_traceparent, 37, 16) <> repeat('0', 16),
         false)
$function$;
  -- queues.is_valid_traceparent(_traceparent text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.is_valid_tracestate(_tracestate text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select coalesce(length(_tracestate) <= 512 and _tracestate ~ '^[ -~]*$', false)
$function$;
  -- queues.is_valid_tracestate(_tracestate text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.last_task_id()
 RETURNS bigint
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select coalesce(pg_sequence_last_value(pg_get_serial_sequence('queues.task', 'task_id')::regclass), 0)
$function$;
  -- queues.last_task_id(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.lease_held_of(_task_id bigint)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, worker_key integer, leased_at timestamp with time zone, expires_at timestamp with time zone, suspect boolean)
 LANGUAGE sql
 STABLE
AS $function$
  -- The newest claim lease naming the task (claim_lease's GiST index, in the partitions
  -- that can hold it), when the task has no row and no end.
  select _task_id, c.task_lease_id, c.worker_key, c.leased_at, c.expires_at,
         coalesce(c.suspect_task_id = _task_id, false)
    from queues.claim_lease c
   where c.task_range @> _task_id
     and c.task_id >= _task_id
     and _task_id = any (c.task_ids)
     and not exists (select 1 from queues.task_pending p where p.task_id = _task_id)
     and not exists (select 1 from queues.task_end_of(_task_id) e)
   order by c.task_lease_id desc
   limit 1
$function$;
  -- queues.lease_held_of(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.limit_window_start(_now timestamp with time zone, _interval_ms integer)
 RETURNS timestamp with time zone
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select to_timestamp(floor(extract(epoch from _now) * 1000 / _interval_ms) * _interval_ms / 1000.0)
$function$;
  -- queues.limit_window_start(_now timestamp with time zone, _interval_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.list_task_dependencies(_task_id bigint)
 RETURNS TABLE(task_id bigint, task_type text, outcome text, completed_at timestamp with time zone, result jsonb)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select d.depends_on_task_id, t.task_type,
         -- pending: a claim-index row, or no end (held by its claim lease)
         case when (select true from queues.task_pending p where p.task_id = d.depends_on_task_id)
                   or c.task_id is null then null
              else c.outcome end,
         c.completed_at,
         (select r.result from queues.task_result r
           where r.task_id = d.depends_on_task_id order by r.task_lease_id desc limit 1)
    from queues.task_dependency d
    join queues.task t on t.task_id = d.depends_on_task_id
    left join lateral queues.task_end_of(d.depends_on_task_id) c on true
   where d.task_id = _task_id
   order by d.depends_on_task_id
$function$;
  -- queues.list_task_dependencies(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.list_task_results(_task_id bigint)
 RETURNS TABLE(task_lease_id bigint, result jsonb, recorded_at timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select r.task_lease_id, r.result, r.recorded_at
    from queues.task_result r
   where r.task_id = _task_id
   order by r.task_lease_id
$function$;
  -- queues.list_task_results(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.lock_history_tables(_tables text[], _modes text[], _within_ms integer)
 RETURNS integer
 LANGUAGE plpgsql
 SET lock_timeout TO '50ms'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _deadline timestamptz;
  _tries integer := 0;
  _last boolean;
  _last_until timestamptz;
  _autovacuum_cancelled boolean := false;
begin
  if _tables is null or _modes is null or cardinality(_tables) = 0 or cardinality(_tables) <> cardinality(_modes) then
    raise exception 'tables and modes must be non-empty arrays of the same length' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m is null or m not in ('share update exclusive', 'share', 'access exclusive')) then
    raise exception 'a lock mode must be share update exclusive, share or access exclusive, got %', _modes
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_tables) t where t is null or to_regclass(format('queues.%I', t)) is null) then
    raise exception 'every table must name a table in schema queues, got %', _tables using errcode = '22023';
  end if;
  if _within_ms is null or _within_ms < 0 then
    raise exception 'within_ms must be 0 or more, got %', _within_ms using errcode = '22023';
  end if;
  -- A transaction that already holds a lock of this kind (steps run together, as in
  -- queues.maintain_history_at, or a partition made earlier in it) keeps the queue
  -- waiting while it tries, and a holder in its way may be waiting for it: it tries for
  -- at most 50 ms then.
  if exists (select 1 from pg_locks l
              where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.granted
                and l.mode in ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                               'ExclusiveLock', 'AccessExclusiveLock')) then
    _within_ms := least(_within_ms, 50);
  end if;
  _deadline := clock_timestamp() + make_interval(secs => _within_ms / 1000.0);
  loop
    _tries := _tries + 1;
    -- The last try, once the window has passed, waits in the queue for at most 50 ms
    -- (restored on return): transactions that follow one another without a moment
    -- between (one connection's statements back to back) are waited for, and whatever
    -- queues behind this try waits no longer.
    -- The 50 ms are for the whole try, however many tables it locks (each lock waits
    -- only for what is left of them).
    _last := clock_timestamp() >= _deadline;
    _last_until := clock_timestamp() + make_interval(secs => greatest(least(_within_ms, 50), 1) / 1000.0);
    begin
      for _i in 1 .. cardinality(_tables) loop
        if _last then
          perform set_config('lock_timeout',
            greatest(ceil(extract(epoch from _last_until - clock_timestamp()) * 1000), 1)::integer || 'ms', true);
        end if;
        -- The mode is one of the three above (checked), the table quoted as an identifier.
        execute format('lock table only queues.%I in %s mode%s', _tables[_i], _modes[_i],
                       case when _last then '' else ' nowait' end);
      end loop;
      return _tries;
    exception
      when lock_not_available then
        -- The block's locks are given back with it. An autovacuum in the way is cancelled
        -- (once per call); the next try, a few ms later, finds the table free.
        if not _autovacuum_cancelled then
          _autovacuum_cancelled := true;
          perform queues.cancel_autovacuum(_tables);
        end if;
    end;
    exit when _last;
    perform pg_sleep((1 + random() * 3) / 1000.0);
  end loop;
  raise exception 'could not lock % in % tries over % ms: other transactions held them throughout',
    array_to_string(_tables, ', '), _tries, _within_ms
    using errcode = '55P03';
end;
$function$;
  -- queues.lock_history_tables(_tables text[], _modes text[], _within_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.lock_resource_keys(_task_ids bigint[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _key text;
begin
  for _key in
    select distinct p.resource_key
      from queues.task_pending p
     where p.task_id = any (_task_ids) and p.resource_key is not null
     order by 1
  loop
    perform pg_advisory_xact_lock(20251, hashtext(_key));
  end loop;
end;
$function$;
  -- queues.lock_resource_keys(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.maintain_history(_payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_at(now()))
$function$;
  -- queues.maintain_history(_payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.maintain_history_at(_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _created jsonb := '[]';
  _dropped jsonb := '[]';
  _skipped jsonb := '[]';
  _adopted jsonb := '[]';
  _kept integer := 0;
  _step jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  -- Each step changes the catalog or ends the run (skips end it after 5 within a minute);
  -- the bound only guards against a bug.
  for _i in 1 .. 100000 loop
    _step := queues.maintain_history_step_at(_now);
    case _step ->> 'action'
      when 'set_created' then
        _created := _created || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_dropped' then
        _dropped := _dropped || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_adopted' then
        _adopted := _adopted || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'skipped', 'busy' then
        _skipped := _skipped || jsonb_build_array(_step);
      else
        null;
    end case;
    _kept := coalesce((_step ->> 'kept')::integer, _kept);
    exit when not (_step ->> 'more')::boolean;
  end loop;
  return jsonb_build_object('created', _created, 'dropped', _dropped, 'adopted', _adopted, 'skipped', _skipped,
                            'kept', _kept);
end;
$function$;
  -- queues.maintain_history_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.maintain_history_step(_payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_step_at(now()))
$function$;
  -- queues.maintain_history_step(_payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.maintain_history_step_at(_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET lock_timeout TO '50ms'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _setting queues.history_setting;
  _last_id bigint;
  _doing text;
  _table text;
  _name text;
  _lower bigint;
  _upper bigint;
  _truncate boolean;
  _kept integer := 0;
  _set record;
  _tasks bigint;
  _last_completed timestamptz;
  _measured integer;
  _spilled bigint;
  _gap_lower bigint;
  _gap_upper bigint;
  _lease_mark bigint;
  _claimed_since bigint[];
  -- Every partition and its bounds (queues.history_partition_bounds, a few ms with many
  -- sets), read once per step into these four arrays, one element a partition: the step
  -- changes no partition before it returns, except after taking its locks in the late
  -- path, which reads them again.
  _bound_tables text[];
  _bound_names text[];
  _bound_lowers bigint[];
  _bound_uppers bigint[];
  -- The locks that keep every writer of history out (a late set, a move out of the
  -- default partitions): SHARE on each parent, ACCESS EXCLUSIVE on its default.
  _writers_out text[] := array(select x from unnest(queues.history_tables()) t(name),
                                 lateral (values (t.name), (t.name || '_default')) v(x));
  _writers_out_modes text[] := array(select m from unnest(queues.history_tables()) t(name),
                                       lateral (values ('share'), ('access exclusive')) v(m));
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if not pg_try_advisory_xact_lock(20252, 1) then
    return jsonb_build_object('action', 'busy', 'more', false);
  end if;
  select * into _setting from queues.history_setting;
  _last_id := queues.last_task_id();

  begin
    select coalesce(array_agg(b.table_name), '{}'), coalesce(array_agg(b.partition_name), '{}'),
           coalesce(array_agg(b.lower_bound), '{}'), coalesce(array_agg(b.upper_bound), '{}')
      into _bound_tables, _bound_names, _bound_lowers, _bound_uppers
      from queues.history_partition_bounds() b;
    -- 1. Ahead of need: a half made set, unless a task fell into the default partition in
    --    its range (maintenance fell behind while it was half made): then task's
    --    partition cannot be attached, new sets start above it, and step 1b finishes it
    --    by moving those tasks into it.
    with b as (select * from unnest(_bound_tables, _bound_lowers, _bound_uppers) b(table_name, lower_bound, upper_bound))
    select h.lower_bound, h.upper_bound into _lower, _upper
      from (select distinct b.lower_bound, b.upper_bound from b) h
     where not exists (select 1 from b x where x.table_name = 'task' and x.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.task_default t where t.task_id >= h.lower_bound and t.task_id < h.upper_bound)
     order by h.lower_bound
     limit 1;
    if _lower is null then
      -- A new set. Ranges are never reused: above every partition there is or was, and
      -- above any task in the default partition (a new set cannot overlap rows there).
      select greatest(coalesce((select max(b.upper_bound) from unnest(_bound_uppers) b(upper_bound)), 0),
                      coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                      coalesce((select max(t.task_id) + 1 from queues.task_default t), 0))
        into _lower;
      if _lower < _last_id + 1 + _setting.partitions_ahead::bigint * _setting.partition_size then
        _upper := _lower + _setting.partition_size;
      else
        _lower := null;
      end if;
    end if;
    if _lower is not null and _lower <= _last_id + _setting.partition_size then
      -- Late: less than one set's width of ids is left before the ids handed out reach
      -- the set (maintenance fell behind). Made table by table, it could be outrun: a
      -- task given an id in its range before task's partition exists falls into the
      -- default partition, its facts into theirs, and the next table's attach fails on
      -- them, run after run. So the whole set is made in this one step, under locks
      -- that keep every writer of history out (SHARE on each parent, ACCESS EXCLUSIVE on
      -- each default), starting above the last id read under them: no task of its range
      -- exists, and none can be written until it commits. The ids handed out before it
      -- fall into the default partitions (queues.history_summary_at counts them).
      _doing := format('make the set from %s at once (late)', _lower);
      perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
      _last_id := queues.last_task_id();
      -- Under these locks no partition can be attached or detached.
      select coalesce(array_agg(b.table_name), '{}'), coalesce(array_agg(b.partition_name), '{}'),
             coalesce(array_agg(b.lower_bound), '{}'), coalesce(array_agg(b.upper_bound), '{}')
        into _bound_tables, _bound_names, _bound_lowers, _bound_uppers
        from queues.history_partition_bounds() b;
      if exists (select 1 from unnest(_bound_lowers) b(lower_bound) where b.lower_bound = _lower)
         and not exists (select 1 from queues.task_default t where t.task_id >= _lower and t.task_id < _upper) then
        null; -- a half made set that no task has reached: finished as it is
      else
        select greatest(coalesce((select max(b.upper_bound) from unnest(_bound_uppers) b(upper_bound)), 0),
                        coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                        coalesce((select max(t.task_id) + 1 from queues.task_default t), 0),
                        _last_id + 1)
          into _lower;
        _upper := _lower + _setting.partition_size;
      end if;
      perform queues.create_history_partition(_lower, _upper);
      return jsonb_build_object('action', 'set_created', 'table', queues.history_partition_name('task', _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'late', true, 'more', true);
    end if;
    if _lower is not null then
      select t.name into _table
        from unnest(queues.history_tables()) with ordinality t(name, n)
       where to_regclass(format('queues.%I', queues.history_partition_name(t.name, _lower))) is null
       order by t.name = 'task', t.n
       limit 1;
      _doing := format('attach queues.%I', queues.history_partition_name(_table, _lower));
      perform queues.attach_history_partition(_table, _lower, _upper);
      if _table = 'task' then
        insert into queues.history_partition_created (lower_bound, upper_bound)
        values (_lower, _upper) on conflict (lower_bound) do nothing;
      end if;
      return jsonb_build_object('action', case when _table = 'task' then 'set_created' else 'attached' end,
                                'table', queues.history_partition_name(_table, _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'more', true);
    end if;

    -- 1b. Tasks in the default partition (ids handed out while no set covered them): the
    --    range around the lowest is made a set, its rows moved out of the default
    --    partitions (queues.adopt_history_range), so that retention drops them with it
    --    and pending ones stay claimable. The range: a half made set's own (finished so),
    --    or the gap between the ranges there are or were, below the lowest range above
    --    the task and cut after its 2,000th task (a step moves at most that many tasks,
    --    with their facts, under its locks). Not while no range lies above the task: the
    --    ids may still be handed out, and step 1 makes the set above them first.
    select t.task_id into _spilled from queues.task_default t order by t.task_id limit 1;
    if _spilled is not null then
      with r as (
        select b.lower_bound, b.upper_bound from unnest(_bound_lowers, _bound_uppers) b(lower_bound, upper_bound)
        union all
        select d.lower_bound, d.upper_bound from queues.history_partition_dropped d
      )
      select (select min(r.lower_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             (select max(r.upper_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             coalesce((select max(r.upper_bound) from r where r.upper_bound <= _spilled), 0),
             (select min(r.lower_bound) from r where r.lower_bound > _spilled)
        into _lower, _upper, _gap_lower, _gap_upper;
      if _lower is null and _gap_upper is not null then
        -- The gap, cut after its 2,000th task.
        _lower := _gap_lower;
        _upper := least(_gap_upper,
                        coalesce((select t.task_id from queues.task_default t
                                   where t.task_id >= _spilled and t.task_id < _gap_upper
                                   order by t.task_id offset 2000 limit 1), _gap_upper));
      end if;
      if _upper is not null and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = _lower) then
        _doing := format('adopt the default partitions'' tasks in [%s, %s)', _lower, _upper);
        perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
        _tasks := queues.adopt_history_range(_lower, _upper);
        return jsonb_build_object('action', 'set_adopted', 'table', queues.history_partition_name('task', _lower),
                                  'lower_bound', _lower, 'upper_bound', _upper, 'tasks', _tasks, 'more', true);
      end if;
    end if;

    -- 2. A table detached from a dropped set (named as a partition, no longer one). Its
    --    drop locks only itself, so its files are unlinked under no lock the queue waits
    --    for; but dropping a foreign key takes ACCESS EXCLUSIVE on the table it
    --    references, so a table with one (none has today) is truncated first (under its
    --    own lock) and that drop is a catalog change only.
    select c.relname,
           pg_relation_size(c.oid) > 0 and exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'f')
      into _name, _truncate
      from pg_class c
      join unnest(queues.history_tables()) t(name)
        on c.relname = queues.history_partition_name(t.name, substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     where c.relnamespace = 'queues'::regnamespace and c.relkind = 'r' and not c.relispartition
       and exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     order by c.relname
     limit 1;
    if _name is not null then
      if _truncate then
        _doing := format('truncate queues.%I', _name);
        execute format('truncate queues.%I', _name);
        return jsonb_build_object('action', 'truncated', 'table', _name, 'more', true);
      end if;
      _doing := format('drop queues.%I', _name);
      execute format('drop table queues.%I', _name);
      return jsonb_build_object('action', 'dropped_table', 'table', _name, 'more', true);
    end if;

    -- 3. A fact table's partition of a dropped set: detached, a catalog change.
    select b.table_name, b.partition_name, b.lower_bound, b.upper_bound into _table, _name, _lower, _upper
      from unnest(_bound_tables, _bound_names, _bound_lowers, _bound_uppers)
           b(table_name, partition_name, lower_bound, upper_bound)
     where exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = b.lower_bound and d.upper_bound = b.upper_bound)
     order by b.lower_bound, b.table_name
     limit 1;
    if _name is not null then
      _doing := format('detach queues.%I', _name);
      perform queues.lock_history_tables(array[_table, _name, _table || '_default'],
                                         array['access exclusive', 'access exclusive', 'access exclusive'],
                                         _setting.lock_timeout_ms);
      execute format('alter table queues.%I detach partition queues.%I', _table, _name);
      return jsonb_build_object('action', 'detached', 'table', _name, 'lower_bound', _lower, 'upper_bound', _upper,
                                'more', true);
    end if;

    -- 4. Expired sets, oldest first.
    for _set in
      select p.lower_bound, p.upper_bound from queues.history_sets() p
       where not p.is_default and p.upper_bound <= _last_id
       order by p.lower_bound
    loop
      -- The last lease id handed out before this set's checks: a claim lease with a
      -- larger id was written after them (one statement reads the claim index and takes
      -- its lease id), so the check under the detach's lock reads only those.
      _lease_mark := pg_sequence_last_value('queues.task_lease_task_lease_id_seq'::regclass);
      -- Cheap checks first, without strong locks: a pending task, or a recent completion.
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
         -- (or a ready batch's task: sql/queues/ready_batch.sql)
         or exists (select 1 from queues.task_ready_batch b
                     cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
                     where b.task_range && int8range(_set.lower_bound, _set.upper_bound)
                       and u.task_id >= _set.lower_bound and u.task_id < _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      -- Its newest end: task_completed's rows in the set, and the completion rounds that
      -- name a task in its range (GiST probes of completion_round.task_range in the
      -- partitions of this set and the newer ones, where such a round lives).
      select greatest(
               (select max(c.completed_at) from queues.task_completed c
                 where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound),
               (select max(r.completed_at) from queues.completion_round r
                 where r.task_range && int8range(_set.lower_bound, _set.upper_bound)
                   and r.task_id >= _set.lower_bound))
        into _last_completed;
      if _last_completed > _now - _setting.retention then
        _kept := _kept + 1;
        continue;
      end if;
      -- An unfinished task of a newer set that depends on a task of this one (it reads
      -- their results when it runs; sql/queues/flow_retention.sql). After the window's
      -- check: a dependent without a claim-index row is looked up by its end.
      if queues.history_set_has_waiting_dependents(_set.lower_bound, _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      -- A completion round or a claim lease in this set that names a task of an older set
      -- still kept (a round, and a claim lease, lives in the set of the largest task id it
      -- names): dropping it would take that task's end, or a lease of it, away, so the
      -- set waits for the older one.
      if exists (select 1 from queues.completion_round r
                  where r.task_id >= _set.lower_bound and r.task_id < _set.upper_bound
                    and lower(r.task_range) < _set.lower_bound
                    and exists (select 1 from queues.task t
                                 where t.task_id = any (r.task_ids) and t.task_id < _set.lower_bound))
         or exists (select 1 from queues.claim_lease r
                     where r.task_id >= _set.lower_bound and r.task_id < _set.upper_bound
                       and lower(r.task_range) < _set.lower_bound
                       and exists (select 1 from queues.task t
                                    where t.task_id = any (r.task_ids) and t.task_id < _set.lower_bound)) then
        _kept := _kept + 1;
        continue;
      end if;
      -- Every task completed, from the facts (one scan of the set's two partitions).
      select count(*) into _tasks from queues.task t
       where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound;
      if exists (select 1 from queues.task t
                  where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound
                    and not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)
                    -- nor in a completion round (its rounds' task ids in the set, hashed)
                    and not exists (select 1 from queues.completion_round r
                                     cross join lateral unnest(r.task_ids) as x(task_id)
                                     where r.task_range && int8range(_set.lower_bound, _set.upper_bound)
                                       and r.task_id >= _set.lower_bound
                                       and x.task_id = t.task_id)) then
        _kept := _kept + 1;
        continue;
      end if;

      _name := queues.history_partition_name('task', _set.lower_bound);
      _doing := format('detach queues.%I', _name);
      begin
        -- Detaching holds ACCESS EXCLUSIVE on queues.task and the partition, so no
        -- transaction that wrote to the set or read it to complete a task is still open:
        -- check again what could have changed (a task enqueued with an id handed out
        -- before the checks, and its completion).
        perform queues.lock_history_tables(array['task', _name, 'task_default'],
                                           array['access exclusive', 'access exclusive', 'access exclusive'],
                                           _setting.lock_timeout_ms);
        execute format('alter table queues.task detach partition queues.%I', _name);
        -- The tasks claims took since the checks. A task of the set committed after them
        -- (an id handed out before, its transaction open across the checks) and claimed
        -- since is held by its claim lease with no claim-index row (the ready set,
        -- docs/design/hot-path.md): named here, it keeps the set, as does an unfinished
        -- dependent of the set claimed since.
        _claimed_since := array(select u.task_id from queues.claim_lease r
                                 cross join lateral unnest(r.task_ids) u(task_id)
                                 where r.task_lease_id > coalesce(_lease_mark, 0));
        if exists (select 1 from queues.task_pending tp
                    where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_ready_batch b
                       cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
                       where b.task_range && int8range(_set.lower_bound, _set.upper_bound)
                         and u.task_id >= _set.lower_bound and u.task_id < _set.upper_bound)
           or exists (select 1 from unnest(_claimed_since) u(task_id)
                       where u.task_id >= _set.lower_bound and u.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_dependency d
                       where d.depends_on_task_id >= _set.lower_bound and d.depends_on_task_id < _set.upper_bound
                         and d.task_id >= _set.upper_bound
                         and (exists (select 1 from queues.task_pending p where p.task_id = d.task_id)
                              or d.task_id in (select u.task_id from unnest(_claimed_since) u(task_id))))
           or exists (select 1 from queues.task_completed c
                       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                         and c.completed_at > _now - _setting.retention)
           or exists (select 1 from queues.completion_round r
                       where r.task_range && int8range(_set.lower_bound, _set.upper_bound)
                         and r.task_id >= _set.lower_bound
                         and r.completed_at > _now - _setting.retention) then
          -- Roll the block back, which attaches the partition again.
          raise exception 'set [%, %) changed since it was checked', _set.lower_bound, _set.upper_bound
            using errcode = 'QH001';
        end if;
        insert into queues.history_partition_dropped (lower_bound, upper_bound, tasks, last_completed_at, dropped_at)
        values (_set.lower_bound, _set.upper_bound, _tasks, _last_completed, _now);
        return jsonb_build_object('action', 'set_dropped', 'table', _name, 'lower_bound', _set.lower_bound,
                                  'upper_bound', _set.upper_bound, 'tasks', _tasks, 'kept', _kept, 'more', true);
      exception
        when sqlstate 'QH001' then
          _kept := _kept + 1;
      end;
    end loop;

    -- 5. Nothing left to change: the sets that are done are measured for the readers.
    _measured := queues.measure_history_sets(_now);
    delete from queues.history_step_skipped k where k.skipped_at < _now - interval '1 day';
    -- The flow-control facts kept per key, not per task (sql/queues/flow_retention.sql).
    perform queues.prune_flow_facts_at(_now);
  exception
    -- check_violation: a task landed in a default partition, in the range being made,
    -- since it was read above; the next step starts above it. The skip is recorded, and
    -- the run goes on (a later try may find its moment) until 5 steps have been skipped
    -- within a minute.
    when lock_not_available or deadlock_detected or check_violation then
      insert into queues.history_step_skipped (step, reason) values (coalesce(_doing, 'a step'), sqlerrm);
      return jsonb_build_object('action', 'skipped', 'step', _doing, 'reason', sqlerrm, 'kept', _kept,
                                'more', (select count(*) from queues.history_step_skipped k
                                          where k.skipped_at > clock_timestamp() - interval '1 minute') < 5);
  end;
  return jsonb_build_object('action', 'none', 'kept', _kept, 'measured', _measured, 'more', false);
end;
$function$;
  -- queues.maintain_history_step_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.mark_started(_task_ids bigint[], _task_lease_ids bigint[], _started_us bigint[] DEFAULT NULL::bigint[])
 RETURNS SETOF bigint
 LANGUAGE plpgsql
 SECURITY DEFINER ROWS 1
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  if _started_us is not null and cardinality(_started_us) <> cardinality(_task_ids) then
    raise exception 'started_us must have one element per lease (% leases, % start times)',
      cardinality(_task_ids), cardinality(_started_us) using errcode = '22023';
  end if;
  -- Each pair probed by primary key (a scalar subquery: no join of the input to
  -- task_pending planned from its statistics).
  return query
  with input as (
    select i.task_id, i.task_lease_id, i.started_us,
           coalesce((select true from queues.task_pending p
                      where p.task_id = i.task_id and p.current_lease_id = i.task_lease_id),
                    -- no row: held by the claim lease that names it until it ends (the
                    -- ready set)
                    (select true from queues.lease_held_of(i.task_id) h
                      where h.task_lease_id = i.task_lease_id),
                    false) as held
      from unnest(_task_ids, _task_lease_ids,
                  coalesce(_started_us, array_fill(null::bigint, array[cardinality(_task_ids)])))
           as i(task_id, task_lease_id, started_us)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id, started_at)
    select i.task_id, i.task_lease_id, coalesce(to_timestamp(i.started_us / 1000000.0), now())
      from input i where i.held
    on conflict do nothing
  )
  select i.task_id from input i where not i.held;
end;
$function$;
  -- queues.mark_started(_task_ids bigint[], _task_lease_ids bigint[], _started_us bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.max_error_message_length()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 10000 $function$;
  -- queues.max_error_message_length(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.max_payload_bytes()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 1048576 $function$;
  -- queues.max_payload_bytes(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.max_payload_depth()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 64 $function$;
  -- queues.max_payload_depth(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.max_throttle_seconds()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 86400 $function$;
  -- queues.max_throttle_seconds(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.measure_history_sets(_now timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _last_id bigint := queues.last_task_id();
  _written integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  delete from queues.history_set_measured m
   where not exists (select 1 from queues.history_sets() s
                      where s.lower_bound = m.lower_bound and s.upper_bound = m.upper_bound);
  with done as (
    select s.lower_bound, s.upper_bound
      from queues.history_sets() s
     where not s.is_default and s.upper_bound <= _last_id
       and not exists (select 1 from queues.task_pending tp
                        where tp.task_id >= s.lower_bound and tp.task_id < s.upper_bound)
       -- nor a lease-held task (no claim-index row, sql/queues/lease_held.sql)
       and not exists (select 1 from queues.lease_held_tasks h
                        where h.task_id >= s.lower_bound and h.task_id < s.upper_bound)
       -- nor a ready batch's (sql/queues/ready_batch.sql)
       and not exists (select 1 from queues.task_ready_batch b
                        cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
                        where b.task_range && int8range(s.lower_bound, s.upper_bound)
                          and u.task_id >= s.lower_bound and u.task_id < s.upper_bound)
  ),
  measured as (
    select d.lower_bound, d.upper_bound, f.task_id as first_task_id, f.enqueued_at as first_enqueued_at,
           n.task_id as last_task_id, b.table_bytes, b.index_bytes
      from done d
      join queues.history_set_bytes(array(select d.lower_bound from done d)) b on b.lower_bound = d.lower_bound
      left join lateral (select t.task_id, t.enqueued_at from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id limit 1) f on true
      left join lateral (select t.task_id from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id desc limit 1) n on true
  )
  insert into queues.history_set_measured as m
         (lower_bound, upper_bound, first_task_id, first_enqueued_at, last_task_id, table_bytes, index_bytes,
          measured_at)
  select x.lower_bound, x.upper_bound, x.first_task_id, x.first_enqueued_at, x.last_task_id, x.table_bytes,
         x.index_bytes, _now
    from measured x
  on conflict (lower_bound) do update
     set upper_bound = excluded.upper_bound, first_task_id = excluded.first_task_id,
         first_enqueued_at = excluded.first_enqueued_at, last_task_id = excluded.last_task_id,
         table_bytes = excluded.table_bytes, index_bytes = excluded.index_bytes, measured_at = excluded.measured_at
   where (m.upper_bound, m.first_task_id, m.first_enqueued_at, m.last_task_id, m.table_bytes, m.index_bytes)
         is distinct from (excluded.upper_bound, excluded.first_task_id, excluded.first_enqueued_at,
                           excluded.last_task_id, excluded.table_bytes, excluded.index_bytes);
  get diagnostics _written = row_count;
  return _written;
end;
$function$;
  -- queues.measure_history_sets(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.next_claim_in_ms(_task_types text[] DEFAULT NULL::text[], _missed_ms integer DEFAULT 0)
 RETURNS integer
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  -- The question's clock, read once: a parameter of the statement, so the scans below
  -- start at it in the ready index. Written as clock_timestamp() in the statement, it was
  -- a filter, and each question read every ready task of the types (2,000 ready: 2,000
  -- index entries, 0.86 ms with 3,000 ready instead of 0.13 with none).
  _clock timestamptz := clock_timestamp();
begin
  return (
    with recursive types as (
      select distinct u.task_type
        from unnest(coalesce(queues.claimable_task_types(_task_types),
                             array(select tt.task_type from queues.task_type tt))) as u(task_type)
       where u.task_type is not null
    ),
    priorities (task_type, priority) as (
      select ty.task_type,
             (select p.priority from queues.task_pending p
               where p.task_type = ty.task_type and p.current_lease_id is null
               order by p.priority desc limit 1)
        from types ty
      union all
      select pr.task_type,
             (select p.priority from queues.task_pending p
               where p.task_type = pr.task_type and p.current_lease_id is null and p.priority < pr.priority
               order by p.priority desc limit 1)
        from priorities pr
       where pr.priority is not null
    )
    ,
    next_scheduled as (
      -- (greatest would turn "none" into 0: it ignores nulls; beyond about 24 days, the
      -- integer's largest value)
      select case when min(n.scheduled_at) is not null
                  then least(greatest(ceil(extract(epoch from min(n.scheduled_at) - _clock) * 1000), 0),
                             2147483647)::integer end as ms
        from priorities pr
       cross join lateral (
         select p.scheduled_at from queues.task_pending p
          where p.task_type = pr.task_type and p.current_lease_id is null and p.priority = pr.priority
            and p.scheduled_at > _clock - make_interval(secs => greatest(coalesce(_missed_ms, 0), 0) / 1000.0)
          order by p.scheduled_at
          limit 1
       ) n
       where pr.priority is not null
    ),
    -- A ready batch (sql/queues/ready_batch.sql) enqueued since the claim took its clock:
    -- its tasks are due, so the answer is 0. (Its scheduled time is its enqueue's: never
    -- ahead of the clock but by the clocks' skew. Batches are few: a filter, no index.)
    next_batch as (
      select case when max(b.scheduled_at) is not null
                  then least(greatest(ceil(extract(epoch from max(b.scheduled_at) - _clock) * 1000), 0),
                             2147483647)::integer end as ms
        from queues.task_ready_batch b
       where b.task_type in (select ty.task_type from types ty)
         and b.scheduled_at > _clock - make_interval(secs => greatest(coalesce(_missed_ms, 0), 0) / 1000.0)
    ),
    next_window as (
      select min(greatest(ceil(extract(epoch from queues.limit_window_start(_clock, l.interval_ms)
                                                   + make_interval(secs => l.interval_ms / 1000.0)
                                                   - _clock) * 1000), 0))::integer as ms
        from queues.task_limits() l
       where l.interval_ms is not null
         and l.task_type in (select ty.task_type from types ty)
         and coalesce((select true from queues.task_pending p
                        where p.task_type = l.task_type and p.current_lease_id is null
                          and p.scheduled_at <= _clock and p.available_at <= _clock
                        order by p.priority desc, p.scheduled_at, p.task_id
                        limit 1), false)
    )
    select least(s.ms, b.ms, w.ms) from next_scheduled s, next_batch b, next_window w);
end;
$function$;
  -- queues.next_claim_in_ms(_task_types text[], _missed_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.parse_envelope(_result jsonb, OUT outcome text, OUT message text)
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _extra text;
  _error text;
  _invalid text;
begin
  if _result is null or jsonb_typeof(_result) = 'null' then
    outcome := 'malformed'; message := 'malformed result envelope: expected an object, got null'; return;
  end if;
  if jsonb_typeof(_result) <> 'object' then
    outcome := 'malformed';
    message := format('malformed result envelope: expected an object, got %s',
                      case jsonb_typeof(_result) when 'array' then 'an array' else 'a ' || jsonb_typeof(_result) end);
    return;
  end if;
  if _result ? 'status' and _result ? 'success' then
    outcome := 'malformed'; message := 'malformed result envelope: has both "status" and "success"'; return;
  end if;
  if _result ? 'status' then
    select string_agg(k, ', ') into _extra from jsonb_object_keys(_result) k where k not in ('status', 'payload');
    if _extra is not null then
      outcome := 'malformed'; message := format('malformed result envelope: unrecognized key(s) %s', _extra); return;
    end if;
    if jsonb_typeof(_result -> 'status') <> 'string' or length(_result ->> 'status') not between 1 and 200 then
      outcome := 'malformed'; message := 'malformed result envelope: status must be a string of 1 to 200 characters'; return;
    end if;
    if _result ->> 'status' = 'succeeded' then outcome := 'succeeded'; else outcome := 'status'; message := _result ->> 'status'; end if;
    return;
  end if;
  if _result ? 'success' or _result ? 'error' or _result ? 'validation_failure_message' then
    select string_agg(k, ', ') into _extra from jsonb_object_keys(_result) k
     where k not in ('success', 'error', 'validation_failure_message', 'payload');
    if _extra is not null then
      outcome := 'malformed'; message := format('malformed result envelope: unrecognized key(s) %s', _extra); return;
    end if;
    if _result ? 'success' and jsonb_typeof(_result -> 'success') <> 'boolean' then
      outcome := 'malformed'; message := 'malformed result envelope: success must be a boolean'; return;
    end if;
    if coalesce(jsonb_typeof(_result -> 'error'), 'null') not in ('string', 'null')
       or coalesce(jsonb_typeof(_result -> 'validation_failure_message'), 'null') not in ('string', 'null')
       or length(_result ->> 'error') > 100000 or length(_result ->> 'validation_failure_message') > 100000 then
      outcome := 'malformed'; message := 'malformed result envelope: error and validation_failure_message must be strings'; return;
    end if;
    _error := nullif(btrim(coalesce(_result ->> 'error', '')), '');
    _invalid := nullif(btrim(coalesce(_result ->> 'validation_failure_message', '')), '');
    if _error is not null then outcome := 'error'; message := _result ->> 'error'; return; end if;
    if _invalid is not null then outcome := 'invalid'; message := _result ->> 'validation_failure_message'; return; end if;
    if not (_result ? 'success') then
      outcome := 'malformed';
      message := 'malformed result envelope: needs "status" or "success", or a non-empty error or validation_failure_message';
      return;
    end if;
    if not (_result ->> 'success')::boolean then
      outcome := 'malformed';
      message := 'malformed result envelope: success is false but neither error nor validation_failure_message is set';
      return;
    end if;
    outcome := 'succeeded';
    return;
  end if;
  outcome := 'malformed'; message := 'malformed result envelope: needs "status" or "success"';
end;
$function$;
  -- queues.parse_envelope(_result jsonb, OUT outcome text, OUT message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.paused_task_types()
 RETURNS text[]
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select coalesce(array_agg(p.task_type order by p.task_type), '{}')
    from queues.task_type_paused p
   where not exists (select 1 from queues.task_type_resumed r where r.task_type_paused_id = p.task_type_paused_id)
$function$;
  -- queues.paused_task_types(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.pending_rows_of(_task_ids bigint[])
 RETURNS TABLE(task_id bigint, task_type text, priority integer, scheduled_at timestamp with time zone, resource_key text, available_at timestamp with time zone, current_lease_id bigint, lease_count integer, released_count integer, max_attempts integer, failed_attempts integer, uncounted_count integer, interrupted_count integer, suspect_lease boolean, group_key text)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  -- A scheduled task asked to run now (queues.task_run_now) counts from that request.
  select t.task_id, t.task_type, t.priority, least(t.scheduled_at, rn.requested_at), t.resource_key,
         greatest(least(t.scheduled_at, rn.requested_at),
                  -- a lease ended by a failed attempt gives way to the attempt's retry time
                  case when f.task_lease_id is null or f.task_lease_id < l.task_lease_id then l.expires_at end,
                  f.retry_at,
                  -- a lease ended by a transient interruption gives way to its retry time
                  i.retry_at),
         -- A lease ended by a release, a revocation or a later failed attempt is not held.
         case when l.released_at is null and l.revoked_at is null
                   and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id)
              then l.task_lease_id end,
         coalesce(l.lease_count, 0), coalesce(l.released_count, 0),
         t.max_attempts, coalesce(f.failed_attempts, 0),
         -- Leases that ended without counting towards abandonment: neither released, nor
         -- ended by a failed attempt, nor the lease still held (a claim counts that one
         -- when it expires), not naming the task their suspect, and not revoked with the
         -- task marked started under them (a lease written before suspects were named:
         -- not started).
         (select count(*)::integer
            from queues.task_lease_effective_of(t.task_id) u
           where u.released_at is null
             and not (coalesce(u.suspect, false)
                      or ((u.suspect is null or u.revoked_at is not null)
                          and exists (select 1 from queues.task_lease_started s
                                       where s.task_id = u.task_id and s.task_lease_id = u.task_lease_id)))
             and not exists (select 1 from queues.task_attempt_failed a where a.task_id = u.task_id and a.task_lease_id = u.task_lease_id)
             and not (u.task_lease_id = l.task_lease_id and l.revoked_at is null
                      and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id))),
         coalesce(i.interrupted_count, 0),
         coalesce(l.suspect, false),
         t.group_key
    from queues.task t
    left join lateral (
      select le.task_lease_id, le.expires_at, le.released_at, le.revoked_at, le.suspect,
             count(*) over () :: integer as lease_count,
             count(le.released_at) over () :: integer as released_count
        from queues.task_lease_effective_of(t.task_id) le
       order by le.task_lease_id desc
       limit 1
    ) l on true
    left join lateral (
      select a.retry_at, a.task_lease_id, count(*) over () :: integer as failed_attempts
        from queues.task_attempt_failed a
       where a.task_id = t.task_id
       order by a.task_attempt_failed_id desc
       limit 1
    ) f on true
    left join lateral (
      select max(x.retry_at) as retry_at, count(*)::integer as interrupted_count
        from queues.task_interruption x
       where x.task_id = t.task_id
    ) i on true
    left join queues.task_run_now rn on rn.task_id = t.task_id
   where (_task_ids is null or t.task_id = any (_task_ids))
     and not exists (select 1 from queues.task_end_of(t.task_id) c)
     -- (rebuild_task_pending deletes every row first; another caller asks for tasks out of it)
     and not exists (select 1 from queues.task_pending x where x.task_id = t.task_id)
     -- nor one a ready batch holds (the rebuild empties them first: sql/queues/ready_batch.sql)
     and not exists (select 1 from queues.batched_of(t.task_id) b)
$function$;
  -- queues.pending_rows_of(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.prune_flow_facts_at(_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _cutoff timestamptz;
  _throttles bigint;
  _clears bigint;
  _windows bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  _cutoff := _now - (select s.retention from queues.history_setting s);
  _cutoff := least(_cutoff, _now);
  with gone as (
    delete from queues.throttle t
     where t.throttled_until < _cutoff
       and exists (select 1 from queues.throttle l
                    where l.key_kind = t.key_kind and l.key = t.key and l.throttle_id > t.throttle_id)
       and not exists (select 1 from queues.throttle e
                        where e.key_kind = t.key_kind and e.key = t.key and e.throttle_id < t.throttle_id
                          and e.throttled_until >= _cutoff)
       and (t.task_id is null or not exists (select 1 from queues.task x where x.task_id = t.task_id))
    returning t.throttle_id
  )
  select count(*), (select count(*) from queues.throttle_cleared c where c.last_throttle_id in (select g.throttle_id from gone g))
    into _throttles, _clears
    from gone;
  delete from queues.task_limit_window w
   where w.window_start < _now - interval '1 day';
  get diagnostics _windows = row_count;
  return jsonb_build_object('throttles', _throttles, 'throttle_clears', _clears, 'limit_windows', _windows);
end;
$function$;
  -- queues.prune_flow_facts_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.prune_task_unique_keys(_limit integer DEFAULT 10000)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _n integer;
begin
  delete from queues.task_unique u
   where u.task_id < coalesce((select min(t.task_id) from queues.task t), 9223372036854775807);
  with stale as (
    select k.unique_key from queues.task_unique_key k
     where k.task_id is not null
       and not exists (select 1 from queues.task_pending p where p.task_id = k.task_id)
     limit coalesce(_limit, 10000)
       for update skip locked
  )
  delete from queues.task_unique_key k using stale s where k.unique_key = s.unique_key;
  get diagnostics _n = row_count;
  return _n;
end;
$function$;
  -- queues.prune_task_unique_keys(_limit integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.raise_enqueue_problem(_idx bigint, _problem text)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _problem like '22023 unknown task_type%' then
    raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = '22023',
      hint = 'Known task types are listed in queues.task_type.';
  end if;
  raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = left(_problem, 5);
end;
$function$;
  -- queues.raise_enqueue_problem(_idx bigint, _problem text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.ready_batch_candidates_at(_types text[], _now timestamp with time zone, _limit integer)
 RETURNS TABLE(task_id bigint, task_type text, resource_key text, priority integer, scheduled_at timestamp with time zone, lease_count integer, batch_id bigint)
 LANGUAGE sql
 ROWS 10
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select bt.*
    from (select distinct u.task_type
            from unnest(coalesce(_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
   cross join lateral (
     select u.task_id, b.task_type, null::text as resource_key, b.priority, b.scheduled_at, 0 as lease_count,
            b.task_id as batch_id
       from (select b.task_id, b.task_type, b.priority, b.scheduled_at, b.task_ids, b.taken
               from queues.task_ready_batch b
              where b.task_type = ty.task_type
                and b.scheduled_at <= _now
              order by b.priority desc, b.scheduled_at, b.task_id
              limit _limit
                for update skip locked) b
      cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
      limit _limit
   ) bt
$function$;
  -- queues.ready_batch_candidates_at(_types text[], _now timestamp with time zone, _limit integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.rebuild_task_pending()
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _count bigint;
begin
  lock table queues.task_pending, queues.task_ready_batch, queues.resource_lease in exclusive mode;
  delete from queues.task_pending;
  -- The ready batches' tasks get claim-index rows like every other unfinished task.
  delete from queues.task_ready_batch;
  delete from queues.resource_lease;
  _count := queues.write_pending_rows(null);

  -- A task never leased whose dependencies have not all succeeded waits for them
  -- (sql/queues/dependencies.sql).
  update queues.task_pending p
     set scheduled_at = 'infinity', available_at = 'infinity'
   where p.current_lease_id is null and p.lease_count = 0
     and p.task_id in (
       select d.task_id from queues.task_dependency d
        where exists (select 1 from queues.task_pending x where x.task_id = d.depends_on_task_id)
           or exists (select 1 from queues.task_completed c
                       where c.task_id = d.depends_on_task_id and c.outcome <> 'succeeded'));

  -- Each resource key held by a live lease, as the claim left it.
  insert into queues.resource_lease (resource_key, task_id, expires_at)
  select distinct on (p.resource_key) p.resource_key, p.task_id, p.available_at
    from queues.task_pending p
   where p.resource_key is not null and p.current_lease_id is not null
   order by p.resource_key, p.available_at desc;
  if _count > 0 then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _count;
end;
$function$;
  -- queues.rebuild_task_pending(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.rebuild_task_unique_key()
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _n bigint;
begin
  lock table queues.task_unique_key in exclusive mode;
  delete from queues.task_unique_key;
  insert into queues.task_unique_key (unique_key, task_id)
  select distinct on (u.unique_key) u.unique_key, u.task_id
    from queues.task_pending p
    join queues.task_unique u on u.task_id = p.task_id
   order by u.unique_key, u.task_id desc;
  get diagnostics _n = row_count;
  return _n;
end;
$function$;
  -- queues.rebuild_task_unique_key(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.record_progress(_task_id bigint, _task_lease_id bigint, _done bigint, _total bigint, _note text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _task_id is null or _task_lease_id is null or _done is null then
    raise exception 'task_id, task_lease_id and done must not be null' using errcode = '22004';
  end if;
  if _done < 0 then
    raise exception 'done must not be negative, got %', _done using errcode = '22023';
  end if;
  if _total is not null and _total < _done then
    raise exception 'total must be at least done (%), got %', _done, _total using errcode = '22023';
  end if;
  if _note is not null and length(_note) > 500 then
    raise exception 'note must be at most 500 characters, got %', length(_note) using errcode = '22023';
  end if;
  if not queues.is_current_lease(_task_id, _task_lease_id) then
    raise exception 'lease % is not the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', schema = 'queues', constraint = 'task_lease_current';
  end if;
  insert into queues.task_progress (task_id, task_lease_id, done, total, note)
  values (_task_id, _task_lease_id, _done, _total, coalesce(_note, ''));
end;
$function$;
  -- queues.record_progress(_task_id bigint, _task_lease_id bigint, _done bigint, _total bigint, _note text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.record_task_result(_task_id bigint, _task_lease_id bigint, _result jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _result is null then
    raise exception 'result must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_result) <> 'object' then
    raise exception 'result must be a JSON object, got %', jsonb_typeof(_result) using errcode = '22023';
  end if;
  if pg_column_size(_result) > queues.max_payload_bytes() then
    raise exception 'result is % bytes, over the limit of % bytes', pg_column_size(_result), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  perform queues.assert_current_lease(_task_id, _task_lease_id);
  insert into queues.task_result (task_id, task_lease_id, result) values (_task_id, _task_lease_id, _result);
end;
$function$;
  -- queues.record_task_result(_task_id bigint, _task_lease_id bigint, _result jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.record_task_trace(_task_ids bigint[])
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _traceparent text := current_setting('queue.traceparent', true);
  _tracestate text := nullif(current_setting('queue.tracestate', true), '');
begin
  if _traceparent is null or _traceparent = '' or _task_ids is null or cardinality(_task_ids) = 0 then
    return false;
  end if;
  if not queues.is_valid_traceparent(_traceparent) then
    raise notice 'queue.traceparent is not a W3C traceparent; the task is enqueued without a trace context: %',
      quote_literal(left(_traceparent, 100));
    return false;
  end if;
  if _tracestate is not null and not queues.is_valid_tracestate(_tracestate) then
    raise notice 'queue.tracestate is not a W3C tracestate of at most 512 characters; kept the traceparent only';
    _tracestate := null;
  end if;
  insert into queues.task_trace (task_id, traceparent, tracestate)
  select t.id, left(_traceparent, 55), _tracestate from unnest(_task_ids) t(id);
  return true;
end;
$function$;
  -- queues.record_task_trace(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.record_throttle(_key_kind text, _key text, _until timestamp with time zone, _retry_after_seconds numeric, _reason text, _recorded_by text, _task_id bigint DEFAULT NULL::bigint, _task_lease_id bigint DEFAULT NULL::bigint, _waiting_task_ids bigint[] DEFAULT NULL::bigint[], _waiting_lease_ids bigint[] DEFAULT NULL::bigint[])
 RETURNS TABLE(result text, throttled_until timestamp with time zone, released_waiting bigint[])
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from queues.record_throttle_at(now(), _key_kind, _key, _until, _retry_after_seconds, _reason,
                                          _recorded_by, _task_id, _task_lease_id, _waiting_task_ids,
                                          _waiting_lease_ids)
$function$;
  -- queues.record_throttle(_key_kind text, _key text, _until timestamp with time zone, _retry_after_seconds numeric, _reason text, _recorded_by text, _task_id bigint, _task_lease_id bigint, _waiting_task_ids bigint[], _waiting_lease_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.record_throttle_at(_now timestamp with time zone, _key_kind text, _key text, _until timestamp with time zone, _retry_after_seconds numeric, _reason text, _recorded_by text, _task_id bigint, _task_lease_id bigint, _waiting_task_ids bigint[] DEFAULT NULL::bigint[], _waiting_lease_ids bigint[] DEFAULT NULL::bigint[])
 RETURNS TABLE(result text, throttled_until timestamp with time zone, released_waiting bigint[])
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _end timestamptz;
  _ids bigint[];
  _leases bigint[];
  _released bigint[] := '{}';
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _key_kind is null or (_key is null and not (_key_kind = 'group' and _task_id is not null)) then
    raise exception 'key_kind and key must not be null' using errcode = '22004';
  end if;
  if _key_kind not in ('task_type', 'group') then
    raise exception 'key_kind must be ''task_type'' or ''group'', got %', quote_literal(left(_key_kind, 100))
      using errcode = '22023';
  end if;
  if _key_kind = 'task_type' then
    if not exists (select 1 from queues.task_type t where t.task_type = _key) then
      raise exception 'unknown task type %', quote_literal(left(_key, 100)) using errcode = '23503';
    end if;
  else
    if _key is null then
      -- The group key of the run's task.
      select t.group_key into _key from queues.task t where t.task_id = _task_id limit 1;
      if not found then
        raise exception 'unknown task %', _task_id using errcode = '23503';
      end if;
      if _key is null then
        raise exception 'task % has no group key to throttle', _task_id using errcode = '22023';
      end if;
    end if;
    if btrim(_key) = '' or length(_key) > 200 then
      raise exception 'group key must be 1 to 200 characters, not blank' using errcode = '22023';
    end if;
  end if;
  if (_until is null) = (_retry_after_seconds is null) then
    raise exception 'give exactly one of until and retry_after_seconds' using errcode = '22023';
  end if;
  if _retry_after_seconds is not null then
    if _retry_after_seconds <= 0 or _retry_after_seconds > queues.max_throttle_seconds() then
      raise exception 'retry_after_seconds must be more than 0 and at most %, got %',
        queues.max_throttle_seconds(), _retry_after_seconds using errcode = '22023';
    end if;
    _end := _now + make_interval(secs => _retry_after_seconds::double precision);
  else
    if _until <= _now or _until > _now + make_interval(secs => queues.max_throttle_seconds()) then
      raise exception 'until must be after now and at most % seconds ahead, got % (now %)',
        queues.max_throttle_seconds(), _until, _now using errcode = '22023';
    end if;
    _end := _until;
  end if;
  if _reason is null or btrim(_reason) = '' or length(_reason) > 500 then
    raise exception 'reason must be 1 to 500 characters' using errcode = '22023';
  end if;
  if _recorded_by is null or length(_recorded_by) not between 1 and 200 then
    raise exception 'recorded_by must be 1 to 200 characters' using errcode = '22023';
  end if;
  if (_task_id is null) <> (_task_lease_id is null) then
    raise exception 'give both task_id and task_lease_id, or neither' using errcode = '22023';
  end if;
  if _waiting_task_ids is not null or _waiting_lease_ids is not null then
    perform queues.assert_lease_pairs(_waiting_task_ids, _waiting_lease_ids);
  end if;

  insert into queues.throttle (key_kind, key, throttled_until, reason, recorded_at, recorded_by, task_id, task_lease_id)
  values (_key_kind, _key, _end, _reason, _now, _recorded_by, _task_id, _task_lease_id);

  -- The waiting leases the throttle covers (of the throttled type, or carrying the
  -- throttled group key), given back uncounted with the run's, in one call.
  if cardinality(_waiting_task_ids) > 0 then
    select array_agg(w.task_id order by w.task_id), array_agg(w.task_lease_id order by w.task_id)
      into _ids, _leases
      from unnest(_waiting_task_ids, _waiting_lease_ids) w(task_id, task_lease_id)
      join queues.task p on p.task_id = w.task_id
     where p.task_id = any (_waiting_task_ids)
       and w.task_id is distinct from _task_id
       and case when _key_kind = 'task_type' then p.task_type = _key else p.group_key = _key end;
  end if;
  if _task_id is not null then
    _ids := array[_task_id] || coalesce(_ids, '{}');
    _leases := array[_task_lease_id] || coalesce(_leases, '{}');
  end if;
  if cardinality(_ids) > 0 then
    _released := array(select r.task_id from queues.release_leases(_ids, _leases) r);
    -- The released tasks the throttle covers wait for its end. A claim reads the throttles
    -- in force in one statement and scans the claim index in the next: one that read them
    -- before this transaction committed and scans after it would see the released tasks
    -- and not the throttle. (A run that named another group key than its own is released
    -- at once.) queues.clear_throttle makes them available at once.
    update queues.task_pending p
       set available_at = _end
     where p.task_id = any (_released) and p.current_lease_id is null and p.available_at < _end
       and case when _key_kind = 'task_type' then p.task_type = _key else p.group_key = _key end;
  end if;

  if _task_id is null then
    return query select 'recorded'::text, _end, _released;
  elsif _task_id = any (_released) then
    return query select 'released'::text, _end, array_remove(_released, _task_id);
  else
    return query select 'lease_lost'::text, _end, _released;
  end if;
end;
$function$;
  -- queues.record_throttle_at(_now timestamp with time zone, _key_kind text, _key text, _until timestamp with time zone, _retry_after_seconds numeric, _reason text, _recorded_by text, _task_id bigint, _task_lease_id bigint, _waiting_task_ids bigint[], _waiting_lease_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.record_worker_heartbeat(_worker_id text, _task_types text[], _heartbeat_interval_ms integer DEFAULT NULL::integer)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _task_types is null or cardinality(_task_types) = 0 or array_position(_task_types, null) is not null then
    raise exception 'task_types must name at least one task type' using errcode = '22023';
  end if;
  if cardinality(_task_types) > 1000 then
    raise exception 'task_types names % types, over the limit of 1000', cardinality(_task_types)
      using errcode = '54000';
  end if;
  if exists (select 1 from unnest(_task_types) t where t !~ '^[a-z][a-z0-9_]{0,62}$') then
    raise exception 'task_types must be task type names (a-z, 0-9, _, at most 63 characters)'
      using errcode = '22023';
  end if;
  if _heartbeat_interval_ms is not null and _heartbeat_interval_ms not between 1 and 86400000 then
    raise exception 'heartbeat_interval_ms must be between 1 and 86400000, got %', _heartbeat_interval_ms
      using errcode = '22023';
  end if;
  insert into queues.worker as w (worker_id, task_types, heartbeat_interval_ms)
  values (_worker_id, _task_types, _heartbeat_interval_ms)
  on conflict (worker_id) do update
     set task_types = excluded.task_types, last_seen_at = now(), stopped_at = null,
         heartbeat_interval_ms = excluded.heartbeat_interval_ms;
end;
$function$;
  -- queues.record_worker_heartbeat(_worker_id text, _task_types text[], _heartbeat_interval_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.record_worker_stopped(_worker_id text)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  update queues.worker set stopped_at = now(), last_seen_at = now() where worker_id = _worker_id
$function$;
  -- queues.record_worker_stopped(_worker_id text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.recover_stale_leases(_dead_after_seconds integer DEFAULT NULL::integer)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, worker_id text)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from queues.recover_stale_leases_at(now(), coalesce(_dead_after_seconds, 600))
$function$;
  -- queues.recover_stale_leases(_dead_after_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.recover_stale_leases_at(_now timestamp with time zone, _dead_after_seconds integer)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, worker_id text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
begin
  if _dead_after_seconds is null or _dead_after_seconds not between 1 and 604800 then
    raise exception 'dead_after_seconds must be between 1 and 604800, got %', coalesce(_dead_after_seconds::text, 'null')
      using errcode = '22023';
  end if;
  perform queues.lock_resource_keys(array(select s.task_id from queues.stale_leases_at(_now, _dead_after_seconds) s));
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(array(select s.task_id from queues.stale_leases_at(_now, _dead_after_seconds) s));
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id from queues.stale_leases_at(_now, _dead_after_seconds) s
  ),
  -- Locked in task id order, as every call that locks several claim-index rows.
  locked as (
    select p.task_id from queues.task_pending p
     where p.task_id = any (array(select s.task_id from stale s))
     order by p.task_id
       for no key update
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null,
           -- Its task is a suspect from now on (see queues.claim_tasks_at); the lease counts
           -- towards abandonment only if it named the task its suspect or it ran.
           uncounted_count = p.uncounted_count
                             + (not (p.suspect_lease
                                     or exists (select 1 from queues.task_lease_started m
                                                 where m.task_id = p.task_id and m.task_lease_id = s.task_lease_id)))::integer
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
       and p.task_id = any (array(select l.task_id from locked l))
    returning p.task_id, s.task_lease_id, s.worker_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, _now, format('worker %s not seen for %s s', r.worker_id, _dead_after_seconds) from revoked r
  ),
  key_freed as (
    delete from queues.resource_lease k
     using revoked r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select r.task_id, r.task_lease_id, r.worker_id from revoked r;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$function$;
  -- queues.recover_stale_leases_at(_now timestamp with time zone, _dead_after_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.redrive_blocker(_task_id bigint)
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select format('task %s cannot be redriven: its dependency task %s ended %s and was not redriven',
                _task_id, d.task_id, d.outcome)
    from queues.redrive_dependencies(_task_id) d
   where d.outcome <> 'succeeded'
   order by d.task_id
   limit 1
$function$;
  -- queues.redrive_blocker(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.redrive_dependencies(_task_id bigint)
 RETURNS TABLE(task_id bigint, outcome text)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with recursive chain as (
    select d.depends_on_task_id as current
      from queues.task_dependency d
     where d.task_id = _task_id
    union
    select r.new_task_id from chain c join queues.task_redriven r on r.task_id = c.current
  )
  select c.current, (select e.outcome from queues.task_end_of(c.current) e limit 1)
    from chain c
   where not exists (select 1 from queues.task_redriven r where r.task_id = c.current)
   order by c.current
$function$;
  -- queues.redrive_dependencies(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.redrive_task(_task_id bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _task queues.task;
  _new_task_id bigint;
  _blocker text;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  select * into _task from queues.task t where t.task_id = _task_id;
  if not found then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  -- Serialise redrives of one task on its completion row.
  perform 1 from queues.task_completed c where c.task_id = _task_id for update;
  if exists (select 1 from queues.task_redriven r where r.task_id = _task_id) then
    raise exception 'task % was already redriven', _task_id using errcode = '22023';
  end if;
  if not exists (select 1 from queues.dead_letter d where d.task_id = _task_id) then
    raise exception 'task % is not a dead letter', _task_id using errcode = '22023',
      hint = 'Only tasks that completed failed (without an error handler) or abandoned can be redriven.';
  end if;
  _blocker := queues.redrive_blocker(_task_id);
  if _blocker is not null then
    raise exception '%', _blocker using errcode = '55000',
      hint = 'Redrive the dependency first, or both in one call (dependencies are redriven first).';
  end if;
  _new_task_id := queues.enqueue_internal(_task.task_type, _task.payload, now(), _task.priority,
                                 _task.resource_key, _task.max_attempts,
                                 nullif(array(select d.task_id from queues.redrive_dependencies(_task_id) d), '{}'),
                                 _task.group_key, _task.timeout_ms);
  insert into queues.task_redriven (task_id, new_task_id) values (_task_id, _new_task_id);
  return _new_task_id;
end;
$function$;
  -- queues.redrive_task(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.register_task_types(_task_types jsonb)
 RETURNS TABLE(task_type text, created boolean)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _element     jsonb;
  _index       integer := 0;
  _name        text;
  _description text;
begin
  if _task_types is null then
    raise exception 'task_types must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_task_types) <> 'array' then
    raise exception 'task_types must be a JSON array, got %', jsonb_typeof(_task_types) using errcode = '22023';
  end if;
  if jsonb_array_length(_task_types) > 1000 then
    raise exception 'task_types has % elements, over the limit of 1000', jsonb_array_length(_task_types)
      using errcode = '54000';
  end if;
  for _element in select e from jsonb_array_elements(_task_types) e loop
    if jsonb_typeof(_element) <> 'object' then
      raise exception 'task_types[%] must be an object, got %', _index, jsonb_typeof(_element) using errcode = '22023';
    end if;
    if exists (select 1 from jsonb_object_keys(_element) k where k not in ('task_type', 'description')) then
      raise exception 'task_types[%]: unknown field(s) %', _index,
        (select string_agg(k, ', ' order by k) from jsonb_object_keys(_element) k where k not in ('task_type', 'description'))
        using errcode = '22023';
    end if;
    if jsonb_typeof(_element->'task_type') is distinct from 'string' then
      raise exception 'task_types[%].task_type must be a string', _index using errcode = '22023';
    end if;
    _name := _element->>'task_type';
    if _name !~ '^[a-z][a-z0-9_]{0,62}$' then
      raise exception 'task_types[%].task_type must be a-z, 0-9 and _, starting with a letter, at most 63 characters, got %',
        _index, quote_literal(left(_name, 100)) using errcode = '22023';
    end if;
    if _element ? 'description' and jsonb_typeof(_element->'description') not in ('string', 'null') then
      raise exception 'task_types[%].description must be a string', _index using errcode = '22023';
    end if;
    _description := coalesce(_element->>'description', '');
    if length(_description) > 1000 then
      raise exception 'task_types[%].description is % characters, over the limit of 1000', _index, length(_description)
        using errcode = '54000';
    end if;
    if exists (select 1 from queues.internal_task_type i where i.task_type = _name) then
      raise exception 'task_types[%].task_type % is a worker-only task type of the queue; choose another name',
        _index, quote_literal(_name) using errcode = '42501';
    end if;
    _index := _index + 1;
  end loop;

  return query
  with wanted as (
    select distinct on (e->>'task_type') e->>'task_type' as name, coalesce(e->>'description', '') as description
      from jsonb_array_elements(_task_types) with ordinality as a(e, n)
     order by e->>'task_type', n desc
  ),
  inserted as (
    insert into queues.task_type as t (task_type, description)
    select w.name, w.description from wanted w
    on conflict on constraint task_type_pkey do nothing
    returning t.task_type
  ),
  -- A description given replaces the type's own (an update of description alone: no
  -- lock that enqueues wait for, see queues.guard_task_type_in_use).
  described as (
    update queues.task_type t
       set description = w.description
      from wanted w
     where t.task_type = w.name
       and w.description <> ''
       and t.description is distinct from w.description
       and w.name not in (select i.task_type from inserted i)
    returning t.task_type
  )
  select w.name, w.name in (select i.task_type from inserted i)
    from wanted w
   order by w.name;
end;
$function$;
  -- queues.register_task_types(_task_types jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
comment on function queues.register_task_types(_task_types jsonb) is 'Registers the task types an app''s task definitions declare (owner only): inserts missing ones, updates descriptions, never deletes.';

CREATE OR REPLACE FUNCTION queues.release_dependents(_task_ids bigint[], _outcomes text[])
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _waiting bigint[];
  _ready bigint[];
  _fail_ids bigint[];
  _messages text[];
  _due boolean;
  _oldest bigint;
begin
  if _task_ids is null or cardinality(_task_ids) = 0 then
    return 0;
  end if;
  _oldest := (select min(x) from unnest(_task_ids) x);
  if _outcomes is null or cardinality(_outcomes) <> cardinality(_task_ids) then
    raise exception 'outcomes must have one element per task (% tasks, % outcomes)',
      cardinality(_task_ids), coalesce(cardinality(_outcomes), 0) using errcode = '22023';
  end if;
  -- The waiting dependents, locked: a concurrent release of the same dependent waits here,
  -- and the next statement (a new snapshot) then sees the other dependency's completion.
  _waiting := array(
    select p.task_id
      from queues.task_pending p
     where p.task_id = any (array(select d.task_id from queues.task_dependency d
                                   where d.depends_on_task_id = any (_task_ids)
                                     -- A dependent is newer than its dependency, and the
                                     -- edge lives in the dependent's history set: the
                                     -- older sets' partitions are pruned at run time.
                                     and d.task_id > _oldest))
       and p.available_at = 'infinity' and p.current_lease_id is null
     order by p.task_id
       for no key update of p);
  if cardinality(_waiting) = 0 then
    return 0;
  end if;

  select coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is null and not v.pending), '{}'),
         coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is not null), '{}'),
         coalesce(array_agg(format('dependency task %s ended %s', v.failed_dep, v.failed_outcome) order by v.task_id)
                    filter (where v.failed_dep is not null), '{}')
    into _ready, _fail_ids, _messages
    from queues.dependency_verdicts(_waiting, _task_ids, _outcomes) v;

  if cardinality(_ready) > 0 then
    with released as (
      update queues.task_pending p
         set scheduled_at = t.scheduled_at, available_at = t.scheduled_at
        from queues.task t
       where p.task_id = any (_ready) and t.task_id = p.task_id
      returning p.scheduled_at
    )
    select bool_or(r.scheduled_at <= now() + interval '1 minute') into _due from released r;
    if _due then
      perform pg_notify('queues_task_ready', '');
    end if;
  end if;
  if cardinality(_fail_ids) > 0 then
    perform queues.fail_dependents(_fail_ids, _messages);
  end if;
  return cardinality(_ready) + cardinality(_fail_ids);
end;
$function$;
  -- queues.release_dependents(_task_ids bigint[], _outcomes text[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.release_leases(_task_ids bigint[], _task_lease_ids bigint[])
 RETURNS TABLE(task_id bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER ROWS 10
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _released bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(_task_ids);

  -- The rows by primary key from the array of ids, each row's lease looked up in a map of
  -- the input (see queues.extend_leases_at), locked first in task id order (as every call
  -- that locks several claim-index rows: sql/queues/lock_order.test.ts).
  with m as (
    select jsonb_object_agg(i.task_id::text, i.task_lease_id) as leases
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
  ),
  locked as (
    select x.task_id
      from queues.task_pending x, m
     where x.task_id = any (_task_ids)
       and x.current_lease_id = (m.leases ->> x.task_id::text)::bigint
     order by x.task_id
       for no key update of x
  ),
  released as (
    update queues.task_pending p
       set available_at = now(),
           -- A released lease is no longer held: its worker can neither extend it nor
           -- complete or record against it.
           current_lease_id = null,
           released_count = p.released_count + 1
      from m
     where p.task_id = any (array(select l.task_id from locked l))
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
    returning p.task_id, (m.leases ->> p.task_id::text)::bigint as task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_release (task_id, task_lease_id)
    select r.task_id, r.task_lease_id from released r
    on conflict do nothing
  ),
  key_freed as (
    delete from queues.resource_lease k
     using released r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select array_agg(r.task_id order by r.task_id) into _released from released r;

  if _released is not null then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select unnest(coalesce(_released, '{}'));
end;
$function$;
  -- queues.release_leases(_task_ids bigint[], _task_lease_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.rescue_due_leases_at(_now timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _lease record;
  _task_ids bigint[];
  _count bigint := 0;
begin
  for _lease in
    select t.task_lease_id, t.task_id from queues.take_due_claim_leases_at(_now) t
  loop
    select c.task_ids into _task_ids
      from queues.claim_lease c
     where c.task_id = _lease.task_id and c.task_lease_id = _lease.task_lease_id;
    if found then
      _count := _count + queues.rescue_lease_at(_lease.task_lease_id, _task_ids, _now);
    end if;
  end loop;
  if _count > 0 then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _count;
end;
$function$;
  -- queues.rescue_due_leases_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.rescue_lease_at(_task_lease_id bigint, _task_ids bigint[], _now timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _n bigint;
begin
  perform pg_advisory_xact_lock(20253, hashint8(_task_lease_id));
  _n := queues.write_pending_rows(array(
           select u.task_id from unnest(_task_ids) u(task_id)
            where not exists (select 1 from queues.task_pending p where p.task_id = u.task_id)
              and not exists (select 1 from queues.task_end_of(u.task_id) e)
              and not exists (select 1 from queues.task_lease_extension x
                               where x.task_id = u.task_id and x.task_lease_id = _task_lease_id
                                 and x.expires_at > _now)));
  return _n;
end;
$function$;
  -- queues.rescue_lease_at(_task_lease_id bigint, _task_ids bigint[], _now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.rescue_leases_at(_now timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _lease record;
  _count bigint := 0;
begin
  for _lease in
    select c.task_lease_id, c.task_ids
      from queues.claim_lease c
     where c.expires_at <= _now
       and exists (select 1 from unnest(c.task_ids) u(task_id)
                    where not exists (select 1 from queues.task_pending p where p.task_id = u.task_id)
                      and not exists (select 1 from queues.task_end_of(u.task_id) e))
     order by c.task_lease_id
  loop
    _count := _count + queues.rescue_lease_at(_lease.task_lease_id, _lease.task_ids, _now);
  end loop;
  if _count > 0 then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _count;
end;
$function$;
  -- queues.rescue_leases_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.revoke_worker_leases(_worker_id text, _started bigint[] DEFAULT NULL::bigint[], _started_us bigint[] DEFAULT NULL::bigint[])
 RETURNS TABLE(task_id bigint, task_lease_id bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER ROWS 10
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _worker_key integer;
begin
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if cardinality(_started) is distinct from cardinality(_started_us) then
    raise exception 'started and started_us must both be null or have one element each per task (% and %)',
      coalesce(cardinality(_started)::text, 'null'), coalesce(cardinality(_started_us)::text, 'null')
      using errcode = '22023';
  end if;
  -- A lease names its worker by key (queues.worker_name), or by id if written before.
  select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
  perform queues.lock_resource_keys(array(
    select p.task_id from queues.task_pending p
     cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)));
  -- Its lease-held tasks (no row: the ready set) get their row back first.
  perform queues.hold_rows_of(array(select h.task_id from queues.lease_held_tasks h where h.worker_key = _worker_key));
  return query
  with held as (
    -- Locked in task id order, as every call that locks several claim-index rows.
    select p.task_id, p.current_lease_id as task_lease_id, p.suspect_lease as suspect,
           s.started_us,
           exists (select 1 from queues.task_lease_started m
                    where m.task_id = p.task_id and m.task_lease_id = p.current_lease_id) as marked
      from queues.task_pending p
      left join (select distinct on (u.task_id) u.task_id, u.started_us
                   from unnest(_started, _started_us) as u(task_id, started_us)
                  where u.started_us is not null
                  order by u.task_id, u.started_us) s on s.task_id = p.task_id
     cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)
     order by p.task_id
       for no key update of p
  ),
  revoked as (
    -- available_at of a leased row is its lease's expiry (heartbeats included).
    update queues.task_pending p
       set available_at = case when h.suspect then p.available_at else now() end,
           current_lease_id = null,
           uncounted_count = p.uncounted_count + (not (h.suspect or h.marked or h.started_us is not null))::integer
      from held h
     where p.task_id = h.task_id and p.current_lease_id = h.task_lease_id
    returning p.task_id, h.task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, now(), format('worker %s died', _worker_id) from revoked r
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id, started_at)
    select h.task_id, h.task_lease_id, to_timestamp(h.started_us / 1000000.0)
      from held h
     where h.started_us is not null and not h.marked
       and h.task_id in (select r.task_id from revoked r)
  ),
  key_freed as (
    delete from queues.resource_lease k
     using revoked r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select r.task_id, r.task_lease_id from revoked r;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$function$;
  -- queues.revoke_worker_leases(_worker_id text, _started bigint[], _started_us bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.run_scheduled_now(_now timestamp with time zone, _task_ids bigint[])
 RETURNS SETOF bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return query
  with locked as (
    select p.task_id
      from queues.task_pending p
     where p.task_id = any (_task_ids)
       and p.available_at > _now and p.current_lease_id is null and p.lease_count = 0
       -- A task waiting for its dependencies is not scheduled: it runs when they end.
       and p.available_at <> 'infinity'
     order by p.task_id
       for update
  ),
  recorded as (
    insert into queues.task_run_now (task_id, requested_at)
    select l.task_id, _now from locked l
    on conflict (task_id) do nothing
    returning task_id
  ),
  moved as (
    update queues.task_pending p set available_at = _now, scheduled_at = _now
     where p.task_id = any (array(select r.task_id from recorded r))
    returning p.task_id
  )
  select m.task_id from moved m;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$function$;
  -- queues.run_scheduled_now(_now timestamp with time zone, _task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.run_step(_task_id bigint, _task_lease_id bigint, _function_name text, _payload jsonb, OUT result text, OUT outcome text, OUT error text, OUT note text)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _env record;
  _raw jsonb;
begin
  begin
    -- A lease no longer held is not run.
    result := case when queues.is_current_lease(_task_id, _task_lease_id) then 'started' else 'lease_lost' end;
    if result = 'started' then
      _raw := internal.run_function(_function_name, _payload);
      select * into _env from queues.parse_envelope(_raw);
      if _env.outcome = 'malformed' then
        raise exception '%: %', _function_name, _env.message using errcode = 'QSTEP';
      end if;
      -- The function's envelope is kept as the run's result (queues.task_result), fenced by
      -- the lease, before the completion.
      perform queues.record_task_result(_task_id, _task_lease_id, _raw);
      case _env.outcome
        when 'succeeded' then outcome := 'succeeded';
        when 'status' then outcome := 'succeeded'; note := 'status ' || _env.message;
        when 'invalid' then
          -- Its own outcome: final, never retried, not a dead letter.
          outcome := 'validation_failed'; error := format('%s: validation failure: %s', _function_name, _env.message);
          note := _env.message;
        else outcome := 'failed'; error := format('%s: %s', _function_name, _env.message);
      end case;
      select s.result into result
        from queues.settle_tasks(array[_task_id], array[_task_lease_id], array[outcome],
                                 -- A validation failure is final: no retry.
                                 array[case when _env.outcome = 'invalid' then false end],
                                 case when error is null then '{}'::bigint[] else array[_task_id] end,
                                 case when error is null then '{}'::text[] else array[error] end,
                                 -- The step started with its call's transaction.
                                 array[(extract(epoch from now()) * 1000000)::bigint]) s;
      if result not in ('completed', 'retry_scheduled') then
        -- Refused (the lease was lost meanwhile): the step's writes must not commit.
        raise exception 'refused: %', result using errcode = 'QREFU';
      end if;
    end if;
  exception
    when sqlstate 'QREFU' then
      outcome := null; error := null; note := null;
    when serialization_failure or deadlock_detected then
      result := 'transient'; outcome := null; error := sqlerrm; note := null;
    when others then
      -- Rolled back; record why, in a subtransaction of its own.
      outcome := 'failed';
      error := case when sqlstate = 'QSTEP' then sqlerrm else format('%s raised: %s', _function_name, sqlerrm) end;
      note := null;
      select s.result into result
        from queues.settle_tasks(array[_task_id], array[_task_lease_id], array['failed'], null,
                                 array[_task_id], array[error], array[(extract(epoch from now()) * 1000000)::bigint]) s;
  end;
  if result = 'started' then
    result := 'lease_lost';
  end if;
end;
$function$;
  -- queues.run_step(_task_id bigint, _task_lease_id bigint, _function_name text, _payload jsonb, OUT result text, OUT outcome text, OUT error text, OUT note text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.run_steps(_task_ids bigint[], _task_lease_ids bigint[], _function_names text[], _payloads jsonb[], _traceparents text[] DEFAULT NULL::text[])
 RETURNS TABLE(task_id bigint, result text, outcome text, error text, note text)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _n integer;
  _held boolean[];
  -- Per step, in input order.
  _result text[];
  _outcome text[];
  _error text[];
  _note text[];
  _retry boolean[];
  -- The envelope to keep (null for none).
  _kept jsonb[];
  -- Ran (or could not run): completed by the final statement.
  _batched boolean[];
  -- Functions resolved in this call: name, name if it can run, or why it cannot.
  _names text[] := '{}';
  _calls text[] := '{}';
  _problems text[] := '{}';
  _oid regprocedure;
  _call text;
  _problem text;
  _i integer;
  _k integer;
  _m integer;
  _name text;
  _raw jsonb;
  _env record;
  _kind text;
  _ids bigint[];
  _settled text[];
  _max_bytes integer := queues.max_payload_bytes();
  -- The transaction's own updates and deletes of queues.task_pending (see above).
  _pending regclass := 'queues.task_pending'::regclass;
  _counted boolean := current_setting('track_counts')::boolean;
  _changes_at_start bigint;
  _changes bigint;
  _current boolean[];
begin
  if _task_ids is null or _task_lease_ids is null or _function_names is null or _payloads is null then
    raise exception 'task_ids, task_lease_ids, function_names and payloads must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> cardinality(_task_ids) or cardinality(_function_names) <> cardinality(_task_ids)
     or cardinality(_payloads) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids, function_names and payloads must have one element per task' using errcode = '22023';
  end if;
  if cardinality(_traceparents) <> cardinality(_task_ids) then
    raise exception 'traceparents must have one element per task (or be null)' using errcode = '22023';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 steps per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null then
    raise exception 'task_ids and task_lease_ids must not contain null' using errcode = '22004';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;
  _n := cardinality(_task_ids);
  if _n = 0 then
    return;
  end if;
  _held := queues.current_leases(_task_ids, _task_lease_ids);
  _result := array_fill(null::text, array[_n]);
  _outcome := _result;
  _error := _result;
  _note := _result;
  _retry := array_fill(null::boolean, array[_n]);
  _batched := array_fill(false, array[_n]);
  _kept := array_fill(null::jsonb, array[_n]);
  _changes_at_start := pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint;

  begin
    for _i in 1 .. _n loop
      if not _held[_i] then
        -- Not run.
        _result[_i] := 'lease_lost';
        continue;
      end if;
      -- A step before it changed pending rows: is this lease still current?
      if (not _counted
          or pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint <> _changes_at_start)
         and not queues.is_current_lease(_task_ids[_i], _task_lease_ids[_i]) then
        _result[_i] := 'lease_lost';
        continue;
      end if;
      _name := _function_names[_i];

      _k := array_position(_names, _name);
      if _k is null then
        -- Resolved as internal.run_function does, once per call.
        begin
          _oid := internal.resolve_runnable_function(_name);
          if not has_function_privilege(_oid, 'execute') then
            raise exception 'permission denied: % may not execute %', current_user, _name using errcode = '42501';
          end if;
          _call := _name;
          _problem := null;
        exception when others then
          _call := null;
          _problem := format('%s raised: %s', _name, sqlerrm);
        end;
        _names := _names || _name;
        _calls := _calls || _call;
        _problems := _problems || _problem;
        _k := cardinality(_names);
      end if;

      if _problems[_k] is not null then
        -- Cannot run (unknown, unregistered, not allowed): failed, nothing ran.
        _outcome[_i] := 'failed';
        _error[_i] := _problems[_k];
        _batched[_i] := true;
        continue;
      end if;

      _changes := pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint;
      if _traceparents is not null then
        -- The step's span: the trace context of what it enqueues.
        perform set_config('queue.traceparent', coalesce(_traceparents[_i], ''), true);
      end if;
      begin
        -- A static call per registered function (internal.build_call_runnable), planned
        -- once per session; the name was resolved and checked above.
        _raw := internal.call_runnable(_name, _payloads[_i]);
        if _raw = '{"success": true}'::jsonb then
          _kind := 'succeeded';
        else
          select * into _env from queues.parse_envelope(_raw);
          _kind := _env.outcome;
          if _kind = 'malformed' then
            raise exception '%: %', _name, _env.message using errcode = 'QSTEP';
          end if;
          if pg_column_size(_raw) > _max_bytes then
            raise exception 'result is % bytes, over the limit of % bytes', pg_column_size(_raw), _max_bytes
              using errcode = '54000';
          end if;
        end if;
        if not _counted
           or pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint <> _changes then
          -- The step updated or deleted pending rows: its own task, and those of the steps
          -- before it whose completions are still to be written, must be as they were.
          _current := queues.current_leases(
            array(select s.task_id from unnest(_task_ids, _batched) with ordinality as s(task_id, batched, ord)
                   where s.batched and s.ord < _i order by s.ord) || _task_ids[_i],
            array(select s.lease from unnest(_task_lease_ids, _batched) with ordinality as s(lease, batched, ord)
                   where s.batched and s.ord < _i order by s.ord) || _task_lease_ids[_i]);
          if not _current[cardinality(_current)] then
            raise exception '%: the step changed its own task (completed, failed or released it); the call that runs a step completes it',
              _name using errcode = 'QSTEP';
          end if;
          if false = any (_current) then
            raise exception '%: the step changed the task of a step that ran before it in the same call; it runs again after that completion',
              _name using errcode = 'QMEDL';
          end if;
        end if;
        -- Past every check: the step stands.
        case _kind
          when 'succeeded' then _outcome[_i] := 'succeeded';
          when 'status' then _outcome[_i] := 'succeeded'; _note[_i] := 'status ' || _env.message;
          when 'invalid' then
            _outcome[_i] := 'validation_failed'; _error[_i] := format('%s: validation failure: %s', _name, _env.message);
            _note[_i] := _env.message;
            -- A validation failure is final: no retry.
            _retry[_i] := false;
          else _outcome[_i] := 'failed'; _error[_i] := format('%s: %s', _name, _env.message);
        end case;
        _kept[_i] := _raw;
        _batched[_i] := true;
      exception
        when sqlstate 'QMEDL' then
          -- Rolled back, nothing recorded.
          _result[_i] := 'transient';
          _error[_i] := sqlerrm;
        when serialization_failure or deadlock_detected then
          -- Rolled back, nothing recorded: it runs again.
          _result[_i] := 'transient';
          _error[_i] := sqlerrm;
        when others then
          -- Rolled back: completed 'failed', with why.
          _outcome[_i] := 'failed';
          _error[_i] := case when sqlstate = 'QSTEP' then sqlerrm else format('%s raised: %s', _name, sqlerrm) end;
          _batched[_i] := true;
      end;
    end loop;
    if _traceparents is not null then
      perform set_config('queue.traceparent', '', true);
    end if;

    -- The completions (and kept envelopes) of every step that ran, in one statement.
    if true = any (_batched) then
      select array_agg(c.task_id order by c.ord), array_agg(c.result order by c.ord)
        into _ids, _settled
        from queues.complete_steps(
               array(select s.task_id from unnest(_task_ids, _batched) with ordinality as s(task_id, batched, ord)
                      where s.batched order by s.ord),
               array(select s.lease from unnest(_task_lease_ids, _batched) with ordinality as s(lease, batched, ord)
                      where s.batched order by s.ord),
               array(select s.outcome from unnest(_outcome, _batched) with ordinality as s(outcome, batched, ord)
                      where s.batched order by s.ord),
               array(select s.retry from unnest(_retry, _batched) with ordinality as s(retry, batched, ord)
                      where s.batched order by s.ord),
               array(select s.task_id from unnest(_task_ids, _error, _batched) with ordinality as s(task_id, error, batched, ord)
                      where s.batched and s.error is not null order by s.ord),
               array(select s.error from unnest(_error, _batched) with ordinality as s(error, batched, ord)
                      where s.batched and s.error is not null order by s.ord),
               array(select s.kept from unnest(_kept, _batched) with ordinality as s(kept, batched, ord)
                      where s.batched order by s.ord)
             ) with ordinality as c(task_id, result, ord);
      if exists (select 1 from unnest(_settled) r where r not in ('completed', 'retry_scheduled')) then
        -- A lease taken during the call: its step's writes must not commit.
        raise exception 'a completion of the call was refused' using errcode = 'QREFU';
      end if;
      _m := 1;
      for _i in 1 .. _n loop
        if _batched[_i] then
          if _ids[_m] <> _task_ids[_i] then
            raise exception 'completions out of order' using errcode = 'XX000';
          end if;
          _result[_i] := _settled[_m];
          _m := _m + 1;
        end if;
      end loop;
    end if;
  exception when sqlstate 'QREFU' then
    -- Everything above is rolled back, nothing recorded: the refused steps are answered as
    -- refused; every other step that ran runs again under a new lease.
    _m := 1;
    for _i in 1 .. _n loop
      if _batched[_i] then
        if _settled[_m] not in ('completed', 'retry_scheduled') then
          _result[_i] := _settled[_m];
          _error[_i] := null;
        else
          _result[_i] := 'transient';
          _error[_i] := 'a completion of another step of the call was refused (its lease was taken); the call was rolled back';
        end if;
        _outcome[_i] := null;
        _note[_i] := null;
        _m := _m + 1;
      end if;
    end loop;
  end;

  return query
  select s.task_id, s.result, s.outcome, s.error, s.note
    from unnest(_task_ids, _result, _outcome, _error, _note) with ordinality as s(task_id, result, outcome, error, note, ord)
   order by s.ord;
end;
$function$;
  -- queues.run_steps(_task_ids bigint[], _task_lease_ids bigint[], _function_names text[], _payloads jsonb[], _traceparents text[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.run_task_now(_task_id bigint)
 RETURNS text
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _pending record;
  _found boolean;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  -- A claim that holds the row commits first; the row is then read as it left it.
  select p.available_at, p.current_lease_id is null and p.lease_count = 0 as untaken into _pending
    from queues.task_pending p
   where p.task_id = _task_id
     for update;
  _found := found;
  -- No row: a task in a ready batch gets one (sql/queues/ready_batch.sql), locked as any
  -- other.
  if not _found and cardinality(queues.unbatch_tasks(array[_task_id])) > 0 then
    select p.available_at, p.current_lease_id is null and p.lease_count = 0 as untaken into _pending
      from queues.task_pending p
     where p.task_id = _task_id
       for update;
    _found := found;
  end if;
  if not _found then
    -- No row: ended (or no such task), or held by the claim lease that took it out of the
    -- claim index (the ready set: docs/design/hot-path.md).
    if exists (select 1 from queues.task t where t.task_id = _task_id)
       and not exists (select 1 from queues.task_end_of(_task_id) e) then
      return 'taken';
    end if;
    return 'not_pending';
  end if;
  if not _pending.untaken then
    return 'taken';
  end if;
  -- Nothing to do when it is due already.
  perform queues.run_scheduled_now(now(), array[_task_id]);
  return 'due_now';
end;
$function$;
  -- queues.run_task_now(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.set_task_limit(_task_type text, _scope text, _group_key text, _max_running integer, _max_starts integer DEFAULT NULL::integer, _per interval DEFAULT NULL::interval)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _ms numeric;
begin
  perform queues.check_task_limit_key(_task_type, _scope, _group_key);
  if _max_running is null and _max_starts is null then
    raise exception 'set max_running, or max_starts with per (queues.clear_task_limit clears)' using errcode = '22004';
  end if;
  if _max_running is not null and _max_running not between 1 and 1000000 then
    raise exception 'max_running must be between 1 and 1000000, got %', _max_running using errcode = '22023';
  end if;
  if _max_starts is not null and _max_starts not between 1 and 1000000 then
    raise exception 'max_starts must be between 1 and 1000000, got %', _max_starts using errcode = '22023';
  end if;
  if (_max_starts is null) <> (_per is null) then
    raise exception 'max_starts and per go together: got max_starts %, per %',
      coalesce(_max_starts::text, 'null'), coalesce(_per::text, 'null') using errcode = '22023';
  end if;
  if _per is not null then
    _ms := extract(epoch from _per) * 1000;
    if extract(month from _per) <> 0 or extract(year from _per) <> 0
       or _ms not between 1 and 86400000 or _ms <> trunc(_ms) then
      raise exception 'per must be a whole number of milliseconds from 1 millisecond to 1 day, got %', _per
        using errcode = '22023';
    end if;
  end if;
  -- The limits' lock (queues.claim_tasks_at takes it shared): claims in flight, which
  -- read no limit, commit first, and claims that start now wait for this transaction, so
  -- they read the new limit.
  perform pg_advisory_xact_lock(20254, 0);
  insert into queues.task_limit_set (task_type, scope, group_key, max_running, max_starts, interval_ms)
  values (_task_type, _scope, _group_key, _max_running, _max_starts, _ms::integer);
  -- A limited type's tasks are claimed on their rows, where the limits count them: its
  -- tasks in ready batches get theirs (sql/queues/ready_batch.sql). A batch an enqueue
  -- commits after this (it read no limit) gets its rows at the first claim of the type.
  perform queues.unbatch_task_type(_task_type);
  -- Its tasks running now, taken by claims that read no limit, are held by their claim
  -- lease without a row (sql/queues/lease_held.sql), where the claim's count of live leases
  -- does not look: they get their rows back, leased as their claim left them, so they
  -- count against the new limit until they end (the claims in flight committed first).
  perform queues.hold_rows_of(array(select h.task_id
                                      from queues.lease_held_tasks h
                                      join queues.task t on t.task_id = h.task_id
                                     where t.task_type = _task_type));
end;
$function$;
  -- queues.set_task_limit(_task_type text, _scope text, _group_key text, _max_running integer, _max_starts integer, _per interval): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.set_task_type_timeout(_task_type text, _timeout_ms integer)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task type %', quote_literal(left(_task_type, 100)) using errcode = '23503';
  end if;
  if _timeout_ms is not null and _timeout_ms not between 1 and 86400000 then
    raise exception 'timeout_ms must be between 1 and 86400000 (24 hours), got %', _timeout_ms using errcode = '22023';
  end if;
  insert into queues.task_type_timeout_set (task_type, timeout_ms) values (_task_type, _timeout_ms);
end;
$function$;
  -- queues.set_task_type_timeout(_task_type text, _timeout_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.settle_new_dependents(_task_ids bigint[])
 RETURNS void
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _failed record;
  _fail_ids bigint[];
  _messages text[];
  _waiting bigint[];
  _ready bigint[];
begin
  select coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is not null), '{}'),
         coalesce(array_agg(format('dependency task %s ended %s', v.failed_dep, v.failed_outcome) order by v.task_id)
                    filter (where v.failed_dep is not null), '{}'),
         coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is null and v.pending), '{}'),
         coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is null and not v.pending), '{}')
    into _fail_ids, _messages, _waiting, _ready
    from queues.dependency_verdicts(_task_ids, '{}', '{}') v;

  if cardinality(_waiting) > 0 then
    update queues.task_pending p
       set scheduled_at = 'infinity', available_at = 'infinity'
     where p.task_id = any (_waiting) and p.available_at <> 'infinity';
  end if;
  if cardinality(_ready) > 0 then
    update queues.task_pending p
       set scheduled_at = t.scheduled_at, available_at = t.scheduled_at
      from queues.task t
     where p.task_id = any (_ready) and p.available_at = 'infinity' and t.task_id = p.task_id;
  end if;
  if cardinality(_fail_ids) > 0 then
    perform queues.fail_dependents(_fail_ids, _messages);
  end if;
end;
$function$;
  -- queues.settle_new_dependents(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.settle_tasks(_task_ids bigint[], _task_lease_ids bigint[] DEFAULT NULL::bigint[], _outcomes text[] DEFAULT NULL::text[], _retries boolean[] DEFAULT NULL::boolean[], _error_task_ids bigint[] DEFAULT NULL::bigint[], _error_messages text[] DEFAULT NULL::text[], _started_us bigint[] DEFAULT NULL::bigint[])
 RETURNS TABLE(task_id bigint, result text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _errors bigint[] := coalesce(_error_task_ids, '{}');
  _messages text[] := coalesce(_error_messages, '{}');
begin
  if cardinality(_errors) <> cardinality(_messages) then
    raise exception 'error_task_ids and error_messages must have the same length (% and %)',
      cardinality(_errors), cardinality(_messages) using errcode = '22023';
  end if;
  -- (Read only when there are errors: a round of plain completions runs no query here.)
  if cardinality(_errors) > 0 then
    if array_position(_errors, null) is not null then
      raise exception 'error_task_ids must not contain null' using errcode = '22004';
    end if;
    if exists (select 1 from unnest(_messages) m where m is null or btrim(m) = '') then
      raise exception 'error_messages must not be empty' using errcode = '22004';
    end if;
    if exists (select 1 from unnest(_errors) e where e <> all (coalesce(_task_ids, '{}'))) then
      raise exception 'error_task_ids must name tasks completed in the same call' using errcode = '22023';
    end if;
  end if;
  if _started_us is not null and cardinality(_started_us) <> cardinality(coalesce(_task_ids, '{}')) then
    raise exception 'started_us must have one element per task (% tasks, % start times)',
      cardinality(coalesce(_task_ids, '{}')), cardinality(_started_us) using errcode = '22023';
  end if;

  if cardinality(coalesce(_task_ids, '{}')) = 0 then
    return;
  end if;

  -- No error to record (a round of plain completions, the common case): the completion's
  -- rows as they come, in input order, without the join that records errors.
  if cardinality(_errors) = 0 then
    return query
    select c.task_id, c.result
      from queues.complete_tasks(_task_ids, _task_lease_ids, _outcomes, _retries,
                                 case when _started_us is not null then
                                   array(select to_timestamp(u.us::float8 / 1000000)
                                         from unnest(_started_us) with ordinality u(us, i) order by u.i) end) c;
    return;
  end if;

  return query
  with done as (
    select c.task_id, c.result, row_number() over () as ord
      from queues.complete_tasks(_task_ids, _task_lease_ids, _outcomes, _retries,
                                 case when _started_us is not null then
                                   -- float8, not numeric: exact to the microsecond
                                   -- (to_timestamp rounds to it) and about 0.2 ms less
                                   -- per round of 500 than a numeric division each.
                                   array(select to_timestamp(u.us::float8 / 1000000)
                                         from unnest(_started_us) with ordinality u(us, i) order by u.i) end) c
  ),
  leases as (
    select l.task_id, l.task_lease_id
      from unnest(_task_ids, coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])))
           as l(task_id, task_lease_id)
  ),
  recorded as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select e.task_id, l.task_lease_id,
           case when length(e.message) > queues.max_error_message_length()
                then left(e.message, queues.max_error_message_length()) || ' [truncated]'
                else e.message end
      from unnest(_errors, _messages) with ordinality as e(task_id, message, ord)
      join done d on d.task_id = e.task_id and d.result in ('completed', 'retry_scheduled')
      join leases l on l.task_id = e.task_id
     order by e.ord
  )
  select d.task_id, d.result from done d order by d.ord;
end;
$function$;
  -- queues.settle_tasks(_task_ids bigint[], _task_lease_ids bigint[], _outcomes text[], _retries boolean[], _error_task_ids bigint[], _error_messages text[], _started_us bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.settle_with_handler(_task_id bigint, _task_lease_id bigint, _outcome text, _errors text[], _retry boolean, _handler text, _body jsonb, _mode text, _raised_prefix text, _started_at timestamp with time zone, OUT result text, OUT outcome text, OUT errors text[])
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _env record;
  _failure text;
begin
  if _task_id is null or _task_lease_id is null or _handler is null or _mode is null then
    raise exception 'task_id, task_lease_id, handler and mode must not be null' using errcode = '22004';
  end if;
  if _mode not in ('success', 'error') then
    raise exception 'mode must be success or error, not %', _mode using errcode = '22023';
  end if;
  if not (_outcome is not distinct from 'succeeded' and _mode = 'success'
          or _outcome in ('failed', 'validation_failed') and _mode = 'error') then
    raise exception 'a % handler completes % tasks, not %', _mode,
      (case _mode when 'success' then 'succeeded' else 'failed or validation_failed' end), coalesce(_outcome, 'null')
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_errors) m where m is null or btrim(m) = '') then
    raise exception 'errors must not be empty' using errcode = '22004';
  end if;
  outcome := _outcome;
  errors := coalesce(_errors, '{}');
  begin
    begin
      select * into _env from queues.parse_envelope(internal.run_function(_handler, _body));
      _failure := case _env.outcome
                    when 'succeeded' then null
                    when 'invalid' then format('%s: validation failure: %s', _handler, _env.message)
                    when 'status' then format('%s: status %s', _handler, _env.message)
                    else format('%s: %s', _handler, _env.message) end;
    exception
      when serialization_failure or deadlock_detected then
        raise;
      when others then
        -- Its writes are rolled back with the subtransaction.
        _failure := coalesce(_raised_prefix, '') || sqlerrm;
    end;
    if _failure is not null then
      if length(_failure) > 8000 then
        _failure := left(_failure, 8000) || ' [truncated]';
      end if;
      if _mode = 'success' then
        outcome := 'failed';
        errors := array[_failure];
      else
        errors := errors || _failure;
      end if;
    end if;
    select s.result into result
      from queues.settle_tasks(array[_task_id], array[_task_lease_id], array[outcome], array[_retry],
                               array_fill(_task_id, array[cardinality(errors)]), errors,
                               array[(extract(epoch from _started_at) * 1000000)::bigint]) s;
    if result not in ('completed', 'retry_scheduled') then
      -- Refused: the handler's writes must not commit either.
      raise exception 'refused: %', result using errcode = 'QREFU';
    end if;
  exception
    when sqlstate 'QREFU' then
      null;
  end;
end;
$function$;
  -- queues.settle_with_handler(_task_id bigint, _task_lease_id bigint, _outcome text, _errors text[], _retry boolean, _handler text, _body jsonb, _mode text, _raised_prefix text, _started_at timestamp with time zone, OUT result text, OUT outcome text, OUT errors text[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.settle_with_handlers(_task_ids bigint[], _task_lease_ids bigint[], _outcomes text[], _retries boolean[], _error_task_ids bigint[], _error_messages text[], _handlers text[], _bodies jsonb[], _modes text[], _raised_prefixes text[], _started_us bigint[], _traceparents text[] DEFAULT NULL::text[])
 RETURNS TABLE(task_id bigint, result text, outcome text, errors text[])
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
  _n integer := cardinality(_task_ids);
  _errs jsonb[];
  _out text[];
  _result text[];
  -- Still to be completed (not refused, not transient).
  _open boolean[];
  _env record;
  _failure text;
  _i integer;
  _k integer;
  _ids bigint[];
  _settled text[];
  _refused boolean;
  -- Handlers resolved in this call (as internal.run_function does, once per name): name,
  -- and why it cannot run (null: it can).
  _names text[] := '{}';
  _problems text[] := '{}';
  _oid regprocedure;
begin
  if _task_ids is null or _task_lease_ids is null or _outcomes is null or _handlers is null or _bodies is null
     or _modes is null or _raised_prefixes is null then
    raise exception 'task_ids, task_lease_ids, outcomes, handlers, bodies, modes and raised_prefixes must not be null'
      using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> _n or cardinality(_outcomes) <> _n or cardinality(_handlers) <> _n
     or cardinality(_bodies) <> _n or cardinality(_modes) <> _n or cardinality(_raised_prefixes) <> _n
     or cardinality(coalesce(_retries, array_fill(null::boolean, array[_n]))) <> _n
     or cardinality(coalesce(_started_us, array_fill(null::bigint, array[_n]))) <> _n
     or cardinality(coalesce(_traceparents, array_fill(null::text, array[_n]))) <> _n then
    raise exception 'every array must have one element per task (% tasks)', _n using errcode = '22023';
  end if;
  if cardinality(coalesce(_error_task_ids, '{}')) <> cardinality(coalesce(_error_messages, '{}')) then
    raise exception 'error_task_ids and error_messages must have the same length' using errcode = '22023';
  end if;
  -- A subtransaction per handler: past PostgreSQL's 64 cached per backend, every snapshot
  -- taken while this transaction runs (here and on replicas) reads pg_subtrans.
  if _n > 50 then
    raise exception 'at most 50 completions per call, got %', _n using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null
     or array_position(_handlers, null) is not null or array_position(_modes, null) is not null then
    raise exception 'task_ids, task_lease_ids, handlers and modes must not contain null' using errcode = '22004';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m not in ('success', 'error')) then
    raise exception 'modes must be success or error' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_outcomes, _modes) as x(o, m)
              where not (o is not distinct from 'succeeded' and m = 'success'
                         or o in ('failed', 'validation_failed') and m = 'error')) then
    raise exception 'a success handler completes succeeded tasks, an error handler failed or validation_failed ones'
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_error_messages) m where m is null or btrim(m) = '') then
    raise exception 'errors must not be empty' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_error_task_ids) e where e is null or e <> all (_task_ids)) then
    raise exception 'error_task_ids must name tasks of the call' using errcode = '22023';
  end if;
  if _n = 0 then
    return;
  end if;
  _result := array_fill(null::text, array[_n]);
  _out := _outcomes;
  _errs := array_fill(null::jsonb, array[_n]);
  _open := array_fill(true, array[_n]);

  -- Once, and again after a refusal (each pass has one refusal fewer to make).
  for _pass in 1 .. _n + 1 loop
    _refused := false;
    begin
      for _i in 1 .. _n loop
        continue when not _open[_i];
        _out[_i] := _outcomes[_i];
        -- Its errors (most completions with a handler have none: no statement for them).
        if _task_ids[_i] = any (_error_task_ids) then
          _errs[_i] := (select jsonb_agg(e.m order by e.ord)
                          from unnest(_error_task_ids, _error_messages) with ordinality as e(t, m, ord)
                         where e.t = _task_ids[_i]);
        else
          _errs[_i] := '[]';
        end if;
        if _traceparents is not null then
          perform set_config('queue.traceparent', coalesce(_traceparents[_i], ''), true);
        end if;
        _k := array_position(_names, _handlers[_i]);
        if _k is null then
          begin
            _oid := internal.resolve_runnable_function(_handlers[_i]);
            if not has_function_privilege(_oid, 'execute') then
              raise exception 'permission denied: % may not execute %', current_user, _handlers[_i]
                using errcode = '42501';
            end if;
            _problems := _problems || null::text;
          exception when others then
            _problems := _problems || sqlerrm;
          end;
          _names := _names || _handlers[_i];
          _k := cardinality(_names);
        end if;
        begin
          if _problems[_k] is not null then
            -- Cannot run: a handler that raises (internal.run_function would have raised so).
            raise exception '%', _problems[_k];
          end if;
          -- Resolved and checked above; the static call keeps its plan for the session.
          select * into _env from queues.parse_envelope(internal.call_runnable(_handlers[_i], _bodies[_i]));
          _failure := case _env.outcome
                        when 'succeeded' then null
                        when 'invalid' then format('%s: validation failure: %s', _handlers[_i], _env.message)
                        when 'status' then format('%s: status %s', _handlers[_i], _env.message)
                        else format('%s: %s', _handlers[_i], _env.message) end;
        exception
          when serialization_failure or deadlock_detected then
            -- Its writes rolled back, nothing recorded: the task runs again.
            _result[_i] := 'transient';
            _errs[_i] := to_jsonb(array[sqlerrm]);
            _out[_i] := null;
            _open[_i] := false;
            continue;
          when others then
            _failure := coalesce(_raised_prefixes[_i], '') || sqlerrm;
        end;
        if _failure is not null then
          if length(_failure) > 8000 then
            _failure := left(_failure, 8000) || ' [truncated]';
          end if;
          if _modes[_i] = 'success' then
            _out[_i] := 'failed';
            _errs[_i] := to_jsonb(array[_failure]);
          else
            _errs[_i] := _errs[_i] || to_jsonb(_failure);
          end if;
        end if;
      end loop;
      if _traceparents is not null then
        perform set_config('queue.traceparent', '', true);
      end if;
      if true = any (_open) then
        select array_agg(s.task_id order by s.ord), array_agg(s.result order by s.ord)
          into _ids, _settled
          from queues.settle_tasks(
                 array(select o.t from unnest(_task_ids, _open) with ordinality as o(t, open, ord)
                        where o.open order by o.ord),
                 array(select o.l from unnest(_task_lease_ids, _open) with ordinality as o(l, open, ord)
                        where o.open order by o.ord),
                 array(select o.x from unnest(_out, _open) with ordinality as o(x, open, ord)
                        where o.open order by o.ord),
                 array(select o.r from unnest(coalesce(_retries, array_fill(null::boolean, array[_n])), _open)
                                       with ordinality as o(r, open, ord)
                        where o.open order by o.ord),
                 array(select o.t from unnest(_task_ids, _errs, _open) with ordinality as o(t, e, open, ord),
                                       jsonb_array_elements_text(o.e) with ordinality as m(msg, k)
                        where o.open order by o.ord, m.k),
                 array(select m.msg from unnest(_errs, _open) with ordinality as o(e, open, ord),
                                         jsonb_array_elements_text(o.e) with ordinality as m(msg, k)
                        where o.open order by o.ord, m.k),
                 array(select o.s from unnest(coalesce(_started_us, array_fill(null::bigint, array[_n])), _open)
                                       with ordinality as o(s, open, ord)
                        where o.open order by o.ord)
               ) with ordinality as s(task_id, result, ord);
        _k := 1;
        for _i in 1 .. _n loop
          continue when not _open[_i];
          if _ids[_k] <> _task_ids[_i] then
            raise exception 'completions out of order' using errcode = 'XX000';
          end if;
          _result[_i] := _settled[_k];
          if _settled[_k] not in ('completed', 'retry_scheduled') then
            -- Refused: nothing of this task may commit.
            _open[_i] := false;
            _refused := true;
          end if;
          _k := _k + 1;
        end loop;
        if _refused then
          raise exception 'a completion of the call was refused' using errcode = 'QREFU';
        end if;
      end if;
    exception when sqlstate 'QREFU' then
      -- Everything of this pass rolled back; the others again, without the refused ones.
      null;
    end;
    exit when not _refused;
  end loop;

  return query
  select s.t, s.r, s.o, array(select jsonb_array_elements_text(coalesce(s.e, '[]')))
    from unnest(_task_ids, _result, _out, _errs) with ordinality as s(t, r, o, e, ord)
   order by s.ord;
end;
$function$;
  -- queues.settle_with_handlers(_task_ids bigint[], _task_lease_ids bigint[], _outcomes text[], _retries boolean[], _error_task_ids bigint[], _error_messages text[], _handlers text[], _bodies jsonb[], _modes text[], _raised_prefixes text[], _started_us bigint[], _traceparents text[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.stale_leases_at(_now timestamp with time zone, _dead_after_seconds integer)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, worker_id text, last_seen_at timestamp with time zone, expires_at timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select p.task_id, p.current_lease_id, w.worker_id, w.last_seen_at, p.available_at
    from queues.task_pending p
    cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    left join queues.worker_name n on n.worker_key = l.worker_key
    join queues.worker w on w.worker_id = coalesce(l.worker_id, n.worker_id)
   where p.available_at > _now
     and w.stopped_at is null
     and w.last_seen_at < _now - greatest(make_interval(secs => _dead_after_seconds),
                                          queues.worker_silence_bound(w.heartbeat_interval_ms))
  union all
  -- The tasks held by a live claim lease without a row (the ready set:
  -- docs/design/hot-path.md).
  select h.task_id, h.task_lease_id, w.worker_id, w.last_seen_at, h.expires_at
    from queues.lease_held_tasks h
    join queues.worker_name n on n.worker_key = h.worker_key
    join queues.worker w on w.worker_id = n.worker_id
   where h.expires_at > _now
     and w.stopped_at is null
     and w.last_seen_at < _now - greatest(make_interval(secs => _dead_after_seconds),
                                          queues.worker_silence_bound(w.heartbeat_interval_ms))
$function$;
  -- queues.stale_leases_at(_now timestamp with time zone, _dead_after_seconds integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.supersede_task(_task_id bigint, _reason text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _p record;
  _dependent bigint;
begin
  perform queues.lock_resource_keys(array[_task_id]);
  perform queues.hold_rows_of(array[_task_id]);
  select p.task_type, (p.current_lease_id is not null and p.available_at > now()) as held into _p
    from queues.task_pending p where p.task_id = _task_id for update;
  if not found or _p.held then
    return false;
  end if;
  -- Replacing a task that others wait for would fail them (a dependency that ended
  -- cancelled): refused, before this transaction's writes commit (its enqueue rolls back).
  -- A dependent enqueued concurrently holds the row FOR KEY SHARE until it commits, so
  -- the lock above waited for it and this statement sees its edge.
  select d.task_id into _dependent
    from queues.task_dependency d
    join queues.task_pending w on w.task_id = d.task_id
   where d.depends_on_task_id = _task_id and d.task_id > _task_id
   order by d.task_id limit 1;
  if found then
    raise exception 'task % cannot be replaced: task % waits for it', _task_id, _dependent
      using errcode = '55000',
            hint = 'Use the skip policy, or cancel the waiting tasks first.';
  end if;
  insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
  values (_task_id, null, now(), 'cancelled', _p.task_type);
  insert into queues.task_cancelled (task_id, reason, cancelled_at) values (_task_id, left(_reason, 500), now());
  delete from queues.task_pending p where p.task_id = _task_id;
  delete from queues.resource_lease k where k.task_id = _task_id;
  return true;
end;
$function$;
  -- queues.supersede_task(_task_id bigint, _reason text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.take_due_claim_leases_at(_now timestamp with time zone)
 RETURNS TABLE(task_lease_id bigint, task_id bigint)
 LANGUAGE sql
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  delete from queues.claim_lease_due d
   where d.task_lease_id = any (array(select x.task_lease_id from queues.claim_lease_due x
                                       where x.expires_at <= _now
                                       order by x.expires_at
                                       limit 100
                                         for update skip locked))
  returning d.task_lease_id, d.task_id;
$function$;
  -- queues.take_due_claim_leases_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.take_from_ready_batches(_batch_ids bigint[])
 RETURNS void
 LANGUAGE sql
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with taken as (
    select x.batch_id, count(*)::integer as n from unnest(_batch_ids) x(batch_id) group by x.batch_id
  ),
  emptied as (
    delete from queues.task_ready_batch b
     using taken f
     where b.task_id = f.batch_id and b.taken + f.n >= cardinality(b.task_ids)
  )
  update queues.task_ready_batch b
     set taken = b.taken + f.n
    from taken f
   where b.task_id = f.batch_id and b.taken + f.n < cardinality(b.task_ids)
$function$;
  -- queues.take_from_ready_batches(_batch_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_completed_release_dependents()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform from queues.task_pending p where p.available_at = 'infinity' limit 1;
  if found then
    perform queues.release_dependents(array[new.task_id], array[new.outcome]);
  end if;
  return null;
end;
$function$;
  -- queues.task_completed_release_dependents(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_dependency_facts(_task_id bigint, _now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object(
    'dependencies', coalesce((
      select jsonb_agg(jsonb_build_object('task_id', l.task_id, 'task_type', l.task_type, 'outcome', l.outcome,
                                          'completed_at', l.completed_at) order by l.task_id)
        from queues.list_task_dependencies(_task_id) l), '[]'::jsonb),
    'dependents', coalesce((
      select jsonb_agg(jsonb_build_object('task_id', x.task_id, 'task_type', x.task_type, 'state', x.state)
                       order by x.task_id)
        from (
          select d.task_id, t.task_type,
                 coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now),
                          'succeeded') as state
            from queues.task_dependency d
            join queues.task t on t.task_id = d.task_id
            left join lateral (select x.* from queues.task_pending_or_held_of(d.task_id) x limit 1) p on true
            left join lateral queues.task_end_of(d.task_id) c on true
           where d.depends_on_task_id = _task_id
           order by d.task_id
           limit 100
        ) x), '[]'::jsonb))
$function$;
  -- queues.task_dependency_facts(_task_id bigint, _now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_end_of(_task_id bigint)
 RETURNS TABLE(task_id bigint, task_lease_id bigint, completed_at timestamp with time zone, outcome text, task_type text, started_at timestamp with time zone)
 LANGUAGE sql
 STABLE
AS $function$
  select c.task_id, c.task_lease_id, c.completed_at, c.outcome, c.task_type, c.started_at
    from queues.task_completed c
   where c.task_id = _task_id
  union all
  select _task_id, r.task_lease_ids[x.i], r.completed_at, 'succeeded', r.task_type,
         timestamptz 'epoch' + r.started_us[x.i] * interval '1 microsecond'
    from queues.completion_round r
   cross join lateral (select array_position(r.task_ids, _task_id) as i) x
   where r.task_range @> _task_id
     and r.task_id >= _task_id
     and _task_id = any (r.task_ids)
$function$;
  -- queues.task_end_of(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_lease_at(_task_id bigint, _task_lease_id bigint)
 RETURNS TABLE(task_lease_id bigint, task_id bigint, worker_key integer, worker_id text, leased_at timestamp with time zone, expires_at timestamp with time zone, suspect boolean)
 LANGUAGE sql
 STABLE
AS $function$
  select l.task_lease_id, l.task_id, l.worker_key, l.worker_id, l.leased_at, l.expires_at, l.suspect
    from queues.task_lease l
   where l.task_id = _task_id and l.task_lease_id = _task_lease_id
  union all
  select c.task_lease_id, _task_id, c.worker_key, null::text, c.leased_at, c.expires_at,
         coalesce(c.suspect_task_id = _task_id, false)
    from queues.claim_lease c
   where c.task_lease_id = _task_lease_id
     and c.task_id >= _task_id
     and _task_id = any (c.task_ids)
$function$;
  -- queues.task_lease_at(_task_id bigint, _task_lease_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_lease_effective_of(_task_id bigint)
 RETURNS TABLE(task_lease_id bigint, task_id bigint, worker_id text, leased_at timestamp with time zone, expires_at timestamp with time zone, released_at timestamp with time zone, extensions integer, revoked_at timestamp with time zone, suspect boolean)
 LANGUAGE sql
 STABLE
AS $function$
  select l.task_lease_id, l.task_id,
         coalesce(l.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = l.worker_key)),
         l.leased_at,
         coalesce(r.released_at, v.revoked_at, e.expires_at, l.expires_at),
         r.released_at,
         coalesce(e.extensions, 0),
         v.revoked_at,
         l.suspect
    from queues.task_leases_of(_task_id) l
    left join queues.task_lease_release r on r.task_id = l.task_id and r.task_lease_id = l.task_lease_id
    left join queues.task_lease_revocation v on v.task_id = l.task_id and v.task_lease_id = l.task_lease_id
    left join lateral (
      select max(x.expires_at) as expires_at, count(*)::integer as extensions
        from queues.task_lease_extension x
       where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
    ) e on true
$function$;
  -- queues.task_lease_effective_of(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_leases_of(_task_id bigint)
 RETURNS TABLE(task_lease_id bigint, task_id bigint, worker_key integer, worker_id text, leased_at timestamp with time zone, expires_at timestamp with time zone, suspect boolean)
 LANGUAGE sql
 STABLE
AS $function$
  select l.task_lease_id, l.task_id, l.worker_key, l.worker_id, l.leased_at, l.expires_at, l.suspect
    from queues.task_lease l
   where l.task_id = _task_id
  union all
  select c.task_lease_id, _task_id, c.worker_key, null::text, c.leased_at, c.expires_at,
         coalesce(c.suspect_task_id = _task_id, false)
    from queues.claim_lease c
   where c.task_range @> _task_id
     and c.task_id >= _task_id
     and _task_id = any (c.task_ids)
$function$;
  -- queues.task_leases_of(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_limit_status_at(_now timestamp with time zone)
 RETURNS TABLE(task_type text, scope text, group_key text, max_running integer, max_starts integer, interval_ms integer, set_at timestamp with time zone, running bigint, starts bigint, held_back bigint)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with rule as (
    select l.* from queues.task_limits() l
  ),
  live as (
    -- The claim index's leased rows, and the lease-held tasks (sql/queues/lease_held.sql):
    -- a limited type's tasks are leased on their rows, but tasks claimed before their type
    -- was limited may still be held by their claim lease without one. Read only when a
    -- limit is in force.
    select p.task_type, p.group_key, count(*) as n
      from queues.task_pending_or_held p
     where p.current_lease_id > 0 and p.available_at > _now
       and p.task_type = any (array(select distinct r.task_type from rule r))
       and exists (select 1 from rule)
     group by 1, 2
  ),
  ready as (
    select p.task_type, p.group_key, count(*) as n
      from queues.task_pending p
     where p.current_lease_id is null and p.scheduled_at <= _now and p.available_at <= _now
       and p.task_type = any (array(select distinct r.task_type from rule r))
     group by 1, 2
  ),
  -- Per rule and group key it covers ('' for the type as a whole): used and ready.
  per_key as (
    select r.*, k.group_key as key,
           coalesce((select sum(lv.n) from live lv
                      where lv.task_type = r.task_type
                        and (k.group_key = '' or lv.group_key = k.group_key)), 0) as running_now,
           coalesce((select w.starts from queues.task_limit_window w
                      where w.task_type = r.task_type and w.group_key = k.group_key
                        and r.interval_ms is not null
                        and w.window_start >= queues.limit_window_start(_now, r.interval_ms)), 0) as starts_now,
           coalesce((select sum(rd.n) from ready rd
                      where rd.task_type = r.task_type
                        and (k.group_key = '' or rd.group_key = k.group_key)), 0) as ready_now
      from rule r
     cross join lateral (
       select '' as group_key where r.scope = 'type'
       union all select r.group_key where r.scope = 'group'
       -- an each_group limit is listed (with zeros) when no group key of it has tasks
       union all select null where r.scope = 'each_group'
       -- each group key with tasks live or ready and no named limit of its own
       union all
       select g.group_key from (select lv.group_key from live lv where lv.task_type = r.task_type
                                union select rd.group_key from ready rd where rd.task_type = r.task_type) g
        where r.scope = 'each_group' and g.group_key is not null
          and not exists (select 1 from rule n where n.task_type = r.task_type and n.scope = 'group'
                                                 and n.group_key = g.group_key)
     ) k
  )
  select pk.task_type, pk.scope, pk.group_key, pk.max_running, pk.max_starts, pk.interval_ms, pk.set_at,
         sum(pk.running_now)::bigint, sum(pk.starts_now)::bigint,
         sum(case when pk.running_now >= pk.max_running or pk.starts_now >= pk.max_starts then pk.ready_now else 0 end)::bigint
    from per_key pk
   group by pk.task_type, pk.scope, pk.group_key, pk.max_running, pk.max_starts, pk.interval_ms, pk.set_at
   order by 1, 2, 3
$function$;
  -- queues.task_limit_status_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_limits()
 RETURNS TABLE(task_type text, scope text, group_key text, max_running integer, max_starts integer, interval_ms integer, set_at timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select l.task_type, l.scope, l.group_key, l.max_running, l.max_starts, l.interval_ms, l.set_at
    from (select distinct on (s.task_type, s.scope, s.group_key) s.*
            from queues.task_limit_set s
           order by s.task_type, s.scope, s.group_key, s.task_limit_set_id desc) l
   where l.max_running is not null or l.max_starts is not null
   order by l.task_type, l.scope, l.group_key
$function$;
  -- queues.task_limits(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_pending_or_held_of(_task_id bigint)
 RETURNS TABLE(task_id bigint, task_type text, priority integer, scheduled_at timestamp with time zone, resource_key text, available_at timestamp with time zone, current_lease_id bigint, lease_count integer, released_count integer, max_attempts integer, failed_attempts integer, interrupted_count integer, uncounted_count integer, suspect_lease boolean, group_key text, lease_held boolean)
 LANGUAGE sql
 STABLE
AS $function$
  select p.task_id, p.task_type, p.priority, p.scheduled_at, p.resource_key, p.available_at, p.current_lease_id,
         p.lease_count, p.released_count, p.max_attempts, p.failed_attempts, p.interrupted_count,
         p.uncounted_count, p.suspect_lease, p.group_key, false
    from queues.task_pending p
   where p.task_id = _task_id
  union all
  select h.task_id, t.task_type, t.priority, least(t.scheduled_at, rn.requested_at), t.resource_key, h.expires_at,
         h.task_lease_id, 1, 0, t.max_attempts, 0, 0, 0, h.suspect, t.group_key, true
    from queues.lease_held_of(_task_id) h
   cross join lateral (select x.* from queues.task x where x.task_id = h.task_id limit 1) t
    left join queues.task_run_now rn on rn.task_id = h.task_id
  union all
  select b.task_id, b.task_type, b.priority, b.scheduled_at, null::text, b.scheduled_at, null::bigint,
         0, 0, b.max_attempts, 0, 0, 0, false, null::text, false
    from queues.batched_of(_task_id) b
$function$;
  -- queues.task_pending_or_held_of(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_progress_facts(_task_id bigint)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jsonb_build_object('progress', (
    select jsonb_build_object('done', p.done, 'total', p.total, 'note', p.note, 'reported_at', p.reported_at,
                              'task_lease_id', p.task_lease_id,
                              'reports', (select count(*) from queues.task_progress x where x.task_id = _task_id))
      from queues.task_progress p
     where p.task_id = _task_id
     order by p.task_progress_id desc
     limit 1))
$function$;
  -- queues.task_progress_facts(_task_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_traces(_task_ids bigint[])
 RETURNS TABLE(task_id bigint, traceparent text, tracestate text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select t.task_id, t.traceparent, t.tracestate
    from queues.task_trace t
   where t.task_id = any (_task_ids)
$function$;
  -- queues.task_traces(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.task_type_timeouts()
 RETURNS TABLE(task_type text, timeout_ms integer)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select l.task_type, l.timeout_ms
    from (select distinct on (s.task_type) s.task_type, s.timeout_ms
            from queues.task_type_timeout_set s
           order by s.task_type, s.task_type_timeout_set_id desc) l
   where l.timeout_ms is not null
   order by l.task_type
$function$;
  -- queues.task_type_timeouts(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.throttled_keys_at(_now timestamp with time zone)
 RETURNS TABLE(task_types text[], group_keys text[])
 LANGUAGE sql
 STABLE ROWS 1
AS $function$
  select coalesce(array_agg(distinct a.key) filter (where a.key_kind = 'task_type'), '{}'),
         coalesce(array_agg(distinct a.key) filter (where a.key_kind = 'group'), '{}')
    from queues.throttles_in_force_at(_now) a
$function$;
  -- queues.throttled_keys_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.throttled_until(_key_kind text, _key text)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'off'
AS $function$
  select max(a.throttled_until)
    from queues.throttles_in_force_at(now()) a
   where a.key_kind = _key_kind and a.key = _key
$function$;
  -- queues.throttled_until(_key_kind text, _key text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.throttles_in_force_at(_now timestamp with time zone)
 RETURNS SETOF queues.throttle
 LANGUAGE sql
 STABLE
AS $function$
  select a.*
    from queues.throttle a
   where a.throttled_until > _now
     and (select true from queues.throttle_cleared c
           where c.key_kind = a.key_kind and c.key = a.key and c.last_throttle_id >= a.throttle_id
           limit 1) is null
$function$;
  -- queues.throttles_in_force_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.truncate_task_facts()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  truncate queues.task_pending, queues.task_ready_batch, queues.resource_lease, queues.task_lease,
           queues.task_completed, queues.error, queues.task_lease_extension, queues.task_lease_release,
           queues.task_lease_revocation, queues.task_attempt_failed, queues.task_redriven,
           queues.task_lease_started, queues.task_interruption, queues.task_cancelled,
           queues.task_result, queues.task_run_now, queues.task_trace, queues.completion_round,
           queues.claim_lease, queues.task_progress, queues.task_dependency;
  return null;
end;
$function$;
  -- queues.truncate_task_facts(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.unbatch_ready_at(_types text[], _now timestamp with time zone, _limit integer)
 RETURNS bigint[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return queues.unbatch_tasks(array(
    select u.task_id
      from (select b.task_ids, b.taken, b.priority, b.scheduled_at, b.task_id
              from queues.task_ready_batch b
             where (_types is null or b.task_type = any (_types))
               and b.scheduled_at <= _now
             order by b.priority desc, b.scheduled_at, b.task_id
             limit _limit
               for update skip locked) b
     cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
     order by b.priority desc, b.scheduled_at, u.task_id
     limit _limit));
end;
$function$;
  -- queues.unbatch_ready_at(_types text[], _now timestamp with time zone, _limit integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.unbatch_task_type(_task_type text)
 RETURNS bigint[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _batches bigint[];
  _out bigint[];
begin
  _batches := array(select b.task_id from queues.task_ready_batch b
                     where b.task_type = _task_type
                     order by b.task_id
                       for update);
  if cardinality(_batches) = 0 then
    return '{}';
  end if;
  -- A new statement: the batches as the claims that held them left them.
  with rows_written as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, available_at, max_attempts)
    select u.task_id, b.task_type, b.priority, b.scheduled_at, b.scheduled_at, b.max_attempts
      from queues.task_ready_batch b
     cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
     where b.task_id = any (_batches)
    returning task_id
  ),
  emptied as (
    delete from queues.task_ready_batch b where b.task_id = any (_batches)
  )
  select coalesce(array_agg(r.task_id order by r.task_id), '{}') into _out from rows_written r;
  return _out;
end;
$function$;
  -- queues.unbatch_task_type(_task_type text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.unbatch_tasks(_task_ids bigint[])
 RETURNS bigint[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _batches bigint[];
  _out bigint[];
begin
  if _task_ids is null or cardinality(_task_ids) = 0 then
    return '{}';
  end if;
  -- Each id's batch: a probe of the range index per id, then the id among the batch's ids
  -- not taken (a batch holds at most 10,000: one enqueue call).
  _batches := array(
    select b.task_id
      from queues.task_ready_batch b
     where b.task_id in (select x.batch_id from unnest(_task_ids) i(id) cross join lateral queues.batched_of(i.id) x)
     order by b.task_id
       for update);
  if cardinality(_batches) = 0 then
    return '{}';
  end if;
  -- A new statement, so a new snapshot: the batches as the claims that held them left them.
  -- (Sets by hashing, never `= any` of the input per element: a batch holds up to 10,000
  -- ids and a caller may name 1,000.)
  with leaving as (
    select b.task_id as batch_id, u.task_id, b.task_type, b.priority, b.scheduled_at, b.max_attempts
      from queues.task_ready_batch b
     cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
      join (select distinct i.id from unnest(_task_ids) i(id)) i on i.id = u.task_id
     where b.task_id = any (_batches)
  ),
  per_batch as (
    select l.batch_id, array_agg(l.task_id) as gone from leaving l group by l.batch_id
  ),
  rest as (
    select b.task_id as batch_id,
           array(select x.id from unnest(b.task_ids[b.taken + 1:]) x(id)
                 except
                 select y.id from unnest(g.gone) y(id)
                 order by 1) as task_ids
      from queues.task_ready_batch b
      join per_batch g on g.batch_id = b.task_id
  ),
  rows_written as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, available_at, max_attempts)
    select l.task_id, l.task_type, l.priority, l.scheduled_at, l.scheduled_at, l.max_attempts from leaving l
    returning task_id
  ),
  kept as (
    update queues.task_ready_batch b
       set task_ids = r.task_ids,
           taken = 0,
           task_range = int8range(r.task_ids[1], r.task_ids[cardinality(r.task_ids)], '[]')
      from rest r
     where b.task_id = r.batch_id and cardinality(r.task_ids) > 0
  ),
  emptied as (
    delete from queues.task_ready_batch b
     using rest r
     where b.task_id = r.batch_id and cardinality(r.task_ids) = 0
  )
  select coalesce(array_agg(r.task_id order by r.task_id), '{}') into _out from rows_written r;
  return _out;
end;
$function$;
  -- queues.unbatch_tasks(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.worker_silence_bound(_heartbeat_interval_ms integer)
 RETURNS interval
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select make_interval(secs => 3 * coalesce(_heartbeat_interval_ms, 30000) / 1000.0) $function$;
  -- queues.worker_silence_bound(_heartbeat_interval_ms integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION queues.write_pending_rows(_task_ids bigint[])
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _count bigint;
begin
  insert into queues.task_pending
    (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
     lease_count, released_count, max_attempts, failed_attempts, uncounted_count, interrupted_count,
     suspect_lease, group_key)
  select r.* from queues.pending_rows_of(_task_ids) r order by r.task_id
  on conflict (task_id) do nothing;
  get diagnostics _count = row_count;
  return _count;
end;
$function$;
  -- queues.write_pending_rows(_task_ids bigint[]): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.append_schedule_version(_now timestamp with time zone, _schedule_id bigint, _cron text, _task_type text, _payload jsonb, _priority integer, _missed_run_policy text, _enabled boolean, _time_zone text DEFAULT NULL::text)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _current schedules.schedule_version := schedules.current_version(_schedule_id);
  _zone text := coalesce(_time_zone, _current.time_zone, 'UTC');
  _id bigint;
begin
  if _current.schedule_version_id is not null
     and (_current.cron, _current.task_type, _current.payload, _current.priority,
          _current.missed_run_policy, _current.enabled, _current.time_zone)
         is not distinct from (_cron, _task_type, _payload, _priority, _missed_run_policy, _enabled, _zone) then
    return _current.schedule_version_id;
  end if;
  insert into schedules.schedule_version
    (schedule_id, cron, task_type, payload, priority, missed_run_policy, enabled, fires_after, created_at, time_zone)
  values (_schedule_id, _cron, _task_type, _payload, _priority, _missed_run_policy, _enabled,
          case when _current.schedule_version_id is null or (_enabled and not _current.enabled)
                    or _current.cron <> _cron or _current.time_zone <> _zone
               then _now else _current.fires_after end,
          _now, _zone)
  returning schedule_version_id into _id;
  return _id;
end;
$function$;
  -- schedules.append_schedule_version(_now timestamp with time zone, _schedule_id bigint, _cron text, _task_type text, _payload jsonb, _priority integer, _missed_run_policy text, _enabled boolean, _time_zone text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.cron_day_matches(_day timestamp without time zone, _doms integer[], _dows integer[], _dom_restricted boolean, _dow_restricted boolean)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select case when _dom_restricted and _dow_restricted
              then extract(day from _day)::integer = any (_doms) or extract(dow from _day)::integer = any (_dows)
              else extract(day from _day)::integer = any (_doms) and extract(dow from _day)::integer = any (_dows)
         end
$function$;
  -- schedules.cron_day_matches(_day timestamp without time zone, _doms integer[], _dows integer[], _dom_restricted boolean, _dow_restricted boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.cron_error(_cron text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _cron is null then
    return 'cron is required';
  end if;
  perform schedules.parse_cron(_cron);
  if schedules.next_fire_time(_cron, '2000-01-01 00:00:00+00') is null then
    return format('cron %s never fires (no month has such a day)', quote_literal(left(_cron, 100)));
  end if;
  return null;
exception
  when sqlstate '22023' or sqlstate '22004' then
    return sqlerrm;
end;
$function$;
  -- schedules.cron_error(_cron text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.cron_search_horizon()
 RETURNS interval
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select interval '30 years' $function$;
  -- schedules.cron_search_horizon(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.current_version(_schedule_id bigint)
 RETURNS schedules.schedule_version
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select v.* from schedules.schedule_version v
   where v.schedule_id = _schedule_id
   order by v.schedule_version_id desc
   limit 1
$function$;
  -- schedules.current_version(_schedule_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.disable_schedule(_name text, OUT schedule_id bigint, OUT schedule_version_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from schedules.set_schedule_enabled_at(now(), _name, false)
$function$;
  -- schedules.disable_schedule(_name text, OUT schedule_id bigint, OUT schedule_version_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.enable_schedule(_name text, OUT schedule_id bigint, OUT schedule_version_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select * from schedules.set_schedule_enabled_at(now(), _name, true)
$function$;
  -- schedules.enable_schedule(_name text, OUT schedule_id bigint, OUT schedule_version_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.enqueue_schedule_run(_version schedules.schedule_version, _fire_at timestamp with time zone, _first_fire_at timestamp with time zone, _now timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _task_id bigint;
begin
  _task_id := queues.enqueue_internal(_version.task_type, _version.payload, _fire_at, _version.priority);
  insert into schedules.schedule_run
    (schedule_id, schedule_version_id, fire_at, first_fire_at, outcome, task_id, enqueued_at)
  values (_version.schedule_id, _version.schedule_version_id, _fire_at, _first_fire_at,
          'enqueued', _task_id, _now);
  return _task_id;
end;
$function$;
  -- schedules.enqueue_schedule_run(_version schedules.schedule_version, _fire_at timestamp with time zone, _first_fire_at timestamp with time zone, _now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.ensure_schedule_supervisor()
 RETURNS bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select schedules.ensure_schedule_supervisor_at(now())
$function$;
  -- schedules.ensure_schedule_supervisor(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.ensure_schedule_supervisor_at(_now timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());
  return schedules.plan_supervisor_at(_now, schedules.supervisor_wake_at(_now));
end;
$function$;
  -- schedules.ensure_schedule_supervisor_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.generate_staggered_tasks(_task_type text, _payloads jsonb, _start timestamp with time zone, _period interval, _batches integer, _priority integer DEFAULT NULL::integer)
 RETURNS TABLE(batch integer, scheduled_at timestamp with time zone, task_count integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _n integer;
  _bad record;
begin
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100)) using errcode = '22023';
  end if;
  if _payloads is null then
    raise exception 'payloads must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_payloads) <> 'array' then
    raise exception 'payloads must be a JSON array, got %', jsonb_typeof(_payloads) using errcode = '22023';
  end if;
  _n := jsonb_array_length(_payloads);
  if _n > 10000 then
    raise exception 'at most 10000 payloads per call, got %', _n using errcode = '54000';
  end if;
  select e.ordinality - 1 as idx, jsonb_typeof(e.value) as kind into _bad
    from jsonb_array_elements(_payloads) with ordinality e
   where jsonb_typeof(e.value) <> 'object'
   order by e.ordinality limit 1;
  if found then
    raise exception 'payloads[%] must be a JSON object, got %', _bad.idx, _bad.kind using errcode = '22023';
  end if;
  if _start is null then
    raise exception 'start must not be null' using errcode = '22004';
  end if;
  if _period is null then
    raise exception 'period must not be null' using errcode = '22004';
  end if;
  if extract(year from _period) <> 0 or extract(month from _period) <> 0 then
    raise exception 'period must be given in days, hours, minutes or seconds, not months or years (their length varies), got %', _period
      using errcode = '22023';
  end if;
  if _period <= interval '0' or _period > interval '366 days' then
    raise exception 'period must be more than 0 and at most 366 days, got %', _period using errcode = '22023';
  end if;
  if _batches is null then
    raise exception 'batches must not be null' using errcode = '22004';
  end if;
  if _batches not between 1 and 1000 then
    raise exception 'batches must be between 1 and 1000, got %', _batches using errcode = '22023';
  end if;
  if _priority is not null and _priority not between -1000 and 1000 then
    raise exception 'priority must be between -1000 and 1000, got %', _priority using errcode = '22023';
  end if;

  -- Element j (0-based) goes to batch b(j): the first r = N mod K batches hold q + 1 =
  -- ceil(N / K) elements, the rest q = floor(N / K).
  perform queues.enqueue_many(coalesce((
    select jsonb_agg(jsonb_build_object(
             'task_type', _task_type, 'payload', a.value, 'priority', coalesce(_priority, 0),
             'scheduled_at', _start + (a.b - 1) * (_period / _batches))
           order by a.j)
      from (
        select e.ordinality - 1 as j, e.value,
               case when e.ordinality - 1 < (_n % _batches) * (_n / _batches + 1)
                    then (e.ordinality - 1) / (_n / _batches + 1) + 1
                    else (_n % _batches) + (e.ordinality - 1 - (_n % _batches) * (_n / _batches + 1))
                                           / nullif(_n / _batches, 0) + 1
               end::integer as b
          from jsonb_array_elements(_payloads) with ordinality e
      ) a), '[]'::jsonb));

  return query
  select i, _start + (i - 1) * (_period / _batches),
         (_n / _batches + case when i <= _n % _batches then 1 else 0 end)::integer
    from generate_series(1, _batches) i
   order by i;
end;
$function$;
  -- schedules.generate_staggered_tasks(_task_type text, _payloads jsonb, _start timestamp with time zone, _period interval, _batches integer, _priority integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.last_fire_at(_schedule_id bigint)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select r.fire_at from schedules.schedule_run r
   where r.schedule_id = _schedule_id
   order by r.fire_at desc
   limit 1
$function$;
  -- schedules.last_fire_at(_schedule_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.list_schedules()
 RETURNS TABLE(schedule_id bigint, name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text, enabled boolean, last_fire_at timestamp with time zone, next_fire_at timestamp with time zone, created_at timestamp with time zone, updated_at timestamp with time zone, time_zone text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select s.schedule_id, s.name, v.cron, v.task_type, v.payload, v.priority, v.missed_run_policy,
         v.enabled, schedules.last_fire_at(s.schedule_id), schedules.next_due_fire_at(s.schedule_id),
         s.created_at, v.created_at, v.time_zone
    from schedules.schedule s
   cross join lateral schedules.current_version(s.schedule_id) v
   order by s.name
$function$;
  -- schedules.list_schedules(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.max_supervisor_sleep()
 RETURNS interval
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select interval '1 hour' $function$;
  -- schedules.max_supervisor_sleep(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.next_due_fire_at(_schedule_id bigint)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select case when v.enabled
              then schedules.next_fire_time(v.cron, greatest(v.fires_after, schedules.last_fire_at(_schedule_id)),
                                            v.time_zone)
         end
    from schedules.current_version(_schedule_id) v
$function$;
  -- schedules.next_due_fire_at(_schedule_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.next_fire_time(_cron text, _after timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _c record := schedules.parse_cron(_cron);
  _t timestamp;
  _limit timestamp;
  _h integer;
  _m integer;
begin
  if _after is null then
    raise exception 'after must not be null' using errcode = '22004';
  end if;
  _t := date_trunc('minute', _after at time zone 'UTC') + interval '1 minute';
  _limit := _t + schedules.cron_search_horizon();
  loop
    if _t > _limit then
      return null;
    end if;
    if not extract(month from _t)::integer = any (_c.months) then
      _t := date_trunc('month', _t) + interval '1 month';
      continue;
    end if;
    if not schedules.cron_day_matches(_t, _c.doms, _c.dows, _c.dom_restricted, _c.dow_restricted) then
      _t := date_trunc('day', _t) + interval '1 day';
      continue;
    end if;
    if not extract(hour from _t)::integer = any (_c.hours) then
      select min(h) into _h from unnest(_c.hours) h where h > extract(hour from _t)::integer;
      _t := case when _h is null then date_trunc('day', _t) + interval '1 day'
                 else date_trunc('day', _t) + make_interval(hours => _h) end;
      continue;
    end if;
    select min(m) into _m from unnest(_c.minutes) m where m >= extract(minute from _t)::integer;
    if _m is null then
      _t := date_trunc('hour', _t) + interval '1 hour';
      continue;
    end if;
    return (date_trunc('hour', _t) + make_interval(mins => _m)) at time zone 'UTC';
  end loop;
end;
$function$;
  -- schedules.next_fire_time(_cron text, _after timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.next_fire_time(_cron text, _after timestamp with time zone, _time_zone text)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _every_hour boolean;
  _o interval;
  _w timestamp;
  _i timestamptz;
  _best timestamptz;
begin
  if _time_zone is null or _time_zone = 'UTC' then
    return schedules.next_fire_time(_cron, _after);
  end if;
  if _after is null then
    raise exception 'after must not be null' using errcode = '22004';
  end if;
  _every_hour := cardinality((schedules.parse_cron(_cron)).hours) = 24;
  _o := schedules.zone_offset(_after, _time_zone);
  -- Wall times are walked as if they were UTC instants.
  _w := schedules.next_fire_time(_cron, (_after at time zone _time_zone) at time zone 'UTC') at time zone 'UTC';
  if _w is null then
    return null;
  end if;
  _i := (_w at time zone 'UTC') - _o;
  if _i - _after <= interval '7 days'
     and schedules.zone_offset(_i, _time_zone) = _o
     and schedules.zone_offset(_after - interval '3 hours', _time_zone) = _o then
    return _i;
  end if;
  _w := schedules.next_fire_time(_cron,
          ((_after at time zone _time_zone) - interval '3 hours 1 minute') at time zone 'UTC') at time zone 'UTC';
  while _w is not null and (_best is null or _w <= (_best at time zone _time_zone) + interval '3 hours') loop
    foreach _i in array schedules.wall_fire_instants(_w, _time_zone, _every_hour) loop
      if _i > _after and (_best is null or _i < _best) then
        _best := _i;
      end if;
    end loop;
    _w := schedules.next_fire_time(_cron, _w at time zone 'UTC') at time zone 'UTC';
  end loop;
  return _best;
end;
$function$;
  -- schedules.next_fire_time(_cron text, _after timestamp with time zone, _time_zone text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.parse_cron(_cron text, OUT minutes integer[], OUT hours integer[], OUT doms integer[], OUT months integer[], OUT dows integer[], OUT dom_restricted boolean, OUT dow_restricted boolean)
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _fields text[];
begin
  if _cron is null then
    raise exception 'cron must not be null' using errcode = '22004';
  end if;
  _fields := regexp_split_to_array(btrim(_cron, E' \t\n\r'), E'[ \t]+');
  if btrim(_cron, E' \t\n\r') = '' or cardinality(_fields) <> 5 then
    raise exception 'cron must have 5 fields (minute hour day-of-month month day-of-week), got % in %',
      case when btrim(_cron, E' \t\n\r') = '' then 0 else cardinality(_fields) end,
      quote_literal(left(_cron, 100))
      using errcode = '22023';
  end if;
  minutes := schedules.parse_cron_field(_fields[1], 'minute', 0, 59);
  hours   := schedules.parse_cron_field(_fields[2], 'hour', 0, 23);
  doms    := schedules.parse_cron_field(_fields[3], 'day-of-month', 1, 31);
  months  := schedules.parse_cron_field(_fields[4], 'month', 1, 12);
  dows    := array(select distinct case when d = 7 then 0 else d end
                     from unnest(case when _fields[5] ~ '^\*'
                                      then schedules.parse_cron_field(_fields[5], 'day-of-week', 0, 6)
                                      else schedules.parse_cron_field(_fields[5], 'day-of-week', 0, 7) end) d
                    order by 1);
  dom_restricted := _fields[3] !~ '^\*';
  dow_restricted := _fields[5] !~ '^\*';
end;
$function$;
  -- schedules.parse_cron(_cron text, OUT minutes integer[], OUT hours integer[], OUT doms integer[], OUT months integer[], OUT dows integer[], OUT dom_restricted boolean, OUT dow_restricted boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.parse_cron_field(_field text, _name text, _min integer, _max integer)
 RETURNS integer[]
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _item text;
  _parts text[];
  _lo integer;
  _hi integer;
  _step integer;
  _values integer[] := '{}';
begin
  foreach _item in array string_to_array(_field, ',') loop
    -- (range)(/step)?, range: * | a | a-b
    _parts := regexp_match(_item, '^(\*|([0-9]{1,4})(?:-([0-9]{1,4}))?)(?:/([0-9]{1,4}))?$');
    if _parts is null then
      raise exception 'cron % field: % is not a number, a range a-b, * or a step x/n',
        _name, quote_literal(left(_item, 50))
        using errcode = '22023',
              hint = 'Fields are: minute hour day-of-month month day-of-week, e.g. ''*/15 0-6 * * 1-5''.';
    end if;
    if _parts[1] = '*' then
      _lo := _min;
      _hi := _max;
    else
      _lo := _parts[2]::integer;
      _hi := coalesce(_parts[3]::integer, case when _parts[4] is null then _lo else _max end);
      if _lo not between _min and _max then
        raise exception 'cron % field: % is out of range %-%', _name, _lo, _min, _max using errcode = '22023';
      end if;
      if _hi not between _min and _max then
        raise exception 'cron % field: % is out of range %-%', _name, _hi, _min, _max using errcode = '22023';
      end if;
      if _hi < _lo then
        raise exception 'cron % field: range %-% goes backwards', _name, _lo, _hi using errcode = '22023';
      end if;
    end if;
    _step := coalesce(_parts[4]::integer, 1);
    if _step < 1 then
      raise exception 'cron % field: step must be at least 1, got %', _name, _step using errcode = '22023';
    end if;
    _values := _values || array(select generate_series(_lo, _hi, _step));
  end loop;
  return array(select distinct v from unnest(_values) v order by v);
end;
$function$;
  -- schedules.parse_cron_field(_field text, _name text, _min integer, _max integer): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.pending_supervisor_task(_now timestamp with time zone, OUT task_id bigint, OUT available_at timestamp with time zone)
 RETURNS record
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select p.task_id, p.available_at
    from (select p.task_id, p.available_at, p.current_lease_id
            from queues.task_pending p
           where p.task_id = any (array(select s.task_id from schedules.supervisor_task s
                                         order by s.task_id desc limit 100))
          union all
          -- A lease-held supervisor task (no claim-index row, sql/queues/lease_held.sql)
          -- whose claim lease expired: claimable once the claims rescue it. Only the
          -- claim leases expired since the rescue cursor are read (usually none).
          select h.task_id, h.expires_at, h.task_lease_id
            from queues.lease_held_tasks h
           where h.expires_at <= _now
             and h.task_id = any (array(select s.task_id from schedules.supervisor_task s
                                         order by s.task_id desc limit 100))) p
   where (p.current_lease_id is null or p.available_at <= _now)
   order by p.available_at, p.task_id
   limit 1
$function$;
  -- schedules.pending_supervisor_task(_now timestamp with time zone, OUT task_id bigint, OUT available_at timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.plan_supervisor_at(_now timestamp with time zone, _wake timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _pending record;
  _task_id bigint;
begin
  select * into _pending from schedules.pending_supervisor_task(_now);
  if _wake is null then
    return _pending.task_id;
  end if;
  if _pending.task_id is not null and _pending.available_at <= _wake then
    return _pending.task_id;
  end if;
  _task_id := queues.enqueue_internal('db_function',
    jsonb_build_object('task_type', 'db_function', 'db_function', 'schedules.schedule_supervisor'),
    _wake, 100, null, 3);
  insert into schedules.supervisor_task (task_id, scheduled_at, enqueued_at) values (_task_id, _wake, _now);
  return _task_id;
end;
$function$;
  -- schedules.plan_supervisor_at(_now timestamp with time zone, _wake timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.prev_fire_time(_cron text, _before timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _c record := schedules.parse_cron(_cron);
  _b timestamp;
  _t timestamp;
  _limit timestamp;
  _h integer;
  _m integer;
begin
  if _before is null then
    raise exception 'before must not be null' using errcode = '22004';
  end if;
  _b := _before at time zone 'UTC';
  _t := date_trunc('minute', _b);
  if _t = _b then
    _t := _t - interval '1 minute';
  end if;
  _limit := _t - schedules.cron_search_horizon();
  loop
    if _t < _limit then
      return null;
    end if;
    if not extract(month from _t)::integer = any (_c.months) then
      _t := date_trunc('month', _t) - interval '1 minute';
      continue;
    end if;
    if not schedules.cron_day_matches(_t, _c.doms, _c.dows, _c.dom_restricted, _c.dow_restricted) then
      _t := date_trunc('day', _t) - interval '1 minute';
      continue;
    end if;
    if not extract(hour from _t)::integer = any (_c.hours) then
      select max(h) into _h from unnest(_c.hours) h where h < extract(hour from _t)::integer;
      _t := case when _h is null then date_trunc('day', _t) - interval '1 minute'
                 else date_trunc('day', _t) + make_interval(hours => _h, mins => 59) end;
      continue;
    end if;
    select max(m) into _m from unnest(_c.minutes) m where m <= extract(minute from _t)::integer;
    if _m is null then
      _t := date_trunc('hour', _t) - interval '1 minute';
      continue;
    end if;
    return (date_trunc('hour', _t) + make_interval(mins => _m)) at time zone 'UTC';
  end loop;
end;
$function$;
  -- schedules.prev_fire_time(_cron text, _before timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.prev_fire_time(_cron text, _before timestamp with time zone, _time_zone text)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _every_hour boolean;
  _o interval;
  _w timestamp;
  _i timestamptz;
  _best timestamptz;
begin
  if _time_zone is null or _time_zone = 'UTC' then
    return schedules.prev_fire_time(_cron, _before);
  end if;
  if _before is null then
    raise exception 'before must not be null' using errcode = '22004';
  end if;
  _every_hour := cardinality((schedules.parse_cron(_cron)).hours) = 24;
  _o := schedules.zone_offset(_before, _time_zone);
  _w := schedules.prev_fire_time(_cron, (_before at time zone _time_zone) at time zone 'UTC') at time zone 'UTC';
  if _w is null then
    return null;
  end if;
  _i := (_w at time zone 'UTC') - _o;
  if _before - _i <= interval '7 days'
     and schedules.zone_offset(_i, _time_zone) = _o
     and schedules.zone_offset(_i - interval '3 hours', _time_zone) = _o then
    return _i;
  end if;
  _w := schedules.prev_fire_time(_cron,
          ((_before at time zone _time_zone) + interval '3 hours 1 minute') at time zone 'UTC') at time zone 'UTC';
  while _w is not null and (_best is null or _w >= (_best at time zone _time_zone) - interval '3 hours') loop
    foreach _i in array schedules.wall_fire_instants(_w, _time_zone, _every_hour) loop
      if _i < _before and (_best is null or _i > _best) then
        _best := _i;
      end if;
    end loop;
    _w := schedules.prev_fire_time(_cron, _w at time zone 'UTC') at time zone 'UTC';
  end loop;
  return _best;
end;
$function$;
  -- schedules.prev_fire_time(_cron text, _before timestamp with time zone, _time_zone text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.run_schedule_at(_now timestamp with time zone, _schedule_id bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _name text;
  _v schedules.schedule_version;
  _first timestamptz;
  _last timestamptz;
  _from timestamptz;
  _fire timestamptz;
  _enqueued jsonb := '[]';
  _skipped jsonb;
  _task_id bigint;
begin
  select s.name into _name from schedules.schedule s where s.schedule_id = _schedule_id for no key update;
  _v := schedules.current_version(_schedule_id);
  if _name is null or not coalesce(_v.enabled, false) then
    return null;
  end if;
  _from := greatest(_v.fires_after, schedules.last_fire_at(_schedule_id));
  _first := schedules.next_fire_time(_v.cron, _from, _v.time_zone);
  if _first is null or _first > _now then
    return null;
  end if;

  if _v.missed_run_policy = 'catch_up_once' then
    -- The latest fire time at or before now (at least _first).
    _last := schedules.prev_fire_time(_v.cron, _now + interval '1 microsecond', _v.time_zone);
    _task_id := schedules.enqueue_schedule_run(_v, _last, _first, _now);
    _enqueued := jsonb_build_array(jsonb_build_object(
      'fire_at', _last, 'first_fire_at', _first, 'task_id', _task_id));
  else
    if _first < _now - schedules.skip_grace_period() then
      _last := schedules.prev_fire_time(_v.cron, _now - schedules.skip_grace_period(), _v.time_zone);
      insert into schedules.schedule_run
        (schedule_id, schedule_version_id, fire_at, first_fire_at, outcome, task_id, enqueued_at)
      values (_schedule_id, _v.schedule_version_id, _last, _first, 'skipped', null, _now);
      _skipped := jsonb_build_object('first_fire_at', _first, 'fire_at', _last);
      _from := _last;
    end if;
    -- Within the grace window: each fire time is its own run (at most grace / 1 minute).
    loop
      _fire := schedules.next_fire_time(_v.cron, _from, _v.time_zone);
      exit when _fire is null or _fire > _now;
      _task_id := schedules.enqueue_schedule_run(_v, _fire, _fire, _now);
      _enqueued := _enqueued || jsonb_build_object('fire_at', _fire, 'first_fire_at', _fire, 'task_id', _task_id);
      _from := _fire;
    end loop;
  end if;
  return jsonb_build_object('name', _name, 'enqueued', _enqueued, 'skipped', _skipped);
end;
$function$;
  -- schedules.run_schedule_at(_now timestamp with time zone, _schedule_id bigint): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.schedule_definition_error(_name text, _cron text, _task_type text, _payload jsonb, _priority integer, _missed_run_policy text, _time_zone text DEFAULT NULL::text)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _error text;
begin
  if _name is null or _name !~ '^[a-z][a-z0-9_.-]{0,99}$' then
    return 'name is required: 1 to 100 characters, lowercase letters, digits, _ . or -, starting with a letter';
  end if;
  _error := schedules.cron_error(_cron);
  if _error is not null then
    return _error;
  end if;
  if _time_zone is not null then
    _error := schedules.time_zone_error(_time_zone);
    if _error is not null then
      return _error;
    end if;
  end if;
  if _task_type is null then
    return 'task_type is required';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    return format('unknown task_type %s', quote_literal(left(_task_type, 100)));
  end if;
  if _payload is null or jsonb_typeof(_payload) <> 'object' then
    return 'payload is required and must be a JSON object';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    return format('payload is %s bytes, over the limit of %s bytes', pg_column_size(_payload), queues.max_payload_bytes());
  end if;
  if _task_type = 'db_function' then
    begin
      perform internal.resolve_runnable_function(_payload ->> 'db_function');
    exception when others then
      return format('payload.db_function must name a runnable function: %s', sqlerrm);
    end;
  end if;
  if _priority is not null and _priority not between -1000 and 1000 then
    return format('priority must be between -1000 and 1000, got %s', _priority);
  end if;
  if _missed_run_policy is not null and _missed_run_policy not in ('skip', 'catch_up_once') then
    return format('missed_run_policy must be ''skip'' or ''catch_up_once'', got %s',
                  quote_literal(left(_missed_run_policy, 50)));
  end if;
  return null;
end;
$function$;
  -- schedules.schedule_definition_error(_name text, _cron text, _task_type text, _payload jsonb, _priority integer, _missed_run_policy text, _time_zone text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.schedule_supervisor(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select schedules.schedule_supervisor_at(now(), payload)
$function$;
  -- schedules.schedule_supervisor(payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_WORKER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.schedule_supervisor_at(_now timestamp with time zone, payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _schedule record;
  _run jsonb;
  _runs jsonb := '[]';
  _errors jsonb := '[]';
  _enqueued integer := 0;
  _skipped integer := 0;
  _wake timestamptz;
  _next_task_id bigint;
  _result jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());

  for _schedule in select s.schedule_id, s.name from schedules.schedule s order by s.schedule_id loop
    begin
      _run := schedules.run_schedule_at(_now, _schedule.schedule_id);
      if _run is not null then
        _runs := _runs || _run;
        _enqueued := _enqueued + jsonb_array_length(_run -> 'enqueued');
        _skipped := _skipped + case when _run -> 'skipped' = 'null' then 0 else 1 end;
      end if;
    exception when others then
      _errors := _errors || jsonb_build_object('name', _schedule.name, 'error', sqlerrm, 'sqlstate', sqlstate);
    end;
  end loop;

  _wake := schedules.supervisor_wake_at(_now);
  _next_task_id := schedules.plan_supervisor_at(_now, _wake);
  _result := jsonb_build_object(
    'status', 'ok', 'runs', _runs, 'enqueued', _enqueued, 'skipped', _skipped,
    'next_supervisor_task_id', _next_task_id, 'next_run_at', _wake);
  if jsonb_array_length(_errors) > 0 then
    return jsonb_build_object('success', false,
      'error', format('%s schedule(s) failed: %s', jsonb_array_length(_errors), _errors::text),
      'payload', _result || jsonb_build_object('errors', _errors));
  end if;
  return jsonb_build_object('success', true, 'payload', _result);
end;
$function$;
  -- schedules.schedule_supervisor_at(_now timestamp with time zone, payload jsonb): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.set_schedule_enabled_at(_now timestamp with time zone, _name text, _enabled boolean, OUT schedule_id bigint, OUT schedule_version_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _v schedules.schedule_version;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _enabled is null then
    raise exception 'enabled must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key()); -- before the row lock, as above
  select s.schedule_id into schedule_id from schedules.schedule s where s.name = _name for no key update;
  if schedule_id is null then
    validation_failure_message := format('no schedule named %s', coalesce(quote_literal(left(_name, 100)), 'null'));
    return;
  end if;
  _v := schedules.current_version(schedule_id);
  schedule_version_id := schedules.append_schedule_version(
    _now, schedule_id, _v.cron, _v.task_type, _v.payload, _v.priority, _v.missed_run_policy, _enabled,
    _v.time_zone);
  if _enabled then
    perform schedules.ensure_schedule_supervisor_at(_now);
  end if;
end;
$function$;
  -- schedules.set_schedule_enabled_at(_now timestamp with time zone, _name text, _enabled boolean, OUT schedule_id bigint, OUT schedule_version_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.skip_grace_period()
 RETURNS interval
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select interval '10 minutes' $function$;
  -- schedules.skip_grace_period(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.supervisor_lock_key()
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 7305871629419384611::bigint $function$;
  -- schedules.supervisor_lock_key(): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.supervisor_wake_at(_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select least(greatest(min(n.fire_at), _now), _now + schedules.max_supervisor_sleep())
    from schedules.schedule s
   cross join lateral (select schedules.next_due_fire_at(s.schedule_id) as fire_at) n
  having count(n.fire_at) > 0
$function$;
  -- schedules.supervisor_wake_at(_now timestamp with time zone): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.time_zone_error(_time_zone text)
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select case
           when _time_zone is null then 'time_zone must not be null'
           when not exists (select 1 from pg_catalog.pg_timezone_names z where z.name = _time_zone)
             then format('time_zone must be an IANA time zone name such as ''Europe/Berlin'' or ''UTC'', got %s',
                         quote_literal(left(_time_zone, 100)))
         end
$function$;
  -- schedules.time_zone_error(_time_zone text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.upsert_schedule(_name text, _cron text, _task_type text, _payload jsonb, _priority integer DEFAULT NULL::integer, _missed_run_policy text DEFAULT NULL::text, _time_zone text DEFAULT NULL::text, OUT schedule_id bigint, OUT schedule_version_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  -- Apps and the REST API schedule only what they could enqueue themselves: a schedule
  -- of an internal task type (a channel task, a db_function step) is the owner's to
  -- install, with schedules.upsert_schedule_at in a migration.
  perform queues.assert_may_enqueue(_task_type);
  select * into schedule_id, schedule_version_id, validation_failure_message
    from schedules.upsert_schedule_at(now(), _name, _cron, _task_type, _payload, _priority, _missed_run_policy,
                                      _time_zone);
end;
$function$;
  -- schedules.upsert_schedule(_name text, _cron text, _task_type text, _payload jsonb, _priority integer, _missed_run_policy text, _time_zone text, OUT schedule_id bigint, OUT schedule_version_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_API (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_APP (by :DATABASE_OWNER)
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.upsert_schedule_at(_now timestamp with time zone, _name text, _cron text, _task_type text, _payload jsonb, _priority integer DEFAULT NULL::integer, _missed_run_policy text DEFAULT NULL::text, _time_zone text DEFAULT NULL::text, OUT schedule_id bigint, OUT schedule_version_id bigint, OUT validation_failure_message text)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _enabled boolean;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  validation_failure_message := schedules.schedule_definition_error(
    _name, _cron, _task_type, _payload, _priority, _missed_run_policy, _time_zone);
  if validation_failure_message is not null then
    return;
  end if;

  -- The supervisor's lock first, then the schedule row: the supervisor takes them in
  -- this order too, so an edit and a supervisor run never deadlock.
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());
  insert into schedules.schedule (name, created_at) values (_name, _now) on conflict (name) do nothing;
  select s.schedule_id into schedule_id from schedules.schedule s where s.name = _name for no key update;
  _enabled := coalesce((schedules.current_version(schedule_id)).enabled, true);
  schedule_version_id := schedules.append_schedule_version(
    _now, schedule_id, btrim(_cron), _task_type, _payload, coalesce(_priority, 0),
    coalesce(_missed_run_policy, 'skip'), _enabled, coalesce(_time_zone, 'UTC'));
  perform schedules.ensure_schedule_supervisor_at(_now);
end;
$function$;
  -- schedules.upsert_schedule_at(_now timestamp with time zone, _name text, _cron text, _task_type text, _payload jsonb, _priority integer, _missed_run_policy text, _time_zone text, OUT schedule_id bigint, OUT schedule_version_id bigint, OUT validation_failure_message text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.wall_fire_instants(_wall timestamp without time zone, _time_zone text, _every_hour boolean)
 RETURNS timestamp with time zone[]
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  _u timestamptz := _wall at time zone 'UTC';
  _o_pre interval := schedules.zone_offset(_u - interval '1 day', _time_zone);
  _o_post interval := schedules.zone_offset(_u + interval '1 day', _time_zone);
  _valid timestamptz[] := '{}';
  _lo bigint;
  _hi bigint;
  _mid bigint;
begin
  if schedules.zone_offset(_u - _o_pre, _time_zone) = _o_pre then
    _valid := _valid || (_u - _o_pre);
  end if;
  if _o_post <> _o_pre and schedules.zone_offset(_u - _o_post, _time_zone) = _o_post then
    _valid := _valid || (_u - _o_post);
  end if;
  if cardinality(_valid) = 2 then
    _valid := array(select v from unnest(_valid) v order by v);
    return case when _every_hour then _valid else _valid[1:1] end;
  elsif cardinality(_valid) = 1 then
    return _valid;
  elsif _every_hour or _o_pre = _o_post then
    return '{}';
  end if;
  -- In the gap: the change happened between _u - _o_post (still _o_pre) and _u - _o_pre
  -- (already _o_post); find its second.
  _lo := extract(epoch from _u - _o_post)::bigint;
  _hi := extract(epoch from _u - _o_pre)::bigint;
  while _hi - _lo > 1 loop
    _mid := (_lo + _hi) / 2;
    if schedules.zone_offset(to_timestamp(_mid), _time_zone) = _o_pre then
      _lo := _mid;
    else
      _hi := _mid;
    end if;
  end loop;
  return array[to_timestamp(_hi)];
end;
$function$;
  -- schedules.wall_fire_instants(_wall timestamp without time zone, _time_zone text, _every_hour boolean): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)

CREATE OR REPLACE FUNCTION schedules.zone_offset(_at timestamp with time zone, _time_zone text)
 RETURNS interval
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select (_at at time zone _time_zone) - (_at at time zone 'UTC')
$function$;
  -- schedules.zone_offset(_at timestamp with time zone, _time_zone text): owner :DATABASE_OWNER
  -- grant EXECUTE to :DATABASE_OWNER (by :DATABASE_OWNER)
