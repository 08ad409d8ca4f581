--! Previous: sha1:e06de196bbf8bb8264d8408c16db8684287cb35d
--! Hash: sha1:4e0cb7a3ba4bb01377518b7e425da39696a67f1f
--! Message: Per-task run timeout: queues.task.timeout_ms set at enqueue, returned by the claim, used by the worker over its type's

--! split: 100-task-timeout.sql
set local lock_timeout = '5s';
-- A run timeout per task (docs/flow-control.md, "Run timeouts"): set at enqueue, in place
-- of its type's (sql/queues/timeouts.sql), and returned by the claim. A nullable column
-- without a default: a catalog change, no rewrite. Its range (1 ms to 24 hours) is
-- checked by the enqueue.
-- lock: access exclusive on queues.task: adds the nullable column timeout_ms (catalog only, no rewrite)
alter table queues.task add column if not exists timeout_ms integer;
comment on column queues.task.timeout_ms is
  'The task''s run timeout in ms, in place of its type''s (queues.task_type_timeouts); NULL: the type''s.';

-- The enqueues take a trailing _timeout_ms, and the claims return timeout_ms.
drop function if exists queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean, bigint[], text);
drop function if exists queues.enqueue_internal(text, jsonb, timestamptz, integer, text, integer, bigint[], text);
drop function if exists queues.enqueue_task(text, jsonb, timestamptz, integer, text, integer, boolean, boolean, boolean,
                                            bigint[], text);
