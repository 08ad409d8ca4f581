-- One lease per claim (docs/design/hot-path.md, "One lease per claim, as built"): a
-- claim writes one append-only queues.claim_lease naming the tasks it took (task_ids,
-- ascending), their shared lease id (from task_lease's sequence, so a claim's id never
-- equals a per-task lease's), its worker, expiry and named suspect, instead of one
-- queues.task_lease row per task. Leases written before stay task_lease rows. A task's
-- leases, in either shape, are read through queues.task_leases (a view),
-- queues.task_leases_of(task_id), queues.task_lease_at(task_id, lease) and
-- queues.task_lease_effective(_of) (sql/queues/task_lease_effective.sql). The table is a
-- history table, range-partitioned by the largest task id a claim names (its task_id
-- column), on the sets' bounds; retention keeps a set while a claim lease in it names a
-- task of an older set still kept (sql/queues/partitions_maintain.sql).
-- Locks: the new table and its partitions only (SHARE or SHARE UPDATE EXCLUSIVE on
-- queues.claim_lease, ACCESS EXCLUSIVE on its empty default while a set's partition is
-- attached); no other hot table.
set local lock_timeout = '5s';

create table if not exists queues.claim_lease (
  -- The claim's lease id, shared by every task it took.
  task_lease_id   bigint not null default nextval('queues.task_lease_task_lease_id_seq'),
  -- The largest task id the claim names (task_ids' last element): the partition key, as
  -- every history table's task_id, so that the lease lives in the set of its newest task.
  task_id         bigint not null,
  worker_key      integer not null,
  leased_at       timestamptz not null,
  -- As claimed; heartbeats extend each task's lease (queues.task_lease_extension).
  expires_at      timestamptz not null,
  -- The tasks the claim took, ascending, each once.
  task_ids        bigint[] not null,
  -- [first task id, last task id]: what the GiST index finds a task's leases by.
  task_range      int8range not null,
  -- The claim's one suspect (a task a lease of which had ended without an end), if any:
  -- its expiries count towards abandonment.
  suspect_task_id bigint,
  constraint claim_lease_pkey primary key (task_id, task_lease_id),
  constraint claim_lease_shape check (
    cardinality(task_ids) between 1 and 1000
    and array_ndims(task_ids) = 1
    and task_id = task_ids[cardinality(task_ids)]
    and task_range = int8range(task_ids[1], task_id, '[]')
    and (suspect_task_id is null or suspect_task_id = any (task_ids))
    and expires_at > leased_at)
) partition by range (task_id);
comment on table queues.claim_lease is
  'Append-only: one lease per claim, shared by the tasks it names (task_ids). Read a task''s leases through queues.task_leases / queues.task_leases_of / queues.task_lease_effective. See sql/queues/claim.sql.';
create index if not exists claim_lease_task_range_idx on queues.claim_lease using gist (task_range);
create index if not exists claim_lease_task_lease_id_idx on queues.claim_lease (task_lease_id);
drop trigger if exists forbid_update on queues.claim_lease;
create trigger forbid_update before update on queues.claim_lease
  for each statement execute function queues.forbid_fact_update();
create table if not exists queues.claim_lease_default partition of queues.claim_lease default;
drop trigger if exists forbid_update on queues.claim_lease_default;
create trigger forbid_update before update on queues.claim_lease_default
  for each statement execute function queues.forbid_fact_update();

--!include queues/partitions.sql

-- A partition of queues.completion_round (migration 100) and of queues.claim_lease for
-- every partition set there is (a set half made by maintenance gets its own when
-- maintenance finishes the set).
select queues.attach_history_partition(t.name, s.lower_bound, s.upper_bound)
  from queues.history_sets() s
 cross join unnest(array['completion_round', 'claim_lease']) t(name)
 where not s.is_default
 order by s.lower_bound, t.name;

--!include queues/task_lease_effective.sql
--!include queues/claim.sql
--!include queues/complete.sql
--!include queues/fail.sql
--!include queues/workers.sql
--!include queues/dead_letter.sql
--!include queues/maintenance.sql
--!include queues/partitions_maintain.sql
--!include admin/workers.sql
--!include admin/dead_letters.sql
--!include admin/capacity.sql
--!include admin/metrics.sql
--!include admin/tasks.sql
--!include public/role_based_worker.sql
--!include files/signing.sql
--!include internal/delivery.sql
