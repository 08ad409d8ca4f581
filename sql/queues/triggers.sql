-- Trigger functions of the queue's tables, also used by every domain's fact tables.

-- Facts are never updated: a statement-level `before update` trigger on every fact table
-- (queues, comms, files, accounts, schedules) calls this.
create or replace function queues.forbid_fact_update() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception '%.% is append-only: rows are never updated', tg_table_schema, tg_table_name
    using errcode = '55000';
end;
$$;

-- Wake listening workers: one notification per statement that adds ready work, not
-- one per row (NOTIFY takes a global lock at commit).
create or replace function queues.notify_task_ready() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform pg_notify('queues_task_ready', '');
  return null;
end;
$$;
