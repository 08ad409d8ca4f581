// Unique tasks (sql/queues/unique.sql): skip, replace and debounce; racing enqueuers of
// one key on 16 connections of their own; batches; bad input that writes nothing; the
// derived key table's rebuild and pruning.
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

const enqueueUnique = async (
  key: string | null,
  policy: string | null,
  payload: Record<string, unknown> = {},
  period: string | null = null,
  client: pg.Pool | pg.Client = db.pool('app'),
): Promise<Answer> =>
  (
    await client.query<Answer>(
      `select * from queues.enqueue_unique('product_resync', $1::jsonb, $2, $3, $4::interval)`,
      [JSON.stringify(payload), key, policy, period],
    )
  ).rows[0];

const pendingOf = async (key: string) =>
  (
    await db.query<{ task_id: string; payload: Record<string, unknown>; due_in: number }>(
      `select t.task_id, t.payload, extract(epoch from p.scheduled_at - now())::float8 as due_in
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
              (select count(*) from queues.task_unique_key)::int as keys,
              (select count(*) from queues.task_end)::int as completed`,
    )
  ).rows[0];

/** Claims the task (as a worker would, due now or not) with a live lease. */
const lease = async (taskId: string) =>
  db.query(
    `select * from queues.claim_tasks_at(greatest(now(), (select scheduled_at from queues.task_pending where task_id = $1)),
                                          'w', 1000, array['product_resync'], 300, 5) where task_id = $1`,
    [taskId],
  );

describe('skip', () => {
  it('answers the pending task and writes nothing; a key is free again once its task completed', async () => {
    const first = await enqueueUnique('skip:1', 'skip', { v: 1 });
    expect(first).toMatchObject({ outcome: 'inserted', replaced_task_id: null });
    const before = await counts();
    const second = await enqueueUnique('skip:1', null, { v: 2 });
    expect(second).toEqual({ task_id: first.task_id, outcome: 'skipped', replaced_task_id: null });
    expect(await counts()).toEqual(before);
    expect((await pendingOf('skip:1')).map((t) => t.payload)).toEqual([{ v: 1 }]);

    // Running counts as pending: still skipped.
    expect((await lease(first.task_id)).rows).toHaveLength(1);
    expect((await enqueueUnique('skip:1', 'skip', { v: 3 })).outcome).toBe('skipped');

    await db.query(`select queues.complete_task($1, null, 'succeeded')`, [first.task_id]);
    const third = await enqueueUnique('skip:1', 'skip', { v: 4 });
    expect(third.outcome).toBe('inserted');
    expect(third.task_id).not.toBe(first.task_id);
  });

  it('keys are independent of each other and of tasks without a key', async () => {
    const a = await enqueueUnique('skip:a', 'skip');
    const b = await enqueueUnique('skip:b', 'skip');
    expect([a.outcome, b.outcome]).toEqual(['inserted', 'inserted']);
    await db.pool('app').query(`select queues.enqueue('product_resync', '{}')`);
    expect((await enqueueUnique('skip:a', 'skip')).task_id).toBe(a.task_id);
  });
});

