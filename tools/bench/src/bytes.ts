#!/usr/bin/env node
/**
 * node tools/bench/dist/bytes.js [--tasks 200000] [--batch 500] [--claimers 1] [--worker-id ID]
 *
 * Bytes per task of the queue's history: on a fresh embedded PostgreSQL, `--tasks`
 * db_function tasks go through the real path as the worker runs them (queues.enqueue_many
 * as the owner; queues.claim_tasks and queues.settle_tasks (with each run's start) as the
 * worker database user, `--batch` at a time) by `--claimers` loops at once, each with its
 * own worker id (`--worker-id` and a suffix; default shaped like the worker's own,
 * host-pid-random, plus the process slot); then `vacuum` and, per queue table (its
 * partitions and default summed) and per index, the growth scaled to one million
 * completed tasks, in MB (2^20 bytes). The history (the partitioned tables) is totalled;
 * the rest (queues.task_pending, bounded by vacuum, not by history) is listed apart.
 * Prints Markdown.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';

interface Size {
  relation: string;
  kind: 'table' | 'index';
  /** Part of the partitioned history (a partitioned table or index). */
  history: boolean;
  bytes: number;
}

/** Table bytes (heap, TOAST, maps) and index bytes of every queues table, partitions summed under their parent. */
async function sizes(db: pg.Pool): Promise<Size[]> {
  const { rows } = await db.query<{ relation: string; kind: 'table' | 'index'; history: boolean; bytes: string }>(
    `with recursive tree as (
       select c.oid, c.oid as top from pg_class c
        where c.relnamespace = 'queues'::regnamespace and c.relkind in ('r', 'p', 'i', 'I') and not c.relispartition
       union all
       select i.inhrelid, t.top from pg_inherits i join tree t on i.inhparent = t.oid
     )
     select t.top::regclass::text as relation,
            case when top.relkind in ('i', 'I') then 'index' else 'table' end as kind,
            top.relkind in ('p', 'I') as history,
            sum(case when top.relkind in ('i', 'I') then pg_relation_size(t.oid) else pg_table_size(t.oid) end)::bigint as bytes
       from tree t join pg_class top on top.oid = t.top
      group by 1, 2, 3`,
  );
  return rows.map((r) => ({ relation: r.relation, kind: r.kind, history: r.history, bytes: Number(r.bytes) }));
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      tasks: { type: 'string', default: '200000' },
      batch: { type: 'string', default: '500' },
      claimers: { type: 'string', default: '1' },
      'worker-id': { type: 'string', default: `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}` },
    },
  });
  const tasks = Number(values.tasks);
  const batch = Number(values.batch);
  const claimers = Number(values.claimers);
  const workerId = values['worker-id'];
  if (!(Number.isInteger(tasks) && tasks >= 1000))
    throw new Error(`--tasks must be a whole number ≥ 1000, got ${tasks}`);
  if (!(Number.isInteger(batch) && batch >= 1 && batch <= 1000))
    throw new Error(`--batch must be 1 to 1000, got ${batch}`);
  if (!(Number.isInteger(claimers) && claimers >= 1 && claimers <= 32))
    throw new Error(`--claimers must be 1 to 32, got ${claimers}`);
  if (!(workerId.length >= 1 && workerId.length <= 190)) throw new Error('--worker-id must be 1 to 190 characters');

  const server = await openServer({ name: `bytes-${process.pid}` });
  const pools: pg.Pool[] = [];
  try {
    const urls = await provisionDatabase(server, 'bytes', { fresh: true, quiet: true });
    const pool = (url: string) => {
      const p = new pg.Pool({ connectionString: url, max: claimers + 1, application_name: 'bench-bytes' });
      // Idle connections end with the server.
      p.on('error', () => {});
      pools.push(p);
      return p;
    };
    const root = pool(urls.root);
    const owner = pool(urls.owner);
    const worker = pool(urls.worker);
    await root.query('vacuum');
    const before = await sizes(root);
    const payload = JSON.stringify(
      Array.from({ length: batch }, () => ({ task_type: 'db_function', payload: { db_function: 'internal.noop' } })),
    );
    const started = performance.now();
    let owed = tasks;
    const claimer = async (slot: number) => {
      const id = `${workerId}-${slot}`;
      while (owed > 0) {
        owed -= batch;
        await owner.query('select count(*) from queues.enqueue_many($1::jsonb)', [payload]);
        const { rows } = await worker.query<{ task_id: string; task_lease_id: string }>(
          'select task_id, task_lease_id from queues.claim_tasks($1, $2)',
          [id, batch],
        );
        const ids = rows.map((r) => r.task_id);
        const leases = rows.map((r) => r.task_lease_id);
        const startedUs = ids.map(() => String(Date.now() * 1000));
        await worker.query(
          `select count(*) from queues.settle_tasks($1::bigint[], $2::bigint[], _started_us => $3::bigint[])`,
          [ids, leases, startedUs],
        );
      }
    };
    await Promise.all(Array.from({ length: claimers }, (_, i) => claimer(i + 1)));
    const seconds = (performance.now() - started) / 1000;
    await root.query('vacuum');
    const after = await sizes(root);
    const { rows: counts } = await root.query<{ completed: string }>(
      'select count(*) as completed from queues.task_end',
    );
    const completed = Number(counts[0]!.completed);
    const mb = (bytes: number) => ((bytes / completed) * 1e6) / 1048576;
    const growth = after
      .map((a) => ({ ...a, bytes: a.bytes - (before.find((b) => b.relation === a.relation)?.bytes ?? 0) }))
      .filter((g) => g.bytes > 0)
      .sort((a, b) => b.bytes - a.bytes);
    const out = (line: string) => process.stdout.write(`${line}\n`);
    out(
      `${completed} tasks completed in ${seconds.toFixed(1)} s by ${claimers} claimer(s), worker ids ${JSON.stringify(`${workerId}-1`)}...`,
    );
    out('');
    out('| relation | kind | MB per million completed tasks |');
    out('|---|---|---|');
    const history = growth.filter((g) => g.history);
    for (const g of history) out(`| ${g.relation} | ${g.kind} | ${mb(g.bytes).toFixed(1)} |`);
    const total = (kind: string) => history.filter((g) => g.kind === kind).reduce((n, g) => n + g.bytes, 0);
    out(`| **history tables** | table | ${mb(total('table')).toFixed(1)} |`);
    out(`| **history indexes** | index | ${mb(total('index')).toFixed(1)} |`);
    for (const g of growth.filter((x) => !x.history))
      out(`| ${g.relation} (not history) | ${g.kind} | ${mb(g.bytes).toFixed(1)} |`);
  } finally {
    for (const p of pools) await p.end().catch(() => {});
    await server.stop({ destroy: true });
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`bytes failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
