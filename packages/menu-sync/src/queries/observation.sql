/*
  Recording what a menu-platform call observed (sql/menus/record.sql): facts, follow-up
  tasks, and the result to keep with the completion.
*/

/* @name ObservationRecord */
select menus.record_observation(:taskId!::bigint, :taskLeaseId!::bigint, :observation!::jsonb) as "result!";
