// What the drain probes share: a database with the 'bench' task type, a backlog of its
// tasks, and the real Worker draining them with a no-op processor (README defaults); the
// CPU time of the PostgreSQL processes.
import { readdirSync, readFileSync } from 'node:fs';
import pg from 'pg';
import { provisionDatabase } from '@org/db-tools';
import { enqueueMany } from '@org/queue-client';
import { createLogger, ProcessorRegistry, Worker } from '@org/worker';

/** The database `probe` on `server`, migrated, and a superuser pool on it (one connection). */
export async function probeDatabase(server) {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const rootUrl = new URL(server.rootUrl);
  rootUrl.pathname = '/probe';
  const root = new pg.Pool({ connectionString: rootUrl.toString(), max: 1 });
  root.on('error', () => {}); // the server's stop at the end
  await root.query(`insert into queues.task_type (task_type) values ('bench') on conflict do nothing`);
  return { urls, root };
}

/** Enqueues `tasks` bench tasks as the app, 1,000 per call, then vacuums and analyzes. */
export async function enqueueBacklog(urls, root, tasks) {
  const app = new pg.Pool({ connectionString: urls.app, max: 2 });
  // BACKLOG=rows: each task scheduled a second ago, so that it gets a claim-index row of its
  // own instead of a place in its call's ready batch (sql/queues/ready_batch.sql).
  const scheduledAt = process.env.BACKLOG === 'rows' ? new Date(Date.now() - 1000) : undefined;
  try {
    for (let s = 0; s < tasks; s += 1000)
      await enqueueMany(
        app,
        Array.from({ length: Math.min(1000, tasks - s) }, (_, i) => ({
          taskType: 'bench',
          payload: { n: s + i },
          ...(scheduledAt ? { scheduledAt } : {}),
        })),
      );
  } finally {
    await app.end();
  }
  await root.query('vacuum analyze');
}

/**
 * Enqueues `steps` db_function steps ({"db_function":"internal.noop"}) through `owner` (a
 * pool as the database owner: steps are enqueued by the owner only, queues.internal_task_type),
 * 1,000 per call.
 */
export async function enqueueNoopSteps(owner, steps) {
  for (let s = 0; s < steps; s += 1000)
    await enqueueMany(
      owner,
      Array.from({ length: Math.min(1000, steps - s) }, (_, i) => ({
        taskType: 'db_function',
        payload: { db_function: 'internal.noop', n: s + i },
      })),
    );
}

/**
 * The real Worker as the probes run it: the CLI's defaults (a long lease, a rare
 * heartbeat unless `heartbeatIntervalMs` says otherwise), warnings only, as the worker
 * database user; `prefetch` undefined is the default local queue.
 */
export function probeWorker(
  urls,
  registry,
  roles,
  { concurrency, prefetch, heartbeatIntervalMs = 30_000, workerId = 'probe' },
) {
  return new Worker({
    databaseUrl: urls.worker,
    roles,
    workerId,
    concurrency,
    prefetch,
    pollIntervalMs: 2000,
    heartbeatIntervalMs,
    leaseSeconds: 300,
    maxLeases: 5,
    shutdownGraceMs: 25_000,
    registry,
    logger: createLogger('warn', process.stderr),
  });
}

/**
 * A Worker of the bench tasks with a no-op processor; `allDone` resolves once it ran `tasks`
 * bench tasks. `otherTypes`: task types it claims too, with a no-op processor each.
 */
export function noopWorker(
  urls,
  { tasks, concurrency, prefetch, heartbeatIntervalMs = 30_000, workerId, otherTypes = [] },
) {
  let handled = 0;
  let finished;
  const allDone = new Promise((resolve) => (finished = resolve));
  const registry = new ProcessorRegistry().register('bench', {
    name: 'noop',
    async process() {
      if (++handled === tasks) finished();
      return { outcome: 'succeeded' };
    },
  });
  // Other task types it also claims (a no-op each), not counted in `tasks`.
  for (const type of otherTypes)
    registry.register(type, { name: 'noop', process: async () => ({ outcome: 'succeeded' }) });
  const worker = probeWorker(urls, registry, ['bench', ...otherTypes], {
    concurrency,
    prefetch,
    heartbeatIntervalMs,
    workerId,
  });
  return { worker, allDone };
}

/** CPU time (µs) of every PostgreSQL process on the machine, from /proc (clock ticks of 10 ms). */
export function postgresCpuMicros(postmaster) {
  let ticks = 0;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (!stat.includes('(postgres)')) continue;
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // With a postmaster's pid: that server's processes only (others may share the machine).
      if (postmaster !== undefined && Number(pid) !== postmaster && Number(fields[1]) !== postmaster) continue;
      ticks += Number(fields[11]) + Number(fields[12]); // utime, stime
    } catch {
      // The process ended meanwhile.
    }
  }
  return ticks * 10_000;
}

/** The machine's idle and busy CPU time (µs, all cores) from /proc/stat. */
export function machineCpuMicros() {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = fields[3] + fields[4]; // idle, iowait
  const total = fields.slice(0, 8).reduce((a, b) => a + b, 0); // up to steal
  return { idle: idle * 10_000, busy: (total - idle) * 10_000 };
}

/**
 * What the database has written so far: WAL bytes (the insert position) and, per table
 * (history partitions added up under their parent's name), heap rows inserted, updated and
 * deleted from `pg_stat_user_tables`. Read it after the writers' connections have closed
 * (a backend reports its counters when it ends, or at most every second).
 */
export async function writtenSoFar(root) {
  const { rows: wal } = await root.query(`select (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint as bytes`);
  const { rows } = await root.query(`
    select regexp_replace(schemaname || '.' || relname, '_(p[0-9]+|default)$', '') as table_name,
           sum(n_tup_ins)::bigint as ins, sum(n_tup_upd)::bigint as upd, sum(n_tup_del)::bigint as del
      from pg_stat_user_tables
     group by 1`);
  return { wal: Number(wal[0].bytes), tables: new Map(rows.map((r) => [r.table_name, r])) };
}

/** Rows and WAL bytes per task between two `writtenSoFar` readings, per table that wrote. */
export function writtenPerTask(before, after, tasks) {
  const perTable = [];
  let rows = 0;
  for (const [name, a] of after.tables) {
    const b = before.tables.get(name) ?? { ins: 0, upd: 0, del: 0 };
    const ins = Number(a.ins) - Number(b.ins);
    const upd = Number(a.upd) - Number(b.upd);
    const del = Number(a.del) - Number(b.del);
    if (ins + upd + del === 0) continue;
    rows += ins + upd + del;
    perTable.push({
      table: name,
      inserted: (ins / tasks).toFixed(3),
      updated: (upd / tasks).toFixed(3),
      deleted: (del / tasks).toFixed(3),
    });
  }
  perTable.sort((x, y) => x.table.localeCompare(y.table));
  return { rowsPerTask: rows / tasks, walBytesPerTask: (after.wal - before.wal) / tasks, perTable };
}

/** The p-th percentile of `xs` (nearest rank). */
export function percentile(xs, p) {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}
