--! Previous: sha1:2e20ef2c2c4e3eb7e34f4689b04994be7d2074a3
--! Hash: sha1:c876c1a931405827456e9a742557638ad568884e
--! Message: Hot path: lean claim and complete, no foreign keys on hot facts, settle_tasks, run_steps, start marks; business-process skeletons for accounts

--! split: 120-hotpath.sql
-- Hot path: lean claim and completion, started marks, server-side steps.
set local lock_timeout = '5s';
-- lock: access exclusive on queues.task: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_pending: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_lease: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_completed: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_lease_extension: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_lease_release: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_lease_revocation: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_attempt_failed: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.error: dropping its foreign keys (or those to it) and the truncate trigger; catalog only, no rewrite or scan, held for the instant of the change

-- Foreign keys from the hot facts to queues.task and queues.task_lease are dropped: each
-- one made every fact insert probe and FOR KEY SHARE-lock its parent row (a tuple write on
-- an immutable row) and cost about 20 µs per task on the drain (BENCHMARKS.md, "where a
-- task's time goes"). The security-definer functions of sql/queues are the only writers of
-- these tables (the worker, app and api roles have no table privileges) and write a fact
-- only for a task or lease they have just read or locked; sql/queues/relations.test.ts
-- checks that no orphan fact exists after a concurrent workload. Keys are still task_id
-- first, so a task_id range partitioning of the facts keeps them local.
-- Locks: dropping a foreign key takes ACCESS EXCLUSIVE on the referencing table and
-- SHARE ROW EXCLUSIVE on the referenced one, briefly (lock_timeout above).
-- lock: access exclusive on queues.task: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_lease: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_completed: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_pending: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_lease_extension: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_lease_release: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.error: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_lease_revocation: dropping its foreign keys (or one pointing at it), briefly
-- lock: access exclusive on queues.task_attempt_failed: dropping its foreign keys (or one pointing at it), briefly
alter table queues.task_lease drop constraint if exists task_lease_task_id_fkey;
alter table queues.task_completed drop constraint if exists task_completed_task_id_fkey;
alter table queues.task_completed drop constraint if exists task_completed_task_lease_id_fkey;
alter table queues.task_pending drop constraint if exists task_pending_task_id_fkey;
alter table queues.task_lease_extension drop constraint if exists task_lease_extension_task_lease_id_fkey;
alter table queues.task_lease_release drop constraint if exists task_lease_release_task_lease_id_fkey;
-- Cold facts keep their keys to queues.task; their keys to queues.task_lease go too, so
-- that queues.task_lease can be truncated with the other hot facts (below).
alter table queues.error drop constraint if exists error_task_lease_id_fkey;
alter table queues.task_lease_revocation drop constraint if exists task_lease_revocation_task_lease_id_fkey;
alter table queues.task_attempt_failed drop constraint if exists task_attempt_failed_task_lease_id_fkey;
-- (A table that refers to a lease keeps task_id with a key to queues.task and no key to
-- queues.task_lease, so that the trigger below can truncate queues.task_lease.)
alter table queues.task_interruption drop constraint if exists task_interruption_task_lease_id_fkey;

-- Without the foreign keys, TRUNCATE queues.task ... CASCADE would leave these facts
-- behind: truncating queues.task truncates them too (retention tooling and tests rely on it).
create or replace function queues.truncate_task_facts() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  truncate queues.task_pending, queues.task_lease, queues.task_completed, queues.task_lease_extension,
           queues.task_lease_release, queues.task_lease_revocation, queues.task_lease_started;
  return null;
end;
$$;
drop trigger if exists truncate_task_facts on queues.task;
create trigger truncate_task_facts after truncate on queues.task
  for each statement execute function queues.truncate_task_facts();

-- A lease whose task the worker started (a processor ran, or a step began). Written by
-- the worker's completer before the task runs, in the same round trip as completions.
-- Only a started lease that expires counts towards abandoning the task and makes it a
-- suspect: tasks that waited in a crashed worker's local queue come back as ordinary
-- ready tasks. Append-only.
create table if not exists queues.task_lease_started (
  task_id       bigint not null,
  task_lease_id bigint not null,
  started_at    timestamptz not null default now(),
  primary key (task_id, task_lease_id)
);
comment on table queues.task_lease_started is 'Append-only: a lease whose task its worker started.';
drop trigger if exists forbid_update on queues.task_lease_started;
create trigger forbid_update before update on queues.task_lease_started
  for each statement execute function queues.forbid_fact_update();

-- Leases that ended without their task being started (expired or revoked while queued
-- in a worker's local queue): they count neither as expired leases nor as suspects.
alter table queues.task_pending add column if not exists unstarted_count integer not null default 0;

-- The claim reads ready rows of the caller's task types only: unleased rows by type in
-- claim order (rows holding a lease are not in this index, so a claim does not re-read
-- the tasks running everywhere), and leased rows by expiry (a claim reads only those
-- whose lease has expired).
create index if not exists task_pending_ready_idx
  on queues.task_pending (task_type, priority desc, scheduled_at, task_id)
  where current_lease_id is null;
create index if not exists task_pending_leased_idx
  on queues.task_pending (available_at)
  where current_lease_id is not null;
drop index if exists queues.task_pending_claim_idx;

drop function if exists queues.settle_tasks(bigint[], bigint[], bigint[], bigint[], text[], bigint[], text[]);
--! Included queues/enqueue.sql
-- queues.enqueue / queues.enqueue_many: add tasks. Apps call them through
-- @org/queue-client; they refuse internal task types (sql/queues/enqueue_permission.sql).
-- The owner's SQL (supervisors, handlers, kickoffs, schedules) calls the grant-less
-- queues.enqueue_internal. The worker never enqueues.

-- Payloads are limited so one bad caller cannot fill the table or the worker's memory.
create or replace function queues.max_payload_bytes() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 1048576 $$;

-- And so is their nesting: a payload nested deeper than queues.max_payload_depth()
-- containers (objects and arrays) is refused, since parsers that recurse (the worker's
-- among them) would run out of stack.
create or replace function queues.max_payload_depth() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 64 $$;

-- True when some value of _payload sits inside more than queues.max_payload_depth()
-- containers (the jsonpath level must be a literal: 65 = max_payload_depth() + 1).
create or replace function queues.is_payload_too_deep(_payload jsonb) returns boolean
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select jsonb_path_exists(_payload, 'strict $.**{65}') $$;

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
  if queues.is_payload_too_deep(_payload) then
    raise exception '%payload is nested deeper than % levels', _where, queues.max_payload_depth()
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

-- The core of queues.enqueue, for the public functions and SQL callers that decide who
-- may enqueue before they call it (no grants): validates one task and inserts it and its
-- claim-index row in one statement. Returns its task_id.
create or replace function queues.enqueue_task(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz,
  _priority     integer,
  _resource_key text,
  _max_attempts integer
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  perform queues.assert_valid_task(_task_type, _payload, _priority, _resource_key, _max_attempts);
  if _scheduled_at is not null and not isfinite(_scheduled_at) then
    raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
  end if;

  with inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at)
    values (_task_type, _payload, coalesce(_priority, 0), _resource_key,
            coalesce(_max_attempts, 1), coalesce(_scheduled_at, now()))
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts
  )
  insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts)
  select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts
    from inserted i
  returning task_id into _task_id;

  return _task_id;
end;
$$;

-- Enqueue one task for an app; returns its task_id. NULL arguments take the defaults (now,
-- 0, no resource key, one attempt), since generated clients send undefined as NULL.
-- Refuses internal task types (42501), then a thin wrapper over queues.enqueue_task.
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
begin
  perform queues.assert_may_enqueue(_task_type);
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts);
end;
$$;

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, one attempt), since generated clients send undefined as NULL.
-- Owner only (no grant): the owner's SQL enqueues any task type through it. A thin alias
-- of the core queues.enqueue_task, with the defaults of queues.enqueue.
create or replace function queues.enqueue_internal(
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
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts);
end;
$$;

-- Enqueue many tasks in one statement. _tasks is a JSON array of objects:
--   {"task_type": "...", "payload": {...}, "scheduled_at"?: "...", "priority"?: 0,
--    "resource_key"?: "...", "max_attempts"?: 1}
-- Returns the task_ids in input order. All or nothing: one bad element rejects the batch.
-- The core of queues.enqueue_many (no grants; see queues.enqueue_task): one validation
-- statement and one insert statement per batch.
create or replace function queues.enqueue_tasks(_tasks jsonb)
  returns table (task_id bigint)
  language plpgsql volatile
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
            when queues.is_payload_too_deep(e.value -> 'payload') then '54000'
            when not isfinite((e.value ->> 'scheduled_at')::timestamptz) then '22023'
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
            when queues.is_payload_too_deep(e.value -> 'payload') then
              format('payload is nested deeper than %s levels', queues.max_payload_depth())
            when not isfinite((e.value ->> 'scheduled_at')::timestamptz) then
              format('scheduled_at must be a finite time, got %s', e.value ->> 'scheduled_at')
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

