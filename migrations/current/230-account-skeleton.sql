-- Account anonymization and account deletion on shared supervisor blocks
-- (internal/process_supervisor.sql, internal/sql_process.sql); the channel skeleton is
-- rebuilt on the same blocks. The helpers the blocks replace are dropped.
set local lock_timeout = '5s';

drop function if exists internal.lock_channel_process_root(text, text, bigint);
drop function if exists internal.record_channel_process_outcome(text, text, bigint, text);

drop function if exists accounts.has_account_anonymization_succeeded_attempt(bigint);
drop function if exists accounts.count_account_anonymization_attempts(bigint);
drop function if exists accounts.count_account_anonymization_failed_attempts(bigint);
drop function if exists accounts.has_account_anonymization_task_succeeded(bigint);
drop function if exists accounts.get_account_anonymization_task_failure(bigint);
drop function if exists accounts.account_anonymization_supervisor_facts(bigint);
drop function if exists accounts.lock_account_anonymization_task(bigint);
drop function if exists accounts.run_account_anonymization_attempt(bigint, bigint);
drop function if exists accounts.record_account_anonymization_task_succeeded(bigint);
drop function if exists accounts.record_account_anonymization_task_failed(bigint, text);
drop function if exists accounts.schedule_account_anonymization_recheck(bigint, integer);

drop function if exists accounts.count_account_deletion_supervisor_runs(bigint);
drop function if exists accounts.has_account_deletion_task_succeeded(bigint);
drop function if exists accounts.get_account_deletion_task_failure(bigint);
drop function if exists accounts.has_account_anonymization_task(bigint);
drop function if exists accounts.is_account_anonymized(bigint);
drop function if exists accounts.lock_account_deletion_task(bigint);
drop function if exists accounts.record_account_deletion_supervisor_run(bigint);
drop function if exists accounts.record_account_deletion_task_succeeded(bigint);
drop function if exists accounts.record_account_deletion_task_failed(bigint, text);
drop function if exists accounts.start_account_file_deletions(bigint);
drop function if exists accounts.schedule_account_deletion_recheck(bigint, integer);

--!include internal/process_supervisor.sql
--!include internal/sql_process.sql
--!include internal/channel_process.sql
--!include accounts/anonymization.sql
--!include accounts/account_deletion.sql
