/* @name ThroughputList */
select t.bucket_start as "bucketStart!", t.task_type as "taskType!", t.outcome as "outcome!",
       t.completed as "completed!"
  from admin.throughput(:windowSeconds::integer, :bucketSeconds::integer) t;

/* @name CompletionStatsList */
select s.task_type as "taskType!", s.outcome as "outcome!", s.completed as "completed!",
       s.timed as "timed!", s.duration_sum as "durationSum!", s.duration_buckets as "durationBuckets!"
  from admin.completion_stats(:windowSeconds::integer) s;
