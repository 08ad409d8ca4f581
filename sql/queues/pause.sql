-- Pausing claims per task type (queue controls). Facts: queues.task_type_paused and
-- queues.task_type_resumed (created in migration 000002). The public claim
-- functions (sql/queues/claim.sql) pass the types they may claim through
-- queues.claimable_task_types, so every worker honours a pause on its next claim; the
-- owner-only claim_tasks_at is unaffected.

-- Task types paused now: a pause without a resumption.
create or replace function queues.paused_task_types()
  returns text[]
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(array_agg(p.task_type order by p.task_type), '{}')
    from queues.task_type_paused p
   where not exists (select 1 from queues.task_type_resumed r where r.task_type_paused_id = p.task_type_paused_id)
$$;

-- The task types a claim for _task_types (null: any type) may take: _task_types itself
-- when nothing is paused (the common case: one probe of an empty or tiny table) or when
-- it is empty (the claim refuses that); else the requested (or registered) types minus
-- the paused ones. When pauses leave no type it returns {NULL}, which no task type
-- equals: the claim still checks its arguments, and takes nothing.
create or replace function queues.claimable_task_types(_task_types text[])
  returns text[]
  language sql stable
  -- Planned once per session, not at each claim: a custom plan (the types known) looked
  -- cheaper than the generic one, so every call was planned again.
  set plan_cache_mode = force_generic_plan
  set search_path = pg_catalog, pg_temp
as $$
  select case
           when cardinality(x.paused) = 0 or cardinality(_task_types) = 0 then _task_types
           else coalesce(nullif(array(select t.task_type from queues.task_type t
                                       where (_task_types is null or t.task_type = any (_task_types))
                                         and not (t.task_type = any (x.paused))
                                       order by t.task_type), '{}'),
                         array[null]::text[])
         end
    -- OFFSET 0 keeps the subquery (not pulled up), so the pauses are read once per call,
    -- not once per reference to x.paused.
    from (select queues.paused_task_types() as paused offset 0) x
$$;
