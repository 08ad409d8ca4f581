--! Previous: sha1:9659fcb9ac5256f8cd9f83c5a64b57d1b98c1260
--! Hash: sha1:8a77730d48ec8e4010c205de3dd21c9deec3ec5d
--! Message: Ready batches: an enqueue call's plain tasks held in one row per type, priority and max_attempts until claims take them (queues.task_ready_batch)

--! split: 400-ready-batches.sql
set local lock_timeout = '5s';

-- Ready batches (docs/design/hot-path.md, "Ready batches"): the plain tasks of one enqueue
-- call (unkeyed, ungrouped, due at once, of a type without a flow limit, no dependencies),
-- per task type, priority and max_attempts, held in one row instead of a claim-index row
-- each. Claims take their ids off the front (taken, a HOT update) and delete the row when
-- they took the last one; a path that needs one task's row gives it one
-- (queues.unbatch_tasks). A derived structure like the claim index (queues.rebuild_task_pending
-- rebuilds both), not a fact.
create table if not exists queues.task_ready_batch (
  -- The least task id of the batch as enqueued.
  task_id      bigint primary key,
  task_type    text not null,
  priority     integer not null,
  scheduled_at timestamptz not null,
  max_attempts integer not null,
  -- Ascending; the first `taken` are out of the batch (claimed).
  task_ids     bigint[] not null,
  taken        integer not null default 0,
  -- [least, greatest] of its ids as enqueued, or as an unbatch left them (the ids claims
  -- took stay inside): which batches may hold a task (GiST).
  task_range   int8range not null,
  check (taken >= 0 and taken < cardinality(task_ids))
) with (
  fillfactor = 50,
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 100,
  autovacuum_vacuum_cost_delay = 0
);
-- Claim order per task type, as task_pending_ready_idx.
create index if not exists task_ready_batch_claim_idx
  on queues.task_ready_batch (task_type, priority desc, scheduled_at, task_id);
create index if not exists task_ready_batch_range_idx
  on queues.task_ready_batch using gist (task_range);
comment on table queues.task_ready_batch is
  'Ready batches: the plain tasks of one enqueue call, per type, priority and max_attempts, held in one row instead of a claim-index row each, until claims take them (taken) or a path gives one its row (queues.unbatch_tasks). Derived, not a fact: queues.rebuild_task_pending rebuilds it into claim-index rows. See sql/queues/ready_batch.sql.';

-- Truncating queues.task truncates the ready batches too, as it does the claim index.
create or replace function queues.truncate_task_facts() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  truncate queues.task_pending, queues.task_ready_batch, queues.resource_lease, queues.task_lease,
           queues.task_completed, queues.error, queues.task_lease_extension, queues.task_lease_release,
           queues.task_lease_revocation, queues.task_attempt_failed, queues.task_redriven,
           queues.task_lease_started, queues.task_interruption, queues.task_cancelled,
           queues.task_result, queues.task_run_now, queues.task_trace, queues.completion_round,
           queues.claim_lease, queues.task_progress, queues.task_dependency;
  return null;
end;
$$;

--! Included queues/ready_batch.sql
-- Ready batches (docs/design/hot-path.md, "Ready batches"): an enqueue call's plain tasks
-- (no resource key, no group key, due at once, of a type without a flow limit, in a call
-- without dependencies), two or more of one task type, priority and max_attempts, are held
-- in one row of queues.task_ready_batch instead of a claim-index row each. The claim's
-- drain path takes their ids off the front of the batch (`taken`: one HOT update per
-- batch a claim reads, the row deleted with its last id), so a drained task writes no row
-- of its own: its claim lease and its completion round name it. A batched task is in the
-- claim index's sense ready: never leased, available at its scheduled time. Every path
-- that must hold one task on its row (a cancel, a run now, a unique replace, a dependency,
-- the claim's per-row path) gives it its row first (queues.unbatch_tasks), as
-- queues.hold_rows_of does for a lease-held task; readers of pending tasks read the
-- views of sql/queues/lease_held.sql, which include batched tasks.
--
--   queues.task_batched                          a view: every batched task, with its batch
--   queues.batched_of(task_id)                   one task's batch, if it is batched
--   queues.batched_count_between(lower, upper)   how many batched tasks have ids in the range
--   queues.unbatch_tasks(task_ids)               the batched ones among them get their rows
--   queues.unbatch_ready_at(types, now, limit)   the first `limit` batched tasks of the
--                                                types, in claim order, get their rows
--                                                (the claim's per-row path)
--   queues.unbatch_task_type(task_type)          every batched task of a type gets its row
--                                                (a flow limit set on the type)
-- The view, batched_of and batched_count_between are inlined into their callers (SQL, stable, no SET clause);
-- every object they name is schema-qualified. Owner only: no grants.

create or replace view queues.task_batched as
select u.task_id, b.task_type, b.priority, b.scheduled_at, b.max_attempts, b.task_id as batch_id
  from queues.task_ready_batch b
 cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id);
comment on view queues.task_batched is
  'Every task held in a ready batch (queues.task_ready_batch) and not yet taken out of it, with its batch. A task''s own: queues.batched_of(task_id). See sql/queues/ready_batch.sql.';

create or replace function queues.batched_of(_task_id bigint)
  returns table (task_id bigint, task_type text, priority integer, scheduled_at timestamptz,
                 max_attempts integer, batch_id bigint)
  language sql stable
as $$
  -- The batches whose range holds the id (GiST), then the id among the ids not taken.
  select _task_id, b.task_type, b.priority, b.scheduled_at, b.max_attempts, b.task_id
    from queues.task_ready_batch b
   where b.task_range @> _task_id
     and _task_id = any (b.task_ids[b.taken + 1:])
   limit 1
$$;

-- How many batched tasks have ids in [_lower, _upper) (a history set's pending count): a
-- batch whose range lies inside counts its ids not taken without reading them (its range
-- holds every id it still has), one that straddles a bound is read. With 1,000,000 tasks
-- in 1,000 batches over four sets: 86 ms for the four, against 1.3 s unnesting them all.
create or replace function queues.batched_count_between(_lower bigint, _upper bigint)
  returns bigint
  language sql stable
as $$
  select coalesce(sum(case when lower(b.task_range) >= _lower and upper(b.task_range) <= _upper
                           then cardinality(b.task_ids) - b.taken
                           else (select count(*) from unnest(b.task_ids[b.taken + 1:]) u(task_id)
                                  where u.task_id >= _lower and u.task_id < _upper) end), 0)::bigint
    from queues.task_ready_batch b
   where b.task_range && int8range(_lower, _upper)
$$;

-- Gives each of _task_ids held in a ready batch its claim-index row (ready, never
-- leased, as the enqueue would have written it) and takes it out of its batch; returns
-- those tasks. The batches are locked first, in batch id order, and waited for: a claim
-- in flight that holds one commits first, and a task it took is then no longer in the
-- batch (it is lease-held: queues.hold_rows_of). One probe of the range index per id.
create or replace function queues.unbatch_tasks(_task_ids bigint[])
  returns bigint[]
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _batches bigint[];
  _out bigint[];
begin
  if _task_ids is null or cardinality(_task_ids) = 0 then
    return '{}';
  end if;
  -- Each id's batch: a probe of the range index per id, then the id among the batch's ids
  -- not taken (a batch holds at most 10,000: one enqueue call).
  _batches := array(
    select b.task_id
      from queues.task_ready_batch b
     where b.task_id in (select x.batch_id from unnest(_task_ids) i(id) cross join lateral queues.batched_of(i.id) x)
     order by b.task_id
       for update);
  if cardinality(_batches) = 0 then
    return '{}';
  end if;
  -- A new statement, so a new snapshot: the batches as the claims that held them left them.
  -- (Sets by hashing, never `= any` of the input per element: a batch holds up to 10,000
  -- ids and a caller may name 1,000.)
  with leaving as (
    select b.task_id as batch_id, u.task_id, b.task_type, b.priority, b.scheduled_at, b.max_attempts
      from queues.task_ready_batch b
     cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
      join (select distinct i.id from unnest(_task_ids) i(id)) i on i.id = u.task_id
     where b.task_id = any (_batches)
  ),
  per_batch as (
    select l.batch_id, array_agg(l.task_id) as gone from leaving l group by l.batch_id
  ),
  rest as (
    select b.task_id as batch_id,
           array(select x.id from unnest(b.task_ids[b.taken + 1:]) x(id)
                 except
                 select y.id from unnest(g.gone) y(id)
                 order by 1) as task_ids
      from queues.task_ready_batch b
      join per_batch g on g.batch_id = b.task_id
  ),
  rows_written as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, available_at, max_attempts)
    select l.task_id, l.task_type, l.priority, l.scheduled_at, l.scheduled_at, l.max_attempts from leaving l
    returning task_id
  ),
  kept as (
    update queues.task_ready_batch b
       set task_ids = r.task_ids,
           taken = 0,
           task_range = int8range(r.task_ids[1], r.task_ids[cardinality(r.task_ids)], '[]')
      from rest r
     where b.task_id = r.batch_id and cardinality(r.task_ids) > 0
  ),
  emptied as (
    delete from queues.task_ready_batch b
     using rest r
     where b.task_id = r.batch_id and cardinality(r.task_ids) = 0
  )
  select coalesce(array_agg(r.task_id order by r.task_id), '{}') into _out from rows_written r;
  return _out;
end;
$$;

-- The claim's per-row path (queues.claim_tasks_at, when its drain path does not apply: a
-- flow limit, a throttled group key, an expired lease): the first _limit batched tasks of
-- _types (null: any type) due by _now, in claim order, get their claim-index rows, so the
-- claim's statement that follows sees them. Batches another claim holds are skipped.
create or replace function queues.unbatch_ready_at(_types text[], _now timestamptz, _limit integer)
  returns bigint[]
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.unbatch_tasks(array(
    select u.task_id
      from (select b.task_ids, b.taken, b.priority, b.scheduled_at, b.task_id
              from queues.task_ready_batch b
             where (_types is null or b.task_type = any (_types))
               and b.scheduled_at <= _now
             order by b.priority desc, b.scheduled_at, b.task_id
             limit _limit
               for update skip locked) b
     cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
     order by b.priority desc, b.scheduled_at, u.task_id
     limit _limit));
end;
$$;

-- Every batched task of _task_type gets its claim-index row (a flow limit set on the
-- type: its tasks are claimed on their rows, where the limits count them). Whole batches:
-- each locked and waited for (a claim in flight commits first), its ids not taken written
-- as rows, the batch deleted.
create or replace function queues.unbatch_task_type(_task_type text)
  returns bigint[]
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _batches bigint[];
  _out bigint[];
begin
  _batches := array(select b.task_id from queues.task_ready_batch b
                     where b.task_type = _task_type
                     order by b.task_id
                       for update);
  if cardinality(_batches) = 0 then
    return '{}';
  end if;
  -- A new statement: the batches as the claims that held them left them.
  with rows_written as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, available_at, max_attempts)
    select u.task_id, b.task_type, b.priority, b.scheduled_at, b.scheduled_at, b.max_attempts
      from queues.task_ready_batch b
     cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
     where b.task_id = any (_batches)
    returning task_id
  ),
  emptied as (
    delete from queues.task_ready_batch b where b.task_id = any (_batches)
  )
  select coalesce(array_agg(r.task_id order by r.task_id), '{}') into _out from rows_written r;
  return _out;
end;
$$;
--! EndIncluded queues/ready_batch.sql
--! Included queues/lease_held.sql
-- Lease-held tasks: the ready set's tasks out of the claim index (docs/design/hot-path.md).
-- A claim takes an unkeyed task of an unlimited type out of the claim index on its first
-- lease (queues.claim_tasks_at deletes its queues.task_pending row); its claim lease
-- (queues.claim_lease) then holds it. A task with neither a claim-index row nor an end
-- (queues.task_end_of) is leased by its newest claim lease: the claim index loses a task
-- once (a task leased before is claimed on its row), so that lease is the only one that
-- can hold it. Readers that ask "which tasks are leased" never read task_pending alone;
-- they read one of these:
--   queues.lease_held_tasks                     a view: every lease-held task with its
--                                               claim lease (task, lease, worker, leased
--                                               and expiry times, suspect)
--   queues.lease_held_of(task_id)               one task's, if it is lease-held
--   queues.task_pending_or_held                 a view in task_pending's shape: the claim
--                                               index's rows, a row per lease-held task as
--                                               its claim lease gives it (leased by that
--                                               lease, available at its expiry, its first
--                                               lease), lease_held true, and a row per task
--                                               in a ready batch (sql/queues/ready_batch.sql)
--                                               as its claim-index row would be
--   queues.task_pending_or_held_of(task_id)     one task's row, either kind
--   queues.lease_held_counts                    a view: per claim lease and task type,
--                                               how many tasks it holds
--   queues.task_pending_or_held_counts          a view in task_pending_or_held's shape,
--                                               counted (tasks per row): for counts by
--                                               type and state, no probe per held task
-- The set is bounded by the rescuer's table of due leases: a claim that takes a task out
-- of the claim index writes its lease into queues.claim_lease_due, and the pass that
-- rescues the lease (its unended tasks get their rows back, queues.rescue_due_leases_at)
-- deletes it; only the claim leases still there are read, by their ids, and of those
-- only the ones with fewer ends under them than tasks are unnested.
-- The functions are inlined into their callers (SQL, stable, no SET clause, not a security
-- definer), so that a caller's task id reaches the probes; every object they name is
-- schema-qualified. Called from definer functions with a pinned search path: no grants. (A
-- view read by another role cannot call them: public.worker_tasks writes the probe out.)

-- Each claim lease not yet rescued once that may still hold a task: its tasks, less those
-- ended in a completion round of its task range (each round in the range unnested once
-- per lease, not probed per task: a round's array, read by `= any` per task, is
-- decompressed per task), less those with a claim-index row or a task_completed row
-- (probes by key). A lease whose tasks all ended under it is not unnested: the ends it
-- fenced are counted per round without unnesting (array_positions of the lease's id in
-- the round's task_lease_ids, in C) and in task_completed over its task range, and when
-- they reach the number of its tasks it holds none (a completion under a claim lease is
-- of a task it names, and a task ends once: the completion of a lease-held task runs
-- under its lease's lock and reads its ends). A lease with a task ended otherwise (under
-- a later lease, or none), or given a row, is unnested as before. The rounds of a range
-- with none are not read twice (the count says so).
create or replace view queues.lease_held_tasks as
select u.task_id, c.task_lease_id, c.worker_key, c.leased_at, c.expires_at,
       coalesce(c.suspect_task_id = u.task_id, false) as suspect
  from queues.claim_lease_due d
 -- each due lease by its id (a probe per lease, never a scan of claim_lease)
 cross join lateral (select c.* from queues.claim_lease c
                      where c.task_lease_id = d.task_lease_id and c.task_id = d.task_id limit 1) c
 -- the completion rounds of its range: how many, and the ends under the lease they hold
 cross join lateral (select count(*) as rounds,
                            coalesce(sum(cardinality(array_positions(r.task_lease_ids, c.task_lease_id))), 0) as ended
                       from queues.completion_round r
                      where r.task_range && c.task_range and r.task_id >= lower(c.task_range)) g
 cross join lateral (
   select x.task_id from unnest(c.task_ids) x(task_id)
   except
   select e.task_id
     from queues.completion_round r
    cross join lateral unnest(r.task_ids) e(task_id)
    where g.rounds > 0 and r.task_range && c.task_range and r.task_id >= lower(c.task_range)
 ) u
 -- (the lease may still hold a task: fewer ends under it than tasks)
 where cardinality(c.task_ids) > g.ended
   and cardinality(c.task_ids)
       > g.ended + (select count(*) from queues.task_completed x
                     where x.task_id >= lower(c.task_range) and x.task_id < upper(c.task_range)
                       and x.task_lease_id = c.task_lease_id)
   and not exists (select 1 from queues.task_pending p where p.task_id = u.task_id)
   and not exists (select 1 from queues.task_completed x where x.task_id = u.task_id);
comment on view queues.lease_held_tasks is
  'Tasks held by their claim lease without a claim-index row (the ready set), with that lease: tasks of the claim leases not yet rescued (queues.claim_lease_due) with neither a queues.task_pending row nor an end. A task''s own: queues.lease_held_of(task_id). See sql/queues/lease_held.sql.';

create or replace function queues.lease_held_of(_task_id bigint)
  returns table (task_id bigint, task_lease_id bigint, worker_key integer, leased_at timestamptz,
                 expires_at timestamptz, suspect boolean)
  language sql stable
as $$
  -- The newest claim lease naming the task (claim_lease's GiST index, in the partitions
  -- that can hold it), when the task has no row and no end.
  select _task_id, c.task_lease_id, c.worker_key, c.leased_at, c.expires_at,
         coalesce(c.suspect_task_id = _task_id, false)
    from queues.claim_lease c
   where c.task_range @> _task_id
     and c.task_id >= _task_id
     and _task_id = any (c.task_ids)
     and not exists (select 1 from queues.task_pending p where p.task_id = _task_id)
     and not exists (select 1 from queues.task_end_of(_task_id) e)
   order by c.task_lease_id desc
   limit 1
$$;

-- A lease-held task's row as the claim would have left it on the row: leased by its claim
-- lease (current_lease_id), available at the lease's expiry, its first lease (lease_count
-- 1: a task leased before keeps its row), nothing released, failed or interrupted; its
-- scheduled time as the claim index gives it (a run-now request counts).
create or replace view queues.task_pending_or_held as
select p.task_id, p.task_type, p.priority, p.scheduled_at, p.resource_key, p.available_at, p.current_lease_id,
       p.lease_count, p.released_count, p.max_attempts, p.failed_attempts, p.interrupted_count,
       p.uncounted_count, p.suspect_lease, p.group_key, false as lease_held
  from queues.task_pending p
union all
select h.task_id, t.task_type, t.priority, least(t.scheduled_at, rn.requested_at), t.resource_key, h.expires_at,
       h.task_lease_id, 1, 0, t.max_attempts, 0, 0, 0, h.suspect, t.group_key, true
  from queues.lease_held_tasks h
 cross join lateral (select x.* from queues.task x where x.task_id = h.task_id limit 1) t
  left join queues.task_run_now rn on rn.task_id = h.task_id
union all
-- A task in a ready batch (sql/queues/ready_batch.sql): ready, never leased.
select b.task_id, b.task_type, b.priority, b.scheduled_at, null::text, b.scheduled_at, null::bigint,
       0, 0, b.max_attempts, 0, 0, 0, false, null::text, false
  from queues.task_batched b;
comment on view queues.task_pending_or_held is
  'Every task not ended, in queues.task_pending''s shape: the claim index''s rows, each lease-held task (queues.lease_held_tasks) leased by its claim lease (lease_held), and each task in a ready batch (queues.task_batched) as its row would be. A task''s own: queues.task_pending_or_held_of(task_id). See sql/queues/lease_held.sql.';

-- Per claim lease holding tasks, per task type: how many it holds (the lease-held part
-- of the counts readers take: admin.list_queues, task_counts, queue_depth, capacity).
-- The same tasks as queues.lease_held_tasks; their types read once per lease, by one
-- index scan of queues.task over the lease's held ids (`= any` of the array, within its
-- first and last id: sorted, read leaf page by leaf page), not a probe per task.
create or replace view queues.lease_held_counts as
select h.task_lease_id, h.worker_key, h.expires_at, t.task_type, count(*)::integer as tasks
  from (select h.task_lease_id, h.worker_key, h.expires_at, array_agg(h.task_id) as task_ids,
               min(h.task_id) as first_id, max(h.task_id) as last_id
          from queues.lease_held_tasks h
         group by h.task_lease_id, h.worker_key, h.expires_at) h
 cross join lateral (select x.task_type from queues.task x
                      where x.task_id = any (h.task_ids) and x.task_id >= h.first_id and x.task_id <= h.last_id) t
 group by h.task_lease_id, h.worker_key, h.expires_at, t.task_type;
comment on view queues.lease_held_counts is
  'Per claim lease and task type, the tasks the lease holds (queues.lease_held_tasks, counted): the lease-held part of a count. See sql/queues/lease_held.sql.';

-- Every task not ended, counted in task_pending's shape (what a count by type and state
-- reads): a row per claim-index row (tasks 1), and per claim lease and task type the
-- tasks it holds (queues.lease_held_counts: available at its expiry, leased by it, their
-- first lease), lease_held true. count(*) over queues.task_pending_or_held is
-- sum(tasks) here, with the same available_at, current_lease_id and lease_count.
create or replace view queues.task_pending_or_held_counts as
select p.task_type, p.available_at, p.current_lease_id, p.lease_count, false as lease_held, 1 as tasks
  from queues.task_pending p
union all
select h.task_type, h.expires_at, h.task_lease_id, 1, true, h.tasks
  from queues.lease_held_counts h
union all
-- per ready batch, its tasks not taken (ready, never leased)
select b.task_type, b.scheduled_at, null::bigint, 0, false, cardinality(b.task_ids) - b.taken
  from queues.task_ready_batch b;
comment on view queues.task_pending_or_held_counts is
  'Every task not ended, counted: the claim index''s rows (tasks 1), the lease-held tasks per claim lease and type (queues.lease_held_counts) and the tasks of each ready batch (queues.task_ready_batch), in queues.task_pending_or_held''s shape; sum(tasks) is its count(*). See sql/queues/lease_held.sql.';

