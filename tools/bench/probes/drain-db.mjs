// A database after a drain: TASKS bench tasks drained by the real Worker (no-op processor),
// kept open until interrupted, for reading the overview's plans by hand: prints the root's
// and the API's URLs.
//   node tools/bench/probes/drain-db.mjs [tasks=20000]
import { openServer } from '@org/db-tools';
import { enqueueBacklog, noopWorker, probeDatabase } from './drain-fixture.mjs';

const TASKS = Number(process.argv[2] ?? 20000);
const server = await openServer({ name: `bench-drain-db-${process.pid}` });
const { urls, root } = await probeDatabase(server);
await enqueueBacklog(urls, root, TASKS);
const { worker, allDone } = noopWorker(urls, { tasks: TASKS, concurrency: 10, prefetch: 500 });
await worker.start();
await allDone;
await worker.stop();
await root.query('vacuum analyze');
const rootUrl = new URL(server.rootUrl);
rootUrl.pathname = '/probe';
console.log(`ready\nroot ${rootUrl}\napi ${urls.api ?? ''}\nowner ${urls.owner}`);
const stop = async () => {
  await root.end();
  await server.stop({ destroy: true });
  process.exit(0);
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
await new Promise(() => {});
