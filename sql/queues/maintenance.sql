-- Maintenance of the derived structures (task_pending, resource_lease). Owner only.

-- The claim-index rows of _task_ids (null: every task) as the facts give them: a task
-- without an end and without a row, available at its scheduled time, the retry time of
-- its last failed attempt, the retry time of its last transient interruption, or the
-- effective expiry of its newest lease, whichever is latest, with the lease accounting
-- (lease, release, failed attempt, uncounted and interruption counts, the named
-- suspect). queues.rebuild_task_pending writes every task's; a completion that retries,
-- and the rescuer of expired claim leases, write those of the tasks that come back to
-- the claim index (the ready set, docs/design/hot-path.md).
create or replace function queues.pending_rows_of(_task_ids bigint[])
  returns table (task_id bigint, task_type text, priority integer, scheduled_at timestamptz,
                 resource_key text, available_at timestamptz, current_lease_id bigint,
                 lease_count integer, released_count integer, max_attempts integer,
                 failed_attempts integer, uncounted_count integer, interrupted_count integer,
                 suspect_lease boolean, group_key text)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  -- A scheduled task asked to run now (queues.task_run_now) counts from that request.
  select t.task_id, t.task_type, t.priority, least(t.scheduled_at, rn.requested_at), t.resource_key,
         greatest(least(t.scheduled_at, rn.requested_at),
                  -- a lease ended by a failed attempt gives way to the attempt's retry time
                  case when f.task_lease_id is null or f.task_lease_id < l.task_lease_id then l.expires_at end,
                  f.retry_at,
                  -- a lease ended by a transient interruption gives way to its retry time
                  i.retry_at),
         -- A lease ended by a release, a revocation or a later failed attempt is not held.
         case when l.released_at is null and l.revoked_at is null
                   and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id)
              then l.task_lease_id end,
         coalesce(l.lease_count, 0), coalesce(l.released_count, 0),
         t.max_attempts, coalesce(f.failed_attempts, 0),
         -- Leases that ended without counting towards abandonment: neither released, nor
         -- ended by a failed attempt, nor the lease still held (a claim counts that one
         -- when it expires), not naming the task their suspect, and not revoked with the
         -- task marked started under them (a lease written before suspects were named:
         -- not started).
         (select count(*)::integer
            from queues.task_lease_effective_of(t.task_id) u
           where u.released_at is null
             and not (coalesce(u.suspect, false)
                      or ((u.suspect is null or u.revoked_at is not null)
                          and exists (select 1 from queues.task_lease_started s
                                       where s.task_id = u.task_id and s.task_lease_id = u.task_lease_id)))
             and not exists (select 1 from queues.task_attempt_failed a where a.task_id = u.task_id and a.task_lease_id = u.task_lease_id)
             and not (u.task_lease_id = l.task_lease_id and l.revoked_at is null
                      and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id))),
         coalesce(i.interrupted_count, 0),
         coalesce(l.suspect, false),
         t.group_key
    from queues.task t
    left join lateral (
      select le.task_lease_id, le.expires_at, le.released_at, le.revoked_at, le.suspect,
             count(*) over () :: integer as lease_count,
             count(le.released_at) over () :: integer as released_count
        from queues.task_lease_effective_of(t.task_id) le
       order by le.task_lease_id desc
       limit 1
    ) l on true
    left join lateral (
      select a.retry_at, a.task_lease_id, count(*) over () :: integer as failed_attempts
        from queues.task_attempt_failed a
       where a.task_id = t.task_id
       order by a.task_attempt_failed_id desc
       limit 1
    ) f on true
    left join lateral (
      select max(x.retry_at) as retry_at, count(*)::integer as interrupted_count
        from queues.task_interruption x
       where x.task_id = t.task_id
    ) i on true
    left join queues.task_run_now rn on rn.task_id = t.task_id
   where (_task_ids is null or t.task_id = any (_task_ids))
     and not exists (select 1 from queues.task_end_of(t.task_id) c)
     -- (rebuild_task_pending deletes every row first; another caller asks for tasks out of it)
     and not exists (select 1 from queues.task_pending x where x.task_id = t.task_id)
     -- nor one a ready batch holds (the rebuild empties them first: sql/queues/ready_batch.sql)
     and not exists (select 1 from queues.batched_of(t.task_id) b)
