--! Previous: sha1:2bb77cb53ffe80c9e01447be0fb363fb948369e8
--! Hash: sha1:fbd308bbb4f4660944961c032cd08dcc72dca8a0
--! Message: The ready set: a claim takes an unkeyed task out of the claim index on its first lease; every path holds such a task by its claim lease or gives it its row back; the rescuer reads due leases; readers see lease-held tasks

--! split: 400-ready-set.sql
set local lock_timeout = '5s';
-- The ready set (docs/design/hot-path.md): a claim takes an unkeyed task of an unlimited
-- type out of the claim index on its first lease, and its claim lease holds it. The
-- rescuer reads the claim leases due from a table of its own (queues.claim_lease_due: one
-- row per claim that took a task out of the claim index, deleted by the pass that rescues
-- it), not from claim_lease's partitions: a claim locks no partition of claim_lease unless
-- a lease is due, and a lease committed after its expiry is still found. Leases written
-- before this migration are per row (their tasks keep their claim-index rows): none is due.
create table if not exists queues.claim_lease_due (
  task_lease_id bigint primary key,
  task_id       bigint not null,
  expires_at    timestamptz not null
);
create index if not exists claim_lease_due_expires_at_idx on queues.claim_lease_due (expires_at);
comment on table queues.claim_lease_due is
  'The claim leases the rescuer has still to read, by expiry (queues.rescue_due_leases_at): one row per claim that took a task out of the claim index, deleted when rescued. A read structure, not a fact.';
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
  insert into queues.task_pending
    (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
     lease_count, released_count, max_attempts, failed_attempts, uncounted_count, interrupted_count,
     suspect_lease, group_key)
  select * from queues.pending_rows_of(null);
  get diagnostics _count = row_count;

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
  insert into queues.task_pending
    (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
     lease_count, released_count, max_attempts, failed_attempts, uncounted_count, interrupted_count,
     suspect_lease, group_key)
  select r.*
    from queues.pending_rows_of(array(
           select u.task_id from unnest(_task_ids) u(task_id)
            where not exists (select 1 from queues.task_pending p where p.task_id = u.task_id)
              and not exists (select 1 from queues.task_end_of(u.task_id) e)
              and not exists (select 1 from queues.task_lease_extension x
                               where x.task_id = u.task_id and x.task_lease_id = _task_lease_id
                                 and x.expires_at > _now))) r
   order by r.task_id;
  get diagnostics _n = row_count;
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
-- (queues.claim_lease.suspect_task_id, task_pending.suspect_lease). An expiry counts towards
-- abandonment only when the task was the named suspect of that lease: the first expiry
-- of a task never counts (it may have waited in a dead worker's local queue, or run
-- beside the task that killed it), and from then on the task runs only as a named
-- suspect, so each death it causes counts. A task whose counted expiries reach
-- _max_leases (reported interruptions count too; releases and failed attempts do not) is
-- completed as 'abandoned' with an error instead of being leased again: a task that kills
-- its worker, or PostgreSQL, is abandoned after _max_leases + 1 leases. Nothing in this
-- accounting depends on the worker reporting a start: the lease naming its suspect
-- commits before the task runs.
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
  _max_leases    integer
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
  -- The ready set's rescuer: the claim leases due by _now return their unfinished tasks
  -- to the claim index, where this claim's statement sees them.
  perform queues.rescue_due_leases_at(_now);
  -- One statement reads what the claim needs before it scans: the worker's key, the
  -- throttles and the flow limits in force (with none configured, the claim costs no
  -- statement more than it did without them).
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
  select w.worker_key, th.task_types, th.group_keys,
         coalesce((select jsonb_agg(to_jsonb(l))
                     from (select l.task_type, l.scope, l.group_key, l.max_running, l.max_starts,
                                  l.interval_ms, l.set_at
                             from (select distinct on (s.task_type, s.scope, s.group_key) s.*
                                     from queues.task_limit_set s
                                    order by s.task_type, s.scope, s.group_key, s.task_limit_set_id desc) l
                            where (l.max_running is not null or l.max_starts is not null)
                              and (_task_types is null or l.task_type = any (_task_types))
                              and not (l.task_type = any (th.task_types))
                            order by l.task_type, l.scope, l.group_key) l), '[]')
    into _worker_key, _throttled, _throttled_groups, _rules
    from queues.throttled_keys_at(_now) th
    left join queues.worker_name w on w.worker_id = _worker_id;
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
       select p.task_id, p.task_type, p.current_lease_id, p.resource_key, p.group_key, p.priority, p.scheduled_at,
              p.lease_count - p.released_count - p.failed_attempts as ended_leases,
              p.uncounted_count, p.suspect_lease, p.lease_count
         from queues.task_pending p
        where p.task_type = ty.task_type
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
        limit _limit
          for update skip locked
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
        select c.*,
               c.ended_leases - c.uncounted_count
                 - (c.current_lease_id is not null and not c.suspect_lease)::integer as counted
          from within_limits c
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
    insert into queues.claim_lease (task_id, worker_key, leased_at, expires_at, task_ids, task_range, suspect_task_id)
    select max(e.task_id), _worker_key, _now, _now + make_interval(secs => _lease_seconds),
           array_agg(e.task_id order by e.task_id),
           int8range(min(e.task_id), max(e.task_id), '[]'),
           max(e.task_id) filter (where e.suspect)
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
create or replace function queues.claim_tasks(
  _worker_id     text,
  _limit         integer default null,
  _task_types    text[] default null,
  _lease_seconds integer default null,
  _max_leases    integer default null
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
                                      coalesce(_lease_seconds, 300), coalesce(_max_leases, 5))
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
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
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
                then least(greatest(ceil(extract(epoch from min(n.scheduled_at) - clock_timestamp()) * 1000), 0),
                           2147483647)::integer end as ms
      from priorities pr
     cross join lateral (
       select p.scheduled_at from queues.task_pending p
        where p.task_type = pr.task_type and p.current_lease_id is null and p.priority = pr.priority
          and p.scheduled_at > clock_timestamp() - make_interval(secs => greatest(coalesce(_missed_ms, 0), 0) / 1000.0)
        order by p.scheduled_at
        limit 1
     ) n
     where pr.priority is not null
  ),
  next_window as (
    select min(greatest(ceil(extract(epoch from queues.limit_window_start(clock_timestamp(), l.interval_ms)
                                                 + make_interval(secs => l.interval_ms / 1000.0)
                                                 - clock_timestamp()) * 1000), 0))::integer as ms
      from queues.task_limits() l
     where l.interval_ms is not null
       and l.task_type in (select ty.task_type from types ty)
       and coalesce((select true from queues.task_pending p
                      where p.task_type = l.task_type and p.current_lease_id is null
                        and p.scheduled_at <= clock_timestamp() and p.available_at <= clock_timestamp()
                      order by p.priority desc, p.scheduled_at, p.task_id
                      limit 1), false)
  )
  select least(s.ms, w.ms) from next_scheduled s, next_window w
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
      insert into queues.task_pending
        (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
         lease_count, released_count, max_attempts, failed_attempts, uncounted_count, interrupted_count,
         suspect_lease, group_key)
      select r.* from queues.pending_rows_of(_retried) r order by r.task_id;
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
        insert into queues.task_pending
          (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
           lease_count, released_count, max_attempts, failed_attempts, uncounted_count, interrupted_count,
           suspect_lease, group_key)
        select r.* from queues.pending_rows_of(_held) r order by r.task_id;
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
revoke execute on function queues.pending_rows_of(bigint[]) from public;
revoke execute on function queues.rescue_leases_at(timestamptz) from public;
revoke execute on function queues.rescue_lease_at(bigint, bigint[], timestamptz) from public;
revoke execute on function queues.rescue_due_leases_at(timestamptz) from public;

--! split: 410-ready-set-held-rows.sql
set local lock_timeout = '5s';
-- The ready set's per-task paths: a task its claim took out of the claim index gets its
-- row back (queues.hold_rows_of) before a release, a revocation, a cancel, an
-- interruption, a result or a unique replace holds it on its row; the read-only lease
-- checks and the steps' watch know a task held by its claim lease without a row.
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
  insert into queues.task_pending
    (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
     lease_count, released_count, max_attempts, failed_attempts, uncounted_count, interrupted_count,
     suspect_lease, group_key)
  select r.* from queues.pending_rows_of(_held) r order by r.task_id
  on conflict (task_id) do nothing;
  return _held;
end;
$$;
--! EndIncluded queues/held_rows.sql
--! Included queues/steps.sql
-- Server-side steps: db_function tasks run in the database, many per call.
--
--   queues.parse_envelope(result)            a step function's result envelope, read
--   queues.current_lease_expiry(task, lease)  read only: the expiry of the task's current lease
--   queues.is_current_lease(task, lease)     read only: is the lease still current
--   queues.current_leases(tasks, leases)     the same for many, one boolean each
--   queues.run_step(task, lease, fn, payload)   one step with its completion (the reference)
--   queues.complete_steps(...)               the completions and results of many steps
--   queues.run_steps(tasks, leases, fns, payloads, traceparents)   many steps in one call (the worker's)

-- Reads a function's result envelope (the worker's parseEnvelope, in SQL):
--   {status: text, payload?}                                   succeeded | status
--   {success: bool, error?, validation_failure_message?, payload?}   succeeded | error | invalid
--   {error: text, payload?} or {validation_failure_message: text, payload?}, without
--     success (the supervisors specification's `{"error": "missing_task_id"}`)   error | invalid
-- outcome is 'succeeded', 'status', 'error', 'invalid' or 'malformed' (message says why).
create or replace function queues.parse_envelope(_result jsonb, out outcome text, out message text)
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _extra text;
  _error text;
  _invalid text;
begin
  if _result is null or jsonb_typeof(_result) = 'null' then
    outcome := 'malformed'; message := 'malformed result envelope: expected an object, got null'; return;
  end if;
  if jsonb_typeof(_result) <> 'object' then
    outcome := 'malformed';
    message := format('malformed result envelope: expected an object, got %s',
                      case jsonb_typeof(_result) when 'array' then 'an array' else 'a ' || jsonb_typeof(_result) end);
    return;
  end if;
  if _result ? 'status' and _result ? 'success' then
    outcome := 'malformed'; message := 'malformed result envelope: has both "status" and "success"'; return;
  end if;
  if _result ? 'status' then
    select string_agg(k, ', ') into _extra from jsonb_object_keys(_result) k where k not in ('status', 'payload');
    if _extra is not null then
      outcome := 'malformed'; message := format('malformed result envelope: unrecognized key(s) %s', _extra); return;
    end if;
    if jsonb_typeof(_result -> 'status') <> 'string' or length(_result ->> 'status') not between 1 and 200 then
      outcome := 'malformed'; message := 'malformed result envelope: status must be a string of 1 to 200 characters'; return;
    end if;
    if _result ->> 'status' = 'succeeded' then outcome := 'succeeded'; else outcome := 'status'; message := _result ->> 'status'; end if;
    return;
  end if;
  if _result ? 'success' or _result ? 'error' or _result ? 'validation_failure_message' then
    select string_agg(k, ', ') into _extra from jsonb_object_keys(_result) k
     where k not in ('success', 'error', 'validation_failure_message', 'payload');
    if _extra is not null then
      outcome := 'malformed'; message := format('malformed result envelope: unrecognized key(s) %s', _extra); return;
    end if;
    if _result ? 'success' and jsonb_typeof(_result -> 'success') <> 'boolean' then
      outcome := 'malformed'; message := 'malformed result envelope: success must be a boolean'; return;
    end if;
    if coalesce(jsonb_typeof(_result -> 'error'), 'null') not in ('string', 'null')
       or coalesce(jsonb_typeof(_result -> 'validation_failure_message'), 'null') not in ('string', 'null')
       or length(_result ->> 'error') > 100000 or length(_result ->> 'validation_failure_message') > 100000 then
      outcome := 'malformed'; message := 'malformed result envelope: error and validation_failure_message must be strings'; return;
    end if;
    _error := nullif(btrim(coalesce(_result ->> 'error', '')), '');
    _invalid := nullif(btrim(coalesce(_result ->> 'validation_failure_message', '')), '');
    if _error is not null then outcome := 'error'; message := _result ->> 'error'; return; end if;
    if _invalid is not null then outcome := 'invalid'; message := _result ->> 'validation_failure_message'; return; end if;
    if not (_result ? 'success') then
      outcome := 'malformed';
      message := 'malformed result envelope: needs "status" or "success", or a non-empty error or validation_failure_message';
      return;
    end if;
    if not (_result ->> 'success')::boolean then
      outcome := 'malformed';
      message := 'malformed result envelope: success is false but neither error nor validation_failure_message is set';
      return;
    end if;
    outcome := 'succeeded';
    return;
  end if;
  outcome := 'malformed'; message := 'malformed result envelope: needs "status" or "success"';
end;
$$;

-- The expiry in force of _task_lease_id if it is still the current lease of _task_id, else
-- NULL (read only: no lock, no fact). The one definition of a task's current lease: the
-- lease queues.task_pending names (a claim sets it; a completion, a retry, a release or a
-- revocation ends it; a later claim replaces it), with the expiry heartbeats moved
-- (task_pending.available_at, which queues.extend_leases_at keeps; the claim's
-- lease's expires_at is only the first). The completions are fenced by the same row
-- (queues.complete_tasks, which also asks a keyed task to hold its key); a lease is live
-- while this is later than now (internal.start_provider_call_at).
-- A primary-key probe: the lease is compared in the select list, not the condition.
create or replace function queues.current_lease_expiry(_task_id bigint, _task_lease_id bigint)
  returns timestamptz
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select case when p.current_lease_id = _task_lease_id then p.available_at end
    from queues.task_pending p
   where p.task_id = _task_id
  union all
  -- The ready set (docs/design/hot-path.md): a task its claim took out of the claim index
  -- has no row; until it ends, the claim lease that names it holds it, until its expiry.
  select c.expires_at
    from queues.claim_lease c
   where c.task_lease_id = _task_lease_id
     and c.task_id >= _task_id
     and _task_id = any (c.task_ids)
     and not exists (select 1 from queues.task_pending p where p.task_id = _task_id)
     and not exists (select 1 from queues.task_end_of(_task_id) e)
  limit 1
$$;

-- Whether _task_lease_id is still the current lease of _task_id (read only: no lock, no
-- fact), expired or not (queues.current_lease_expiry). The worker's steps check it before
-- they run.
create or replace function queues.is_current_lease(_task_id bigint, _task_lease_id bigint)
  returns boolean
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.current_lease_expiry(_task_id, _task_lease_id) is not null
$$;


-- For each (_task_ids[i], _task_lease_ids[i]): whether the lease is still the task's
-- current one (read only: no lock, no fact), in input order. One primary-key probe per
-- task: the subquery names the primary key only (with the lease in its condition, the
-- planner scanned every leased row through the index of leased rows for each task).
create or replace function queues.current_leases(_task_ids bigint[], _task_lease_ids bigint[])
  returns boolean[]
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(array_agg(coalesce((select p.current_lease_id from queues.task_pending p
                                       where p.task_id = i.task_id) = i.task_lease_id,
                                      -- no row: held by its claim lease until it ends
                                      queues.current_lease_expiry(i.task_id, i.task_lease_id) is not null)
                            order by i.ord), '{}')
    from unnest(_task_ids, _task_lease_ids) with ordinality as i(task_id, task_lease_id, ord)
$$;

-- Runs one db_function step with its completion, in a subtransaction of their own:
-- internal.run_function(_function_name, _payload), then the completion fenced by the lease
-- (queues.settle_tasks), so the step's writes and its completion commit together or not
-- at all, exactly once. Outcomes as the worker's db_function processor: success and
-- status complete 'succeeded' (a status is returned as note); an error keeps the writes and
-- completes 'failed' with an error row; a validation failure keeps the writes and
-- completes 'validation_failed' with an error row (final: never retried, not a dead
-- letter); a malformed envelope or an exception rolls the step back, then completes
-- 'failed' with an error row. A step whose lease is no longer held is not run. A
-- well-formed envelope is kept as the step's result (queues.record_task_result) before its
-- completion. queues.run_steps runs many steps faster and falls back to this one.
-- Runs as the caller (security invoker): the step has the worker's privileges.
-- result: as queues.complete_tasks ('completed', 'retry_scheduled', 'lease_lost', ...) or
-- 'transient' (a serialization failure or deadlock rolled the step back and recorded
-- nothing: release the lease, it runs again).
create or replace function queues.run_step(
  _task_id bigint, _task_lease_id bigint, _function_name text, _payload jsonb,
  out result text, out outcome text, out error text, out note text
)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _env record;
  _raw jsonb;
begin
  begin
    -- A lease no longer held is not run.
    result := case when queues.is_current_lease(_task_id, _task_lease_id) then 'started' else 'lease_lost' end;
    if result = 'started' then
      _raw := internal.run_function(_function_name, _payload);
      select * into _env from queues.parse_envelope(_raw);
      if _env.outcome = 'malformed' then
        raise exception '%: %', _function_name, _env.message using errcode = 'QSTEP';
      end if;
      -- The function's envelope is kept as the run's result (queues.task_result), fenced by
      -- the lease, before the completion.
      perform queues.record_task_result(_task_id, _task_lease_id, _raw);
      case _env.outcome
        when 'succeeded' then outcome := 'succeeded';
        when 'status' then outcome := 'succeeded'; note := 'status ' || _env.message;
        when 'invalid' then
          -- Its own outcome: final, never retried, not a dead letter.
          outcome := 'validation_failed'; error := format('%s: validation failure: %s', _function_name, _env.message);
          note := _env.message;
        else outcome := 'failed'; error := format('%s: %s', _function_name, _env.message);
      end case;
      select s.result into result
        from queues.settle_tasks(array[_task_id], array[_task_lease_id], array[outcome],
                                 -- A validation failure is final: no retry.
                                 array[case when _env.outcome = 'invalid' then false end],
                                 case when error is null then '{}'::bigint[] else array[_task_id] end,
                                 case when error is null then '{}'::text[] else array[error] end,
                                 -- The step started with its call's transaction.
                                 array[(extract(epoch from now()) * 1000000)::bigint]) s;
      if result not in ('completed', 'retry_scheduled') then
        -- Refused (the lease was lost meanwhile): the step's writes must not commit.
        raise exception 'refused: %', result using errcode = 'QREFU';
      end if;
    end if;
  exception
    when sqlstate 'QREFU' then
      outcome := null; error := null; note := null;
    when serialization_failure or deadlock_detected then
      result := 'transient'; outcome := null; error := sqlerrm; note := null;
    when others then
      -- Rolled back; record why, in a subtransaction of its own.
      outcome := 'failed';
      error := case when sqlstate = 'QSTEP' then sqlerrm else format('%s raised: %s', _function_name, sqlerrm) end;
      note := null;
      select s.result into result
        from queues.settle_tasks(array[_task_id], array[_task_lease_id], array['failed'], null,
                                 array[_task_id], array[error], array[(extract(epoch from now()) * 1000000)::bigint]) s;
  end;
  if result = 'started' then
    result := 'lease_lost';
  end if;
end;
$$;

-- Completes steps that ran in the caller's transaction (queues.run_steps): as
-- queues.settle_tasks (fenced by lease, retries, error rows only for completions this call
-- made), and keeps _results[i] (the step's envelope; NULL for none) as the task's result
-- (queues.task_result) only if this call completed the task or scheduled its retry.
-- Returns one row per task, in input order, with the result of queues.complete_tasks.
-- Refuses: a lease id missing (22004), arrays of different lengths, a result that is not
-- a JSON object (22023), a result over queues.max_payload_bytes() (54000).
create or replace function queues.complete_steps(
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _outcomes       text[],
  _retries        boolean[],
  _error_task_ids bigint[],
  _error_messages text[],
  _results        jsonb[]
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _task_ids is null or _task_lease_ids is null or _results is null then
    raise exception 'task_ids, task_lease_ids and results must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> cardinality(_task_ids) or cardinality(_results) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids and results must have one element per task (% tasks, % lease ids, % results)',
      cardinality(_task_ids), cardinality(_task_lease_ids), cardinality(_results) using errcode = '22023';
  end if;
  if array_position(_task_lease_ids, null) is not null then
    raise exception 'task_lease_ids must not contain null: a step completes under its lease' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_results) r where jsonb_typeof(r) <> 'object') then
    raise exception 'results must be JSON objects' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_results) r where pg_column_size(r) > queues.max_payload_bytes()) then
    raise exception 'a result is over the limit of % bytes', queues.max_payload_bytes() using errcode = '54000';
  end if;
  return query
  with done as (
    select s.task_id, s.result, row_number() over () as ord
      from queues.settle_tasks(_task_ids, _task_lease_ids, _outcomes, _retries,
                               _error_task_ids, _error_messages,
                               -- The steps started with their call's transaction.
                               array_fill((extract(epoch from now()) * 1000000)::bigint, array[cardinality(_task_ids)])) s
  ),
  kept as (
    insert into queues.task_result (task_id, task_lease_id, result)
    select r.task_id, r.task_lease_id, r.result
      from unnest(_task_ids, _task_lease_ids, _results) as r(task_id, task_lease_id, result)
      join done d on d.task_id = r.task_id and d.result in ('completed', 'retry_scheduled')
     where r.result is not null
  )
  select d.task_id, d.result from done d order by d.ord;
