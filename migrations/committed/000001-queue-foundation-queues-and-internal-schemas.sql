--! Previous: -
--! Hash: sha1:434f488b276fb9fae5c4a069761e0fc3f5a749b7
--! Message: Queue foundation: queues and internal schemas

-- Functions are created without EXECUTE for PUBLIC: only explicit grants count.
-- (Only the global form works; a per-schema revoke of a default grant does nothing.)
alter default privileges revoke execute on routines from public;

--! Included queues/schema.sql
-- queues: the generic task queue.
--
-- Facts (never updated; deletions only by retention tooling run as the owner):
--   task            one row per unit of work, immutable
--   task_lease      one row per claim
--   task_completed  terminal fact, at most one per task
--   error           operational errors reported against a task
-- Derived (mutable, rebuildable from the facts by queues.rebuild_task_pending()):
--   task_pending    one row per task that is not completed; the claim index
--
-- This file is idempotent: it is re-included by later migrations when a table gains
-- a column (add `alter table ... add column if not exists` here, never edit history).

create schema if not exists queues;
revoke all on schema queues from public;

create table if not exists queues.task_type (
  task_type     text primary key
                check (task_type ~ '^[a-z][a-z0-9_]{0,62}$'),
  description   text not null default '',
  registered_at timestamptz not null default now()
);
comment on table queues.task_type is
  'Task types a worker may be asked to process; queues.enqueue rejects any other.';

insert into queues.task_type (task_type, description) values
  ('db_function', 'A pure database step: internal.run_function(payload.db_function, payload).'),
  ('email',       'Send an email through the email provider, with before/success/error handlers.'),
  ('sms',         'Send an SMS through the SMS provider, with before/success/error handlers.'),
  ('file_delete', 'Delete a stored object through the files service, with handlers.')
on conflict (task_type) do nothing;

create table if not exists queues.task (
  task_id       bigint generated always as identity primary key,
  task_type     text not null references queues.task_type on delete restrict,
  payload       jsonb not null check (jsonb_typeof(payload) = 'object'),
  -- Higher runs first. Same priority: scheduled_at, then task_id.
  priority      integer not null default 0 check (priority between -1000 and 1000),
  -- At most one task per resource key is leased at a time (null: no such limit).
  resource_key  text check (length(resource_key) between 1 and 200),
  -- Simple retries for tasks no supervisor drives: total runs allowed.
  max_attempts  integer not null default 1 check (max_attempts between 1 and 100),
  enqueued_at   timestamptz not null default now(),
  scheduled_at  timestamptz not null default now()
);
comment on table queues.task is 'A unit of work. Immutable: state lives in task_lease, task_completed and error.';

create table if not exists queues.task_lease (
  task_lease_id bigint generated always as identity primary key,
  task_id       bigint not null references queues.task on delete cascade,
  worker_id     text not null check (length(worker_id) between 1 and 200),
  leased_at     timestamptz not null default now(),
  expires_at    timestamptz not null,
  check (expires_at > leased_at)
);
create index if not exists task_lease_task_id_idx on queues.task_lease (task_id);
comment on table queues.task_lease is 'Append-only: one row per claim of a task.';

create table if not exists queues.task_completed (
  task_id       bigint primary key references queues.task on delete cascade,
  -- The lease the completing worker held (null: completed without a lease).
  task_lease_id bigint references queues.task_lease on delete cascade,
  completed_at  timestamptz not null default now(),
  outcome       text not null
                check (outcome in ('succeeded', 'failed', 'abandoned', 'cancelled'))
);
create index if not exists task_completed_lease_idx on queues.task_completed (task_lease_id);
comment on table queues.task_completed is 'Terminal fact: a completed task is never claimed again.';

