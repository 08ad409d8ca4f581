-- Small helpers shared by the comms processes. Called only from definer functions:
-- no grants.

-- A positive bigint id read from a jsonb object, or NULL when the key is missing, not
-- an integer, or out of range. Supervisors and handlers validate with this instead of
-- casting, so a malformed payload is a validation failure, not an exception.
create or replace function comms.id_from_payload(_payload jsonb, _key text)
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

-- The email address check of the provider schema (@org/handler-types emailPayload uses
-- zod's z.email()): kickoffs refuse what the worker would refuse later.
create or replace function comms.is_email_address(_address text)
  returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select _address is not null and length(_address) <= 320
     and _address ~ '^(?!\.)(?!.*\.\.)([A-Za-z0-9_''+\-\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\-]*\.)+[A-Za-z]{2,}$'
$$;

-- An E.164 phone number, as the provider schema (smsPayload) requires.
create or replace function comms.is_e164_number(_number text)
  returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select _number is not null and _number ~ '^\+[1-9][0-9]{6,14}$'
$$;

-- The envelope for input a function cannot act on: non-retriable, nothing written.
create or replace function comms.validation_failure(_message text)
  returns jsonb
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', false, 'validation_failure_message', _message)
$$;
