// What the dashboard's polled statements cost while claim leases hold tasks (the ready
// set, sql/queues/lease_held.sql): CLAIMED bench tasks are claimed in claims of 500 with
// 300 s leases, of which ENDED are settled under their leases (as a drain leaves them), so
// CLAIMED − ENDED are lease-held; then each statement of the overview poll
// (tools/bench/src/dashboard.ts) is run RUNS times under EXPLAIN (ANALYZE, BUFFERS) and its
// median time and buffers (shared hit + read, nested statements included) are printed.
//   node tools/bench/probes/lease-held-readers.mjs [claimed=20000] [ended=0] [runs=5]
// VARIANT=<file.sql> runs the file first (another version of the readers); CLAIM=<n>
// claims n tasks a claim (default 500).
import { readFileSync } from 'node:fs';
import { openServer } from '@org/db-tools';
import { enqueueBacklog, probeDatabase } from './drain-fixture.mjs';
import { LIVE_SQL, OVERVIEW_SQL } from '../dist/dashboard.js';

const CLAIMED = Number(process.argv[2] ?? 20000);
const ENDED = Number(process.argv[3] ?? 0);
const RUNS = Number(process.argv[4] ?? 5);
const CLAIM = Number(process.env.CLAIM ?? 500);
const EXTRA = ['select count(*) from queues.lease_held_tasks', 'select count(*) from queues.task_pending_or_held'];

const server = await openServer({ name: `bench-lease-held-${process.pid}` });
try {
  const { urls, root } = await probeDatabase(server);
  if (process.env.VARIANT) await root.query(readFileSync(process.env.VARIANT, 'utf8'));
  await enqueueBacklog(urls, root, CLAIMED);
  await root.query(`select queues.record_worker_heartbeat('probe', array['bench'])`);
  let ended = 0;
  for (let claimed = 0; claimed < CLAIMED;) {
    const { rows } = await root.query(
      `select task_id::text as id, task_lease_id::text as lease
         from queues.claim_tasks_at(now(), 'probe', $1, array['bench'], 300, 5)`,
      [CLAIM],
    );
    if (rows.length === 0) break;
    claimed += rows.length;
    const settle = rows.slice(0, Math.max(0, Math.min(rows.length, ENDED - ended)));
    if (settle.length > 0)
      await root.query(`select * from queues.settle_tasks($1::bigint[], $2::bigint[], $3::text[])`, [
        settle.map((r) => r.id),
        settle.map((r) => r.lease),
        settle.map(() => 'succeeded'),
      ]);
    ended += settle.length;
  }
  await root.query('vacuum analyze');
  const held = (await root.query('select count(*)::int as n from queues.lease_held_tasks')).rows[0].n;
  console.log(`${CLAIMED} claimed in live leases, ${ended} ended under them, ${held} lease-held`);
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const table = [];
  let pollMs = 0;
  let pollBuffers = 0;
  for (const sql of [...new Set([...LIVE_SQL, ...OVERVIEW_SQL]), ...EXTRA]) {
    const ms = [];
    const buffers = [];
    for (let i = 0; i < RUNS; i++) {
      const { rows } = await root.query(`explain (analyze, buffers, format json) ${sql}`);
      const plan = rows[0]['QUERY PLAN'][0];
      ms.push(plan['Execution Time'] + plan['Planning Time']);
      buffers.push(plan.Plan['Shared Hit Blocks'] + plan.Plan['Shared Read Blocks']);
    }
    table.push({ statement: sql, ms: median(ms).toFixed(2), buffers: median(buffers) });
    if (!EXTRA.includes(sql)) {
      pollMs += median(ms);
      pollBuffers += median(buffers);
    }
  }
  // NESTED=<statement>: the plans of its nested statements (auto_explain, analyzed).
  if (process.env.NESTED) {
    const client = await root.connect();
    client.on('notice', (n) => console.log(n.message));
    await client.query(`load 'auto_explain'`);
    await client.query(`set auto_explain.log_min_duration = 0`);
    await client.query(`set auto_explain.log_analyze = on`);
    await client.query(`set auto_explain.log_buffers = on`);
    await client.query(`set auto_explain.log_nested_statements = on`);
    await client.query(`set auto_explain.log_level = notice`);
    await client.query(process.env.NESTED);
    await client.query(`set auto_explain.log_min_duration = -1`);
    client.release();
  }
  table.push({ statement: 'a first poll (every statement once)', ms: pollMs.toFixed(2), buffers: pollBuffers });
  console.table(table);
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
