set local lock_timeout = '5s';

-- The pending tasks that have a resource key (sql/queues/lease.sql,
-- queues.lock_resource_keys): every completion, heartbeat, release and revocation looks
-- up the keys of its tasks to lock them first. A completion round of 500 unkeyed tasks
-- probed task_pending's primary key 500 times to find none; this index holds only keyed
-- rows, so it answers from the few there are (none in a queue without keys).
-- task_pending holds only pending tasks: the build is short (SHARE lock, writes wait).
create index if not exists task_pending_keyed_idx on queues.task_pending (task_id)
  where resource_key is not null;
--!include queues/complete.sql
--!include queues/settle.sql
