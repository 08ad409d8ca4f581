-- The locks of history maintenance (sql/queues/partitions.sql describes the partitions).
--
-- Locks. The claim and the completion read queues.task, task_lease_started,
-- task_completed and completion_round through generic plans, which lock every partition of those tables,
-- default included, and every writer takes ROW EXCLUSIVE on the parents. So each step
-- locks one table (its parent, the partition, the default) in the order the hot path
-- takes its own (parent, then partition, then default), without waiting in a lock queue
-- (queues.lock_history_tables: asked for without waiting, again every few ms, for up to
-- lock_timeout_ms, then one last try that waits at most 50 ms), and holds the locks only
-- for a catalog change, in a transaction of its own when run by the schedule
-- (queues.maintain_history_step with "repeat"): a claim waits behind maintenance at most
-- 50 ms plus that change. Measured locks (PostgreSQL 18):
--   create table .. partition of     ACCESS EXCLUSIVE on the parent and its default: not used
--   create table (like ..) + attach  SHARE UPDATE EXCLUSIVE on the parent (no conflict with
--                                    DML), ACCESS EXCLUSIVE on the default partition (a
--                                    conflict only for task, task_lease_started,
--                                    task_completed and completion_round, whose defaults
--                                    the hot path's plans lock)
--                                    and, for a set made late (its range within reach of the
--                                    ids handed out), SHARE on the parent first: writers of
--                                    that table wait for the attach (a writer that routed its
--                                    row before the attach commits would fail on the
--                                    default's new constraint; see attach_history_partition)
--   detach partition                 ACCESS EXCLUSIVE on the parent, default and partition;
--                                    catalog only (no scan); detach concurrently is refused
--                                    while a default partition exists, and in a function
--   drop table (attached partition)  the same plus unlinking its files under those locks:
--                                    not used; a detached table is dropped instead, which
--                                    locks only itself, except a table with a foreign key
--                                    (none today), whose drop takes ACCESS EXCLUSIVE on
--                                    the table it references: it is truncated first (under
--                                    its own lock only), so that drop is a catalog change

-- Cancels the autovacuum workers that hold a lock on one of _tables (names in schema
-- queues) in this database, as PostgreSQL itself does for a lock request that has waited
-- deadlock_timeout (1 s): a maintenance step never waits that long (claims would queue
-- behind it), so without this a long autovacuum of a default partition or of a set kept
-- every step that must lock that table skipping until it ended. Autovacuum comes back
-- later. An autovacuum that prevents wraparound (the table's age past
-- autovacuum_freeze_max_age or autovacuum_multixact_freeze_max_age) is left alone, as
-- PostgreSQL leaves it. Needs membership in pg_signal_autovacuum_worker (PostgreSQL 18;
-- the owner gets it when the database users are provisioned, docs/operations.md);
-- without it, nothing is cancelled. Returns how many were cancelled. Owner only.
create or replace function queues.cancel_autovacuum(_tables text[])
  returns integer
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
declare
  _pid integer;
  _cancelled integer := 0;
begin
  for _pid in
    select distinct l.pid
      from pg_locks l
      join pg_stat_activity a on a.pid = l.pid
      join pg_class c on c.oid = l.relation
     where l.locktype = 'relation' and l.granted
       and l.database = (select d.oid from pg_database d where d.datname = current_database())
       -- An autovacuum worker runs as no role: its usesysid is null, and a role without
       -- pg_read_all_stats sees its backend_type as null too (it is shown to those with it).
       and a.usesysid is null and coalesce(a.backend_type, 'autovacuum worker') = 'autovacuum worker'
       and c.relnamespace = 'queues'::regnamespace and c.relname = any (_tables)
       and age(c.relfrozenxid) < current_setting('autovacuum_freeze_max_age')::bigint
       and mxid_age(c.relminmxid) < current_setting('autovacuum_multixact_freeze_max_age')::bigint
  loop
    begin
      if pg_cancel_backend(_pid) then
        _cancelled := _cancelled + 1;
      end if;
    exception
      when insufficient_privilege then
        return _cancelled;
    end;
  end loop;
  return _cancelled;
end;
$$;

-- Takes the locks of one maintenance step, _modes[i] on queues._tables[i] (only the table
-- named: a partitioned parent's partitions are not locked with it), in order, without
-- waiting in a lock queue until its last try: each try asks for every lock with NOWAIT,
-- and a try that meets a holder gives back what it took and tries again 1 to 4 ms later,
-- until the locks are had or _within_ms has passed; then one last try waits in the queue
-- for at most 50 ms, and failing that, lock_not_available (55P03, naming the tables and
-- the tries). Why not wait: a lock request that waits holds every later request behind
-- it, so a claim would queue behind maintenance for as long as the longest transaction in
-- flight keeps maintenance waiting (a batch of server-side steps holds task's partitions
-- for tens of milliseconds; under a steady load one is always in flight, so a waiting
-- request rarely got its lock within a short lock_timeout). Asking without waiting takes
-- the moments between transactions and leaves the queue's own order alone (but see the
-- two 50 ms below). Modes: 'share update exclusive', 'share', 'access exclusive'. Returns
-- the tries it took. Owner only.
create or replace function queues.lock_history_tables(_tables text[], _modes text[], _within_ms integer)
  returns integer
  language plpgsql volatile
  set lock_timeout = '50ms'
  set search_path = pg_catalog, pg_temp
as $$
declare
  _deadline timestamptz;
  _tries integer := 0;
  _last boolean;
  _last_until timestamptz;
  _autovacuum_cancelled boolean := false;
begin
  if _tables is null or _modes is null or cardinality(_tables) = 0 or cardinality(_tables) <> cardinality(_modes) then
    raise exception 'tables and modes must be non-empty arrays of the same length' using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_modes) m where m is null or m not in ('share update exclusive', 'share', 'access exclusive')) then
    raise exception 'a lock mode must be share update exclusive, share or access exclusive, got %', _modes
      using errcode = '22023';
  end if;
  if exists (select 1 from unnest(_tables) t where t is null or to_regclass(format('queues.%I', t)) is null) then
    raise exception 'every table must name a table in schema queues, got %', _tables using errcode = '22023';
  end if;
  if _within_ms is null or _within_ms < 0 then
    raise exception 'within_ms must be 0 or more, got %', _within_ms using errcode = '22023';
  end if;
  -- A transaction that already holds a lock of this kind (steps run together, as in
  -- queues.maintain_history_at, or a partition made earlier in it) keeps the queue
  -- waiting while it tries, and a holder in its way may be waiting for it: it tries for
  -- at most 50 ms then.
  if exists (select 1 from pg_locks l
              where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.granted
                and l.mode in ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                               'ExclusiveLock', 'AccessExclusiveLock')) then
    _within_ms := least(_within_ms, 50);
  end if;
  _deadline := clock_timestamp() + make_interval(secs => _within_ms / 1000.0);
  loop
    _tries := _tries + 1;
    -- The last try, once the window has passed, waits in the queue for at most 50 ms
    -- (restored on return): transactions that follow one another without a moment
    -- between (one connection's statements back to back) are waited for, and whatever
    -- queues behind this try waits no longer.
    -- The 50 ms are for the whole try, however many tables it locks (each lock waits
    -- only for what is left of them).
    _last := clock_timestamp() >= _deadline;
    _last_until := clock_timestamp() + make_interval(secs => greatest(least(_within_ms, 50), 1) / 1000.0);
    begin
      for _i in 1 .. cardinality(_tables) loop
        if _last then
          perform set_config('lock_timeout',
            greatest(ceil(extract(epoch from _last_until - clock_timestamp()) * 1000), 1)::integer || 'ms', true);
        end if;
        -- The mode is one of the three above (checked), the table quoted as an identifier.
        execute format('lock table only queues.%I in %s mode%s', _tables[_i], _modes[_i],
                       case when _last then '' else ' nowait' end);
      end loop;
      return _tries;
    exception
      when lock_not_available then
        -- The block's locks are given back with it. An autovacuum in the way is cancelled
        -- (once per call); the next try, a few ms later, finds the table free.
        if not _autovacuum_cancelled then
          _autovacuum_cancelled := true;
          perform queues.cancel_autovacuum(_tables);
        end if;
    end;
    exit when _last;
    perform pg_sleep((1 + random() * 3) / 1000.0);
  end loop;
  raise exception 'could not lock % in % tries over % ms: other transactions held them throughout',
    array_to_string(_tables, ', '), _tries, _within_ms
    using errcode = '55P03';
end;
$$;

revoke execute on function queues.lock_history_tables(text[], text[], integer), queues.cancel_autovacuum(text[])
  from public;