-- Enqueue many tasks (see queues.enqueue_tasks). Refuses internal task types (42501), as
-- queues.enqueue, then a thin wrapper over queues.enqueue_tasks.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform queues.assert_may_enqueue_many(_tasks);
  return query select t.task_id from queues.enqueue_tasks(_tasks) t;
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
-- without completion (releases, reported failed attempts and leases of tasks never
-- started excepted, see queues.task_lease_started) is completed as 'abandoned' with an error
-- instead of being leased again, so a task that kills its worker cannot loop forever.

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
  with candidate as (
    -- Ready tasks without a lease, per task type, from task_pending_ready_idx in claim
    -- order: rows leased by anyone are not in that index, and scheduled_at <= _now lets
    -- the scan stop (or skip to the next priority) at the first future task. (For a row
    -- without a lease available_at >= scheduled_at, so the extra bound changes nothing.)
    -- SKIP LOCKED skips rows another claimer holds; the update below makes any claimer
    -- that arrives after our commit re-check current_lease_id on the new row version.
    select r.*
      from (select distinct u.task_type
              from unnest(coalesce(_task_types, array(select tt.task_type from queues.task_type tt))) as u(task_type)) ty
     cross join lateral (
       select p.task_id, p.current_lease_id, p.resource_key, p.priority, p.scheduled_at,
              p.lease_count - p.released_count - p.failed_attempts - p.unstarted_count as ended_leases
         from queues.task_pending p
        where p.task_type = ty.task_type
          and p.current_lease_id is null
          and p.scheduled_at <= _now
          and p.available_at <= _now
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
    -- task_pending_leased_idx: only expired leases are read.
    select x.*
      from (
        select p.task_id, p.current_lease_id, p.resource_key, p.priority, p.scheduled_at,
               p.lease_count - p.released_count - p.failed_attempts - p.unstarted_count as ended_leases
          from queues.task_pending p
         where p.current_lease_id is not null
           and p.available_at <= _now
           and (_task_types is null or p.task_type = any (_task_types))
           and (p.resource_key is null or not exists (
                 select 1 from queues.resource_lease r
                  where r.resource_key = p.resource_key and r.expires_at > _now and r.task_id <> p.task_id))
         order by p.available_at
         limit _limit
           for update skip locked
      ) x
  ),
  picked as (
    -- Of the candidates (locked until commit), the first _limit in claim order. An expired
    -- lease counts towards abandonment (and makes the task a suspect) only if its task
    -- was started: a task that waited in a dead worker's local queue is not suspect.
    select c.task_id, c.current_lease_id, c.resource_key, c.priority, c.scheduled_at,
           c.ended_leases - c.unstarted_expiry::integer >= _max_leases as poisoned,
           c.ended_leases - c.unstarted_expiry::integer as expired_leases
      from (
        select c.*,
               c.current_lease_id is not null and not exists (
                 select 1 from queues.task_lease_started s
                  where s.task_id = c.task_id and s.task_lease_id = c.current_lease_id) as unstarted_expiry
          from candidate c
         order by c.priority desc, c.scheduled_at, c.task_id
         limit _limit
      ) c
  ),
  -- Resource keys: one task per key in this batch, and only if no other task holds the
  -- key. The upsert decides on the newest committed row (not this statement's snapshot),
  -- so two claimers never both take a key.
  -- Suspects (tasks a started lease of which expired: their worker may have died of them)
  -- are leased one per claim, so the tasks a crashed worker was running, which all come
  -- back at the same moment, do not all land in one worker again beside the task that
  -- crashed it.
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
    -- No lease: the claimer abandoning the task does not hold one, so the last holder's
    -- fenced completion is refused as lease_lost.
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome)
    select pk.task_id, null, _now, 'abandoned' from picked pk where pk.poisoned
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
  -- Set-based: each claimed row is probed by primary key once, for its new lease (the
  -- leases drive a nested loop; no CTE is joined to another CTE, whose row estimates
  -- would make that join quadratic). SET expressions read the row as it was: a lease
  -- still current here expired, and counts as unstarted if its task never started.
  moved as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds),
           current_lease_id = l.task_lease_id,
           lease_count = p.lease_count + 1,
           unstarted_count = p.unstarted_count + (p.current_lease_id is not null and not exists (
             select 1 from queues.task_lease_started s
              where s.task_id = p.task_id and s.task_lease_id = p.current_lease_id))::integer
      from leased l
     where p.task_id = l.task_id
    returning p.task_id, p.lease_count, l.task_lease_id, l.leased_at, l.expires_at
  )
  select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
         t.enqueued_at, t.scheduled_at, m.task_lease_id, m.leased_at, m.expires_at, m.lease_count
    from moved m
   cross join lateral (
     select * from queues.task t where t.task_id = m.task_id limit 1
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
  -- Paused task types are left out (queues.claimable_task_types).
  select * from queues.claim_tasks_at(now(), _worker_id, coalesce(_limit, 1),
                                      queues.claimable_task_types(_task_types),
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

-- Completes a batch. Parallel arrays: _task_lease_ids, _outcomes and _retries may be
-- null (no fencing, outcome 'succeeded', retries allowed) or have one element per task
-- (elements may be null).
-- A 'failed' outcome for a task with max_attempts > 1 and attempts left is not terminal
-- unless its _retries element is false (a failure no retry can mend, such as a
-- validation failure): the attempt is recorded (queues.task_attempt_failed) and the task
-- runs again after an exponential backoff (internal.backoff).
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
  _retries        boolean[] default null
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
  if _retries is not null and cardinality(_retries) <> cardinality(_task_ids) then
    raise exception 'retries must have one element per task (% tasks, % retries)',
      cardinality(_task_ids), cardinality(_retries) using errcode = '22023';
  end if;
  if (select count(distinct t) <> count(*) from unnest(_task_ids) t) then
    raise exception 'task_ids must not repeat a task' using errcode = '22023';
  end if;

  perform queues.lock_resource_keys(_task_ids);

  return query
  with input as (
    select i.task_id, i.task_lease_id, coalesce(i.outcome, 'succeeded') as outcome,
           coalesce(i.retry, true) as may_retry, i.ord
      from unnest(_task_ids,
                  coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])),
                  coalesce(_outcomes, array_fill(null::text, array[cardinality(_task_ids)])),
                  coalesce(_retries, array_fill(null::boolean, array[cardinality(_task_ids)])))
           with ordinality as i(task_id, task_lease_id, outcome, retry, ord)
  ),
  -- The pending rows this call may act on, locked: a concurrent claim skips them, a
  -- concurrent completion waits and then finds nothing.
  held as (
    select p.task_id, p.current_lease_id, p.resource_key, i.task_lease_id, i.outcome,
           i.outcome = 'failed' and i.may_retry and p.failed_attempts + 1 < p.max_attempts as retry,
           p.failed_attempts
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
       set available_at = r.retry_at,
           current_lease_id = null,
           failed_attempts = p.failed_attempts + 1
      from retry_facts r
     where p.task_id = r.task_id
       and p.task_id = any (array(select r2.task_id from retry_facts r2))
    returning p.task_id
  ),
  removed as (
    delete from queues.task_pending p
     where p.task_id = any (array(select h.task_id from held h where not h.retry))
    returning p.task_id
  ),
  completed as (
    insert into queues.task_completed (task_id, task_lease_id, outcome)
    -- The lease the caller held; null when it passed none. A fenced caller is told
    -- 'already_completed' only for a completion made under its own lease.
    select h.task_id, h.task_lease_id, h.outcome
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
--! Included queues/settle.sql
-- The worker's completer: one call per round trip that marks tasks started and completes
-- others, with their error rows. Owner-run (security definer) like every queue writer.

-- Marks leases started (see queues.task_lease_started) and completes tasks (see
-- queues.complete_tasks: fenced by lease, retries, results), recording each error message
-- against its task in the same transaction, only if this call completed the task or
-- scheduled its retry (a refused completion records nothing).
--   _started_task_ids, _started_lease_ids   parallel: leases whose tasks are about to run
--   _task_ids, _task_lease_ids, _outcomes, _retries   parallel: as queues.complete_tasks
--   _error_task_ids, _error_messages        parallel: errors, any number per completed task
-- Returns one row per start (kind 'start', result 'started' or 'lease_lost': the lease is
-- no longer the task's current one, and the task must not run) and one per completion
-- (kind 'complete', result as queues.complete_tasks), starts first, each in input order.
create or replace function queues.settle_tasks(
  _started_task_ids  bigint[],
  _started_lease_ids bigint[],
  _task_ids          bigint[],
  _task_lease_ids    bigint[] default null,
  _outcomes          text[] default null,
  _retries           boolean[] default null,
  _error_task_ids    bigint[] default null,
  _error_messages    text[] default null
) returns table (task_id bigint, kind text, result text)
  language plpgsql volatile
  security definer
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _started bigint[] := coalesce(_started_task_ids, '{}');
  _started_leases bigint[] := coalesce(_started_lease_ids, '{}');
  _errors bigint[] := coalesce(_error_task_ids, '{}');
  _messages text[] := coalesce(_error_messages, '{}');
begin
  perform queues.assert_lease_pairs(_started, _started_leases);
  if cardinality(_errors) <> cardinality(_messages) then
    raise exception 'error_task_ids and error_messages must have the same length (% and %)',
      cardinality(_errors), cardinality(_messages) using errcode = '22023';
  end if;
  if array_position(_errors, null) is not null then
    raise exception 'error_task_ids must not contain null' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_messages) m where m is null or btrim(m) = '') then
    raise exception 'error_messages must not be empty' using errcode = '22004';
  end if;
  if exists (select 1 from unnest(_errors) e where e <> all (coalesce(_task_ids, '{}'))) then
    raise exception 'error_task_ids must name tasks completed in the same call' using errcode = '22023';
  end if;

  -- Starts: a lease that is still its task's current lease.
  return query
  with input as (
    select i.task_id, i.task_lease_id, i.ord
      from unnest(_started, _started_leases) with ordinality as i(task_id, task_lease_id, ord)
  ),
  held as (
    select p.task_id, p.current_lease_id
      from queues.task_pending p
     where p.task_id = any (_started)
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id)
    select i.task_id, i.task_lease_id
      from input i join held h on h.task_id = i.task_id and h.current_lease_id = i.task_lease_id
    on conflict do nothing
  )
  select i.task_id, 'start'::text,
         case when h.task_id is not null then 'started' else 'lease_lost' end
    from input i
    left join held h on h.task_id = i.task_id and h.current_lease_id = i.task_lease_id
   order by i.ord;

  if cardinality(coalesce(_task_ids, '{}')) = 0 then
    return;
  end if;

  return query
  with done as (
    select c.task_id, c.result, row_number() over () as ord
      from queues.complete_tasks(_task_ids, _task_lease_ids, _outcomes, _retries) c
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
  select d.task_id, 'complete'::text, d.result from done d order by d.ord;
end;
$$;
--! EndIncluded queues/settle.sql
--! Included queues/start.sql
-- Marks tasks started (queues.task_lease_started): the worker's start recorder calls it
-- for every task it runs, in the instant the task starts, so the queue knows which of a
-- dead worker's leases were started (those count towards abandonment and make their task
-- a suspect; the leases of tasks that only waited in its local queue count for nothing).
-- Only a lease that is still its task's current lease is marked. Returns the task ids
-- whose lease was no longer current: taken over by another worker, or already completed
-- (the completion of a fast task may commit before the mark of its start).
-- Set-based and lean (one statement, no per-row work): it runs once per group of tasks
-- starting together, so its cost is paid per task.
create or replace function queues.mark_started(_task_ids bigint[], _task_lease_ids bigint[])
  returns setof bigint
  language plpgsql volatile
  rows 1
  security definer
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  return query
  with input as (
    select i.task_id, i.task_lease_id
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
  ),
  held as (
    select i.task_id, i.task_lease_id
      from input i
      join queues.task_pending p on p.task_id = i.task_id and p.current_lease_id = i.task_lease_id
  ),
  marked as (
    insert into queues.task_lease_started (task_id, task_lease_id)
    select h.task_id, h.task_lease_id from held h
    on conflict do nothing
  )
  select i.task_id from input i
   where not exists (select 1 from held h where h.task_id = i.task_id and h.task_lease_id = i.task_lease_id);
