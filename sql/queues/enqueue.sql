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
-- _check_only: run every check (the task type's existence and the dependencies' included)
-- and return NULL without writing (queues.enqueue_unique_task checks before it decides to skip).
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
    if cardinality(_depends_on) > 0 then
      perform queues.check_task_dependencies(array_fill(0::bigint, array[cardinality(_depends_on)]), _depends_on,
                                             array_fill(''::text, array[cardinality(_depends_on)]), '{}');
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
-- poll instead. _depends_on, _group_key and _timeout_ms as in queues.enqueue (a bad
-- dependency raises before the commit: nothing is written).
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
  _timeout_ms   integer default null,
  _depends_on   bigint[] default null
)
  language plpgsql
as $$
begin
  _task_id := queues.enqueue(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, false,
                             _depends_on, _group_key, _timeout_ms);
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
-- task's id; depends_on as queues.enqueue's _depends_on, naming tasks that exist before
-- the call)
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
  _deps boolean;
  _limited text[];
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
  -- What keeps a task out of a ready batch: dependencies anywhere in the call, a flow
  -- limit on its type (the limits in force, read once: a tiny table).
  _deps := jsonb_path_exists(_tasks, 'lax $[*].depends_on[*]');
  _limited := array(select distinct l.task_type from queues.task_limits() l);
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
  -- Ready batches (sql/queues/ready_batch.sql): the plain tasks (no resource key, no group
  -- key, scheduled_at not given, a type without a flow limit, a call without dependencies),
  -- two or more of one type, priority and max_attempts, go into one batch row; the others
  -- each get a claim-index row.
  placed as (
    select i.*,
           i.plain and count(*) filter (where i.plain)
                         over (partition by i.task_type, i.priority, i.max_attempts, i.plain) >= 2 as batched
      from (select i.*,
                   not _deps and i.resource_key is null and i.group_key is null and i.scheduled_at = now()
                     and not (i.task_type = any (_limited)) as plain
              from inserted i) i
  ),
  pending as (
    insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts, group_key)
    select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts, i.group_key
      from placed i
     where not i.batched
  ),
  batches as (
    insert into queues.task_ready_batch (task_id, task_type, priority, scheduled_at, max_attempts, task_ids, task_range)
    select min(i.task_id), i.task_type, i.priority, min(i.scheduled_at), i.max_attempts,
           array_agg(i.task_id order by i.task_id), int8range(min(i.task_id), max(i.task_id), '[]')
      from placed i
     where i.batched
     group by i.task_type, i.priority, i.max_attempts
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
  if _deps then
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
