--! Previous: sha1:20561af1404f12242489398235de35fcc91d6b30
--! Hash: sha1:dc25d3f8fceb6bfe846d9bb57237f6dd9ad15274
--! Message: Faster hot paths (generic plans, set-based enqueue_many validation) and suspects claimed one at a time

--! split: 100-queues.sql
-- Queue core changes (sql/queues, sql/internal). Include changed files here.
-- Set-based validation in enqueue_many; claim and complete planned once; suspects claimed one at a time.
--! Included queues/enqueue.sql
-- queues.enqueue / queues.enqueue_many: add tasks. Used by SQL (supervisors, kickoff
-- functions) and by apps through @org/queue-client; the worker never enqueues.

-- Payloads are limited so one bad caller cannot fill the table or the worker's memory.
create or replace function queues.max_payload_bytes() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 1048576 $$;

-- Validates one task's fields; raises a clear error naming the offending field.
-- _where prefixes messages ('' for a single task, 'tasks[3]: ' in a batch).
create or replace function queues.assert_valid_task(
  _task_type text, _payload jsonb, _priority integer, _resource_key text,
  _max_attempts integer, _where text default ''
) returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_type is null then
    raise exception '%task_type must not be null', _where using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception '%unknown task_type %', _where, quote_literal(left(_task_type, 100))
      using errcode = '22023',
            hint = 'Known task types are listed in queues.task_type.';
  end if;
  if _payload is null then
    raise exception '%payload must not be null', _where using errcode = '22004';
  end if;
  if jsonb_typeof(_payload) <> 'object' then
    raise exception '%payload must be a JSON object, got %', _where, jsonb_typeof(_payload)
      using errcode = '22023';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    raise exception '%payload is % bytes, over the limit of % bytes',
      _where, pg_column_size(_payload), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  if _priority is not null and _priority not between -1000 and 1000 then
    raise exception '%priority must be between -1000 and 1000, got %', _where, _priority
      using errcode = '22023';
  end if;
  if _resource_key is not null and length(_resource_key) not between 1 and 200 then
    raise exception '%resource_key must be 1 to 200 characters', _where using errcode = '22023';
  end if;
  if _max_attempts is not null and _max_attempts not between 1 and 100 then
    raise exception '%max_attempts must be between 1 and 100, got %', _where, _max_attempts
      using errcode = '22023';
  end if;
end;
$$;

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, one attempt), since generated clients send undefined as NULL.
create or replace function queues.enqueue(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task queues.task;
begin
  perform queues.assert_valid_task(_task_type, _payload, _priority, _resource_key, _max_attempts);

  insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
  values (_task_type, _payload, coalesce(_priority, 0), _resource_key,
          coalesce(_max_attempts, 1), coalesce(_scheduled_at, now()))
  returning * into _task;

  insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts)
  values (_task.task_id, _task.task_type, _task.priority, _task.scheduled_at,
          _task.resource_key, _task.scheduled_at, _task.max_attempts);

  return _task.task_id;
end;
$$;

