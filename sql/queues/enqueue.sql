-- queues.enqueue / queues.enqueue_many: add tasks. Used by SQL (supervisors, kickoff
-- functions) and by apps through @org/queue-client; the worker never enqueues.

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

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, one attempt), since generated clients send undefined as NULL.
-- A thin wrapper over queues.enqueue_task.
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

-- Enqueue many tasks (see queues.enqueue_tasks); a thin wrapper over it.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return query select t.task_id from queues.enqueue_tasks(_tasks) t;
end;
$$;