end;
$$;
--! EndIncluded queues/start.sql
--! Included queues/steps.sql
-- Server-side steps: db_function tasks run in the database, many per call.

-- Reads a function's result envelope (the worker's parseEnvelope, in SQL):
--   {status: text, payload?}                                   succeeded | status
--   {success: bool, error?, validation_failure_message?, payload?}   succeeded | error | invalid
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
  if _result ? 'success' then
    select string_agg(k, ', ') into _extra from jsonb_object_keys(_result) k
     where k not in ('success', 'error', 'validation_failure_message', 'payload');
    if _extra is not null then
      outcome := 'malformed'; message := format('malformed result envelope: unrecognized key(s) %s', _extra); return;
    end if;
    if jsonb_typeof(_result -> 'success') <> 'boolean' then
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

-- Whether _task_lease_id is still the current lease of _task_id (read only: no lock, no
-- fact). The worker's steps check it before they run.
create or replace function queues.is_current_lease(_task_id bigint, _task_lease_id bigint)
  returns boolean
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from queues.task_pending p
                  where p.task_id = _task_id and p.current_lease_id = _task_lease_id)
$$;

-- Runs db_function steps claimed by the caller, in order, each in a subtransaction of its
-- own with its completion: internal.run_function(payload.db_function, payload), then the
-- completion fenced by the lease (queues.settle_tasks), so a step's writes and its
-- completion commit together or not at all, exactly once. Outcomes as the worker's
-- db_function processor: success and status complete 'succeeded' (a status is returned
-- as note); error and validation failure keep the writes and complete 'failed' with an
-- error row; a malformed envelope or an exception rolls the step back, then completes
-- 'failed' with an error row. A step whose lease is no longer held is not run. The
-- caller marks the steps started before the call (queues.settle_tasks, as the worker's
-- start recorder does for every task), so a step's lease counts as started while it runs. A
-- well-formed envelope is kept as the step's result (queues.record_task_result) before
-- its completion.
-- Runs as the caller (security invoker): steps have the worker's privileges, not the owner's.
-- Returns one row per step: result as queues.complete_tasks ('completed', 'retry_scheduled',
-- 'lease_lost', ...) or 'transient' (a serialization failure or deadlock rolled the step
-- back and recorded nothing: release the lease, it runs again), with outcome, error, note.
create or replace function queues.run_steps(_task_ids bigint[], _task_lease_ids bigint[], _function_names text[], _payloads jsonb[])
  returns table (task_id bigint, result text, outcome text, error text, note text)
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _i integer;
  _id bigint;
  _lease bigint;
  _name text;
  _env record;
  _raw jsonb;
  _outcome text;
  _error text;
  _note text;
  _done text;
begin
  if _task_ids is null or _task_lease_ids is null or _function_names is null or _payloads is null then
    raise exception 'task_ids, task_lease_ids, function_names and payloads must not be null' using errcode = '22004';
  end if;
  if cardinality(_task_lease_ids) <> cardinality(_task_ids) or cardinality(_function_names) <> cardinality(_task_ids)
     or cardinality(_payloads) <> cardinality(_task_ids) then
    raise exception 'task_lease_ids, function_names and payloads must have one element per task' using errcode = '22023';
  end if;
  if cardinality(_task_ids) > 1000 then
    raise exception 'at most 1000 steps per call, got %', cardinality(_task_ids) using errcode = '54000';
  end if;
  for _i in 1 .. cardinality(_task_ids) loop
    _id := _task_ids[_i];
    _lease := _task_lease_ids[_i];
    _name := _function_names[_i];
    _outcome := null; _error := null; _note := null; _done := null;
    begin
      -- A lease no longer held is not run.
      _done := case when queues.is_current_lease(_id, _lease) then 'started' else 'lease_lost' end;
      if _done = 'started' then
        _raw := internal.run_function(_name, _payloads[_i]);
        select * into _env from queues.parse_envelope(_raw);
        case _env.outcome
          when 'malformed' then
            raise exception '%: %', _name, _env.message using errcode = 'QSTEP';
          else
            -- The function's envelope is kept as the run's result (queues.task_result),
            -- fenced by the lease, before the completion.
            perform queues.record_task_result(_id, _lease, _raw);
        end case;
        case _env.outcome
          when 'succeeded' then _outcome := 'succeeded';
          when 'status' then _outcome := 'succeeded'; _note := 'status ' || _env.message;
          when 'invalid' then _outcome := 'failed'; _error := format('%s: validation failure: %s', _name, _env.message); _note := _env.message;
          else _outcome := 'failed'; _error := format('%s: %s', _name, _env.message);
        end case;
        select s.result into _done
          from queues.settle_tasks('{}', '{}', array[_id], array[_lease], array[_outcome],
                                   -- A validation failure is final: no retry.
                                   array[case when _env.outcome = 'invalid' then false end],
                                   case when _error is null then '{}'::bigint[] else array[_id] end,
                                   case when _error is null then '{}'::text[] else array[_error] end) s;
        if _done not in ('completed', 'retry_scheduled') then
          -- Refused (the lease was lost meanwhile): the step's writes must not commit.
          raise exception 'refused: %', _done using errcode = 'QREFU';
        end if;
      end if;
    exception
      when sqlstate 'QREFU' then
        _outcome := null; _error := null; _note := null;
      when serialization_failure or deadlock_detected then
        _done := 'transient'; _outcome := null; _error := sqlerrm; _note := null;
      when others then
        -- Rolled back; record why, in a subtransaction of its own.
        _outcome := 'failed';
        _error := case when sqlstate = 'QSTEP' then sqlerrm else format('%s raised: %s', _name, sqlerrm) end;
        _note := null;
        select s.result into _done
          from queues.settle_tasks('{}', '{}', array[_id], array[_lease], array['failed'], null, array[_id], array[_error]) s;
    end;
    if _done = 'started' then
      _done := 'lease_lost';
    end if;
    return query select _id, _done, _outcome, _error, _note;
  end loop;
