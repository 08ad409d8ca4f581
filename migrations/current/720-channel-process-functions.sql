-- A channel process's facts and the closing of attempts the queue gave up on are static
-- SQL in functions of the process's own (<name>_process_facts,
-- <name>_close_given_up_attempts), made at registration: a connection plans them once,
-- where the dynamic SQL before was planned on every supervisor run
-- (internal.create_channel_process_functions, sql/internal/channel_process.sql).
set local lock_timeout = '5s';

--!include internal/channel_process.sql

select internal.create_channel_process_functions(p.process_schema, p.process_name)
  from internal.channel_process p;