create table if not exists queues.error (
  error_id      bigint generated always as identity primary key,
  task_id       bigint not null references queues.task on delete cascade,
  task_lease_id bigint references queues.task_lease on delete cascade,
  error_message text not null,
  created_at    timestamptz not null default now()
);
create index if not exists error_task_id_idx on queues.error (task_id);
create index if not exists error_task_lease_id_idx on queues.error (task_lease_id);
comment on table queues.error is 'Append-only operational errors reported against a task.';

-- The claim index. Not a fact: one row per task that is not completed, deleted on
-- completion, so the cost of a claim depends on pending work only, never on history.
-- Claiming updates the row (available_at moves to the lease expiry); that update is
-- what makes claims exclusive under READ COMMITTED, because a concurrent claimer that
-- reaches the row after the update re-evaluates `available_at <= now()` on the new
-- version and skips it. None of the updated columns is indexed, so the update is HOT.
create table if not exists queues.task_pending (
  task_id          bigint primary key references queues.task on delete cascade,
  task_type        text not null,
  priority         integer not null,
  scheduled_at     timestamptz not null,
  resource_key     text,
  -- scheduled_at until the first claim, then the expiry of the current lease.
  available_at     timestamptz not null,
  current_lease_id bigint,
  lease_count      integer not null default 0
) with (fillfactor = 80);
create index if not exists task_pending_claim_idx
  on queues.task_pending (priority desc, scheduled_at, task_id);
comment on table queues.task_pending is
  'Derived claim index: tasks not yet completed. Rebuild with queues.rebuild_task_pending().';

-- Facts are never updated.
create or replace function queues.forbid_fact_update() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception '%.% is append-only: rows are never updated', tg_table_schema, tg_table_name
    using errcode = '55000';
end;
$$;

do $$
declare
  _table text;
begin
  foreach _table in array array['task', 'task_lease', 'task_completed', 'error'] loop
    if not exists (
      select 1 from pg_trigger
       where tgrelid = to_regclass(format('queues.%I', _table))
         and tgname = 'forbid_update'
    ) then
      execute format(
        'create trigger forbid_update before update on queues.%I
           for each statement execute function queues.forbid_fact_update()', _table);
    end if;
  end loop;
end;
$$;

-- Wake listening workers: one notification per statement that adds ready work, not
-- one per row (NOTIFY takes a global lock at commit).
create or replace function queues.notify_task_ready() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform pg_notify('queues_task_ready', '');
  return null;
end;
$$;

drop trigger if exists notify_task_ready on queues.task_pending;
create trigger notify_task_ready after insert on queues.task_pending
  for each statement execute function queues.notify_task_ready();
--! EndIncluded queues/schema.sql
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

  insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at)
  values (_task.task_id, _task.task_type, _task.priority, _task.scheduled_at,
          _task.resource_key, _task.scheduled_at);

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
  _element record;
  _unknown_keys text;
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

  for _element in select e.value, e.ordinality from jsonb_array_elements(_tasks) with ordinality e loop
    if jsonb_typeof(_element.value) <> 'object' then
      raise exception 'tasks[%]: must be a JSON object, got %', _element.ordinality - 1,
        jsonb_typeof(_element.value) using errcode = '22023';
    end if;
    select string_agg(k, ', ') into _unknown_keys
      from jsonb_object_keys(_element.value) k
     where k not in ('task_type', 'payload', 'scheduled_at', 'priority', 'resource_key', 'max_attempts');
    if _unknown_keys is not null then
      raise exception 'tasks[%]: unknown field(s) %', _element.ordinality - 1, left(_unknown_keys, 200)
        using errcode = '22023';
    end if;
    perform queues.assert_valid_task(
      _element.value ->> 'task_type', _element.value -> 'payload',
      (_element.value ->> 'priority')::integer, _element.value ->> 'resource_key',
      (_element.value ->> 'max_attempts')::integer,
      format('tasks[%s]: ', _element.ordinality - 1));
  end loop;

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
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at)
    select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at
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

