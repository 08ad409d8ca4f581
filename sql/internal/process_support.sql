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
