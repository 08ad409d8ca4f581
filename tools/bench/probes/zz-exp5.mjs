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
  const sqlWrap = `create or replace function queues.enqueue(_task_type text, _payload jsonb, _scheduled_at timestamptz default null, _priority integer default null, _resource_key text default null, _max_attempts integer default null, _notify boolean default true) returns bigint language sql volatile security definer set search_path = pg_catalog, pg_temp as $$ select queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, true, coalesce(_notify, true)) $$`;
  const plWrap = `create or replace function queues.enqueue(_task_type text, _payload jsonb, _scheduled_at timestamptz default null, _priority integer default null, _resource_key text default null, _max_attempts integer default null, _notify boolean default true) returns bigint language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$ begin return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, true, coalesce(_notify, true)); end $$`;
  const N = Number(process.argv[2] ?? 2000);
  const loop = async (body) => {
    await root.query('begin');
    const { rows } = await root.query(`select * from pg_temp_bench_loop($1)`, [N]).catch(() => ({ rows: null }));
    await root.query('rollback');
    return rows;
  };
  const time = async (expr) => {
    await root.query(`create or replace function pg_temp.t(_n int) returns float8 language plpgsql as $f$
      declare _t timestamptz := clock_timestamp(); begin for i in 1.._n loop ${expr.startsWith('with') ? expr : 'perform ' + expr}; end loop;
      return extract(epoch from clock_timestamp() - _t) * 1e6 / _n; end $f$`);
    await root.query('begin');
    const { rows } = await root.query('select pg_temp.t($1) as us', [N]);
    await root.query('rollback');
    return Math.round(rows[0].us * 10) / 10;
  };
  const res = {}; const add = (k, v) => (res[k] ??= []).push(v);
  for (let r = 0; r < 5; r++) {
    add('enqueue (plpgsql wrapper)', await time(`queues.enqueue('bench', '{"a":1}', _notify => false)`));
    add('enqueue_task (core)', await time(`queues.enqueue_task('bench', '{"a":1}', null, null, null, null, true, false)`));
    add('enqueue_task + notify', await time(`queues.enqueue_task('bench', '{"a":1}', null, null, null, null, true, true)`));
    add('plain insert task+pending', await time(`with i as (insert into queues.task (task_type, payload) values ('bench', '{"a":1}') returning task_id, task_type, priority, scheduled_at, resource_key, max_attempts) insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at, max_attempts) select i.task_id, i.task_type, i.priority, i.scheduled_at, i.resource_key, i.scheduled_at, i.max_attempts from i`));
    add('enqueue_internal', await time(`queues.enqueue_internal('bench', '{"a":1}')`));
    add('max_payload_bytes()', await time(`queues.max_payload_bytes()`));
  }
  console.log(`µs per call (server, in a DO loop of ${N}, one transaction); 5 rounds`);
  for (const [k, v] of Object.entries(res)) console.log(k.padEnd(30), v.join(' '), ' min', Math.min(...v));
  await root.end();
} finally { await server.stop({ destroy: true }); }