create or replace function queues.claim_tasks_at(
  _now           timestamptz,
  _worker_id     text,
  _limit         integer,
  _task_types    text[],
  _lease_seconds integer
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
  set search_path = pg_catalog, pg_temp
as $$
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
  if _task_types is not null and cardinality(_task_types) = 0 then
    raise exception 'task_types must be null (any type) or name at least one type'
      using errcode = '22023';
  end if;

  return query
  with picked as (
    -- SKIP LOCKED skips rows another claimer holds; the update below makes any claimer
    -- that arrives after our commit re-check available_at on the new row version.
    select p.task_id
      from queues.task_pending p
     where p.available_at <= _now
       and (_task_types is null or p.task_type = any (_task_types))
     order by p.priority desc, p.scheduled_at, p.task_id
     limit _limit
       for update skip locked
  ),
  leased as (
    insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
    select pk.task_id, _worker_id, _now, _now + make_interval(secs => _lease_seconds)
      from picked pk
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
-- reached, no live lease. Order: priority desc, scheduled_at, task_id.
create or replace function queues.claim_tasks(
  _worker_id     text,
  _limit         integer default null,
  _task_types    text[] default null,
  _lease_seconds integer default null
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
                                      coalesce(_lease_seconds, 300))
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
                               coalesce(_lease_seconds, 300)) c
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
-- Returns one row per input task: result is
--   'completed'          this call completed it
--   'already_completed'  it was completed before (idempotent; nothing changed)
--   'lease_lost'         _task_lease_id is not the task's current lease (nothing changed)
--   'unknown_task'       no such task
create or replace function queues.complete_tasks(
  _task_ids       bigint[],
  _task_lease_ids bigint[] default null,
  _outcomes       text[] default null
) returns table (task_id bigint, result text)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
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

  return query
  with input as (
    select i.task_id, i.task_lease_id, coalesce(i.outcome, 'succeeded') as outcome
      from unnest(_task_ids,
                  coalesce(_task_lease_ids, array_fill(null::bigint, array[cardinality(_task_ids)])),
                  coalesce(_outcomes, array_fill(null::text, array[cardinality(_task_ids)])))
           as i(task_id, task_lease_id, outcome)
  ),
  -- Deleting the pending row takes its lock: a concurrent claim skips it, a concurrent
  -- completion waits and then finds nothing to delete.
  removed as (
    delete from queues.task_pending p
     using input i
     where p.task_id = i.task_id
       and (i.task_lease_id is null or p.current_lease_id = i.task_lease_id)
    returning p.task_id, p.current_lease_id
  ),
  completed as (
    insert into queues.task_completed (task_id, task_lease_id, outcome)
    select r.task_id, coalesce(i.task_lease_id, r.current_lease_id), i.outcome
      from removed r join input i on i.task_id = r.task_id
    on conflict do nothing
    returning task_completed.task_id
  )
  select i.task_id,
         case
           when c.task_id is not null then 'completed'
           when exists (select 1 from queues.task_completed tc where tc.task_id = i.task_id)
             then 'already_completed'
           when not exists (select 1 from queues.task t where t.task_id = i.task_id)
             then 'unknown_task'
           else 'lease_lost'
         end
    from input i
    left join completed c on c.task_id = i.task_id;
end;
$$;

-- The seeds' completion, extended: idempotent (true when this call completed the task,
-- false when it was already completed); fenced when _task_lease_id is given (raises
-- when that lease is no longer current); raises for an unknown task.
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
  return _result = 'completed';
end;
$$;
--! EndIncluded queues/complete.sql
--! Included queues/fail.sql
-- queues.fail_task: record an operational error against a task. Append-only and not
-- terminal: the worker completes the task afterwards (supervisors decide on retries).
-- Fenced like completion: with _task_lease_id, only the task's newest lease may record.

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
                where l.task_id = _task_id and l.task_lease_id > _task_lease_id) then
      raise exception 'lease % is no longer the current lease of task %', _task_lease_id, _task_id
        using errcode = '55000', hint = 'Another worker claimed the task after this lease expired.';
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
--! Included queues/maintenance.sql
-- Maintenance of the derived claim index. Owner only.

