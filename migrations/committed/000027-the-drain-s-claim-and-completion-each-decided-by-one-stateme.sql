--! Previous: sha1:5ee3dca8044810983d80429d9022a19af17c9026
--! Hash: sha1:772925fa9b9cdacdb778614fe673953b1b1aebbd
--! Message: The drain's claim and completion each decided by one statement when plain (the claim lease names its tasks' one type), reading the rounds of a lease once per call and history partitions only where the call's tasks are; a heartbeat probes by key; lease-held readers skip leases whose tasks all ended, and the overview counts read lease-held counts

--! split: 400-completion-ends.sql
set local lock_timeout = '5s';

-- A claim lease names its tasks' one type (null when the claim took several types): the
-- completion round of its plain successes reads it instead of each task's.
alter table queues.claim_lease add column if not exists task_type text;
comment on column queues.claim_lease.task_type is
  'The one task type of the claim''s tasks; null when the claim took tasks of several types.';

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
  -- The drain's claim (below): the ready tasks it picked, whether all are plain, their
  -- one type.
  _picked      bigint[];
  _plain       boolean;
  _picked_type text;
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

  -- The drain's claim: no flow limit and no throttled group key for the types asked for,
  -- no expired lease among them, and the first _limit ready tasks in claim order all on
  -- their first lease and unkeyed (none a suspect, none to abandon, none leased on its
  -- row). Then, without the per-row stages below, one statement picks them and another
  -- leases them; when any of that does not hold, nothing is leased and the statement
  -- below claims as always (the rows the pick locked are this transaction's, so it finds
  -- them). The same ready tasks, in the same order, as that statement's candidates.
  if cardinality(_limited) = 0 and cardinality(_throttled_groups) = 0 then
    -- The candidates, locked, in claim order (ids ascending here), and whether they are
    -- all plain.
    select array_agg(pk.task_id order by pk.task_id),
           coalesce(bool_and(pk.lease_count = 0 and pk.resource_key is null), false),
           case when min(pk.task_type) = max(pk.task_type) then min(pk.task_type) end
      into _picked, _plain, _picked_type
      from (select r.*
              from (select distinct u.task_type
                      from unnest(coalesce(_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
             cross join lateral (
               select p.task_id, p.task_type, p.resource_key, p.priority, p.scheduled_at, p.lease_count
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
             order by r.priority desc, r.scheduled_at, r.task_id
             limit _limit) pk;
    -- (a scalar subquery in the expired leases' index order, as below)
    if _plain and (select true from queues.task_pending p
                    where p.current_lease_id > 0 and p.available_at <= _now
                      and (_types is null or p.task_type = any (_types))
                    order by p.available_at limit 1) is null then
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
        returning p.task_id, l.task_lease_id
      )
      select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
             t.enqueued_at, t.scheduled_at, m.task_lease_id, _now, _now + make_interval(secs => _lease_seconds),
             1, t.timeout_ms
        from taken m
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
    -- Named by the lease and not ended (in a round of the lease's range): one sort of the
    -- call's tasks beside the lease's and the rounds', as lease_open below.
    open as (
      select o.task_id, o.started_at
        from (select u.*, bool_or(u.src = 1) over w as named, bool_or(u.src = 2) over w as ended
                from (select i.task_id, i.started_at, 0 as src
                        from unnest(_task_ids, coalesce(_started_at, array_fill(null::timestamptz, array[cardinality(_task_ids)])))
                             i(task_id, started_at)
                      union all
                      select m.task_id, null::timestamptz, 1 from lease l cross join lateral unnest(l.task_ids) m(task_id)
                      union all
                      select g.task_id, null::timestamptz, 2
                        from lease l
                        join queues.completion_round r
                          on r.task_range && l.task_range and r.task_id >= lower(l.task_range) and r.task_id >= _lo
                       cross join lateral unnest(r.task_ids) g(task_id)) u
              window w as (partition by u.task_id)) o
       where o.src = 0 and o.named and not o.ended
         and (select true from queues.task_completed c
               where c.task_id = o.task_id and c.task_id between _lo and _hi) is null
         and (select true from queues.task_pending p where p.task_id = o.task_id) is null
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
           -- (Scalar subqueries: a probe by key per task, never a join planned from the
           -- tables' statistics, which a queue vacuumed nearly empty made a scan of the
           -- whole claim index per task.)
           and (select true from queues.task_pending p where p.task_id = i.task_id) is null
           and coalesce((select i.task_id = any (c.task_ids) from queues.claim_lease c
                          where c.task_lease_id = i.task_lease_id limit 1), false)
           and (select true from queues.task_end_of(i.task_id) e limit 1) is null
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
       and (select true from queues.task_pending p where p.task_id = i.task_id) is null
       and (select true from queues.task_end_of(i.task_id) e limit 1) is null
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

--! split: 500-lease-held-counts.sql
set local lock_timeout = '5s';
-- The readers of lease-held tasks: a claim lease whose tasks all ended under it is not
-- unnested; counts read the lease-held tasks per claim lease and type.
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
  left join queues.task_run_now rn on rn.task_id = h.task_id;
comment on view queues.task_pending_or_held is
  'Every task not ended, in queues.task_pending''s shape: the claim index''s rows, and each lease-held task (queues.lease_held_tasks) leased by its claim lease (lease_held). A task''s own: queues.task_pending_or_held_of(task_id). See sql/queues/lease_held.sql.';

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
  from queues.lease_held_counts h;
comment on view queues.task_pending_or_held_counts is
  'Every task not ended, counted: the claim index''s rows (tasks 1) and the lease-held tasks per claim lease and type (queues.lease_held_counts), in queues.task_pending_or_held''s shape; sum(tasks) is its count(*). See sql/queues/lease_held.sql.';

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
           sum(p.tasks) as n
      -- the claim index and the lease-held tasks, counted per claim lease
      -- (sql/queues/lease_held.sql)
      from queues.task_pending_or_held_counts p
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
    -- the claim index and the lease-held tasks, counted per claim lease (sql/queues/lease_held.sql)
    select p.task_type, sum(p.tasks) as n from queues.task_pending_or_held_counts p group by 1
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
--! Included admin/capacity.sql
-- Capacity planning per role (= task_type): how much work is waiting, how fast a worker
-- gets through it while it works, and how many workers would drain it in 1, 4 or 8 hours.
-- The role-based specification's view of it is public.v_worker_capacity
-- (sql/public/role_based_worker.sql).
--
-- Cost: pending/ready/running count queues.task_pending_or_held_counts (the claim index,
-- and the lease-held tasks per claim lease and type, sql/queues/lease_held.sql: bounded by
-- pending work);
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
           sum(p.tasks) as pending,
           coalesce(sum(p.tasks) filter (where p.available_at <= _now), 0) as ready,
           coalesce(sum(p.tasks) filter (where p.available_at > _now and p.current_lease_id is not null), 0) as running
      -- the claim index and the lease-held tasks, counted per claim lease
      -- (sql/queues/lease_held.sql)
      from queues.task_pending_or_held_counts p
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
  -- range), joined at once (a claim lease by its id: one row per claim, not one per task
  -- it names); a completion of an older task probes its lease
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
                     where y.task_id >= _first) l
                on l.task_id = c.task_id and l.task_lease_id = c.task_lease_id
             where c.task_id >= _first
            union all
            -- a claim lease by its id alone (one row per claim, its array not unnested: a
            -- completion under a claim lease is of a task it names)
            select c.task_type, l.worker_key, null, c.completed_at,
                   coalesce(c.started_at,
                            (select st.started_at from queues.task_lease_started st
                              where st.task_id = c.task_id and st.task_lease_id = c.task_lease_id),
                            l.leased_at)
              from completion c
              join (select y.task_lease_id, y.worker_key, y.leased_at
                      from queues.claim_lease y
                     where y.task_id >= _first) l
                on l.task_lease_id = c.task_lease_id
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
