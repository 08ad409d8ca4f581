-- Task dependencies (fan-in). A task enqueued with depends_on (queues.enqueue's
-- _depends_on, a "depends_on" field of queues.enqueue_many's elements) waits until every
-- task it names has ended:
--
--   every dependency succeeded            the task becomes ready (it runs at its scheduled time)
--   a dependency failed, was cancelled,   the task is completed 'failed' with an error naming
--   abandoned or validation_failed        that dependency and its outcome; its own dependents
--                                         fail in turn
--
-- Dependencies must be tasks that exist when the enqueue runs (23503 otherwise, nothing
-- written), and not the task itself nor a task of the same call (22023): every edge points
-- from a new task to an older one, so no cycle can be formed. A dependency that has already
-- ended counts at once: succeeded is done; any other outcome fails the new task in its
-- enqueue (the enqueue answers its id; the task reads 'failed' with the error).
--
-- Facts and structures: queues.task_dependency holds the edges (append-only, written with
-- the dependent; a history table partitioned by the dependent's id, so an edge is kept
-- while its dependent is, and leaves with the dependent's set). A waiting task's claim-index row has scheduled_at and available_at
-- 'infinity' and no lease: the claim never takes it (scheduled_at <= now fails in the
-- ready index, past the ready rows of its priority), nothing in the claim changes, and
-- admin.pending_state calls it 'waiting'. It can be cancelled like any pending task.
--
-- Release, without polling: the row-level triggers release_dependents on
-- queues.task_completed (every end but a plain success: a failure, a cancel, abandonment
-- in the claim or an interruption, replacement of a unique task; one task per row) and on
-- queues.completion_round (the plain successes, many tasks to a row, set-based) pass the
-- ended tasks and their outcomes to queues.release_dependents, which readies or fails the
-- dependents whose dependencies have all ended. While no task waits (no claim-index row at
-- 'infinity'), an end pays one probe of an empty partial index and nothing more; while
-- some wait, an end whose tasks have no dependents pays one scan of the dependency index
-- (of each partition above its oldest task); a statement that writes no end fires nothing.
--
-- Races. An enqueue locks its dependencies' claim-index rows FOR KEY SHARE (in task id
-- order) before it reads whether they ended, in a later statement: every way a task ends
-- locks that row FOR UPDATE or deletes it in the transaction that writes its completion,
-- so the two take turns. If the ending commits first, the enqueue then sees its
-- completion; if the enqueue does, the ending's trigger (whose statements take their
-- snapshots after the row lock was granted) sees the new edge. Two dependencies of one
-- task ending at once take turns on the dependent's row (locked FOR NO KEY UPDATE, which
-- an enqueue's KEY SHARE does not conflict with), and the second reads the first's
-- completion. A claim skips a dependency row an enqueue holds until that enqueue's
-- transaction ends, as it skips any locked row; a heartbeat does not wait for it. An
-- enqueue in a long transaction holds up its dependencies' completions until it commits.

-- Records the dependencies of tasks just inserted in this transaction, and decides for each
-- whether it waits, is ready (no change) or fails at once. Parallel arrays, one element
-- per edge: the dependent, the dependency and a label that prefixes the dependent's
-- errors ('' for a single enqueue, 'tasks[i]: ' for a batch). _new_task_ids: every task
-- the calling enqueue inserted (a dependency on one of them is refused). Raises, before
-- anything of its own is written (the caller's inserts roll back with it): a null
-- dependency (22004), the task itself or a task of the same call (22023), more than 100
-- dependencies of one task (54000), a task that does not exist (23503).
-- No grants: called by the enqueue functions.
create or replace function queues.add_task_dependencies(
  _task_ids     bigint[],
  _depends_on   bigint[],
  _labels       text[],
  _new_task_ids bigint[]
) returns void
  language plpgsql volatile
  -- Every read is by key: planned once per connection, never as a scan of a table that
  -- was small then (sql/CONVENTIONS.md).
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _deps bigint[];
begin
  _deps := queues.check_task_dependencies(_task_ids, _depends_on, _labels, _new_task_ids);

  -- The lock that orders this enqueue with the dependencies' endings (see the top of the
  -- file): a pending dependency's claim-index row, FOR KEY SHARE, in task id order. A
  -- dependency its claim took out of the claim index gets its row back first
  -- (queues.hold_rows_of), so that its completion, too, waits for this lock.
  perform queues.hold_rows_of(_deps);
  perform from queues.task_pending p
    where p.task_id = any (_deps)
    order by p.task_id
      for key share;

  insert into queues.task_dependency (task_id, depends_on_task_id)
  select distinct e.task_id, e.dep from unnest(_task_ids, _depends_on) e(task_id, dep)
  on conflict do nothing;

  -- A statement after the lock: a dependency that ended meanwhile is seen ended.
  perform queues.settle_new_dependents(array(select distinct t from unnest(_task_ids) t));
