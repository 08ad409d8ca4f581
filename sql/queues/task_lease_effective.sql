-- Each lease with the expiry in force: released, else revoked, else the newest
-- extension's, else as claimed; and its worker's id (a lease names its worker by key in
-- queues.worker_name, or, written before that, by id). Lease facts are joined on
-- (task_id, task_lease_id), their primary keys, so a task's leases are read from its own
-- partition set. suspect: the claim named the task its suspect (null on leases written
-- before claims named one).
create or replace view queues.task_lease_effective as
select l.task_lease_id, l.task_id,
       coalesce(l.worker_id, (select n.worker_id from queues.worker_name n where n.worker_key = l.worker_key)) as worker_id,
       l.leased_at,
       coalesce(r.released_at, v.revoked_at, e.expires_at, l.expires_at) as expires_at,
       r.released_at,
       coalesce(e.extensions, 0) as extensions,
       v.revoked_at,
       l.suspect
  from queues.task_lease l
  left join queues.task_lease_release r on r.task_id = l.task_id and r.task_lease_id = l.task_lease_id
  left join queues.task_lease_revocation v on v.task_id = l.task_id and v.task_lease_id = l.task_lease_id
  left join lateral (
    select max(x.expires_at) as expires_at, count(*)::integer as extensions
      from queues.task_lease_extension x
     where x.task_id = l.task_id and x.task_lease_id = l.task_lease_id
  ) e on true;
comment on view queues.task_lease_effective is 'Leases with their effective expiry (releases and heartbeats applied).';
