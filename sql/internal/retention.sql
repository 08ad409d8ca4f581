-- Retention of business processes' own facts, off by default. Each domain has a
-- prune_finished_processes function (sql/comms/retention.sql, sql/files/retention.sql,
-- sql/accounts/retention.sql) that deletes, for each of its processes with a row in
-- internal.process_retention, the roots finished (a X_task_succeeded or X_task_failed
-- fact) longer ago than the window, with every fact of theirs (foreign keys cascade from
-- the root). Each run is recorded in internal.process_pruned, which the process timeline
-- reads to say that a root was pruned. Queue history has its own retention
-- (sql/queues/partitions.sql); the domains do not reference queue tables.

-- Deletes up to _limit roots of process _process (schema _schema) finished before
-- _now - its retention; none when the process has no retention row. Returns the deleted
-- roots as JSON (the callers delete domain data they point at). Owner only.
create or replace function internal.prune_finished_roots(
  _schema text, _process text, _now timestamptz, _limit integer
) returns table (root_id bigint, root jsonb)
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  _retention interval;
  _key text := _process || '_task_id';
  _deleted jsonb;
begin
  if _now is null then
    raise exception 'now must not be null' using errcode = '22004';
  end if;
  if _limit is null or _limit not between 1 and 100000 then
    raise exception 'limit must be between 1 and 100000, got %', coalesce(_limit::text, 'null') using errcode = '22023';
  end if;
  select r.retention into _retention from internal.process_retention r where r.process = _process;
  if _retention is null then
    return;
  end if;
  -- Table names from the catalog, quoted with %I; values through `using`.
  if to_regclass(format('%I.%I', _schema, _process || '_task')) is null
     or to_regclass(format('%I.%I', _schema, _process || '_task_succeeded')) is null
     or to_regclass(format('%I.%I', _schema, _process || '_task_failed')) is null then
    raise exception 'no process %.%', _schema, _process using errcode = '22023';
  end if;
  execute format(
    'with done as (
       select r.%1$I as id from %2$I.%3$I r
        where exists (select 1 from %2$I.%4$I s where s.%1$I = r.%1$I and s.created_at < $1)
           or exists (select 1 from %2$I.%5$I f where f.%1$I = r.%1$I and f.created_at < $1)
        order by r.%1$I
        limit $2
     ),
     gone as (
       delete from %2$I.%3$I r using done d where r.%1$I = d.id returning r.*
     )
     select coalesce(jsonb_agg(to_jsonb(g) order by g.%1$I), ''[]'') from gone g',
    _key, _schema, _process || '_task', _process || '_task_succeeded', _process || '_task_failed')
    into _deleted using _now - _retention, _limit;
  if jsonb_array_length(_deleted) > 0 then
    insert into internal.process_pruned (process, first_root_id, last_root_id, roots, finished_before, pruned_at)
    values (_process, (_deleted -> 0 ->> _key)::bigint, (_deleted -> -1 ->> _key)::bigint,
            jsonb_array_length(_deleted), _now - _retention, _now);
  end if;
  return query select (d ->> _key)::bigint, d from jsonb_array_elements(_deleted) d;
end;
$$;

-- The prune run that removed root _root_id of _process, if any (the newest).
create or replace function internal.process_root_pruned(_process text, _root_id bigint)
  returns internal.process_pruned
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select p.* from internal.process_pruned p
   where p.process = _process and _root_id between p.first_root_id and p.last_root_id
   order by p.process_pruned_id desc
   limit 1
$$;
