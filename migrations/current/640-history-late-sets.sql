-- Maintenance that falls behind catches up: a set within reach of the task ids handed out
-- is made whole in one step, above the last id, so ids cannot outrun it table by table;
-- and a step skipped for want of a free moment is recorded here, and the run goes on
-- (queues.maintain_history_step_at, sql/queues/partitions.sql).
set local lock_timeout = '5s';

create table if not exists queues.history_step_skipped (
  skipped_at timestamptz not null default clock_timestamp(),
  step       text not null,
  reason     text not null
);
create index if not exists history_step_skipped_skipped_at on queues.history_step_skipped (skipped_at);
comment on table queues.history_step_skipped is
  'Maintenance steps that were skipped (no free moment for their locks within lock_timeout_ms), with the reason; rows older than a day are deleted by maintenance.';

--!include queues/partitions.sql
