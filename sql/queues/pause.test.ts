// Pausing claims per task type: every public claim (claim_tasks with or without types,
// dequeue_next_available_task) leaves paused types alone; resume brings them back; a
// claim racing a pause; the facts are append-only; only the API role may pause.
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
  for (const t of ['task_type_resumed', 'task_type_paused']) {
    await db.query(`alter table queues.${t} disable trigger forbid_update`);
    await db.query(`truncate queues.${t} cascade`);
    await db.query(`alter table queues.${t} enable trigger forbid_update`);
  }
  await db.query('alter table queues.task disable trigger forbid_update');
  await db.query('truncate queues.task cascade');
  await db.query('alter table queues.task enable trigger forbid_update');
}

const enqueue = async (type: string, n = 1) => {
  // Worker-only types (email, sms) are enqueued as the owner's SQL does.
  for (let i = 0; i < n; i++) await db.query(`select queues.enqueue_internal($1, '{}'::jsonb)`, [type]);
};
const claim = async (types: string[] | null, limit = 10, worker = 'w1') =>
  (
    await db
      .pool('worker')
      .query<{ task_type: string }>('select task_type from queues.claim_tasks($1, $2, $3, 60)', [worker, limit, types])
  ).rows
    .map((r) => r.task_type)
    .sort();
const pause = (type: string, reason?: string) =>
  db.pool('api').query('select admin.pause_task_type($1, $2) as id', [type, reason ?? null]);
const resume = (type: string) => db.pool('api').query('select admin.resume_task_type($1) as resumed', [type]);

describe('pause and resume', () => {
  beforeEach(reset);

  it('a claim for any type skips a paused type; resume brings it back', async () => {
    await enqueue('email', 2);
    await enqueue('sms', 2);
    await pause('sms', 'provider maintenance');
    expect(await claim(null)).toEqual(['email', 'email']);
    expect(await claim(null)).toEqual([]);
    expect((await resume('sms')).rows[0].resumed).toBe(true);
    expect(await claim(null)).toEqual(['sms', 'sms']);
  });

  it('a claim naming only paused types claims nothing, without an error; bad arguments are still refused', async () => {
    await enqueue('sms', 1);
    await pause('sms');
    expect(await claim(['sms'])).toEqual([]);
    await expect(claim([])).rejects.toMatchObject({
      code: '22023',
      message: expect.stringContaining('task_types must be null'),
    });
    await expect(claim(['sms'], 0)).rejects.toMatchObject({
      code: '22023',
      message: expect.stringContaining('limit must be between'),
    });
    await enqueue('email', 1);
    expect(await claim(['sms', 'email'])).toEqual(['email']);
  });

  it("the seeds' dequeue_next_available_task honours a pause too", async () => {
    await enqueue('sms', 1);
    await pause('sms');
    const { rows } = await db.pool('worker').query(`select * from queues.dequeue_next_available_task('w1', 60)`);
    expect(rows).toEqual([]);
    await resume('sms');
    const again = await db.pool('worker').query(`select * from queues.dequeue_next_available_task('w1', 60)`);
    expect(again.rows).toHaveLength(1);
  });

  it('pausing twice keeps one open pause; resuming an active type says so; both are facts', async () => {
    const a = (await pause('email')).rows[0].id;
    const b = (await pause('email')).rows[0].id;
    expect(b).toBe(a);
    expect((await resume('email')).rows[0].resumed).toBe(true);
    expect((await resume('email')).rows[0].resumed).toBe(false);
    const { rows } = await db.query(
      `select count(*)::int as paused, (select count(*)::int from queues.task_type_resumed) as resumed from queues.task_type_paused`,
    );
    expect(rows[0]).toEqual({ paused: 1, resumed: 1 });
    await expect(db.query(`update queues.task_type_paused set reason = 'x'`)).rejects.toMatchObject({ code: '55000' });
    await expect(db.query(`update queues.task_type_resumed set resumed_at = now()`)).rejects.toMatchObject({
      code: '55000',
    });
  });

  it('bad input: unknown type (22023), null (22004), a long reason (22023); nothing written', async () => {
    await expect(pause('no_such_type')).rejects.toMatchObject({
      code: '22023',
      message: expect.stringContaining('unknown task_type'),
    });
    await expect(db.pool('api').query('select admin.pause_task_type(null)')).rejects.toMatchObject({ code: '22004' });
    await expect(pause('email', 'x'.repeat(501))).rejects.toMatchObject({
      code: '22023',
      message: expect.stringContaining('reason'),
    });
    await expect(resume('no_such_type')).rejects.toMatchObject({ code: '22023' });
    expect((await db.query(`select count(*)::int as n from queues.task_type_paused`)).rows[0].n).toBe(0);
  });

  it('only the API database user may pause: the worker and app database users get 42501', async () => {
    for (const dbUser of ['worker', 'app'] as const) {
      await expect(db.pool(dbUser).query(`select admin.pause_task_type('email')`)).rejects.toMatchObject({
        code: '42501',
      });
    }
  });

  it('a claim that started before the pause keeps what it took; the next claim after the pause commits takes nothing', async () => {
    await enqueue('sms', 3);
    const claimer = await db.client('worker');
    await claimer.query('begin');
    const first = await claimer.query(`select task_id from queues.claim_tasks('w1', 1, '{sms}', 60)`);
    expect(first.rows).toHaveLength(1);
    await pause('sms'); // does not wait for the claimer (no lock on the claim path)
    await claimer.query('commit');
    expect(await claim(['sms'])).toEqual([]);
    await claimer.end();
  });
});
