-- Semantics of the queue (issue 12): error classification, fencing, resource keys vs
-- late heartbeats, stale recovery, transient errors, validation failures, input limits.
set local lock_timeout = '5s';
-- lock: access exclusive on queues.task_pending: adds the interrupted_count column (instant, no rewrite), briefly
-- lock: access exclusive on queues.worker: adds the heartbeat_interval_ms column (instant, no rewrite), briefly

-- Each worker's heartbeat interval, so stale recovery can tell a silent worker from one
-- that is merely between heartbeats (null: the documented default, 30 s).
alter table queues.worker add column if not exists heartbeat_interval_ms integer
  check (heartbeat_interval_ms between 1 and 86400000);

-- Transient interruptions (a deadlock, a serialization failure, a lost connection) of a
-- task's lease, with the error: the lease ends there (a task_lease_release fact is
-- appended too) and the task runs again after a backoff. They are not task errors (no
-- queues.error row) but they count: after max_leases of them the task is abandoned, with
-- the last one's message as its error.
create table if not exists queues.task_interruption (
  task_lease_id  bigint primary key references queues.task_lease on delete cascade,
  task_id        bigint not null references queues.task on delete cascade,
  interrupted_at timestamptz not null default now(),
  retry_at       timestamptz not null,
  error_message  text not null
);
create index if not exists task_interruption_task_idx on queues.task_interruption (task_id);
comment on table queues.task_interruption is 'Append-only: a lease ended by a transient error; the task runs again at retry_at.';
alter table queues.task_pending add column if not exists interrupted_count integer not null default 0;

drop trigger if exists forbid_update on queues.task_interruption;
create trigger forbid_update before update on queues.task_interruption
  for each statement execute function queues.forbid_fact_update();

-- Signatures that change.
drop function if exists queues.record_worker_heartbeat(text, text[]);
drop function if exists queues.complete_tasks(bigint[], bigint[], text[]);

--!include queues/workers.sql
--!include queues/enqueue.sql
--!include queues/lease.sql
--!include queues/complete.sql
--!include queues/fail.sql
--!include queues/claim.sql
--!include queues/interrupt.sql
--!include queues/maintenance.sql
--!include queues/privileges.sql
