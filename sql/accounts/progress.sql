-- An account deletion's progress from its facts: files deleted out of the account's files
-- (files.account_file_deletion_facts), with a note naming the step it is at. A process
-- exposes its progress by a function S.X_progress(root_id bigint) returning
-- {done, total, note}; admin.process_node_at (the process tree: GET
-- /api/processes/:process/:id/tree) shows it as the node's `progress`.
create or replace function accounts.account_deletion_progress(_account_deletion_task_id bigint)
  returns jsonb
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object(
           'done', ff.num_files_deleted,
           'total', ff.num_files,
           'note', case when ff.num_files_deleted = ff.num_files then 'files deleted'
                        when ff.num_files_without_task = ff.num_files then 'file deletions not started'
                        else format('deleting files (%s stuck)', cardinality(ff.stuck_file_ids)) end)
    from accounts.account_deletion_task t
   cross join lateral files.account_file_deletion_facts(t.account_id) ff
   where t.account_deletion_task_id = _account_deletion_task_id
$$;

-- An account deletion's children in the process tree (admin.process_children): the
-- deletions of the account's files, then its anonymization.
create or replace function accounts.account_deletion_children(_account_deletion_task_id bigint)
  returns table (process text, root_id bigint)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select 'file_deletion', fd.file_deletion_task_id
    from accounts.account_deletion_task d
    join files.file f on f.account_id = d.account_id
    join files.file_deletion_task fd on fd.file_id = f.file_id
   where d.account_deletion_task_id = _account_deletion_task_id
  union all
  select 'account_anonymization', x.account_anonymization_task_id
    from accounts.account_deletion_task d
    join accounts.account_anonymization_task x on x.account_id = d.account_id
   where d.account_deletion_task_id = _account_deletion_task_id
$$;
