-- Task results: what a run produced (the seed's `result jsonb`), kept as an append-only
-- fact, queues.task_result, one row per (task, lease). Written by the worker in the
-- transaction that completes the task, fenced like completion: only the task's current
-- lease may record, so a worker whose lease was taken over records nothing.
--
--   queues.assert_current_lease(task_id, lease_id)   helper: locks the pending row or raises
--   queues.record_task_result(task_id, lease_id, result)   worker
--   queues.list_task_results(task_id)                 app, api: every result, oldest first

-- Locks the task's pending row when _task_lease_id is its current lease; otherwise raises
-- 55000 with the queue's lease-loss marker (schema queues, constraint task_lease_current:
-- re-claimed, revoked, released or completed) or 23503 (no such task).
-- Holding the row lock keeps a concurrent revocation or claim out until the caller's
-- transaction ends. The task's resource-key lock is taken first, as completion,
-- heartbeats and revocation take theirs (queues.lock_resource_keys): a row lock taken
-- before it deadlocks with a heartbeat that holds the key and waits for the row.
create or replace function queues.assert_current_lease(_task_id bigint, _task_lease_id bigint)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  if _task_lease_id is null then
    raise exception 'task_lease_id must not be null' using errcode = '22004';
  end if;
  perform queues.lock_resource_keys(array[_task_id]);
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(array[_task_id]);
  perform 1 from queues.task_pending p
   where p.task_id = _task_id and p.current_lease_id = _task_lease_id
     for update;
  if not found then
    if not exists (select 1 from queues.task t where t.task_id = _task_id) then
      raise exception 'task % does not exist', _task_id using errcode = '23503';
    end if;
    raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', schema = 'queues', constraint = 'task_lease_current',
            hint = 'Another worker claimed the task after this lease expired.';
  end if;
end;
$$;

-- Records _result for the run holding _task_lease_id. Call it in the transaction that
-- completes the task. Refuses: a lease that is not current (55000), a result that is not
-- a JSON object (22023) or over queues.max_payload_bytes() (54000), a second result for
-- the same lease (23505).
create or replace function queues.record_task_result(_task_id bigint, _task_lease_id bigint, _result jsonb)
  returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _result is null then
    raise exception 'result must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_result) <> 'object' then
    raise exception 'result must be a JSON object, got %', jsonb_typeof(_result) using errcode = '22023';
  end if;
  if pg_column_size(_result) > queues.max_payload_bytes() then
    raise exception 'result is % bytes, over the limit of % bytes', pg_column_size(_result), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  perform queues.assert_current_lease(_task_id, _task_lease_id);
  insert into queues.task_result (task_id, task_lease_id, result) values (_task_id, _task_lease_id, _result);
end;
$$;

-- Every result recorded for a task, oldest first (one per run that recorded one).
create or replace function queues.list_task_results(_task_id bigint)
  returns table (task_lease_id bigint, result jsonb, recorded_at timestamptz)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select r.task_lease_id, r.result, r.recorded_at
    from queues.task_result r
   where r.task_id = _task_id
   order by r.task_lease_id
$$;

-- Grants for the functions above (kept with them so this concern stays in one file;
-- listed in sql/database-user-grants.json).
revoke execute on function
  queues.assert_current_lease(bigint, bigint),
  queues.record_task_result(bigint, bigint, jsonb),
  queues.list_task_results(bigint)
from public;
grant execute on function queues.record_task_result(bigint, bigint, jsonb) to :DATABASE_WORKER;
grant execute on function queues.list_task_results(bigint) to :DATABASE_APP, :DATABASE_API;
