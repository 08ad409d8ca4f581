--! Previous: sha1:b41f4115a13c780a3eeaef7d47f8796a79bdf9ba
--! Hash: sha1:2e20ef2c2c4e3eb7e34f4689b04994be7d2074a3
--! Message: Semantics, who may enqueue what, delivery modes, process skeleton, menus, task results, pause, cancel and run-now facts

--! split: 105-pause.sql
set local lock_timeout = '5s';
-- Queue controls: pausing claiming per task type, as facts. Before the other current
-- files, because the public claim wrappers (sql/queues/claim.sql) read these tables
-- through queues.claimable_task_types.

-- Pausing a task type is a fact; resuming closes it. A type is paused while it has a
-- pause without a resumption. Every claim reads this table (the claim wrappers in
-- sql/queues/claim.sql), so it only grows with operator actions.
create table if not exists queues.task_type_paused (
  task_type_paused_id bigint generated always as identity primary key,
  task_type           text not null references queues.task_type on delete cascade,
  paused_at           timestamptz not null default now(),
  reason              text not null default '' check (length(reason) <= 500)
);
create index if not exists task_type_paused_type_idx on queues.task_type_paused (task_type, task_type_paused_id desc);
comment on table queues.task_type_paused is 'Append-only: claiming of a task type paused (until a task_type_resumed row names it).';

create table if not exists queues.task_type_resumed (
  task_type_paused_id bigint primary key references queues.task_type_paused on delete cascade,
  resumed_at          timestamptz not null default now()
);
comment on table queues.task_type_resumed is 'Append-only: the end of a pause.';

drop trigger if exists forbid_update on queues.task_type_paused;
create trigger forbid_update before update on queues.task_type_paused
  for each statement execute function queues.forbid_fact_update();
drop trigger if exists forbid_update on queues.task_type_resumed;
create trigger forbid_update before update on queues.task_type_resumed
  for each statement execute function queues.forbid_fact_update();

--! Included queues/pause.sql
-- Pausing claims per task type (queue controls). Facts: queues.task_type_paused and
-- queues.task_type_resumed (migrations/current/310-dashboard.sql). The public claim
-- functions (sql/queues/claim.sql) pass the types they may claim through
-- queues.claimable_task_types, so every worker honours a pause on its next claim; the
-- owner-only claim_tasks_at is unaffected.

-- Task types paused now: a pause without a resumption.
create or replace function queues.paused_task_types()
  returns text[]
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(array_agg(p.task_type order by p.task_type), '{}')
    from queues.task_type_paused p
   where not exists (select 1 from queues.task_type_resumed r where r.task_type_paused_id = p.task_type_paused_id)
$$;

-- The task types a claim for _task_types (null: any type) may take: _task_types itself
-- when nothing is paused (the common case: one probe of an empty or tiny table) or when
-- it is empty (the claim refuses that); else the requested (or registered) types minus
-- the paused ones. When pauses leave no type it returns {NULL}, which no task type
-- equals: the claim still checks its arguments, and takes nothing.
create or replace function queues.claimable_task_types(_task_types text[])
  returns text[]
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select case
           when cardinality(x.paused) = 0 or cardinality(_task_types) = 0 then _task_types
           else coalesce(nullif(array(select t.task_type from queues.task_type t
                                       where (_task_types is null or t.task_type = any (_task_types))
                                         and not (t.task_type = any (x.paused))
                                       order by t.task_type), '{}'),
                         array[null]::text[])
         end
    from (select queues.paused_task_types() as paused) x
$$;
--! EndIncluded queues/pause.sql

--! split: 110-semantic.sql
-- Semantics of the queue (issue 12): error classification, fencing, resource keys vs
-- late heartbeats, stale recovery, transient errors, validation failures, input limits.
set local lock_timeout = '5s';
-- lock: access exclusive on queues.worker: adding heartbeat_interval_ms; metadata only (no default, no rewrite), held for the instant of the catalog change
-- lock: access exclusive on queues.task_pending: adding interrupted_count with a constant default; metadata only since PostgreSQL 11 (no rewrite)

-- Each worker's heartbeat interval, so stale recovery can tell a silent worker from one
-- that is merely between heartbeats (null: the documented default, 30 s).
alter table queues.worker add column if not exists heartbeat_interval_ms integer
  check (heartbeat_interval_ms between 1 and 86400000);

-- Transient interruptions (a deadlock, a serialization failure, a lost connection) of a
-- task's lease, with the error: the lease ends there (a task_lease_release fact is
-- appended too) and the task runs again after a backoff. They are not task errors (no
-- queues.error row) but they count: after max_leases of them the task is abandoned, with
-- the last one's message as its error.
create table if not exists queues.task_interruption (
  task_lease_id  bigint primary key references queues.task_lease on delete cascade,
  task_id        bigint not null references queues.task on delete cascade,
  interrupted_at timestamptz not null default now(),
  retry_at       timestamptz not null,
  error_message  text not null
);
create index if not exists task_interruption_task_idx on queues.task_interruption (task_id);
comment on table queues.task_interruption is 'Append-only: a lease ended by a transient error; the task runs again at retry_at.';
alter table queues.task_pending add column if not exists interrupted_count integer not null default 0;

drop trigger if exists forbid_update on queues.task_interruption;
create trigger forbid_update before update on queues.task_interruption
  for each statement execute function queues.forbid_fact_update();

-- Signatures that change.
drop function if exists queues.record_worker_heartbeat(text, text[]);
drop function if exists queues.complete_tasks(bigint[], bigint[], text[]);

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
    join queues.task_lease l on l.task_lease_id = p.current_lease_id
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
-- revocation counts as an expired lease towards abandoning the task, and the revoked
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
       set available_at = _now, current_lease_id = null
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
    returning p.task_id, s.task_lease_id, s.worker_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_lease_id, revoked_at, reason)
    select r.task_lease_id, _now, format('worker %s not seen for %s s', r.worker_id, _dead_after_seconds) from revoked r
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
--! EndIncluded queues/workers.sql
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

-- Enqueue one task for an app; returns its task_id. Refuses internal task types (42501),
-- then as queues.enqueue_internal.
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
  return queues.enqueue_internal(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts);
end;
$$;

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, one attempt), since generated clients send undefined as NULL.
-- Owner only (no grant): the owner's SQL enqueues any task type through it.
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
declare
  _task queues.task;
begin
  perform queues.assert_valid_task(_task_type, _payload, _priority, _resource_key, _max_attempts);
  if _scheduled_at is not null and not isfinite(_scheduled_at) then
    raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
  end if;

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
-- Refuses internal task types (42501), as queues.enqueue.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _problem record;
begin
  perform queues.assert_may_enqueue_many(_tasks);
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
--! EndIncluded queues/enqueue.sql
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
-- Returns the leases extended; a lease missing from the result was lost (the task was
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
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
  perform queues.lock_resource_keys(_task_ids);
  if _lease_seconds is null or _lease_seconds not between 1 and 86400 then
    raise exception 'lease_seconds must be between 1 and 86400, got %',
      coalesce(_lease_seconds::text, 'null') using errcode = '22023';
  end if;

  return query
  with extended as (
    update queues.task_pending p
       set available_at = _now + make_interval(secs => _lease_seconds)
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
     where p.task_id = i.task_id
       and p.current_lease_id = i.task_lease_id
       -- A keyed task extends only while it holds its key: once an expired lease's key
       -- went to another task (which may hold it still, or have completed), the lease
       -- is lost and must not come back to life beside the other task's.
       and (p.resource_key is null
            or exists (select 1 from queues.resource_lease r
                        where r.resource_key = p.resource_key and r.task_id = p.task_id))
    returning p.task_id, p.current_lease_id, p.available_at, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_extension (task_lease_id, extended_at, expires_at)
    select e.current_lease_id, _now, e.available_at from extended e
  ),
  key_extended as (
    update queues.resource_lease r
       set expires_at = e.available_at
      from extended e
     where e.resource_key is not null and r.resource_key = e.resource_key and r.task_id = e.task_id
  )
  select e.task_id, e.current_lease_id, e.available_at from extended e;
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

  with released as (
    update queues.task_pending p
       set available_at = now(),
           -- A released lease is no longer held: its worker can neither extend it nor
           -- complete or record against it.
           current_lease_id = null,
           released_count = p.released_count + 1
      from unnest(_task_ids, _task_lease_ids) as i(task_id, task_lease_id)
     where p.task_id = i.task_id
       and p.current_lease_id = i.task_lease_id
    returning p.task_id, i.task_lease_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_release (task_lease_id)
    select r.task_lease_id from released r
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
     where i.task_lease_id is null
        or (p.current_lease_id = i.task_lease_id
            -- A keyed task completes under its lease only while it holds its key.
            and (p.resource_key is null
                 or exists (select 1 from queues.resource_lease r
                             where r.resource_key = p.resource_key and r.task_id = p.task_id)))
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
--! Included queues/fail.sql
-- queues.fail_task: record an operational error against a task. Append-only and not
-- terminal: the worker completes the task afterwards (supervisors decide on retries).
-- Fenced like completion: with _task_lease_id, only the task's newest lease, neither
-- released nor revoked, of a task not completed by anyone else, may record.

create or replace function queues.max_error_message_length() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 10000 $$;

create or replace function queues.fail_task(
  _task_id       bigint,
  _error_message text,
  _task_lease_id bigint default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _error_id bigint;
  _message text := _error_message;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  if _message is null or btrim(_message) = '' then
    raise exception 'error_message must not be empty' using errcode = '22004';
  end if;
  if not exists (select 1 from queues.task t where t.task_id = _task_id) then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  if _task_lease_id is not null then
    if not exists (select 1 from queues.task_lease l
                    where l.task_lease_id = _task_lease_id and l.task_id = _task_id) then
      raise exception 'lease % does not belong to task %', _task_lease_id, _task_id
        using errcode = '22023';
    end if;
    if exists (select 1 from queues.task_lease l
                where l.task_id = _task_id and l.task_lease_id > _task_lease_id)
       or exists (select 1 from queues.task_lease_release r where r.task_lease_id = _task_lease_id)
       or exists (select 1 from queues.task_lease_revocation v where v.task_lease_id = _task_lease_id)
       -- Completed by anyone not passing this lease (another worker, an unfenced call,
       -- the queue abandoning it): the holder's run is over.
       or exists (select 1 from queues.task_completed c
                   where c.task_id = _task_id and c.task_lease_id is distinct from _task_lease_id) then
      raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
        using errcode = '55000', schema = 'queues', constraint = 'task_lease_current',
              hint = 'Another worker claimed the task after this lease expired.';
    end if;
  end if;
  if length(_message) > queues.max_error_message_length() then
    _message := left(_message, queues.max_error_message_length()) || ' [truncated]';
  end if;

  insert into queues.error (task_id, task_lease_id, error_message)
  values (_task_id, _task_lease_id, _message)
  returning error_id into _error_id;
  return _error_id;
end;
$$;
--! EndIncluded queues/fail.sql
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
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome)
    values (_task_id, _task_lease_id, _now, 'abandoned');
    delete from queues.task_pending p where p.task_id = _task_id;
    return 'abandoned';
  end if;

  _retry_at := _now + internal.backoff(_pending.interrupted_count, 300) / 5;
  insert into queues.task_lease_release (task_lease_id, released_at) values (_task_lease_id, _now)
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
     lease_count, released_count, max_attempts, failed_attempts, interrupted_count)
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
         t.max_attempts, coalesce(f.failed_attempts, 0), coalesce(i.interrupted_count, 0)
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

--! split: 210-processes.sql
-- Business processes (sql/comms, sql/files, sql/accounts, sql/api, sql/internal process
-- support): who may enqueue what, attempts the queue gave up on, terminal roots,
-- delivery modes per channel, and the shared process building blocks.
set local lock_timeout = '5s';

-- Task types only the owner's SQL may enqueue (queues.enqueue refuses them to apps).
create table if not exists queues.internal_task_type (
  task_type text primary key references queues.task_type on delete cascade,
  reason    text not null
);
comment on table queues.internal_task_type is
  'Task types only the owner''s SQL may enqueue (queues.enqueue_internal); queues.enqueue and enqueue_many refuse them to other roles with 42501.';
insert into queues.internal_task_type (task_type, reason) values
  ('db_function', 'runs a registered function as the worker'),
  ('email',       'sends an email with the provider''s credentials'),
  ('sms',         'sends an SMS with the provider''s credentials'),
  ('file_delete', 'deletes a stored object')
on conflict (task_type) do nothing;

-- The queue task of each channel attempt, so a supervisor can see the queue give up on
-- it (abandoned, dead-lettered, a handler that raised). NULL for attempts made before.
alter table comms.send_email_attempt add column if not exists task_id bigint references queues.task on delete set null;
alter table comms.send_sms_attempt add column if not exists task_id bigint references queues.task on delete set null;
alter table files.file_deletion_attempt add column if not exists task_id bigint references queues.task on delete set null;
create index if not exists send_email_attempt_queue_task_idx on comms.send_email_attempt (task_id);
create index if not exists send_sms_attempt_queue_task_idx on comms.send_sms_attempt (task_id);
create index if not exists file_deletion_attempt_queue_task_idx on files.file_deletion_attempt (task_id);

-- Delivery mode of each channel task type (sql/internal/delivery.sql).
create table if not exists internal.channel_delivery_mode (
  task_type     text primary key references queues.task_type on delete cascade,
  delivery_mode text not null check (delivery_mode in ('at_least_once', 'at_most_once')),
  reason        text not null default ''
);
comment on table internal.channel_delivery_mode is
  'Delivery mode per channel task type: at_least_once (the provider deduplicates) or at_most_once (the worker records the call before making it and never repeats a started call). Types not listed are at_least_once.';
insert into internal.channel_delivery_mode (task_type, delivery_mode, reason) values
  ('email',       'at_least_once', 'Resend deduplicates on the Idempotency-Key'),
  ('sms',         'at_most_once',  'Twilio has no idempotency key: a repeated call sends a second SMS'),
  ('file_delete', 'at_least_once', 'deleting twice is harmless')
on conflict (task_type) do nothing;

create table if not exists internal.provider_call_started (
  task_id       bigint not null references queues.task on delete cascade,
  task_lease_id bigint not null references queues.task_lease on delete cascade,
  started_at    timestamptz not null default now(),
  primary key (task_id, task_lease_id)
);
comment on table internal.provider_call_started is
  'Fact: an at-most-once provider call was started under this lease (committed before the call).';
drop trigger if exists forbid_update on internal.provider_call_started;
create trigger forbid_update before update on internal.provider_call_started
  for each statement execute function queues.forbid_fact_update();
create index if not exists file_bucket_object_key_idx on files.file (bucket, object_key);

-- Channel processes written on the shared skeleton (sql/internal/channel_process.sql).
create table if not exists internal.channel_process (
  process_schema      text not null,
  process_name        text not null,
  task_type           text not null references queues.task_type on delete restrict,
  supervisor          text not null,
  before_handler      text not null,
  success_handler     text not null,
  error_handler       text not null,
  max_attempts        integer not null check (max_attempts between 1 and 100),
  max_supervisor_runs integer not null check (max_supervisor_runs between 1 and 10000),
  backoff_cap_seconds integer not null check (backoff_cap_seconds between 1 and 86400),
  -- Optional: (root id bigint) → jsonb fields added to each channel task's payload.
  attempt_payload     regprocedure,
  primary key (process_schema, process_name)
);
comment on table internal.channel_process is
  'Channel processes run by internal.run_channel_supervisor: names (tables <schema>.<name>_task, _attempt, ...) and limits. Configuration, not a fact table.';
revoke all on internal.channel_process from public;

-- The supervisors' facts gained a column (has_unknown_outcome).
drop function if exists comms.send_email_supervisor_facts(bigint);
drop function if exists comms.send_sms_supervisor_facts(bigint);
-- The comms processes' own skeleton functions, replaced by the shared channel process.
do $$
declare
  _fn text;
begin
  foreach _fn in array array[
    'max_attempts()', 'max_supervisor_runs()', 'has_%s_succeeded_attempt(bigint)', 'count_%s_attempts(bigint)',
    'count_%s_failed_attempts(bigint)', 'count_%s_outstanding_attempts(bigint)', 'count_%s_supervisor_runs(bigint)',
    'has_%s_task_succeeded(bigint)', 'get_%s_task_failure(bigint)', 'has_%s_unknown_outcome(bigint)',
    'lock_%s_task(bigint)', 'record_%s_supervisor_run(bigint)', 'record_%s_task_succeeded(bigint)',
    'record_%s_task_failed(bigint,text)', 'schedule_%s_recheck(bigint,integer)'
  ] loop
    execute format('drop function if exists comms.%s', case when _fn like 'max%' then 'send_email_' || _fn else format(_fn, 'send_email') end);
    execute format('drop function if exists comms.%s', case when _fn like 'max%' then 'send_sms_' || _fn else format(_fn, 'send_sms') end);
  end loop;
end;
$$;
drop function if exists files.file_deletion_max_attempts();
drop function if exists files.file_deletion_max_supervisor_runs();
drop function if exists files.has_file_deletion_succeeded_attempt(bigint);
drop function if exists files.count_file_deletion_attempts(bigint);
drop function if exists files.count_file_deletion_failed_attempts(bigint);
drop function if exists files.count_file_deletion_outstanding_attempts(bigint);
drop function if exists files.count_file_deletion_supervisor_runs(bigint);
drop function if exists files.has_file_deletion_task_succeeded(bigint);
drop function if exists files.get_file_deletion_task_failure(bigint);
drop function if exists files.lock_file_deletion_task(bigint);
drop function if exists files.record_file_deletion_supervisor_run(bigint);
drop function if exists files.record_file_deletion_task_succeeded(bigint);
drop function if exists files.record_file_deletion_task_failed(bigint, text);
drop function if exists files.schedule_file_deletion_attempt(bigint, bigint);
drop function if exists files.schedule_file_deletion_recheck(bigint, integer);
drop function if exists files.close_given_up_file_deletion_attempts(bigint);
drop function if exists files.file_deletion_supervisor_facts(bigint);
drop function if exists comms.schedule_email_attempt(bigint);
drop function if exists comms.schedule_sms_attempt(bigint);
drop function if exists comms.close_given_up_email_attempts(bigint);
drop function if exists comms.close_given_up_sms_attempts(bigint);

revoke all on internal.channel_delivery_mode, internal.provider_call_started, queues.internal_task_type from public;

--! Included queues/enqueue_permission.sql
-- Who may enqueue what. Task types listed in queues.internal_task_type (the channel
-- types email, sms, file_delete and db_function) make the worker act with the owner's
-- authority: a channel task calls a provider, a db_function step runs a registered
-- function as the worker. Only SQL the owner wrote enqueues them (supervisors, handlers,
-- kickoffs, schedules the owner installs), through the grant-less
-- queues.enqueue_internal; apps start processes through their kickoff functions. The
-- public queues.enqueue and queues.enqueue_many refuse internal types with 42501 unless
-- the session itself is the owner's (migrations, operators at psql).

-- True when _task_type may be enqueued only by the owner's SQL.
create or replace function queues.is_internal_task_type(_task_type text)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from queues.internal_task_type i where i.task_type = _task_type)
$$;