$$;

-- Writes the claim-index rows the facts give _task_ids (null: every unfinished task) and
-- returns how many it wrote; a task that has a row keeps it. The one writer of rows from
-- the facts: the rebuild, the rescuer, a heartbeat or a path giving a task its row back
-- (queues.hold_rows_of), a completion returning a task to the claim index for its retry.
create or replace function queues.write_pending_rows(_task_ids bigint[])
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _count bigint;
begin
  insert into queues.task_pending
    (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
     lease_count, released_count, max_attempts, failed_attempts, uncounted_count, interrupted_count,
     suspect_lease, group_key)
  select r.* from queues.pending_rows_of(_task_ids) r order by r.task_id
  on conflict (task_id) do nothing;
  get diagnostics _count = row_count;
  return _count;
end;
$$;

-- Rebuilds queues.task_pending and queues.resource_lease from the facts (and empties the
-- ready batches, sql/queues/ready_batch.sql, whose tasks get rows): every task
-- without a completion, available at its scheduled time, the retry time of its last
-- failed attempt, the retry time of its last transient interruption, or the effective
-- expiry of its newest lease (heartbeats, releases and revocations applied), whichever is
-- latest; a task waiting for its dependencies at 'infinity'. Returns the number of pending
-- tasks.
create or replace function queues.rebuild_task_pending() returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _count bigint;
begin
  lock table queues.task_pending, queues.task_ready_batch, queues.resource_lease in exclusive mode;
  delete from queues.task_pending;
  -- The ready batches' tasks get claim-index rows like every other unfinished task.
  delete from queues.task_ready_batch;
  delete from queues.resource_lease;
  _count := queues.write_pending_rows(null);

  -- A task never leased whose dependencies have not all succeeded waits for them
  -- (sql/queues/dependencies.sql).
  update queues.task_pending p
     set scheduled_at = 'infinity', available_at = 'infinity'
   where p.current_lease_id is null and p.lease_count = 0
     and p.task_id in (
       select d.task_id from queues.task_dependency d
        where exists (select 1 from queues.task_pending x where x.task_id = d.depends_on_task_id)
           or exists (select 1 from queues.task_completed c
                       where c.task_id = d.depends_on_task_id and c.outcome <> 'succeeded'));

  -- Each resource key held by a live lease, as the claim left it.
  insert into queues.resource_lease (resource_key, task_id, expires_at)
  select distinct on (p.resource_key) p.resource_key, p.task_id, p.available_at
    from queues.task_pending p
   where p.resource_key is not null and p.current_lease_id is not null
   order by p.resource_key, p.available_at desc;
  if _count > 0 then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _count;
end;
$$;

-- The rescuer of the ready set (docs/design/hot-path.md): a claim takes an unkeyed task
-- of an unlimited type on its first lease out of the claim index, and its claim lease
-- holds it. Rescuing a claim lease that expired by _now: under the lease's advisory lock
-- taken exclusively (class 20253, as the completions of the lease take it), its tasks
-- with no end, no claim-index row and no live heartbeat extension of their own come back
-- to the claim index as the facts give them: leased by the expired lease, available
-- since its expiry, so the next claim takes them as it takes any expired lease (a
-- suspect; the expiry counted only when the lease named the task its suspect). No newer
-- lease is looked for: a task leased before is claimed on its row (queues.claim_tasks_at),
-- so a task of the lease with neither a row nor an end is still the lease's.
-- queues.rescue_lease_at rescues one lease and returns the number of tasks it returned.
create or replace function queues.rescue_lease_at(_task_lease_id bigint, _task_ids bigint[], _now timestamptz)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n bigint;
begin
  perform pg_advisory_xact_lock(20253, hashint8(_task_lease_id));
  _n := queues.write_pending_rows(array(
           select u.task_id from unnest(_task_ids) u(task_id)
            where not exists (select 1 from queues.task_pending p where p.task_id = u.task_id)
              and not exists (select 1 from queues.task_end_of(u.task_id) e)
              and not exists (select 1 from queues.task_lease_extension x
                               where x.task_id = u.task_id and x.task_lease_id = _task_lease_id
                                 and x.expires_at > _now)));
  return _n;
