// The scaffold of a channel process (`npm run new-process`): the files a new process
// needs, on the shared skeleton of sql/internal/channel_process.sql. What is left to the
// author is marked "DECIDE": the root's domain columns, what the kickoff accepts, and the
// provider payload the before_handler returns.

const IDENT = /^[a-z][a-z0-9_]{0,40}$/;

/**
 * @param {{ schema: string, name: string, channel: string, number?: number }} options
 *   schema   the domain schema (created if missing), e.g. "notify"
 *   name     the process, e.g. "send_webhook": tables notify.send_webhook_task, ...
 *   channel  the channel task type, e.g. "webhook" (registered as worker-only if new)
 *   number   the migrations/current file number (default 230)
 * @returns {Record<string, string>} file path (relative to the repository) → content
 */
export function channelProcessFiles({ schema, name, channel, number = 230 }) {
  for (const [what, value] of Object.entries({ schema, name, channel })) {
    if (!IDENT.test(value ?? '')) throw new Error(`${what} must match ${IDENT}, got ${JSON.stringify(value)}`);
  }
  const S = schema;
  const N = name;
  const ddl = `-- ${S}.${N}: tables (the root, then the channel process's facts). Idempotent.
set local lock_timeout = '5s';

create schema if not exists ${S};
revoke all on schema ${S} from public;

-- The root: one per ${N} process. DECIDE: the domain columns (what it is about).
create table if not exists ${S}.${N}_task (
  ${N}_task_id bigint generated always as identity primary key,
  subject_id   bigint not null unique,
  scheduled_at timestamptz not null default now(),
  created_at   timestamptz not null default now()
);
select internal.create_channel_process_tables('${S}', '${N}');

-- The channel: a task type the worker runs with a provider; only the owner's SQL may
-- enqueue it.
insert into queues.task_type (task_type, description) values ('${channel}', '${S}.${N}: one provider call per attempt')
on conflict (task_type) do nothing;
insert into queues.internal_task_type (task_type, reason) values ('${channel}', 'calls a provider for ${S}.${N}')
on conflict (task_type) do nothing;

--!include ${S}/${N}.sql
--!include ${S}/privileges.sql
`;

  const functions = `-- The ${S}.${N} process on the shared channel skeleton (sql/internal/channel_process.sql):
--   ${S}.kickoff_${N}(subject_id)   app: root + first supervisor run (idempotent)
--   ${S}.${N}_supervisor            db_function: internal.run_channel_supervisor
--   ${S}.get_${N}_payload           before_handler: the provider payload (DECIDE)
--   ${S}.record_${N}_success        success_handler
--   ${S}.record_${N}_failure        error_handler

-- Limits. DECIDE: provider calls per process, supervisor runs, the backoff cap.
select internal.register_channel_process('${S}', '${N}', '${channel}',
  _supervisor => '${S}.${N}_supervisor', _before_handler => '${S}.get_${N}_payload',
  _success_handler => '${S}.record_${N}_success', _error_handler => '${S}.record_${N}_failure',
  _max_attempts => 3, _max_supervisor_runs => 30, _backoff_cap_seconds => 3600);

create or replace function ${S}.${N}_supervisor(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.run_channel_supervisor('${S}', '${N}', payload) $$;

-- before_handler: the provider's input for one attempt. Refuses an attempt with an
-- outcome or of an ended process (internal.channel_attempt_refusal).
create or replace function ${S}.get_${N}_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload, '${N}_attempt_id');
  _refusal text;
begin
  if _attempt_id is null then
    return internal.validation_failure('${N}_attempt_id must be a positive integer');
  end if;
  _refusal := internal.channel_attempt_refusal('${S}', '${N}', _attempt_id);
  if _refusal is not null then
    return internal.validation_failure(_refusal);
  end if;
  -- DECIDE: what the provider is sent (it must match the provider's payload schema).
  return jsonb_build_object('success', true, 'payload', (
    select jsonb_build_object(
             'idempotency_key', format('%s:${N}_attempt:%s', internal.idempotency_namespace(), a.${N}_attempt_id),
             'subject_id', t.subject_id)
      from ${S}.${N}_attempt a join ${S}.${N}_task t using (${N}_task_id)
     where a.${N}_attempt_id = _attempt_id));
end;
$$;

create or replace function ${S}.record_${N}_success(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.record_channel_attempt_success('${S}', '${N}', payload) $$;

create or replace function ${S}.record_${N}_failure(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.record_channel_attempt_failure('${S}', '${N}', payload) $$;

-- Kickoff for apps: the root and its first supervisor run at _scheduled_at (NULL: now).
-- A second call for the same subject returns the existing root and enqueues nothing.
-- Bad input: a validation_failure_message, nothing written. DECIDE: what is valid.
create or replace function ${S}.kickoff_${N}(
  _subject_id bigint,
  _scheduled_at timestamptz default null,
  out ${N}_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _subject_id is null or _subject_id <= 0 then
    validation_failure_message := 'subject_id must be a positive integer';
    return;
  end if;
  insert into ${S}.${N}_task (subject_id, scheduled_at) values (_subject_id, coalesce(_scheduled_at, now()))
  on conflict (subject_id) do nothing
  returning ${N}_task.${N}_task_id into ${N}_task_id;
  if ${N}_task_id is null then
    select t.${N}_task_id into ${N}_task_id from ${S}.${N}_task t where t.subject_id = _subject_id;
    return;
  end if;
  perform internal.enqueue_channel_supervisor(internal.get_channel_process('${S}', '${N}'), ${N}_task_id, _scheduled_at);
end;
$$;
`;

  const privileges = `-- Who may call what in ${S}: the worker runs the supervisor and handlers (granted and
-- registered); apps call the kickoff. Add every grant to sql/database-user-grants.json.
revoke all on all tables in schema ${S} from public;
revoke all on all sequences in schema ${S} from public;
revoke execute on all functions in schema ${S} from public;
grant usage on schema ${S} to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  ${S}.${N}_supervisor(jsonb), ${S}.get_${N}_payload(jsonb), ${S}.record_${N}_success(jsonb), ${S}.record_${N}_failure(jsonb)
to :DATABASE_WORKER;
select internal.register_runnable_function(f::regprocedure)
  from unnest(array['${S}.${N}_supervisor(jsonb)', '${S}.get_${N}_payload(jsonb)',
                    '${S}.record_${N}_success(jsonb)', '${S}.record_${N}_failure(jsonb)']) f;

grant execute on function ${S}.kickoff_${N}(bigint, timestamptz) to :DATABASE_APP;
`;

  return {
    [`migrations/current/${number}-${S}-${N}.sql`]: ddl,
    [`sql/${S}/${N}.sql`]: functions,
    [`sql/${S}/privileges.sql`]: privileges,
  };
}
