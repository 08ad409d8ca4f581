// Bulk actions as the API role: cancel pending tasks (the 'cancelled' completion fact),
// run scheduled tasks now, redrive dead letters; per-task answers, bad input refused with
// nothing written, and a cancel racing a claim.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/db-tools/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

async function reset(): Promise<void> {
  await db.query('alter table queues.task disable trigger forbid_update');
  await db.query('truncate queues.task cascade');
  await db.query('alter table queues.task enable trigger forbid_update');
}
const enqueue = async (type = 'email', scheduledIn?: string, resourceKey?: string): Promise<number> =>
  // Worker-only types (email, db_function) are enqueued as the owner's SQL does.
  Number(
    (
      await db.query(
        `select queues.enqueue_internal($1, '{"a": 1}'::jsonb, now() + coalesce($2::interval, '0'), null, $3, 1) as id`,
        [type, scheduledIn ?? null, resourceKey ?? null],
      )
    ).rows[0].id,
  );
const api = (d: TestDatabase) => d.pool('api');
const cancel = (ids: number[], reason?: string) =>
  api(db).query<{ task_id: string; result: string }>('select * from admin.cancel_tasks($1, $2)', [ids, reason ?? null]);
const results = (rows: { task_id: string; result: string }[]) => rows.map((r) => [Number(r.task_id), r.result]);
const counts = async () =>
  (
    await db.query(
      `select (select count(*)::int from queues.task_completed) as completed, (select count(*)::int from queues.task_pending) as pending, (select count(*)::int from queues.task_run_now) as run_now`,
    )
  ).rows[0];

describe('cancel', () => {
  beforeEach(reset);

  it('cancels ready and scheduled tasks as a fact; refuses a running one; reports completed and unknown ones', async () => {
    const ready = await enqueue();
    const later = await enqueue('email', '1 hour');
    const running = await enqueue('sms');
    await db.pool('worker').query(`select * from queues.claim_tasks('w1', 1, '{sms}', 60)`);
    const { rows } = await cancel([ready, later, running, 999999], 'operator asked');
    expect(results(rows)).toEqual([
      [ready, 'cancelled'],
      [later, 'cancelled'],
      [running, 'running'],
      [999999, 'unknown_task'],
    ]);
    const facts = await db.query(
      `select c.task_id::int, c.outcome, c.task_lease_id, x.reason from queues.task_completed c join queues.task_cancelled x using (task_id) order by 1`,
    );
    expect(facts.rows).toEqual([
      { task_id: ready, outcome: 'cancelled', task_lease_id: null, reason: 'operator asked' },
      { task_id: later, outcome: 'cancelled', task_lease_id: null, reason: 'operator asked' },
    ]);
    expect(results((await cancel([ready])).rows)).toEqual([[ready, 'already_completed']]);
    // Never claimed again; not a dead letter.
    const claimed = await db.pool('worker').query(`select task_id from queues.claim_tasks('w2', 10, null, 60)`);
    expect(claimed.rows).toEqual([]);
    expect((await db.query(`select count(*)::int as n from queues.dead_letter`)).rows[0].n).toBe(0);
  });

  it('frees the resource key of a cancelled task, so the next task with that key runs', async () => {
    const a = await enqueue('email', undefined, 'account:1');
    const b = await enqueue('email', undefined, 'account:1');
    expect(results((await cancel([a])).rows)).toEqual([[a, 'cancelled']]);
    const { rows } = await db.pool('worker').query(`select task_id::int from queues.claim_tasks('w1', 10, null, 60)`);
    expect(rows).toEqual([{ task_id: b }]);
  });

  it('a cancel that waits for a claim in flight sees the new lease and refuses ("running")', async () => {
    const id = await enqueue();
    const claimer = await db.client('worker');
    await claimer.query('begin');
    await claimer.query(`select * from queues.claim_tasks('w1', 1, null, 60)`);
    const pending = cancel([id]);
    await new Promise((r) => setTimeout(r, 200));
    await claimer.query('commit');
    expect(results((await pending).rows)).toEqual([[id, 'running']]);
    await claimer.end();
    expect((await db.query(`select count(*)::int as n from queues.task_completed`)).rows[0].n).toBe(0);
  });

  it('cancels by filter: pending tasks of a type and state, oldest first, up to the limit', async () => {
    const ids = [await enqueue('email'), await enqueue('email'), await enqueue('email')];
    await enqueue('sms');
    const scheduled = await enqueue('email', '1 day');
    const { rows } = await api(db).query('select * from admin.cancel_tasks_matching($1, $2, $3)', [
      'email',
      'ready',
      2,
    ]);
    expect(results(rows)).toEqual([
      [ids[0], 'cancelled'],
      [ids[1], 'cancelled'],
    ]);
    const all = await api(db).query('select * from admin.cancel_tasks_matching($1, null, 100)', ['email']);
    expect(results(all.rows)).toEqual([
      [ids[2], 'cancelled'],
      [scheduled, 'cancelled'],
    ]);
  });

  it.each([
    ['null ids', [null, null], '22004', 'task_ids must not be null'],
    ['no ids', [[], null], '22023', '1 to 1000'],
    ['a null id', [[1, null], null], '22004', 'must not contain null'],
    ['a repeated id', [[1, 1], null], '22023', 'must not repeat'],
    ['too many ids', [Array.from({ length: 1001 }, (_, i) => i + 1), null], '22023', '1 to 1000'],
    ['a long reason', [[1], 'x'.repeat(501)], '22023', 'reason'],
  ])('refuses %s and writes nothing', async (_name, args, code, message) => {
    const id = await enqueue();
    const before = await counts();
    await expect(api(db).query('select * from admin.cancel_tasks($1, $2)', args as unknown[])).rejects.toMatchObject({
      code,
      message: expect.stringContaining(message),
    });
    expect(await counts()).toEqual(before);
    expect(id).toBeGreaterThan(0);
  });

  it('refuses a bad filter: unknown type, a state that is not cancellable, no limit', async () => {
    await enqueue();
    await expect(api(db).query(`select * from admin.cancel_tasks_matching('nope', null, 10)`)).rejects.toMatchObject({
      code: '22023',
    });
    await expect(api(db).query(`select * from admin.cancel_tasks_matching(null, 'running', 10)`)).rejects.toMatchObject(
      { code: '22023', message: expect.stringContaining('scheduled, ready or retrying') },
    );
    await expect(api(db).query(`select * from admin.cancel_tasks_matching(null, null, null)`)).rejects.toMatchObject({
      code: '22023',
      message: expect.stringContaining('limit'),
    });
    expect((await counts()).completed).toBe(0);
  });

  it('the worker and app roles may not cancel', async () => {
    const id = await enqueue();
    for (const dbUser of ['worker', 'app'] as const) {
      await expect(db.pool(dbUser).query('select * from admin.cancel_tasks($1)', [[id]])).rejects.toMatchObject({
        code: '42501',
      });
    }
  });
});

