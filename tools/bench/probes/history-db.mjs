// A database with HISTORY completed tasks in history (as workload 12 writes it, with its
// recent tasks, PENDING tasks waiting (20,000, as before its endpoints are timed) and a
// maintenance run), kept open until interrupted, for reading the endpoints' plans by
// hand: prints the owner's and the API's URLs.
//   HISTORY=10000000 [PENDING=20000] node tools/bench/probes/history-db.mjs
import { openServer, provisionDatabase } from '@org/db-tools';
import { fillHistory, fillRecent } from '../dist/history-scale.js';
import { enqueueBacklog } from './drain-fixture.mjs';
import pg from 'pg';

const rows = Number(process.env.HISTORY ?? 1_000_000);
const server = await openServer({ name: `bench-history-db-${process.pid}` });
const urls = await provisionDatabase(server, 'history', { fresh: true, quiet: true, current: true });
const rootUrl = new URL(server.rootUrl);
rootUrl.pathname = '/history';
const root = new pg.Client({ connectionString: rootUrl.toString() });
await root.connect();
await root.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
await fillHistory(urls.owner, rows, (line) => console.log(line));
await root.query('vacuum analyze');
await fillRecent(urls.owner);
await enqueueBacklog(urls, root, Number(process.env.PENDING ?? 20_000)); // (and vacuum analyze)
const owner = new pg.Client({ connectionString: urls.owner });
await owner.connect();
await owner.query('select queues.maintain_history_at(now())');
await owner.end();
console.log(`ready\nroot ${rootUrl}\napi ${urls.api ?? ''}\nowner ${urls.owner}`);
const stop = async () => {
  await root.end();
  await server.stop({ destroy: true });
  process.exit(0);
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
await new Promise(() => {});