-- Enqueue many tasks in one statement. _tasks is a JSON array of objects:
--   {"task_type": "...", "payload": {...}, "scheduled_at"?: "...", "priority"?: 0,
--    "resource_key"?: "...", "max_attempts"?: 1}
-- Returns the task_ids in input order. All or nothing: one bad element rejects the batch.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _problem record;
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

  -- Every element checked in one set-based pass (as queues.assert_valid_task checks a
  -- single task); the first problem, in input order, is raised.
  select p.idx, p.code, p.message into _problem
    from (
      select e.ordinality - 1 as idx, c.code, c.message
        from jsonb_array_elements(_tasks) with ordinality e
        cross join lateral (
          select case
            when jsonb_typeof(e.value) <> 'object' then '22023'
            when u.keys is not null then '22023'
            when e.value ->> 'task_type' is null then '22004'
            when t.task_type is null then '22023'
            when e.value -> 'payload' is null then '22004'
            when jsonb_typeof(e.value -> 'payload') <> 'object' then '22023'
            when pg_column_size(e.value -> 'payload') > queues.max_payload_bytes() then '54000'
            when (e.value ->> 'priority')::integer not between -1000 and 1000 then '22023'
            when length(e.value ->> 'resource_key') not between 1 and 200 then '22023'
            when (e.value ->> 'max_attempts')::integer not between 1 and 100 then '22023'
          end as code,
          case
            when jsonb_typeof(e.value) <> 'object' then format('must be a JSON object, got %s', jsonb_typeof(e.value))
            when u.keys is not null then format('unknown field(s) %s', left(u.keys, 200))
            when e.value ->> 'task_type' is null then 'task_type must not be null'
            when t.task_type is null then format('unknown task_type %s', quote_literal(left(e.value ->> 'task_type', 100)))
            when e.value -> 'payload' is null then 'payload must not be null'
            when jsonb_typeof(e.value -> 'payload') <> 'object' then format('payload must be a JSON object, got %s', jsonb_typeof(e.value -> 'payload'))
            when pg_column_size(e.value -> 'payload') > queues.max_payload_bytes() then
              format('payload is %s bytes, over the limit of %s bytes', pg_column_size(e.value -> 'payload'), queues.max_payload_bytes())
            when (e.value ->> 'priority')::integer not between -1000 and 1000 then
              format('priority must be between -1000 and 1000, got %s', e.value ->> 'priority')
            when length(e.value ->> 'resource_key') not between 1 and 200 then 'resource_key must be 1 to 200 characters'
            when (e.value ->> 'max_attempts')::integer not between 1 and 100 then
              format('max_attempts must be between 1 and 100, got %s', e.value ->> 'max_attempts')
          end as message
          from (select 1) one
          left join lateral (
            select string_agg(k, ', ') as keys
              from jsonb_object_keys(case when jsonb_typeof(e.value) = 'object' then e.value else '{}' end) k
             where k not in ('task_type', 'payload', 'scheduled_at', 'priority', 'resource_key', 'max_attempts')
          ) u on true
          left join queues.task_type t
            on jsonb_typeof(e.value) = 'object' and t.task_type = e.value ->> 'task_type'
        ) c
    ) p
   where p.code is not null
   order by p.idx
   limit 1;
  if found and _problem.message like 'unknown task_type%' then
    raise exception 'tasks[%]: %', _problem.idx, _problem.message using errcode = _problem.code,
      hint = 'Known task types are listed in queues.task_type.';
  elsif found then
    raise exception 'tasks[%]: %', _problem.idx, _problem.message using errcode = _problem.code;
  end if;

  return query
  with input as (
    select e.ordinality - 1 as idx, r.*
      from jsonb_array_elements(_tasks) with ordinality e,
           jsonb_to_record(e.value) as r(task_type text, payload jsonb, scheduled_at timestamptz,
                                         priority integer, resource_key text, max_attempts integer)
  ),
  inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
    select c.task_type, c.payload, coalesce(c.priority, 0), c.resource_key,
           coalesce(c.max_attempts, 1), coalesce(c.scheduled_at, now())
      from input c
     order by c.idx
    returning *
  ),
  pending as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts)
    select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts
      from inserted i
  )
  select i.task_id from inserted i order by i.task_id;
end;
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
-- Poison tasks: a task that comes up for claiming after _max_leases leases expired
-- without completion (releases and reported failed attempts excepted) is completed as
-- 'abandoned' with an error
-- instead of being leased again, so a task that kills its worker cannot loop forever.

