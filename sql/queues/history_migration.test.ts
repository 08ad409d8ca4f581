// migrations/committed/000004 (partitioned history) converts a database that already holds
// history: a database migrated up to the migration before it, with tasks in every state, is converted,
// and every task reads the same afterwards and the queue keeps working.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { databaseBefore, type DatabaseBefore } from '../test-support/migrations.js';

const ctx = inject('queueTestServer');
const name = `${ctx.prefix}history_migration`;
let db: DatabaseBefore | undefined;
let owner: pg.Client;
let worker: pg.Client;
let app: pg.Client;

/** The number of the migration that partitions the history. */
const HISTORY_MIGRATION = 4;

const T0 = "now() + interval '0 s'";

// The tasks, by the state they are left in. Each is made and driven one at a time, with
// a higher priority than every task before it, so a claim of one task takes it.
const ids: Record<string, string> = {};
let priority = -900;
async function enqueue(label: string, opts: { at?: string; maxAttempts?: number; payload?: object } = {}) {
  priority += 10;
  // As the owner: db_function tasks are enqueued only by the database's own processes.
  const { rows } = await owner.query(
    `select queues.enqueue('db_function', $1::jsonb, ${opts.at ?? 'null'}, $2, null, $3) as id`,
    [JSON.stringify(opts.payload ?? { db_function: 'internal.noop', label }), priority, opts.maxAttempts ?? 1],
  );
  ids[label] = rows[0].id;
  return rows[0].id as string;
}
// The claimed task is started, as the worker's completer records before a task runs.
async function claim(at = T0, leaseSeconds = 300, maxLeases = 5) {
  const { rows } = await owner.query(
    `with c as (select task_id, task_lease_id from queues.claim_tasks_at(${at}, 'worker-a', 1, null, $1, $2)),
          s as (insert into queues.task_lease_started (task_id, task_lease_id) select task_id, task_lease_id from c)
     select task_id, task_lease_id from c`,
    [leaseSeconds, maxLeases],
  );
  return rows[0] as { task_id: string; task_lease_id: string };
}
async function complete(lease: { task_id: string; task_lease_id: string }, outcome = 'succeeded') {
  const { rows } = await worker.query(
    `select result from queues.complete_tasks($1::bigint[], $2::bigint[], array[$3])`,
    [[lease.task_id], [lease.task_lease_id], outcome],
  );
  return rows[0].result as string;
}

async function populate(): Promise<void> {
  await enqueue('scheduled', { at: "now() + interval '1 day'" });
  let lease = await claim();
  expect(lease).toBeUndefined();

  await enqueue('succeeded');
  lease = await claim();
  expect(lease.task_id).toBe(ids.succeeded);
  await worker.query('select queues.fail_task($1, $2, $3)', [
    lease.task_id,
    'a warning on the way',
    lease.task_lease_id,
  ]);
  expect(await complete(lease)).toBe('completed');

  await enqueue('failed_with_handler', { payload: { db_function: 'internal.noop', error_handler: 'internal.noop' } });
  lease = await claim();
  expect(await complete(lease, 'failed')).toBe('completed');

  await enqueue('dead_lettered');
  lease = await claim();
  await worker.query('select queues.fail_task($1, $2, $3)', [lease.task_id, 'it broke', lease.task_lease_id]);
  expect(await complete(lease, 'failed')).toBe('completed');

  await enqueue('redriven');
  lease = await claim();
  expect(await complete(lease, 'failed')).toBe('completed');

  await enqueue('cancelled');
  await worker.query(`select queues.complete_task($1, null, 'cancelled')`, [ids.cancelled]);

  await enqueue('abandoned');
  lease = await claim(T0, 60);
  expect(lease.task_id).toBe(ids.abandoned);
  const { rows: gone } = await owner.query(
    `select * from queues.claim_tasks_at(now() + interval '400 s', 'worker-a', 1, null, 60, 1)`,
  );
  expect(gone).toEqual([]);

  await enqueue('retrying', { maxAttempts: 3 });
  lease = await claim();
  expect(await complete(lease, 'failed')).toBe('retry_scheduled');

  await enqueue('released');
  lease = await claim();
  await worker.query('select queues.release_leases($1::bigint[], $2::bigint[])', [
    [lease.task_id],
    [lease.task_lease_id],
  ]);

  await enqueue('revoked');
  await owner.query(
    `insert into queues.worker (worker_id, task_types, last_seen_at) values ('worker-gone', '{db_function}', now() - interval '1 hour')`,
  );
  const { rows: revokedLease } = await owner.query(
    `select task_id, task_lease_id from queues.claim_tasks_at(now(), 'worker-gone', 1, null, 300, 5)`,
  );
  expect(revokedLease[0].task_id).toBe(ids.revoked);
  const { rows: revoked } = await owner.query('select * from queues.recover_stale_leases_at(now(), 600)');
  expect(revoked.map((r) => r.task_id)).toEqual([ids.revoked]);

  await enqueue('running');
  lease = await claim();
  const { rows: extended } = await worker.query('select * from queues.extend_leases($1::bigint[], $2::bigint[], 600)', [
    [lease.task_id],
    [lease.task_lease_id],
  ]);
  expect(extended).toHaveLength(1);
  ids.running_lease = lease.task_lease_id;

  await enqueue('ready');
  // Redriven last: the new task is ready, with a lower priority than 'ready'.
  const { rows: redrive } = await owner.query('select queues.redrive_task($1) as id', [ids.redriven]);
  ids.redrive_copy = redrive[0].id;
}

