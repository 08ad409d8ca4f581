-- internal.run_function(function_name, payload): the worker's way into business SQL.
--
-- The name is checked against a strict pattern, resolved to exactly one function
-- schema.name(jsonb) returning jsonb, checked against the allowlist and the caller's
-- EXECUTE privilege, and called through format('%I.%I'), never by pasting the name.
-- pg_catalog, information_schema and temporary schemas are never runnable.

-- Registers a function as runnable. Owner only; called from migrations.
create or replace function internal.register_runnable_function(_function regprocedure)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _proc record;
begin
  if _function is null then
    raise exception 'function must not be null' using errcode = '22004';
  end if;
  select n.nspname, p.proname, p.prorettype, p.pronargs, p.proargtypes[0] as argtype, p.prokind
    into _proc
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where p.oid = _function;
  if _proc.nspname in ('pg_catalog', 'information_schema') or _proc.nspname like 'pg\_%' then
    raise exception 'functions in % cannot be runnable', _proc.nspname using errcode = '42501';
  end if;
  if _proc.prokind <> 'f' or _proc.pronargs <> 1 or _proc.argtype <> 'jsonb'::regtype
     or _proc.prorettype <> 'jsonb'::regtype then
    raise exception '% must be a function taking one jsonb argument and returning jsonb', _function
      using errcode = '22023';
  end if;
  if _proc.nspname !~ '^[a-z_][a-z0-9_]*$' or _proc.proname !~ '^[a-z_][a-z0-9_]*$' then
    raise exception '% must have a lowercase schema.name made of a-z, 0-9 and _', _function
      using errcode = '22023';
  end if;
  insert into internal.runnable_function (function_schema, function_name)
  values (_proc.nspname, _proc.proname)
  on conflict do nothing;
  if found then
    perform internal.build_call_runnable();
  end if;
end;
$$;

-- (Re)builds internal.call_runnable(function_name text, payload jsonb) returns jsonb from
-- internal.runnable_function: one static call per registered function, chosen by its
-- name (schema.name), so that each call's plan is kept for the session (an EXECUTE is
-- planned on every call). A name it does not list raises 42883. Security invoker: the
-- caller needs EXECUTE on the target itself. queues.run_steps calls it for each step.
-- internal.register_runnable_function calls this; its grants (internal/privileges.sql)
-- stay with the function.
create or replace function internal.build_call_runnable()
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _cases text;
begin
  select string_agg(format('    when %L then return %I.%I(payload);',
                           r.function_schema || '.' || r.function_name, r.function_schema, r.function_name),
                    e'\n' order by r.function_schema, r.function_name)
    into _cases
    from internal.runnable_function r;
  execute format($f$
create or replace function internal.call_runnable(function_name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $body$
begin
  case function_name
%s
    else
      raise exception 'function %% is not registered as runnable', function_name using errcode = '42883';
  end case;
end;
$body$
$f$, coalesce(_cases, '    when null then return null;'));
end;
$$;

-- Resolves a runnable function name to its OID, or raises a clear error. Security
-- definer so that callers need no privilege on the allowlist table.
create or replace function internal.resolve_runnable_function(_function_name text)
  returns regprocedure
  language plpgsql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _parts text[];
  _oid regprocedure;
begin
  if _function_name is null then
    raise exception 'function_name must not be null' using errcode = '22004';
  end if;
  -- Matched without capture groups, then split at its one dot: with the groups
  -- (regexp_match), the match took most of this function's CPU.
  if _function_name ~ '^[a-z_][a-z0-9_]{0,62}\.[a-z_][a-z0-9_]{0,62}$' then
    _parts := array[split_part(_function_name, '.', 1), split_part(_function_name, '.', 2)];
  end if;
  if _parts is null then
    raise exception 'invalid function_name %: expected schema.function in lowercase letters, digits and _, with no argument list',
      quote_literal(left(_function_name, 100)) using errcode = '22023';
  end if;
  if _parts[1] in ('pg_catalog', 'information_schema') or _parts[1] like 'pg\_%' then
    raise exception 'function % is in a system or temporary schema and is never runnable',
      _function_name using errcode = '42501';
  end if;
  _oid := to_regprocedure(format('%I.%I(jsonb)', _parts[1], _parts[2]));
  if _oid is null then
    raise exception 'function %(jsonb) does not exist', _function_name using errcode = '42883';
  end if;
  if not exists (select 1 from internal.runnable_function r
                  where r.function_schema = _parts[1] and r.function_name = _parts[2]) then
    raise exception 'function % is not registered as runnable', _function_name
      using errcode = '42501',
            hint = 'Register it in a migration: select internal.register_runnable_function(''schema.name(jsonb)'');';
  end if;
  if (select p.prorettype from pg_proc p where p.oid = _oid) <> 'jsonb'::regtype then
    raise exception 'function % does not return jsonb', _function_name using errcode = '42804';
  end if;
  return _oid;
end;
$$;

-- Runs a registered function with the payload and returns its jsonb. Security invoker:
-- the caller needs EXECUTE on the target itself. Resolved and checked here, then called
-- through internal.call_runnable, whose static call keeps its plan for the session (an
-- EXECUTE was planned on every call, after a catalog look-up of its name).
create or replace function internal.run_function(function_name text, payload jsonb)
  returns jsonb
  language plpgsql volatile
  security invoker
  set search_path = pg_catalog, pg_temp
as $$
declare
  _oid regprocedure := internal.resolve_runnable_function(function_name);
begin
  if not has_function_privilege(_oid, 'execute') then
    raise exception 'permission denied: % may not execute %', current_user, function_name
      using errcode = '42501';
  end if;
  return internal.call_runnable(function_name, payload);
end;
$$;

-- A runnable no-op: returns the success envelope. Used by benchmarks and smoke tests.
create or replace function internal.noop(payload jsonb) returns jsonb
  language sql immutable
  security definer
  set search_path = pg_catalog, pg_temp
as $$ select jsonb_build_object('success', true) $$;