end;
$$;

-- The checks of queues.add_task_dependencies, writing nothing (the same arguments; a
-- check-only enqueue passes 0 for the task not yet inserted): raises as it says; returns
-- the distinct dependencies in task id order. No grants.
create or replace function queues.check_task_dependencies(
  _task_ids     bigint[],
  _depends_on   bigint[],
  _labels       text[],
  _new_task_ids bigint[]
) returns bigint[]
  language plpgsql stable
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _bad record;
  _deps bigint[];
begin
  select e.label into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   where e.dep is null limit 1;
  if found then
    raise exception '%depends_on must not contain null', _bad.label using errcode = '22004';
  end if;
  select e.label, e.task_id, e.dep into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   where e.dep = e.task_id limit 1;
  if found then
    raise exception '%a task cannot depend on itself (task %)', _bad.label, _bad.task_id using errcode = '22023';
  end if;
  select e.label, e.dep into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   where e.dep = any (_new_task_ids) limit 1;
  if found then
    raise exception '%depends_on names task %, enqueued by the same call', _bad.label, _bad.dep
      using errcode = '22023',
            hint = 'A task can depend only on tasks that exist before its enqueue, so dependencies never form a cycle.';
  end if;
  select e.label, count(distinct e.dep) as n into _bad
    from unnest(_task_ids, _depends_on, _labels) e(task_id, dep, label)
   group by e.task_id, e.label having count(distinct e.dep) > 100 limit 1;
  if found then
    raise exception '%depends_on names % tasks, over the limit of 100', _bad.label, _bad.n using errcode = '54000';
  end if;
  -- Each dependency exists: a primary-key probe of queues.task per distinct id.
  _deps := array(select distinct d from unnest(_depends_on) d order by d);
  select e.label, e.dep into _bad
    from unnest(_task_ids, _depends_on, _labels) with ordinality e(task_id, dep, label, n)
   where e.dep = any (_deps)
     and not coalesce((select true from queues.task t where t.task_id = e.dep), false)
   order by e.n limit 1;
  if found then
    raise exception '%depends_on names task %, which does not exist', _bad.label, _bad.dep using errcode = '23503';
  end if;
  return _deps;
end;
$$;

-- For tasks just enqueued with dependencies (their claim-index rows inserted by this
-- transaction): fails at once those with a dependency that ended other than succeeded;
-- makes those with a dependency still pending wait; the rest ready at their scheduled time.
-- (queues.enqueue_task inserts the row waiting already; a batch inserts it ready and moves
-- it here: until a claim's scan passes it, the entry it leaves in the ready index costs
-- that scan a heap visit.) No grants.
create or replace function queues.settle_new_dependents(_task_ids bigint[])
  returns void
  language plpgsql volatile
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _failed record;
  _fail_ids bigint[];
  _messages text[];
  _waiting bigint[];
  _ready bigint[];
begin
  select coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is not null), '{}'),
         coalesce(array_agg(format('dependency task %s ended %s', v.failed_dep, v.failed_outcome) order by v.task_id)
                    filter (where v.failed_dep is not null), '{}'),
         coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is null and v.pending), '{}'),
         coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is null and not v.pending), '{}')
    into _fail_ids, _messages, _waiting, _ready
    from queues.dependency_verdicts(_task_ids, '{}', '{}') v;

  if cardinality(_waiting) > 0 then
    update queues.task_pending p
       set scheduled_at = 'infinity', available_at = 'infinity'
     where p.task_id = any (_waiting) and p.available_at <> 'infinity';
  end if;
  if cardinality(_ready) > 0 then
    update queues.task_pending p
       set scheduled_at = t.scheduled_at, available_at = t.scheduled_at
      from queues.task t
     where p.task_id = any (_ready) and p.available_at = 'infinity' and t.task_id = p.task_id;
  end if;
  if cardinality(_fail_ids) > 0 then
    perform queues.fail_dependents(_fail_ids, _messages);
  end if;
end;
$$;