drop function if exists queues.claim_tasks_at(timestamptz, text, integer, text[], integer);
drop function if exists queues.claim_tasks(text, integer, text[], integer);

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
  lease_count   integer
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

  return query
  with picked as (
    -- SKIP LOCKED skips rows another claimer holds; the update below makes any claimer
    -- that arrives after our commit re-check available_at on the new row version.
    select p.task_id, p.current_lease_id, p.resource_key, p.priority, p.scheduled_at,
           -- Leases that ended neither by a release nor by a reported failed attempt:
           -- they expired (or were revoked) while a worker held them.
           p.lease_count - p.released_count - p.failed_attempts >= _max_leases as poisoned,
           p.lease_count - p.released_count - p.failed_attempts as expired_leases
      from queues.task_pending p
     where p.available_at <= _now
       and (_task_types is null or p.task_type = any (_task_types))
       -- Tasks whose resource key another task holds wait (the upsert below decides).
       and (p.resource_key is null or not exists (
             select 1 from queues.resource_lease r
              where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
     order by p.priority desc, p.scheduled_at, p.task_id
     limit _limit
       for update skip locked
  ),
  -- Resource keys: one task per key in this batch, and only if no other task holds the
  -- key. The upsert decides on the newest committed row (not this statement's snapshot),
  -- so two claimers never both take a key.
  -- Suspects (tasks whose last lease expired: their worker may have died of them) are
  -- leased one per claim, so the tasks a crashed worker held, which all come back at the
  -- same moment, do not all land in one worker again beside the task that crashed it.
  allowed as (
    select pk.task_id, pk.resource_key, pk.priority, pk.scheduled_at
      from (select pk.*,
                   row_number() over (partition by pk.expired_leases > 0
                                      order by pk.priority desc, pk.scheduled_at, pk.task_id) as rank
              from picked pk
             where not pk.poisoned) pk
     where pk.expired_leases = 0 or pk.rank = 1
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
    select pk.task_id
      from allowed pk
     where pk.resource_key is null or pk.task_id in (select kt.task_id from key_taken kt)
  ),
  abandoned_error as (
    insert into queues.error (task_id, task_lease_id, error_message)
    select pk.task_id, pk.current_lease_id,
           format('abandoned: %s leases expired without completion (max_leases %s)', pk.expired_leases, _max_leases)
      from picked pk where pk.poisoned
  ),
  abandoned as (
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome)
    select pk.task_id, pk.current_lease_id, _now, 'abandoned' from picked pk where pk.poisoned
  ),
  abandoned_removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select pk.task_id from picked pk where pk.poisoned))
  ),
  leased as (
    insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
    select e.task_id, _worker_id, _now, _now + make_interval(secs => _lease_seconds)
      from eligible e
    returning *
  ),
  -- Plan shapes below are chosen so that cost follows the claimed rows only, whatever
  -- the planner estimates for _limit: `= any(array(...))` probes the primary key, and
  -- the lateral `limit 1` keeps the task lookup a nested loop over the claimed ids.
  moved as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds),
           current_lease_id = (select l.task_lease_id from leased l where l.task_id = p.task_id),
           lease_count = p.lease_count + 1
     where p.task_id = any (array(select l.task_id from leased l))
    returning p.task_id, p.lease_count
  )
  select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
         t.enqueued_at, t.scheduled_at, l.task_lease_id, l.leased_at, l.expires_at, m.lease_count
    from leased l
    join moved m on m.task_id = l.task_id
   cross join lateral (
     select * from queues.task t where t.task_id = l.task_id limit 1
   ) t
   order by t.priority desc, t.scheduled_at, t.task_id;
end;
$$;

-- Claim up to _limit ready tasks (optionally only of _task_types) for _worker_id, each
-- with a new lease of _lease_seconds (default 300). Ready: not completed, scheduled_at
-- reached, no live lease. Order: priority desc, scheduled_at, task_id. Tasks that had
-- _max_leases (default 5) leases expire are abandoned instead (see above).
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
  lease_count   integer
)
  language sql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from queues.claim_tasks_at(now(), _worker_id, coalesce(_limit, 1), _task_types,
                                      coalesce(_lease_seconds, 300), coalesce(_max_leases, 5))
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
         c.enqueued_at, c.scheduled_at
    from queues.claim_tasks_at(now(), coalesce(_worker_id, session_user::text), 1, null,
                               coalesce(_lease_seconds, 300), 5) c
$$;
--! EndIncluded queues/claim.sql
--! Included queues/complete.sql
-- Completion: queues.complete_task (one) and queues.complete_tasks (a batch).
--
-- Fencing: a caller that passes the lease it holds can only complete while that lease
-- is the task's newest one. A worker whose lease expired and was re-claimed by another
-- worker gets 'lease_lost' and changes nothing.

