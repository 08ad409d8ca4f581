// Migration 000018 makes progress reports a history table: a database migrated up to
// 000017, holding progress reports, is converted, every report reads the same afterwards,
// new reports go on numbering after the old ones, dependencies (new in 000018, so held by
// no database before it) work on the converted tables, and migrating again changes nothing.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { databaseBefore, type DatabaseBefore } from '../test-support/migrations.js';

const ctx = inject('queueTestServer');
const name = `${ctx.prefix}flow_retention_migration`;
let db: DatabaseBefore | undefined;
let owner: pg.Client;
let worker: pg.Client;
let app: pg.Client;

/** The committed migration that bounds the flow facts. */
const MIGRATION = 18;

const TYPE = 'product_resync';
const enqueue = async () =>
  (await app.query<{ id: string }>(`select queues.enqueue($1, '{}'::jsonb) as id`, [TYPE])).rows[0].id;
const enqueueDependent = async (dependsOn: string[]) =>
  (
    await app.query<{ id: string }>(`select queues.enqueue($1, '{}'::jsonb, _depends_on => $2::bigint[]) as id`, [
      TYPE,
      dependsOn,
    ])
  ).rows[0].id;
const progressRows = async () =>
  (await owner.query(`select * from queues.task_progress order by task_progress_id`)).rows;
const dependencyRows = async () =>
  (await owner.query(`select * from queues.task_dependency order by task_id, depends_on_task_id`)).rows;

let running: { id: string; lease: string };
let progressBefore: unknown[];

beforeAll(async () => {
  db = await databaseBefore(ctx, name, MIGRATION);
  ({ owner, worker, app } = db);
  const { rows } = await owner.query(
    `select relkind, to_regclass('queues.task_dependency') is null as no_dependencies
       from pg_class where oid = 'queues.task_progress'::regclass`,
  );
  expect(rows).toEqual([{ relkind: 'r', no_dependencies: true }]);

  // A running task with three progress reports.
  const id = await enqueue();
  const { rows: claimed } = await worker.query<{ task_lease_id: string }>(
    `select task_lease_id from queues.claim_tasks('w', 1, $1, 300) where task_id = $2`,
    [[TYPE], id],
  );
  running = { id, lease: claimed[0].task_lease_id };
  for (const done of [1, 2, 3]) {
    await worker.query('select queues.record_progress($1, $2, $3, 10, $4)', [id, running.lease, done, `step ${done}`]);
  }
  progressBefore = await progressRows();
  expect(progressBefore).toHaveLength(3);

  await db.migrateOn();
});

afterAll(async () => {
  await db?.drop();
});

describe('converting a database with progress reports', () => {
  it('partitions both tables on the sets of queues.task and keeps every row', async () => {
    const { rows } = await owner.query(
      `select c.relname, c.relkind, pg_get_partkeydef(c.oid) as key,
              (select count(*) from pg_inherits i where i.inhparent = c.oid)::int as partitions
         from pg_class c
        where c.oid in ('queues.task'::regclass, 'queues.task_progress'::regclass, 'queues.task_dependency'::regclass)
        order by c.relname`,
    );
    expect(rows.map((r) => [r.relname, r.relkind, r.key])).toEqual([
      ['task', 'p', 'RANGE (task_id)'],
      ['task_dependency', 'p', 'RANGE (task_id)'],
      ['task_progress', 'p', 'RANGE (task_id)'],
    ]);
    expect(new Set(rows.map((r) => r.partitions)).size).toBe(1);
    expect(await progressRows()).toEqual(progressBefore);
    const { rows: task } = await owner.query(`select admin.get_task($1) -> 'progress' as p`, [running.id]);
    expect(task[0].p).toMatchObject({ done: 3, total: 10, note: 'step 3', reports: 3 });
  });

  it('numbers new reports after the old ones, and a waiting task is released by its dependency', async () => {
    const dependency = await enqueue();
    const dependent = await enqueueDependent([dependency]);
    expect(await dependencyRows()).toHaveLength(1);
    await worker.query('select queues.record_progress($1, $2, 4, 10, $3)', [running.id, running.lease, 'step 4']);
    const ids = (await progressRows()).map((r) => Number(r.task_progress_id));
    expect(ids).toHaveLength(4);
    expect(ids[3]).toBeGreaterThan(Math.max(...ids.slice(0, 3)));

    const waiting = async (id: string) =>
      (await owner.query(`select available_at = 'infinity' as w from queues.task_pending where task_id = $1`, [id]))
        .rows[0]?.w;
    expect(await waiting(dependent)).toBe(true);
    await owner.query(
      `select * from queues.complete_tasks(array[$1::bigint], null, array['succeeded'], array[false])`,
      [dependency],
    );
    expect(await waiting(dependent)).toBe(false);
  });

  it('migrating again changes nothing', async () => {
    const progress = await progressRows();
    const edges = await dependencyRows();
    await db!.migrateOn();
    expect(await progressRows()).toEqual(progress);
    expect(await dependencyRows()).toEqual(edges);
  });
});
