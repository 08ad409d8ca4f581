// Compares queues.run_steps with another definition of it, in one database, on one
// connection, calls alternating: claim N db_function steps, run them with one definition
// or the other, and print each one's wall time per step (median and fastest call). The
// other definition is read from a steps.sql (for instance an earlier commit's:
// `git show <commit>:sql/queues/steps.sql > /tmp/old-steps.sql`) and installed as
// queues.run_steps_old. FN is internal.noop, or bench.write (a step that inserts a row).
//   node tools/bench/probes/steps-compare.mjs /tmp/old-steps.sql [N=200] [rounds=30] [FN=internal.noop]
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';
import { enqueueMany } from '@org/queue-client';

const OLD = process.argv[2];
const N = Number(process.argv[3] ?? 200);
const ROUNDS = Number(process.argv[4] ?? 30);
const FN = process.argv[5] ?? 'internal.noop';
if (!OLD) throw new Error('usage: steps-compare.mjs <steps.sql> [N] [rounds] [internal.noop|bench.write]');
const source = readFileSync(OLD, 'utf8');
const oldRunSteps = source
  .slice(source.indexOf('create or replace function queues.run_steps('))
  .replace('queues.run_steps(', 'queues.run_steps_old(');

const server = await openServer({ name: `bench-steps-compare-${process.pid}` });
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const owner = new pg.Client({ connectionString: urls.owner });
  await owner.connect();
  await owner.query(oldRunSteps);
  if (FN === 'bench.write')
    await owner.query(`
      create schema bench;
      create table bench.t (n bigint);
      create function bench.write(payload jsonb) returns jsonb language sql as $$
        insert into bench.t values ((payload->>'n')::bigint);
        select '{"success": true}'::jsonb
      $$;
      select internal.register_runnable_function('bench.write(jsonb)');`);
  const total = N * (ROUNDS * 2 + 1);
  for (let s = 0; s < total; s += 1000)
    await enqueueMany(
      owner,
      Array.from({ length: Math.min(1000, total - s) }, (_, i) => ({
        taskType: 'db_function',
        payload: { db_function: FN, n: s + i },
      })),
    );
  await owner.query('vacuum analyze');
  const times = { old: [], new: [] };
  for (let round = 0; round < ROUNDS * 2; round++) {
    const which = round % 2 === 0 ? 'old' : 'new';
    const { rows } = await owner.query(`select * from queues.claim_tasks('probe', $1, array['db_function'], 300, 5)`, [
      N,
    ]);
    const t = performance.now();
    await owner.query(
      `select count(*) from ${which === 'old' ? 'queues.run_steps_old' : 'queues.run_steps'}($1, $2, $3, $4)`,
      [rows.map((r) => r.task_id), rows.map((r) => r.task_lease_id), rows.map(() => FN), rows.map((r) => r.payload)],
    );
    // The first calls plan and warm the caches.
    if (round >= 4) times[which].push(((performance.now() - t) * 1000) / N);
  }
  const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
  const show = (a) => `median ${median(a).toFixed(1)}, fastest ${Math.min(...a).toFixed(1)} µs per step`;
  console.log(`${FN} × ${N} per call: ${OLD}: ${show(times.old)}; current: ${show(times.new)}`);
  await owner.end();
} finally {
  await server.stop({ destroy: true });
}