describe('replace', () => {
  it('replaces a pending task no worker holds: the old one ends cancelled, naming its successor', async () => {
    const first = await enqueueUnique('replace:1', 'replace', { v: 1 });
    const second = await enqueueUnique('replace:1', 'replace', { v: 2 });
    expect(second).toEqual({ task_id: expect.any(String), outcome: 'replaced', replaced_task_id: first.task_id });
    expect((await pendingOf('replace:1')).map((t) => t.payload)).toEqual([{ v: 2 }]);
    const { rows } = await db.query(
      `select c.outcome, x.reason from queues.task_end c join queues.task_cancelled x using (task_id)
        where c.task_id = $1`,
      [first.task_id],
    );
    expect(rows).toEqual([
      { outcome: 'cancelled', reason: `replaced by task ${second.task_id} (unique key 'replace:1')` },
    ]);
  });

  it('a running task runs on: a new task is enqueued after it and takes the key', async () => {
    const first = await enqueueUnique('replace:2', 'replace', { v: 1 });
    expect((await lease(first.task_id)).rows).toHaveLength(1);
    const second = await enqueueUnique('replace:2', 'replace', { v: 2 });
    expect(second).toMatchObject({ outcome: 'inserted', replaced_task_id: null });
    expect((await pendingOf('replace:2')).map((t) => t.task_id)).toEqual([first.task_id, second.task_id]);
    // The next enqueue replaces the new one, not the running one.
    const third = await enqueueUnique('replace:2', 'replace', { v: 3 });
    expect(third).toMatchObject({ outcome: 'replaced', replaced_task_id: second.task_id });
    expect((await pendingOf('replace:2')).map((t) => t.task_id)).toEqual([first.task_id, third.task_id]);
  });

  it('a task whose lease expired is replaced', async () => {
    const first = await enqueueUnique('replace:3', 'replace', { v: 1 });
    await db.query(
      `select * from queues.claim_tasks_at(now() - interval '1 hour', 'w', 1000, array['product_resync'], 1, 5)`,
    );
    const second = await enqueueUnique('replace:3', 'replace', { v: 2 });
    expect(second).toMatchObject({ outcome: 'replaced', replaced_task_id: first.task_id });
  });
});

describe('debounce', () => {
  it('schedules one period ahead, and a later enqueue moves the task and replaces its payload', async () => {
    const first = await enqueueUnique('debounce:1', 'debounce', { v: 1 }, '10 minutes');
    expect(first.outcome).toBe('inserted');
    const [a] = await pendingOf('debounce:1');
    expect(a.due_in).toBeGreaterThan(590);
    expect(a.due_in).toBeLessThanOrEqual(600);

    const second = await enqueueUnique('debounce:1', 'debounce', { v: 2 }, '1 hour');
    expect(second).toMatchObject({ outcome: 'replaced', replaced_task_id: first.task_id });
    const pending = await pendingOf('debounce:1');
    expect(pending.map((t) => t.payload)).toEqual([{ v: 2 }]);
    expect(pending[0].due_in).toBeGreaterThan(3590);
  });

  it('counts the period from scheduled_at when one is given', async () => {
    const { rows } = await db
      .pool('app')
      .query(
        `select task_id from queues.enqueue_unique('product_resync', '{}', 'debounce:2', 'debounce', '5 minutes', '2030-01-01T00:00:00Z')`,
      );
    const { rows: due } = await db.query(
      `select scheduled_at = '2030-01-01T00:05:00Z'::timestamptz as ok from queues.task where task_id = $1`,
      [rows[0].task_id],
    );
    expect(due).toEqual([{ ok: true }]);
  });
});

describe('racing enqueuers of one key', () => {
  const ROUNDS = 25;

  // Every racer sends its enqueue at once, each on a connection of its own.
  const race = (key: string, policy: string, period: string | null = null) =>
    Promise.all(racers.map((c, i) => enqueueUnique(key, policy, { racer: i }, period, c)));

  it('skip: 16 at once leave one task, and all of them answer it', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const key = `race:skip:${round}`;
      const answers = await race(key, 'skip');
      const { rows } = await db.query(`select task_id from queues.task_unique where unique_key = $1`, [key]);
      expect(rows).toHaveLength(1);
      expect(new Set(answers.map((a) => a.task_id))).toEqual(new Set([rows[0].task_id]));
      expect(answers.filter((a) => a.outcome === 'inserted')).toHaveLength(1);
      expect(answers.filter((a) => a.outcome === 'skipped')).toHaveLength(15);
    }
  });

  it('replace and debounce: 16 at once leave one pending task; every other one was replaced', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      for (const [policy, period] of [
        ['replace', null],
        ['debounce', '1 minute'],
      ] as const) {
        const key = `race:${policy}:${round}`;
        const answers = await race(key, policy, period);
        const pending = await pendingOf(key);
        expect(pending).toHaveLength(1);
        expect(answers.filter((a) => a.outcome === 'inserted')).toHaveLength(1);
        expect(answers.filter((a) => a.outcome === 'replaced')).toHaveLength(15);
        // The pending task is the one no later enqueue replaced.
        const replaced = new Set(answers.map((a) => a.replaced_task_id));
        expect(answers.map((a) => a.task_id).filter((id) => !replaced.has(id))).toEqual([pending[0].task_id]);
        const { rows } = await db.query(
          `select count(*)::int as n from queues.task_unique u join queues.task_end c using (task_id)
            where u.unique_key = $1 and c.outcome = 'cancelled'`,
          [key],
        );
        expect(rows[0].n).toBe(15);
      }
    }
  });
});

