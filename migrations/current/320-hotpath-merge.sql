-- After the hot-path rewrite (120) meets the later features. 120 dropped the foreign keys
-- to the hot facts (queues.task_lease, queues.task_completed), and its trigger truncates
-- them when queues.task is truncated; TRUNCATE refuses a table that another table still
-- references. So the later facts that referred to them keep only their key to queues.task,
-- as the cold facts of 120 do: task results and started provider calls no longer refer
-- to their lease, and a cancellation refers to its task rather than to its completion.
-- Their writers (queues.record_task_result, internal.start_provider_call,
-- admin.cancel_tasks) check the lease or the completion themselves.
-- Locks: dropping or adding a foreign key takes ACCESS EXCLUSIVE on the referencing
-- table (not a hot one) and SHARE ROW EXCLUSIVE on the referenced one, briefly.
set local lock_timeout = '5s';
-- lock: access exclusive on queues.task_lease: dropping the foreign keys that refer to it (their triggers on it); catalog only, no rewrite or scan, held for the instant of the change
-- lock: access exclusive on queues.task_completed: dropping the foreign keys that refer to it (their triggers on it); catalog only, no rewrite or scan, held for the instant of the change

alter table queues.task_result drop constraint if exists task_result_task_lease_id_fkey;
alter table internal.provider_call_started drop constraint if exists provider_call_started_task_lease_id_fkey;
alter table queues.task_cancelled drop constraint if exists task_cancelled_task_id_fkey;
alter table queues.task_cancelled add constraint task_cancelled_task_id_fkey
  foreign key (task_id) references queues.task on delete cascade;
