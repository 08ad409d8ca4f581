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
  return _node || jsonb_build_object('status', _status, 'progress', admin.process_progress(_process, _root_id));
end;
$$;

-- The children of one node (ids of other processes' roots), in the order they run: what
-- its process's S.X_children(root_id bigint) returns, when its domain defines one
-- (accounts.account_deletion_children: the account's file deletions and anonymization);
-- none otherwise. The function's name is read from the catalog, as admin.process_progress.
create or replace function admin.process_children(_process text, _root_id bigint)
  returns table (process text, root_id bigint)
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _function text;
begin
  select format('%I.%I', n.nspname, f.proname) into _function
    from admin.processes() p
    join pg_namespace n on n.nspname = p.schema_name
    join pg_proc f on f.pronamespace = n.oid and f.proname = p.process || '_children'
   where p.process = _process and f.pronargs = 1 and f.proargtypes[0] = 'bigint'::regtype
   limit 1;
  if _function is not null then
    return query execute format('select c.process, c.root_id from %s($1) c', _function) using _root_id;
  end if;
end;
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