drop procedure if exists queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint, text);
drop function if exists queues.claim_tasks(text, integer, text[], integer, integer);
drop function if exists queues.claim_tasks_at(timestamptz, text, integer, text[], integer, integer);
--! Included queues/enqueue.sql
-- queues.enqueue / queues.enqueue_many: add tasks. Apps call them through
-- @org/queue-client; they refuse internal task types (sql/queues/enqueue_permission.sql).
-- The owner's SQL (supervisors, handlers, kickoffs, schedules) calls the grant-less
-- queues.enqueue_internal. The worker never enqueues.
--
-- What one enqueue costs (BENCHMARKS.md, "where a task's time goes"): for an app, one
-- probe of queues.internal_task_type; its fields checked as plain expressions; one
-- statement that reads the task type and inserts the task and its claim-index row; one
-- pg_notify; a read of the setting queue.traceparent, and only when the caller set one
-- (tracing on), a row of queues.task_trace per task (sql/queues/trace.sql). A batch is
-- one insert statement whatever its size: the rows are checked inside it (the first bad
-- one, in input order, raises and the statement writes nothing), the task types read
-- once per call. queues.task has no foreign key to queues.task_type: it
-- locked the type's row (FOR KEY SHARE, a MultiXact once callers overlap) for every task;
-- queues.guard_task_type_in_use (triggers.sql) refuses deleting or renaming a type in use.
--
-- Wake-ups: an enqueue that adds a task due within a minute (ready now, or scheduled a
-- moment ahead, like a supervisor's next run) sends NOTIFY queues_task_ready, and
-- PostgreSQL folds identical notifications of one transaction into one at commit. A
-- worker that finds nothing ready asks when the next task is due
-- (queues.next_claim_in_ms) and looks again then; a task due later is found by a
-- worker's poll, which asks the same. A
-- notifying commit holds a database-wide lock from just before its commit record until
-- it ends, so notifying transactions commit one at a time, each waiting for its own WAL
-- flush. queues.enqueue_and_commit (for callers outside a transaction block: the
-- client's enqueue on a pool) commits the task first, without the lock, and notifies in
-- a second transaction that writes no data and so does not wait for a flush.

-- Payloads are limited so one bad caller cannot fill the table or the worker's memory.
create or replace function queues.max_payload_bytes() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 1048576 $$;

-- And so is their nesting: a payload nested deeper than queues.max_payload_depth()
-- containers (objects and arrays) is refused, since parsers that recurse (the worker's
-- among them) would run out of stack. The test is jsonb_path_exists(payload,
-- 'strict $.**{65}'), written out where it is used (65 = max_payload_depth() + 1: a
-- jsonpath level must be a literal).
create or replace function queues.max_payload_depth() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 64 $$;

-- The attempts a task gets when its enqueue names none: 25, as graphile-worker and River,
-- with the queue's backoff between them (internal.backoff: 5 s, 10 s, 20 s, ... capped
-- at an hour, about 19 hours in all). The owner's SQL that enqueues the tasks of a
-- business process (channel tasks, supervisor runs) passes its own max_attempts (1): a
-- process retries through new attempts, never through task retries.
create or replace function queues.default_max_attempts() returns integer
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$ select 25 $$;

-- The core of the single enqueue (no grants): validates one task and inserts it and its
-- claim-index row in one statement; returns its task_id. _public: called for an app or
-- the API (queues.enqueue), so internal task types are refused (42501) unless the
-- session is the owner's. _notify: send the wake-up (false: the caller sends it after
-- its commit, see queues.enqueue_and_commit). NULL arguments take the defaults (now, 0,
-- no resource key, queues.default_max_attempts()).
-- _check_only: run every check (the task type's existence included) and return NULL
-- without writing (queues.enqueue_unique_task checks before it decides to skip).
--
-- The transaction's trace context (the setting queue.traceparent, sql/queues/trace.sql)
-- is recorded for the task when there is one.
--
-- Checks, in order: for _public, a worker-only task type (refused before anything else
-- is read, as queues.assert_may_enqueue words it); task_type NULL; the payload (NULL, not
-- an object, over the size limit, nested too deep), priority, resource key, max
-- attempts, scheduled time (plain expressions, no statement); then the insert, which
-- reads the type in its own statement: when it inserts nothing, the type is unknown
-- (22023). The insert's snapshot is taken once it holds its
-- lock on queues.task, so a type deleted meanwhile is not used (the delete waits for
-- that lock, see queues.guard_task_type_in_use). Under REPEATABLE READ or SERIALIZABLE
-- the snapshot is the transaction's, older than the lock: the type's row is locked FOR
-- KEY SHARE first, as the foreign key did, so that a type deleted since is a
-- serialization failure rather than a task of a type that is gone.
create or replace function queues.enqueue_task(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz,
  _priority     integer,
  _resource_key text,
  _max_attempts integer,
  _public       boolean default false,
  _notify       boolean default true,
  _check_only   boolean default false,
  _depends_on   bigint[] default null,
  _group_key    text default null,
  _timeout_ms   integer default null
) returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint;
begin
  if _public and exists (select 1 from queues.internal_task_type i where i.task_type = _task_type) then
    perform queues.assert_may_enqueue(_task_type);
  end if;
  if _task_type is null then
    raise exception 'task_type must not be null' using errcode = '22004';
  end if;
  if _payload is null then
    raise exception 'payload must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_payload) <> 'object' then
    raise exception 'payload must be a JSON object, got %', jsonb_typeof(_payload) using errcode = '22023';
  end if;
  if pg_column_size(_payload) > queues.max_payload_bytes() then
    raise exception 'payload is % bytes, over the limit of % bytes', pg_column_size(_payload), queues.max_payload_bytes()
      using errcode = '54000';
  end if;
  if jsonb_path_exists(_payload, 'strict $.**{65}') then
    raise exception 'payload is nested deeper than % levels', queues.max_payload_depth() using errcode = '54000';
  end if;
  if _priority not between -1000 and 1000 then
    raise exception 'priority must be between -1000 and 1000, got %', _priority using errcode = '22023';
  end if;
  if length(_resource_key) not between 1 and 200 then
    raise exception 'resource_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if length(_group_key) not between 1 and 200 then
    raise exception 'group_key must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _max_attempts not between 1 and 100 then
    raise exception 'max_attempts must be between 1 and 100, got %', _max_attempts using errcode = '22023';
  end if;
  if _timeout_ms not between 1 and 86400000 then
    raise exception 'timeout_ms must be between 1 and 86400000 (24 hours), got %', _timeout_ms using errcode = '22023';
  end if;
  if not isfinite(_scheduled_at) then
    raise exception 'scheduled_at must be a finite time, got %', _scheduled_at using errcode = '22023';
  end if;
  if _check_only then
    if not exists (select 1 from queues.task_type t where t.task_type = _task_type) then
      raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
        using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
    end if;
    return null;
  end if;
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t where t.task_type = _task_type for key share;
  end if;

  with inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at, group_key,
                             timeout_ms)
    select t.task_type, _payload, coalesce(_priority, 0), _resource_key,
           coalesce(_max_attempts, queues.default_max_attempts()), coalesce(_scheduled_at, now()), _group_key,
           _timeout_ms
      from queues.task_type t
     where t.task_type = _task_type
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts, group_key
  )
  -- A task with dependencies starts waiting (at 'infinity', sql/queues/dependencies.sql),
  -- so that no index entry of it is ever among the ready ones.
  insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts,
                                  group_key)
  select i.task_id, i.task_type, i.priority,
         case when cardinality(_depends_on) > 0 then 'infinity' else i.scheduled_at end, i.resource_key,
         case when cardinality(_depends_on) > 0 then 'infinity' else i.scheduled_at end, i.max_attempts,
         i.group_key
    from inserted i
  returning task_id into _task_id;

  if _task_id is null then
    raise exception 'unknown task_type %', quote_literal(left(_task_type, 100))
      using errcode = '22023', hint = 'Known task types are listed in queues.task_type.';
  end if;
  -- The caller's trace context, when the transaction has one (sql/queues/trace.sql).
  if current_setting('queue.traceparent', true) <> '' then
    perform queues.record_task_trace(array[_task_id]);
  end if;
  -- Dependencies (sql/queues/dependencies.sql): the task waits, or fails at once.
  if cardinality(_depends_on) > 0 then
    perform queues.add_task_dependencies(array_fill(_task_id, array[cardinality(_depends_on)]), _depends_on,
                                         array_fill(''::text, array[cardinality(_depends_on)]), array[_task_id]);
  end if;
  -- A task due more than a minute ahead wakes nobody now: workers poll for it.
  if _notify and (_scheduled_at is null or _scheduled_at <= now() + interval '1 minute') then
    perform pg_notify('queues_task_ready', '');
  end if;
  return _task_id;
