set local lock_timeout = '5s';
-- Provider back-pressure per group key (sql/queues/throttle.sql): queues.record_throttle
-- takes key_kind 'group' (a tenant's or provider account's group key, queues.task.group_key),
-- and every claim leaves the tasks of a throttled group key, of any type, until its end
-- (queues.throttled_keys_at read once per claim). The functions are made again by the
-- includes of 300-provider-throttle.sql, which inline their current files.
comment on table queues.throttle is
  'Append-only: a provider refused work of key (a task type, key_kind task_type; a group key, key_kind group) until throttled_until (a 429, a Retry-After, a quota error). Claims leave the key''s tasks while one of its reports not cleared is in force (queues.throttled_keys_at).';
comment on column queues.throttle.key_kind is
  '''task_type'': key is a task type (a channel such as email). ''group'': key is a group key (queues.task.group_key); the tasks of every type carrying it wait.';
-- Replaced by queues.throttled_keys_at (task types and group keys in one probe).
drop function if exists queues.throttled_task_types_at(timestamptz);
