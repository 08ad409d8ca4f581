-- Dead letters: tasks that ended badly with nobody else to deal with it, and redrive.
--
-- A task is a dead letter when it completed 'abandoned', or 'failed' without an
-- error_handler in its payload (a task with an error handler hands its failures to a
-- supervisor, which retries on its own), and it has not been redriven.

-- task_id is the completion's, so that a page's bound and order (task_id < $n order by
-- task_id desc) walk task_completed_unsuccessful_task_idx from the bound down.
-- admin.list_dead_letters (sql/admin/dead_letters.sql) repeats this definition with the
-- bounds of one partition set: change both together.
create or replace view queues.dead_letter as
select c.task_id, t.task_type, t.payload, c.outcome, c.completed_at,
       (select e.error_message from queues.error e where e.task_id = t.task_id
         order by e.error_id desc limit 1) as last_error,
       (select count(*)::integer from queues.task_leases_of(t.task_id)) as attempts
  from queues.task_completed c
  join queues.task t on t.task_id = c.task_id
 where c.outcome <> 'succeeded'
   and (c.outcome = 'abandoned' or (c.outcome = 'failed' and not t.payload ? 'error_handler'))
   and not exists (select 1 from queues.task_redriven r where r.task_id = t.task_id);
comment on view queues.dead_letter is 'Tasks that ended failed or abandoned with no handler to deal with it, not yet redriven.';

-- The dependencies a redrive of _task_id gives its copy: each task the original depended
-- on, or, where that task was redriven, its newest redrive copy (queues.task_redriven
-- followed to its end), with how it ended (queues.task_end_of; null while it is pending).
-- No grants.
create or replace function queues.redrive_dependencies(_task_id bigint)
  returns table (task_id bigint, outcome text)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with recursive chain as (
    select d.depends_on_task_id as current
      from queues.task_dependency d
     where d.task_id = _task_id
    union
    select r.new_task_id from chain c join queues.task_redriven r on r.task_id = c.current
  )
  select c.current, (select e.outcome from queues.task_end_of(c.current) e limit 1)
    from chain c
   where not exists (select 1 from queues.task_redriven r where r.task_id = c.current)
   order by c.current
$$;

-- Why _task_id cannot be redriven now, or null: one of its dependencies (as
-- queues.redrive_dependencies gives them) ended other than succeeded and was not
-- redriven, so its copy would fail at once. No grants.
create or replace function queues.redrive_blocker(_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select format('task %s cannot be redriven: its dependency task %s ended %s and was not redriven',
                _task_id, d.task_id, d.outcome)
    from queues.redrive_dependencies(_task_id) d
   where d.outcome <> 'succeeded'
   order by d.task_id
   limit 1
$$;

-- Sends a dead letter round again: a new task with the same type, payload, priority,
-- resource key, max_attempts, group key and timeout, runnable now. A task that had
-- dependencies gets them again (queues.redrive_dependencies: where a dependency was
-- redriven, its newest copy): the copy waits for those still pending, and counts those
-- that succeeded at once. Refused (55000, nothing written) while a dependency ended
-- otherwise and was not redriven (queues.redrive_blocker): redrive that one first (a
-- redrive of both in one admin.redrive_tasks call takes them in task id order, so
-- dependencies first). Returns the new task id.
create or replace function queues.redrive_task(_task_id bigint)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task queues.task;
  _new_task_id bigint;
  _blocker text;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  select * into _task from queues.task t where t.task_id = _task_id;
  if not found then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  -- Serialise redrives of one task on its completion row.
  perform 1 from queues.task_completed c where c.task_id = _task_id for update;
  if exists (select 1 from queues.task_redriven r where r.task_id = _task_id) then
    raise exception 'task % was already redriven', _task_id using errcode = '22023';
  end if;
  if not exists (select 1 from queues.dead_letter d where d.task_id = _task_id) then
    raise exception 'task % is not a dead letter', _task_id using errcode = '22023',
      hint = 'Only tasks that completed failed (without an error handler) or abandoned can be redriven.';
  end if;
  _blocker := queues.redrive_blocker(_task_id);
  if _blocker is not null then
    raise exception '%', _blocker using errcode = '55000',
      hint = 'Redrive the dependency first, or both in one call (dependencies are redriven first).';
  end if;
  _new_task_id := queues.enqueue_internal(_task.task_type, _task.payload, now(), _task.priority,
                                 _task.resource_key, _task.max_attempts,
                                 nullif(array(select d.task_id from queues.redrive_dependencies(_task_id) d), '{}'),
                                 _task.group_key, _task.timeout_ms);
  insert into queues.task_redriven (task_id, new_task_id) values (_task_id, _new_task_id);
  return _new_task_id;
end;
$$;
