// The task list's filters and its keyset pagination at scale: every filter returns what
// it should, bad filters are refused, and with 200,000 history rows a page walks an
// index newest first and touches about a page of rows, whatever the depth (plans read
// with explainNested; shapes and row counts asserted, never times). Pages read history
// set by set, newest first: paging through tasks spread over several partition sets
// gives the rows a single statement over every partition gives.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestDatabase,
  explainNested,
  planNodes,
  sharedBuffers,
  type PlanNode,
  type TestDatabase,
} from '@org/testing';

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

describe('keyset pagination over 200,000 rows of history', () => {
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
    // 200,000 completed tasks spread over the first set's million ids (every fifth id;
    // every 10th task with a resource key, every 50th failed), then a few pending ones
    // in the next set: what a page reads is the same as over a million dense ids, and
    // the history is written in a fifth of the time.
    await db.query(`
      with t as (
        insert into queues.task (task_id, task_type, payload, resource_key, enqueued_at, scheduled_at)
        overriding system value
        select g * 5, case when g % 2 = 0 then 'email' else 'sms' end, jsonb_build_object('n', g),
               case when g % 10 = 0 then 'store:' || (g % 1000) end,
               '2029-12-31T00:00:00Z'::timestamptz + make_interval(secs => g / 100.0), '2029-12-31T00:00:00Z'
          from generate_series(1, 199999) g
        returning task_id, task_type
      )
      insert into queues.task_completed (task_id, completed_at, outcome, task_type)
      select task_id, '2029-12-31T12:00:00Z', case when task_id % 250 = 0 then 'failed' else 'succeeded' end, task_type from t`);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), 1000000)`);
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
  /** The partitions of `relation` a plan reads (task_p0, task_p1000000, ...). */
  const partitionsOf = (nodes: PlanNode[], relation: string) =>
    new Set(nodes.filter((n) => relationOf(n) === relation).map((n) => n['Relation Name']));
  const seqScans = (nodes: PlanNode[]) =>
    nodes.filter(
      (n) =>
        n['Node Type'] === 'Seq Scan' &&
        ['task', 'task_completed', 'task_lease', 'claim_lease'].includes(relationOf(n)) &&
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
    // The newest page's statement has the two newest sets' bounds as values (the history
    // holds sets [0, 1000000) and [1000000, 2000000)); a deep page's, its own set's.
    expect(partitionsOf(first, 'task')).toEqual(new Set(['task_p0', 'task_p1000000']));
    const deep = await plan([null, null, 50, 300000, null, null, null, null, null, null]);
    expect(seqScans(deep)).toEqual([]);
    expect(rowsRead(deep, 'task')).toBeLessThanOrEqual(50);
    for (const table of ['task', 'task_completed', 'task_lease']) {
      expect([...partitionsOf(deep, table)].every((name) => name === `${table}_p0`)).toBe(true);
    }
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

  it('succeeded: the tasks by their key, newest first, each probed for its end', async () => {
    // Successes are mostly completion rounds (these, written before them, are
    // task_completed rows): the walk goes down queues.task's key and probes each task's
    // end in both shapes (queues.task_end_of).
    const nodes = await plan([null, 'succeeded', 50, 500000, null, null, null, null, null, null]);
    expect(seqScans(nodes)).toEqual([]);
    expect(
      nodes.some(
        (n) => indexOf(n) === 'task_pkey' && n['Node Type'] === 'Index Scan' && n['Scan Direction'] === 'Backward',
      ),
    ).toBe(true);
    expect(nodes.some((n) => relationOf(n) === 'task_completed' && indexOf(n) === 'task_completed_pkey')).toBe(true);
    expect(nodes.some((n) => indexOf(n) === 'completion_round_task_range_idx')).toBe(true);
    // 49 of every 50 succeeded: a page passes over about 51 tasks and their completions.
    expect(rowsRead(nodes, 'task')).toBeLessThanOrEqual(60);
    expect(rowsRead(nodes, 'task_completed')).toBeLessThanOrEqual(60);
  });

  it('dead letters: a page reads its own completions, not the history around them', async () => {
    const plans = await explainNested(root, 'select * from admin.list_dead_letters(null, 50, 500000)');
    const inner = plans.filter((p) => p.query.includes('queues.task_redriven'));
    expect(inner, 'one dead letter statement, for the set of task 500000').toHaveLength(1);
    const nodes = planNodes(inner[0].plan);
    expect(seqScans(nodes)).toEqual([]);
    expect(nodes.some((n) => indexOf(n) === 'task_completed_unsuccessful_task_idx')).toBe(true);
    expect(rowsRead(nodes, 'task_completed')).toBeLessThanOrEqual(50);
    expect(partitionsOf(nodes, 'task_completed')).toEqual(new Set(['task_completed_p0']));
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
    // of task passes over more rows per loop than that partition holds (the history's rows
    // sit in another).
    const perLoop = nodes
      .filter((n) => relationOf(n) === 'task')
      .map((n) => Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0));
    expect(perLoop.length).toBeGreaterThan(0);
    expect(Math.max(...perLoop)).toBeLessThanOrEqual(20);
    expect(await list({ state: 'ready' })).toHaveLength(20);
  });
});

describe('pages across partition sets', () => {
  // 36 tasks over four sets of 10 ids; every third failed (every other one of those with
  // an error handler, so no dead letter), every seventh abandoned, four pending; one
  // failed task redriven, errors on some. The third set holds no failed task.
  const SIZE = 10;
  let base: number;
  type Row = Record<string, unknown>;
  const api = () => db.pool('api');
  /** Every page of `sql` (args, then limit and before as the last two), concatenated. */
  async function pages(sql: (n: number) => string, args: unknown[], limit: number): Promise<Row[]> {
    const all: Row[] = [];
    for (let before: unknown = null; ;) {
      const { rows } = await api().query(sql(args.length), [...args, limit, before]);
      expect(rows.length).toBeLessThanOrEqual(limit);
      all.push(...rows);
      if (rows.length < limit) return all;
      before = rows[rows.length - 1]!.task_id;
    }
  }
  const listTasks = (n: number) =>
    `select * from admin.list_tasks($1, $2, $${n + 1}, $${n + 2}, null, null, null, null, null, null)`;
  const listDeadLetters = (n: number) => `select * from admin.list_dead_letters($1, $${n + 1}, $${n + 2})`;

  beforeAll(async () => {
    await db.query('alter table queues.task disable trigger forbid_update');
    await db.query('truncate queues.task cascade');
    await db.query('alter table queues.task enable trigger forbid_update');
    const { rows } = await db.query(`select max(upper_bound) as top from queues.history_sets() where not is_default`);
    base = Number(rows[0].top);
    for (let lower = base; lower < base + 4 * SIZE; lower += SIZE) {
      await db.query('select queues.create_history_partition($1, $2)', [lower, lower + SIZE]);
    }
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base - 1]);
    await db.query(`
      with t as (
        insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
        select case when g % 2 = 0 then 'email' else 'sms' end,
               case when g % 6 = 3 then jsonb_build_object('n', g, 'error_handler', 'x') else jsonb_build_object('n', g) end,
               '2029-12-31T00:00:00Z', '2029-12-31T00:00:00Z'
          from generate_series(0, 35) g
        returning task_id, task_type
      )
      insert into queues.task_completed (task_id, completed_at, outcome, task_type)
      select task_id, '2029-12-31T12:00:00Z',
             case when (task_id - ${base}) % 7 = 0 then 'abandoned'
                  when (task_id - ${base}) % 3 = 0 and (task_id - ${base}) / 10 <> 2 then 'failed'
                  else 'succeeded' end,
             task_type
        from t where task_id - ${base} not in (5, 15, 26, 34)`);
    await db.query('select queues.rebuild_task_pending()');
    await db.query(`insert into queues.error (task_id, error_message)
                    select g, 'boom ' || g from generate_series(${base}, ${base + 35}, 4) g`);
    await db.query(`insert into queues.task_redriven (task_id, new_task_id) values ($1, $2)`, [base + 9, base + 33]);
  });

  it('tasks, outcomes and dead letters page across set boundaries as one statement over every set does', async () => {
    // The reference: the same statements over every partition at once, taken by the
    // functions when the default partition holds a task (below).
    const walked = new Map<string, Row[]>();
    const cases: [string, (n: number) => string, unknown[]][] = [
      ['all', listTasks, [null, null]],
      ['failed', listTasks, [null, 'failed']],
      ['succeeded', listTasks, [null, 'succeeded']],
      ['sms', listTasks, ['sms', null]],
      ['dead letters', listDeadLetters, [null]],
      ['email dead letters', listDeadLetters, ['email']],
    ];
    for (const [name, sql, args] of cases) {
      const whole = await pages(sql, args, 500);
      for (const limit of [1, 3, 7]) expect(await pages(sql, args, limit), `${name} by ${limit}`).toEqual(whole);
      walked.set(name, whole);
    }
    const ids = (name: string) => walked.get(name)!.map((r) => Number(r.task_id));
    expect(ids('all')).toEqual(Array.from({ length: 36 }, (_, i) => base + 35 - i));
    expect(ids('failed').every((id) => id - base < 20 || id - base >= 30)).toBe(true);
    expect(ids('failed').length).toBeGreaterThan(5);
    // Dead letters are the view's rows, newest first, page by page.
    const { rows: view } = await db.query('select * from queues.dead_letter order by task_id desc');
    expect(walked.get('dead letters')).toEqual(view);
    expect(ids('dead letters')).not.toContain(base + 9); // redriven
    expect(ids('dead letters')).not.toContain(base + 3); // failed with an error handler
    expect(walked.get('dead letters')!.some((r) => r.last_error !== null)).toBe(true);

    // A task in the default partition: the functions read every partition in one
    // statement, as before sets; the tasks in sets come back the same.
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base + 4 * SIZE + 5]);
    await db.pool('owner').query(`select queues.enqueue('email', '{"late": true}'::jsonb)`);
    expect(Number((await db.query('select count(*) from queues.task_default')).rows[0].count)).toBe(1);
    for (const [name, sql, args] of cases) {
      const whole = (await pages(sql, args, 4)).filter((r) => Number(r.task_id) < base + 4 * SIZE);
      expect(whole, `${name}, one statement`).toEqual(walked.get(name));
    }
  });
});
