-- Who may enqueue what. Task types listed in queues.internal_task_type (the channel
-- types email, sms, file_delete and db_function) make the worker act with the owner's
-- authority: a channel task calls a provider, a db_function step runs a registered
-- function as the worker. Only SQL the owner wrote enqueues them (supervisors, handlers,
-- kickoffs, schedules the owner installs), through the grant-less
-- queues.enqueue_internal; apps start processes through their kickoff functions. The
-- public queues.enqueue and queues.enqueue_many refuse internal types with 42501 unless
-- the session itself is the owner's (migrations, operators at psql). Both refuse before
-- they read anything else: queues.enqueue_task probes queues.internal_task_type once,
-- queues.enqueue_tasks asks queues.is_owner_session() once per batch and then checks
-- every element's type against queues.internal_task_type read once (hashed).

-- True when _task_type may be enqueued only by the owner's SQL.
create or replace function queues.is_internal_task_type(_task_type text)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from queues.internal_task_type i where i.task_type = _task_type)
$$;

-- True when the session's login role is (a member of) the role owning the queue schema:
-- the owner running SQL by hand or in a migration, not SQL reached from another role.
create or replace function queues.is_owner_session()
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select pg_has_role(session_user, n.nspowner, 'member')
    from pg_namespace n where n.nspname = 'queues'
$$;

-- Raises 42501 when the caller may not enqueue _task_type (_where prefixes the message,
-- 'tasks[3]: ' in a batch). Unknown or NULL types pass: queues.enqueue_task names them.
create or replace function queues.assert_may_enqueue(_task_type text, _where text default '')
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if queues.is_internal_task_type(_task_type) and not queues.is_owner_session() then
    raise exception '%task_type % may be enqueued only by the database''s own processes, not by %',
      _where, quote_literal(_task_type), session_user
      using errcode = '42501',
            detail = 'Channel tasks (email, sms, file_delete) and db_function steps act with the owner''s authority.',
            hint = 'Start the business process through its kickoff function (comms.send_email, comms.send_sms, files.kickoff_file_deletion, api.request_account_deletion).';
  end if;
end;
$$;
