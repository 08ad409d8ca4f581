--! Previous: sha1:fbd308bbb4f4660944961c032cd08dcc72dca8a0
--! Hash: sha1:726add09fc9e8c844089d7f44347042d9869ef93
--! Message: One writer of claim-index rows from the facts (queues.write_pending_rows)

--! split: 100-write-pending-rows.sql
set local lock_timeout = '5s';
-- One writer of claim-index rows from the facts (queues.write_pending_rows), used by the
-- rebuild, the rescuer, heartbeats, queues.hold_rows_of and a completion's retry.
--! Included queues/maintenance.sql
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
         -- when it expires), and not naming the task their suspect (a lease written before
         -- suspects were named: not started).
         (select count(*)::integer
            from queues.task_lease_effective_of(t.task_id) u
           where u.released_at is null
             and not coalesce(u.suspect, exists (select 1 from queues.task_lease_started s
                                                  where s.task_id = u.task_id and s.task_lease_id = u.task_lease_id))
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

-- Rebuilds queues.task_pending and queues.resource_lease from the facts: every task
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
  lock table queues.task_pending, queues.resource_lease in exclusive mode;
  delete from queues.task_pending;
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

-- The rescuer run by the claims (queues.claim_tasks_at calls it first): the claim leases
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
    delete from queues.claim_lease_due d
     where d.task_lease_id in (select x.task_lease_id from queues.claim_lease_due x
                                where x.expires_at <= _now
                                order by x.expires_at
                                limit 100
                                  for update skip locked)
    returning d.task_lease_id, d.task_id
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
--! EndIncluded queues/maintenance.sql
--! Included queues/complete.sql
-- Completion: queues.complete_task (one) and queues.complete_tasks (a batch).
--
-- Fencing: a caller that passes the lease it holds can only complete while that lease
-- is the task's newest one. A worker whose lease expired and was re-claimed by another
-- worker gets 'lease_lost' and changes nothing.
--
-- Where an end is written: the plain successes of a call are one completion round per
-- task type (queues.completion_round, naming its tasks with the lease and start of each);
-- every other end is a queues.task_completed row. Read a task's end through
-- queues.task_end / queues.task_end_of (sql/queues/task_end.sql), never the tables.

-- Completes a batch. Parallel arrays: _task_lease_ids, _outcomes, _retries and
-- _started_at may be null (no fencing, outcome by default, retries allowed, start not
-- known) or have one element per task (elements may be null). _started_at: when the run
-- that ends here started, kept with the completion (or the failed attempt): the worker
-- knows it, and reports no start separately.
-- The default outcome (a null element) keeps a failure reported with queues.fail_task:
-- 'failed' when an error was recorded against the task during its current run (under
-- its current lease, or without a lease since that lease was taken; since it was
-- enqueued when it holds none), else 'succeeded'. So the specification's worker contract,
-- fail_task and then complete_task, completes the task failed.
-- A 'failed' outcome for a task with max_attempts > 1 and attempts left is not terminal
-- unless its _retries element is false (a failure no retry can mend, such as a
-- validation failure): the attempt is recorded (queues.task_attempt_failed) and the task
-- runs again after an exponential backoff (internal.backoff).
-- 'validation_failed' (a validation_failure_message: a business outcome no retry can
-- mend) is final too, and, unlike 'failed', never a dead letter.
-- A keyed task's lease completes only while the task holds its resource key.
-- Returns one row per input task, in input order: result is
--   'completed'          this call completed it
--   'retry_scheduled'    a failed attempt of a task that runs again
--   'already_completed'  it was completed before by a caller passing the same lease, or
--                        this call passes none (idempotent; nothing changed)
--   'lease_lost'         _task_lease_id is not the task's current lease, its resource key
--                        went to another task, or the task was completed by anyone not
--                        passing this lease: another worker, an unfenced caller, or the
--                        queue abandoning it (nothing changed)
--   'unknown_task'       no such task
create or replace function queues.complete_tasks(
  _task_ids       bigint[],
  _task_lease_ids bigint[] default null,
  _outcomes       text[] default null,
  _retries        boolean[] default null,
  _started_at     timestamptz[] default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  -- Planned once, not per call: the statements below have one good plan whatever the
  -- arguments (index order with a LIMIT; primary-key probes), and planning was about
  -- 40% of the call's cost.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _bad text;
  _retried bigint[];
  _all_succeeded boolean;
  _calls text;
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 tasks per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain null' using errcode = '22004';
  end if;
  if _task_lease_ids is not null and cardinality(_task_lease_ids) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids must have one element per task (% tasks, % lease ids)',
      cardinality(_task_ids), cardinality(_task_lease_ids) using errcode = '22023';
  end if;
  if _outcomes is not null and cardinality(_outcomes) <> cardinality(_task_ids) then
    raise exception 'outcomes must have one element per task (% tasks, % outcomes)',
      cardinality(_task_ids), cardinality(_outcomes) using errcode = '22023';
  end if;
  -- (A round of plain successes, every outcome 'succeeded', is checked without a query.)
  _all_succeeded := coalesce('succeeded' = all (_outcomes), false);
  if not _all_succeeded then
    select o into _bad from unnest(_outcomes) o
     where o is not null and o not in ('succeeded', 'failed', 'abandoned', 'cancelled', 'validation_failed') limit 1;
    if found then
      raise exception 'unknown outcome %; expected succeeded, failed, abandoned, cancelled or validation_failed',
        quote_literal(left(_bad, 100)) using errcode = '22023';
    end if;
  end if;
  if _retries is not null and cardinality(_retries) <> cardinality(_task_ids) then
    raise exception 'retries must have one element per task (% tasks, % retries)',
      cardinality(_task_ids), cardinality(_retries) using errcode = '22023';
  end if;
  if _started_at is not null and cardinality(_started_at) <> cardinality(_task_ids) then
    raise exception 'started_at must have one element per task (% tasks, % start times)',
      cardinality(_task_ids), cardinality(_started_at) using errcode = '22023';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;

  perform queues.lock_resource_keys(_task_ids);
  -- A task completed without a lease (an unfenced caller) that its claim took out of the
  -- claim index gets its row back first (queues.hold_rows_of), and ends on it.
  if _task_lease_ids is null or array_position(_task_lease_ids, null) is not null then
    perform queues.hold_rows_of(array(
      select i.id from unnest(_task_ids, coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])))
                       i(id, lease)
       where i.lease is null));
  end if;
  -- The ready set's fence (docs/design/hot-path.md): a task a claim took out of the claim
  -- index is held by its claim lease. The leases named here are locked (transaction-scoped
  -- advisory locks, class 20253, in lease id order), exclusively: the rescuer of an
  -- expired lease takes the same lock, so a completion and the rescue of its lease never
  -- decide at once, and two completions under one lease take turns. Nothing is written.
  perform pg_advisory_xact_lock(20253, hashint8(l.id))
     from (select distinct x.id from unnest(_task_lease_ids) x(id) where x.id is not null order by 1) l;

  return query
  with input as (
    select i.task_id, i.task_lease_id, i.outcome,
           coalesce(i.retry, true) as may_retry, i.started_at, i.ord
      from unnest(_task_ids,
                  coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])),
                  coalesce(_outcomes, array_fill(null::text, array[cardinality(_task_ids)])),
                  coalesce(_retries, array_fill(null::boolean, array[cardinality(_task_ids)])),
                  coalesce(_started_at, array_fill(null::timestamptz, array[cardinality(_task_ids)])))
           with ordinality as i(task_id, task_lease_id, outcome, retry, started_at, ord)
  ),
  -- The pending rows this call may act on, locked in task id order (as every call that
  -- locks several of them: a cancel of some of them cannot deadlock with this batch): a
  -- concurrent claim skips them, a concurrent completion waits and then finds nothing.
  held_row as (
    select p.task_id, p.task_type, p.current_lease_id, p.resource_key, i.task_lease_id, i.may_retry,
           p.failed_attempts, p.max_attempts, i.started_at, true as has_row,
           case
             when i.outcome is not null then i.outcome
             -- The default: an error of the current run makes it a failure (evaluated only
             -- for a null outcome; the worker always names its outcome).
             when exists (select 1 from queues.error e
                           where e.task_id = p.task_id
                             and (e.task_lease_id = p.current_lease_id
                                  or (e.task_lease_id is null
                                      and e.created_at >= coalesce(
                                            (select l.leased_at from queues.task_lease_at(p.task_id, p.current_lease_id) l),
                                            (select t.enqueued_at from queues.task t where t.task_id = p.task_id)))))
               then 'failed'
             else 'succeeded'
           end as outcome
      from queues.task_pending p
      join input i on i.task_id = p.task_id
     -- A primary-key probe per task, whatever the planner estimates for the input.
     where p.task_id = any (_task_ids)
       and (i.task_lease_id is null
            or (p.current_lease_id = i.task_lease_id
                -- A keyed task completes under its lease only while it holds its key.
                and (p.resource_key is null
                     or exists (select 1 from queues.resource_lease r
                                 where r.resource_key = p.resource_key and r.task_id = p.task_id))))
     order by p.task_id
       for update of p
  ),
  -- Tasks out of the claim index, held by the claim lease the caller names. Read per
  -- lease, not per task: the lease by its id (it names its tasks); among the call's
  -- tasks it names, those that ended (a round in its range, or a completion) are no
  -- longer its; nor is a task with a claim-index row (back in the index: rescued,
  -- released, revoked or retrying, held there by a newer lease, or by no one). No newer
  -- lease is looked for: a claim takes a task out of the claim index only on its first
  -- lease (queues.claim_tasks_at leases a task leased before on its row), so a task the
  -- lease named that came back to the index keeps a row until its end. Read in this
  -- statement, after the lease locks above: what the rescuer or another completion of
  -- the lease did is seen.
  lease_named as (
    select c.task_lease_id, c.task_range, c.task_ids
      from (select distinct i.task_lease_id from input i where i.task_lease_id is not null) li
     cross join lateral (
       -- The array decompressed once here (`|| '{}'` returns it detoasted): read as
       -- stored, each `= any` below decompressed the lease's 500 ids again, per task.
       select c.task_lease_id, c.task_ids || array[]::bigint[] as task_ids, c.task_range from queues.claim_lease c
        where c.task_lease_id = li.task_lease_id limit 1
     ) c
  ),
  -- The call's tasks each lease names. (Each input row scans its lease's array once: a
  -- join of the input to the unnested arrays was planned, generically, as nested loops
  -- that unnested the lease once per input row; a hash join to the arrays unnested once
  -- and kept cost the same, 0.5 ms per call of 500.)
  lease_task as (
    select i.*
      from input i
     where i.task_lease_id is not null
       and exists (select 1 from lease_named l
                    where l.task_lease_id = i.task_lease_id and i.task_id = any (l.task_ids))
  ),
  lease_gone as (
    select u.task_id
      from lease_named l
      join queues.completion_round r on r.task_range && l.task_range and r.task_id >= lower(l.task_range)
     cross join lateral unnest(r.task_ids) u(task_id)
    union all
    select c.task_id from queues.task_completed c where c.task_id = any (_task_ids)
  ),
  lease_open as (
    select lt.*
      from lease_task lt
     where not exists (select 1 from lease_gone g where g.task_id = lt.task_id)
       -- (a scalar subquery: a primary-key probe per task, never an anti-join planned
       -- from task_pending's statistics)
       and (select true from queues.task_pending p where p.task_id = lt.task_id) is null
  ),
  held_lease as (
    select t.task_id, t.task_type, i.task_lease_id, t.resource_key, i.task_lease_id, i.may_retry,
           case when i.outcome is distinct from 'succeeded'
                then (select count(*)::integer from queues.task_attempt_failed a where a.task_id = t.task_id)
                else 0 end,
           t.max_attempts, i.started_at, false,
           case
             when i.outcome is not null then i.outcome
             when exists (select 1 from queues.error e
                           where e.task_id = t.task_id
                             and (e.task_lease_id = i.task_lease_id
                                  or (e.task_lease_id is null
                                      and e.created_at >= (select l.leased_at
                                                              from queues.task_lease_at(t.task_id, i.task_lease_id) l))))
               then 'failed'
             else 'succeeded'
           end as outcome
      from lease_open i
     cross join lateral (select * from queues.task t where t.task_id = i.task_id limit 1) t
  ),
  held as (
    select h.task_id, h.task_type, h.current_lease_id, h.resource_key, h.task_lease_id, h.outcome,
           h.outcome = 'failed' and h.may_retry and h.failed_attempts + 1 < h.max_attempts as retry,
           h.failed_attempts, h.started_at, h.has_row
      from (select * from held_row union all select * from held_lease) h
  ),
  -- Simple retries: a failed attempt with attempts left runs again after a backoff.
  retry_facts as (
    insert into queues.task_attempt_failed (task_id, task_lease_id, failed_at, retry_at, started_at)
    select h.task_id, h.current_lease_id, now(), now() + internal.backoff(h.failed_attempts, 3600), h.started_at
      from held h where h.retry
    returning task_id, retry_at
  ),
  retried as (
    update queues.task_pending p
       set available_at = r.retry_at,
           current_lease_id = null,
           failed_attempts = p.failed_attempts + 1
      from retry_facts r
     where p.task_id = r.task_id
       and p.task_id = any (array(select r2.task_id from retry_facts r2))
    returning p.task_id
  ),
  -- (A task held by its claim lease has no row: only the rows held are deleted.)
  removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select h.task_id from held h where not h.retry and h.has_row))
    returning p.task_id
  ),
  -- Every end but a plain success: a task_completed row per task. The lease the caller
  -- held; null when it passed none. A fenced caller is told 'already_completed' only for
  -- a completion made under its own lease.
  ended as (
    insert into queues.task_completed (task_id, task_lease_id, outcome, task_type, started_at)
    select h.task_id, h.task_lease_id, h.outcome, h.task_type, h.started_at
      from held h where not h.retry and h.outcome <> 'succeeded'
    on conflict do nothing
    returning task_completed.task_id
  ),
  -- Plain successes: one completion round per task type, naming its tasks in ascending
  -- order with the lease the caller held and the run's start (microseconds since the
  -- epoch) of each. No constraint keeps a task from two ends: the pending row, locked
  -- above and deleted here, does (every end deletes it in the transaction that records
  -- the end, so a task with a pending row has none, and a concurrent completer of the
  -- same task waits for the lock and then finds no row).
  rounds as (
    insert into queues.completion_round (task_id, task_type, task_ids, task_lease_ids, started_us, task_range)
    select max(h.task_id), h.task_type,
           array_agg(h.task_id order by h.task_id),
           array_agg(h.task_lease_id order by h.task_id),
           -- date_part's float8, not extract's numeric: rounded, exact to the microsecond
           -- for any time of this century (its error is under a quarter of one).
           array_agg(round(date_part('epoch', h.started_at) * 1000000)::bigint order by h.task_id),
           int8range(min(h.task_id), max(h.task_id), '[]')
      from held h where not h.retry and h.outcome = 'succeeded'
     group by h.task_type
    returning completion_round.task_ids
  ),
  completed as (
    select e.task_id from ended e
    union all
    select u.task_id from rounds r cross join lateral unnest(r.task_ids) as u(task_id)
  ),
  -- The task's resource key (if any) is free again, whether it completed or waits to retry.
  unlocked as (
    delete from queues.resource_lease r
     using held h
     where h.resource_key is not null and r.resource_key = h.resource_key and r.task_id = h.task_id
  )
  select i.task_id,
         case
           when c.task_id is not null then 'completed'
           when rt.task_id is not null then 'retry_scheduled'
           -- Completed under another lease: the caller's lease was taken over, and its
           -- transaction must not commit as if it had completed the task.
           -- (Its end in either shape: queues.task_end_of, an index probe of each; a
           -- scalar subquery, evaluated only for the tasks this call did not complete.)
           when i.task_lease_id is not null
                and coalesce((select true from queues.task_end_of(i.task_id) e
                               where e.task_lease_id is distinct from i.task_lease_id limit 1), false)
             then 'lease_lost'
           when coalesce((select true from queues.task_end_of(i.task_id) e limit 1), false)
             then 'already_completed'
           when not exists (select 1 from queues.task t where t.task_id = i.task_id)
             then 'unknown_task'
           else 'lease_lost'
         end
    from input i
    left join completed c on c.task_id = i.task_id
    -- (every retry recorded: a claim-index row moved, or a lease-held task's written after)
    left join retry_facts rt on rt.task_id = i.task_id
   order by i.ord;

  -- A failed attempt of a task held by its claim lease (no claim-index row) returns it to
  -- the claim index, at its retry time, as the facts now give it. (The attempts this
  -- transaction recorded: failed_at is the transaction's now(). A call whose outcomes all
  -- succeeded recorded none.)
  if _task_lease_ids is not null and not _all_succeeded then
    _retried := array(select a.task_id from queues.task_attempt_failed a
                       where a.task_id = any (_task_ids) and a.failed_at = now()
                         and not exists (select 1 from queues.task_pending p where p.task_id = a.task_id));
    if cardinality(_retried) > 0 then
      perform queues.write_pending_rows(_retried);
    end if;
  end if;
  -- The transaction's completion calls, counted (queues.run_steps watches them: a step
  -- that ends a task without a claim-index row touches no row). A simple expression: no
  -- statement of its own.
  _calls := set_config('queues.completions',
                       (coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint + 1)::text,
                       true);