/** Everything the admin API says about each task, read at one fixed instant. */
async function snapshot(at: string) {
  const out: Record<string, unknown> = {};
  for (const [label, id] of Object.entries(ids)) {
    if (label.endsWith('_lease')) continue;
    const { rows } = await owner.query('select admin.get_task_at($1, $2) as t', [at, id]);
    const task = rows[0].t as {
      completion?: Record<string, unknown> | null;
      progress?: unknown;
      dependencies?: unknown[];
      dependents?: unknown[];
      task?: { group_key?: unknown; timeout_ms?: unknown; type_timeout_ms?: unknown };
    };
    // What was added since reads empty on the facts written before it: a completion's
    // started_at, a task's progress, its dependencies and dependents, its group key, its run timeouts.
    if (task.completion && task.completion.started_at === null) delete task.completion.started_at;
    if (task.progress === null) delete task.progress;
    if (task.dependencies?.length === 0) delete task.dependencies;
    if (task.dependents?.length === 0) delete task.dependents;
    if (task.task?.group_key === null) delete task.task.group_key;
    if (task.task?.timeout_ms === null) delete task.task.timeout_ms;
    if (task.task?.type_timeout_ms === null) delete task.task.type_timeout_ms;
    out[label] = task;
  }
  const { rows: dead } = await owner.query('select task_id from queues.dead_letter order by task_id');
  out.dead_letters = dead.map((r) => r.task_id);
  const { rows: counts } = await owner.query('select * from admin.task_counts_at($1, null) order by 1, 2', [at]);
  out.counts = counts;
  return out;
}

let before: Record<string, unknown>;
let at: string;

beforeAll(async () => {
  db = await databaseBefore(ctx, name, HISTORY_MIGRATION, { afterReset: false });
  ({ owner, worker, app } = db);
  const { rows } = await owner.query(`select relkind from pg_class where oid = 'queues.task'::regclass`);
  expect(rows[0].relkind).toBe('r');

  // The migrations before it include today's sql/queues functions, which write
  // task_id on the lease facts; a database migrated by an older release has the functions
  // of that release instead. Give these tables the column those functions write (the
  // conversion keeps an existing task_id column, and fills it from the lease otherwise).
  for (const table of ['task_lease_extension', 'task_lease_release', 'task_lease_revocation']) {
    await owner.query(`alter table queues.${table} add column if not exists task_id bigint`);
  }
  await populate();
  at = (await owner.query(`select (now() + interval '1 s')::text as at`)).rows[0].at;
  before = await snapshot(at);

  await db.migrateOn();
});

afterAll(async () => {
  await db?.drop();
});

