// The task list's filters and its keyset pagination at scale: every filter returns what
// it should, bad filters are refused, and with 1,000,000 history rows a page walks an
// index newest first and touches about a page of rows, whatever the depth (plans read
// with explainNested; shapes and row counts asserted, never times).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestDatabase,
  explainNested,
  planNodes,
  sharedBuffers,
  type PlanNode,
  type TestDatabase,
} from '@org/db-tools/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

type Args = {
  type?: string;
  state?: string;
  limit?: number;
  before?: number;
  worker?: string;
  key?: string;
  from?: string;
  to?: string;
  path?: string[];
  value?: unknown;
};
const list = async (a: Args) =>
  (
    await db
      .pool('api')
      .query<{ task_id: string; state: string }>(
        'select * from admin.list_tasks($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)',
        [
          a.type ?? null,
          a.state ?? null,
          a.limit ?? null,
          a.before ?? null,
          a.worker ?? null,
          a.key ?? null,
          a.from ?? null,
          a.to ?? null,
          a.path ?? null,
          a.value === undefined ? null : JSON.stringify(a.value),
        ],
      )
  ).rows.map((r) => Number(r.task_id));

describe('filters', () => {
  let ids: number[] = [];
  beforeAll(async () => {
    await db.query('alter table queues.task disable trigger forbid_update');
    await db.query('truncate queues.task cascade');
    await db.query('alter table queues.task enable trigger forbid_update');
    ids = [];
    const rows = [
      ['email', { to: 'a@example.com', meta: { campaign: 'nov' } }, 'account:1', '2020-01-01T10:00:00Z'],
      ['email', { to: 'b@example.com', meta: { campaign: 'dec' } }, null, '2020-01-01T11:00:00Z'],
      ['sms', { to: '+1', n: 7 }, 'account:1', '2020-01-01T12:00:00Z'],
      ['sms', { to: '+2', n: 8 }, null, '2020-01-01T13:00:00Z'],
    ] as const;
    for (const [type, payload, key, at] of rows) {
      const { rows: r } = await db.query(
        `insert into queues.task (task_type, payload, resource_key, enqueued_at, scheduled_at) values ($1, $2, $3, $4, $4) returning task_id`,
        [type, payload, key, at],
      );
      ids.push(Number(r[0].task_id));
    }
    await db.query('select queues.rebuild_task_pending()');
    await db.pool('worker').query(`select * from queues.claim_tasks('worker-x', 1, '{sms}', 60)`); // leases ids[2]
  });

  it('by worker, resource key, time range, payload field, and combined with type and state', async () => {
    expect(await list({})).toEqual([...ids].reverse());
    expect(await list({ worker: 'worker-x' })).toEqual([ids[2]]);
    expect(await list({ worker: 'nobody' })).toEqual([]);
    expect(await list({ key: 'account:1' })).toEqual([ids[2], ids[0]]);
    expect(await list({ from: '2020-01-01T11:00:00Z', to: '2020-01-01T13:00:00Z' })).toEqual([ids[2], ids[1]]);
    expect(await list({ path: ['meta', 'campaign'], value: 'dec' })).toEqual([ids[1]]);
    expect(await list({ path: ['n'], value: 7 })).toEqual([ids[2]]);
    expect(await list({ path: ['n'], value: '7' })).toEqual([]); // a JSON string is not the number 7
    expect(await list({ type: 'sms', state: 'running' })).toEqual([ids[2]]);
    expect(await list({ type: 'sms', state: 'ready', key: 'account:1' })).toEqual([]);
    expect(await list({ type: 'email', key: 'account:1', path: ['to'], value: 'a@example.com' })).toEqual([ids[0]]);
    expect(await list({ limit: 2 })).toEqual([ids[3], ids[2]]);
    expect(await list({ limit: 2, before: ids[2] })).toEqual([ids[1], ids[0]]);
  });

  it.each([
    ['from after to', { from: '2030-01-02T00:00:00Z', to: '2030-01-01T00:00:00Z' }, 'must be before'],
    ['a path without a value', { path: ['a'] }, 'go together'],
    ['a value without a path', { value: 1 }, 'go together'],
    ['an empty path', { path: [], value: 1 }, 'payload_path'],
    ['an empty worker id', { worker: '' }, 'worker_id'],
    ['a long resource key', { key: 'k'.repeat(201) }, 'resource_key'],
    ['an unknown state', { state: 'lost' }, 'unknown state'],
    ['an unknown type', { type: 'fax' }, 'unknown task_type'],
  ])('refuses %s (22023)', async (_name, args, message) => {
    await expect(list(args as Args)).rejects.toMatchObject({
      code: '22023',
      message: expect.stringContaining(message),
    });
  });
});

