// The SQL ceiling of the hot path, no worker: one (or more) connections looping
// claimTasks(limit N) then completeTasks(all claimed), plus the enqueue paths, with
// pg_stat_statements (track = all, so statements inside the functions are listed) to show
// where each task's server time goes. Not part of the benchmark; evidence for BENCHMARKS.md.
//
//   node tools/bench/probes/sql-ceiling.mjs [N=500] [tasks=40000] [connections=1]
//   WITH_FKS=1 puts back the foreign keys from the hot facts (to measure what they cost).
import pg from 'pg';
import { provisionDatabase } from '@org/db-tools';
import { openStatementsServer } from './statements-server.mjs';
import { claimTasks, completeTasks, enqueue, enqueueMany } from '@org/queue-client';

const N = Number(process.argv[2] ?? 500);
const TASKS = Number(process.argv[3] ?? 40000);
const CONNECTIONS = Number(process.argv[4] ?? 1);
const name = `bench-ceiling-${process.pid}`;

const server = await openStatementsServer(name);
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const rootUrl = new URL(server.rootUrl);
  rootUrl.pathname = '/probe';
  const root = new pg.Pool({ connectionString: rootUrl.toString(), max: 1 });
  await root.query('create extension if not exists pg_stat_statements');
  await root.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
  if (process.env.WITH_FKS === '1') {
    // The foreign keys the hot facts had before (for the measurement that dropped them).
    await root.query(`
      alter table queues.task_lease add foreign key (task_id) references queues.task on delete cascade;
      alter table queues.task_completed add foreign key (task_id) references queues.task on delete cascade;
      alter table queues.task_completed add foreign key (task_lease_id) references queues.task_lease on delete cascade;
      alter table queues.task_pending add foreign key (task_id) references queues.task on delete cascade;`);
    console.log('with the foreign keys from task_lease, task_completed and task_pending');
  }
  const app = new pg.Pool({ connectionString: urls.app, max: 10 });

  const top = async (label, per) => {
    const { rows } = await root.query(
      `
      select calls, rows, round(total_exec_time::numeric, 1) as total_ms,
             round((total_exec_time * 1000 / $1)::numeric, 1) as us_per_task,
             regexp_replace(left(query, 110), '\\s+', ' ', 'g') as query
        from pg_stat_statements
       where query not ilike '%pg_stat_statements%' and query !~* '^(begin|commit|rollback|set |vacuum|checkpoint)'
       order by total_exec_time desc limit 14`,
      [per],
    );
    console.log(
      `\n== ${label}: top statements (µs per task over ${per} tasks; nested statements are included in their callers)`,
    );
    console.table(rows);
  };

  // Enqueue one by one (10 callers) and in batches of 1,000.
  await root.query('select pg_stat_statements_reset()');
  let t = performance.now();
  const single = 4000;
  let next = 0;
  await Promise.all(
    Array.from({ length: 10 }, async () => {
      while (next < single) {
        const i = next++;
        await enqueue(app, { taskType: 'bench', payload: { n: i } });
      }
    }),
  );
  console.log(`enqueue one by one, 10 callers: ${Math.round(single / ((performance.now() - t) / 1000))} tasks/s`);
  await top('enqueue one by one', single);
  await root.query('select pg_stat_statements_reset()');
  t = performance.now();
  for (let s = single; s < TASKS; s += 1000) {
    await enqueueMany(
      app,
      Array.from({ length: Math.min(1000, TASKS - s) }, (_, i) => ({ taskType: 'bench', payload: { n: s + i } })),
    );
  }
  console.log(`enqueue in batches of 1000: ${Math.round((TASKS - single) / ((performance.now() - t) / 1000))} tasks/s`);
  await top('enqueue batches', TASKS - single);
  await root.query('vacuum analyze');

  // Drain: claim N, complete all, per connection.
  await root.query('select pg_stat_statements_reset()');
  const worker = new pg.Pool({ connectionString: urls.worker, max: CONNECTIONS });
  t = performance.now();
  let done = 0;
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async (_, c) => {
      for (;;) {
        const tasks = await claimTasks(worker, {
          workerId: `probe-${c}`,
          limit: N,
          taskTypes: ['bench'],
          leaseSeconds: 300,
          maxLeases: 5,
        });
        if (tasks.length === 0) break;
        for (let s = 0; s < tasks.length; s += 1000) {
          await completeTasks(
            worker,
            tasks
              .slice(s, s + 1000)
              .map((k) => ({ taskId: k.taskId, taskLeaseId: k.taskLeaseId, outcome: 'succeeded' })),
          );
        }
        done += tasks.length;
      }
    }),
  );
  const elapsed = (performance.now() - t) / 1000;
  console.log(
    `\ndrain claim(limit ${N}) + complete, ${CONNECTIONS} connection(s): ${done} tasks, ${Math.round(done / elapsed)} tasks/s`,
  );
  await top(`drain N=${N}`, done);
  await worker.end();
  await app.end();
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
