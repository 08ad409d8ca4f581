-- queues.interrupt_task: a task's run was cut short by a transient error (a deadlock,
-- a serialization failure, a lost connection): nothing of the run was recorded, and
-- the task should run again. Unlike a release, an interruption counts: it is recorded
-- with its message (queues.task_interruption, not a task error), the task runs again
-- after a backoff (1 s, 2 s, 4 s, ... times internal.backoff's backoff_scale), and the
-- task whose runs keep being interrupted is abandoned with the last message as its error
-- after _max_interruptions (default 5), so a step that always deadlocks ends as a dead
-- letter instead of looping forever.
--
-- Fenced: only the task's current lease, while it holds the task's resource key, may
-- interrupt. Returns
--   'retry_scheduled'  the lease ended; the task runs again at the retry time
--   'abandoned'        this was interruption number _max_interruptions: completed 'abandoned'
--   'lease_lost'       the lease is no longer current (nothing changed)
--   'unknown_task'     no such task

create or replace function queues.interrupt_task_at(
  _now                timestamptz,
  _task_id            bigint,
  _task_lease_id      bigint,
  _error_message      text,
  _max_interruptions  integer
) returns text
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending queues.task_pending;
  _message text := _error_message;
  _retry_at timestamptz;
begin
  if _now is null or _task_id is null or _task_lease_id is null then
    raise exception 'now, task_id and task_lease_id must not be null' using errcode = '22004';
  end if;
  if _message is null or btrim(_message) = '' then
    raise exception 'error_message must not be empty' using errcode = '22004';
  end if;
  if _max_interruptions is null or _max_interruptions not between 1 and 100 then
    raise exception 'max_interruptions must be between 1 and 100, got %', coalesce(_max_interruptions::text, 'null')
      using errcode = '22023';
  end if;
  if length(_message) > queues.max_error_message_length() then
    _message := left(_message, queues.max_error_message_length()) || ' [truncated]';
  end if;

  perform queues.lock_resource_keys(array[_task_id]);
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(array[_task_id]);
  select p.* into _pending
    from queues.task_pending p
   where p.task_id = _task_id
     and p.current_lease_id = _task_lease_id
     and (p.resource_key is null
          or exists (select 1 from queues.resource_lease r
                      where r.resource_key = p.resource_key and r.task_id = p.task_id))
     for update;
  if not found then
    if not exists (select 1 from queues.task t where t.task_id = _task_id) then
      return 'unknown_task';
    end if;
    return 'lease_lost';
  end if;

  delete from queues.resource_lease r
   where _pending.resource_key is not null and r.resource_key = _pending.resource_key and r.task_id = _task_id;

  if _pending.interrupted_count + 1 >= _max_interruptions then
    insert into queues.error (task_id, task_lease_id, error_message)
    values (_task_id, _task_lease_id,
            format('abandoned: %s transient errors (max %s); the last: %s',
                   _pending.interrupted_count + 1, _max_interruptions, _message));
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
    values (_task_id, _task_lease_id, _now, 'abandoned', _pending.task_type);
    delete from queues.task_pending p where p.task_id = _task_id;
    return 'abandoned';
  end if;

  _retry_at := _now + internal.backoff(_pending.interrupted_count, 300) / 5;
  insert into queues.task_lease_release (task_id, task_lease_id, released_at) values (_task_id, _task_lease_id, _now)
  on conflict do nothing;
  insert into queues.task_interruption (task_lease_id, task_id, interrupted_at, retry_at, error_message)
  values (_task_lease_id, _task_id, _now, _retry_at, _message);
  -- Counted as a release (it is not an expired lease) and as an interruption.
  update queues.task_pending p
     set available_at = _retry_at,
         current_lease_id = null,
         released_count = p.released_count + 1,
         interrupted_count = p.interrupted_count + 1
   where p.task_id = _task_id;
  return 'retry_scheduled';
end;
$$;

create or replace function queues.interrupt_task(
  _task_id           bigint,
  _task_lease_id     bigint,
  _error_message     text,
  _max_interruptions integer default null
) returns text
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.interrupt_task_at(now(), _task_id, _task_lease_id, _error_message, coalesce(_max_interruptions, 5))
$$;
