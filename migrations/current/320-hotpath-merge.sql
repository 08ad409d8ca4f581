-- After the hot-path rewrite (120) meets the later features: the facts that refer to the
-- hot facts through foreign keys (queues.task_result and internal.provider_call_started to
-- queues.task_lease, queues.task_cancelled to queues.task_completed) are emptied with
-- them when queues.task is truncated (the trigger of 120 truncates the hot facts, and
-- TRUNCATE refuses a referenced table unless its referencing tables go too).
set local lock_timeout = '5s';

create or replace function queues.truncate_task_facts() returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  truncate queues.task_pending, queues.task_lease, queues.task_completed, queues.task_lease_extension,
           queues.task_lease_release, queues.task_lease_revocation, queues.task_lease_started
    cascade;
  return null;
end;
$$;
