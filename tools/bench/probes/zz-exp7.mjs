import pg from 'pg';
import { readFileSync } from 'node:fs';
import { openServer, provisionDatabase } from '@org/db-tools';
const name = `bench-exp-${process.pid}`;
const server = await openServer({ name });
const ticks = (pid) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return (Number(f[11]) + Number(f[12])) * 10; }; // ms
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const u = new URL(server.rootUrl); u.pathname = '/probe';
  const root = new pg.Client({ connectionString: u.toString() }); root.on('error', () => {}); await root.connect();
  await root.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
  const app = new pg.Client({ connectionString: urls.app }); app.on('error', () => {}); await app.connect();
  await app.query('set synchronous_commit = off');
  const pid = (await app.query('select pg_backend_pid() as p')).rows[0].p;
  const N = Number(process.argv[2] ?? 3000);
  const CALL = 'call queues.enqueue_and_commit($1::text, $2::jsonb, $3::timestamptz, $4::integer, $5::text, $6::integer)';
  const SEL = 'select queues.enqueue($1::text, $2::jsonb, $3::timestamptz, $4::integer, $5::text, $6::integer) as "taskId!"';
  const measure = async (fn, n) => {
    const s0 = ticks(pid); const c0 = process.cpuUsage(); const t0 = performance.now();
    for (let i = 0; i < n; i++) await fn(i);
    const c1 = process.cpuUsage(c0);
    return [Math.round(((ticks(pid) - s0) * 1000) / n), Math.round((c1.user + c1.system) / n), Math.round(((performance.now() - t0) * 1000) / n)];
  };
  const res = {}; const add = (k, v) => (res[k] ??= []).push(v.join('/'));
  const vals = (i) => ['bench', `{"n":${i}}`, null, null, null, null];
  for (let r = 0; r < 3; r++) {
    add('call unnamed', await measure((i) => app.query(CALL, vals(i)), N));
    add('call named', await measure((i) => app.query({ name: 'c', text: CALL, values: vals(i) }), N));
    add('select unnamed', await measure((i) => app.query(SEL, vals(i)), N));
    add('select named', await measure((i) => app.query({ name: 's', text: SEL, values: vals(i) }), N));
    add('select 1 unnamed', await measure((i) => app.query('select $1::text as x', ['a']), N));
    const batch = (b) => JSON.stringify(Array.from({ length: 1000 }, (_, k) => ({ task_type: 'bench', payload: { n: b * 1000 + k } })));
    add('many x1000 rows (per task)', (await measure((b) => app.query('select e.task_id as "taskId!" from queues.enqueue_many($1::jsonb) e', [batch(b)]), 10)).map((x) => Math.round(x / 100) / 10));
    add('many x1000 array (per task)', (await measure((b) => app.query('select array(select e.task_id from queues.enqueue_many($1::jsonb) e) as "taskIds!"', [batch(b)]), 10)).map((x) => Math.round(x / 100) / 10));
  }
  console.log('per call: server backend CPU µs / node CPU µs / wall µs (sequential, synchronous_commit off)');
  for (const [k, v] of Object.entries(res)) console.log(k.padEnd(28), v.join('   '));
  await app.end(); await root.end();
} finally { await server.stop({ destroy: true }); }
