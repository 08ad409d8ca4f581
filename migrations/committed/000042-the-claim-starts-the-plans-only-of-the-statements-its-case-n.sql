--! Previous: sha1:470395ca6940bbc0be1592b1a4a37ab8fae44d47
--! Hash: sha1:93f7762b5bc0844f9a756560b91d16a5b91fa4e0
--! Message: The claim starts the plans only of the statements its case needs, and reads by index whatever the statistics say

--! split: 400-one-task-claim.sql
set local lock_timeout = '5s';
-- The claim (queues.claim_tasks_at) starts the plans only of the statements its case
-- needs: the ready batches' candidates and the taking of leased ids off their batches are
-- functions of their own (queues.ready_batch_candidates_at, queues.take_from_ready_batches),
-- run only while a ready batch exists or was taken from; the flow limits' rules are read
-- only once a limit was ever set; the quarantine's checks only for the quarantine's claim.
-- Its probes of the claim leases due and of the throttles in force are part of its first
-- statement (the first a subquery, queues.throttled_keys_at inlined), not function calls.
-- And the claim reads by index whatever the statistics say (enable_seqscan = off):
-- statistics taken while an older snapshot kept a drained queue's deleted rows had its
-- pick planned as a sequential scan of the claim index per task type.
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
--! EndIncluded queues/ready_batch.sql
--! Included queues/throttle.sql
-- Provider back-pressure as a fact: "throttled until T". A processor whose provider
-- answered 429, a Retry-After or a quota error throws a ThrottledError; its worker records
-- it here (queues.record_throttle) and gives the task back uncounted. Every claim leaves
-- out the task types and the group keys throttled at its clock (queues.throttled_keys_at,
-- one probe of throttle_until_idx per claim, nothing per row while no group key is
-- throttled), so that channel's, or that tenant's or provider account's, tasks wait on
-- every worker until T; supervisors read queues.throttled_until (a channel process's facts
-- expose it); an operator reads and clears throttles through admin.list_throttles and
-- admin.clear_throttle.
--
-- Facts (migration 300-provider-throttle.sql): queues.throttle, one row per report
-- (key_kind, key, throttled_until, reason, who, the lease whose call was refused), and
-- queues.throttle_cleared, an operator's clear of a key's throttles recorded so far. A
-- key's throttle is active while one of its reports not cleared has throttled_until
-- after now; the latest such T is the key's. key_kind 'task_type': a channel, such as
-- 'email' (its tasks wait). key_kind 'group': a group key (queues.task.group_key, a tenant
-- or a provider account; the key of flow limits): the tasks of every type that carry it
-- wait.

-- The longest a throttle may last: a provider asking for longer is held to this, and the
-- worker reports again when it still refuses.
create or replace function queues.max_throttle_seconds()
  returns integer
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$ select 86400 $$;

