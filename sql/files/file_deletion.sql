-- The file deletion process on the shared channel skeleton (sql/internal/channel_process.sql).
-- What is particular to it: the file_id in each file_delete task, the provider payload,
-- no deletion for a file whose account deletion failed, the file marked deleted on
-- success, and the facts its parent (account deletion) and the files service ask.
--
--   files.kickoff_file_deletion(file_id)   root task + first supervisor task (idempotent)
--   files.file_deletion_supervisor         db_function: internal.run_channel_supervisor
--   files.get_file_delete_payload          before_handler: {file_id, idempotency_key, bucket, object_key}
--   files.record_file_delete_success       success_handler: attempt succeeded, file marked deleted
--   files.record_file_delete_failure       error_handler: attempt failed
--   files.is_file_deletion_stuck(file_id)  for parents: the deletion has given up

-- The file_id of a deletion, added to each of its file_delete tasks.
create or replace function files.file_delete_attempt_payload(_file_deletion_task_id bigint)
  returns jsonb
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('file_id', t.file_id) from files.file_deletion_task t
   where t.file_deletion_task_id = _file_deletion_task_id
$$;

-- Limits: 5 storage deletions per file before the process gives up (and is "stuck"); 40
-- non-terminal supervisor runs.
select internal.register_channel_process('files', 'file_deletion', 'file_delete',
  _supervisor => 'files.file_deletion_supervisor', _before_handler => 'files.get_file_delete_payload',
  _success_handler => 'files.record_file_delete_success', _error_handler => 'files.record_file_delete_failure',
  _max_attempts => 5, _max_supervisor_runs => 40, _backoff_cap_seconds => 3600,
  _attempt_payload => 'files.file_delete_attempt_payload(bigint)');

-- Facts -------------------------------------------------------------------------------

-- What the supervisor sees for a file's deletion, with its file_id (select * from
-- files.file_deletion_supervisor_facts(123)).
create or replace function files.file_deletion_supervisor_facts(
  _file_deletion_task_id bigint,
  out file_id             bigint,
  out has_task_succeeded  boolean,
  out task_failure        text,
  out has_success         boolean,
  out num_attempts        integer,
  out num_failures        integer,
  out num_outstanding     integer,
  out num_runs            integer,
  out has_unknown_outcome boolean
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.file_id, f.*
    from files.file_deletion_task t
   cross join lateral internal.channel_process_facts('files', 'file_deletion', t.file_deletion_task_id) f
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
    select f.task_failure is not null
           or f.num_failures >= (internal.get_channel_process('files', 'file_deletion')).max_attempts
      from files.file_deletion_task t
     cross join lateral internal.channel_process_facts('files', 'file_deletion', t.file_deletion_task_id) f
     where t.file_id = _file_id), false)
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
         count(*) filter (where exists (select 1 from files.file_deletion_task_succeeded s
                                         where s.file_deletion_task_id = t.file_deletion_task_id))::integer,
         coalesce(array_agg(f.file_id order by f.file_id)
                    filter (where t.file_deletion_task_id is not null and files.is_file_deletion_stuck(f.file_id)),
                  '{}')
    from files.file f
    left join files.file_deletion_task t on t.file_id = f.file_id
   where f.account_id = _account_id
$$;

-- Supervisor and handlers -------------------------------------------------------------

-- Payload: {file_deletion_task_id}. The envelopes and the order of its checks:
-- internal.run_channel_supervisor.
create or replace function files.file_deletion_supervisor(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.run_channel_supervisor('files', 'file_deletion', payload) $$;

-- before_handler: the provider payload of @org/contracts fileDeletePayload, with
-- idempotency_key = the attempt id. Refused (validation failure): an attempt with an
-- outcome or of an ended process, and a file whose account deletion failed (its files
-- must stay as they are for whoever resolves it).
create or replace function files.get_file_delete_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload, 'file_deletion_attempt_id');
  _refusal text;
  _file files.file;
begin
  if _attempt_id is null then
    return internal.validation_failure('file_deletion_attempt_id must be a positive integer');
  end if;
  _refusal := internal.channel_attempt_refusal('files', 'file_deletion', _attempt_id, 'deleting');
  if _refusal is not null then
    return internal.validation_failure(_refusal);
  end if;
  select f.* into _file
    from files.file_deletion_attempt a
    join files.file_deletion_task t using (file_deletion_task_id)
    join files.file f on f.file_id = t.file_id
   where a.file_deletion_attempt_id = _attempt_id;
  if files.has_account_deletion_failed(_file.account_id) then
    return internal.validation_failure(format('the deletion of account %s failed; not deleting file %s for attempt %s',
                                              _file.account_id, _file.file_id, _attempt_id));
  end if;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'file_id', _file.file_id,
    'idempotency_key', _attempt_id::text,
    'bucket', _file.bucket,
    'object_key', _file.object_key));
end;
$$;

-- success_handler: records the attempt's success and marks the file deleted. Idempotent.
create or replace function files.record_file_delete_success(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb := internal.record_channel_attempt_success('files', 'file_deletion', payload);
begin
  if (_result ->> 'success')::boolean then
    perform files.mark_file_deleted(t.file_id)
       from files.file_deletion_attempt a join files.file_deletion_task t using (file_deletion_task_id)
      where a.file_deletion_attempt_id = internal.id_from_payload(payload -> 'original_payload', 'file_deletion_attempt_id');
  end if;
  return _result;
end;
$$;

-- error_handler: records the attempt's failure unless it succeeded. Idempotent.
create or replace function files.record_file_delete_failure(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.record_channel_attempt_failure('files', 'file_deletion', payload) $$;

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

  perform internal.enqueue_channel_supervisor(internal.get_channel_process('files', 'file_deletion'), file_deletion_task_id, _scheduled_at);
end;
$$;