-- Per task of _task_ids, from its dependencies: the first (lowest id) that ended other than
-- succeeded and its outcome, and whether any is still pending. A dependency in _ended_ids
-- ended with the outcome at the same position of _ended_outcomes (what a completion
-- passes); any other counts as ended unsuccessfully when queues.task_completed says so
-- (task_completed_unsuccessful_task_idx), as pending while it has a claim-index row or
-- no end (a task its claim holds has no row), and as succeeded otherwise. No grants.
create or replace function queues.dependency_verdicts(_task_ids bigint[], _ended_ids bigint[], _ended_outcomes text[])
  returns table (task_id bigint, failed_dep bigint, failed_outcome text, pending boolean)
  language sql stable
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
  select x.task_id,
         (array_agg(x.depends_on_task_id order by x.depends_on_task_id) filter (where x.outcome <> 'succeeded'))[1],
         (array_agg(x.outcome order by x.depends_on_task_id) filter (where x.outcome <> 'succeeded'))[1],
         coalesce(bool_or(x.outcome is null), false)
    from (
      select d.task_id, d.depends_on_task_id,
             coalesce(
               (select e.outcome from unnest(_ended_ids, _ended_outcomes) e(task_id, outcome)
                 where e.task_id = d.depends_on_task_id and e.outcome is not null limit 1),
               (select c.outcome from queues.task_completed c
                 where c.task_id = d.depends_on_task_id and c.outcome <> 'succeeded'),
               -- pending: a claim-index row, or none and no end (held by its claim lease)
               case when (select true from queues.task_pending p where p.task_id = d.depends_on_task_id)
                         or not exists (select 1 from queues.task_end_of(d.depends_on_task_id) e) then null
                    else 'succeeded' end) as outcome
        from queues.task_dependency d
       -- A primary-key range per dependent.
       where d.task_id = any (_task_ids)
    ) x
   group by x.task_id
$$;

-- Completes pending tasks 'failed' because of a dependency, each with its error message
-- (queues.error). Their claim-index rows are deleted first, in task id order, and the
-- completions written after: the delete waits for an enqueue that holds one of them FOR
-- KEY SHARE (a task depending on this one), so that the completion's trigger sees that
-- enqueue's edge. The completions' trigger fails their own dependents in turn. No grants.
create or replace function queues.fail_dependents(_task_ids bigint[], _messages text[])
  returns void
  language plpgsql volatile
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _gone bigint[];
begin
  with removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select x.task_id from queues.task_pending x
                                   where x.task_id = any (_task_ids)
                                   order by x.task_id
                                     for update))
    returning p.task_id, p.task_type
  ),
  errors as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select r.task_id, null, m.message
      from removed r
      join unnest(_task_ids, _messages) m(task_id, message) on m.task_id = r.task_id
  )
  select array_agg(r.task_id) into _gone from removed r;
  insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
  select p.task_id, null, now(), 'failed', t.task_type
    from unnest(_gone) p(task_id)
    join queues.task t on t.task_id = p.task_id
  order by p.task_id;
end;
$$;

-- Releases the tasks that wait for _task_ids, which have just ended with _outcomes (one per
-- task: succeeded, failed, abandoned, cancelled, validation_failed). Of their waiting
-- dependents (claim-index rows locked FOR NO KEY UPDATE, in task id order), those whose
-- dependencies have all succeeded become ready at their scheduled time (and wake the
-- workers when due within a minute); those with a dependency that ended otherwise are
-- completed 'failed' with the error 'dependency task N ended <outcome>'; the rest wait on.
-- Returns how many it released or failed. Called by the trigger on queues.task_completed
-- (and by any other record of tasks ending); owner only.
create or replace function queues.release_dependents(_task_ids bigint[], _outcomes text[])
  returns integer
  language plpgsql volatile
  security definer
  -- Every read is by key (one scan of the dependency index for all of _task_ids, then
  -- primary keys): planned once per connection, never as a scan of a table that was small
  -- then (sql/CONVENTIONS.md).
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _waiting bigint[];
  _ready bigint[];
  _fail_ids bigint[];
  _messages text[];
  _due boolean;
  _oldest bigint;
begin
  if _task_ids is null or cardinality(_task_ids) = 0 then
    return 0;
  end if;
  _oldest := (select min(x) from unnest(_task_ids) x);
  if _outcomes is null or cardinality(_outcomes) <> cardinality(_task_ids) then
    raise exception 'outcomes must have one element per task (% tasks, % outcomes)',
      cardinality(_task_ids), coalesce(cardinality(_outcomes), 0) using errcode = '22023';
  end if;
  -- The waiting dependents, locked: a concurrent release of the same dependent waits here,
  -- and the next statement (a new snapshot) then sees the other dependency's completion.
  _waiting := array(
    select p.task_id
      from queues.task_pending p
     where p.task_id = any (array(select d.task_id from queues.task_dependency d
                                   where d.depends_on_task_id = any (_task_ids)
                                     -- A dependent is newer than its dependency, and the
                                     -- edge lives in the dependent's history set: the
                                     -- older sets' partitions are pruned at run time.
                                     and d.task_id > _oldest))
       and p.available_at = 'infinity' and p.current_lease_id is null
     order by p.task_id
       for no key update of p);
  if cardinality(_waiting) = 0 then
    return 0;
  end if;

  select coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is null and not v.pending), '{}'),
         coalesce(array_agg(v.task_id order by v.task_id) filter (where v.failed_dep is not null), '{}'),
         coalesce(array_agg(format('dependency task %s ended %s', v.failed_dep, v.failed_outcome) order by v.task_id)
                    filter (where v.failed_dep is not null), '{}')
    into _ready, _fail_ids, _messages
    from queues.dependency_verdicts(_waiting, _task_ids, _outcomes) v;

  if cardinality(_ready) > 0 then
    with released as (
      update queues.task_pending p
         set scheduled_at = t.scheduled_at, available_at = t.scheduled_at
        from queues.task t
       where p.task_id = any (_ready) and t.task_id = p.task_id
      returning p.scheduled_at
    )
    select bool_or(r.scheduled_at <= now() + interval '1 minute') into _due from released r;
    if _due then
      perform pg_notify('queues_task_ready', '');
    end if;
  end if;
  if cardinality(_fail_ids) > 0 then
    perform queues.fail_dependents(_fail_ids, _messages);
  end if;
  return cardinality(_ready) + cardinality(_fail_ids);
