// How long maintenance holds its locks while it moves tasks out of the default
// partition (queues.adopt_history_range, one step of queues.maintain_history_step_at):
// N tasks land in the default partition, each claimed, started and completed (a lease,
// a start and a completion each, in the default partitions too); then the step that
// moves them is timed, and the claims that wait for it wait that long.
//   node tools/bench/probes/adopt.mjs [tasks=2000]
import pg from 'pg';
import { provisionDatabase } from '@org/db-tools';
import { openStatementsServer } from './statements-server.mjs';
import { enqueueMany } from '@org/queue-client';

const TASKS = Number(process.argv[2] ?? 2000);
const name = `bench-adopt-${process.pid}`;
const server = await openStatementsServer(name);
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const owner = new pg.Pool({ connectionString: urls.owner, max: 1 });
  const worker = new pg.Pool({ connectionString: urls.worker, max: 1 });
  const app = new pg.Pool({ connectionString: urls.app, max: 1 });
  await owner.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
  await owner.query('select queues.maintain_history_at(now())');
  // Ids past every set: the tasks fall into the default partition.
  await owner.query(
    `select setval(pg_get_serial_sequence('queues.task', 'task_id'),
                   (select max(upper_bound) from queues.history_partition_bounds()) + 10)`,
  );
  for (let s = 0; s < TASKS; s += 1000)
    await enqueueMany(
      app,
      Array.from({ length: Math.min(1000, TASKS - s) }, (_, i) => ({ taskType: 'bench', payload: { n: s + i } })),
    );
  for (;;) {
    const { rows } = await worker.query(`select task_id, task_lease_id from queues.claim_tasks('probe', 1000)`);
    if (rows.length === 0) break;
    const ids = rows.map((r) => r.task_id);
    const leases = rows.map((r) => r.task_lease_id);
    await worker.query('select queues.mark_started($1::bigint[], $2::bigint[])', [ids, leases]);
    await worker.query('select queues.complete_tasks($1::bigint[], $2::bigint[])', [ids, leases]);
  }
  const inDefault = async () => Number((await owner.query('select count(*) from queues.task_default')).rows[0].count);
  console.log(`tasks in the default partition: ${await inDefault()}`);
  for (;;) {
    const t = performance.now();
    const { rows } = await owner.query('select queues.maintain_history_step_at(now()) as r');
    const ms = performance.now() - t;
    const r = rows[0].r;
    if (r.action === 'set_adopted' || r.action === 'set_created')
      console.log(
        `${r.action} [${r.lower_bound}, ${r.upper_bound})${r.tasks !== undefined ? ` ${r.tasks} tasks` : ''}: ${ms.toFixed(1)} ms`,
      );
    if (!r.more) break;
  }
  console.log(`tasks in the default partition after the run: ${await inDefault()}`);
  await Promise.all([owner.end(), worker.end(), app.end()]);
} finally {
  await server.stop({ destroy: true });
}
