// Trace context per task (sql/queues/trace.sql): an enqueue records the transaction's
// queue.traceparent / queue.tracestate in queues.task_trace on every enqueue path; without
// one it writes nothing; a malformed one is ignored (the task is enqueued, a NOTICE
// says why); queues.run_steps hands each step's traceparent to what the step enqueues;
// the table is a history table, partitioned with the others.
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const TS = 'vendor=opaque,other=1';

const tracesOf = async (ids: string[]) =>
  (
    await db.query<{ task_id: string; traceparent: string; tracestate: string | null }>(
      `select t.task_id::text, t.traceparent, t.tracestate from queues.task_trace t
        where t.task_id = any($1::bigint[]) order by t.task_id`,
      [ids],
    )
  ).rows;

/** Runs `fn` in a transaction of `client` whose settings are `settings`; rolls back nothing. */
async function inTransaction<T>(
  client: pg.PoolClient | pg.Client,
  settings: Record<string, string>,
  fn: () => Promise<T>,
): Promise<T> {
  await client.query('begin');
  try {
    for (const [name, value] of Object.entries(settings))
      await client.query('select set_config($1, $2, true)', [name, value]);
    const result = await fn();
    await client.query('commit');
    return result;
  } catch (error) {
    await client.query('rollback');
    throw error;
  }
}

