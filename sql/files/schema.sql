-- files: stored objects and the file deletion process.
--
-- Domain data: file (one stored object, owned by an account). A completed upload is a
-- file row; upload intents are out of scope here.
-- Facts (append-only; a statement-level trigger refuses updates):
--   file_metadata                    metadata documents; the latest row is current
--   file_deletion_task               root: one per file
--   file_deletion_supervisor_run     one row per non-terminal supervisor run (run cap)
--   file_deletion_attempt            one row per scheduled file_delete channel task
--   file_deletion_attempt_succeeded / _failed
--   file_deletion_task_succeeded / _failed   terminal

create schema if not exists files;
revoke all on schema files from public;

create table if not exists files.file (
  file_id    bigint generated always as identity primary key,
  account_id bigint not null references accounts.account on delete restrict,
  -- The provider schema's bucket rule (@org/handler-types fileDeletePayload).
  bucket     text not null check (bucket ~ '^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$'),
  object_key text not null check (length(object_key) between 1 and 1024),
  created_at timestamptz not null default now()
);
create index if not exists file_account_idx on files.file (account_id);

create table if not exists files.file_metadata (
  file_metadata_id bigint generated always as identity primary key,
  file_id          bigint not null references files.file on delete cascade,
  metadata         jsonb not null check (jsonb_typeof(metadata) = 'object'),
  created_at       timestamptz not null default now()
);
create index if not exists file_metadata_file_idx on files.file_metadata (file_id, file_metadata_id desc);
comment on table files.file_metadata is
  'Append-only metadata documents per file; the row with the highest id is current (files.current_file_metadata).';

create table if not exists files.file_deletion_task (
  file_deletion_task_id bigint generated always as identity primary key,
  file_id               bigint not null unique references files.file on delete restrict,
  created_at            timestamptz not null default now()
);

create table if not exists files.file_deletion_supervisor_run (
  file_deletion_supervisor_run_id bigint generated always as identity primary key,
  file_deletion_task_id bigint not null references files.file_deletion_task on delete cascade,
  created_at            timestamptz not null default now()
);
create index if not exists file_deletion_supervisor_run_task_idx
  on files.file_deletion_supervisor_run (file_deletion_task_id);

create table if not exists files.file_deletion_attempt (
  file_deletion_attempt_id bigint generated always as identity primary key,
  file_deletion_task_id    bigint not null references files.file_deletion_task on delete cascade,
  created_at               timestamptz not null default now()
);
create index if not exists file_deletion_attempt_task_idx on files.file_deletion_attempt (file_deletion_task_id);

create table if not exists files.file_deletion_attempt_succeeded (
  file_deletion_attempt_id bigint primary key references files.file_deletion_attempt on delete cascade,
  worker_payload           jsonb,
  created_at               timestamptz not null default now()
);

create table if not exists files.file_deletion_attempt_failed (
  file_deletion_attempt_id bigint primary key references files.file_deletion_attempt on delete cascade,
  error_message            text not null,
  created_at               timestamptz not null default now()
);

create table if not exists files.file_deletion_task_succeeded (
  file_deletion_task_id bigint primary key references files.file_deletion_task on delete cascade,
  created_at            timestamptz not null default now()
);

create table if not exists files.file_deletion_task_failed (
  file_deletion_task_id bigint primary key references files.file_deletion_task on delete cascade,
  reason                text not null,
  created_at            timestamptz not null default now()
);

do $$
declare
  _table text;
begin
  foreach _table in array array[
    'file_metadata', 'file_deletion_task', 'file_deletion_supervisor_run', 'file_deletion_attempt',
    'file_deletion_attempt_succeeded', 'file_deletion_attempt_failed',
    'file_deletion_task_succeeded', 'file_deletion_task_failed'
  ] loop
    if not exists (select 1 from pg_trigger
                    where tgrelid = to_regclass(format('files.%I', _table)) and tgname = 'forbid_update') then
      execute format('create trigger forbid_update before update on files.%I
                        for each statement execute function queues.forbid_fact_update()', _table);
    end if;
  end loop;
end;
$$;
