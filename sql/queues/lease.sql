-- Heartbeats and releases of leases. Both act only on a task's current lease: a worker
-- whose lease was taken over learns it from the missing row and must stop.

-- Validates parallel arrays of task ids and lease ids.
create or replace function queues.assert_lease_pairs(_task_ids bigint[], _task_lease_ids bigint[])
  returns void
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_ids is null or _task_lease_ids is null then
    raise exception 'task_ids and task_lease_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) <> cardinality(_task_lease_ids) then
    raise exception 'task_ids and task_lease_ids must have the same length (% and %)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 leases per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null then
    raise exception 'task_ids and task_lease_ids must not contain null' using errcode = '22004';
  end if;
end;
$$;

-- Resource-key locks. Everything that changes queues.resource_lease holds the key's
-- transaction-scoped advisory lock (class 20251, hashtext(key)) while it does: the claim
-- takes it with pg_try_advisory_xact_lock and skips a key it cannot get, so a claim
-- never waits on a key; the others (completion, heartbeat, release, revocation) take
-- theirs in one global order with this function, so they cannot deadlock each other.
-- It finds the keys in task_pending_keyed_idx (the pending tasks with a key): a batch of
-- unkeyed tasks reads no row here (a completion round of 500 probed the primary key 500
-- times before, about 0.3 to 0.5 ms of its 3.5).
create or replace function queues.lock_resource_keys(_task_ids bigint[])
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text;
begin
  for _key in
    select distinct p.resource_key
      from queues.task_pending p
     where p.task_id = any (_task_ids) and p.resource_key is not null
     order by 1
  loop
    perform pg_advisory_xact_lock(20251, hashtext(_key));
  end loop;
end;
$$;