end;
$$;

-- Every claim lease expired by _now with an unfinished task out of the claim index,
-- rescued (a full pass over the claim leases: for tests and repairs; the claims rescue
-- through queues.rescue_due_leases_at).
create or replace function queues.rescue_leases_at(_now timestamptz)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _lease record;
  _count bigint := 0;
begin
  for _lease in
    select c.task_lease_id, c.task_ids
      from queues.claim_lease c
     where c.expires_at <= _now
       and exists (select 1 from unnest(c.task_ids) u(task_id)
                    where not exists (select 1 from queues.task_pending p where p.task_id = u.task_id)
                      and not exists (select 1 from queues.task_end_of(u.task_id) e))
     order by c.task_lease_id
  loop
    _count := _count + queues.rescue_lease_at(_lease.task_lease_id, _lease.task_ids, _now);
  end loop;
  if _count > 0 then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _count;
end;
$$;

-- The rows of queues.claim_lease_due read by the claims, each by its index whatever the
-- table's size when the session planned it. The table holds a row per claim made within
-- the lease time: empty, and known empty once vacuumed, on an idle queue; thousands on a
-- busy one. A generic plan made while it was empty (a session's first claim) scans and
-- sorts the whole table on every later call. The claim's probe of the earliest expiry is
-- a subquery of its first statement (queues.claim_tasks_at plans no sequential scan); the
-- function below sets enable_seqscan = off for its own statement only: it calls no other
-- function, so no plan made under the setting serves another caller.
--
-- Takes up to 100 rows of the claim leases due by _now, oldest expiry first, skipping
-- rows another pass holds (skip locked), and deletes them: returns each one's lease and
-- task. The rows are deleted by primary key from the array of the due ones
-- (= any (array(...))): an IN was planned as a semi-join that read every row.
create or replace function queues.take_due_claim_leases_at(_now timestamptz)
  returns table (task_lease_id bigint, task_id bigint)
  language sql volatile
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
  delete from queues.claim_lease_due d
   where d.task_lease_id = any (array(select x.task_lease_id from queues.claim_lease_due x
                                       where x.expires_at <= _now
                                       order by x.expires_at
                                       limit 100
                                         for update skip locked))
  returning d.task_lease_id, d.task_id;
$$;

-- The rescuer run by the claims (queues.claim_tasks_at calls it before it scans, when the
-- earliest row of queues.claim_lease_due is due): the claim leases
-- due by _now (queues.claim_lease_due, one row per claim that took a task out of the claim
-- index, written by the claim), at most 100 a pass, oldest expiry first, each row deleted
-- and its lease rescued (queues.rescue_lease_at, under the lease's lock). Rows another
-- pass holds are skipped (skip locked): concurrent claims rescue different leases. A row
-- is read once it is committed, so a claim that commits after its own lease expired is
-- rescued by the next pass. The claim reads no partition of claim_lease unless a lease is
-- due (an open claim transaction then holds no lock on claim_lease_default, which the
-- attach of a new history set takes). Returns the number of tasks returned to the claim
-- index.
create or replace function queues.rescue_due_leases_at(_now timestamptz)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _lease record;
  _task_ids bigint[];
  _count bigint := 0;
begin
  for _lease in
    select t.task_lease_id, t.task_id from queues.take_due_claim_leases_at(_now) t
  loop
    select c.task_ids into _task_ids
      from queues.claim_lease c
     where c.task_id = _lease.task_id and c.task_lease_id = _lease.task_lease_id;
    if found then
      _count := _count + queues.rescue_lease_at(_lease.task_lease_id, _task_ids, _now);
    end if;
  end loop;
  if _count > 0 then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _count;
end;
$$;
