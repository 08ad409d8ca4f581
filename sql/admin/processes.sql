-- The process view: the fact timeline of one business process's root, for the
-- send_email / send_sms (comms), file_deletion (files), account_deletion and
-- account_anonymization (accounts) processes.
--
-- Generic over the domains' naming convention (sql/CONVENTIONS.md, "facts are named for
-- the event"): a process X in schema S has a root S.X_task (key X_task_id) and, when they
-- exist, the facts S.X_supervisor_run, S.X_attempt (key X_attempt_id),
-- S.X_attempt_succeeded, S.X_attempt_failed, S.X_task_succeeded and S.X_task_failed.
-- Table names are read from the catalog and quoted with format('%I.%I'); ids go through
-- `using`. Every read is by the root's key (each fact table is indexed on it).

-- The processes the view knows, with their schemas: those of the business domains
-- installed (a database with the queue's core alone has none, docs/installing.md).
create or replace function admin.processes()
  returns table (process text, schema_name text)
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select p.process, p.schema_name
    from (values ('send_email', 'comms'), ('send_sms', 'comms'), ('file_deletion', 'files'),
                 ('account_deletion', 'accounts'), ('account_anonymization', 'accounts')) p (process, schema_name)
   where to_regnamespace(p.schema_name) is not null
$$;

-- The schema-qualified, quoted name of a process's table S.X<suffix>, read from the
-- catalog; null when there is no such table.
create or replace function admin.process_table(_process text, _suffix text)
  returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select format('%I.%I', n.nspname, c.relname)
    from admin.processes() p
    join pg_namespace n on n.nspname = p.schema_name
    join pg_class c on c.relnamespace = n.oid and c.relname = p.process || _suffix and c.relkind = 'r'
   where p.process = _process
$$;

-- Validates a process name and root id: 22004 for nulls, 22023 for an unknown process,
-- 23503 for an unknown root.
create or replace function admin.assert_process_root(_process text, _root_id bigint)
  returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _found boolean;
begin
  if _process is null then
    raise exception 'process must not be null' using errcode = '22004';
  end if;
  if not exists (select 1 from admin.processes() p where p.process = _process) then
    raise exception 'unknown process %; expected one of %', quote_literal(left(_process, 100)),
      (select string_agg(p.process, ', ') from admin.processes() p) using errcode = '22023';
  end if;
  if _root_id is null then
    raise exception 'root_id must not be null' using errcode = '22004';
  end if;
  execute format('select exists (select 1 from %s r where r.%I = $1)',
                 admin.process_table(_process, '_task'), _process || '_task_id')
    into _found using _root_id;
  if not _found then
    raise exception '% % does not exist', _process, _root_id using errcode = '23503';
  end if;
end;
$$;

-- Every fact of one root, oldest first: started, supervisor_run, attempt,
-- attempt_succeeded, attempt_failed, succeeded, failed; for a root that domain retention
-- pruned (internal.process_pruned), one 'pruned' row instead. `detail` is the fact row as JSON
-- without its keys and timestamp. An account deletion also shows its children: the
-- account's anonymization and the deletions of the account's files (their `process` and
-- `root_id` say which).
-- The queue tasks a process names (an attempt's task_id: the channel task that carried
-- it) may be gone while the process's facts stay: retention dropped the partition set
-- that held them (queues.history_partition_dropped). For each such set, one
-- 'queue_history_pruned' row at the time of the drop, with detail {task_ids (this root's
-- tasks in the set), lower_bound, upper_bound, last_completed_at, dropped_at}.
create or replace function admin.process_timeline(_process text, _root_id bigint)
  returns table (at timestamptz, process text, root_id bigint, fact text, attempt_id bigint, detail jsonb)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _key text := _process || '_task_id';
  _attempt_key text := _process || '_attempt_id';
  _attempt text;
  _parts text[] := '{}';
  _table text;
  _child record;
  _pruned internal.process_pruned;
begin
  begin
    perform admin.assert_process_root(_process, _root_id);
  exception when foreign_key_violation then
    -- A root that domain retention removed: one 'pruned' row says when and why.
    _pruned := internal.process_root_pruned(_process, _root_id);
    if _pruned.process_pruned_id is null then
      raise;
    end if;
    return query select _pruned.pruned_at, _process, _root_id, 'pruned'::text, null::bigint,
                        jsonb_build_object('finished_before', _pruned.finished_before,
                                           'pruned_at', _pruned.pruned_at);
    return;
  end;
  _attempt := admin.process_table(_process, '_attempt');

  _parts := _parts || format(
    'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint, to_jsonb(f) - %L - ''created_at''
       from %s f where f.%I = $1',
    _process, _root_id, 'started', _key, admin.process_table(_process, '_task'), _key);
  foreach _table in array array['_supervisor_run', '_task_succeeded', '_task_failed'] loop
    if admin.process_table(_process, _table) is not null then
      _parts := _parts || format(
        'select f.created_at, %L::text, %s::bigint, %L::text, null::bigint,
                to_jsonb(f) - %L - %L - ''created_at''
           from %s f where f.%I = $1',
        _process, _root_id,
        case _table when '_supervisor_run' then 'supervisor_run'
                    when '_task_succeeded' then 'succeeded' else 'failed' end,
        _key, _process || _table || '_id', admin.process_table(_process, _table), _key);
    end if;
  end loop;
  if _attempt is not null then
    _parts := _parts || format(
      'select f.created_at, %L::text, %s::bigint, ''attempt''::text, f.%I, to_jsonb(f) - %L - %L - ''created_at''
         from %s f where f.%I = $1',
      _process, _root_id, _attempt_key, _key, _attempt_key, _attempt, _key);
    foreach _table in array array['_attempt_succeeded', '_attempt_failed'] loop
      if admin.process_table(_process, _table) is not null then
        _parts := _parts || format(
          'select f.created_at, %L::text, %s::bigint, %L::text, f.%I, to_jsonb(f) - %L - ''created_at''
             from %s f join %s a on a.%I = f.%I where a.%I = $1',
          _process, _root_id, substr(_table, 2), _attempt_key, _attempt_key,
          admin.process_table(_process, _table), _attempt, _attempt_key, _attempt_key, _key);
      end if;
    end loop;
    if exists (select 1 from pg_attribute a
                where a.attrelid = _attempt::regclass and a.attname = 'task_id' and not a.attisdropped) then
      -- history_partition_dropped has a row per dropped set: a few hundred a year.
      _parts := _parts || format(
        'select d.dropped_at, %L::text, %s::bigint, ''queue_history_pruned''::text, null::bigint,
                jsonb_build_object(''task_ids'', jsonb_agg(a.task_id order by a.task_id),
                                   ''lower_bound'', d.lower_bound, ''upper_bound'', d.upper_bound,
                                   ''last_completed_at'', d.last_completed_at, ''dropped_at'', d.dropped_at)
           from %s a
           join queues.history_partition_dropped d on a.task_id >= d.lower_bound and a.task_id < d.upper_bound
          where a.%I = $1
          group by d.history_partition_dropped_id',
        _process, _root_id, _attempt, _key);
    end if;
  end if;

  return query execute
    'select * from (' || array_to_string(_parts, ' union all ') || ') t order by 1, 4'
    using _root_id;

  -- The root's children (admin.process_children), each with its own timeline.
  for _child in select * from admin.process_children(_process, _root_id) loop
    return query select * from admin.process_timeline(_child.process, _child.root_id);
  end loop;
end;
$$;

-- Roots of one process newest first, _limit per page (default 50, at most 500), older
-- than _before_root_id, with their status (succeeded, failed or running) and the root
-- row's other columns as `subject`.
create or replace function admin.list_process_roots(
  _process        text,
  _limit          integer default null,
  _before_root_id bigint default null
) returns table (root_id bigint, created_at timestamptz, status text, subject jsonb)
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _page integer := admin.page_limit(_limit);
  _key text := _process || '_task_id';
begin
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
  return query execute format(
    'select r.%1$I, r.created_at,
            case when exists (select 1 from %3$s s where s.%1$I = r.%1$I) then ''succeeded''
                 when exists (select 1 from %4$s x where x.%1$I = r.%1$I) then ''failed''
                 else ''running'' end,
            to_jsonb(r) - %1$L - ''created_at''
       from %2$s r
      where $1 is null or r.%1$I < $1
      order by r.%1$I desc
      limit $2',
    _key, admin.process_table(_process, '_task'),
    admin.process_table(_process, '_task_succeeded'), admin.process_table(_process, '_task_failed'))
  using _before_root_id, _page;
end;
$$;

-- The process names the view knows (for the API's list).
create or replace function admin.list_processes()
  returns table (process text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select p.process from admin.processes() p order by 1
$$;

-- A process root's own progress, when its process defines S.X_progress(bigint) returning
-- {done, total, note} from its facts (accounts.account_deletion_progress: files deleted out
-- of files); null otherwise. The function's name is read from the catalog.
create or replace function admin.process_progress(_process text, _root_id bigint)
  returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _function text;
  _progress jsonb;
begin
  select format('%I.%I', n.nspname, f.proname) into _function
    from admin.processes() p
    join pg_namespace n on n.nspname = p.schema_name
    join pg_proc f on f.pronamespace = n.oid and f.proname = p.process || '_progress'
   where p.process = _process and f.pronargs = 1 and f.proargtypes[0] = 'bigint'::regtype
   limit 1;
  if _function is null then
    return null;
  end if;
  execute format('select %s($1)', _function) into _progress using _root_id;
  return _progress;
end;
$$;
