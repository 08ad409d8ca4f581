-- A task's leases, in both of their shapes: a row of queues.task_lease (one lease per
-- task, every lease written before claims wrote one lease per claim), or its place in a
-- queues.claim_lease (one lease per claim: every task the claim took shares its
-- task_lease_id, and the claim names its one suspect, suspect_task_id). Readers never
-- read the two tables for a task's leases; they read one of these:
--   queues.task_leases                     a view: every lease of every task, a row per
--                                          (task, lease)
--   queues.task_leases_of(task_id)         one task's leases, an index probe of each
--                                          shape: task_lease's primary key, and the GiST
--                                          index on claim_lease.task_range in the
--                                          partitions that can hold the task's claims
--                                          (task_id >= the task's: a claim lease lives
--                                          in the set of the largest task id it names)
--   queues.task_lease_at(task_id, lease)   one lease of one task: task_lease's primary
--                                          key, and claim_lease's lease id index
--   queues.task_lease_effective            leases with their expiry in force (a view)
--   queues.task_lease_effective_of(task_id)  one task's, probed as task_leases_of
-- worker_id: the lease's worker (a lease names it by key in queues.worker_name, or, on
-- per-task leases written before that key existed, by id). suspect: the claim named the
-- task its suspect (null on per-task leases written before claims named one).
--
-- The functions are inlined into their callers (SQL, stable, no SET clause, not a
-- security definer), so that a caller's task id reaches the probes; every object they
-- name is schema-qualified. Called from definer functions with a pinned search path: no
-- grants. (A view read by another role cannot call them: public.worker_tasks writes the
-- probe out.)

create or replace function queues.task_leases_of(_task_id bigint)
  returns table (task_lease_id bigint, task_id bigint, worker_key integer, worker_id text,
                 leased_at timestamptz, expires_at timestamptz, suspect boolean)
  language sql stable
as $$
  select l.task_lease_id, l.task_id, l.worker_key, l.worker_id, l.leased_at, l.expires_at, l.suspect
    from queues.task_lease l
   where l.task_id = _task_id
  union all
  select c.task_lease_id, _task_id, c.worker_key, null::text, c.leased_at, c.expires_at,
         coalesce(c.suspect_task_id = _task_id, false)
    from queues.claim_lease c
   where c.task_range @> _task_id
     and c.task_id >= _task_id
     and _task_id = any (c.task_ids)
$$;

create or replace function queues.task_lease_at(_task_id bigint, _task_lease_id bigint)
  returns table (task_lease_id bigint, task_id bigint, worker_key integer, worker_id text,
                 leased_at timestamptz, expires_at timestamptz, suspect boolean)
  language sql stable
as $$
  select l.task_lease_id, l.task_id, l.worker_key, l.worker_id, l.leased_at, l.expires_at, l.suspect
    from queues.task_lease l
   where l.task_id = _task_id and l.task_lease_id = _task_lease_id
  union all
  select c.task_lease_id, _task_id, c.worker_key, null::text, c.leased_at, c.expires_at,
         coalesce(c.suspect_task_id = _task_id, false)
    from queues.claim_lease c
   where c.task_lease_id = _task_lease_id
     and c.task_id >= _task_id
     and _task_id = any (c.task_ids)
$$;

create or replace view queues.task_leases as
select l.task_lease_id, l.task_id, l.worker_key, l.worker_id, l.leased_at, l.expires_at, l.suspect
  from queues.task_lease l
union all
select c.task_lease_id, u.task_id, c.worker_key, null::text, c.leased_at, c.expires_at,
       coalesce(c.suspect_task_id = u.task_id, false)
  from queues.claim_lease c
 cross join lateral unnest(c.task_ids) as u(task_id);
comment on view queues.task_leases is
  'Every lease of every task, a row per (task, lease): queues.task_lease and the tasks of each queues.claim_lease. A task''s own: queues.task_leases_of(task_id).';

-- Each lease with the expiry in force: released, else revoked, else the newest
-- extension's, else as claimed; and its worker's id. Releases, revocations and
-- extensions name (task_id, task_lease_id) per task in both shapes, and are joined on
-- their primary keys, so a task's are read from its own partition set.
create or replace function queues.task_lease_effective_of(_task_id bigint)
  returns table (task_lease_id bigint, task_id bigint, worker_id text, leased_at timestamptz,
                 expires_at timestamptz, released_at timestamptz, extensions integer,
                 revoked_at timestamptz, suspect boolean)
  language sql stable
as $$
  select l.task_lease_id, l.task_id,
         coalesce(l.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = l.worker_key)),
         l.leased_at,
         coalesce(r.released_at, v.revoked_at, e.expires_at, l.expires_at),
         r.released_at,
         coalesce(e.extensions, 0),
         v.revoked_at,
         l.suspect
    from queues.task_leases_of(_task_id) l
    left join queues.task_lease_release r on r.task_id = l.task_id and r.task_lease_id = l.task_lease_id
    left join queues.task_lease_revocation v on v.task_id = l.task_id and v.task_lease_id = l.task_lease_id
    left join lateral (
      select max(x.expires_at) as expires_at, count(*)::integer as extensions
        from queues.task_lease_extension x
       where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
    ) e on true
$$;

create or replace view queues.task_lease_effective as
select l.task_lease_id, l.task_id,
       coalesce(l.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = l.worker_key)) as worker_id,
       l.leased_at,
       coalesce(r.released_at, v.revoked_at, e.expires_at, l.expires_at) as expires_at,
       r.released_at,
       coalesce(e.extensions, 0) as extensions,
       v.revoked_at,
       l.suspect
  from queues.task_leases l
  left join queues.task_lease_release r on r.task_id = l.task_id and r.task_lease_id = l.task_lease_id
  left join queues.task_lease_revocation v on v.task_id = l.task_id and v.task_lease_id = l.task_lease_id
  left join lateral (
    select max(x.expires_at) as expires_at, count(*)::integer as extensions
      from queues.task_lease_extension x
     where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
  ) e on true;
comment on view queues.task_lease_effective is 'Leases with their effective expiry (releases and heartbeats applied), both shapes (queues.task_leases). A task''s own: queues.task_lease_effective_of(task_id).';

revoke execute on function queues.task_leases_of(bigint) from public;
revoke execute on function queues.task_lease_at(bigint, bigint) from public;
revoke execute on function queues.task_lease_effective_of(bigint) from public;
