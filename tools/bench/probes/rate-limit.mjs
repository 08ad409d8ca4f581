// How accurately a rate limit holds under several worker processes: a backlog of bench
// tasks under a rate limit (queues.set_task_limit, docs/flow-control.md), drained by
// WORKERS real Worker processes (a no-op processor each) for SECONDS, then the starts
// (leases, by their leased_at) counted per window of the limit and set against it.
//   node tools/bench/probes/rate-limit.mjs [limit=500] [interval_ms=1000] [seconds=60] [workers=4]
// LIMIT_GROUPS=<n> spreads the tasks over n group keys and puts the limit on each group key
// (scope each_group) instead of the type: each key's starts are counted per window.
// Prints, over the whole windows of the run (the first and the last, cut by the start and
// the stop, left out): starts per window (min, mean, max) against the limit, how much of
// the limit was used, and the most starts in any interval-long span (a sliding window).
import { fork } from 'node:child_process';
import { openServer } from '@org/db-tools';
import { noopWorker, probeDatabase } from './drain-fixture.mjs';

if (process.env.RATE_CHILD) {
  const { urls, workerId } = JSON.parse(process.env.RATE_CHILD);
  const { worker } = noopWorker(urls, { tasks: Infinity, concurrency: 10, prefetch: 500, workerId });
  process.send('ready');
  process.on('message', async (message) => {
    if (message === 'go') await worker.start();
    else if (message === 'stop') {
      await worker.stop();
      process.send('stopped');
      process.disconnect();
    }
  });
  await new Promise(() => {});
}

const LIMIT = Number(process.argv[2] ?? 500);
const INTERVAL_MS = Number(process.argv[3] ?? 1000);
const SECONDS = Number(process.argv[4] ?? 60);
const WORKERS = Number(process.argv[5] ?? 4);
const GROUPS = Number(process.env.LIMIT_GROUPS ?? 0);

const server = await openServer({ name: `bench-rate-${process.pid}` });
try {
  const { urls, root } = await probeDatabase(server);
  // Enough that the backlog never runs dry: the limit's starts over the run, and a fifth more.
  const windows = Math.ceil((SECONDS * 1000) / INTERVAL_MS) + 1;
  const tasks = Math.ceil(LIMIT * Math.max(GROUPS, 1) * windows * 1.2);
  for (let s = 0; s < tasks; s += 10_000)
    await root.query(
      `select count(*) from queues.enqueue_many((
         select jsonb_agg(jsonb_build_object('task_type', 'bench', 'payload', '{}'::jsonb)
                          || case when $2 > 0 then jsonb_build_object('group_key', 'g' || (i % $2)) else '{}' end)
           from generate_series(1, $1::integer) i))`,
      [Math.min(10_000, tasks - s), GROUPS],
    );
  await root.query('vacuum analyze');
  await root.query(`select queues.set_task_limit('bench', $1, null, null, $2, make_interval(secs => $3 / 1000.0))`, [
    GROUPS > 0 ? 'each_group' : 'type',
    LIMIT,
    INTERVAL_MS,
  ]);
  const children = await Promise.all(
    Array.from({ length: WORKERS }, (_, i) => {
      const child = fork(new URL(import.meta.url).pathname, [], {
        env: { ...process.env, RATE_CHILD: JSON.stringify({ urls, workerId: `rate-${i + 1}` }) },
      });
      return new Promise((resolve) => child.once('message', () => resolve(child)));
    }),
  );
  for (const child of children) child.send('go');
  await new Promise((r) => setTimeout(r, SECONDS * 1000));
  await Promise.all(
    children.map((child) => {
      const stopped = new Promise((resolve) => child.once('message', resolve));
      child.send('stop');
      return stopped;
    }),
  );
  const groupOf = GROUPS > 0 ? 't.group_key' : `''`;
  const { rows: perWindow } = await root.query(
    `with starts as (
       select l.leased_at, ${groupOf} as group_key
         from queues.task_lease l join queues.task t using (task_id)
     ),
     per_window as (
       select group_key, queues.limit_window_start(leased_at, $1) as window_start, count(*)::int as n
         from starts group by 1, 2
     ),
     whole as (
       -- the windows between the first and the last (cut by the start and the stop)
       select * from per_window
        where window_start > (select min(window_start) from per_window)
          and window_start < (select max(window_start) from per_window)
     )
     select count(*)::int as windows, min(n) as min, round(avg(n), 1)::float as mean, max(n) as max,
            sum(n)::int as total
       from whole`,
    [INTERVAL_MS],
  );
  const { rows: sliding } = await root.query(
    `select max(n)::int as max from (
       select count(*) over (partition by ${groupOf} order by l.leased_at
                             range between current row and make_interval(secs => $1 / 1000.0) - interval '1 microsecond' following) as n
         from queues.task_lease l join queues.task t using (task_id)) x`,
    [INTERVAL_MS],
  );
  const w = perWindow[0];
  const scope = GROUPS > 0 ? `each of ${GROUPS} group keys` : 'the type';
  console.log(
    `rate limit ${LIMIT} per ${INTERVAL_MS} ms on ${scope}, ${WORKERS} worker processes, ${SECONDS} s: ` +
      `${w.windows} whole windows${GROUPS > 0 ? ' (window × group key)' : ''}; starts per window min ${w.min}, mean ${w.mean}, max ${w.max} ` +
      `(mean ${((100 * w.mean) / LIMIT).toFixed(1)}% of the limit; max ${((100 * (w.max - LIMIT)) / LIMIT).toFixed(1)}% over it); ` +
      `most in any ${INTERVAL_MS} ms span: ${sliding[0].max}`,
  );
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
