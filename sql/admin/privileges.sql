-- Who may call what in admin. The operations API (:DATABASE_API) has no table or view
-- privileges: it reads and acts through the security definer functions below, plus
-- queues.enqueue to create tasks. Every grant is listed in sql/role-allowlist.json ("api").
-- The *_at functions take the clock and stay owner only.

revoke all on all tables in schema admin from public;
revoke execute on all functions in schema admin from public;

grant usage on schema admin to :DATABASE_API;
grant usage on schema queues to :DATABASE_API;

grant execute on function
  admin.list_tasks(text, text, integer, bigint),
  admin.get_task(bigint),
  admin.task_counts(integer),
  admin.list_task_types(),
  admin.capacity(text),
  admin.throughput(integer, integer),
  admin.completion_stats(integer),
  admin.list_dead_letters(text, integer, bigint),
  admin.redrive_task(bigint),
  admin.recover_stale_leases(integer),
  admin.list_stale_leases(),
  admin.process_timeline(text, bigint),
  admin.list_process_roots(text, integer, bigint),
  admin.list_processes()
to :DATABASE_API;

grant execute on function queues.enqueue(text, jsonb, timestamptz, integer, text, integer) to :DATABASE_API;