-- Extends each given lease that is still its task's current lease to _now + _lease_seconds
-- and appends a queues.task_lease_extension fact. Parallel arrays of task and lease ids.
-- Never waits for a task's row: a lease whose row another transaction holds (a completion
-- of that task in flight, usually) is left as it is, its expiry unchanged, and returned
-- as still held; the next heartbeat extends it if it still is. A task its claim lease
-- holds without a row waits for a completion of that lease in flight (at most the
-- session's lock_timeout, or 200 ms when it has none), then is left the same way. Returns the leases still
-- held, extended or left; a lease missing from the result was lost (the task was
-- re-claimed after an expiry, or completed, or its resource key went to another task).
create or replace function queues.extend_leases_at(
  _now            timestamptz,
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _lease_seconds  integer
) returns table (task_id bigint, task_lease_id bigint, expires_at timestamptz)
  language plpgsql volatile
  rows 10
  security definer
  -- Every read is by key (task_pending's and claim_lease's primary keys, resource_lease's
  -- key): a plan made while task_pending looked nearly empty (a queue vacuumed just after
  -- it drained) must not probe it by a sequential scan per task once it has filled again.
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _locked bigint[];
  _other bigint[] := '{}';
  _leases bigint[];
  _lease bigint;
  _free bigint[];
  _waited boolean := false;
  _timeout text;
  _held bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;
  -- The ready set (docs/design/hot-path.md): the claim leases of the tasks without a row,
  -- locked shared first, in lease id order, as a completion or a rescue of the lease
  -- takes the lock exclusively before any row: a completion of the lease in flight is
  -- waited for, up to the session's lock_timeout or 200 ms when it has none (then those
  -- tasks are left as they are, and the next heartbeat extends them). Without the wait, a long task among many short ones of one
  -- claim could find its lease's lock held by a completion round at every heartbeat.
  -- (A scalar subquery per task: a primary-key probe, never an anti-join planned from
  -- task_pending's statistics.)
  _leases := array(select distinct i.task_lease_id
                     from unnest(_task_ids, _task_lease_ids) i(task_id, task_lease_id)
                    where (select true from queues.task_pending p where p.task_id = i.task_id) is null
                    order by 1);
  if cardinality(_leases) > 0 then
    _timeout := current_setting('lock_timeout');
    _free := '{}';
    foreach _lease in array _leases loop
      if _waited then
        -- One wait per heartbeat: the other leases are only tried.
        if pg_try_advisory_xact_lock_shared(20253, hashint8(_lease)) then
          _free := _free || _lease;
        end if;
        continue;
      end if;
      begin
        perform set_config('lock_timeout', case when _timeout in ('0', '') then '200ms' else _timeout end, true);
        perform pg_advisory_xact_lock_shared(20253, hashint8(_lease));
        perform set_config('lock_timeout', _timeout, true);
        _free := _free || _lease;
      exception when lock_not_available then
        _waited := true;
      end;
    end loop;
    _leases := _free;
  end if;
  -- The rows first (a primary-key probe of `= any`), skipping those another transaction
  -- holds. A heartbeat that waited for a row held the rows it had already locked
  -- meanwhile, so a completion batch in flight made it wait, and the completions of its
  -- other tasks waited for it in turn (up to 3 s in a soak: RELIABILITY.md, scenario 10).
  _locked := array(select p.task_id from queues.task_pending p
                    where p.task_id = any (_task_ids) order by p.task_id for no key update skip locked);
  -- The others: rows held elsewhere, and tasks no longer pending (normally none).
  if cardinality(_locked) < cardinality(_task_ids) then
    _other := array(select i.id from unnest(_task_ids) i(id) except select l.id from unnest(_locked) l(id));
  end if;
  -- The ready set (docs/design/hot-path.md): a task its claim took out of the claim
  -- index has no row; its claim lease holds it. Heartbeated, it goes back onto a row,
  -- written from the facts (leased by that lease), and is extended there as any row is:
  -- from then on the per-row paths (the fence, the expired-lease claim, the suspect
  -- accounting) hold it, and the rescuer has nothing to do for it. Under the lease's lock
  -- taken shared above, then read in a new statement, after the lock: the lease names the
  -- task, it has no row and no end.
  if cardinality(_other) > 0 then
    if cardinality(_leases) > 0 then
      _held := array(
        select i.task_id
          from unnest(_task_ids, _task_lease_ids) i(task_id, task_lease_id)
         where i.task_id = any (_other) and i.task_lease_id = any (_leases)
           -- (Scalar subqueries: a probe by key per task, never a join planned from the
           -- tables' statistics, which a queue vacuumed nearly empty made a scan of the
           -- whole claim index per task.)
           and (select true from queues.task_pending p where p.task_id = i.task_id) is null
           and coalesce((select i.task_id = any (c.task_ids) from queues.claim_lease c
                          where c.task_lease_id = i.task_lease_id limit 1), false)
           and (select true from queues.task_end_of(i.task_id) e limit 1) is null
         order by i.task_id);
      if cardinality(_held) > 0 then
        perform queues.write_pending_rows(_held);
        _locked := _locked || _held;
        _other := array(select o.id from unnest(_other) o(id) where o.id <> all (_held));
      end if;
    end if;
  end if;

  -- The rows by primary key from the array of ids, each row's lease looked up in a map of
  -- the input: no join of the input to task_pending, whose plan would follow
  -- task_pending's statistics (see queues.claim_tasks_at's moved).
  return query
  with m as (
    select jsonb_object_agg(i.task_id::text, i.task_lease_id) as leases
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
  ),
  extended as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds)
      from m
     where p.task_id = any (_locked)
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
       -- A keyed task extends only while it holds its key: once an expired lease's key
       -- went to another task (which may hold it still, or have completed), the lease
       -- is lost and must not come back to life beside the other task's.
       and (p.resource_key is null
            or exists (select 1 from queues.resource_lease r
                        where r.resource_key = p.resource_key and r.task_id = p.task_id))
    returning p.task_id, p.current_lease_id, p.available_at, p.resource_key
  ),
  -- The rows another transaction holds, as last committed: a lease still current there
  -- (with its key, for a keyed task) is still held.
  left_as_is as (
    select p.task_id, p.current_lease_id, p.available_at
      from queues.task_pending p, m
     where p.task_id = any (_other)
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
       and (p.resource_key is null
            or exists (select 1 from queues.resource_lease r
                        where r.resource_key = p.resource_key and r.task_id = p.task_id))
  ),
  -- Tasks without a row whose claim lease a completion or rescue in flight holds (its
  -- lock was not taken above): as last committed, still held by that lease, until its
  -- expiry.
  left_in_lease as (
    select i.task_id, i.task_lease_id, c.expires_at
      from unnest(_task_ids, _task_lease_ids) i(task_id, task_lease_id)
     cross join lateral (select c.expires_at, c.task_ids || array[]::bigint[] as task_ids
                           from queues.claim_lease c where c.task_lease_id = i.task_lease_id limit 1) c
     where i.task_id = any (_other)
       and i.task_id = any (c.task_ids)
       and (select true from queues.task_pending p where p.task_id = i.task_id) is null
       and (select true from queues.task_end_of(i.task_id) e limit 1) is null
  ),
  recorded as (
    insert into queues.task_lease_extension (task_id, task_lease_id, extended_at, expires_at)
    select e.task_id, e.current_lease_id, _now, e.available_at from extended e
  ),
  key_extended as (
    update queues.resource_lease r
       set expires_at = e.available_at
      from extended e
     where e.resource_key is not null and r.resource_key = e.resource_key and r.task_id = e.task_id
  )
  select e.task_id, e.current_lease_id, e.available_at from extended e
  union all
  select l.task_id, l.current_lease_id, l.available_at from left_as_is l
  union all
  select l.task_id, l.task_lease_id, l.expires_at from left_in_lease l;
