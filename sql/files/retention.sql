-- Retention of finished file deletions, off by default (internal.process_retention has no
-- row for file_deletion until an operator adds one). Deletes each root that finished
-- longer ago than the window, with its facts; the file row (the record of the stored
-- object) stays. See sql/internal/retention.sql.

-- Owner only: prunes at _now, at most _limit roots. Returns the count.
create or replace function files.prune_finished_processes_at(_now timestamptz, _limit integer)
  returns jsonb
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('file_deletion',
    (select count(*) from internal.prune_finished_roots('files', 'file_deletion', _now, _limit)))
$$;

-- A runnable db_function: prunes at now(), up to 10,000 roots per run.
create or replace function files.prune_finished_processes(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', files.prune_finished_processes_at(now(), 10000))
$$;

-- The worker runs it (from a schedule) through internal.run_function. Granted here, beside
-- the function, so that a migration including sql/files/privileges.sql before this file
-- does not name a function that does not exist yet.
grant execute on function files.prune_finished_processes(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('files.prune_finished_processes(jsonb)');
