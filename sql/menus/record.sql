-- Recording what a menu-platform call observed. The worker (packages/menu-sync) calls the
-- platform, then, in one transaction, menus.record_observation (facts and follow-up
-- tasks), queues.record_task_result (the result it returns) and queues.complete_task,
-- all fenced by the lease. The chain of the seed lives here, in SQL, never in the worker:
--
--   store_discovery        records stores not seen before; result {new_store_ids}; each
--                          new store gets an entry_point_discovery task
--   entry_point_discovery  records the store's platform id; enqueues product_discovery
--   product_discovery      the initial crawl: products and their first snapshots; the
--                          store is now active and joins the daily staggered resync
--                          (menus.generate_resync_tasks)
--   product_resync         a new price and stock snapshot of every product
--   analytics_refresh      refreshes menus.store_analytics
--
-- Per-store steps carry resource_key 'store:<id>' (one running task per store) and
-- retry up to menus.platform_max_attempts() times. New-store steps have priority
-- menus.new_store_priority(), above routine resync (0). Follow-ups are enqueued only by
-- the call that recorded the new fact, so nothing is enqueued twice.

create or replace function menus.new_store_priority() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 50 $$;
create or replace function menus.platform_max_attempts() returns integer
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 3 $$;
create or replace function menus.store_resource_key(_store_id bigint) returns text
  language sql immutable set search_path = pg_catalog, pg_temp as $$ select 'store:' || _store_id $$;

-- The task's store: payload.store_id, which must name a store (22023 otherwise).
create or replace function menus.task_store(_payload jsonb) returns bigint
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
declare
  _store_id bigint;
begin
  if jsonb_typeof(_payload -> 'store_id') is distinct from 'number' then
    raise exception 'payload.store_id must be a number' using errcode = '22023';
  end if;
  _store_id := (_payload ->> 'store_id')::bigint;
  if not exists (select 1 from menus.store s where s.store_id = _store_id) then
    raise exception 'payload.store_id %: no such store', _store_id using errcode = '22023';
  end if;
  return _store_id;
end;
$$;

create or replace function menus.record_store_discovery(_task_id bigint, _observation jsonb) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _bad record;
  _new bigint[];
begin
  if jsonb_typeof(_observation -> 'stores') is distinct from 'array' then
    raise exception 'observation.stores must be an array' using errcode = '22023';
  end if;
  select e.ordinality - 1 as idx into _bad
    from jsonb_array_elements(_observation -> 'stores') with ordinality e
   where jsonb_typeof(e.value) <> 'object'
      or coalesce(e.value ->> 'slug', '') !~ '^[a-z0-9][a-z0-9-]{0,99}$'
      or length(coalesce(e.value ->> 'name', '')) not between 1 and 200
      or length(coalesce(e.value ->> 'menu_url', '')) not between 1 and 500
   limit 1;
  if found then
    raise exception 'observation.stores[%] must have a slug (a-z, 0-9, -), a name and a menu_url', _bad.idx
      using errcode = '22023';
  end if;
  with found as (
    insert into menus.store (slug, name, menu_url, task_id)
    select e.value ->> 'slug', e.value ->> 'name', e.value ->> 'menu_url', _task_id
      from jsonb_array_elements(_observation -> 'stores') with ordinality e
     order by e.ordinality
    on conflict (slug) do nothing
    returning store_id
  )
  select coalesce(array_agg(store_id order by store_id), '{}') into _new from found;
  perform queues.enqueue_many(coalesce((
    select jsonb_agg(jsonb_build_object(
             'task_type', 'entry_point_discovery',
             'payload', jsonb_build_object('store_id', s.store_id, 'menu_url', s.menu_url),
             'priority', menus.new_store_priority(),
             'resource_key', menus.store_resource_key(s.store_id),
             'max_attempts', menus.platform_max_attempts()) order by s.store_id)
      from menus.store s where s.store_id = any (_new)), '[]'));
  return jsonb_build_object('stores_seen', jsonb_array_length(_observation -> 'stores'),
                            'new_store_ids', to_jsonb(_new));
end;
$$;

create or replace function menus.record_entry_point(_task_id bigint, _payload jsonb, _observation jsonb) returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _store_id bigint := menus.task_store(_payload);
  _platform_id text := _observation ->> 'platform_dispensary_id';
  _recorded boolean;
begin
  if jsonb_typeof(_observation -> 'platform_dispensary_id') is distinct from 'string'
     or length(_platform_id) not between 1 and 100 then
    raise exception 'observation.platform_dispensary_id must be 1 to 100 characters' using errcode = '22023';
  end if;
  insert into menus.store_platform_id (store_id, platform_dispensary_id, task_id)
  values (_store_id, _platform_id, _task_id)
  on conflict (store_id) do nothing;
  _recorded := found;
  if _recorded then
    perform queues.enqueue('product_discovery',
      jsonb_build_object('store_id', _store_id, 'platform_dispensary_id', _platform_id),
      null, menus.new_store_priority(), menus.store_resource_key(_store_id), menus.platform_max_attempts());
  end if;
  return jsonb_build_object('store_id', _store_id, 'platform_dispensary_id',
                            (select e.platform_dispensary_id from menus.store_platform_id e where e.store_id = _store_id),
                            'product_discovery_enqueued', _recorded);
end;
$$;

-- Products and snapshots from observation.products: [{id, name, price_cents, in_stock,
-- quantity}]. Returns counts, and how many prices changed since each product's last snapshot.
create or replace function menus.record_products(_task_id bigint, _payload jsonb, _observation jsonb, _initial boolean)
  returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _store_id bigint := menus.task_store(_payload);
  _bad record;
  _new integer;
  _changed integer;
  _count integer;
