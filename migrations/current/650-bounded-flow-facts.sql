set local lock_timeout = '5s';
-- Nothing grows forever (docs/operations.md, "Retention and partitions"):
--   queues.task_progress and queues.task_dependency become history tables, range-partitioned
--   by task_id (a dependency edge by its dependent's) on the sets' bounds, and leave with
--   their task's set; their rows are moved into the new tables, nothing is lost.
--   queues.throttle, queues.throttle_cleared and queues.task_limit_window are pruned by
--   history maintenance (queues.prune_flow_facts_at, sql/queues/flow_retention.sql).
-- queues/partitions.sql (the list of history tables), queues/partitions_maintain.sql (the
-- call of the pruning) and queues/dependencies.sql are included by earlier current files,
-- which inline their current text.
-- Locks: ACCESS EXCLUSIVE on queues.task_progress and queues.task_dependency (copied
-- aside, dropped, made again; workers' progress reports and enqueues with dependencies wait for the
-- copy), neither a claim's nor a completion's table; SHARE UPDATE EXCLUSIVE or SHARE on the
-- new tables' parents while their partitions are attached.

-- The unpartitioned tables' rows are set aside (in temporary tables, dropped at commit)
-- and the tables dropped, so that the new ones take their names and their constraints'.
do $$
begin
  if (select c.relkind from pg_class c where c.oid = 'queues.task_progress'::regclass) = 'r' then
    create temporary table task_progress_moving on commit drop as
      select u.* from queues.task_progress u;
    create temporary table task_progress_last_id on commit drop as
      select s.last_value from queues.task_progress_task_progress_id_seq s;
    drop table queues.task_progress;
  end if;
  if (select c.relkind from pg_class c where c.oid = 'queues.task_dependency'::regclass) = 'r' then
    create temporary table task_dependency_moving on commit drop as
      select u.* from queues.task_dependency u;
    drop table queues.task_dependency;
  end if;
end;
$$;

create table if not exists queues.task_progress (
  task_progress_id bigint generated always as identity,
  task_id bigint not null,
  task_lease_id bigint not null,
  reported_at timestamptz not null default now(),
  done bigint not null check (done >= 0),
  total bigint check (total >= done),
  note text not null default '' check (length(note) <= 500),
  -- Leads with the partition key, as every history table's; also a task's reports in order.
  primary key (task_id, task_progress_id)
) partition by range (task_id);
comment on table queues.task_progress is
  'Append-only: a progress report of a running task (done out of total, a note), at most one per task per second from the worker (queues.record_progress). A history table: leaves with its task''s partition set.';
drop trigger if exists forbid_update on queues.task_progress;
create trigger forbid_update before update on queues.task_progress
  for each statement execute function queues.forbid_fact_update();
create table if not exists queues.task_progress_default partition of queues.task_progress default;
drop trigger if exists forbid_update on queues.task_progress_default;
create trigger forbid_update before update on queues.task_progress_default
  for each statement execute function queues.forbid_fact_update();

create table if not exists queues.task_dependency (
  -- The dependent (the newer task): the partition key, so an edge lives in its dependent's set.
  task_id bigint not null,
  depends_on_task_id bigint not null,
  created_at timestamptz not null default now(),
  primary key (task_id, depends_on_task_id),
  check (task_id <> depends_on_task_id)
) partition by range (task_id);
comment on table queues.task_dependency is
  'Append-only: task task_id was enqueued to wait for task depends_on_task_id (an older task). Written by the enqueue; read by queues.release_dependents when a dependency ends. A history table partitioned by the dependent: an edge leaves with its dependent''s set.';
drop trigger if exists forbid_update on queues.task_dependency;
create trigger forbid_update before update on queues.task_dependency
  for each statement execute function queues.forbid_fact_update();
-- The dependents of a task that ends: probed once per completed task.
create index if not exists task_dependency_depends_on on queues.task_dependency (depends_on_task_id, task_id);
create table if not exists queues.task_dependency_default partition of queues.task_dependency default;
drop trigger if exists forbid_update on queues.task_dependency_default;
create trigger forbid_update before update on queues.task_dependency_default
  for each statement execute function queues.forbid_fact_update();

-- A partition of each for every partition set there is (a set half made by maintenance
-- gets its own when maintenance finishes the set).
select queues.attach_history_partition(t.name, s.lower_bound, s.upper_bound)
  from queues.history_sets() s
 cross join unnest(array['task_progress', 'task_dependency']) t(name)
 where not s.is_default
 order by s.lower_bound, t.name;

-- The rows set aside, moved in; the new identity goes on from the old one.
do $$
begin
  if to_regclass('pg_temp.task_progress_moving') is not null then
    insert into queues.task_progress (task_progress_id, task_id, task_lease_id, reported_at, done, total, note)
    overriding system value
    select u.task_progress_id, u.task_id, u.task_lease_id, u.reported_at, u.done, u.total, u.note
      from pg_temp.task_progress_moving u
     order by u.task_id, u.task_progress_id;
    perform setval(pg_get_serial_sequence('queues.task_progress', 'task_progress_id'),
                   (select l.last_value from pg_temp.task_progress_last_id l) + 1, false);
    drop table pg_temp.task_progress_moving, pg_temp.task_progress_last_id;
  end if;
  if to_regclass('pg_temp.task_dependency_moving') is not null then
    insert into queues.task_dependency (task_id, depends_on_task_id, created_at)
    select u.task_id, u.depends_on_task_id, u.created_at
      from pg_temp.task_dependency_moving u
     order by u.task_id, u.depends_on_task_id;
    drop table pg_temp.task_dependency_moving;
  end if;
end;
$$;

-- TRUNCATE queues.task empties every history table (completion rounds, claim leases,
-- progress reports and dependency edges included).
create or replace function queues.truncate_task_facts() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  truncate queues.task_pending, queues.resource_lease, queues.task_lease, queues.task_completed,
           queues.error, queues.task_lease_extension, queues.task_lease_release,
           queues.task_lease_revocation, queues.task_attempt_failed, queues.task_redriven,
           queues.task_lease_started, queues.task_interruption, queues.task_cancelled,
           queues.task_result, queues.task_run_now, queues.task_trace, queues.completion_round,
           queues.claim_lease, queues.task_progress, queues.task_dependency;
  return null;
end;
$$;

--!include queues/flow_retention.sql
