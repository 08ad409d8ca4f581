/* @name ProcessTimeline */
select f.at as "at!", f.process as "process!", f.root_id as "rootId!", f.fact as "fact!",
       f.attempt_id as "attemptId", f.detail as "detail!"
  from admin.process_timeline(:process!::text, :rootId!::bigint) f;

/* @name ProcessList */
select p.process as "process!" from admin.list_processes() p;

/* @name ProcessTree */
select admin.process_tree(:process!::text, :rootId!::bigint) as "tree!";

/* @name ProcessRootRankedList */
select r.root_id as "rootId!", r.created_at as "createdAt!", r.status as "status!", r.subject as "subject!",
       r.attempts as "attempts!", r.stuck_descendants as "stuckDescendants!", r.last_fact_at as "lastFactAt!"
  from admin.list_process_roots_ranked(:process!::text, :limit::integer, :beforeRootId::bigint) r;
