-- Who may call what in queues. Database users come from placeholders (see .gmrc):
--   :DATABASE_WORKER  the worker: claim (and ask when the next scheduled task is due),
--                     extend and release leases, complete, fail, interrupt (a transient
--                     error).
--                     No table privileges.
--   :DATABASE_APP     applications: enqueue.
-- Every function starts with EXECUTE revoked from PUBLIC; grants are explicit.

revoke all on all tables in schema queues from public;
revoke all on all sequences in schema queues from public;
revoke execute on all functions in schema queues from public;

grant usage on schema queues to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  queues.claim_tasks(text, integer, text[], integer, integer, text),
  queues.next_claim_in_ms(text[], integer),
  queues.extend_leases(bigint[], bigint[], integer),
  queues.release_leases(bigint[], bigint[]),
  queues.dequeue_next_available_task(text, integer),
  queues.complete_task(bigint, bigint, text),
  queues.complete_tasks(bigint[], bigint[], text[], boolean[], timestamptz[]),
  queues.fail_task(bigint, text, bigint),
  queues.interrupt_task(bigint, bigint, text, integer),
  queues.record_worker_heartbeat(text, text[], integer),
  queues.record_worker_stopped(text),
  queues.cancelled_tasks(bigint[]),
  queues.task_type_timeouts(),
  queues.record_progress(bigint, bigint, bigint, bigint, text),
  queues.record_throttle(text, text, timestamptz, numeric, text, text, bigint, bigint, bigint[], bigint[]),
  queues.active_throttles(),
  queues.list_task_dependencies(bigint)
to :DATABASE_WORKER;

grant execute on function
  queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean, bigint[], text, integer),
  queues.enqueue_many(jsonb),
  queues.enqueue_unique(text, jsonb, text, text, interval, timestamptz, integer, text, integer, bigint[], text, integer),
  queues.cancel_tasks(bigint[], text),
  queues.list_task_dependencies(bigint)
to :DATABASE_APP;
-- The client's enqueue on a pool (commit, then the wake-up; sql/queues/enqueue.sql).
revoke execute on all procedures in schema queues from public;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint, text, integer, bigint[])
  to :DATABASE_APP;
