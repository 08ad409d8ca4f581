// Bulk actions as the API role: cancel pending and running tasks (the 'cancelled' completion fact),
// run scheduled tasks now, redrive dead letters; per-task answers, bad input refused with
// nothing written, and a cancel racing a claim.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

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
      `select (select count(*)::int from queues.task_end) as completed, (select count(*)::int from queues.task_pending) as pending, (select count(*)::int from queues.task_run_now) as run_now`,
    )
  ).rows[0];

describe('cancel', () => {
  beforeEach(reset);

  it('cancels ready, scheduled and running tasks as a fact; reports completed and unknown ones', async () => {
    const ready = await enqueue();
    const later = await enqueue('email', '1 hour');
    const running = await enqueue('sms');
    const {
      rows: [lease],
    } = await db.pool('worker').query(`select task_lease_id from queues.claim_tasks('w1', 1, '{sms}', 60)`);
    const { rows } = await cancel([ready, later, running, 999999], 'operator asked');
    expect(results(rows)).toEqual([
      [ready, 'cancelled'],
      [later, 'cancelled'],
      [running, 'cancelled'],
      [999999, 'unknown_task'],
    ]);
    const facts = await db.query(
      `select c.task_id::int, c.outcome, c.task_lease_id, x.reason from queues.task_end c join queues.task_cancelled x using (task_id) order by 1`,
    );
    expect(facts.rows).toEqual([
      { task_id: ready, outcome: 'cancelled', task_lease_id: null, reason: 'operator asked' },
      { task_id: later, outcome: 'cancelled', task_lease_id: null, reason: 'operator asked' },
      { task_id: running, outcome: 'cancelled', task_lease_id: null, reason: 'operator asked' },
    ]);
    // The running task's lease is revoked, and its worker can neither extend nor complete it.
    const revoked = await db.query(`select task_id::int, task_lease_id, reason from queues.task_lease_revocation`);
    expect(revoked.rows).toEqual([
      { task_id: running, task_lease_id: lease.task_lease_id, reason: 'cancelled: operator asked' },
    ]);
    const extended = await db
      .pool('worker')
      .query(`select * from queues.extend_leases(array[$1::bigint], array[$2::bigint], 60)`, [
        running,
        lease.task_lease_id,
      ]);
    expect(extended.rows).toEqual([]);
    const late = await db
      .pool('worker')
      .query(`select * from queues.complete_tasks(array[$1::bigint], array[$2::bigint])`, [
        running,
        lease.task_lease_id,
      ]);
    expect(late.rows).toEqual([{ task_id: String(running), result: 'lease_lost' }]);
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

  it('a cancel that waits for a claim in flight cancels the task under its new lease, and revokes that lease', async () => {
    const id = await enqueue();
    const claimer = await db.client('worker');
    await claimer.query('begin');
    const {
      rows: [lease],
    } = await claimer.query(`select task_lease_id from queues.claim_tasks('w1', 1, null, 60)`);
    const pending = cancel([id]);
    await new Promise((r) => setTimeout(r, 200));
    await claimer.query('commit');
    expect(results((await pending).rows)).toEqual([[id, 'cancelled']]);
    await claimer.end();
    const { rows } = await db.query(
      `select c.outcome, v.task_lease_id from queues.task_end c join queues.task_lease_revocation v using (task_id)`,
    );
    expect(rows).toEqual([{ outcome: 'cancelled', task_lease_id: lease.task_lease_id }]);
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

describe('answers after waiting for a completion', () => {
  beforeEach(reset);

  /** A connection of its own, and its backend's pid. */
  async function session(dbUser: 'api' | 'worker') {
    const client = await db.client(dbUser);
    const pid = Number((await client.query('select pg_backend_pid() as pid')).rows[0].pid);
    return { client, pid };
  }

  /** Until the backend `pid` waits for a lock another one holds. */
  async function blocked(pid: number): Promise<void> {
    for (let i = 0; i < 2000; i++) {
      const { rows } = await db.query('select cardinality(pg_blocking_pids($1)) > 0 as waits', [pid]);
      if (rows[0].waits) return;
      await new Promise((r) => setTimeout(r, 5));
    }
    throw new Error(`backend ${pid} never waited`);
  }

  const claimAll = async (n: number) =>
    (
      await db
        .pool('worker')
        .query<{ task_id: string; task_lease_id: string }>(`select * from queues.claim_tasks('w1', $1, null, 300)`, [n])
    ).rows.map((r) => ({ id: Number(r.task_id), lease: r.task_lease_id }));

  it('cancel: a task whose completion commits while the cancel waits for it is already_completed, never unknown_task', async () => {
    const ids: number[] = [];
    for (let i = 0; i < 40; i++) ids.push(await enqueue());
    // The first 20 run under a worker's lease; the others are ready.
    const leased = await claimAll(20);
    const completer = await session('worker');
    const canceller = await session('api');
    await completer.client.query('begin');
    await completer.client.query(`select * from queues.complete_tasks($1::bigint[], $2::bigint[])`, [
      leased.map((l) => l.id),
      leased.map((l) => l.lease),
    ]);
    const pending = canceller.client.query<{ task_id: string; result: string }>(
      'select * from admin.cancel_tasks($1)',
      [ids],
    );
    await blocked(canceller.pid);
    await completer.client.query('commit');
    const answers = results((await pending).rows);
    const completed = new Set(leased.map((l) => l.id));
    expect(answers).toEqual(ids.map((id) => [id, completed.has(id) ? 'already_completed' : 'cancelled']));
    const { rows } = await db.query(
      `select outcome, count(*)::int as n from queues.task_end group by outcome order by outcome`,
    );
    expect(rows).toEqual([
      { outcome: 'cancelled', n: 20 },
      { outcome: 'succeeded', n: 20 },
    ]);
  });

  it('cancel racing completions: 300 running tasks, each ends once, and every answer agrees with how it ended', async () => {
    const ids: number[] = [];
    for (let i = 0; i < 300; i++) ids.push(await enqueue());
    const leased = await claimAll(300);
    expect(leased).toHaveLength(300);
    const completers = await Promise.all([session('worker'), session('worker'), session('worker')]);
    const cancellers = await Promise.all([session('api'), session('api'), session('api')]);
    const cancelAnswers: [number, string][] = [];
    const completeAnswers = new Map<number, string>();
    let done = false;
    // Each completer takes every third task, five at a time, and holds its completion
    // open a moment, so cancels arrive while it holds the rows.
    const completing = completers.map(async ({ client }, c) => {
      const mine = leased.filter((_, i) => i % 3 === c);
      for (let i = 0; i < mine.length; i += 5) {
        const batch = mine.slice(i, i + 5);
        await client.query('begin');
        const { rows } = await client.query<{ task_id: string; result: string }>(
          `select * from queues.complete_tasks($1::bigint[], $2::bigint[])`,
          [batch.map((l) => l.id), batch.map((l) => l.lease)],
        );
        await client.query('select pg_sleep(0.002)');
        await client.query('commit');
        for (const r of rows) completeAnswers.set(Number(r.task_id), r.result);
      }
    });
    // Cancellers ask for windows of 30 tasks around the completers' progress, until all completed.
    const cancelling = cancellers.map(async ({ client }, c) => {
      let round = 0;
      while (!done) {
        const from = (round * 7 + c * 11) % 270;
        round++;
        const { rows } = await client.query<{ task_id: string; result: string }>(
          'select * from admin.cancel_tasks($1)',
          [ids.slice(from, from + 30)],
        );
        cancelAnswers.push(...(results(rows) as [number, string][]));
      }
    });
    await Promise.all(completing);
    done = true;
    await Promise.all(cancelling);
    const { rows: ended } = await db.query<{ task_id: number; outcome: string; n: number }>(
      `select task_id::int, min(outcome) as outcome, count(*)::int as n from queues.task_end group by task_id`,
    );
    // Each task ended exactly once, and nothing is left pending.
    expect(ended).toHaveLength(300);
    expect(ended.every((r) => r.n === 1)).toBe(true);
    expect((await counts()).pending).toBe(0);
    const outcome = new Map(ended.map((r) => [r.task_id, r.outcome]));
    // A cancelled task's completion was refused; a completed one's cancel found it completed.
    for (const [id, answer] of completeAnswers) {
      expect([id, answer]).toEqual([id, outcome.get(id) === 'cancelled' ? 'lease_lost' : 'completed']);
    }
    const cancelledBy = new Map<number, number>();
    for (const [id, answer] of cancelAnswers) {
      expect(['cancelled', 'already_completed']).toContain(answer);
      if (answer === 'cancelled') cancelledBy.set(id, (cancelledBy.get(id) ?? 0) + 1);
    }
    for (const [id, o] of outcome) expect([id, cancelledBy.get(id) ?? 0]).toEqual([id, o === 'cancelled' ? 1 : 0]);
    // Both sides won some (the race was real).
    expect(new Set(outcome.values())).toEqual(new Set(['cancelled', 'succeeded']));
  });

  it('run now: a task completed while the call waits for it is already_completed', async () => {
    const ids: number[] = [];
    for (let i = 0; i < 20; i++) ids.push(await enqueue('email', '1 day'));
    const gone = ids.filter((_, i) => i % 2 === 0);
    const completer = await session('worker');
    const caller = await session('api');
    await completer.client.query('begin');
    await completer.client.query(`select * from queues.complete_tasks($1::bigint[], null, $2::text[])`, [
      gone,
      gone.map(() => 'cancelled'),
    ]);
    const pending = caller.client.query<{ task_id: string; result: string }>('select * from admin.run_tasks_now($1)', [
      ids,
    ]);
    await blocked(caller.pid);
    await completer.client.query('commit');
    const done = new Set(gone);
    expect(results((await pending).rows)).toEqual(
      ids.map((id) => [id, done.has(id) ? 'already_completed' : 'run_now']),
    );
  });

  it('redrive: a second redrive of one dead letter that waited for the first answers not_a_dead_letter', async () => {
    const id = await enqueue('db_function');
    const [lease] = await claimAll(1);
    await db.pool('worker').query(`select * from queues.complete_tasks($1, $2, '{failed}')`, [[id], [lease.lease]]);
    const first = await session('api');
    const second = await session('api');
    await first.client.query('begin');
    const redriven = await first.client.query('select * from admin.redrive_tasks($1)', [[id]]);
    expect(redriven.rows.map((r) => r.result)).toEqual(['redriven']);
    const pending = second.client.query('select * from admin.redrive_tasks($1)', [[id]]);
    await blocked(second.pid);
    await first.client.query('commit');
    expect((await pending).rows.map((r) => [Number(r.task_id), r.result, r.new_task_id])).toEqual([
      [id, 'not_a_dead_letter', null],
    ]);
    expect((await db.query('select count(*)::int as n from queues.task_redriven')).rows[0].n).toBe(1);
  });
});
