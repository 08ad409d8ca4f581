-- What the files service may sign. It issues a signed DELETE URL only for an object the
-- database has scheduled for deletion: a file row with that bucket and key whose
-- deletion has an attempt in flight (no outcome yet), whose process has not ended, and
-- whose account deletion (if any) has not failed. The files service asks through
-- internal.run_function (its only database privileges are those of the worker role).

-- True when (_bucket, _object_key) may be deleted now. NULLs: false.
create or replace function files.is_file_delete_scheduled(_bucket text, _object_key text)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1
      from files.file f
      join files.file_deletion_task t on t.file_id = f.file_id
      join files.file_deletion_attempt a on a.file_deletion_task_id = t.file_deletion_task_id
     where f.bucket = _bucket and f.object_key = _object_key
       and not exists (select 1 from files.file_deletion_attempt_succeeded s
                        where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
       and not exists (select 1 from files.file_deletion_attempt_failed x
                        where x.file_deletion_attempt_id = a.file_deletion_attempt_id)
       and not exists (select 1 from files.file_deletion_task_succeeded ts where ts.file_deletion_task_id = t.file_deletion_task_id)
       and not exists (select 1 from files.file_deletion_task_failed tf where tf.file_deletion_task_id = t.file_deletion_task_id)
       and not files.has_account_deletion_failed(f.account_id))
$$;

-- Runnable, for the files service. Payload: {bucket, object_key}. Returns
-- {success: true, payload: {scheduled}}; a payload without both strings is a validation
-- failure. Reads only.
create or replace function files.check_file_delete_signing(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if jsonb_typeof(payload -> 'bucket') is distinct from 'string' or jsonb_typeof(payload -> 'object_key') is distinct from 'string' then
    return internal.validation_failure('bucket and object_key must be strings');
  end if;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'scheduled', files.is_file_delete_scheduled(payload ->> 'bucket', payload ->> 'object_key')));
end;
$$;
