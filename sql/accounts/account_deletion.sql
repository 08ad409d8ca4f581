-- Account deletion: a supervision tree, composed of the shared supervisor blocks
-- (sql/internal/process_supervisor.sql). The root supervisor finds its children from
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
-- own retries take hours at most; with the backoff (capped at 10 minutes) 100 runs span
-- about 16 hours.
create or replace function accounts.account_deletion_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 100 $$;

-- What the supervisor decides on (select * from accounts.account_deletion_supervisor_facts(123)).
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
  select t.account_id, e.has_task_succeeded, e.task_failure,
         internal.count_supervisor_runs('accounts', 'account_deletion', t.account_deletion_task_id),
         ff.num_files, ff.num_files_without_task, ff.num_files_deleted, ff.stuck_file_ids,
         x.account_anonymization_task_id is not null,
         exists (select 1 from accounts.account_anonymization_task_succeeded s
                  where s.account_anonymization_task_id = x.account_anonymization_task_id),
         accounts.is_account_anonymization_stuck(t.account_id)
    from accounts.account_deletion_task t
   cross join lateral internal.process_terminal_facts('accounts', 'account_deletion', t.account_deletion_task_id) e
   cross join lateral files.account_file_deletion_facts(t.account_id) ff
    left join accounts.account_anonymization_task x on x.account_id = t.account_id
   where t.account_deletion_task_id = _task_id
$$;

-- Payload: {account_deletion_task_id}. Raises 25000 outside READ COMMITTED. Returns
-- {success: true, payload: {status, next_check_at}} while it progresses, and
-- {status: 'failed', payload: {reason}} once the process failed.
create or replace function accounts.account_deletion_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _run record := internal.open_supervisor_run('accounts', 'account_deletion', 'accounts.account_deletion_supervisor', payload);
  _facts record;
  _reason text;
  _status text;
  _file_id bigint;
begin
  if _run.root_id is null then
    return _run.refusal;
  end if;
  _facts := accounts.account_deletion_supervisor_facts(_run.root_id);

  -- Terminal states: ended; every child done; a stuck child; the run cap.
  if _facts.has_task_succeeded then
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _facts.task_failure));
  end if;
  if _facts.num_files_deleted = _facts.num_files and _facts.is_anonymized then
    perform internal.record_process_outcome('accounts', 'account_deletion', _run.root_id, null);
    return internal.supervisor_progress('succeeded');
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
    perform internal.record_process_outcome('accounts', 'account_deletion', _run.root_id, _reason);
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _reason));
  end if;

  -- Progress: files first, then anonymization.
  perform internal.record_supervisor_run('accounts', 'account_deletion', _run.root_id);
  if _facts.num_files_without_task > 0 then
    for _file_id in select f.file_id from files.file f
                     where f.account_id = _facts.account_id
                       and not exists (select 1 from files.file_deletion_task d where d.file_id = f.file_id)
                     order by f.file_id loop
      perform files.kickoff_file_deletion(_file_id);
    end loop;
    _status := 'file_deletions_started';
  elsif _facts.num_files_deleted < _facts.num_files then
    _status := 'waiting_for_file_deletions';
  elsif not _facts.has_anonymization_task then
    perform accounts.kickoff_account_anonymization(_facts.account_id);
    _status := 'anonymization_started';
  else
    _status := 'waiting_for_anonymization';
  end if;
  -- Next run after 5 s · 2^(runs − 1), capped at 10 minutes: the parent polls its children.
  return internal.supervisor_progress(_status, jsonb_build_object('next_check_at',
    internal.schedule_next_supervisor_run('accounts.account_deletion_supervisor', 'account_deletion_task_id',
                                          _run.root_id, _facts.num_runs, 600)));
end;
$$;

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
declare
  _root record;
begin
  if _account_id is null then
    validation_failure_message := 'account_id is required';
  elsif not exists (select 1 from accounts.account a where a.account_id = _account_id) then
    validation_failure_message := format('account %s not found', _account_id);
  else
    _root := internal.start_process('accounts', 'account_deletion', 'accounts.account_deletion_supervisor',
                                    'account_id', _account_id);
    account_deletion_task_id := _root.root_id;
    if _root.created then
      insert into accounts.account_flag (account_id, flag) values (_account_id, 'deleted') on conflict do nothing;
    end if;
  end if;
end;
$$;
