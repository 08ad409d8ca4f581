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
           sum(p.tasks) as n
      -- the claim index and the lease-held tasks, counted per claim lease
      -- (sql/queues/lease_held.sql)
      from queues.task_pending_or_held_counts p
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
