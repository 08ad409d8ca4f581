// Task dependencies (sql/queues/dependencies.sql): fan-in, failed, cancelled and abandoned
// dependencies, chains, dependencies already ended, bad input that writes nothing, the
// waiting state (not claimable, cancellable, kept by a rebuild, not run now), results read
// by the worker, and races between an enqueue and its dependency's completion, and between
// two dependencies of one task, on connections of their own.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import {
  backendPid,
  createTestDatabase,
  explainNested,
  planNodes,
  untilBlockedOrDone,
  type TestDatabase,
} from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const TYPE = 'product_resync';

/** Enqueues a task (as the app) that depends on `dependsOn`; returns its id. */
const enqueue = async (dependsOn: string[] | null = null, client: pg.Pool | pg.Client = db.pool('app')) =>
  (
    await client.query<{ id: string }>(`select queues.enqueue($1, '{}'::jsonb, _depends_on => $2::bigint[]) as id`, [
      TYPE,
      dependsOn,
    ])
  ).rows[0].id;

const complete = async (ids: string[], outcome = 'succeeded', client: pg.Pool | pg.Client = db.pool('owner')) =>
  (
    await client.query<{ task_id: string; result: string }>(
      `select * from queues.complete_tasks($1::bigint[], null, array_fill($2::text, array[cardinality($1::bigint[])]),
                                           array_fill(false, array[cardinality($1::bigint[])]))`,
      [ids, outcome],
    )
  ).rows;

/** The task's state as the dashboard shows it, and its error messages. */
const stateOf = async (id: string) => {
  const { rows } = await db.query<{ t: { task: { state: string }; errors: { error_message: string }[] } }>(
    'select admin.get_task($1) as t',
    [id],
  );
  return rows[0].t.task.state;
};
const errorsOf = async (id: string) =>
  (
    await db.query<{ error_message: string }>(
      'select error_message from queues.error where task_id = $1 order by error_id',
      [id],
    )
  ).rows.map((r) => r.error_message);

/** The ids a claim far in the future would take (every due task of the type). */
const claimableIds = async () =>
  (
    await db.query<{ task_id: string }>(
      `select p.task_id from queues.task_pending p
        where p.task_type = $1 and p.current_lease_id is null
          and p.scheduled_at <= now() + interval '1 day' and p.available_at <= now() + interval '1 day'`,
      [TYPE],
    )
  ).rows.map((r) => r.task_id);

const counts = async () =>
  (
    await db.query(
      `select (select count(*) from queues.task)::int as tasks,
              (select count(*) from queues.task_pending)::int as pending,
              (select count(*) from queues.task_dependency)::int as edges,
              (select count(*) from queues.task_completed)::int as completed,
              (select count(*) from queues.error)::int as errors`,
    )
  ).rows[0];