-- True when the session's login role is (a member of) the role owning the queue schema:
-- the owner running SQL by hand or in a migration, not SQL reached from another role.
create or replace function queues.is_owner_session()
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select pg_has_role(session_user, n.nspowner, 'member')
    from pg_namespace n where n.nspname = 'queues'
$$;

-- Raises 42501 when the caller may not enqueue _task_type (_where prefixes the message,
-- 'tasks[3]: ' in a batch). Unknown or NULL types pass: queues.assert_valid_task names them.
create or replace function queues.assert_may_enqueue(_task_type text, _where text default '')
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if queues.is_internal_task_type(_task_type) and not queues.is_owner_session() then
    raise exception '%task_type % may be enqueued only by the database''s own processes, not by %',
      _where, quote_literal(_task_type), session_user
      using errcode = '42501',
            detail = 'Channel tasks (email, sms, file_delete) and db_function steps act with the owner''s authority.',
            hint = 'Start the business process through its kickoff function (comms.send_email, comms.send_sms, files.kickoff_file_deletion, api.request_account_deletion).';
  end if;
end;
$$;

-- The batch form of queues.assert_may_enqueue: the first element, in input order, whose
-- task_type is internal. Anything that is not an array of objects passes (the batch
-- validation reports it).
create or replace function queues.assert_may_enqueue_many(_tasks jsonb)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _first record;
begin
  if jsonb_typeof(_tasks) is distinct from 'array' or queues.is_owner_session() then
    return;
  end if;
  select e.ordinality - 1 as idx, e.value ->> 'task_type' as task_type into _first
    from jsonb_array_elements(_tasks) with ordinality e
    join queues.internal_task_type i
      on jsonb_typeof(e.value) = 'object' and i.task_type = e.value ->> 'task_type'
   order by e.ordinality
   limit 1;
  if found then
    perform queues.assert_may_enqueue(_first.task_type, format('tasks[%s]: ', _first.idx));
  end if;
end;
$$;
--! EndIncluded queues/enqueue_permission.sql
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

-- Enqueue one task for an app; returns its task_id. Refuses internal task types (42501),
-- then as queues.enqueue_internal.
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
  return queues.enqueue_internal(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts);
end;
$$;

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, one attempt), since generated clients send undefined as NULL.
-- Owner only (no grant): the owner's SQL enqueues any task type through it.
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
declare
  _task queues.task;
begin
  perform queues.assert_valid_task(_task_type, _payload, _priority, _resource_key, _max_attempts);
  if _scheduled_at is not null and not isfinite(_scheduled_at) then
    raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
  end if;

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
-- Refuses internal task types (42501), as queues.enqueue.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _problem record;
begin
  perform queues.assert_may_enqueue_many(_tasks);
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
--! EndIncluded queues/enqueue.sql
--! Included queues/dead_letter.sql
-- Dead letters: tasks that ended badly with nobody else to deal with it, and redrive.
--
-- A task is a dead letter when it completed 'abandoned', or 'failed' without an
-- error_handler in its payload (a task with an error handler hands its failures to a
-- supervisor, which retries on its own), and it has not been redriven.

create or replace view queues.dead_letter as
select t.task_id, t.task_type, t.payload, c.outcome, c.completed_at,
       (select e.error_message from queues.error e where e.task_id = t.task_id
         order by e.error_id desc limit 1) as last_error,
       (select count(*)::integer from queues.task_lease l where l.task_id = t.task_id) as attempts
  from queues.task_completed c
  join queues.task t on t.task_id = c.task_id
 where c.outcome <> 'succeeded'
   and (c.outcome = 'abandoned' or (c.outcome = 'failed' and not t.payload ? 'error_handler'))
   and not exists (select 1 from queues.task_redriven r where r.task_id = t.task_id);
comment on view queues.dead_letter is 'Tasks that ended failed or abandoned with no handler to deal with it, not yet redriven.';

-- Sends a dead letter round again: a new task with the same type, payload, priority,
-- resource key and max_attempts, runnable now. Returns the new task id.
create or replace function queues.redrive_task(_task_id bigint)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task queues.task;
  _new_task_id bigint;
begin
  if _task_id is null then
    raise exception 'task_id must not be null' using errcode = '22004';
  end if;
  select * into _task from queues.task t where t.task_id = _task_id;
  if not found then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  -- Serialise redrives of one task on its completion row.
  perform 1 from queues.task_completed c where c.task_id = _task_id for update;
  if exists (select 1 from queues.task_redriven r where r.task_id = _task_id) then
    raise exception 'task % was already redriven', _task_id using errcode = '22023';
  end if;
  if not exists (select 1 from queues.dead_letter d where d.task_id = _task_id) then
    raise exception 'task % is not a dead letter', _task_id using errcode = '22023',
      hint = 'Only tasks that completed failed (without an error handler) or abandoned can be redriven.';
  end if;
  _new_task_id := queues.enqueue_internal(_task.task_type, _task.payload, now(), _task.priority,
                                 _task.resource_key, _task.max_attempts);
  insert into queues.task_redriven (task_id, new_task_id) values (_task_id, _new_task_id);
  return _new_task_id;
end;
$$;
--! EndIncluded queues/dead_letter.sql
--! Included internal/process_support.sql
-- Helpers shared by every business process (comms, files, accounts, schedules):
-- reading ids from payloads, the validation-failure envelope, and the isolation guard
-- of supervisors. Called only from security definer functions: no grants.

-- A positive bigint id read from a jsonb object, or NULL when the key is missing, not
-- an integer, or out of range. Supervisors and handlers validate with this instead of
-- casting, so a malformed payload is a validation failure, not an exception.
create or replace function internal.id_from_payload(_payload jsonb, _key text)
  returns bigint
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select case
    when jsonb_typeof(_payload) = 'object'
     and jsonb_typeof(_payload -> _key) in ('number', 'string')
     and (_payload ->> _key) ~ '^[1-9][0-9]{0,17}$'
    then (_payload ->> _key)::bigint
  end
$$;

-- The envelope for input a function cannot act on: non-retriable, nothing written.
create or replace function internal.validation_failure(_message text)
  returns jsonb
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', false, 'validation_failure_message', _message)
$$;

-- Refuses to run a supervisor outside READ COMMITTED. A supervisor serialises on its
-- root row, then reads facts. Under READ COMMITTED every statement after the lock wait
-- takes a fresh snapshot and sees what the previous holder committed; under REPEATABLE
-- READ (or SERIALIZABLE) the snapshot is from before the wait, so two runs would both
-- see "no outstanding attempt" and schedule two.
create or replace function internal.assert_read_committed(_function_name text)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception '% must run under READ COMMITTED, not %', _function_name,
      upper(current_setting('transaction_isolation'))
      using errcode = '25000',
            detail = 'Under REPEATABLE READ or SERIALIZABLE the lock on the root row does not stop double scheduling: facts read after the lock wait come from a snapshot taken before it.',
            hint = 'Call supervisors in a READ COMMITTED transaction (the default).';
  end if;
end;
$$;

-- Why the queue gave up on a channel task, or NULL while it has not: the task is
-- completed (abandoned after its leases expired, dead-lettered, failed because its
-- success or error handler raised) although its attempt has no outcome. Supervisors
-- record this as the attempt's failure at their next run.
create or replace function internal.queue_gave_up_message(_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select left(format('the queue gave up on %s task %s (%s)%s', t.task_type, t.task_id, c.outcome,
                     coalesce(': ' || (select e.error_message from queues.error e
                                        where e.task_id = t.task_id order by e.error_id desc limit 1), '')), 2000)
    from queues.task t
    join queues.task_completed c on c.task_id = t.task_id
   where t.task_id = _task_id
$$;

-- True when an attempt's error is the worker's "unknown outcome" failure of an
-- at-most-once channel (internal.start_provider_call): the call may have happened, so a
-- supervisor must not make another attempt.
create or replace function internal.is_unknown_outcome(_error_message text)
  returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select starts_with(coalesce(_error_message, ''), 'unknown outcome: ')
$$;

-- The namespace of provider idempotency keys: this database's cluster (its system
-- identifier) and name, so two databases sending through one provider account never
-- share a key. Stable for the life of the database.
create or replace function internal.idempotency_namespace()
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select format('%s:%s', (select s.system_identifier from pg_control_system() s), current_database())
$$;
--! EndIncluded internal/process_support.sql
--! Included internal/delivery.sql
-- Delivery modes of channel tasks (internal.channel_delivery_mode):
--   at_least_once  the worker calls the provider on every lease until an outcome is
--                  recorded; a crash between the call and the success handler repeats
--                  the call, so the provider must deduplicate (Resend's Idempotency-Key).
--   at_most_once   the worker records the start of the call (internal.provider_call_started,
--                  committed) before making it; a later lease of the same task that finds a
--                  started call without an outcome does not call again: the task fails with
--                  an "unknown outcome" error, which the error handler records.

-- The delivery mode of a task type ('at_least_once' when not listed).
create or replace function internal.delivery_mode(_task_type text)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((select m.delivery_mode from internal.channel_delivery_mode m where m.task_type = _task_type),
                  'at_least_once')
$$;

-- The prefix of the error an at-most-once task fails with when a previous lease started
-- its provider call and never recorded an outcome. Supervisors recognise it.
create or replace function internal.unknown_outcome_prefix()
  returns text
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$ select 'unknown outcome: ' $$;

-- Runnable by the worker just before a provider call, in its own transaction.
-- Payload: {task_id, task_lease_id}. Returns {success: true, payload: {delivery_mode,
-- proceed}}: at_least_once → proceed, nothing recorded; at_most_once → records
-- provider_call_started for this lease and proceeds, unless an earlier lease of the task
-- started the call: then proceed is false and payload.error says why (the worker fails
-- the task with it instead of calling). A lease that is not the task's live lease, or
-- a completed task, is a validation failure (nothing recorded, no call).
create or replace function internal.start_provider_call(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'task_id');
  _lease_id bigint := internal.id_from_payload(payload, 'task_lease_id');
  _task_type text;
  _mode text;
  _started record;
begin
  if _task_id is null or _lease_id is null then
    return internal.validation_failure('task_id and task_lease_id must be positive integers');
  end if;
  select t.task_type into _task_type from queues.task t where t.task_id = _task_id;
  if _task_type is null then
    return internal.validation_failure(format('task %s not found', _task_id));
  end if;
  -- The live lease of an open task: the newest lease, not expired, no completion.
  if not exists (select 1 from queues.task_lease l
                  where l.task_lease_id = _lease_id and l.task_id = _task_id and l.expires_at > now()
                    and not exists (select 1 from queues.task_lease n
                                     where n.task_id = _task_id and n.task_lease_id > _lease_id))
     or exists (select 1 from queues.task_completed c where c.task_id = _task_id) then
    return internal.validation_failure(format('lease %s is not the live lease of task %s; not calling the provider', _lease_id, _task_id));
  end if;

  _mode := internal.delivery_mode(_task_type);
  if _mode = 'at_least_once' then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('delivery_mode', _mode, 'proceed', true));
  end if;

  select s.task_lease_id, s.started_at into _started
    from internal.provider_call_started s
   where s.task_id = _task_id and s.task_lease_id <> _lease_id
   order by s.task_lease_id
   limit 1;
  if found then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object(
      'delivery_mode', _mode, 'proceed', false,
      'error', format('%slease %s started the %s provider call at %s and no outcome was recorded; at-most-once delivery: not calling again',
                      internal.unknown_outcome_prefix(), _started.task_lease_id, _task_type, _started.started_at)));
  end if;
  insert into internal.provider_call_started (task_id, task_lease_id) values (_task_id, _lease_id)
  on conflict do nothing;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object('delivery_mode', _mode, 'proceed', true));
end;
$$;
--! EndIncluded internal/delivery.sql
--! Included internal/channel_process.sql
-- The skeleton of a channel process (a supervisor that schedules provider calls through
-- a channel task), written once. A process registers its names and limits in
-- internal.channel_process; its own file keeps only its decisions (what the kickoff
-- accepts, what the provider is sent) and thin named wrappers over these blocks.
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

-- Locks the root row FOR NO KEY UPDATE (it serialises supervisors; inserting a fact that
-- references the root takes FOR KEY SHARE, which does not wait on it). False: no such root.
create or replace function internal.lock_channel_process_root(_schema text, _name text, _root_id bigint)
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

-- Appends a terminal fact (_reason NULL: succeeded). A second call changes nothing.
create or replace function internal.record_channel_process_outcome(_schema text, _name text, _root_id bigint, _reason text)
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
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', _p.supervisor,
    _p.process_name || '_task_id', _root_id), coalesce(_at, now()));
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
  _root_key text := _name || '_task_id';
  _task_id bigint := internal.id_from_payload(payload, _root_key);
  _facts record;
  _attempt_id bigint;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return internal.validation_failure(format('%s must be a positive integer', _root_key));
  end if;
  perform internal.assert_read_committed(_p.supervisor);
  -- Lock, then read: facts read after the lock wait include what the last holder committed.
  if not internal.lock_channel_process_root(_schema, _name, _task_id) then
    return internal.validation_failure(format('%s %s not found', _name || '_task', _task_id));
  end if;
  perform internal.close_given_up_channel_attempts(_schema, _name, _task_id);
  _facts := internal.channel_process_facts(_schema, _name, _task_id);

  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform internal.record_channel_process_outcome(_schema, _name, _task_id, null);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.has_unknown_outcome then
    perform internal.record_channel_process_outcome(_schema, _name, _task_id, 'delivery_outcome_unknown');
    return jsonb_build_object('status', 'delivery_outcome_unknown');
  end if;
  if _facts.num_failures >= _p.max_attempts then
    perform internal.record_channel_process_outcome(_schema, _name, _task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached',
                              'payload', jsonb_build_object('num_failures', _facts.num_failures));
  end if;
  if _facts.num_runs >= _p.max_supervisor_runs then
    perform internal.record_channel_process_outcome(_schema, _name, _task_id, 'run_limit_reached');
    return jsonb_build_object('status', 'run_limit_reached',
                              'payload', jsonb_build_object('num_runs', _facts.num_runs));
  end if;

  execute format('insert into %I.%I (%I) values ($1)', _schema, _name || '_supervisor_run', _root_key) using _task_id;
  if _facts.num_outstanding = 0 then
    _attempt_id := internal.schedule_channel_attempt(_p, _task_id);
  end if;
  _next_check_at := now() + internal.backoff(_facts.num_runs, _p.backoff_cap_seconds);
  perform internal.enqueue_channel_supervisor(_p, _task_id, _next_check_at);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
    _name || '_attempt_id', _attempt_id,
    'next_check_at', _next_check_at));
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
--! Included comms/email.sql
-- The send-email process. The skeleton (supervisor, facts, attempts, handlers' bookkeeping)
-- is the shared channel process of sql/internal/channel_process.sql; this file holds what
-- is particular to email: its limits, the provider payload, and the kickoffs.
--
--   comms.send_email(...)             app: create the message and kick off (idempotent)
--   comms.kickoff_send_email(id)      root task + first supervisor task (idempotent)
--   comms.send_email_supervisor       db_function: internal.run_channel_supervisor
--   comms.get_email_payload           before_handler: the provider payload
--   comms.record_email_success        success_handler: attempt succeeded fact
--   comms.record_email_failure        error_handler: attempt failed fact

-- Limits: 3 provider calls per message (the first and two retries); 30 non-terminal
-- supervisor runs (about 21 hours with the backoff, capped at an hour), after which a
-- loop bug ends in send_email_task_failed('run_limit_reached') instead of running forever.
select internal.register_channel_process('comms', 'send_email', 'email',
  _supervisor => 'comms.send_email_supervisor', _before_handler => 'comms.get_email_payload',
  _success_handler => 'comms.record_email_success', _error_handler => 'comms.record_email_failure',
  _max_attempts => 3, _max_supervisor_runs => 30, _backoff_cap_seconds => 3600);

-- Everything the supervisor decides on, in one record: call it by hand to see what the
-- supervisor saw (select * from comms.send_email_supervisor_facts(123)).
create or replace function comms.send_email_supervisor_facts(
  _send_email_task_id bigint,
  out has_task_succeeded  boolean,
  out task_failure        text,
  out has_success         boolean,
  out num_attempts        integer,
  out num_failures        integer,
  out num_outstanding     integer,
  out num_runs            integer,
  out scheduled_at        timestamptz,
  out has_unknown_outcome boolean
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select f.has_task_succeeded, f.task_failure, f.has_success, f.num_attempts, f.num_failures,
         f.num_outstanding, f.num_runs, t.scheduled_at, f.has_unknown_outcome
    from comms.send_email_task t
   cross join lateral internal.channel_process_facts('comms', 'send_email', t.send_email_task_id) f
   where t.send_email_task_id = _send_email_task_id
$$;

-- Drives one send_email_task to a terminal fact. Payload: {send_email_task_id}. The
-- envelopes and the order of its checks: internal.run_channel_supervisor.
create or replace function comms.send_email_supervisor(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.run_channel_supervisor('comms', 'send_email', payload) $$;

-- before_handler. Payload: the email task's ({send_email_attempt_id, ...}). Returns the
-- provider payload of @org/handler-types emailPayload. Its idempotency_key is the attempt
-- id namespaced by the database (internal.idempotency_namespace), so a redelivered
-- attempt is deduplicated by the provider and two databases never share a key. Refused
-- (validation failure): an attempt with an outcome, or of a process that ended.
create or replace function comms.get_email_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload, 'send_email_attempt_id');
  _refusal text;
  _provider_payload jsonb;
begin
  if _attempt_id is null then
    return internal.validation_failure('send_email_attempt_id must be a positive integer');
  end if;
  _refusal := internal.channel_attempt_refusal('comms', 'send_email', _attempt_id);
  if _refusal is not null then
    return internal.validation_failure(_refusal);
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
           'message_id', m.message_id,
           'idempotency_key', format('%s:send_email_attempt:%s', internal.idempotency_namespace(), a.send_email_attempt_id),
           'from_address', m.from_address,
           'to_address', m.to_address,
           'subject', m.subject,
           'html', m.html,
           'text', m.text_body,
           'reply_to', m.reply_to))
    into _provider_payload
    from comms.send_email_attempt a
    join comms.send_email_task t using (send_email_task_id)
    join comms.email_message m using (message_id)
   where a.send_email_attempt_id = _attempt_id;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- success_handler. Body: {original_payload, worker_payload}. Idempotent.
