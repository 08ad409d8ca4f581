// Lock order of the calls that lock several claim-index rows (queues.task_pending): a
// completion batch, cancels, lease releases and revocations all lock them in task id
// order, so they cannot deadlock with each other. Raced on connections of their own, with
// batches and cancels naming the tasks in mixed orders; every deadlock PostgreSQL
// detects (40P01, raised to a caller or caught inside a function) is counted.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type pg from 'pg';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
let completers: pg.Client[] = [];
let cancellers: pg.Client[] = [];
let revoker: pg.Client;
beforeAll(async () => {
  db = await createTestDatabase();
  completers = await Promise.all(Array.from({ length: 2 }, () => db.client('worker')));
  cancellers = await Promise.all(Array.from({ length: 8 }, () => db.client('app')));
  revoker = await db.client('owner');
});
afterAll(async () => {
  await Promise.all([...completers, ...cancellers, revoker].map((c) => c.end()));
  await db?.drop();
});

const TYPE = 'product_resync';

/** A deterministic shuffle (a linear congruential generator seeded per call). */
const shuffled = <T>(items: T[], seed: number): T[] => {
  const out = [...items];
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) % 2147483648;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
};

/** Deadlocks PostgreSQL detected in the test database, every backend's reported. */
const deadlocks = async () => {
  // Each connection flushes its statistics when it next goes idle.
  await Promise.all(
    [...completers, ...cancellers, revoker].map(async (c) => {
      await c.query('select pg_stat_force_next_flush()');
      await c.query('select 1');
    }),
  );
  const root = await db.client('root');
  try {
    await root.query('select pg_stat_clear_snapshot()');
    const { rows } = await root.query<{ n: string }>(
      'select deadlocks::text as n from pg_stat_database where datname = current_database()',
    );
    return Number(rows[0].n);
  } finally {
    await root.end();
  }
};

it('completion batches racing cancels of their tasks, in mixed orders: no deadlock, each task ends once', async () => {
  const ROUNDS = 12;
  const TASKS = 60;
  const before = await deadlocks();
  const errors: string[] = [];
  const note = (e: { code?: string; message: string }) => {
    errors.push(`${e.code ?? ''} ${e.message}`);
    return null;
  };
  for (let round = 0; round < ROUNDS; round++) {
    await db.query(
      `select queues.enqueue_internal($1, jsonb_build_object('n', n)) from generate_series(1, $2::int) n`,
      [TYPE, TASKS],
    );
    const { rows: claimed } = await db.query<{ task_id: string; task_lease_id: string }>(
      `select task_id::text, task_lease_id::text from queues.claim_tasks_at(now(), 'w', $1, array[$2], 300, 5)`,
      [TASKS, TYPE],
    );
    expect(claimed).toHaveLength(TASKS);
    // Two completion batches (each a worker's: half the tasks, in a shuffled order) and
    // eight cancels of ten tasks each, across both batches, in shuffled orders.
    const halves = [claimed.filter((_, i) => i % 2 === 0), claimed.filter((_, i) => i % 2 === 1)];
    const completions = halves.map((half, k) => {
      const batch = shuffled(half, round * 31 + k);
      return completers[k]
        .query(
          `select * from queues.complete_tasks($1::bigint[], $2::bigint[],
                                             array_fill('succeeded'::text, array[$3::int]))`,
          [batch.map((t) => t.task_id), batch.map((t) => t.task_lease_id), batch.length],
        )
        .catch(note);
    });
    const cancels = cancellers.map((c, k) =>
      c
        .query(`select * from queues.cancel_tasks($1::bigint[], 'race')`, [
          shuffled(claimed, round * 97 + k + 7)
            .slice(0, 10)
            .map((t) => t.task_id),
        ])
        .catch(note),
    );
    await Promise.all([...completions, ...cancels]);
    expect(errors).toEqual([]);
    const { rows } = await db.query<{ ended: number; pending: number }>(
      `select (select count(*)::int from queues.task_end e where e.task_id = any($1::bigint[])) as ended,
              (select count(*)::int from queues.task_pending p where p.task_id = any($1::bigint[])) as pending`,
      [claimed.map((t) => t.task_id)],
    );
    expect(rows[0]).toEqual({ ended: TASKS, pending: 0 });
  }
  expect(errors).toEqual([]);
  expect((await deadlocks()) - before).toBe(0);
});

it('lease releases and revocations racing cancels, in mixed orders: no deadlock', async () => {
  const ROUNDS = 8;
  const TASKS = 40;
  const before = await deadlocks();
  const errors: string[] = [];
  const note = (e: { code?: string; message: string }) => {
    errors.push(`${e.code ?? ''} ${e.message}`);
    return null;
  };
  for (let round = 0; round < ROUNDS; round++) {
    await db.query(
      `select queues.enqueue_internal($1, jsonb_build_object('n', n)) from generate_series(1, $2::int) n`,
      [TYPE, TASKS],
    );
    const { rows: claimed } = await db.query<{ task_id: string; task_lease_id: string }>(
      `select task_id::text, task_lease_id::text from queues.claim_tasks_at(now(), $3, $1, array[$2], 300, 5)`,
      [TASKS, TYPE, `w-${round}`],
    );
    const batch = shuffled(claimed, round * 13 + 1);
    const releasing = completers[0].query(`select * from queues.release_leases($1::bigint[], $2::bigint[])`, [
      batch.map((t) => t.task_id),
      batch.map((t) => t.task_lease_id),
    ]);
    const cancels = cancellers.map((c, k) =>
      c
        .query(`select * from queues.cancel_tasks($1::bigint[], 'race')`, [
          shuffled(claimed, round * 89 + k + 3)
            .slice(0, 8)
            .map((t) => t.task_id),
        ])
        .catch(note),
    );
    await Promise.all([releasing.catch(note), ...cancels]);
    // Whatever the cancels left, claimed again and revoked as a dead worker's leases.
    await db.query(`select * from queues.claim_tasks_at(now(), $3, $1, array[$2], 300, 5)`, [
      TASKS,
      TYPE,
      `v-${round}`,
    ]);
    const { rows: left } = await db.query<{ task_id: string }>(
      `select task_id::text from queues.task_pending where task_id = any($1::bigint[])`,
      [claimed.map((t) => t.task_id)],
    );
    await Promise.all([
      revoker.query(`select * from queues.revoke_worker_leases($1)`, [`v-${round}`]).catch(note),
      ...cancellers.map((c, k) =>
        c
          .query(`select * from queues.cancel_tasks($1::bigint[], 'race')`, [
            shuffled(left, round * 71 + k)
              .slice(0, 5)
              .map((t) => t.task_id),
          ])
          .catch(note),
      ),
    ]);
  }
  expect(errors.filter((e) => !e.startsWith('22023 task_ids must name 1 to 1000 tasks'))).toEqual([]);
  expect((await deadlocks()) - before).toBe(0);
});
