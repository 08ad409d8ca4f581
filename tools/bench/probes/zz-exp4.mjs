import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';
const name = `bench-exp-${process.pid}`;
const server = await openServer({ name });
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const u = new URL(server.rootUrl); u.pathname = '/probe';
  const root = new pg.Pool({ connectionString: u.toString(), max: 2 }); root.on('error', () => {});
  const owner = new pg.Pool({ connectionString: urls.owner ?? urls.migrate ?? u.toString(), max: 1 }); owner.on('error', () => {});
  await root.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
  const sqlWrap = `create or replace function queues.enqueue(_task_type text, _payload jsonb, _scheduled_at timestamptz default null, _priority integer default null, _resource_key text default null, _max_attempts integer default null, _notify boolean default true) returns bigint language sql volatile security definer set search_path = pg_catalog, pg_temp as $$ select queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, true, coalesce(_notify, true)) $$`;
  const plWrap = `create or replace function queues.enqueue(_task_type text, _payload jsonb, _scheduled_at timestamptz default null, _priority integer default null, _resource_key text default null, _max_attempts integer default null, _notify boolean default true) returns bigint language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$ begin return queues.enqueue_task(_task_type, _payload, _scheduled_at, _priority, _resource_key, _max_attempts, true, coalesce(_notify, true)); end $$`;
  const app = new pg.Client({ connectionString: urls.app }); app.on('error', () => {});
  await app.connect();
  await app.query('set synchronous_commit = off');
  const N = Number(process.argv[2] ?? 3000);
  const CALL = 'call queues.enqueue_and_commit($1::text, $2::jsonb, $3::timestamptz, $4::integer, $5::text, $6::integer)';
  const SEL = 'select queues.enqueue($1::text, $2::jsonb, $3::timestamptz, $4::integer, $5::text, $6::integer) as "taskId!"';
  const run = async (text, named) => {
    const t = performance.now();
    for (let i = 0; i < N; i++) await app.query(named ? { name: 'q' + text.length, text, values: ['bench', `{"n":${i}}`, null, null, null, null] } : { text, values: ['bench', `{"n":${i}}`, null, null, null, null] });
    return Math.round(((performance.now() - t) * 1000) / N);
  };
  const res = {};
  const add = (k, v) => (res[k] ??= []).push(v);
  for (let r = 0; r < 3; r++) {
    await root.query(sqlWrap);
    add('call sqlwrap', await run(CALL, false));
    add('select sqlwrap', await run(SEL, false));
    await root.query(plWrap);
    add('call plwrap', await run(CALL, false));
    add('call plwrap named', await run(CALL, true));
    add('select plwrap', await run(SEL, false));
    add('select plwrap named', await run(SEL, true));
    add('select 1', await run('select $1::text, $2::jsonb, $3::timestamptz, $4::integer, $5::text, $6::integer', false));
  }
  console.log('µs per call, sequential, synchronous_commit off');
  for (const [k, v] of Object.entries(res)) console.log(k.padEnd(22), v.join(' '));
  await app.end(); await root.end(); await owner.end();
} finally { await server.stop({ destroy: true }); }
