-- The file deletion process: facts → logic → effects, the handlers the worker calls
-- around the files service, and the kickoff.
--
--   files.kickoff_file_deletion(file_id)   root task + first supervisor task (idempotent)
--   files.file_deletion_supervisor         db_function: decides, schedules, re-enqueues
--   files.get_file_delete_payload          before_handler: {file_id, idempotency_key, bucket, object_key}
--   files.record_file_delete_success       success_handler: attempt succeeded, file marked deleted
--   files.record_file_delete_failure       error_handler: attempt failed
--   files.is_file_deletion_stuck(file_id)  for parents: the deletion has given up

-- Limits ------------------------------------------------------------------------------

-- Storage deletions per file before the process gives up (and is "stuck").
create or replace function files.file_deletion_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 5 $$;

-- Non-terminal supervisor runs per file (see comms.send_email_max_supervisor_runs).
create or replace function files.file_deletion_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 40 $$;

-- Facts -------------------------------------------------------------------------------

create or replace function files.has_file_deletion_succeeded_attempt(_file_deletion_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from files.file_deletion_attempt a
      join files.file_deletion_attempt_succeeded s using (file_deletion_attempt_id)
     where a.file_deletion_task_id = _file_deletion_task_id)
$$;

create or replace function files.count_file_deletion_attempts(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_attempt a
   where a.file_deletion_task_id = _file_deletion_task_id
$$;

-- Failed attempts (an attempt with both outcomes counts as succeeded).
create or replace function files.count_file_deletion_failed_attempts(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_attempt a
    join files.file_deletion_attempt_failed f using (file_deletion_attempt_id)
   where a.file_deletion_task_id = _file_deletion_task_id
     and not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
$$;

create or replace function files.count_file_deletion_outstanding_attempts(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_attempt a
   where a.file_deletion_task_id = _file_deletion_task_id
     and not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
     and not exists (select 1 from files.file_deletion_attempt_failed f
                      where f.file_deletion_attempt_id = a.file_deletion_attempt_id)
$$;

create or replace function files.count_file_deletion_supervisor_runs(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_supervisor_run r
   where r.file_deletion_task_id = _file_deletion_task_id
$$;

create or replace function files.has_file_deletion_task_succeeded(_file_deletion_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from files.file_deletion_task_succeeded t
                  where t.file_deletion_task_id = _file_deletion_task_id)
$$;

create or replace function files.get_file_deletion_task_failure(_file_deletion_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from files.file_deletion_task_failed t
   where t.file_deletion_task_id = _file_deletion_task_id
$$;

-- True when the file's deletion has given up: a terminal failure is recorded, or its
-- failed attempts reached the maximum (before the supervisor's next run records it).
create or replace function files.is_file_deletion_stuck(_file_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((
    select files.get_file_deletion_task_failure(t.file_deletion_task_id) is not null
           or files.count_file_deletion_failed_attempts(t.file_deletion_task_id) >= files.file_deletion_max_attempts()
      from files.file_deletion_task t
     where t.file_id = _file_id), false)
$$;

create or replace function files.file_deletion_supervisor_facts(
  _file_deletion_task_id bigint,
  out file_id            bigint,
  out has_task_succeeded boolean,
  out task_failure       text,
  out has_success        boolean,
  out num_attempts       integer,
  out num_failures       integer,
  out num_outstanding    integer,
  out num_runs           integer
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.file_id,
         files.has_file_deletion_task_succeeded(t.file_deletion_task_id),
         files.get_file_deletion_task_failure(t.file_deletion_task_id),
         files.has_file_deletion_succeeded_attempt(t.file_deletion_task_id),
         files.count_file_deletion_attempts(t.file_deletion_task_id),
         files.count_file_deletion_failed_attempts(t.file_deletion_task_id),
         files.count_file_deletion_outstanding_attempts(t.file_deletion_task_id),
         files.count_file_deletion_supervisor_runs(t.file_deletion_task_id)
    from files.file_deletion_task t
   where t.file_deletion_task_id = _file_deletion_task_id
$$;

-- True when the account's deletion ended in failure (its files are then left alone).
create or replace function files.has_account_deletion_failed(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_deletion_task d
                   join accounts.account_deletion_task_failed f using (account_deletion_task_id)
                  where d.account_id = _account_id)
$$;

-- Facts about an account's files, for the account deletion supervisor. Children are
-- found from current state (files.file.account_id), never from a payload.
create or replace function files.account_file_deletion_facts(
  _account_id bigint,
  out num_files              integer,
  out num_files_without_task integer,
  out num_files_deleted      integer,
  out stuck_file_ids         bigint[]
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer,
         count(*) filter (where t.file_deletion_task_id is null)::integer,
         count(*) filter (where files.has_file_deletion_task_succeeded(t.file_deletion_task_id))::integer,
         coalesce(array_agg(f.file_id order by f.file_id)
                    filter (where t.file_deletion_task_id is not null and files.is_file_deletion_stuck(f.file_id)),
                  '{}')
    from files.file f
    left join files.file_deletion_task t on t.file_id = f.file_id
   where f.account_id = _account_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row (FOR NO KEY UPDATE: see comms.lock_send_email_task for why).
create or replace function files.lock_file_deletion_task(_file_deletion_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from files.file_deletion_task t
   where t.file_deletion_task_id = _file_deletion_task_id
     for no key update;
  return found;
end;
$$;

-- Records a failure for every attempt whose file_delete task the queue gave up on
-- (internal.queue_gave_up_message) without an outcome; returns how many.
create or replace function files.close_given_up_file_deletion_attempts(_file_deletion_task_id bigint)
  returns integer
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  with closed as (
    insert into files.file_deletion_attempt_failed (file_deletion_attempt_id, error_message)
    select a.file_deletion_attempt_id, internal.queue_gave_up_message(a.task_id)
      from files.file_deletion_attempt a
     where a.file_deletion_task_id = _file_deletion_task_id
       and internal.queue_gave_up_message(a.task_id) is not null
       and not exists (select 1 from files.file_deletion_attempt_succeeded s
                        where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
       and not exists (select 1 from files.file_deletion_attempt_failed f
                        where f.file_deletion_attempt_id = a.file_deletion_attempt_id)
    on conflict do nothing
    returning 1)
  select count(*)::integer from closed
$$;

create or replace function files.record_file_deletion_supervisor_run(_file_deletion_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into files.file_deletion_supervisor_run (file_deletion_task_id) values (_file_deletion_task_id)
$$;

create or replace function files.record_file_deletion_task_succeeded(_file_deletion_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into files.file_deletion_task_succeeded (file_deletion_task_id) values (_file_deletion_task_id)
  on conflict do nothing
$$;

create or replace function files.record_file_deletion_task_failed(_file_deletion_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into files.file_deletion_task_failed (file_deletion_task_id, reason) values (_file_deletion_task_id, _reason)
  on conflict do nothing
$$;

-- Records an attempt and enqueues the file_delete channel task for it.
create or replace function files.schedule_file_deletion_attempt(_file_deletion_task_id bigint, _file_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  -- Drawn first (the payload names it), written after the enqueue (it names the task).
  _attempt_id bigint := nextval(pg_get_serial_sequence('files.file_deletion_attempt', 'file_deletion_attempt_id'));
  _queue_task_id bigint;
begin
  _queue_task_id := queues.enqueue_internal('file_delete', jsonb_build_object(
    'task_type', 'file_delete',
    'file_deletion_task_id', _file_deletion_task_id,
    'file_deletion_attempt_id', _attempt_id,
    'file_id', _file_id,
    'before_handler', 'files.get_file_delete_payload',
    'success_handler', 'files.record_file_delete_success',
    'error_handler', 'files.record_file_delete_failure'));
  insert into files.file_deletion_attempt (file_deletion_attempt_id, file_deletion_task_id, task_id)
  overriding system value
  values (_attempt_id, _file_deletion_task_id, _queue_task_id);
  return _attempt_id;
end;
$$;

-- Next supervisor run: 5 s · 2^(runs − 1), capped at an hour (as comms).
create or replace function files.schedule_file_deletion_recheck(_file_deletion_task_id bigint, _num_runs integer)
  returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz :=
    now() + internal.backoff(_num_runs - 1, 3600);
begin
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'files.file_deletion_supervisor',
    'file_deletion_task_id', _file_deletion_task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Drives one file_deletion_task to a terminal fact. Payload: {file_deletion_task_id}.
-- Envelopes as comms.send_email_supervisor. Raises 25000 outside READ COMMITTED.
create or replace function files.file_deletion_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'file_deletion_task_id');
  _facts record;
  _attempt_id bigint;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return internal.validation_failure('file_deletion_task_id must be a positive integer');
  end if;
  perform internal.assert_read_committed('files.file_deletion_supervisor');
  if not files.lock_file_deletion_task(_task_id) then
    return internal.validation_failure(format('file_deletion_task %s not found', _task_id));
  end if;

  perform files.close_given_up_file_deletion_attempts(_task_id);
  _facts := files.file_deletion_supervisor_facts(_task_id);

  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform files.record_file_deletion_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures >= files.file_deletion_max_attempts() then
    perform files.record_file_deletion_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached',
                              'payload', jsonb_build_object('num_failures', _facts.num_failures));
  end if;
  if _facts.num_runs >= files.file_deletion_max_supervisor_runs() then
    perform files.record_file_deletion_task_failed(_task_id, 'run_limit_reached');
    return jsonb_build_object('status', 'run_limit_reached',
                              'payload', jsonb_build_object('num_runs', _facts.num_runs));
  end if;

  perform files.record_file_deletion_supervisor_run(_task_id);
  if _facts.num_outstanding = 0 then
    _attempt_id := files.schedule_file_deletion_attempt(_task_id, _facts.file_id);
  end if;
  _next_check_at := files.schedule_file_deletion_recheck(_task_id, _facts.num_runs + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
    'file_deletion_attempt_id', _attempt_id,
    'next_check_at', _next_check_at));
end;
$$;

-- Handlers ----------------------------------------------------------------------------

-- before_handler: the provider payload of @org/handler-types fileDeletePayload, with
-- idempotency_key = the attempt id. An attempt with an outcome is not run again.
create or replace function files.get_file_delete_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload, 'file_deletion_attempt_id');
  _provider_payload jsonb;
  _ended text;
begin
  if _attempt_id is null then
    return internal.validation_failure('file_deletion_attempt_id must be a positive integer');
  end if;
  if exists (select 1 from files.file_deletion_attempt_succeeded s where s.file_deletion_attempt_id = _attempt_id)
     or exists (select 1 from files.file_deletion_attempt_failed f where f.file_deletion_attempt_id = _attempt_id) then
    return internal.validation_failure(format('file_deletion_attempt %s already has an outcome; not deleting again', _attempt_id));
  end if;
  -- Nothing is deleted for a process that already ended, nor for a file whose account
  -- deletion failed (its files must stay as they are for whoever resolves it).
  select case
           when files.has_file_deletion_task_succeeded(t.file_deletion_task_id)
             or files.get_file_deletion_task_failure(t.file_deletion_task_id) is not null
             then format('file_deletion_task %s already ended (%s); not deleting for attempt %s', t.file_deletion_task_id,
                         coalesce(files.get_file_deletion_task_failure(t.file_deletion_task_id), 'succeeded'), _attempt_id)
           when files.has_account_deletion_failed(f.account_id)
             then format('the deletion of account %s failed; not deleting file %s for attempt %s', f.account_id, f.file_id, _attempt_id)
         end
    into _ended
    from files.file_deletion_attempt a
    join files.file_deletion_task t using (file_deletion_task_id)
    join files.file f on f.file_id = t.file_id
   where a.file_deletion_attempt_id = _attempt_id;
  if _ended is not null then
    return internal.validation_failure(_ended);
  end if;
  select jsonb_build_object(
           'file_id', f.file_id,
           'idempotency_key', a.file_deletion_attempt_id::text,
           'bucket', f.bucket,
           'object_key', f.object_key)
    into _provider_payload
    from files.file_deletion_attempt a
    join files.file_deletion_task t using (file_deletion_task_id)
    join files.file f on f.file_id = t.file_id
   where a.file_deletion_attempt_id = _attempt_id;
  if _provider_payload is null then
    return internal.validation_failure(format('file_deletion_attempt %s not found', _attempt_id));
  end if;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- success_handler: records the attempt's success and marks the file deleted.
-- Idempotent.
create or replace function files.record_file_delete_success(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'file_deletion_attempt_id');
  _file_id bigint;
begin
  if _attempt_id is null then
    return internal.validation_failure('original_payload.file_deletion_attempt_id must be a positive integer');
  end if;
  select t.file_id into _file_id
    from files.file_deletion_attempt a join files.file_deletion_task t using (file_deletion_task_id)
   where a.file_deletion_attempt_id = _attempt_id;
  if _file_id is null then
    return internal.validation_failure(format('file_deletion_attempt %s not found', _attempt_id));
  end if;
  insert into files.file_deletion_attempt_succeeded (file_deletion_attempt_id, worker_payload)
  values (_attempt_id, payload -> 'worker_payload')
  on conflict do nothing;
  perform files.mark_file_deleted(_file_id);
  return jsonb_build_object('success', true);
end;
$$;

-- error_handler: records the attempt's failure unless it succeeded. Idempotent.
create or replace function files.record_file_delete_failure(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', 'file_deletion_attempt_id');
begin
  if _attempt_id is null then
    return internal.validation_failure('original_payload.file_deletion_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from files.file_deletion_attempt a where a.file_deletion_attempt_id = _attempt_id) then
    return internal.validation_failure(format('file_deletion_attempt %s not found', _attempt_id));
  end if;
  insert into files.file_deletion_attempt_failed (file_deletion_attempt_id, error_message)
  select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
   where not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = _attempt_id)
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

-- Kickoff -----------------------------------------------------------------------------

-- Starts deleting a file at _scheduled_at (NULL: now). Idempotent per file; bad input
-- returns a validation_failure_message and writes nothing.
create or replace function files.kickoff_file_deletion(
  _file_id bigint,
  _scheduled_at timestamptz default null,
  out file_deletion_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _file_id is null then
    validation_failure_message := 'file_id is required';
    return;
  end if;
  if not exists (select 1 from files.file f where f.file_id = _file_id) then
    validation_failure_message := format('file %s not found', _file_id);
    return;
  end if;

  insert into files.file_deletion_task (file_id) values (_file_id)
  on conflict (file_id) do nothing
  returning file_deletion_task.file_deletion_task_id into file_deletion_task_id;

  if file_deletion_task_id is null then
    select t.file_deletion_task_id into file_deletion_task_id
      from files.file_deletion_task t where t.file_id = _file_id;
    return;
  end if;

  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'files.file_deletion_supervisor',
    'file_deletion_task_id', file_deletion_task_id), coalesce(_scheduled_at, now()));
end;
$$;
