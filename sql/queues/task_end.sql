-- A task's end, in both of its shapes: a row of queues.task_completed (every end but a
-- plain success, and every completion written before completion rounds), or its place in
-- a queues.completion_round (a plain success: the round names the task among its
-- task_ids, with its lease and start time at the same position). Readers never read the
-- two tables for a task's end; they read one of these:
--   queues.task_end              a view: every end, one row per task (time windows read
--                                admin.completions_between, which reaches each table's
--                                completed_at index)
--   queues.task_end_of(task_id)  one task's end, an index probe of each shape: the
--                                primary key of task_completed, and the GiST index on
--                                completion_round.task_range in the partitions that can
--                                hold the task's round (task_id >= the task's: a round
--                                lives in the set of the largest task id it names)
-- started_at: when the run that ended here started, as its worker reported it (null when
-- not reported; a round keeps it as integer microseconds since the epoch, read back
-- exactly as timestamptz 'epoch' + started_us * interval '1 microsecond'). task_type: the type the completion names; null on completions written
-- before task_completed.task_type existed (read it from queues.task).

-- One task's end (none while it has not ended). Inlined into its callers (SQL, stable,
-- no SET clause, not a security definer), so that a caller's task id reaches both
-- probes; every object it names is schema-qualified. Called from definer functions with a
-- pinned search path: no grants.
create or replace function queues.task_end_of(_task_id bigint)
  returns table (task_id bigint, task_lease_id bigint, completed_at timestamptz, outcome text,
                 task_type text, started_at timestamptz)
  language sql stable
as $$
  select c.task_id, c.task_lease_id, c.completed_at, c.outcome, c.task_type, c.started_at
    from queues.task_completed c
   where c.task_id = _task_id
  union all
  select _task_id, r.task_lease_ids[x.i], r.completed_at, 'succeeded', r.task_type,
         timestamptz 'epoch' + r.started_us[x.i] * interval '1 microsecond'
    from queues.completion_round r
   cross join lateral (select array_position(r.task_ids, _task_id) as i) x
   where r.task_range @> _task_id
     and r.task_id >= _task_id
     and _task_id = any (r.task_ids)
$$;

-- Every task's end, one row per task that ended: task_completed's rows and each round's
-- tasks (unnested). For a task's end use queues.task_end_of (a probe); for a time window,
-- admin.completions_between.
create or replace view queues.task_end as
select c.task_id, c.task_lease_id, c.completed_at, c.outcome, c.task_type, c.started_at
  from queues.task_completed c
union all
select u.task_id, u.task_lease_id, r.completed_at, 'succeeded', r.task_type,
       timestamptz 'epoch' + u.started_us * interval '1 microsecond'
  from queues.completion_round r
 cross join lateral unnest(r.task_ids, r.task_lease_ids, r.started_us) as u(task_id, task_lease_id, started_us);
comment on view queues.task_end is
  'Every task''s end, one row per ended task: queues.task_completed and the tasks of each queues.completion_round (succeeded). A task''s own: queues.task_end_of(task_id).';

revoke execute on function queues.task_end_of(bigint) from public;