describe('queues.task_trace', () => {
  it('an enqueue without a trace context writes no row', async () => {
    const app = db.pool('app');
    const one = (await app.query(`select queues.enqueue('product_resync', '{"t": "none"}') as id`)).rows[0].id;
    const many = (
      await app.query(`select task_id from queues.enqueue_many($1::jsonb)`, [
        JSON.stringify([{ task_type: 'product_resync', payload: { t: 'none-1' } }]),
      ])
    ).rows.map((r) => r.task_id);
    const unique = (await app.query(`select task_id from queues.enqueue_unique('product_resync', '{}', 'trace-none')`))
      .rows[0].task_id;
    const called = (await app.query(`call queues.enqueue_and_commit('product_resync', '{"t": "none-call"}')`)).rows[0]
      ._task_id;
    expect(await tracesOf([one, ...many, unique, called])).toEqual([]);
  });

  it('every enqueue path records the transaction trace context, tracestate included', async () => {
    const client = await db.pool('app').connect();
    try {
      const ids = await inTransaction(client, { 'queue.traceparent': TP, 'queue.tracestate': TS }, async () => {
        const one = (await client.query(`select queues.enqueue('product_resync', '{"t": 1}') as id`)).rows[0].id;
        const batch = (
          await client.query(`select task_id from queues.enqueue_many($1::jsonb)`, [
            JSON.stringify([
              { task_type: 'product_resync', payload: { t: 2 } },
              { task_type: 'store_discovery', payload: { t: 3 } },
            ]),
          ])
        ).rows.map((r) => r.task_id as string);
        // A batch with a unique key goes element by element (queues.enqueue_tasks_one_by_one).
        const oneByOne = (
          await client.query(`select task_id from queues.enqueue_many($1::jsonb)`, [
            JSON.stringify([
              { task_type: 'product_resync', payload: { t: 4 }, unique_key: 'trace-batch' },
              { task_type: 'product_resync', payload: { t: 5 } },
            ]),
          ])
        ).rows.map((r) => r.task_id as string);
        const unique = (
          await client.query(`select task_id, outcome from queues.enqueue_unique('product_resync', '{}', 'trace-u')`)
        ).rows[0];
        expect(unique.outcome).toBe('inserted');
        return [one, ...batch, ...oneByOne, unique.task_id];
      });
      expect(ids).toHaveLength(6);
      expect(await tracesOf(ids)).toEqual(
        [...ids].sort((a, b) => Number(a) - Number(b)).map((id) => ({ task_id: id, traceparent: TP, tracestate: TS })),
      );
    } finally {
      client.release();
    }
  });

  it("the owner's SQL (a kickoff, a supervisor) records it through queues.enqueue_internal", async () => {
    const owner = await db.pool('owner').connect();
    try {
      const id = await inTransaction(owner, { 'queue.traceparent': TP }, async () =>
        String((await owner.query(`select queues.enqueue_internal('email', '{}') as id`)).rows[0].id),
      );
      expect(await tracesOf([id])).toEqual([{ task_id: id, traceparent: TP, tracestate: null }]);
    } finally {
      owner.release();
    }
  });

  it('a skipped unique enqueue writes nothing: the pending task keeps its own context', async () => {
    const client = await db.pool('app').connect();
    try {
      const first = await inTransaction(client, {}, async () =>
        String(
          (await client.query(`select task_id from queues.enqueue_unique('product_resync', '{}', 'trace-skip')`))
            .rows[0].task_id,
        ),
      );
      const second = await inTransaction(
        client,
        { 'queue.traceparent': TP },
        async () =>
          (
            await client.query(
              `select task_id, outcome from queues.enqueue_unique('product_resync', '{}', 'trace-skip')`,
            )
          ).rows[0],
      );
      expect(second).toEqual({ task_id: first, outcome: 'skipped' });
      expect(await tracesOf([first])).toEqual([]);
    } finally {
      client.release();
    }
  });

  it('a malformed traceparent is ignored with a NOTICE: the task is enqueued without one', async () => {
    const malformed = [
      'not a traceparent',
      TP.toUpperCase(), // hex must be lowercase
      'ff' + TP.slice(2), // version ff is invalid
      `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`, // all-zero trace id
      `00-4bf92f3577b34da6a3ce929d0e0e4736-${'0'.repeat(16)}-01`, // all-zero parent id
      `${TP}-more`, // version 00 has exactly four fields
      TP.slice(0, 54), // too short
      `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'); drop table queues.task; --`,
    ];
    const client = await db.client('app');
    const notices: string[] = [];
    client.on('notice', (n) => notices.push(n.message ?? ''));
    const ids: string[] = [];
    for (const value of malformed) {
      const id = await inTransaction(client, { 'queue.traceparent': value }, async () =>
        String((await client.query(`select queues.enqueue('product_resync', '{"t": "bad"}') as id`)).rows[0].id),
      );
      ids.push(id);
    }
    await client.end();
    expect(ids).toHaveLength(malformed.length);
    expect(
      (await db.query('select count(*)::int as n from queues.task where task_id = any($1::bigint[])', [ids])).rows[0].n,
    ).toBe(malformed.length);
    expect(await tracesOf(ids)).toEqual([]);
    expect(notices).toHaveLength(malformed.length);
    for (const n of notices) expect(n).toMatch(/queue\.traceparent is not a W3C traceparent/);
  });

  it('a later version is kept as its first 55 characters; a malformed tracestate alone is dropped', async () => {
    const client = await db.client('app');
    const notices: string[] = [];
    client.on('notice', (n) => notices.push(n.message ?? ''));
    const later = await inTransaction(client, { 'queue.traceparent': `01${TP.slice(2)}-future-field` }, async () =>
      String((await client.query(`select queues.enqueue('product_resync', '{}') as id`)).rows[0].id),
    );
    const badState = await inTransaction(
      client,
      { 'queue.traceparent': TP, 'queue.tracestate': 'x='.padEnd(600, 'y') },
      async () => String((await client.query(`select queues.enqueue('product_resync', '{}') as id`)).rows[0].id),
    );
    await client.end();
    expect(await tracesOf([later, badState])).toEqual([
      { task_id: later, traceparent: `01${TP.slice(2)}`, tracestate: null },
      { task_id: badState, traceparent: TP, tracestate: null },
    ]);
    expect(notices).toEqual([expect.stringMatching(/queue\.tracestate is not a W3C tracestate/)]);
  });

  it('the worker reads a claim’s contexts in one call (queues.task_traces); apps may not', async () => {
    const client = await db.pool('app').connect();
    let traced: string;
    try {
      traced = await inTransaction(client, { 'queue.traceparent': TP }, async () =>
        String((await client.query(`select queues.enqueue('product_resync', '{}') as id`)).rows[0].id),
      );
    } finally {
      client.release();
    }
    const plain = String(
      (await db.pool('app').query(`select queues.enqueue('product_resync', '{}') as id`)).rows[0].id,
    );
    const { rows } = await db
      .pool('worker')
      .query('select task_id::text, traceparent, tracestate from queues.task_traces($1::bigint[])', [[traced, plain]]);
    expect(rows).toEqual([{ task_id: traced, traceparent: TP, tracestate: null }]);
    await expect(
      db.pool('app').query('select * from queues.task_traces($1::bigint[])', [[traced]]),
    ).rejects.toMatchObject({ code: '42501' });
  });
});

