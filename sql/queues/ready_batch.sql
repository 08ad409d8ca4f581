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
--   queues.ready_batch_candidates_at(types, now, limit)
--                                                the claim's drain path: the first `limit`
--                                                batched tasks of each type, batches locked
--   queues.take_from_ready_batches(batch_ids)    the claim's drain path: the ids it leased
--                                                taken off their batches' front
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

-- The claim's drain path (queues.claim_tasks_at): its candidates from the ready batches,
-- beside its candidates from rows. Per type of _types (null: any type), the batches due by
-- _now in claim order, locked as read (batches another claim holds are skipped), the scan
-- stopped by the LIMIT once it has _limit ids; each id not yet taken, with its batch. A
-- batch's ids share its priority and scheduled time, so what the claim picks of a batch
-- is a prefix of them. A function of its own: the claim runs it only while a ready batch
-- exists, and the claim's statement does not start its plan otherwise.
create or replace function queues.ready_batch_candidates_at(_types text[], _now timestamptz, _limit integer)
  returns table (task_id bigint, task_type text, resource_key text, priority integer, scheduled_at timestamptz,
                 lease_count integer, batch_id bigint)
  language sql volatile
  rows 10
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
  select bt.*
    from (select distinct u.task_type
            from unnest(coalesce(_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
   cross join lateral (
     select u.task_id, b.task_type, null::text as resource_key, b.priority, b.scheduled_at, 0 as lease_count,
            b.task_id as batch_id
       from (select b.task_id, b.task_type, b.priority, b.scheduled_at, b.task_ids, b.taken
               from queues.task_ready_batch b
              where b.task_type = ty.task_type
                and b.scheduled_at <= _now
              order by b.priority desc, b.scheduled_at, b.task_id
              limit _limit
                for update skip locked) b
      cross join lateral unnest(b.task_ids[b.taken + 1:]) u(task_id)
      limit _limit
   ) bt
$$;

-- The claim's drain path (queues.claim_tasks_at), once it has leased tasks of ready
-- batches: _batch_ids names each leased task's batch (a batch once per task taken). The
-- ids are taken off each batch's front (one HOT update of `taken`), and a batch whose last
-- id was taken is deleted. The claim holds the batches' rows (locked by its pick).
create or replace function queues.take_from_ready_batches(_batch_ids bigint[])
  returns void
  language sql volatile
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
  with taken as (
    select x.batch_id, count(*)::integer as n from unnest(_batch_ids) x(batch_id) group by x.batch_id
  ),
  emptied as (
    delete from queues.task_ready_batch b
     using taken f
     where b.task_id = f.batch_id and b.taken + f.n >= cardinality(b.task_ids)
  )
  update queues.task_ready_batch b
     set taken = b.taken + f.n
    from taken f
   where b.task_id = f.batch_id and b.taken + f.n < cardinality(b.task_ids)
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
