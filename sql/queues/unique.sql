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
