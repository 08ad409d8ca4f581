set local lock_timeout = '5s';

-- One word for one action: "run now" (the dashboard's, admin.run_tasks_now) names what
-- queues.hasten_task did; it is queues.run_task_now, and answers 'due_now'.
drop function if exists queues.hasten_task(bigint);

--!include queues/run_now.sql
--!include internal/channel_process.sql

-- Every registered channel process gets its functions again from the template.
select internal.create_channel_process_functions(p.process_schema, p.process_name)
  from internal.channel_process p
 order by p.process_schema, p.process_name;