end;
$$;

-- The seeds' completion, extended: idempotent (true when this call completed the task or
-- scheduled its retry, false when it was already completed); fenced when _task_lease_id
-- is given (raises when that lease is no longer current); raises for an unknown task.
create or replace function queues.complete_task(
  _task_id       bigint,
  _task_lease_id bigint default null,
  _outcome       text default null
) returns boolean
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result text;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  select c.result into _result
    from queues.complete_tasks(array[_task_id], array[_task_lease_id], array[_outcome]) c;
  if _result = 'unknown_task' then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  elsif _result = 'lease_lost' then
    -- The queue's lease-loss marker: SQLSTATE 55000 with schema queues and constraint
    -- task_lease_current (clients read lease loss from it, not from 55000 alone).
    raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', schema = 'queues', constraint = 'task_lease_current',
            hint = 'Another worker claimed the task after this lease expired, or it was completed without this lease.';
  end if;
  return _result in ('completed', 'retry_scheduled');
end;
$$;
--! EndIncluded queues/complete.sql
--! Included queues/lease.sql
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
           and not exists (select 1 from queues.task_pending p where p.task_id = i.task_id)
           and exists (select 1 from queues.claim_lease c
                        where c.task_lease_id = i.task_lease_id and i.task_id = any (c.task_ids))
           and not exists (select 1 from queues.task_end_of(i.task_id) e)
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
       and not exists (select 1 from queues.task_pending p where p.task_id = i.task_id)
       and not exists (select 1 from queues.task_end_of(i.task_id) e)
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
--! EndIncluded queues/lease.sql
--! Included queues/held_rows.sql
-- The ready set's per-task paths (docs/design/hot-path.md): a claim takes a task out of
-- the claim index on its first lease, and its claim lease holds it; the task has no
-- `queues.task_pending` row until it ends. Every path that reads or writes one task's
-- row by its id (a release, a revocation, a cancel, an interruption, an error, a result,
-- a progress note, a step run, a throttle's give-back, a run-now, a unique replace) first
-- gives such tasks their row back, written from the facts as the claim left it (leased by
-- the claim lease, available at its expiry), and then holds the task on its row as
-- before the ready set. Only the exceptions pay for a row: a drained task never does.
--
--   queues.hold_rows_of(task_ids)   helper: the row-less, unended tasks get their row back

-- Gives each of _task_ids with neither a claim-index row nor an end, named by a claim
-- lease, its row back (queues.pending_rows_of) and returns those tasks. Under each such
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
  _rowless bigint[];
  _leases bigint[];
  _held bigint[];
begin
  -- (A scalar subquery per task: a primary-key probe, never an anti-join planned from
  -- task_pending's statistics.)
  _rowless := array(select distinct i.id from unnest(_task_ids) i(id)
                     where i.id is not null
                       and (select true from queues.task_pending p where p.task_id = i.id) is null
                     order by 1);
  if cardinality(_rowless) = 0 then
    return '{}';
  end if;
  -- Each task's newest claim lease (a GiST probe of its task range).
  _leases := array(select distinct c.task_lease_id
                     from unnest(_rowless) i(id)
                    cross join lateral (select c.task_lease_id from queues.claim_lease c
                                         where c.task_range @> i.id and c.task_id >= i.id
                                           and i.id = any (c.task_ids)
                                         order by c.task_lease_id desc limit 1) c
                    order by 1);
  if cardinality(_leases) = 0 then
    return '{}';
  end if;
  perform pg_advisory_xact_lock(20253, hashint8(l.id)) from unnest(_leases) l(id);
  -- A new statement, so a new snapshot: what a completion or a rescue that held a lock
  -- committed is seen.
  _held := array(select i.id from unnest(_rowless) i(id)
                  where not exists (select 1 from queues.task_pending p where p.task_id = i.id)
                    and not exists (select 1 from queues.task_end_of(i.id) e)
                  order by 1);
  if cardinality(_held) = 0 then
    return '{}';
  end if;
  perform queues.write_pending_rows(_held);
  return _held;
end;
$$;
--! EndIncluded queues/held_rows.sql
revoke execute on function queues.write_pending_rows(bigint[]) from public;
