/* @name TaskRecordProgress */
select queues.record_progress(:taskId!::bigint, :taskLeaseId!::bigint, :done!::bigint, :total::bigint, :note::text) as "ok";
