// The SQL ceiling of server-side steps, no worker: one connection (the superuser) loops
// claim N db_function steps ({"db_function":"internal.noop"}) then run them in one
// queues.run_steps call, and prints the rate of the claim + run_steps loop; then shows the
// plans of the statements inside one more call (auto_explain with nested statements, sent
// to this client as notices; EXPLAIN=0 leaves them out).
//   node tools/bench/probes/steps-explain.mjs [N=50] [rounds=40]
import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';
import { enqueueMany } from '@org/queue-client';

const N = Number(process.argv[2] ?? 50);
const ROUNDS = Number(process.argv[3] ?? 40);
const server = await openServer({ name: `bench-steps-explain-${process.pid}` });
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const rootUrl = new URL(server.rootUrl);
  rootUrl.pathname = '/probe';
  const owner = new pg.Pool({ connectionString: urls.owner, max: 1 });
  owner.on('error', () => {});
  for (let s = 0; s < N * (ROUNDS + 1); s += 1000)
    await enqueueMany(
      owner,
      Array.from({ length: Math.min(1000, N * (ROUNDS + 1) - s) }, (_, i) => ({
        taskType: 'db_function',
        payload: { db_function: 'internal.noop', n: s + i },
      })),
    );
  await owner.query('vacuum analyze');
  const root = new pg.Client({ connectionString: rootUrl.toString() });
  await root.connect();
  root.on('notice', (n) => console.log(n.message));
  let timed = 0;
  for (let round = 0; round <= ROUNDS; round++) {
    const t = performance.now();
    const { rows } = await root.query(`select * from queues.claim_tasks('probe', $1, array['db_function'], 300, 5)`, [
      N,
    ]);
    if (round === ROUNDS && process.env.EXPLAIN !== '0') {
      await root.query(`load 'auto_explain'`);
      await root.query(`set auto_explain.log_min_duration = 0`);
      await root.query(`set auto_explain.log_nested_statements = on`);
      await root.query(`set auto_explain.log_analyze = on`);
      await root.query(`set auto_explain.log_level = notice`);
    }
    await root.query(`select count(*) from queues.run_steps($1, $2, $3, $4)`, [
      rows.map((r) => r.task_id),
      rows.map((r) => r.task_lease_id),
      rows.map(() => 'internal.noop'),
      rows.map((r) => r.payload),
    ]);
    // The first rounds plan and warm the caches.
    if (round >= 5 && round < ROUNDS) timed += performance.now() - t;
  }
  console.log(
    `claim ${N} + run_steps ${N}: ${Math.round(((ROUNDS - 5) * N * 1000) / timed)} steps/s on one connection`,
  );
  await root.end();
  await owner.end();
} finally {
  await server.stop({ destroy: true });
}