begin
  if jsonb_typeof(_observation -> 'products') is distinct from 'array' then
    raise exception 'observation.products must be an array' using errcode = '22023';
  end if;
  select e.ordinality - 1 as idx into _bad
    from jsonb_array_elements(_observation -> 'products') with ordinality e
   where jsonb_typeof(e.value) <> 'object'
      or jsonb_typeof(e.value -> 'id') is distinct from 'string'
      or length(e.value ->> 'id') not between 1 and 100
      or length(coalesce(e.value ->> 'name', '')) not between 1 and 300
      or jsonb_typeof(e.value -> 'price_cents') is distinct from 'number'
      or (e.value ->> 'price_cents')::numeric < 0 or (e.value ->> 'price_cents')::numeric % 1 <> 0
      or jsonb_typeof(e.value -> 'in_stock') is distinct from 'boolean'
      or jsonb_typeof(e.value -> 'quantity') is distinct from 'number'
      or (e.value ->> 'quantity')::numeric < 0 or (e.value ->> 'quantity')::numeric % 1 <> 0
   limit 1;
  if found then
    raise exception 'observation.products[%] must have id, name, price_cents (whole, >= 0), in_stock (boolean) and quantity (whole, >= 0)',
      _bad.idx using errcode = '22023';
  end if;
  _count := jsonb_array_length(_observation -> 'products');

  with observed as (
    select e.value ->> 'id' as platform_product_id, e.value ->> 'name' as name,
           (e.value ->> 'price_cents')::integer as price_cents, (e.value ->> 'in_stock')::boolean as in_stock,
           (e.value ->> 'quantity')::integer as quantity
      from jsonb_array_elements(_observation -> 'products') e
  ),
  added as (
    insert into menus.product (store_id, platform_product_id, name)
    select _store_id, o.platform_product_id, o.name from observed o
    on conflict (store_id, platform_product_id) do nothing
    returning product_id, platform_product_id
  )
  select count(*) into _new from added;

  -- The previous snapshot of each product (its newest), before this one is added.
  select count(*) into _changed
    from jsonb_array_elements(_observation -> 'products') e
    join menus.product p on p.store_id = _store_id and p.platform_product_id = e.value ->> 'id'
    cross join lateral (
      select x.price_cents from menus.product_snapshot x where x.product_id = p.product_id
       order by x.observed_at desc, x.product_snapshot_id desc limit 1
    ) last
   where last.price_cents <> (e.value ->> 'price_cents')::integer;

  insert into menus.product_snapshot (product_id, task_id, price_cents, in_stock, stock_quantity)
  select p.product_id, _task_id, (e.value ->> 'price_cents')::integer, (e.value ->> 'in_stock')::boolean,
         (e.value ->> 'quantity')::integer
    from jsonb_array_elements(_observation -> 'products') e
    join menus.product p on p.store_id = _store_id and p.platform_product_id = e.value ->> 'id';

  if _initial then
    insert into menus.store_products_discovered (store_id, product_count, task_id)
    values (_store_id, _count, _task_id)
    on conflict (store_id) do nothing;
  end if;
  return jsonb_build_object('store_id', _store_id, 'products', _count, 'new_products', _new,
                            'price_changes', _changed);
end;
$$;

create or replace function menus.refresh_analytics() returns jsonb
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  -- CONCURRENTLY needs a populated view (and keeps it readable while it refreshes).
  if (select c.relispopulated from pg_class c where c.oid = 'menus.store_analytics'::regclass) then
    refresh materialized view concurrently menus.store_analytics;
  else
    refresh materialized view menus.store_analytics;
  end if;
  return (select jsonb_build_object('stores', count(*), 'products', coalesce(sum(a.products), 0),
                                    'in_stock', coalesce(sum(a.in_stock), 0))
            from menus.store_analytics a);
end;
$$;

-- The worker's single entry point: records what the platform call of the task holding
-- _task_lease_id observed, by the task's own type and payload (read here, never taken
-- from the caller), enqueues the follow-ups, and returns the result to record with the
-- completion. Raises 55000 when the lease is no longer current (nothing written) and
-- 22023 naming the field when the observation or the payload is malformed.
create or replace function menus.record_observation(_task_id bigint, _task_lease_id bigint, _observation jsonb)
  returns jsonb
  language plpgsql volatile
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  _task queues.task;
begin
  if _observation is null then
    raise exception 'observation must not be null' using errcode = '22004';
  end if;
  if jsonb_typeof(_observation) <> 'object' then
    raise exception 'observation must be a JSON object, got %', jsonb_typeof(_observation) using errcode = '22023';
  end if;
  perform queues.assert_current_lease(_task_id, _task_lease_id);
  select t.* into _task from queues.task t where t.task_id = _task_id;
  case _task.task_type
    when 'store_discovery' then
      return menus.record_store_discovery(_task_id, _observation);
    when 'entry_point_discovery' then
      return menus.record_entry_point(_task_id, _task.payload, _observation);
    when 'product_discovery' then
      return menus.record_products(_task_id, _task.payload, _observation, true);
    when 'product_resync' then
      return menus.record_products(_task_id, _task.payload, _observation, false);
    when 'analytics_refresh' then
      return menus.refresh_analytics();
    else
      raise exception 'task % is a % task, not a menus task', _task_id, _task.task_type using errcode = '22023';
  end case;
end;
$$;
