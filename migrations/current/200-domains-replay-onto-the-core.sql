set local lock_timeout = '5s';
-- A channel process registered on tables an older internal.create_channel_process_tables
-- made (a business domain's migrations replayed onto a newer core when an app adds the
-- domain later, docs/design/migration-parts.md) gets the columns the current one adds.
--!include internal/channel_process.sql

-- Migration 000004 dropped every foreign key to the queue's history tables when it
-- partitioned them, the ones of comms and files included. A domain added to a database
-- after that replays its own migrations only (docs/design/migration-parts.md), so its
-- tables get those keys back from 000002; each domain drops them again here. No-op on a
-- database migrated in one history.
do $$
declare
  _c record;
begin
  for _c in
    select c.conname, c.conrelid::regclass as rel from pg_constraint c
     where c.contype = 'f' and c.conparentid = 0 and c.connamespace = 'comms'::regnamespace
       and c.confrelid = any (array(select format('queues.%I', t)::regclass from unnest(queues.history_tables()) t))
  loop
    execute format('alter table %s drop constraint %I', _c.rel, _c.conname);
  end loop;
end;
$$;

do $$
declare
  _c record;
begin
  for _c in
    select c.conname, c.conrelid::regclass as rel from pg_constraint c
     where c.contype = 'f' and c.conparentid = 0 and c.connamespace = 'files'::regnamespace
       and c.confrelid = any (array(select format('queues.%I', t)::regclass from unnest(queues.history_tables()) t))
  loop
    execute format('alter table %s drop constraint %I', _c.rel, _c.conname);
  end loop;
end;
$$;

-- The process view knows the processes of the business domains installed only: a database
-- with the queue's core alone lists none, and refuses their names as unknown (22023).
--!include admin/processes.sql

-- A process's children come from its domain (S.X_children(root_id), the account
-- deletion's in accounts): the core's process tree and timeline name no domain's table.
--!include accounts/progress.sql
--!include admin/process_tree.sql