describe('enqueue_many with unique keys', () => {
  it('goes in input order: a key met twice in one batch answers its first task', async () => {
    const tasks = [
      { task_type: 'product_resync', payload: { i: 0 }, unique_key: 'many:1' },
      { task_type: 'product_resync', payload: { i: 1 } },
      { task_type: 'product_resync', payload: { i: 2 }, unique_key: 'many:1', unique_policy: 'skip' },
      {
        task_type: 'product_resync',
        payload: { i: 3 },
        unique_key: 'many:2',
        unique_policy: 'debounce',
        unique_period: '1 minute',
      },
      {
        task_type: 'product_resync',
        payload: { i: 4 },
        unique_key: 'many:2',
        unique_policy: 'debounce',
        unique_period: '1 minute',
      },
    ];
    const { rows } = await db
      .pool('app')
      .query('select task_id from queues.enqueue_many($1::jsonb)', [JSON.stringify(tasks)]);
    const ids = rows.map((r) => r.task_id);
    expect(ids).toHaveLength(5);
    expect(ids[2]).toBe(ids[0]);
    expect(new Set(ids).size).toBe(4);
    expect((await pendingOf('many:1')).map((t) => t.payload)).toEqual([{ i: 0 }]);
    expect((await pendingOf('many:2')).map((t) => t.payload)).toEqual([{ i: 4 }]);
  });

  it('a bad element is named and nothing of the batch is written', async () => {
    const before = await counts();
    const bad = [
      { task_type: 'product_resync', payload: {}, unique_key: 'many:bad:1' },
      { task_type: 'product_resync', payload: {}, unique_key: 'many:bad:2', unique_policy: 'sometimes' },
    ];
    await expect(
      db.pool('app').query('select task_id from queues.enqueue_many($1::jsonb)', [JSON.stringify(bad)]),
    ).rejects.toMatchObject({ code: '22023', message: expect.stringMatching(/^tasks\[1\]: unique_policy must be/) });
    const orphan = [{ task_type: 'product_resync', payload: {}, unique_policy: 'skip' }];
    await expect(
      db.pool('app').query('select task_id from queues.enqueue_many($1::jsonb)', [JSON.stringify(orphan)]),
    ).rejects.toMatchObject({
      code: '22004',
      message: expect.stringMatching(/^tasks\[0\]: unique_key must not be null/),
    });
    const internal = [{ task_type: 'db_function', payload: {}, unique_key: 'many:bad:3' }];
    await expect(
      db.pool('app').query('select task_id from queues.enqueue_many($1::jsonb)', [JSON.stringify(internal)]),
    ).rejects.toMatchObject({ code: '42501' });
    expect(await counts()).toEqual(before);
  });
});

