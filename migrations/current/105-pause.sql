set local lock_timeout = '5s';
-- Queue controls: pausing claiming per task type, as facts. Before the other current
-- files, because the public claim wrappers (sql/queues/claim.sql) read these tables
-- through queues.claimable_task_types.

-- Pausing a task type is a fact; resuming closes it. A type is paused while it has a
-- pause without a resumption. Every claim reads this table (the claim wrappers in
-- sql/queues/claim.sql), so it only grows with operator actions.
create table if not exists queues.task_type_paused (
  task_type_paused_id bigint generated always as identity primary key,
  task_type           text not null references queues.task_type on delete cascade,
  paused_at           timestamptz not null default now(),
  reason              text not null default '' check (length(reason) <= 500)
);
create index if not exists task_type_paused_type_idx on queues.task_type_paused (task_type, task_type_paused_id desc);
comment on table queues.task_type_paused is 'Append-only: claiming of a task type paused (until a task_type_resumed row names it).';

create table if not exists queues.task_type_resumed (
  task_type_paused_id bigint primary key references queues.task_type_paused on delete cascade,
  resumed_at          timestamptz not null default now()
);
comment on table queues.task_type_resumed is 'Append-only: the end of a pause.';

drop trigger if exists forbid_update on queues.task_type_paused;
create trigger forbid_update before update on queues.task_type_paused
  for each statement execute function queues.forbid_fact_update();
drop trigger if exists forbid_update on queues.task_type_resumed;
create trigger forbid_update before update on queues.task_type_resumed
  for each statement execute function queues.forbid_fact_update();

--!include queues/pause.sql
