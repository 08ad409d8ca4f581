-- Small helpers shared by the comms processes. Called only from definer functions:
-- no grants.

-- The email address check of the provider schema (@org/contracts emailPayload uses
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
