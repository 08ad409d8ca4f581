// The ready set's migration (docs/design/hot-path.md, "The ready set"): a database migrated
// up to the last committed migration before it, holding live leases (per row: each task of
// the claim keeps its claim-index row, leased), keeps them per row. After the migration
// such a lease heartbeats and completes on its row, an expired one is claimed again on its
// row (the claim's expired-lease branch, not the rescuer) and its late holder is refused,
// and the rescuer leaves those tasks alone (no claim_lease_due row: nothing due). Tasks
// claimed for the first time after it leave the claim index (the ready set).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { databaseBefore, type DatabaseBefore } from '../test-support/migrations.js';

const ctx = inject('queueTestServer');
const name = `${ctx.prefix}ready_set_migration`;
let db: DatabaseBefore | undefined;
let owner: pg.Client;
let worker: pg.Client;
let app: pg.Client;

/** The committed migration that brings the ready set. */
const MIGRATION = 24;

const TYPE = 'product_resync';
const enqueue = async (n: number) =>
  (
    await app.query<{ id: string }>(
      `select queues.enqueue($1, jsonb_build_object('n', g))::text as id from generate_series(1, $2::int) g`,
      [TYPE, n],
    )
  ).rows.map((r) => r.id);
interface Claimed {
  task_id: string;
  task_lease_id: string;
}
/** Claims every ready task of TYPE at now() + `seconds`, with leases of 60 s. */
const claimAt = async (seconds: number, workerId: string) =>
  (
    await owner.query<Claimed>(
      `select task_id::text, task_lease_id::text
         from queues.claim_tasks_at(now() + make_interval(secs => $1), $2, 1000, array[$3], 60, 5)
        order by task_id`,
      [seconds, workerId, TYPE],
    )
  ).rows;
const complete = async (ids: string[], leases: string[]) =>
  new Map(
    (
      await worker.query<{ task_id: string; result: string }>(
        'select task_id::text, result from queues.complete_tasks($1::bigint[], $2::bigint[])',
        [ids, leases],
      )
    ).rows.map((r) => [r.task_id, r.result]),
  );
const rowsOf = async (ids: string[]) =>
  (
    await owner.query<{ task_id: string; current_lease_id: string | null }>(
      `select task_id::text, current_lease_id::text from queues.task_pending
        where task_id = any ($1::bigint[]) order by task_id`,
      [ids],
    )
  ).rows;
const ends = async (id: string) =>
  Number((await owner.query('select count(*) from queues.task_end_of($1)', [id])).rows[0].count);

/** Tasks a..d leased before the migration by one claim (lease `live`); e enqueued, not claimed. */
let live: string;
let leased: string[];
let fresh: string;

beforeAll(async () => {
  db = await databaseBefore(ctx, name, MIGRATION);
  ({ owner, worker, app } = db);
  // Before the ready set: no table of due claim leases.
  const { rows: before } = await owner.query(`select to_regclass('queues.claim_lease_due') is null as no_due`);
  expect(before).toEqual([{ no_due: true }]);

  leased = await enqueue(4);
  const { rows: claimed } = await worker.query<Claimed>(
    `select task_id::text, task_lease_id::text from queues.claim_tasks('w', 10, $1, 60) order by task_id`,
    [[TYPE]],
  );
  expect(claimed.map((c) => c.task_id)).toEqual(leased);
  live = claimed[0].task_lease_id;
  expect(new Set(claimed.map((c) => c.task_lease_id))).toEqual(new Set([live]));
  [fresh] = await enqueue(1);
  // Each leased task keeps its claim-index row, leased by the claim's lease.
  expect(await rowsOf(leased)).toEqual(leased.map((id) => ({ task_id: id, current_lease_id: live })));

  await db.migrateOn();
});

afterAll(async () => {
  await db?.drop();
});

describe('migrating a database with live per-row leases to the ready set', () => {
  it('keeps the live leases on their rows; the rescuer and maintenance leave them', async () => {
    expect(await rowsOf(leased)).toEqual(leased.map((id) => ({ task_id: id, current_lease_id: live })));
    const { rows: due } = await owner.query('select count(*)::int as n from queues.claim_lease_due');
    expect(due).toEqual([{ n: 0 }]);
    // Long after the lease's expiry: every task of the lease has its row, nothing to rescue.
    const { rows: rescued } = await owner.query(`select queues.rescue_leases_at(now() + interval '1 day') as n`);
    expect(Number(rescued[0].n)).toBe(0);
    const { rows: run } = await owner.query(`select queues.maintain_history_at(now()) as r`);
    expect(run[0].r.skipped).toEqual([]);
    expect(await rowsOf(leased)).toEqual(leased.map((id) => ({ task_id: id, current_lease_id: live })));
  });

  it('a live lease heartbeats and completes on its row; the task ends once', async () => {
    const [a] = leased;
    const { rows: extended } = await worker.query<Claimed>(
      `select task_id::text, task_lease_id::text from queues.extend_leases($1::bigint[], $2::bigint[], 60)`,
      [[a], [live]],
    );
    expect(extended).toEqual([{ task_id: a, task_lease_id: live }]);
    expect(await complete([a], [live])).toEqual(new Map([[a, 'completed']]));
    expect(await rowsOf([a])).toEqual([]);
    expect(await ends(a)).toBe(1);
    expect(await complete([a], [live])).toEqual(new Map([[a, 'already_completed']]));
    expect(await ends(a)).toBe(1);
  });

  it('an expired live lease is claimed again on its row, its late holder refused; a task claimed first after the migration leaves the claim index', async () => {
    const [, b, c, d] = leased;
    // Expired leases come back one per claim (each a suspect): claims until all are back.
    const claimAll = async (seconds: number, expected: string[]) => {
      const taken = new Map<string, string>();
      for (let i = 0; i < 10 && taken.size < expected.length; i++) {
        for (const r of await claimAt(seconds, `w${seconds}-${i}`)) taken.set(r.task_id, r.task_lease_id);
      }
      expect([...taken.keys()].sort()).toEqual([...expected].sort());
      return taken;
    };
    const again = await claimAll(120, [b, c, d, fresh]);
    for (const id of [b, c, d]) expect(again.get(id)).not.toBe(live);
    // The tasks leased before keep their rows, under their new leases; the fresh one has none.
    expect(await rowsOf([b, c, d, fresh])).toEqual(
      [b, c, d].map((id) => ({ task_id: id, current_lease_id: again.get(id) })),
    );
    // The late holder of the old lease is refused, and changes nothing.
    expect(await complete([b], [live])).toEqual(new Map([[b, 'lease_lost']]));
    expect(await ends(b)).toBe(0);
    expect(await complete([b, fresh], [again.get(b)!, again.get(fresh)!])).toEqual(
      new Map([
        [b, 'completed'],
        [fresh, 'completed'],
      ]),
    );
    expect(await ends(b)).toBe(1);
    expect(await ends(fresh)).toBe(1);
    // The new leases expire in turn: c and d come back once more, on their rows.
    const third = await claimAll(300, [c, d]);
    expect(await complete([c, d], [again.get(c)!, again.get(d)!])).toEqual(
      new Map([
        [c, 'lease_lost'],
        [d, 'lease_lost'],
      ]),
    );
    expect(await complete([c, d], [third.get(c)!, third.get(d)!])).toEqual(
      new Map([
        [c, 'completed'],
        [d, 'completed'],
      ]),
    );
    expect(await rowsOf(leased)).toEqual([]);
    for (const id of leased) expect(await ends(id)).toBe(1);
  });
});