describe('queues.run_steps with traceparents', () => {
  beforeAll(async () => {
    const worker = db.dbUsers.worker;
    await db.query(`
      create schema trace_fixture;
      -- A supervisor-like step: enqueues a child task (the owner's SQL).
      create function trace_fixture.spawn(payload jsonb) returns jsonb
        language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
      begin
        perform queues.enqueue_internal('product_resync', jsonb_build_object('child_of', payload->>'key'));
        return '{"success": true}'::jsonb;
      end $$;
      revoke execute on all functions in schema trace_fixture from public;
      grant usage on schema trace_fixture to ${worker};
      grant execute on all functions in schema trace_fixture to ${worker};
      select internal.register_runnable_function('trace_fixture.spawn(jsonb)');
    `);
  });

  async function claimSteps(keys: string[]) {
    for (const key of keys)
      await db.query(
        `select queues.enqueue_internal('db_function', jsonb_build_object('db_function', 'trace_fixture.spawn', 'key', $1::text))`,
        [key],
      );
    const { rows } = await db
      .pool('worker')
      .query(`select task_id, task_lease_id, payload from queues.claim_tasks('trace-test', $1, array['db_function'])`, [
        keys.length,
      ]);
    // In the order of the keys.
    return keys.map((k) => rows.find((r) => r.payload.key === k)!);
  }

  const childTrace = async (key: string) =>
    (
      await db.query(
        `select t.traceparent from queues.task c left join queues.task_trace t using (task_id)
          where c.task_type = 'product_resync' and c.payload->>'child_of' = $1`,
        [key],
      )
    ).rows;

  it("each step's traceparent is the context of what it enqueues; an empty one and a null array give none", async () => {
    const stepTp = (n: number) => `00-4bf92f3577b34da6a3ce929d0e0e4736-${String(n).padStart(16, 'a')}-01`;
    const steps = await claimSteps(['s1', 's2', 's3']);
    const worker = await db.pool('worker').connect();
    try {
      const { rows } = await worker.query(`select task_id, result from queues.run_steps($1, $2, $3, $4, $5)`, [
        steps.map((s) => s.task_id),
        steps.map((s) => s.task_lease_id),
        steps.map(() => 'trace_fixture.spawn'),
        steps.map((s) => JSON.stringify(s.payload)),
        [stepTp(1), '', stepTp(3)],
      ]);
      expect(rows.map((r) => r.result)).toEqual(['completed', 'completed', 'completed']);
      // Cleared after the steps (in a transaction of the caller's, nothing leaks past the call).
      await worker.query('begin');
      await worker.query(`select set_config('queue.traceparent', $1, true)`, [stepTp(9)]);
      const [again] = await claimSteps(['s4']);
      await worker.query(`select * from queues.run_steps($1, $2, $3, $4, $5)`, [
        [again.task_id],
        [again.task_lease_id],
        ['trace_fixture.spawn'],
        [JSON.stringify(again.payload)],
        [stepTp(4)],
      ]);
      expect((await worker.query(`select current_setting('queue.traceparent', true) as tp`)).rows[0].tp).toBe('');
      await worker.query('commit');
      // Without traceparents (the worker traces nothing): no setting, no context.
      const [plain] = await claimSteps(['s5']);
      await worker.query(`select * from queues.run_steps($1, $2, $3, $4)`, [
        [plain.task_id],
        [plain.task_lease_id],
        ['trace_fixture.spawn'],
        [JSON.stringify(plain.payload)],
      ]);
    } finally {
      worker.release();
    }
    expect(await childTrace('s1')).toEqual([{ traceparent: stepTp(1) }]);
    expect(await childTrace('s2')).toEqual([{ traceparent: null }]);
    expect(await childTrace('s3')).toEqual([{ traceparent: stepTp(3) }]);
    expect(await childTrace('s4')).toEqual([{ traceparent: stepTp(4) }]);
    expect(await childTrace('s5')).toEqual([{ traceparent: null }]);
  });

  it('refuses traceparents of another length than the steps', async () => {
    await expect(
      db.pool('worker').query(`select * from queues.run_steps('{1}', '{1}', '{f}', '{"{}"}', '{}')`),
    ).rejects.toMatchObject({
      code: '22023',
      message: expect.stringMatching(/traceparents must have one element per task/),
    });
  });
});

describe('a history table', () => {
  it('has a partition in every set, and maintenance makes it in new sets', async () => {
    const count = async () =>
      (
        await db.query(`
          select (select count(*)::int from queues.history_sets() s where not s.is_default) as sets,
                 (select count(*)::int from queues.history_partition_bounds() b where b.table_name = 'task_trace') as traces`)
      ).rows[0];
    const before = await count();
    expect(before.traces).toBe(before.sets);
    expect(before.sets).toBeGreaterThan(0);
    // Sets ahead of need made by maintenance (a smaller set size makes it want more).
    await db.query(`update queues.history_setting set partition_size = 2000000, partitions_ahead = 3`);
    await db.query(`select queues.maintain_history_at(now())`);
    const after = await count();
    expect(after.sets).toBeGreaterThan(before.sets);
    expect(after.traces).toBe(after.sets);
  });
});