end;
$$;
--! EndIncluded queues/steps.sql
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
  select p.task_id, p.current_lease_id, l.worker_id, w.last_seen_at, p.available_at
    from queues.task_pending p
    join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
    join queues.worker w on w.worker_id = l.worker_id
   where p.available_at > _now
     and w.stopped_at is null
     and w.last_seen_at < _now - greatest(make_interval(secs => _dead_after_seconds),
                                          queues.worker_silence_bound(w.heartbeat_interval_ms))
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
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id from queues.stale_leases_at(_now, _dead_after_seconds) s
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null,
           -- A lease whose task never started does not count towards abandonment.
           unstarted_count = p.unstarted_count + (not exists (
             select 1 from queues.task_lease_started st
              where st.task_id = p.task_id and st.task_lease_id = s.task_lease_id))::integer
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
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
-- complete anything). Its tasks are claimable at once instead of when their leases expire
-- (a dead process's local queue is not left waiting); as with stale recovery, the
-- revocation of a started task counts as an expired lease (and makes it a suspect), that
-- of a task never started does not. Returns what was revoked; wakes listening workers.
create or replace function queues.revoke_worker_leases(_worker_id text)
  returns table (task_id bigint, task_lease_id bigint)
  language plpgsql volatile
  rows 10
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _worker_id is null or length(_worker_id) not between 1 and 200 then
    raise exception 'worker_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  perform queues.lock_resource_keys(array(
    select p.task_id from queues.task_pending p
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id is not null and l.worker_id = _worker_id));
  return query
  with held as (
    select p.task_id, p.current_lease_id as task_lease_id
      from queues.task_pending p
      join queues.task_lease l on l.task_id = p.task_id and l.task_lease_id = p.current_lease_id
     where p.current_lease_id is not null and l.worker_id = _worker_id
  ),
  revoked as (
    update queues.task_pending p
       set available_at = now(), current_lease_id = null,
           unstarted_count = p.unstarted_count + (not exists (
             select 1 from queues.task_lease_started st
              where st.task_id = p.task_id and st.task_lease_id = h.task_lease_id))::integer
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
--! Included queues/maintenance.sql
-- Maintenance of the derived structures (task_pending, resource_lease). Owner only.

-- Rebuilds queues.task_pending and queues.resource_lease from the facts: every task
-- without a completion, available at its scheduled time, the retry time of its last
-- failed attempt, the retry time of its last transient interruption, or the effective
-- expiry of its newest lease (heartbeats, releases and revocations applied), whichever is
-- latest. Returns the number of pending tasks.
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
     lease_count, released_count, max_attempts, failed_attempts, unstarted_count, interrupted_count)
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
         -- Leases that ended unstarted: neither released, nor ended by a failed attempt,
         -- nor started, nor the lease still held (a claim counts that one when it expires).
         (select count(*)::integer
            from queues.task_lease_effective u
           where u.task_id = t.task_id
             and u.released_at is null
             and not exists (select 1 from queues.task_lease_started s
                              where s.task_id = u.task_id and s.task_lease_id = u.task_lease_id)
             and not exists (select 1 from queues.task_attempt_failed a where a.task_id = u.task_id and a.task_lease_id = u.task_lease_id)
             and not (u.task_lease_id = l.task_lease_id and l.revoked_at is null
                      and (f.task_lease_id is null or f.task_lease_id < l.task_lease_id))),
         coalesce(i.interrupted_count, 0)
    from queues.task t
    left join lateral (
      select le.task_lease_id, le.expires_at, le.released_at, le.revoked_at,
             count(*) over () :: integer as lease_count,
             count(le.released_at) over () :: integer as released_count
        from queues.task_lease_effective le
       where le.task_id = t.task_id
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
   where not exists (select 1 from queues.task_completed c where c.task_id = t.task_id);
  get diagnostics _count = row_count;

  -- Each resource key held by a live lease, as the claim left it.
  insert into queues.resource_lease (resource_key, task_id, expires_at)
  select distinct on (p.resource_key) p.resource_key, p.task_id, p.available_at
    from queues.task_pending p
   where p.resource_key is not null and p.current_lease_id is not null
   order by p.resource_key, p.available_at desc;
  return _count;
end;
$$;
--! EndIncluded queues/maintenance.sql
--! Included queues/privileges.sql
-- Who may call what in queues. Roles come from placeholders (see .gmrc):
--   :DATABASE_WORKER  the worker: claim, extend and release leases, complete, fail,
--                     interrupt (a transient error).
--                     No table privileges.
--   :DATABASE_APP     applications: enqueue.
-- Every function starts with EXECUTE revoked from PUBLIC; grants are explicit.

revoke all on all tables in schema queues from public;
revoke all on all sequences in schema queues from public;
revoke execute on all functions in schema queues from public;

grant usage on schema queues to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  queues.claim_tasks(text, integer, text[], integer, integer),
  queues.extend_leases(bigint[], bigint[], integer),
  queues.release_leases(bigint[], bigint[]),
  queues.dequeue_next_available_task(text, integer),
  queues.complete_task(bigint, bigint, text),
  queues.complete_tasks(bigint[], bigint[], text[], boolean[]),
  queues.fail_task(bigint, text, bigint),
  queues.interrupt_task(bigint, bigint, text, integer),
  queues.record_worker_heartbeat(text, text[], integer),
  queues.record_worker_stopped(text)
to :DATABASE_WORKER;

grant execute on function
  queues.enqueue(text, jsonb, timestamptz, integer, text, integer),
  queues.enqueue_many(jsonb)
to :DATABASE_APP;
--! EndIncluded queues/privileges.sql
--! Included queues/privileges-hot-path.sql
-- Grants of the worker's hot-path functions (settle, steps, revocation of a dead
-- process's leases); included after the files that define them. queues/privileges.sql
-- revokes EXECUTE from PUBLIC on every queue function first.

revoke execute on all functions in schema queues from public;

grant execute on function
  queues.settle_tasks(bigint[], bigint[], bigint[], bigint[], text[], boolean[], bigint[], text[]),
  queues.run_steps(bigint[], bigint[], text[], jsonb[]),
  queues.parse_envelope(jsonb),
  queues.is_current_lease(bigint, bigint),
  queues.mark_started(bigint[], bigint[]),
  queues.revoke_worker_leases(text)
to :DATABASE_WORKER;
--! EndIncluded queues/privileges-hot-path.sql

--! split: 230-account-skeleton.sql
-- Account anonymization and account deletion on shared supervisor blocks
-- (internal/process_supervisor.sql, internal/sql_process.sql); the channel skeleton is
-- rebuilt on the same blocks. The helpers the blocks replace are dropped.
set local lock_timeout = '5s';

drop function if exists internal.lock_channel_process_root(text, text, bigint);
drop function if exists internal.record_channel_process_outcome(text, text, bigint, text);

drop function if exists accounts.has_account_anonymization_succeeded_attempt(bigint);
drop function if exists accounts.count_account_anonymization_attempts(bigint);
drop function if exists accounts.count_account_anonymization_failed_attempts(bigint);
drop function if exists accounts.has_account_anonymization_task_succeeded(bigint);
drop function if exists accounts.get_account_anonymization_task_failure(bigint);
drop function if exists accounts.account_anonymization_supervisor_facts(bigint);
drop function if exists accounts.lock_account_anonymization_task(bigint);
drop function if exists accounts.run_account_anonymization_attempt(bigint, bigint);
drop function if exists accounts.record_account_anonymization_task_succeeded(bigint);
drop function if exists accounts.record_account_anonymization_task_failed(bigint, text);
drop function if exists accounts.schedule_account_anonymization_recheck(bigint, integer);

drop function if exists accounts.count_account_deletion_supervisor_runs(bigint);
drop function if exists accounts.has_account_deletion_task_succeeded(bigint);
drop function if exists accounts.get_account_deletion_task_failure(bigint);
drop function if exists accounts.has_account_anonymization_task(bigint);
drop function if exists accounts.is_account_anonymized(bigint);
drop function if exists accounts.lock_account_deletion_task(bigint);
drop function if exists accounts.record_account_deletion_supervisor_run(bigint);
drop function if exists accounts.record_account_deletion_task_succeeded(bigint);
drop function if exists accounts.record_account_deletion_task_failed(bigint, text);
drop function if exists accounts.start_account_file_deletions(bigint);
drop function if exists accounts.schedule_account_deletion_recheck(bigint, integer);

--! Included internal/process_supervisor.sql
-- The blocks every supervisor is built from, channel process or not: open a run
-- (validate, READ COMMITTED, lock the root), read the terminal facts, count and record
-- runs, record the outcome, enqueue the next run, and the envelope of a run that did its
-- job. sql/internal/channel_process.sql builds the channel skeleton on them;
-- sql/internal/sql_process.sql the pure SQL one; account deletion composes them itself.
--
-- A process <schema>.<name> has a root <name>_task keyed by <name>_task_id (a bigint
-- identity) and the terminal facts <name>_task_succeeded and <name>_task_failed(reason),
-- both keyed by <name>_task_id; a run cap adds <name>_supervisor_run. Schema and name are
-- constants in the owner's SQL and reach dynamic SQL only through format('%I.%I').
-- Called only from security definer functions: no grants.

-- Locks the root row FOR NO KEY UPDATE (it serialises supervisors; inserting a fact that
-- references the root takes FOR KEY SHARE, which does not wait on it). False: no such root.
create or replace function internal.lock_process_root(_schema text, _name text, _root_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _found integer;
begin
  execute format('select 1 from %I.%I t where t.%I = $1 for no key update', _schema, _name || '_task', _name || '_task_id')
    into _found using _root_id;
  return _found is not null;
end;
$$;

-- The opening of every supervisor run, in this order: read <name>_task_id from the
-- payload, refuse anything but READ COMMITTED (25000, naming _supervisor), lock the root.
-- root_id is the locked root; when there is none, refusal is the validation failure
-- the supervisor returns (a malformed id, or no such root) and root_id is NULL.
create or replace function internal.open_supervisor_run(
  _schema text, _name text, _supervisor text, _payload jsonb,
  out root_id bigint,
  out refusal jsonb
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text := _name || '_task_id';
  _id bigint := internal.id_from_payload(_payload, _key);
begin
  if _id is null then
    refusal := internal.validation_failure(format('%s must be a positive integer', _key));
    return;
  end if;
  perform internal.assert_read_committed(_supervisor);
  -- Lock, then read: facts read after the lock wait include what the last holder committed.
  if not internal.lock_process_root(_schema, _name, _id) then
    refusal := internal.validation_failure(format('%s %s not found', _name || '_task', _id));
    return;
  end if;
  root_id := _id;
end;
$$;

-- The terminal facts of a root: whether it succeeded, and the reason it failed (NULL
-- while it has not).
create or replace function internal.process_terminal_facts(
  _schema text, _name text, _root_id bigint,
  out has_task_succeeded boolean,
  out task_failure       text
)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('select exists (select 1 from %1$I.%2$I x where x.%4$I = $1),
                         (select x.reason from %1$I.%3$I x where x.%4$I = $1)',
                 _schema, _name || '_task_succeeded', _name || '_task_failed', _name || '_task_id')
    into has_task_succeeded, task_failure using _root_id;
end;
$$;

-- Appends a terminal fact (_reason NULL: succeeded). A second call changes nothing.
create or replace function internal.record_process_outcome(_schema text, _name text, _root_id bigint, _reason text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _reason is null then
    execute format('insert into %I.%I (%I) values ($1) on conflict do nothing', _schema, _name || '_task_succeeded', _name || '_task_id')
      using _root_id;
  else
    execute format('insert into %I.%I (%I, reason) values ($1, $2) on conflict do nothing', _schema, _name || '_task_failed', _name || '_task_id')
      using _root_id, _reason;
  end if;
end;
$$;

-- How many non-terminal runs a root has had (the rows of <name>_supervisor_run).
create or replace function internal.count_supervisor_runs(_schema text, _name text, _root_id bigint)
  returns integer
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _runs integer;
begin
  execute format('select count(*)::integer from %I.%I r where r.%I = $1', _schema, _name || '_supervisor_run', _name || '_task_id')
    into _runs using _root_id;
  return _runs;
end;
$$;

-- Records one non-terminal run (the run cap counts these).
create or replace function internal.record_supervisor_run(_schema text, _name text, _root_id bigint)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('insert into %I.%I (%I) values ($1)', _schema, _name || '_supervisor_run', _name || '_task_id') using _root_id;
end;
$$;

-- Enqueues a run of _supervisor (a db_function task) for the root _root_key = _root_id
-- at _at (NULL: now).
create or replace function internal.enqueue_supervisor_run(_supervisor text, _root_key text, _root_id bigint, _at timestamptz)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', _supervisor,
    _root_key, _root_id), coalesce(_at, now()));
end;
$$;

-- Enqueues the next run after the backoff 5 s · 2^_exponent, capped at _cap_seconds
-- (internal.backoff); returns when it is due.
create or replace function internal.schedule_next_supervisor_run(
  _supervisor text, _root_key text, _root_id bigint, _exponent integer, _cap_seconds integer
) returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz := now() + internal.backoff(_exponent, _cap_seconds);
begin
  perform internal.enqueue_supervisor_run(_supervisor, _root_key, _root_id, _next_check_at);
  return _next_check_at;
end;
$$;

-- The envelope of a run that did its job: {success: true, payload: {status} || _extra}.
create or replace function internal.supervisor_progress(_status text, _extra jsonb default null)
  returns jsonb
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', true, 'payload', jsonb_build_object('status', _status) || coalesce(_extra, '{}'))
$$;

-- Creates the root of a process about _column = _value (unique in the root table) unless
-- one exists; returns its id and whether this call created it.
create or replace function internal.create_process_root(
  _schema text, _name text, _column text, _value bigint,
  out root_id bigint,
  out created boolean
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format('insert into %1$I.%2$I as t (%3$I) values ($1) on conflict (%3$I) do nothing returning t.%4$I',
                 _schema, _name || '_task', _column, _name || '_task_id')
    into root_id using _value;
  created := root_id is not null;
  if not created then
    execute format('select t.%4$I from %1$I.%2$I t where t.%3$I = $1', _schema, _name || '_task', _column, _name || '_task_id')
      into root_id using _value;
  end if;
end;
$$;

-- Starts a process about _column = _value: creates its root (internal.create_process_root)
-- and, when this call created it, enqueues the first run of _supervisor at _at (NULL: now).
create or replace function internal.start_process(
  _schema text, _name text, _supervisor text, _column text, _value bigint, _at timestamptz default null,
  out root_id bigint,
  out created boolean
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  select r.root_id, r.created into root_id, created from internal.create_process_root(_schema, _name, _column, _value) r;
  if created then
    perform internal.enqueue_supervisor_run(_supervisor, _name || '_task_id', root_id, _at);
  end if;
end;
$$;
--! EndIncluded internal/process_supervisor.sql
--! Included internal/sql_process.sql
-- The skeleton of a pure SQL process: no channel task; each supervisor run that is not
-- terminal is one attempt, which runs the process's work function in a subtransaction
-- and records the outcome. Attempts are bounded by the maximum, so they double as the run
-- cap. Built on sql/internal/process_supervisor.sql.
--
-- A pure SQL process <schema>.<name> has, beside its root and terminal facts:
--   <name>_attempt            one row per run of the work (<name>_attempt_id, <name>_task_id)
--   <name>_attempt_succeeded  <name>_attempt_failed(error_message)   one of them per attempt
-- Called only from security definer functions: no grants.

-- What the supervisor decides on besides the terminal facts.
create or replace function internal.sql_attempt_facts(
  _schema text, _name text, _root_id bigint,
  out has_success  boolean,
  out num_attempts integer,
  out num_failures integer
)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format($q$
    select exists (select 1 from %1$I.%2$I a join %1$I.%3$I s using (%6$I) where a.%5$I = $1),
           (select count(*)::integer from %1$I.%2$I a where a.%5$I = $1),
           (select count(*)::integer from %1$I.%2$I a join %1$I.%4$I f using (%6$I) where a.%5$I = $1)
    $q$, _schema, _name || '_attempt', _name || '_attempt_succeeded', _name || '_attempt_failed',
         _name || '_task_id', _name || '_attempt_id')
  into has_success, num_attempts, num_failures using _root_id;
end;
$$;

-- One attempt: records it, calls _work with the root's _work_column in a subtransaction,
-- records the outcome. Returns NULL on success, else the error message (the work is
-- rolled back).
create or replace function internal.run_sql_attempt(
  _schema text, _name text, _root_id bigint, _work regprocedure, _work_column text
) returns text
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _argument bigint;
  _attempt_id bigint;
  _error text;
begin
  execute format('select t.%I from %I.%I t where t.%I = $1', _work_column, _schema, _name || '_task', _name || '_task_id')
    into _argument using _root_id;
  execute format('insert into %I.%I (%I) values ($1) returning %I', _schema, _name || '_attempt', _name || '_task_id', _name || '_attempt_id')
    into _attempt_id using _root_id;
  begin
    -- regproc prints the function's name as the catalog spells it, quoted where needed.
    execute format('select %s($1)', _work::regproc) using _argument;
  exception when others then
    _error := left(sqlerrm, 2000);
  end;
  if _error is null then
    execute format('insert into %I.%I (%I) values ($1)', _schema, _name || '_attempt_succeeded', _name || '_attempt_id')
      using _attempt_id;
  else
    execute format('insert into %I.%I (%I, error_message) values ($1, $2)', _schema, _name || '_attempt_failed', _name || '_attempt_id')
      using _attempt_id, _error;
  end if;
  return _error;
end;
$$;

-- The supervisor of a pure SQL process, in this order: open the run
-- (internal.open_supervisor_run); ended → report it; a succeeded attempt → succeeded;
-- failures at _max_attempts → failed 'max_attempts_reached'; else one attempt of _work
-- (called with the root's _work_column): success → succeeded, the last allowed failure →
-- 'max_attempts_reached' with the error, another failure → the next run after
-- 5 s · 2^failures, capped at _backoff_cap_seconds.
-- Returns {success: true, payload: {status: succeeded | attempt_failed, ...}} or, when the
-- process failed, {status: <reason>}.
create or replace function internal.run_sql_process_supervisor(
  _schema text, _name text, _supervisor text, payload jsonb,
  _work regprocedure, _work_column text, _max_attempts integer, _backoff_cap_seconds integer
) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _run record := internal.open_supervisor_run(_schema, _name, _supervisor, payload);
  _ended record;
  _facts record;
  _error text;
begin
  if _run.root_id is null then
    return _run.refusal;
  end if;
  _ended := internal.process_terminal_facts(_schema, _name, _run.root_id);
  if _ended.has_task_succeeded then
    return internal.supervisor_progress('succeeded');
  end if;
  if _ended.task_failure is not null then
    return jsonb_build_object('status', _ended.task_failure);
  end if;
  _facts := internal.sql_attempt_facts(_schema, _name, _run.root_id);
  if _facts.has_success then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, null);
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.num_failures >= _max_attempts then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached');
  end if;

  _error := internal.run_sql_attempt(_schema, _name, _run.root_id, _work, _work_column);
  if _error is null then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, null);
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.num_failures + 1 >= _max_attempts then
    perform internal.record_process_outcome(_schema, _name, _run.root_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached', 'payload', jsonb_build_object('error', _error));
  end if;
  return internal.supervisor_progress('attempt_failed', jsonb_build_object('error', _error,
    'next_check_at', internal.schedule_next_supervisor_run(_supervisor, _name || '_task_id', _run.root_id,
                                                           _facts.num_failures + 1, _backoff_cap_seconds)));
end;
$$;
--! EndIncluded internal/sql_process.sql
--! Included internal/channel_process.sql
-- The skeleton of a channel process (a supervisor that schedules provider calls through
-- a channel task), written once. A process registers its names and limits in
-- internal.channel_process; its own file keeps only its decisions (what the kickoff
-- accepts, what the provider is sent) and thin named wrappers over these blocks.
--
-- The supervisor is built from the blocks of sql/internal/process_supervisor.sql.
--
-- A channel process <schema>.<name> has these tables (internal.create_channel_process_tables
-- makes all but the root):
--   <name>_task               the root, created by the process (its domain columns)
--   <name>_supervisor_run     one row per non-terminal supervisor run (run cap)
--   <name>_attempt            one row per scheduled channel task (task_id: its queue task)
--   <name>_attempt_succeeded  <name>_attempt_failed   at most one each per attempt
--   <name>_task_succeeded     <name>_task_failed      terminal facts
-- Keys: <name>_task_id, <name>_attempt_id. Table names reach dynamic SQL only through
-- format('%I.%I') from a registered row whose tables were found in the catalog.

-- Registers (or updates) a channel process. Raises 22023 naming a missing table.
-- _attempt_payload: optional function (root id bigint) returning jsonb fields added to
-- each channel task's payload (file deletion adds the file_id).
create or replace function internal.register_channel_process(
  _schema text, _name text, _task_type text,
  _supervisor text, _before_handler text, _success_handler text, _error_handler text,
  _max_attempts integer, _max_supervisor_runs integer, _backoff_cap_seconds integer default 3600,
  _attempt_payload regprocedure default null
) returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _suffix text;
begin
  foreach _suffix in array array['_task', '_supervisor_run', '_attempt', '_attempt_succeeded', '_attempt_failed',
                                 '_task_succeeded', '_task_failed'] loop
    if to_regclass(format('%I.%I', _schema, _name || _suffix)) is null then
      raise exception 'channel process %.%: table %.% does not exist', _schema, _name, _schema, _name || _suffix
        using errcode = '22023';
    end if;
  end loop;
  insert into internal.channel_process as p
    (process_schema, process_name, task_type, supervisor, before_handler, success_handler, error_handler,
     max_attempts, max_supervisor_runs, backoff_cap_seconds, attempt_payload)
  values (_schema, _name, _task_type, _supervisor, _before_handler, _success_handler, _error_handler,
          _max_attempts, _max_supervisor_runs, _backoff_cap_seconds, _attempt_payload)
  on conflict (process_schema, process_name) do update
     set task_type = excluded.task_type, supervisor = excluded.supervisor,
         before_handler = excluded.before_handler, success_handler = excluded.success_handler,
         error_handler = excluded.error_handler, max_attempts = excluded.max_attempts,
         max_supervisor_runs = excluded.max_supervisor_runs, backoff_cap_seconds = excluded.backoff_cap_seconds,
         attempt_payload = excluded.attempt_payload;
end;
$$;

-- Creates the fact tables of a channel process beside its root <schema>.<name>_task
-- (which must exist, with a bigint identity key <name>_task_id), with the append-only
-- trigger on each. Idempotent. Owner only: migrations call it.
create or replace function internal.create_channel_process_tables(_schema text, _name text)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _root text := format('%I.%I', _schema, _name || '_task');
  _attempt text := format('%I.%I', _schema, _name || '_attempt');
  _rk text := _name || '_task_id';
  _ak text := _name || '_attempt_id';
  _table text;
begin
  if to_regclass(_root) is null then
    raise exception 'channel process %.%: create its root table %.% first', _schema, _name, _schema, _name || '_task'
      using errcode = '22023';
  end if;
  execute format('create table if not exists %I.%I (id bigint generated always as identity primary key,
                    %I bigint not null references %s on delete cascade, created_at timestamptz not null default now())',
                 _schema, _name || '_supervisor_run', _rk, _root);
  execute format('create index if not exists %I on %I.%I (%I)', _name || '_supervisor_run_task_idx', _schema, _name || '_supervisor_run', _rk);
  execute format('create table if not exists %s (%I bigint generated always as identity primary key,
                    %I bigint not null references %s on delete cascade,
                    task_id bigint references queues.task on delete set null,
                    created_at timestamptz not null default now())', _attempt, _ak, _rk, _root);
  execute format('create index if not exists %I on %s (%I)', _name || '_attempt_task_idx', _attempt, _rk);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    worker_payload jsonb, created_at timestamptz not null default now())',
                 _schema, _name || '_attempt_succeeded', _ak, _attempt);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    error_message text not null, created_at timestamptz not null default now())',
                 _schema, _name || '_attempt_failed', _ak, _attempt);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    created_at timestamptz not null default now())', _schema, _name || '_task_succeeded', _rk, _root);
  execute format('create table if not exists %I.%I (%I bigint primary key references %s on delete cascade,
                    reason text not null, created_at timestamptz not null default now())', _schema, _name || '_task_failed', _rk, _root);
  foreach _table in array array['_task', '_supervisor_run', '_attempt', '_attempt_succeeded', '_attempt_failed',
                                '_task_succeeded', '_task_failed'] loop
    if not exists (select 1 from pg_trigger
                    where tgrelid = to_regclass(format('%I.%I', _schema, _name || _table)) and tgname = 'forbid_update') then
      execute format('create trigger forbid_update before update on %I.%I
                        for each statement execute function queues.forbid_fact_update()', _schema, _name || _table);
    end if;
  end loop;
end;
$$;

-- The registered process; raises 22023 when there is none.
create or replace function internal.get_channel_process(_schema text, _name text)
  returns internal.channel_process
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p internal.channel_process;
begin
  select * into _p from internal.channel_process p where p.process_schema = _schema and p.process_name = _name;
  if not found then
    raise exception 'no channel process %.% is registered', _schema, _name using errcode = '22023';
  end if;
  return _p;
end;
$$;

-- Facts ---------------------------------------------------------------------------------

-- Everything a supervisor decides on, for one root. An attempt with both outcomes counts
-- as succeeded; an outstanding attempt has neither.
create or replace function internal.channel_process_facts(
  _schema text, _name text, _root_id bigint,
  out has_task_succeeded  boolean,
  out task_failure        text,
  out has_success         boolean,
  out num_attempts        integer,
  out num_failures        integer,
  out num_outstanding     integer,
  out num_runs            integer,
  out has_unknown_outcome boolean
)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  execute format($q$
    select exists (select 1 from %1$I.%2$I x where x.%8$I = $1),
           (select x.reason from %1$I.%3$I x where x.%8$I = $1),
           exists (select 1 from %1$I.%4$I a join %1$I.%5$I s using (%9$I) where a.%8$I = $1),
           (select count(*)::integer from %1$I.%4$I a where a.%8$I = $1),
           (select count(*)::integer from %1$I.%4$I a join %1$I.%6$I f using (%9$I)
             where a.%8$I = $1 and not exists (select 1 from %1$I.%5$I s where s.%9$I = a.%9$I)),
           (select count(*)::integer from %1$I.%4$I a
             where a.%8$I = $1
               and not exists (select 1 from %1$I.%5$I s where s.%9$I = a.%9$I)
               and not exists (select 1 from %1$I.%6$I f where f.%9$I = a.%9$I)),
           (select count(*)::integer from %1$I.%7$I r where r.%8$I = $1),
           exists (select 1 from %1$I.%4$I a join %1$I.%6$I f using (%9$I)
                    where a.%8$I = $1 and internal.is_unknown_outcome(f.error_message)
                      and not exists (select 1 from %1$I.%5$I s where s.%9$I = a.%9$I))
    $q$, _schema, _name || '_task_succeeded', _name || '_task_failed', _name || '_attempt',
         _name || '_attempt_succeeded', _name || '_attempt_failed', _name || '_supervisor_run',
         _name || '_task_id', _name || '_attempt_id')
  into has_task_succeeded, task_failure, has_success, num_attempts, num_failures, num_outstanding,
       num_runs, has_unknown_outcome
  using _root_id;
end;
$$;

-- Effects -------------------------------------------------------------------------------

-- Records a failure for every attempt whose channel task the queue gave up on without an
-- outcome (internal.queue_gave_up_message); returns how many.
create or replace function internal.close_given_up_channel_attempts(_schema text, _name text, _root_id bigint)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _closed integer;
begin
  execute format($q$
    with closed as (
      insert into %1$I.%4$I (%6$I, error_message)
      select a.%6$I, internal.queue_gave_up_message(a.task_id)
        from %1$I.%2$I a
       where a.%5$I = $1
         and internal.queue_gave_up_message(a.task_id) is not null
         and not exists (select 1 from %1$I.%3$I s where s.%6$I = a.%6$I)
         and not exists (select 1 from %1$I.%4$I f where f.%6$I = a.%6$I)
      on conflict do nothing
      returning 1)
    select count(*)::integer from closed
    $q$, _schema, _name || '_attempt', _name || '_attempt_succeeded', _name || '_attempt_failed',
         _name || '_task_id', _name || '_attempt_id')
  into _closed using _root_id;
  return _closed;
end;
$$;

-- Records an attempt and enqueues its channel task; returns the attempt id. The id is
-- drawn first (the task's payload names it), the row written after the enqueue (it names
-- the queue task).
create or replace function internal.schedule_channel_attempt(_p internal.channel_process, _root_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt text := format('%I.%I', _p.process_schema, _p.process_name || '_attempt');
  _ak text := _p.process_name || '_attempt_id';
  _attempt_id bigint := nextval(pg_get_serial_sequence(_attempt, _ak));
  _extra jsonb := '{}';
  _queue_task_id bigint;
begin
  if _p.attempt_payload is not null then
    execute format('select %s($1)', _p.attempt_payload::regproc) into _extra using _root_id;
  end if;
  _queue_task_id := queues.enqueue_internal(_p.task_type, coalesce(_extra, '{}') || jsonb_build_object(
    'task_type', _p.task_type,
    _p.process_name || '_task_id', _root_id,
    _ak, _attempt_id,
    'before_handler', _p.before_handler,
    'success_handler', _p.success_handler,
    'error_handler', _p.error_handler));
  execute format('insert into %s (%I, %I, task_id) overriding system value values ($1, $2, $3)',
                 _attempt, _ak, _p.process_name || '_task_id')
    using _attempt_id, _root_id, _queue_task_id;
  return _attempt_id;
end;
$$;

-- Enqueues a supervisor run of the root at _at (NULL: now).
create or replace function internal.enqueue_channel_supervisor(_p internal.channel_process, _root_id bigint, _at timestamptz)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform internal.enqueue_supervisor_run(_p.supervisor, _p.process_name || '_task_id', _root_id, _at);
end;
$$;

-- Supervisor ----------------------------------------------------------------------------

-- The supervisor of a registered channel process, in the fixed order: validate, READ
-- COMMITTED, lock the root, close attempts the queue gave up on, facts, terminal checks
-- (ended; a succeeded attempt; an unknown outcome; failures at max_attempts; runs at
-- max_supervisor_runs), then record the run, schedule an attempt when none is in flight
-- and enqueue the next run after 5 s · 2^(runs − 1), capped at backoff_cap_seconds.
-- Returns the envelopes documented in docs/adding-a-business-process.md.
create or replace function internal.run_channel_supervisor(_schema text, _name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _p internal.channel_process := internal.get_channel_process(_schema, _name);
  _run record := internal.open_supervisor_run(_schema, _name, _p.supervisor, payload);
  _task_id bigint := _run.root_id;
  _facts record;
  _attempt_id bigint;
begin
  if _task_id is null then
    return _run.refusal;
  end if;
  perform internal.close_given_up_channel_attempts(_schema, _name, _task_id);
  _facts := internal.channel_process_facts(_schema, _name, _task_id);

  if _facts.has_task_succeeded then
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform internal.record_process_outcome(_schema, _name, _task_id, null);
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.has_unknown_outcome then
    perform internal.record_process_outcome(_schema, _name, _task_id, 'delivery_outcome_unknown');
    return jsonb_build_object('status', 'delivery_outcome_unknown');
  end if;
  if _facts.num_failures >= _p.max_attempts then
    perform internal.record_process_outcome(_schema, _name, _task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached',
                              'payload', jsonb_build_object('num_failures', _facts.num_failures));
  end if;
  if _facts.num_runs >= _p.max_supervisor_runs then
    perform internal.record_process_outcome(_schema, _name, _task_id, 'run_limit_reached');
    return jsonb_build_object('status', 'run_limit_reached',
                              'payload', jsonb_build_object('num_runs', _facts.num_runs));
  end if;

  perform internal.record_supervisor_run(_schema, _name, _task_id);
  if _facts.num_outstanding = 0 then
    _attempt_id := internal.schedule_channel_attempt(_p, _task_id);
  end if;
  return internal.supervisor_progress(
    case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
    jsonb_build_object(_name || '_attempt_id', _attempt_id,
                       'next_check_at', internal.schedule_next_supervisor_run(_p.supervisor, _name || '_task_id', _task_id,
                                                                              _facts.num_runs, _p.backoff_cap_seconds)));
end;
$$;

-- Handlers ------------------------------------------------------------------------------

-- Why a before_handler must not act on attempt _attempt_id, or NULL when it may: the
-- attempt already has an outcome (a redelivery), or its process ended. _verb names the
-- side effect in messages ('sending', 'deleting').
create or replace function internal.channel_attempt_refusal(_schema text, _name text, _attempt_id bigint, _verb text default 'sending')
  returns text
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _root_id bigint;
  _has_outcome boolean;
  _facts record;
begin
  execute format($q$
    select a.%4$I,
           exists (select 1 from %1$I.%2$I s where s.%5$I = a.%5$I) or exists (select 1 from %1$I.%3$I f where f.%5$I = a.%5$I)
      from %1$I.%6$I a where a.%5$I = $1
    $q$, _schema, _name || '_attempt_succeeded', _name || '_attempt_failed', _name || '_task_id', _name || '_attempt_id', _name || '_attempt')
  into _root_id, _has_outcome using _attempt_id;
  if _root_id is null then
    return format('%s %s not found', _name || '_attempt', _attempt_id);
  end if;
  if _has_outcome then
    return format('%s %s already has an outcome; not %s it again', _name || '_attempt', _attempt_id, _verb);
  end if;
  _facts := internal.channel_process_facts(_schema, _name, _root_id);
  if _facts.has_task_succeeded or _facts.task_failure is not null then
    return format('%s %s already ended (%s); not %s attempt %s', _name || '_task', _root_id,
                  coalesce(_facts.task_failure, 'succeeded'), _verb, _attempt_id);
  end if;
  return null;
end;
$$;

-- The success handler: body {original_payload, worker_payload}; records the attempt's
-- success. A second delivery changes nothing.
create or replace function internal.record_channel_attempt_success(_schema text, _name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _ak text := _name || '_attempt_id';
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', _ak);
  _exists integer;
begin
  if _attempt_id is null then
    return internal.validation_failure(format('original_payload.%s must be a positive integer', _ak));
  end if;
  execute format('select 1 from %I.%I a where a.%I = $1', _schema, _name || '_attempt', _ak) into _exists using _attempt_id;
  if _exists is null then
    return internal.validation_failure(format('%s %s not found', _name || '_attempt', _attempt_id));
  end if;
  execute format('insert into %I.%I (%I, worker_payload) values ($1, $2) on conflict do nothing', _schema, _name || '_attempt_succeeded', _ak)
    using _attempt_id, payload -> 'worker_payload';
  return jsonb_build_object('success', true);
end;
$$;

-- The error handler: body {original_payload, error}; records the attempt's failure unless
-- it succeeded. A second delivery changes nothing.
create or replace function internal.record_channel_attempt_failure(_schema text, _name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _ak text := _name || '_attempt_id';
  _attempt_id bigint := internal.id_from_payload(payload -> 'original_payload', _ak);
  _exists integer;
begin
  if _attempt_id is null then
    return internal.validation_failure(format('original_payload.%s must be a positive integer', _ak));
  end if;
  execute format('select 1 from %I.%I a where a.%I = $1', _schema, _name || '_attempt', _ak) into _exists using _attempt_id;
  if _exists is null then
    return internal.validation_failure(format('%s %s not found', _name || '_attempt', _attempt_id));
  end if;
  execute format($q$
    insert into %1$I.%2$I (%4$I, error_message)
    select $1, left(coalesce(nullif($2, ''), 'unknown error'), 2000)
     where not exists (select 1 from %1$I.%3$I s where s.%4$I = $1)
    on conflict do nothing
    $q$, _schema, _name || '_attempt_failed', _name || '_attempt_succeeded', _ak)
    using _attempt_id, payload ->> 'error';
  return jsonb_build_object('success', true);
end;
$$;
--! EndIncluded internal/channel_process.sql
--! Included accounts/anonymization.sql
-- Account anonymization, a pure SQL process on the shared skeleton
-- (sql/internal/sql_process.sql): each supervisor run that is not terminal runs
-- accounts.anonymize_account once, in a subtransaction, and records the attempt's outcome.
-- What is particular to it: the work, its limits, and what its parent asks.
--
--   accounts.kickoff_account_anonymization(account_id)   root + first run (idempotent)
--   accounts.account_anonymization_supervisor            db_function: internal.run_sql_process_supervisor
--   accounts.anonymize_account(account_id)                the work
--   accounts.is_account_anonymization_stuck(account_id)   for the parent

-- Attempts before the process gives up (and is "stuck").
create or replace function accounts.account_anonymization_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 3 $$;

-- The work: overwrite the account's personal data, flag it 'anonymized'. Idempotent.
-- Raises when accounts.anonymization_failure_injection has a row for the account (the
-- owner-only test hook for the stuck path).
create or replace function accounts.anonymize_account(_account_id bigint)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _injected text;
begin
  select i.error_message into _injected
    from accounts.anonymization_failure_injection i where i.account_id = _account_id;
  if _injected is not null then
    raise exception 'anonymization of account % failed: %', _account_id, _injected using errcode = 'P0001';
  end if;
  update accounts.account a set email = null, display_name = null
   where a.account_id = _account_id;
  update learning.profile p set display_name = null
   where p.account_id = _account_id;
  insert into accounts.account_flag (account_id, flag) values (_account_id, 'anonymized')
  on conflict do nothing;
end;
$$;

-- True when the account's anonymization has given up (terminal failure, or failed
-- attempts at the maximum).
create or replace function accounts.is_account_anonymization_stuck(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((
    select (internal.process_terminal_facts('accounts', 'account_anonymization', t.account_anonymization_task_id)).task_failure is not null
           or (internal.sql_attempt_facts('accounts', 'account_anonymization', t.account_anonymization_task_id)).num_failures
                >= accounts.account_anonymization_max_attempts()
      from accounts.account_anonymization_task t
     where t.account_id = _account_id), false)
$$;

-- Payload: {account_anonymization_task_id}. Raises 25000 outside READ COMMITTED. The
-- envelopes and the order of its checks: internal.run_sql_process_supervisor. A failed
-- attempt is retried after 5 s · 2^failures, capped at an hour.
create or replace function accounts.account_anonymization_supervisor(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select internal.run_sql_process_supervisor('accounts', 'account_anonymization', 'accounts.account_anonymization_supervisor',
    payload, _work => 'accounts.anonymize_account(bigint)', _work_column => 'account_id',
    _max_attempts => accounts.account_anonymization_max_attempts(), _backoff_cap_seconds => 3600)
$$;

-- Kickoff (called by the account deletion supervisor): the root for the account and its
-- first run; a second call returns the existing root and enqueues nothing.
create or replace function accounts.kickoff_account_anonymization(_account_id bigint)
  returns bigint
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  select (internal.start_process('accounts', 'account_anonymization', 'accounts.account_anonymization_supervisor',
                                 'account_id', _account_id)).root_id
$$;
--! EndIncluded accounts/anonymization.sql
--! Included accounts/account_deletion.sql
-- Account deletion: a supervision tree, composed of the shared supervisor blocks
-- (sql/internal/process_supervisor.sql). The root supervisor finds its children from
-- current state (the account's files, its anonymization task), never from a payload:
--   1. start one file deletion per file of the account (files.kickoff_file_deletion);
--   2. when every file is deleted, start the account anonymization;
--   3. when anonymized, record account_deletion_task_succeeded.
-- A stuck child (files.is_file_deletion_stuck, accounts.is_account_anonymization_stuck)
-- ends the process in account_deletion_task_failed with a message naming it.
--
--   api.request_account_deletion(account_id)      app entry point (sql/api)
--   accounts.kickoff_account_deletion(account_id) flag 'deleted', root, first run
--   accounts.account_deletion_supervisor          db_function

-- Non-terminal runs per account before giving up. The parent waits on children whose
-- own retries take hours at most; with the backoff (capped at 10 minutes) 100 runs span
-- about 16 hours.
create or replace function accounts.account_deletion_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 100 $$;

-- What the supervisor decides on (select * from accounts.account_deletion_supervisor_facts(123)).
create or replace function accounts.account_deletion_supervisor_facts(
  _task_id bigint,
  out account_id               bigint,
  out has_task_succeeded       boolean,
  out task_failure             text,
  out num_runs                 integer,
  out num_files                integer,
  out num_files_without_task   integer,
  out num_files_deleted        integer,
  out stuck_file_ids           bigint[],
  out has_anonymization_task   boolean,
  out is_anonymized            boolean,
  out is_anonymization_stuck   boolean
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.account_id, e.has_task_succeeded, e.task_failure,
         internal.count_supervisor_runs('accounts', 'account_deletion', t.account_deletion_task_id),
         ff.num_files, ff.num_files_without_task, ff.num_files_deleted, ff.stuck_file_ids,
         x.account_anonymization_task_id is not null,
         exists (select 1 from accounts.account_anonymization_task_succeeded s
                  where s.account_anonymization_task_id = x.account_anonymization_task_id),
         accounts.is_account_anonymization_stuck(t.account_id)
    from accounts.account_deletion_task t
   cross join lateral internal.process_terminal_facts('accounts', 'account_deletion', t.account_deletion_task_id) e
   cross join lateral files.account_file_deletion_facts(t.account_id) ff
    left join accounts.account_anonymization_task x on x.account_id = t.account_id
   where t.account_deletion_task_id = _task_id
$$;

-- Payload: {account_deletion_task_id}. Raises 25000 outside READ COMMITTED. Returns
-- {success: true, payload: {status, next_check_at}} while it progresses, and
-- {status: 'failed', payload: {reason}} once the process failed.
create or replace function accounts.account_deletion_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _run record := internal.open_supervisor_run('accounts', 'account_deletion', 'accounts.account_deletion_supervisor', payload);
  _facts record;
  _reason text;
  _status text;
  _file_id bigint;
begin
  if _run.root_id is null then
    return _run.refusal;
  end if;
  _facts := accounts.account_deletion_supervisor_facts(_run.root_id);

  -- Terminal states: ended; every child done; a stuck child; the run cap.
  if _facts.has_task_succeeded then
    return internal.supervisor_progress('succeeded');
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _facts.task_failure));
  end if;
  if _facts.num_files_deleted = _facts.num_files and _facts.is_anonymized then
    perform internal.record_process_outcome('accounts', 'account_deletion', _run.root_id, null);
    return internal.supervisor_progress('succeeded');
  end if;
  _reason := case
    when cardinality(_facts.stuck_file_ids) > 0
      then format('file deletion stuck for file_id %s', array_to_string(_facts.stuck_file_ids, ', '))
    when _facts.is_anonymization_stuck
      then format('account anonymization stuck for account_id %s', _facts.account_id)
    when _facts.num_runs >= accounts.account_deletion_max_supervisor_runs()
      then format('run_limit_reached after %s runs', _facts.num_runs)
  end;
  if _reason is not null then
    perform internal.record_process_outcome('accounts', 'account_deletion', _run.root_id, _reason);
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _reason));
  end if;

  -- Progress: files first, then anonymization.
  perform internal.record_supervisor_run('accounts', 'account_deletion', _run.root_id);
  if _facts.num_files_without_task > 0 then
    for _file_id in select f.file_id from files.file f
                     where f.account_id = _facts.account_id
                       and not exists (select 1 from files.file_deletion_task d where d.file_id = f.file_id)
                     order by f.file_id loop
      perform files.kickoff_file_deletion(_file_id);
    end loop;
    _status := 'file_deletions_started';
  elsif _facts.num_files_deleted < _facts.num_files then
    _status := 'waiting_for_file_deletions';
  elsif not _facts.has_anonymization_task then
    perform accounts.kickoff_account_anonymization(_facts.account_id);
    _status := 'anonymization_started';
  else
    _status := 'waiting_for_anonymization';
  end if;
  -- Next run after 5 s · 2^(runs − 1), capped at 10 minutes: the parent polls its children.
  return internal.supervisor_progress(_status, jsonb_build_object('next_check_at',
    internal.schedule_next_supervisor_run('accounts.account_deletion_supervisor', 'account_deletion_task_id',
                                          _run.root_id, _facts.num_runs, 600)));
end;
$$;

-- Flags the account 'deleted', creates the root task and enqueues the first supervisor
-- run. A second call for the same account returns the existing task and writes nothing.
-- Bad input: a validation_failure_message and nothing written.
create or replace function accounts.kickoff_account_deletion(
  _account_id bigint,
  out account_deletion_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _root record;
begin
  if _account_id is null then
    validation_failure_message := 'account_id is required';
  elsif not exists (select 1 from accounts.account a where a.account_id = _account_id) then
    validation_failure_message := format('account %s not found', _account_id);
  else
    _root := internal.start_process('accounts', 'account_deletion', 'accounts.account_deletion_supervisor',
                                    'account_id', _account_id);
    account_deletion_task_id := _root.root_id;
    if _root.created then
      insert into accounts.account_flag (account_id, flag) values (_account_id, 'deleted') on conflict do nothing;
    end if;
  end if;
end;
$$;
--! EndIncluded accounts/account_deletion.sql

--! split: 320-hotpath-merge.sql
-- After the hot-path rewrite (120) meets the later features. 120 dropped the foreign keys
-- to the hot facts (queues.task_lease, queues.task_completed), and its trigger truncates
-- them when queues.task is truncated; TRUNCATE refuses a table that another table still
-- references. So the later facts that referred to them keep only their key to queues.task,
-- as the cold facts of 120 do: task results and started provider calls no longer refer
-- to their lease, and a cancellation refers to its task rather than to its completion.
-- Their writers (queues.record_task_result, internal.start_provider_call,
-- admin.cancel_tasks) check the lease or the completion themselves.
-- Locks: dropping or adding a foreign key takes ACCESS EXCLUSIVE on the referencing
-- table (not a hot one) and SHARE ROW EXCLUSIVE on the referenced one, briefly.
set local lock_timeout = '5s';
-- lock: access exclusive on queues.task_lease: dropping the foreign keys that refer to it (their triggers on it); catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_completed: dropping the foreign keys that refer to it (their triggers on it); catalog only, no rewrite or scan, held for the instant of the change

alter table queues.task_result drop constraint if exists task_result_task_lease_id_fkey;
alter table internal.provider_call_started drop constraint if exists provider_call_started_task_lease_id_fkey;
alter table queues.task_cancelled drop constraint if exists task_cancelled_task_id_fkey;
alter table queues.task_cancelled add constraint task_cancelled_task_id_fkey
  foreign key (task_id) references queues.task on delete cascade;
