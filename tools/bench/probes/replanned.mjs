// Which statements the hot paths plan again at every call: the real Worker drains a backlog
// of no-op tasks, then runs db_function steps, then picks up tasks enqueued one at a time
// (20 a second, as workload 4), on a server with pg_stat_statements (track = all,
// track_planning on). Lists each statement planned at more than half of its calls (a
// custom plan chosen at each call, or dynamic SQL), with its plans and planning time per
// call; a statement planned once per session has a handful of plans whatever its calls.
//   node tools/bench/probes/replanned.mjs [tasks=20000] [steps=5000] [pickups=200]
// ALL=1 lists every statement called at least 20 times, by planning time (the plans each
// session makes once: their cost is paid again by every new connection); TOP=n (40).
import pg from 'pg';
import { enqueue } from '@org/queue-client';
import { dbFunctionProcessor, ProcessorRegistry } from '@org/worker';
import { openStatementsServer } from './statements-server.mjs';
import { enqueueBacklog, enqueueNoopSteps, noopWorker, probeDatabase, probeWorker } from './drain-fixture.mjs';

const TASKS = Number(process.argv[2] ?? 20000);
const STEPS = Number(process.argv[3] ?? 5000);
const PICKUPS = Number(process.argv[4] ?? 200);
const server = await openStatementsServer(`bench-replanned-${process.pid}`);
try {
  const { urls, root } = await probeDatabase(server);
  await root.query('create extension if not exists pg_stat_statements');
  await root.query('alter system set pg_stat_statements.track_planning = on');
  await root.query('select pg_reload_conf()');
  await enqueueBacklog(urls, root, TASKS);
  await root.query('select pg_stat_statements_reset()');

  // The drain.
  const drain = noopWorker(urls, { tasks: TASKS, concurrency: 10 });
  await drain.worker.start();
  await drain.allDone;
  await drain.worker.stop();

  // The steps.
  const owner = new pg.Pool({ connectionString: urls.owner, max: 1 });
  await enqueueNoopSteps(owner, STEPS);
  await owner.end();
  const steps = probeWorker(urls, new ProcessorRegistry().register('db_function', dbFunctionProcessor()), null, {
    concurrency: 10,
  });
  await steps.start();
  for (;;) {
    const { rows } = await root.query(
      `select count(*)::int as n from queues.task_pending where task_type = 'db_function'`,
    );
    const { rows: batched } = await root.query(
      `select count(*)::int as n from queues.task_ready_batch where task_type = 'db_function'`,
    );
    if (rows[0].n === 0 && batched[0].n === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  await steps.stop();

  // The pickups.
  let picked = 0;
  const registry = new ProcessorRegistry().register('bench', {
    name: 'noop',
    async process() {
      picked++;
      return { outcome: 'succeeded' };
    },
  });
  const idle = probeWorker(urls, registry, ['bench'], { concurrency: 10 });
  await idle.start();
  const app = new pg.Pool({ connectionString: urls.app, max: 1 });
  for (let n = 0; n < PICKUPS; n++) {
    await enqueue(app, { taskType: 'bench', payload: { n } });
    await new Promise((r) => setTimeout(r, 50));
  }
  while (picked < PICKUPS) await new Promise((r) => setTimeout(r, 50));
  await idle.stop();
  await app.end();

  const { rows } = await root.query(
    `select toplevel as top, calls, plans, round((total_plan_time / nullif(plans, 0))::numeric, 3) as ms_per_plan,
            regexp_replace(left(query, 100), '\\s+', ' ', 'g') as query
       from pg_stat_statements
      where query not ilike '%pg_stat_statements%' and query not ilike '%count(*)::int as n from queues.task%'
        and (plans * 2 > calls or $2) and calls >= 20
        and dbid = (select oid from pg_database where datname = current_database())
      order by total_plan_time desc limit $1`,
    [Number(process.env.TOP ?? 40), Boolean(process.env.ALL)],
  );
  console.log(
    `${TASKS} drained, ${STEPS} steps, ${PICKUPS} pickups; statements called at least 20 times` +
      (process.env.ALL ? ':' : ' and planned at more than half of their calls:'),
  );
  console.table(rows);
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