describe('waiting and release', () => {
  it('fan-in: a task of 40 dependencies waits, unclaimable, until the last succeeds', async () => {
    const deps: string[] = [];
    for (let i = 0; i < 40; i++) deps.push(await enqueue());
    const x = await enqueue(deps);
    expect(await stateOf(x)).toBe('waiting');
    expect(await claimableIds()).not.toContain(x);
    // A claim of the type, far ahead, takes every dependency and never the waiting task.
    const claimed = await db.query<{ task_id: string }>(
      `select task_id from queues.claim_tasks_at(now() + interval '1 day', 'w-fan', 1000, array[$1], 300, 5)`,
      [TYPE],
    );
    expect(claimed.rows.map((r) => r.task_id)).not.toContain(x);
    expect(claimed.rows.map((r) => r.task_id)).toEqual(expect.arrayContaining(deps));

    // Completed in batches of 13, out of order: the task waits until the last.
    const order = [...deps].reverse();
    for (let i = 0; i < order.length - 1; i += 13) {
      const batch = order.slice(i, Math.min(i + 13, order.length - 1));
      expect((await complete(batch)).every((r) => r.result === 'completed')).toBe(true);
      expect(await stateOf(x)).toBe('waiting');
    }
    await complete([order[order.length - 1]]);
    expect(await stateOf(x)).toBe('ready');
    expect(await claimableIds()).toContain(x);
    const deps2 = await db.pool('worker').query('select * from queues.list_task_dependencies($1)', [x]);
    expect(deps2.rows).toHaveLength(40);
    expect(deps2.rows.every((r) => r.outcome === 'succeeded')).toBe(true);
  });

  it('a failed dependency fails the task with an error naming it; the others do not matter', async () => {
    const a = await enqueue();
    const b = await enqueue();
    const x = await enqueue([a, b]);
    await complete([a], 'failed');
    expect(await stateOf(x)).toBe('failed');
    expect(await errorsOf(x)).toEqual([`dependency task ${a} ended failed`]);
    await complete([b]);
    expect(await stateOf(x)).toBe('failed');
  });

  it('a cancelled dependency fails the task', async () => {
    const a = await enqueue();
    const x = await enqueue([a]);
    await db.query(`select * from queues.cancel_tasks(array[$1]::bigint[], 'no longer needed')`, [a]);
    expect(await stateOf(x)).toBe('failed');
    expect(await errorsOf(x)).toEqual([`dependency task ${a} ended cancelled`]);
  });

  it('an abandoned dependency fails the task (abandoned by its transient errors)', async () => {
    const a = await enqueue();
    const x = await enqueue([a]);
    const { rows } = await db.query<{ task_lease_id: string }>(
      `select task_lease_id from queues.claim_tasks_at(now(), 'w-ab', 1000, array[$1], 300, 5) where task_id = $2`,
      [TYPE, a],
    );
    const r = await db.query(`select queues.interrupt_task($1, $2, 'provider down', 1) as r`, [
      a,
      rows[0].task_lease_id,
    ]);
    expect(r.rows[0].r).toBe('abandoned');
    expect(await stateOf(x)).toBe('failed');
    expect(await errorsOf(x)).toEqual([`dependency task ${a} ended abandoned`]);
  });

  it('a dependency abandoned by the claim (its leases expired) fails the task', async () => {
    await db.query(`insert into queues.task_type (task_type, description) values ('dep_abandon', 'abandon test')`);
    const a = (await db.pool('app').query<{ id: string }>(`select queues.enqueue('dep_abandon', '{}'::jsonb) as id`))
      .rows[0].id;
    const x = await enqueue([a]);
    // Leased, expired; leased again as the named suspect, expired: the next claim abandons it.
    for (const minutes of [0, 1, 2])
      await db.query(
        `select * from queues.claim_tasks_at(now() + make_interval(mins => $1), 'w-abandon', 10, array['dep_abandon'], 1, 1)`,
        [minutes],
      );
    expect(await stateOf(a)).toBe('abandoned');
    expect(await stateOf(x)).toBe('failed');
    expect(await errorsOf(x)).toEqual([`dependency task ${a} ended abandoned`]);
  });

  it('chains: A -> B -> C run in turn; when A fails, B and C fail', async () => {
    const a = await enqueue();
    const b = await enqueue([a]);
    const c = await enqueue([b]);
    await complete([a]);
    expect(await stateOf(b)).toBe('ready');
    expect(await stateOf(c)).toBe('waiting');
    await complete([b]);
    expect(await stateOf(c)).toBe('ready');

    const a2 = await enqueue();
    const b2 = await enqueue([a2]);
    const c2 = await enqueue([b2]);
    const d2 = await enqueue([c2, a2]);
    await complete([a2], 'failed');
    expect(await stateOf(b2)).toBe('failed');
    expect(await stateOf(c2)).toBe('failed');
    expect(await stateOf(d2)).toBe('failed');
    expect(await errorsOf(c2)).toEqual([`dependency task ${b2} ended failed`]);
    expect(await errorsOf(d2)).toEqual([`dependency task ${a2} ended failed`]);
  });

  it('a dependency already ended: succeeded counts at once, failed fails the new task at once', async () => {
    const ok = await enqueue();
    await complete([ok]);
    const x = await enqueue([ok]);
    expect(await stateOf(x)).toBe('ready');

    const bad = await enqueue();
    await complete([bad], 'validation_failed');
    const y = await enqueue([ok, bad]);
    expect(await stateOf(y)).toBe('failed');
    expect(await errorsOf(y)).toEqual([`dependency task ${bad} ended validation_failed`]);
  });

  it('a waiting task can be cancelled (by id and by the waiting filter); its dependency then ends quietly', async () => {
    const a = await enqueue();
    const x = await enqueue([a]);
    const y = await enqueue([a]);
    const r = await db.query(`select * from queues.cancel_tasks(array[$1]::bigint[])`, [x]);
    expect(r.rows[0]).toMatchObject({ result: 'cancelled', was_running: false });
    const m = await db.query(`select * from admin.cancel_tasks_matching($1, 'waiting', 1000)`, [TYPE]);
    expect(m.rows.map((row) => row.task_id)).toContain(y);
    await complete([a]);
    expect(await stateOf(x)).toBe('cancelled');
    expect(await stateOf(y)).toBe('cancelled');
  });

  it('a waiting task stays waiting through a rebuild of the claim index and a run-now request', async () => {
    const a = await enqueue();
    const x = await enqueue([a]);
    await db.query('select queues.rebuild_task_pending()');
    expect(await stateOf(x)).toBe('waiting');
    const now = await db.query(`select * from admin.run_tasks_now(array[$1]::bigint[])`, [x]);
    expect(now.rows[0].result).toBe('not_scheduled');
    expect(await db.query('select queues.run_task_now($1) as r', [x])).toMatchObject({ rows: [{ r: 'due_now' }] });
    expect(await stateOf(x)).toBe('waiting');
    // A worker asking when to look again is not sent to 'infinity'.
    const next = await db
      .pool('worker')
      .query<{ ms: number | null }>('select queues.next_claim_in_ms(array[$1]) as ms', [TYPE]);
    expect(next.rows[0].ms === null || next.rows[0].ms <= 2147483647).toBe(true);
    await complete([a]);
    expect(await stateOf(x)).toBe('ready');
  });

  it('lists dependencies with their results for the worker, and both directions on the task page', async () => {
    const a = await enqueue();
    const b = await enqueue();
    const x = await enqueue([a, b]);
    const { rows } = await db.query<{ task_lease_id: string }>(
      `select task_lease_id from queues.claim_tasks_at(now(), 'w-res', 1000, array[$1], 300, 5) where task_id = $2`,
      [TYPE, a],
    );
    const worker = db.pool('worker');
    await worker.query(`select queues.record_task_result($1, $2, '{"rows": 7}')`, [a, rows[0].task_lease_id]);
    await worker.query('select * from queues.complete_tasks(array[$1]::bigint[], array[$2]::bigint[])', [
      a,
      rows[0].task_lease_id,
    ]);
    const listed = await worker.query('select * from queues.list_task_dependencies($1)', [x]);
    expect(listed.rows).toEqual([
      { task_id: a, task_type: TYPE, outcome: 'succeeded', completed_at: expect.any(Date), result: { rows: 7 } },
      { task_id: b, task_type: TYPE, outcome: null, completed_at: null, result: null },
    ]);
    const page = await db.pool('api').query('select admin.get_task($1) as t', [x]);
    expect(page.rows[0].t.dependencies.map((d: { task_id: number }) => String(d.task_id))).toEqual([a, b]);
    const aPage = await db.pool('api').query('select admin.get_task($1) as t', [a]);
    expect(aPage.rows[0].t.dependents).toEqual([{ task_id: Number(x), task_type: TYPE, state: 'waiting' }]);
    expect((await db.query('select admin.task_states() as s')).rows[0].s).toContain('waiting');
  });
});

