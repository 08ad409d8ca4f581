-- History partitions: queues.task and every fact table keyed by task are range-partitioned
-- by task_id, all on the same bounds (a "partition set"). Old history leaves by dropping a
-- whole set, never by row-by-row DELETE. Settings: queues.history_setting; what was
-- dropped: queues.history_partition_dropped (both in migrations/committed/000004); when
-- each set was created: queues.history_partition_created.
--
-- Why task_id and not time: every fact carries task_id, so a row is routed without an
-- extra column; a task and all its facts sit in the same set, so a set can be dropped
-- alone; every lookup of the hot path is by task_id, so it is pruned to one partition;
-- and ids only grow, so a set whose range lies below the id sequence receives no new
-- task. docs/operations.md ("Retention and partitions") has the full reasoning.
--
-- The family, one concern a file (a migration includes only the file it changed):
--   partitions.sql           the tables and how their partitions are named
--   partitions_locks.sql     the locks a maintenance step takes, and how (read first)
--   partitions_create.sql    making a set, and adopting rows of the default partitions
--   partitions_sets.sql      the sets, their bounds and sizes, the last task id
--   partitions_maintain.sql  maintenance, one short step at a time
--   partitions_status.sql    what operators read
--
--   queues.history_tables()                    the partitioned tables, parent first
--   queues.lock_history_tables(t, m, ms)       a step's locks, between transactions; owner only
--   queues.cancel_autovacuum(t)                cancels autovacuum of tables a step must lock; owner only
--   queues.create_history_table(t, name)       a standalone table like t, to attach; owner only
--   queues.attach_history_partition(t, lo, hi) one table's partition of a set, owner only
--   queues.create_history_partition(lo, hi)    one set [lo, hi), owner only
--   queues.adopt_history_range(lo, hi)         a set [lo, hi) of rows in the default
--                                              partitions, moved out of them; owner only
--   queues.history_partition_bounds()          every table's partitions and their bounds
--   queues.history_sets()                      the sets' bounds, from the catalog only
--   queues.history_walk(_before)               the id ranges a newest-first read walks
--   queues.history_set_bytes(lower_bounds)     the table and index bytes of the sets given
--   queues.history_partition_sizes()           the sets with table and index bytes
--   queues.measure_history_sets(_now)          the sets that are done, measured for readers
--                                              (queues.history_set_measured); owner only
--   queues.history_partitions()                the sets with their total bytes
--   queues.maintain_history_step_at(_now)      one short step of maintenance; owner only
--   queues.maintain_history_step(payload)      the same at now(), a runnable db_function
--                                              (the schedule's: one transaction per step)
--   queues.maintain_history_at(_now)           every step in one transaction; owner only
--   queues.maintain_history(payload)           the same at now(), a runnable db_function
--   queues.history_summary_at(_now)            settings, oldest task, what the next drop waits for
--   queues.history_status_at(_now)             the same with the sets and their sizes

create or replace function queues.history_tables() returns text[]
  language sql immutable parallel safe
  set search_path = pg_catalog, pg_temp
as $$
  select array['task', 'task_lease', 'task_completed', 'error', 'task_lease_extension',
               'task_lease_release', 'task_lease_revocation', 'task_attempt_failed', 'task_redriven',
               'task_lease_started', 'task_interruption', 'task_cancelled', 'task_result', 'task_run_now',
               'task_trace', 'completion_round', 'claim_lease',
               'task_progress',
               'task_dependency']
$$;

-- The partition of _table holding [_lower, _upper) is named <table>_p<lower>.
-- No SET clause: a function with one is never inlined, and the status pages name every
-- partition of every set with it (196 calls at 14 sets). It names no object, so the
-- search path cannot change what it does (like admin.pending_state).
create or replace function queues.history_partition_name(_table text, _lower bigint) returns text
  language sql immutable parallel safe
as $$
  select _table || '_p' || _lower::text
$$;

revoke execute on function queues.history_tables(), queues.history_partition_name(text, bigint) from public;
