--! Previous: sha1:434f488b276fb9fae5c4a069761e0fc3f5a749b7
--! Hash: sha1:8e3dadadb172f8bde850bfe8d08518b86d82a4a6
--! Message: Worker support (lease heartbeats, releases, poison tasks) and the comms, files and accounts business processes

--! split: 100-queues.sql
-- Queue core changes (sql/queues, sql/internal). Include changed files here.
-- Lease heartbeats and releases, poison-task abandonment at claim time.
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

-- Heartbeats: each extension of a live lease, appended. A lease's expiry is the newest
-- extension's expires_at, or its own.
create table if not exists queues.task_lease_extension (
  task_lease_extension_id bigint generated always as identity primary key,
  task_lease_id bigint not null references queues.task_lease on delete cascade,
  extended_at   timestamptz not null default now(),
  expires_at    timestamptz not null,
  check (expires_at > extended_at)
);
create index if not exists task_lease_extension_lease_idx on queues.task_lease_extension (task_lease_id);
comment on table queues.task_lease_extension is 'Append-only: a lease extended by its worker''s heartbeat.';

-- A lease given back before it expired (graceful shutdown): the task is claimable at once,
-- and the release does not count towards abandoning the task.
create table if not exists queues.task_lease_release (
  task_lease_id bigint primary key references queues.task_lease on delete cascade,
  released_at   timestamptz not null default now()
);
comment on table queues.task_lease_release is 'Append-only: a lease released by its worker before expiry.';

-- Leases released by their workers do not count towards abandoning a task.
alter table queues.task_pending add column if not exists released_count integer not null default 0;

-- Each lease with the expiry in force: released, else extended, else as claimed.
create or replace view queues.task_lease_effective as
select l.task_lease_id, l.task_id, l.worker_id, l.leased_at,
       coalesce(r.released_at, e.expires_at, l.expires_at) as expires_at,
       r.released_at,
       coalesce(e.extensions, 0) as extensions
  from queues.task_lease l
  left join queues.task_lease_release r on r.task_lease_id = l.task_lease_id
  left join lateral (
    select max(x.expires_at) as expires_at, count(*)::integer as extensions
      from queues.task_lease_extension x
     where x.task_lease_id = l.task_lease_id
  ) e on true;
comment on view queues.task_lease_effective is 'Leases with their effective expiry (releases and heartbeats applied).';

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
  foreach _table in array array['task', 'task_lease', 'task_completed', 'error',
                                'task_lease_extension', 'task_lease_release'] loop
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
--! Included queues/claim.sql
-- Claiming: queues.claim_tasks (batch), queues.dequeue_next_available_task (the seeds'
-- single claim), both on top of queues.claim_tasks_at, which takes the clock as an
-- argument so tests can move time forward. Only the owner may call claim_tasks_at:
-- a worker that chose its own clock could take live leases.
--
-- Poison tasks: a task that comes up for claiming after _max_leases leases expired
-- without completion (releases excepted) is completed as 'abandoned' with an error
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
    select p.task_id, p.current_lease_id,
           p.lease_count - p.released_count >= _max_leases as poisoned,
           p.lease_count - p.released_count as expired_leases
      from queues.task_pending p
     where p.available_at <= _now
       and (_task_types is null or p.task_type = any (_task_types))
     order by p.priority desc, p.scheduled_at, p.task_id
     limit _limit
       for update skip locked
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
    select pk.task_id, _worker_id, _now, _now + make_interval(secs => _lease_seconds)
      from picked pk
     where not pk.poisoned
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

-- Extends each given lease that is still its task's current lease to _now + _lease_seconds
-- and appends a queues.task_lease_extension fact. Parallel arrays of task and lease ids.
-- Returns the leases extended; a lease missing from the result was lost (the task was
-- re-claimed after an expiry, or completed).
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
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);
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
    returning p.task_id, p.current_lease_id, p.available_at
  ),
  recorded as (
    insert into queues.task_lease_extension (task_lease_id, extended_at, expires_at)
    select e.current_lease_id, _now, e.available_at from extended e
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
declare
  _released bigint[];
begin
  perform queues.assert_lease_pairs(_task_ids, _task_lease_ids);

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
    returning p.task_id, i.task_lease_id
  ),
  recorded as (
    insert into queues.task_lease_release (task_lease_id)
    select r.task_lease_id from released r
    on conflict do nothing
  )
  select array_agg(r.task_id order by r.task_id) into _released from released r;

  if _released is not null then
    perform pg_notify('queues_task_ready', '');
  end if;
  return query select unnest(coalesce(_released, '{}'));
