// Unique tasks (sql/queues/unique.sql) with a run timeout, a group key and dependencies:
// what each policy does with them, bad ones refused before anything is written (even when
// the policy would skip), a replacement refused while other tasks wait for the pending
// task, 16 racing enqueuers of one key, and batches.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
let racers: pg.Client[] = [];
beforeAll(async () => {
  db = await createTestDatabase();
  racers = await Promise.all(Array.from({ length: 16 }, () => db.client('app')));
});
afterAll(async () => {
  await Promise.all(racers.map((c) => c.end()));
  await db?.drop();
});

interface Answer {
  task_id: string;
  outcome: string;
  replaced_task_id: string | null;
}

interface Options {
  policy?: string | null;
  period?: string | null;
  dependsOn?: string[] | null;
  groupKey?: string | null;
  timeoutMs?: number | null;
  payload?: Record<string, unknown>;
}

const enqueueUnique = async (key: string, o: Options = {}, client: pg.Pool | pg.Client = db.pool('app')) =>
  (
    await client.query<Answer>(
      `select * from queues.enqueue_unique('product_resync', $1::jsonb, $2, $3, $4::interval,
                                           _depends_on => $5::bigint[], _group_key => $6, _timeout_ms => $7)`,
      [
        JSON.stringify(o.payload ?? {}),
        key,
        o.policy ?? null,
        o.period ?? null,
        o.dependsOn ?? null,
        o.groupKey ?? null,
        o.timeoutMs ?? null,
      ],
    )
  ).rows[0];

const plain = async () =>
  (await db.query<{ id: string }>(`select queues.enqueue('product_resync', '{}') as id`)).rows[0].id;

/** The pending task of a key: its own options, and whether it waits for dependencies. */
const pendingOf = async (key: string) =>
  (
    await db.query<{
      task_id: string;
      timeout_ms: number | null;
      group_key: string | null;
      waiting: boolean;
      deps: string[];
    }>(
      `select t.task_id, t.timeout_ms, p.group_key, p.available_at = 'infinity' as waiting,
              coalesce((select array_agg(d.depends_on_task_id::text order by d.depends_on_task_id)
                          from queues.task_dependency d where d.task_id = t.task_id), '{}') as deps
         from queues.task t join queues.task_pending p using (task_id) join queues.task_unique u using (task_id)
        where u.unique_key = $1 order by t.task_id`,
      [key],
    )
  ).rows;

const counts = async () =>
  (
    await db.query(
      `select (select count(*) from queues.task)::int as tasks,
              (select count(*) from queues.task_pending)::int as pending,
              (select count(*) from queues.task_dependency)::int as edges,
              (select count(*) from queues.task_unique_key)::int as keys,
              (select count(*) from queues.task_end)::int as completed`,
    )
  ).rows[0];

const refusal = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (e: { code?: string; message: string }) => ({ code: e.code, message: e.message }),
  );

