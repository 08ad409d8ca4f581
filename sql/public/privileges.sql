-- Who may use the role-based specification's names in schema public
-- (sql/public/role_based_worker.sql). The views run as their owner over the queue's
-- tables (their readers get SELECT on the view only); a function a view calls is checked
-- against the reader. Listed in sql/database-user-grants.json ("api_views" and the database users).

revoke all on public.v_worker_capacity, public.worker_tasks from public;
revoke execute on function
  public.recover_stale_tasks(integer),
  public.generate_resync_tasks(integer, date)
from public;

grant select on public.v_worker_capacity, public.worker_tasks to :DATABASE_API;
grant execute on function public.recover_stale_tasks(integer) to :DATABASE_API;
grant execute on function public.generate_resync_tasks(integer, date) to :DATABASE_APP, :DATABASE_API;
