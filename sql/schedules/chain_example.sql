-- EXAMPLE, not part of the migrations: the seed's task chain as db_function steps.
-- schema-drift: not migrated (tools/db/src/sql-drift.ts skips this file)
-- chain_example.test.ts loads this file into its own test database (replacing
-- :DATABASE_WORKER) to show and test chaining; copy the pattern into a real domain.
--
--   store_discovery(menu_urls)    records stores not seen before; returns their ids and
--                                 enqueues one entry_point_discovery per new store
--   entry_point_discovery(store)  resolves the platform id from the menu URL; enqueues
--                                 product_discovery
--   product_discovery(store)      the initial crawl; the store now enters the regular
--                                 schedule (product_resync, staggered)
--
-- Each step's effects and its follow-ups commit together (a db_function task), and each is
-- idempotent: a follow-up is enqueued only by the call that recorded the new fact, so a
-- redelivered task enqueues nothing twice. Every step is keyed by resource_key
-- 'store:<id>', so one store is worked on by one worker at a time.

create schema if not exists schedules_example;
revoke all on schema schedules_example from public;

create table if not exists schedules_example.store (
  store_id      bigint generated always as identity primary key,
  menu_url      text not null unique,
  discovered_at timestamptz not null default now()
);
create table if not exists schedules_example.store_entry_point (
  store_id               bigint primary key references schedules_example.store on delete cascade,
  platform_dispensary_id text not null,
  resolved_at            timestamptz not null default now()
);
create table if not exists schedules_example.store_products_discovered (
  store_id      bigint primary key references schedules_example.store on delete cascade,
  product_count integer not null,
  discovered_at timestamptz not null default now()
);

create or replace function schedules_example.enqueue_step(_db_function text, _store_id bigint)
  returns bigint
  language sql volatile
  set search_path = pg_catalog, pg_temp
as $$
  select queues.enqueue('db_function',
    jsonb_build_object('task_type', 'db_function', 'db_function', _db_function, 'store_id', _store_id),
    null, null, format('store:%s', _store_id))
$$;

-- Payload: {menu_urls: [text]}. Returns {success, payload: {new_store_ids}}.
create or replace function schedules_example.store_discovery(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _new bigint[];
begin
  if jsonb_typeof(payload -> 'menu_urls') is distinct from 'array' then
    return jsonb_build_object('success', false, 'validation_failure_message', 'menu_urls must be an array');
  end if;
  with found as (
    insert into schedules_example.store (menu_url)
    select u from jsonb_array_elements_text(payload -> 'menu_urls') with ordinality e(u, i) order by i
    on conflict (menu_url) do nothing
    returning store_id
  )
  select coalesce(array_agg(store_id order by store_id), '{}') into _new from found;
  perform schedules_example.enqueue_step('schedules_example.entry_point_discovery', s) from unnest(_new) s;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object('new_store_ids', to_jsonb(_new)));
end;
$$;

-- Payload: {store_id}. The platform id is the menu URL's last path segment.
create or replace function schedules_example.entry_point_discovery(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _store_id bigint := (payload ->> 'store_id')::bigint;
  _platform_id text;
begin
  select substring(s.menu_url from '/([A-Za-z0-9_-]+)$') into _platform_id
    from schedules_example.store s where s.store_id = _store_id;
  if _platform_id is null then
    return jsonb_build_object('success', false, 'validation_failure_message',
                              format('store %s has no platform id in its menu URL', _store_id));
  end if;
  insert into schedules_example.store_entry_point (store_id, platform_dispensary_id)
  values (_store_id, _platform_id) on conflict do nothing;
  if found then
    perform schedules_example.enqueue_step('schedules_example.product_discovery', _store_id);
  end if;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object('platform_dispensary_id', _platform_id));
end;
$$;

-- Payload: {store_id}. Records the initial crawl (a stand-in product count).
create or replace function schedules_example.product_discovery(payload jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _store_id bigint := (payload ->> 'store_id')::bigint;
begin
  insert into schedules_example.store_products_discovered (store_id, product_count)
  select e.store_id, length(e.platform_dispensary_id) from schedules_example.store_entry_point e
   where e.store_id = _store_id
  on conflict do nothing;
  return jsonb_build_object('success', true, 'payload', jsonb_build_object('status', 'store_enters_regular_schedule'));
end;
$$;

revoke execute on all functions in schema schedules_example from public;
grant usage on schema schedules_example to :DATABASE_WORKER;
grant execute on function
  schedules_example.store_discovery(jsonb),
  schedules_example.entry_point_discovery(jsonb),
  schedules_example.product_discovery(jsonb)
to :DATABASE_WORKER;
select internal.register_runnable_function('schedules_example.store_discovery(jsonb)');
select internal.register_runnable_function('schedules_example.entry_point_discovery(jsonb)');
select internal.register_runnable_function('schedules_example.product_discovery(jsonb)');
