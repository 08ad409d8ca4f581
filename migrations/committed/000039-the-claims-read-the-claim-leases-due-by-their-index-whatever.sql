--! Previous: sha1:dacb40eec01f384200f2f4214c4ea69f35ccf3d9
--! Hash: sha1:d06285eca6908ed996725387b02c18ca72a47dc3
--! Message: The claims read the claim leases due by their index whatever the size of the table when a session planned them

--! split: 400-claim-lease-due-by-index.sql
set local lock_timeout = '5s';

-- The claims read the claim leases due by their index whatever the table's size when a
-- session planned them (two leaf functions with enable_seqscan = off), and a heartbeat
-- probes task_pending by key whatever its statistics. The drain's claim reads whether a
-- lease expired in its pick's statement.
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

-- The rows of queues.claim_lease_due read by the claims, each by its index whatever the
-- table's size when the session planned it. The table holds a row per claim made within
-- the lease time: empty, and known empty once vacuumed, on an idle queue; thousands on a
-- busy one. A generic plan made while it was empty (a session's first claim) scans and
-- sorts the whole table on every later call. Each function below sets enable_seqscan =
-- off for its own statement only: it calls no other function, so no plan made under the
-- setting serves another caller.
--
-- The earliest expiry of a claim lease not yet rescued (null: none), one probe of
-- claim_lease_due_expires_at_idx; queues.claim_tasks_at runs the rescuer when it is due.
create or replace function queues.earliest_claim_lease_due()
  returns timestamptz
  language sql stable
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
  select d.expires_at from queues.claim_lease_due d order by d.expires_at limit 1;
$$;

-- Takes up to 100 rows of the claim leases due by _now, oldest expiry first, skipping
-- rows another pass holds (skip locked), and deletes them: returns each one's lease and
-- task. The rows are deleted by primary key from the array of the due ones
-- (= any (array(...))): an IN was planned as a semi-join that read every row.
create or replace function queues.take_due_claim_leases_at(_now timestamptz)
  returns table (task_lease_id bigint, task_id bigint)
  language sql volatile
  set enable_seqscan = off
  set search_path = pg_catalog, pg_temp
as $$
  delete from queues.claim_lease_due d
   where d.task_lease_id = any (array(select x.task_lease_id from queues.claim_lease_due x
                                       where x.expires_at <= _now
                                       order by x.expires_at
                                       limit 100
                                         for update skip locked))
  returning d.task_lease_id, d.task_id;
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
    select t.task_lease_id, t.task_id from queues.take_due_claim_leases_at(_now) t
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
  -- session planned it: queues.earliest_claim_lease_due) and returns their unfinished
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
  select queues.earliest_claim_lease_due() <= _now,
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
       -- (one index scan of the claim's ids, bounded by its least and greatest, known when
       -- the plan starts: the history partitions none of them is in are left out, neither
       -- locked nor opened)
        from queues.task t
       cross join (select l.task_lease_id from leased l) m
       where t.task_id = any (_picked) and t.task_id between _picked[1] and _picked[cardinality(_picked)]
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
  -- Every read is by key (task_pending's and claim_lease's primary keys, resource_lease's
  -- key): a plan made while task_pending looked nearly empty (a queue vacuumed just after
  -- it drained) must not probe it by a sequential scan per task once it has filled again.
  set enable_seqscan = off
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
