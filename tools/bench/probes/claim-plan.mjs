// Prints the plans (auto_explain, analyze, nested) of one claim_tasks_at(limit N) and one
// complete_tasks over a backlog: node tools/bench/probes/claim-plan.mjs [N=500] [tasks=20000]
import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';
import { enqueueMany } from '@org/queue-client';

const N = Number(process.argv[2] ?? 500);
const TASKS = Number(process.argv[3] ?? 20000);
const server = await openServer({ name: `bench-plan-${process.pid}` });
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const rootUrl = new URL(server.rootUrl);
  rootUrl.pathname = '/probe';
  const root = new pg.Client({ connectionString: rootUrl.toString() });
  await root.connect();
  await root.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
  const app = new pg.Pool({ connectionString: urls.app, max: 2 });
  for (let s = 0; s < TASKS; s += 1000) await enqueueMany(app, Array.from({ length: 1000 }, (_, i) => ({ taskType: 'bench', payload: { n: s + i } })));
  await root.query('vacuum analyze');
  root.on('notice', (n) => { if ((n.message ?? '').startsWith('duration')) console.log(n.message); });
  // Warm: a few claims and completions so generic plans are in use.
  for (let k = 0; k < 6; k++) {
    const { rows } = await root.query(`select task_id, task_lease_id from queues.claim_tasks_at(now(), 'w', $1, array['bench'], 300, 5)`, [N]);
    await root.query(`select * from queues.complete_tasks($1::bigint[], $2::bigint[], null)`, [rows.map((r) => r.task_id), rows.map((r) => r.task_lease_id)]);
  }
  await root.query(`load 'auto_explain'; set auto_explain.log_min_duration = 0; set auto_explain.log_analyze = on;
    set auto_explain.log_buffers = on; set auto_explain.log_nested_statements = on; set auto_explain.log_level = notice; set client_min_messages = notice`);
  const { rows } = await root.query(`select task_id, task_lease_id from queues.claim_tasks_at(now(), 'w', $1, array['bench'], 300, 5)`, [N]);
  await root.query(`select * from queues.complete_tasks($1::bigint[], $2::bigint[], null)`, [rows.map((r) => r.task_id), rows.map((r) => r.task_lease_id)]);
  await root.end();
  await app.end();
} finally {
  await server.stop({ destroy: true });
}
