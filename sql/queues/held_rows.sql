-- The ready set's per-task paths (docs/design/hot-path.md): a claim takes a task out of
-- the claim index on its first lease, and its claim lease holds it; the task has no
-- `queues.task_pending` row until it ends. Every path that must hold such a task on its
-- row (a result, a release and a throttle's give-back, an interruption, a cancel, a stale
-- recovery or revocation, a unique replace, an unfenced completion, an enqueue that
-- depends on it, a heartbeat) first gives it its row back, written from the facts as the
-- claim left it (leased by the claim lease, available at its expiry), and then holds it
-- there as before the ready set; a task still in a ready batch (sql/queues/ready_batch.sql)
-- gets its row too. The drain's paths (the completion's fence, the lease
-- checks of steps, starts and progress) hold it by its claim lease and write nothing, so
-- only the exceptions pay for a row.
--
--   queues.hold_rows_of(task_ids)   helper: the row-less, unended tasks get their row back

-- Gives each of _task_ids held in a ready batch its row (queues.unbatch_tasks), and each
-- with neither a claim-index row nor an end, named by a claim lease, its row back
-- (queues.pending_rows_of); returns those tasks. Under each such
-- lease's advisory lock (class 20253), taken exclusively and waited for, in lease id
-- order, as the completions of the lease and the rescuer take it: a completion of the
-- task in flight ends it first (then it is left alone), and a rescue writes its row first
-- (then the insert finds it). Call it after queues.lock_resource_keys and before locking
-- any row, the order the completion keeps.
create or replace function queues.hold_rows_of(_task_ids bigint[])
  returns bigint[]
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _leases bigint[];
  _held bigint[];
  _unbatched bigint[] := '{}';
  _batched boolean;
begin
  -- The lease-held tasks' claim leases (queues.lease_held_of: a task with a row costs one
  -- primary-key probe), and whether any ready batch exists (one probe, in the same
  -- statement: no statement more while none does).
  select array(select distinct h.task_lease_id
                 from unnest(_task_ids) i(id) cross join lateral queues.lease_held_of(i.id) h
                order by 1),
         exists (select 1 from queues.task_ready_batch)
    into _leases, _batched;
  -- A task still in a ready batch gets its row first (sql/queues/ready_batch.sql: the
  -- batch locked and waited for, so a claim in flight that takes it commits first, and it
  -- is then lease-held: read again). A batch an enqueue commits later holds none of these
  -- tasks (they exist already).
  if _batched then
    _unbatched := queues.unbatch_tasks(_task_ids);
    _leases := array(select distinct h.task_lease_id
                       from unnest(_task_ids) i(id) cross join lateral queues.lease_held_of(i.id) h
                      order by 1);
  end if;
  if cardinality(_leases) = 0 then
    return _unbatched;
  end if;
  perform pg_advisory_xact_lock(20253, hashint8(l.id)) from unnest(_leases) l(id);
  -- A new statement, so a new snapshot: what a completion or a rescue that held a lock
  -- committed is seen.
  _held := array(select distinct h.task_id
                   from unnest(_task_ids) i(id) cross join lateral queues.lease_held_of(i.id) h
                  order by 1);
  if cardinality(_held) = 0 then
    return _unbatched;
  end if;
  perform queues.write_pending_rows(_held);
  return array(select x from unnest(_unbatched || _held) x order by x);
end;
$$;