create or replace function comms.record_email_success(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.record_channel_attempt_success('comms', 'send_email', payload) $$;

-- error_handler. Body: {original_payload, error}. Records the failure unless the attempt
-- succeeded. Idempotent.
create or replace function comms.record_email_failure(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.record_channel_attempt_failure('comms', 'send_email', payload) $$;

-- Kickoff -----------------------------------------------------------------------------

-- Starts the send process for an existing email message: the root task and the first
-- supervisor run, at _scheduled_at (NULL: now). A second call for the same message
-- returns the existing task and enqueues nothing. Bad input: a validation_failure_message
-- and nothing written.
create or replace function comms.kickoff_send_email(
  _message_id bigint,
  _scheduled_at timestamptz default null,
  out send_email_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _at timestamptz := coalesce(_scheduled_at, now());
begin
  if _message_id is null then
    validation_failure_message := 'message_id is required';
    return;
  end if;
  if not exists (select 1 from comms.email_message m where m.message_id = _message_id) then
    validation_failure_message := format('email message %s not found', _message_id);
    return;
  end if;

  insert into comms.send_email_task (message_id, scheduled_at) values (_message_id, _at)
  on conflict (message_id) do nothing
  returning send_email_task.send_email_task_id into send_email_task_id;

  if send_email_task_id is null then
    -- Already kicked off: its supervisor is running. No-op.
    select t.send_email_task_id into send_email_task_id
      from comms.send_email_task t where t.message_id = _message_id;
    return;
  end if;

  perform internal.enqueue_channel_supervisor(internal.get_channel_process('comms', 'send_email'), send_email_task_id, _at);
end;
$$;

-- For apps: stores the message and starts sending it at _scheduled_at (NULL: now).
-- With an _idempotency_key, a repeated request returns the first request's message and
-- task and writes nothing. Bad input: a validation_failure_message naming the field,
-- and nothing written.
create or replace function comms.send_email(
  _from_address    text,
  _to_address      text,
  _subject         text,
  _html            text,
  _text            text default null,
  _reply_to        text default null,
  _scheduled_at    timestamptz default null,
  _idempotency_key text default null,
  out message_id                 bigint,
  out send_email_task_id         bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _kickoff record;
begin
  validation_failure_message := case
    when _from_address is null or length(_from_address) not between 3 and 320
      then 'from_address is required (3 to 320 characters)'
    when not comms.is_email_address(_to_address)
      then 'to_address must be an email address'
    when _subject is null or length(_subject) not between 1 and 998
      then 'subject is required (1 to 998 characters)'
    when _html is null or length(_html) > 1000000
      then 'html is required (at most 1000000 characters)'
    when length(_text) > 1000000
      then 'text must be at most 1000000 characters'
    when _reply_to is not null and not comms.is_email_address(_reply_to)
      then 'reply_to must be an email address'
    when _idempotency_key is not null and length(_idempotency_key) not between 1 and 200
      then 'idempotency_key must be 1 to 200 characters'
  end;
  if validation_failure_message is not null then
    return;
  end if;

  insert into comms.message (channel, idempotency_key) values ('email', _idempotency_key)
  on conflict (idempotency_key) do nothing
  returning message.message_id into message_id;

  if message_id is null then
    -- A repeated request: return what the first one created.
    select m.message_id, t.send_email_task_id into message_id, send_email_task_id
      from comms.message m
      left join comms.send_email_task t on t.message_id = m.message_id
     where m.idempotency_key = _idempotency_key;
    if send_email_task_id is null then
      message_id := null;
      validation_failure_message := 'idempotency_key was already used for a message on another channel';
    end if;
    return;
  end if;

  insert into comms.email_message (message_id, from_address, to_address, subject, html, text_body, reply_to)
  values (message_id, _from_address, _to_address, _subject, _html, _text, _reply_to);

  _kickoff := comms.kickoff_send_email(message_id, _scheduled_at);
  send_email_task_id := _kickoff.send_email_task_id;
end;
$$;
--! EndIncluded comms/email.sql
--! Included comms/sms.sql
-- The send-SMS process. The skeleton (supervisor, facts, attempts, handlers' bookkeeping)
-- is the shared channel process of sql/internal/channel_process.sql; this file holds what
-- is particular to SMS: its limits, the provider payload, and the kickoffs.
--
--   comms.send_sms(...)             app: create the message and kick off (idempotent)
--   comms.kickoff_send_sms(id)      root task + first supervisor task (idempotent)
--   comms.send_sms_supervisor       db_function: internal.run_channel_supervisor
--   comms.get_sms_payload           before_handler: the provider payload
--   comms.record_sms_success        success_handler: attempt succeeded fact
--   comms.record_sms_failure        error_handler: attempt failed fact

-- Limits: 3 provider calls per message (the first and two retries); 30 non-terminal
-- supervisor runs (about 21 hours with the backoff, capped at an hour), after which a
-- loop bug ends in send_sms_task_failed('run_limit_reached') instead of running forever.
select internal.register_channel_process('comms', 'send_sms', 'sms',
  _supervisor => 'comms.send_sms_supervisor', _before_handler => 'comms.get_sms_payload',
  _success_handler => 'comms.record_sms_success', _error_handler => 'comms.record_sms_failure',
  _max_attempts => 3, _max_supervisor_runs => 30, _backoff_cap_seconds => 3600);

-- Everything the supervisor decides on, in one record: call it by hand to see what the
-- supervisor saw (select * from comms.send_sms_supervisor_facts(123)).
create or replace function comms.send_sms_supervisor_facts(
  _send_sms_task_id bigint,
  out has_task_succeeded  boolean,
  out task_failure        text,
  out has_success         boolean,
  out num_attempts        integer,
  out num_failures        integer,
  out num_outstanding     integer,
  out num_runs            integer,
  out scheduled_at        timestamptz,
  out has_unknown_outcome boolean
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select f.has_task_succeeded, f.task_failure, f.has_success, f.num_attempts, f.num_failures,
         f.num_outstanding, f.num_runs, t.scheduled_at, f.has_unknown_outcome
    from comms.send_sms_task t
   cross join lateral internal.channel_process_facts('comms', 'send_sms', t.send_sms_task_id) f
   where t.send_sms_task_id = _send_sms_task_id
$$;

-- Drives one send_sms_task to a terminal fact. Payload: {send_sms_task_id}. The
-- envelopes and the order of its checks: internal.run_channel_supervisor.
create or replace function comms.send_sms_supervisor(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.run_channel_supervisor('comms', 'send_sms', payload) $$;

-- before_handler. Payload: the SMS task's ({send_sms_attempt_id, ...}). Returns the
-- provider payload of @org/handler-types smsPayload. Its idempotency_key is the attempt
-- id namespaced by the database (internal.idempotency_namespace), so a redelivered
-- attempt is deduplicated by the provider and two databases never share a key. Refused
-- (validation failure): an attempt with an outcome, or of a process that ended.
create or replace function comms.get_sms_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload, 'send_sms_attempt_id');
  _refusal text;
  _provider_payload jsonb;
begin
  if _attempt_id is null then
    return internal.validation_failure('send_sms_attempt_id must be a positive integer');
  end if;
  _refusal := internal.channel_attempt_refusal('comms', 'send_sms', _attempt_id);
  if _refusal is not null then
    return internal.validation_failure(_refusal);
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
           'message_id', m.message_id,
           'idempotency_key', format('%s:send_sms_attempt:%s', internal.idempotency_namespace(), a.send_sms_attempt_id),
           'to_number', m.to_number,
           'from_number', m.from_number,
           'body', m.body))
    into _provider_payload
    from comms.send_sms_attempt a
    join comms.send_sms_task t using (send_sms_task_id)
    join comms.sms_message m using (message_id)
   where a.send_sms_attempt_id = _attempt_id;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- success_handler. Body: {original_payload, worker_payload}. Idempotent.
create or replace function comms.record_sms_success(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.record_channel_attempt_success('comms', 'send_sms', payload) $$;

-- error_handler. Body: {original_payload, error}. Records the failure unless the attempt
-- succeeded. Idempotent.
create or replace function comms.record_sms_failure(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.record_channel_attempt_failure('comms', 'send_sms', payload) $$;

-- Kickoff -----------------------------------------------------------------------------

-- Starts the send process for an existing sms message: the root task and the first
-- supervisor run, at _scheduled_at (NULL: now). A second call for the same message
-- returns the existing task and enqueues nothing. Bad input: a validation_failure_message
-- and nothing written.
create or replace function comms.kickoff_send_sms(
  _message_id bigint,
  _scheduled_at timestamptz default null,
  out send_sms_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _at timestamptz := coalesce(_scheduled_at, now());
begin
  if _message_id is null then
    validation_failure_message := 'message_id is required';
    return;
  end if;
  if not exists (select 1 from comms.sms_message m where m.message_id = _message_id) then
    validation_failure_message := format('sms message %s not found', _message_id);
    return;
  end if;

  insert into comms.send_sms_task (message_id, scheduled_at) values (_message_id, _at)
  on conflict (message_id) do nothing
  returning send_sms_task.send_sms_task_id into send_sms_task_id;

  if send_sms_task_id is null then
    -- Already kicked off: its supervisor is running. No-op.
    select t.send_sms_task_id into send_sms_task_id
      from comms.send_sms_task t where t.message_id = _message_id;
    return;
  end if;

  perform internal.enqueue_channel_supervisor(internal.get_channel_process('comms', 'send_sms'), send_sms_task_id, _at);
end;
$$;

-- For apps: stores the message and starts sending it at _scheduled_at (NULL: now).
-- With an _idempotency_key, a repeated request returns the first request's message and
-- task and writes nothing. Bad input: a validation_failure_message naming the field,
-- and nothing written.
create or replace function comms.send_sms(
  _to_number       text,
  _body            text,
  _from_number     text default null,
  _scheduled_at    timestamptz default null,
  _idempotency_key text default null,
  out message_id                 bigint,
  out send_sms_task_id           bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _kickoff record;
begin
  validation_failure_message := case
    when not comms.is_e164_number(_to_number)
      then 'to_number must be an E.164 number such as +14155550100'
    when _body is null or length(_body) not between 1 and 1600
      then 'body is required (1 to 1600 characters)'
    when _from_number is not null and not comms.is_e164_number(_from_number)
      then 'from_number must be an E.164 number such as +14155550100'
    when _idempotency_key is not null and length(_idempotency_key) not between 1 and 200
      then 'idempotency_key must be 1 to 200 characters'
  end;
  if validation_failure_message is not null then
    return;
  end if;

  insert into comms.message (channel, idempotency_key) values ('sms', _idempotency_key)
  on conflict (idempotency_key) do nothing
  returning message.message_id into message_id;

  if message_id is null then
    -- A repeated request: return what the first one created.
    select m.message_id, t.send_sms_task_id into message_id, send_sms_task_id
      from comms.message m
      left join comms.send_sms_task t on t.message_id = m.message_id
     where m.idempotency_key = _idempotency_key;
    if send_sms_task_id is null then
      message_id := null;
      validation_failure_message := 'idempotency_key was already used for a message on another channel';
    end if;
    return;
  end if;

  insert into comms.sms_message (message_id, to_number, from_number, body)
  values (message_id, _to_number, _from_number, _body);

  _kickoff := comms.kickoff_send_sms(message_id, _scheduled_at);
  send_sms_task_id := _kickoff.send_sms_task_id;
end;
$$;
--! EndIncluded comms/sms.sql
--! Included files/file_deletion.sql
-- The file deletion process on the shared channel skeleton (sql/internal/channel_process.sql).
-- What is particular to it: the file_id in each file_delete task, the provider payload,
-- no deletion for a file whose account deletion failed, the file marked deleted on
-- success, and the facts its parent (account deletion) and the files service ask.
--
--   files.kickoff_file_deletion(file_id)   root task + first supervisor task (idempotent)
--   files.file_deletion_supervisor         db_function: internal.run_channel_supervisor
--   files.get_file_delete_payload          before_handler: {file_id, idempotency_key, bucket, object_key}
--   files.record_file_delete_success       success_handler: attempt succeeded, file marked deleted
--   files.record_file_delete_failure       error_handler: attempt failed
--   files.is_file_deletion_stuck(file_id)  for parents: the deletion has given up

-- The file_id of a deletion, added to each of its file_delete tasks.
create or replace function files.file_delete_attempt_payload(_file_deletion_task_id bigint)
  returns jsonb
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('file_id', t.file_id) from files.file_deletion_task t
   where t.file_deletion_task_id = _file_deletion_task_id
$$;

-- Limits: 5 storage deletions per file before the process gives up (and is "stuck"); 40
-- non-terminal supervisor runs.
select internal.register_channel_process('files', 'file_deletion', 'file_delete',
  _supervisor => 'files.file_deletion_supervisor', _before_handler => 'files.get_file_delete_payload',
  _success_handler => 'files.record_file_delete_success', _error_handler => 'files.record_file_delete_failure',
  _max_attempts => 5, _max_supervisor_runs => 40, _backoff_cap_seconds => 3600,
  _attempt_payload => 'files.file_delete_attempt_payload(bigint)');

-- Facts -------------------------------------------------------------------------------

-- What the supervisor sees for a file's deletion, with its file_id (select * from
-- files.file_deletion_supervisor_facts(123)).
create or replace function files.file_deletion_supervisor_facts(
  _file_deletion_task_id bigint,
  out file_id             bigint,
  out has_task_succeeded  boolean,
  out task_failure        text,
  out has_success         boolean,
  out num_attempts        integer,
  out num_failures        integer,
  out num_outstanding     integer,
  out num_runs            integer,
  out has_unknown_outcome boolean
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.file_id, f.*
    from files.file_deletion_task t
   cross join lateral internal.channel_process_facts('files', 'file_deletion', t.file_deletion_task_id) f
   where t.file_deletion_task_id = _file_deletion_task_id
$$;

-- True when the file's deletion has given up: a terminal failure is recorded, or its
-- failed attempts reached the maximum (before the supervisor's next run records it).
create or replace function files.is_file_deletion_stuck(_file_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((
    select f.task_failure is not null
           or f.num_failures >= (internal.get_channel_process('files', 'file_deletion')).max_attempts
      from files.file_deletion_task t
     cross join lateral internal.channel_process_facts('files', 'file_deletion', t.file_deletion_task_id) f
     where t.file_id = _file_id), false)
$$;

-- True when the account's deletion ended in failure (its files are then left alone).
create or replace function files.has_account_deletion_failed(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_deletion_task d
                   join accounts.account_deletion_task_failed f using (account_deletion_task_id)
                  where d.account_id = _account_id)
$$;

-- Facts about an account's files, for the account deletion supervisor. Children are
-- found from current state (files.file.account_id), never from a payload.
create or replace function files.account_file_deletion_facts(
  _account_id bigint,
  out num_files              integer,
  out num_files_without_task integer,
  out num_files_deleted      integer,
  out stuck_file_ids         bigint[]
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer,
         count(*) filter (where t.file_deletion_task_id is null)::integer,
         count(*) filter (where exists (select 1 from files.file_deletion_task_succeeded s
                                         where s.file_deletion_task_id = t.file_deletion_task_id))::integer,
         coalesce(array_agg(f.file_id order by f.file_id)
                    filter (where t.file_deletion_task_id is not null and files.is_file_deletion_stuck(f.file_id)),
                  '{}')
    from files.file f
    left join files.file_deletion_task t on t.file_id = f.file_id
   where f.account_id = _account_id
$$;

-- Supervisor and handlers -------------------------------------------------------------

-- Payload: {file_deletion_task_id}. The envelopes and the order of its checks:
-- internal.run_channel_supervisor.
create or replace function files.file_deletion_supervisor(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.run_channel_supervisor('files', 'file_deletion', payload) $$;

-- before_handler: the provider payload of @org/handler-types fileDeletePayload, with
-- idempotency_key = the attempt id. Refused (validation failure): an attempt with an
-- outcome or of an ended process, and a file whose account deletion failed (its files
-- must stay as they are for whoever resolves it).
create or replace function files.get_file_delete_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := internal.id_from_payload(payload, 'file_deletion_attempt_id');
  _refusal text;
  _file files.file;
begin
  if _attempt_id is null then
    return internal.validation_failure('file_deletion_attempt_id must be a positive integer');
  end if;
  _refusal := internal.channel_attempt_refusal('files', 'file_deletion', _attempt_id, 'deleting');
  if _refusal is not null then
    return internal.validation_failure(_refusal);
  end if;
  select f.* into _file
    from files.file_deletion_attempt a
    join files.file_deletion_task t using (file_deletion_task_id)
    join files.file f on f.file_id = t.file_id
   where a.file_deletion_attempt_id = _attempt_id;
  if files.has_account_deletion_failed(_file.account_id) then
    return internal.validation_failure(format('the deletion of account %s failed; not deleting file %s for attempt %s',
                                              _file.account_id, _file.file_id, _attempt_id));
  end if;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'file_id', _file.file_id,
    'idempotency_key', _attempt_id::text,
    'bucket', _file.bucket,
    'object_key', _file.object_key));
end;
$$;

-- success_handler: records the attempt's success and marks the file deleted. Idempotent.
create or replace function files.record_file_delete_success(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _result jsonb := internal.record_channel_attempt_success('files', 'file_deletion', payload);
begin
  if (_result ->> 'success')::boolean then
    perform files.mark_file_deleted(t.file_id)
       from files.file_deletion_attempt a join files.file_deletion_task t using (file_deletion_task_id)
      where a.file_deletion_attempt_id = internal.id_from_payload(payload -> 'original_payload', 'file_deletion_attempt_id');
  end if;
  return _result;
end;
$$;

-- error_handler: records the attempt's failure unless it succeeded. Idempotent.
create or replace function files.record_file_delete_failure(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select internal.record_channel_attempt_failure('files', 'file_deletion', payload) $$;

-- Kickoff -----------------------------------------------------------------------------

-- Starts deleting a file at _scheduled_at (NULL: now). Idempotent per file; bad input
-- returns a validation_failure_message and writes nothing.
create or replace function files.kickoff_file_deletion(
  _file_id bigint,
  _scheduled_at timestamptz default null,
  out file_deletion_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _file_id is null then
    validation_failure_message := 'file_id is required';
    return;
  end if;
  if not exists (select 1 from files.file f where f.file_id = _file_id) then
    validation_failure_message := format('file %s not found', _file_id);
    return;
  end if;

  insert into files.file_deletion_task (file_id) values (_file_id)
  on conflict (file_id) do nothing
  returning file_deletion_task.file_deletion_task_id into file_deletion_task_id;

  if file_deletion_task_id is null then
    select t.file_deletion_task_id into file_deletion_task_id
      from files.file_deletion_task t where t.file_id = _file_id;
    return;
  end if;

  perform internal.enqueue_channel_supervisor(internal.get_channel_process('files', 'file_deletion'), file_deletion_task_id, _scheduled_at);
end;
$$;
--! EndIncluded files/file_deletion.sql
--! Included files/signing.sql
-- What the files service may sign. It issues a signed DELETE URL only for an object the
-- database has scheduled for deletion: a file row with that bucket and key whose
-- deletion has an attempt in flight (no outcome yet), whose process has not ended, and
-- whose account deletion (if any) has not failed. The files service asks through
-- internal.run_function (its only database privileges are those of the worker role).

-- True when (_bucket, _object_key) may be deleted now. NULLs: false.
create or replace function files.is_file_delete_scheduled(_bucket text, _object_key text)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1
      from files.file f
      join files.file_deletion_task t on t.file_id = f.file_id
      join files.file_deletion_attempt a on a.file_deletion_task_id = t.file_deletion_task_id
     where f.bucket = _bucket and f.object_key = _object_key
       and not exists (select 1 from files.file_deletion_attempt_succeeded s
                        where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
       and not exists (select 1 from files.file_deletion_attempt_failed x
                        where x.file_deletion_attempt_id = a.file_deletion_attempt_id)
       and not exists (select 1 from files.file_deletion_task_succeeded ts where ts.file_deletion_task_id = t.file_deletion_task_id)
       and not exists (select 1 from files.file_deletion_task_failed tf where tf.file_deletion_task_id = t.file_deletion_task_id)
       and not files.has_account_deletion_failed(f.account_id))
$$;

-- Runnable, for the files service. Payload: {bucket, object_key}. Returns
-- {success: true, payload: {scheduled}}; a payload without both strings is a validation
-- failure. Reads only.
create or replace function files.check_file_delete_signing(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if jsonb_typeof(payload -> 'bucket') is distinct from 'string' or jsonb_typeof(payload -> 'object_key') is distinct from 'string' then
    return internal.validation_failure('bucket and object_key must be strings');
  end if;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'scheduled', files.is_file_delete_scheduled(payload ->> 'bucket', payload ->> 'object_key')));
end;
$$;
--! EndIncluded files/signing.sql
--! Included accounts/anonymization.sql
-- Account anonymization: pure SQL, so no channel task. Each supervisor run that is not
-- terminal is one attempt: it runs accounts.anonymize_account in a subtransaction and
-- records the outcome. Attempts are bounded by the maximum, so they double as the run cap.
--
--   accounts.kickoff_account_anonymization(account_id)   root + first run (idempotent)
--   accounts.account_anonymization_supervisor            db_function
--   accounts.anonymize_account(account_id)                the work
--   accounts.is_account_anonymization_stuck(account_id)   for the parent

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

-- Facts -------------------------------------------------------------------------------

create or replace function accounts.has_account_anonymization_succeeded_attempt(_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from accounts.account_anonymization_attempt a
      join accounts.account_anonymization_attempt_succeeded s using (account_anonymization_attempt_id)
     where a.account_anonymization_task_id = _task_id)
$$;

create or replace function accounts.count_account_anonymization_attempts(_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from accounts.account_anonymization_attempt a
   where a.account_anonymization_task_id = _task_id
$$;

create or replace function accounts.count_account_anonymization_failed_attempts(_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from accounts.account_anonymization_attempt a
    join accounts.account_anonymization_attempt_failed f using (account_anonymization_attempt_id)
   where a.account_anonymization_task_id = _task_id
$$;

create or replace function accounts.has_account_anonymization_task_succeeded(_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_anonymization_task_succeeded t
                  where t.account_anonymization_task_id = _task_id)
$$;

create or replace function accounts.get_account_anonymization_task_failure(_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from accounts.account_anonymization_task_failed t
   where t.account_anonymization_task_id = _task_id
$$;

-- True when the account's anonymization has given up (terminal failure, or failed
-- attempts at the maximum).
create or replace function accounts.is_account_anonymization_stuck(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((
    select accounts.get_account_anonymization_task_failure(t.account_anonymization_task_id) is not null
           or accounts.count_account_anonymization_failed_attempts(t.account_anonymization_task_id)
                >= accounts.account_anonymization_max_attempts()
      from accounts.account_anonymization_task t
     where t.account_id = _account_id), false)
$$;

create or replace function accounts.account_anonymization_supervisor_facts(
  _task_id bigint,
  out account_id         bigint,
  out has_task_succeeded boolean,
  out task_failure       text,
  out has_success        boolean,
  out num_attempts       integer,
  out num_failures       integer
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.account_id,
         accounts.has_account_anonymization_task_succeeded(t.account_anonymization_task_id),
         accounts.get_account_anonymization_task_failure(t.account_anonymization_task_id),
         accounts.has_account_anonymization_succeeded_attempt(t.account_anonymization_task_id),
         accounts.count_account_anonymization_attempts(t.account_anonymization_task_id),
         accounts.count_account_anonymization_failed_attempts(t.account_anonymization_task_id)
    from accounts.account_anonymization_task t
   where t.account_anonymization_task_id = _task_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row (FOR NO KEY UPDATE: see comms.lock_send_email_task for why).
create or replace function accounts.lock_account_anonymization_task(_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from accounts.account_anonymization_task t
   where t.account_anonymization_task_id = _task_id
     for no key update;
  return found;
end;
$$;

-- One attempt: records it, runs anonymize_account in a subtransaction, records the
-- outcome. Returns NULL on success, else the error message (the work is rolled back).
create or replace function accounts.run_account_anonymization_attempt(_task_id bigint, _account_id bigint)
  returns text
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint;
  _error text;
begin
  insert into accounts.account_anonymization_attempt (account_anonymization_task_id) values (_task_id)
  returning account_anonymization_attempt_id into _attempt_id;
  begin
    perform accounts.anonymize_account(_account_id);
  exception when others then
    _error := left(sqlerrm, 2000);
  end;
  if _error is null then
    insert into accounts.account_anonymization_attempt_succeeded (account_anonymization_attempt_id) values (_attempt_id);
  else
    insert into accounts.account_anonymization_attempt_failed (account_anonymization_attempt_id, error_message)
    values (_attempt_id, _error);
  end if;
  return _error;
end;
$$;

create or replace function accounts.record_account_anonymization_task_succeeded(_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_anonymization_task_succeeded (account_anonymization_task_id) values (_task_id)
  on conflict do nothing
$$;

create or replace function accounts.record_account_anonymization_task_failed(_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_anonymization_task_failed (account_anonymization_task_id, reason) values (_task_id, _reason)
  on conflict do nothing
$$;

-- Next run after a failure: 5 s · 2^failures, capped at an hour.
create or replace function accounts.schedule_account_anonymization_recheck(_task_id bigint, _num_failures integer)
  returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz := now() + internal.backoff(_num_failures, 3600);
begin
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_anonymization_supervisor',
    'account_anonymization_task_id', _task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Payload: {account_anonymization_task_id}. Raises 25000 outside READ COMMITTED.
create or replace function accounts.account_anonymization_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'account_anonymization_task_id');
  _facts record;
  _error text;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return internal.validation_failure('account_anonymization_task_id must be a positive integer');
  end if;
  perform internal.assert_read_committed('accounts.account_anonymization_supervisor');
  if not accounts.lock_account_anonymization_task(_task_id) then
    return internal.validation_failure(format('account_anonymization_task %s not found', _task_id));
  end if;

  _facts := accounts.account_anonymization_supervisor_facts(_task_id);

  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform accounts.record_account_anonymization_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures >= accounts.account_anonymization_max_attempts() then
    perform accounts.record_account_anonymization_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached');
  end if;

  _error := accounts.run_account_anonymization_attempt(_task_id, _facts.account_id);
  if _error is null then
    perform accounts.record_account_anonymization_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures + 1 >= accounts.account_anonymization_max_attempts() then
    perform accounts.record_account_anonymization_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached', 'payload', jsonb_build_object('error', _error));
  end if;
  _next_check_at := accounts.schedule_account_anonymization_recheck(_task_id, _facts.num_failures + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', 'attempt_failed', 'error', _error, 'next_check_at', _next_check_at));
end;
$$;

-- Kickoff (called by the account deletion supervisor) ---------------------------------

create or replace function accounts.kickoff_account_anonymization(_account_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  insert into accounts.account_anonymization_task (account_id) values (_account_id)
  on conflict (account_id) do nothing
  returning account_anonymization_task_id into _task_id;
  if _task_id is null then
    return (select t.account_anonymization_task_id from accounts.account_anonymization_task t
             where t.account_id = _account_id);
  end if;
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_anonymization_supervisor',
    'account_anonymization_task_id', _task_id));
  return _task_id;
end;
$$;
--! EndIncluded accounts/anonymization.sql
--! Included accounts/account_deletion.sql
-- Account deletion: a supervision tree. The root supervisor finds its children from
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
-- own retries take hours at most; with the backoff below (capped at 10 minutes) 100 runs
-- span about 16 hours.
create or replace function accounts.account_deletion_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 100 $$;

-- Facts -------------------------------------------------------------------------------

create or replace function accounts.count_account_deletion_supervisor_runs(_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from accounts.account_deletion_supervisor_run r
   where r.account_deletion_task_id = _task_id
$$;

create or replace function accounts.has_account_deletion_task_succeeded(_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_deletion_task_succeeded t where t.account_deletion_task_id = _task_id)
$$;

create or replace function accounts.get_account_deletion_task_failure(_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from accounts.account_deletion_task_failed t where t.account_deletion_task_id = _task_id
$$;

create or replace function accounts.has_account_anonymization_task(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_anonymization_task t where t.account_id = _account_id)
$$;

create or replace function accounts.is_account_anonymized(_account_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from accounts.account_anonymization_task t
                  where t.account_id = _account_id
                    and accounts.has_account_anonymization_task_succeeded(t.account_anonymization_task_id))
$$;

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
  select t.account_id,
         accounts.has_account_deletion_task_succeeded(t.account_deletion_task_id),
         accounts.get_account_deletion_task_failure(t.account_deletion_task_id),
         accounts.count_account_deletion_supervisor_runs(t.account_deletion_task_id),
         ff.num_files, ff.num_files_without_task, ff.num_files_deleted, ff.stuck_file_ids,
         accounts.has_account_anonymization_task(t.account_id),
         accounts.is_account_anonymized(t.account_id),
         accounts.is_account_anonymization_stuck(t.account_id)
    from accounts.account_deletion_task t
    cross join lateral files.account_file_deletion_facts(t.account_id) ff
   where t.account_deletion_task_id = _task_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row (FOR NO KEY UPDATE: see comms.lock_send_email_task for why).
create or replace function accounts.lock_account_deletion_task(_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from accounts.account_deletion_task t where t.account_deletion_task_id = _task_id
     for no key update;
  return found;
end;
$$;

create or replace function accounts.record_account_deletion_supervisor_run(_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_deletion_supervisor_run (account_deletion_task_id) values (_task_id)
$$;

create or replace function accounts.record_account_deletion_task_succeeded(_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_deletion_task_succeeded (account_deletion_task_id) values (_task_id)
  on conflict do nothing
$$;

create or replace function accounts.record_account_deletion_task_failed(_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into accounts.account_deletion_task_failed (account_deletion_task_id, reason) values (_task_id, _reason)
  on conflict do nothing
$$;

-- Starts a deletion for every file of the account that has none; returns how many.
create or replace function accounts.start_account_file_deletions(_account_id bigint)
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _file_id bigint;
  _started integer := 0;
begin
  for _file_id in
    select f.file_id from files.file f
     where f.account_id = _account_id
       and not exists (select 1 from files.file_deletion_task t where t.file_id = f.file_id)
     order by f.file_id
  loop
    perform files.kickoff_file_deletion(_file_id);
    _started := _started + 1;
  end loop;
  return _started;
end;
$$;

-- Next run: 5 s · 2^(runs − 1), capped at 10 minutes (the parent polls its children).
create or replace function accounts.schedule_account_deletion_recheck(_task_id bigint, _num_runs integer)
  returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz :=
    now() + internal.backoff(_num_runs - 1, 600);
begin
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_deletion_supervisor',
    'account_deletion_task_id', _task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Payload: {account_deletion_task_id}. Raises 25000 outside READ COMMITTED.
create or replace function accounts.account_deletion_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := internal.id_from_payload(payload, 'account_deletion_task_id');
  _facts record;
  _status text;
  _reason text;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return internal.validation_failure('account_deletion_task_id must be a positive integer');
  end if;
  perform internal.assert_read_committed('accounts.account_deletion_supervisor');
  if not accounts.lock_account_deletion_task(_task_id) then
    return internal.validation_failure(format('account_deletion_task %s not found', _task_id));
  end if;

  _facts := accounts.account_deletion_supervisor_facts(_task_id);

  -- Terminal states.
  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _facts.task_failure));
  end if;
  if _facts.num_files_deleted = _facts.num_files and _facts.is_anonymized then
    perform accounts.record_account_deletion_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
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
    perform accounts.record_account_deletion_task_failed(_task_id, _reason);
    return jsonb_build_object('status', 'failed', 'payload', jsonb_build_object('reason', _reason));
  end if;

  -- Progress: files first, then anonymization.
  perform accounts.record_account_deletion_supervisor_run(_task_id);
  if _facts.num_files_without_task > 0 then
    perform accounts.start_account_file_deletions(_facts.account_id);
    _status := 'file_deletions_started';
  elsif _facts.num_files_deleted < _facts.num_files then
    _status := 'waiting_for_file_deletions';
  elsif not _facts.has_anonymization_task then
    perform accounts.kickoff_account_anonymization(_facts.account_id);
    _status := 'anonymization_started';
  else
    _status := 'waiting_for_anonymization';
  end if;
  _next_check_at := accounts.schedule_account_deletion_recheck(_task_id, _facts.num_runs + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', _status, 'next_check_at', _next_check_at));
end;
$$;

-- Kickoff -----------------------------------------------------------------------------

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
begin
  if _account_id is null then
    validation_failure_message := 'account_id is required';
    return;
  end if;
  if not exists (select 1 from accounts.account a where a.account_id = _account_id) then
    validation_failure_message := format('account %s not found', _account_id);
    return;
  end if;

  insert into accounts.account_deletion_task (account_id) values (_account_id)
  on conflict (account_id) do nothing
  returning account_deletion_task.account_deletion_task_id into account_deletion_task_id;
  if account_deletion_task_id is null then
    select t.account_deletion_task_id into account_deletion_task_id
      from accounts.account_deletion_task t where t.account_id = _account_id;
    return;
  end if;

  insert into accounts.account_flag (account_id, flag) values (_account_id, 'deleted')
  on conflict do nothing;
  perform queues.enqueue_internal('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_deletion_supervisor',
    'account_deletion_task_id', account_deletion_task_id));
end;
$$;
--! EndIncluded accounts/account_deletion.sql
--! Included schedules/schedule.sql
-- Managing schedules: create or update, enable, disable, list. Apps and the REST API call
-- the public functions; each has an owner-only *_at(_now, ...) variant for tests. Bad
-- business input returns a validation_failure_message instead of raising.
--
-- A schedule's definition is append-only (schedule_version); the newest row is in force.
-- fires_after (fire times at or before it are never due) moves to now when a schedule is
-- created, re-enabled, or its cron changes; other changes keep it, so an edit of the
-- payload neither skips nor repeats a fire time.

-- Null when the definition is valid; else what is wrong with it (the first problem).
create or replace function schedules.schedule_definition_error(
  _name text, _cron text, _task_type text, _payload jsonb, _priority integer, _missed_run_policy text
) returns text
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _error text;
begin
  if _name is null or _name !~ '^[a-z][a-z0-9_.-]{0,99}$' then
    return 'name is required: 1 to 100 characters, lowercase letters, digits, _ . or -, starting with a letter';
  end if;
  _error := schedules.cron_error(_cron);
  if _error is not null then
    return _error;
  end if;
  if _task_type is null then
    return 'task_type is required';
  end if;
  if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    return format('unknown task_type %s', quote_literal(left(_task_type, 100)));
  end if;
  if _payload is null or jsonb_typeof(_payload) <> 'object' then
    return 'payload is required and must be a JSON object';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    return format('payload is %s bytes, over the limit of %s bytes', pg_column_size(_payload), queues.max_payload_bytes());
  end if;
  if _task_type = 'db_function' then
    begin
      perform internal.resolve_runnable_function(_payload ->> 'db_function');
    exception when others then
      return format('payload.db_function must name a runnable function: %s', sqlerrm);
    end;
  end if;
  if _priority is not null and _priority not between -1000 and 1000 then
    return format('priority must be between -1000 and 1000, got %s', _priority);
  end if;
  if _missed_run_policy is not null and _missed_run_policy not in ('skip', 'catch_up_once') then
    return format('missed_run_policy must be ''skip'' or ''catch_up_once'', got %s',
                  quote_literal(left(_missed_run_policy, 50)));
  end if;
  return null;
end;
$$;

-- Appends a version to a locked schedule unless it would change nothing; returns the
-- version in force.
create or replace function schedules.append_schedule_version(
  _now timestamptz, _schedule_id bigint, _cron text, _task_type text, _payload jsonb,
  _priority integer, _missed_run_policy text, _enabled boolean
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _current schedules.schedule_version := schedules.current_version(_schedule_id);
  _id bigint;
begin
  if _current.schedule_version_id is not null
     and (_current.cron, _current.task_type, _current.payload, _current.priority,
          _current.missed_run_policy, _current.enabled)
         is not distinct from (_cron, _task_type, _payload, _priority, _missed_run_policy, _enabled) then
    return _current.schedule_version_id;
  end if;
  insert into schedules.schedule_version
    (schedule_id, cron, task_type, payload, priority, missed_run_policy, enabled, fires_after, created_at)
  values (_schedule_id, _cron, _task_type, _payload, _priority, _missed_run_policy, _enabled,
          case when _current.schedule_version_id is null or (_enabled and not _current.enabled)
                    or _current.cron <> _cron
               then _now else _current.fires_after end,
          _now)
  returning schedule_version_id into _id;
  return _id;
end;
$$;

-- Owner only. Creates the schedule _name (enabled), or updates its definition (keeping
-- whether it is enabled). NULL priority means 0 and NULL missed_run_policy 'skip'. Kicks
-- off the supervisor. Idempotent: the same definition again appends nothing.
create or replace function schedules.upsert_schedule_at(
  _now               timestamptz,
  _name              text,
  _cron              text,
  _task_type         text,
  _payload           jsonb,
  _priority          integer default null,
  _missed_run_policy text default null,
  out schedule_id                bigint,
  out schedule_version_id        bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _enabled boolean;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  validation_failure_message := schedules.schedule_definition_error(
    _name, _cron, _task_type, _payload, _priority, _missed_run_policy);
  if validation_failure_message is not null then
    return;
  end if;

  -- The supervisor's lock first, then the schedule row: the supervisor takes them in
  -- this order too, so an edit and a supervisor run never deadlock.
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());
  insert into schedules.schedule (name, created_at) values (_name, _now) on conflict (name) do nothing;
  select s.schedule_id into schedule_id from schedules.schedule s where s.name = _name for no key update;
  _enabled := coalesce((schedules.current_version(schedule_id)).enabled, true);
  schedule_version_id := schedules.append_schedule_version(
    _now, schedule_id, btrim(_cron), _task_type, _payload, coalesce(_priority, 0),
    coalesce(_missed_run_policy, 'skip'), _enabled);
  perform schedules.ensure_schedule_supervisor_at(_now);
end;
$$;

create or replace function schedules.upsert_schedule(
  _name              text,
  _cron              text,
  _task_type         text,
  _payload           jsonb,
  _priority          integer default null,
  _missed_run_policy text default null,
  out schedule_id                bigint,
  out schedule_version_id        bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  -- Apps and the REST API schedule only what they could enqueue themselves: a schedule
  -- of an internal task type (a channel task, a db_function step) is the owner's to
  -- install, with schedules.upsert_schedule_at in a migration.
  perform queues.assert_may_enqueue(_task_type);
  select * into schedule_id, schedule_version_id, validation_failure_message
    from schedules.upsert_schedule_at(now(), _name, _cron, _task_type, _payload, _priority, _missed_run_policy);
end;
$$;

-- Owner only. Enables or disables the schedule _name; unchanged when it already is.
-- Re-enabling counts from now: fire times missed while disabled are never run.
create or replace function schedules.set_schedule_enabled_at(
  _now timestamptz, _name text, _enabled boolean,
  out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _v schedules.schedule_version;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _enabled is null then
    raise exception 'enabled must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key()); -- before the row lock, as above
  select s.schedule_id into schedule_id from schedules.schedule s where s.name = _name for no key update;
  if schedule_id is null then
    validation_failure_message := format('no schedule named %s', coalesce(quote_literal(left(_name, 100)), 'null'));
    return;
  end if;
  _v := schedules.current_version(schedule_id);
  schedule_version_id := schedules.append_schedule_version(
    _now, schedule_id, _v.cron, _v.task_type, _v.payload, _v.priority, _v.missed_run_policy, _enabled);
  if _enabled then
    perform schedules.ensure_schedule_supervisor_at(_now);
  end if;
end;
$$;

create or replace function schedules.enable_schedule(
  _name text, out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from schedules.set_schedule_enabled_at(now(), _name, true)
$$;

create or replace function schedules.disable_schedule(
  _name text, out schedule_id bigint, out schedule_version_id bigint, out validation_failure_message text
)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from schedules.set_schedule_enabled_at(now(), _name, false)
$$;

-- Every schedule with its definition in force, the last fire time handled and the next
-- one due (in the past when the supervisor is behind; null when disabled).
create or replace function schedules.list_schedules()
  returns table (
    schedule_id bigint, name text, cron text, task_type text, payload jsonb, priority integer,
    missed_run_policy text, enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz,
    created_at timestamptz, updated_at timestamptz
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select s.schedule_id, s.name, v.cron, v.task_type, v.payload, v.priority, v.missed_run_policy,
         v.enabled, schedules.last_fire_at(s.schedule_id), schedules.next_due_fire_at(s.schedule_id),
         s.created_at, v.created_at
    from schedules.schedule s
   cross join lateral schedules.current_version(s.schedule_id) v
   order by s.name
$$;
--! EndIncluded schedules/schedule.sql
--! Included schedules/supervisor.sql
-- The schedule supervisor: a db_function task that enqueues due schedule runs, records
-- them as facts, and re-enqueues itself at the next fire time among all schedules (at
-- most schedules.max_supervisor_sleep() later).
--
--   schedules.schedule_supervisor(payload)            worker: run through internal.run_function
--   schedules.schedule_supervisor_at(_now, payload)   owner only: the same with a chosen clock
--   schedules.ensure_schedule_supervisor()            app/api: idempotent kickoff
--   schedules.ensure_schedule_supervisor_at(_now)     owner only
--
-- Missed-run policies, for the fire times due (after the last handled one, up to now):
--   skip           fire times older than schedules.skip_grace_period() are not run: one
--                  'skipped' fact covers them all; each fire time within the grace window
--                  is enqueued as its own task.
--   catch_up_once  one task covers all of them: it is recorded under the latest due fire
--                  time, with first_fire_at the earliest.
-- Tasks are enqueued with scheduled_at = their fire time and the stored payload as is.
--
-- At most once per fire time: supervisors serialise on a transaction advisory lock, and
-- unique (schedule_id, fire_at) on schedule_run rejects any second enqueue of a fire time.

-- Fire times at most this old still run under the 'skip' policy.
create or replace function schedules.skip_grace_period() returns interval
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select interval '10 minutes' $$;

-- The supervisor wakes at least this often while any schedule is enabled, so a schedule
-- created without a kickoff (or a lost supervisor chain after ensure) is never far off.
create or replace function schedules.max_supervisor_sleep() returns interval
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select interval '1 hour' $$;

-- The advisory lock key that serialises supervisors and kickoffs.
create or replace function schedules.supervisor_lock_key() returns bigint
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 7305871629419384611::bigint $$;

-- Facts -------------------------------------------------------------------------------

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
              then schedules.next_fire_time(v.cron, greatest(v.fires_after, schedules.last_fire_at(_schedule_id)))
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
    from queues.task_pending p
   where p.task_id = any (array(select s.task_id from schedules.supervisor_task s
                                 order by s.task_id desc limit 100))
     and (p.current_lease_id is null or p.available_at <= _now)
   order by p.available_at, p.task_id
   limit 1
$$;

-- Effects -----------------------------------------------------------------------------

-- Enqueues the schedule's task for a fire time and records the run; returns the task_id.
create or replace function schedules.enqueue_schedule_run(
  _version schedules.schedule_version, _fire_at timestamptz, _first_fire_at timestamptz, _now timestamptz
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  _task_id := queues.enqueue_internal(_version.task_type, _version.payload, _fire_at, _version.priority);
  insert into schedules.schedule_run
    (schedule_id, schedule_version_id, fire_at, first_fire_at, outcome, task_id, enqueued_at)
  values (_version.schedule_id, _version.schedule_version_id, _fire_at, _first_fire_at,
          'enqueued', _task_id, _now);
  return _task_id;
end;
$$;

-- Handles one schedule's due fire times at _now by its missed-run policy. Returns
-- {name, enqueued: [{fire_at, first_fire_at, task_id}], skipped: {first_fire_at, fire_at}}
-- or null when nothing was due. Locks the schedule row (FOR NO KEY UPDATE) first.
create or replace function schedules.run_schedule_at(_now timestamptz, _schedule_id bigint)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _name text;
  _v schedules.schedule_version;
  _first timestamptz;
  _last timestamptz;
  _from timestamptz;
  _fire timestamptz;
  _enqueued jsonb := '[]';
  _skipped jsonb;
  _task_id bigint;
begin
  select s.name into _name from schedules.schedule s where s.schedule_id = _schedule_id for no key update;
  _v := schedules.current_version(_schedule_id);
  if _name is null or not coalesce(_v.enabled, false) then
    return null;
  end if;
  _from := greatest(_v.fires_after, schedules.last_fire_at(_schedule_id));
  _first := schedules.next_fire_time(_v.cron, _from);
  if _first is null or _first > _now then
    return null;
  end if;

  if _v.missed_run_policy = 'catch_up_once' then
    -- The latest fire time at or before now (at least _first).
    _last := schedules.prev_fire_time(_v.cron, _now + interval '1 microsecond');
    _task_id := schedules.enqueue_schedule_run(_v, _last, _first, _now);
    _enqueued := jsonb_build_array(jsonb_build_object(
      'fire_at', _last, 'first_fire_at', _first, 'task_id', _task_id));
  else
    if _first < _now - schedules.skip_grace_period() then
      _last := schedules.prev_fire_time(_v.cron, _now - schedules.skip_grace_period());
      insert into schedules.schedule_run
        (schedule_id, schedule_version_id, fire_at, first_fire_at, outcome, task_id, enqueued_at)
      values (_schedule_id, _v.schedule_version_id, _last, _first, 'skipped', null, _now);
      _skipped := jsonb_build_object('first_fire_at', _first, 'fire_at', _last);
      _from := _last;
    end if;
    -- Within the grace window: each fire time is its own run (at most grace / 1 minute).
    loop
      _fire := schedules.next_fire_time(_v.cron, _from);
      exit when _fire is null or _fire > _now;
      _task_id := schedules.enqueue_schedule_run(_v, _fire, _fire, _now);
      _enqueued := _enqueued || jsonb_build_object('fire_at', _fire, 'first_fire_at', _fire, 'task_id', _task_id);
      _from := _fire;
    end loop;
  end if;
  return jsonb_build_object('name', _name, 'enqueued', _enqueued, 'skipped', _skipped);
end;
$$;

-- Enqueues the next supervisor run at _wake unless a pending supervisor task (not held
-- by a live lease) already becomes claimable by then; returns the task that will run.
-- Caller holds the supervisor advisory lock.
create or replace function schedules.plan_supervisor_at(_now timestamptz, _wake timestamptz)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pending record;
  _task_id bigint;
begin
  select * into _pending from schedules.pending_supervisor_task(_now);
  if _wake is null then
    return _pending.task_id;
  end if;
  if _pending.task_id is not null and _pending.available_at <= _wake then
    return _pending.task_id;
  end if;
  _task_id := queues.enqueue_internal('db_function',
    jsonb_build_object('task_type', 'db_function', 'db_function', 'schedules.schedule_supervisor'),
    _wake, 100, null, 3);
  insert into schedules.supervisor_task (task_id, scheduled_at, enqueued_at) values (_task_id, _wake, _now);
  return _task_id;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Owner only (tests move the clock). Handles every enabled schedule's due fire times,
-- then plans the next run. Returns {success: true, payload: {runs, enqueued, skipped,
-- next_supervisor_task_id, next_run_at}}; when a schedule raised, its effects are rolled
-- back, the others stand, and the envelope is {success: false, error, payload}.
create or replace function schedules.schedule_supervisor_at(_now timestamptz, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _schedule record;
  _run jsonb;
  _runs jsonb := '[]';
  _errors jsonb := '[]';
  _enqueued integer := 0;
  _skipped integer := 0;
  _wake timestamptz;
  _next_task_id bigint;
  _result jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());

  for _schedule in select s.schedule_id, s.name from schedules.schedule s order by s.schedule_id loop
    begin
      _run := schedules.run_schedule_at(_now, _schedule.schedule_id);
      if _run is not null then
        _runs := _runs || _run;
        _enqueued := _enqueued + jsonb_array_length(_run -> 'enqueued');
        _skipped := _skipped + case when _run -> 'skipped' = 'null' then 0 else 1 end;
      end if;
    exception when others then
      _errors := _errors || jsonb_build_object('name', _schedule.name, 'error', sqlerrm, 'sqlstate', sqlstate);
    end;
  end loop;

  _wake := schedules.supervisor_wake_at(_now);
  _next_task_id := schedules.plan_supervisor_at(_now, _wake);
  _result := jsonb_build_object(
    'status', 'ok', 'runs', _runs, 'enqueued', _enqueued, 'skipped', _skipped,
    'next_supervisor_task_id', _next_task_id, 'next_run_at', _wake);
  if jsonb_array_length(_errors) > 0 then
    return jsonb_build_object('success', false,
      'error', format('%s schedule(s) failed: %s', jsonb_array_length(_errors), _errors::text),
      'payload', _result || jsonb_build_object('errors', _errors));
  end if;
  return jsonb_build_object('success', true, 'payload', _result);
end;
$$;

-- The db_function the worker runs. Payload: {db_function: 'schedules.schedule_supervisor'}
-- (no other fields are read). See schedule_supervisor_at.
create or replace function schedules.schedule_supervisor(payload jsonb)
  returns jsonb
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select schedules.schedule_supervisor_at(now(), payload)
$$;

-- Kickoff --------------------------------------------------------------------------------

-- Owner only. Makes sure a supervisor task will run by the next due fire time (or within
-- max_supervisor_sleep()); enqueues one only when no pending supervisor task does.
-- Returns that task's id; null when no schedule is enabled and none is pending.
create or replace function schedules.ensure_schedule_supervisor_at(_now timestamptz)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform pg_advisory_xact_lock(schedules.supervisor_lock_key());
  return schedules.plan_supervisor_at(_now, schedules.supervisor_wake_at(_now));
end;
$$;

-- Idempotent kickoff for apps and deploy scripts; see ensure_schedule_supervisor_at.
create or replace function schedules.ensure_schedule_supervisor()
  returns bigint
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select schedules.ensure_schedule_supervisor_at(now())
$$;
--! EndIncluded schedules/supervisor.sql
--! Included internal/privileges.sql
-- Who may call what in internal. The worker runs registered functions through
-- internal.run_function; it also needs EXECUTE on each target (granted beside it).

revoke all on all tables in schema internal from public;
revoke execute on all functions in schema internal from public;

grant usage on schema internal to :DATABASE_WORKER;

grant execute on function
  internal.run_function(text, jsonb),
  internal.resolve_runnable_function(text),
  internal.noop(jsonb),
  internal.start_provider_call(jsonb)
to :DATABASE_WORKER;

select internal.register_runnable_function('internal.noop(jsonb)');
select internal.register_runnable_function('internal.start_provider_call(jsonb)');
--! EndIncluded internal/privileges.sql
--! Included files/privileges.sql
-- Who may call what in files: the worker runs the supervisor and handlers (granted and
-- registered); apps may start a file deletion. Everything else has no grant.

revoke all on all tables in schema files from public;
revoke all on all sequences in schema files from public;
revoke execute on all functions in schema files from public;

grant usage on schema files to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  files.file_deletion_supervisor(jsonb),
  files.get_file_delete_payload(jsonb),
  files.record_file_delete_success(jsonb),
  files.record_file_delete_failure(jsonb)
to :DATABASE_WORKER;

-- The files service asks before signing (sql/files/signing.sql), through
-- internal.run_function as the worker role, which deletes files anyway.
grant execute on function files.check_file_delete_signing(jsonb) to :DATABASE_WORKER;
select internal.register_runnable_function('files.check_file_delete_signing(jsonb)');

select internal.register_runnable_function('files.file_deletion_supervisor(jsonb)');
select internal.register_runnable_function('files.get_file_delete_payload(jsonb)');
select internal.register_runnable_function('files.record_file_delete_success(jsonb)');
select internal.register_runnable_function('files.record_file_delete_failure(jsonb)');

grant execute on function files.kickoff_file_deletion(bigint, timestamptz) to :DATABASE_APP;
--! EndIncluded files/privileges.sql

--! split: 220-rolebased.sql
-- The role-based worker system (docs/menus.md): task results as facts, the menus domain
-- (stores, platform ids, products, price and stock snapshots, analytics), its record
-- functions, generators and schedules.
set local lock_timeout = '5s';

-- Task results -----------------------------------------------------------------------
-- What a task's run produced (the seed's `result jsonb`), one row per lease that
-- recorded one, written in the transaction that completes the task and fenced by the
-- lease (queues.record_task_result).
create table if not exists queues.task_result (
  task_id       bigint not null references queues.task on delete cascade,
  task_lease_id bigint not null references queues.task_lease on delete cascade,
  result        jsonb not null,
  recorded_at   timestamptz not null default now(),
  primary key (task_id, task_lease_id)
);
comment on table queues.task_result is 'Append-only: the result a task''s run recorded, per lease.';
drop trigger if exists forbid_update on queues.task_result;
create trigger forbid_update before update on queues.task_result
  for each statement execute function queues.forbid_fact_update();

-- The menus domain ----------------------------------------------------------------------
create schema if not exists menus;
revoke all on schema menus from public;

-- A store found by store discovery, keyed by the platform's listing slug.
create table if not exists menus.store (
  store_id      bigint generated always as identity primary key,
  slug          text not null unique check (slug ~ '^[a-z0-9][a-z0-9-]{0,99}$'),
  name          text not null check (length(name) between 1 and 200),
  menu_url      text not null check (length(menu_url) between 1 and 500),
  discovered_at timestamptz not null default now(),
  -- The store_discovery task that found it (not a foreign key: queue retention may
  -- delete old tasks).
  task_id       bigint
);

-- The platform id resolved from the store's menu URL (entry-point discovery).
create table if not exists menus.store_platform_id (
  store_id               bigint primary key references menus.store on delete cascade,
  platform_dispensary_id text not null unique check (length(platform_dispensary_id) between 1 and 100),
  resolved_at            timestamptz not null default now(),
  task_id                bigint
);

-- The initial crawl is done: the store is active and joins the staggered resync.
create table if not exists menus.store_products_discovered (
  store_id      bigint primary key references menus.store on delete cascade,
  product_count integer not null check (product_count >= 0),
  discovered_at timestamptz not null default now(),
  task_id       bigint
);

create table if not exists menus.product (
  product_id          bigint generated always as identity primary key,
  store_id            bigint not null references menus.store on delete cascade,
  platform_product_id text not null check (length(platform_product_id) between 1 and 100),
  name                text not null check (length(name) between 1 and 300),
  first_seen_at       timestamptz not null default now(),
  unique (store_id, platform_product_id)
);

-- Price and stock as observed by one crawl (product_discovery or product_resync).
create table if not exists menus.product_snapshot (
  product_snapshot_id bigint generated always as identity primary key,
  product_id          bigint not null references menus.product on delete cascade,
  task_id             bigint not null,
  observed_at         timestamptz not null default now(),
  price_cents         integer not null check (price_cents >= 0),
  in_stock            boolean not null,
  stock_quantity      integer not null check (stock_quantity >= 0)
);
create index if not exists product_snapshot_product_idx on menus.product_snapshot (product_id, observed_at desc);
create index if not exists product_snapshot_task_idx on menus.product_snapshot (task_id);

-- Each day's resync generation (menus.generate_resync_tasks), at most one per date.
create table if not exists menus.resync_generated (
  resync_date  date primary key,
  batches      integer not null check (batches between 1 and 24),
  stores       integer not null check (stores >= 0),
  generated_at timestamptz not null default now()
);

do $$
declare
  _table text;
begin
  foreach _table in array array['store', 'store_platform_id', 'store_products_discovered', 'product', 'product_snapshot',
                                'resync_generated'] loop
    execute format('drop trigger if exists forbid_update on menus.%I', _table);
    execute format('create trigger forbid_update before update on menus.%I
                      for each statement execute function queues.forbid_fact_update()', _table);
  end loop;
end;
$$;

-- Analytics: per store, its latest prices and stock. Refreshed by analytics_refresh.
create materialized view if not exists menus.store_analytics as
select s.store_id, s.slug, s.name,
       count(l.product_id)::integer as products,
       count(l.product_id) filter (where l.in_stock)::integer as in_stock,
       round(avg(l.price_cents))::integer as avg_price_cents,
       min(l.price_cents) as min_price_cents,
       max(l.price_cents) as max_price_cents,
       max(l.observed_at) as last_observed_at
  from menus.store s
  left join menus.product p on p.store_id = s.store_id
  left join lateral (
    select p.product_id, x.price_cents, x.in_stock, x.observed_at
      from menus.product_snapshot x where x.product_id = p.product_id
     order by x.observed_at desc, x.product_snapshot_id desc limit 1
  ) l on true
 group by s.store_id, s.slug, s.name
with no data;
create unique index if not exists store_analytics_store_idx on menus.store_analytics (store_id);

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
-- listed in sql/role-allowlist.json).
revoke execute on function
  queues.assert_current_lease(bigint, bigint),
  queues.record_task_result(bigint, bigint, jsonb),
  queues.list_task_results(bigint)
from public;
grant execute on function queues.record_task_result(bigint, bigint, jsonb) to :DATABASE_WORKER;
grant execute on function queues.list_task_results(bigint) to :DATABASE_APP, :DATABASE_API;
--! EndIncluded queues/result.sql
--! Included menus/record.sql
-- Recording what a menu-platform call observed. The worker (packages/menu-sync) calls the
-- platform, then, in one transaction, menus.record_observation (facts and follow-up
-- tasks), queues.record_task_result (the result it returns) and queues.complete_task,
-- all fenced by the lease. The chain of the seed lives here, in SQL, never in the worker:
--
--   store_discovery        records stores not seen before; result {new_store_ids}; each
--                          new store gets an entry_point_discovery task
--   entry_point_discovery  records the store's platform id; enqueues product_discovery
--   product_discovery      the initial crawl: products and their first snapshots; the
--                          store is now active and joins the daily staggered resync
--                          (menus.generate_resync_tasks)
--   product_resync         a new price and stock snapshot of every product
--   analytics_refresh      refreshes menus.store_analytics
--
-- Per-store steps carry resource_key 'store:<id>' (one running task per store) and
-- retry up to menus.platform_max_attempts() times. New-store steps have priority
-- menus.new_store_priority(), above routine resync (0). Follow-ups are enqueued only by
-- the call that recorded the new fact, so nothing is enqueued twice.

create or replace function menus.new_store_priority() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 50 $$;
create or replace function menus.platform_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 3 $$;
create or replace function menus.store_resource_key(_store_id bigint) returns text
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 'store:' || _store_id $$;

-- The task's store: payload.store_id, which must name a store (22023 otherwise).
create or replace function menus.task_store(_payload jsonb) returns bigint
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _store_id bigint;
begin
  if jsonb_typeof(_payload -> 'store_id') is distinct from 'number' then
    raise exception 'payload.store_id must be a number' using errcode = '22023';
  end if;
  _store_id := (_payload ->> 'store_id')::bigint;
  if not exists (select 1 from menus.store s where s.store_id = _store_id) then
    raise exception 'payload.store_id %: no such store', _store_id using errcode = '22023';
  end if;
  return _store_id;
end;
$$;

create or replace function menus.record_store_discovery(_task_id bigint, _observation jsonb) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _bad record;
  _new bigint[];
begin
  if jsonb_typeof(_observation -> 'stores') is distinct from 'array' then
    raise exception 'observation.stores must be an array' using errcode = '22023';
  end if;
  select e.ordinality - 1 as idx into _bad
    from jsonb_array_elements(_observation -> 'stores') with ordinality e
   where jsonb_typeof(e.value) <> 'object'
      or coalesce(e.value ->> 'slug', '') !~ '^[a-z0-9][a-z0-9-]{0,99}$'
      or length(coalesce(e.value ->> 'name', '')) not between 1 and 200
      or length(coalesce(e.value ->> 'menu_url', '')) not between 1 and 500
   limit 1;
  if found then
    raise exception 'observation.stores[%] must have a slug (a-z, 0-9, -), a name and a menu_url', _bad.idx
      using errcode = '22023';
  end if;
  with found as (
    insert into menus.store (slug, name, menu_url, task_id)
    select e.value ->> 'slug', e.value ->> 'name', e.value ->> 'menu_url', _task_id
      from jsonb_array_elements(_observation -> 'stores') with ordinality e
     order by e.ordinality
    on conflict (slug) do nothing
    returning store_id
  )
  select coalesce(array_agg(store_id order by store_id), '{}') into _new from found;
  perform queues.enqueue_many(coalesce((
    select jsonb_agg(jsonb_build_object(
             'task_type', 'entry_point_discovery',
             'payload', jsonb_build_object('store_id', s.store_id, 'menu_url', s.menu_url),
             'priority', menus.new_store_priority(),
             'resource_key', menus.store_resource_key(s.store_id),
             'max_attempts', menus.platform_max_attempts()) order by s.store_id)
      from menus.store s where s.store_id = any (_new)), '[]'));
  return jsonb_build_object('stores_seen', jsonb_array_length(_observation -> 'stores'),
                            'new_store_ids', to_jsonb(_new));
end;
$$;

create or replace function menus.record_entry_point(_task_id bigint, _payload jsonb, _observation jsonb) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _store_id bigint := menus.task_store(_payload);
  _platform_id text := _observation ->> 'platform_dispensary_id';
  _recorded boolean;
begin
  if jsonb_typeof(_observation -> 'platform_dispensary_id') is distinct from 'string'
     or length(_platform_id) not between 1 and 100 then
    raise exception 'observation.platform_dispensary_id must be 1 to 100 characters' using errcode = '22023';
  end if;
  insert into menus.store_platform_id (store_id, platform_dispensary_id, task_id)
  values (_store_id, _platform_id, _task_id)
  on conflict (store_id) do nothing;
  _recorded := found;
  if _recorded then
    perform queues.enqueue('product_discovery',
      jsonb_build_object('store_id', _store_id, 'platform_dispensary_id', _platform_id),
      null, menus.new_store_priority(), menus.store_resource_key(_store_id), menus.platform_max_attempts());
  end if;
  return jsonb_build_object('store_id', _store_id, 'platform_dispensary_id',
                            (select e.platform_dispensary_id from menus.store_platform_id e where e.store_id = _store_id),
                            'product_discovery_enqueued', _recorded);
end;
$$;

-- Products and snapshots from observation.products: [{id, name, price_cents, in_stock,
-- quantity}]. Returns counts, and how many prices changed since each product's last snapshot.
create or replace function menus.record_products(_task_id bigint, _payload jsonb, _observation jsonb, _initial boolean)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _store_id bigint := menus.task_store(_payload);
  _bad record;
  _new integer;
  _changed integer;
  _count integer;
begin
  if jsonb_typeof(_observation -> 'products') is distinct from 'array' then
    raise exception 'observation.products must be an array' using errcode = '22023';
  end if;
  select e.ordinality - 1 as idx into _bad
    from jsonb_array_elements(_observation -> 'products') with ordinality e
   where jsonb_typeof(e.value) <> 'object'
      or jsonb_typeof(e.value -> 'id') is distinct from 'string'
      or length(e.value ->> 'id') not between 1 and 100
      or length(coalesce(e.value ->> 'name', '')) not between 1 and 300
      or jsonb_typeof(e.value -> 'price_cents') is distinct from 'number'
      or (e.value ->> 'price_cents')::numeric < 0 or (e.value ->> 'price_cents')::numeric % 1 <> 0
      or jsonb_typeof(e.value -> 'in_stock') is distinct from 'boolean'
      or jsonb_typeof(e.value -> 'quantity') is distinct from 'number'
      or (e.value ->> 'quantity')::numeric < 0 or (e.value ->> 'quantity')::numeric % 1 <> 0
   limit 1;
  if found then
    raise exception 'observation.products[%] must have id, name, price_cents (whole, >= 0), in_stock (boolean) and quantity (whole, >= 0)',
      _bad.idx using errcode = '22023';
  end if;
  _count := jsonb_array_length(_observation -> 'products');

  with observed as (
    select e.value ->> 'id' as platform_product_id, e.value ->> 'name' as name,
           (e.value ->> 'price_cents')::integer as price_cents, (e.value ->> 'in_stock')::boolean as in_stock,
           (e.value ->> 'quantity')::integer as quantity
      from jsonb_array_elements(_observation -> 'products') e
  ),
  added as (
    insert into menus.product (store_id, platform_product_id, name)
    select _store_id, o.platform_product_id, o.name from observed o
    on conflict (store_id, platform_product_id) do nothing
    returning product_id, platform_product_id
  )
  select count(*) into _new from added;

  -- The previous snapshot of each product (its newest), before this one is added.
  select count(*) into _changed
    from jsonb_array_elements(_observation -> 'products') e
    join menus.product p on p.store_id = _store_id and p.platform_product_id = e.value ->> 'id'
    cross join lateral (
      select x.price_cents from menus.product_snapshot x where x.product_id = p.product_id
       order by x.observed_at desc, x.product_snapshot_id desc limit 1
    ) last
   where last.price_cents <> (e.value ->> 'price_cents')::integer;

  insert into menus.product_snapshot (product_id, task_id, price_cents, in_stock, stock_quantity)
  select p.product_id, _task_id, (e.value ->> 'price_cents')::integer, (e.value ->> 'in_stock')::boolean,
         (e.value ->> 'quantity')::integer
    from jsonb_array_elements(_observation -> 'products') e
    join menus.product p on p.store_id = _store_id and p.platform_product_id = e.value ->> 'id';

  if _initial then
    insert into menus.store_products_discovered (store_id, product_count, task_id)
    values (_store_id, _count, _task_id)
    on conflict (store_id) do nothing;
  end if;
  return jsonb_build_object('store_id', _store_id, 'products', _count, 'new_products', _new,
                            'price_changes', _changed);
end;
$$;

create or replace function menus.refresh_analytics() returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  -- CONCURRENTLY needs a populated view (and keeps it readable while it refreshes).
  if (select c.relispopulated from pg_class c where c.oid = 'menus.store_analytics'::regclass) then
    refresh materialized view concurrently menus.store_analytics;
  else
    refresh materialized view menus.store_analytics;
  end if;
  return (select jsonb_build_object('stores', count(*), 'products', coalesce(sum(a.products), 0),
                                    'in_stock', coalesce(sum(a.in_stock), 0))
            from menus.store_analytics a);
end;
$$;

-- The worker's single entry point: records what the platform call of the task holding
-- _task_lease_id observed, by the task's own type and payload (read here, never taken
-- from the caller), enqueues the follow-ups, and returns the result to record with the
-- completion. Raises 55000 when the lease is no longer current (nothing written) and
-- 22023 naming the field when the observation or the payload is malformed.
create or replace function menus.record_observation(_task_id bigint, _task_lease_id bigint, _observation jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task queues.task;
begin
  if _observation is null then
    raise exception 'observation must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_observation) <> 'object' then
    raise exception 'observation must be a JSON object, got %', jsonb_typeof(_observation) using errcode = '22023';
  end if;
  perform queues.assert_current_lease(_task_id, _task_lease_id);
  select t.* into _task from queues.task t where t.task_id = _task_id;
  case _task.task_type
    when 'store_discovery' then
      return menus.record_store_discovery(_task_id, _observation);
    when 'entry_point_discovery' then
      return menus.record_entry_point(_task_id, _task.payload, _observation);
    when 'product_discovery' then
      return menus.record_products(_task_id, _task.payload, _observation, true);
    when 'product_resync' then
      return menus.record_products(_task_id, _task.payload, _observation, false);
    when 'analytics_refresh' then
      return menus.refresh_analytics();
    else
      raise exception 'task % is a % task, not a menus task', _task_id, _task.task_type using errcode = '22023';
  end case;
end;
$$;
--! EndIncluded menus/record.sql
--! Included menus/generate.sql
-- Generating work: the seed's daily generate_resync_tasks and store discovery on demand.
--
--   menus.generate_resync_tasks(batches, date)     app, api: every active store (product
--                                                  discovery done) gets one product_resync
--                                                  task, spread over the UTC day in
--                                                  `batches` batches (6: every 4 hours)
--   menus.generate_store_discovery(scheduled_at)   app, api: one store_discovery task
--   menus.generate_todays_resync(payload)          worker (db_function, daily schedule):
--                                                  generate_resync_tasks(6, today in UTC)

-- Batch b (1-based) is scheduled at _date 00:00 UTC + (b - 1) * 24 h / _batches; stores in
-- store_id order, store j (0-based, of N) in batch floor(j * K / N) + 1, so batch sizes
-- differ by at most one (8 stores in 6 batches: 2, 1, 1, 2, 1, 1).
-- 300 stores in 6 batches: stores 1-50 at 00:00, 51-100 at 04:00, ... 251-300 at 20:00.
-- A date is generated at most once (23505 for a second call: nothing is written); a
-- call that finds no active store writes nothing and does not use up the date.
-- Returns one row per batch, empty ones included.
create or replace function menus.generate_resync_tasks(_batches integer, _date date)
  returns table (batch integer, scheduled_at timestamptz, task_count integer)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _start timestamptz;
  _n integer;
begin
  if _batches is null then
    raise exception 'batches must not be null' using errcode = '22004';
  end if;
  if _batches not between 1 and 24 then
    raise exception 'batches must be between 1 and 24, got %', _batches using errcode = '22023';
  end if;
  if _date is null then
    raise exception 'date must not be null' using errcode = '22004';
  end if;
  if _date not between date '2000-01-01' and date '2999-12-31' then
    raise exception 'date must be between 2000-01-01 and 2999-12-31, got %', _date using errcode = '22023';
  end if;
  _start := _date::timestamp at time zone 'UTC';

  select count(*) into _n
    from menus.store_products_discovered d join menus.store_platform_id e on e.store_id = d.store_id;
  if exists (select 1 from menus.resync_generated g where g.resync_date = _date) then
    raise exception 'resync tasks for % were generated already', _date using errcode = '23505',
      hint = 'One generation per date; the next date starts at 00:00 UTC.';
  end if;
  if _n > 0 then
    begin
      insert into menus.resync_generated (resync_date, batches, stores) values (_date, _batches, _n);
    exception when unique_violation then
      raise exception 'resync tasks for % were generated already', _date using errcode = '23505';
    end;
  end if;

  -- Store j (0-based, of N) goes to batch floor(j * K / N) + 1: batch sizes differ by at
  -- most one.
  perform queues.enqueue_many(coalesce((
    select jsonb_agg(jsonb_build_object(
             'task_type', 'product_resync',
             'payload', jsonb_build_object('store_id', a.store_id, 'platform_dispensary_id', a.platform_dispensary_id),
             'scheduled_at', _start + (a.b - 1) * (interval '24 hours' / _batches),
             'resource_key', menus.store_resource_key(a.store_id),
             'max_attempts', menus.platform_max_attempts()) order by a.j)
      from (select s.store_id, e.platform_dispensary_id, s.j, (s.j * _batches / _n) + 1 as b
              from (select d.store_id, (row_number() over (order by d.store_id) - 1)::integer as j
                      from menus.store_products_discovered d) s
              join menus.store_platform_id e on e.store_id = s.store_id) a), '[]'));

  return query
  select i, _start + (i - 1) * (interval '24 hours' / _batches),
         (select count(*)::integer from generate_series(0, _n - 1) j where (j * _batches / _n) + 1 = i)
    from generate_series(1, _batches) i
   order by i;
end;
$$;

-- Enqueues one store_discovery task at _scheduled_at (null: now; at most a year ahead);
-- returns its task_id.
create or replace function menus.generate_store_discovery(_scheduled_at timestamptz)
  returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _scheduled_at is not null and _scheduled_at > now() + interval '366 days' then
    raise exception 'scheduled_at must be at most a year ahead, got %', _scheduled_at using errcode = '22023';
  end if;
  return queues.enqueue('store_discovery', '{}'::jsonb, _scheduled_at, 20, null, menus.platform_max_attempts());
end;
$$;

-- The daily schedule's step: today's resync (UTC), 6 batches. A second run on the same
-- day returns status 'already_generated' and enqueues nothing.
create or replace function menus.generate_todays_resync(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _today date := (now() at time zone 'UTC')::date;
  _batches jsonb;
begin
  if exists (select 1 from menus.resync_generated g where g.resync_date = _today) then
    return jsonb_build_object('status', 'already_generated', 'payload', jsonb_build_object('date', _today));
  end if;
  select jsonb_agg(to_jsonb(b) order by b.batch) into _batches from menus.generate_resync_tasks(6, _today) b;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object('date', _today, 'batches', _batches));
end;
$$;
--! EndIncluded menus/generate.sql
--! Included menus/schedules.sql
-- The seed's schedules, installed disabled. Local mode enables them: `npm start` without
-- DATABASE_URL (tools/db/src/cli/start.ts) and `npm run demo` call
-- schedules.enable_schedule for each; in production enable them once with the same call
-- (or through the schedules API). Re-running this file changes nothing that exists.
--
--   menus.store_discovery     Mondays 03:00 UTC   store_discovery
--   menus.resync              daily 00:00 UTC     db_function menus.generate_todays_resync
--                                                 (6 batches, 00:00 .. 20:00)
--   menus.analytics_refresh   daily 02:00 UTC     analytics_refresh

do $$
declare
  _s record;
  _id bigint;
begin
  for _s in
    select * from (values
      ('menus.store_discovery', '0 3 * * 1', 'store_discovery', '{}'::jsonb, 20),
      ('menus.resync', '0 0 * * *', 'db_function', '{"db_function": "menus.generate_todays_resync"}'::jsonb, 60),
      ('menus.analytics_refresh', '0 2 * * *', 'analytics_refresh', '{}'::jsonb, -10)
    ) v(name, cron, task_type, payload, priority)
  loop
    insert into schedules.schedule (name) values (_s.name) on conflict (name) do nothing returning schedule_id into _id;
    if _id is not null then
      insert into schedules.schedule_version
        (schedule_id, cron, task_type, payload, priority, missed_run_policy, enabled, fires_after)
      values (_id, _s.cron, _s.task_type, _s.payload, _s.priority, 'skip', false, now());
    end if;
  end loop;
end;
$$;
--! EndIncluded menus/schedules.sql
--! Included menus/privileges.sql
-- Who may call what in menus. The worker records observations (packages/menu-sync) and
-- runs the daily resync generation as a db_function; apps and the REST API generate work.
-- Tables and the analytics view stay owner only.

revoke all on all tables in schema menus from public;
revoke all on all sequences in schema menus from public;
revoke execute on all functions in schema menus from public;

grant usage on schema menus to :DATABASE_WORKER, :DATABASE_APP, :DATABASE_API;

grant execute on function
  menus.record_observation(bigint, bigint, jsonb),
  menus.generate_todays_resync(jsonb)
to :DATABASE_WORKER;
select internal.register_runnable_function('menus.generate_todays_resync(jsonb)');

grant execute on function
  menus.generate_resync_tasks(integer, date),
  menus.generate_store_discovery(timestamptz)
to :DATABASE_APP, :DATABASE_API;
--! EndIncluded menus/privileges.sql

--! split: 310-dashboard.sql
set local lock_timeout = '5s';
-- Dashboard: queue controls (pause/resume per task type), cancel and run-now facts, and
-- the admin functions behind the dashboard's pages.
--
-- The 'cancelled' outcome needs no DDL: the check constraint on queues.task_completed
-- has allowed it since the first migration (and complete_tasks accepts it), so this file
-- never rewrites or revalidates a constraint on that hot table.

-- "Run now" of a scheduled task: the task stays immutable; this fact moves it forward.
-- queues.rebuild_task_pending() applies it.
create table if not exists queues.task_run_now (
  task_id      bigint primary key references queues.task on delete cascade,
  requested_at timestamptz not null default now()
);
comment on table queues.task_run_now is 'Append-only: a scheduled task asked to run at requested_at instead of its scheduled time.';

-- Cancelled tasks say who asked and why (the completion itself is the task_completed row
-- with outcome cancelled).
create table if not exists queues.task_cancelled (
  task_id      bigint primary key references queues.task_completed on delete cascade,
  reason       text not null default '' check (length(reason) <= 500),
  cancelled_at timestamptz not null default now()
);
comment on table queues.task_cancelled is 'Append-only: why a task was completed as cancelled.';

do $$
declare
  _table text;
begin
  foreach _table in array array['task_run_now', 'task_cancelled'] loop
    if not exists (
      select 1 from pg_trigger
       where tgrelid = to_regclass(format('queues.%I', _table)) and tgname = 'forbid_update'
    ) then
      execute format(
        'create trigger forbid_update before update on queues.%I
           for each statement execute function queues.forbid_fact_update()', _table);
    end if;
  end loop;
end;
$$;

-- The tasks list filters on a resource key; only keyed tasks are indexed, so enqueues
-- without a key pay nothing.
create index if not exists task_resource_key_idx on queues.task (resource_key, task_id) where resource_key is not null;

-- admin.list_tasks gained filters (worker, resource key, time range, payload field).
drop function if exists admin.list_tasks_at(timestamptz, text, text, integer, bigint);
drop function if exists admin.list_tasks(text, text, integer, bigint);

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
     lease_count, released_count, max_attempts, failed_attempts, interrupted_count)
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
         t.max_attempts, coalesce(f.failed_attempts, 0), coalesce(i.interrupted_count, 0)
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
--! Included admin/common.sql
-- Helpers shared by the admin functions: task states, page sizes, task type filters.
-- Called only from definer functions: no grants.

-- The state of a task that is not completed, from its claim-index row at _now:
--   ready      claimable now (scheduled time reached; no live lease)
--   running    a live lease holds it
--   retrying   leased before, waiting for its retry time (no live lease)
--   scheduled  never leased, scheduled in the future
-- No SET clause: a function with one is never inlined, and the dashboard's counts call
-- this once per pending task (20,000 calls took 140 ms with it, a few ms inlined). It
-- names no object, so the search path cannot change what it does; it is not a security
-- definer.
create or replace function admin.pending_state(
  _available_at timestamptz, _current_lease_id bigint, _lease_count integer, _now timestamptz
) returns text
  language sql immutable parallel safe
as $$
  select case
           when _available_at <= _now then 'ready'
           when _current_lease_id is not null then 'running'
           when _lease_count > 0 then 'retrying'
           else 'scheduled'
         end
$$;

-- Every state a task can be in: the pending ones above, then the completion outcomes.
create or replace function admin.task_states() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['scheduled', 'ready', 'running', 'retrying',
               'succeeded', 'failed', 'abandoned', 'cancelled']
$$;

-- Validates a page size: NULL means _default; else 1 to 500.
create or replace function admin.page_limit(_limit integer, _default integer default 50)
  returns integer
  language plpgsql immutable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _limit is null then
    return _default;
  end if;
  if _limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500, got %', _limit using errcode = '22023';
  end if;
  return _limit;
end;
$$;

-- Validates an optional task type filter: NULL, or a registered type (22023 otherwise).
create or replace function admin.assert_task_type(_task_type text)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _task_type is not null
     and not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
end;
$$;
--! EndIncluded admin/common.sql
--! Included admin/tasks.sql
-- Reading tasks for the operations API: a keyset-paginated list, one task with its facts,
-- and counts by type and state. The *_at functions take the clock (owner only, for
-- tests); the API calls the wrappers, which pass now().

-- Tasks newest first (by task_id), _limit per page (default 50, at most 500), older than
-- _before_task_id (the last id of the previous page: keyset pagination, so a page costs
-- the same at any depth). Filters, each optional and combined with AND:
--   _task_type            a registered type
--   _state                one of admin.task_states()
--   _worker_id            tasks leased at least once by this worker
--   _resource_key         tasks with this resource key
--   _enqueued_from/_to    enqueued_at in [from, to)
--   _payload_path/_value  payload #> path = value (a JSON value)
-- Which table drives the walk: pending states walk queues.task_pending (bounded by
-- pending work); outcomes walk queues.task_completed by key; a resource key walks
-- task_resource_key_idx; otherwise queues.task by its primary key, newest first. Every
-- walk stops after _limit matches, so its cost is the rows it has to pass over to find
-- them: a filter that matches only old or rare tasks (a payload value, a worker gone for
-- a week, a time range far back) reads the newer tasks in between. The statement is
-- built from constant fragments; every value is a parameter.
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
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _filters text := '';
  _sql text;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_type(_task_type);
  if _state is not null and not (_state = any (admin.task_states())) then
    raise exception 'unknown state %; expected one of %', quote_literal(left(_state, 100)),
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
    _filters := _filters || ' and exists (select 1 from queues.task_lease l where l.task_id = t.task_id and l.worker_id = $6)';
  end if;
  if _resource_key is not null then _filters := _filters || ' and t.resource_key = $7'; end if;
  if _enqueued_from is not null then _filters := _filters || ' and t.enqueued_at >= $8'; end if;
  if _enqueued_to is not null then _filters := _filters || ' and t.enqueued_at < $9'; end if;
  if _payload_path is not null then _filters := _filters || ' and t.payload #> $10 = $11'; end if;

  if _state in ('scheduled', 'ready', 'running', 'retrying') then
    _sql := 'select p.task_id, p.task_type, $3, p.priority, t.resource_key, t.max_attempts, p.lease_count,
                    t.enqueued_at, p.scheduled_at, p.available_at, null::timestamptz
               from queues.task_pending p
              -- lateral + limit 1: one primary-key probe per pending task passed over
              cross join lateral (select * from queues.task x where x.task_id = p.task_id limit 1) t
              where admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1) = $3
                and ($4::bigint is null or p.task_id < $4)' || _filters || '
              order by p.task_id desc
              limit $5';
  elsif _state is not null then
    _sql := 'select c.task_id, t.task_type, c.outcome, t.priority, t.resource_key, t.max_attempts,
                    (select count(*)::integer from queues.task_lease l where l.task_id = c.task_id),
                    t.enqueued_at, t.scheduled_at, null::timestamptz, c.completed_at
               from queues.task_completed c
              cross join lateral (select * from queues.task x where x.task_id = c.task_id limit 1) t
              where c.outcome = $3
                and ($4::bigint is null or c.task_id < $4)' || _filters || '
              order by c.task_id desc
              limit $5';
  else
    _sql := 'select t.task_id, t.task_type,
                    coalesce(c.outcome, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, $1)),
                    t.priority, t.resource_key, t.max_attempts,
                    coalesce(p.lease_count,
                             (select count(*)::integer from queues.task_lease l where l.task_id = t.task_id)),
                    t.enqueued_at, t.scheduled_at, p.available_at, c.completed_at
               from queues.task t
               left join queues.task_pending p on p.task_id = t.task_id
               left join queues.task_completed c on c.task_id = t.task_id
              where ($4::bigint is null or t.task_id < $4)' || _filters || '
              order by t.task_id desc
              limit $5';
  end if;
  return query execute _sql
    using _now, _task_type, _state, _before_task_id, _page, _worker_id, _resource_key,
          _enqueued_from, _enqueued_to, _payload_path, _payload_value;
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
--   {task: {..., state}, leases: [...], errors: [...], completion: {...} | null,
--    failed_attempts: [...], redriven_to: id | null, redriven_from: id | null}
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
             'current_lease_id', p.current_lease_id),
           'leases', coalesce((
             select jsonb_agg(jsonb_build_object(
                      'task_lease_id', l.task_lease_id, 'worker_id', l.worker_id,
                      'leased_at', l.leased_at, 'expires_at', l.expires_at,
                      'released_at', l.released_at, 'revoked_at', l.revoked_at, 'extensions', l.extensions,
                      'live', coalesce(l.task_lease_id = p.current_lease_id and p.available_at > _now, false))
                      order by l.task_lease_id)
               from queues.task_lease_effective l where l.task_id = t.task_id), '[]'::jsonb),
           'errors', coalesce((
             select jsonb_agg(to_jsonb(e) - 'task_id' order by e.error_id)
               from queues.error e where e.task_id = t.task_id), '[]'::jsonb),
           'completion', case when c.task_id is not null then to_jsonb(c) - 'task_id' end)
    into _result
    from queues.task t
    left join queues.task_pending p on p.task_id = t.task_id
    left join queues.task_completed c on c.task_id = t.task_id
   where t.task_id = _task_id;

  if _result is null then
    raise exception 'task % does not exist', _task_id using errcode = '23503';
  end if;
  return _result || admin.task_retry_facts(_task_id) || admin.task_dashboard_facts(_task_id);
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

-- Counts by task type and state: pending states over queues.task_pending (bounded by
-- pending work), completion outcomes over the last _window_seconds only (default 86400;
-- read through task_completed_completed_at_idx), so the cost never follows history.
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
    from queues.task_pending p
   group by 1, 2
  union all
  select t.task_type, c.outcome, count(*)
    from queues.task_completed c
   -- lateral + limit 1: a primary-key probe per completion in the window
   cross join lateral (select x.task_type from queues.task x where x.task_id = c.task_id limit 1) t
   where c.completed_at > _now - make_interval(secs => _window)
     and c.completed_at <= _now
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
        from queues.task_lease l
        join queues.task_lease_extension x on x.task_lease_id = l.task_lease_id
       where l.task_id = _task_id), '[]'));
end;
$$;
--! EndIncluded admin/tasks.sql
--! Included admin/task_actions.sql
-- Bulk actions on tasks for the dashboard: cancel pending tasks, run scheduled tasks now,
-- redrive dead letters. Each takes a selection (task ids, at most 1000) and reports per
-- task what happened; the *_matching variants take a filter instead and act on up to
-- _limit tasks that match it. Owner-only *_at(_now, ...) variants take the clock.

-- Cancels pending tasks that no worker holds (scheduled, ready, retrying): each gets the
-- terminal fact queues.task_completed with outcome 'cancelled' (and queues.task_cancelled
-- with the reason) and leaves the claim index, in one transaction. A task under a live
-- lease is not cancelled ('running': its worker will complete it). Rows, in input order:
--   cancelled | running | already_completed | unknown_task
create or replace function admin.cancel_tasks_at(_now timestamptz, _task_ids bigint[], _reason text)
  returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_ids(_task_ids);
  if _reason is not null and length(_reason) > 500 then
    raise exception 'reason must be at most 500 characters' using errcode = '22023';
  end if;
  -- Same lock order as the claim (resource keys first), then the pending rows: a claim
  -- that took a row first makes it 'running' here; a claim after us skips it.
  perform queues.lock_resource_keys(_task_ids);
  return query
  with locked as (
    select p.task_id, p.resource_key,
           (p.current_lease_id is not null and p.available_at > _now) as held
      from queues.task_pending p
     where p.task_id = any (_task_ids)
     order by p.task_id
       for update
  ),
  completed as (
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome)
    select l.task_id, null, _now, 'cancelled' from locked l where not l.held
    returning task_id
  ),
  reasons as (
    insert into queues.task_cancelled (task_id, reason, cancelled_at)
    select c.task_id, coalesce(_reason, ''), _now from completed c
  ),
  removed as (
    delete from queues.task_pending p where p.task_id = any (array(select c.task_id from completed c))
  ),
  key_freed as (
    delete from queues.resource_lease k
     where k.task_id = any (array(select c.task_id from completed c))
  )
  select i.task_id,
         case when c.task_id is not null then 'cancelled'
              when l.task_id is not null then 'running'
              when exists (select 1 from queues.task_completed x where x.task_id = i.task_id) then 'already_completed'
              else 'unknown_task' end
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join locked l on l.task_id = i.task_id
    left join completed c on c.task_id = i.task_id
   order by i.n;
end;
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
-- (scheduled, ready or retrying; null: all three), oldest first.
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
  if _state is not null and _state not in ('scheduled', 'ready', 'retrying') then
    raise exception 'state must be scheduled, ready or retrying to cancel by filter, got %', quote_literal(left(_state, 100))
      using errcode = '22023';
  end if;
  if _limit is null or _limit not between 1 and 1000 then
    raise exception 'limit must be between 1 and 1000, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  _ids := array(
    select p.task_id from queues.task_pending p
     where (_task_type is null or p.task_type = _task_type)
       and admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, now())
           = any (case when _state is null then array['scheduled', 'ready', 'retrying'] else array[_state] end)
     order by p.task_id
     limit _limit);
  if cardinality(_ids) > 0 then
    return query select * from admin.cancel_tasks_at(now(), _ids, _reason);
  end if;
end;
$$;

-- Runs scheduled tasks (never leased, scheduled_at in the future) now: records
-- queues.task_run_now and makes the claim-index row claimable at _now. Rows, in input
-- order: run_now | not_scheduled (ready, running, retrying) | already_completed | unknown_task
create or replace function admin.run_tasks_now_at(_now timestamptz, _task_ids bigint[])
  returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  perform admin.assert_task_ids(_task_ids);
  return query
  with locked as (
    select p.task_id, admin.pending_state(p.available_at, p.current_lease_id, p.lease_count, _now) as state
      from queues.task_pending p
     where p.task_id = any (_task_ids)
     order by p.task_id
       for update
  ),
  recorded as (
    insert into queues.task_run_now (task_id, requested_at)
    select l.task_id, _now from locked l where l.state = 'scheduled'
    on conflict (task_id) do nothing
    returning task_id
  ),
  moved as (
    update queues.task_pending p set available_at = _now, scheduled_at = _now
     where p.task_id = any (array(select r.task_id from recorded r))
    returning p.task_id
  )
  select i.task_id,
         case when m.task_id is not null then 'run_now'
              when l.task_id is not null then 'not_scheduled'
              when exists (select 1 from queues.task_completed x where x.task_id = i.task_id) then 'already_completed'
              else 'unknown_task' end
    from unnest(_task_ids) with ordinality as i(task_id, n)
    left join locked l on l.task_id = i.task_id
    left join moved m on m.task_id = i.task_id
   order by i.n;
  if exists (select 1 from queues.task_pending p where p.task_id = any (_task_ids) and p.available_at = _now) then
    perform pg_notify('queues_task_ready', '');
  end if;
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
create or replace function admin.redrive_tasks(_task_ids bigint[])
  returns table (task_id bigint, result text, new_task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _id bigint;
begin
  perform admin.assert_task_ids(_task_ids);
  foreach _id in array _task_ids loop
    task_id := _id;
    new_task_id := null;
    if not exists (select 1 from queues.task t where t.task_id = _id) then
      result := 'unknown_task';
    elsif not exists (select 1 from queues.dead_letter d where d.task_id = _id) then
      result := 'not_a_dead_letter';
    else
      new_task_id := queues.redrive_task(_id);
      result := 'redriven';
    end if;
    return next;
  end loop;
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

-- Validates a selection: not null, 1 to 1000 ids, no nulls, no duplicates.
create or replace function admin.assert_task_ids(_task_ids bigint[])
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
--! EndIncluded admin/task_actions.sql
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
      from (select t.task_type, ceil(extract(epoch from t.enqueued_at - _from) / _bucket)::integer as k, -1 as d
              from queues.task t
             where t.task_id >= _first_id and t.enqueued_at > _from and t.enqueued_at <= _now
            union all
            select x.task_type, ceil(extract(epoch from c.completed_at - _from) / _bucket)::integer, 1
              from queues.task_completed c
             -- lateral + limit 1: a primary-key probe per completion in the window
             cross join lateral (select y.task_type from queues.task y where y.task_id = c.task_id limit 1) x
             where c.completed_at > _from and c.completed_at <= _now) e
     group by 1, 2
  ),
  pending as (
    select p.task_type, count(*) as n from queues.task_pending p group by 1
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
      from queues.task_pending p
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
    -- live leases: the pending rows under a lease that has not expired (bounded by pending work)
    select l.worker_id, count(*) as n
      from queues.task_pending p
      join queues.task_lease l on l.task_lease_id = p.current_lease_id
     where p.available_at > _now
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
  return query
  with stale as (
    select s.task_id, s.task_lease_id, s.worker_id
      from queues.stale_leases_at(_now, _dead) s where s.worker_id = _worker_id
  ),
  revoked as (
    update queues.task_pending p
       set available_at = _now, current_lease_id = null
      from stale s
     where p.task_id = s.task_id and p.current_lease_id = s.task_lease_id
    returning p.task_id, s.task_lease_id, s.worker_id, p.resource_key
  ),
  recorded as (
    insert into queues.task_lease_revocation (task_lease_id, revoked_at, reason)
    select r.task_lease_id, _now, format('worker %s not seen for %s s (recovered from the dashboard)', r.worker_id, _dead)
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
--! Included admin/schedules.sql
-- Recurring schedules for the dashboard: each schedule in force (schedules.list_schedules)
-- with its last runs and how their tasks ended.

-- Every schedule with cron, next and last fire times, enabled, and its last _runs (1 to
-- 20, default 5) runs newest first as JSON: [{fire_at, outcome (enqueued/skipped),
-- task_id, task_state}], task_state being the task's outcome or pending state.
create or replace function admin.list_schedules_at(_now timestamptz, _runs integer)
  returns table (
    name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text,
    enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz, updated_at timestamptz, last_runs jsonb
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
                         from queues.task_pending p where p.task_id = r.task_id)))
                    order by r.fire_at desc)
             from (select * from schedules.schedule_run x
                    where x.schedule_id = s.schedule_id
                    order by x.fire_at desc limit _n) r
             left join queues.task_completed c on c.task_id = r.task_id), '[]')
    from schedules.list_schedules() s;
end;
$$;

create or replace function admin.list_schedules(_runs integer default null)
  returns table (
    name text, cron text, task_type text, payload jsonb, priority integer, missed_run_policy text,
    enabled boolean, last_fire_at timestamptz, next_fire_at timestamptz, updated_at timestamptz, last_runs jsonb
  )
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_schedules_at(now(), _runs)
$$;
--! EndIncluded admin/schedules.sql
--! Included admin/process_tree.sql
-- The process view as a supervision tree: each node (a process root) with its state,
-- attempts and the time of its newest fact, and its children (an account deletion
-- supervises one file deletion per file of the account, then the account's
-- anonymization). Generic over the naming convention described in sql/admin/processes.sql;
-- table names come from the catalog (admin.process_table), ids go through `using`.
--
-- A node's status: succeeded or failed (its terminal fact), else stuck when its newest
-- _stuck_failed_attempts (3) attempts all failed or nothing was recorded for it for
-- _stuck_after_seconds (default 600), else running.

-- One node, without children, at _now.
create or replace function admin.process_node_at(_now timestamptz, _process text, _root_id bigint, _stuck_after_seconds integer)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text := _process || '_task_id';
  _akey text := _process || '_attempt_id';
  _attempt text := admin.process_table(_process, '_attempt');
  _sql text;
  _node jsonb;
  _status text;
begin
  _sql := format('select jsonb_build_object(
      ''process'', %L::text, ''root_id'', r.%I, ''created_at'', r.created_at,
      ''subject'', to_jsonb(r) - %L - ''created_at'',
      ''succeeded_at'', %s, ''failure'', %s, ''supervisor_runs'', %s,
      ''attempts'', %s, ''failed_attempts'', %s, ''recent_attempts_failed'', %s, ''last_fact_at'', greatest(r.created_at, %s, %s))
    from %s r where r.%I = $1',
    _process, _key, _key,
    case when admin.process_table(_process, '_task_succeeded') is null then 'null::timestamptz'
         else format('(select s.created_at from %s s where s.%I = r.%I)', admin.process_table(_process, '_task_succeeded'), _key, _key) end,
    case when admin.process_table(_process, '_task_failed') is null then 'null::jsonb'
         else format('(select to_jsonb(f) - %L from %s f where f.%I = r.%I)', _key, admin.process_table(_process, '_task_failed'), _key, _key) end,
    case when admin.process_table(_process, '_supervisor_run') is null then '0'
         else format('(select count(*) from %s s where s.%I = r.%I)', admin.process_table(_process, '_supervisor_run'), _key, _key) end,
    case when _attempt is null then '0' else format('(select count(*) from %s a where a.%I = r.%I)', _attempt, _key, _key) end,
    case when _attempt is null or admin.process_table(_process, '_attempt_failed') is null then '0'
         else format('(select count(*) from %s a join %s f on f.%I = a.%I where a.%I = r.%I)',
                     _attempt, admin.process_table(_process, '_attempt_failed'), _akey, _akey, _key, _key) end,
    -- the newest three attempts exist and all failed
    case when _attempt is null or admin.process_table(_process, '_attempt_failed') is null then 'false'
         else format('(select count(*) = 3 and bool_and(f.%I is not null) from (select a.%I from %s a where a.%I = r.%I order by a.%I desc limit 3) a left join %s f on f.%I = a.%I)',
                     _akey, _akey, _attempt, _key, _key, _akey, admin.process_table(_process, '_attempt_failed'), _akey, _akey) end,
    case when admin.process_table(_process, '_supervisor_run') is null then 'null::timestamptz'
         else format('(select max(s.created_at) from %s s where s.%I = r.%I)', admin.process_table(_process, '_supervisor_run'), _key, _key) end,
    case when _attempt is null then 'null::timestamptz' else format('(select max(a.created_at) from %s a where a.%I = r.%I)', _attempt, _key, _key) end,
    admin.process_table(_process, '_task'), _key);
  execute _sql into _node using _root_id;
  if _node is null then
    return null;
  end if;
  _status := case
    when _node ->> 'succeeded_at' is not null then 'succeeded'
    when _node -> 'failure' <> 'null'::jsonb then 'failed'
    when (_node ->> 'recent_attempts_failed')::boolean
      or (_node ->> 'last_fact_at')::timestamptz < _now - make_interval(secs => coalesce(_stuck_after_seconds, 600)) then 'stuck'
    else 'running' end;
  return _node || jsonb_build_object('status', _status);
end;
$$;

-- The children of one node (ids of other processes' roots), in the order they run.
create or replace function admin.process_children(_process text, _root_id bigint)
  returns table (process text, root_id bigint)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select 'file_deletion', fd.file_deletion_task_id
    from accounts.account_deletion_task d
    join files.file f on f.account_id = d.account_id
    join files.file_deletion_task fd on fd.file_id = f.file_id
   where _process = 'account_deletion' and d.account_deletion_task_id = _root_id
  union all
  select 'account_anonymization', x.account_anonymization_task_id
    from accounts.account_deletion_task d
    join accounts.account_anonymization_task x on x.account_id = d.account_id
   where _process = 'account_deletion' and d.account_deletion_task_id = _root_id
$$;

-- The tree of one root as JSON: the node (admin.process_node_at) with `children`, a list
-- of nodes, and `stuck_descendants`, how many nodes below it are stuck or failed.
-- 22004/22023/23503 as admin.assert_process_root.
create or replace function admin.process_tree_at(_now timestamptz, _process text, _root_id bigint, _stuck_after_seconds integer)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _node jsonb;
  _children jsonb := '[]';
  _child record;
  _sub jsonb;
  _bad integer := 0;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _stuck_after_seconds is not null and _stuck_after_seconds not between 1 and 604800 then
    raise exception 'stuck_after_seconds must be between 1 and 604800, got %', _stuck_after_seconds using errcode = '22023';
  end if;
  perform admin.assert_process_root(_process, _root_id);
  _node := admin.process_node_at(_now, _process, _root_id, _stuck_after_seconds);
  for _child in select * from admin.process_children(_process, _root_id) loop
    _sub := admin.process_tree_at(_now, _child.process, _child.root_id, _stuck_after_seconds);
    _bad := _bad + (_sub ->> 'stuck_descendants')::integer
            + case when _sub ->> 'status' in ('stuck', 'failed') then 1 else 0 end;
    _children := _children || jsonb_build_array(_sub);
  end loop;
  return _node || jsonb_build_object('children', _children, 'stuck_descendants', _bad);
end;
$$;

create or replace function admin.process_tree(_process text, _root_id bigint)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select admin.process_tree_at(now(), _process, _root_id, null)
$$;

-- Roots of one process: the page of the _limit newest roots older than _before_root_id
-- (keyset by root id), listed stuck first, then failed, then running, then succeeded,
-- newest first within each; a root counts as stuck when it or a node below it is stuck.
create or replace function admin.list_process_roots_at(
  _now timestamptz, _process text, _limit integer, _before_root_id bigint
) returns table (root_id bigint, created_at timestamptz, status text, subject jsonb, attempts bigint,
                 stuck_descendants integer, last_fact_at timestamptz)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _before_root_id is not null and _before_root_id < 1 then
    raise exception 'before_root_id must be a positive id, got %', _before_root_id using errcode = '22023';
  end if;
  return query
  select (t ->> 'root_id')::bigint, (t ->> 'created_at')::timestamptz,
         case when (t ->> 'stuck_descendants')::integer > 0 and t ->> 'status' = 'running' then 'stuck' else t ->> 'status' end,
         t -> 'subject', (t ->> 'attempts')::bigint, (t ->> 'stuck_descendants')::integer, (t ->> 'last_fact_at')::timestamptz
    from (select admin.process_tree_at(_now, _process, r.root_id, null) as t
            from admin.list_process_roots(_process, _page, _before_root_id) r) x
   order by case when (t ->> 'stuck_descendants')::integer > 0 and t ->> 'status' = 'running' then 0
                 else array_position(array['stuck', 'failed', 'running', 'succeeded'], t ->> 'status') - 1 end,
            (t ->> 'root_id')::bigint desc;
end;
$$;

create or replace function admin.list_process_roots_ranked(_process text, _limit integer default null, _before_root_id bigint default null)
  returns table (root_id bigint, created_at timestamptz, status text, subject jsonb, attempts bigint,
                 stuck_descendants integer, last_fact_at timestamptz)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select * from admin.list_process_roots_at(now(), _process, _limit, _before_root_id)
$$;
--! EndIncluded admin/process_tree.sql
--! Included admin/privileges.sql
-- Who may call what in admin. The operations API (:DATABASE_API) has no table or view
-- privileges: it reads and acts through the security definer functions below, plus
-- queues.enqueue to create tasks. Every grant is listed in sql/role-allowlist.json ("api").
-- The *_at functions take the clock and stay owner only.

revoke all on all tables in schema admin from public;
revoke execute on all functions in schema admin from public;

grant usage on schema admin to :DATABASE_API;
grant usage on schema queues to :DATABASE_API;

grant execute on function
  admin.list_tasks(text, text, integer, bigint, text, text, timestamptz, timestamptz, text[], jsonb),
  admin.get_task(bigint),
  admin.task_counts(integer),
  admin.list_task_types(),
  admin.capacity(text),
  admin.throughput(integer, integer),
  admin.completion_stats(integer),
  admin.list_dead_letters(text, integer, bigint),
  admin.redrive_task(bigint),
  admin.recover_stale_leases(integer),
  admin.list_stale_leases(),
  admin.process_timeline(text, bigint),
  admin.list_process_roots(text, integer, bigint),
  admin.list_processes(),
  admin.cancel_tasks(bigint[], text),
  admin.cancel_tasks_matching(text, text, integer, text),
  admin.run_tasks_now(bigint[]),
  admin.redrive_tasks(bigint[]),
  admin.redrive_tasks_matching(text, integer),
  admin.queue_depth(integer, integer),
  admin.pause_task_type(text, text),
  admin.resume_task_type(text),
  admin.list_queues(),
  admin.list_workers(),
  admin.recover_worker_leases(text, integer),
  admin.list_schedules(integer),
  admin.process_tree(text, bigint),
  admin.list_process_roots_ranked(text, integer, bigint)
to :DATABASE_API;

grant execute on function queues.enqueue(text, jsonb, timestamptz, integer, text, integer) to :DATABASE_API;
--! EndIncluded admin/privileges.sql