-- Rebuilds queues.task_pending from the facts: every task without a completion, available
-- at its scheduled time or at the expiry of its newest lease, whichever is later.
-- Returns the number of pending tasks.
create or replace function queues.rebuild_task_pending() returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _count bigint;
begin
  lock table queues.task_pending in exclusive mode;
  delete from queues.task_pending;
  insert into queues.task_pending
    (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id, lease_count)
  select t.task_id, t.task_type, t.priority, t.scheduled_at, t.resource_key,
         greatest(t.scheduled_at, l.expires_at), l.task_lease_id, coalesce(l.lease_count, 0)
    from queues.task t
    left join lateral (
      select tl.task_lease_id, tl.expires_at, count(*) over () :: integer as lease_count
        from queues.task_lease tl
       where tl.task_id = t.task_id
       order by tl.task_lease_id desc
       limit 1
    ) l on true
   where not exists (select 1 from queues.task_completed c where c.task_id = t.task_id);
  get diagnostics _count = row_count;
  return _count;
end;
$$;
--! EndIncluded queues/maintenance.sql
--! Included queues/privileges.sql
-- Who may call what in queues. Roles come from placeholders (see .gmrc):
--   :DATABASE_WORKER  the worker: claim, complete, fail. No table privileges.
--   :DATABASE_APP     applications: enqueue.
-- Every function starts with EXECUTE revoked from PUBLIC; grants are explicit.

revoke all on all tables in schema queues from public;
revoke all on all sequences in schema queues from public;
revoke execute on all functions in schema queues from public;

grant usage on schema queues to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  queues.claim_tasks(text, integer, text[], integer),
  queues.dequeue_next_available_task(text, integer),
  queues.complete_task(bigint, bigint, text),
  queues.complete_tasks(bigint[], bigint[], text[]),
  queues.fail_task(bigint, text, bigint)
to :DATABASE_WORKER;

grant execute on function
  queues.enqueue(text, jsonb, timestamptz, integer, text, integer),
  queues.enqueue_many(jsonb)
to :DATABASE_APP;
--! EndIncluded queues/privileges.sql
--! Included internal/schema.sql
-- internal: the function runner and its allowlist. Idempotent.

create schema if not exists internal;
revoke all on schema internal from public;

-- Functions internal.run_function may call. One row per schema.function taking exactly
-- one jsonb argument and returning jsonb; add rows with internal.register_runnable_function.
create table if not exists internal.runnable_function (
  function_schema text not null,
  function_name   text not null,
  registered_at   timestamptz not null default now(),
  primary key (function_schema, function_name)
);
comment on table internal.runnable_function is
  'Allowlist of internal.run_function. Register with internal.register_runnable_function(regprocedure).';
--! EndIncluded internal/schema.sql
--! Included internal/run_function.sql
-- internal.run_function(function_name, payload): the worker's way into business SQL.
--
-- The name is checked against a strict pattern, resolved to exactly one function
-- schema.name(jsonb) returning jsonb, checked against the allowlist and the caller's
-- EXECUTE privilege, and called through format('%I.%I'), never by pasting the name.
-- pg_catalog, information_schema and temporary schemas are never runnable.

-- Registers a function as runnable. Owner only; called from migrations.
create or replace function internal.register_runnable_function(_function regprocedure)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _proc record;
begin
  if _function is null then
    raise exception 'function must not be null' using errcode = '22004';
  end if;
  select n.nspname, p.proname, p.prorettype, p.pronargs, p.proargtypes[0] as argtype, p.prokind
    into _proc
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where p.oid = _function;
  if _proc.nspname in ('pg_catalog', 'information_schema') or _proc.nspname like 'pg\_%' then
    raise exception 'functions in % cannot be runnable', _proc.nspname using errcode = '42501';
  end if;
  if _proc.prokind <> 'f' or _proc.pronargs <> 1 or _proc.argtype <> 'jsonb'::regtype
     or _proc.prorettype <> 'jsonb'::regtype then
    raise exception '% must be a function taking one jsonb argument and returning jsonb', _function
      using errcode = '22023';
  end if;
  if _proc.nspname !~ '^[a-z_][a-z0-9_]*$' or _proc.proname !~ '^[a-z_][a-z0-9_]*$' then
    raise exception '% must have a lowercase schema.name made of a-z, 0-9 and _', _function
      using errcode = '22023';
  end if;
  insert into internal.runnable_function (function_schema, function_name)
  values (_proc.nspname, _proc.proname)
  on conflict do nothing;