describe('each policy with a timeout, a group key and dependencies', () => {
  it('inserts the task with all three, whatever the policy', async () => {
    for (const [policy, period] of [
      ['skip', null],
      ['replace', null],
      ['debounce', '1 minute'],
    ] as const) {
      const dep = await plain();
      const key = `opts:new:${policy}`;
      expect(
        (await enqueueUnique(key, { policy, period, dependsOn: [dep], groupKey: 'g1', timeoutMs: 5000 })).outcome,
      ).toBe('inserted');
      expect(await pendingOf(key)).toEqual([
        { task_id: expect.any(String), timeout_ms: 5000, group_key: 'g1', waiting: true, deps: [dep] },
      ]);
    }
  });

  it('skip keeps the pending task as it is', async () => {
    const dep = await plain();
    const first = await enqueueUnique('opts:skip', { groupKey: 'g1', timeoutMs: 1000 });
    const before = await counts();
    const again = await enqueueUnique('opts:skip', { dependsOn: [dep], groupKey: 'g2', timeoutMs: 2000 });
    expect(again).toEqual({ task_id: first.task_id, outcome: 'skipped', replaced_task_id: null });
    expect(await counts()).toEqual(before);
    expect(await pendingOf('opts:skip')).toEqual([
      { task_id: first.task_id, timeout_ms: 1000, group_key: 'g1', waiting: false, deps: [] },
    ]);
  });

  it('replace and debounce give the new task exactly what is given, nothing carried over', async () => {
    for (const [policy, period] of [
      ['replace', null],
      ['debounce', '1 minute'],
    ] as const) {
      const key = `opts:replace:${policy}`;
      const dep = await plain();
      const first = await enqueueUnique(key, { policy, period, dependsOn: [dep], groupKey: 'g1', timeoutMs: 1000 });
      const second = await enqueueUnique(key, { policy, period, groupKey: 'g2' });
      expect(second).toMatchObject({ outcome: 'replaced', replaced_task_id: first.task_id });
      expect(await pendingOf(key)).toEqual([
        { task_id: second.task_id, timeout_ms: null, group_key: 'g2', waiting: false, deps: [] },
      ]);
      const dep2 = await plain();
      const third = await enqueueUnique(key, { policy, period, dependsOn: [dep, dep2], timeoutMs: 3000 });
      expect(third).toMatchObject({ outcome: 'replaced', replaced_task_id: second.task_id });
      expect(await pendingOf(key)).toEqual([
        { task_id: third.task_id, timeout_ms: 3000, group_key: null, waiting: true, deps: [dep, dep2] },
      ]);
      // The replaced task that waited ended cancelled (its dependencies are untouched).
      const { rows } = await db.query(`select outcome from queues.task_end where task_id = $1`, [first.task_id]);
      expect(rows).toEqual([{ outcome: 'cancelled' }]);
    }
  });

  it('a dependency that already failed fails the new task at once, as a plain enqueue does', async () => {
    const dep = await plain();
    await db.query(`select * from admin.cancel_tasks(array[$1::bigint], 'gone')`, [dep]);
    const answer = await enqueueUnique('opts:failed-dep', { policy: 'replace', dependsOn: [dep] });
    const { rows } = await db.query(
      `select c.outcome, e.error_message from queues.task_end c join queues.error e using (task_id) where c.task_id = $1`,
      [answer.task_id],
    );
    expect(rows).toEqual([{ outcome: 'failed', error_message: `dependency task ${dep} ended cancelled` }]);
  });
});

describe('refused, nothing written', () => {
  it('bad options are refused even when the policy would skip', async () => {
    await enqueueUnique('opts:bad');
    const before = await counts();
    const cases: [Options, string, RegExp][] = [
      [{ dependsOn: ['999999999'] }, '23503', /depends_on names task 999999999, which does not exist/],
      [{ dependsOn: [null as unknown as string] }, '22004', /depends_on must not contain null/],
      [{ groupKey: '' }, '22023', /group_key must be 1 to 200 characters/],
      [{ timeoutMs: 0 }, '22023', /timeout_ms must be between 1 and 86400000/],
    ];
    for (const policy of ['skip', 'replace']) {
      for (const [options, code, message] of cases) {
        const error = await refusal(enqueueUnique('opts:bad', { ...options, policy }));
        expect(error?.code, JSON.stringify(options)).toBe(code);
        expect(error?.message).toMatch(message);
      }
    }
    expect(await counts()).toEqual(before);
  });

  it('a replacement cannot depend on the task it replaces', async () => {
    const first = await enqueueUnique('opts:self', { policy: 'replace' });
    const before = await counts();
    const error = await refusal(enqueueUnique('opts:self', { policy: 'replace', dependsOn: [first.task_id] }));
    expect(error).toEqual({
      code: '22023',
      message: `depends_on names task ${first.task_id}, which this enqueue replaces (unique key 'opts:self')`,
    });
    expect(await counts()).toEqual(before);
  });

  it('a new task of the key may depend on the running one it does not replace', async () => {
    const running = await enqueueUnique('opts:running', { policy: 'replace' });
    const claimed = (
      await db.query<{ task_id: string }>(
        `select task_id::text from queues.claim_tasks_at(now() + interval '1 second', 'w-opts', 1000, array['product_resync'], 60, 5)
          where task_id = $1`,
        [running.task_id],
      )
    ).rows;
    expect(claimed).toEqual([{ task_id: running.task_id }]);
    const next = await enqueueUnique('opts:running', { policy: 'replace', dependsOn: [running.task_id] });
    expect(next).toMatchObject({ outcome: 'inserted', replaced_task_id: null });
    expect(next.task_id).not.toBe(running.task_id);
    // It waits for the running task to end.
    expect(
      (
        await db.query(`select available_at = 'infinity' as waits from queues.task_pending where task_id = $1`, [
          next.task_id,
        ])
      ).rows[0].waits,
    ).toBe(true);
  });

  it('a pending task that others wait for is not replaced (55000); skip still answers it', async () => {
    const first = await enqueueUnique('opts:awaited', { policy: 'replace' });
    const dependent = (
      await db.query<{ id: string }>(
        `select queues.enqueue('product_resync', '{}', _depends_on => array[$1::bigint]) as id`,
        [first.task_id],
      )
    ).rows[0].id;
    const before = await counts();
    for (const [policy, period] of [
      ['replace', null],
      ['debounce', '1 minute'],
    ] as const) {
      const error = await refusal(enqueueUnique('opts:awaited', { policy, period }));
      expect(error).toEqual({
        code: '55000',
        message: `task ${first.task_id} cannot be replaced: task ${dependent} waits for it`,
      });
    }
    expect(await counts()).toEqual(before);
    expect((await enqueueUnique('opts:awaited', { policy: 'skip' })).task_id).toBe(first.task_id);
    // Once the dependent is gone, the task is replaced as any other.
    await db.query(`select * from admin.cancel_tasks(array[$1::bigint], 'not needed')`, [dependent]);
    expect(await enqueueUnique('opts:awaited', { policy: 'replace' })).toMatchObject({
      outcome: 'replaced',
      replaced_task_id: first.task_id,
    });
  });
});

