-- Task types declared by an app's task definitions (@org/tasks, defineTask): registered by
-- the owner's deploy step (`npm run migrate`, `queue-tasks register`) and by `npm start`'s
-- local set-up, never by the worker, whose database user may not create task types.
--
-- _task_types: a JSON array of {"task_type": "fax", "description": "..."} (description
-- optional, at most 1,000 characters). Inserts the types that are missing; for a type
-- that exists, a non-empty description replaces its own. Never deletes a type (one that
-- tasks name cannot be deleted anyway: queues.guard_task_type_in_use). Worker-only types
-- (queues.internal_task_type) are refused: their tasks make the worker act with the owner's
-- authority, and no definition's run() may stand in for them. All or nothing: the first
-- bad element is named (task_types[2].task_type: ...), and nothing is written.
-- Returns each element's type, and whether this call created it.
create or replace function queues.register_task_types(_task_types jsonb)
  returns table (task_type text, created boolean)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _element     jsonb;
  _index       integer := 0;
  _name        text;
  _description text;
begin
  if _task_types is null then
    raise exception 'task_types must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_task_types) <> 'array' then
    raise exception 'task_types must be a JSON array, got %', jsonb_typeof(_task_types) using errcode = '22023';
  end if;
  if jsonb_array_length(_task_types) > 1000 then
    raise exception 'task_types has % elements, over the limit of 1000', jsonb_array_length(_task_types)
      using errcode = '54000';
  end if;
  for _element in select e from jsonb_array_elements(_task_types) e loop
    if jsonb_typeof(_element) <> 'object' then
      raise exception 'task_types[%] must be an object, got %', _index, jsonb_typeof(_element) using errcode = '22023';
    end if;
    if exists (select 1 from jsonb_object_keys(_element) k where k not in ('task_type', 'description')) then
      raise exception 'task_types[%]: unknown field(s) %', _index,
        (select string_agg(k, ', ' order by k) from jsonb_object_keys(_element) k where k not in ('task_type', 'description'))
        using errcode = '22023';
    end if;
    if jsonb_typeof(_element->'task_type') is distinct from 'string' then
      raise exception 'task_types[%].task_type must be a string', _index using errcode = '22023';
    end if;
    _name := _element->>'task_type';
    if _name !~ '^[a-z][a-z0-9_]{0,62}$' then
      raise exception 'task_types[%].task_type must be a-z, 0-9 and _, starting with a letter, at most 63 characters, got %',
        _index, quote_literal(left(_name, 100)) using errcode = '22023';
    end if;
    if _element ? 'description' and jsonb_typeof(_element->'description') not in ('string', 'null') then
      raise exception 'task_types[%].description must be a string', _index using errcode = '22023';
    end if;
    _description := coalesce(_element->>'description', '');
    if length(_description) > 1000 then
      raise exception 'task_types[%].description is % characters, over the limit of 1000', _index, length(_description)
        using errcode = '54000';
    end if;
    if exists (select 1 from queues.internal_task_type i where i.task_type = _name) then
      raise exception 'task_types[%].task_type % is a worker-only task type of the queue; choose another name',
        _index, quote_literal(_name) using errcode = '42501';
    end if;
    _index := _index + 1;
  end loop;

  return query
  with wanted as (
    select distinct on (e->>'task_type') e->>'task_type' as name, coalesce(e->>'description', '') as description
      from jsonb_array_elements(_task_types) with ordinality as a(e, n)
     order by e->>'task_type', n desc
  ),
  inserted as (
    insert into queues.task_type as t (task_type, description)
    select w.name, w.description from wanted w
    on conflict on constraint task_type_pkey do nothing
    returning t.task_type
  ),
  -- A description given replaces the type's own (an update of description alone: no
  -- lock that enqueues wait for, see queues.guard_task_type_in_use).
  described as (
    update queues.task_type t
       set description = w.description
      from wanted w
     where t.task_type = w.name
       and w.description <> ''
       and t.description is distinct from w.description
       and w.name not in (select i.task_type from inserted i)
    returning t.task_type
  )
  select w.name, w.name in (select i.task_type from inserted i)
    from wanted w
   order by w.name;
end;
$$;

comment on function queues.register_task_types(jsonb) is
  'Registers the task types an app''s task definitions declare (owner only): inserts missing ones, updates descriptions, never deletes.';

revoke execute on function queues.register_task_types(jsonb) from public;
