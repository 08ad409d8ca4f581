-- Helpers shared by every business process (comms, files, accounts, schedules):
-- reading ids from payloads, the validation-failure envelope, and the isolation guard
-- of supervisors. Called only from security definer functions: no grants.

-- A positive bigint id read from a jsonb object, or NULL when the key is missing, not
-- an integer, or out of range. Supervisors and handlers validate with this instead of
-- casting, so a malformed payload is a validation failure, not an exception.
create or replace function internal.id_from_payload(_payload jsonb, _key text)
  returns bigint
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select case
    when jsonb_typeof(_payload) = 'object'
     and jsonb_typeof(_payload -> _key) in ('number', 'string')
     and (_payload ->> _key) ~ '^[1-9][0-9]{0,17}$'
    then (_payload ->> _key)::bigint
  end
$$;

-- The envelope for input a function cannot act on: non-retriable, nothing written.
create or replace function internal.validation_failure(_message text)
  returns jsonb
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', false, 'validation_failure_message', _message)
$$;

-- Refuses to run a supervisor outside READ COMMITTED. A supervisor serialises on its
-- root row, then reads facts. Under READ COMMITTED every statement after the lock wait
-- takes a fresh snapshot and sees what the previous holder committed; under REPEATABLE
-- READ (or SERIALIZABLE) the snapshot is from before the wait, so two runs would both
-- see "no outstanding attempt" and schedule two.
create or replace function internal.assert_read_committed(_function_name text)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception '% must run under READ COMMITTED, not %', _function_name,
      upper(current_setting('transaction_isolation'))
      using errcode = '25000',
            detail = 'Under REPEATABLE READ or SERIALIZABLE the lock on the root row does not stop double scheduling: facts read after the lock wait come from a snapshot taken before it.',
            hint = 'Call supervisors in a READ COMMITTED transaction (the default).';
  end if;
end;
$$;

-- Why the queue gave up on a channel task, or NULL while it has not: the task is
-- completed (abandoned after its leases expired, dead-lettered, cancelled while pending or
-- running, failed because its success or error handler raised) although its attempt has
-- no outcome. Supervisors record this as the attempt's failure at their next run. The
-- message ends with the task's last error or, for a cancelled task, the cancel's reason.
--
-- A task that is no longer in queues.task was given up on too: history retention drops a
-- task only with its whole partition set, and only once every task in the set has a
-- completion (queues.maintain_history_at), so a task that is gone was completed, at
-- least the retention window ago, and its attempt got no outcome from it. A supervisor
-- silent for that long (db_function paused) still sees its attempt end.
--
-- When an at-most-once provider call was started for the task
-- (internal.provider_call_started, which retention keeps), the call may have happened:
-- the message then starts with internal.unknown_outcome_prefix(), so the supervisor ends
-- the process delivery_outcome_unknown instead of calling again.
create or replace function internal.queue_gave_up_message(_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select left(coalesce((select format('%slease %s started the provider call at %s and no outcome was recorded; ',
                                      internal.unknown_outcome_prefix(), s.task_lease_id, s.started_at)
                          from internal.provider_call_started s
                         where s.task_id = k.task_id
                         order by s.task_lease_id limit 1), '')
              || case when t.task_id is null
                      then format('the queue gave up on task %s: its history was dropped by retention before its attempt had an outcome',
                                  k.task_id)
                      else format('the queue gave up on %s task %s (%s)%s', t.task_type, t.task_id, c.outcome,
                                  coalesce(': ' || (select e.error_message from queues.error e
                                                     where e.task_id = t.task_id order by e.error_id desc limit 1),
                                           ': ' || (select nullif(x.reason, '') from queues.task_cancelled x
                                                     where x.task_id = t.task_id and c.outcome = 'cancelled'), ''))
                 end, 2000)
    from (select _task_id as task_id) k
    left join queues.task t on t.task_id = k.task_id
    left join lateral (select e.task_id, e.outcome from queues.task_end_of(t.task_id) e limit 1) c on true
   where k.task_id is not null and (t.task_id is null or c.task_id is not null)
$$;

-- True when an attempt's error is the worker's "unknown outcome" failure of an
-- at-most-once channel (internal.start_provider_call): the call may have happened, so a
-- supervisor must not make another attempt.
create or replace function internal.is_unknown_outcome(_error_message text)
  returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select starts_with(coalesce(_error_message, ''), 'unknown outcome: ')
$$;

-- The namespace of provider idempotency keys: this database's cluster (its system
-- identifier) and name, so two databases sending through one provider account never
-- share a key. Stable for the life of the database.
create or replace function internal.idempotency_namespace()
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select format('%s:%s', (select s.system_identifier from pg_control_system() s), current_database())
$$;
