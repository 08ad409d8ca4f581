/**
 * Workload 12 (ours only, opt-in: BENCH_HISTORY=<completed tasks>, e.g. 10000000): the
 * queue and the operations API with a large history against the same without one.
 *
 * - fill: `rows` completed tasks (one lease and one completion each; every 1,000th
 *   failed, so a dead letter) written as the owner straight into the partitions of
 *   queues.task, queues.task_lease and queues.task_completed, one statement per table per
 *   partition set (sets of the default size, made first with
 *   queues.create_history_partition), then `vacuum analyze`;
 * - on both databases, the same recent activity (fillRecent: RECENT tasks completed a few
 *   minutes ago, every 10th failed), so that each list answers a full page with and
 *   without the history, and the comparison is of what the history adds;
 * - one run of history maintenance, as its schedule makes every 10 minutes;
 * - the statements behind each endpoint group of the REST API and dashboard (counts,
 *   capacity, task list, dead letters, process timeline, history), as the API role, after
 *   a checkpoint (the fill's dirty pages are written first, as before the drain): a few
 *   warm-up calls, then the median of ITERATIONS timed calls of the whole group;
 * - the drain of `tasks` tasks by one worker process, as workload 3a, HISTORY_DRAINS times
 *   (each on a new backlog), the median reported.
 */
import pg from 'pg';

/** Statements per endpoint group, as the API runs them (packages/web/src/queries). */
export const ENDPOINT_GROUPS: Record<string, { label: string; sql: string[] }> = {
  counts: {
    label: 'counts (GET /api/overview: task counts, throughput, depth)',
    sql: [
      'select * from admin.task_counts(3600)',
      'select * from admin.throughput(3600, 60)',
      'select * from admin.queue_depth(3600, 60)',
    ],
  },
  capacity: { label: 'capacity (GET /api/capacity)', sql: ['select * from admin.capacity(null)'] },
  task_list: {
    label: 'task list (GET /api/tasks: newest 50, then the failed ones)',
    sql: [
      'select * from admin.list_tasks(null, null, 50, null, null, null, null, null, null, null)',
      "select * from admin.list_tasks(null, 'failed', 50, null, null, null, null, null, null, null)",
    ],
  },
  dead_letters: {
    label: 'dead letters (GET /api/dead-letters: newest 50)',
    sql: ['select * from admin.list_dead_letters(null, 50, null)'],
  },
  process_timeline: {
    label: 'process timeline (GET /api/processes/send_email and one root)',
    sql: [
      "select * from admin.list_process_roots_ranked('send_email', 50, null)",
      "select * from admin.process_timeline('send_email', $1)",
    ],
  },
  history: { label: 'history (GET /api/history)', sql: ['select admin.history_status()'] },
};

const WARMUP = 3;
const ITERATIONS = 15;

/**
 * The median ms of one call of each group's statements, on one connection as `apiUrl`;
 * `$1` in a statement is `rootId`, the email process root whose timeline is read.
 */
export async function timeEndpoints(apiUrl: string, rootId: number): Promise<Record<string, number>> {
  const client = new pg.Client({ connectionString: apiUrl, application_name: 'bench-history-api' });
  await client.connect();
  try {
    const out: Record<string, number> = {};
    for (const [group, { sql }] of Object.entries(ENDPOINT_GROUPS)) {
      const times: number[] = [];
      for (let i = 0; i < WARMUP + ITERATIONS; i++) {
        const started = performance.now();
        for (const statement of sql) await client.query(statement, statement.includes('$1') ? [rootId] : []);
        if (i >= WARMUP) times.push(performance.now() - started);
      }
      times.sort((a, b) => a - b);
      out[group] = times[Math.floor(times.length / 2)]!;
    }
    return out;
  } finally {
    await client.end();
  }
}

/**
 * Writes `rows` completed tasks (ids 1..rows) into the history partitions as the owner;
 * returns the seconds the inserts took (the vacuum is separate).
 */
export async function fillHistory(ownerUrl: string, rows: number, log: (line: string) => void): Promise<number> {
  const client = new pg.Client({ connectionString: ownerUrl, application_name: 'bench-history-fill' });
  await client.connect();
  try {
    const started = performance.now();
    const size = Number(
      (await client.query<{ s: string }>('select partition_size as s from queues.history_setting')).rows[0]!.s,
    );
    // Sets for the rows and two ahead, so the drain's tasks land in a set too.
    for (let lower = 0; lower < rows + 1 + 2 * size; lower += size) {
      await client.query('select queues.create_history_partition($1, $2)', [lower, lower + size]);
    }
    for (let lower = 0; lower <= rows; lower += size) {
      const from = Math.max(lower, 1);
      const to = Math.min(lower + size - 1, rows);
      if (from > to) continue;
      // The partition's qualified name, quoted by format('%I').
      const part = async (table: string) =>
        (
          await client.query<{ n: string }>(`select format('queues.%I', queues.history_partition_name($1, $2)) as n`, [
            table,
            lower,
          ])
        ).rows[0]!.n;
      const [task, lease, completed] = [await part('task'), await part('task_lease'), await part('task_completed')];
      const t0 = performance.now();
      await client.query(
        `insert into ${task} (task_id, task_type, payload, enqueued_at, scheduled_at)
           overriding system value
         select g, 'bench', jsonb_build_object('n', g), now() - interval '1 day', now() - interval '1 day'
           from generate_series($1::bigint, $2::bigint) g`,
        [from, to],
      );
      await client.query(
        `insert into ${lease} (task_id, task_lease_id, worker_id, leased_at, expires_at)
           overriding system value
         select g, g, 'history', now() - interval '1 day', now() - interval '1 day' + interval '5 minutes'
           from generate_series($1::bigint, $2::bigint) g`,
        [from, to],
      );
      await client.query(
        `insert into ${completed} (task_id, task_lease_id, completed_at, outcome, task_type)
         select g, g, now() - interval '1 day' + interval '1 minute',
                case when g % 1000 = 0 then 'failed' else 'succeeded' end, 'bench'
           from generate_series($1::bigint, $2::bigint) g`,
        [from, to],
      );
      log(
        `    set [${lower}, ${lower + size}): ${to - from + 1} tasks in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
      );
    }
    await client.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [rows]);
    await client.query(`select setval(pg_get_serial_sequence('queues.task_lease', 'task_lease_id'), $1)`, [rows]);
    return (performance.now() - started) / 1000;
  } finally {
    await client.end();
  }
}

/** Drains of workload 12 on each database (the median is reported). */
export const HISTORY_DRAINS = 3;

/** Recent tasks written on both databases of workload 12 before the endpoints are timed. */
export const RECENT = 1_000;

/**
 * Writes RECENT tasks after the history (ids from the sequence), leased and completed a few
 * minutes ago, every 10th failed (RECENT / 10 dead letters), as the owner.
 */
export async function fillRecent(ownerUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: ownerUrl, application_name: 'bench-history-recent' });
  await client.connect();
  try {
    await client.query(
      `with t as (
         insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
         select 'bench', jsonb_build_object('recent', g), now() - interval '10 minutes', now() - interval '10 minutes'
           from generate_series(1, $1::integer) g
         returning task_id
       ), l as (
         insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
         select task_id, 'recent', now() - interval '9 minutes', now() - interval '4 minutes' from t
         returning task_id, task_lease_id
       )
       insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
       select task_id, task_lease_id, now() - interval '8 minutes',
              case when task_id % 10 = 0 then 'failed' else 'succeeded' end, 'bench'
         from l`,
      [RECENT],
    );
  } finally {
    await client.end();
  }
}