end;
$$;

-- Resolves a runnable function name to its OID, or raises a clear error. Security
-- definer so that callers need no privilege on the allowlist table.
create or replace function internal.resolve_runnable_function(_function_name text)
  returns regprocedure
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _parts text[];
  _oid regprocedure;
begin
  if _function_name is null then
    raise exception 'function_name must not be null' using errcode = '22004';
  end if;
  _parts := regexp_match(_function_name, '^([a-z_][a-z0-9_]{0,62})\.([a-z_][a-z0-9_]{0,62})$');
  if _parts is null then
    raise exception 'invalid function_name %: expected schema.function in lowercase letters, digits and _, with no argument list',
      quote_literal(left(_function_name, 100)) using errcode = '22023';
  end if;
  if _parts[1] in ('pg_catalog', 'information_schema') or _parts[1] like 'pg\_%' then
    raise exception 'function % is in a system or temporary schema and is never runnable',
      _function_name using errcode = '42501';
  end if;
  _oid := to_regprocedure(format('%I.%I(jsonb)', _parts[1], _parts[2]));
  if _oid is null then
    raise exception 'function %(jsonb) does not exist', _function_name using errcode = '42883';
  end if;
  if not exists (select 1 from internal.runnable_function r
                  where r.function_schema = _parts[1] and r.function_name = _parts[2]) then
    raise exception 'function % is not registered as runnable', _function_name
      using errcode = '42501',
            hint = 'Register it in a migration: select internal.register_runnable_function(''schema.name(jsonb)'');';
  end if;
  if (select p.prorettype from pg_proc p where p.oid = _oid) <> 'jsonb'::regtype then
    raise exception 'function % does not return jsonb', _function_name using errcode = '42804';
  end if;
  return _oid;
end;
$$;

-- Runs a registered function with the payload and returns its jsonb. Security invoker:
-- the caller needs EXECUTE on the target itself.
create or replace function internal.run_function(function_name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _oid regprocedure := internal.resolve_runnable_function(function_name);
  _schema name;
  _name name;
  _result jsonb;
begin
  if not has_function_privilege(_oid, 'execute') then
    raise exception 'permission denied: % may not execute %', current_user, function_name
      using errcode = '42501';
  end if;
  select n.nspname, p.proname into _schema, _name
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where p.oid = _oid;
  execute format('select %I.%I($1::jsonb)', _schema, _name) into _result using payload;
  return _result;
end;
$$;

-- A runnable no-op: returns the success envelope. Used by benchmarks and smoke tests.
create or replace function internal.noop(payload jsonb) returns jsonb
  language sql immutable
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select jsonb_build_object('success', true) $$;
--! EndIncluded internal/run_function.sql
--! Included internal/privileges.sql
-- Who may call what in internal. The worker runs registered functions through
-- internal.run_function; it also needs EXECUTE on each target (granted beside it).

revoke all on all tables in schema internal from public;
revoke execute on all functions in schema internal from public;

grant usage on schema internal to :DATABASE_WORKER;

grant execute on function
  internal.run_function(text, jsonb),
  internal.resolve_runnable_function(text),
  internal.noop(jsonb)
to :DATABASE_WORKER;

select internal.register_runnable_function('internal.noop(jsonb)');
--! EndIncluded internal/privileges.sql