create or replace function queues.task_pending_or_held_of(_task_id bigint)
  returns table (task_id bigint, task_type text, priority integer, scheduled_at timestamptz,
                 resource_key text, available_at timestamptz, current_lease_id bigint,
                 lease_count integer, released_count integer, max_attempts integer,
                 failed_attempts integer, interrupted_count integer, uncounted_count integer,
                 suspect_lease boolean, group_key text, lease_held boolean)
  language sql stable
as $$
  select p.task_id, p.task_type, p.priority, p.scheduled_at, p.resource_key, p.available_at, p.current_lease_id,
         p.lease_count, p.released_count, p.max_attempts, p.failed_attempts, p.interrupted_count,
         p.uncounted_count, p.suspect_lease, p.group_key, false
    from queues.task_pending p
   where p.task_id = _task_id
  union all
  select h.task_id, t.task_type, t.priority, least(t.scheduled_at, rn.requested_at), t.resource_key, h.expires_at,
         h.task_lease_id, 1, 0, t.max_attempts, 0, 0, 0, h.suspect, t.group_key, true
    from queues.lease_held_of(_task_id) h
   cross join lateral (select x.* from queues.task x where x.task_id = h.task_id limit 1) t
    left join queues.task_run_now rn on rn.task_id = h.task_id
  union all
  select b.task_id, b.task_type, b.priority, b.scheduled_at, null::text, b.scheduled_at, null::bigint,
         0, 0, b.max_attempts, 0, 0, 0, false, null::text, false
    from queues.batched_of(_task_id) b
$$;
--! EndIncluded queues/lease_held.sql
--! Included queues/held_rows.sql
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
--! EndIncluded queues/held_rows.sql
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
--! Included queues/enqueue.sql
-- queues.enqueue / queues.enqueue_many: add tasks. Apps call them through
-- @org/queue-client; they refuse internal task types (sql/queues/enqueue_permission.sql).
-- The owner's SQL (supervisors, handlers, kickoffs, schedules) calls the grant-less
-- queues.enqueue_internal. The worker never enqueues.
--
-- What one enqueue costs (BENCHMARKS.md, "where a task's time goes"): for an app, one
-- probe of queues.internal_task_type; its fields checked as plain expressions; one
-- statement that reads the task type and inserts the task and its claim-index row; one
-- pg_notify; a read of the setting queue.traceparent, and only when the caller set one
-- (tracing on), a row of queues.task_trace per task (sql/queues/trace.sql). A batch is
-- one insert statement whatever its size: the rows are checked inside it (the first bad
-- one, in input order, raises and the statement writes nothing), the task types read
-- once per call. queues.task has no foreign key to queues.task_type: it
-- locked the type's row (FOR KEY SHARE, a MultiXact once callers overlap) for every task;
-- queues.guard_task_type_in_use (triggers.sql) refuses deleting or renaming a type in use.
--
-- Wake-ups: an enqueue that adds a task due within a minute (ready now, or scheduled a
-- moment ahead, like a supervisor's next run) sends NOTIFY queues_task_ready, and
-- PostgreSQL folds identical notifications of one transaction into one at commit. A
-- worker that finds nothing ready asks when the next task is due
-- (queues.next_claim_in_ms) and looks again then; a task due later is found by a
-- worker's poll, which asks the same. A
-- notifying commit holds a database-wide lock from just before its commit record until
-- it ends, so notifying transactions commit one at a time, each waiting for its own WAL
-- flush. queues.enqueue_and_commit (for callers outside a transaction block: the
-- client's enqueue on a pool) commits the task first, without the lock, and notifies in
-- a second transaction that writes no data and so does not wait for a flush.

-- Payloads are limited so one bad caller cannot fill the table or the worker's memory.
create or replace function queues.max_payload_bytes() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 1048576 $$;

-- And so is their nesting: a payload nested deeper than queues.max_payload_depth()
-- containers (objects and arrays) is refused, since parsers that recurse (the worker's
-- among them) would run out of stack. The test is jsonb_path_exists(payload,
-- 'strict $.**{65}'), written out where it is used (65 = max_payload_depth() + 1: a
-- jsonpath level must be a literal).
create or replace function queues.max_payload_depth() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 64 $$;

-- The attempts a task gets when its enqueue names none: 25, as graphile-worker and River,
-- with the queue's backoff between them (internal.backoff: 5 s, 10 s, 20 s, ... capped
-- at an hour, about 19 hours in all). The owner's SQL that enqueues the tasks of a
-- business process (channel tasks, supervisor runs) passes its own max_attempts (1): a
-- process retries through new attempts, never through task retries.
create or replace function queues.default_max_attempts() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 25 $$;

-- The core of the single enqueue (no grants): validates one task and inserts it and its
-- claim-index row in one statement; returns its task_id. _public: called for an app or
-- the API (queues.enqueue), so internal task types are refused (42501) unless the
-- session is the owner's. _notify: send the wake-up (false: the caller sends it after
-- its commit, see queues.enqueue_and_commit). NULL arguments take the defaults (now, 0,
-- no resource key, queues.default_max_attempts()).
-- _check_only: run every check (the task type's existence and the dependencies' included)
-- and return NULL without writing (queues.enqueue_unique_task checks before it decides to skip).
--
-- The transaction's trace context (the setting queue.traceparent, sql/queues/trace.sql)
-- is recorded for the task when there is one.
--
-- Checks, in order: for _public, a worker-only task type (refused before anything else
-- is read, as queues.assert_may_enqueue words it); task_type NULL; the payload (NULL, not
-- an object, over the size limit, nested too deep), priority, resource key, max
-- attempts, scheduled time (plain expressions, no statement); then the insert, which
-- reads the type in its own statement: when it inserts nothing, the type is unknown
-- (22023). The insert's snapshot is taken once it holds its
-- lock on queues.task, so a type deleted meanwhile is not used (the delete waits for
-- that lock, see queues.guard_task_type_in_use). Under REPEATABLE READ or SERIALIZABLE
-- the snapshot is the transaction's, older than the lock: the type's row is locked FOR
-- KEY SHARE first, as the foreign key did, so that a type deleted since is a
-- serialization failure rather than a task of a type that is gone.
create or replace function queues.enqueue_task(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz,
  _priority     integer,
  _resource_key text,
  _max_attempts integer,
  _public       boolean default false,
  _notify       boolean default true,
  _check_only   boolean default false,
  _depends_on   bigint[] default null,
  _group_key    text default null,
  _timeout_ms   integer default null
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  if _public and exists (select 1 from queues.internal_task_type i where i.task_type = _task_type) then
    perform queues.assert_may_enqueue(_task_type);
  end if;
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if _payload is null then
    raise exception 'payload must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_payload) <> 'object' then
    raise exception 'payload must be a JSON object, got %', jsonb_typeof(_payload) using errcode = '22023';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    raise exception 'payload is % bytes, over the limit of % bytes', pg_column_size(_payload), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  if jsonb_path_exists(_payload, 'strict $.**{65}') then
    raise exception 'payload is nested deeper than % levels', queues.max_payload_depth() using errcode = '54000';
  end if;
  if _priority not between -1000 and 1000 then
    raise exception 'priority must be between -1000 and 1000, got %', _priority using errcode = '22023';
  end if;
  if length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if length(_group_key) not between 1 and 200 then
    raise exception 'group_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _max_attempts not between 1 and 100 then
    raise exception 'max_attempts must be between 1 and 100, got %', _max_attempts using errcode = '22023';
  end if;
  if _timeout_ms not between 1 and 86400000 then
    raise exception 'timeout_ms must be between 1 and 86400000 (24 hours), got %', _timeout_ms using errcode = '22023';
  end if;
  if not isfinite(_scheduled_at) then
    raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
  end if;
  if _check_only then
    if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
      raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
        using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
    end if;
    if cardinality(_depends_on) > 0 then
      perform queues.check_task_dependencies(array_fill(0::bigint, array[cardinality(_depends_on)]), _depends_on,
                                             array_fill(''::text, array[cardinality(_depends_on)]), '{}');
    end if;
    return null;
  end if;
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t where t.task_type = _task_type for key share;
  end if;

  with inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at, group_key,
                             timeout_ms)
    select t.task_type, _payload, coalesce(_priority, 0), _resource_key,
           coalesce(_max_attempts, queues.default_max_attempts()), coalesce(_scheduled_at, now()), _group_key,
           _timeout_ms
      from queues.task_type t
     where t.task_type = _task_type
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts, group_key
  )
  -- A task with dependencies starts waiting (at 'infinity', sql/queues/dependencies.sql),
  -- so that no index entry of it is ever among the ready ones.
  insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts,
                                  group_key)
  select i.task_id, i.task_type, i.priority,
         case when cardinality(_depends_on) > 0 then 'infinity' else i.scheduled_at end, i.resource_key,
         case when cardinality(_depends_on) > 0 then 'infinity' else i.scheduled_at end, i.max_attempts,
         i.group_key
    from inserted i
  returning task_id into _task_id;

  if _task_id is null then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
  -- The caller's trace context, when the transaction has one (sql/queues/trace.sql).
  if current_setting('queue.traceparent', true) <> '' then
    perform queues.record_task_trace(array[_task_id]);
  end if;
  -- Dependencies (sql/queues/dependencies.sql): the task waits, or fails at once.
  if cardinality(_depends_on) > 0 then
    perform queues.add_task_dependencies(array_fill(_task_id, array[cardinality(_depends_on)]), _depends_on,
                                         array_fill(''::text, array[cardinality(_depends_on)]), array[_task_id]);
  end if;
  -- A task due more than a minute ahead wakes nobody now: workers poll for it.
  if _notify and (_scheduled_at is null or _scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _task_id;
end;
$$;

-- Enqueue one task for an app or the API; returns its task_id. NULL arguments take the
-- defaults (now, 0, no resource key, queues.default_max_attempts()), since generated
-- clients send undefined as NULL. A unique task: queues.enqueue_unique (unique.sql). Refuses internal task types (42501). _notify => false leaves the wake-up to
-- the caller (queues.enqueue_and_commit sends it after the commit). _depends_on: tasks
-- this one waits for (sql/queues/dependencies.sql); NULL or empty: none. _group_key: what
-- flow limits count the task by within its type (sql/queues/limits.sql); NULL: none.
-- _timeout_ms: the task's run timeout, 1 ms to 24 hours, in place of its type's
-- (sql/queues/timeouts.sql); NULL: the type's.
create or replace function queues.enqueue(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  _notify       boolean default true,
  _depends_on   bigint[] default null,
  _group_key    text default null,
  _timeout_ms   integer default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts,
                             true, coalesce(_notify, true), false, _depends_on, _group_key, _timeout_ms);
end;
$$;

-- queues.enqueue, then COMMIT, then the wake-up in a transaction of its own; returns the
-- task_id in _task_id. For callers outside a transaction block (CALL inside one fails
-- with 2D000, invalid transaction termination): the client's enqueue on a pool. The
-- task's commit takes no notification lock, so concurrent callers share WAL flushes; the
-- wake-up's transaction writes no data and does not wait for a flush (see the top of
-- this file). Crash between the two: the task is committed and found by the workers'
-- poll instead. _depends_on, _group_key and _timeout_ms as in queues.enqueue (a bad
-- dependency raises before the commit: nothing is written).
-- Not security definer and no SET clause: PostgreSQL allows COMMIT in a procedure only
-- without them. It runs with the caller's rights and search_path, names every object
-- with its schema, and does nothing a caller could not do itself.
create or replace procedure queues.enqueue_and_commit(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  inout _task_id bigint default null,
  _group_key    text default null,
  _timeout_ms   integer default null,
  _depends_on   bigint[] default null
)
  language plpgsql
as $$
begin
  _task_id := queues.enqueue(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, false,
                             _depends_on, _group_key, _timeout_ms);
  commit;
  if _scheduled_at is null
     or _scheduled_at operator(pg_catalog.<=) (pg_catalog.now() operator(pg_catalog.+) interval '1 minute') then
    perform pg_catalog.pg_notify('queues_task_ready', '');
  end if;
end;
$$;

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, queues.default_max_attempts()), since generated clients send undefined as NULL.
-- Owner only (no grant): the owner's SQL enqueues any task type through it. A thin alias
-- of the core queues.enqueue_task, with the defaults of queues.enqueue (_depends_on too).
create or replace function queues.enqueue_internal(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  _depends_on   bigint[] default null,
  _group_key    text default null,
  _timeout_ms   integer default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts,
                             false, true, false, _depends_on, _group_key, _timeout_ms);
end;
$$;

-- Raises the problem found in element _idx of a batch (queues.enqueue_tasks):
-- _problem is '<SQLSTATE> <message>'. Returns nothing; typed jsonb so it can stand in a
-- select list for the payload it refuses.
create or replace function queues.raise_enqueue_problem(_idx bigint, _problem text) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _problem like '22023 unknown task_type%' then
    raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = '22023',
      hint = 'Known task types are listed in queues.task_type.';
  end if;
  raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = left(_problem, 5);
end;
$$;

-- Enqueue many tasks in one statement. _tasks is a JSON array of objects:
--   {"task_type": "...", "payload": {...}, "scheduled_at"?: "...", "priority"?: 0,
--    "resource_key"?: "...", "max_attempts"?: 25,
--    "unique_key"?: "...", "unique_policy"?: "skip", "unique_period"?: "30 seconds",
--    "depends_on"?: [task ids], "group_key"?: "...", "timeout_ms"?: 30000}
-- (the unique fields as in queues.enqueue_unique; a skipped element answers the pending
-- task's id; depends_on as queues.enqueue's _depends_on, naming tasks that exist before
-- the call)
-- Returns the task_ids in input order. All or nothing: the first bad element, in input
-- order, raises an error naming it (tasks[i]: ...) and nothing is written. _public as in
-- queues.enqueue_task: a worker-only task type anywhere in the batch is refused (42501)
-- first, unless the session is the owner's. The core of queues.enqueue_many (no grants).
--
-- One statement inserts the batch: each element is checked as it is inserted (a CASE
-- that calls queues.raise_enqueue_problem only for a bad element), its task type against
-- queues.task_type read once per call (a hashed subplan), then the tasks' claim-index
-- rows; then one wake-up if any task is ready now. For _public, one statement before it
-- looks for worker-only types (queues.internal_task_type, also read once).
create or replace function queues.enqueue_tasks(_tasks jsonb, _public boolean default false)
  returns table (task_id bigint)
  language plpgsql volatile
  -- Planned once per connection, not per call: the plan is the same for any batch (the
  -- elements in order, hashed lookups of the task types), and planning the insert took
  -- a few milliseconds of each of a connection's first five batches.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _ids bigint[];
  _ready boolean;
  _refused record;
  _dep_tasks bigint[];
  _dep_ids bigint[];
  _dep_labels text[];
  _deps boolean;
  _limited text[];
begin
  if _tasks is null then
    raise exception 'tasks must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_tasks) <> 'array' then
    raise exception 'tasks must be a JSON array, got %', jsonb_typeof(_tasks) using errcode = '22023';
  end if;
  if jsonb_array_length(_tasks) > 10000 then
    raise exception 'at most 10000 tasks per call, got %', jsonb_array_length(_tasks)
      using errcode = '54000';
  end if;
  -- A worker-only task type anywhere refuses the batch before any element is read
  -- further (the first such element is named), unless the session is the owner's.
  if _public and not queues.is_owner_session() then
    select e.ordinality - 1 as idx, e.value ->> 'task_type' as task_type into _refused
      from jsonb_array_elements(_tasks) with ordinality e
     where e.value ->> 'task_type' in (select i.task_type from queues.internal_task_type i)
     order by e.ordinality
     limit 1;
    if found then
      perform queues.assert_may_enqueue(_refused.task_type, format('tasks[%s]: ', _refused.idx));
    end if;
  end if;
  -- A batch naming a unique key goes element by element (sql/queues/unique.sql); a batch
  -- without one pays only this walk of its elements' keys.
  if jsonb_path_exists(_tasks, 'lax $[*] ? (exists(@.unique_key) || exists(@.unique_policy) || exists(@.unique_period))') then
    return query select u.task_id from queues.enqueue_tasks_one_by_one(_tasks, _public) u;
    return;
  end if;
  -- What keeps a task out of a ready batch: dependencies anywhere in the call, a flow
  -- limit on its type (the limits in force, read once: a tiny table).
  _deps := jsonb_path_exists(_tasks, 'lax $[*].depends_on[*]');
  _limited := array(select distinct l.task_type from queues.task_limits() l);
  -- Under REPEATABLE READ or SERIALIZABLE, lock the types FOR KEY SHARE (see
  -- queues.enqueue_task).
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t
     where t.task_type in (select e.value ->> 'task_type' from jsonb_array_elements(_tasks) e)
       for key share;
  end if;

  with input as (
    select e.ordinality - 1 as idx, e.value as element,
           e.value ->> 'task_type' as task_type,
           e.value -> 'payload' as payload,
           (e.value ->> 'scheduled_at')::timestamptz as scheduled_at,
           (e.value ->> 'priority')::integer as priority,
           e.value ->> 'resource_key' as resource_key,
           (e.value ->> 'max_attempts')::integer as max_attempts,
           e.value ->> 'group_key' as group_key,
           (e.value ->> 'timeout_ms')::integer as timeout_ms
      from jsonb_array_elements(_tasks) with ordinality e
  ),
  checked as (
    -- The problem of each element as '<SQLSTATE> <message>', NULL when it has none: its
    -- shape (an object of known fields), then the checks of queues.enqueue_task.
    select c.*,
           case
             when jsonb_typeof(c.element) <> 'object' then
               '22023 must be a JSON object, got ' || jsonb_typeof(c.element)
             when c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,depends_on,group_key,timeout_ms}'::text[] <> '{}' then
               '22023 unknown field(s) ' || left((select string_agg(k, ', ') from jsonb_object_keys(
                 c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,depends_on,group_key,timeout_ms}'::text[]) k), 200)
             -- depends_on: null, or an array of task ids (integers, or their decimal text).
             when jsonb_typeof(c.element -> 'depends_on') not in ('array', 'null')
                  or jsonb_path_exists(c.element -> 'depends_on',
                       'lax $[*] ? (!((@.type() == "number" && @ == @.floor()) || (@.type() == "string" && @ like_regex "^[0-9]{1,18}$")))') then
               '22023 depends_on must be an array of task ids'
             when c.task_type is null then '22004 task_type must not be null'
             when c.task_type not in (select t.task_type from queues.task_type t) then
               '22023 unknown task_type ' || quote_literal(left(c.task_type, 100))
             when c.payload is null then '22004 payload must not be null'
             when jsonb_typeof(c.payload) <> 'object' then
               '22023 payload must be a JSON object, got ' || jsonb_typeof(c.payload)
             when pg_column_size(c.payload) > queues.max_payload_bytes() then
               format('54000 payload is %s bytes, over the limit of %s bytes', pg_column_size(c.payload), queues.max_payload_bytes())
             -- Nesting deeper than 64 levels takes over 512 bytes (an uncompressed value,
             -- as c.payload is: just taken out of the batch), so smaller ones are not walked.
             when pg_column_size(c.payload) > 512 and jsonb_path_exists(c.payload, 'strict $.**{65}') then
               format('54000 payload is nested deeper than %s levels', queues.max_payload_depth())
             when c.priority not between -1000 and 1000 then
               '22023 priority must be between -1000 and 1000, got ' || c.priority
             when length(c.resource_key) not between 1 and 200 then '22023 resource_key must be 1 to 200 characters'
             when length(c.group_key) not between 1 and 200 then '22023 group_key must be 1 to 200 characters'
             when c.max_attempts not between 1 and 100 then
               '22023 max_attempts must be between 1 and 100, got ' || c.max_attempts
             when c.timeout_ms not between 1 and 86400000 then
               '22023 timeout_ms must be between 1 and 86400000 (24 hours), got ' || c.timeout_ms
             when not isfinite(c.scheduled_at) then
               '22023 scheduled_at must be a finite time, got ' || c.scheduled_at
           end as problem
      from input c
  ),
  inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at, group_key, timeout_ms)
    select c.task_type,
           case when c.problem is null then c.payload else queues.raise_enqueue_problem(c.idx, c.problem) end,
           coalesce(c.priority, 0), c.resource_key, coalesce(c.max_attempts, queues.default_max_attempts()), coalesce(c.scheduled_at, now()),
           c.group_key, c.timeout_ms
      from checked c
     order by c.idx
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts, group_key
  ),
  -- Ready batches (sql/queues/ready_batch.sql): the plain tasks (no resource key, no group
  -- key, scheduled_at not given, a type without a flow limit, a call without dependencies),
  -- two or more of one type, priority and max_attempts, go into one batch row; the others
  -- each get a claim-index row.
  placed as (
    select i.*,
           i.plain and count(*) filter (where i.plain)
                         over (partition by i.task_type, i.priority, i.max_attempts, i.plain) >= 2 as batched
      from (select i.*,
                   not _deps and i.resource_key is null and i.group_key is null and i.scheduled_at = now()
                     and not (i.task_type = any (_limited)) as plain
              from inserted i) i
  ),
  pending as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts, group_key)
    select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts, i.group_key
      from placed i
     where not i.batched
  ),
  batches as (
    insert into queues.task_ready_batch (task_id, task_type, priority, scheduled_at, max_attempts, task_ids, task_range)
    select min(i.task_id), i.task_type, i.priority, min(i.scheduled_at), i.max_attempts,
           array_agg(i.task_id order by i.task_id), int8range(min(i.task_id), max(i.task_id), '[]')
      from placed i
     where i.batched
     group by i.task_type, i.priority, i.max_attempts
  )
  select array_agg(i.task_id order by i.task_id), bool_or(i.scheduled_at <= now() + interval '1 minute')
    into _ids, _ready
    from inserted i;
  -- The caller's trace context, when the transaction has one (sql/queues/trace.sql).
  if current_setting('queue.traceparent', true) <> '' then
    perform queues.record_task_trace(_ids);
  end if;
  -- Dependencies (sql/queues/dependencies.sql), one edge per element of a depends_on:
  -- _ids is in input order (the insert numbered the tasks in that order).
  if _deps then
    select array_agg(_ids[e.n] order by e.n, d.n), array_agg((d.value #>> '{}')::bigint order by e.n, d.n),
           array_agg(format('tasks[%s]: ', e.n - 1) order by e.n, d.n)
      into _dep_tasks, _dep_ids, _dep_labels
      from jsonb_array_elements(_tasks) with ordinality e(value, n)
     cross join lateral jsonb_array_elements(e.value -> 'depends_on') with ordinality d(value, n)
     where jsonb_typeof(e.value -> 'depends_on') = 'array';
    perform queues.add_task_dependencies(_dep_tasks, _dep_ids, _dep_labels, _ids);
  end if;

  if _ready then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select u.id from unnest(_ids) u(id);
end;
$$;

-- Enqueue many tasks (see queues.enqueue_tasks), for an app or the API: refuses internal
-- task types (42501), as queues.enqueue.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_id from queues.enqueue_tasks(_tasks, true) t
$$;
--! EndIncluded queues/enqueue.sql
--! Included queues/claim.sql
-- Claiming: queues.claim_tasks (batch), queues.dequeue_next_available_task (the seeds'
-- single claim), both on top of queues.claim_tasks_at, which takes the clock as an
-- argument so tests can move time forward. Only the owner may call claim_tasks_at:
-- a worker that chose its own clock could take live leases.
--
-- Resource keys: at most one task per resource_key is leased at a time; the others wait
-- (they are skipped, not failed) until the holder completes, releases or lets its lease
-- expire. A long queue of tasks blocked on one key is re-read by each claim.
--
-- Suspects and poison tasks: a task a lease of which ended without an end (it expired, or
-- was revoked: its worker died or went silent) is a suspect, whichever of the worker's
-- tasks killed it. A claim takes at most one suspect and names it in its lease
-- (queues.claim_lease.suspect_task_id, task_pending.suspect_lease); the suspects after it
-- in claim order are passed over, not counted in the claim's limit, so a claim made just
-- after a worker died, whose tasks come back ahead of the rest, still fills its limit with
-- other ready tasks. A worker holds one named repeat suspect (a task one of whose
-- expiries already counted) at a time, so a task is blamed for another's death at most
-- once. An expiry counts towards
-- abandonment only when the task was the named suspect of that lease: the first expiry
-- of a task never counts (it may have waited in a dead worker's local queue, or run
-- beside the task that killed it), and from then on the task runs only as a named
-- suspect, so each death it causes counts. A task whose counted expiries reach
-- _max_leases (reported interruptions count too; releases and failed attempts do not) is
-- completed as 'abandoned' with an error instead of being leased again: a task that kills
-- its worker, or PostgreSQL, is abandoned after _max_leases + 1 leases. Nothing in this
-- accounting depends on the worker reporting a start: the lease naming its suspect
-- commits before the task runs. One report may add to it: a process pool's supervisor
-- revokes a dead process's leases with the tasks the process told it (before starting
-- them) it ran, and those revocations count too (queues.revoke_worker_leases), so a task
-- that kills a pooled process is blamed at its first death and abandoned after
-- _max_leases.
--
-- Quarantine (_suspects): a claim with 'any' (the default) takes every kind of suspect as
-- above. A process pool with a quarantine process (packages/worker/src/process-pool.ts)
-- claims with 'no_repeat' in its working processes, which then never take a repeat
-- suspect, and with 'repeat' in its quarantine process, which takes only repeat suspects
-- (and abandons poisoned ones), one at a time (concurrency 1): a poison task kills a
-- working process once when the pool's revocation blames it (it heard the task start),
-- twice when not (unnamed, then as a first-time suspect), and then only the quarantine
-- process. Repeat suspects are few (a dead process's running tasks at most), so the
-- quarantine's claim reads them from an index of their own
-- (task_pending_repeat_suspect_idx) and its idle claim reads nothing else.
--
-- Ready batches (sql/queues/ready_batch.sql): an enqueue call's plain tasks wait in one
-- row per type, priority and max_attempts, not a claim-index row each. The drain's claim
-- reads them beside the rows in claim order and takes their ids off the batch's front
-- (locked as read, SKIP LOCKED: a claim transaction left open holds the rest of a batch it
-- took from); the per-row path gives the first _limit of them their rows first.
--
-- Flow limits (sql/queues/limits.sql): concurrency and rate limits per task type and
-- group key. A claim reads the limits in force once (a tiny table). When none applies to
-- the types it asks for, nothing else is read or written for them. Otherwise, for each
-- limited type with a task ready, it takes the type's claim lock (advisory, 20252; the
-- limited types in name order, before anything else of the claim is locked, so two
-- claims waiting for each other's types cannot deadlock: a claim waits here at most for
-- the other claims of those types, each a few milliseconds), and then, in the claim
-- statement (a snapshot taken after the lock, so it sees every lease of the type
-- committed before), counts the type's live leases by group key (the claim index's
-- leased rows, task_pending_lease_expiry_idx: a lease that expired, was released or
-- revoked, or whose task ended holds no slot) and the starts of the current rate windows
-- (queues.task_limit_window), takes no more tasks per scope than it has room for, and
-- adds what it took to the windows.

