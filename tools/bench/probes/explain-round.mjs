// The claim and the completion of a round of 500, with every statement inside them
// explained (auto_explain, analyze, nested statements), on a fresh probe database.
//   node tools/bench/probes/explain-round.mjs [rounds=5]
// The plans of the last round are printed. VARIANT=<file.sql> as round-cycle.mjs; HISTORY=<n>
// writes n completed tasks into the history partitions first.
import pg from 'pg';
import { readFileSync } from 'node:fs';
import { openStatementsServer } from './statements-server.mjs';
import { probeDatabase, enqueueBacklog } from './drain-fixture.mjs';
import { fillHistory } from '../dist/history-scale.js';
const server = await openStatementsServer(`explain-round-${process.pid}`);
try {
  const { urls, root } = await probeDatabase(server);
  if (process.env.VARIANT) await root.query(readFileSync(process.env.VARIANT, 'utf8'));
  // HISTORY=<n>: n completed tasks written into the history partitions first (as workload 5).
  if (Number(process.env.HISTORY ?? 0) > 0) await fillHistory(urls.owner, Number(process.env.HISTORY), () => {});
  const N = Number(process.argv[2] ?? 5);
  await enqueueBacklog(urls, root, N * 500 + 1000);
  const c = new pg.Client({ connectionString: root.options.connectionString });
  await c.connect();
  let notices = [];
  c.on('notice', (n) => notices.push(n.message));
  await c.query(`load 'auto_explain'`);
  for (let i = 0; i < N; i++) {
    const last = i === N - 1;
    await c.query(`set auto_explain.log_min_duration = ${last ? 0 : -1}`);
    await c.query(`set auto_explain.log_analyze = on; set auto_explain.log_nested_statements = on;
                   set auto_explain.log_level = notice; set auto_explain.log_timing = on; set auto_explain.log_buffers = on`);
    notices = [];
    const { rows } = await c.query(`select * from queues.claim_tasks('probe', 500, '{bench}', 300, 5)`);
    if (last && process.env.CLAIM) console.log(notices.join('\n\n'));
    notices = [];
    await c.query(`select * from queues.settle_tasks($1, $2, $3, null, null, null, $4)`, [
      rows.map((r) => r.task_id),
      rows.map((r) => r.task_lease_id),
      rows.map(() => 'succeeded'),
      rows.map(() => Date.now() * 1000 + 123),
    ]);
    if (last) console.log(notices.join('\n\n'));
  }
  await c.end();
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
