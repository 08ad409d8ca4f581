-- What the files service may sign, and for how long. It issues a signed DELETE URL only
-- for an object whose deletion a worker is performing now: a file row with that bucket
-- and key whose deletion has an attempt without an outcome, in a process that has not
-- ended, whose account deletion (if any) has not failed, and whose file_delete task is
-- not completed and is held by a live lease (the newest lease, its expiry with heartbeats
-- and releases applied still ahead). The URL is signed for no longer than that lease has
-- left: storage checks nothing but the signature and its expiry, so a URL is bound to the
-- attempt by its lifetime. Once the lease is over (the attempt failed, expired, was
-- revoked; the process or the account deletion failed meanwhile) no URL signed for it
-- is valid any more. The files service asks through internal.run_function (its only
-- database privileges are those of the worker role).

-- The time left on the live lease of the attempt deleting (_bucket, _object_key), or NULL
-- when no attempt may delete it now (the longest, when several file rows name the
-- object). NULLs: NULL.
create or replace function files.file_delete_lease_left(_bucket text, _object_key text)
  returns interval
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select max(l.expires_at - now())
    from files.file f
    join files.file_deletion_task t on t.file_id = f.file_id
    join files.file_deletion_attempt a on a.file_deletion_task_id = t.file_deletion_task_id
    -- The task's newest lease with its effective expiry (a task has one live lease at most).
    cross join lateral (
      select e.expires_at from queues.task_lease_effective_of(a.task_id) e
       order by e.task_lease_id desc
       limit 1
    ) l
   where f.bucket = _bucket and f.object_key = _object_key
     and l.expires_at > now()
     and not exists (select 1 from queues.task_end_of(a.task_id) c)
     and not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
     and not exists (select 1 from files.file_deletion_attempt_failed x
                      where x.file_deletion_attempt_id = a.file_deletion_attempt_id)
     and not exists (select 1 from files.file_deletion_task_succeeded ts where ts.file_deletion_task_id = t.file_deletion_task_id)
     and not exists (select 1 from files.file_deletion_task_failed tf where tf.file_deletion_task_id = t.file_deletion_task_id)
     and not files.has_account_deletion_failed(f.account_id)
$$;

-- True when (_bucket, _object_key) may be deleted now (files.file_delete_lease_left).
-- NULLs: false.
create or replace function files.is_file_delete_scheduled(_bucket text, _object_key text)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select files.file_delete_lease_left(_bucket, _object_key) is not null
$$;

-- Runnable, for the files service. Payload: {bucket, object_key}. Returns
-- {success: true, payload: {scheduled, lease_seconds_left}}: lease_seconds_left is the
-- time left on the deleting attempt's lease, in seconds (null when not scheduled); the
-- service signs for no longer. A payload without both strings is a validation failure.
-- Reads only.
create or replace function files.check_file_delete_signing(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _left interval;
begin
  if jsonb_typeof(payload -> 'bucket') is distinct from 'string' or jsonb_typeof(payload -> 'object_key') is distinct from 'string' then
    return internal.validation_failure('bucket and object_key must be strings');
  end if;
  _left := files.file_delete_lease_left(payload ->> 'bucket', payload ->> 'object_key');
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'scheduled', _left is not null,
    'lease_seconds_left', extract(epoch from _left)));
end;
$$;