describe('run now', () => {
  beforeEach(reset);

  it('makes a scheduled task claimable now, as a fact that survives a rebuild of the claim index', async () => {
    const later = await enqueue('email', '1 day');
    const ready = await enqueue('sms');
    const { rows } = await api(db).query('select * from admin.run_tasks_now($1)', [[later, ready, 424242]]);
    expect(results(rows)).toEqual([
      [later, 'run_now'],
      [ready, 'not_scheduled'],
      [424242, 'unknown_task'],
    ]);
    await db.query('select queues.rebuild_task_pending()');
    const claimed = await db
      .pool('worker')
      .query(`select task_id::int from queues.claim_tasks('w1', 10, '{email}', 60)`);
    expect(claimed.rows).toEqual([{ task_id: later }]);
    expect(results((await api(db).query('select * from admin.run_tasks_now($1)', [[later]])).rows)).toEqual([
      [later, 'not_scheduled'],
    ]);
  });

  it('refuses bad selections and writes nothing', async () => {
    await enqueue('email', '1 day');
    await expect(api(db).query('select * from admin.run_tasks_now(null)')).rejects.toMatchObject({ code: '22004' });
    await expect(api(db).query(`select * from admin.run_tasks_now('{}')`)).rejects.toMatchObject({ code: '22023' });
    expect((await counts()).run_now).toBe(0);
  });
});

describe('redrive many', () => {
  beforeEach(reset);

  async function deadLetter(): Promise<number> {
    const id = await enqueue('db_function');
    const { rows } = await db
      .pool('worker')
      .query(`select task_lease_id from queues.claim_tasks('w1', 1, '{db_function}', 60)`);
    await db
      .pool('worker')
      .query(`select * from queues.complete_tasks($1, $2, '{failed}')`, [[id], [rows[0].task_lease_id]]);
    return id;
  }

  it('redrives dead letters, reports the rest, and by filter takes the newest first', async () => {
    const a = await deadLetter();
    const b = await deadLetter();
    const live = await enqueue();
    const { rows } = await api(db).query('select * from admin.redrive_tasks($1)', [[a, live, 777777]]);
    expect(rows.map((r) => [Number(r.task_id), r.result, r.new_task_id === null])).toEqual([
      [a, 'redriven', false],
      [live, 'not_a_dead_letter', true],
      [777777, 'unknown_task', true],
    ]);
    const byFilter = await api(db).query(`select * from admin.redrive_tasks_matching('db_function', 10)`);
    expect(byFilter.rows.map((r) => [Number(r.task_id), r.result])).toEqual([[b, 'redriven']]);
    await expect(api(db).query(`select * from admin.redrive_tasks_matching(null, 501)`)).rejects.toMatchObject({
      code: '22023',
    });
  });
});
