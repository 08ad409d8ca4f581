import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';
const name = `bench-exp-${process.pid}`;
const server = await openServer({ name });
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const u = new URL(server.rootUrl); u.pathname = '/probe';
  const root = new pg.Client({ connectionString: u.toString() }); root.on('error', () => {}); await root.connect();
  const c = new pg.Client({ connectionString: u.toString() }); c.on('error', () => {}); await c.connect();
  await root.query(`create procedure public.pp(_a int, inout _r int default null) language plpgsql as $$ begin _r := _a + 1; commit; end $$`);
  const q = { name: 'pp', text: 'call public.pp($1::int)' };
  console.log((await c.query({ ...q, values: [1] })).rows);
  await root.query(`drop procedure public.pp(int, int)`);
  await root.query(`create procedure public.pp(_a int, inout _r int default null) language plpgsql as $$ begin _r := _a + 100; commit; end $$`);
  console.log(await c.query({ ...q, values: [1] }).then((r) => r.rows, (e) => e.message));
  await root.query(`drop procedure public.pp(int, int)`);
  await root.query(`create procedure public.pp(_a int, _b int default 0, inout _r int default null) language plpgsql as $$ begin _r := _a + 1000; commit; end $$`);
  console.log(await c.query({ ...q, values: [1] }).then((r) => r.rows, (e) => e.message));
  await c.end(); await root.end();
} finally { await server.stop({ destroy: true }); }
