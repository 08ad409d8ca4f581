/*
  The role-based worker system's generators (sql/menus/generate.sql).
*/

/* @name MenusResyncGenerate */
select b.batch as "batch!", b.scheduled_at as "scheduledAt!", b.task_count as "taskCount!"
  from menus.generate_resync_tasks(:batches!::integer, :date!::date) b;

/* @name MenusStoreDiscoveryGenerate */
select menus.generate_store_discovery(:scheduledAt::timestamptz) as "taskId!";
