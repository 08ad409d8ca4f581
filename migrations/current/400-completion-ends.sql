set local lock_timeout = '5s';

-- A claim lease names its tasks' one type (null when the claim took several types): the
-- completion round of its plain successes reads it instead of each task's.
alter table queues.claim_lease add column if not exists task_type text;
comment on column queues.claim_lease.task_type is
  'The one task type of the claim''s tasks; null when the claim took tasks of several types.';

--!include queues/claim.sql
--!include queues/complete.sql
--!include queues/lease.sql