describe('racing enqueuers of one key with options', () => {
  it('16 at once leave one pending task, with the options of the last one', async () => {
    const deps = await Promise.all([plain(), plain()]);
    for (let round = 0; round < 10; round++) {
      for (const [policy, period] of [
        ['skip', null],
        ['replace', null],
        ['debounce', '1 minute'],
      ] as const) {
        const key = `opts:race:${policy}:${round}`;
        const answers = await Promise.all(
          racers.map((c, i) =>
            enqueueUnique(
              key,
              { policy, period, dependsOn: [deps[i % 2]], groupKey: `g${i}`, timeoutMs: 1000 + i, payload: { i } },
              c,
            ),
          ),
        );
        const pending = await pendingOf(key);
        expect(pending).toHaveLength(1);
        const winner = answers.find((a) => a.task_id === pending[0].task_id && a.outcome !== 'skipped');
        expect(winner?.outcome).toMatch(/inserted|replaced/);
        const i = answers.indexOf(winner!);
        expect(pending[0]).toMatchObject({
          timeout_ms: 1000 + i,
          group_key: `g${i}`,
          waiting: true,
          deps: [deps[i % 2]],
        });
      }
    }
  });
});

describe('enqueue_many with unique keys and options', () => {
  it('takes depends_on, group_key and timeout_ms on a unique element; refuses a dependency on the same batch', async () => {
    const dep = await plain();
    const { rows } = await db
      .pool('app')
      .query<{ task_id: string }>(`select task_id from queues.enqueue_many($1::jsonb)`, [
        JSON.stringify([
          {
            task_type: 'product_resync',
            payload: {},
            unique_key: 'opts:batch',
            depends_on: [dep],
            group_key: 'g',
            timeout_ms: 700,
          },
          { task_type: 'product_resync', payload: {}, depends_on: [dep], group_key: 'h' },
        ]),
      ]);
    expect(rows).toHaveLength(2);
    expect(await pendingOf('opts:batch')).toEqual([
      { task_id: rows[0].task_id, timeout_ms: 700, group_key: 'g', waiting: true, deps: [dep] },
    ]);
    const before = await counts();
    const error = await refusal(
      db.pool('app').query(`select task_id from queues.enqueue_many($1::jsonb)`, [
        JSON.stringify([
          { task_type: 'product_resync', payload: {}, unique_key: 'opts:batch2' },
          { task_type: 'product_resync', payload: {}, unique_key: 'opts:batch3', depends_on: [rows[0].task_id] },
          { task_type: 'product_resync', payload: {}, unique_key: 'opts:batch4', depends_on: ['x'] },
        ]),
      ]),
    );
    expect(error).toEqual({ code: '22023', message: 'tasks[2]: depends_on must be an array of task ids' });
    expect(await counts()).toEqual(before);
  });
});
