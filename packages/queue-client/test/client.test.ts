// @org/queue-client against a real database, connected as the roles apps and workers use.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import {
  QueueError,
  claimTasks,
  completeTask,
  completeTasks,
  connect,
  dequeueNextAvailableTask,
  enqueue,
  enqueueMany,
  enqueueUnique,
  failTask,
  runFunction,
  withTransaction,
} from '../src/index.js';
import { idArrayLiteral, parseTimestamptz } from '../src/pgtyped-runtime.js';
import pg from 'pg';

let db: TestDatabase;
let app: pg.Pool;
let worker: pg.Pool;
beforeAll(async () => {
  db = await createTestDatabase();
  app = connect({ connectionString: db.url('app'), applicationName: 'client-test-app' });
  worker = connect({ connectionString: db.url('worker') });
});
afterAll(async () => {
  await app?.end();
  await worker?.end();
  await db?.drop();
});

/** Cancels the pending tasks of the unique keys like `pattern`, so later tests claim only their own. */
const cancelPending = (pattern: string) =>
  db.query(
    `select admin.cancel_tasks(array(select u.task_id from queues.task_unique u
                                      join queues.task_pending p using (task_id) where u.unique_key like $1))`,
    [pattern],
  );

describe('queue client', () => {
  it('enqueues, claims, fails and completes with typed rows', async () => {
    const scheduledAt = new Date(Date.now() - 60_000);
    const taskId = await enqueue(app, {
      taskType: 'store_discovery',
      payload: { send_email_attempt_id: 42 },
      scheduledAt,
      priority: 3,
      resourceKey: 'message:42',
      maxAttempts: 1,
    });
    expect(taskId).toMatch(/^\d+$/);

    const [claimed, ...rest] = await claimTasks(worker, {
      workerId: 'w-1',
      limit: 5,
      taskTypes: ['store_discovery'],
      leaseSeconds: 30,
    });
    expect(rest).toEqual([]);
    expect(claimed).toMatchObject({
      taskId,
      taskType: 'store_discovery',
      payload: { send_email_attempt_id: 42 },
      priority: 3,
      resourceKey: 'message:42',
      maxAttempts: 1,
      leaseCount: 1,
    });
    expect(claimed.scheduledAt).toEqual(scheduledAt);
    expect(claimed.expiresAt.getTime() - claimed.leasedAt.getTime()).toBe(30_000);
    expect(claimed.taskLeaseId).toMatch(/^\d+$/);

    const errorId = await failTask(worker, {
      taskId,
      errorMessage: 'provider said no',
      taskLeaseId: claimed.taskLeaseId,
    });
    expect(errorId).toMatch(/^\d+$/);
    expect(await completeTask(worker, { taskId, taskLeaseId: claimed.taskLeaseId, outcome: 'failed' })).toBe(true);
    expect(await completeTask(worker, { taskId })).toBe(false);
    const { rows } = await db.query('select outcome from queues.task_end where task_id = $1', [taskId]);
    expect(rows).toEqual([{ outcome: 'failed' }]);
  });

  it('enqueueMany returns ids in order; completeTasks reports per task', async () => {
    const ids = await enqueueMany(app, [
      { taskType: 'product_resync', payload: { n: 1 } },
      { taskType: 'product_resync', payload: { n: 2 }, scheduledAt: new Date('2020-01-01T00:00:00Z') },
    ]);
    expect(ids).toHaveLength(2);
    const claimed = await claimTasks(worker, { workerId: 'w-2', limit: 10, taskTypes: ['product_resync'] });
    // The older scheduled_at comes first.
    expect(claimed.map((t) => t.taskId)).toEqual([ids[1], ids[0]]);
    const results = await completeTasks(
      worker,
      claimed.map((t) => ({ taskId: t.taskId, taskLeaseId: t.taskLeaseId })),
    );
    expect(results).toEqual([
      { taskId: ids[1], result: 'completed' },
      { taskId: ids[0], result: 'completed' },
    ]);
    expect(await completeTasks(worker, [])).toEqual([]);
  });

  it('enqueueUnique says what happened; enqueue and enqueueMany with `unique` answer the pending id', async () => {
    const task = { taskType: 'store_discovery', payload: { v: 1 }, unique: { key: 'client:1' } };
    const first = await enqueueUnique(app, task);
    expect(first).toEqual({ taskId: expect.any(String), outcome: 'inserted', replacedTaskId: null });
    expect(await enqueue(app, task)).toBe(first.taskId);
    expect(await enqueueMany(app, [task, { ...task, unique: { key: 'client:2' } }])).toEqual([
      first.taskId,
      expect.any(String),
    ]);
    const replaced = await withTransaction(app, (tx) =>
      enqueueUnique(tx, {
        ...task,
        payload: { v: 2 },
        unique: { key: 'client:1', policy: 'debounce', periodMs: 1500 },
      }),
    );
    expect(replaced).toMatchObject({ outcome: 'replaced', replacedTaskId: first.taskId });
    const { rows } = await db.query(
      `select payload, extract(epoch from scheduled_at - enqueued_at)::float8 as delay from queues.task where task_id = $1`,
      [replaced.taskId],
    );
    expect(rows[0].payload).toEqual({ v: 2 });
    expect(rows[0].delay).toBeCloseTo(1.5, 1);
    await expect(enqueueUnique(app, { ...task, unique: { key: '' } })).rejects.toMatchObject({
      kind: 'invalid_input',
      message: expect.stringMatching(/unique_key must be 1 to 200 characters/),
    });
    await expect(
      enqueueUnique(app, { ...task, unique: { key: 'k', policy: 'debounce', periodMs: Number.NaN } }),
    ).rejects.toMatchObject({ kind: 'invalid_input', message: expect.stringMatching(/unique.periodMs/) });
    await cancelPending('client:%');
  });

  it('a task enqueued without maxAttempts gets the default of 25', async () => {
    const taskId = await enqueue(app, { taskType: 'store_discovery', payload: {} });
    const [id] = await enqueueMany(app, [{ taskType: 'store_discovery', payload: {} }]);
    const { rows } = await db.query(`select max_attempts from queues.task where task_id = any($1::bigint[])`, [
      [taskId, id],
    ]);
    expect(rows).toEqual([{ max_attempts: 25 }, { max_attempts: 25 }]);
    await db.query(`select admin.cancel_tasks($1::bigint[])`, [[taskId, id]]);
  });

  it('keeps groupKey on the task, from enqueue on a pool, in a transaction, in a batch and with unique', async () => {
    const onPool = await enqueue(app, { taskType: 'store_discovery', payload: {}, groupKey: 'tenant:1' });
    const inTx = await withTransaction(app, (c) =>
      enqueue(c, { taskType: 'store_discovery', payload: {}, groupKey: 'tenant:2' }),
    );
    const batch = await enqueueMany(app, [
      { taskType: 'store_discovery', payload: {}, groupKey: 'tenant:3' },
      { taskType: 'store_discovery', payload: {} },
    ]);
    const ids = [onPool, inTx, ...batch];
    const { rows } = await db.query(
      `select t.group_key, p.group_key as pending from queues.task t join queues.task_pending p using (task_id)
        where t.task_id = any($1::bigint[]) order by t.task_id`,
      [ids],
    );
    expect(rows).toEqual([
      { group_key: 'tenant:1', pending: 'tenant:1' },
      { group_key: 'tenant:2', pending: 'tenant:2' },
      { group_key: 'tenant:3', pending: 'tenant:3' },
      { group_key: null, pending: null },
    ]);
    const unique = await enqueue(app, {
      taskType: 'store_discovery',
      payload: {},
      groupKey: 'x',
      timeoutMs: 1234,
      unique: { key: 'group-unique', policy: 'replace' },
    });
    ids.push(unique);
    const { rows: kept } = await db.query(
      `select p.group_key, t.timeout_ms from queues.task t join queues.task_pending p using (task_id) where t.task_id = $1`,
      [unique],
    );
    expect(kept).toEqual([{ group_key: 'x', timeout_ms: 1234 }]);
    await expect(enqueue(app, { taskType: 'store_discovery', payload: {}, groupKey: '' })).rejects.toMatchObject({
      kind: 'invalid_input',
      message: 'group_key must be 1 to 200 characters',
    });
    await db.query(`select admin.cancel_tasks($1::bigint[])`, [ids]);
  });

  it('dequeueNextAvailableTask returns a task or null', async () => {
    const taskId = await enqueue(app, { taskType: 'analytics_refresh', payload: { file_id: 1 } });
    const task = await dequeueNextAvailableTask(worker, { workerId: 'w-3' });
    expect(task).toMatchObject({ taskId, taskType: 'analytics_refresh', payload: { file_id: 1 } });
    expect(await dequeueNextAvailableTask(worker)).toBeNull();
  });

  it('runFunction returns the function result', async () => {
    expect(await runFunction(worker, 'internal.noop', {})).toEqual({ success: true });
  });

  it('maps database errors to QueueError kinds with the database message', async () => {
    const cases: [() => Promise<unknown>, string, RegExp][] = [
      [() => enqueue(app, { taskType: 'fax', payload: {} }), 'invalid_input', /unknown task_type 'fax'/],
      [
        () => enqueue(app, { taskType: 'product_resync', payload: [1] as unknown as Record<string, unknown> }),
        'invalid_input',
        /got array/,
      ],
      [() => enqueue(app, { taskType: 'product_resync', payload: { s: 'nul\u0000byte' } }), 'invalid_input', /Unicode/],
      [
        () => enqueue(app, { taskType: 'product_resync', payload: { s: 'x'.repeat(1_100_000) } }),
        'too_large',
        /over the limit/,
      ],
      [
        () =>
          enqueueMany(app, [
            { taskType: 'product_resync', payload: {} },
            { taskType: 'nope', payload: {} },
          ]),
        'invalid_input',
        /tasks\[1\]/,
      ],
      [() => claimTasks(worker, { workerId: 'w', limit: 0 }), 'invalid_input', /limit must be between/],
      [() => completeTask(worker, { taskId: '987654321' }), 'not_found', /task 987654321 does not exist/],
      [() => failTask(worker, { taskId: '987654321', errorMessage: 'x' }), 'not_found', /does not exist/],
      [
        () => failTask(worker, { taskId: '1', errorMessage: '   ' }),
        'invalid_input',
        /error_message must not be empty/,
      ],
      [() => runFunction(worker, 'pg_catalog.pg_sleep', {}), 'forbidden', /never runnable/],
      [() => runFunction(worker, 'public.nothing', {}), 'unknown_function', /does not exist/],
      [() => enqueue(worker, { taskType: 'product_resync', payload: {} }), 'forbidden', /permission denied/],
      [
        () => enqueue(app, { taskType: 'db_function', payload: { db_function: 'internal.noop' } }),
        'forbidden',
        /task_type 'db_function' may be enqueued only by the database's own processes/,
      ],
      [() => claimTasks(app, { workerId: 'w' }), 'forbidden', /permission denied/],
    ];
    for (const [call, kind, message] of cases) {
      const error = await call().then(
        () => null,
        (e: unknown) => e,
      );
      expect(error, String(message)).toBeInstanceOf(QueueError);
      expect(error).toMatchObject({ kind, message: expect.stringMatching(message) });
    }
  });

  it('withTransaction commits on success and rolls back on error', async () => {
    const before = (await db.query('select count(*)::int as n from queues.task')).rows[0].n;
    await withTransaction(app, async (tx) => {
      await enqueue(tx, { taskType: 'product_resync', payload: { in: 'committed' } });
    });
    await expect(
      withTransaction(app, async (tx) => {
        await enqueue(tx, { taskType: 'product_resync', payload: { in: 'rolled back' } });
        throw new Error('business rule said no');
      }),
    ).rejects.toThrow('business rule said no');
    const { rows } = await db.query(`select payload->>'in' as p from queues.task order by task_id desc limit 2`);
    expect((await db.query('select count(*)::int as n from queues.task')).rows[0].n).toBe(before + 1);
    expect(rows[0].p).toBe('committed');
  });

  it('reads timestamptz as node-postgres does, in every time zone and form', async () => {
    const standard = pg.types.getTypeParser(1184, 'text') as (text: string) => unknown;
    const time = (v: unknown) => (v instanceof Date ? v.getTime() : v);
    const forms = [
      '2026-11-24 00:51:02.123456+00',
      '2026-11-24 00:51:02+00',
      '2026-11-24 00:51:02.5+05:30',
      '2026-11-24 00:51:02.05-03',
      '1999-12-31 23:59:59.999999+14',
      '2026-01-01 00:00:00+05:30:15',
      'infinity',
      '-infinity',
      '0099-01-01 00:00:00+00',
      '0099-01-01 00:00:00+00 BC',
    ];
    for (const text of forms) expect([text, time(parseTimestamptz(text))]).toEqual([text, time(standard(text))]);
    // What the server sends, in a zone with a minutes offset: the same instants either way.
    const client = await worker.connect();
    try {
      await client.query(`set time zone 'Asia/Kathmandu'`);
      const { rows } = await client.query<{ t: string }>({
        text: `select (timestamptz '2026-03-01 12:00:00.123456+00' + n * interval '37 days 1.000271 seconds')::text as t
                 from generate_series(-400, 400) n`,
      });
      for (const { t } of rows) expect([t, time(parseTimestamptz(t))]).toEqual([t, time(standard(t))]);
    } finally {
      client.release(true);
    }
  });

  it('sends an array parameter as one literal that PostgreSQL reads as the array node-postgres would send', async () => {
    const arrays: { value: unknown[]; type: string; joined: boolean }[] = [
      { value: ['1', '22', 333], type: 'bigint[]', joined: true },
      { value: ['succeeded', 'failed', 'validation_failed'], type: 'text[]', joined: true },
      { value: [true, false, null, undefined], type: 'boolean[]', joined: true },
      { value: [null, '1700000000000000', null], type: 'bigint[]', joined: true },
      { value: [null, 'failed'], type: 'text[]', joined: true },
      { value: [], type: 'text[]', joined: true },
      // Sent as they are: node-postgres quotes them.
      { value: ['null', 'NULL'], type: 'text[]', joined: false },
      { value: ['two words', 'a,b', 'x"y', 'Upper'], type: 'text[]', joined: false },
      { value: [1.5], type: 'numeric[]', joined: false },
      { value: [['1'], ['2']], type: 'bigint[]', joined: false },
    ];
    for (const { value, type, joined } of arrays) {
      const literal = idArrayLiteral(value);
      expect([value, typeof literal === 'string']).toEqual([value, joined]);
      const read = async (v: unknown) => (await worker.query<{ a: unknown }>(`select $1::${type} as a`, [v])).rows[0].a;
      expect([value, await read(literal)]).toEqual([value, await read(value)]);
    }
  });

  it('gives a claimed task the times node-postgres would parse from its rows, as Dates and in its JSON', async () => {
    const standard = pg.types.getTypeParser(1184, 'text') as (text: string) => Date;
    const scheduled = ['2020-02-29 23:59:59.123999+00', '1960-01-01 00:00:00.000999+00', '2026-11-24 10:00:00+05:30'];
    const { rows: enqueued } = await db.query<{ id: string }>(
      'select id::text from queues.enqueue_many($1::jsonb) id',
      [JSON.stringify(scheduled.map((at, n) => ({ task_type: 'product_resync', payload: { n }, scheduled_at: at })))],
    );
    const claimed = await claimTasks(worker, {
      workerId: 'w-times',
      limit: 10,
      taskTypes: ['product_resync'],
      leaseSeconds: 45,
    });
    const mine = claimed.filter((t) => enqueued.some((e) => e.id === t.taskId));
    expect(mine).toHaveLength(3);
    const { rows } = await db.query<Record<string, string>>(
      `select t.task_id::text as "taskId", t.enqueued_at::text as "enqueuedAt", t.scheduled_at::text as "scheduledAt",
              l.leased_at::text as "leasedAt", l.expires_at::text as "expiresAt"
         from queues.task t join queues.task_leases l using (task_id)
        where t.task_id = any ($1::bigint[])`,
      [mine.map((t) => t.taskId)],
    );
    for (const task of mine) {
      const row = rows.find((r) => r.taskId === task.taskId)!;
      for (const key of ['enqueuedAt', 'scheduledAt', 'leasedAt', 'expiresAt'] as const) {
        expect(task[key]).toBeInstanceOf(Date);
        expect([task.taskId, key, task[key].toISOString()]).toEqual([
          task.taskId,
          key,
          standard(row[key]).toISOString(),
        ]);
      }
      expect(task.expiresAt.getTime() - task.leasedAt.getTime()).toBe(45_000);
      // Each read is a Date of its own: changing one does not change the task.
      task.scheduledAt.setTime(0);
      expect(task.scheduledAt.getTime()).not.toBe(0);
      // The times are getters (ClaimedTask's doc): a spread has the other fields only.
      expect(Object.keys({ ...task }).sort()).toEqual([
        'leaseCount',
        'maxAttempts',
        'payload',
        'priority',
        'resourceKey',
        'taskId',
        'taskLeaseId',
        'taskType',
        'timeoutMs',
      ]);
      expect(JSON.parse(JSON.stringify(task))).toEqual({
        taskId: task.taskId,
        taskType: 'product_resync',
        payload: task.payload,
        priority: 0,
        resourceKey: null,
        maxAttempts: 25,
        enqueuedAt: task.enqueuedAt.toISOString(),
        scheduledAt: task.scheduledAt.toISOString(),
        taskLeaseId: task.taskLeaseId,
        leasedAt: task.leasedAt.toISOString(),
        expiresAt: task.expiresAt.toISOString(),
        leaseCount: 1,
        timeoutMs: null,
      });
    }
    await completeTasks(
      worker,
      mine.map((t) => ({ taskId: t.taskId, taskLeaseId: t.taskLeaseId, outcome: 'succeeded' as const })),
    );
  });

  it('enqueue on a pool commits, then wakes workers (enqueue_and_commit); in a transaction, once at its commit', async () => {
    const listener = await db.client('owner');
    let received = 0;
    listener.on('notification', () => received++);
    await listener.query('listen queues_task_ready');
    // A round trip on the listening connection delivers anything already sent to it.
    const count = async () => {
      await listener.query('select 1');
      const n = received;
      received = 0;
      return n;
    };
    try {
      const taskId = await enqueue(app, { taskType: 'product_resync', payload: { via: 'pool' } });
      expect(await count()).toBe(1);
      const { rows } = await db
        .pool('root')
        .query(`select query from pg_stat_activity where application_name = 'client-test-app' and state = 'idle'`);
      expect(rows.map((r) => (r.query as string).trim().split('(')[0])).toContain('call queues.enqueue_and_commit');
      expect((await db.query('select 1 from queues.task where task_id = $1', [taskId])).rowCount).toBe(1);

      await withTransaction(app, async (tx) => {
        for (let i = 0; i < 3; i++) await enqueue(tx, { taskType: 'product_resync', payload: { i } });
        expect(await count()).toBe(0);
      });
      expect(await count()).toBe(1);
    } finally {
      await listener.end();
    }
  });

  it('connect refuses to start without a database URL', () => {
    const saved = process.env.DATABASE_URL;
    delete process.env.DATABASE_URL;
    try {
      expect(() => connect()).toThrow(/no database: pass connectionString or set DATABASE_URL/);
    } finally {
      if (saved !== undefined) process.env.DATABASE_URL = saved;
    }
  });
});
