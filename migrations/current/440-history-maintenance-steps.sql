-- History maintenance in short steps (sql/queues/partitions.sql): a set is made one table
-- at a time, each as a standalone table then attached, and dropped one table at a time,
-- each detached then dropped; the schedule runs each step in a transaction of its own
-- (queues.maintain_history_step with "repeat"), so no step's lock is held while another
-- runs, and a claim waits at most lock_timeout_ms plus one catalog change behind it.
set local lock_timeout = '5s';

-- A claim waits for maintenance's pending lock at most this long: 50 ms, down from 100,
-- so that the wait plus the catalog change stays under 100 ms. A database still at the
-- old default moves to the new one.
alter table queues.history_setting alter column lock_timeout_ms set default 50;
update queues.history_setting set lock_timeout_ms = 50, updated_at = now() where lock_timeout_ms = 100;

--!include queues/partitions.sql

-- The maintenance schedule runs the step function, called again while there is more,
-- each call its own transaction. Only the definition this project installed is changed
-- (cron, priority, missed-run policy and whether it is enabled are kept); an operator's
-- own payload is left alone.
do $$
declare
  _s schedules.schedule;
  _v schedules.schedule_version;
begin
  select * into _s from schedules.schedule s where s.name = 'queue_history_maintenance';
  if not found then
    return;
  end if;
  _v := schedules.current_version(_s.schedule_id);
  if _v.task_type = 'db_function' and _v.payload = '{"db_function": "queues.maintain_history"}'::jsonb then
    perform schedules.append_schedule_version(
      now(), _s.schedule_id, _v.cron, _v.task_type, '{"db_function": "queues.maintain_history_step", "repeat": true}',
      _v.priority, _v.missed_run_policy, _v.enabled);
  end if;
end;
$$;