end;
$$;

-- Enqueue one task for an app or the API; returns its task_id. NULL arguments take the
-- defaults (now, 0, no resource key, queues.default_max_attempts()), since generated
-- clients send undefined as NULL. A unique task: queues.enqueue_unique (unique.sql). Refuses internal task types (42501). _notify => false leaves the wake-up to
-- the caller (queues.enqueue_and_commit sends it after the commit). _depends_on: tasks
-- this one waits for (sql/queues/dependencies.sql); NULL or empty: none. _group_key: what
-- flow limits count the task by within its type (sql/queues/limits.sql); NULL: none.
-- _timeout_ms: the task's run timeout, 1 ms to 24 hours, in place of its type's
-- (sql/queues/timeouts.sql); NULL: the type's.
create or replace function queues.enqueue(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  _notify       boolean default true,
  _depends_on   bigint[] default null,
  _group_key    text default null,
  _timeout_ms   integer default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts,
                             true, coalesce(_notify, true), false, _depends_on, _group_key, _timeout_ms);
end;
$$;

-- queues.enqueue, then COMMIT, then the wake-up in a transaction of its own; returns the
-- task_id in _task_id. For callers outside a transaction block (CALL inside one fails
-- with 2D000, invalid transaction termination): the client's enqueue on a pool. The
-- task's commit takes no notification lock, so concurrent callers share WAL flushes; the
-- wake-up's transaction writes no data and does not wait for a flush (see the top of
-- this file). Crash between the two: the task is committed and found by the workers'
-- poll instead.
-- Not security definer and no SET clause: PostgreSQL allows COMMIT in a procedure only
-- without them. It runs with the caller's rights and search_path, names every object
-- with its schema, and does nothing a caller could not do itself.
create or replace procedure queues.enqueue_and_commit(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  inout _task_id bigint default null,
  _group_key    text default null,
  _timeout_ms   integer default null
)
  language plpgsql
