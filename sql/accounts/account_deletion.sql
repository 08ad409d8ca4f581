-- Account deletion: a supervision tree. The root supervisor finds its children from
-- current state (the account's files, its anonymization task), never from a payload:
--   1. start one file deletion per file of the account (files.kickoff_file_deletion);
--   2. when every file is deleted, start the account anonymization;
--   3. when anonymized, record account_deletion_task_succeeded.
-- A stuck child (files.is_file_deletion_stuck, accounts.is_account_anonymization_stuck)
-- ends the process in account_deletion_task_failed with a message naming it.
--
--   api.request_account_deletion(account_id)      app entry point (sql/api)
--   accounts.kickoff_account_deletion(account_id) flag 'deleted', root, first run
--   accounts.account_deletion_supervisor          db_function

-- Non-terminal runs per account before giving up. The parent waits on children whose
-- own retries take hours at most; with the backoff below (capped at 10 minutes) 100 runs
-- span about 16 hours.
create or replace function accounts.account_deletion_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 100 $$;

-- Facts -------------------------------------------------------------------------------

create or replace function accounts.count_account_deletion_supervisor_runs(_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from accounts.account_deletion_supervisor_run r
   where r.account_deletion_task_id = _task_id
$$;

create or replace function accounts.has_account_deletion_task_succeeded(_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_deletion_task_succeeded t where t.account_deletion_task_id = _task_id)
$$;

create or replace function accounts.get_account_deletion_task_failure(_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from accounts.account_deletion_task_failed t where t.account_deletion_task_id = _task_id
$$;

create or replace function accounts.has_account_anonymization_task(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_anonymization_task t where t.account_id = _account_id)
$$;

create or replace function accounts.is_account_anonymized(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_anonymization_task t
                  where t.account_id = _account_id
                    and accounts.has_account_anonymization_task_succeeded(t.account_anonymization_task_id))
$$;

create or replace function accounts.account_deletion_supervisor_facts(
  _task_id bigint,
  out account_id               bigint,
  out has_task_succeeded       boolean,
  out task_failure             text,
  out num_runs                 integer,
  out num_files                integer,
  out num_files_without_task   integer,
  out num_files_deleted        integer,
  out stuck_file_ids           bigint[],
  out has_anonymization_task   boolean,
  out is_anonymized            boolean,
  out is_anonymization_stuck   boolean
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.account_id,
         accounts.has_account_deletion_task_succeeded(t.account_deletion_task_id),
         accounts.get_account_deletion_task_failure(t.account_deletion_task_id),
         accounts.count_account_deletion_supervisor_runs(t.account_deletion_task_id),
         ff.num_files, ff.num_files_without_task, ff.num_files_deleted, ff.stuck_file_ids,
         accounts.has_account_anonymization_task(t.account_id),
         accounts.is_account_anonymized(t.account_id),
         accounts.is_account_anonymization_stuck(t.account_id)
    from accounts.account_deletion_task t
    cross join lateral files.account_file_deletion_facts(t.account_id) ff
   where t.account_deletion_task_id = _task_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row (FOR NO KEY UPDATE: see comms.lock_send_email_task for why).
create or replace function accounts.lock_account_deletion_task(_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from accounts.account_deletion_task t where t.account_deletion_task_id = _task_id
     for no key update;
  return found;
end;
$$;

create or replace function accounts.record_account_deletion_supervisor_run(_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_deletion_supervisor_run (account_deletion_task_id) values (_task_id)
$$;

create or replace function accounts.record_account_deletion_task_succeeded(_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_deletion_task_succeeded (account_deletion_task_id) values (_task_id)
  on conflict do nothing
$$;

create or replace function accounts.record_account_deletion_task_failed(_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_deletion_task_failed (account_deletion_task_id, reason) values (_task_id, _reason)
  on conflict do nothing
$$;

-- Starts a deletion for every file of the account that has none; returns how many.
create or replace function accounts.start_account_file_deletions(_account_id bigint)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _file_id bigint;
  _started integer := 0;
begin
  for _file_id in
    select f.file_id from files.file f
     where f.account_id = _account_id
       and not exists (select 1 from files.file_deletion_task t where t.file_id = f.file_id)
     order by f.file_id
  loop
    perform files.kickoff_file_deletion(_file_id);
    _started := _started + 1;
  end loop;
  return _started;
end;
$$;

-- Next run: 5 s · 2^(runs − 1), capped at 10 minutes (the parent polls its children).
create or replace function accounts.schedule_account_deletion_recheck(_task_id bigint, _num_runs integer)
  returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz :=
    now() + internal.backoff(_num_runs - 1, 600);
begin
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_deletion_supervisor',
    'account_deletion_task_id', _task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Payload: {account_deletion_task_id}. Raises 25000 outside READ COMMITTED.
create or replace function accounts.account_deletion_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'account_deletion_task_id');
  _facts record;
  _status text;
  _reason text;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return internal.validation_failure('account_deletion_task_id must be a positive integer');
  end if;
  perform internal.assert_read_committed('accounts.account_deletion_supervisor');
  if not accounts.lock_account_deletion_task(_task_id) then
    return internal.validation_failure(format('account_deletion_task %s not found', _task_id));
  end if;

  _facts := accounts.account_deletion_supervisor_facts(_task_id);

  -- Terminal states.
  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _facts.task_failure));
  end if;
  if _facts.num_files_deleted = _facts.num_files and _facts.is_anonymized then
    perform accounts.record_account_deletion_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  _reason := case
    when cardinality(_facts.stuck_file_ids) > 0
      then format('file deletion stuck for file_id %s', array_to_string(_facts.stuck_file_ids, ', '))
    when _facts.is_anonymization_stuck
      then format('account anonymization stuck for account_id %s', _facts.account_id)
    when _facts.num_runs >= accounts.account_deletion_max_supervisor_runs()
      then format('run_limit_reached after %s runs', _facts.num_runs)
  end;
  if _reason is not null then
    perform accounts.record_account_deletion_task_failed(_task_id, _reason);
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _reason));
  end if;

  -- Progress: files first, then anonymization.
  perform accounts.record_account_deletion_supervisor_run(_task_id);
  if _facts.num_files_without_task > 0 then
    perform accounts.start_account_file_deletions(_facts.account_id);
    _status := 'file_deletions_started';
  elsif _facts.num_files_deleted < _facts.num_files then
    _status := 'waiting_for_file_deletions';
  elsif not _facts.has_anonymization_task then
    perform accounts.kickoff_account_anonymization(_facts.account_id);
    _status := 'anonymization_started';
  else
    _status := 'waiting_for_anonymization';
  end if;
  _next_check_at := accounts.schedule_account_deletion_recheck(_task_id, _facts.num_runs + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', _status, 'next_check_at', _next_check_at));
end;
$$;

-- Kickoff -----------------------------------------------------------------------------

-- Flags the account 'deleted', creates the root task and enqueues the first supervisor
-- run. A second call for the same account returns the existing task and writes nothing.
-- Bad input: a validation_failure_message and nothing written.
create or replace function accounts.kickoff_account_deletion(
  _account_id bigint,
  out account_deletion_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _account_id is null then
    validation_failure_message := 'account_id is required';
    return;
  end if;
  if not exists (select 1 from accounts.account a where a.account_id = _account_id) then
    validation_failure_message := format('account %s not found', _account_id);
    return;
  end if;

  insert into accounts.account_deletion_task (account_id) values (_account_id)
  on conflict (account_id) do nothing
  returning account_deletion_task.account_deletion_task_id into account_deletion_task_id;
  if account_deletion_task_id is null then
    select t.account_deletion_task_id into account_deletion_task_id
      from accounts.account_deletion_task t where t.account_id = _account_id;
    return;
  end if;

  insert into accounts.account_flag (account_id, flag) values (_account_id, 'deleted')
  on conflict do nothing;
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_deletion_supervisor',
    'account_deletion_task_id', account_deletion_task_id));
end;
$$;
