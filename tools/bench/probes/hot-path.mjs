// Scratch experiments on the hot path (single connection unless stated): where does our
// per-task server time go? Not part of the benchmark; evidence for the report.
import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';
import { claimTasks, completeTask, enqueue, enqueueMany, runFunction, withTransaction } from '@org/queue-client';

const server = await openServer({ name: `bench-probe-${process.pid}` });
const ms = (t) => performance.now() - t;
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true });
  const owner = new pg.Pool({ connectionString: urls.owner, max: 2 });
  await owner.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
  const app = new pg.Pool({ connectionString: urls.app, max: 10 });
  const N = 12000;
  for (let s = 0; s < N; s += 1000)
    await enqueueMany(
      app,
      Array.from({ length: 1000 }, (_, i) => ({ taskType: 'bench', payload: { n: s + i } })),
    );
  await owner.query('vacuum analyze');
  const opts = { workerId: 'p', limit: 1, taskTypes: ['bench'], leaseSeconds: 300, maxLeases: 5 };

  // D: per-task cost (claim 1 + finish) as the drain proceeds, one worker connection.
  const w = new pg.Pool({ connectionString: urls.worker, max: 1 });
  for (let block = 0; block < 5; block++) {
    const t = performance.now();
    for (let i = 0; i < 1000; i++) {
      const [task] = await claimTasks(w, opts);
      await withTransaction(w, (tx) =>
        completeTask(tx, { taskId: task.taskId, taskLeaseId: task.taskLeaseId, outcome: 'succeeded' }),
      );
    }
    console.log(
      `D tasks ${block * 1000}-${block * 1000 + 999}: claim+finish ${(ms(t) / 1000).toFixed(2)} ms/task (same session)`,
    );
  }
  await w.end();
  const w2 = new pg.Pool({ connectionString: urls.worker, max: 1 });
  {
    const t = performance.now();
    for (let i = 0; i < 1000; i++) {
      const [task] = await claimTasks(w2, opts);
      await withTransaction(w2, (tx) =>
        completeTask(tx, { taskId: task.taskId, taskLeaseId: task.taskLeaseId, outcome: 'succeeded' }),
      );
    }
    console.log(`D tasks 5000-5999 new session: ${(ms(t) / 1000).toFixed(2)} ms/task`);
  }
  // Split: claim alone vs complete alone.
  {
    const claimed = [];
    let t = performance.now();
    for (let i = 0; i < 500; i++) claimed.push(...(await claimTasks(w2, opts)));
    console.log(`claim_tasks(limit 1): ${(ms(t) / 500).toFixed(2)} ms`);
    t = performance.now();
    for (const task of claimed)
      await completeTask(w2, { taskId: task.taskId, taskLeaseId: task.taskLeaseId, outcome: 'succeeded' });
    console.log(`complete_task (autocommit): ${(ms(t) / 500).toFixed(2)} ms`);
  }
  // C: force generic plans inside the functions.
  await owner.query(`do $$ declare f regprocedure; begin
      for f in select p.oid::regprocedure from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                where n.nspname = 'queues' and p.proname in ('claim_tasks_at', 'complete_tasks') loop
        execute format('alter function %s set plan_cache_mode = force_generic_plan', f);
      end loop; end $$`);
  const w3 = new pg.Pool({ connectionString: urls.worker, max: 1 });
  {
    const claimed = [];
    let t = performance.now();
    for (let i = 0; i < 500; i++) claimed.push(...(await claimTasks(w3, opts)));
    console.log(`C claim_tasks(limit 1), force_generic_plan: ${(ms(t) / 500).toFixed(2)} ms`);
    t = performance.now();
    for (const task of claimed)
      await completeTask(w3, { taskId: task.taskId, taskLeaseId: task.taskLeaseId, outcome: 'succeeded' });
    console.log(`C complete_task, force_generic_plan: ${(ms(t) / 500).toFixed(2)} ms`);
  }
  await w3.end();
  await w2.end();

  // E: the db_function path: begin; run_function(internal.noop); complete_task; commit.
  for (let s = 0; s < 1000; s += 1000)
    await enqueueMany(
      app,
      Array.from({ length: 1000 }, (_, i) => ({
        taskType: 'db_function',
        payload: { db_function: 'internal.noop', n: i },
      })),
    );
  const w4 = new pg.Pool({ connectionString: urls.worker, max: 1 });
  {
    const t = performance.now();
    for (let i = 0; i < 500; i++) {
      const [task] = await claimTasks(w4, { ...opts, taskTypes: ['db_function'] });
      await withTransaction(w4, async (tx) => {
        await runFunction(tx, 'internal.noop', task.payload);
        await completeTask(tx, { taskId: task.taskId, taskLeaseId: task.taskLeaseId, outcome: 'succeeded' });
      });
    }
    console.log(`E db_function claim+run+complete: ${(ms(t) / 500).toFixed(2)} ms/task`);
    const t2 = performance.now();
    for (let i = 0; i < 300; i++) await runFunction(w4, 'internal.noop', { db_function: 'internal.noop' });
    console.log(`E run_function(internal.noop) alone: ${(ms(t2) / 300).toFixed(2)} ms`);
  }
  await w4.end();

  // B: one-by-one enqueue, 10 callers, with and without the NOTIFY trigger.
  const rate = async (label) => {
    const n = 4000;
    let next = 0;
    const t = performance.now();
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        while (next < n) {
          next++;
          await enqueue(app, { taskType: 'bench', payload: { n: next } });
        }
      }),
    );
    console.log(`B enqueue one-by-one x10 ${label}: ${((n / ms(t)) * 1000).toFixed(0)} tasks/s`);
  };
  await rate('with notify trigger');
  await owner.query('alter table queues.task_pending disable trigger notify_task_ready');
  await rate('without notify trigger');
  await owner.query('alter table queues.task_pending enable trigger notify_task_ready');
  const root = new pg.Pool({ connectionString: urls.root, max: 10 });
  await root.query(
    'create table t (id bigint generated always as identity primary key, payload jsonb not null, created_at timestamptz not null default now())',
  );
  {
    const n = 4000;
    let next = 0;
    const t = performance.now();
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        while (next < n) {
          next++;
          await root.query(`insert into t (payload) values ($1)`, [{ n: next }]);
        }
      }),
    );
    console.log(`B plain one-row insert x10 (node-pg): ${((n / ms(t)) * 1000).toFixed(0)} rows/s`);
  }
  {
    const n = 2000;
    let next = 0;
    const t = performance.now();
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        while (next < n) {
          next++;
          await root.query(`select pg_notify('x', '')`);
        }
      }),
    );
    console.log(`B select pg_notify x10 autocommit: ${((n / ms(t)) * 1000).toFixed(0)} /s`);
  }
  // Batch enqueue: enqueue_many 1000 vs a plain insert of 1000 rows.
  {
    let t = performance.now();
    for (let k = 0; k < 5; k++)
      await enqueueMany(
        app,
        Array.from({ length: 1000 }, (_, i) => ({ taskType: 'bench', payload: { n: i } })),
      );
    console.log(`enqueue_many(1000): ${(ms(t) / 5).toFixed(1)} ms per call`);
    await owner.query(`create or replace function pg_temp.x() returns void language sql as $$ select 1 $$`);
    t = performance.now();
    for (let k = 0; k < 5; k++)
      await root.query(`insert into t (payload) select jsonb_build_object('n', g) from generate_series(1, 1000) g`);
    console.log(`plain insert of 1000 rows: ${(ms(t) / 5).toFixed(1)} ms per call`);
  }
  await Promise.all([owner.end(), app.end(), root.end()]);
} finally {
  await server.stop({ destroy: true });
}