as $$
begin
  _task_id := queues.enqueue(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, false,
                             null, _group_key, _timeout_ms);
  commit;
  if _scheduled_at is null
     or _scheduled_at operator(pg_catalog.<=) (pg_catalog.now() operator(pg_catalog.+) interval '1 minute') then
    perform pg_catalog.pg_notify('queues_task_ready', '');
  end if;
end;
$$;

-- Enqueue one task; returns its task_id. NULL arguments take the defaults (now, 0,
-- no resource key, queues.default_max_attempts()), since generated clients send undefined as NULL.
-- Owner only (no grant): the owner's SQL enqueues any task type through it. A thin alias
-- of the core queues.enqueue_task, with the defaults of queues.enqueue (_depends_on too).
create or replace function queues.enqueue_internal(
  _task_type    text,
  _payload      jsonb,
  _scheduled_at timestamptz default null,
  _priority     integer default null,
  _resource_key text default null,
  _max_attempts integer default null,
  _depends_on   bigint[] default null,
  _group_key    text default null,
  _timeout_ms   integer default null
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts,
                             false, true, false, _depends_on, _group_key, _timeout_ms);
end;
$$;

-- Raises the problem found in element _idx of a batch (queues.enqueue_tasks):
-- _problem is '<SQLSTATE> <message>'. Returns nothing; typed jsonb so it can stand in a
-- select list for the payload it refuses.
create or replace function queues.raise_enqueue_problem(_idx bigint, _problem text) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  if _problem like '22023 unknown task_type%' then
    raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = '22023',
      hint = 'Known task types are listed in queues.task_type.';
  end if;
  raise exception 'tasks[%]: %', _idx, substr(_problem, 7) using errcode = left(_problem, 5);
end;
$$;