end;
$$;

-- The triggers on a task's end. Row level, so that a statement that ends no task in a
-- table (every completion call writes to both, most of them nothing to one) runs nothing:
-- on queues.task_completed (every end but a plain success) one call per task ended; on
-- queues.completion_round one per round (a round names many tasks, all succeeded). While
-- no task waits, each returns after one probe of task_pending_waiting_idx (the partial
-- index of the waiting rows, empty then); the dependency table is not read. (A dependent
-- enqueued concurrently locks this task's row before it commits, so a statement here,
-- after the ending locked or deleted that row, sees it waiting.) No SET clause but the
-- search path: they run for every end.
create or replace function queues.task_completed_release_dependents() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform from queues.task_pending p where p.available_at = 'infinity' limit 1;
  if found then
    perform queues.release_dependents(array[new.task_id], array[new.outcome]);
  end if;
  return null;
end;
$$;

create or replace function queues.completion_round_release_dependents() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform from queues.task_pending p where p.available_at = 'infinity' limit 1;
  if found then
    perform queues.release_dependents(new.task_ids,
                                      array_fill('succeeded'::text, array[cardinality(new.task_ids)]));
  end if;
  return null;
end;
$$;

-- The dependencies of a task, in task id order, with how each ended and the result it
-- recorded (queues.task_result, the newest): outcome is null while it is pending, and
-- 'succeeded' for a task that ended without an unsuccessful completion. For the worker
-- (ctx.dependencies() in a processor), apps and the API. An unknown task has none.
create or replace function queues.list_task_dependencies(_task_id bigint)
  returns table (task_id bigint, task_type text, outcome text, completed_at timestamptz, result jsonb)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select d.depends_on_task_id, t.task_type,
         -- pending: a claim-index row, or no end (held by its claim lease)
         case when (select true from queues.task_pending p where p.task_id = d.depends_on_task_id)
                   or c.task_id is null then null
              else c.outcome end,
         c.completed_at,
         (select r.result from queues.task_result r
           where r.task_id = d.depends_on_task_id order by r.task_lease_id desc limit 1)
    from queues.task_dependency d
    join queues.task t on t.task_id = d.depends_on_task_id
    left join lateral queues.task_end_of(d.depends_on_task_id) c on true
   where d.task_id = _task_id
   order by d.depends_on_task_id
$$;

-- For admin.get_task: {dependencies: [{task_id, task_type, outcome}], dependents:
-- [{task_id, task_type, state}]} (at most 100 dependents, oldest first). No grants.
create or replace function queues.task_dependency_facts(_task_id bigint, _now timestamptz)
  returns jsonb
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object(
    'dependencies', coalesce((
      select jsonb_agg(jsonb_build_object('task_id', l.task_id, 'task_type', l.task_type, 'outcome', l.outcome,
                                          'completed_at', l.completed_at) order by l.task_id)
        from queues.list_task_dependencies(_task_id) l), '[]'::jsonb),
    'dependents', coalesce((
      select jsonb_agg(jsonb_build_object('task_id', x.task_id, 'task_type', x.task_type, 'state', x.state)
                       order by x.task_id)
        from (
          select d.task_id, t.task_type,
                 coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now),
                          'succeeded') as state
            from queues.task_dependency d
            join queues.task t on t.task_id = d.task_id
            left join lateral (select x.* from queues.task_pending_or_held_of(d.task_id) x limit 1) p on true
            left join lateral queues.task_end_of(d.task_id) c on true
           where d.depends_on_task_id = _task_id
           order by d.task_id
           limit 100
        ) x), '[]'::jsonb))
$$;