describe('bad input', () => {
  const cases: [string, string, unknown[], string, RegExp][] = [
    [
      'a null key',
      `select * from queues.enqueue_unique('product_resync', '{}', null)`,
      [],
      '22004',
      /unique_key must not be null/,
    ],
    [
      'an empty key',
      `select * from queues.enqueue_unique('product_resync', '{}', '')`,
      [],
      '22023',
      /unique_key must be 1 to 200/,
    ],
    [
      'a long key',
      `select * from queues.enqueue_unique('product_resync', '{}', repeat('k', 201))`,
      [],
      '22023',
      /unique_key must be 1 to 200/,
    ],
    [
      'an unknown policy',
      `select * from queues.enqueue_unique('product_resync', '{}', 'k', 'sometimes')`,
      [],
      '22023',
      /unique_policy must be 'skip', 'replace' or 'debounce', got 'sometimes'/,
    ],
    [
      'a negative period',
      `select * from queues.enqueue_unique('product_resync', '{}', 'k', 'debounce', '-1 second')`,
      [],
      '22023',
      /unique_period must be a finite, non-negative interval/,
    ],
    [
      'debounce without a period',
      `select * from queues.enqueue_unique('product_resync', '{}', 'k', 'debounce')`,
      [],
      '22004',
      /unique_period must not be null/,
    ],
    [
      'a period with skip',
      `select * from queues.enqueue_unique('product_resync', '{}', 'k', 'skip', '1 second')`,
      [],
      '22023',
      /unique_period applies only to the debounce policy/,
    ],
    [
      'an unknown task type',
      `select * from queues.enqueue_unique('no_such_type', '{}', 'k')`,
      [],
      '22023',
      /unknown task_type 'no_such_type'/,
    ],
    [
      'an internal task type',
      `select * from queues.enqueue_unique('db_function', '{}', 'k')`,
      [],
      '42501',
      /may be enqueued only/,
    ],
    [
      'a bad payload, even when a task with the key is pending',
      `select * from queues.enqueue_unique('product_resync', '[]', 'bad:pending')`,
      [],
      '22023',
      /payload must be a JSON object/,
    ],
    [
      'bad max_attempts, even when a task with the key is pending',
      `select * from queues.enqueue_unique('product_resync', '{}', 'bad:pending', _max_attempts => 0)`,
      [],
      '22023',
      /max_attempts must be between 1 and 100/,
    ],
  ];

  it.each(cases)('refuses %s and writes nothing', async (_name, sql, params, code, message) => {
    await enqueueUnique('bad:pending', 'skip');
    const before = await counts();
    await expect(db.pool('app').query(sql, params)).rejects.toMatchObject({
      code,
      message: expect.stringMatching(message),
    });
    expect(await counts()).toEqual(before);
  });
});

describe('the derived key table', () => {
  it('is rebuilt from the facts, and pruning keeps only keys with a pending task', async () => {
    const done = await enqueueUnique('derived:done', 'skip');
    await db.query(`select queues.complete_task($1, null, 'succeeded')`, [done.task_id]);
    const live = await enqueueUnique('derived:live', 'replace', { v: 1 });
    const { rows: before } = await db.query(
      `select unique_key, task_id from queues.task_unique_key k
        where exists (select 1 from queues.task_pending p where p.task_id = k.task_id) order by unique_key`,
    );
    expect(before).toContainEqual({ unique_key: 'derived:live', task_id: live.task_id });

    const { rows: pruned } = await db.query(`select queues.prune_task_unique_keys() as n`);
    expect(pruned[0].n).toBeGreaterThan(0);
    const { rows: left } = await db.query(`select unique_key, task_id from queues.task_unique_key order by unique_key`);
    expect(left).toEqual(before);

    await db.query(`delete from queues.task_unique_key`);
    const { rows: rebuilt } = await db.query(`select queues.rebuild_task_unique_key() as n`);
    expect(Number(rebuilt[0].n)).toBe(before.length);
    const { rows: after } = await db.query(
      `select unique_key, task_id from queues.task_unique_key order by unique_key`,
    );
    expect(after).toEqual(before);
    // And the key still works from the rebuilt row.
    expect((await enqueueUnique('derived:live', 'skip')).task_id).toBe(live.task_id);
  });
});