-- Enqueue many tasks in one statement. _tasks is a JSON array of objects:
--   {"task_type": "...", "payload": {...}, "scheduled_at"?: "...", "priority"?: 0,
--    "resource_key"?: "...", "max_attempts"?: 25,
--    "unique_key"?: "...", "unique_policy"?: "skip", "unique_period"?: "30 seconds",
--    "depends_on"?: [task ids], "group_key"?: "...", "timeout_ms"?: 30000}
-- (the unique fields as in queues.enqueue_unique; a skipped element answers the pending
-- task's id; depends_on as queues.enqueue's _depends_on, not with a unique key, and
-- naming tasks that exist before the call)
-- Returns the task_ids in input order. All or nothing: the first bad element, in input
-- order, raises an error naming it (tasks[i]: ...) and nothing is written. _public as in
-- queues.enqueue_task: a worker-only task type anywhere in the batch is refused (42501)
-- first, unless the session is the owner's. The core of queues.enqueue_many (no grants).
--
-- One statement inserts the batch: each element is checked as it is inserted (a CASE
-- that calls queues.raise_enqueue_problem only for a bad element), its task type against
-- queues.task_type read once per call (a hashed subplan), then the tasks' claim-index
-- rows; then one wake-up if any task is ready now. For _public, one statement before it
-- looks for worker-only types (queues.internal_task_type, also read once).
create or replace function queues.enqueue_tasks(_tasks jsonb, _public boolean default false)
  returns table (task_id bigint)
  language plpgsql volatile
  -- Planned once per connection, not per call: the plan is the same for any batch (the
  -- elements in order, hashed lookups of the task types), and planning the insert took
  -- a few milliseconds of each of a connection's first five batches.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _ids bigint[];
  _ready boolean;
  _refused record;
  _dep_tasks bigint[];
  _dep_ids bigint[];
  _dep_labels text[];
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
  -- A worker-only task type anywhere refuses the batch before any element is read
  -- further (the first such element is named), unless the session is the owner's.
  if _public and not queues.is_owner_session() then
    select e.ordinality - 1 as idx, e.value ->> 'task_type' as task_type into _refused
      from jsonb_array_elements(_tasks) with ordinality e
     where e.value ->> 'task_type' in (select i.task_type from queues.internal_task_type i)
     order by e.ordinality
     limit 1;
    if found then
      perform queues.assert_may_enqueue(_refused.task_type, format('tasks[%s]: ', _refused.idx));
    end if;
  end if;
  -- A batch naming a unique key goes element by element (sql/queues/unique.sql); a batch
  -- without one pays only this walk of its elements' keys.
  if jsonb_path_exists(_tasks, 'lax $[*] ? (exists(@.unique_key) || exists(@.unique_policy) || exists(@.unique_period))') then
    return query select u.task_id from queues.enqueue_tasks_one_by_one(_tasks, _public) u;
    return;
  end if;
  -- Under REPEATABLE READ or SERIALIZABLE, lock the types FOR KEY SHARE (see
  -- queues.enqueue_task).
  if current_setting('transaction_isolation') <> 'read committed' then
    perform from queues.task_type t
     where t.task_type in (select e.value ->> 'task_type' from jsonb_array_elements(_tasks) e)
       for key share;
  end if;

  with input as (
    select e.ordinality - 1 as idx, e.value as element,
           e.value ->> 'task_type' as task_type,
           e.value -> 'payload' as payload,
           (e.value ->> 'scheduled_at')::timestamptz as scheduled_at,
           (e.value ->> 'priority')::integer as priority,
           e.value ->> 'resource_key' as resource_key,
           (e.value ->> 'max_attempts')::integer as max_attempts,
           e.value ->> 'group_key' as group_key,
           (e.value ->> 'timeout_ms')::integer as timeout_ms
      from jsonb_array_elements(_tasks) with ordinality e
  ),
  checked as (
    -- The problem of each element as '<SQLSTATE> <message>', NULL when it has none: its
    -- shape (an object of known fields), then the checks of queues.enqueue_task.
    select c.*,
           case
             when jsonb_typeof(c.element) <> 'object' then
               '22023 must be a JSON object, got ' || jsonb_typeof(c.element)
             when c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,depends_on,group_key,timeout_ms}'::text[] <> '{}' then
               '22023 unknown field(s) ' || left((select string_agg(k, ', ') from jsonb_object_keys(
                 c.element - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts,depends_on,group_key,timeout_ms}'::text[]) k), 200)
             -- depends_on: null, or an array of task ids (integers, or their decimal text).
             when jsonb_typeof(c.element -> 'depends_on') not in ('array', 'null')
                  or jsonb_path_exists(c.element -> 'depends_on',
                       'lax $[*] ? (!((@.type() == "number" && @ == @.floor()) || (@.type() == "string" && @ like_regex "^[0-9]{1,18}$")))') then
               '22023 depends_on must be an array of task ids'
             when c.task_type is null then '22004 task_type must not be null'
             when c.task_type not in (select t.task_type from queues.task_type t) then
               '22023 unknown task_type ' || quote_literal(left(c.task_type, 100))
             when c.payload is null then '22004 payload must not be null'
             when jsonb_typeof(c.payload) <> 'object' then
               '22023 payload must be a JSON object, got ' || jsonb_typeof(c.payload)
             when pg_column_size(c.payload) > queues.max_payload_bytes() then
               format('54000 payload is %s bytes, over the limit of %s bytes', pg_column_size(c.payload), queues.max_payload_bytes())
             -- Nesting deeper than 64 levels takes over 512 bytes (an uncompressed value,
             -- as c.payload is: just taken out of the batch), so smaller ones are not walked.
             when pg_column_size(c.payload) > 512 and jsonb_path_exists(c.payload, 'strict $.**{65}') then
               format('54000 payload is nested deeper than %s levels', queues.max_payload_depth())
             when c.priority not between -1000 and 1000 then
               '22023 priority must be between -1000 and 1000, got ' || c.priority
             when length(c.resource_key) not between 1 and 200 then '22023 resource_key must be 1 to 200 characters'
             when length(c.group_key) not between 1 and 200 then '22023 group_key must be 1 to 200 characters'
             when c.max_attempts not between 1 and 100 then
               '22023 max_attempts must be between 1 and 100, got ' || c.max_attempts
             when c.timeout_ms not between 1 and 86400000 then
               '22023 timeout_ms must be between 1 and 86400000 (24 hours), got ' || c.timeout_ms
             when not isfinite(c.scheduled_at) then
               '22023 scheduled_at must be a finite time, got ' || c.scheduled_at
           end as problem
      from input c
  ),
  inserted as (
    insert into queues.task (task_type, payload, priority, resource_key, max_attempts, scheduled_at, group_key, timeout_ms)
    select c.task_type,
           case when c.problem is null then c.payload else queues.raise_enqueue_problem(c.idx, c.problem) end,
           coalesce(c.priority, 0), c.resource_key, coalesce(c.max_attempts, queues.default_max_attempts()), coalesce(c.scheduled_at, now()),
           c.group_key, c.timeout_ms
      from checked c
     order by c.idx
    returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts, group_key
  ),
  pending as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts, group_key)
    select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts, i.group_key
      from inserted i
  )
  select array_agg(i.task_id order by i.task_id), bool_or(i.scheduled_at <= now() + interval '1 minute')
    into _ids, _ready
    from inserted i;
  -- The caller's trace context, when the transaction has one (sql/queues/trace.sql).
  if current_setting('queue.traceparent', true) <> '' then
    perform queues.record_task_trace(_ids);
  end if;
  -- Dependencies (sql/queues/dependencies.sql), one edge per element of a depends_on:
  -- _ids is in input order (the insert numbered the tasks in that order).
  if jsonb_path_exists(_tasks, 'lax $[*].depends_on[*]') then
    select array_agg(_ids[e.n] order by e.n, d.n), array_agg((d.value #>> '{}')::bigint order by e.n, d.n),
           array_agg(format('tasks[%s]: ', e.n - 1) order by e.n, d.n)
      into _dep_tasks, _dep_ids, _dep_labels
      from jsonb_array_elements(_tasks) with ordinality e(value, n)
     cross join lateral jsonb_array_elements(e.value -> 'depends_on') with ordinality d(value, n)
     where jsonb_typeof(e.value -> 'depends_on') = 'array';
    perform queues.add_task_dependencies(_dep_tasks, _dep_ids, _dep_labels, _ids);
  end if;

  if _ready then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select u.id from unnest(_ids) u(id);
end;
$$;

-- Enqueue many tasks (see queues.enqueue_tasks), for an app or the API: refuses internal
-- task types (42501), as queues.enqueue.
create or replace function queues.enqueue_many(_tasks jsonb)
  returns table (task_id bigint)
  language sql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select t.task_id from queues.enqueue_tasks(_tasks, true) t
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
              p.uncounted_count, p.suspect_lease
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
               p.uncounted_count, p.suspect_lease
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
           t.ended_leases, t.uncounted_count, t.suspect_lease
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
           c.counted as counted_leases
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
    select pk.task_id, pk.task_type, pk.group_key, pk.resource_key, pk.priority, pk.scheduled_at, pk.suspect
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
    select pk.task_id, pk.task_type, pk.group_key, pk.suspect
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
    returning task_lease_id, task_ids
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
     where p.task_id = any (array(select e.task_id from eligible e))
    returning p.task_id, p.lease_count, p.current_lease_id as task_lease_id, _now as leased_at,
              p.available_at as expires_at
  )
  select t.task_id, t.task_type, t.payload, t.priority, t.resource_key, t.max_attempts,
         t.enqueued_at, t.scheduled_at, m.task_lease_id, m.leased_at, m.expires_at, m.lease_count, t.timeout_ms
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
-- when no such task is scheduled later than now (at most 2,147,483,647, about 24 days,
-- for a task further ahead). Workers sleep until then, or their poll interval,
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
create or replace function queues.next_claim_in_ms(_task_types text[] default null)
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
          and p.scheduled_at > clock_timestamp()
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
-- The task page shows the run timeout in force (the task's own, or its type's).
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
-- Which table drives the walk: pending states walk queues.task_pending (bounded by
-- pending work); unsuccessful outcomes walk queues.task_completed by key (failed and
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
               from queues.task_pending p
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
               left join queues.task_pending p on p.task_id = t.task_id
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
    left join queues.task_pending p on p.task_id = t.task_id
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

-- Counts by task type and state: pending states over queues.task_pending (bounded by
-- pending work), completion outcomes over the last _window_seconds only (default 86400;
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
    from queues.task_pending p
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

--! Included queues/privileges.sql
-- Who may call what in queues. Database users come from placeholders (see .gmrc):
--   :DATABASE_WORKER  the worker: claim (and ask when the next scheduled task is due),
--                     extend and release leases, complete, fail, interrupt (a transient
--                     error).
--                     No table privileges.
--   :DATABASE_APP     applications: enqueue.
-- Every function starts with EXECUTE revoked from PUBLIC; grants are explicit.

revoke all on all tables in schema queues from public;
revoke all on all sequences in schema queues from public;
revoke execute on all functions in schema queues from public;

grant usage on schema queues to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  queues.claim_tasks(text, integer, text[], integer, integer),
  queues.next_claim_in_ms(text[]),
  queues.extend_leases(bigint[], bigint[], integer),
  queues.release_leases(bigint[], bigint[]),
  queues.dequeue_next_available_task(text, integer),
  queues.complete_task(bigint, bigint, text),
  queues.complete_tasks(bigint[], bigint[], text[], boolean[], timestamptz[]),
  queues.fail_task(bigint, text, bigint),
  queues.interrupt_task(bigint, bigint, text, integer),
  queues.record_worker_heartbeat(text, text[], integer),
  queues.record_worker_stopped(text),
  queues.cancelled_tasks(bigint[]),
  queues.task_type_timeouts(),
  queues.record_progress(bigint, bigint, bigint, bigint, text),
  queues.record_throttle(text, text, timestamptz, numeric, text, text, bigint, bigint),
  queues.active_throttles(),
  queues.list_task_dependencies(bigint)
to :DATABASE_WORKER;

grant execute on function
  queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean, bigint[], text, integer),
  queues.enqueue_many(jsonb),
  queues.enqueue_unique(text, jsonb, text, text, interval, timestamptz, integer, text, integer),
  queues.cancel_tasks(bigint[], text),
  queues.list_task_dependencies(bigint)
to :DATABASE_APP;
-- The client's enqueue on a pool (commit, then the wake-up; sql/queues/enqueue.sql).
revoke execute on all procedures in schema queues from public;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint, text, integer)
  to :DATABASE_APP;
--! EndIncluded queues/privileges.sql
--! Included admin/privileges.sql
-- Who may call what in admin. The operations API (:DATABASE_API) has no table or view
-- privileges: it reads and acts through the security definer functions below, plus
-- queues.enqueue to create tasks. Every grant is listed in sql/database-user-grants.json ("api").
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
  admin.list_process_roots_ranked(text, integer, bigint),
  admin.record_api_change(text, text, text, text, text, text, bigint[], text, text, text, jsonb, jsonb),
  admin.list_api_changes(bigint, integer, bigint),
  admin.set_task_type_timeout(text, numeric),
  admin.list_throttles(),
  admin.clear_throttle(text, text),
  admin.task_limits(),
  admin.set_task_limit(text, text, text, integer, integer, integer),
  admin.clear_task_limit(text, text, text)
to :DATABASE_API;

grant execute on function queues.enqueue(text, jsonb, timestamptz, integer, text, integer, boolean, bigint[], text, integer) to :DATABASE_API;
grant execute on function queues.list_task_dependencies(bigint) to :DATABASE_API;
grant execute on function queues.enqueue_unique(text, jsonb, text, text, interval, timestamptz, integer, text, integer)
  to :DATABASE_API;
grant execute on procedure queues.enqueue_and_commit(text, jsonb, timestamptz, integer, text, integer, bigint, text, integer)
  to :DATABASE_API;
--! EndIncluded admin/privileges.sql
