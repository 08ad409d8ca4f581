// The backend's CPU time per call of SQL statements that take one email process's root id
// ($1, a comms.send_email_task id): each statement runs N times on one connection as the
// superuser, one autocommit call after another, each on roots of its own unless SAME=1
// (all on the same N roots). A statement containing AGAIN gives its roots to the next
// one (a second supervisor run of the same roots, say). Prints the backend's CPU (utime +
// stime from /proc, 10 ms ticks) and the wall time per call; compare against a trivial
// statement in the same run ("select 1 where $1::bigint > 0"), which is the cost of a
// round trip. SQL=<file.sql>[,<file.sql>...] runs those files as the superuser first
// (another version of a function under another name).
//   STMTS='["select comms.send_email_supervisor_facts($1)", ...]' node tools/bench/probes/call-cpu.mjs [calls=1000]
import pg from 'pg';
import { readFileSync } from 'node:fs';
import { openServer } from '@org/db-tools';
import { probeDatabase } from './drain-fixture.mjs';

const N = Number(process.argv[2] ?? 1000);
const statements = JSON.parse(process.env.STMTS ?? '["select 1 where $1::bigint > 0"]');
const cpuMicros = (pid) => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) * 10000;
};
const server = await openServer({ name: `bench-call-cpu-${process.pid}` });
try {
  const { urls, root } = await probeDatabase(server);
  for (const file of (process.env.SQL ?? '').split(',').filter(Boolean)) await root.query(readFileSync(file, 'utf8'));
  await root.query(`insert into internal.setting (name, value) values ('backoff_scale', '0.002')`);
  const app = new pg.Client({ connectionString: urls.app });
  await app.connect();
  await app.query(
    `select comms.send_email('B <b@example.com>', 'u' || g || '@example.com', 'Hello', '<p>Hello</p>')
       from generate_series(1, $1::int) g`,
    [(N + 20) * statements.length],
  );
  await app.end();
  await root.query('vacuum analyze');
  const { rows: ids } = await root.query('select send_email_task_id as id from comms.send_email_task order by 1');
  const c = new pg.Client({ connectionString: urls.root });
  await c.connect();
  c.on('error', () => {}); // the server's stop at the end
  const {
    rows: [{ pid }],
  } = await c.query('select pg_backend_pid() as pid');
  let k = 0;
  for (const s of statements) {
    // The first calls plan and warm the caches; not counted.
    for (let i = 0; i < 20; i++) await c.query(s, [ids[k + i].id]);
    const cpu0 = cpuMicros(pid);
    const t0 = performance.now();
    for (let i = 20; i < N + 20; i++) await c.query(s, [ids[k + i].id]);
    const cpu = (cpuMicros(pid) - cpu0) / N;
    const wall = ((performance.now() - t0) * 1000) / N;
    console.log(`${cpu.toFixed(0).padStart(6)} µs CPU ${wall.toFixed(0).padStart(6)} µs wall  ${s.slice(0, 110)}`);
    if (process.env.SAME !== '1' && !s.includes('AGAIN')) k += N + 20;
  }
  await c.end();
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