-- Records that _key (a task type, key_kind 'task_type'; or a group key, key_kind 'group')
-- is throttled until _until, or for _retry_after_seconds from _now (exactly one of the
-- two), with _reason (1 to 500 characters) and who reported it (_recorded_by: a worker
-- id, 1 to 200 characters). A group key is 1 to 200 characters, not blank; with
-- key_kind 'group', a NULL _key and a task (_task_id), the key is that task's group key.
-- With _task_id and _task_lease_id (the run whose provider call was refused), that lease
-- is released in the same transaction, as queues.release_leases does: the task is
-- claimable again at the throttle's end (or when it is cleared), and
-- neither the release nor the refused run counts as a failed attempt, an interruption or
-- an expiry; an at-most-once provider call started under that lease does not count as
-- started (internal.provider_call_start: the provider refused it).
-- _waiting_task_ids and _waiting_lease_ids (parallel, at most 1000): the leases of tasks
-- the worker holds but has not started (its local queue); those the throttle covers (of
-- the throttled task type, or carrying the throttled group key, which only the database
-- knows) are released with the run's, uncounted, in the same call, so that they do not
-- start only to meet the same refusal.
-- Returns the result ('recorded' without a task, 'released', 'lease_lost' when the lease
-- is no longer current: the throttle is recorded anyway), the throttle's end, and the
-- waiting tasks released (the others stay the worker's to run).
-- Bad input writes nothing: NULLs 22004; an unknown task type, or a group throttle of the
-- task's group key for a task that is not known, 23503; a kind other than 'task_type' or
-- 'group', a group key blank or out of bounds, a task without a group key asked to
-- throttle its group, both or neither of _until and _retry_after_seconds, a T not after
-- _now or more than queues.max_throttle_seconds() after it, a reason or name out of
-- bounds, one of the task ids without the other: 22023; waiting arrays as
-- queues.assert_lease_pairs.
create or replace function queues.record_throttle_at(
  _now                 timestamptz,
  _key_kind            text,
  _key                 text,
  _until               timestamptz,
  _retry_after_seconds numeric,
  _reason              text,
  _recorded_by         text,
  _task_id             bigint,
  _task_lease_id       bigint,
  _waiting_task_ids    bigint[] default null,
  _waiting_lease_ids   bigint[] default null
) returns table (result text, throttled_until timestamptz, released_waiting bigint[])
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _end timestamptz;
  _ids bigint[];
  _leases bigint[];
  _released bigint[] := '{}';
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _key_kind is null or (_key is null and not (_key_kind = 'group' and _task_id is not null)) then
    raise exception 'key_kind and key must not be null' using errcode = '22004';
  end if;
  if _key_kind not in ('task_type', 'group') then
    raise exception 'key_kind must be ''task_type'' or ''group'', got %', quote_literal(left(_key_kind, 100))
      using errcode = '22023';
  end if;
  if _key_kind = 'task_type' then
    if not exists (select 1 from queues.task_type t where t.task_type = _key) then
      raise exception 'unknown task type %', quote_literal(left(_key, 100)) using errcode = '23503';
    end if;
  else
    if _key is null then
      -- The group key of the run's task.
      select t.group_key into _key from queues.task t where t.task_id = _task_id limit 1;
      if not found then
        raise exception 'unknown task %', _task_id using errcode = '23503';
      end if;
      if _key is null then
        raise exception 'task % has no group key to throttle', _task_id using errcode = '22023';
      end if;
    end if;
    if btrim(_key) = '' or length(_key) > 200 then
      raise exception 'group key must be 1 to 200 characters, not blank' using errcode = '22023';
    end if;
  end if;
  if (_until is null) = (_retry_after_seconds is null) then
    raise exception 'give exactly one of until and retry_after_seconds' using errcode = '22023';
  end if;
  if _retry_after_seconds is not null then
    if _retry_after_seconds <= 0 or _retry_after_seconds > queues.max_throttle_seconds() then
      raise exception 'retry_after_seconds must be more than 0 and at most %, got %',
        queues.max_throttle_seconds(), _retry_after_seconds using errcode = '22023';
    end if;
    _end := _now + make_interval(secs => _retry_after_seconds::double precision);
  else
    if _until <= _now or _until > _now + make_interval(secs => queues.max_throttle_seconds()) then
      raise exception 'until must be after now and at most % seconds ahead, got % (now %)',
        queues.max_throttle_seconds(), _until, _now using errcode = '22023';
    end if;
    _end := _until;
  end if;
  if _reason is null or btrim(_reason) = '' or length(_reason) > 500 then
    raise exception 'reason must be 1 to 500 characters' using errcode = '22023';
  end if;
  if _recorded_by is null or length(_recorded_by) not between 1 and 200 then
    raise exception 'recorded_by must be 1 to 200 characters' using errcode = '22023';
  end if;
  if (_task_id is null) <> (_task_lease_id is null) then
    raise exception 'give both task_id and task_lease_id, or neither' using errcode = '22023';
  end if;
  if _waiting_task_ids is not null or _waiting_lease_ids is not null then
    perform queues.assert_lease_pairs(_waiting_task_ids, _waiting_lease_ids);
  end if;

  insert into queues.throttle (key_kind, key, throttled_until, reason, recorded_at, recorded_by, task_id, task_lease_id)
  values (_key_kind, _key, _end, _reason, _now, _recorded_by, _task_id, _task_lease_id);

  -- The waiting leases the throttle covers (of the throttled type, or carrying the
  -- throttled group key), given back uncounted with the run's, in one call.
  if cardinality(_waiting_task_ids) > 0 then
    select array_agg(w.task_id order by w.task_id), array_agg(w.task_lease_id order by w.task_id)
      into _ids, _leases
      from unnest(_waiting_task_ids, _waiting_lease_ids) w(task_id, task_lease_id)
      join queues.task p on p.task_id = w.task_id
     where p.task_id = any (_waiting_task_ids)
       and w.task_id is distinct from _task_id
       and case when _key_kind = 'task_type' then p.task_type = _key else p.group_key = _key end;
  end if;
  if _task_id is not null then
    _ids := array[_task_id] || coalesce(_ids, '{}');
    _leases := array[_task_lease_id] || coalesce(_leases, '{}');
  end if;
  if cardinality(_ids) > 0 then
    _released := array(select r.task_id from queues.release_leases(_ids, _leases) r);
    -- The released tasks the throttle covers wait for its end. A claim reads the throttles
    -- in force in one statement and scans the claim index in the next: one that read them
    -- before this transaction committed and scans after it would see the released tasks
    -- and not the throttle. (A run that named another group key than its own is released
    -- at once.) queues.clear_throttle makes them available at once.
    update queues.task_pending p
       set available_at = _end
     where p.task_id = any (_released) and p.current_lease_id is null and p.available_at < _end
       and case when _key_kind = 'task_type' then p.task_type = _key else p.group_key = _key end;
  end if;

  if _task_id is null then
    return query select 'recorded'::text, _end, _released;
  elsif _task_id = any (_released) then
    return query select 'released'::text, _end, array_remove(_released, _task_id);
  else
    return query select 'lease_lost'::text, _end, _released;
  end if;
end;
$$;

-- queues.record_throttle_at at now(): what the worker calls (see above).
create or replace function queues.record_throttle(
  _key_kind            text,
  _key                 text,
  _until               timestamptz,
  _retry_after_seconds numeric,
  _reason              text,
  _recorded_by         text,
  _task_id             bigint default null,
  _task_lease_id       bigint default null,
  _waiting_task_ids    bigint[] default null,
  _waiting_lease_ids   bigint[] default null
) returns table (result text, throttled_until timestamptz, released_waiting bigint[])
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.record_throttle_at(now(), _key_kind, _key, _until, _retry_after_seconds, _reason,
                                          _recorded_by, _task_id, _task_lease_id, _waiting_task_ids,
                                          _waiting_lease_ids)
$$;

-- The throttle reports in force at _now: not ended (throttled_until after _now) and not
-- cleared (no queues.throttle_cleared of their key at or after them). The one statement of
-- that rule, for queues.active_throttles_at, queues.throttled_keys_at and
-- queues.throttled_until: inlined into each (SQL, stable, no SET clause, not a security
-- definer), so their key and time reach throttle_until_idx; every object it names is
-- schema-qualified. No grants.
create or replace function queues.throttles_in_force_at(_now timestamptz)
  returns setof queues.throttle
  language sql stable
as $$
  select a.*
    from queues.throttle a
   where a.throttled_until > _now
     and (select true from queues.throttle_cleared c
           where c.key_kind = a.key_kind and c.key = a.key and c.last_throttle_id >= a.throttle_id
           limit 1) is null
$$;

-- The active throttles at _now: per key, the latest end among its reports not cleared
-- that end after _now, with that report's reason, time and reporter, and how many such
-- reports there are. Reads throttle_until_idx from _now on (only reports not yet ended),
-- each probed against the key's clears.
create or replace function queues.active_throttles_at(_now timestamptz)
  returns table (
    key_kind        text,
    key             text,
    throttled_until timestamptz,
    reason          text,
    recorded_at     timestamptz,
    recorded_by     text,
    reports         integer
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
as $$
  select distinct on (a.key_kind, a.key)
         a.key_kind, a.key, a.throttled_until, a.reason, a.recorded_at, a.recorded_by,
         (count(*) over (partition by a.key_kind, a.key))::integer
    from queues.throttles_in_force_at(_now) a
   order by a.key_kind, a.key, a.throttled_until desc, a.throttle_id desc
$$;

-- The active throttles now (queues.active_throttles_at).
create or replace function queues.active_throttles()
  returns table (
    key_kind        text,
    key             text,
    throttled_until timestamptz,
    reason          text,
    recorded_at     timestamptz,
    recorded_by     text,
    reports         integer
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.active_throttles_at(now())
$$;

-- The task types and the group keys throttled at _now, for the claim's prelude
-- (queues.claim_tasks_at): one probe of throttle_until_idx, which reads no row while no
-- throttle is active (the common case: '{}' and '{}'). Inlined into the claim's first
-- statement (SQL, stable, no SET clause, not a security definer; every object it names is
-- schema-qualified), which is planned once per connection with no sequential scan, so
-- that a plan made while the table was empty never reads the whole table later. No grants.
create or replace function queues.throttled_keys_at(_now timestamptz)
  returns table (task_types text[], group_keys text[])
  language sql stable
  rows 1
as $$
  select coalesce(array_agg(distinct a.key) filter (where a.key_kind = 'task_type'), '{}'),
         coalesce(array_agg(distinct a.key) filter (where a.key_kind = 'group'), '{}')
    from queues.throttles_in_force_at(_now) a
$$;

-- Until when _key (of _key_kind: 'task_type' for a channel, 'group' for a group key) is
-- throttled now, or NULL when it is not: what a supervisor reads to decide (send by
-- another channel, wait, stop retrying). A channel process's facts carry it for its
-- channel.
create or replace function queues.throttled_until(_key_kind text, _key text)
  returns timestamptz
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
  set enable_seqscan = off
as $$
  select max(a.throttled_until)
    from queues.throttles_in_force_at(now()) a
   where a.key_kind = _key_kind and a.key = _key
$$;

-- Clears the throttles of _key recorded so far (an operator who knows the provider is
-- back), as a fact: claims take the key's tasks again at once; a report after the clear
-- throttles it again. Returns whether a throttle was active. Owner only; the REST API
-- calls admin.clear_throttle. Bad input (NULLs 22004, a kind other than 'task_type' or
-- 'group', a group key blank or out of bounds, a name out of bounds 22023, an unknown
-- task type 23503) writes nothing; nothing is written when no throttle is active.
create or replace function queues.clear_throttle(_key_kind text, _key text, _cleared_by text)
  returns boolean
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _last bigint;
begin
  if _key_kind is null or _key is null or _cleared_by is null then
    raise exception 'key_kind, key and cleared_by must not be null' using errcode = '22004';
  end if;
  if _key_kind not in ('task_type', 'group') then
    raise exception 'key_kind must be ''task_type'' or ''group'', got %', quote_literal(left(_key_kind, 100))
      using errcode = '22023';
  end if;
  if _key_kind = 'group' and (btrim(_key) = '' or length(_key) > 200) then
    raise exception 'group key must be 1 to 200 characters, not blank' using errcode = '22023';
  end if;
  if _key_kind = 'task_type' and not exists (select 1 from queues.task_type t where t.task_type = _key) then
    raise exception 'unknown task type %', quote_literal(left(_key, 100)) using errcode = '23503';
  end if;
  if length(_cleared_by) not between 1 and 200 then
    raise exception 'cleared_by must be 1 to 200 characters' using errcode = '22023';
  end if;
  select max(a.throttle_id) into _last
    from queues.throttle a
   where a.key_kind = _key_kind and a.key = _key and a.throttled_until > now();
  if _last is null or queues.throttled_until(_key_kind, _key) is null then
    return false;
  end if;
  insert into queues.throttle_cleared (key_kind, key, last_throttle_id, cleared_by)
  values (_key_kind, _key, _last, _cleared_by);
  -- The tasks a throttle of this key gave back wait for its end (queues.record_throttle_at):
  -- they are available now, locked in task id order.
  update queues.task_pending p
     set available_at = now()
   where p.task_id in (
           select w.task_id from queues.task_pending w
            where w.current_lease_id is null
              and case when _key_kind = 'task_type' then w.task_type = _key else w.group_key = _key end
              and w.available_at > now() and w.available_at <> 'infinity'
              and w.available_at in (select a.throttled_until from queues.throttle a
                                      where a.key_kind = _key_kind and a.key = _key and a.throttle_id <= _last)
            order by w.task_id
              for no key update);
  -- The key's tasks are claimable again: wake the workers.
  perform pg_notify('queues_task_ready', '');
  return true;
end;
$$;
--! EndIncluded queues/throttle.sql
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
-- adds what it took to the windows. Every claim first takes the limits' lock shared
-- (advisory, 20254), which queues.set_task_limit takes exclusive: a limit is set only
-- once the claims in flight (which read no limit) have committed, so it counts their
-- tasks, and a claim that starts meanwhile waits for it and reads it.

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
  -- Every read is by an index, whatever the statistics say when the session plans: a
  -- vacuum that ran while an older snapshot kept a drained queue's deleted rows left
  -- statistics under which the pick was planned as a sequential scan of the claim index
  -- per task type (sql/queues/claim.test.ts, "whatever the statistics say").
  set enable_seqscan = off
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
  -- Of the picked tasks, those on claim-index rows (the rows the claim deletes).
  _picked_rows bigint[];
  _expired     boolean;
  -- A claim lease is due: the rescuer runs.
  _due         boolean;
  -- The worker holds a live lease that names a repeat suspect (one whose death already
  -- counted): this claim takes no other repeat suspect.
  _holds_repeat boolean;
  -- Some flow limit was set (queues.task_limit_set has a row).
  _any_limit   boolean;
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
  -- its index) and no lease expired (one probe of the expired leases' index). (Nested:
  -- one condition with the subqueries would start their plan on every claim.)
  if _suspects = 'repeat' then
    if (select true from queues.task_pending p
         where p.current_lease_id is null
           and p.lease_count - p.released_count - p.failed_attempts - p.uncounted_count > 0
           and p.available_at <= _now
         order by p.available_at limit 1) is null
       and (select true from queues.task_pending p
             where p.current_lease_id > 0 and p.available_at <= _now
             order by p.available_at limit 1) is null then
      return;
    end if;
  end if;
  -- A limit being set and a claim in flight wait for each other (the limits' lock, shared
  -- by claims, exclusive in queues.set_task_limit): a claim that read no limit has
  -- committed before the limit counts the type's running tasks. Taken before the
  -- statement below, which then reads the limits in a snapshot taken after it; tried
  -- first, as an expression (PL/pgSQL evaluates it without starting a statement), and
  -- waited for only while a limit is being set.
  if not pg_try_advisory_xact_lock_shared(20254, 0) then
    perform pg_advisory_xact_lock_shared(20254, 0);
  end if;
  -- One statement reads what the claim needs before it scans: whether a claim lease is
  -- due, the worker's key, the throttles and the flow limits in force (with none
  -- configured, the claim costs no statement more than it did without them).
  -- The ready set's rescuer runs only when a claim lease is due by _now (the earliest
  -- expiry in queues.claim_lease_due, one probe of its index whatever its size when the
  -- session planned it: the claim plans no sequential scan) and returns their unfinished
  -- tasks to the claim index, where this claim's statement sees them. Called on every
  -- claim, the rescuer's function and its empty delete were a fifth of an idle worker's
  -- one-task claim (tools/bench/probes/one-claim.mjs).
  -- A lease names its worker by key (queues.worker_name: each worker id kept once, an
  -- integer on every lease instead of the id's text). One probe of the id's unique index.
  -- Provider back-pressure (sql/queues/throttle.sql): the task types throttled at _now
  -- are left out of the types both branches below scan, and the tasks of the group keys
  -- throttled at _now (of any type) out of what they find. One probe of
  -- throttle_until_idx per claim (queues.throttled_keys_at, inlined here), which reads no
  -- row while no throttle is active; nothing per task while no group key is throttled.
  -- Flow limits (sql/queues/limits.sql, the body of queues.task_limits): whether any was
  -- ever set; then (below) the rules in force for the types asked for and not throttled.
  -- None (the common case): the claim runs with _limited empty, which its limit steps
  -- read as "nothing to do", and the rules' statement is not run.
  select (select d.expires_at from queues.claim_lease_due d order by d.expires_at limit 1) <= _now,
         w.worker_key, th.task_types, th.group_keys,
         exists (select 1 from queues.task_limit_set),
         -- whether any ready batch exists (sql/queues/ready_batch.sql)
         exists (select 1 from queues.task_ready_batch)
    into _due, _worker_key, _throttled, _throttled_groups, _any_limit, _batched
    from queues.throttled_keys_at(_now) th
    left join queues.worker_name w on w.worker_id = _worker_id;
  if _due then
    perform queues.rescue_due_leases_at(_now);
  end if;
  if _any_limit then
    _rules := coalesce((select jsonb_agg(to_jsonb(l))
                from (select l.task_type, l.scope, l.group_key, l.max_running, l.max_starts,
                             l.interval_ms, l.set_at
                        from (select distinct on (s.task_type, s.scope, s.group_key) s.*
                                from queues.task_limit_set s
                               order by s.task_type, s.scope, s.group_key, s.task_limit_set_id desc) l
                       where (l.max_running is not null or l.max_starts is not null)
                         and (_task_types is null or l.task_type = any (_task_types))
                         and not (l.task_type = any (_throttled))
                       order by l.task_type, l.scope, l.group_key) l), '[]');
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
    -- The ready batches' tasks are candidates beside the rows
    -- (queues.ready_batch_candidates_at).
    select array_agg(pk.task_id order by pk.task_id),
           coalesce(bool_and(pk.lease_count = 0 and pk.resource_key is null), false),
           case when min(pk.task_type) = max(pk.task_type) then min(pk.task_type) end,
           coalesce(array_agg(pk.batch_id) filter (where pk.batch_id is not null), '{}'),
           coalesce(array_agg(pk.task_id) filter (where pk.batch_id is null), '{}'),
           -- An expired lease among the types (a scalar subquery in the expired leases'
           -- index order, as below; evaluated once, in the pick's snapshot).
           (select true from queues.task_pending p
             where p.current_lease_id > 0 and p.available_at <= _now
               and (_types is null or p.task_type = any (_types))
             order by p.available_at limit 1) is not null
      into _picked, _plain, _picked_type, _from_batches, _picked_rows, _expired
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
            -- The ready batches' tasks (sql/queues/ready_batch.sql), only while one exists.
            select bt.*
              from queues.ready_batch_candidates_at(_types, _now, _limit) bt
             where _batched
             order by priority desc, scheduled_at, task_id
             limit _limit) pk;
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
         where p.task_id = any (_picked_rows)
      )
      select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
             t.enqueued_at, t.scheduled_at, m.task_lease_id, _now, _now + make_interval(secs => _lease_seconds),
             1, t.timeout_ms
       -- (one index scan of the claim's ids, bounded by its least and greatest, known when
       -- the plan starts: the history partitions none of them is in are left out, neither
       -- locked nor opened)
        from queues.task t
       cross join (select l.task_lease_id from leased l) m
       where t.task_id = any (_picked) and t.task_id between _picked[1] and _picked[cardinality(_picked)]
       order by t.priority desc, t.scheduled_at, t.task_id;
      -- The batches' ids taken off their front (the batch deleted with its last one).
      if cardinality(_from_batches) > 0 then
        perform queues.take_from_ready_batches(_from_batches);
      end if;
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
drop function if exists queues.earliest_claim_lease_due();
--! Included queues/privileges-hot-path.sql
-- Grants of the worker's hot-path functions (settle, steps, revocation of a dead
-- process's leases); included after the files that define them. queues/privileges.sql
-- revokes EXECUTE from PUBLIC on every queue function first.

revoke execute on all functions in schema queues from public;

grant execute on function
  queues.settle_tasks(bigint[], bigint[], text[], boolean[], bigint[], text[], bigint[]),
  queues.run_steps(bigint[], bigint[], text[], jsonb[], text[]),
  queues.run_step(bigint, bigint, text, jsonb),
  queues.complete_steps(bigint[], bigint[], text[], boolean[], bigint[], text[], jsonb[]),
  queues.current_leases(bigint[], bigint[]),
  queues.parse_envelope(jsonb),
  queues.is_current_lease(bigint, bigint),
  queues.max_payload_bytes(),
  queues.mark_started(bigint[], bigint[], bigint[]),
  queues.revoke_worker_leases(text, bigint[], bigint[])
to :DATABASE_WORKER;
--! EndIncluded queues/privileges-hot-path.sql
