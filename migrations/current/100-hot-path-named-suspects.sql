set local lock_timeout = '5s';

-- Suspects are named by their lease, and a task's start travels with its completion: a
-- claim names at most one suspect (task_lease.suspect, mirrored on the pending row as
-- suspect_lease), an expiry counts towards abandonment only for the lease's named
-- suspect (the others are uncounted_count, formerly unstarted_count), and nothing is
-- written when a task starts (task_completed.started_at, task_attempt_failed.started_at).
-- lock: access exclusive on queues.task_pending: adding a column with a constant default and renaming one change the catalog only (no rewrite); held for milliseconds
-- lock: access exclusive on queues.task_lease: adding a nullable column changes the catalog only
-- lock: access exclusive on queues.task_completed: adding a nullable column changes the catalog only
-- lock: access exclusive on queues.task_attempt_failed: adding a nullable column changes the catalog only
alter table queues.task_pending add column if not exists suspect_lease boolean not null default false;
do $$
begin
  if exists (select 1 from information_schema.columns
              where table_schema = 'queues' and table_name = 'task_pending' and column_name = 'unstarted_count') then
    alter table queues.task_pending rename column unstarted_count to uncounted_count;
  end if;
end;
$$;
alter table queues.task_lease add column if not exists suspect boolean;
alter table queues.task_completed add column if not exists started_at timestamptz;
alter table queues.task_attempt_failed add column if not exists started_at timestamptz;
comment on column queues.task_pending.suspect_lease is
  'The current lease named this task its suspect (queues.claim_tasks_at); its expiry counts towards abandonment.';
comment on column queues.task_pending.uncounted_count is
  'Leases that ended without an end and without counting towards abandonment: not the named suspect of their lease.';
comment on column queues.task_lease.suspect is
  'The claim took this task as its one suspect (a lease of it had ended without an end); null on leases written before claims named one.';
comment on column queues.task_completed.started_at is
  'When the run that ended here started, as its worker reported it; null when not reported.';
comment on column queues.task_attempt_failed.started_at is
  'When the failed run started, as its worker reported it; null when not reported.';

drop function if exists queues.settle_tasks(bigint[], bigint[], bigint[], bigint[], text[], boolean[], bigint[], text[]);
drop function if exists queues.complete_tasks(bigint[], bigint[], text[], boolean[]);
drop function if exists queues.mark_started(bigint[], bigint[]);
drop function if exists queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text);
drop function if exists admin.completions_between(timestamptz, timestamptz);

--!include queues/task_lease_effective.sql
--!include queues/complete.sql
--!include queues/settle.sql
--!include queues/steps.sql
--!include queues/start.sql
--!include queues/claim.sql
--!include queues/workers.sql
--!include queues/maintenance.sql
--!include admin/common.sql
--!include admin/capacity.sql
--!include public/role_based_worker.sql