describe('keyset pagination at 1,000,000 rows', () => {
  let root: Awaited<ReturnType<TestDatabase['client']>>;
  const parentIndex = new Map<string, string>();
  /** The table a plan node reads; a history partition counts as its parent (task_p0 is task). */
  const relationOf = (n: PlanNode): string => (n['Relation Name'] ?? '').replace(/_(p\d+|default)$/, '');
  /** The index a plan node reads; a partition's index counts as its parent's. */
  const indexOf = (n: PlanNode): string => parentIndex.get(n['Index Name'] ?? '') ?? n['Index Name'] ?? '';
  beforeAll(async () => {
    await db.query('alter table queues.task disable trigger forbid_update');
    await db.query('truncate queues.task cascade');
    await db.query('alter table queues.task enable trigger forbid_update');
    // A million completed tasks (every 10th with a resource key), then a few pending ones.
    await db.query(`
      with t as (
        insert into queues.task (task_type, payload, resource_key, enqueued_at, scheduled_at)
        select case when g % 2 = 0 then 'email' else 'sms' end, jsonb_build_object('n', g),
               case when g % 10 = 0 then 'store:' || (g % 1000) end,
               '2029-12-31T00:00:00Z'::timestamptz + make_interval(secs => g / 100.0), '2029-12-31T00:00:00Z'
          from generate_series(1, 1000000) g
        returning task_id
      )
      insert into queues.task_completed (task_id, completed_at, outcome)
      select task_id, '2029-12-31T12:00:00Z', case when task_id % 50 = 0 then 'failed' else 'succeeded' end from t`);
    await db.query(`select queues.enqueue('email', '{"fresh": true}'::jsonb) from generate_series(1, 20)`);
    await db.query('vacuum analyze queues.task, queues.task_completed, queues.task_pending');
    root = await db.client('root');
    // A partition's index is attached to its parent's (task_p0_pkey to task_pkey).
    const { rows } = await db.query(
      `select c.relname as child, p.relname as parent
         from pg_inherits i join pg_class c on c.oid = i.inhrelid join pg_class p on p.oid = i.inhparent
        where c.relkind = 'i' and c.relnamespace = 'queues'::regnamespace`,
    );
    for (const r of rows) parentIndex.set(r.child, r.parent);
  }, 600_000);
  afterAll(async () => {
    await root?.end();
  });

  /** The plan of the list statement run inside list_tasks_at. */
  async function plan(args: unknown[]): Promise<PlanNode[]> {
    const plans = await explainNested(
      root,
      'select * from admin.list_tasks($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)',
      args,
    );
    const inner = plans.find((p) => p.query.includes('order by') && p.query.includes('limit $5'));
    expect(inner, 'the list statement was explained').toBeDefined();
    return planNodes(inner!.plan);
  }
  const seqScans = (nodes: PlanNode[]) =>
    nodes.filter(
      (n) =>
        n['Node Type'] === 'Seq Scan' &&
        ['task', 'task_completed', 'task_lease'].includes(relationOf(n)) &&
        // An empty partition (the default one, a set made ahead) costs nothing to scan.
        sharedBuffers(n) > 0,
    );
  /** Rows a relation's scans passed over: returned plus removed by a filter, over all loops. */
  const rowsRead = (nodes: PlanNode[], relation: string) =>
    nodes
      .filter((n) => relationOf(n) === relation)
      .reduce(
        (sum, n) =>
          sum +
          (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) * Number(n['Actual Loops'] ?? 1),
        0,
      );

  it('no filter: the primary key, newest first; a deep page costs what the first does', async () => {
    const first = await plan([null, null, 50, null, null, null, null, null, null, null]);
    expect(seqScans(first)).toEqual([]);
    expect(
      first.some(
        (n) => indexOf(n) === 'task_pkey' && n['Node Type'] === 'Index Scan' && n['Scan Direction'] === 'Backward',
      ),
    ).toBe(true);
    expect(rowsRead(first, 'task')).toBeLessThanOrEqual(50);
    const deep = await plan([null, null, 50, 300000, null, null, null, null, null, null]);
    expect(seqScans(deep)).toEqual([]);
    expect(rowsRead(deep, 'task')).toBeLessThanOrEqual(50);
  });

  it('a failed outcome: the unsuccessful completions by task id, newest first', async () => {
    const nodes = await plan([null, 'failed', 50, 500000, null, null, null, null, null, null]);
    expect(seqScans(nodes)).toEqual([]);
    expect(
      nodes.some(
        (n) =>
          relationOf(n) === 'task_completed' &&
          indexOf(n) === 'task_completed_unsuccessful_task_idx' &&
          n['Scan Direction'] === 'Backward',
      ),
    ).toBe(true);
    // Every 50th task failed: a page of 50 reads its 50 completions (the partial index
    // holds only the unsuccessful ones), not the 50 × 50 around them.
    expect(rowsRead(nodes, 'task_completed')).toBeLessThanOrEqual(50);
  });

  it('succeeded: task_completed by its key, newest first', async () => {
    const nodes = await plan([null, 'succeeded', 50, 500000, null, null, null, null, null, null]);
    expect(seqScans(nodes)).toEqual([]);
    expect(
      nodes.some(
        (n) =>
          relationOf(n) === 'task_completed' &&
          indexOf(n) === 'task_completed_pkey' &&
          n['Scan Direction'] === 'Backward',
      ),
    ).toBe(true);
    // 49 of every 50 succeeded: a page passes over about 51 completions.
    expect(rowsRead(nodes, 'task_completed')).toBeLessThanOrEqual(60);
  });

  it('dead letters: a page reads its own completions, not the history around them', async () => {
    const plans = await explainNested(root, 'select * from admin.list_dead_letters(null, 50, 500000)');
    const inner = plans.find((p) => p.query.includes('queues.dead_letter'));
    expect(inner, 'the dead letter statement was explained').toBeDefined();
    const nodes = planNodes(inner!.plan);
    expect(seqScans(nodes)).toEqual([]);
    expect(nodes.some((n) => indexOf(n) === 'task_completed_unsuccessful_task_idx')).toBe(true);
    expect(rowsRead(nodes, 'task_completed')).toBeLessThanOrEqual(50);
    expect((await db.query('select * from admin.list_dead_letters(null, 50, 500000)')).rows).toHaveLength(50);
  });

  it("a resource key: its partial index, only that key's rows", async () => {
    const nodes = await plan([null, null, 50, null, null, 'store:500', null, null, null, null]);
    expect(seqScans(nodes)).toEqual([]);
    expect(nodes.some((n) => indexOf(n) === 'task_resource_key_idx')).toBe(true);
    expect(rowsRead(nodes, 'task')).toBeLessThanOrEqual(50);
  });

  it('a pending state: the claim index (pending work only), never history', async () => {
    const nodes = await plan([null, 'ready', 50, null, null, null, null, null, null, null]);
    // The planner may scan the small partition that holds the 20 new tasks whole; no scan
    // of task passes over more rows per loop than that partition holds (the million of
    // history sit in another).
    const perLoop = nodes
      .filter((n) => relationOf(n) === 'task')
      .map((n) => Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0));
    expect(perLoop.length).toBeGreaterThan(0);
    expect(Math.max(...perLoop)).toBeLessThanOrEqual(20);
    expect(await list({ state: 'ready' })).toHaveLength(20);
  });
});
