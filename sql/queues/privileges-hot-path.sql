-- Grants of the worker's hot-path functions (settle, steps, revocation of a dead
-- process's leases); included after the files that define them. queues/privileges.sql
-- revokes EXECUTE from PUBLIC on every queue function first.

revoke execute on all functions in schema queues from public;

grant execute on function
  queues.settle_tasks(bigint[], bigint[], text[], boolean[], bigint[], text[], bigint[]),
  queues.run_steps(bigint[], bigint[], text[], jsonb[], text[]),
  queues.run_step(bigint, bigint, text, jsonb),
  queues.complete_steps(bigint[], bigint[], text[], boolean[], bigint[], text[], jsonb[]),
  queues.current_leases(bigint[], bigint[]),
  queues.parse_envelope(jsonb),
  queues.is_current_lease(bigint, bigint),
  queues.max_payload_bytes(),
  queues.mark_started(bigint[], bigint[], bigint[]),
  queues.revoke_worker_leases(text, bigint[], bigint[])
to :DATABASE_WORKER;
