-- History and retention, for operators: the partition sets of the queue's history with
-- their sizes, the oldest retained task, and the next set retention will drop
-- (queues.history_status_at, sql/queues/partitions.sql). Cost: catalog reads and index
-- probes per partition set, never a scan of history.
create or replace function admin.history_status()
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select queues.history_status_at(now())
$$;

-- Granted here, beside the function (see sql/queues/partitions.sql for why).
grant execute on function admin.history_status() to :DATABASE_API;
