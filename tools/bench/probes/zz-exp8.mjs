import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';
const name = `bench-exp-${process.pid}`;
const server = await openServer({ name });
try {
  await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const u = new URL(server.rootUrl); u.pathname = '/probe';
  const root = new pg.Client({ connectionString: u.toString() }); root.on('error', () => {});
  await root.connect();
  await root.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
  const batch = JSON.stringify(Array.from({ length: 1000 }, (_, k) => ({ task_type: 'bench', payload: { n: k } })));
  const R = 10;
  const time = async (stmt) => {
    await root.query(`create or replace function pg_temp.t(_tasks jsonb, _n int) returns float8 language plpgsql as $f$
      declare _t timestamptz := clock_timestamp(); _x bigint; begin for i in 1.._n loop ${stmt}; end loop;
      return extract(epoch from clock_timestamp() - _t) * 1e6 / _n / 1000; end $f$`);
    await root.query('begin');
    const { rows } = await root.query('select pg_temp.t($1::jsonb, $2) as us', [batch, R]);
    await root.query('rollback');
    return Math.round(rows[0].us * 100) / 100;
  };
  const V = {
    'enqueue_tasks (all)': `perform count(*) from queues.enqueue_tasks(_tasks, true)`,
    'elements + fields': `select count(*) into _x from (select e.value ->> 'task_type' as a, e.value -> 'payload' as b, (e.value ->> 'scheduled_at')::timestamptz, (e.value ->> 'priority')::int, e.value ->> 'resource_key', (e.value ->> 'max_attempts')::int from jsonb_array_elements(_tasks) with ordinality e) s where a is not null`,
    'minus keys check': `select count(*) into _x from jsonb_array_elements(_tasks) e where e.value - '{task_type,payload,scheduled_at,priority,resource_key,max_attempts}'::text[] <> '{}'`,
    'depth check': `select count(*) into _x from jsonb_array_elements(_tasks) e where jsonb_path_exists(e.value -> 'payload', 'strict $.**{65}')`,
    'type in hashed': `select count(*) into _x from jsonb_array_elements(_tasks) e where (e.value ->> 'task_type') in (select task_type from queues.task_type)`,
    'insert task only': `insert into queues.task (task_type, payload) select e.value ->> 'task_type', e.value -> 'payload' from jsonb_array_elements(_tasks) e`,
    'insert task + pending': `with i as (insert into queues.task (task_type, payload) select e.value ->> 'task_type', e.value -> 'payload' from jsonb_array_elements(_tasks) e returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts) insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts) select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts from i`,
  };
  const res = {};
  for (let r = 0; r < 4; r++) for (const [k, stmt] of Object.entries(V)) (res[k] ??= []).push(await time(stmt));
  console.log('µs per task (batches of 1000, server, one transaction, rolled back)');
  for (const [k, v] of Object.entries(res)) console.log(k.padEnd(24), v.join(' '), ' min', Math.min(...v));
  await root.end();
} finally { await server.stop({ destroy: true }); }