end;
$$;
--! EndIncluded queues/lease.sql
--! Included queues/fail.sql
-- queues.fail_task: record an operational error against a task. Append-only and not
-- terminal: the worker completes the task afterwards (supervisors decide on retries).
-- Fenced like completion: with _task_lease_id, only the task's newest lease, not
-- released, may record.

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
       or exists (select 1 from queues.task_lease_release r where r.task_lease_id = _task_lease_id) then
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
-- at its scheduled time or at the effective expiry of its newest lease (heartbeats and
-- releases applied), whichever is later.
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
    (task_id, task_type, priority, scheduled_at, resource_key, available_at, current_lease_id,
     lease_count, released_count)
  select t.task_id, t.task_type, t.priority, t.scheduled_at, t.resource_key,
         greatest(t.scheduled_at, l.expires_at),
         case when l.released_at is null then l.task_lease_id end,
         coalesce(l.lease_count, 0), coalesce(l.released_count, 0)
    from queues.task t
    left join lateral (
      select le.task_lease_id, le.expires_at, le.released_at,
             count(*) over () :: integer as lease_count,
             count(le.released_at) over () :: integer as released_count
        from queues.task_lease_effective le
       where le.task_id = t.task_id
       order by le.task_lease_id desc
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
--   :DATABASE_WORKER  the worker: claim, extend and release leases, complete, fail.
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
  queues.complete_tasks(bigint[], bigint[], text[]),
  queues.fail_task(bigint, text, bigint)
to :DATABASE_WORKER;

grant execute on function
  queues.enqueue(text, jsonb, timestamptz, integer, text, integer),
  queues.enqueue_many(jsonb)
to :DATABASE_APP;
--! EndIncluded queues/privileges.sql
--! Included internal/settings.sql
-- Operational settings, owner-managed. Not facts: a knob an operator (or a test) turns.
--   backoff_scale  multiplies every supervisor backoff (default 1). 0.01 turns the
--                  5 s first retry into 50 ms, for tests and the demo.

create table if not exists internal.setting (
  name       text primary key check (name in ('backoff_scale')),
  value      text not null,
  updated_at timestamptz not null default now()
);
comment on table internal.setting is 'Operational settings (owner only). See sql/internal/settings.sql.';

-- The wait before a supervisor's next check: 5 s * 2^_exponent, at most _cap_seconds,
-- times backoff_scale.
create or replace function internal.backoff(_exponent integer, _cap_seconds integer)
  returns interval
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select make_interval(secs =>
    least(_cap_seconds, 5 * power(2, greatest(coalesce(_exponent, 0), 0)))
    * coalesce((select s.value::numeric from internal.setting s where s.name = 'backoff_scale'), 1))
$$;
--! EndIncluded internal/settings.sql

--! split: 200-domains.sql
-- Business domains (sql/comms, sql/files, sql/accounts, sql/learning, sql/api).
-- Order matters: tables before the tables and functions that use them, privileges last.
--! Included comms/schema.sql
-- comms: messages and the two send processes (email, sms).
--
-- Domain data (written once by the kickoff functions):
--   message, email_message, sms_message
-- Facts (append-only; a statement-level trigger refuses updates), per process X in
-- (send_email, send_sms):
--   X_task                the root: one per message, created by the kickoff
--   X_supervisor_run      one row per supervisor run that was not terminal (run cap)
--   X_attempt             one row per scheduled provider call
--   X_attempt_succeeded   the provider accepted the attempt (at most one per attempt)
--   X_attempt_failed      the provider refused it or the worker failed (at most one)
--   X_task_succeeded      terminal: the supervisor saw a succeeded attempt
--   X_task_failed         terminal: attempts or supervisor runs exhausted
--
-- Idempotent: re-included by later migrations.

create schema if not exists comms;
revoke all on schema comms from public;

create table if not exists comms.message (
  message_id      bigint generated always as identity primary key,
  channel         text not null check (channel in ('email', 'sms')),
  -- Set by apps that retry a send request: the same key returns the same message.
  idempotency_key text unique check (length(idempotency_key) between 1 and 200),
  created_at      timestamptz not null default now()
);
comment on table comms.message is 'One message to send, on one channel. Written once by a kickoff.';

create table if not exists comms.email_message (
  message_id   bigint primary key references comms.message on delete cascade,
  from_address text not null check (length(from_address) between 3 and 320),
  to_address   text not null check (length(to_address) between 3 and 320),
  subject      text not null check (length(subject) between 1 and 998),
  html         text not null check (length(html) <= 1000000),
  text_body    text check (length(text_body) <= 1000000),
  reply_to     text check (length(reply_to) between 3 and 320)
);

create table if not exists comms.sms_message (
  message_id  bigint primary key references comms.message on delete cascade,
  to_number   text not null check (to_number ~ '^\+[1-9][0-9]{6,14}$'),
  from_number text check (from_number ~ '^\+[1-9][0-9]{6,14}$'),
  body        text not null check (length(body) between 1 and 1600)
);

-- send_email ------------------------------------------------------------------------

create table if not exists comms.send_email_task (
  send_email_task_id bigint generated always as identity primary key,
  message_id         bigint not null unique references comms.email_message on delete restrict,
  scheduled_at       timestamptz not null default now(),
  created_at         timestamptz not null default now()
);

create table if not exists comms.send_email_supervisor_run (
  send_email_supervisor_run_id bigint generated always as identity primary key,
  send_email_task_id bigint not null references comms.send_email_task on delete cascade,
  created_at         timestamptz not null default now()
);
create index if not exists send_email_supervisor_run_task_idx
  on comms.send_email_supervisor_run (send_email_task_id);

create table if not exists comms.send_email_attempt (
  send_email_attempt_id bigint generated always as identity primary key,
  send_email_task_id    bigint not null references comms.send_email_task on delete cascade,
  created_at            timestamptz not null default now()
);
create index if not exists send_email_attempt_task_idx on comms.send_email_attempt (send_email_task_id);

create table if not exists comms.send_email_attempt_succeeded (
  send_email_attempt_id bigint primary key references comms.send_email_attempt on delete cascade,
  worker_payload        jsonb,
  created_at            timestamptz not null default now()
);

create table if not exists comms.send_email_attempt_failed (
  send_email_attempt_id bigint primary key references comms.send_email_attempt on delete cascade,
  error_message         text not null,
  created_at            timestamptz not null default now()
);

create table if not exists comms.send_email_task_succeeded (
  send_email_task_id bigint primary key references comms.send_email_task on delete cascade,
  created_at         timestamptz not null default now()
);

create table if not exists comms.send_email_task_failed (
  send_email_task_id bigint primary key references comms.send_email_task on delete cascade,
  reason             text not null,
  created_at         timestamptz not null default now()
);

-- send_sms --------------------------------------------------------------------------

create table if not exists comms.send_sms_task (
  send_sms_task_id bigint generated always as identity primary key,
  message_id       bigint not null unique references comms.sms_message on delete restrict,
  scheduled_at     timestamptz not null default now(),
  created_at       timestamptz not null default now()
);

create table if not exists comms.send_sms_supervisor_run (
  send_sms_supervisor_run_id bigint generated always as identity primary key,
  send_sms_task_id bigint not null references comms.send_sms_task on delete cascade,
  created_at       timestamptz not null default now()
);
create index if not exists send_sms_supervisor_run_task_idx
  on comms.send_sms_supervisor_run (send_sms_task_id);

create table if not exists comms.send_sms_attempt (
  send_sms_attempt_id bigint generated always as identity primary key,
  send_sms_task_id    bigint not null references comms.send_sms_task on delete cascade,
  created_at          timestamptz not null default now()
);
create index if not exists send_sms_attempt_task_idx on comms.send_sms_attempt (send_sms_task_id);

create table if not exists comms.send_sms_attempt_succeeded (
  send_sms_attempt_id bigint primary key references comms.send_sms_attempt on delete cascade,
  worker_payload      jsonb,
  created_at          timestamptz not null default now()
);

create table if not exists comms.send_sms_attempt_failed (
  send_sms_attempt_id bigint primary key references comms.send_sms_attempt on delete cascade,
  error_message       text not null,
  created_at          timestamptz not null default now()
);

create table if not exists comms.send_sms_task_succeeded (
  send_sms_task_id bigint primary key references comms.send_sms_task on delete cascade,
  created_at       timestamptz not null default now()
);

create table if not exists comms.send_sms_task_failed (
  send_sms_task_id bigint primary key references comms.send_sms_task on delete cascade,
  reason           text not null,
  created_at       timestamptz not null default now()
);

-- Every table here is append-only.
do $$
declare
  _table text;
begin
  foreach _table in array array[
    'message', 'email_message', 'sms_message',
    'send_email_task', 'send_email_supervisor_run', 'send_email_attempt',
    'send_email_attempt_succeeded', 'send_email_attempt_failed',
    'send_email_task_succeeded', 'send_email_task_failed',
    'send_sms_task', 'send_sms_supervisor_run', 'send_sms_attempt',
    'send_sms_attempt_succeeded', 'send_sms_attempt_failed',
    'send_sms_task_succeeded', 'send_sms_task_failed'
  ] loop
    if not exists (select 1 from pg_trigger
                    where tgrelid = to_regclass(format('comms.%I', _table)) and tgname = 'forbid_update') then
      execute format('create trigger forbid_update before update on comms.%I
                        for each statement execute function queues.forbid_fact_update()', _table);
    end if;
  end loop;
end;
$$;

-- Refuses to run a supervisor outside READ COMMITTED. A supervisor serialises on its
-- root row, then reads facts. Under READ COMMITTED every statement after the lock wait
-- takes a fresh snapshot and sees what the previous holder committed; under REPEATABLE
-- READ (or SERIALIZABLE) the snapshot is from before the wait, so two runs would both
-- see "no outstanding attempt" and schedule two.
create or replace function comms.assert_read_committed(_function_name text)
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
--! EndIncluded comms/schema.sql
--! Included comms/util.sql
-- Small helpers shared by the comms processes. Called only from definer functions:
-- no grants.

-- A positive bigint id read from a jsonb object, or NULL when the key is missing, not
-- an integer, or out of range. Supervisors and handlers validate with this instead of
-- casting, so a malformed payload is a validation failure, not an exception.
create or replace function comms.id_from_payload(_payload jsonb, _key text)
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

-- The email address check of the provider schema (@org/handler-types emailPayload uses
-- zod's z.email()): kickoffs refuse what the worker would refuse later.
create or replace function comms.is_email_address(_address text)
  returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select _address is not null and length(_address) <= 320
     and _address ~ '^(?!\.)(?!.*\.\.)([A-Za-z0-9_''+\-\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\-]*\.)+[A-Za-z]{2,}$'
$$;

-- An E.164 phone number, as the provider schema (smsPayload) requires.
create or replace function comms.is_e164_number(_number text)
  returns boolean
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select _number is not null and _number ~ '^\+[1-9][0-9]{6,14}$'
$$;

-- The envelope for input a function cannot act on: non-retriable, nothing written.
create or replace function comms.validation_failure(_message text)
  returns jsonb
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('success', false, 'validation_failure_message', _message)
$$;
--! EndIncluded comms/util.sql
--! Included comms/email.sql
-- The send-email process: facts → logic → effects, then the handlers the worker calls
-- around the provider, then the kickoffs.
--
--   comms.send_email(...)             app: create the message and kick off (idempotent)
--   comms.kickoff_send_email(id)      root task + first supervisor task (idempotent)
--   comms.send_email_supervisor       db_function: decides, schedules, re-enqueues itself
--   comms.get_email_payload           before_handler: the provider payload
--   comms.record_email_success        success_handler: attempt succeeded fact
--   comms.record_email_failure        error_handler: attempt failed fact

-- Limits ------------------------------------------------------------------------------

-- Provider calls per message: the first and two retries.
create or replace function comms.send_email_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 3 $$;

-- Non-terminal supervisor runs per message. A loop bug (or a flood of duplicate
-- supervisor tasks) ends in send_email_task_failed('run_limit_reached') instead of
-- running forever. With the backoff below, 30 runs span about 21 hours.
create or replace function comms.send_email_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 30 $$;

-- Facts -------------------------------------------------------------------------------

create or replace function comms.has_send_email_succeeded_attempt(_send_email_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from comms.send_email_attempt a
      join comms.send_email_attempt_succeeded s using (send_email_attempt_id)
     where a.send_email_task_id = _send_email_task_id)
$$;

create or replace function comms.count_send_email_attempts(_send_email_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_email_attempt a
   where a.send_email_task_id = _send_email_task_id
$$;

-- Failed attempts. An attempt with both outcomes (a redelivered task whose success
-- arrived after a failure) counts as succeeded, not failed.
create or replace function comms.count_send_email_failed_attempts(_send_email_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_email_attempt a
    join comms.send_email_attempt_failed f using (send_email_attempt_id)
   where a.send_email_task_id = _send_email_task_id
     and not exists (select 1 from comms.send_email_attempt_succeeded s
                      where s.send_email_attempt_id = a.send_email_attempt_id)
$$;

-- Attempts with no outcome yet: the provider call is queued or in flight.
create or replace function comms.count_send_email_outstanding_attempts(_send_email_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_email_attempt a
   where a.send_email_task_id = _send_email_task_id
     and not exists (select 1 from comms.send_email_attempt_succeeded s
                      where s.send_email_attempt_id = a.send_email_attempt_id)
     and not exists (select 1 from comms.send_email_attempt_failed f
                      where f.send_email_attempt_id = a.send_email_attempt_id)
$$;

create or replace function comms.count_send_email_supervisor_runs(_send_email_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_email_supervisor_run r
   where r.send_email_task_id = _send_email_task_id
$$;

create or replace function comms.has_send_email_task_succeeded(_send_email_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from comms.send_email_task_succeeded t
                  where t.send_email_task_id = _send_email_task_id)
$$;

-- The terminal failure reason, or NULL while the process has not failed.
create or replace function comms.get_send_email_task_failure(_send_email_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from comms.send_email_task_failed t
   where t.send_email_task_id = _send_email_task_id
$$;

-- Everything the supervisor decides on, in one record: call it by hand to see what
-- the supervisor saw (select * from comms.send_email_supervisor_facts(123)).
create or replace function comms.send_email_supervisor_facts(
  _send_email_task_id bigint,
  out has_task_succeeded boolean,
  out task_failure       text,
  out has_success        boolean,
  out num_attempts       integer,
  out num_failures       integer,
  out num_outstanding    integer,
  out num_runs           integer,
  out scheduled_at       timestamptz
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select comms.has_send_email_task_succeeded(t.send_email_task_id),
         comms.get_send_email_task_failure(t.send_email_task_id),
         comms.has_send_email_succeeded_attempt(t.send_email_task_id),
         comms.count_send_email_attempts(t.send_email_task_id),
         comms.count_send_email_failed_attempts(t.send_email_task_id),
         comms.count_send_email_outstanding_attempts(t.send_email_task_id),
         comms.count_send_email_supervisor_runs(t.send_email_task_id),
         t.scheduled_at
    from comms.send_email_task t
   where t.send_email_task_id = _send_email_task_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row for the rest of the transaction; false when there is no such row.
-- FOR NO KEY UPDATE, not FOR UPDATE: it serialises supervisors exactly as well (the two
-- modes conflict with themselves), but it does not conflict with the FOR KEY SHARE lock
-- that inserting a referencing row takes, so handlers and other writers of facts that
-- reference the root never wait on a running supervisor.
create or replace function comms.lock_send_email_task(_send_email_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from comms.send_email_task t
   where t.send_email_task_id = _send_email_task_id
     for no key update;
  return found;
end;
$$;

create or replace function comms.record_send_email_supervisor_run(_send_email_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_email_supervisor_run (send_email_task_id) values (_send_email_task_id)
$$;

create or replace function comms.record_send_email_task_succeeded(_send_email_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_email_task_succeeded (send_email_task_id) values (_send_email_task_id)
  on conflict do nothing
$$;

create or replace function comms.record_send_email_task_failed(_send_email_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_email_task_failed (send_email_task_id, reason) values (_send_email_task_id, _reason)
  on conflict do nothing
$$;

-- Records an attempt and enqueues the email channel task for it; returns the attempt id.
create or replace function comms.schedule_email_attempt(_send_email_task_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint;
begin
  insert into comms.send_email_attempt (send_email_task_id) values (_send_email_task_id)
  returning send_email_attempt_id into _attempt_id;

  perform queues.enqueue('email', jsonb_build_object(
    'task_type', 'email',
    'send_email_task_id', _send_email_task_id,
    'send_email_attempt_id', _attempt_id,
    'before_handler', 'comms.get_email_payload',
    'success_handler', 'comms.record_email_success',
    'error_handler', 'comms.record_email_failure'));
  return _attempt_id;
end;
$$;

-- Enqueues the next supervisor run and returns its time: after an exponential backoff
-- on the runs so far, 5 s · 2^(runs − 1), capped at an hour. Every failure costs a run, so retries back off exponentially; and waiting on
-- a slow attempt backs off too, instead of burning the run cap in minutes.
create or replace function comms.schedule_send_email_recheck(
  _send_email_task_id bigint, _num_runs integer
) returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz :=
    now() + internal.backoff(_num_runs - 1, 3600);
begin
  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'comms.send_email_supervisor',
    'send_email_task_id', _send_email_task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Drives one send_email_task to a terminal fact. Payload: {send_email_task_id}.
-- Returns {success: true, payload: {status, ...}} while running or on success,
-- {status: 'max_attempts_reached' | 'run_limit_reached', payload} when the process
-- failed, {success: false, validation_failure_message} for a bad payload. Raises 25000
-- outside READ COMMITTED.
create or replace function comms.send_email_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := comms.id_from_payload(payload, 'send_email_task_id');
  _facts record;
  _attempt_id bigint;
  _next_check_at timestamptz;
begin
  -- 1. Validation.
  if _task_id is null then
    return comms.validation_failure('send_email_task_id must be a positive integer');
  end if;
  perform comms.assert_read_committed('comms.send_email_supervisor');

  -- 2. Lock the root, then read facts (in this order: facts read after the lock wait
  --    include everything the previous holder committed).
  if not comms.lock_send_email_task(_task_id) then
    return comms.validation_failure(format('send_email_task %s not found', _task_id));
  end if;

  -- 3. Facts.
  _facts := comms.send_email_supervisor_facts(_task_id);

  -- 4. Logic and effects. Terminal states first.
  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform comms.record_send_email_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures >= comms.send_email_max_attempts() then
    perform comms.record_send_email_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached',
                              'payload', jsonb_build_object('num_failures', _facts.num_failures));
  end if;
  if _facts.num_runs >= comms.send_email_max_supervisor_runs() then
    perform comms.record_send_email_task_failed(_task_id, 'run_limit_reached');
    return jsonb_build_object('status', 'run_limit_reached',
                              'payload', jsonb_build_object('num_runs', _facts.num_runs));
  end if;

  perform comms.record_send_email_supervisor_run(_task_id);

  -- At most one attempt in flight.
  if _facts.num_outstanding = 0 then
    _attempt_id := comms.schedule_email_attempt(_task_id);
  end if;

  _next_check_at := comms.schedule_send_email_recheck(_task_id, _facts.num_runs + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
    'send_email_attempt_id', _attempt_id,
    'next_check_at', _next_check_at));
end;
$$;

-- Handlers ----------------------------------------------------------------------------

-- before_handler. Payload: the email task's ({send_email_attempt_id, ...}). Returns the
-- provider payload of @org/handler-types emailPayload, with idempotency_key = the
-- attempt id, so a redelivered attempt is deduplicated by the provider. An attempt that
-- already has an outcome is not sent again (validation failure).
create or replace function comms.get_email_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := comms.id_from_payload(payload, 'send_email_attempt_id');
  _provider_payload jsonb;
begin
  if _attempt_id is null then
    return comms.validation_failure('send_email_attempt_id must be a positive integer');
  end if;
  if exists (select 1 from comms.send_email_attempt_succeeded s where s.send_email_attempt_id = _attempt_id)
     or exists (select 1 from comms.send_email_attempt_failed f where f.send_email_attempt_id = _attempt_id) then
    return comms.validation_failure(format('send_email_attempt %s already has an outcome; not sending it again', _attempt_id));
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
           'message_id', m.message_id,
           'idempotency_key', a.send_email_attempt_id::text,
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

  if _provider_payload is null then
    return comms.validation_failure(format('send_email_attempt %s not found', _attempt_id));
  end if;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- success_handler. Body: {original_payload, worker_payload}. Records the attempt's
-- success; a second delivery changes nothing.
create or replace function comms.record_email_success(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := comms.id_from_payload(payload -> 'original_payload', 'send_email_attempt_id');
begin
  if _attempt_id is null then
    return comms.validation_failure('original_payload.send_email_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from comms.send_email_attempt a where a.send_email_attempt_id = _attempt_id) then
    return comms.validation_failure(format('send_email_attempt %s not found', _attempt_id));
  end if;
  insert into comms.send_email_attempt_succeeded (send_email_attempt_id, worker_payload)
  values (_attempt_id, payload -> 'worker_payload')
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

-- error_handler. Body: {original_payload, error}. Records the attempt's failure unless
-- it already succeeded; a second delivery changes nothing.
create or replace function comms.record_email_failure(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := comms.id_from_payload(payload -> 'original_payload', 'send_email_attempt_id');
begin
  if _attempt_id is null then
    return comms.validation_failure('original_payload.send_email_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from comms.send_email_attempt a where a.send_email_attempt_id = _attempt_id) then
    return comms.validation_failure(format('send_email_attempt %s not found', _attempt_id));
  end if;
  insert into comms.send_email_attempt_failed (send_email_attempt_id, error_message)
  select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
   where not exists (select 1 from comms.send_email_attempt_succeeded s
                      where s.send_email_attempt_id = _attempt_id)
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

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

  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'comms.send_email_supervisor',
    'send_email_task_id', send_email_task_id), _at);
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
-- The send-SMS process: facts → logic → effects, then the handlers the worker calls
-- around the provider, then the kickoffs.
--
--   comms.send_sms(...)             app: create the message and kick off (idempotent)
--   comms.kickoff_send_sms(id)      root task + first supervisor task (idempotent)
--   comms.send_sms_supervisor       db_function: decides, schedules, re-enqueues itself
--   comms.get_sms_payload           before_handler: the provider payload
--   comms.record_sms_success        success_handler: attempt succeeded fact
--   comms.record_sms_failure        error_handler: attempt failed fact

-- Limits ------------------------------------------------------------------------------

-- Provider calls per message: the first and two retries.
create or replace function comms.send_sms_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 3 $$;

-- Non-terminal supervisor runs per message. A loop bug (or a flood of duplicate
-- supervisor tasks) ends in send_sms_task_failed('run_limit_reached') instead of
-- running forever. With the backoff below, 30 runs span about 21 hours.
create or replace function comms.send_sms_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 30 $$;

-- Facts -------------------------------------------------------------------------------

create or replace function comms.has_send_sms_succeeded_attempt(_send_sms_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from comms.send_sms_attempt a
      join comms.send_sms_attempt_succeeded s using (send_sms_attempt_id)
     where a.send_sms_task_id = _send_sms_task_id)
$$;

create or replace function comms.count_send_sms_attempts(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_attempt a
   where a.send_sms_task_id = _send_sms_task_id
$$;

-- Failed attempts. An attempt with both outcomes (a redelivered task whose success
-- arrived after a failure) counts as succeeded, not failed.
create or replace function comms.count_send_sms_failed_attempts(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_attempt a
    join comms.send_sms_attempt_failed f using (send_sms_attempt_id)
   where a.send_sms_task_id = _send_sms_task_id
     and not exists (select 1 from comms.send_sms_attempt_succeeded s
                      where s.send_sms_attempt_id = a.send_sms_attempt_id)
$$;

-- Attempts with no outcome yet: the provider call is queued or in flight.
create or replace function comms.count_send_sms_outstanding_attempts(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_attempt a
   where a.send_sms_task_id = _send_sms_task_id
     and not exists (select 1 from comms.send_sms_attempt_succeeded s
                      where s.send_sms_attempt_id = a.send_sms_attempt_id)
     and not exists (select 1 from comms.send_sms_attempt_failed f
                      where f.send_sms_attempt_id = a.send_sms_attempt_id)
$$;

create or replace function comms.count_send_sms_supervisor_runs(_send_sms_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from comms.send_sms_supervisor_run r
   where r.send_sms_task_id = _send_sms_task_id
$$;

create or replace function comms.has_send_sms_task_succeeded(_send_sms_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from comms.send_sms_task_succeeded t
                  where t.send_sms_task_id = _send_sms_task_id)
$$;

-- The terminal failure reason, or NULL while the process has not failed.
create or replace function comms.get_send_sms_task_failure(_send_sms_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from comms.send_sms_task_failed t
   where t.send_sms_task_id = _send_sms_task_id
$$;

-- Everything the supervisor decides on, in one record: call it by hand to see what
-- the supervisor saw (select * from comms.send_sms_supervisor_facts(123)).
create or replace function comms.send_sms_supervisor_facts(
  _send_sms_task_id bigint,
  out has_task_succeeded boolean,
  out task_failure       text,
  out has_success        boolean,
  out num_attempts       integer,
  out num_failures       integer,
  out num_outstanding    integer,
  out num_runs           integer,
  out scheduled_at       timestamptz
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select comms.has_send_sms_task_succeeded(t.send_sms_task_id),
         comms.get_send_sms_task_failure(t.send_sms_task_id),
         comms.has_send_sms_succeeded_attempt(t.send_sms_task_id),
         comms.count_send_sms_attempts(t.send_sms_task_id),
         comms.count_send_sms_failed_attempts(t.send_sms_task_id),
         comms.count_send_sms_outstanding_attempts(t.send_sms_task_id),
         comms.count_send_sms_supervisor_runs(t.send_sms_task_id),
         t.scheduled_at
    from comms.send_sms_task t
   where t.send_sms_task_id = _send_sms_task_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row for the rest of the transaction; false when there is no such row.
-- FOR NO KEY UPDATE, not FOR UPDATE: it serialises supervisors exactly as well (the two
-- modes conflict with themselves), but it does not conflict with the FOR KEY SHARE lock
-- that inserting a referencing row takes, so handlers and other writers of facts that
-- reference the root never wait on a running supervisor.
create or replace function comms.lock_send_sms_task(_send_sms_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from comms.send_sms_task t
   where t.send_sms_task_id = _send_sms_task_id
     for no key update;
  return found;
end;
$$;

create or replace function comms.record_send_sms_supervisor_run(_send_sms_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_sms_supervisor_run (send_sms_task_id) values (_send_sms_task_id)
$$;

create or replace function comms.record_send_sms_task_succeeded(_send_sms_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_sms_task_succeeded (send_sms_task_id) values (_send_sms_task_id)
  on conflict do nothing
$$;

create or replace function comms.record_send_sms_task_failed(_send_sms_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into comms.send_sms_task_failed (send_sms_task_id, reason) values (_send_sms_task_id, _reason)
  on conflict do nothing
$$;

-- Records an attempt and enqueues the sms channel task for it; returns the attempt id.
create or replace function comms.schedule_sms_attempt(_send_sms_task_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint;
begin
  insert into comms.send_sms_attempt (send_sms_task_id) values (_send_sms_task_id)
  returning send_sms_attempt_id into _attempt_id;

  perform queues.enqueue('sms', jsonb_build_object(
    'task_type', 'sms',
    'send_sms_task_id', _send_sms_task_id,
    'send_sms_attempt_id', _attempt_id,
    'before_handler', 'comms.get_sms_payload',
    'success_handler', 'comms.record_sms_success',
    'error_handler', 'comms.record_sms_failure'));
  return _attempt_id;
end;
$$;

-- Enqueues the next supervisor run and returns its time: after an exponential backoff
-- on the runs so far, 5 s · 2^(runs − 1), capped at an hour. Every failure costs a run, so retries back off exponentially; and waiting on
-- a slow attempt backs off too, instead of burning the run cap in minutes.
create or replace function comms.schedule_send_sms_recheck(
  _send_sms_task_id bigint, _num_runs integer
) returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz :=
    now() + internal.backoff(_num_runs - 1, 3600);
begin
  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'comms.send_sms_supervisor',
    'send_sms_task_id', _send_sms_task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Drives one send_sms_task to a terminal fact. Payload: {send_sms_task_id}.
-- Returns {success: true, payload: {status, ...}} while running or on success,
-- {status: 'max_attempts_reached' | 'run_limit_reached', payload} when the process
-- failed, {success: false, validation_failure_message} for a bad payload. Raises 25000
-- outside READ COMMITTED.
create or replace function comms.send_sms_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := comms.id_from_payload(payload, 'send_sms_task_id');
  _facts record;
  _attempt_id bigint;
  _next_check_at timestamptz;
begin
  -- 1. Validation.
  if _task_id is null then
    return comms.validation_failure('send_sms_task_id must be a positive integer');
  end if;
  perform comms.assert_read_committed('comms.send_sms_supervisor');

  -- 2. Lock the root, then read facts (in this order: facts read after the lock wait
  --    include everything the previous holder committed).
  if not comms.lock_send_sms_task(_task_id) then
    return comms.validation_failure(format('send_sms_task %s not found', _task_id));
  end if;

  -- 3. Facts.
  _facts := comms.send_sms_supervisor_facts(_task_id);

  -- 4. Logic and effects. Terminal states first.
  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform comms.record_send_sms_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures >= comms.send_sms_max_attempts() then
    perform comms.record_send_sms_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached',
                              'payload', jsonb_build_object('num_failures', _facts.num_failures));
  end if;
  if _facts.num_runs >= comms.send_sms_max_supervisor_runs() then
    perform comms.record_send_sms_task_failed(_task_id, 'run_limit_reached');
    return jsonb_build_object('status', 'run_limit_reached',
                              'payload', jsonb_build_object('num_runs', _facts.num_runs));
  end if;

  perform comms.record_send_sms_supervisor_run(_task_id);

  -- At most one attempt in flight.
  if _facts.num_outstanding = 0 then
    _attempt_id := comms.schedule_sms_attempt(_task_id);
  end if;

  _next_check_at := comms.schedule_send_sms_recheck(_task_id, _facts.num_runs + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
    'send_sms_attempt_id', _attempt_id,
    'next_check_at', _next_check_at));
end;
$$;

-- Handlers ----------------------------------------------------------------------------

-- before_handler. Payload: the sms task's ({send_sms_attempt_id, ...}). Returns the
-- provider payload of @org/handler-types smsPayload, with idempotency_key = the
-- attempt id, so a redelivered attempt is deduplicated by the provider. An attempt that
-- already has an outcome is not sent again (validation failure).
create or replace function comms.get_sms_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := comms.id_from_payload(payload, 'send_sms_attempt_id');
  _provider_payload jsonb;
begin
  if _attempt_id is null then
    return comms.validation_failure('send_sms_attempt_id must be a positive integer');
  end if;
  if exists (select 1 from comms.send_sms_attempt_succeeded s where s.send_sms_attempt_id = _attempt_id)
     or exists (select 1 from comms.send_sms_attempt_failed f where f.send_sms_attempt_id = _attempt_id) then
    return comms.validation_failure(format('send_sms_attempt %s already has an outcome; not sending it again', _attempt_id));
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
           'message_id', m.message_id,
           'idempotency_key', a.send_sms_attempt_id::text,
           'to_number', m.to_number,
           'from_number', m.from_number,
           'body', m.body))
    into _provider_payload
    from comms.send_sms_attempt a
    join comms.send_sms_task t using (send_sms_task_id)
    join comms.sms_message m using (message_id)
   where a.send_sms_attempt_id = _attempt_id;

  if _provider_payload is null then
    return comms.validation_failure(format('send_sms_attempt %s not found', _attempt_id));
  end if;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- success_handler. Body: {original_payload, worker_payload}. Records the attempt's
-- success; a second delivery changes nothing.
create or replace function comms.record_sms_success(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := comms.id_from_payload(payload -> 'original_payload', 'send_sms_attempt_id');
begin
  if _attempt_id is null then
    return comms.validation_failure('original_payload.send_sms_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from comms.send_sms_attempt a where a.send_sms_attempt_id = _attempt_id) then
    return comms.validation_failure(format('send_sms_attempt %s not found', _attempt_id));
  end if;
  insert into comms.send_sms_attempt_succeeded (send_sms_attempt_id, worker_payload)
  values (_attempt_id, payload -> 'worker_payload')
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

-- error_handler. Body: {original_payload, error}. Records the attempt's failure unless
-- it already succeeded; a second delivery changes nothing.
create or replace function comms.record_sms_failure(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := comms.id_from_payload(payload -> 'original_payload', 'send_sms_attempt_id');
begin
  if _attempt_id is null then
    return comms.validation_failure('original_payload.send_sms_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from comms.send_sms_attempt a where a.send_sms_attempt_id = _attempt_id) then
    return comms.validation_failure(format('send_sms_attempt %s not found', _attempt_id));
  end if;
  insert into comms.send_sms_attempt_failed (send_sms_attempt_id, error_message)
  select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
   where not exists (select 1 from comms.send_sms_attempt_succeeded s
                      where s.send_sms_attempt_id = _attempt_id)
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

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

  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'comms.send_sms_supervisor',
    'send_sms_task_id', send_sms_task_id), _at);
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
--! Included comms/privileges.sql
-- Who may call what in comms. The worker runs the supervisors and handlers through
-- internal.run_function (granted and registered here); apps call the send functions.
-- Everything else (facts, effects, kickoff_send_*) runs only inside these definer
-- functions and has no grant.

revoke all on all tables in schema comms from public;
revoke all on all sequences in schema comms from public;
revoke execute on all functions in schema comms from public;

grant usage on schema comms to :DATABASE_WORKER, :DATABASE_APP;

grant execute on function
  comms.send_email_supervisor(jsonb),
  comms.get_email_payload(jsonb),
  comms.record_email_success(jsonb),
  comms.record_email_failure(jsonb),
  comms.send_sms_supervisor(jsonb),
  comms.get_sms_payload(jsonb),
  comms.record_sms_success(jsonb),
  comms.record_sms_failure(jsonb)
to :DATABASE_WORKER;

select internal.register_runnable_function('comms.send_email_supervisor(jsonb)');
select internal.register_runnable_function('comms.get_email_payload(jsonb)');
select internal.register_runnable_function('comms.record_email_success(jsonb)');
select internal.register_runnable_function('comms.record_email_failure(jsonb)');
select internal.register_runnable_function('comms.send_sms_supervisor(jsonb)');
select internal.register_runnable_function('comms.get_sms_payload(jsonb)');
select internal.register_runnable_function('comms.record_sms_success(jsonb)');
select internal.register_runnable_function('comms.record_sms_failure(jsonb)');

grant execute on function
  comms.send_email(text, text, text, text, text, text, timestamptz, text),
  comms.send_sms(text, text, text, timestamptz, text)
to :DATABASE_APP;
--! EndIncluded comms/privileges.sql
--! Included accounts/schema.sql
-- accounts: accounts, their flags, and the two processes of account deletion.
--
-- Domain data: account (mutable: anonymization overwrites its personal fields).
-- Facts (append-only; a statement-level trigger refuses updates):
--   account_flag                         'deleted' (deletion requested), 'anonymized'
--   account_deletion_task                root: one per account, from api.request_account_deletion
--   account_deletion_supervisor_run      one row per non-terminal supervisor run (run cap)
--   account_deletion_task_succeeded      terminal: files deleted and account anonymized
--   account_deletion_task_failed         terminal: a child is stuck, or runs exhausted
--   account_anonymization_task           root: one per account, started by the deletion
--   account_anonymization_attempt        one row per anonymization run (pure SQL, in-line)
--   account_anonymization_attempt_succeeded / _failed
--   account_anonymization_task_succeeded / _failed   terminal
-- Test hook (owner only, not a fact): anonymization_failure_injection.

create schema if not exists accounts;
revoke all on schema accounts from public;

create table if not exists accounts.account (
  account_id   bigint generated always as identity primary key,
  email        text check (length(email) <= 320),
  display_name text check (length(display_name) <= 200),
  created_at   timestamptz not null default now()
);
comment on table accounts.account is
  'Domain data, not a fact table: accounts.anonymize_account overwrites the personal fields.';

create table if not exists accounts.account_flag (
  account_id bigint not null references accounts.account on delete cascade,
  flag       text not null check (flag in ('deleted', 'anonymized')),
  created_at timestamptz not null default now(),
  primary key (account_id, flag)
);

-- Makes accounts.anonymize_account fail for one account, with error_message. A test
-- hook for the "anonymization stuck" path: only the owner can write it (no role has
-- table privileges), so neither a worker nor an app can set it.
create table if not exists accounts.anonymization_failure_injection (
  account_id    bigint primary key references accounts.account on delete cascade,
  error_message text not null
);

create table if not exists accounts.account_deletion_task (
  account_deletion_task_id bigint generated always as identity primary key,
  account_id               bigint not null unique references accounts.account on delete restrict,
  created_at               timestamptz not null default now()
);

create table if not exists accounts.account_deletion_supervisor_run (
  account_deletion_supervisor_run_id bigint generated always as identity primary key,
  account_deletion_task_id bigint not null references accounts.account_deletion_task on delete cascade,
  created_at               timestamptz not null default now()
);
create index if not exists account_deletion_supervisor_run_task_idx
  on accounts.account_deletion_supervisor_run (account_deletion_task_id);

create table if not exists accounts.account_deletion_task_succeeded (
  account_deletion_task_id bigint primary key references accounts.account_deletion_task on delete cascade,
  created_at               timestamptz not null default now()
);

create table if not exists accounts.account_deletion_task_failed (
  account_deletion_task_id bigint primary key references accounts.account_deletion_task on delete cascade,
  reason                   text not null,
  created_at               timestamptz not null default now()
);

create table if not exists accounts.account_anonymization_task (
  account_anonymization_task_id bigint generated always as identity primary key,
  account_id                    bigint not null unique references accounts.account on delete restrict,
  created_at                    timestamptz not null default now()
);

create table if not exists accounts.account_anonymization_attempt (
  account_anonymization_attempt_id bigint generated always as identity primary key,
  account_anonymization_task_id    bigint not null references accounts.account_anonymization_task on delete cascade,
  created_at                       timestamptz not null default now()
);
create index if not exists account_anonymization_attempt_task_idx
  on accounts.account_anonymization_attempt (account_anonymization_task_id);

create table if not exists accounts.account_anonymization_attempt_succeeded (
  account_anonymization_attempt_id bigint primary key references accounts.account_anonymization_attempt on delete cascade,
  created_at                       timestamptz not null default now()
);

create table if not exists accounts.account_anonymization_attempt_failed (
  account_anonymization_attempt_id bigint primary key references accounts.account_anonymization_attempt on delete cascade,
  error_message                    text not null,
  created_at                       timestamptz not null default now()
);

create table if not exists accounts.account_anonymization_task_succeeded (
  account_anonymization_task_id bigint primary key references accounts.account_anonymization_task on delete cascade,
  created_at                    timestamptz not null default now()
);

create table if not exists accounts.account_anonymization_task_failed (
  account_anonymization_task_id bigint primary key references accounts.account_anonymization_task on delete cascade,
  reason                        text not null,
  created_at                    timestamptz not null default now()
);

do $$
declare
  _table text;
begin
  foreach _table in array array[
    'account_flag', 'account_deletion_task', 'account_deletion_supervisor_run',
    'account_deletion_task_succeeded', 'account_deletion_task_failed',
    'account_anonymization_task', 'account_anonymization_attempt',
    'account_anonymization_attempt_succeeded', 'account_anonymization_attempt_failed',
    'account_anonymization_task_succeeded', 'account_anonymization_task_failed'
  ] loop
    if not exists (select 1 from pg_trigger
                    where tgrelid = to_regclass(format('accounts.%I', _table)) and tgname = 'forbid_update') then
      execute format('create trigger forbid_update before update on accounts.%I
                        for each statement execute function queues.forbid_fact_update()', _table);
    end if;
  end loop;
end;
$$;
--! EndIncluded accounts/schema.sql
--! Included files/schema.sql
-- files: stored objects and the file deletion process.
--
-- Domain data: file (one stored object, owned by an account). A completed upload is a
-- file row; upload intents are out of scope here.
-- Facts (append-only; a statement-level trigger refuses updates):
--   file_metadata                    metadata documents; the latest row is current
--   file_deletion_task               root: one per file
--   file_deletion_supervisor_run     one row per non-terminal supervisor run (run cap)
--   file_deletion_attempt            one row per scheduled file_delete channel task
--   file_deletion_attempt_succeeded / _failed
--   file_deletion_task_succeeded / _failed   terminal

create schema if not exists files;
revoke all on schema files from public;

create table if not exists files.file (
  file_id    bigint generated always as identity primary key,
  account_id bigint not null references accounts.account on delete restrict,
  -- The provider schema's bucket rule (@org/handler-types fileDeletePayload).
  bucket     text not null check (bucket ~ '^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$'),
  object_key text not null check (length(object_key) between 1 and 1024),
  created_at timestamptz not null default now()
);
create index if not exists file_account_idx on files.file (account_id);

create table if not exists files.file_metadata (
  file_metadata_id bigint generated always as identity primary key,
  file_id          bigint not null references files.file on delete cascade,
  metadata         jsonb not null check (jsonb_typeof(metadata) = 'object'),
  created_at       timestamptz not null default now()
);
create index if not exists file_metadata_file_idx on files.file_metadata (file_id, file_metadata_id desc);
comment on table files.file_metadata is
  'Append-only metadata documents per file; the row with the highest id is current (files.current_file_metadata).';

create table if not exists files.file_deletion_task (
  file_deletion_task_id bigint generated always as identity primary key,
  file_id               bigint not null unique references files.file on delete restrict,
  created_at            timestamptz not null default now()
);

create table if not exists files.file_deletion_supervisor_run (
  file_deletion_supervisor_run_id bigint generated always as identity primary key,
  file_deletion_task_id bigint not null references files.file_deletion_task on delete cascade,
  created_at            timestamptz not null default now()
);
create index if not exists file_deletion_supervisor_run_task_idx
  on files.file_deletion_supervisor_run (file_deletion_task_id);

create table if not exists files.file_deletion_attempt (
  file_deletion_attempt_id bigint generated always as identity primary key,
  file_deletion_task_id    bigint not null references files.file_deletion_task on delete cascade,
  created_at               timestamptz not null default now()
);
create index if not exists file_deletion_attempt_task_idx on files.file_deletion_attempt (file_deletion_task_id);

create table if not exists files.file_deletion_attempt_succeeded (
  file_deletion_attempt_id bigint primary key references files.file_deletion_attempt on delete cascade,
  worker_payload           jsonb,
  created_at               timestamptz not null default now()
);

create table if not exists files.file_deletion_attempt_failed (
  file_deletion_attempt_id bigint primary key references files.file_deletion_attempt on delete cascade,
  error_message            text not null,
  created_at               timestamptz not null default now()
);

create table if not exists files.file_deletion_task_succeeded (
  file_deletion_task_id bigint primary key references files.file_deletion_task on delete cascade,
  created_at            timestamptz not null default now()
);

create table if not exists files.file_deletion_task_failed (
  file_deletion_task_id bigint primary key references files.file_deletion_task on delete cascade,
  reason                text not null,
  created_at            timestamptz not null default now()
);

do $$
declare
  _table text;
begin
  foreach _table in array array[
    'file_metadata', 'file_deletion_task', 'file_deletion_supervisor_run', 'file_deletion_attempt',
    'file_deletion_attempt_succeeded', 'file_deletion_attempt_failed',
    'file_deletion_task_succeeded', 'file_deletion_task_failed'
  ] loop
    if not exists (select 1 from pg_trigger
                    where tgrelid = to_regclass(format('files.%I', _table)) and tgname = 'forbid_update') then
      execute format('create trigger forbid_update before update on files.%I
                        for each statement execute function queues.forbid_fact_update()', _table);
    end if;
  end loop;
end;
$$;
--! EndIncluded files/schema.sql
--! Included learning/schema.sql
-- learning: the account data the account deletion checklist touches. A profile belongs
-- to an account; a recording is a profile's answer to a cue, stored as a file.
-- Domain data (anonymization overwrites profile.display_name).

create schema if not exists learning;
revoke all on schema learning from public;

create table if not exists learning.profile (
  profile_id   bigint generated always as identity primary key,
  account_id   bigint not null references accounts.account on delete restrict,
  display_name text check (length(display_name) <= 200),
  created_at   timestamptz not null default now()
);
create index if not exists profile_account_idx on learning.profile (account_id);

create table if not exists learning.cue (
  cue_id     bigint generated always as identity primary key,
  prompt     text not null check (length(prompt) between 1 and 2000),
  created_at timestamptz not null default now()
);

create table if not exists learning.profile_cue_recording (
  profile_cue_recording_id bigint generated always as identity primary key,
  profile_id               bigint not null references learning.profile on delete restrict,
  cue_id                   bigint not null references learning.cue on delete restrict,
  file_id                  bigint not null references files.file on delete restrict,
  created_at               timestamptz not null default now()
);
create index if not exists profile_cue_recording_profile_idx on learning.profile_cue_recording (profile_id);
create index if not exists profile_cue_recording_file_idx on learning.profile_cue_recording (file_id);

revoke all on all tables in schema learning from public;
revoke all on all sequences in schema learning from public;
--! EndIncluded learning/schema.sql
--! Included files/util.sql
-- Small helpers shared by the files processes (the same three as comms/util.sql,
-- kept per schema so each domain stands alone). Called only from definer functions:
-- no grants.

-- A positive bigint id read from a jsonb object, or NULL when the key is missing, not
-- an integer, or out of range. Supervisors and handlers validate with this instead of
-- casting, so a malformed payload is a validation failure, not an exception.
create or replace function files.id_from_payload(_payload jsonb, _key text)
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
create or replace function files.validation_failure(_message text)
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
create or replace function files.assert_read_committed(_function_name text)
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
--! EndIncluded files/util.sql
--! Included files/metadata.sql
-- File metadata: append-only documents, the latest is current.

-- The current metadata document of a file ({} when it has none).
create or replace function files.current_file_metadata(_file_id bigint)
  returns jsonb
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(
    (select m.metadata from files.file_metadata m
      where m.file_id = _file_id order by m.file_metadata_id desc limit 1),
    '{}'::jsonb)
$$;

create or replace function files.is_file_deleted(_file_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((files.current_file_metadata(_file_id) ->> 'deleted')::boolean, false)
$$;

-- Marks a file logically deleted: appends the current document with "deleted": true and
-- "deleted_at". Idempotent: a file already marked is left as it is. Locks the file row
-- (FOR NO KEY UPDATE) so two concurrent calls append one row, not two.
create or replace function files.mark_file_deleted(_file_id bigint)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from files.file f where f.file_id = _file_id for no key update;
  if not found then
    raise exception 'file % not found', _file_id using errcode = '23503';
  end if;
  if not files.is_file_deleted(_file_id) then
    insert into files.file_metadata (file_id, metadata)
    values (_file_id, files.current_file_metadata(_file_id)
                      || jsonb_build_object('deleted', true, 'deleted_at', now()));
  end if;
end;
$$;
--! EndIncluded files/metadata.sql
--! Included files/file_deletion.sql
-- The file deletion process: facts → logic → effects, the handlers the worker calls
-- around the files service, and the kickoff.
--
--   files.kickoff_file_deletion(file_id)   root task + first supervisor task (idempotent)
--   files.file_deletion_supervisor         db_function: decides, schedules, re-enqueues
--   files.get_file_delete_payload          before_handler: {file_id, idempotency_key, bucket, object_key}
--   files.record_file_delete_success       success_handler: attempt succeeded, file marked deleted
--   files.record_file_delete_failure       error_handler: attempt failed
--   files.is_file_deletion_stuck(file_id)  for parents: the deletion has given up

-- Limits ------------------------------------------------------------------------------

-- Storage deletions per file before the process gives up (and is "stuck").
create or replace function files.file_deletion_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 5 $$;

-- Non-terminal supervisor runs per file (see comms.send_email_max_supervisor_runs).
create or replace function files.file_deletion_max_supervisor_runs() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 40 $$;

-- Facts -------------------------------------------------------------------------------

create or replace function files.has_file_deletion_succeeded_attempt(_file_deletion_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from files.file_deletion_attempt a
      join files.file_deletion_attempt_succeeded s using (file_deletion_attempt_id)
     where a.file_deletion_task_id = _file_deletion_task_id)
$$;

create or replace function files.count_file_deletion_attempts(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_attempt a
   where a.file_deletion_task_id = _file_deletion_task_id
$$;

-- Failed attempts (an attempt with both outcomes counts as succeeded).
create or replace function files.count_file_deletion_failed_attempts(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_attempt a
    join files.file_deletion_attempt_failed f using (file_deletion_attempt_id)
   where a.file_deletion_task_id = _file_deletion_task_id
     and not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
$$;

create or replace function files.count_file_deletion_outstanding_attempts(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_attempt a
   where a.file_deletion_task_id = _file_deletion_task_id
     and not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = a.file_deletion_attempt_id)
     and not exists (select 1 from files.file_deletion_attempt_failed f
                      where f.file_deletion_attempt_id = a.file_deletion_attempt_id)
$$;

create or replace function files.count_file_deletion_supervisor_runs(_file_deletion_task_id bigint)
  returns integer
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*)::integer from files.file_deletion_supervisor_run r
   where r.file_deletion_task_id = _file_deletion_task_id
$$;

create or replace function files.has_file_deletion_task_succeeded(_file_deletion_task_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from files.file_deletion_task_succeeded t
                  where t.file_deletion_task_id = _file_deletion_task_id)
$$;

create or replace function files.get_file_deletion_task_failure(_file_deletion_task_id bigint)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.reason from files.file_deletion_task_failed t
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
    select files.get_file_deletion_task_failure(t.file_deletion_task_id) is not null
           or files.count_file_deletion_failed_attempts(t.file_deletion_task_id) >= files.file_deletion_max_attempts()
      from files.file_deletion_task t
     where t.file_id = _file_id), false)
$$;

create or replace function files.file_deletion_supervisor_facts(
  _file_deletion_task_id bigint,
  out file_id            bigint,
  out has_task_succeeded boolean,
  out task_failure       text,
  out has_success        boolean,
  out num_attempts       integer,
  out num_failures       integer,
  out num_outstanding    integer,
  out num_runs           integer
)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select t.file_id,
         files.has_file_deletion_task_succeeded(t.file_deletion_task_id),
         files.get_file_deletion_task_failure(t.file_deletion_task_id),
         files.has_file_deletion_succeeded_attempt(t.file_deletion_task_id),
         files.count_file_deletion_attempts(t.file_deletion_task_id),
         files.count_file_deletion_failed_attempts(t.file_deletion_task_id),
         files.count_file_deletion_outstanding_attempts(t.file_deletion_task_id),
         files.count_file_deletion_supervisor_runs(t.file_deletion_task_id)
    from files.file_deletion_task t
   where t.file_deletion_task_id = _file_deletion_task_id
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
         count(*) filter (where files.has_file_deletion_task_succeeded(t.file_deletion_task_id))::integer,
         coalesce(array_agg(f.file_id order by f.file_id)
                    filter (where t.file_deletion_task_id is not null and files.is_file_deletion_stuck(f.file_id)),
                  '{}')
    from files.file f
    left join files.file_deletion_task t on t.file_id = f.file_id
   where f.account_id = _account_id
$$;

-- Effects -----------------------------------------------------------------------------

-- Locks the root row (FOR NO KEY UPDATE: see comms.lock_send_email_task for why).
create or replace function files.lock_file_deletion_task(_file_deletion_task_id bigint)
  returns boolean
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from files.file_deletion_task t
   where t.file_deletion_task_id = _file_deletion_task_id
     for no key update;
  return found;
end;
$$;

create or replace function files.record_file_deletion_supervisor_run(_file_deletion_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into files.file_deletion_supervisor_run (file_deletion_task_id) values (_file_deletion_task_id)
$$;

create or replace function files.record_file_deletion_task_succeeded(_file_deletion_task_id bigint)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into files.file_deletion_task_succeeded (file_deletion_task_id) values (_file_deletion_task_id)
  on conflict do nothing
$$;

create or replace function files.record_file_deletion_task_failed(_file_deletion_task_id bigint, _reason text)
  returns void
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  insert into files.file_deletion_task_failed (file_deletion_task_id, reason) values (_file_deletion_task_id, _reason)
  on conflict do nothing
$$;

-- Records an attempt and enqueues the file_delete channel task for it.
create or replace function files.schedule_file_deletion_attempt(_file_deletion_task_id bigint, _file_id bigint)
  returns bigint
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint;
begin
  insert into files.file_deletion_attempt (file_deletion_task_id) values (_file_deletion_task_id)
  returning file_deletion_attempt_id into _attempt_id;

  perform queues.enqueue('file_delete', jsonb_build_object(
    'task_type', 'file_delete',
    'file_deletion_task_id', _file_deletion_task_id,
    'file_deletion_attempt_id', _attempt_id,
    'file_id', _file_id,
    'before_handler', 'files.get_file_delete_payload',
    'success_handler', 'files.record_file_delete_success',
    'error_handler', 'files.record_file_delete_failure'));
  return _attempt_id;
end;
$$;

-- Next supervisor run: 5 s · 2^(runs − 1), capped at an hour (as comms).
create or replace function files.schedule_file_deletion_recheck(_file_deletion_task_id bigint, _num_runs integer)
  returns timestamptz
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _next_check_at timestamptz :=
    now() + internal.backoff(_num_runs - 1, 3600);
begin
  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'files.file_deletion_supervisor',
    'file_deletion_task_id', _file_deletion_task_id), _next_check_at);
  return _next_check_at;
end;
$$;

-- Supervisor --------------------------------------------------------------------------

-- Drives one file_deletion_task to a terminal fact. Payload: {file_deletion_task_id}.
-- Envelopes as comms.send_email_supervisor. Raises 25000 outside READ COMMITTED.
create or replace function files.file_deletion_supervisor(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task_id bigint := files.id_from_payload(payload, 'file_deletion_task_id');
  _facts record;
  _attempt_id bigint;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return files.validation_failure('file_deletion_task_id must be a positive integer');
  end if;
  perform files.assert_read_committed('files.file_deletion_supervisor');
  if not files.lock_file_deletion_task(_task_id) then
    return files.validation_failure(format('file_deletion_task %s not found', _task_id));
  end if;

  _facts := files.file_deletion_supervisor_facts(_task_id);

  if _facts.has_task_succeeded then
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.task_failure is not null then
    return jsonb_build_object('status', _facts.task_failure);
  end if;
  if _facts.has_success then
    perform files.record_file_deletion_task_succeeded(_task_id);
    return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'succeeded'));
  end if;
  if _facts.num_failures >= files.file_deletion_max_attempts() then
    perform files.record_file_deletion_task_failed(_task_id, 'max_attempts_reached');
    return jsonb_build_object('status', 'max_attempts_reached',
                              'payload', jsonb_build_object('num_failures', _facts.num_failures));
  end if;
  if _facts.num_runs >= files.file_deletion_max_supervisor_runs() then
    perform files.record_file_deletion_task_failed(_task_id, 'run_limit_reached');
    return jsonb_build_object('status', 'run_limit_reached',
                              'payload', jsonb_build_object('num_runs', _facts.num_runs));
  end if;

  perform files.record_file_deletion_supervisor_run(_task_id);
  if _facts.num_outstanding = 0 then
    _attempt_id := files.schedule_file_deletion_attempt(_task_id, _facts.file_id);
  end if;
  _next_check_at := files.schedule_file_deletion_recheck(_task_id, _facts.num_runs + 1);
  return jsonb_build_object('success', true, 'payload', jsonb_build_object(
    'status', case when _attempt_id is null then 'waiting_for_attempt' else 'attempt_scheduled' end,
    'file_deletion_attempt_id', _attempt_id,
    'next_check_at', _next_check_at));
end;
$$;

-- Handlers ----------------------------------------------------------------------------

-- before_handler: the provider payload of @org/handler-types fileDeletePayload, with
-- idempotency_key = the attempt id. An attempt with an outcome is not run again.
create or replace function files.get_file_delete_payload(payload jsonb)
  returns jsonb
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := files.id_from_payload(payload, 'file_deletion_attempt_id');
  _provider_payload jsonb;
begin
  if _attempt_id is null then
    return files.validation_failure('file_deletion_attempt_id must be a positive integer');
  end if;
  if exists (select 1 from files.file_deletion_attempt_succeeded s where s.file_deletion_attempt_id = _attempt_id)
     or exists (select 1 from files.file_deletion_attempt_failed f where f.file_deletion_attempt_id = _attempt_id) then
    return files.validation_failure(format('file_deletion_attempt %s already has an outcome; not deleting again', _attempt_id));
  end if;
  select jsonb_build_object(
           'file_id', f.file_id,
           'idempotency_key', a.file_deletion_attempt_id::text,
           'bucket', f.bucket,
           'object_key', f.object_key)
    into _provider_payload
    from files.file_deletion_attempt a
    join files.file_deletion_task t using (file_deletion_task_id)
    join files.file f on f.file_id = t.file_id
   where a.file_deletion_attempt_id = _attempt_id;
  if _provider_payload is null then
    return files.validation_failure(format('file_deletion_attempt %s not found', _attempt_id));
  end if;
  return jsonb_build_object('success', true, 'payload', _provider_payload);
end;
$$;

-- success_handler: records the attempt's success and marks the file deleted.
-- Idempotent.
create or replace function files.record_file_delete_success(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := files.id_from_payload(payload -> 'original_payload', 'file_deletion_attempt_id');
  _file_id bigint;
begin
  if _attempt_id is null then
    return files.validation_failure('original_payload.file_deletion_attempt_id must be a positive integer');
  end if;
  select t.file_id into _file_id
    from files.file_deletion_attempt a join files.file_deletion_task t using (file_deletion_task_id)
   where a.file_deletion_attempt_id = _attempt_id;
  if _file_id is null then
    return files.validation_failure(format('file_deletion_attempt %s not found', _attempt_id));
  end if;
  insert into files.file_deletion_attempt_succeeded (file_deletion_attempt_id, worker_payload)
  values (_attempt_id, payload -> 'worker_payload')
  on conflict do nothing;
  perform files.mark_file_deleted(_file_id);
  return jsonb_build_object('success', true);
end;
$$;

-- error_handler: records the attempt's failure unless it succeeded. Idempotent.
create or replace function files.record_file_delete_failure(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _attempt_id bigint := files.id_from_payload(payload -> 'original_payload', 'file_deletion_attempt_id');
begin
  if _attempt_id is null then
    return files.validation_failure('original_payload.file_deletion_attempt_id must be a positive integer');
  end if;
  if not exists (select 1 from files.file_deletion_attempt a where a.file_deletion_attempt_id = _attempt_id) then
    return files.validation_failure(format('file_deletion_attempt %s not found', _attempt_id));
  end if;
  insert into files.file_deletion_attempt_failed (file_deletion_attempt_id, error_message)
  select _attempt_id, left(coalesce(nullif(payload ->> 'error', ''), 'unknown error'), 2000)
   where not exists (select 1 from files.file_deletion_attempt_succeeded s
                      where s.file_deletion_attempt_id = _attempt_id)
  on conflict do nothing;
  return jsonb_build_object('success', true);
end;
$$;

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

  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'files.file_deletion_supervisor',
    'file_deletion_task_id', file_deletion_task_id), coalesce(_scheduled_at, now()));
end;
$$;
--! EndIncluded files/file_deletion.sql
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

select internal.register_runnable_function('files.file_deletion_supervisor(jsonb)');
select internal.register_runnable_function('files.get_file_delete_payload(jsonb)');
select internal.register_runnable_function('files.record_file_delete_success(jsonb)');
select internal.register_runnable_function('files.record_file_delete_failure(jsonb)');

grant execute on function files.kickoff_file_deletion(bigint, timestamptz) to :DATABASE_APP;
--! EndIncluded files/privileges.sql
--! Included accounts/util.sql
-- Small helpers shared by the accounts processes (the same three as comms/util.sql,
-- kept per schema so each domain stands alone). Called only from definer functions:
-- no grants.

-- A positive bigint id read from a jsonb object, or NULL when the key is missing, not
-- an integer, or out of range. Supervisors and handlers validate with this instead of
-- casting, so a malformed payload is a validation failure, not an exception.
create or replace function accounts.id_from_payload(_payload jsonb, _key text)
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
create or replace function accounts.validation_failure(_message text)
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
create or replace function accounts.assert_read_committed(_function_name text)
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
--! EndIncluded accounts/util.sql
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
  perform queues.enqueue('db_function', jsonb_build_object(
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
  _task_id bigint := accounts.id_from_payload(payload, 'account_anonymization_task_id');
  _facts record;
  _error text;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return accounts.validation_failure('account_anonymization_task_id must be a positive integer');
  end if;
  perform accounts.assert_read_committed('accounts.account_anonymization_supervisor');
  if not accounts.lock_account_anonymization_task(_task_id) then
    return accounts.validation_failure(format('account_anonymization_task %s not found', _task_id));
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
  perform queues.enqueue('db_function', jsonb_build_object(
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
  perform queues.enqueue('db_function', jsonb_build_object(
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
  _task_id bigint := accounts.id_from_payload(payload, 'account_deletion_task_id');
  _facts record;
  _status text;
  _reason text;
  _next_check_at timestamptz;
begin
  if _task_id is null then
    return accounts.validation_failure('account_deletion_task_id must be a positive integer');
  end if;
  perform accounts.assert_read_committed('accounts.account_deletion_supervisor');
  if not accounts.lock_account_deletion_task(_task_id) then
    return accounts.validation_failure(format('account_deletion_task %s not found', _task_id));
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
  perform queues.enqueue('db_function', jsonb_build_object(
    'task_type', 'db_function',
    'db_function', 'accounts.account_deletion_supervisor',
    'account_deletion_task_id', account_deletion_task_id));
end;
$$;
--! EndIncluded accounts/account_deletion.sql
--! Included accounts/privileges.sql
-- Who may call what in accounts: the worker runs the two supervisors (granted and
-- registered). Apps start a deletion through api.request_account_deletion; nothing in
-- accounts is granted to them.

revoke all on all tables in schema accounts from public;
revoke all on all sequences in schema accounts from public;
revoke execute on all functions in schema accounts from public;

grant usage on schema accounts to :DATABASE_WORKER;

grant execute on function
  accounts.account_deletion_supervisor(jsonb),
  accounts.account_anonymization_supervisor(jsonb)
to :DATABASE_WORKER;

select internal.register_runnable_function('accounts.account_deletion_supervisor(jsonb)');
select internal.register_runnable_function('accounts.account_anonymization_supervisor(jsonb)');
--! EndIncluded accounts/privileges.sql
--! Included api/schema.sql
-- api: the functions applications call for requests that span domains. Each is a
-- security definer wrapper over a domain's kickoff; apps get usage on this schema only.

create schema if not exists api;
revoke all on schema api from public;
--! EndIncluded api/schema.sql
--! Included api/account_deletion.sql
-- Requests the deletion of an account: flags it 'deleted' and starts the account
-- deletion supervisor (accounts.kickoff_account_deletion). Idempotent per account.
-- Unknown or missing ids return a validation_failure_message and write nothing.
create or replace function api.request_account_deletion(
  _account_id bigint,
  out account_deletion_task_id bigint,
  out validation_failure_message text
)
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _kickoff record;
begin
  _kickoff := accounts.kickoff_account_deletion(_account_id);
  account_deletion_task_id := _kickoff.account_deletion_task_id;
  validation_failure_message := _kickoff.validation_failure_message;
end;
$$;
--! EndIncluded api/account_deletion.sql
--! Included api/privileges.sql
-- Apps call the api functions; nothing else here.

revoke all on all tables in schema api from public;
revoke execute on all functions in schema api from public;

grant usage on schema api to :DATABASE_APP;

grant execute on function api.request_account_deletion(bigint) to :DATABASE_APP;
--! EndIncluded api/privileges.sql
