/* @name CapacityList */
select c.task_type                as "taskType!",
       c.pending                  as "pending!",
       c.ready                    as "ready!",
       c.running                  as "running!",
       c.active_workers           as "activeWorkers!",
       c.completed_in_window      as "completedInWindow!",
       c.window_workers           as "windowWorkers!",
       c.window_seconds           as "windowSeconds!",
       c.tasks_per_worker_hour    as "tasksPerWorkerHour",
       c.estimated_hours_to_drain as "estimatedHoursToDrain",
       c.workers_needed_1h        as "workersNeeded1h",
       c.workers_needed_4h        as "workersNeeded4h",
       c.workers_needed_8h        as "workersNeeded8h"
  from admin.capacity(:taskType::text) c;