describe('bad input writes nothing', () => {
  it('refuses a missing task (23503), itself and a task of the same batch (22023), nulls (22004)', async () => {
    const a = await enqueue();
    const before = await counts();
    await expect(enqueue([a, '999999999'])).rejects.toMatchObject({
      code: '23503',
      message: 'depends_on names task 999999999, which does not exist',
    });
    // The id the next task will get (nothing else enqueues here).
    const next = (await db.query<{ id: string }>(`select (last_value + 1)::text as id from queues.task_task_id_seq`))
      .rows[0].id;
    await expect(enqueue([next])).rejects.toMatchObject({
      code: '22023',
      message: `a task cannot depend on itself (task ${next})`,
    });
    await expect(
      db.pool('app').query(`select queues.enqueue($1, '{}'::jsonb, _depends_on => array[$2::bigint, null])`, [TYPE, a]),
    ).rejects.toMatchObject({ code: '22004' });
    const n2 = (await db.query<{ id: string }>(`select (last_value + 1)::text as id from queues.task_task_id_seq`))
      .rows[0].id;
    const batch = [
      { task_type: TYPE, payload: {} },
      { task_type: TYPE, payload: {}, depends_on: [a, n2] },
    ];
    await expect(
      db.pool('app').query('select * from queues.enqueue_many($1::jsonb)', [JSON.stringify(batch)]),
    ).rejects.toMatchObject({
      code: '22023',
      message: `tasks[1]: depends_on names task ${n2}, enqueued by the same call`,
    });
    await expect(
      db
        .pool('app')
        .query('select * from queues.enqueue_many($1::jsonb)', [
          JSON.stringify([{ task_type: TYPE, payload: {}, depends_on: ['x'] }]),
        ]),
    ).rejects.toMatchObject({ code: '22023', message: 'tasks[0]: depends_on must be an array of task ids' });
    await expect(
      db
        .pool('app')
        .query('select * from queues.enqueue_many($1::jsonb)', [
          JSON.stringify([{ task_type: TYPE, payload: {}, depends_on: ['999999998'] }]),
        ]),
    ).rejects.toMatchObject({
      code: '23503',
      message: 'tasks[0]: depends_on names task 999999998, which does not exist',
    });
    expect(await counts()).toEqual(before);
  });

  it("queues.enqueue_and_commit (the client's enqueue on a pool) takes dependencies, with the same checks", async () => {
    const call = (deps: (string | null)[]) =>
      db
        .pool('app')
        .query<{ _task_id: string }>(`call queues.enqueue_and_commit($1, '{}', _depends_on => $2::bigint[])`, [
          TYPE,
          deps,
        ])
        .then((r) => r.rows[0]._task_id);
    const a = await enqueue();
    const b = await call([a]);
    expect(await stateOf(b)).toBe('waiting');
    const { rows } = await db.query(
      `select depends_on_task_id::text as dep from queues.task_dependency where task_id = $1`,
      [b],
    );
    expect(rows).toEqual([{ dep: a }]);

    const before = await counts();
    await expect(call([a, '999999999'])).rejects.toMatchObject({
      code: '23503',
      message: 'depends_on names task 999999999, which does not exist',
    });
    const next = (await db.query<{ id: string }>(`select (last_value + 1)::text as id from queues.task_task_id_seq`))
      .rows[0].id;
    await expect(call([next])).rejects.toMatchObject({
      code: '22023',
      message: `a task cannot depend on itself (task ${next})`,
    });
    await expect(call([a, null])).rejects.toMatchObject({ code: '22004' });
    expect(await counts()).toEqual(before);

    await complete([a]);
    expect(await stateOf(b)).toBe('ready');
  });

  it('a batch enqueues dependents of older tasks', async () => {
    const a = await enqueue();
    const { rows } = await db.pool('app').query<{ task_id: string }>('select * from queues.enqueue_many($1::jsonb)', [
      JSON.stringify([
        { task_type: TYPE, payload: {}, depends_on: [Number(a)] },
        { task_type: TYPE, payload: {} },
        { task_type: TYPE, payload: {}, depends_on: [a] },
      ]),
    ]);
    expect(await Promise.all(rows.map((r) => stateOf(r.task_id)))).toEqual(['waiting', 'ready', 'waiting']);
    await complete([a]);
    expect(await Promise.all(rows.map((r) => stateOf(r.task_id)))).toEqual(['ready', 'ready', 'ready']);
  });
});