end;
$$;

-- Runs db_function steps claimed by the caller, in input order, in one call, with the
-- guarantees of queues.run_step for each: its body runs once; its writes and its
-- completion commit together or not at all, exactly once; an error is recorded against its
-- own task and rolls back only its own step; a step whose lease is no longer held is not
-- run. The caller marks the steps started before the call (as the worker's start recorder
-- does for every task).
--
-- How (the cost per step is a subtransaction and a function call, not a statement of the
-- queue's):
--   1. queues.current_leases: the steps whose lease is held (the others: 'lease_lost',
--      not run). No lock is held on a step's task while it runs: a heartbeat, a release
--      at shutdown or a revocation is not held up by a long call.
--   2. Each step in a subtransaction of its own (a BEGIN ... EXCEPTION block): its
--      function (resolved and its EXECUTE privilege checked once per call, as
--      internal.run_function does; called through internal.call_runnable, whose static
--      calls keep their plans), then its envelope read. A raise, a malformed envelope
--      or a result over queues.max_payload_bytes() rolls back that step only, which is
--      completed 'failed' with the others; a serialization failure or a deadlock rolls it
--      back and records nothing ('transient'). Nothing runs a step twice.
--   3. One statement completes every step that ran and keeps its envelope as its result
--      (queues.complete_steps). If one of these completions is refused (another
--      transaction took the lease during the call: an expiry claimed, a revocation), the
--      writes of its step must not commit: the whole call is rolled back, that step is
--      answered as refused ('lease_lost'), and every other step that ran 'transient'
--      (nothing recorded; it runs again under a new lease).
-- A step can also change the tasks of the call itself (task code that completes or
-- releases a task). The call watches its own updates and deletes of queues.task_pending
-- and the transaction's completion calls (a task without a claim-index row ends without
-- touching one; queues.complete_tasks counts its calls in the transaction's setting
-- queues.completions), from the transaction's counts (pg_stat_get_xact_tuples_updated and
-- _deleted; every step is watched when track_counts is off): after a step that made any, each step runs only if
-- its lease is still current (else 'lease_lost'), and a step that changed its own task is
-- rolled back and completed 'failed', one that changed the task of a step before it (whose
-- completion is still to be written) is rolled back and answered 'transient' (it runs
-- again under a new lease, after that task's completion).
-- A step sees the writes of the steps before it in the call; it does not see their
-- completions (they are written at the end). The call is one transaction: now() is the
-- call's start for every step in it (the worker keeps a call to about 200 ms of steps).
-- Runs as the caller (security invoker): steps have the worker's privileges, not the owner's.
-- _traceparents (NULL when the worker traces nothing): per step, the W3C traceparent of
-- the step's span, set as queue.traceparent while the step runs (an empty string for a
-- NULL element), so that the tasks a step enqueues (a supervisor's child tasks) record
-- it as their trace context (sql/queues/trace.sql); reset to '' after the steps.
-- Returns one row per step, in input order: result as queues.complete_tasks ('completed',
-- 'retry_scheduled', 'lease_lost', ...) or 'transient' (the step was rolled back and
-- nothing recorded: release the lease, it runs again), with outcome, error, note.
create or replace function queues.run_steps(_task_ids bigint[], _task_lease_ids bigint[], _function_names text[],
                                            _payloads jsonb[], _traceparents text[] default null)
  returns table (task_id bigint, result text, outcome text, error text, note text)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _n integer;
  _held boolean[];
  -- Per step, in input order.
  _result text[];
  _outcome text[];
  _error text[];
  _note text[];
  _retry boolean[];
  -- The envelope to keep (null for none).
  _kept jsonb[];
  -- Ran (or could not run): completed by the final statement.
  _batched boolean[];
  -- Functions resolved in this call: name, name if it can run, or why it cannot.
  _names text[] := '{}';
  _calls text[] := '{}';
  _problems text[] := '{}';
  _oid regprocedure;
  _call text;
  _problem text;
  _i integer;
  _k integer;
  _m integer;
  _name text;
  _raw jsonb;
  _env record;
  _kind text;
  _ids bigint[];
  _settled text[];
  _max_bytes integer := queues.max_payload_bytes();
  -- The transaction's own updates and deletes of queues.task_pending (see above).
  _pending regclass := 'queues.task_pending'::regclass;
  _counted boolean := current_setting('track_counts')::boolean;
  _changes_at_start bigint;
  _changes bigint;
  _current boolean[];
begin
  if _task_ids is null or _task_lease_ids is null or _function_names is null or _payloads is null then
    raise exception 'task_ids, task_lease_ids, function_names and payloads must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> cardinality(_task_ids) or cardinality(_function_names) <> cardinality(_task_ids)
     or cardinality(_payloads) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids, function_names and payloads must have one element per task' using errcode = '22023';
  end if;
  if cardinality(_traceparents) <> cardinality(_task_ids) then
    raise exception 'traceparents must have one element per task (or be null)' using errcode = '22023';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 steps per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null then
    raise exception 'task_ids and task_lease_ids must not contain null' using errcode = '22004';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;
  _n := cardinality(_task_ids);
  if _n = 0 then
    return;
  end if;
  _held := queues.current_leases(_task_ids, _task_lease_ids);
  _result := array_fill(null::text, array[_n]);
  _outcome := _result;
  _error := _result;
  _note := _result;
  _retry := array_fill(null::boolean, array[_n]);
  _batched := array_fill(false, array[_n]);
  _kept := array_fill(null::jsonb, array[_n]);
  _changes_at_start := pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint;

  begin
    for _i in 1 .. _n loop
      if not _held[_i] then
        -- Not run.
        _result[_i] := 'lease_lost';
        continue;
      end if;
      -- A step before it changed pending rows: is this lease still current?
      if (not _counted
          or pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint <> _changes_at_start)
         and not queues.is_current_lease(_task_ids[_i], _task_lease_ids[_i]) then
        _result[_i] := 'lease_lost';
        continue;
      end if;
      _name := _function_names[_i];

      _k := array_position(_names, _name);
      if _k is null then
        -- Resolved as internal.run_function does, once per call.
        begin
          _oid := internal.resolve_runnable_function(_name);
          if not has_function_privilege(_oid, 'execute') then
            raise exception 'permission denied: % may not execute %', current_user, _name using errcode = '42501';
          end if;
          _call := _name;
          _problem := null;
        exception when others then
          _call := null;
          _problem := format('%s raised: %s', _name, sqlerrm);
        end;
        _names := _names || _name;
        _calls := _calls || _call;
        _problems := _problems || _problem;
        _k := cardinality(_names);
      end if;

      if _problems[_k] is not null then
        -- Cannot run (unknown, unregistered, not allowed): failed, nothing ran.
        _outcome[_i] := 'failed';
        _error[_i] := _problems[_k];
        _batched[_i] := true;
        continue;
      end if;

      _changes := pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint;
      if _traceparents is not null then
        -- The step's span: the trace context of what it enqueues.
        perform set_config('queue.traceparent', coalesce(_traceparents[_i], ''), true);
      end if;
      begin
        -- A static call per registered function (internal.build_call_runnable), planned
        -- once per session; the name was resolved and checked above.
        _raw := internal.call_runnable(_name, _payloads[_i]);
        if _raw = '{"success": true}'::jsonb then
          _kind := 'succeeded';
        else
          select * into _env from queues.parse_envelope(_raw);
          _kind := _env.outcome;
          if _kind = 'malformed' then
            raise exception '%: %', _name, _env.message using errcode = 'QSTEP';
          end if;
          if pg_column_size(_raw) > _max_bytes then
            raise exception 'result is % bytes, over the limit of % bytes', pg_column_size(_raw), _max_bytes
              using errcode = '54000';
          end if;
        end if;
        if not _counted
           or pg_stat_get_xact_tuples_updated(_pending) + pg_stat_get_xact_tuples_deleted(_pending)
            + coalesce(nullif(current_setting('queues.completions', true), ''), '0')::bigint <> _changes then
          -- The step updated or deleted pending rows: its own task, and those of the steps
          -- before it whose completions are still to be written, must be as they were.
          _current := queues.current_leases(
            array(select s.task_id from unnest(_task_ids, _batched) with ordinality as s(task_id, batched, ord)
                   where s.batched and s.ord < _i order by s.ord) || _task_ids[_i],
            array(select s.lease from unnest(_task_lease_ids, _batched) with ordinality as s(lease, batched, ord)
                   where s.batched and s.ord < _i order by s.ord) || _task_lease_ids[_i]);
          if not _current[cardinality(_current)] then
            raise exception '%: the step changed its own task (completed, failed or released it); the call that runs a step completes it',
              _name using errcode = 'QSTEP';
          end if;
          if false = any (_current) then
            raise exception '%: the step changed the task of a step that ran before it in the same call; it runs again after that completion',
              _name using errcode = 'QMEDL';
          end if;
        end if;
        -- Past every check: the step stands.
        case _kind
          when 'succeeded' then _outcome[_i] := 'succeeded';
          when 'status' then _outcome[_i] := 'succeeded'; _note[_i] := 'status ' || _env.message;
          when 'invalid' then
            _outcome[_i] := 'validation_failed'; _error[_i] := format('%s: validation failure: %s', _name, _env.message);
            _note[_i] := _env.message;
            -- A validation failure is final: no retry.
            _retry[_i] := false;
          else _outcome[_i] := 'failed'; _error[_i] := format('%s: %s', _name, _env.message);
        end case;
        _kept[_i] := _raw;
        _batched[_i] := true;
      exception
        when sqlstate 'QMEDL' then
          -- Rolled back, nothing recorded.
          _result[_i] := 'transient';
          _error[_i] := sqlerrm;
        when serialization_failure or deadlock_detected then
          -- Rolled back, nothing recorded: it runs again.
          _result[_i] := 'transient';
          _error[_i] := sqlerrm;
        when others then
          -- Rolled back: completed 'failed', with why.
          _outcome[_i] := 'failed';
          _error[_i] := case when sqlstate = 'QSTEP' then sqlerrm else format('%s raised: %s', _name, sqlerrm) end;
          _batched[_i] := true;
      end;
    end loop;
    if _traceparents is not null then
      perform set_config('queue.traceparent', '', true);
    end if;

    -- The completions (and kept envelopes) of every step that ran, in one statement.
    if true = any (_batched) then
      select array_agg(c.task_id order by c.ord), array_agg(c.result order by c.ord)
        into _ids, _settled
        from queues.complete_steps(
               array(select s.task_id from unnest(_task_ids, _batched) with ordinality as s(task_id, batched, ord)
                      where s.batched order by s.ord),
               array(select s.lease from unnest(_task_lease_ids, _batched) with ordinality as s(lease, batched, ord)
                      where s.batched order by s.ord),
               array(select s.outcome from unnest(_outcome, _batched) with ordinality as s(outcome, batched, ord)
                      where s.batched order by s.ord),
               array(select s.retry from unnest(_retry, _batched) with ordinality as s(retry, batched, ord)
                      where s.batched order by s.ord),
               array(select s.task_id from unnest(_task_ids, _error, _batched) with ordinality as s(task_id, error, batched, ord)
                      where s.batched and s.error is not null order by s.ord),
               array(select s.error from unnest(_error, _batched) with ordinality as s(error, batched, ord)
                      where s.batched and s.error is not null order by s.ord),
               array(select s.kept from unnest(_kept, _batched) with ordinality as s(kept, batched, ord)
                      where s.batched order by s.ord)
             ) with ordinality as c(task_id, result, ord);
      if exists (select 1 from unnest(_settled) r where r not in ('completed', 'retry_scheduled')) then
        -- A lease taken during the call: its step's writes must not commit.
        raise exception 'a completion of the call was refused' using errcode = 'QREFU';
      end if;
      _m := 1;
      for _i in 1 .. _n loop
        if _batched[_i] then
          if _ids[_m] <> _task_ids[_i] then
            raise exception 'completions out of order' using errcode = 'XX000';
          end if;
          _result[_i] := _settled[_m];
          _m := _m + 1;
        end if;
      end loop;
    end if;
  exception when sqlstate 'QREFU' then
    -- Everything above is rolled back, nothing recorded: the refused steps are answered as
    -- refused; every other step that ran runs again under a new lease.
    _m := 1;
    for _i in 1 .. _n loop
      if _batched[_i] then
        if _settled[_m] not in ('completed', 'retry_scheduled') then
          _result[_i] := _settled[_m];
          _error[_i] := null;
        else
          _result[_i] := 'transient';
          _error[_i] := 'a completion of another step of the call was refused (its lease was taken); the call was rolled back';
        end if;
        _outcome[_i] := null;
        _note[_i] := null;
        _m := _m + 1;
      end if;
    end loop;
  end;

  return query
  select s.task_id, s.result, s.outcome, s.error, s.note
    from unnest(_task_ids, _result, _outcome, _error, _note) with ordinality as s(task_id, result, outcome, error, note, ord)
   order by s.ord;
end;
$$;
--! EndIncluded queues/steps.sql
--! Included queues/start.sql
-- Start marks (queues.task_lease_started) for runs that outlast a heartbeat: a task's start
-- travels with its completion (queues.settle_tasks' _started_us, kept in task_completed
-- and task_attempt_failed), and nothing is written when a task starts. A run still going
-- at its worker's next heartbeat is marked then, once, with the time it started, so that
-- the readers of running work (public.worker_tasks' claimed and running, the task page)
-- see it as running within one heartbeat interval. Start marks play no part in the
-- suspect accounting (see queues.claim_tasks_at).
--
-- Marks each given lease that is still its task's current lease; returns the task ids
-- whose lease is not (taken over, released, or already settled: nothing to mark).
-- _started_us: parallel, when each run started, in microseconds since the epoch (null:
-- now).
create or replace function queues.mark_started(
  _task_ids       bigint[],
  _task_lease_ids bigint[],
  _started_us     bigint[] default null
) returns setof bigint
  language plpgsql volatile
  rows 1
  security definer
  set plan_cache_mode = force_generic_plan
  -- Every row it reads is found by key (see queues.claim_tasks_at's lease_map).
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  if _started_us is not null and cardinality(_started_us) <> cardinality(_task_ids) then
    raise exception 'started_us must have one element per lease (% leases, % start times)',
      cardinality(_task_ids), cardinality(_started_us) using errcode = '22023';
  end if;
  -- Each pair probed by primary key (a scalar subquery: no join of the input to
  -- task_pending planned from its statistics).
  return query
  with input as (
    select i.task_id, i.task_lease_id, i.started_us,
           coalesce((select true from queues.task_pending p
                      where p.task_id = i.task_id and p.current_lease_id = i.task_lease_id),
                    -- no row: held by the claim lease that names it until it ends (the
                    -- ready set, queues.current_lease_expiry)
                    (select true from queues.claim_lease c
                      where c.task_lease_id = i.task_lease_id and c.task_id >= i.task_id
                        and i.task_id = any (c.task_ids)
                        and (select true from queues.task_pending p where p.task_id = i.task_id) is null
                        and not exists (select 1 from queues.task_end_of(i.task_id) e)
                      limit 1),
                    false) as held
      from unnest(_task_ids, _task_lease_ids,
                  coalesce(_started_us, array_fill(null::bigint, array[cardinality(_task_ids)])))
           as i(task_id, task_lease_id, started_us)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id, started_at)
    select i.task_id, i.task_lease_id, coalesce(to_timestamp(i.started_us / 1000000.0), now())
      from input i where i.held
    on conflict do nothing
  )
  select i.task_id from input i where not i.held;
end;
$$;
--! EndIncluded queues/start.sql
--! Included queues/result.sql
-- Task results: what a run produced (the seed's `result jsonb`), kept as an append-only
-- fact, queues.task_result, one row per (task, lease). Written by the worker in the
-- transaction that completes the task, fenced like completion: only the task's current
-- lease may record, so a worker whose lease was taken over records nothing.
--
--   queues.assert_current_lease(task_id, lease_id)   helper: locks the pending row or raises
--   queues.record_task_result(task_id, lease_id, result)   worker
--   queues.list_task_results(task_id)                 app, api: every result, oldest first

-- Locks the task's pending row when _task_lease_id is its current lease; otherwise raises
-- 55000 with the queue's lease-loss marker (schema queues, constraint task_lease_current:
-- re-claimed, revoked, released or completed) or 23503 (no such task).
-- Holding the row lock keeps a concurrent revocation or claim out until the caller's
-- transaction ends. The task's resource-key lock is taken first, as completion,
-- heartbeats and revocation take theirs (queues.lock_resource_keys): a row lock taken
-- before it deadlocks with a heartbeat that holds the key and waits for the row.
create or replace function queues.assert_current_lease(_task_id bigint, _task_lease_id bigint)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  if _task_lease_id is null then
    raise exception 'task_lease_id must not be null' using errcode = '22004';
  end if;
  perform queues.lock_resource_keys(array[_task_id]);
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(array[_task_id]);
  perform 1 from queues.task_pending p
   where p.task_id = _task_id and p.current_lease_id = _task_lease_id
     for update;
  if not found then
    if not exists (select 1 from queues.task t where t.task_id = _task_id) then
      raise exception 'task % does not exist', _task_id using errcode = '23503';
    end if;
    raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', schema = 'queues', constraint = 'task_lease_current',
            hint = 'Another worker claimed the task after this lease expired.';
  end if;
end;
$$;

-- Records _result for the run holding _task_lease_id. Call it in the transaction that
-- completes the task. Refuses: a lease that is not current (55000), a result that is not
-- a JSON object (22023) or over queues.max_payload_bytes() (54000), a second result for
-- the same lease (23505).
create or replace function queues.record_task_result(_task_id bigint, _task_lease_id bigint, _result jsonb)
  returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _result is null then
    raise exception 'result must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_result) <> 'object' then
    raise exception 'result must be a JSON object, got %', jsonb_typeof(_result) using errcode = '22023';
  end if;
  if pg_column_size(_result) > queues.max_payload_bytes() then
    raise exception 'result is % bytes, over the limit of % bytes', pg_column_size(_result), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  perform queues.assert_current_lease(_task_id, _task_lease_id);
  insert into queues.task_result (task_id, task_lease_id, result) values (_task_id, _task_lease_id, _result);
end;
$$;

-- Every result recorded for a task, oldest first (one per run that recorded one).
create or replace function queues.list_task_results(_task_id bigint)
  returns table (task_lease_id bigint, result jsonb, recorded_at timestamptz)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select r.task_lease_id, r.result, r.recorded_at
    from queues.task_result r
   where r.task_id = _task_id
   order by r.task_lease_id
$$;

-- Grants for the functions above (kept with them so this concern stays in one file;
-- listed in sql/database-user-grants.json).
revoke execute on function
  queues.assert_current_lease(bigint, bigint),
  queues.record_task_result(bigint, bigint, jsonb),
  queues.list_task_results(bigint)
from public;
grant execute on function queues.record_task_result(bigint, bigint, jsonb) to :DATABASE_WORKER;
grant execute on function queues.list_task_results(bigint) to :DATABASE_APP, :DATABASE_API;
--! EndIncluded queues/result.sql
--! Included queues/interrupt.sql
-- queues.interrupt_task: a task's run was cut short by a transient error (a deadlock,
-- a serialization failure, a lost connection): nothing of the run was recorded, and
-- the task should run again. Unlike a release, an interruption counts: it is recorded
-- with its message (queues.task_interruption, not a task error), the task runs again
-- after a backoff (1 s, 2 s, 4 s, ... times internal.backoff's backoff_scale), and the
-- task whose runs keep being interrupted is abandoned with the last message as its error
-- after _max_interruptions (default 5), so a step that always deadlocks ends as a dead
-- letter instead of looping forever.
--
-- Fenced: only the task's current lease, while it holds the task's resource key, may
-- interrupt. Returns
--   'retry_scheduled'  the lease ended; the task runs again at the retry time
--   'abandoned'        this was interruption number _max_interruptions: completed 'abandoned'
--   'lease_lost'       the lease is no longer current (nothing changed)
--   'unknown_task'     no such task

create or replace function queues.interrupt_task_at(
  _now                timestamptz,
  _task_id            bigint,
  _task_lease_id      bigint,
  _error_message      text,
  _max_interruptions  integer
) returns text
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending queues.task_pending;
  _message text := _error_message;
  _retry_at timestamptz;
begin
  if _now is null or _task_id is null or _task_lease_id is null then
    raise exception 'now, task_id and task_lease_id must not be null' using errcode = '22004';
  end if;
  if _message is null or btrim(_message) = '' then
    raise exception 'error_message must not be empty' using errcode = '22004';
  end if;
  if _max_interruptions is null or _max_interruptions not between 1 and 100 then
    raise exception 'max_interruptions must be between 1 and 100, got %', coalesce(_max_interruptions::text, 'null')
      using errcode = '22023';
  end if;
  if length(_message) > queues.max_error_message_length() then
    _message := left(_message, queues.max_error_message_length()) || ' [truncated]';
  end if;

  perform queues.lock_resource_keys(array[_task_id]);
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(array[_task_id]);
  select p.* into _pending
    from queues.task_pending p
   where p.task_id = _task_id
     and p.current_lease_id = _task_lease_id
     and (p.resource_key is null
          or exists (select 1 from queues.resource_lease r
                      where r.resource_key = p.resource_key and r.task_id = p.task_id))
     for update;
  if not found then
    if not exists (select 1 from queues.task t where t.task_id = _task_id) then
      return 'unknown_task';
    end if;
    return 'lease_lost';
  end if;

  delete from queues.resource_lease r
   where _pending.resource_key is not null and r.resource_key = _pending.resource_key and r.task_id = _task_id;

  if _pending.interrupted_count + 1 >= _max_interruptions then
    insert into queues.error (task_id, task_lease_id, error_message)
    values (_task_id, _task_lease_id,
            format('abandoned: %s transient errors (max %s); the last: %s',
                   _pending.interrupted_count + 1, _max_interruptions, _message));
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
    values (_task_id, _task_lease_id, _now, 'abandoned', _pending.task_type);
    delete from queues.task_pending p where p.task_id = _task_id;
    return 'abandoned';
  end if;

  _retry_at := _now + internal.backoff(_pending.interrupted_count, 300) / 5;
  insert into queues.task_lease_release (task_id, task_lease_id, released_at) values (_task_id, _task_lease_id, _now)
  on conflict do nothing;
  insert into queues.task_interruption (task_lease_id, task_id, interrupted_at, retry_at, error_message)
  values (_task_lease_id, _task_id, _now, _retry_at, _message);
  -- Counted as a release (it is not an expired lease) and as an interruption.
  update queues.task_pending p
     set available_at = _retry_at,
         current_lease_id = null,
         released_count = p.released_count + 1,
         interrupted_count = p.interrupted_count + 1
   where p.task_id = _task_id;
  return 'retry_scheduled';
end;
$$;

create or replace function queues.interrupt_task(
  _task_id           bigint,
  _task_lease_id     bigint,
  _error_message     text,
  _max_interruptions integer default null
) returns text
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.interrupt_task_at(now(), _task_id, _task_lease_id, _error_message, coalesce(_max_interruptions, 5))
$$;
--! EndIncluded queues/interrupt.sql
--! Included queues/cancel.sql
-- Cancelling tasks, pending or running. A cancel is one transaction that ends the task:
-- queues.task_completed with outcome 'cancelled' (no lease: nobody's run completed it),
-- queues.task_cancelled with the reason, the claim-index row deleted and the resource key
-- freed; a task under a live lease also gets a queues.task_lease_revocation fact
-- ('cancelled: <reason>') for that lease.
--
-- The worker running a cancelled task learns it at its next heartbeat: the lease is
-- missing from queues.extend_leases' answer (the task is no longer pending), the worker
-- asks queues.cancelled_tasks why, aborts the processor's signal with the reason, and
-- records nothing (its completion would be refused: lease_lost). A completion and a
-- cancel of one task take turns on its claim-index row: whichever commits first wins, and
-- the other finds the task completed ('already_completed', or lease_lost).
--
-- A cancelled channel task is, to its process's supervisor, a task the queue gave up on
-- (internal.queue_gave_up_message: "... (cancelled): <reason>"), as an abandoned one.

-- Validates a list of task ids for a change made to each (cancel, run now, redrive):
-- 1 to 1000 ids, none null (22004), none repeated (22023).
create or replace function queues.assert_task_ids(_task_ids bigint[])
  returns void
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) not between 1 and 1000 then
    raise exception 'task_ids must name 1 to 1000 tasks, got %', cardinality(_task_ids) using errcode = '22023';
  end if;
  if array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain null' using errcode = '22004';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;
end;
$$;

-- Cancels the given tasks at _now. Rows in input order, one per task:
--   cancelled          it was pending (scheduled, ready, retrying, or leased: running)
--   already_completed  it had ended before (or a completion committed first)
--   unknown_task       no such task
-- `was_running` is true for a task cancelled under a live lease (its worker is told at its
-- next heartbeat). Owner only: owner SQL (a supervisor, a migration) calls it directly;
-- apps call queues.cancel_tasks, the REST API admin.cancel_tasks.
--
-- The answers for the tasks it did not lock are read by a statement of their own after the
-- locks (see admin.cancel_tasks_at): a completion this call waited for is seen.
create or replace function queues.cancel_tasks_at(_now timestamptz, _task_ids bigint[], _reason text)
  returns table (task_id bigint, result text, was_running boolean)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _cancelled bigint[] := '{}';
  _running bigint[] := '{}';
  _todo bigint[] := _task_ids;
  _c bigint[];
  _r bigint[];
  _pass integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform queues.assert_task_ids(_task_ids);
  if _reason is not null and length(_reason) > 500 then
    raise exception 'reason must be at most 500 characters, got %', length(_reason) using errcode = '22023';
  end if;
  -- Same lock order as the claim, the heartbeat and the completion (resource keys first),
  -- then the pending rows in task id order, as a completion batch, a lease release and a
  -- revocation lock theirs: none of them can deadlock with a cancel. A completion in
  -- flight holds its row: the cancel waits for it, then finds the task gone
  -- (already_completed).
  perform queues.lock_resource_keys(_task_ids);
  -- A task its claim took out of the claim index gets its row back first
  -- (queues.hold_rows_of). A claim in flight that takes a task out holds its row: the
  -- cancel waits for it, finds no row, and gives the task its row back in a second pass.
  for _pass in 1 .. 2 loop
    perform queues.hold_rows_of(_todo);
    with locked as (
      select p.task_id, p.task_type, p.current_lease_id,
             (p.current_lease_id is not null and p.available_at > _now) as held
        from queues.task_pending p
       where p.task_id = any (_todo)
       order by p.task_id
         for update
    ),
    completed as (
      insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
      select l.task_id, null, _now, 'cancelled', l.task_type from locked l
      returning task_id
    ),
    reasons as (
      insert into queues.task_cancelled (task_id, reason, cancelled_at)
      select l.task_id, coalesce(_reason, ''), _now from locked l
    ),
    revoked as (
      insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
      select l.task_id, l.current_lease_id, _now, left('cancelled: ' || coalesce(nullif(_reason, ''), 'no reason given'), 520)
        from locked l where l.held
      on conflict do nothing
    ),
    removed as (
      delete from queues.task_pending p where p.task_id = any (array(select l.task_id from locked l))
    ),
    key_freed as (
      delete from queues.resource_lease k where k.task_id = any (array(select l.task_id from locked l))
    )
    select coalesce((select array_agg(c.task_id) from completed c), '{}'),
           coalesce(array_agg(l.task_id) filter (where l.held), '{}')
      into _c, _r
      from locked l;
    _cancelled := _cancelled || _c;
    _running := _running || _r;
    -- The tasks still without an end (a statement after the locks: what a claim that held
    -- a row committed is seen).
    _todo := array(select t.task_id from queues.task t
                    where t.task_id = any (_todo) and t.task_id <> all (_c)
                      and not exists (select 1 from queues.task_end_of(t.task_id) e));
    exit when cardinality(_todo) = 0;
  end loop;

  return query
  select i.task_id,
         case when c.task_id is not null then 'cancelled'
              when coalesce((select true from queues.task_end_of(i.task_id) x limit 1), false) then 'already_completed'
              else 'unknown_task' end,
         r.task_id is not null
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join unnest(_cancelled) as c(task_id) on c.task_id = i.task_id
    left join unnest(_running) as r(task_id) on r.task_id = i.task_id
   order by i.n;
end;
$$;

-- Cancels tasks for an app (and owner SQL): queues.cancel_tasks_at at now(). Refuses, with
-- 42501 and nothing written, a worker-only task type (queues.internal_task_type: channel
-- tasks and steps belong to their processes) unless the session is the owner's, as
-- queues.enqueue does.
create or replace function queues.cancel_tasks(_task_ids bigint[], _reason text default null)
  returns table (task_id bigint, result text, was_running boolean)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _internal bigint;
begin
  if not queues.is_owner_session() then
    select t.task_id into _internal
      from queues.task t
     where t.task_id = any (_task_ids) and queues.is_internal_task_type(t.task_type)
     order by t.task_id limit 1;
    if found then
      raise exception 'task % is of a worker-only task type; only its process may cancel it', _internal
        using errcode = '42501';
    end if;
  end if;
  return query select * from queues.cancel_tasks_at(now(), _task_ids, _reason);
end;
$$;

-- For a worker whose heartbeat found leases lost: which of these tasks were cancelled,
-- and why (queues.task_cancelled). At most 1000 ids; a task not cancelled is left out.
create or replace function queues.cancelled_tasks(_task_ids bigint[])
  returns table (task_id bigint, reason text, cancelled_at timestamptz)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _task_ids is null then
    raise exception 'task_ids must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 task ids per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  -- A primary-key probe per id (= any of an array).
  return query
  select c.task_id, c.reason, c.cancelled_at
    from queues.task_cancelled c
   where c.task_id = any (_task_ids)
   order by c.task_id;
end;
$$;
--! EndIncluded queues/cancel.sql
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
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  -- A claim that holds the row commits first; the row is then read as it left it.
  select p.available_at, p.current_lease_id is null and p.lease_count = 0 as untaken into _pending
    from queues.task_pending p
   where p.task_id = _task_id
     for update;
  if not found then
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
-- throttle is active (the common case: '{}' and '{}'). Planned once per connection with
-- no sequential scan, so that a plan made while the table was empty never reads the
-- whole table later.
create or replace function queues.throttled_keys_at(_now timestamptz)
  returns table (task_types text[], group_keys text[])
  language sql stable
  rows 1
  set search_path = pg_catalog, pg_temp
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
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
--! Included queues/unique.sql
-- Unique tasks: an enqueue that names a unique key, and what it does when a task with
-- that key is still pending (not completed; scheduled, ready, retrying or running).
--
--   policy     a task with the key is pending, no live lease     ... under a live lease
--   skip       nothing written; answers that task's id            the same
--   replace    a new task (payload, time, priority, ... as given)  a new task; the running
--              replaces it: the old one is completed 'cancelled'  one runs on (its worker
--              with the reason 'replaced by task N'                completes it)
--   debounce   as replace, the new task due at                     as replace
--              coalesce(scheduled_at, now) + period
--
-- With no pending task of the key, each policy enqueues a new task ('inserted'); debounce
-- schedules it at coalesce(scheduled_at, now) + period, so a burst of enqueues within the
-- period leaves one task, due one period after the last, with the last payload. Under a
-- live lease replace and debounce enqueue a new task rather than skip: the running task
-- started with the old payload, and the newest payload must still be processed.
--
-- The rest of the enqueue (timeout_ms, group_key, depends_on, as queues.enqueue takes
-- them) belongs to the task it describes. skip keeps the pending task as it is (its own
-- payload, schedule, timeout, group key and dependencies): nothing given is written, but
-- all of it is checked. replace and debounce enqueue the new task with exactly what is
-- given, nothing carried over from the task it replaces: its payload, schedule, timeout,
-- group key and dependencies (none given: none; a dependency on the task being replaced
-- is refused, 22023, as it would fail the moment the replaced task ends). A pending task
-- that other tasks wait for (depends_on) is not replaced: the enqueue is refused (55000,
-- nothing written), since its dependents would fail when it ends cancelled.
--
-- Facts and structures: the fact queues.task_unique says which task was enqueued with
-- which key (one row per unique task, written with the task); a replaced task ends with
-- the facts a cancel writes (queues.task_completed 'cancelled', queues.task_cancelled with
-- the reason). The derived
-- queues.task_unique_key holds, per key, the newest task enqueued with it; its row is
-- what concurrent enqueuers of one key lock (FOR UPDATE), one after another, so 16 at
-- once leave one task. A row whose task is no longer pending counts as no row; such rows
-- (and the facts of tasks whose history partitions were dropped) are removed by
-- queues.prune_task_unique_keys, which the owner runs (it is not scheduled: until it
-- runs, the table keeps one row per key ever used), and the whole table is rebuilt from
-- the facts by queues.rebuild_task_unique_key. An enqueue without a key never reads it: the
-- plain queues.enqueue is unchanged.
--
-- Under REPEATABLE READ or SERIALIZABLE, an enqueuer whose snapshot misses another's
-- task of the same key gets a serialization failure (40001): retry the transaction.

-- The core (no grants). Checks its own arguments (22004 for a NULL key, 22023 for an
-- empty or long key, an unknown policy, a period with a policy other than debounce, a
-- negative or infinite period) and then every check of queues.enqueue_task (of the
-- timeout, group key and dependencies too), before it reads or writes anything, so bad
-- input is refused even when the policy would skip.
-- Returns the task id (the new task's, or the pending one's for 'skipped'), the outcome
-- ('inserted', 'skipped', 'replaced') and the id of the task replaced.
create or replace function queues.enqueue_unique_task(
  _task_type     text,
  _payload       jsonb,
  _unique_key    text,
  _unique_policy text,
  _unique_period interval,
  _scheduled_at  timestamptz,
  _priority      integer,
  _resource_key  text,
  _max_attempts  integer,
  _public        boolean default false,
  _notify        boolean default true,
  _depends_on    bigint[] default null,
  _group_key     text default null,
  _timeout_ms    integer default null,
  out task_id          bigint,
  out outcome          text,
  out replaced_task_id bigint
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  _policy text := coalesce(_unique_policy, 'skip');
  _at timestamptz := _scheduled_at;
  _old bigint;
  _held boolean;
begin
  if _public and queues.is_internal_task_type(_task_type) then
    perform queues.assert_may_enqueue(_task_type);
  end if;
  if _unique_key is null then
    raise exception 'unique_key must not be null' using errcode = '22004';
  end if;
  if length(_unique_key) not between 1 and 200 then
    raise exception 'unique_key must be 1 to 200 characters, got %', length(_unique_key) using errcode = '22023';
  end if;
  if _policy not in ('skip', 'replace', 'debounce') then
    raise exception 'unique_policy must be ''skip'', ''replace'' or ''debounce'', got %', quote_literal(left(_policy, 50))
      using errcode = '22023';
  end if;
  if _policy = 'debounce' then
    if _unique_period is null then
      raise exception 'unique_period must not be null with the debounce policy' using errcode = '22004';
    end if;
    if not isfinite(_unique_period) or _unique_period < interval '0' then
      raise exception 'unique_period must be a finite, non-negative interval, got %', _unique_period
        using errcode = '22023';
    end if;
    if not isfinite(_scheduled_at) then
      raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
    end if;
    _at := coalesce(_scheduled_at, now()) + _unique_period;
  elsif _unique_period is not null then
    raise exception 'unique_period applies only to the debounce policy, not %', quote_literal(_policy)
      using errcode = '22023';
  end if;
  -- Every check of a plain enqueue (the dependencies' too), writing nothing.
  perform queues.enqueue_task(_task_type, _payload, _at, _priority, _resource_key, _max_attempts,
                              _public, false, true, _depends_on, _group_key, _timeout_ms);

  -- The key's row, locked: a concurrent enqueuer of the key waits here until this
  -- transaction ends, then sees its task. The insert of a new key waits for a concurrent
  -- insert of the same key to commit and then does nothing; the loop then locks that row.
  loop
    select k.task_id into _old from queues.task_unique_key k where k.unique_key = _unique_key for update;
    exit when found;
    insert into queues.task_unique_key (unique_key, task_id) values (_unique_key, null) on conflict do nothing;
    exit when found;
  end loop;
  if _old is not null then
    -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
    perform queues.hold_rows_of(array[_old]);
    select (p.current_lease_id is not null and p.available_at > now()) into _held
      from queues.task_pending p where p.task_id = _old;
    if not found then
      _old := null;
    end if;
  end if;

  if _old is not null and _policy = 'skip' then
    task_id := _old;
    outcome := 'skipped';
    return;
  end if;
  -- (A running task is not replaced: the new task waits for it, as any other would.)
  if _old is not null and not _held and _old = any (_depends_on) then
    raise exception 'depends_on names task %, which this enqueue replaces (unique key %)', _old, quote_literal(_unique_key)
      using errcode = '22023';
  end if;

  task_id := queues.enqueue_task(_task_type, _payload, _at, _priority, _resource_key, _max_attempts,
                                 _public, _notify, false, _depends_on, _group_key, _timeout_ms);
  insert into queues.task_unique (task_id, unique_key) values (task_id, _unique_key);
  update queues.task_unique_key k set task_id = enqueue_unique_task.task_id where k.unique_key = _unique_key;
  outcome := 'inserted';
  if _old is not null and not _held
     and queues.supersede_task(_old, format('replaced by task %s (unique key %s)', task_id, quote_literal(_unique_key))) then
    outcome := 'replaced';
    replaced_task_id := _old;
  end if;
end;
$$;

-- Completes a pending task no worker holds as 'cancelled' with _reason (as
-- admin.cancel_tasks does: queues.task_completed, queues.task_cancelled, out of the claim
-- index, its resource key freed); true when it did. False when a live lease holds it
-- (its worker completes it) or it is no longer pending. Refuses (55000) a task that a
-- pending task depends on. Takes the claim's lock order
-- (resource key, then the pending row), so a claim that took the row first wins.
create or replace function queues.supersede_task(_task_id bigint, _reason text)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p record;
  _dependent bigint;
begin
  perform queues.lock_resource_keys(array[_task_id]);
  perform queues.hold_rows_of(array[_task_id]);
  select p.task_type, (p.current_lease_id is not null and p.available_at > now()) as held into _p
    from queues.task_pending p where p.task_id = _task_id for update;
  if not found or _p.held then
    return false;
  end if;
  -- Replacing a task that others wait for would fail them (a dependency that ended
  -- cancelled): refused, before this transaction's writes commit (its enqueue rolls back).
  -- A dependent enqueued concurrently holds the row FOR KEY SHARE until it commits, so
  -- the lock above waited for it and this statement sees its edge.
  select d.task_id into _dependent
    from queues.task_dependency d
    join queues.task_pending w on w.task_id = d.task_id
   where d.depends_on_task_id = _task_id and d.task_id > _task_id
   order by d.task_id limit 1;
  if found then
    raise exception 'task % cannot be replaced: task % waits for it', _task_id, _dependent
      using errcode = '55000',
            hint = 'Use the skip policy, or cancel the waiting tasks first.';
  end if;
  insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
  values (_task_id, null, now(), 'cancelled', _p.task_type);
  insert into queues.task_cancelled (task_id, reason, cancelled_at) values (_task_id, left(_reason, 500), now());
  delete from queues.task_pending p where p.task_id = _task_id;
  delete from queues.resource_lease k where k.task_id = _task_id;
  return true;
end;
$$;

-- Enqueue a unique task for an app or the API: queues.enqueue's arguments plus the key,
-- the policy (NULL: 'skip') and the debounce period; _depends_on, _group_key and
-- _timeout_ms as in queues.enqueue (see the top of the file for what each policy does
-- with them). One row: task_id, outcome
-- ('inserted', 'skipped', 'replaced'), replaced_task_id. Refuses internal task types
-- (42501), as queues.enqueue. Sends the wake-up in its own transaction (a caller on a
-- pool calls it as a statement of its own).
create or replace function queues.enqueue_unique(
  _task_type     text,
  _payload       jsonb,
  _unique_key    text,
  _unique_policy text default null,
  _unique_period interval default null,
  _scheduled_at  timestamptz default null,
  _priority      integer default null,
  _resource_key  text default null,
  _max_attempts  integer default null,
  _depends_on    bigint[] default null,
  _group_key     text default null,
  _timeout_ms    integer default null
) returns table (task_id bigint, outcome text, replaced_task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select u.task_id, u.outcome, u.replaced_task_id
    from queues.enqueue_unique_task(_task_type, _payload, _unique_key, _unique_policy, _unique_period,
                                    _scheduled_at, _priority, _resource_key, _max_attempts, true, true,
                                    _depends_on, _group_key, _timeout_ms) u
$$;

-- The owner's SQL's unique enqueue (no grant), as queues.enqueue_internal: any task type.
create or replace function queues.enqueue_unique_internal(
  _task_type     text,
  _payload       jsonb,
  _unique_key    text,
  _unique_policy text default null,
  _unique_period interval default null,
  _scheduled_at  timestamptz default null,
  _priority      integer default null,
  _resource_key  text default null,
  _max_attempts  integer default null,
  _depends_on    bigint[] default null,
  _group_key     text default null,
  _timeout_ms    integer default null
) returns table (task_id bigint, outcome text, replaced_task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select u.task_id, u.outcome, u.replaced_task_id
    from queues.enqueue_unique_task(_task_type, _payload, _unique_key, _unique_policy, _unique_period,
                                    _scheduled_at, _priority, _resource_key, _max_attempts, false, true,
                                    _depends_on, _group_key, _timeout_ms) u
$$;

-- A batch of queues.enqueue_tasks in which some element names a unique key (or a policy
-- or period), enqueued element by element in input order, so that a key met twice in one
-- batch sees its first task. Returns the task ids in input order (the pending task's for
-- a skipped element). All or nothing; the first bad element raises, named tasks[i], with
-- its own SQLSTATE (one exception block around the loop, not one per element: a
-- subtransaction per element would overflow the backend's cache of 64 past a batch of
-- 64). One wake-up at the end if any of the tasks is due within a minute.
create or replace function queues.enqueue_tasks_one_by_one(_tasks jsonb, _public boolean)
  returns table (task_id bigint)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _idx bigint := -1;
  _e jsonb;
  _id bigint;
  _ids bigint[] := '{}';
  _state text;
  _message text;
  _hint text;
  _fields constant text[] :=
    '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,unique_key,unique_policy,unique_period,depends_on,group_key,timeout_ms}';
  _deps bigint[];
begin
  begin
    for _e in select x.value from jsonb_array_elements(_tasks) x loop
      _idx := _idx + 1;
      if jsonb_typeof(_e) <> 'object' then
        raise exception 'must be a JSON object, got %', jsonb_typeof(_e) using errcode = '22023';
      end if;
      if _e - _fields <> '{}' then
        raise exception 'unknown field(s) %',
          left((select string_agg(k, ', ') from jsonb_object_keys(_e - _fields) k), 200) using errcode = '22023';
      end if;
      if jsonb_typeof(_e -> 'depends_on') not in ('array', 'null')
         or jsonb_path_exists(_e -> 'depends_on',
              'lax $[*] ? (!((@.type() == "number" && @ == @.floor()) || (@.type() == "string" && @ like_regex "^[0-9]{1,18}$")))') then
        raise exception 'depends_on must be an array of task ids' using errcode = '22023';
      end if;
      _deps := case when jsonb_typeof(_e -> 'depends_on') = 'array'
                    then array(select (d #>> '{}')::bigint from jsonb_array_elements(_e -> 'depends_on') d) end;
      if _deps && _ids then
        raise exception 'depends_on names task %, enqueued by the same call',
          (select min(d) from unnest(_deps) d where d = any (_ids))
          using errcode = '22023',
                hint = 'A task can depend only on tasks that exist before its enqueue, so dependencies never form a cycle.';
      end if;
      if _e ->> 'unique_key' is null then
        if _e ->> 'unique_policy' is not null or _e ->> 'unique_period' is not null then
          raise exception 'unique_key must not be null when unique_policy or unique_period is given'
            using errcode = '22004';
        end if;
        _id := queues.enqueue_task(_e ->> 'task_type', _e -> 'payload', (_e ->> 'scheduled_at')::timestamptz,
                                   (_e ->> 'priority')::integer, _e ->> 'resource_key',
                                   (_e ->> 'max_attempts')::integer, _public, false, false, _deps,
                                   _e ->> 'group_key', (_e ->> 'timeout_ms')::integer);
      else
        select u.task_id into _id
          from queues.enqueue_unique_task(_e ->> 'task_type', _e -> 'payload', _e ->> 'unique_key',
                                          _e ->> 'unique_policy', (_e ->> 'unique_period')::interval,
                                          (_e ->> 'scheduled_at')::timestamptz, (_e ->> 'priority')::integer,
                                          _e ->> 'resource_key', (_e ->> 'max_attempts')::integer,
                                          _public, false, _deps, _e ->> 'group_key', (_e ->> 'timeout_ms')::integer) u;
      end if;
      _ids := _ids || _id;
    end loop;
  exception when others then
    get stacked diagnostics _state = returned_sqlstate, _message = message_text, _hint = pg_exception_hint;
    raise exception 'tasks[%]: %', _idx, _message using errcode = _state, hint = _hint;
  end;
  if exists (select 1 from queues.task_pending p
              where p.task_id = any (_ids) and p.scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select u.id from unnest(_ids) with ordinality u(id, n) order by u.n;
end;
$$;

-- Removes up to _limit rows of queues.task_unique_key whose task is no longer pending
-- (rows an enqueuer holds are passed over), and the facts queues.task_unique of tasks
-- older than the oldest task kept (their history partitions were dropped); returns how
-- many key rows it removed. Owner only. Such key rows change nothing (a key whose task
-- completed is free), so this only keeps the table to about one row per pending unique
-- task.
create or replace function queues.prune_task_unique_keys(_limit integer default 10000)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n integer;
begin
  delete from queues.task_unique u
   where u.task_id < coalesce((select min(t.task_id) from queues.task t), 9223372036854775807);
  with stale as (
    select k.unique_key from queues.task_unique_key k
     where k.task_id is not null
       and not exists (select 1 from queues.task_pending p where p.task_id = k.task_id)
     limit coalesce(_limit, 10000)
       for update skip locked
  )
  delete from queues.task_unique_key k using stale s where k.unique_key = s.unique_key;
  get diagnostics _n = row_count;
  return _n;
end;
$$;

-- Rebuilds queues.task_unique_key from the facts: per key, the newest pending task
-- enqueued with it. Returns the number of rows. Owner only; locks out unique enqueues
-- while it runs.
create or replace function queues.rebuild_task_unique_key() returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n bigint;
begin
  lock table queues.task_unique_key in exclusive mode;
  delete from queues.task_unique_key;
  insert into queues.task_unique_key (unique_key, task_id)
  select distinct on (u.unique_key) u.unique_key, u.task_id
    from queues.task_pending p
    join queues.task_unique u on u.task_id = p.task_id
   order by u.unique_key, u.task_id desc;
  get diagnostics _n = row_count;
  return _n;
end;
$$;
--! EndIncluded queues/unique.sql
--! Included queues/workers.sql
-- The worker registry and stale recovery. Workers report in on every heartbeat tick;
-- a worker not seen for a while is presumed dead, and the live leases it holds can be
-- revoked at once instead of waiting for them to expire.

-- Called by each worker on start and on every heartbeat tick, with the interval of its
-- heartbeats (null: the default, 30 s), from which stale recovery derives how long the
-- worker may be silent. At most 1000 task types, each a task type name.
create or replace function queues.record_worker_heartbeat(
  _worker_id             text,
  _task_types            text[],
  _heartbeat_interval_ms integer default null
) returns void
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _task_types is null or cardinality(_task_types) = 0 or array_position(_task_types, null) is not null then
    raise exception 'task_types must name at least one task type' using errcode = '22023';
  end if;
  if cardinality(_task_types) > 1000 then
    raise exception 'task_types names % types, over the limit of 1000', cardinality(_task_types)
      using errcode = '54000';
  end if;
  if exists (select 1 from unnest(_task_types) t where t !~ '^[a-z][a-z0-9_]{0,62}$') then
    raise exception 'task_types must be task type names (a-z, 0-9, _, at most 63 characters)'
      using errcode = '22023';
  end if;
  if _heartbeat_interval_ms is not null and _heartbeat_interval_ms not between 1 and 86400000 then
    raise exception 'heartbeat_interval_ms must be between 1 and 86400000, got %', _heartbeat_interval_ms
      using errcode = '22023';
  end if;
  insert into queues.worker as w (worker_id, task_types, heartbeat_interval_ms)
  values (_worker_id, _task_types, _heartbeat_interval_ms)
  on conflict (worker_id) do update
     set task_types = excluded.task_types, last_seen_at = now(), stopped_at = null,
         heartbeat_interval_ms = excluded.heartbeat_interval_ms;
end;
$$;

-- How long a worker may be silent before it is taken for dead, whatever shorter bound a
-- caller asks for: three of its heartbeat intervals (30 s when it did not say).
create or replace function queues.worker_silence_bound(_heartbeat_interval_ms integer)
  returns interval
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select make_interval(secs => 3 * coalesce(_heartbeat_interval_ms, 30000) / 1000.0) $$;

-- Called by a worker that stops cleanly.
create or replace function queues.record_worker_stopped(_worker_id text)
  returns void
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  update queues.worker set stopped_at = now(), last_seen_at = now() where worker_id = _worker_id
$$;

-- Live leases held by workers not seen for _dead_after_seconds (and not stopped), at _now.
-- A bound shorter than the worker's own (queues.worker_silence_bound: three heartbeat
-- intervals) is raised to it: a worker between two heartbeats is never stale.
create or replace function queues.stale_leases_at(_now timestamptz, _dead_after_seconds integer)
  returns table (task_id bigint, task_lease_id bigint, worker_id text, last_seen_at timestamptz, expires_at timestamptz)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.task_id, p.current_lease_id, w.worker_id, w.last_seen_at, p.available_at
    from queues.task_pending p
    cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
    -- A lease names its worker by key (queues.worker_name), or by id if written before.
    left join queues.worker_name n on n.worker_key = l.worker_key
    join queues.worker w on w.worker_id = coalesce(l.worker_id, n.worker_id)
   where p.available_at > _now
     and w.stopped_at is null
     and w.last_seen_at < _now - greatest(make_interval(secs => _dead_after_seconds),
                                          queues.worker_silence_bound(w.heartbeat_interval_ms))
  union all
  -- The tasks held by a live claim lease without a row (the ready set:
  -- docs/design/hot-path.md): a lease not yet rescued (queues.claim_lease_due), naming a
  -- task with no row and no end.
  select t.id, c.task_lease_id, w.worker_id, w.last_seen_at, c.expires_at
    from queues.claim_lease_due d
   cross join lateral (select c.* from queues.claim_lease c
                        where c.task_lease_id = d.task_lease_id and c.task_id = d.task_id limit 1) c
    join queues.worker_name n on n.worker_key = c.worker_key
    join queues.worker w on w.worker_id = n.worker_id
   cross join lateral unnest(c.task_ids) t(id)
   where d.expires_at > _now
     and w.stopped_at is null
     and w.last_seen_at < _now - greatest(make_interval(secs => _dead_after_seconds),
                                          queues.worker_silence_bound(w.heartbeat_interval_ms))
     and not exists (select 1 from queues.task_pending p where p.task_id = t.id)
     and not exists (select 1 from queues.task_end_of(t.id) e)
$$;

-- The stale leases now, for workers presumed dead after 10 minutes of silence.
create or replace view queues.stale_lease as
select * from queues.stale_leases_at(now(), 600);
comment on view queues.stale_lease is 'Live leases held by workers not seen for 10 minutes.';

-- Revokes the stale leases (see stale_leases_at): their tasks are claimable at once. A
-- revocation of a started task counts as an expired lease towards abandoning it, and the revoked
-- worker can no longer complete or record against it. Returns what was revoked.
create or replace function queues.recover_stale_leases_at(_now timestamptz, _dead_after_seconds integer)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _dead_after_seconds is null or _dead_after_seconds not between 1 and 604800 then
    raise exception 'dead_after_seconds must be between 1 and 604800, got %', coalesce(_dead_after_seconds::text, 'null')
      using errcode = '22023';
  end if;
  perform queues.lock_resource_keys(array(select s.task_id from queues.stale_leases_at(_now, _dead_after_seconds) s));
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of).
  perform queues.hold_rows_of(array(select s.task_id from queues.stale_leases_at(_now, _dead_after_seconds) s));
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id from queues.stale_leases_at(_now, _dead_after_seconds) s
  ),
  -- Locked in task id order, as every call that locks several claim-index rows.
  locked as (
    select p.task_id from queues.task_pending p
     where p.task_id = any (array(select s.task_id from stale s))
     order by p.task_id
       for no key update
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null,
           -- Its task is a suspect from now on (see queues.claim_tasks_at); the lease counts
           -- towards abandonment only if it named the task its suspect.
           uncounted_count = p.uncounted_count + (not p.suspect_lease)::integer
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
       and p.task_id = any (array(select l.task_id from locked l))
    returning p.task_id, s.task_lease_id, s.worker_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, _now, format('worker %s not seen for %s s', r.worker_id, _dead_after_seconds) from revoked r
  ),
  key_freed as (
    delete from queues.resource_lease k
     using revoked r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select r.task_id, r.task_lease_id, r.worker_id from revoked r;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$$;

create or replace function queues.recover_stale_leases(_dead_after_seconds integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.recover_stale_leases_at(now(), coalesce(_dead_after_seconds, 600))
$$;

-- Revokes every lease a worker still holds, at once: called by the worker's process
-- supervisor when one of its processes died (its worker id is known and it can no longer
-- complete anything). Every task it held becomes a suspect (any of them may have killed
-- the process), and the revocation counts towards abandonment only for the task a lease
-- named its suspect (see queues.claim_tasks_at). The others are claimable at once
-- instead of when their leases expire; the named suspect stays unclaimable until its
-- lease would have expired, as without a supervisor, so a poison task's crash loop is
-- paced by its lease and the supervisor's spares keep up with the deaths instead of all
-- dying in a second.
-- Returns what was revoked; wakes listening workers.
create or replace function queues.revoke_worker_leases(_worker_id text)
  returns table (task_id bigint, task_lease_id bigint)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _worker_key integer;
begin
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  -- A lease names its worker by key (queues.worker_name), or by id if written before.
  select n.worker_key into _worker_key from queues.worker_name n where n.worker_id = _worker_id;
  perform queues.lock_resource_keys(array(
    select p.task_id from queues.task_pending p
     cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)));
  -- The tasks of its claim leases not yet rescued that have no row get it back first
  -- (queues.hold_rows_of: the ready set).
  perform queues.hold_rows_of(array(
    select t.id
      from queues.claim_lease_due d
     cross join lateral (select c.* from queues.claim_lease c
                          where c.task_lease_id = d.task_lease_id and c.task_id = d.task_id limit 1) c
     cross join lateral unnest(c.task_ids) t(id)
     where c.worker_key = _worker_key));
  return query
  with held as (
    -- Locked in task id order, as every call that locks several claim-index rows.
    select p.task_id, p.current_lease_id as task_lease_id, p.suspect_lease as suspect
      from queues.task_pending p
     cross join lateral (select y.worker_key, y.worker_id from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) l
     where p.current_lease_id > 0 and (l.worker_key = _worker_key or l.worker_id = _worker_id)
     order by p.task_id
       for no key update of p
  ),
  revoked as (
    -- available_at of a leased row is its lease's expiry (heartbeats included).
    update queues.task_pending p
       set available_at = case when h.suspect then p.available_at else now() end,
           current_lease_id = null,
           uncounted_count = p.uncounted_count + (not h.suspect)::integer
      from held h
     where p.task_id = h.task_id and p.current_lease_id = h.task_lease_id
    returning p.task_id, h.task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, now(), format('worker %s died', _worker_id) from revoked r
  ),
  key_freed as (
    delete from queues.resource_lease k
     using revoked r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select r.task_id, r.task_lease_id from revoked r;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$$;
--! EndIncluded queues/workers.sql

--! split: 420-lease-held-readers.sql
set local lock_timeout = '5s';
-- The readers of leased tasks see the ready set's lease-held tasks (no claim-index row, no
-- end: held by their claim lease), through queues.lease_held_tasks and
-- queues.task_pending_or_held (sql/queues/lease_held.sql).
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
--                                               index's rows, and a row per lease-held
--                                               task as its claim lease gives it (leased
--                                               by that lease, available at its expiry,
--                                               its first lease), lease_held true
--   queues.task_pending_or_held_of(task_id)     one task's row, either kind
-- The set is bounded by the rescuer's table of due leases: a claim that takes a task out
-- of the claim index writes its lease into queues.claim_lease_due, and the pass that
-- rescues the lease (its unended tasks get their rows back, queues.rescue_due_leases_at)
-- deletes it; only the claim leases still there are read, by their ids.
-- The functions are inlined into their callers (SQL, stable, no SET clause, not a security
-- definer), so that a caller's task id reaches the probes; every object they name is
-- schema-qualified. Called from definer functions with a pinned search path: no grants. (A
-- view read by another role cannot call them: public.worker_tasks writes the probe out.)

-- Each claim lease not yet rescued once: its tasks, less those ended in a completion
-- round of its task range (each round in the range unnested once per lease, not probed
-- per task: a round's array, read by `= any` per task, is decompressed per task), less
-- those with a claim-index row or a task_completed row (probes by key).
create or replace view queues.lease_held_tasks as
select u.task_id, c.task_lease_id, c.worker_key, c.leased_at, c.expires_at,
       coalesce(c.suspect_task_id = u.task_id, false) as suspect
  from queues.claim_lease_due d
 -- each due lease by its id (a probe per lease, never a scan of claim_lease)
 cross join lateral (select c.* from queues.claim_lease c
                      where c.task_lease_id = d.task_lease_id and c.task_id = d.task_id limit 1) c
 cross join lateral (
   select x.task_id from unnest(c.task_ids) x(task_id)
   except
   select e.task_id
     from queues.completion_round r
    cross join lateral unnest(r.task_ids) e(task_id)
    where r.task_range && c.task_range and r.task_id >= lower(c.task_range)
 ) u
 where not exists (select 1 from queues.task_pending p where p.task_id = u.task_id)
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
  left join queues.task_run_now rn on rn.task_id = h.task_id;
comment on view queues.task_pending_or_held is
  'Every task not ended, in queues.task_pending''s shape: the claim index''s rows, and each lease-held task (queues.lease_held_tasks) leased by its claim lease (lease_held). A task''s own: queues.task_pending_or_held_of(task_id). See sql/queues/lease_held.sql.';

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
$$;
--! EndIncluded queues/lease_held.sql
--! Included queues/dependencies.sql
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
--! EndIncluded queues/dependencies.sql
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
               -- its claim-index row, else the claim lease that holds it (a lease-held task:
               -- queues.lease_held_of written out, its probe of the end given the range''s
               -- bounds, so that it reads the range''s partitions only)
               left join lateral (select x.available_at, x.current_lease_id, x.lease_count
                                    from queues.task_pending x where x.task_id = t.task_id
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

-- Counts by task type and state: pending states over queues.task_pending_or_held (the
-- claim index and the lease-held tasks: bounded by pending work), completion outcomes over the last _window_seconds only (default 86400;
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
         count(*)
    from queues.task_pending_or_held p
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
--! Included admin/workers.sql
-- Workers for the dashboard: the registry (queues.worker) with heartbeat age and tasks in
-- flight, and stale recovery for one worker.

-- Every registered worker, live ones first: status live (seen within _dead_after_seconds,
-- default 600), stale (not seen since, not stopped: its leases can be recovered) or
-- stopped; its task types; the seconds since its last heartbeat; the live leases it holds.
create or replace function admin.list_workers_at(_now timestamptz, _dead_after_seconds integer)
  returns table (
    worker_id text, task_types text[], status text, started_at timestamptz, last_seen_at timestamptz,
    stopped_at timestamptz, heartbeat_age_seconds double precision, tasks_in_flight bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  with in_flight as (
    -- live leases (bounded by pending work): the pending rows under a lease that has not
    -- expired, and the lease-held tasks of claim leases that have not (no claim-index row:
    -- their claim lease names the worker, sql/queues/lease_held.sql)
    select coalesce(l.worker_id, n.worker_id) as worker_id, count(*) as n
      from (select y.worker_key, y.worker_id
              from queues.task_pending p
             cross join lateral (select y.worker_key, y.worker_id
                                   from queues.task_lease_at(p.task_id, p.current_lease_id) y limit 1) y
             where p.available_at > _now
            union all
            select h.worker_key, null::text from queues.lease_held_tasks h where h.expires_at > _now) l
      -- a lease names its worker by key (queues.worker_name), or by id if written before
      left join queues.worker_name n on n.worker_key = l.worker_key
     group by 1
  )
  select w.worker_id, w.task_types,
         case when w.stopped_at is not null then 'stopped'
              when w.last_seen_at < _now - make_interval(secs => coalesce(_dead_after_seconds, 600)) then 'stale'
              else 'live' end,
         w.started_at, w.last_seen_at, w.stopped_at,
         extract(epoch from _now - w.last_seen_at)::double precision,
         coalesce(f.n, 0)
    from queues.worker w
    left join in_flight f on f.worker_id = w.worker_id
   order by (w.stopped_at is not null), w.last_seen_at desc, w.worker_id
   limit 1000
$$;

create or replace function admin.list_workers()
  returns table (
    worker_id text, task_types text[], status text, started_at timestamptz, last_seen_at timestamptz,
    stopped_at timestamptz, heartbeat_age_seconds double precision, tasks_in_flight bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_workers_at(now(), 600)
$$;

-- Revokes the live leases of one worker that has not been seen for _dead_after_seconds
-- (10 to 86400, default 600), like queues.recover_stale_leases does for all of them.
-- 23503 for an unknown worker; 55000 when the worker is live or stopped (nothing to
-- recover from a worker that is still heartbeating). Returns what was revoked.
create or replace function admin.recover_worker_leases_at(_now timestamptz, _worker_id text, _dead_after_seconds integer)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _dead integer := coalesce(_dead_after_seconds, 600);
  _w queues.worker;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _worker_id is null then
    raise exception 'worker_id must not be null' using errcode = '22004';
  end if;
  if _dead not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead using errcode = '22023';
  end if;
  select * into _w from queues.worker w where w.worker_id = _worker_id;
  if not found then
    raise exception 'worker % is not registered', quote_literal(left(_worker_id, 200)) using errcode = '23503';
  end if;
  if _w.stopped_at is not null then
    raise exception 'worker % stopped at %; it holds no leases to recover', _worker_id, _w.stopped_at using errcode = '55000';
  end if;
  if _w.last_seen_at >= _now - make_interval(secs => _dead) then
    raise exception 'worker % was seen % s ago, within % s: it is not stale', _worker_id,
      round(extract(epoch from _now - _w.last_seen_at)), _dead using errcode = '55000';
  end if;
  perform queues.lock_resource_keys(array(
    select s.task_id from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id));
  -- A task its claim took out of the claim index gets its row back first (queues.hold_rows_of,
  -- as queues.recover_stale_leases_at does).
  perform queues.hold_rows_of(array(
    select s.task_id from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id));
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id
      from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id
  ),
  -- Locked in task id order, as every call that locks several claim-index rows.
  locked as (
    select p.task_id from queues.task_pending p
     where p.task_id = any (array(select s.task_id from stale s))
     order by p.task_id
       for no key update
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
       and p.task_id = any (array(select l.task_id from locked l))
    returning p.task_id, s.task_lease_id, s.worker_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_id, task_lease_id, revoked_at, reason)
    select r.task_id, r.task_lease_id, _now, format('worker %s not seen for %s s (recovered from the dashboard)', r.worker_id, _dead)
      from revoked r
  ),
  key_freed as (
    delete from queues.resource_lease k
     using revoked r
     where r.resource_key is not null and k.resource_key = r.resource_key and k.task_id = r.task_id
  )
  select r.task_id, r.task_lease_id, r.worker_id from revoked r;
  if found then
    perform pg_notify('queues_task_ready', '');
  end if;
end;
$$;

create or replace function admin.recover_worker_leases(_worker_id text, _dead_after_seconds integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.recover_worker_leases_at(now(), _worker_id, _dead_after_seconds)
$$;
--! EndIncluded admin/workers.sql
--! Included admin/capacity.sql
-- Capacity planning per role (= task_type): how much work is waiting, how fast a worker
-- gets through it while it works, and how many workers would drain it in 1, 4 or 8 hours.
-- The role-based specification's view of it is public.v_worker_capacity
-- (sql/public/role_based_worker.sql).
--
-- Cost: pending/ready/running count queues.task_pending_or_held (the claim index and the
-- lease-held tasks, sql/queues/lease_held.sql: bounded by pending work);
-- throughput reads only the completions of the last _window_seconds, through the
-- completed_at indexes of task_completed and completion_round, and the leases of the
-- tasks enqueued in that window
-- (a range of task_lease's primary key and of claim_lease's, whose claims name their
-- tasks; a probe of queues.task_lease_at for a completion of an older task), with a primary-key probe of task_lease_started per completion that does not say
-- when its run started (written before completions carried it); active workers
-- read queues.worker. Nothing scans history.
--
-- Figures:
--   pending               tasks not completed (scheduled, ready, running, retrying)
--   ready                 claimable now
--   running               held by a live lease
--   active_workers        registered workers of this type seen within _dead_after_seconds
--                         and not stopped
--   completed_in_window   completions (any outcome) in the window
--   window_workers        distinct workers whose leases completed those tasks
--   tasks_per_worker_hour capacity: the window's completions that ran under a lease,
--                         divided by the hours their workers were busy with this type
--                         (per worker, the union of its runs, each from its start, or its
--                         lease when no start was recorded, to its completion, within the
--                         window). A worker that waits for work is not busy, so this is
--                         what a worker gets through while it works, not the arrival rate;
--                         a worker running tasks side by side counts each hour once. Null
--                         without such completions in the window
--   estimated_hours_to_drain  ready / (tasks_per_worker_hour * active_workers): the
--                         backlog claimable now; tasks scheduled later are not backlog (they
--                         cannot run sooner). 0 when nothing is ready; null without a rate
--                         or without workers
--   workers_needed_1h/4h/8h   ceil(pending / (tasks_per_worker_hour * hours)); 0 when
--                         nothing is pending; null without a rate

create or replace function admin.capacity_at(
  _now                timestamptz,
  _task_type          text,
  _window_seconds     integer,
  _dead_after_seconds integer
) returns table (
  task_type                text,
  pending                  bigint,
  ready                    bigint,
  running                  bigint,
  active_workers           bigint,
  completed_in_window      bigint,
  window_workers           bigint,
  window_seconds           integer,
  tasks_per_worker_hour    double precision,
  estimated_hours_to_drain double precision,
  workers_needed_1h        bigint,
  workers_needed_4h        bigint,
  workers_needed_8h        bigint
)
  language plpgsql stable
  security definer
  -- The window's completions meet the leases of the window's tasks in one hash join: a
  -- nested loop would probe task_lease once per completion (the CTE's row estimate is a
  -- guess). The lateral probes of older completions stay nested loops, the only plan
  -- they have.
  set enable_nestloop = off
  set search_path = pg_catalog, pg_temp
as $$
declare
  _window integer := coalesce(_window_seconds, 3600);
  _dead_after integer := coalesce(_dead_after_seconds, 600);
  _first bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_type is not null
     and not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '23503', hint = 'Known task types are listed in queues.task_type.';
  end if;
  if _window not between 60 and 604800 then
    raise exception 'window_seconds must be between 60 and 604800 (7 days), got %', _window
      using errcode = '22023';
  end if;
  if _dead_after not between 10 and 86400 then
    raise exception 'dead_after_seconds must be between 10 and 86400, got %', _dead_after
      using errcode = '22023';
  end if;

  _first := admin.first_task_id_after(_now - make_interval(secs => _window));
  return query
  with types as (
    select t.task_type from queues.task_type t
     where _task_type is null or t.task_type = _task_type
  ),
  queue as (
    select p.task_type,
           count(*) as pending,
           count(*) filter (where p.available_at <= _now) as ready,
           count(*) filter (where p.available_at > _now and p.current_lease_id is not null) as running
      -- the claim index and the lease-held tasks (sql/queues/lease_held.sql)
      from queues.task_pending_or_held p
     where _task_type is null or p.task_type = _task_type
     group by p.task_type
  ),
  -- Completions in the window by completed_at (index range scan), with their type
  -- (admin.completions_between).
  completion as materialized (
    select c.task_id, c.task_lease_id, c.task_type, c.completed_at, c.started_at
      from admin.completions_between(_now - make_interval(secs => _window), _now) c
     where _task_type is null or c.task_type = _task_type
  ),
  -- The run of each completing lease: its worker, its start (the completion's, else a
  -- start mark, else the lease) and its end. The leases of tasks enqueued in the window (ids from _first on)
  -- are one range of task_lease's primary key and of claim_lease's (a claim lease lives
  -- in the set of its largest task id, so one naming a task from _first on is in that
  -- range), joined at once; a completion of an older task probes its lease
  -- (queues.task_lease_at); each start mark is a primary-key probe (a scalar
  -- subquery). A lease names its worker by key (queues.worker_name), or by id if written
  -- before that key existed: a worker counts once per way it is named (twice, for one
  -- window, if it ran across that migration). A completion without a lease (cancelled,
  -- abandoned) names none and ran nowhere.
  completion_run as (
    select x.task_type, x.worker_key, x.worker_id,
           greatest(x.run_from, _now - make_interval(secs => _window)) as run_from, x.run_to
      from (select c.task_type, l.worker_key, l.worker_id, c.completed_at as run_to,
                   coalesce(c.started_at,
                            (select st.started_at from queues.task_lease_started st
                              where st.task_id = c.task_id and st.task_lease_id = c.task_lease_id),
                            l.leased_at) as run_from
              from completion c
              join (select y.task_id, y.task_lease_id, y.worker_key, y.worker_id, y.leased_at
                      from queues.task_lease y
                     where y.task_id >= _first
                    union all
                    select u.task_id, y.task_lease_id, y.worker_key, null, y.leased_at
                      from queues.claim_lease y
                     cross join lateral unnest(y.task_ids) as u(task_id)
                     where y.task_id >= _first and u.task_id >= _first) l
                on l.task_id = c.task_id and l.task_lease_id = c.task_lease_id
             where c.task_id >= _first
            union all
            select c.task_type, l.worker_key, l.worker_id, c.completed_at,
                   coalesce(c.started_at,
                            (select st.started_at from queues.task_lease_started st
                              where st.task_id = c.task_id and st.task_lease_id = c.task_lease_id),
                            l.leased_at)
              from completion c
             cross join lateral (select y.worker_key, y.worker_id, y.leased_at
                                   from queues.task_lease_at(c.task_id, c.task_lease_id) y limit 1) l
             where c.task_id < _first) x
  ),
  -- Busy time per type and worker: the union of its runs (gaps and islands: a run that
  -- starts after every earlier run of the worker ended opens a new island).
  run_marked as (
    select r.*,
           max(r.run_to) over (partition by r.task_type, r.worker_key, r.worker_id
                               order by r.run_from, r.run_to
                               rows between unbounded preceding and 1 preceding) as before_to
      from completion_run r
  ),
  run_island as (
    select m.*,
           count(*) filter (where m.before_to is null or m.run_from > m.before_to)
             over (partition by m.task_type, m.worker_key, m.worker_id order by m.run_from, m.run_to
                   rows between unbounded preceding and current row) as island
      from run_marked m
  ),
  busy as (
    select i.task_type,
           count(distinct (i.worker_key, i.worker_id)) as workers,
           sum(i.runs) as runs,
           sum(extract(epoch from i.island_to - i.island_from)) as seconds
      from (select r.task_type, r.worker_key, r.worker_id, count(*) as runs,
                   min(r.run_from) as island_from, max(r.run_to) as island_to
              from run_island r
             group by r.task_type, r.worker_key, r.worker_id, r.island) i
     group by i.task_type
  ),
  recent as (
    select c.task_type, count(*) as completed,
           coalesce((select b.workers from busy b where b.task_type = c.task_type), 0) as workers,
           (select b.runs from busy b where b.task_type = c.task_type) as runs,
           (select b.seconds from busy b where b.task_type = c.task_type) as busy_seconds
      from completion c
     group by c.task_type
  ),
  workers as (
    select r.task_type, count(*) as active
      from queues.worker w
     cross join lateral unnest(w.task_types) as r(task_type)
     where w.stopped_at is null
       and w.last_seen_at > _now - make_interval(secs => _dead_after)
     group by r.task_type
  ),
  figures as (
    select ty.task_type,
           coalesce(q.pending, 0) as pending,
           coalesce(q.ready, 0) as ready,
           coalesce(q.running, 0) as running,
           coalesce(w.active, 0) as active,
           coalesce(r.completed, 0) as completed,
           coalesce(r.workers, 0) as workers,
           case when r.runs > 0 and r.busy_seconds > 0
                then r.runs::double precision / (r.busy_seconds::double precision / 3600.0)
           end as rate
      from types ty
      left join queue q on q.task_type = ty.task_type
      left join recent r on r.task_type = ty.task_type
      left join workers w on w.task_type = ty.task_type
  )
  select f.task_type, f.pending, f.ready, f.running, f.active, f.completed, f.workers, _window,
         f.rate,
         case when f.ready = 0 then 0
              when f.rate is null or f.active = 0 then null
              else f.ready / (f.rate * f.active) end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 1))::bigint end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 4))::bigint end,
         case when f.pending = 0 then 0 when f.rate is not null then ceil(f.pending / (f.rate * 8))::bigint end
    from figures f
   order by f.task_type;
end;
$$;

-- Capacity of every role (_task_type null) or of one (23503 if unknown), over the last
-- hour of completions, counting workers seen within 10 minutes.
create or replace function admin.capacity(_task_type text default null)
  returns table (
    task_type                text,
    pending                  bigint,
    ready                    bigint,
    running                  bigint,
    active_workers           bigint,
    completed_in_window      bigint,
    window_workers           bigint,
    window_seconds           integer,
    tasks_per_worker_hour    double precision,
    estimated_hours_to_drain double precision,
    workers_needed_1h        bigint,
    workers_needed_4h        bigint,
    workers_needed_8h        bigint
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.capacity_at(now(), _task_type, 3600, 600)
$$;
--! EndIncluded admin/capacity.sql
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
--! Included admin/overview.sql
-- The overview's queue depth over a recent window, derived from the facts: the depth
-- of a type at instant e is the number of its tasks pending now, plus those completed
-- after e, minus those enqueued after e. Cost follows the window's enqueues and
-- completions, never the history.

-- The first task id enqueued after _ts: a binary search over the primary key (about 30
-- probes at any table size). Identity values follow enqueued_at (default now(), the
-- enqueuing transaction's start) to within one transaction's length, so around _ts the
-- bound may be off by the tasks of transactions open across it; good for a chart.
create or replace function admin.first_task_id_after(_ts timestamptz)
  returns bigint
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _lo bigint;
  _hi bigint;
  _mid bigint;
  _at timestamptz;
begin
  select t.task_id into _lo from queues.task t order by t.task_id limit 1;
  select t.task_id + 1 into _hi from queues.task t order by t.task_id desc limit 1;
  if _lo is null then
    return 1;
  end if;
  while _lo < _hi loop
    _mid := _lo + (_hi - _lo) / 2;
    select t.enqueued_at into _at from queues.task t where t.task_id >= _mid order by t.task_id limit 1;
    if _at > _ts then
      _hi := _mid;
    else
      _lo := _mid + 1;
    end if;
  end loop;
  return _lo;
end;
$$;

-- Pending tasks (not completed, whatever their schedule) per type at the end of each
-- _bucket_seconds bucket of the last _window_seconds (defaults 3600 and 60), oldest first.
-- Every registered type appears in every bucket.
create or replace function admin.queue_depth_at(_now timestamptz, _window_seconds integer, _bucket_seconds integer)
  returns table (bucket_end timestamptz, task_type text, depth bigint)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _window integer := coalesce(_window_seconds, 3600);
  _bucket integer := coalesce(_bucket_seconds, 60);
  _from timestamptz;
  _first_id bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _window not between 60 and 86400 then
    raise exception 'window_seconds must be between 60 and 86400, got %', _window using errcode = '22023';
  end if;
  if _bucket not between 10 and _window or _window / _bucket > 500 then
    raise exception 'bucket_seconds must be between 10 and window_seconds, with at most 500 buckets, got %', _bucket
      using errcode = '22023';
  end if;
  _from := _now - make_interval(secs => _window);
  _first_id := admin.first_task_id_after(_from);
  return query
  -- Materialized: the per-bucket sums below read it once per bucket and type.
  with events as materialized (
    select e.task_type, e.k, sum(e.d) as d
      -- date_part (double precision), not extract (numeric): cheaper per row.
      from (select t.task_type, ceil(date_part('epoch', t.enqueued_at - _from) / _bucket)::integer as k, -1 as d
              from queues.task t
             where t.task_id >= _first_id and t.enqueued_at > _from and t.enqueued_at <= _now
            union all
            select c.task_type, ceil(date_part('epoch', c.completed_at - _from) / _bucket)::integer, 1
              from admin.completions_between(_from, _now) c) e
     group by 1, 2
  ),
  pending as (
    -- the claim index and the lease-held tasks (sql/queues/lease_held.sql)
    select p.task_type, count(*) as n from queues.task_pending_or_held p group by 1
  )
  select _from + make_interval(secs => i * _bucket), ty.task_type,
         coalesce(pe.n, 0) + coalesce((select sum(ev.d) from events ev where ev.task_type = ty.task_type and ev.k > i), 0)::bigint
    from generate_series(1, ceil(_window::numeric / _bucket)::integer) i
   cross join queues.task_type ty
    left join pending pe on pe.task_type = ty.task_type
   order by 1, 2;
end;
$$;

create or replace function admin.queue_depth(_window_seconds integer default null, _bucket_seconds integer default null)
  returns table (bucket_end timestamptz, task_type text, depth bigint)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.queue_depth_at(now(), _window_seconds, _bucket_seconds)
$$;
--! EndIncluded admin/overview.sql
--! Included admin/queue_controls.sql
-- Queue controls: pause and resume claiming per task type (facts queues.task_type_paused
-- and queues.task_type_resumed; honoured by queues.claim_tasks, see sql/queues/pause.sql),
-- and the list of task types (roles) with their state, pending work and workers.

-- Pauses claiming of _task_type. Returns the pause's id; pausing a paused type changes
-- nothing and returns the open pause. 22023 for an unknown type.
create or replace function admin.pause_task_type_at(_now timestamptz, _task_type text, _reason text)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _id bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  if _reason is not null and length(_reason) > 500 then
    raise exception 'reason must be at most 500 characters' using errcode = '22023';
  end if;
  -- One pause or resume of a type at a time.
  perform 1 from queues.task_type t where t.task_type = _task_type for no key update;
  select p.task_type_paused_id into _id
    from queues.task_type_paused p
   where p.task_type = _task_type
     and not exists (select 1 from queues.task_type_resumed r where r.task_type_paused_id = p.task_type_paused_id);
  if _id is null then
    insert into queues.task_type_paused (task_type, paused_at, reason)
    values (_task_type, _now, coalesce(_reason, ''))
    returning task_type_paused_id into _id;
  end if;
  return _id;
end;
$$;

create or replace function admin.pause_task_type(_task_type text, _reason text default null)
  returns bigint
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.pause_task_type_at(now(), _task_type, _reason)
$$;

-- Resumes claiming of _task_type. Returns whether it was paused. Wakes the workers.
create or replace function admin.resume_task_type_at(_now timestamptz, _task_type text)
  returns boolean
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _count integer;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  perform 1 from queues.task_type t where t.task_type = _task_type for no key update;
  insert into queues.task_type_resumed (task_type_paused_id, resumed_at)
  select p.task_type_paused_id, _now
    from queues.task_type_paused p
   where p.task_type = _task_type
     and not exists (select 1 from queues.task_type_resumed r where r.task_type_paused_id = p.task_type_paused_id);
  get diagnostics _count = row_count;
  if _count > 0 then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _count > 0;
end;
$$;

create or replace function admin.resume_task_type(_task_type text)
  returns boolean
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.resume_task_type_at(now(), _task_type)
$$;

-- Every task type (role) with: whether claiming is paused (since when, why), its pending
-- work by state, and the live workers that claim it (seen in the last 10 minutes, not
-- stopped). Cost: the pending work, the pause facts and the worker registry.
create or replace function admin.list_queues_at(_now timestamptz)
  returns table (
    task_type text, description text, paused boolean, paused_at timestamptz, pause_reason text,
    scheduled bigint, ready bigint, running bigint, retrying bigint, workers text[]
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  with pending as (
    select p.task_type, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state,
           count(*) as n
      -- the claim index and the lease-held tasks (sql/queues/lease_held.sql)
      from queues.task_pending_or_held p
     group by 1, 2
  ),
  open_pause as (
    select distinct on (p.task_type) p.task_type, p.paused_at, p.reason
      from queues.task_type_paused p
     where not exists (select 1 from queues.task_type_resumed r where r.task_type_paused_id = p.task_type_paused_id)
     order by p.task_type, p.task_type_paused_id desc
  )
  select t.task_type, t.description, op.task_type is not null, op.paused_at, op.reason,
         coalesce((select n from pending x where x.task_type = t.task_type and x.state = 'scheduled'), 0),
         coalesce((select n from pending x where x.task_type = t.task_type and x.state = 'ready'), 0),
         coalesce((select n from pending x where x.task_type = t.task_type and x.state = 'running'), 0),
         coalesce((select n from pending x where x.task_type = t.task_type and x.state = 'retrying'), 0),
         coalesce((select array_agg(w.worker_id order by w.worker_id) from queues.worker w
                    where t.task_type = any (w.task_types) and w.stopped_at is null
                      and w.last_seen_at > _now - interval '10 minutes'), '{}')
    from queues.task_type t
    left join open_pause op on op.task_type = t.task_type
   order by t.task_type
$$;

create or replace function admin.list_queues()
  returns table (
    task_type text, description text, paused boolean, paused_at timestamptz, pause_reason text,
    scheduled bigint, ready bigint, running bigint, retrying bigint, workers text[]
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_queues_at(now())
$$;
--! EndIncluded admin/queue_controls.sql
--! Included admin/schedules.sql
-- Recurring schedules for the dashboard: each schedule in force (schedules.list_schedules)
-- with its last runs and how their tasks ended.

-- Every schedule with cron, its time zone, next and last fire times, enabled, and its last _runs (1 to
-- 20, default 5) runs newest first as JSON: [{fire_at, outcome (enqueued/skipped),
-- task_id, task_state}], task_state being the task's outcome or pending state.
create or replace function admin.list_schedules_at(_now timestamptz, _runs integer)
  returns table (
    name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text,
    enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz, updated_at timestamptz, last_runs jsonb,
    time_zone text
  )
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n integer := coalesce(_runs, 5);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _n not between 1 and 20 then
    raise exception 'runs must be between 1 and 20, got %', _n using errcode = '22023';
  end if;
  return query
  select s.name, s.cron, s.task_type, s.payload, s.priority, s.missed_run_policy, s.enabled,
         s.last_fire_at, s.next_fire_at, s.updated_at,
         coalesce((
           select jsonb_agg(jsonb_build_object(
                    'fire_at', r.fire_at, 'outcome', r.outcome, 'task_id', r.task_id,
                    'task_state', coalesce(c.outcome,
                      (select admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now)
                         from queues.task_pending_or_held_of(r.task_id) p limit 1)))
                    order by r.fire_at desc)
             from (select * from schedules.schedule_run x
                    where x.schedule_id = s.schedule_id
                    order by x.fire_at desc limit _n) r
             left join lateral (select e.outcome from queues.task_end_of(r.task_id) e limit 1) c on true), '[]'),
         s.time_zone
    from schedules.list_schedules() s;
end;
$$;

create or replace function admin.list_schedules(_runs integer default null)
  returns table (
    name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text,
    enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz, updated_at timestamptz, last_runs jsonb,
    time_zone text
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_schedules_at(now(), _runs)
$$;
--! EndIncluded admin/schedules.sql
--! Included admin/task_actions.sql
-- Bulk actions on tasks for the dashboard: cancel pending tasks, run scheduled tasks now,
-- redrive dead letters. Each takes a selection (task ids, at most 1000) and reports per
-- task what happened; the *_matching variants take a filter instead and act on up to
-- _limit tasks that match it. Owner-only *_at(_now, ...) variants take the clock.

-- Cancels tasks, pending or running (queues.cancel_tasks_at, sql/queues/cancel.sql): each
-- ends 'cancelled' at once (queues.task_completed, queues.task_cancelled with the reason),
-- in one transaction; the worker running one is told at its next heartbeat, aborts it and
-- records nothing. Rows, in input order:
--   cancelled | already_completed | unknown_task
create or replace function admin.cancel_tasks_at(_now timestamptz, _task_ids bigint[], _reason text)
  returns table (task_id bigint, result text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select c.task_id, c.result from queues.cancel_tasks_at(_now, _task_ids, _reason) c
$$;

create or replace function admin.cancel_tasks(_task_ids bigint[], _reason text default null)
  returns table (task_id bigint, result text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.cancel_tasks_at(now(), _task_ids, _reason)
$$;

-- Cancels up to _limit (1 to 1000) pending tasks of _task_type (null: any) in _state
-- (waiting, scheduled, ready or retrying; null: all four), oldest first.
create or replace function admin.cancel_tasks_matching(
  _task_type text, _state text, _limit integer, _reason text default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _ids bigint[];
begin
  perform admin.assert_task_type(_task_type);
  if _state is not null and _state not in ('waiting', 'scheduled', 'ready', 'retrying') then
    raise exception 'state must be waiting, scheduled, ready or retrying to cancel by filter, got %', quote_literal(left(_state, 100))
      using errcode = '22023';
  end if;
  if _limit is null or _limit not between 1 and 1000 then
    raise exception 'limit must be between 1 and 1000, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  _ids := array(
    -- the claim index and the lease-held tasks (sql/queues/lease_held.sql: one whose claim
    -- lease expired is ready)
    select p.task_id from queues.task_pending_or_held p
     where (_task_type is null or p.task_type = _task_type)
       and admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, now())
           = any (case when _state is null then array['waiting', 'scheduled', 'ready', 'retrying'] else array[_state] end)
     order by p.task_id
     limit _limit);
  if cardinality(_ids) > 0 then
    return query select * from admin.cancel_tasks_at(now(), _ids, _reason);
  end if;
end;
$$;

-- Runs scheduled tasks (never leased, scheduled_at in the future) now
-- (queues.run_scheduled_now: records queues.task_run_now and makes the claim-index row
-- claimable at _now). Rows, in input order:
--   run_now | not_scheduled (ready, running, retrying) | already_completed | unknown_task
-- The answers for the tasks it did not lock are read after the locks, by a statement of
-- their own (as queues.cancel_tasks_at's).
create or replace function admin.run_tasks_now_at(_now timestamptz, _task_ids bigint[])
  returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _locked bigint[];
  _moved bigint[];
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform queues.assert_task_ids(_task_ids);
  with locked as (
    select p.task_id, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state
      from queues.task_pending p
     where p.task_id = any (_task_ids)
     order by p.task_id
       for update
  ),
  moved as (
    select m as task_id
      from queues.run_scheduled_now(_now, array(select l.task_id from locked l where l.state = 'scheduled')) m
  )
  select coalesce(array_agg(l.task_id), '{}'), coalesce((select array_agg(m.task_id) from moved m), '{}')
    into _locked, _moved
    from locked l;

  -- A statement after the locks (see queues.cancel_tasks_at).
  return query
  select i.task_id,
         case when m.task_id is not null then 'run_now'
              when l.task_id is not null then 'not_scheduled'
              when coalesce((select true from queues.task_end_of(i.task_id) x limit 1), false) then 'already_completed'
              -- no row and no end: held by the claim lease that took it out of the claim
              -- index (the ready set), so running
              when exists (select 1 from queues.task t where t.task_id = i.task_id) then 'not_scheduled'
              else 'unknown_task' end
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join unnest(_locked) as l(task_id) on l.task_id = i.task_id
    left join unnest(_moved) as m(task_id) on m.task_id = i.task_id
   order by i.n;
end;
$$;

create or replace function admin.run_tasks_now(_task_ids bigint[])
  returns table (task_id bigint, result text)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.run_tasks_now_at(now(), _task_ids)
$$;

-- Redrives dead letters (queues.redrive_task for each). Rows, in input order:
--   redriven (new_task_id set) | not_a_dead_letter | unknown_task
--   | dependency_not_redriven (a dependency ended other than succeeded and was not
--     redriven: queues.redrive_blocker; redrive it first, or in the same call)
-- The tasks are redriven in task id order, whatever the input order: a dependency is
-- always older than its dependents, so a call naming both redrives the dependency first
-- and the dependent's copy waits for the dependency's copy.
-- Each task is judged after its completion row is locked (as queues.redrive_task
-- serialises redrives), by statements that start after the lock: a redrive of the same
-- task that this one waited for is seen ('not_a_dead_letter'), not refused as an error.
create or replace function admin.redrive_tasks(_task_ids bigint[])
  returns table (task_id bigint, result text, new_task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _id bigint;
  _ids bigint[] := '{}';
  _results text[] := '{}';
  _new_ids bigint[] := '{}';
  _result text;
  _new bigint;
begin
  perform queues.assert_task_ids(_task_ids);
  for _id in select t from unnest(_task_ids) t order by t loop
    _new := null;
    perform 1 from queues.task_completed c where c.task_id = _id for update;
    if not exists (select 1 from queues.task t where t.task_id = _id) then
      _result := 'unknown_task';
    elsif not exists (select 1 from queues.dead_letter d where d.task_id = _id) then
      _result := 'not_a_dead_letter';
    elsif queues.redrive_blocker(_id) is not null then
      _result := 'dependency_not_redriven';
    else
      _new := queues.redrive_task(_id);
      _result := 'redriven';
    end if;
    _ids := _ids || _id;
    _results := _results || _result;
    _new_ids := _new_ids || _new;
  end loop;
  return query
  select i.id, r.result, r.new_id
    from unnest(_task_ids) with ordinality i(id, n)
    join unnest(_ids, _results, _new_ids) r(id, result, new_id) on r.id = i.id
   order by i.n;
end;
$$;

-- Redrives up to _limit (1 to 500) dead letters of _task_type (null: any), newest first.
create or replace function admin.redrive_tasks_matching(_task_type text, _limit integer)
  returns table (task_id bigint, result text, new_task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _ids bigint[];
begin
  perform admin.assert_task_type(_task_type);
  if _limit is null or _limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  _ids := array(select d.task_id from admin.list_dead_letters(_task_type, _limit, null) d);
  if cardinality(_ids) > 0 then
    return query select * from admin.redrive_tasks(_ids);
  end if;
end;
$$;
--! EndIncluded admin/task_actions.sql
--! Included public/role_based_worker.sql
-- The role-based worker system's SQL names (the specification's
-- role-based-worker-system.md), in schema public so that they resolve unqualified on the
-- default search_path ("$user", public) of every database user, as the specification
-- writes them. Each is a thin face over the queue's own objects; nothing here keeps
-- state. Who may use what: sql/public/privileges.sql.
--
--   v_worker_capacity                          view: capacity per role (admin.capacity)
--   worker_tasks                               view: every task in the specification's
--                                              columns and statuses (read only)
--   recover_stale_tasks(threshold_minutes)     revokes the leases of workers silent for
--                                              that long (admin.recover_stale_leases)
--   generate_resync_tasks(batches, date)       menus.generate_resync_tasks

-- Capacity per role, in the specification's columns, then the queue's own figures. The
-- view calls admin.capacity(), so its reader needs EXECUTE on that function (the api
-- database user has it). See sql/admin/capacity.sql for how each figure is measured:
-- tasks_per_worker_hour is completions per busy worker-hour (capacity, not the arrival
-- rate) and estimated_hours_to_drain counts the tasks ready now.
create or replace view public.v_worker_capacity as
select c.task_type                as role,
       c.pending                  as pending_tasks,
       c.ready                    as ready_tasks,
       c.running                  as running_tasks,
       c.active_workers,
       c.tasks_per_worker_hour,
       c.estimated_hours_to_drain,
       c.workers_needed_1h,
       c.workers_needed_4h,
       c.workers_needed_8h,
       c.completed_in_window,
       c.window_workers,
       c.window_seconds
  from admin.capacity() c;
comment on view public.v_worker_capacity is
  'The role-based specification''s capacity view: admin.capacity() per role (task type), in its column names.';

-- Every task as a row of the specification's worker_tasks table, derived from the facts
-- (nothing is stored; it cannot be written). Columns:
--   id                 queues.task.task_id
--   role               task_type
--   dispensary_id      payload.store_id when it is a whole number (menus.store), else null
--   platform           payload.platform, else null
--   status             pending    not completed and not held: scheduled, ready, or waiting
--                                 for a retry
--                      claimed    held by a live lease whose run has not been seen to
--                                 start (a run reports its start with its worker's next
--                                 heartbeat, or with its completion)
--                      running    held by a live lease whose run was seen to start
--                      (held: by its claim-index row's lease, or, with no row and no end,
--                      by its newest lease, a claim lease: the ready set, sql/queues/lease_held.sql)
--                      stale      held by a lease that expired uncompleted, or whose
--                                 worker is silent for longer than three of its heartbeat
--                                 intervals (its worker died: recover_stale_tasks)
--                      completed  completed 'succeeded'
--                      failed     completed 'failed', 'abandoned' or 'validation_failed'
--                      cancelled  completed 'cancelled'
--   priority, scheduled_for (scheduled_at), created_at (enqueued_at)
--   worker_id          the newest lease's worker
--   claimed_at         the newest lease's leased_at
--   started_at         the newest lease's run start: its completion's, else its start
--                      mark (queues.task_lease_started, written by a heartbeat)
--   completed_at       its end's (queues.task_completed, or the completion_round naming it)
--   last_heartbeat_at  the newest lease's last sign of life: its worker's last heartbeat
--                      while it holds the task, else the lease's newest extension, start
--                      or claim
--   result             the newest result recorded (queues.task_result)
--   error_message      the newest error (queues.error)
--   retry_count        failed attempts that were retried (queues.task_attempt_failed)
--   max_retries        max_attempts - 1
--   updated_at         the newest of the times above
--   outcome            the completion's own outcome (null while pending), beside status
-- Reading it reads every task (a row costs a few primary-key probes): it is for ad-hoc
-- checks such as the specification's health-check queries. The REST API and the admin
-- functions answer the same questions from bounded reads.
create or replace view public.worker_tasks as
select t.task_id                                      as id,
       t.task_type                                    as role,
       case when t.payload ->> 'store_id' ~ '^[0-9]{1,18}$' then (t.payload ->> 'store_id')::bigint end
                                                      as dispensary_id,
       case when jsonb_typeof(t.payload -> 'platform') = 'string' then left(t.payload ->> 'platform', 100) end
                                                      as platform,
       case
         when c.outcome = 'succeeded' then 'completed'
         when c.outcome in ('failed', 'abandoned', 'validation_failed') then 'failed'
         when c.outcome is not null then c.outcome
         when coalesce(p.current_lease_id, h.task_lease_id) is null then 'pending'
         when coalesce(p.available_at, h.expires_at) <= now() then 'stale'
         when w.last_seen_at < now() - make_interval(secs => 3 * coalesce(w.heartbeat_interval_ms, 30000) / 1000.0)
              and w.stopped_at is null then 'stale'
         when st.started_at is null then 'claimed'
         else 'running'
       end                                            as status,
       t.priority,
       t.scheduled_at                                 as scheduled_for,
       l.worker_id,
       l.leased_at                                    as claimed_at,
       st.started_at,
       c.completed_at,
       case when c.task_id is null and coalesce(p.current_lease_id, h.task_lease_id) = l.task_lease_id
                 and w.last_seen_at is not null
            then w.last_seen_at
            else greatest(l.leased_at, st.started_at,
                          (select max(x.extended_at) from queues.task_lease_extension x
                            where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id))
       end                                            as last_heartbeat_at,
       (select r.result from queues.task_result r where r.task_id = t.task_id
         order by r.task_lease_id desc limit 1)      as result,
       (select e.error_message from queues.error e where e.task_id = t.task_id
         order by e.error_id desc limit 1)           as error_message,
       coalesce(p.failed_attempts,
                (select count(*)::integer from queues.task_attempt_failed f where f.task_id = t.task_id))
                                                      as retry_count,
       t.max_attempts - 1                             as max_retries,
       t.enqueued_at                                  as created_at,
       greatest(t.enqueued_at, l.leased_at, st.started_at, c.completed_at)
                                                      as updated_at,
       c.outcome
  from queues.task t
  left join queues.task_pending p on p.task_id = t.task_id
  -- The task's end in either shape, probed as queues.task_end_of does (written out: the
  -- API reads this view, and may call no queue function).
  left join lateral (
    select x.task_id, x.task_lease_id, x.completed_at, x.outcome, x.started_at
      from queues.task_completed x
     where x.task_id = t.task_id
    union all
    select t.task_id, r.task_lease_ids[array_position(r.task_ids, t.task_id)], r.completed_at, 'succeeded',
           timestamptz 'epoch' + r.started_us[array_position(r.task_ids, t.task_id)] * interval '1 microsecond'
      from queues.completion_round r
     where r.task_range @> t.task_id and r.task_id >= t.task_id and t.task_id = any (r.task_ids)
    limit 1
  ) c on true
  -- The newest lease, with its worker's id (a lease names its worker by key in
  -- queues.worker_name, or, written before that, by id), in both shapes: a per-task
  -- task_lease row, or a claim_lease naming the task (queues.task_leases_of's probe,
  -- written out: this view's readers cannot call that function).
  left join lateral (
    select y.task_id, y.task_lease_id, y.leased_at, y.expires_at, y.claim,
           coalesce(y.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = y.worker_key))
             as worker_id
      from (select x.task_id, x.task_lease_id, x.leased_at, x.expires_at, x.worker_id, x.worker_key, false as claim
              from queues.task_lease x
             where x.task_id = t.task_id
            union all
            select t.task_id, x.task_lease_id, x.leased_at, x.expires_at, null::text, x.worker_key, true
              from queues.claim_lease x
             where x.task_range @> t.task_id and x.task_id >= t.task_id and t.task_id = any (x.task_ids)) y
     order by y.task_lease_id desc
     limit 1
  ) l on true
  -- A task with neither a claim-index row nor an end is held by its newest lease, a claim
  -- lease (the ready set: queues.lease_held_of, written out).
  left join lateral (
    select l.task_lease_id, l.expires_at
     where p.task_id is null and c.task_id is null and l.claim
  ) h on true
  left join lateral (
    select coalesce(case when c.task_lease_id = l.task_lease_id then c.started_at end,
                    (select m.started_at from queues.task_lease_started m
                      where m.task_id = l.task_id and m.task_lease_id = l.task_lease_id)) as started_at
  ) st on true
  left join queues.worker w on w.worker_id = l.worker_id;
comment on view public.worker_tasks is
  'The role-based specification''s worker_tasks table as a read-only view over the queue''s facts, with its statuses.';

-- The specification's stale recovery: the live leases of workers not seen for
-- threshold_minutes (null: 10, as in the specification; 1 to 1440) are revoked, and their
-- tasks are claimable at once (pending again). A task whose revoked leases reach
-- MAX_LEASES is abandoned at its next claim, where the specification stops at
-- max_retries. A worker is never taken for dead sooner than three of its own heartbeat
-- intervals. Returns the leases revoked. The argument keeps the specification's name
-- (threshold_minutes), so `recover_stale_tasks(threshold_minutes => 5)` works too.
create or replace function public.recover_stale_tasks(threshold_minutes integer default null)
  returns table (task_id bigint, task_lease_id bigint, worker_id text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _minutes integer := coalesce(threshold_minutes, 10);
begin
  if _minutes not between 1 and 1440 then
    raise exception 'threshold_minutes must be between 1 and 1440, got %', _minutes using errcode = '22023';
  end if;
  return query select r.task_id, r.task_lease_id, r.worker_id from admin.recover_stale_leases(_minutes * 60) r;
end;
$$;

-- The specification's daily resync generation, unqualified: menus.generate_resync_tasks
-- (sql/menus/generate.sql), run as the caller (who needs EXECUTE on it too).
create or replace function public.generate_resync_tasks(_batches integer, _date date)
  returns table (batch integer, scheduled_at timestamptz, task_count integer)
  language sql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
  select * from menus.generate_resync_tasks(_batches, _date)
$$;
--! EndIncluded public/role_based_worker.sql
--! Included schedules/supervisor_facts.sql
-- What the schedule supervisor (sql/schedules/supervisor.sql) reads: the definition in
-- force, the fire times handled and due, when to wake, and its own pending task. Owner
-- only (no grants).

-- The definition in force for a schedule (its newest version).
create or replace function schedules.current_version(_schedule_id bigint)
  returns schedules.schedule_version
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select v.* from schedules.schedule_version v
   where v.schedule_id = _schedule_id
   order by v.schedule_version_id desc
   limit 1
$$;

-- The latest fire time handled (enqueued or skipped), or null. A backward scan of the
-- unique (schedule_id, fire_at) index, limit 1: cost does not grow with history.
create or replace function schedules.last_fire_at(_schedule_id bigint)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select r.fire_at from schedules.schedule_run r
   where r.schedule_id = _schedule_id
   order by r.fire_at desc
   limit 1
$$;

-- The next fire time not yet handled (it may be in the past: then it is due), or null for
-- a disabled schedule.
create or replace function schedules.next_due_fire_at(_schedule_id bigint)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select case when v.enabled
              then schedules.next_fire_time(v.cron, greatest(v.fires_after, schedules.last_fire_at(_schedule_id)),
                                            v.time_zone)
         end
    from schedules.current_version(_schedule_id) v
$$;

-- When the supervisor should next run: the earliest next due fire time (now if one is
-- overdue), at most max_supervisor_sleep() from now; null when no schedule is enabled.
create or replace function schedules.supervisor_wake_at(_now timestamptz)
  returns timestamptz
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select least(greatest(min(n.fire_at), _now), _now + schedules.max_supervisor_sleep())
    from schedules.schedule s
   cross join lateral (select schedules.next_due_fire_at(s.schedule_id) as fire_at) n
  having count(n.fire_at) > 0
$$;

-- The pending supervisor task that will run next, among those no worker holds a live
-- lease on (the running supervisor itself is leased, so it never counts): task_id and
-- when it becomes claimable. Only the newest 100 supervisor tasks are probed, by primary
-- key (`= any(array(...))`), so the cost does not grow with history; every older
-- supervisor task is completed in practice, and one that is not only costs a spare run.
create or replace function schedules.pending_supervisor_task(
  _now timestamptz, out task_id bigint, out available_at timestamptz
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select p.task_id, p.available_at
    from (select p.task_id, p.available_at, p.current_lease_id
            from queues.task_pending p
           where p.task_id = any (array(select s.task_id from schedules.supervisor_task s
                                         order by s.task_id desc limit 100))
          union all
          -- A lease-held supervisor task (no claim-index row, sql/queues/lease_held.sql)
          -- whose claim lease expired: claimable once the claims rescue it. Only the
          -- claim leases expired since the rescue cursor are read (usually none).
          select h.task_id, h.expires_at, h.task_lease_id
            from queues.lease_held_tasks h
           where h.expires_at <= _now
             and h.task_id = any (array(select s.task_id from schedules.supervisor_task s
                                         order by s.task_id desc limit 100))) p
   where (p.current_lease_id is null or p.available_at <= _now)
   order by p.available_at, p.task_id
   limit 1
$$;
--! EndIncluded schedules/supervisor_facts.sql
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
revoke execute on function queues.lease_held_of(bigint) from public;
revoke execute on function queues.task_pending_or_held_of(bigint) from public;

--! split: 430-ready-set-retention.sql
set local lock_timeout = '5s';
-- Retention and the ready set: a task its claim lease holds has no claim-index row. A set
-- holding one is kept (its tasks are checked against their ends), a dependent held so keeps
-- its dependencies' set, and the check under the detach's lock reads the tasks claimed
-- since the set's checks.
--! Included queues/flow_retention.sql
-- Retention of the flow-control facts that are not history (docs/operations.md,
-- "Retention and partitions"). Per-task facts (progress reports, dependency edges) are
-- history tables and leave with their task's set; what is removed here are the facts kept
-- per key rather than per task. Owner only; run by every history maintenance run
-- (queues.maintain_history_step_at, when it has nothing else to change).
--
--   queues.throttle / queues.throttle_cleared  a throttle report ended longer ago than
--     the retention window (queues.history_setting.retention) is deleted, with the clears
--     that name it (on delete cascade), when
--       - a later report of its key exists (the key's latest report is kept, so the
--         operator still sees when the key was last throttled),
--       - every earlier report of its key ended before the window too (a clear covers the
--         reports up to the one it names: deleting it never brings back an earlier report
--         that is still in force),
--       - the task it names, if any, is gone from the history (internal.provider_call_start
--         reads the report of a lease while its task may still run).
--     A report in force (throttled_until after now) is never deleted.
--   queues.task_limit_window  a counter whose window started more than a day ago (a rate
--     limit's interval is at most a day, so that window is over; the next claim would
--     start a new one) is deleted: it only grows with the group keys that come and go.
--
-- Returns {"throttles": n, "throttle_clears": n, "limit_windows": n}: what it deleted.
-- (queues.history_set_has_waiting_dependents, below, is what history maintenance asks
-- before it drops a set.)
create or replace function queues.prune_flow_facts_at(_now timestamptz)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _cutoff timestamptz;
  _throttles bigint;
  _clears bigint;
  _windows bigint;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  _cutoff := _now - (select s.retention from queues.history_setting s);
  _cutoff := least(_cutoff, _now);
  with gone as (
    delete from queues.throttle t
     where t.throttled_until < _cutoff
       and exists (select 1 from queues.throttle l
                    where l.key_kind = t.key_kind and l.key = t.key and l.throttle_id > t.throttle_id)
       and not exists (select 1 from queues.throttle e
                        where e.key_kind = t.key_kind and e.key = t.key and e.throttle_id < t.throttle_id
                          and e.throttled_until >= _cutoff)
       and (t.task_id is null or not exists (select 1 from queues.task x where x.task_id = t.task_id))
    returning t.throttle_id
  )
  select count(*), (select count(*) from queues.throttle_cleared c where c.last_throttle_id in (select g.throttle_id from gone g))
    into _throttles, _clears
    from gone;
  delete from queues.task_limit_window w
   where w.window_start < _now - interval '1 day';
  get diagnostics _windows = row_count;
  return jsonb_build_object('throttles', _throttles, 'throttle_clears', _clears, 'limit_windows', _windows);
end;
$$;

-- Whether an unfinished task of a newer set depends on a task of the set [_lower, _upper):
-- the set is then kept, however old, since the dependent reads its dependencies and their
-- results when it runs (queues.list_task_dependencies). Unfinished: a claim-index row, or
-- no row and no end (a task its claim lease holds: the ready set, docs/design/hot-path.md).
-- Its edges live in its own set, so they are kept with it. Reads the dependency index of
-- the newer sets' partitions, and each dependent's end only when it has no row. Owner only.
create or replace function queues.history_set_has_waiting_dependents(_lower bigint, _upper bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from queues.task_dependency d
                  where d.depends_on_task_id >= _lower and d.depends_on_task_id < _upper
                    and d.task_id >= _upper
                    and (exists (select 1 from queues.task_pending p where p.task_id = d.task_id)
                         or not exists (select 1 from queues.task_end_of(d.task_id) e)))
$$;

revoke execute on function queues.prune_flow_facts_at(timestamptz),
  queues.history_set_has_waiting_dependents(bigint, bigint) from public;
--! EndIncluded queues/flow_retention.sql
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
--    (no new task can land in it), it holds no unfinished task (queues.task_pending, then
--    every task checked against its end: a task_completed row or a completion round; a
--    task its claim lease holds has neither a row nor an end, and keeps the set), its
--    newest end is older than the retention window, no unfinished task of a newer set
--    depends on one of its tasks, and no completion round or claim lease in it names a
--    task of an older set still kept (a round lives in the set of the largest task id it
--    names). A set with one unfinished task is kept, however old. Under the detach's lock
--    what may have changed since is checked again: a claim-index row, a recent end, and
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
                  where tp.task_id >= _set.lower_bound and tp.task_id < _set.upper_bound) then
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
                    where h.task_id >= _next.lower_bound and h.task_id < _next.upper_bound);
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

--! split: 440-drain-completion.sql
set local lock_timeout = '5s';
-- The drain's completion (docs/design/hot-path.md, "The drain on the ready set,
-- profiled"): a round of plain successes runs no error check and no outcome or retry
-- query in queues.settle_tasks and queues.complete_tasks (whose file
-- 400-ready-set.sql includes), and deletes claim-index rows only for the tasks that had one.
--! Included queues/settle.sql
-- The worker's completer: one call per round trip that completes tasks with their error
-- rows and start times (queues.settle_tasks, owner-run: security definer like every queue
-- writer); and a completion with its handler in one statement (queues.settle_with_handler,
-- run as the worker).

-- Completes tasks (see queues.complete_tasks: fenced by lease, retries, results),
-- recording each error message against its task in the same transaction, only if this
-- call completed the task or scheduled its retry (a refused completion records nothing).
--   _task_ids, _task_lease_ids, _outcomes, _retries   parallel: as queues.complete_tasks
--   _error_task_ids, _error_messages        parallel: errors, any number per completed task
--   _started_us                             parallel to _task_ids (or null): when each run
--                                           started, in microseconds since the epoch (sent
--                                           as integers: a timestamptz[] of hundreds costs
--                                           more to parse than the insert it feeds)
-- Returns one row per completion, in input order, with the result of queues.complete_tasks.
create or replace function queues.settle_tasks(
  _task_ids          bigint[],
  _task_lease_ids    bigint[] default null,
  _outcomes          text[] default null,
  _retries           boolean[] default null,
  _error_task_ids    bigint[] default null,
  _error_messages    text[] default null,
  _started_us        bigint[] default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _errors bigint[] := coalesce(_error_task_ids, '{}');
  _messages text[] := coalesce(_error_messages, '{}');
begin
  if cardinality(_errors) <> cardinality(_messages) then
    raise exception 'error_task_ids and error_messages must have the same length (% and %)',
      cardinality(_errors), cardinality(_messages) using errcode = '22023';
  end if;
  -- (Read only when there are errors: a round of plain completions runs no query here.)
  if cardinality(_errors) > 0 then
    if array_position(_errors, null) is not null then
      raise exception 'error_task_ids must not contain null' using errcode = '22004';
    end if;
    if exists (select 1 from unnest(_messages) m where m is null or btrim(m) = '') then
      raise exception 'error_messages must not be empty' using errcode = '22004';
    end if;
    if exists (select 1 from unnest(_errors) e where e <> all (coalesce(_task_ids, '{}'))) then
      raise exception 'error_task_ids must name tasks completed in the same call' using errcode = '22023';
    end if;
  end if;
  if _started_us is not null and cardinality(_started_us) <> cardinality(coalesce(_task_ids, '{}')) then
    raise exception 'started_us must have one element per task (% tasks, % start times)',
      cardinality(coalesce(_task_ids, '{}')), cardinality(_started_us) using errcode = '22023';
  end if;

  if cardinality(coalesce(_task_ids, '{}')) = 0 then
    return;
  end if;

  -- No error to record (a round of plain completions, the common case): the completion's
  -- rows as they come, in input order, without the join that records errors.
  if cardinality(_errors) = 0 then
    return query
    select c.task_id, c.result
      from queues.complete_tasks(_task_ids, _task_lease_ids, _outcomes, _retries,
                                 case when _started_us is not null then
                                   array(select to_timestamp(u.us::float8 / 1000000)
                                         from unnest(_started_us) with ordinality u(us, i) order by u.i) end) c;
    return;
  end if;

  return query
  with done as (
    select c.task_id, c.result, row_number() over () as ord
      from queues.complete_tasks(_task_ids, _task_lease_ids, _outcomes, _retries,
                                 case when _started_us is not null then
                                   -- float8, not numeric: exact to the microsecond
                                   -- (to_timestamp rounds to it) and about 0.2 ms less
                                   -- per round of 500 than a numeric division each.
                                   array(select to_timestamp(u.us::float8 / 1000000)
                                         from unnest(_started_us) with ordinality u(us, i) order by u.i) end) c
  ),
  leases as (
    select l.task_id, l.task_lease_id
      from unnest(_task_ids, coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])))
           as l(task_id, task_lease_id)
  ),
  recorded as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select e.task_id, l.task_lease_id,
           case when length(e.message) > queues.max_error_message_length()
                then left(e.message, queues.max_error_message_length()) || ' [truncated]'
                else e.message end
      from unnest(_errors, _messages) with ordinality as e(task_id, message, ord)
      join done d on d.task_id = e.task_id and d.result in ('completed', 'retry_scheduled')
      join leases l on l.task_id = e.task_id
     order by e.ord
  )
  select d.task_id, d.result from done d order by d.ord;
end;
$$;

-- A completion and its handler in one statement: the worker's completion of a channel task
-- (a success handler after the provider's call, an error handler after its failure), with
-- no transaction left open between round trips. Runs internal.run_function(_handler,
-- _body) in a subtransaction, reads its envelope (queues.parse_envelope), and records the
-- completion fenced by the lease (queues.settle_tasks):
--   _mode 'success' (_outcome 'succeeded'): a handler failure (an error, a validation
--     failure, a status or a malformed envelope) fails the task with that failure as its
--     error, the handler's writes kept; a handler that raises fails the task with
--     _raised_prefix followed by the message, its writes rolled back;
--   _mode 'error' (_outcome 'failed', or 'validation_failed' for a before handler's
--     validation failure; _errors the task's errors, _retry false for a failure no retry
--     can mend): a handler failure, or _raised_prefix and the message of
--     a raise (its writes rolled back), is one more error row.
-- If the completion is refused (the lease was lost), nothing of it commits, the handler's
-- writes included. A serialization failure or deadlock is raised: nothing is recorded and
-- the task runs again. Returns the completion's result (as queues.complete_tasks) with
-- the outcome and the errors recorded (or refused). _started_at: when the task's run
-- started (null: not known), kept with its completion. Messages are cut at 8,000 characters
-- (as the worker's). Runs as the caller (security invoker): the handler has the worker's
-- privileges, not the owner's.
create or replace function queues.settle_with_handler(
  _task_id bigint, _task_lease_id bigint, _outcome text, _errors text[], _retry boolean,
  _handler text, _body jsonb, _mode text, _raised_prefix text, _started_at timestamptz,
  out result text, out outcome text, out errors text[]
)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _env record;
  _failure text;
begin
  if _task_id is null or _task_lease_id is null or _handler is null or _mode is null then
    raise exception 'task_id, task_lease_id, handler and mode must not be null' using errcode = '22004';
  end if;
  if _mode not in ('success', 'error') then
    raise exception 'mode must be success or error, not %', _mode using errcode = '22023';
  end if;
  if not (_outcome is not distinct from 'succeeded' and _mode = 'success'
          or _outcome in ('failed', 'validation_failed') and _mode = 'error') then
    raise exception 'a % handler completes % tasks, not %', _mode,
      (case _mode when 'success' then 'succeeded' else 'failed or validation_failed' end), coalesce(_outcome, 'null')
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_errors) m where m is null or btrim(m) = '') then
    raise exception 'errors must not be empty' using errcode = '22004';
  end if;
  outcome := _outcome;
  errors := coalesce(_errors, '{}');
  begin
    begin
      select * into _env from queues.parse_envelope(internal.run_function(_handler, _body));
      _failure := case _env.outcome
                    when 'succeeded' then null
                    when 'invalid' then format('%s: validation failure: %s', _handler, _env.message)
                    when 'status' then format('%s: status %s', _handler, _env.message)
                    else format('%s: %s', _handler, _env.message) end;
    exception
      when serialization_failure or deadlock_detected then
        raise;
      when others then
        -- Its writes are rolled back with the subtransaction.
        _failure := coalesce(_raised_prefix, '') || sqlerrm;
    end;
    if _failure is not null then
      if length(_failure) > 8000 then
        _failure := left(_failure, 8000) || ' [truncated]';
      end if;
      if _mode = 'success' then
        outcome := 'failed';
        errors := array[_failure];
      else
        errors := errors || _failure;
      end if;
    end if;
    select s.result into result
      from queues.settle_tasks(array[_task_id], array[_task_lease_id], array[outcome], array[_retry],
                               array_fill(_task_id, array[cardinality(errors)]), errors,
                               array[(extract(epoch from _started_at) * 1000000)::bigint]) s;
    if result not in ('completed', 'retry_scheduled') then
      -- Refused: the handler's writes must not commit either.
      raise exception 'refused: %', result using errcode = 'QREFU';
    end if;
  exception
    when sqlstate 'QREFU' then
      null;
  end;
end;
$$;

-- Granted here, beside the function, so that a migration including
-- queues/privileges-hot-path.sql before this one does not name a function that does not
-- exist yet.
revoke execute on function
  queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text, timestamptz) from public;
grant execute on function
  queues.settle_with_handler(bigint, bigint, text, text[], boolean, text, jsonb, text, text, timestamptz) to :DATABASE_WORKER;

-- Many completions with their handlers in one statement: what queues.settle_with_handler
-- does for one task, for every task of a completion round, with one completion statement
-- (queues.settle_tasks) and one commit for all of them instead of one each. Each handler
-- runs in a subtransaction of its own (its writes kept or rolled back as in
-- queues.settle_with_handler), then one queues.settle_tasks completes every task whose
-- handler ran. If a completion is refused (its lease was lost), nothing of that task
-- commits, its handler's writes included: the whole block is rolled back, the refused
-- tasks are answered as refused, and the handlers of the others run again (nothing of
-- theirs was committed). A serialization failure or deadlock in a task's handler records
-- nothing for that task ('transient': it runs again, as queues.settle_with_handler's
-- raise makes it), and the others go on.
-- Arguments: one element per task in each of _task_ids, _task_lease_ids, _outcomes,
-- _retries, _handlers, _bodies, _modes, _raised_prefixes, _started_us (microseconds since
-- the epoch, an element null when not known) and, when not null, _traceparents (the
-- queue.traceparent each handler runs with: the trace context of what it enqueues); each
-- task's errors in _error_task_ids and _error_messages (parallel, in order).
-- Returns one row per task, in input order: the result (as queues.complete_tasks, or
-- 'transient'), the outcome and the errors recorded (or refused). Runs as the caller.
-- At most 50 tasks per call.
create or replace function queues.settle_with_handlers(
  _task_ids bigint[], _task_lease_ids bigint[], _outcomes text[], _retries boolean[],
  _error_task_ids bigint[], _error_messages text[],
  _handlers text[], _bodies jsonb[], _modes text[], _raised_prefixes text[], _started_us bigint[],
  _traceparents text[] default null
) returns table (task_id bigint, result text, outcome text, errors text[])
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _n integer := cardinality(_task_ids);
  _errs jsonb[];
  _out text[];
  _result text[];
  -- Still to be completed (not refused, not transient).
  _open boolean[];
  _env record;
  _failure text;
  _i integer;
  _k integer;
  _ids bigint[];
  _settled text[];
  _refused boolean;
  -- Handlers resolved in this call (as internal.run_function does, once per name): name,
  -- and why it cannot run (null: it can).
  _names text[] := '{}';
  _problems text[] := '{}';
  _oid regprocedure;
begin
  if _task_ids is null or _task_lease_ids is null or _outcomes is null or _handlers is null or _bodies is null
     or _modes is null or _raised_prefixes is null then
    raise exception 'task_ids, task_lease_ids, outcomes, handlers, bodies, modes and raised_prefixes must not be null'
      using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> _n or cardinality(_outcomes) <> _n or cardinality(_handlers) <> _n
     or cardinality(_bodies) <> _n or cardinality(_modes) <> _n or cardinality(_raised_prefixes) <> _n
     or cardinality(coalesce(_retries, array_fill(null::boolean, array[_n]))) <> _n
     or cardinality(coalesce(_started_us, array_fill(null::bigint, array[_n]))) <> _n
     or cardinality(coalesce(_traceparents, array_fill(null::text, array[_n]))) <> _n then
    raise exception 'every array must have one element per task (% tasks)', _n using errcode = '22023';
  end if;
  if cardinality(coalesce(_error_task_ids, '{}')) <> cardinality(coalesce(_error_messages, '{}')) then
    raise exception 'error_task_ids and error_messages must have the same length' using errcode = '22023';
  end if;
  -- A subtransaction per handler: past PostgreSQL's 64 cached per backend, every snapshot
  -- taken while this transaction runs (here and on replicas) reads pg_subtrans.
  if _n > 50 then
    raise exception 'at most 50 completions per call, got %', _n using errcode = '54000';
  end if;
  if array_position(_task_ids, null) is not null or array_position(_task_lease_ids, null) is not null
     or array_position(_handlers, null) is not null or array_position(_modes, null) is not null then
    raise exception 'task_ids, task_lease_ids, handlers and modes must not contain null' using errcode = '22004';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m not in ('success', 'error')) then
    raise exception 'modes must be success or error' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_outcomes, _modes) as x(o, m)
              where not (o is not distinct from 'succeeded' and m = 'success'
                         or o in ('failed', 'validation_failed') and m = 'error')) then
    raise exception 'a success handler completes succeeded tasks, an error handler failed or validation_failed ones'
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_error_messages) m where m is null or btrim(m) = '') then
    raise exception 'errors must not be empty' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_error_task_ids) e where e is null or e <> all (_task_ids)) then
    raise exception 'error_task_ids must name tasks of the call' using errcode = '22023';
  end if;
  if _n = 0 then
    return;
  end if;
  _result := array_fill(null::text, array[_n]);
  _out := _outcomes;
  _errs := array_fill(null::jsonb, array[_n]);
  _open := array_fill(true, array[_n]);

  -- Once, and again after a refusal (each pass has one refusal fewer to make).
  for _pass in 1 .. _n + 1 loop
    _refused := false;
    begin
      for _i in 1 .. _n loop
        continue when not _open[_i];
        _out[_i] := _outcomes[_i];
        -- Its errors (most completions with a handler have none: no statement for them).
        if _task_ids[_i] = any (_error_task_ids) then
          _errs[_i] := (select jsonb_agg(e.m order by e.ord)
                          from unnest(_error_task_ids, _error_messages) with ordinality as e(t, m, ord)
                         where e.t = _task_ids[_i]);
        else
          _errs[_i] := '[]';
        end if;
        if _traceparents is not null then
          perform set_config('queue.traceparent', coalesce(_traceparents[_i], ''), true);
        end if;
        _k := array_position(_names, _handlers[_i]);
        if _k is null then
          begin
            _oid := internal.resolve_runnable_function(_handlers[_i]);
            if not has_function_privilege(_oid, 'execute') then
              raise exception 'permission denied: % may not execute %', current_user, _handlers[_i]
                using errcode = '42501';
            end if;
            _problems := _problems || null::text;
          exception when others then
            _problems := _problems || sqlerrm;
          end;
          _names := _names || _handlers[_i];
          _k := cardinality(_names);
        end if;
        begin
          if _problems[_k] is not null then
            -- Cannot run: a handler that raises (internal.run_function would have raised so).
            raise exception '%', _problems[_k];
          end if;
          -- Resolved and checked above; the static call keeps its plan for the session.
          select * into _env from queues.parse_envelope(internal.call_runnable(_handlers[_i], _bodies[_i]));
          _failure := case _env.outcome
                        when 'succeeded' then null
                        when 'invalid' then format('%s: validation failure: %s', _handlers[_i], _env.message)
                        when 'status' then format('%s: status %s', _handlers[_i], _env.message)
                        else format('%s: %s', _handlers[_i], _env.message) end;
        exception
          when serialization_failure or deadlock_detected then
            -- Its writes rolled back, nothing recorded: the task runs again.
            _result[_i] := 'transient';
            _errs[_i] := to_jsonb(array[sqlerrm]);
            _out[_i] := null;
            _open[_i] := false;
            continue;
          when others then
            _failure := coalesce(_raised_prefixes[_i], '') || sqlerrm;
        end;
        if _failure is not null then
          if length(_failure) > 8000 then
            _failure := left(_failure, 8000) || ' [truncated]';
          end if;
          if _modes[_i] = 'success' then
            _out[_i] := 'failed';
            _errs[_i] := to_jsonb(array[_failure]);
          else
            _errs[_i] := _errs[_i] || to_jsonb(_failure);
          end if;
        end if;
      end loop;
      if _traceparents is not null then
        perform set_config('queue.traceparent', '', true);
      end if;
      if true = any (_open) then
        select array_agg(s.task_id order by s.ord), array_agg(s.result order by s.ord)
          into _ids, _settled
          from queues.settle_tasks(
                 array(select o.t from unnest(_task_ids, _open) with ordinality as o(t, open, ord)
                        where o.open order by o.ord),
                 array(select o.l from unnest(_task_lease_ids, _open) with ordinality as o(l, open, ord)
                        where o.open order by o.ord),
                 array(select o.x from unnest(_out, _open) with ordinality as o(x, open, ord)
                        where o.open order by o.ord),
                 array(select o.r from unnest(coalesce(_retries, array_fill(null::boolean, array[_n])), _open)
                                       with ordinality as o(r, open, ord)
                        where o.open order by o.ord),
                 array(select o.t from unnest(_task_ids, _errs, _open) with ordinality as o(t, e, open, ord),
                                       jsonb_array_elements_text(o.e) with ordinality as m(msg, k)
                        where o.open order by o.ord, m.k),
                 array(select m.msg from unnest(_errs, _open) with ordinality as o(e, open, ord),
                                         jsonb_array_elements_text(o.e) with ordinality as m(msg, k)
                        where o.open order by o.ord, m.k),
                 array(select o.s from unnest(coalesce(_started_us, array_fill(null::bigint, array[_n])), _open)
                                       with ordinality as o(s, open, ord)
                        where o.open order by o.ord)
               ) with ordinality as s(task_id, result, ord);
        _k := 1;
        for _i in 1 .. _n loop
          continue when not _open[_i];
          if _ids[_k] <> _task_ids[_i] then
            raise exception 'completions out of order' using errcode = 'XX000';
          end if;
          _result[_i] := _settled[_k];
          if _settled[_k] not in ('completed', 'retry_scheduled') then
            -- Refused: nothing of this task may commit.
            _open[_i] := false;
            _refused := true;
          end if;
          _k := _k + 1;
        end loop;
        if _refused then
          raise exception 'a completion of the call was refused' using errcode = 'QREFU';
        end if;
      end if;
    exception when sqlstate 'QREFU' then
      -- Everything of this pass rolled back; the others again, without the refused ones.
      null;
    end;
    exit when not _refused;
  end loop;

  return query
  select s.t, s.r, s.o, array(select jsonb_array_elements_text(coalesce(s.e, '[]')))
    from unnest(_task_ids, _result, _out, _errs) with ordinality as s(t, r, o, e, ord)
   order by s.ord;
end;
$$;

revoke execute on function queues.settle_with_handlers(bigint[], bigint[], text[], boolean[], bigint[], text[],
                                                       text[], jsonb[], text[], text[], bigint[], text[]) from public;
grant execute on function queues.settle_with_handlers(bigint[], bigint[], text[], boolean[], bigint[], text[],
                                                      text[], jsonb[], text[], text[], bigint[], text[]) to :DATABASE_WORKER;
--! EndIncluded queues/settle.sql

--! split: 900-privileges.sql
set local lock_timeout = '5s';
-- The worker's grants of the hot path, after every function of this migration exists.
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
  queues.revoke_worker_leases(text)
to :DATABASE_WORKER;
--! EndIncluded queues/privileges-hot-path.sql
