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

-- Wake-ups (NOTIFY queues_task_ready) are sent by the functions that add ready work
-- (queues.enqueue_task, queues.enqueue_tasks, queues.rebuild_task_pending, releases and
-- run-now requests), not by a trigger: see sql/queues/enqueue.sql for why an enqueue may
-- send its wake-up after its commit.

-- queues.task has no foreign key to queues.task_type (it cost every enqueued task a row
-- lock on its type). This `before delete or update of task_type` row trigger on
-- queues.task_type, and a `before truncate` one, refuse to remove a type that tasks
-- still name (23503, as the key's ON DELETE RESTRICT did). LOCK ... SHARE waits for
-- every transaction that is inserting tasks (they hold ROW EXCLUSIVE on queues.task until
-- they end) and keeps new ones out until this one ends; the check then sees all their
-- tasks. An enqueue re-reads its type in the statement that inserts the task, after it
-- holds its lock on queues.task, so it never inserts a type this removed.
create or replace function queues.guard_task_type_in_use() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
declare
  _type text;
begin
  if tg_op = 'UPDATE' and new.task_type = old.task_type then
    return new;
  end if;
  lock table queues.task in share mode;
  if tg_op = 'TRUNCATE' then
    select t.task_type into _type from queues.task t limit 1;
  else
    select t.task_type into _type from queues.task t where t.task_type = old.task_type limit 1;
  end if;
  if found then
    raise exception 'task_type % is named by tasks in queues.task', quote_literal(_type)
      using errcode = '23503', schema = 'queues', table = 'task_type';
  end if;
  return case tg_op when 'DELETE' then old when 'UPDATE' then new end;
end;
$$;
