-- What operators see of the history: when each partition set was created, the History
-- page's status (admin.history_status), and process timelines that say which of their
-- queue tasks retention dropped.
set local lock_timeout = '5s';

-- When maintenance created each partition set (queues.create_history_partition). Sets
-- made before this table existed have no row.
create table if not exists queues.history_partition_created (
  lower_bound bigint primary key,
  upper_bound bigint not null check (upper_bound > lower_bound),
  created_at  timestamptz not null default now()
);
comment on table queues.history_partition_created is
  'Append-only: partition sets of queue history created by maintenance (task ids [lower_bound, upper_bound)).';
drop trigger if exists forbid_update on queues.history_partition_created;
create trigger forbid_update before update on queues.history_partition_created
  for each statement execute function queues.forbid_fact_update();

--!include queues/partitions.sql
--!include admin/history.sql
--!include admin/processes.sql
