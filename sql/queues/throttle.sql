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
