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
-- scheduled time as the claim index gives it (a run-now request counts). A task in a ready
-- batch: ready, never leased, batched true (a walk that filters on not batched reads no
-- batch: admin.list_tasks_at walks the batches one at a time).
create or replace view queues.task_pending_or_held as
select p.task_id, p.task_type, p.priority, p.scheduled_at, p.resource_key, p.available_at, p.current_lease_id,
       p.lease_count, p.released_count, p.max_attempts, p.failed_attempts, p.interrupted_count,
       p.uncounted_count, p.suspect_lease, p.group_key, false as lease_held, false as batched
  from queues.task_pending p
union all
select h.task_id, t.task_type, t.priority, least(t.scheduled_at, rn.requested_at), t.resource_key, h.expires_at,
       h.task_lease_id, 1, 0, t.max_attempts, 0, 0, 0, h.suspect, t.group_key, true, false
  from queues.lease_held_tasks h
 cross join lateral (select x.* from queues.task x where x.task_id = h.task_id limit 1) t
  left join queues.task_run_now rn on rn.task_id = h.task_id
union all
-- A task in a ready batch (sql/queues/ready_batch.sql): ready, never leased.
select b.task_id, b.task_type, b.priority, b.scheduled_at, null::text, b.scheduled_at, null::bigint,
       0, 0, b.max_attempts, 0, 0, 0, false, null::text, false, true
  from queues.task_batched b;
comment on view queues.task_pending_or_held is
  'Every task not ended, in queues.task_pending''s shape: the claim index''s rows, each lease-held task (queues.lease_held_tasks) leased by its claim lease (lease_held), and each task in a ready batch (queues.task_batched) as its row would be (batched; a reader that filters on not batched reads no batch). A task''s own: queues.task_pending_or_held_of(task_id). See sql/queues/lease_held.sql.';

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