describe('converting a database with history', () => {
  it('partitions task and every fact table by task_id', async () => {
    const { rows } = await owner.query(
      `select t.name, c.relkind, pg_get_partkeydef(c.oid) as key,
              (select count(*) from pg_inherits i where i.inhparent = c.oid) as partitions
         from unnest(queues.history_tables()) t(name)
         join pg_class c on c.oid = format('queues.%I', t.name)::regclass`,
    );
    // The 14 tables 000004 converted, queues.task_trace (migration 000014),
    // queues.completion_round (the completion rounds), queues.claim_lease (a lease per
    // claim), queues.task_progress and queues.task_dependency, each given a partition in
    // every set there was.
    expect(rows).toHaveLength(19);
    for (const row of rows) {
      expect(row, row.name).toMatchObject({ relkind: 'p', key: 'RANGE (task_id)' });
      // The set holding the rows, the sets ahead (2 by default), the default partition.
      expect(Number(row.partitions), row.name).toBeGreaterThanOrEqual(4);
    }
    const { rows: old } = await owner.query(`select relname from pg_class where relname like '%\\_unpartitioned%'`);
    expect(old).toEqual([]);
  });

  it('reads every task, in every state, exactly as before', async () => {
    const after = await snapshot(at);
    expect(after).toEqual(before);
    const states = Object.fromEntries(
      Object.entries(after)
        .filter(([, v]) => (v as { task?: unknown }).task)
        .map(([k, v]) => [k, (v as { task: { state: string } }).task.state]),
    );
    expect(states).toEqual({
      scheduled: 'scheduled',
      succeeded: 'succeeded',
      failed_with_handler: 'failed',
      dead_lettered: 'failed',
      redriven: 'failed',
      cancelled: 'cancelled',
      abandoned: 'abandoned',
      retrying: 'retrying',
      released: 'ready',
      revoked: 'ready',
      running: 'running',
      ready: 'ready',
      redrive_copy: 'ready',
    });
    expect(after.dead_letters).toEqual([ids.dead_lettered, ids.abandoned]);
    const running = after.running as { leases: { extensions: number; live: boolean }[] };
    expect(running.leases).toMatchObject([{ extensions: 1, live: true }]);
  });

  it('keeps identity values, refuses updates on parents and partitions, and revokes tables from the roles', async () => {
    const maxBefore = Math.max(...Object.values(ids).map(Number));
    const { rows } = await owner.query(
      `select queues.enqueue('db_function', '{"db_function": "internal.noop"}') as id`,
    );
    expect(Number(rows[0].id)).toBeGreaterThan(maxBefore);
    await expect(owner.query('update queues.task set priority = 0')).rejects.toMatchObject({ code: '55000' });
    const { rows: part } = await owner.query(
      `select partition_name from queues.history_partitions() where not is_default order by lower_bound limit 1`,
    );
    await expect(owner.query(`update queues.${part[0].partition_name} set priority = 0`)).rejects.toMatchObject({
      code: '55000',
    });
    await expect(
      owner.query('update queues.task_lease_extension_default set expires_at = now()'),
    ).rejects.toMatchObject({
      code: '55000',
    });
    await expect(worker.query('select count(*) from queues.task')).rejects.toMatchObject({ code: '42501' });
    await expect(app.query('select count(*) from queues.task_lease')).rejects.toMatchObject({ code: '42501' });
  });

  it('keeps the queue working: claim, heartbeat, complete, fail and retry, redrive', async () => {
    // The running task's worker heartbeats and completes it under its old lease.
    const { rows: ext } = await worker.query('select * from queues.extend_leases($1::bigint[], $2::bigint[], 600)', [
      [ids.running],
      [ids.running_lease],
    ]);
    expect(ext).toHaveLength(1);
    expect(await complete({ task_id: ids.running, task_lease_id: ids.running_lease })).toBe('completed');

    // Everything ready is claimed and completed; the retrying task fails its second run.
    const { rows: claimed } = await owner.query(
      `select task_id, task_lease_id from queues.claim_tasks_at(now() + interval '1 hour', 'worker-b', 100, null, 300, 5)`,
    );
    const claimedIds = claimed.map((r) => r.task_id);
    expect(claimedIds).toEqual(
      expect.arrayContaining([ids.ready, ids.released, ids.revoked, ids.redrive_copy, ids.retrying]),
    );
    expect(claimedIds).not.toContain(ids.scheduled);
    for (const lease of claimed) {
      const outcome = lease.task_id === ids.retrying ? 'failed' : 'succeeded';
      expect(await complete(lease, outcome)).toBe(lease.task_id === ids.retrying ? 'retry_scheduled' : 'completed');
    }
    // A lease that is no longer current is fenced.
    await expect(
      worker.query('select queues.complete_task($1, $2)', [ids.running, ids.running_lease]),
    ).resolves.toBeDefined();
    await expect(
      worker.query('select queues.fail_task($1, $2, $3)', [ids.released, 'late', '1']),
    ).rejects.toMatchObject({
      code: '22023',
    });

    // The dead letter is redriven and its copy runs.
    const { rows: redrive } = await owner.query('select queues.redrive_task($1) as id', [ids.dead_lettered]);
    const { rows: copy } = await owner.query(
      `select task_id, task_lease_id from queues.claim_tasks_at(now() + interval '1 hour', 'worker-b', 10, null, 300, 5)`,
    );
    expect(copy.map((r) => r.task_id)).toContain(redrive[0].id);
    for (const lease of copy) await complete(lease);
    const { rows: dead } = await owner.query('select task_id from queues.dead_letter');
    expect(dead).toEqual([{ task_id: ids.abandoned }]);

    // The derived claim index still matches the facts.
    const { rows: pending } = await owner.query('select task_id from queues.task_pending order by 1');
    await owner.query('select queues.rebuild_task_pending()');
    const { rows: rebuilt } = await owner.query('select task_id from queues.task_pending order by 1');
    expect(rebuilt).toEqual(pending);
  });

  it('running the migration again changes nothing', async () => {
    const { rows: a } = await owner.query(
      `select count(*)::int as n from pg_inherits where inhparent = 'queues.task'::regclass`,
    );
    const snap = await snapshot(at);
    await db!.migrateOn();
    const { rows: b } = await owner.query(
      `select count(*)::int as n from pg_inherits where inhparent = 'queues.task'::regclass`,
    );
    expect(b).toEqual(a);
    expect(await snapshot(at)).toEqual(snap);
  });
});
