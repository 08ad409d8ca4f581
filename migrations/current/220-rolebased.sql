-- The role-based worker system (docs/menus.md): task results as facts, the menus domain
-- (stores, platform ids, products, price and stock snapshots, analytics), its record
-- functions, generators and schedules.
set local lock_timeout = '5s';

-- Task results -----------------------------------------------------------------------
-- What a task's run produced (the seed's `result jsonb`), one row per lease that
-- recorded one, written in the transaction that completes the task and fenced by the
-- lease (queues.record_task_result).
create table if not exists queues.task_result (
  task_id       bigint not null references queues.task on delete cascade,
  task_lease_id bigint not null references queues.task_lease on delete cascade,
  result        jsonb not null,
  recorded_at   timestamptz not null default now(),
  primary key (task_id, task_lease_id)
);
comment on table queues.task_result is 'Append-only: the result a task''s run recorded, per lease.';
drop trigger if exists forbid_update on queues.task_result;
create trigger forbid_update before update on queues.task_result
  for each statement execute function queues.forbid_fact_update();

-- The menus domain ----------------------------------------------------------------------
create schema if not exists menus;
revoke all on schema menus from public;

-- A store found by store discovery, keyed by the platform's listing slug.
create table if not exists menus.store (
  store_id      bigint generated always as identity primary key,
  slug          text not null unique check (slug ~ '^[a-z0-9][a-z0-9-]{0,99}$'),
  name          text not null check (length(name) between 1 and 200),
  menu_url      text not null check (length(menu_url) between 1 and 500),
  discovered_at timestamptz not null default now(),
  -- The store_discovery task that found it (not a foreign key: queue retention may
  -- delete old tasks).
  task_id       bigint
);

-- The platform id resolved from the store's menu URL (entry-point discovery).
create table if not exists menus.store_platform_id (
  store_id               bigint primary key references menus.store on delete cascade,
  platform_dispensary_id text not null unique check (length(platform_dispensary_id) between 1 and 100),
  resolved_at            timestamptz not null default now(),
  task_id                bigint
);

-- The initial crawl is done: the store is active and joins the staggered resync.
create table if not exists menus.store_products_discovered (
  store_id      bigint primary key references menus.store on delete cascade,
  product_count integer not null check (product_count >= 0),
  discovered_at timestamptz not null default now(),
  task_id       bigint
);

create table if not exists menus.product (
  product_id          bigint generated always as identity primary key,
  store_id            bigint not null references menus.store on delete cascade,
  platform_product_id text not null check (length(platform_product_id) between 1 and 100),
  name                text not null check (length(name) between 1 and 300),
  first_seen_at       timestamptz not null default now(),
  unique (store_id, platform_product_id)
);

-- Price and stock as observed by one crawl (product_discovery or product_resync).
create table if not exists menus.product_snapshot (
  product_snapshot_id bigint generated always as identity primary key,
  product_id          bigint not null references menus.product on delete cascade,
  task_id             bigint not null,
  observed_at         timestamptz not null default now(),
  price_cents         integer not null check (price_cents >= 0),
  in_stock            boolean not null,
  stock_quantity      integer not null check (stock_quantity >= 0)
);
create index if not exists product_snapshot_product_idx on menus.product_snapshot (product_id, observed_at desc);
create index if not exists product_snapshot_task_idx on menus.product_snapshot (task_id);

-- Each day's resync generation (menus.generate_resync_tasks), at most one per date.
create table if not exists menus.resync_generated (
  resync_date  date primary key,
  batches      integer not null check (batches between 1 and 24),
  stores       integer not null check (stores >= 0),
  generated_at timestamptz not null default now()
);

do $$
declare
  _table text;
begin
  foreach _table in array array['store', 'store_platform_id', 'store_products_discovered', 'product', 'product_snapshot',
                                'resync_generated'] loop
    execute format('drop trigger if exists forbid_update on menus.%I', _table);
    execute format('create trigger forbid_update before update on menus.%I
                      for each statement execute function queues.forbid_fact_update()', _table);
  end loop;
end;
$$;

-- Analytics: per store, its latest prices and stock. Refreshed by analytics_refresh.
create materialized view if not exists menus.store_analytics as
select s.store_id, s.slug, s.name,
       count(l.product_id)::integer as products,
       count(l.product_id) filter (where l.in_stock)::integer as in_stock,
       round(avg(l.price_cents))::integer as avg_price_cents,
       min(l.price_cents) as min_price_cents,
       max(l.price_cents) as max_price_cents,
       max(l.observed_at) as last_observed_at
  from menus.store s
  left join menus.product p on p.store_id = s.store_id
  left join lateral (
    select p.product_id, x.price_cents, x.in_stock, x.observed_at
      from menus.product_snapshot x where x.product_id = p.product_id
     order by x.observed_at desc, x.product_snapshot_id desc limit 1
  ) l on true
 group by s.store_id, s.slug, s.name
with no data;
create unique index if not exists store_analytics_store_idx on menus.store_analytics (store_id);

--!include queues/result.sql
--!include menus/record.sql
--!include menus/generate.sql
--!include menus/schedules.sql
--!include menus/privileges.sql
