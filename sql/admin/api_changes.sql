-- The audit trail of the operations API: admin.api_change holds one fact per change made
-- through the API. The API calls admin.record_api_change in the same transaction as the
-- admin function that makes the change (packages/web/src/app.ts, `change`), so no change
-- commits without its fact and no fact without its change. The API database user has no
-- privilege on the table: it inserts only through this function and reads through
-- admin.list_api_changes.

-- Records one change made by API user _user_name (level _user_level) for the request
-- _request_id (_method _route); _action names what it did (cancel_tasks, pause_task_type,
-- ...), _task_ids the tasks it targeted or made, _task_type / _schedule_name / _worker_id
-- the queue, schedule or worker it acted on, _input the request's parameters and _answer
-- what the change answered. Returns the fact's id. 22004 for a NULL required argument,
-- 22023 for a malformed one.
create or replace function admin.record_api_change(
  _user_name     text,
  _user_level    text,
  _request_id    text,
  _method        text,
  _route         text,
  _action        text,
  _task_ids      bigint[],
  _task_type     text,
  _schedule_name text,
  _worker_id     text,
  _input         jsonb,
  _answer        jsonb
) returns bigint
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _id bigint;
begin
  if _user_name is null then
    raise exception 'user_name must not be null' using errcode = '22004';
  end if;
  if length(_user_name) not between 1 and 100 then
    raise exception 'user_name must be 1 to 100 characters' using errcode = '22023';
  end if;
  if _user_level is null then
    raise exception 'user_level must not be null' using errcode = '22004';
  end if;
  if _user_level not in ('read', 'operator') then
    raise exception 'user_level must be read or operator, got %', quote_literal(_user_level) using errcode = '22023';
  end if;
  if _request_id is null then
    raise exception 'request_id must not be null' using errcode = '22004';
  end if;
  if length(_request_id) not between 1 and 200 then
    raise exception 'request_id must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _method is null then
    raise exception 'method must not be null' using errcode = '22004';
  end if;
  -- CLI: a change made with the `queue` command line (route: the command, e.g. 'queue cancel').
  if _method not in ('POST', 'PUT', 'PATCH', 'DELETE', 'CLI') then
    raise exception 'method must be POST, PUT, PATCH, DELETE or CLI, got %', quote_literal(_method) using errcode = '22023';
  end if;
  if _route is null then
    raise exception 'route must not be null' using errcode = '22004';
  end if;
  if length(_route) not between 1 and 200 then
    raise exception 'route must be 1 to 200 characters' using errcode = '22023';
  end if;
  if _action is null then
    raise exception 'action must not be null' using errcode = '22004';
  end if;
  if _action !~ '^[a-z][a-z0-9_]{0,62}$' then
    raise exception 'action must be a lowercase name such as cancel_tasks, got %', quote_literal(_action) using errcode = '22023';
  end if;
  if _input is not null and jsonb_typeof(_input) <> 'object' then
    raise exception 'input must be a JSON object, got %', jsonb_typeof(_input) using errcode = '22023';
  end if;
  if _answer is null then
    raise exception 'answer must not be null' using errcode = '22004';
  end if;
  if _task_ids is not null and array_position(_task_ids, null) is not null then
    raise exception 'task_ids must not contain NULL' using errcode = '22004';
  end if;
  insert into admin.api_change
    (user_name, user_level, request_id, method, route, action, task_ids, task_type, schedule_name, worker_id, input, answer)
  values
    (_user_name, _user_level, _request_id, _method, _route, _action,
     coalesce((select array_agg(distinct t order by t) from unnest(_task_ids) t), '{}'),
     _task_type, _schedule_name, _worker_id, coalesce(_input, '{}'::jsonb), _answer)
  returning api_change_id into _id;
  return _id;
end;
$$;

-- The changes made through the API, newest first: all of them, or those that named task
-- _task_id (targeted or made it). _limit 1..500 (default 50); _before_id pages back
-- (changes with a smaller id). 22023 for a limit out of range.
create or replace function admin.list_api_changes(_task_id bigint, _limit integer, _before_id bigint)
  returns table (
    api_change_id bigint,
    changed_at    timestamptz,
    user_name     text,
    user_level    text,
    request_id    text,
    method        text,
    route         text,
    action        text,
    task_ids      bigint[],
    task_type     text,
    schedule_name text,
    worker_id     text,
    input         jsonb,
    answer        jsonb
  )
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _n integer := coalesce(_limit, 50);
begin
  if _n < 1 or _n > 500 then
    raise exception 'limit must be between 1 and 500, got %', _n using errcode = '22023';
  end if;
  if _task_id is null then
    -- Newest first by the primary key, stopping after _n rows.
    return query
      select c.api_change_id, c.changed_at, c.user_name, c.user_level, c.request_id, c.method, c.route,
             c.action, c.task_ids, c.task_type, c.schedule_name, c.worker_id, c.input, c.answer
        from admin.api_change c
       where c.api_change_id < coalesce(_before_id, 9223372036854775807)
       order by c.api_change_id desc
       limit _n;
  else
    -- The GIN index on task_ids finds the changes that named the task.
    return query
      select c.api_change_id, c.changed_at, c.user_name, c.user_level, c.request_id, c.method, c.route,
             c.action, c.task_ids, c.task_type, c.schedule_name, c.worker_id, c.input, c.answer
        from admin.api_change c
       where c.task_ids @> array[_task_id]
         and c.api_change_id < coalesce(_before_id, 9223372036854775807)
       order by c.api_change_id desc
       limit _n;
  end if;
end;
$$;
