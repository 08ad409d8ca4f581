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
  -- The generic plans are made at a session's first call, often while the facts'
  -- partitions are empty: the planner would then read them by sequential scans, whose
  -- cost grows with every round the partition gains. Every table here is read by an
  -- index (primary keys, task_range's GiST index).
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _bad text;
  _retried bigint[];
  _all_succeeded boolean;
  _one_lease boolean;
  -- The call's least and greatest task ids: bounds that let a plan leave out, before it
  -- starts, the history partitions none of the call's tasks is in (a generic plan's
  -- variables are known when it starts; a partition left out is neither locked nor opened).
  _lo bigint;
  _hi bigint;
  _repeated boolean;
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
  select count(distinct t) <> count(*), min(t), max(t) into _repeated, _lo, _hi from unnest(_task_ids) t;
  if _repeated then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;

  -- The drain's call: plain successes of tasks one claim lease took out of the claim
  -- index (held by that lease alone, docs/design/hot-path.md). One statement, under the
  -- lease's lock (below), decides them all and writes their rounds, or writes nothing when
  -- any task of the call is not such a task (it has a claim-index row, the lease does not
  -- name it, or it ended), and the general statement below decides the call.
  if _all_succeeded and cardinality(_task_ids) > 0 and _task_lease_ids[1] is not null
     and _task_lease_ids[1] = all (_task_lease_ids) then
    perform pg_advisory_xact_lock(20253, hashint8(_task_lease_ids[1]));
    with lease as (
      select c.task_ids || array[]::bigint[] as task_ids, c.task_range, c.task_type
        -- (a lease's row is in the partition of its greatest task, at or above the call's)
        from queues.claim_lease c where c.task_lease_id = _task_lease_ids[1] and c.task_id >= _hi limit 1
    ),
    -- Named by the lease, and not ended: not in a round of the lease's range, nor in a row
    -- of its own, nor given a claim-index row. Each set is read once for the call and
    -- hashed (the lease's ids, the rounds' ids, and while the call's range is narrow its
    -- range of task_completed and of the claim index), not probed per task.
    open as (
      select i.task_id, i.started_at
        from unnest(_task_ids, coalesce(_started_at, array_fill(null::timestamptz, array[cardinality(_task_ids)])))
             i(task_id, started_at)
       where i.task_id in (select m.task_id from lease l cross join lateral unnest(l.task_ids) m(task_id))
         and i.task_id not in (select g.task_id
                                 from lease l
                                 join queues.completion_round r
                                   on r.task_range && l.task_range and r.task_id >= lower(l.task_range) and r.task_id >= _lo
                                cross join lateral unnest(r.task_ids) g(task_id))
         -- (the call's range read whole while it is narrow, at most four ids per task: the
         -- drain's calls; a probe per task when it is wide, so that a call whose tasks lie
         -- far apart never reads the claim index or the failures between them)
         and case when _hi - _lo < 4 * cardinality(_task_ids)
                  then i.task_id not in (select c.task_id from queues.task_completed c where c.task_id between _lo and _hi)
                   and i.task_id not in (select p.task_id from queues.task_pending p where p.task_id between _lo and _hi)
                  else (select true from queues.task_completed c
                         where c.task_id = i.task_id and c.task_id between _lo and _hi) is null
                   and (select true from queues.task_pending p where p.task_id = i.task_id) is null
             end
    ),
    rounds as (
      insert into queues.completion_round (task_id, task_type, task_ids, task_lease_ids, started_us, task_range)
      select max(o.task_id), o.task_type, array_agg(o.task_id order by o.task_id),
             array_agg(_task_lease_ids[1] order by o.task_id),
             array_agg(round(date_part('epoch', o.started_at) * 1000000)::bigint order by o.task_id),
             int8range(min(o.task_id), max(o.task_id), '[]')
        -- The lease's one type, or each task's when the claim took several.
        from (select o.*, coalesce((select l.task_type from lease l),
                                   (select t.task_type from queues.task t
                                     where t.task_id = o.task_id and t.task_id between _lo and _hi limit 1)) as task_type
                from open o) o
       -- All of the call, or nothing.
       where (select count(*) from open) = cardinality(_task_ids)
       group by o.task_type
      returning cardinality(completion_round.task_ids) as n
    )
    select coalesce(sum(r.n), 0) = cardinality(_task_ids) into _one_lease from rounds r;
    if _one_lease then
      return query select i.task_id, 'completed'::text from unnest(_task_ids) i(task_id);
      _calls := set_config('queues.completions',
                           (coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint + 1)::text,
                           true);
      return;
    end if;
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
  -- The call's tasks each lease still holds: named by the lease (its array unnested), not
  -- ended (a completion round naming the task, found among the rounds whose range
  -- overlaps the lease's by task_range's GiST index, or a task_completed row), and
  -- without a claim-index row. The first two are decided by one sort of the call's
  -- tasks beside the lease's tasks and the rounds' tasks, each tagged with the lease it
  -- was read for (a window over task and lease), not per task: a nested loop over the
  -- lease's array or the rounds' tasks costs the call's tasks times theirs, and the
  -- generic plan cannot be trusted to hash them.
  lease_open as (
    select o.task_id, o.task_lease_id, o.outcome, o.may_retry, o.started_at, o.ord
      from (select u.*,
                   bool_or(u.src = 1) over w as named,
                   bool_or(u.src = 2) over w as ended
              from (select i.task_id, i.task_lease_id, i.outcome, i.may_retry, i.started_at, i.ord, 0 as src
                      from input i
                     where i.task_lease_id is not null
                    union all
                    select m.task_id, l.task_lease_id, null::text, null::boolean, null::timestamptz, null::bigint, 1
                      from lease_named l
                     cross join lateral unnest(l.task_ids) m(task_id)
                    union all
                    select g.task_id, l.task_lease_id, null::text, null::boolean, null::timestamptz, null::bigint, 2
                      from lease_named l
                      join queues.completion_round r
                        on r.task_range && l.task_range and r.task_id >= lower(l.task_range)
                     cross join lateral unnest(r.task_ids) g(task_id)) u
            window w as (partition by u.task_id, u.task_lease_id)) o
     where o.src = 0 and o.named and not o.ended
       -- (scalar subqueries: a primary-key probe per task, never an anti-join planned
       -- from the tables' statistics)
       and (select true from queues.task_completed c where c.task_id = o.task_id) is null
       and (select true from queues.task_pending p where p.task_id = o.task_id) is null
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
