set local lock_timeout = '5s';
-- A process root's progress from its facts (files deleted out of files), on its process-tree node.
--!include accounts/progress.sql
--!include admin/processes.sql
--!include admin/process_tree.sql
