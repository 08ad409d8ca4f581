-- Account anonymization: pure SQL, so no channel task. Each supervisor run that is not
-- terminal is one attempt: it runs accounts.anonymize_account in a subtransaction and
-- records the outcome. Attempts are bounded by the maximum, so they double as the run cap.
--
--   accounts.kickoff_account_anonymization(account_id)   root + first run (idempotent)
--   accounts.account_anonymization_supervisor            db_function
--   accounts.anonymize_account(account_id)                the work
--   accounts.is_account_anonymization_stuck(account_id)   for the parent

create or replace function accounts.account_anonymization_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 3 $$;

-- The work: overwrite the account's personal data, flag it 'anonymized'. Idempotent.
-- Raises when accounts.anonymization_failure_injection has a row for the account (the
-- owner-only test hook for the stuck path).
create or replace function accounts.anonymize_account(_account_id bigint)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _injected text;
begin
  select i.error_message into _injected
    from accounts.anonymization_failure_injection i where i.account_id = _account_id;
  if _injected is not null then
    raise exception 'anonymization of account % failed: %', _account_id, _injected using errcode = 'P0001';
  end if;
  update accounts.account a set email = null, display_name = null
   where a.account_id = _account_id;
  update learning.profile p set display_name = null
   where p.account_id = _account_id;
  insert into accounts.account_flag (account_id, flag) values (_account_id, 'anonymized')
  on conflict do nothing;
end;
$$;

-- Facts -------------------------------------------------------------------------------

create or replace function accounts.has_account_anonymization_succeeded_attempt(_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from accounts.account_anonymization_attempt a
      join accounts.account_anonymization_attempt_succeeded s using (account_anonymization_attempt_id)
     where a.account_anonymization_task_id = _task_id)
$$;

create or replace function accounts.count_account_anonymization_attempts(_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from accounts.account_anonymization_attempt a
   where a.account_anonymization_task_id = _task_id
$$;

create or replace function accounts.count_account_anonymization_failed_attempts(_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from accounts.account_anonymization_attempt a
    join accounts.account_anonymization_attempt_failed f using (account_anonymization_attempt_id)
   where a.account_anonymization_task_id = _task_id
$$;

create or replace function accounts.has_account_anonymization_task_succeeded(_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_anonymization_task_succeeded t
                  where t.account_anonymization_task_id = _task_id)
$$;

create or replace function accounts.get_account_anonymization_task_failure(_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from accounts.account_anonymization_task_failed t
   where t.account_anonymization_task_id = _task_id
$$;

-- True when the account's anonymization has given up (terminal failure, or failed
-- attempts at the maximum).
create or replace function accounts.is_account_anonymization_stuck(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((
    select accounts.get_account_anonymization_task_failure(t.account_anonymization_task_id) is not null
           or accounts.count_account_anonymization_failed_attempts(t.account_anonymization_task_id)
                >= accounts.account_anonymization_max_attempts()
      from accounts.account_anonymization_task t
     where t.account_id = _account_id), false)
$$;

create or replace function accounts.account_anonymization_supervisor_facts(
  _task_id bigint,
  out account_id         bigint,
  out has_task_succeeded boolean,
  out task_failure       text,
  out has_success        boolean,
  out num_attempts       integer,
  out num_failures       integer
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.account_id,
         accounts.has_account_anonymization_task_succeeded(t.account_anonymization_task_id),
         accounts.get_account_anonymization_task_failure(t.account_anonymization_task_id),
         accounts.has_account_anonymization_succeeded_attempt(t.account_anonymization_task_id),
         accounts.count_account_anonymization_attempts(t.account_anonymization_task_id),
         accounts.count_account_anonymization_failed_attempts(t.account_anonymization_task_id)
    from accounts.account_anonymization_task t
   where t.account_anonymization_task_id = _task_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row (FOR NO KEY UPDATE: see comms.lock_send_email_task for why).
create or replace function accounts.lock_account_anonymization_task(_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from accounts.account_anonymization_task t
   where t.account_anonymization_task_id = _task_id
     for no key update;
  return found;
end;
$$;

-- One attempt: records it, runs anonymize_account in a subtransaction, records the
-- outcome. Returns NULL on success, else the error message (the work is rolled back).
create or replace function accounts.run_account_anonymization_attempt(_task_id bigint, _account_id bigint)
  returns text
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint;
  _error text;
begin
  insert into accounts.account_anonymization_attempt (account_anonymization_task_id) values (_task_id)
  returning account_anonymization_attempt_id into _attempt_id;
  begin
    perform accounts.anonymize_account(_account_id);
  exception when others then
    _error := left(sqlerrm, 2000);
  end;
  if _error is null then
    insert into accounts.account_anonymization_attempt_succeeded (account_anonymization_attempt_id) values (_attempt_id);
  else
    insert into accounts.account_anonymization_attempt_failed (account_anonymization_attempt_id, error_message)
    values (_attempt_id, _error);
  end if;
  return _error;
end;
$$;

create or replace function accounts.record_account_anonymization_task_succeeded(_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_anonymization_task_succeeded (account_anonymization_task_id) values (_task_id)
  on conflict do nothing
$$;

create or replace function accounts.record_account_anonymization_task_failed(_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_anonymization_task_failed (account_anonymization_task_id, reason) values (_task_id, _reason)
  on conflict do nothing
$$;

-- Next run after a failure: 5 s · 2^failures, capped at an hour.
create or replace function accounts.schedule_account_anonymization_recheck(_task_id bigint, _num_failures integer)
  returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz := now() + internal.backoff(_num_failures, 3600);
begin
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_anonymization_supervisor',
    'account_anonymization_task_id', _task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Payload: {account_anonymization_task_id}. Raises 25000 outside READ COMMITTED.
create or replace function accounts.account_anonymization_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'account_anonymization_task_id');
  _facts record;
  _error text;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return internal.validation_failure('account_anonymization_task_id must be a positive integer');
  end if;
  perform internal.assert_read_committed('accounts.account_anonymization_supervisor');
  if not accounts.lock_account_anonymization_task(_task_id) then
    return internal.validation_failure(format('account_anonymization_task %s not found', _task_id));
  end if;

  _facts := accounts.account_anonymization_supervisor_facts(_task_id);

  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform accounts.record_account_anonymization_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures >= accounts.account_anonymization_max_attempts() then
    perform accounts.record_account_anonymization_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached');
  end if;

  _error := accounts.run_account_anonymization_attempt(_task_id, _facts.account_id);
  if _error is null then
    perform accounts.record_account_anonymization_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures + 1 >= accounts.account_anonymization_max_attempts() then
    perform accounts.record_account_anonymization_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached', 'payload', jsonb_build_object('error', _error));
  end if;
  _next_check_at := accounts.schedule_account_anonymization_recheck(_task_id, _facts.num_failures + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', 'attempt_failed', 'error', _error, 'next_check_at', _next_check_at));
end;
$$;

-- Kickoff (called by the account deletion supervisor) ---------------------------------

create or replace function accounts.kickoff_account_anonymization(_account_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  insert into accounts.account_anonymization_task (account_id) values (_account_id)
  on conflict (account_id) do nothing
  returning account_anonymization_task_id into _task_id;
  if _task_id is null then
    return (select t.account_anonymization_task_id from accounts.account_anonymization_task t
             where t.account_id = _account_id);
  end if;
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_anonymization_supervisor',
    'account_anonymization_task_id', _task_id));
  return _task_id;
end;
$$;
