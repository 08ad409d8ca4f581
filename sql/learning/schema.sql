-- learning: the account data the account deletion checklist touches. A profile belongs
-- to an account; a recording is a profile's answer to a cue, stored as a file.
-- Domain data (anonymization overwrites profile.display_name).

create schema if not exists learning;
revoke all on schema learning from public;

create table if not exists learning.profile (
  profile_id   bigint generated always as identity primary key,
  account_id   bigint not null references accounts.account on delete restrict,
  display_name text check (length(display_name) <= 200),
  created_at   timestamptz not null default now()
);
create index if not exists profile_account_idx on learning.profile (account_id);

create table if not exists learning.cue (
  cue_id     bigint generated always as identity primary key,
  prompt     text not null check (length(prompt) between 1 and 2000),
  created_at timestamptz not null default now()
);

create table if not exists learning.profile_cue_recording (
  profile_cue_recording_id bigint generated always as identity primary key,
  profile_id               bigint not null references learning.profile on delete restrict,
  cue_id                   bigint not null references learning.cue on delete restrict,
  file_id                  bigint not null references files.file on delete restrict,
  created_at               timestamptz not null default now()
);
create index if not exists profile_cue_recording_profile_idx on learning.profile_cue_recording (profile_id);
create index if not exists profile_cue_recording_file_idx on learning.profile_cue_recording (file_id);

revoke all on all tables in schema learning from public;
revoke all on all sequences in schema learning from public;