describe('races', () => {
  it('an enqueue holding its transaction open while the dependency completes: the task is released', async () => {
    const app = await db.client('app');
    const owner = await db.client('owner');
    try {
      const ownerPid = await backendPid(owner);
      for (let i = 0; i < 20; i++) {
        const d = await enqueue();
        await app.query('begin');
        const x = await enqueue([d], app);
        const done = complete([d], 'succeeded', owner);
        await untilBlockedOrDone(db, ownerPid, done);
        await app.query('commit');
        await done;
        expect(await stateOf(x)).toBe('ready');
      }
    } finally {
      await app.end();
      await owner.end();
    }
  });

  it('a completion holding its transaction open while a dependent is enqueued: the dependent sees it', async () => {
    const app = await db.client('app');
    const owner = await db.client('owner');
    try {
      const appPid = await backendPid(app);
      for (let i = 0; i < 20; i++) {
        const d = await enqueue();
        const outcome = i % 2 === 0 ? 'succeeded' : 'failed';
        await owner.query('begin');
        await complete([d], outcome, owner);
        const x = enqueue([d], app);
        await untilBlockedOrDone(db, appPid, x);
        await owner.query('commit');
        expect(await stateOf(await x)).toBe(outcome === 'succeeded' ? 'ready' : 'failed');
      }
    } finally {
      await app.end();
      await owner.end();
    }
  });

  it('two dependencies of one task completing at once: the task is released', async () => {
    const c1 = await db.client('owner');
    const c2 = await db.client('owner');
    try {
      const pid2 = await backendPid(c2);
      for (let i = 0; i < 20; i++) {
        const d1 = await enqueue();
        const d2 = await enqueue();
        const x = await enqueue([d1, d2]);
        await c1.query('begin');
        await complete([d1], 'succeeded', c1);
        const done = complete([d2], 'succeeded', c2);
        await untilBlockedOrDone(db, pid2, done);
        await c1.query('commit');
        await done;
        expect(await stateOf(x)).toBe('ready');
      }
    } finally {
      await c1.end();
      await c2.end();
    }
  });

  it('free-running: 8 pairs of connections race enqueues of dependents with completions, 304 times', async () => {
    const apps = await Promise.all(Array.from({ length: 8 }, () => db.client('app')));
    const owners = await Promise.all(Array.from({ length: 8 }, () => db.client('owner')));
    try {
      const dependents: string[] = [];
      for (let round = 0; round < 38; round++) {
        const ds = await Promise.all(apps.map(() => enqueue()));
        const shared = ds[0];
        const results = await Promise.all(
          ds.flatMap((d, k) => [
            enqueue(k % 2 === 0 ? [d] : [d, shared], apps[k]),
            complete([d], 'succeeded', owners[k]).then(() => null),
          ]),
        );
        dependents.push(...results.filter((r): r is string => r !== null));
      }
      const { rows } = await db.query<{ n: number }>(
        `select count(*)::int as n from queues.task_pending
          where task_id = any ($1::bigint[]) and available_at = 'infinity'`,
        [dependents],
      );
      expect(rows[0].n).toBe(0);
      expect(dependents.length).toBe(38 * 8);
    } finally {
      await Promise.all([...apps, ...owners].map((c) => c.end()));
    }
  });
});

