-- The History page sizes only the sets still filling: maintenance measures the sets that
-- are done (every task completed, the range below the last task id) at the end of each
-- run, and the page reads their bytes and oldest and newest task from here instead of
-- opening their partitions on each poll (queues.measure_history_sets,
-- sql/queues/partitions.sql; admin.history_status_at, sql/admin/history.sql).
set local lock_timeout = '5s';

create table if not exists queues.history_set_measured (
  lower_bound       bigint primary key,
  upper_bound       bigint not null check (upper_bound > lower_bound),
  first_task_id     bigint,
  first_enqueued_at timestamptz,
  last_task_id      bigint,
  table_bytes       bigint not null,
  index_bytes       bigint not null,
  measured_at       timestamptz not null
);
comment on table queues.history_set_measured is
  'Derived: bytes and oldest and newest task of the partition sets that are done, measured by maintenance (queues.measure_history_sets).';

--!include queues/partitions.sql
--!include admin/history.sql
