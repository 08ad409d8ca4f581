-- Retention of finished send processes, off by default (internal.process_retention has
-- no row for send_email or send_sms until an operator adds one). Deletes each root that
-- finished (succeeded or failed) longer ago than its process's window, with its facts,
-- and the message it sent (content included). See sql/internal/retention.sql.

-- Owner only: prunes at _now, at most _limit roots per process. Returns the counts.
create or replace function comms.prune_finished_processes_at(_now timestamptz, _limit integer)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _email bigint[];
  _sms bigint[];
begin
  select coalesce(array_agg((p.root ->> 'message_id')::bigint), '{}') into _email
    from internal.prune_finished_roots('comms', 'send_email', _now, _limit) p;
  select coalesce(array_agg((p.root ->> 'message_id')::bigint), '{}') into _sms
    from internal.prune_finished_roots('comms', 'send_sms', _now, _limit) p;
  -- Their messages go with them (email_message and sms_message cascade).
  delete from comms.message m where m.message_id = any (_email || _sms);
  return jsonb_build_object('send_email', cardinality(_email), 'send_sms', cardinality(_sms));
end;
$$;

-- A runnable db_function (schedule it to apply the retention): prunes at now(), up to
-- 10,000 roots per process per run.
create or replace function comms.prune_finished_processes(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', comms.prune_finished_processes_at(now(), 10000))
$$;

-- The worker runs it (from a schedule) through internal.run_function. Granted here, beside
-- the function, so that a migration including sql/comms/privileges.sql before this file
-- does not name a function that does not exist yet.
grant execute on function comms.prune_finished_processes(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('comms.prune_finished_processes(jsonb)');
