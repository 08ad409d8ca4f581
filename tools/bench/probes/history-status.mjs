// What the History page (admin.history_status) costs per partition set: the status and
// its parts timed with 3, 12 and 22 sets of one completed task each (the cost of sizing a
// set does not depend on its rows: it opens its 14 partitions and their indexes), after a
// maintenance run (which measures the sets that are done), and the sizing of every set.
//   node tools/bench/probes/history-status.mjs [repeats=200]
import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';

const REPEATS = Number(process.argv[2] ?? 200);
const server = await openServer({ name: `bench-history-status-${process.pid}` });
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const owner = new pg.Pool({ connectionString: urls.owner, max: 1 });
  const time = async (sql) => {
    await owner.query(sql);
    const t = performance.now();
    for (let i = 0; i < REPEATS; i++) await owner.query(sql);
    return ((performance.now() - t) / REPEATS).toFixed(2);
  };
  await owner.query('update queues.history_setting set partition_size = 100, partitions_ahead = 2');
  for (const sets of [3, 10, 20]) {
    // One task in each set up to `sets`, completed (a set without one would be dropped;
    // one with a recent completion is kept), and the last one pending.
    while (
      (
        await owner.query(
          'select count(*)::int as n from queues.history_sets() where not is_default and lower_bound <= queues.last_task_id()',
        )
      ).rows[0].n < sets
    ) {
      await owner.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), queues.last_task_id() + 100)`);
      await owner.query('select queues.complete_tasks(array(select task_id from queues.task_pending), null, null)');
      await owner.query(`select queues.enqueue_internal('db_function', '{"db_function": "internal.noop"}')`);
      await owner.query('select queues.maintain_history_at(now())');
    }
    const { rows } = await owner.query('select count(*)::int as n from queues.history_sets() where not is_default');
    console.log(
      `${rows[0].n} sets: status ${await time('select admin.history_status_at(now())')} ms, ` +
        `summary ${await time('select queues.history_summary_at(now())')} ms, ` +
        `sizes ${await time('select count(*) from queues.history_partition_sizes()')} ms, ` +
        `sets ${await time('select count(*) from queues.history_sets()')} ms`,
    );
  }
  await owner.end();
} finally {
  await server.stop({ destroy: true });
}