end;
$$;

create or replace function queues.extend_leases(
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _lease_seconds  integer default null
) returns table (task_id bigint, task_lease_id bigint, expires_at timestamptz)
  language sql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.extend_leases_at(now(), _task_ids, _task_lease_ids, coalesce(_lease_seconds, 300))
$$;

-- Gives leases back before they expire (graceful shutdown): each task whose current lease
-- is given becomes claimable at once, and the release is not counted towards abandoning
-- it. The lease ends there: completing, failing or extending with it is refused.
-- Returns the task ids released; wakes listening workers.
create or replace function queues.release_leases(
  _task_ids       bigint[],
  _task_lease_ids bigint[]
) returns table (task_id bigint)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _released bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(_task_ids);

  -- The rows by primary key from the array of ids, each row's lease looked up in a map of
  -- the input (see queues.extend_leases_at), locked first in task id order (as every call
  -- that locks several claim-index rows: sql/queues/lock_order.test.ts).
  with m as (
    select jsonb_object_agg(i.task_id::text, i.task_lease_id) as leases
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
  ),
  locked as (
    select x.task_id
      from queues.task_pending x, m
     where x.task_id = any (_task_ids)
       and x.current_lease_id = (m.leases ->> x.task_id::text)::bigint
     order by x.task_id
       for no key update of x
  ),
  released as (
    update queues.task_pending p
       set available_at = now(),
           -- A released lease is no longer held: its worker can neither extend it nor
           -- complete or record against it.
           current_lease_id = null,
           released_count = p.released_count + 1
      from m
     where p.task_id = any (array(select l.task_id from locked l))
       and p.current_lease_id = (m.leases ->> p.task_id::text)::bigint
    returning p.task_id, (m.leases ->> p.task_id::text)::bigint as task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_release (task_id, task_lease_id)
    select r.task_id, r.task_lease_id from released r
    on conflict do nothing
  ),
  key_freed as (
    delete from queues.resource_lease k
     using released r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select array_agg(r.task_id order by r.task_id) into _released from released r;

  if _released is not null then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select unnest(coalesce(_released, '{}'));
end;
$$;
