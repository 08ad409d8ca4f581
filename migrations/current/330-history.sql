-- History: queues.task and every fact table keyed by task become range-partitioned by
-- task_id, so that old history leaves by dropping whole partition sets (retention), never
-- by row-by-row DELETE. Functions: sql/queues/partitions.sql; reasons and operations:
-- docs/operations.md, "Retention and partitions".
--
-- Locks: converting a table into a partitioned one cannot be done in place; it needs a
-- new table, a copy of every row and a swap of names, so the conversion below takes
-- ACCESS EXCLUSIVE on queues.task, task_lease, task_completed, error,
-- task_lease_extension, task_lease_release, task_lease_revocation, task_attempt_failed,
-- task_redriven, task_lease_started, task_interruption, task_cancelled, task_result,
-- task_run_now, task_pending and resource_lease until the migration commits: claims,
-- completions and enqueues wait for the copy (about 10 s per million tasks of history).
-- Foreign keys from other tables to these (the domains' attempts, the provider calls of
-- internal) are dropped: a referenced partition could not be dropped.
-- Once converted, running this file again changes nothing.
set local lock_timeout = '5s';
-- lock: access exclusive on queues.task: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_lease: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_completed: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.error: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_lease_extension: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_lease_release: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_lease_revocation: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_attempt_failed: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_redriven: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_lease_started: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_interruption: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_cancelled: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_result: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_run_now: converted to a partitioned table (new table, copy, swap of names) once; no lock when already converted
-- lock: access exclusive on queues.task_type: dropping the old tables drops their foreign keys to it, once
-- lock: access exclusive on queues.task_pending: held while its task's tables are converted, so no claim sees half a swap; its foreign key to task is dropped
-- lock: access exclusive on queues.resource_lease: held while its task's tables are converted, so no claim sees half a swap; its foreign key to task is dropped

-- Retention and partition sizing (one row; owner only). See docs/operations.md.
create table if not exists queues.history_setting (
  singleton        boolean primary key default true check (singleton),
  -- Task ids per partition set. Aim for about a day of tasks at the observed rate.
  partition_size   bigint not null default 1000000 check (partition_size between 1 and 1000000000000),
  -- Sets kept ready above the last task id handed out.
  partitions_ahead integer not null default 2 check (partitions_ahead between 1 and 1000),
  -- A set is dropped once its newest completion is older than this (and nothing in it
  -- is pending).
  retention        interval not null default '7 days' check (retention >= interval '0'),
  -- Maintenance waits at most this long for a lock, then skips the step until next run.
  lock_timeout_ms  integer not null default 100 check (lock_timeout_ms between 1 and 60000),
  updated_at       timestamptz not null default now()
);
comment on table queues.history_setting is
  'Retention window and partition sizing of the queue''s history (one row). See sql/queues/partitions.sql.';
insert into queues.history_setting default values on conflict do nothing;

-- What retention removed: one row per dropped partition set.
create table if not exists queues.history_partition_dropped (
  history_partition_dropped_id bigint generated always as identity primary key,
  lower_bound       bigint not null,
  upper_bound       bigint not null check (upper_bound > lower_bound),
  tasks             bigint not null,
  last_completed_at timestamptz,
  dropped_at        timestamptz not null default now()
);
comment on table queues.history_partition_dropped is
  'Append-only: partition sets of queue history dropped by retention (task ids [lower_bound, upper_bound)).';
drop trigger if exists forbid_update on queues.history_partition_dropped;
create trigger forbid_update before update on queues.history_partition_dropped
  for each statement execute function queues.forbid_fact_update();

-- Retention of business processes' own facts, off by default: a row per process turns it
-- on (sql/internal/retention.sql).
create table if not exists internal.process_retention (
  process    text primary key
             check (process in ('send_email', 'send_sms', 'file_deletion', 'account_deletion', 'account_anonymization')),
  retention  interval not null check (retention > interval '0'),
  updated_at timestamptz not null default now()
);
comment on table internal.process_retention is
  'Retention window of finished business processes, per process; no row: kept forever (the default).';

-- What domain retention removed: one row per process per run that pruned roots.
create table if not exists internal.process_pruned (
  process_pruned_id bigint generated always as identity primary key,
  process         text not null,
  first_root_id   bigint not null,
  last_root_id    bigint not null check (last_root_id >= first_root_id),
  roots           integer not null check (roots > 0),
  finished_before timestamptz not null,
  pruned_at       timestamptz not null default now()
);
create index if not exists process_pruned_process_idx on internal.process_pruned (process, last_root_id);
comment on table internal.process_pruned is
  'Append-only: finished process roots pruned by domain retention (ids first_root_id..last_root_id, not every id in between).';