-- Completes a batch. Parallel arrays: _task_lease_ids and _outcomes may be null (no
-- fencing, outcome 'succeeded') or have one element per task (elements may be null).
-- A 'failed' outcome for a task with max_attempts > 1 and attempts left is not terminal:
-- the attempt is recorded (queues.task_attempt_failed) and the task runs again after an
-- exponential backoff (internal.backoff).
-- Returns one row per input task, in input order: result is
--   'completed'          this call completed it
--   'retry_scheduled'    a failed attempt of a task that runs again
--   'already_completed'  it was completed before, under the same lease or without one
--                        (idempotent; nothing changed)
--   'lease_lost'         _task_lease_id is not the task's current lease, or the task was
--                        completed under another lease (nothing changed)
--   'unknown_task'       no such task
create or replace function queues.complete_tasks(
  _task_ids       bigint[],
  _task_lease_ids bigint[] default null,
  _outcomes       text[] default null
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
  select o into _bad from unnest(_outcomes) o
   where o is not null and o not in ('succeeded', 'failed', 'abandoned', 'cancelled') limit 1;
  if found then
    raise exception 'unknown outcome %; expected succeeded, failed, abandoned or cancelled',
      quote_literal(left(_bad, 100)) using errcode = '22023';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;

  perform queues.lock_resource_keys(_task_ids);

  return query
  with input as (
    select i.task_id, i.task_lease_id, coalesce(i.outcome, 'succeeded') as outcome, i.ord
      from unnest(_task_ids,
                  coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])),
                  coalesce(_outcomes, array_fill(null::text, array[cardinality(_task_ids)])))
           with ordinality as i(task_id, task_lease_id, outcome, ord)
  ),
  -- The pending rows this call may act on, locked: a concurrent claim skips them, a
  -- concurrent completion waits and then finds nothing.
  held as (
    select p.task_id, p.current_lease_id, p.resource_key, i.task_lease_id, i.outcome,
           i.outcome = 'failed' and p.failed_attempts + 1 < p.max_attempts as retry,
           p.failed_attempts
      from queues.task_pending p
      join input i on i.task_id = p.task_id
     where i.task_lease_id is null or p.current_lease_id = i.task_lease_id
       for update of p
  ),
  -- Simple retries: a failed attempt with attempts left runs again after a backoff.
  retry_facts as (
    insert into queues.task_attempt_failed (task_id, task_lease_id, failed_at, retry_at)
    select h.task_id, h.current_lease_id, now(), now() + internal.backoff(h.failed_attempts, 3600)
      from held h where h.retry
    returning task_id, retry_at
  ),
  retried as (
    update queues.task_pending p
       set available_at = (select r.retry_at from retry_facts r where r.task_id = p.task_id),
           current_lease_id = null,
           failed_attempts = p.failed_attempts + 1
     where p.task_id = any (array(select r.task_id from retry_facts r))
    returning p.task_id
  ),
  removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select h.task_id from held h where not h.retry))
    returning p.task_id
  ),
  completed as (
    insert into queues.task_completed (task_id, task_lease_id, outcome)
    select h.task_id, coalesce(h.task_lease_id, h.current_lease_id), h.outcome
      from held h where not h.retry
    on conflict do nothing
    returning task_completed.task_id
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
           when exists (select 1 from queues.task_completed tc
                         where tc.task_id = i.task_id
                           and i.task_lease_id is not null
                           and tc.task_lease_id is distinct from i.task_lease_id)
             then 'lease_lost'
           when exists (select 1 from queues.task_completed tc where tc.task_id = i.task_id)
             then 'already_completed'
           when not exists (select 1 from queues.task t where t.task_id = i.task_id)
             then 'unknown_task'
           else 'lease_lost'
         end
    from input i
    left join completed c on c.task_id = i.task_id
    left join retried rt on rt.task_id = i.task_id
   order by i.ord;
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
    raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
      using errcode = '55000', hint = 'Another worker claimed the task after this lease expired.';
  end if;
  return _result in ('completed', 'retry_scheduled');
end;
$$;
--! EndIncluded queues/complete.sql

--! split: 200-domains.sql
-- Business domains (sql/comms, sql/files, sql/accounts, sql/api). Include changed files here.

--! split: 300-operations.sql
-- Operations: admin functions for the REST API (sql/admin), schedules (sql/schedules).