describe('races between completions', () => {
  it('8 connections complete the 40 shared dependencies of 10 tasks at once, 10 times: no deadlock, none left waiting', async () => {
    const conns = await Promise.all(Array.from({ length: 8 }, () => db.client('owner')));
    try {
      for (let round = 0; round < 10; round++) {
        const deps: string[] = [];
        for (let i = 0; i < 40; i++) deps.push(await enqueue());
        const dependents: string[] = [];
        for (let i = 0; i < 10; i++) dependents.push(await enqueue(deps));
        // Every other round one dependency fails: every dependent fails, whichever
        // connection's completion comes first.
        const failing = round % 2 === 1 ? deps[17] : null;
        await Promise.all(
          conns.map(async (c, k) => {
            const mine = deps.filter((_, i) => i % 8 === k).reverse();
            for (const d of mine) await complete([d], d === failing ? 'failed' : 'succeeded', c);
          }),
        );
        const states = await Promise.all(dependents.map(stateOf));
        expect(states).toEqual(dependents.map(() => (failing ? 'failed' : 'ready')));
      }
    } finally {
      await Promise.all(conns.map((c) => c.end()));
    }
  });

  it('cancelling a waiting task races its dependency completing: it ends cancelled, never released after', async () => {
    const canceller = await db.client('owner');
    const completer = await db.client('owner');
    try {
      for (let i = 0; i < 50; i++) {
        const a = await enqueue();
        const x = await enqueue([a]);
        const [cancel] = await Promise.all([
          canceller.query<{ result: string }>(`select * from queues.cancel_tasks(array[$1]::bigint[])`, [x]),
          complete([a], 'succeeded', completer),
        ]);
        expect(cancel.rows[0].result).toBe('cancelled');
        expect(await stateOf(x)).toBe('cancelled');
        expect((await db.query('select 1 from queues.task_pending where task_id = $1', [x])).rows).toEqual([]);
      }
    } finally {
      await canceller.end();
      await completer.end();
    }
  });
});