create or replace function queues.claim_tasks_at(
  _now           timestamptz,
  _worker_id     text,
  _limit         integer,
  _task_types    text[],
  _lease_seconds integer,
  _max_leases    integer,
  -- 'any', 'no_repeat' or 'repeat' (see Quarantine above).
  _suspects      text default 'any'
) returns table (
  task_id       bigint,
  task_type     text,
  payload       jsonb,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  task_lease_id bigint,
  leased_at     timestamptz,
  expires_at    timestamptz,
  lease_count   integer,
  timeout_ms    integer
)
  language plpgsql volatile
  rows 10
  security definer
  -- Planned once, not per call: the statements below have one good plan whatever the
  -- arguments (index order with a LIMIT; primary-key probes), and planning was about
  -- 40% of the call's cost.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _worker_key integer;
  _throttled text[];
  -- Provider back-pressure per group key: the group keys throttled at _now ('{}': none).
  _throttled_groups text[];
  -- Flow limits: the types asked for (NULL: any) and, of them, the limited types this
  -- claim holds the lock of, with their rules (sql/queues/limits.sql).
  _types      text[];
  _limited    text[] := '{}';
  _rules      jsonb := '[]';
  _full       text[] := '{}';
  _type       text;
  -- The drain's claim (below): the ready tasks it picked, whether all are plain, their
  -- one type.
  _picked      bigint[];
  _plain       boolean;
  _picked_type text;
  -- Of the picked tasks from ready batches, each one's batch; whether any batch exists.
  _from_batches bigint[];
  _batched     boolean;
  _expired     boolean;
  -- A claim lease is due: the rescuer runs.
  _due         boolean;
  -- The worker holds a live lease that names a repeat suspect (one whose death already
  -- counted): this claim takes no other repeat suspect.
  _holds_repeat boolean;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _limit is null or _limit not between 1 and 1000 then
    raise exception 'limit must be between 1 and 1000, got %', coalesce(_limit::text, 'null')
      using errcode = '22023';
  end if;
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;
  if _max_leases is null or _max_leases not between 1 and 100 then
    raise exception 'max_leases must be between 1 and 100, got %', coalesce(_max_leases::text, 'null')
      using errcode = '22023';
  end if;
  if _task_types is not null and cardinality(_task_types) = 0 then
    raise exception 'task_types must be null (any type) or name at least one type'
      using errcode = '22023';
  end if;
  if _suspects is null or _suspects not in ('any', 'no_repeat', 'repeat') then
    raise exception 'suspects must be any, no_repeat or repeat, got %', coalesce(_suspects, 'null')
      using errcode = '22023';
  end if;
  -- The quarantine's claim: nothing to do while no repeat suspect is ready (one probe of
  -- its index) and no lease expired (one probe of the expired leases' index).
  if _suspects = 'repeat'
     and (select true from queues.task_pending p
           where p.current_lease_id is null
             and p.lease_count - p.released_count - p.failed_attempts - p.uncounted_count > 0
             and p.available_at <= _now
           order by p.available_at limit 1) is null
     and (select true from queues.task_pending p
           where p.current_lease_id > 0 and p.available_at <= _now
           order by p.available_at limit 1) is null then
    return;
  end if;
  -- One statement reads what the claim needs before it scans: whether a claim lease is
  -- due, the worker's key, the throttles and the flow limits in force (with none
  -- configured, the claim costs no statement more than it did without them).
  -- The ready set's rescuer runs only when a claim lease is due by _now (the earliest
  -- expiry in queues.claim_lease_due, one probe of its index): it returns their unfinished
  -- tasks to the claim index, where this claim's statement sees them. Called on every
  -- claim, the rescuer's function and its empty delete were a fifth of an idle worker's
  -- one-task claim (tools/bench/probes/one-claim.mjs).
  -- A lease names its worker by key (queues.worker_name: each worker id kept once, an
  -- integer on every lease instead of the id's text). One probe of the id's unique index.
  -- Provider back-pressure (sql/queues/throttle.sql): the task types throttled at _now
  -- are left out of the types both branches below scan, and the tasks of the group keys
  -- throttled at _now (of any type) out of what they find. One probe of
  -- throttle_until_idx per claim (queues.throttled_keys_at), which reads no row while no
  -- throttle is active; nothing per task while no group key is throttled.
  -- Flow limits (sql/queues/limits.sql, the body of queues.task_limits): the rules in
  -- force for the types asked for and not throttled. None (the common case): the claim
  -- below runs with _limited empty, which its limit steps read as "nothing to do".
  select (select d.expires_at from queues.claim_lease_due d order by d.expires_at limit 1) <= _now,
         w.worker_key, th.task_types, th.group_keys,
         coalesce((select jsonb_agg(to_jsonb(l))
                     from (select l.task_type, l.scope, l.group_key, l.max_running, l.max_starts,
                                  l.interval_ms, l.set_at
                             from (select distinct on (s.task_type, s.scope, s.group_key) s.*
                                     from queues.task_limit_set s
                                    order by s.task_type, s.scope, s.group_key, s.task_limit_set_id desc) l
                            where (l.max_running is not null or l.max_starts is not null)
                              and (_task_types is null or l.task_type = any (_task_types))
                              and not (l.task_type = any (th.task_types))
                            order by l.task_type, l.scope, l.group_key) l), '[]'),
         -- whether any ready batch exists (sql/queues/ready_batch.sql)
         exists (select 1 from queues.task_ready_batch)
    into _due, _worker_key, _throttled, _throttled_groups, _rules, _batched
    from queues.throttled_keys_at(_now) th
    left join queues.worker_name w on w.worker_id = _worker_id;
  if _due then
    perform queues.rescue_due_leases_at(_now);
  end if;
  if _rules <> '[]'::jsonb then
    _limited := array(select distinct r ->> 'task_type' from jsonb_array_elements(_rules) r order by 1);
  end if;
  if cardinality(_throttled) > 0 then
    _task_types := array(select u.task_type
                           from unnest(coalesce(_task_types, array(select tt.task_type from queues.task_type tt)))
                                as u(task_type)
                          where not (u.task_type = any (_throttled)));
    if cardinality(_task_types) = 0 then
      return;
    end if;
  end if;
  -- The first claim of a worker id adds it (a concurrent first claim waits, then reads it).
  if _worker_key is null then
    insert into queues.worker_name (worker_id) values (_worker_id)
    on conflict (worker_id) do nothing
    returning worker_key into _worker_key;
    if _worker_key is null then
      select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
    end if;
  end if;

  _types := _task_types;
  if cardinality(_limited) > 0 then
    -- Of the limited types, those with a task ready (a lease-free task due, or an expired
    -- lease), in name order; the others are left out of this claim. Their claim locks are
    -- taken below and held to the commit, so no other claim takes tasks of them meanwhile.
    -- (A lock tried and skipped when taken left a window's starts to whichever claim held
    -- it, however few tasks it wanted: rate-limit.mjs measured windows of 20 starts under
    -- a limit of 500.)
    _limited := array(
      select t.task_type from unnest(_limited) t(task_type)
       -- Scalar subqueries, not EXISTS: a generic plan may make an EXISTS a hashed subplan
       -- that reads the whole claim index on every claim (sql/CONVENTIONS.md). The first
       -- follows task_pending_ready_idx's order: without it the generic plan read the
       -- whole claim index (a sequential scan "until the first match", of a type with none).
       where case when coalesce((select true from queues.task_pending p
                                  where p.task_type = t.task_type and p.current_lease_id is null
                                    and p.scheduled_at <= _now and p.available_at <= _now
                                  order by p.priority desc, p.scheduled_at, p.task_id
                                  limit 1), false)
                    or coalesce((select true from queues.task_pending p
                                  where p.current_lease_id > 0 and p.available_at <= _now
                                    and p.task_type = t.task_type
                                  limit 1), false)
                    -- (a ready batch of a type limited after its enqueue: its tasks get
                    -- their rows below)
                    or coalesce((select true from queues.task_ready_batch b
                                  where b.task_type = t.task_type and b.scheduled_at <= _now
                                  order by b.priority desc, b.scheduled_at, b.task_id
                                  limit 1), false)
                  then true else false end
       order by t.task_type);
    foreach _type in array _limited loop
      perform pg_advisory_xact_lock(20252, hashtext(_type));
    end loop;
    _types := array(select u.task_type
                      from unnest(coalesce(_task_types, array(select tt.task_type from queues.task_type tt))) u(task_type)
                     where not (u.task_type = any (array(select r ->> 'task_type' from jsonb_array_elements(_rules) r)))
                        or u.task_type = any (_limited));
    if cardinality(_types) = 0 then
      _types := array[null]::text[];
    end if;
    _rules := coalesce((select jsonb_agg(r) from jsonb_array_elements(_rules) r
                         where r ->> 'task_type' = any (_limited)), '[]');
    -- Group keys without room (live leases or this window's starts at their limit), as
    -- type || chr(31) || group key: left out of the candidate scan below, so that one full
    -- group's backlog does not hide the other groups' tasks behind it.
    if _rules @> '[{"scope": "each_group"}]' or _rules @> '[{"scope": "group"}]' then
      _full := array(
        select k.task_type || chr(31) || k.group_key
          from (select p.task_type, p.group_key, count(*) as live
                  from queues.task_pending p
                 where p.current_lease_id > 0 and p.available_at > _now
                   and p.task_type = any (_limited) and p.group_key is not null
                 group by p.task_type, p.group_key
                union all
                select w.task_type, w.group_key, null
                  from queues.task_limit_window w
                 where w.task_type = any (_limited) and w.group_key <> '') k
         cross join lateral (
           select r.* from jsonb_to_recordset(_rules)
             as r(task_type text, scope text, group_key text, max_running integer, max_starts integer, interval_ms integer)
            where r.task_type = k.task_type
              and (r.scope = 'each_group' or (r.scope = 'group' and r.group_key = k.group_key))
            order by r.scope = 'group' desc
            limit 1
         ) r
         where k.live >= r.max_running
            or (k.live is null and r.interval_ms is not null
                and (select w.starts from queues.task_limit_window w
                      where w.task_type = k.task_type and w.group_key = k.group_key
                        and w.window_start >= queues.limit_window_start(_now, r.interval_ms)) >= r.max_starts));
    end if;
  end if;

  -- The drain's claim: no flow limit and no throttled group key for the types asked for,
  -- no expired lease among them, and the first _limit ready tasks in claim order all on
  -- their first lease and unkeyed (none a suspect, none to abandon, none leased on its
  -- row). Then, without the per-row stages below, one statement picks them and another
  -- leases them; when any of that does not hold, nothing is leased and the statement
  -- below claims as always (the rows the pick locked are this transaction's, so it finds
  -- them). The same ready tasks, in the same order, as that statement's candidates. With
  -- no ready task and no expired lease, the claim ends there, with nothing.
  if cardinality(_limited) = 0 and cardinality(_throttled_groups) = 0 and _suspects <> 'repeat' then
    -- The candidates, locked, in claim order (ids ascending here), and whether they are
    -- all plain.
    -- The ready batches' tasks (sql/queues/ready_batch.sql) are candidates beside the
    -- rows: per type, the batches in claim order (locked as read, the scan stopped by the
    -- LIMIT once it has _limit ids), their ids not yet taken. A batch's ids share its
    -- priority and scheduled time, so what the claim picks of a batch is a prefix of them.
    select array_agg(pk.task_id order by pk.task_id),
           coalesce(bool_and(pk.lease_count = 0 and pk.resource_key is null), false),
           case when min(pk.task_type) = max(pk.task_type) then min(pk.task_type) end,
           coalesce(array_agg(pk.batch_id) filter (where pk.batch_id is not null), '{}')
      into _picked, _plain, _picked_type, _from_batches
      from (select r.*
              from (select distinct u.task_type
                      from unnest(coalesce(_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
             cross join lateral (
               select p.task_id, p.task_type, p.resource_key, p.priority, p.scheduled_at, p.lease_count,
                      null::bigint as batch_id
                 from queues.task_pending p
                where p.task_type = ty.task_type
                  and p.current_lease_id is null
                  and p.scheduled_at <= _now
                  and p.available_at <= _now
                  and (p.resource_key is null or not exists (
                        select 1 from queues.resource_lease r
                         where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
                order by p.priority desc, p.scheduled_at, p.task_id
                limit _limit
                  for update skip locked
             ) r
            union all
            select bt.*
              from (select distinct u.task_type
                      from unnest(coalesce(_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
             cross join lateral (
               select u.task_id, b.task_type, null::text as resource_key, b.priority, b.scheduled_at, 0 as lease_count,
                      b.task_id as batch_id
                 from (select b.task_id, b.task_type, b.priority, b.scheduled_at, b.task_ids, b.taken
                         from queues.task_ready_batch b
                        where _batched
                          and b.task_type = ty.task_type
                          and b.scheduled_at <= _now
                        order by b.priority desc, b.scheduled_at, b.task_id
                        limit _limit
                          for update skip locked) b
                cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
                limit _limit
             ) bt
             order by priority desc, scheduled_at, task_id
             limit _limit) pk;
    -- An expired lease among the types (a scalar subquery in the expired leases' index
    -- order, as below).
    _expired := (select true from queues.task_pending p
                  where p.current_lease_id > 0 and p.available_at <= _now
                    and (_types is null or p.task_type = any (_types))
                  order by p.available_at limit 1) is not null;
    -- Nothing ready and no expired lease: the statement below would find nothing either
    -- (an idle worker's poll).
    if _picked is null and not _expired then
      return;
    end if;
    if _plain and not _expired then
      return query
      with leased as (
        insert into queues.claim_lease (task_id, worker_key, leased_at, expires_at, task_ids, task_range, suspect_task_id,
                                        task_type)
        values (_picked[cardinality(_picked)], _worker_key, _now, _now + make_interval(secs => _lease_seconds), _picked,
                int8range(_picked[1], _picked[cardinality(_picked)], '[]'), null, _picked_type)
        returning task_lease_id, task_id, expires_at
      ),
      due as (
        insert into queues.claim_lease_due (task_lease_id, task_id, expires_at)
        select l.task_lease_id, l.task_id, l.expires_at from leased l
      ),
      taken as (
        delete from queues.task_pending p
         using leased l
         where p.task_id = any (_picked)
      ),
      -- The batches' ids taken off their front (the batch deleted with its last one).
      from_batch as (
        select x.batch_id, count(*)::integer as n from unnest(_from_batches) x(batch_id) group by x.batch_id
      ),
      batch_taken as (
        update queues.task_ready_batch b
           set taken = b.taken + f.n
          from from_batch f, leased l
         where b.task_id = f.batch_id and b.taken + f.n < cardinality(b.task_ids)
      ),
      batch_emptied as (
        delete from queues.task_ready_batch b
         using from_batch f, leased l
         where b.task_id = f.batch_id and b.taken + f.n >= cardinality(b.task_ids)
      )
      select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
             t.enqueued_at, t.scheduled_at, m.task_lease_id, _now, _now + make_interval(secs => _lease_seconds),
             1, t.timeout_ms
        from (select u.task_id, l.task_lease_id from leased l cross join unnest(_picked) u(task_id)) m
       -- (bounded by the claim's least and greatest ids, known when the plan starts: the
       -- history partitions none of them is in are left out, neither locked nor opened)
       cross join lateral (
         select * from queues.task t
          where t.task_id = m.task_id and t.task_id between _picked[1] and _picked[cardinality(_picked)]
          limit 1
       ) t
       order by t.priority desc, t.scheduled_at, t.task_id;
      return;
    end if;
  end if;

  -- A worker holds at most one named repeat suspect at a time: a task one of whose
  -- expiries already counted (a live per-row lease that names its task the suspect,
  -- queues.task_pending_suspect_lease_idx). A worker that died holding two named suspects
  -- counts a death for both; if both were repeat suspects, they came back together when
  -- their leases would have expired, and the same worker's back-to-back claims could take
  -- them together again, so a task that once waited beside a poison task was blamed with
  -- it, lease after lease, until abandoned. Now a task is blamed for another's death at
  -- most once: from then on it is a repeat suspect, and never shares a worker with the
  -- other. First-time suspects (a dead worker's other tasks) are not held back, so they
  -- return as fast as claims take them. A working process beside a quarantine
  -- ('no_repeat') takes none.
  _holds_repeat := _suspects = 'no_repeat' or exists (
    select 1
      from queues.task_pending p
     where p.suspect_lease and p.current_lease_id > 0 and p.available_at > _now
       and p.lease_count - p.released_count - p.failed_attempts - 1 - p.uncounted_count > 0
       and exists (select 1 from queues.claim_lease l
                    where l.task_lease_id = p.current_lease_id and l.task_id >= p.task_id
                      and l.suspect_task_id = p.task_id and l.worker_key = _worker_key));

  -- The per-row path reads rows: the first _limit batched tasks of the types get theirs
  -- (sql/queues/ready_batch.sql). The quarantine takes no batched task: none is a suspect.
  if _batched and _suspects <> 'repeat' then
    perform queues.unbatch_ready_at(_types, _now, _limit);
  end if;

  return query
  with candidate as (
    -- Ready tasks without a lease, per task type, from task_pending_ready_idx in claim
    -- order: rows leased by anyone are not in that index, and scheduled_at <= _now lets
    -- the scan stop (or skip to the next priority) at the first future task. (For a row
    -- without a lease available_at >= scheduled_at, so the extra bound changes nothing.)
    -- SKIP LOCKED skips rows another claimer holds; the update below makes any claimer
    -- that arrives after our commit re-check current_lease_id on the new row version.
    select r.*
      from (select distinct u.task_type
              from unnest(coalesce(_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
     cross join lateral (
       -- The suspects after the first one this claim may lease (see picked below) are
       -- passed over, not counted in _limit: a dead worker's tasks come back ahead of the
       -- rest in claim order, and a claim whose _limit they filled would lease one task.
       -- The running count reads the scan in its order, and the outer LIMIT stops it; the
       -- inner one (up to 1,000 suspects passed over) keeps the plan an index scan.
       select s.task_id, s.task_type, s.current_lease_id, s.resource_key, s.group_key, s.priority, s.scheduled_at,
              s.ended_leases, s.uncounted_count, s.suspect_lease, s.lease_count
         from (select q.*,
                      count(*) filter (where q.takeable)
                        over (order by q.priority desc, q.scheduled_at, q.task_id rows unbounded preceding) as suspects
                 from (select q.*,
                              -- eligible: a suspect not poisoned; takeable: one this claim may lease
                              q.ended_leases > 0 and q.ended_leases - q.uncounted_count < _max_leases as eligible,
                              q.ended_leases > 0 and q.ended_leases - q.uncounted_count < _max_leases
                                and not (_holds_repeat and q.ended_leases - q.uncounted_count > 0) as takeable
                 from (select p.task_id, p.task_type, p.current_lease_id, p.resource_key, p.group_key, p.priority,
                              p.scheduled_at, p.lease_count - p.released_count - p.failed_attempts as ended_leases,
                              p.uncounted_count, p.suspect_lease, p.lease_count
                         from queues.task_pending p
                        where _suspects <> 'repeat'
                          and p.task_type = ty.task_type
                          and p.current_lease_id is null
                          and p.scheduled_at <= _now
                          and p.available_at <= _now
                          -- Flow limits: group keys without room wait (_full, empty without limits).
                          and (cardinality(_full) = 0 or p.group_key is null
                               or not (p.task_type || chr(31) || p.group_key = any (_full)))
                          -- Throttled group keys wait (_throttled_groups, empty while none is throttled).
                          and (cardinality(_throttled_groups) = 0 or p.group_key is null
                               or not (p.group_key = any (_throttled_groups)))
                          -- Tasks whose resource key another task holds wait (the upsert below decides).
                          and (p.resource_key is null or not exists (
                                select 1 from queues.resource_lease r
                                 where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
                        order by p.priority desc, p.scheduled_at, p.task_id
                        limit _limit + 1000
                          for update skip locked) q) q) s
        where not s.eligible or (s.takeable and s.suspects = 1)
        limit _limit
     ) r
    union all
    -- Tasks whose lease expired (their worker died or stopped heartbeating), from
    -- task_pending_lease_expiry_idx (its predicate is current_lease_id > 0, see
    -- migration 000005, section 520-hot-path-plans.sql): only expired leases are read.
    select x.*
      from (
        select p.task_id, p.task_type, p.current_lease_id, p.resource_key, p.group_key, p.priority, p.scheduled_at,
               p.lease_count - p.released_count - p.failed_attempts as ended_leases,
               p.uncounted_count, p.suspect_lease, p.lease_count
          from queues.task_pending p
         where p.current_lease_id > 0
           and p.available_at <= _now
           and (_types is null or p.task_type = any (_types))
           -- The quarantine takes a repeat suspect (this expiry counts if the lease named it).
           and (_suspects <> 'repeat'
                or p.lease_count - p.released_count - p.failed_attempts - p.uncounted_count
                   - (not p.suspect_lease)::integer > 0)
           -- Flow limits: group keys without room wait (_full, empty without limits).
           and (cardinality(_full) = 0 or p.group_key is null
                or not (p.task_type || chr(31) || p.group_key = any (_full)))
           -- Throttled group keys wait (_throttled_groups, empty while none is throttled).
           and (cardinality(_throttled_groups) = 0 or p.group_key is null
                or not (p.group_key = any (_throttled_groups)))
           and (p.resource_key is null or not exists (
                 select 1 from queues.resource_lease r
                  where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
         order by p.available_at
         limit _limit
           for update skip locked
      ) x
    union all
    -- The quarantine's ('repeat') lease-free repeat suspects, from
    -- task_pending_repeat_suspect_idx (the first branch reads none for it).
    select y.*
      from (
        select p.task_id, p.task_type, p.current_lease_id, p.resource_key, p.group_key, p.priority, p.scheduled_at,
               p.lease_count - p.released_count - p.failed_attempts as ended_leases,
               p.uncounted_count, p.suspect_lease, p.lease_count
          from queues.task_pending p
         where _suspects = 'repeat'
           and p.current_lease_id is null
           and p.lease_count - p.released_count - p.failed_attempts - p.uncounted_count > 0
           and p.available_at <= _now
           and p.scheduled_at <= _now
           and (_types is null or p.task_type = any (_types))
           and (cardinality(_full) = 0 or p.group_key is null
                or not (p.task_type || chr(31) || p.group_key = any (_full)))
           and (cardinality(_throttled_groups) = 0 or p.group_key is null
                or not (p.group_key = any (_throttled_groups)))
           and (p.resource_key is null or not exists (
                 select 1 from queues.resource_lease r
                  where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
         order by p.available_at
         limit _limit
           for update skip locked
      ) y
  ),
  -- Flow limits (sql/queues/limits.sql). Every step reads only limited types' rows: with
  -- _limited empty (no limit on the types asked for) each reads nothing.
  -- limit_rule: the rules of the limited types this claim holds the lock of.
  limit_rule as (
    select r.* from jsonb_to_recordset(_rules)
      as r(task_type text, scope text, group_key text, max_running integer, max_starts integer, interval_ms integer)
  ),
  -- limit_live: leases live now per type and group key (the claim index's leased rows),
  -- read once (materialized: inlined into limit_room it was read again per scope).
  limit_live as materialized (
    select p.task_type, p.group_key, count(*) as n
      from queues.task_pending p
     where cardinality(_limited) > 0
       and p.current_lease_id > 0 and p.available_at > _now
       and p.task_type = any (_limited)
     group by p.task_type, p.group_key
  ),
  -- limit_room: per scope a candidate falls in (group_key '' for its type as a whole), the
  -- tasks this claim may take: the least of max_running minus its live leases and
  -- max_starts minus its starts in the current window. A group key's rule is its named
  -- one, else its type's each_group one.
  limit_scope as (
    select distinct c.task_type, k.group_key
      from candidate c
     cross join lateral (select '' as group_key union all select c.group_key where c.group_key is not null) k
     where c.task_type = any (_limited)
  ),
  limit_room as (
    select s.task_type, s.group_key, r.interval_ms,
           case when r.interval_ms is not null then queues.limit_window_start(_now, r.interval_ms) end as window_start,
           greatest(least(r.max_running - coalesce((select sum(lv.n) from limit_live lv
                                                     where lv.task_type = s.task_type
                                                       and (s.group_key = '' or lv.group_key = s.group_key)), 0),
                          r.max_starts - coalesce((select w.starts from queues.task_limit_window w
                                                    where w.task_type = s.task_type and w.group_key = s.group_key
                                                      and w.window_start >= queues.limit_window_start(_now, r.interval_ms)), 0)),
                    0) as room
      from limit_scope s
     cross join lateral (
       select r.* from limit_rule r
        where r.task_type = s.task_type
          and case when s.group_key = '' then r.scope = 'type'
                   else r.scope = 'each_group' or (r.scope = 'group' and r.group_key = s.group_key) end
        order by r.scope = 'group' desc
        limit 1
     ) r
  ),
  -- The suspect this claim may lease (see allowed below: at most one per claim, the first
  -- in claim order that is not poisoned), found here for the limited types only.
  lead_suspect as (
    select c.task_id
      from candidate c
     where cardinality(_limited) > 0
       and c.ended_leases > 0
       and c.ended_leases - c.uncounted_count
             - (c.current_lease_id is not null and not c.suspect_lease)::integer < _max_leases
       and not (_holds_repeat and c.ended_leases - c.uncounted_count
                                    - (c.current_lease_id is not null and not c.suspect_lease)::integer > 0)
     order by c.priority desc, c.scheduled_at, c.task_id
     limit 1
  ),
  -- The candidates within every limit, in claim order, before the claim's _limit is
  -- taken of them (so that tasks a limit holds back never crowd out other types' tasks):
  -- unlimited types as they are; of a limited type, of the tasks that would take a slot
  -- (not suspects, and the suspect this claim may lease), the first `room` of each group
  -- key, then the first `room` of the type. Its other suspects are left for later claims,
  -- and its poisoned ones go on to be abandoned.
  within_limits as (
    select c.* from candidate c where not (c.task_type = any (_limited))
    union all
    select c.* from candidate c
     where c.task_type = any (_limited) and c.ended_leases > 0
       and c.ended_leases - c.uncounted_count
             - (c.current_lease_id is not null and not c.suspect_lease)::integer >= _max_leases
    union all
    select t.task_id, t.task_type, t.current_lease_id, t.resource_key, t.group_key, t.priority, t.scheduled_at,
           t.ended_leases, t.uncounted_count, t.suspect_lease, t.lease_count
      from (select g.*,
                   row_number() over (partition by g.task_type
                                      order by g.priority desc, g.scheduled_at, g.task_id) as type_rank
              from (select c.*,
                           row_number() over (partition by c.task_type, c.group_key
                                              order by c.priority desc, c.scheduled_at, c.task_id) as group_rank
                      from candidate c
                     where c.task_type = any (_limited)
                       and (c.ended_leases = 0 or c.task_id in (select ls.task_id from lead_suspect ls))) g
              left join limit_room gr
                on gr.task_type = g.task_type and gr.group_key = g.group_key
             where gr.room is null or g.group_rank <= gr.room) t
      left join limit_room tr on tr.task_type = t.task_type and tr.group_key = ''
     where tr.room is null or t.type_rank <= tr.room
  ),
  picked as (
    -- Of the candidates (locked until commit), the first _limit in claim order. A task
    -- whose leases ended without an end (ended_leases, the expired current one included)
    -- is a suspect; the expiries counted towards abandonment leave out those of leases
    -- that did not name it as their suspect (uncounted_count, and the current one if so).
    select c.task_id, c.task_type, c.current_lease_id, c.resource_key, c.group_key, c.priority, c.scheduled_at,
           c.counted >= _max_leases as poisoned,
           c.ended_leases > 0 as suspect,
           c.counted as counted_leases,
           c.lease_count > 0 as leased_before
      from (
        -- Of the suspects not poisoned, only the first one in claim order that this
        -- claim may lease (see allowed below; not a repeat suspect while the worker holds
        -- one) is counted in _limit; the others wait for later claims, and the claim
        -- fills its _limit with other ready tasks.
        select c.*
          from (select c.*,
                       count(*) filter (where c.takeable)
                         over (order by c.priority desc, c.scheduled_at, c.task_id rows unbounded preceding) as suspects
                  from (select c.*,
                               c.ended_leases > 0 and c.counted < _max_leases as eligible,
                               c.ended_leases > 0 and c.counted < _max_leases
                                 and not (_holds_repeat and c.counted > 0) as takeable
                          from (select c.*,
                                       c.ended_leases - c.uncounted_count
                                         - (c.current_lease_id is not null and not c.suspect_lease)::integer as counted
                                  from within_limits c) c) c) c
         where not c.eligible or (c.takeable and c.suspects = 1)
         order by c.priority desc, c.scheduled_at, c.task_id
         limit _limit
      ) c
  ),
  -- Resource keys: one task per key in this batch, and only if no other task holds the
  -- key. The upsert decides on the newest committed row (not this statement's snapshot),
  -- so two claimers never both take a key.
  -- Suspects (their worker may have died of them) are leased one per claim, as the
  -- lease's named suspect, so the tasks a crashed worker was running, which all come
  -- back at the same moment, do not all land in one worker again beside the task that
  -- crashed it.
  allowed as (
    select pk.task_id, pk.task_type, pk.group_key, pk.resource_key, pk.priority, pk.scheduled_at, pk.suspect,
           pk.leased_before
      from (select pk.*,
                   row_number() over (partition by pk.suspect
                                      order by pk.priority desc, pk.scheduled_at, pk.task_id) as rank
              from picked pk
             where not pk.poisoned) pk
     where not pk.suspect or pk.rank = 1
  ),
  keyed as (
    select k.task_id, k.resource_key
      from (select distinct on (pk.resource_key) pk.task_id, pk.resource_key
              from allowed pk
             where pk.resource_key is not null
             order by pk.resource_key, pk.priority desc, pk.scheduled_at, pk.task_id) k
     -- Skip a key another transaction is working on (see queues.lock_resource_keys):
     -- a claim never waits, so it cannot be part of a deadlock.
     where pg_try_advisory_xact_lock(20251, hashtext(k.resource_key))
  ),
  key_taken as (
    insert into queues.resource_lease as r (resource_key, task_id, expires_at)
    select k.resource_key, k.task_id, _now + make_interval(secs => _lease_seconds) from keyed k
    on conflict (resource_key) do update
       set task_id = excluded.task_id, expires_at = excluded.expires_at
     where r.expires_at <= _now or r.task_id = excluded.task_id
    returning r.task_id
  ),
  eligible as (
    select pk.task_id, pk.task_type, pk.group_key, pk.suspect,
           -- The ready set (docs/design/hot-path.md): an unkeyed task of an unlimited type
           -- on its first lease leaves the claim index with its claim (a delete); a keyed
           -- task, or one of a limited type, keeps its row and is leased on it (the
           -- per-row path: resource keys and concurrency limits read leased rows), and so
           -- does a task leased before (rescued, retried, released or revoked back into
           -- the claim index): the claim index never loses a task twice, so a claim
           -- lease's completion needs no newer lease looked for (queues.complete_tasks).
           pk.resource_key is not null or pk.task_type = any (_limited) or pk.leased_before as per_row
      from allowed pk
     where pk.resource_key is null or pk.task_id in (select kt.task_id from key_taken kt)
  ),
  -- Rate limits: the starts of this claim added to each scope's current window (one row
  -- per scope it took from; an older window is started again). A claim whose clock is
  -- behind the row's window (it began before another claim of the type committed) adds
  -- to the newer window.
  limit_counted as (
    insert into queues.task_limit_window as w (task_type, group_key, window_start, starts)
    select lr.task_type, lr.group_key, lr.window_start, count(*)
      from limit_room lr
      join eligible e on e.task_type = lr.task_type and (lr.group_key = '' or e.group_key = lr.group_key)
     where lr.window_start is not null
     group by lr.task_type, lr.group_key, lr.window_start
    on conflict (task_type, group_key) do update
       set starts = case when excluded.window_start <= w.window_start then w.starts + excluded.starts
                         else excluded.starts end,
           window_start = greatest(w.window_start, excluded.window_start)
  ),
  abandoned_error as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select pk.task_id, pk.current_lease_id,
           format('abandoned: %s leases expired without completion (max_leases %s)', pk.counted_leases, _max_leases)
      from picked pk where pk.poisoned
  ),
  abandoned as (
    -- No lease: the claimer abandoning the task does not hold one, so the last holder's
    -- fenced completion is refused as lease_lost.
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
    select pk.task_id, null, _now, 'abandoned', pk.task_type from picked pk where pk.poisoned
  ),
  abandoned_removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select pk.task_id from picked pk where pk.poisoned))
  ),
  -- One lease per claim (queues.claim_lease): every task the claim took shares its
  -- task_lease_id (from task_lease's sequence, so a claim's id never equals a per-task
  -- lease's), and the claim names its one suspect. No row is written when nothing is
  -- eligible.
  leased as (
    insert into queues.claim_lease (task_id, worker_key, leased_at, expires_at, task_ids, task_range, suspect_task_id,
                                    task_type)
    select max(e.task_id), _worker_key, _now, _now + make_interval(secs => _lease_seconds),
           array_agg(e.task_id order by e.task_id),
           int8range(min(e.task_id), max(e.task_id), '[]'),
           max(e.task_id) filter (where e.suspect),
           -- The tasks' one type (null when the claim took several): their completion
           -- rounds need it, and read it here instead of from each task.
           case when min(e.task_type) = max(e.task_type) then min(e.task_type) end
      from eligible e
    having count(*) > 0
    returning task_lease_id, task_ids, task_id, expires_at
  ),
  -- The ready set's rescuer reads the claim leases due from here
  -- (queues.rescue_due_leases_at), not from claim_lease's partitions: one row per claim
  -- that took a task out of the claim index, deleted by the pass that rescues it.
  due as (
    insert into queues.claim_lease_due (task_lease_id, task_id, expires_at)
    select l.task_lease_id, l.task_id, l.expires_at from leased l
     where exists (select 1 from eligible e where not e.per_row)
  ),
  -- The claimed rows are found by primary key from the array of their ids (an index
  -- condition): a join of task_pending to the claim would be planned from task_pending's
  -- statistics, and statistics taken when a busy queue had just drained (many pages,
  -- nearly no live rows) made the planner scan the whole table (seconds per claim once
  -- the queue filled again). SET expressions read the row as it was: a lease still
  -- current here expired, and is left uncounted unless it named the task its suspect.
  moved as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds),
           current_lease_id = l.task_lease_id,
           lease_count = p.lease_count + 1,
           uncounted_count = p.uncounted_count + (p.current_lease_id is not null and not p.suspect_lease)::integer,
           -- The new lease names the task its suspect when a lease of it ended without an
           -- end (as picked decided: at most one per claim).
           suspect_lease = p.lease_count - p.released_count - p.failed_attempts > 0
      from leased l
     where p.task_id = any (array(select e.task_id from eligible e where e.per_row))
    returning p.task_id, p.lease_count, p.current_lease_id as task_lease_id, _now as leased_at,
              p.available_at as expires_at
  ),
  -- The ready set: the other claimed tasks leave the claim index (one row deleted per
  -- task, no new row version); their lease is the claim's lease fact, the fence of
  -- their completions (queues.complete_tasks), and an expired one's unfinished tasks come
  -- back through queues.rescue_leases_at.
  taken as (
    delete from queues.task_pending p
     using leased l
     where p.task_id = any (array(select e.task_id from eligible e where not e.per_row))
    returning p.task_id, p.lease_count + 1 as lease_count, l.task_lease_id, _now as leased_at,
              _now + make_interval(secs => _lease_seconds) as expires_at
  )
  select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
         t.enqueued_at, t.scheduled_at, m.task_lease_id, m.leased_at, m.expires_at, m.lease_count, t.timeout_ms
    from (select * from moved union all select * from taken) m
   cross join lateral (
     select * from queues.task t where t.task_id = m.task_id limit 1
   ) t
   order by t.priority desc, t.scheduled_at, t.task_id;
end;
$$;

-- Claim up to _limit ready tasks (optionally only of _task_types) for _worker_id, each
-- with a new lease of _lease_seconds (default 300). Ready: not completed, scheduled_at
-- reached, no live lease. Order: priority desc, scheduled_at, task_id. Tasks that had
-- _max_leases (default 5) leases expire are abandoned instead (see above). timeout_ms:
-- the task's own run timeout (queues.enqueue's _timeout_ms), NULL when it has none.
-- _suspects (default 'any'): which suspects the claim takes, see Quarantine above.
create or replace function queues.claim_tasks(
  _worker_id     text,
  _limit         integer default null,
  _task_types    text[] default null,
  _lease_seconds integer default null,
  _max_leases    integer default null,
  _suspects      text default null
) returns table (
  task_id       bigint,
  task_type     text,
  payload       jsonb,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  task_lease_id bigint,
  leased_at     timestamptz,
  expires_at    timestamptz,
  lease_count   integer,
  timeout_ms    integer
)
  language sql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  -- Paused task types are left out (queues.claimable_task_types).
  select * from queues.claim_tasks_at(now(), _worker_id, coalesce(_limit, 1),
                                      queues.claimable_task_types(_task_types),
                                      coalesce(_lease_seconds, 300), coalesce(_max_leases, 5),
                                      coalesce(_suspects, 'any'))
$$;

-- When a worker whose claim came back short should look again: the milliseconds until
-- the earliest task of _task_types (null: any type; paused types left out, as the claim
-- leaves them out) without a lease is scheduled, counted from the database's clock; null
-- when no such task is scheduled later than _missed_ms milliseconds ago (at most
-- 2,147,483,647, about 24 days, for a task further ahead). _missed_ms: how long before
-- this question the claim it follows took its clock (the worker passes the time since it
-- sent that claim): a task that fell due in between was not ready for the claim and is
-- not ahead of the question, so it answers 0 (look again now), not the next poll. A task
-- the claim passed over for another reason (its resource key held) is answered 0 at most
-- by the question after the claim that passed it over, not again. Workers sleep until then, or their poll interval,
-- whichever comes first, so a task scheduled a moment ahead (a supervisor's next run
-- after its backoff) starts when it is due, not at the next poll; its enqueue woke them
-- (queues.enqueue notifies for tasks due within a minute) so that they ask. Not seen: a
-- retry's backoff (available_at of a task scheduled in the past), which the next poll
-- finds. Cost: per task type, one probe of task_pending_ready_idx per priority in use (a
-- loose scan of the distinct priorities, then the earliest future task of each),
-- whatever the number of tasks scheduled.
-- Flow limits: a type under a rate limit that has a task ready now answers the start of
-- the limit's next window at the latest (its tasks may be held back until then); the
-- limits are read once (a tiny table), and a ready task probed only for a type with one.
create or replace function queues.next_claim_in_ms(_task_types text[] default null, _missed_ms integer default 0)
  returns integer
  language plpgsql stable
  security definer
  -- Planned once per session, not at each call as a SQL function's query is: 0.58 ms a
  -- question before, 0.37 after, 0.22 with its clock read once (below;
  -- tools/bench/probes/one-claim.mjs, 3,200 tasks ready). No argument changes
  -- the plan: the types come from the ready set's index, one probe each.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
declare
  -- The question's clock, read once: a parameter of the statement, so the scans below
  -- start at it in the ready index. Written as clock_timestamp() in the statement, it was
  -- a filter, and each question read every ready task of the types (2,000 ready: 2,000
  -- index entries, 0.86 ms with 3,000 ready instead of 0.13 with none).
  _clock timestamptz := clock_timestamp();
begin
  return (
    with recursive types as (
      select distinct u.task_type
        from unnest(coalesce(queues.claimable_task_types(_task_types),
                             array(select tt.task_type from queues.task_type tt))) as u(task_type)
       where u.task_type is not null
    ),
    priorities (task_type, priority) as (
      select ty.task_type,
             (select p.priority from queues.task_pending p
               where p.task_type = ty.task_type and p.current_lease_id is null
               order by p.priority desc limit 1)
        from types ty
      union all
      select pr.task_type,
             (select p.priority from queues.task_pending p
               where p.task_type = pr.task_type and p.current_lease_id is null and p.priority < pr.priority
               order by p.priority desc limit 1)
        from priorities pr
       where pr.priority is not null
    )
    ,
    next_scheduled as (
      -- (greatest would turn "none" into 0: it ignores nulls; beyond about 24 days, the
      -- integer's largest value)
      select case when min(n.scheduled_at) is not null
                  then least(greatest(ceil(extract(epoch from min(n.scheduled_at) - _clock) * 1000), 0),
                             2147483647)::integer end as ms
        from priorities pr
       cross join lateral (
         select p.scheduled_at from queues.task_pending p
          where p.task_type = pr.task_type and p.current_lease_id is null and p.priority = pr.priority
            and p.scheduled_at > _clock - make_interval(secs => greatest(coalesce(_missed_ms, 0), 0) / 1000.0)
          order by p.scheduled_at
          limit 1
       ) n
       where pr.priority is not null
    ),
    -- A ready batch (sql/queues/ready_batch.sql) enqueued since the claim took its clock:
    -- its tasks are due, so the answer is 0. (Its scheduled time is its enqueue's: never
    -- ahead of the clock but by the clocks' skew. Batches are few: a filter, no index.)
    next_batch as (
      select case when max(b.scheduled_at) is not null
                  then least(greatest(ceil(extract(epoch from max(b.scheduled_at) - _clock) * 1000), 0),
                             2147483647)::integer end as ms
        from queues.task_ready_batch b
       where b.task_type in (select ty.task_type from types ty)
         and b.scheduled_at > _clock - make_interval(secs => greatest(coalesce(_missed_ms, 0), 0) / 1000.0)
    ),
    next_window as (
      select min(greatest(ceil(extract(epoch from queues.limit_window_start(_clock, l.interval_ms)
                                                   + make_interval(secs => l.interval_ms / 1000.0)
                                                   - _clock) * 1000), 0))::integer as ms
        from queues.task_limits() l
       where l.interval_ms is not null
         and l.task_type in (select ty.task_type from types ty)
         and coalesce((select true from queues.task_pending p
                        where p.task_type = l.task_type and p.current_lease_id is null
                          and p.scheduled_at <= _clock and p.available_at <= _clock
                        order by p.priority desc, p.scheduled_at, p.task_id
                        limit 1), false)
    )
    select least(s.ms, b.ms, w.ms) from next_scheduled s, next_batch b, next_window w);
end;
$$;

-- The seeds' single claim: one ready task with a new lease, or no row.
create or replace function queues.dequeue_next_available_task(
  _worker_id     text default null,
  _lease_seconds integer default null
) returns setof queues.task
  language sql volatile
  rows 1
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  -- The columns of queues.task, in table order.
  select c.task_id, c.task_type, c.payload, c.priority, c.resource_key, c.max_attempts,
         c.enqueued_at, c.scheduled_at,
         (select t.group_key from queues.task t where t.task_id = c.task_id), c.timeout_ms
    from queues.claim_tasks_at(now(), coalesce(_worker_id, session_user::text), 1,
                               queues.claimable_task_types(null), coalesce(_lease_seconds, 300), 5) c
$$;
--! EndIncluded queues/claim.sql
--! Included queues/run_now.sql
-- Running scheduled tasks now. queues.run_scheduled_now writes it (the fact
-- queues.task_run_now, the claim-index row due now, the wake-up), for the dashboard's
-- "run now" (admin.run_tasks_now) and for queues.run_task_now, with which the owner's SQL
-- makes a task that no worker has taken yet due now (a channel process's success handler
-- wakes the supervisor run its backoff scheduled this way, rather than enqueue another
-- run beside it). Owner only (no grants).

-- Makes the scheduled tasks among _task_ids (never leased, not due at _now, not waiting for
-- dependencies) due at _now:
-- records queues.task_run_now, moves their claim-index rows, and sends the wake-up when
-- any moved. Their rows stay locked until the caller's transaction ends (a claim that
-- holds one commits first; the row is then read as it left it). Returns the ids moved.
create or replace function queues.run_scheduled_now(_now timestamptz, _task_ids bigint[])
  returns setof bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  return query
  with locked as (
    select p.task_id
      from queues.task_pending p
     where p.task_id = any (_task_ids)
       and p.available_at > _now and p.current_lease_id is null and p.lease_count = 0
       -- A task waiting for its dependencies is not scheduled: it runs when they end.
       and p.available_at <> 'infinity'
     order by p.task_id
       for update
  ),
  recorded as (
    insert into queues.task_run_now (task_id, requested_at)
    select l.task_id, _now from locked l
    on conflict (task_id) do nothing
    returning task_id
  ),
  moved as (
    update queues.task_pending p set available_at = _now, scheduled_at = _now
     where p.task_id = any (array(select r.task_id from recorded r))
    returning p.task_id
  )
  select m.task_id from moved m;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$$;

-- Makes task _task_id due now if no worker has ever taken it. Returns:
--   'due_now'      no lease so far: due now (queues.task_run_now recorded and the wake-up
--                  sent when it was not yet due). Its claim-index row stays locked until
--                  the caller's transaction ends, and claims skip locked rows, so the task
--                  runs after that transaction commits and sees what it wrote.
--   'taken'        a worker holds it, or it ran and waits for a retry: it runs (again) in
--                  its own time; left as it is.
--   'not_pending'  completed, or no such task.
-- A null id is refused (22004).
create or replace function queues.run_task_now(_task_id bigint)
  returns text
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending record;
  _found boolean;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  -- A claim that holds the row commits first; the row is then read as it left it.
  select p.available_at, p.current_lease_id is null and p.lease_count = 0 as untaken into _pending
    from queues.task_pending p
   where p.task_id = _task_id
     for update;
  _found := found;
  -- No row: a task in a ready batch gets one (sql/queues/ready_batch.sql), locked as any
  -- other.
  if not _found and cardinality(queues.unbatch_tasks(array[_task_id])) > 0 then
    select p.available_at, p.current_lease_id is null and p.lease_count = 0 as untaken into _pending
      from queues.task_pending p
     where p.task_id = _task_id
       for update;
    _found := found;
  end if;
  if not _found then
    -- No row: ended (or no such task), or held by the claim lease that took it out of the
    -- claim index (the ready set: docs/design/hot-path.md).
    if exists (select 1 from queues.task t where t.task_id = _task_id)
       and not exists (select 1 from queues.task_end_of(_task_id) e) then
      return 'taken';
    end if;
    return 'not_pending';
  end if;
  if not _pending.untaken then
    return 'taken';
  end if;
  -- Nothing to do when it is due already.
  perform queues.run_scheduled_now(now(), array[_task_id]);
  return 'due_now';
end;
$$;
--! EndIncluded queues/run_now.sql
--! Included queues/limits.sql
-- Flow limits per task type and group key (docs/flow-control.md, "Concurrency and rate
-- limits"), honoured by every claim on every worker (queues.claim_tasks_at):
--
--   concurrency: at most max_running tasks of the scope hold a live lease at once (a lease
--                whose expiry passed, or that was released, revoked or ended, holds none);
--   rate:        at most max_starts tasks of the scope are claimed in each window of
--                interval_ms, windows aligned to the epoch (a minute's limit counts from
--                :00 to :59); a task claimed again (its lease expired, it was released)
--                counts again.
--
-- A scope is a task type as a whole ('type'), each group key of it ('each_group': every
-- group key value separately; tasks without a group key are not limited by it), or one
-- named group key ('group': in place of the type's each_group limit for that key). A
-- task is claimed only when every scope it falls in has room.
--
-- Limits are set as facts (queues.task_limit_set, the latest per key in force); a clear
-- writes a fact with neither limit. Owner only: the REST API calls admin.set_task_limit.

-- The limits in force: one row per (task type, scope, group key). Read once per claim
-- (a tiny table; none set: an empty one).
create or replace function queues.task_limits()
  returns table (
    task_type   text,
    scope       text,
    group_key   text,
    max_running integer,
    max_starts  integer,
    interval_ms integer,
    set_at      timestamptz
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select l.task_type, l.scope, l.group_key, l.max_running, l.max_starts, l.interval_ms, l.set_at
    from (select distinct on (s.task_type, s.scope, s.group_key) s.*
            from queues.task_limit_set s
           order by s.task_type, s.scope, s.group_key, s.task_limit_set_id desc) l
   where l.max_running is not null or l.max_starts is not null
   order by l.task_type, l.scope, l.group_key
$$;

-- Checks a limit's key; raises 22004/22023/23503 naming the field. Helper (no grants).
create or replace function queues.check_task_limit_key(_task_type text, _scope text, _group_key text)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if _scope is null then
    raise exception 'scope must not be null' using errcode = '22004';
  end if;
  if _scope not in ('type', 'each_group', 'group') then
    raise exception 'scope must be type, each_group or group, got %', quote_literal(left(_scope, 100))
      using errcode = '22023';
  end if;
  if _scope = 'group' and (_group_key is null or length(_group_key) not between 1 and 200) then
    raise exception 'group_key must be 1 to 200 characters for scope group' using errcode = '22023';
  end if;
  if _scope <> 'group' and _group_key is not null then
    raise exception 'group_key must be null for scope %', _scope using errcode = '22023';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task type %', quote_literal(left(_task_type, 100)) using errcode = '23503';
  end if;
end;
$$;

-- Sets the limits of a scope: _max_running (1 to 1,000,000 tasks leased at once) and/or
-- _max_starts per _per (1 to 1,000,000 claims per window of 1 millisecond to 1 day, in
-- whole milliseconds); a NULL limit is none. Replaces what the scope had. Bad input
-- (an unknown type 23503; a scope, a group key, a limit of zero or below, a start limit
-- without its interval, an interval out of range or with months 22023; neither limit
-- 22004) writes nothing. Takes effect at the next claim of every worker; tasks running
-- over a lowered limit run on, and no more start until they are under it.
create or replace function queues.set_task_limit(
  _task_type   text,
  _scope       text,
  _group_key   text,
  _max_running integer,
  _max_starts  integer default null,
  _per         interval default null
) returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _ms numeric;
begin
  perform queues.check_task_limit_key(_task_type, _scope, _group_key);
  if _max_running is null and _max_starts is null then
    raise exception 'set max_running, or max_starts with per (queues.clear_task_limit clears)' using errcode = '22004';
  end if;
  if _max_running is not null and _max_running not between 1 and 1000000 then
    raise exception 'max_running must be between 1 and 1000000, got %', _max_running using errcode = '22023';
  end if;
  if _max_starts is not null and _max_starts not between 1 and 1000000 then
    raise exception 'max_starts must be between 1 and 1000000, got %', _max_starts using errcode = '22023';
  end if;
  if (_max_starts is null) <> (_per is null) then
    raise exception 'max_starts and per go together: got max_starts %, per %',
      coalesce(_max_starts::text, 'null'), coalesce(_per::text, 'null') using errcode = '22023';
  end if;
  if _per is not null then
    _ms := extract(epoch from _per) * 1000;
    if extract(month from _per) <> 0 or extract(year from _per) <> 0
       or _ms not between 1 and 86400000 or _ms <> trunc(_ms) then
      raise exception 'per must be a whole number of milliseconds from 1 millisecond to 1 day, got %', _per
        using errcode = '22023';
    end if;
  end if;
  insert into queues.task_limit_set (task_type, scope, group_key, max_running, max_starts, interval_ms)
  values (_task_type, _scope, _group_key, _max_running, _max_starts, _ms::integer);
  -- A limited type's tasks are claimed on their rows, where the limits count them: its
  -- tasks in ready batches get theirs (sql/queues/ready_batch.sql). A batch an enqueue
  -- commits after this (it read no limit) gets its rows at the first claim of the type.
  perform queues.unbatch_task_type(_task_type);
end;
$$;

-- Clears the limits of a scope; true when it had one. Bad input as queues.set_task_limit.
create or replace function queues.clear_task_limit(_task_type text, _scope text, _group_key text default null)
  returns boolean
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform queues.check_task_limit_key(_task_type, _scope, _group_key);
  if not exists (select 1 from queues.task_limits() l
                  where l.task_type = _task_type and l.scope = _scope
                    and l.group_key is not distinct from _group_key) then
    return false;
  end if;
  insert into queues.task_limit_set (task_type, scope, group_key) values (_task_type, _scope, _group_key);
  return true;
end;
$$;

-- The start of the rate window holding _now, for windows of _interval_ms aligned to the
-- epoch. Helper (no grants).
create or replace function queues.limit_window_start(_now timestamptz, _interval_ms integer)
  returns timestamptz
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select to_timestamp(floor(extract(epoch from _now) * 1000 / _interval_ms) * _interval_ms / 1000.0)
$$;

-- Each limit in force with how full it is now: tasks of its scope holding a live lease
-- (running), claimed in the current window (starts, rate limits only), and ready now but
-- held back because the scope is full (held_back: for an each_group limit, summed over
-- its full group keys). For the dashboard, the REST API and /metrics: reads the live
-- leases and ready tasks of limited types only (the claim index's ready index per type).
create or replace function queues.task_limit_status_at(_now timestamptz)
  returns table (
    task_type   text,
    scope       text,
    group_key   text,
    max_running integer,
    max_starts  integer,
    interval_ms integer,
    set_at      timestamptz,
    running     bigint,
    starts      bigint,
    held_back   bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  with rule as (
    select l.* from queues.task_limits() l
  ),
  live as (
    -- The claim index's leased rows, and the lease-held tasks (sql/queues/lease_held.sql):
    -- a limited type's tasks are leased on their rows, but tasks claimed before their type
    -- was limited may still be held by their claim lease without one. Read only when a
    -- limit is in force.
    select p.task_type, p.group_key, count(*) as n
      from queues.task_pending_or_held p
     where p.current_lease_id > 0 and p.available_at > _now
       and p.task_type = any (array(select distinct r.task_type from rule r))
       and exists (select 1 from rule)
     group by 1, 2
  ),
  ready as (
    select p.task_type, p.group_key, count(*) as n
      from queues.task_pending p
     where p.current_lease_id is null and p.scheduled_at <= _now and p.available_at <= _now
       and p.task_type = any (array(select distinct r.task_type from rule r))
     group by 1, 2
  ),
  -- Per rule and group key it covers ('' for the type as a whole): used and ready.
  per_key as (
    select r.*, k.group_key as key,
           coalesce((select sum(lv.n) from live lv
                      where lv.task_type = r.task_type
                        and (k.group_key = '' or lv.group_key = k.group_key)), 0) as running_now,
           coalesce((select w.starts from queues.task_limit_window w
                      where w.task_type = r.task_type and w.group_key = k.group_key
                        and r.interval_ms is not null
                        and w.window_start >= queues.limit_window_start(_now, r.interval_ms)), 0) as starts_now,
           coalesce((select sum(rd.n) from ready rd
                      where rd.task_type = r.task_type
                        and (k.group_key = '' or rd.group_key = k.group_key)), 0) as ready_now
      from rule r
     cross join lateral (
       select '' as group_key where r.scope = 'type'
       union all select r.group_key where r.scope = 'group'
       -- an each_group limit is listed (with zeros) when no group key of it has tasks
       union all select null where r.scope = 'each_group'
       -- each group key with tasks live or ready and no named limit of its own
       union all
       select g.group_key from (select lv.group_key from live lv where lv.task_type = r.task_type
                                union select rd.group_key from ready rd where rd.task_type = r.task_type) g
        where r.scope = 'each_group' and g.group_key is not null
          and not exists (select 1 from rule n where n.task_type = r.task_type and n.scope = 'group'
                                                 and n.group_key = g.group_key)
     ) k
  )
  select pk.task_type, pk.scope, pk.group_key, pk.max_running, pk.max_starts, pk.interval_ms, pk.set_at,
         sum(pk.running_now)::bigint, sum(pk.starts_now)::bigint,
         sum(case when pk.running_now >= pk.max_running or pk.starts_now >= pk.max_starts then pk.ready_now else 0 end)::bigint
    from per_key pk
   group by pk.task_type, pk.scope, pk.group_key, pk.max_running, pk.max_starts, pk.interval_ms, pk.set_at
   order by 1, 2, 3
$$;
--! EndIncluded queues/limits.sql
--! Included queues/partitions_sets.sql
-- The history partition sets as they stand: bounds, the ranges a newest-first read walks,
-- sizes, and the last task id handed out (sql/queues/partitions.sql describes the sets).

-- Every partition of every history table but the defaults, with its bounds. Owner only.
create or replace function queues.history_partition_bounds()
  returns table (table_name text, partition_name text, lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.name, c.relname::text, m.b[1]::bigint, m.b[2]::bigint
    from unnest(queues.history_tables()) t(name)
    join pg_inherits i on i.inhparent = to_regclass(format('queues.%I', t.name))
    join pg_class c on c.oid = i.inhrelid
   cross join lateral regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?\d+)''?\) TO \(''?(-?\d+)''?\)') as m(b)
   where m.b is not null
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last: bounds and the planner's
-- estimate of their tasks only, from the catalog (no relation is opened). What the list
-- endpoints walk and maintenance reads; queues.history_partitions() adds sizes.
create or replace function queues.history_sets()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  -- A bound reads FOR VALUES FROM ('<lower>') TO ('<upper>'), or DEFAULT. It holds no
  -- column, so it is deparsed without opening the partition (relation 0), and its two
  -- quoted values are the 2nd and 4th fields between quotes (a regular expression took
  -- 10 us a row).
  select nullif(split_part(b.bound, '''', 2), '')::bigint, nullif(split_part(b.bound, '''', 4), '')::bigint,
         b.relname::text, greatest(b.reltuples, 0)::bigint, b.bound = 'DEFAULT'
    from (select c.relname, c.reltuples, pg_get_expr(c.relpartbound, 0) as bound
            from pg_inherits i
            join pg_class c on c.oid = i.inhrelid
           where i.inhparent = 'queues.task'::regclass) b
   order by b.bound = 'DEFAULT', 1
$$;

-- The task id ranges [lower_bound, upper_bound) that a newest-first read of history
-- walks, newest first: the sets that can hold a task below _before (null: any) and not
-- above the last task id handed out (sets above it hold none), upper bounds capped at
-- _before. Each range is one set, except the first, which spans the two newest: the set
-- being filled may have begun a moment ago, and two partitions per table cost the planner
-- little more than one, so a page usually takes one statement. A reader that gives each
-- range's bounds to its statement as values gets a plan of these partitions only.
-- While the default partition holds a task (outside every set; normally none), one range
-- instead, (null, _before): everything below _before, in one statement.
create or replace function queues.history_walk(_before bigint)
  returns table (lower_bound bigint, upper_bound bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (
    select s.lower_bound, least(s.upper_bound, _before) as upper_bound,
           row_number() over (order by s.lower_bound desc) as n
      from queues.history_sets() s
     where not s.is_default
       -- once, not once per set (a call reads the sequence's catalog entry)
       and s.lower_bound <= (select queues.last_task_id())
       and (_before is null or s.lower_bound < _before)
  ),
  walk as (
    select coalesce((select b.lower_bound from s b where b.n = 2), a.lower_bound) as lower_bound, a.upper_bound
      from s a where a.n = 1
    union all
    select s.lower_bound, s.upper_bound from s where s.n > 2
  ),
  spill as (select exists (select 1 from queues.task_default) as any)
  select w.lower_bound, w.upper_bound from walk w, spill where not spill.any
  union all
  select null, _before from spill where spill.any
  order by 1 desc nulls first
$$;

-- The bytes of the sets whose lower bounds are given (a null element: the default
-- partitions), summed over every history table: the data of tables with their TOAST, and
-- of their indexes (each relation's main fork: its free space and visibility maps, a
-- fraction of a percent, are left out, which halves the files looked at). Each partition
-- is looked up by name (queues.history_partition_name) through the catalog's name index;
-- sizing opens each partition and its indexes (a lock and a file size each, about 50
-- relations a set), so this is the one place that costs per partition: callers pass
-- every set they need in one call (one plan).
create or replace function queues.history_set_bytes(_lower_bounds bigint[])
  returns table (lower_bound bigint, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select l.lower_bound,
         coalesce(sum(pg_relation_size(c.oid) + coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0)), 0)::bigint,
         coalesce(sum((select sum(pg_relation_size(i.indexrelid)) from pg_index i where i.indrelid = c.oid)), 0)::bigint
    from unnest(_lower_bounds) l(lower_bound)
   cross join unnest(queues.history_tables()) t(name)
    left join pg_class c on c.relnamespace = 'queues'::regnamespace
                        and c.relname = case when l.lower_bound is null then t.name || '_default'
                                             else queues.history_partition_name(t.name, l.lower_bound) end
   group by l.lower_bound
$$;

-- queues.history_sets() with each set's bytes (queues.history_set_bytes), every set sized
-- on each call: the History page reads queues.history_set_measured for the sets that are
-- done instead (admin.history_status_at).
create or replace function queues.history_partition_sizes()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, is_default boolean, table_bytes bigint, index_bytes bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  with s as (select * from queues.history_sets())
  select s.lower_bound, s.upper_bound, s.partition_name, s.estimated_tasks, s.is_default,
         b.table_bytes, b.index_bytes
    from s
    join queues.history_set_bytes(array(select s.lower_bound from s)) b
      on b.lower_bound is not distinct from s.lower_bound
   order by s.is_default, s.lower_bound
$$;

-- Measures the sets that are done into queues.history_set_measured: every set whose range
-- lies below the last task id and that holds no pending task, with its bytes
-- (queues.history_set_bytes) and its oldest and newest task. Such a set's tables change
-- only by a rare late fact (a redrive, a revocation or start mark that arrives after the
-- completion) until it is dropped, so a reader that answers often (the History page, every
-- dashboard's poll and /metrics) takes its figures from here and sizes only the sets still
-- filling. A row is written only when a figure changed; rows of sets no longer there are
-- deleted. Maintenance calls it at the end of each run (queues.maintain_history_step_at).
-- Returns the number of sets whose figures were written. Owner only.
create or replace function queues.measure_history_sets(_now timestamptz)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _last_id bigint := queues.last_task_id();
  _written integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  delete from queues.history_set_measured m
   where not exists (select 1 from queues.history_sets() s
                      where s.lower_bound = m.lower_bound and s.upper_bound = m.upper_bound);
  with done as (
    select s.lower_bound, s.upper_bound
      from queues.history_sets() s
     where not s.is_default and s.upper_bound <= _last_id
       and not exists (select 1 from queues.task_pending tp
                        where tp.task_id >= s.lower_bound and tp.task_id < s.upper_bound)
       -- nor a lease-held task (no claim-index row, sql/queues/lease_held.sql)
       and not exists (select 1 from queues.lease_held_tasks h
                        where h.task_id >= s.lower_bound and h.task_id < s.upper_bound)
       -- nor a ready batch's (sql/queues/ready_batch.sql)
       and not exists (select 1 from queues.task_ready_batch b
                        cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
                        where b.task_range && int8range(s.lower_bound, s.upper_bound)
                          and u.task_id >= s.lower_bound and u.task_id < s.upper_bound)
  ),
  measured as (
    select d.lower_bound, d.upper_bound, f.task_id as first_task_id, f.enqueued_at as first_enqueued_at,
           n.task_id as last_task_id, b.table_bytes, b.index_bytes
      from done d
      join queues.history_set_bytes(array(select d.lower_bound from done d)) b on b.lower_bound = d.lower_bound
      left join lateral (select t.task_id, t.enqueued_at from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id limit 1) f on true
      left join lateral (select t.task_id from queues.task t
                          where t.task_id >= d.lower_bound and t.task_id < d.upper_bound
                          order by t.task_id desc limit 1) n on true
  )
  insert into queues.history_set_measured as m
         (lower_bound, upper_bound, first_task_id, first_enqueued_at, last_task_id, table_bytes, index_bytes,
          measured_at)
  select x.lower_bound, x.upper_bound, x.first_task_id, x.first_enqueued_at, x.last_task_id, x.table_bytes,
         x.index_bytes, _now
    from measured x
  on conflict (lower_bound) do update
     set upper_bound = excluded.upper_bound, first_task_id = excluded.first_task_id,
         first_enqueued_at = excluded.first_enqueued_at, last_task_id = excluded.last_task_id,
         table_bytes = excluded.table_bytes, index_bytes = excluded.index_bytes, measured_at = excluded.measured_at
   where (m.upper_bound, m.first_task_id, m.first_enqueued_at, m.last_task_id, m.table_bytes, m.index_bytes)
         is distinct from (excluded.upper_bound, excluded.first_task_id, excluded.first_enqueued_at,
                           excluded.last_task_id, excluded.table_bytes, excluded.index_bytes);
  get diagnostics _written = row_count;
  return _written;
end;
$$;

-- The partition sets of queues.task (the other tables follow the same bounds), lowest
-- first, with the default partition (lower and upper null) last. Sizes are summed over
-- every history table (tables, TOAST and indexes); tasks is the planner's estimate.
create or replace function queues.history_partitions()
  returns table (lower_bound bigint, upper_bound bigint, partition_name text,
                 estimated_tasks bigint, total_bytes bigint, is_default boolean)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.lower_bound, p.upper_bound, p.partition_name, p.estimated_tasks,
         p.table_bytes + p.index_bytes, p.is_default
    from queues.history_partition_sizes() p
   order by p.is_default, p.lower_bound
$$;

-- The last task id handed out (0 before the first task).
create or replace function queues.last_task_id() returns bigint
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(pg_sequence_last_value(pg_get_serial_sequence('queues.task', 'task_id')::regclass), 0)
$$;

revoke execute on function queues.history_partition_bounds(), queues.history_sets(), queues.history_walk(bigint),
  queues.history_set_bytes(bigint[]), queues.history_partition_sizes(), queues.measure_history_sets(timestamptz),
  queues.history_partitions(), queues.last_task_id()
  from public;
--! EndIncluded queues/partitions_sets.sql
--! Included queues/partitions_status.sql
-- What operators read of the history partitions: the settings, the oldest task, the next
-- drop, the sets and their sizes; admin.history_status() serves it to the dashboard.
-- Owner only.

-- What operators watch, without the list of sets: the settings, the oldest retained task,
-- and the next drop (the lowest set below the last task id with its newest completion: it
-- can go at last_completed_at + retention, unless it holds pending tasks). Each read of
-- a partitioned table is pruned at plan time to the set it needs (EXECUTE with the set's
-- bounds as values), so the cost does not grow with the number of sets beyond the catalog
-- read of their bounds.
create or replace function queues.history_summary_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint := queues.last_task_id();
  _set record;
  _next record;
  _next_json jsonb;
  _oldest_id bigint;
  _oldest_at timestamptz;
  _default_id bigint;
  _default_at timestamptz;
  _last_completed timestamptz;
  _pending bigint;
begin
  select * into _setting from queues.history_setting;
  -- The oldest task: in the lowest set that holds one (or in the default partition).
  for _set in
    select s.lower_bound, s.upper_bound from queues.history_sets() s
     where not s.is_default and s.lower_bound <= _last_id
     order by s.lower_bound
  loop
    execute 'select t.task_id, t.enqueued_at from queues.task t
              where t.task_id >= $1 and t.task_id < $2 order by t.task_id limit 1'
      into _oldest_id, _oldest_at using _set.lower_bound, _set.upper_bound;
    exit when _oldest_id is not null;
  end loop;
  select t.task_id, t.enqueued_at into _default_id, _default_at from queues.task_default t order by t.task_id limit 1;
  if _default_id < _oldest_id or _oldest_id is null then
    _oldest_id := _default_id;
    _oldest_at := _default_at;
  end if;

  select s.lower_bound, s.upper_bound into _next
    from queues.history_sets() s
   where not s.is_default and s.upper_bound <= _last_id
   order by s.lower_bound
   limit 1;
  if found then
    -- Its newest end, in either shape (as queues.maintain_history_step_at reads it).
    execute 'select greatest(
               (select max(c.completed_at) from queues.task_completed c where c.task_id >= $1 and c.task_id < $2),
               (select max(r.completed_at) from queues.completion_round r
                 where r.task_range && int8range($1, $2) and r.task_id >= $1))'
      into _last_completed using _next.lower_bound, _next.upper_bound;
    _pending := (select count(*) from queues.task_pending tp
                  where tp.task_id >= _next.lower_bound and tp.task_id < _next.upper_bound)
                -- and the lease-held tasks (no claim-index row, sql/queues/lease_held.sql)
                + (select count(*) from queues.lease_held_tasks h
                    where h.task_id >= _next.lower_bound and h.task_id < _next.upper_bound)
                -- and the tasks in ready batches (sql/queues/ready_batch.sql)
                + queues.batched_count_between(_next.lower_bound, _next.upper_bound);
    _next_json := jsonb_build_object(
      'lower_bound', _next.lower_bound, 'upper_bound', _next.upper_bound,
      'pending_tasks', _pending,
      'last_completed_at', _last_completed,
      'drop_after', case when _pending = 0 then coalesce(_last_completed + _setting.retention, _now) end);
  end if;
  return jsonb_build_object(
    'retention_seconds', extract(epoch from _setting.retention)::bigint,
    'partition_size', _setting.partition_size,
    'partitions_ahead', _setting.partitions_ahead,
    'last_task_id', _last_id,
    'oldest_task_id', _oldest_id,
    'oldest_enqueued_at', _oldest_at,
    'default_partition_tasks', (select count(*) from queues.task_default),
    'next_drop', _next_json,
    'dropped_sets', (select count(*) from queues.history_partition_dropped),
    'skipped_steps_last_hour', (select count(*) from queues.history_step_skipped k where k.skipped_at > _now - interval '1 hour'),
    'last_skipped_step', (select jsonb_build_object('skipped_at', k.skipped_at, 'step', k.step, 'reason', k.reason)
                            from queues.history_step_skipped k order by k.skipped_at desc limit 1),
    'last_dropped_at', (select max(d.dropped_at) from queues.history_partition_dropped d));
end;
$$;

-- queues.history_summary_at(_now) and the sets with their sizes (queues.history_partitions()).
create or replace function queues.history_status_at(_now timestamptz)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.history_summary_at(_now) || jsonb_build_object(
    'partitions', coalesce((select jsonb_agg(jsonb_build_object(
        'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'name', p.partition_name,
        'estimated_tasks', p.estimated_tasks, 'total_bytes', p.total_bytes, 'is_default', p.is_default)
        order by p.is_default, p.lower_bound)
      from queues.history_partitions() p), '[]'))
$$;

revoke execute on function queues.history_status_at(timestamptz), queues.history_summary_at(timestamptz) from public;
--! EndIncluded queues/partitions_status.sql
--! Included queues/partitions_maintain.sql
-- History maintenance: sets made ahead of need, old sets dropped, one short step at a time
-- (sql/queues/partitions.sql describes the sets; sql/queues/partitions_locks.sql the locks).

-- One step of partition maintenance at _now: the first of these that has work to do,
-- locking one table only (see "Locks" in
-- partitions_locks.sql), its locks taken between the queue's
-- transactions within lock_timeout_ms (queues.lock_history_tables):
-- 1. Sets ahead of need, one table per step: first a set left half made (some table has
--    its partition, task not yet; task's is made last), then a new set above every range
--    there is or was and above any task in the default partition, of partition_size task
--    ids, while the sets above the last task id handed out cover less than
--    partitions_ahead * partition_size ids. A set less than partition_size ids above the
--    last id (maintenance fell behind) is made whole in one step instead, above the last id.
-- 1b. Tasks in the default partition (ids handed out while no set covered them) are made
--    a set with their facts, at most 2,000 tasks per step: a half made set they fell into
--    is finished so, or a range of the gap they lie in (queues.adopt_history_range).
-- 2. A table detached from a dropped set is dropped (truncated first if it has rows and
--    a foreign key).
-- 3. A fact table's partition of a dropped set is detached.
-- 4. The oldest set that may go is dropped, starting with its task partition, which is
--    detached (the set's tasks are gone from then on; steps 3 and 2 take its facts and the
--    detached tables away): a set goes when its whole range lies below the last task id
--    (no new task can land in it), it holds no unfinished task (queues.task_pending and
--    the ready batches, queues.task_ready_batch, then
--    every task checked against its end: a task_completed row or a completion round; a
--    task its claim lease holds has neither a row nor an end, and keeps the set), its
--    newest end is older than the retention window, no unfinished task of a newer set
--    depends on one of its tasks, and no completion round or claim lease in it names a
--    task of an older set still kept (a round lives in the set of the largest task id it
--    names). A set with one unfinished task is kept, however old. Under the detach's lock
--    what may have changed since is checked again: a claim-index row or ready batch, a
--    recent end, and
--    the tasks claimed since the checks (a task committed after them and claimed at once
--    has no row).
-- 5. With nothing else to do: the sets that are done are measured for the History page
--    (queues.measure_history_sets).
-- Drops are recorded in queues.history_partition_dropped. A step that cannot get its lock
-- in time (or finds a task fell into the default partition in the range it makes) is
-- rolled back, recorded in queues.history_step_skipped and reported skipped; the run goes
-- on ("more") until 5 steps have been skipped within a minute. Returns
--   {"action": "attached" | "set_created" | "set_adopted" | "dropped_table" | "truncated" | "detached" |
--              "set_dropped" | "none" | "skipped" | "busy",
--    "table", "lower_bound", "upper_bound", "tasks", "reason", "late": as they apply,
--    "measured": with "none", the sets whose figures step 5 wrote,
--    "kept": sets below the last task id kept so far, "more": whether to call again}
-- "busy": another maintenance step is in flight (one maintainer at a time). Owner only.
create or replace function queues.maintain_history_step_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  -- A bound for any other lock a statement here might wait for (its own are taken
  -- first, without waiting); restored when the function returns.
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _setting queues.history_setting;
  _last_id bigint;
  _doing text;
  _table text;
  _name text;
  _lower bigint;
  _upper bigint;
  _truncate boolean;
  _kept integer := 0;
  _set record;
  _tasks bigint;
  _last_completed timestamptz;
  _measured integer;
  _spilled bigint;
  _gap_lower bigint;
  _gap_upper bigint;
  _lease_mark bigint;
  _claimed_since bigint[];
  -- The locks that keep every writer of history out (a late set, a move out of the
  -- default partitions): SHARE on each parent, ACCESS EXCLUSIVE on its default.
  _writers_out text[] := array(select x from unnest(queues.history_tables()) t(name),
                                 lateral (values (t.name), (t.name || '_default')) v(x));
  _writers_out_modes text[] := array(select m from unnest(queues.history_tables()) t(name),
                                       lateral (values ('share'), ('access exclusive')) v(m));
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if not pg_try_advisory_xact_lock(20252, 1) then
    return jsonb_build_object('action', 'busy', 'more', false);
  end if;
  select * into _setting from queues.history_setting;
  _last_id := queues.last_task_id();

  begin
    -- 1. Ahead of need: a half made set, unless a task fell into the default partition in
    --    its range (maintenance fell behind while it was half made): then task's
    --    partition cannot be attached, new sets start above it, and step 1b finishes it
    --    by moving those tasks into it.
    with b as (select * from queues.history_partition_bounds())
    select h.lower_bound, h.upper_bound into _lower, _upper
      from (select distinct b.lower_bound, b.upper_bound from b) h
     where not exists (select 1 from b x where x.table_name = 'task' and x.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = h.lower_bound)
       and not exists (select 1 from queues.task_default t where t.task_id >= h.lower_bound and t.task_id < h.upper_bound)
     order by h.lower_bound
     limit 1;
    if _lower is null then
      -- A new set. Ranges are never reused: above every partition there is or was, and
      -- above any task in the default partition (a new set cannot overlap rows there).
      select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                      coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                      coalesce((select max(t.task_id) + 1 from queues.task_default t), 0))
        into _lower;
      if _lower < _last_id + 1 + _setting.partitions_ahead::bigint * _setting.partition_size then
        _upper := _lower + _setting.partition_size;
      else
        _lower := null;
      end if;
    end if;
    if _lower is not null and _lower <= _last_id + _setting.partition_size then
      -- Late: less than one set's width of ids is left before the ids handed out reach
      -- the set (maintenance fell behind). Made table by table, it could be outrun: a
      -- task given an id in its range before task's partition exists falls into the
      -- default partition, its facts into theirs, and the next table's attach fails on
      -- them, run after run. So the whole set is made in this one step, under locks
      -- that keep every writer of history out (SHARE on each parent, ACCESS EXCLUSIVE on
      -- each default), starting above the last id read under them: no task of its range
      -- exists, and none can be written until it commits. The ids handed out before it
      -- fall into the default partitions (queues.history_summary_at counts them).
      _doing := format('make the set from %s at once (late)', _lower);
      perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
      _last_id := queues.last_task_id();
      if exists (select 1 from queues.history_partition_bounds() b where b.lower_bound = _lower)
         and not exists (select 1 from queues.task_default t where t.task_id >= _lower and t.task_id < _upper) then
        null; -- a half made set that no task has reached: finished as it is
      else
        select greatest(coalesce((select max(b.upper_bound) from queues.history_partition_bounds() b), 0),
                        coalesce((select max(d.upper_bound) from queues.history_partition_dropped d), 0),
                        coalesce((select max(t.task_id) + 1 from queues.task_default t), 0),
                        _last_id + 1)
          into _lower;
        _upper := _lower + _setting.partition_size;
      end if;
      perform queues.create_history_partition(_lower, _upper);
      return jsonb_build_object('action', 'set_created', 'table', queues.history_partition_name('task', _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'late', true, 'more', true);
    end if;
    if _lower is not null then
      select t.name into _table
        from unnest(queues.history_tables()) with ordinality t(name, n)
       where to_regclass(format('queues.%I', queues.history_partition_name(t.name, _lower))) is null
       order by t.name = 'task', t.n
       limit 1;
      _doing := format('attach queues.%I', queues.history_partition_name(_table, _lower));
      perform queues.attach_history_partition(_table, _lower, _upper);
      if _table = 'task' then
        insert into queues.history_partition_created (lower_bound, upper_bound)
        values (_lower, _upper) on conflict (lower_bound) do nothing;
      end if;
      return jsonb_build_object('action', case when _table = 'task' then 'set_created' else 'attached' end,
                                'table', queues.history_partition_name(_table, _lower),
                                'lower_bound', _lower, 'upper_bound', _upper, 'more', true);
    end if;

    -- 1b. Tasks in the default partition (ids handed out while no set covered them): the
    --    range around the lowest is made a set, its rows moved out of the default
    --    partitions (queues.adopt_history_range), so that retention drops them with it
    --    and pending ones stay claimable. The range: a half made set's own (finished so),
    --    or the gap between the ranges there are or were, below the lowest range above
    --    the task and cut after its 2,000th task (a step moves at most that many tasks,
    --    with their facts, under its locks). Not while no range lies above the task: the
    --    ids may still be handed out, and step 1 makes the set above them first.
    select t.task_id into _spilled from queues.task_default t order by t.task_id limit 1;
    if _spilled is not null then
      with r as (
        select b.lower_bound, b.upper_bound from queues.history_partition_bounds() b
        union all
        select d.lower_bound, d.upper_bound from queues.history_partition_dropped d
      )
      select (select min(r.lower_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             (select max(r.upper_bound) from r where r.lower_bound <= _spilled and r.upper_bound > _spilled),
             coalesce((select max(r.upper_bound) from r where r.upper_bound <= _spilled), 0),
             (select min(r.lower_bound) from r where r.lower_bound > _spilled)
        into _lower, _upper, _gap_lower, _gap_upper;
      if _lower is null and _gap_upper is not null then
        -- The gap, cut after its 2,000th task.
        _lower := _gap_lower;
        _upper := least(_gap_upper,
                        coalesce((select t.task_id from queues.task_default t
                                   where t.task_id >= _spilled and t.task_id < _gap_upper
                                   order by t.task_id offset 2000 limit 1), _gap_upper));
      end if;
      if _upper is not null and not exists (select 1 from queues.history_partition_dropped d where d.lower_bound = _lower) then
        _doing := format('adopt the default partitions'' tasks in [%s, %s)', _lower, _upper);
        perform queues.lock_history_tables(_writers_out, _writers_out_modes, _setting.lock_timeout_ms);
        _tasks := queues.adopt_history_range(_lower, _upper);
        return jsonb_build_object('action', 'set_adopted', 'table', queues.history_partition_name('task', _lower),
                                  'lower_bound', _lower, 'upper_bound', _upper, 'tasks', _tasks, 'more', true);
      end if;
    end if;

    -- 2. A table detached from a dropped set (named as a partition, no longer one). Its
    --    drop locks only itself, so its files are unlinked under no lock the queue waits
    --    for; but dropping a foreign key takes ACCESS EXCLUSIVE on the table it
    --    references, so a table with one (none has today) is truncated first (under its
    --    own lock) and that drop is a catalog change only.
    select c.relname,
           pg_relation_size(c.oid) > 0 and exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'f')
      into _name, _truncate
      from pg_class c
      join unnest(queues.history_tables()) t(name)
        on c.relname = queues.history_partition_name(t.name, substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     where c.relnamespace = 'queues'::regnamespace and c.relkind = 'r' and not c.relispartition
       and exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = substring(c.relname from '_p([0-9]{1,18})$')::bigint)
     order by c.relname
     limit 1;
    if _name is not null then
      if _truncate then
        _doing := format('truncate queues.%I', _name);
        execute format('truncate queues.%I', _name);
        return jsonb_build_object('action', 'truncated', 'table', _name, 'more', true);
      end if;
      _doing := format('drop queues.%I', _name);
      execute format('drop table queues.%I', _name);
      return jsonb_build_object('action', 'dropped_table', 'table', _name, 'more', true);
    end if;

    -- 3. A fact table's partition of a dropped set: detached, a catalog change.
    select b.table_name, b.partition_name, b.lower_bound, b.upper_bound into _table, _name, _lower, _upper
      from queues.history_partition_bounds() b
     where exists (select 1 from queues.history_partition_dropped d
                    where d.lower_bound = b.lower_bound and d.upper_bound = b.upper_bound)
     order by b.lower_bound, b.table_name
     limit 1;
    if _name is not null then
      _doing := format('detach queues.%I', _name);
      perform queues.lock_history_tables(array[_table, _name, _table || '_default'],
                                         array['access exclusive', 'access exclusive', 'access exclusive'],
                                         _setting.lock_timeout_ms);
      execute format('alter table queues.%I detach partition queues.%I', _table, _name);
      return jsonb_build_object('action', 'detached', 'table', _name, 'lower_bound', _lower, 'upper_bound', _upper,
                                'more', true);
    end if;

    -- 4. Expired sets, oldest first.
    for _set in
      select p.lower_bound, p.upper_bound from queues.history_sets() p
       where not p.is_default and p.upper_bound <= _last_id
       order by p.lower_bound
    loop
      -- The last lease id handed out before this set's checks: a claim lease with a
      -- larger id was written after them (one statement reads the claim index and takes
      -- its lease id), so the check under the detach's lock reads only those.
      _lease_mark := pg_sequence_last_value('queues.task_lease_task_lease_id_seq'::regclass);
      -- Cheap checks first, without strong locks: a pending task, or a recent completion.
      if exists (select 1 from queues.task_pending tp
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
         -- (or a ready batch's task: sql/queues/ready_batch.sql)
         or exists (select 1 from queues.task_ready_batch b
                     cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
                     where b.task_range && int8range(_set.lower_bound, _set.upper_bound)
                       and u.task_id >= _set.lower_bound and u.task_id < _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      -- Its newest end: task_completed's rows in the set, and the completion rounds that
      -- name a task in its range (GiST probes of completion_round.task_range in the
      -- partitions of this set and the newer ones, where such a round lives).
      select greatest(
               (select max(c.completed_at) from queues.task_completed c
                 where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound),
               (select max(r.completed_at) from queues.completion_round r
                 where r.task_range && int8range(_set.lower_bound, _set.upper_bound)
                   and r.task_id >= _set.lower_bound))
        into _last_completed;
      if _last_completed > _now - _setting.retention then
        _kept := _kept + 1;
        continue;
      end if;
      -- An unfinished task of a newer set that depends on a task of this one (it reads
      -- their results when it runs; sql/queues/flow_retention.sql). After the window's
      -- check: a dependent without a claim-index row is looked up by its end.
      if queues.history_set_has_waiting_dependents(_set.lower_bound, _set.upper_bound) then
        _kept := _kept + 1;
        continue;
      end if;
      -- A completion round or a claim lease in this set that names a task of an older set
      -- still kept (a round, and a claim lease, lives in the set of the largest task id it
      -- names): dropping it would take that task's end, or a lease of it, away, so the
      -- set waits for the older one.
      if exists (select 1 from queues.completion_round r
                  where r.task_id >= _set.lower_bound and r.task_id < _set.upper_bound
                    and lower(r.task_range) < _set.lower_bound
                    and exists (select 1 from queues.task t
                                 where t.task_id = any (r.task_ids) and t.task_id < _set.lower_bound))
         or exists (select 1 from queues.claim_lease r
                     where r.task_id >= _set.lower_bound and r.task_id < _set.upper_bound
                       and lower(r.task_range) < _set.lower_bound
                       and exists (select 1 from queues.task t
                                    where t.task_id = any (r.task_ids) and t.task_id < _set.lower_bound)) then
        _kept := _kept + 1;
        continue;
      end if;
      -- Every task completed, from the facts (one scan of the set's two partitions).
      select count(*) into _tasks from queues.task t
       where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound;
      if exists (select 1 from queues.task t
                  where t.task_id >= _set.lower_bound and t.task_id < _set.upper_bound
                    and not exists (select 1 from queues.task_completed c where c.task_id = t.task_id)
                    -- nor in a completion round (its rounds' task ids in the set, hashed)
                    and not exists (select 1 from queues.completion_round r
                                     cross join lateral unnest(r.task_ids) as x(task_id)
                                     where r.task_range && int8range(_set.lower_bound, _set.upper_bound)
                                       and r.task_id >= _set.lower_bound
                                       and x.task_id = t.task_id)) then
        _kept := _kept + 1;
        continue;
      end if;

      _name := queues.history_partition_name('task', _set.lower_bound);
      _doing := format('detach queues.%I', _name);
      begin
        -- Detaching holds ACCESS EXCLUSIVE on queues.task and the partition, so no
        -- transaction that wrote to the set or read it to complete a task is still open:
        -- check again what could have changed (a task enqueued with an id handed out
        -- before the checks, and its completion).
        perform queues.lock_history_tables(array['task', _name, 'task_default'],
                                           array['access exclusive', 'access exclusive', 'access exclusive'],
                                           _setting.lock_timeout_ms);
        execute format('alter table queues.task detach partition queues.%I', _name);
        -- The tasks claims took since the checks. A task of the set committed after them
        -- (an id handed out before, its transaction open across the checks) and claimed
        -- since is held by its claim lease with no claim-index row (the ready set,
        -- docs/design/hot-path.md): named here, it keeps the set, as does an unfinished
        -- dependent of the set claimed since.
        _claimed_since := array(select u.task_id from queues.claim_lease r
                                 cross join lateral unnest(r.task_ids) u(task_id)
                                 where r.task_lease_id > coalesce(_lease_mark, 0));
        if exists (select 1 from queues.task_pending tp
                    where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_ready_batch b
                       cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
                       where b.task_range && int8range(_set.lower_bound, _set.upper_bound)
                         and u.task_id >= _set.lower_bound and u.task_id < _set.upper_bound)
           or exists (select 1 from unnest(_claimed_since) u(task_id)
                       where u.task_id >= _set.lower_bound and u.task_id < _set.upper_bound)
           or exists (select 1 from queues.task_dependency d
                       where d.depends_on_task_id >= _set.lower_bound and d.depends_on_task_id < _set.upper_bound
                         and d.task_id >= _set.upper_bound
                         and (exists (select 1 from queues.task_pending p where p.task_id = d.task_id)
                              or d.task_id in (select u.task_id from unnest(_claimed_since) u(task_id))))
           or exists (select 1 from queues.task_completed c
                       where c.task_id >= _set.lower_bound and c.task_id < _set.upper_bound
                         and c.completed_at > _now - _setting.retention)
           or exists (select 1 from queues.completion_round r
                       where r.task_range && int8range(_set.lower_bound, _set.upper_bound)
                         and r.task_id >= _set.lower_bound
                         and r.completed_at > _now - _setting.retention) then
          -- Roll the block back, which attaches the partition again.
          raise exception 'set [%, %) changed since it was checked', _set.lower_bound, _set.upper_bound
            using errcode = 'QH001';
        end if;
        insert into queues.history_partition_dropped (lower_bound, upper_bound, tasks, last_completed_at, dropped_at)
        values (_set.lower_bound, _set.upper_bound, _tasks, _last_completed, _now);
        return jsonb_build_object('action', 'set_dropped', 'table', _name, 'lower_bound', _set.lower_bound,
                                  'upper_bound', _set.upper_bound, 'tasks', _tasks, 'kept', _kept, 'more', true);
      exception
        when sqlstate 'QH001' then
          _kept := _kept + 1;
      end;
    end loop;

    -- 5. Nothing left to change: the sets that are done are measured for the readers.
    _measured := queues.measure_history_sets(_now);
    delete from queues.history_step_skipped k where k.skipped_at < _now - interval '1 day';
    -- The flow-control facts kept per key, not per task (sql/queues/flow_retention.sql).
    perform queues.prune_flow_facts_at(_now);
  exception
    -- check_violation: a task landed in a default partition, in the range being made,
    -- since it was read above; the next step starts above it. The skip is recorded, and
    -- the run goes on (a later try may find its moment) until 5 steps have been skipped
    -- within a minute.
    when lock_not_available or deadlock_detected or check_violation then
      insert into queues.history_step_skipped (step, reason) values (coalesce(_doing, 'a step'), sqlerrm);
      return jsonb_build_object('action', 'skipped', 'step', _doing, 'reason', sqlerrm, 'kept', _kept,
                                'more', (select count(*) from queues.history_step_skipped k
                                          where k.skipped_at > clock_timestamp() - interval '1 minute') < 5);
  end;
  return jsonb_build_object('action', 'none', 'kept', _kept, 'measured', _measured, 'more', false);
end;
$$;

-- Partition maintenance at _now, every step of queues.maintain_history_step_at in one
-- transaction, until none is left or one is skipped: its locks are held until that
-- transaction ends, so this is for tests and for running it by hand; the schedule runs
-- each step in a transaction of its own (queues.maintain_history_step). Returns
--   {"created": [[lo, hi], ...], "dropped": [[lo, hi], ...], "skipped": [{...}], "kept": n}
create or replace function queues.maintain_history_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _created jsonb := '[]';
  _dropped jsonb := '[]';
  _skipped jsonb := '[]';
  _adopted jsonb := '[]';
  _kept integer := 0;
  _step jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  -- Each step changes the catalog or ends the run (skips end it after 5 within a minute);
  -- the bound only guards against a bug.
  for _i in 1 .. 100000 loop
    _step := queues.maintain_history_step_at(_now);
    case _step ->> 'action'
      when 'set_created' then
        _created := _created || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_dropped' then
        _dropped := _dropped || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'set_adopted' then
        _adopted := _adopted || jsonb_build_array(jsonb_build_array(_step -> 'lower_bound', _step -> 'upper_bound'));
      when 'skipped', 'busy' then
        _skipped := _skipped || jsonb_build_array(_step);
      else
        null;
    end case;
    _kept := coalesce((_step ->> 'kept')::integer, _kept);
    exit when not (_step ->> 'more')::boolean;
  end loop;
  return jsonb_build_object('created', _created, 'dropped', _dropped, 'adopted', _adopted, 'skipped', _skipped,
                            'kept', _kept);
end;
$$;

-- A db_function step: maintain_history_at(now()), every step in the caller's transaction
-- (for a one-off run; the schedule runs queues.maintain_history_step).
create or replace function queues.maintain_history(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_at(now()))
$$;

-- The schedule's step: one step of maintenance (maintain_history_step_at(now())), its
-- report as the payload of a success envelope. The schedule's payload asks the worker to
-- call it again while the report says "more" ("repeat": true, see the worker's
-- db_function processor), each call a transaction of its own, so that no step's lock is
-- held while another step runs.
create or replace function queues.maintain_history_step(_payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', queues.maintain_history_step_at(now()))
$$;

-- The worker runs maintenance as the db_function task of its schedule. Everything else
-- here is owner only. Granted here, beside the functions, so that a migration including
-- sql/queues/privileges.sql before this file does not name a function that does not
-- exist yet.
revoke execute on function queues.maintain_history_at(timestamptz), queues.maintain_history_step_at(timestamptz)
  from public;
grant execute on function queues.maintain_history(jsonb), queues.maintain_history_step(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('queues.maintain_history(jsonb)');
select internal.register_runnable_function('queues.maintain_history_step(jsonb)');
--! EndIncluded queues/partitions_maintain.sql
--! Included admin/history.sql
-- History and retention, for operators (the dashboard's History page, GET /api/history,
-- the queue_history_* gauges of /metrics): the settings and the maintenance schedule,
-- every partition set of the queue's history with its state and sizes, the oldest
-- retained task, the next set retention will drop (queues.history_status_at,
-- sql/queues/partitions.sql) and the recent drops.
--
-- Cost: catalog reads, and per partition set a range count of its pending tasks in
-- queues.task_pending (the claim index: its cost follows pending work, never history) and
-- a row of queues.history_set_measured for a set that is done (every task completed, its
-- range below the last task id: maintenance measured it), or else its sizes (each of its
-- partitions opened) and three primary-key reads (its oldest and newest task) planned for
-- its partition alone. Only the sets still filling (normally the current one and those
-- ahead) are opened on each read. No scan of history.

-- The status at _now: queues.history_status_at(_now) with these keys added or extended:
--   now                  _now
--   lock_timeout_ms      how long a maintenance step keeps asking for its locks
--   partitions[]         each set, lowest first, the default partition last:
--     lower_bound, upper_bound, name, is_default, estimated_tasks (planner), total_bytes,
--     table_bytes, index_bytes  tables with TOAST / indexes, summed over every history table
--     tasks                     task ids handed out in the set, from its oldest to its
--                               newest task (ids only grow and no task is ever deleted
--                               alone, so this is the number of tasks unless an enqueue
--                               rolled back); the default partition: its exact count
--     first_task_id, first_enqueued_at, last_task_id   the set's oldest and newest task
--     pending_tasks             tasks in it not completed (queues.task_pending)
--     measured_at               when maintenance measured the set's bytes and tasks
--                               (queues.history_set_measured: a set below the last task
--                               id with no pending task); null: measured for this answer
--     created_at                when maintenance created it (queues.history_partition_created);
--                               null for sets made before creations were recorded
--     state                     ahead (above the last task id), current (holds the last
--                               task id), next_drop (the set next_drop names), retained
--                               (below the last task id, kept), default
--   totals               sets (not counting the default partition), tasks, table_bytes,
--                        index_bytes, total_bytes
--   recent_drops[]       the 10 newest rows of queues.history_partition_dropped
--   maintenance          the queue_history_maintenance schedule (cron, enabled, next and
--                        last fire) and its last run (task, state, and the run's report
--                        {created, dropped, skipped, kept} once it completed); null
--                        without the schedule
-- Owner only (it takes the clock); the API calls admin.history_status().
create or replace function admin.history_status_at(_now timestamptz)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _status jsonb;
  _last_id bigint;
  _next_lower bigint;
  _default record;
  _sets jsonb;
  _set record;
  _first record;
  _probes jsonb := '{}';
  _parts jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  _status := queues.history_summary_at(_now);
  _last_id := (_status ->> 'last_task_id')::bigint;
  _next_lower := (_status -> 'next_drop' ->> 'lower_bound')::bigint;

  -- The default partition, read by itself (normally empty).
  select (select t.task_id from queues.task_default t order by t.task_id limit 1) as first_task_id,
         (select t.enqueued_at from queues.task_default t order by t.task_id limit 1) as first_enqueued_at,
         (select max(t.task_id) from queues.task_default t) as last_task_id,
         (select count(*) from queues.task_default t) as tasks,
         (select count(*) from queues.task_default t
           where not exists (select 1 from queues.task_end_of(t.task_id) c)) as pending_tasks
    into _default;

  -- Every set once, with its pending count (a range count of queues.task_pending, and its
  -- lease-held tasks) and its
  -- row of queues.history_set_measured if it is done (its range below the last task id,
  -- no pending task) and maintenance measured it.
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', p.lower_bound, 'upper_bound', p.upper_bound, 'partition_name', p.partition_name,
           'estimated_tasks', p.estimated_tasks, 'is_default', p.is_default, 'created_at', c.created_at,
           'pending', pe.pending, 'measured', m.lower_bound is not null, 'first_task_id', m.first_task_id,
           'first_enqueued_at', m.first_enqueued_at, 'last_task_id', m.last_task_id,
           'table_bytes', m.table_bytes, 'index_bytes', m.index_bytes, 'measured_at', m.measured_at)), '[]')
    into _sets
    from queues.history_sets() p
    left join queues.history_partition_created c on c.lower_bound = p.lower_bound and not p.is_default
   cross join lateral (select (select count(*) from queues.task_pending tp
                                where not p.is_default and tp.task_id >= p.lower_bound and tp.task_id < p.upper_bound)
                              -- and the lease-held tasks (no claim-index row, sql/queues/lease_held.sql)
                              + (select count(*) from queues.lease_held_tasks h
                                  where not p.is_default and h.task_id >= p.lower_bound and h.task_id < p.upper_bound)
                              -- and the tasks in ready batches (sql/queues/ready_batch.sql)
                              + case when p.is_default then 0
                                     else queues.batched_count_between(p.lower_bound, p.upper_bound) end
                                as pending) pe
    left join queues.history_set_measured m
      on m.lower_bound = p.lower_bound and m.upper_bound = p.upper_bound
     and not p.is_default and p.upper_bound <= _last_id and pe.pending = 0;

  -- The oldest and newest task of each set that is not measured and may hold one (not
  -- above the last task id), by primary key, each read given its set's bounds as values
  -- so that it is planned for that set's partition only.
  for _set in
    select x.lower_bound, x.upper_bound
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, is_default boolean, measured boolean)
     where not x.is_default and not x.measured and x.lower_bound <= _last_id
  loop
    execute 'select (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_task_id,
                    (select t.enqueued_at from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id limit 1) as first_enqueued_at,
                    (select t.task_id from queues.task t where t.task_id >= $1 and t.task_id < $2
                      order by t.task_id desc limit 1) as last_task_id'
      into _first using _set.lower_bound, _set.upper_bound;
    _probes := _probes || jsonb_build_object(_set.lower_bound::text, to_jsonb(_first));
  end loop;

  -- The answer: sizes from the measurement, or from one queues.history_set_bytes call for
  -- every set that is not measured.
  with s as (
    select x.*, coalesce(x.first_task_id, (_probes -> x.lower_bound::text ->> 'first_task_id')::bigint) as first_id,
           coalesce(x.first_enqueued_at, (_probes -> x.lower_bound::text ->> 'first_enqueued_at')::timestamptz) as first_at,
           coalesce(x.last_task_id, (_probes -> x.lower_bound::text ->> 'last_task_id')::bigint) as last_id
      from jsonb_to_recordset(_sets) x(lower_bound bigint, upper_bound bigint, partition_name text,
                                       estimated_tasks bigint, is_default boolean, created_at timestamptz,
                                       pending bigint, measured boolean, first_task_id bigint,
                                       first_enqueued_at timestamptz, last_task_id bigint, table_bytes bigint,
                                       index_bytes bigint, measured_at timestamptz)
  ),
  sized as (
    select * from queues.history_set_bytes(array(select s.lower_bound from s where not s.measured))
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'lower_bound', s.lower_bound, 'upper_bound', s.upper_bound, 'name', s.partition_name,
           'is_default', s.is_default, 'estimated_tasks', s.estimated_tasks,
           'total_bytes', coalesce(s.table_bytes, b.table_bytes) + coalesce(s.index_bytes, b.index_bytes),
           'table_bytes', coalesce(s.table_bytes, b.table_bytes),
           'index_bytes', coalesce(s.index_bytes, b.index_bytes),
           'tasks', case when s.is_default then _default.tasks else coalesce(s.last_id - s.first_id + 1, 0) end,
           'first_task_id', case when s.is_default then _default.first_task_id else s.first_id end,
           'first_enqueued_at', case when s.is_default then _default.first_enqueued_at else s.first_at end,
           'last_task_id', case when s.is_default then _default.last_task_id else s.last_id end,
           'pending_tasks', case when s.is_default then _default.pending_tasks else s.pending end,
           'measured_at', s.measured_at,
           'created_at', s.created_at,
           'state', case when s.is_default then 'default'
                         when s.lower_bound > _last_id then 'ahead'
                         when s.upper_bound > _last_id then 'current'
                         when s.lower_bound = _next_lower then 'next_drop'
                         else 'retained' end)
           order by s.is_default, s.lower_bound), '[]')
    into _parts
    from s
    left join sized b on not s.measured and b.lower_bound is not distinct from s.lower_bound;

  return _status || jsonb_build_object(
    'now', _now,
    'lock_timeout_ms', (select s.lock_timeout_ms from queues.history_setting s),
    'partitions', _parts,
    'totals', (select jsonb_build_object(
                 'sets', count(*) filter (where not (x ->> 'is_default')::boolean),
                 'tasks', coalesce(sum((x ->> 'tasks')::bigint), 0),
                 'table_bytes', coalesce(sum((x ->> 'table_bytes')::bigint), 0),
                 'index_bytes', coalesce(sum((x ->> 'index_bytes')::bigint), 0),
                 'total_bytes', coalesce(sum((x ->> 'total_bytes')::bigint), 0))
                 from jsonb_array_elements(_parts) x),
    'recent_drops', coalesce((
      select jsonb_agg(jsonb_build_object(
               'lower_bound', d.lower_bound, 'upper_bound', d.upper_bound, 'tasks', d.tasks,
               'last_completed_at', d.last_completed_at, 'dropped_at', d.dropped_at)
             order by d.history_partition_dropped_id desc)
        from (select * from queues.history_partition_dropped x
               order by x.history_partition_dropped_id desc limit 10) d), '[]'),
    'maintenance', (
      select jsonb_build_object(
               'schedule', s.name, 'cron', s.cron, 'enabled', s.enabled,
               'next_fire_at', s.next_fire_at, 'last_fire_at', s.last_fire_at,
               'last_run', (
                 select jsonb_build_object(
                          'fire_at', r.fire_at, 'outcome', r.outcome, 'task_id', r.task_id,
                          'task_state', coalesce(
                            (select c.outcome from queues.task_end_of(r.task_id) c limit 1),
                            (select admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)
                               from queues.task_pending_or_held_of(r.task_id) p limit 1)),
                          'report', (select x.result -> 'payload' from queues.task_result x
                                      where x.task_id = r.task_id order by x.task_lease_id desc limit 1))
                   from schedules.schedule_run r
                  where r.schedule_id = s.schedule_id
                  order by r.fire_at desc limit 1))
        from schedules.list_schedules() s
       where s.name = 'queue_history_maintenance'));
end;
$$;

create or replace function admin.history_status()
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.history_status_at(now())
$$;

-- Granted here, beside the function (see sql/queues/partitions_maintain.sql for why); the clock
-- variant stays owner only.
revoke execute on function admin.history_status_at(timestamptz) from public;
grant execute on function admin.history_status() to :DATABASE_API;
--! EndIncluded admin/history.sql
--! Included admin/tasks.sql
-- Reading tasks for the operations API: a keyset-paginated list, one task with its facts,
-- and counts by type and state. The *_at functions take the clock (owner only, for
-- tests); the API calls the wrappers, which pass now().

-- Tasks newest first (by task_id), _limit per page (default 50, at most 500), older than
-- _before_task_id (the last id of the previous page: keyset pagination, so a page costs
-- the same at any depth). Filters, each optional and combined with AND:
--   _task_type            a registered type
--   _state                one of admin.task_states(), or a status of the role-based
--                         specification (its worker_tasks table; public.worker_tasks):
--                         pending    scheduled, ready or retrying (no live lease)
--                         claimed    running, its run not seen to start (no start mark:
--                                    a heartbeat marks a run still going), its worker
--                                    not silent
--                         completed  succeeded
--                         stale      held by a lease that expired uncompleted, or whose
--                                    worker is silent for longer than three of its
--                                    heartbeat intervals (public.recover_stale_tasks)
--                         Rows carry the queue's own state.
--   _worker_id            tasks leased at least once by this worker
--   _resource_key         tasks with this resource key
--   _enqueued_from/_to    enqueued_at in [from, to)
--   _payload_path/_value  payload #> path = value (a JSON value)
-- Which table drives the walk: pending states walk queues.task_pending_or_held (the claim
-- index and the lease-held tasks, sql/queues/lease_held.sql: bounded by pending work); unsuccessful outcomes walk queues.task_completed by key (failed and
-- abandoned ones by task_completed_unsuccessful_task_idx, which holds only those); a
-- state that includes succeeded walks queues.task with each task's end
-- (queues.task_end_of: successes are mostly in completion rounds); a resource key walks
-- task_resource_key_idx; otherwise queues.task by its primary key, newest first. Every
-- walk stops after _limit matches, so its cost is the rows it has to pass over to find
-- them: a filter that matches only old or rare tasks (a payload value, a worker gone for
-- a week, a time range far back) reads the newer tasks in between. The statement is
-- built from constant fragments; every value is a parameter.
-- History is partitioned by task id (sql/queues/partitions.sql), so the newest tasks sit
-- in the newest partition set. Every walk but the pending states' runs the statement once
-- per range of queues.history_walk (a set, or the two newest), newest first, until the
-- page is full: each run has the range's bounds as values ($12, $13), so the planner reads
-- the range's partitions of task, task_completed and task_lease instead of planning,
-- opening and locking all of them and merging every set for the newest 50. Null bounds
-- (the pending states; a task in the default partition) read every partition at once.
create or replace function admin.list_tasks_at(
  _now            timestamptz,
  _task_type      text,
  _state          text,
  _limit          integer,
  _before_task_id bigint,
  _worker_id      text,
  _resource_key   text,
  _enqueued_from  timestamptz,
  _enqueued_to    timestamptz,
  _payload_path   text[],
  _payload_value  jsonb
) returns table (
  task_id       bigint,
  task_type     text,
  state         text,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  lease_count   integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  available_at  timestamptz,
  completed_at  timestamptz
)
  language plpgsql stable
  security definer
  -- Every read is an index walk or a probe by key: a task's end is probed in each shape
  -- (queues.task_end_of), and a set's small partition, scanned, would read every row of
  -- it once per task of the page.
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _filters text := '';
  _sql text;
  _worker_key integer;
  _lower bigint;
  _upper bigint;
  _found bigint;
  _remaining integer;
  -- The states _state stands for, and the branch that walks them.
  _states text[] := case _state
                      when 'pending' then array['scheduled', 'ready', 'retrying']
                      when 'claimed' then array['running']
                      when 'completed' then array['succeeded']
                      when 'stale' then array['ready', 'running']
                      else array[_state] end;
  _pending_walk boolean := _states <@ array['waiting', 'scheduled', 'ready', 'running', 'retrying'];
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  if _state is not null and not (_state = any (admin.task_states() || array['pending', 'claimed', 'completed', 'stale'])) then
    raise exception 'unknown state %; expected one of %, or pending, claimed, completed or stale', quote_literal(left(_state, 100)),
      array_to_string(admin.task_states(), ', ') using errcode = '22023';
  end if;
  if _before_task_id is not null and _before_task_id < 1 then
    raise exception 'before_task_id must be a positive task id, got %', _before_task_id
      using errcode = '22023';
  end if;
  if _worker_id is not null and length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _resource_key is not null and length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _enqueued_from is not null and _enqueued_to is not null and _enqueued_from >= _enqueued_to then
    raise exception 'enqueued_from (%) must be before enqueued_to (%)', _enqueued_from, _enqueued_to
      using errcode = '22023';
  end if;
  if (_payload_path is null) <> (_payload_value is null) then
    raise exception 'payload_path and payload_value go together: give both or neither' using errcode = '22023';
  end if;
  if _payload_path is not null and (cardinality(_payload_path) not between 1 and 10
      or exists (select 1 from unnest(_payload_path) e where e is null or length(e) not between 1 and 100)) then
    raise exception 'payload_path must have 1 to 10 keys of 1 to 100 characters each' using errcode = '22023';
  end if;

  if _task_type is not null then _filters := _filters || ' and t.task_type = $2'; end if;
  if _worker_id is not null then
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
    _filters := _filters || ' and exists (select 1 from queues.task_leases_of(t.task_id) l
                                            where (l.worker_key = $14 or l.worker_id = $6)
                                              and ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))';
  end if;
  if _resource_key is not null then _filters := _filters || ' and t.resource_key = $7'; end if;
  if _enqueued_from is not null then _filters := _filters || ' and t.enqueued_at >= $8'; end if;
  if _enqueued_to is not null then _filters := _filters || ' and t.enqueued_at < $9'; end if;
  if _payload_path is not null then _filters := _filters || ' and t.payload #> $10 = $11'; end if;

  if _state in ('stale', 'claimed') then
    -- stale: a lease is held (current_lease_id) and either expired or its worker is
    -- silent. claimed: a live lease of a worker that is not silent, whose run has not
    -- started (public.worker_tasks says the same).
    _filters := _filters || case _state when 'stale' then ' and p.current_lease_id is not null and (p.available_at <= $1 or '
                                        else ' and not exists (select 1 from queues.task_lease_started st
                                                                where st.task_id = p.task_id and st.task_lease_id = p.current_lease_id)
                                               and not (' end
                         || 'exists (select 1 from queues.task_lease_at(p.task_id, p.current_lease_id) l
                                       left join queues.worker_name n on n.worker_key = l.worker_key
                                       join queues.worker w on w.worker_id = coalesce(l.worker_id, n.worker_id)
                                      where w.stopped_at is null
                                        and w.last_seen_at < $1 - queues.worker_silence_bound(w.heartbeat_interval_ms)))';
  end if;
  if _pending_walk then
    _sql := 'select p.task_id, p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1),
                    p.priority, t.resource_key, t.max_attempts, p.lease_count,
                    t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
               -- the claim index and the lease-held tasks (sql/queues/lease_held.sql)
               from queues.task_pending_or_held p
              -- lateral + limit 1: one primary-key probe per pending task passed over
              cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
              where admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1) = any ($15)
                and ($4::bigint is null or p.task_id < $4)' || _filters || '
              order by p.task_id desc
              limit $5';
  elsif 'succeeded' = any (_states) then
    -- Successes are mostly in completion rounds, which no index lists per task in task id
    -- order: walk queues.task by its primary key, newest first, with each task's end
    -- (queues.task_end_of: a probe of each shape). Most ended tasks succeeded, so the walk
    -- passes over few others.
    _sql := 'select t.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
                    (select count(*)::integer from queues.task_leases_of(t.task_id) l
                        where ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13)),
                    t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
               from queues.task t
              cross join lateral (select e.outcome, e.completed_at from queues.task_end_of(t.task_id) e
                                    where ($12::bigint is null or e.task_id >= $12) and ($13::bigint is null or e.task_id < $13)
                                    limit 1) c
              where c.outcome = any ($15)
                and ($4::bigint is null or t.task_id < $4)
                and ($12::bigint is null or t.task_id >= $12) and ($13::bigint is null or t.task_id < $13)' || _filters || '
              order by t.task_id desc
              limit $5';
  elsif _state is not null then
    _sql := 'select c.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
                    (select count(*)::integer from queues.task_leases_of(c.task_id) l
                        where ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13)),
                    t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
               from queues.task_completed c
              cross join lateral (select * from queues.task x where x.task_id = c.task_id
                                     and ($12::bigint is null or x.task_id >= $12) and ($13::bigint is null or x.task_id < $13)
                                   limit 1) t
              where c.outcome = any ($15)
                and ($4::bigint is null or c.task_id < $4)
                and ($12::bigint is null or c.task_id >= $12) and ($13::bigint is null or c.task_id < $13)' || _filters || '
              order by c.task_id desc
              limit $5';
  else
    _sql := 'select t.task_id, t.task_type,
                    coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1)),
                    t.priority, t.resource_key, t.max_attempts,
                    coalesce(p.lease_count,
                             (select count(*)::integer from queues.task_leases_of(t.task_id) l
                        where ($12::bigint is null or l.task_id >= $12) and ($13::bigint is null or l.task_id < $13))),
                    t.enqueued_at, t.scheduled_at, p.available_at, c.completed_at
               from queues.task t
               -- its claim-index row or ready batch, else the claim lease that holds it (a lease-held task:
               -- queues.lease_held_of written out, its probe of the end given the range''s
               -- bounds, so that it reads the range''s partitions only)
               left join lateral (select x.available_at, x.current_lease_id, x.lease_count
                                    from queues.task_pending x where x.task_id = t.task_id
                                  union all
                                  -- (a task in a ready batch: sql/queues/ready_batch.sql)
                                  select b.scheduled_at, null::bigint, 0
                                    from queues.batched_of(t.task_id) b
                                  union all
                                  (select h.expires_at, h.task_lease_id, 1
                                     from queues.claim_lease h
                                    where h.task_range @> t.task_id and h.task_id >= t.task_id
                                      and t.task_id = any (h.task_ids)
                                      and not exists (select 1 from queues.task_end_of(t.task_id) e
                                                       where ($12::bigint is null or e.task_id >= $12)
                                                         and ($13::bigint is null or e.task_id < $13))
                                    order by h.task_lease_id desc
                                    limit 1)
                                  limit 1) p on true
               left join lateral (select e.outcome, e.completed_at from queues.task_end_of(t.task_id) e
                                   where ($12::bigint is null or e.task_id >= $12) and ($13::bigint is null or e.task_id < $13)
                                   limit 1) c on true
              where ($4::bigint is null or t.task_id < $4)
                and ($12::bigint is null or t.task_id >= $12) and ($13::bigint is null or t.task_id < $13)' || _filters || '
              order by t.task_id desc
              limit $5';
  end if;

  if _pending_walk then
    return query execute _sql
      using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, null::bigint, null::bigint, _worker_key,
            _states;
    return;
  end if;
  _remaining := _page;
  for _lower, _upper in
    select w.lower_bound, w.upper_bound from queues.history_walk(_before_task_id) w
     order by w.lower_bound desc nulls first
  loop
    return query execute _sql
      using _now, _task_type, _state, _before_task_id, _remaining, _worker_id, _resource_key,
            _enqueued_from, _enqueued_to, _payload_path, _payload_value, _lower, _upper, _worker_key, _states;
    get diagnostics _found = row_count;
    _remaining := _remaining - _found;
    exit when _remaining <= 0;
  end loop;
end;
$$;

create or replace function admin.list_tasks(
  _task_type      text default null,
  _state          text default null,
  _limit          integer default null,
  _before_task_id bigint default null,
  _worker_id      text default null,
  _resource_key   text default null,
  _enqueued_from  timestamptz default null,
  _enqueued_to    timestamptz default null,
  _payload_path   text[] default null,
  _payload_value  jsonb default null
) returns table (
  task_id       bigint,
  task_type     text,
  state         text,
  priority      integer,
  resource_key  text,
  max_attempts  integer,
  lease_count   integer,
  enqueued_at   timestamptz,
  scheduled_at  timestamptz,
  available_at  timestamptz,
  completed_at  timestamptz
)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_tasks_at(now(), _task_type, _state, _limit, _before_task_id, _worker_id,
                                    _resource_key, _enqueued_from, _enqueued_to, _payload_path, _payload_value)
$$;

-- One task with everything recorded about it, as a JSON object:
--   {task: {..., state, type_timeout_ms}, leases: [...], errors: [...], completion: {...} | null,
--    failed_attempts: [...], redriven_to: id | null, redriven_from: id | null,
--    progress: {done, total, note, reported_at, task_lease_id, reports} | null,
--    dependencies: [{task_id, task_type, outcome, completed_at}],
--    dependents: [{task_id, task_type, state}]}  (sql/queues/dependencies.sql)
-- task.timeout_ms is the task's own run timeout (NULL: none), type_timeout_ms its type's
-- (NULL: none); the task's own is the one in force (sql/queues/timeouts.sql).
-- Raises 23503 when there is no such task.
create or replace function admin.get_task_at(_now timestamptz, _task_id bigint)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;

  select jsonb_build_object(
           'task', to_jsonb(t) || jsonb_build_object(
             'state', coalesce(c.outcome,
                               admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)),
             'available_at', p.available_at,
             'current_lease_id', p.current_lease_id,
             'type_timeout_ms', (select x.timeout_ms from queues.task_type_timeouts() x
                                  where x.task_type = t.task_type)),
           'leases', coalesce((
             select jsonb_agg(jsonb_build_object(
                      'task_lease_id', l.task_lease_id, 'worker_id', l.worker_id,
                      'leased_at', l.leased_at, 'expires_at', l.expires_at,
                      'released_at', l.released_at, 'revoked_at', l.revoked_at, 'extensions', l.extensions,
                      'live', coalesce(l.task_lease_id = p.current_lease_id and p.available_at > _now, false))
                      order by l.task_lease_id)
               from queues.task_lease_effective_of(t.task_id) l), '[]'::jsonb),
           'errors', coalesce((
             select jsonb_agg(to_jsonb(e) - 'task_id' order by e.error_id)
               from queues.error e where e.task_id = t.task_id), '[]'::jsonb),
           -- task_type is the task's own, given above.
           'completion', case when c.task_id is not null then to_jsonb(c) - 'task_id' - 'task_type' end)
    into _result
    from queues.task t
    -- its claim-index row, or the row its claim lease gives a lease-held task
    left join lateral (select x.* from queues.task_pending_or_held_of(t.task_id) x limit 1) p on true
    left join lateral (select e.* from queues.task_end_of(t.task_id) e limit 1) c on true
   where t.task_id = _task_id;

  if _result is null then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  return _result || admin.task_retry_facts(_task_id) || admin.task_dashboard_facts(_task_id)
         || queues.task_progress_facts(_task_id) || queues.task_dependency_facts(_task_id, _now);
end;
$$;

create or replace function admin.get_task(_task_id bigint)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.get_task_at(now(), _task_id)
$$;

-- Counts by task type and state: pending states over queues.task_pending_or_held_counts
-- (the claim index, and the lease-held tasks per claim lease and type: bounded by pending
-- work), completion outcomes over the last _window_seconds only (default 86400;
-- read through the completed_at indexes of task_completed and completion_round), so the
-- cost never follows history.
-- Every registered type appears, with zero rows left out.
create or replace function admin.task_counts_at(_now timestamptz, _window_seconds integer)
  returns table (task_type text, state text, count bigint)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 86400);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 2592000 then
    raise exception 'window_seconds must be between 60 and 2592000 (30 days), got %', _window
      using errcode = '22023';
  end if;
  return query
  select p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state,
         sum(p.tasks)
    -- the claim index and the lease-held tasks, counted per claim lease
    from queues.task_pending_or_held_counts p
   group by 1, 2
  union all
  select c.task_type, c.outcome, count(*)
    from admin.completions_between(_now - make_interval(secs => _window), _now) c
   group by 1, 2
   order by 1, 2;
end;
$$;

create or replace function admin.task_counts(_window_seconds integer default null)
  returns table (task_type text, state text, count bigint)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.task_counts_at(now(), _window_seconds)
$$;

-- The registered task types (roles), for filters and forms.
create or replace function admin.list_task_types()
  returns table (task_type text, description text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_type, t.description from queues.task_type t order by t.task_type
$$;

-- Facts of one task the dashboard adds to admin.get_task's answer:
--   {results: [{task_lease_id, result, recorded_at}], cancellation: {reason, cancelled_at} | null,
--    run_now_at: timestamptz | null, type_paused: boolean, process: {process, root_id} | null,
--    heartbeats: [{task_lease_id, extended_at, expires_at}]}
-- Results come from queues.task_result when that table exists (read through the catalog,
-- so this works with and without it).
create or replace function admin.task_dashboard_facts(_task_id bigint)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _results jsonb := '[]';
begin
  if to_regclass('queues.task_result') is not null then
    execute 'select coalesce(jsonb_agg(jsonb_build_object(''task_lease_id'', r.task_lease_id, ''result'', r.result,
                                                         ''recorded_at'', r.recorded_at) order by r.task_lease_id), ''[]'')
               from queues.task_result r where r.task_id = $1'
      into _results using _task_id;
  end if;
  return jsonb_build_object(
    'results', _results,
    'cancellation', (select jsonb_build_object('reason', c.reason, 'cancelled_at', c.cancelled_at)
                       from queues.task_cancelled c where c.task_id = _task_id),
    'run_now_at', (select r.requested_at from queues.task_run_now r where r.task_id = _task_id),
    'type_paused', (select t.task_type = any (queues.paused_task_types()) from queues.task t where t.task_id = _task_id),
    -- The business process the task works for: its payload names the root (X_task_id).
    'process', (select jsonb_build_object('process', p.process, 'root_id', (t.payload ->> (p.process || '_task_id'))::bigint)
                  from queues.task t cross join admin.processes() p
                 where t.task_id = _task_id and t.payload ->> (p.process || '_task_id') ~ '^[0-9]{1,18}$'
                 limit 1),
    'heartbeats', coalesce((
      select jsonb_agg(jsonb_build_object('task_lease_id', x.task_lease_id, 'extended_at', x.extended_at,
                                          'expires_at', x.expires_at) order by x.task_lease_extension_id)
        from queues.task_leases_of(_task_id) l
        join queues.task_lease_extension x on x.task_id = l.task_id and x.task_lease_id = l.task_lease_id), '[]'));
end;
$$;
--! EndIncluded admin/tasks.sql
