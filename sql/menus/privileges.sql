-- Who may call what in menus. The worker records observations (packages/menu-sync) and
-- runs the daily resync generation as a db_function; apps and the REST API generate work.
-- Tables and the analytics view stay owner only.

revoke all on all tables in schema menus from public;
revoke all on all sequences in schema menus from public;
revoke execute on all functions in schema menus from public;

grant usage on schema menus to :DATABASE_WORKER, :DATABASE_APP, :DATABASE_API;

grant execute on function
  menus.record_observation(bigint, bigint, jsonb),
  menus.generate_todays_resync(jsonb)
to :DATABASE_WORKER;
select internal.register_runnable_function('menus.generate_todays_resync(jsonb)');

grant execute on function
  menus.generate_resync_tasks(integer, date),
  menus.generate_store_discovery(timestamptz)
to :DATABASE_APP, :DATABASE_API;