describe('the claim', () => {
  it('does not read waiting tasks: 1000 of them cost a claim of their type no more than none', async () => {
    await db.query(`insert into queues.task_type (task_type, description) values ('dep_plan', 'claim plan test')`);
    const a = await enqueue();
    const batch = (n: number, dependsOn?: string[]) =>
      JSON.stringify(Array.from({ length: n }, () => ({ task_type: 'dep_plan', payload: {}, depends_on: dependsOn })));
    const root = await db.client('root');
    /** The ready-index scan of a claim of 5 new dep_plan tasks: the rows it read, and its buffers. */
    const claimScan = async () => {
      await db.query('select * from queues.enqueue_many($1::jsonb)', [batch(5)]);
      const plans = await explainNested(
        root,
        `select * from queues.claim_tasks_at(now(), 'w-plan', 5, array['dep_plan'], 300, 5)`,
      );
      const scans = plans.flatMap((p) => planNodes(p.plan)).filter((n) => n['Index Name'] === 'task_pending_ready_idx');
      expect(scans).toHaveLength(1);
      return {
        rows: Number(scans[0]['Actual Rows']) + Number(scans[0]['Rows Removed by Filter'] ?? 0),
        buffers: Number(scans[0]['Shared Hit Blocks'] ?? 0) + Number(scans[0]['Shared Read Blocks'] ?? 0),
      };
    };
    try {
      await root.query(`set plan_cache_mode = force_generic_plan`);
      const without = await claimScan();
      // Enqueued one by one (queues.enqueue inserts a waiting row as waiting).
      for (let i = 0; i < 1000; i += 100)
        await Promise.all(
          Array.from({ length: 100 }, () =>
            db.query(`select queues.enqueue('dep_plan', '{}', _depends_on => array[$1::bigint])`, [a]),
          ),
        );
      await db.query('analyze queues.task_pending');
      const withWaiting = await claimScan();
      // The same index entries read (the five ready tasks), and about as many pages.
      expect(withWaiting.rows).toBe(without.rows);
      expect(withWaiting.buffers).toBeLessThanOrEqual(without.buffers + 2);
    } finally {
      await root.end();
    }
  });

  it('a completion reads the dependencies by key after the table grew under plans made while it was small', async () => {
    const root = await db.client('root');
    try {
      // Plans made on this connection while the dependency table is small.
      for (let i = 0; i < 6; i++) {
        const a = await enqueue();
        await enqueue([a]);
        await complete([a], 'succeeded', root);
      }
      await db.query(
        `insert into queues.task_dependency (task_id, depends_on_task_id)
         select 900000000 + g, 800000000 + g from generate_series(1, 20000) g`,
      );
      await db.query('analyze queues.task_dependency');
      const a = await enqueue();
      const x = await enqueue([a]);
      const plans = await explainNested(
        root,
        `select * from queues.complete_tasks(array[$1]::bigint[], null, array['succeeded'])`,
        [a],
      );
      const reads = plans
        .flatMap((p) => planNodes(p.plan))
        .filter((n) => String(n['Relation Name']).startsWith('task_dependency'))
        .map((n) => Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0));
      expect(reads.length).toBeGreaterThan(0);
      expect(Math.max(...reads)).toBeLessThanOrEqual(2);
      expect(await stateOf(x)).toBe('ready');
    } finally {
      await root.end();
    }
  });
});