drop trigger if exists forbid_update on internal.process_pruned;
create trigger forbid_update before update on internal.process_pruned
  for each statement execute function queues.forbid_fact_update();

--!include queues/partitions.sql
--!include internal/retention.sql
--!include comms/retention.sql
--!include files/retention.sql
--!include accounts/retention.sql

-- The conversion. Tables are converted as they are (columns, defaults, checks and
-- identity are copied with LIKE), so columns added by earlier files are kept.
-- Keys lead with task_id (the partition key must be part of every unique key).
-- Foreign keys between queue facts, and from task_pending and resource_lease to task, are
-- not recreated: a partition of a referenced table cannot be dropped while a foreign key
-- points at it, and each fact insert would lock its parent row. The security-definer
-- functions are the only writers; sql/queues/partitions.test.ts checks the relations.
do $convert$
declare
  _tables text[] := queues.history_tables();
  _derived text[] := array['task_pending', 'resource_lease'];
  _table text;
  _index record;
  _seq text;
  _acl record;
  _size bigint;
  _max bigint;
  _lower bigint;
  _constraint record;
begin
  if (select c.relkind from pg_class c where c.oid = 'queues.task'::regclass) = 'p' then
    return;
  end if;

  execute 'lock table ' || (select string_agg(format('queues.%I', t), ', ') from unnest(_tables || _derived) t)
          || ' in access exclusive mode';

  -- Objects bound to the old tables, recreated by the includes below.
  drop view if exists queues.dead_letter;
  drop view if exists queues.task_lease_effective;
  drop function if exists queues.dequeue_next_available_task(text, integer);

  -- Foreign keys from the derived tables to the facts.
  for _constraint in
    select c.conname, c.conrelid::regclass as rel from pg_constraint c
     where c.contype = 'f' and c.confrelid = any (array(select format('queues.%I', t)::regclass from unnest(_tables) t))
       and c.conrelid <> all (array(select format('queues.%I', t)::regclass from unnest(_tables) t))
  loop
    execute format('alter table %s drop constraint %I', _constraint.rel, _constraint.conname);
  end loop;

  -- Old tables, their indexes and identity sequences move aside under *_unpartitioned names.
  foreach _table in array _tables loop
    for _index in
      select ic.relname from pg_index i join pg_class ic on ic.oid = i.indexrelid
       where i.indrelid = format('queues.%I', _table)::regclass
    loop
      execute format('alter index queues.%I rename to %I', _index.relname, _index.relname || '_unpartitioned');
    end loop;
    for _seq in
      select s.relname from pg_depend d join pg_class s on s.oid = d.objid and s.relkind = 'S'
       where d.refobjid = format('queues.%I', _table)::regclass and d.deptype in ('a', 'i')
    loop
      execute format('alter sequence queues.%I rename to %I', _seq, _seq || '_unpartitioned');
    end loop;
    execute format('alter table queues.%I rename to %I', _table, _table || '_unpartitioned');
  end loop;

  -- New partitioned tables.
  foreach _table in array _tables loop
    execute format(
      'create table queues.%I (like queues.%I including defaults including identity including constraints
                                            including generated including comments including storage%s)
         partition by range (task_id)',
      _table, _table || '_unpartitioned',
      case when not exists (select 1 from pg_attribute a
                             where a.attrelid = format('queues.%I', _table || '_unpartitioned')::regclass
                               and a.attname = 'task_id' and not a.attisdropped)
           then ', task_id bigint not null' else '' end);
    execute format('alter table queues.%I alter column task_id set not null', _table);
    execute format('comment on table queues.%I is %L', _table,
                   obj_description(format('queues.%I', _table || '_unpartitioned')::regclass, 'pg_class'));
  end loop;

  alter table queues.task add constraint task_pkey primary key (task_id);
  alter table queues.task add constraint task_task_type_fkey
    foreign key (task_type) references queues.task_type on delete restrict;
  alter table queues.task_lease add constraint task_lease_pkey primary key (task_id, task_lease_id);
  alter table queues.task_completed add constraint task_completed_pkey primary key (task_id);
  create index task_completed_unsuccessful_idx
    on queues.task_completed (completed_at desc) where outcome <> 'succeeded';
  create index task_completed_completed_at_idx on queues.task_completed (completed_at);
  -- Dead letters and the task list filtered by a failed outcome, newest first: a page
  -- costs its own rows, however rare failures are and however long the history.
  create index task_completed_unsuccessful_task_idx on queues.task_completed (task_id) where outcome <> 'succeeded';
  alter table queues.error add constraint error_pkey primary key (task_id, error_id);
  alter table queues.task_lease_extension add constraint task_lease_extension_pkey
    primary key (task_id, task_lease_id, task_lease_extension_id);
  alter table queues.task_lease_release add constraint task_lease_release_pkey primary key (task_id, task_lease_id);
  alter table queues.task_lease_revocation add constraint task_lease_revocation_pkey primary key (task_id, task_lease_id);
  alter table queues.task_attempt_failed add constraint task_attempt_failed_pkey
    primary key (task_id, task_attempt_failed_id);
  alter table queues.task_redriven add constraint task_redriven_pkey primary key (task_id);
  alter table queues.task_lease_started add constraint task_lease_started_pkey primary key (task_id, task_lease_id);
  alter table queues.task_interruption add constraint task_interruption_pkey primary key (task_id, task_lease_id);
  alter table queues.task_cancelled add constraint task_cancelled_pkey primary key (task_id);
  alter table queues.task_result add constraint task_result_pkey primary key (task_id, task_lease_id);
  alter table queues.task_run_now add constraint task_run_now_pkey primary key (task_id);
  create index task_resource_key_idx on queues.task (resource_key, task_id) where resource_key is not null;

  -- Partition sets for the rows there are, plus the sets ahead, plus a default
  -- partition per table so that an enqueue never fails if maintenance fell behind.
  select s.partition_size, s.partition_size * s.partitions_ahead into _size, _max from queues.history_setting s;
  _max := coalesce((select max(t.task_id) from queues.task_unpartitioned t), 0) + 1 + _max;
  _lower := coalesce((select min(t.task_id) from queues.task_unpartitioned t), 1) / _size * _size;
  while _lower < _max loop
    perform queues.create_history_partition(_lower, _lower + _size);
    _lower := _lower + _size;
  end loop;
  foreach _table in array _tables loop
    execute format('create table queues.%I partition of queues.%I default', _table || '_default', _table);
    execute format('create trigger forbid_update before update on queues.%I
                      for each statement execute function queues.forbid_fact_update()', _table || '_default');
  end loop;

  -- The rows, identity values as they were.
  foreach _table in array _tables loop
    if not exists (select 1 from pg_attribute a
                    where a.attrelid = format('queues.%I', _table || '_unpartitioned')::regclass
                      and a.attname = 'task_id' and not a.attisdropped) then
      -- task_id is new (appended last): filled from the lease.
      execute format('insert into queues.%I overriding system value
                        select o.*, l.task_id from queues.%I o
                          join queues.task_lease_unpartitioned l on l.task_lease_id = o.task_lease_id',
                     _table, _table || '_unpartitioned');
    elsif _table <> 'task_lease' and exists (
            select 1 from pg_attribute a
             where a.attrelid = format('queues.%I', _table || '_unpartitioned')::regclass
               and a.attname = 'task_lease_id' and not a.attisdropped) then
      -- A lease fact that has task_id already: rows written before it was filled get it
      -- from their lease.
      execute format('insert into queues.%I (%s) overriding system value select %s from queues.%I o',
                     _table,
                     (select string_agg(quote_ident(a.attname), ', ' order by a.attnum) from pg_attribute a
                       where a.attrelid = format('queues.%I', _table || '_unpartitioned')::regclass
                         and a.attnum > 0 and not a.attisdropped),
                     (select string_agg(case when a.attname = 'task_id'
                                             then 'coalesce(o.task_id, (select l.task_id from queues.task_lease_unpartitioned l
                                                                        where l.task_lease_id = o.task_lease_id))'
                                             else 'o.' || quote_ident(a.attname) end, ', ' order by a.attnum)
                        from pg_attribute a
                       where a.attrelid = format('queues.%I', _table || '_unpartitioned')::regclass
                         and a.attnum > 0 and not a.attisdropped),
                     _table || '_unpartitioned');
    else
      execute format('insert into queues.%I overriding system value select * from queues.%I',
                     _table, _table || '_unpartitioned');
    end if;
  end loop;

  -- Identity sequences continue where the old ones stopped.
  foreach _table in array _tables loop
    for _seq in
      select a.attname from pg_attribute a
       where a.attrelid = format('queues.%I', _table)::regclass and a.attidentity <> '' and not a.attisdropped
    loop
      perform setval(pg_get_serial_sequence(format('queues.%I', _table), _seq),
                     s.last_value, s.is_called)
         from pg_sequences ps,
              lateral (select ps.last_value is not null as is_called,
                              coalesce(ps.last_value, ps.start_value) as last_value) s
        where ps.schemaname = 'queues'
          and ps.sequencename = (parse_ident(pg_get_serial_sequence(format('queues.%I', _table || '_unpartitioned'), _seq)))[2];
    end loop;
  end loop;

  -- Privileges as they were, and the statement trigger that refuses updates.
  foreach _table in array _tables loop
    for _acl in
      select a.grantee, a.privilege_type, a.is_grantable
        from pg_class c, aclexplode(c.relacl) a
       where c.oid = format('queues.%I', _table || '_unpartitioned')::regclass
         and a.grantee <> c.relowner
    loop
      execute format('grant %s on queues.%I to %s%s', _acl.privilege_type, _table,
                     case when _acl.grantee = 0 then 'public' else quote_ident(pg_get_userbyid(_acl.grantee)) end,
                     case when _acl.is_grantable then ' with grant option' else '' end);
    end loop;
    execute format('create trigger forbid_update before update on queues.%I
                      for each statement execute function queues.forbid_fact_update()', _table);
    -- Any other trigger of the old table (e.g. one run on TRUNCATE), as it was defined.
    for _index in
      select pg_get_triggerdef(t.oid) as relname from pg_trigger t
       where t.tgrelid = format('queues.%I', _table || '_unpartitioned')::regclass
         and not t.tgisinternal and t.tgname <> 'forbid_update'
    loop
      execute replace(_index.relname, format(' ON queues.%I ', _table || '_unpartitioned'),
                      format(' ON queues.%I ', _table));
    end loop;
  end loop;

  -- One statement: the old tables reference each other.
  execute 'drop table ' || (select string_agg(format('queues.%I', t || '_unpartitioned'), ', ') from unnest(_tables) t);
end;
$convert$;

-- TRUNCATE queues.task empties every history table: no foreign key is left for CASCADE
-- to follow (replaces the version of migrations/current/120-hotpath.sql, which left the
-- cold facts to their foreign keys).
create or replace function queues.truncate_task_facts() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  truncate queues.task_pending, queues.resource_lease, queues.task_lease, queues.task_completed,
           queues.error, queues.task_lease_extension, queues.task_lease_release,
           queues.task_lease_revocation, queues.task_attempt_failed, queues.task_redriven,
           queues.task_lease_started, queues.task_interruption, queues.task_cancelled,
           queues.task_result, queues.task_run_now;
  return null;
end;
$$;

-- Lease facts carry their task's id, so lookups by lease are pruned to one partition.
--!include queues/task_lease_effective.sql
--!include queues/dead_letter.sql
--!include queues/claim.sql
--!include queues/lease.sql
--!include queues/workers.sql
--!include queues/maintenance.sql
--!include admin/workers.sql
--!include admin/tasks.sql
--!include queues/fail.sql
--!include queues/interrupt.sql
--!include admin/capacity.sql
--!include admin/metrics.sql
--!include admin/history.sql
--!include admin/processes.sql
-- Grants again what the conversion dropped and recreated (dequeue_next_available_task).
--!include queues/privileges.sql

-- Partition maintenance every 10 minutes, run by our own schedules supervisor as a
-- db_function task (sql/schedules): installed enabled, once (an operator's later
-- changes, such as disabling it, are kept when this file runs again). Like every
-- schedule it runs once a supervisor task is pending: deploys call
-- schedules.ensure_schedule_supervisor() after migrating (`npm start` does), and any
-- schedule change starts it. Nothing is enqueued here, so a fresh database holds no task.
do $$
declare
  _message text := schedules.schedule_definition_error(
    'queue_history_maintenance', '*/10 * * * *', 'db_function',
    '{"db_function": "queues.maintain_history"}', 100, 'skip');
  _schedule_id bigint;
begin
  if _message is not null then
    raise exception 'schedule queue_history_maintenance: %', _message;
  end if;
  if exists (select 1 from schedules.schedule s where s.name = 'queue_history_maintenance') then
    return;
  end if;
  insert into schedules.schedule (name) values ('queue_history_maintenance') returning schedule_id into _schedule_id;
  perform schedules.append_schedule_version(
    now(), _schedule_id, '*/10 * * * *', 'db_function', '{"db_function": "queues.maintain_history"}', 100, 'skip', true);
end;
$$;
